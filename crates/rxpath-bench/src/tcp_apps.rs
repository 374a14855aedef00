//! `rxpath bench tcp-apps`: unmodified TCP servers from Debian's packages
//! on the kernel's sockets and under `rxpath exec --protocols udp,tcp`,
//! their own clients in the peer namespace, as issue 62's throughput
//! figures ask:
//!
//! - redis `GET`s: `redis-server` with Debian's `redis.conf`,
//!   `redis-benchmark -t get` (keep-alive, 50 connections); on the kernel,
//!   under exec sleeping and busy polling;
//! - accepted connections: the same server, `redis-benchmark -k 0` (a new
//!   connection per request);
//! - nginx small files: Debian's `nginx.conf` (a master and its workers),
//!   `wrk` on the default page;
//! - iperf3: one flow into `iperf3 -s`, Gbit/s per server CPU share;
//!   `iperf3-send`: the same server sending (`iperf3 -c -R`), the TX half.
//!
//! The server (with rxpath's threads, which live in its process) is pinned
//! to one CPU, the client to the other. Per run: the client's rate and p99,
//! the server process tree's CPU (utime + stime), and the server CPU's busy
//! share (softirq work there included). Configurations run in turn within
//! a round, every other round reversed; ratios are taken within a round,
//! then the median over rounds.

mod client;

use crate::figure::{self, in_turn, median_ratio, ratio_cell, target, Bound, Verdict};
use crate::harness::{cpu_secs, median, which, Peer};
use crate::plot::{progress, say, Bar, ReportDir};
use crate::sockperf::cpu_jiffies;
use anyhow::{bail, Context, Result};
use client::{ready, run_client};
use rxpath_os::sched;
use rxpath_runtime::lab::{Topology, HOST_ADDR};
use std::process::{Command, ExitCode};
use std::time::Duration;

/// Arguments of this bench.
#[derive(Debug, Clone, clap::Args)]
pub struct TcpAppsArgs {
    /// Client run of nginx (wrk) and iperf3.
    #[arg(long, default_value = "3s", value_parser = rxpath_cli::parse::parse_duration)]
    pub duration: Duration,
    /// Rounds (each runs every configuration once; medians are compared).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// `GET`s per redis run (`redis-benchmark -n`).
    #[arg(long, default_value_t = 200_000)]
    pub requests: u64,
    /// Connections per accept run (`redis-benchmark -k 0 -n`).
    #[arg(long, default_value_t = 20_000)]
    pub accepts: u64,
    /// Client connections of redis-benchmark and wrk.
    #[arg(long, default_value_t = 50)]
    pub connections: u32,
    /// Busy-poll time of the busy-polling server, µs.
    #[arg(long, default_value_t = 50)]
    pub busy_poll: u32,
    /// Only these programs (comma-separated: redis, accepts, nginx, iperf3,
    /// iperf3-send).
    #[arg(long, value_delimiter = ',')]
    pub apps: Vec<String>,
}

/// A program and its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum App {
    Redis,
    Accepts,
    Nginx,
    Iperf3,
    /// iperf3 with the server sending (`-R`).
    Iperf3Send,
}

impl App {
    const ALL: [App; 5] = [
        App::Redis,
        App::Accepts,
        App::Nginx,
        App::Iperf3,
        App::Iperf3Send,
    ];

    /// An iperf3 test (`iperf3 -s -1`: one test, then it exits).
    fn is_iperf3(self) -> bool {
        matches!(self, App::Iperf3 | App::Iperf3Send)
    }

    fn key(self) -> &'static str {
        match self {
            App::Redis => "redis",
            App::Accepts => "accepts",
            App::Nginx => "nginx",
            App::Iperf3 => "iperf3",
            App::Iperf3Send => "iperf3-send",
        }
    }

    /// What the rate counts.
    fn unit(self) -> &'static str {
        match self {
            App::Redis | App::Nginx => "requests/s",
            App::Accepts => "connections/s",
            App::Iperf3 | App::Iperf3Send => "Gbit/s",
        }
    }

    /// The programs this needs, server's and client's.
    fn needs(self) -> &'static [&'static str] {
        match self {
            App::Redis | App::Accepts => &["redis-server", "redis-benchmark", "redis-cli"],
            App::Nginx => &["nginx", "wrk"],
            App::Iperf3 | App::Iperf3Send => &["iperf3"],
        }
    }

    fn port(self) -> u16 {
        match self {
            App::Redis | App::Accepts => 6390,
            App::Nginx => 80,
            App::Iperf3 | App::Iperf3Send => 5201,
        }
    }

    /// The server's command line (Debian's configuration files).
    fn server(self, dir: &str) -> Vec<String> {
        let v: Vec<&str> = match self {
            App::Redis | App::Accepts => vec![
                "redis-server",
                "/etc/redis/redis.conf",
                "--daemonize",
                "no",
                "--supervised",
                "no",
                "--bind",
                HOST_ADDR,
                "--port",
                "6390",
                "--save",
                "",
                "--appendonly",
                "no",
                "--logfile",
                "",
                "--dir",
                dir,
                "--pidfile",
                "",
                "--protected-mode",
                "no",
            ],
            App::Nginx => vec!["nginx", "-g", "daemon off;"],
            App::Iperf3 | App::Iperf3Send => {
                vec!["iperf3", "-s", "-1", "-B", HOST_ADDR, "-p", "5201"]
            }
        };
        v.into_iter().map(String::from).collect()
    }
}

/// Where the server's sockets are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Kernel,
    Exec,
    ExecBusy,
}

/// One configuration: a program on one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Config {
    app: App,
    mode: Mode,
}

impl Config {
    fn name(self) -> String {
        let on = match self.mode {
            Mode::Kernel => "kernel",
            Mode::Exec => "rxpath exec",
            Mode::ExecBusy => "rxpath exec, busy poll",
        };
        format!("{}, {on}", self.app.key())
    }

    fn key(self) -> String {
        let on = match self.mode {
            Mode::Kernel => "kernel",
            Mode::Exec => "exec",
            Mode::ExecBusy => "exec-busy",
        };
        format!("{}-{on}", self.app.key())
    }
}

/// Every configuration, in the order of a round.
fn configs(apps: &[App]) -> Vec<Config> {
    let modes = |app| match app {
        App::Redis => &[Mode::Kernel, Mode::Exec, Mode::ExecBusy][..],
        _ => &[Mode::Kernel, Mode::Exec][..],
    };
    apps.iter()
        .flat_map(|&app| modes(app).iter().map(move |&mode| Config { app, mode }))
        .collect()
}

/// One run's figures.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub(crate) struct Measure {
    /// Requests/s, connections/s or Gbit/s (the app's unit).
    rate: f64,
    /// The client's 99th percentile latency, ms (iperf3: none).
    p99_ms: Option<f64>,
    /// The server process tree's CPU (utime + stime) over the client run,
    /// seconds per second of run.
    server_cpu: f64,
    /// The server CPU's busy share over the client run (softirqs there
    /// included).
    core_busy: Option<f64>,
    /// Whether exec said its listener went to the kernel at a fork.
    handed_to_kernel: bool,
}

impl Measure {
    /// The rate per busy share of the server's CPU.
    fn per_core(&self) -> Option<f64> {
        self.core_busy.filter(|&b| b > 0.0).map(|b| self.rate / b)
    }
}

/// Start the server of `c` pinned to `cpu`, in the root namespace on the
/// lab's host end.
fn start(c: Config, t: &Topology, a: &TcpAppsArgs, dir: &str, cpu: Option<usize>) -> Result<Peer> {
    let mut cmd = match c.mode {
        Mode::Kernel => Command::new("env"),
        Mode::Exec | Mode::ExecBusy => {
            let busy = if c.mode == Mode::ExecBusy {
                a.busy_poll
            } else {
                0
            };
            let mut cmd = Command::new(std::env::current_exe().context("locating this binary")?);
            cmd.args(["exec", "--iface", &t.host_if, "--mode", "xdp"])
                .args(["--protocols", "udp,tcp", "--busy-poll", &busy.to_string()])
                .arg("--");
            cmd
        }
    };
    if let Some(cpu) = cpu {
        cmd.args(["taskset", "-c", &cpu.to_string()]);
    }
    cmd.args(c.app.server(dir));
    Peer::spawn("tcp-apps server", cmd)
}

/// Stop a server (SIGINT, the way each of them shuts down cleanly); for
/// exec, its accounting must hold. Whether exec handed a listener to the
/// kernel at a fork.
fn stop(c: Config, mut p: Peer) -> Result<bool> {
    if c.app.is_iperf3() {
        // `iperf3 -s -1` ends after its test; a signal while it writes its
        // last report would cut it short.
        p.wait_exit(Duration::from_secs(10))?;
    }
    if c.mode == Mode::Kernel {
        p.interrupt(Duration::from_secs(10))?;
        return Ok(false);
    }
    let out = p.stdout();
    let text = crate::rr::stop_exec(p, out)?;
    Ok(text.contains("handed to the kernel at a fork"))
}

/// One run of `c` against a fresh server.
fn run(
    c: Config,
    t: &Topology,
    a: &TcpAppsArgs,
    (ccpu, scpu): (Option<usize>, Option<usize>),
) -> Result<Measure> {
    let dir = format!("/tmp/rxpath-tcp-apps-{}", std::process::id());
    std::fs::create_dir_all(&dir).context("the server's directory")?;
    let mut p = start(c, t, a, &dir, scpu)?;
    let up = ready(c.app, t, &mut p);
    if let Err(e) = up {
        let _ = stop(c, p);
        return Err(e);
    }
    let before = (cpu_secs(p.id()), scpu.and_then(cpu_jiffies));
    let t0 = std::time::Instant::now();
    let got = run_client(c.app, t, a, ccpu);
    let secs = t0.elapsed().as_secs_f64().max(1e-3);
    let after = (cpu_secs(p.id()), scpu.and_then(cpu_jiffies));
    let handed = stop(c, p);
    let _ = std::fs::remove_dir_all(&dir);
    let (rate, p99_ms) = got?;
    Ok(Measure {
        rate,
        p99_ms,
        server_cpu: (after.0 - before.0) / secs,
        core_busy: busy(before.1, after.1),
        handed_to_kernel: handed?,
    })
}

/// The busy share of a CPU between two `/proc/stat` readings.
fn busy(b: Option<(u64, u64)>, a: Option<(u64, u64)>) -> Option<f64> {
    let (b, a) = (b?, a?);
    let total = a.1.saturating_sub(b.1);
    (total > 0).then(|| a.0.saturating_sub(b.0) as f64 / total as f64)
}

/// The programs `a` asks for whose peers are installed; the others are
/// said not measured.
fn chosen_apps(a: &TcpAppsArgs) -> Result<Vec<App>> {
    for k in &a.apps {
        if !App::ALL.iter().any(|x| x.key() == k) {
            let keys: Vec<&str> = App::ALL.iter().map(|x| x.key()).collect();
            bail!("unknown program {k:?}: {}", keys.join(", "));
        }
    }
    let mut v = Vec::new();
    for app in App::ALL {
        if !a.apps.is_empty() && !a.apps.iter().any(|k| k == app.key()) {
            continue;
        }
        match app.needs().iter().find(|n| which(n).is_none()) {
            Some(n) => crate::harness::peer_not_measured(
                app.key(),
                &format!(
                    "{n} is not installed (Debian: redis-server redis-tools nginx wrk iperf3)"
                ),
            ),
            None => v.push(app),
        }
    }
    Ok(v)
}

/// `rxpath bench tcp-apps`.
pub fn tcp_apps(a: TcpAppsArgs, rep: &mut Option<ReportDir>) -> Result<ExitCode> {
    if !sched::is_root() {
        bail!(
            "bench tcp-apps needs root (it builds a veth lab and attaches XDP): run it with sudo"
        );
    }
    let apps = chosen_apps(&a)?;
    let mut list = configs(&apps);
    if let Err(e) = rxpath_cli::exec::find_preload() {
        for c in list.iter().filter(|c| c.mode != Mode::Kernel) {
            crate::harness::peer_not_measured(&c.name(), &e.to_string());
        }
        list.retain(|c| c.mode == Mode::Kernel);
    }
    let t = Topology::named("btap");
    let guard = t.up_scoped()?;
    let t = &guard.0;
    client::prepare_peer(t)?;
    let cpus = crate::harness::client_server_cpus();
    println!(
        "rxpath bench tcp-apps: {} on the kernel and under rxpath exec (AF_XDP), clients in netns {} over veth {}; {} round(s); client on CPU {}, server on CPU {}; busy poll {} µs",
        apps.iter().map(|x| x.key()).collect::<Vec<_>>().join(", "),
        t.ns,
        t.host_if,
        a.rounds,
        crate::harness::cpu_name(cpus.0),
        crate::harness::cpu_name(cpus.1),
        a.busy_poll,
    );
    let pb = progress((a.rounds * list.len()) as u64, "tcp-apps");
    let mut rows: Vec<Vec<Option<Measure>>> = Vec::new();
    for round in 0..a.rounds {
        let mut row = vec![None; list.len()];
        for i in in_turn(&(0..list.len()).collect::<Vec<_>>(), round) {
            let c = list[i];
            pb.set_message(c.name());
            match run(c, t, &a, cpus) {
                Ok(m) => {
                    say(&pb, &round_line(round, c, &m));
                    row[i] = Some(m);
                }
                Err(e) => say(
                    &pb,
                    &format!("  round {round}: {:32} failed: {e:#}", c.name()),
                ),
            }
            pb.inc(1);
        }
        rows.push(row);
    }
    pb.finish_and_clear();
    print_table(&rows, &list);
    let verdicts = targets(&rows, &list);
    if let Some(rep) = rep {
        report(rep, &a, &rows, &list, &verdicts)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn round_line(round: usize, c: Config, m: &Measure) -> String {
    format!(
        "  round {round}: {:32} {:>10.2} {:14} {:13}  server CPU {:4.0} %  its core busy {:>4}{}",
        c.name(),
        m.rate,
        c.app.unit(),
        m.p99_ms
            .map_or(String::new(), |p| format!("p99 {p:6.2} ms")),
        m.server_cpu * 100.0,
        figure::cell(m.core_busy.map(|b| b * 100.0), 1.0, 0) + " %",
        if m.handed_to_kernel {
            "  (listeners handed to the kernel at a fork)"
        } else {
            ""
        },
    )
}

fn rate(m: &Option<Measure>) -> Option<f64> {
    m.map(|m| m.rate)
}

fn p99(m: &Option<Measure>) -> Option<f64> {
    m.and_then(|m| m.p99_ms)
}

fn per_core(m: &Option<Measure>) -> Option<f64> {
    m.and_then(|m| m.per_core())
}

fn print_table(rows: &[Vec<Option<Measure>>], list: &[Config]) {
    println!(
        "\n{:32} {:>12} {:>14} {:>8} {:>7} {:>7} {:>9} {:>9} {:>10}",
        "median over rounds",
        "rate",
        "unit",
        "p99 ms",
        "CPU %",
        "core %",
        "x k rate",
        "x k p99",
        "x k /core"
    );
    for (i, c) in list.iter().enumerate() {
        if rows.iter().all(|r| r[i].is_none()) {
            println!("{:32} not measured: every run failed", c.name());
            crate::harness::peer_not_measured(&c.name(), "every run failed");
            continue;
        }
        let med = |f: &dyn Fn(&Option<Measure>) -> Option<f64>| {
            let v: Vec<f64> = figure::column(rows, i, f).into_iter().flatten().collect();
            (!v.is_empty()).then(|| median(v))
        };
        let k = kernel_of(list, c.app);
        let vs = |f: &dyn Fn(&Option<Measure>) -> Option<f64>| {
            ratio_cell(k.and_then(|k| median_ratio(rows, i, k, f)), 2)
        };
        println!(
            "{:32} {:>12} {:>14} {:>8} {:>7} {:>7} {:>9} {:>9} {:>10}",
            c.name(),
            figure::cell(med(&rate), 1.0, 2),
            c.app.unit(),
            figure::cell(med(&p99), 1.0, 2),
            figure::cell(med(&|m| m.map(|m| m.server_cpu * 100.0)), 1.0, 0),
            figure::cell(
                med(&|m| m.and_then(|m| m.core_busy).map(|b| b * 100.0)),
                1.0,
                0
            ),
            vs(&rate),
            vs(&p99),
            vs(&per_core),
        );
    }
}

/// The kernel's configuration of `app` in `list`.
fn kernel_of(list: &[Config], app: App) -> Option<usize> {
    list.iter()
        .position(|c| c.app == app && c.mode == Mode::Kernel)
}

/// A figure of one run, where measured.
type Figure = fn(&Option<Measure>) -> Option<f64>;

/// Issue 62's targets, judged on this run's medians of in-round ratios.
fn targets(rows: &[Vec<Option<Measure>>], list: &[Config]) -> Vec<(String, Verdict)> {
    let judged: [(App, Mode, &str, Figure, f64); 5] = [
        (
            App::Redis,
            Mode::Exec,
            "redis GET/s, exec sleeping vs kernel",
            rate,
            1.3,
        ),
        (
            App::Redis,
            Mode::ExecBusy,
            "redis GET/s, exec busy poll vs kernel",
            rate,
            1.5,
        ),
        (
            App::Nginx,
            Mode::Exec,
            "nginx requests/s, exec vs kernel",
            rate,
            1.2,
        ),
        (
            App::Accepts,
            Mode::Exec,
            "accepted connections/s, exec vs kernel",
            rate,
            1.0,
        ),
        (
            App::Iperf3,
            Mode::Exec,
            "iperf3 Gbit/s per server CPU, exec vs kernel",
            per_core,
            1.0,
        ),
    ];
    println!();
    let mut v = Vec::new();
    for (app, mode, what, f, bound) in judged {
        let Some(i) = list.iter().position(|c| c.app == app && c.mode == mode) else {
            continue;
        };
        let fig = kernel_of(list, app).and_then(|k| median_ratio(rows, i, k, &f));
        let verdict = target(
            what,
            fig,
            Bound::AtLeast(bound),
            "no round with both runs measured",
        );
        v.push((what.to_string(), verdict));
    }
    v
}

fn report(
    rep: &mut ReportDir,
    a: &TcpAppsArgs,
    rows: &[Vec<Option<Measure>>],
    list: &[Config],
    verdicts: &[(String, Verdict)],
) -> Result<()> {
    let j = serde_json::json!({
        "duration_s": a.duration.as_secs_f64(), "rounds": a.rounds,
        "requests": a.requests, "accepts": a.accepts, "connections": a.connections,
        "busy_poll_us": a.busy_poll,
        "configs": list.iter().enumerate().map(|(i, c)| serde_json::json!({
            "config": c.key(), "name": c.name(), "unit": c.app.unit(),
            "rounds": rows.iter().map(|r| r[i]).collect::<Vec<_>>(),
            "rate_vs_kernel": kernel_of(list, c.app).and_then(|k| median_ratio(rows, i, k, &rate)),
            "per_core_vs_kernel": kernel_of(list, c.app).and_then(|k| median_ratio(rows, i, k, &per_core)),
        })).collect::<Vec<_>>(),
        "targets": verdicts.iter().map(|(w, v)| serde_json::json!({"target": w, "met": v.json()})).collect::<Vec<_>>(),
    });
    rep.json("tcp-apps", &j)?;
    let bars: Vec<Bar> = list
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let k = kernel_of(list, c.app)?;
            let v: Vec<f64> = rows
                .iter()
                .filter_map(|r| figure::ratio(rate(&r[i]), rate(&r[k])))
                .collect();
            Some(Bar::of(c.name(), &v, 1.0))
        })
        .collect();
    rep.bars(
        "tcp-apps",
        "Unmodified TCP servers under rxpath exec over the same server on the kernel",
        "rate over the kernel's in the same round (median, range of rounds)",
        &bars,
    )
}
