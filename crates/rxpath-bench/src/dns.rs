//! `rxpath bench dns`: an unmodified DNS server on rxpath. Debian's
//! `knotd` with one UDP worker, every thread of it pinned to one core, the
//! query generator on the other, in four modes: on the kernel's socket,
//! under `rxpath exec` (sleeping; busy polling), and in Knot's own AF_XDP
//! mode (`xdp: listen: IFACE`, as shipped: it leaves its XDP program
//! attached when it exits, so the bench detaches it). Per round, modes in
//! turn (reversed every other round):
//!
//! - load: `kxdpgun` from the peer namespace at rising fixed rates; the
//!   highest offered rate answered with under `--loss` lost, the peak
//!   answered queries/s, and the server process's CPU (utime + stime of it
//!   and its threads) per answered query at the highest loss-free rate;
//!   and where the rate that ended the round lost its queries, from the
//!   server's own counters read around it ([`crate::losses`]: rxpath's
//!   metrics under exec, the kernel's UDP counters on its socket; Knot's
//!   XDP mode keeps its own);
//! - latency: `dnsperf -v` at a fixed rate below every mode's limit (it
//!   tops out near 110-135 k/s here), p50/p99 from each query's time.
//!
//! Ratios are taken within a round, then the median over rounds. Each
//! mode's round also says how much of the machine's CPU time the
//! hypervisor stole while its rates ran (`/proc/stat`): on a virtual
//! machine a round with much stolen time measured a slower machine.

use crate::dns_cpu::{self, AtRate};
use crate::figure::{
    self, column, in_turn, median_ratio as ratio, ratio_cell, target, Bound, Verdict,
};
use crate::harness::{cpu_secs, median, Peer};
use crate::losses::Probe;
use crate::plot::{progress, say, ReportDir};
use anyhow::{bail, Context, Result};
use rxpath_runtime::lab::{Topology, HOST_ADDR};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// Arguments of this bench.
#[derive(Debug, Clone, clap::Args)]
pub struct DnsArgs {
    /// Generator run per offered rate (and for the latency run).
    #[arg(long, default_value = "2s", value_parser = rxpath_cli::parse::parse_duration)]
    pub duration: Duration,
    /// Rounds (each runs every mode once; medians are compared).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Offered rates, queries/s, tried in rising order until one loses
    /// `--loss` or more (by default 20 k to 100 k in steps of 10 k, then
    /// steps of 5 k to 600 k: at most 5 % apart where the modes' limits
    /// lie, so that 1.1x is told apart from 1.0x).
    #[arg(long, value_delimiter = ',', default_values_t = default_rates())]
    pub rates: Vec<u64>,
    /// The loss (percent of the queries sent) under which a rate counts.
    #[arg(long, default_value_t = 1.0)]
    pub loss: f64,
    /// The rate of the latency run (dnsperf), queries/s.
    #[arg(long, default_value_t = 20_000)]
    pub latency_rate: u64,
    /// Busy-poll time of the busy-polling mode, µs.
    #[arg(long, default_value_t = 50)]
    pub busy_poll: u32,
    /// Prefer busy polling in the busy-polling mode, ns: the interrupt
    /// stays deferred this long after a busy poll, and a server asleep in
    /// `poll`/`epoll_wait` is woken by the device and polls it itself (0:
    /// off).
    #[arg(long, default_value_t = 200_000)]
    pub prefer_busy_poll: u64,
    /// Only these modes (comma-separated: kernel, exec, exec-busy,
    /// knot-xdp); the kernel is always run, as the reference.
    #[arg(long, value_delimiter = ',')]
    pub modes: Vec<String>,
}

/// The default ladder of offered rates ([`DnsArgs::rates`]).
fn default_rates() -> Vec<u64> {
    (20_000..100_000)
        .step_by(10_000)
        .chain((100_000..=600_000).step_by(5_000))
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Kernel,
    Exec,
    ExecBusy,
    KnotXdp,
}

impl Mode {
    const ALL: [Mode; 4] = [Mode::Kernel, Mode::Exec, Mode::ExecBusy, Mode::KnotXdp];

    fn key(self) -> &'static str {
        match self {
            Mode::Kernel => "kernel",
            Mode::Exec => "exec",
            Mode::ExecBusy => "exec-busy",
            Mode::KnotXdp => "knot-xdp",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Kernel => "knotd, kernel UDP",
            Mode::Exec => "knotd, rxpath exec",
            Mode::ExecBusy => "knotd, rxpath exec, busy poll",
            Mode::KnotXdp => "knotd, its own AF_XDP mode",
        }
    }
}

/// The zone, the query file and one config per mode, in a directory of
/// their own.
struct Files {
    dir: PathBuf,
}

impl Files {
    fn new() -> Result<Files> {
        let dir = std::env::temp_dir().join(format!("rxpath-bench-dns-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("run"))?;
        std::fs::write(
            dir.join("example.test.zone"),
            "$ORIGIN example.test.\n$TTL 3600\n\
             @ IN SOA ns1 hostmaster 1 7200 3600 1209600 3600\n\
             @ IN NS ns1\nns1 IN A 198.18.0.1\n\
             www IN A 198.18.0.10\nwww IN AAAA 2001:2::10\n",
        )?;
        std::fs::write(
            dir.join("queries.txt"),
            "www.example.test A\nwww.example.test AAAA\nexample.test NS\nexample.test SOA\n",
        )?;
        Ok(Files { dir })
    }

    /// knotd's config for `mode` on the lab's host end `iface`.
    fn config(&self, mode: Mode, iface: &str) -> Result<PathBuf> {
        let d = self.dir.display();
        let xdp = if mode == Mode::KnotXdp {
            format!("xdp:\n    listen: {iface}@53\n    udp: on\n")
        } else {
            String::new()
        };
        let conf = format!(
            "server:\n    rundir: \"{d}/run\"\n    user: root:root\n    \
             listen: {HOST_ADDR}@53\n    udp-workers: 1\n    tcp-workers: 1\n    \
             background-workers: 1\n{xdp}\
             database:\n    storage: \"{d}/db\"\n\
             log:\n  - target: stderr\n    any: warning\n\
             zone:\n  - domain: example.test\n    storage: \"{d}\"\n    file: \"example.test.zone\"\n"
        );
        let path = self.dir.join(format!("knot-{}.conf", mode.key()));
        std::fs::write(&path, conf)?;
        Ok(path)
    }

    fn queries(&self) -> PathBuf {
        self.dir.join("queries.txt")
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

struct Running {
    mode: Mode,
    peer: Peer,
    out: Option<std::process::ChildStdout>,
    /// The server's counters, read around each rate.
    probe: Probe,
}

fn start(m: Mode, t: &Topology, f: &Files, a: &DnsArgs, cpu: Option<usize>) -> Result<Running> {
    let conf = f.config(m, &t.host_if)?;
    let conf = conf.to_string_lossy();
    let mut cmd = match cpu {
        Some(c) => {
            let mut k = Command::new("taskset");
            k.args(["-c", &c.to_string()]);
            k
        }
        None => Command::new("env"),
    };
    let mut probe = match m {
        Mode::Kernel => Probe::Kernel {
            iface: t.host_if.clone(),
        },
        _ => Probe::Opaque,
    };
    if matches!(m, Mode::Exec | Mode::ExecBusy) {
        let metrics = crate::losses::free_loopback()?;
        probe = Probe::Rxpath(metrics);
        let (busy, prefer) = if m == Mode::ExecBusy {
            (a.busy_poll, a.prefer_busy_poll)
        } else {
            (0, 0)
        };
        let exe = std::env::current_exe().context("locating this binary")?;
        cmd.arg(exe)
            .args(["exec", "--iface", &t.host_if, "--mode", "xdp"])
            .args(["--busy-poll", &busy.to_string()])
            .args(["--prefer-busy-poll", &prefer.to_string()])
            .args(["--metrics", &metrics.to_string(), "--"]);
    }
    cmd.args(["knotd", "-c", &conf]);
    let mut peer = Peer::spawn("knotd", cmd)?;
    let out = peer.stdout();
    Ok(Running {
        mode: m,
        peer,
        out,
        probe,
    })
}

/// Stop the server; under exec its accounting must hold. Knot's XDP
/// program stays on the interface when knotd exits: detach it.
fn stop(r: Running, t: &Topology) -> Result<()> {
    let res = match r.mode {
        Mode::Exec | Mode::ExecBusy => crate::rr::stop_exec(r.peer, r.out).map(|_| ()),
        _ => r.peer.interrupt(Duration::from_secs(10)),
    };
    if r.mode == Mode::KnotXdp {
        let _ = rxpath_runtime::lab::sh("ip", &["link", "set", "dev", &t.host_if, "xdp", "off"]);
    }
    res
}

/// `kdig` until the server answers (an XDP attach takes a moment).
fn ready(t: &Topology) -> bool {
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        let ok = Command::new("ip")
            .args(["netns", "exec", &t.ns, "kdig", &format!("@{HOST_ADDR}")])
            .args(["example.test", "SOA", "+timeout=1", "+retry=0", "+short"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .output()
            .is_ok_and(|o| o.status.success() && !o.stdout.is_empty());
        if ok {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// A `kxdpgun` figure: `total queries:     N (...)`.
fn total(text: &str, what: &str) -> Option<u64> {
    let i = text.find(what)?;
    text[i + what.len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `kxdpgun` at `rate` queries/s: (sent, answered). Its AF_XDP socket on
/// the peer's end can be busy for a moment after the last run let go of
/// it: a few tries.
fn offer(
    t: &Topology,
    f: &Files,
    a: &DnsArgs,
    rate: u64,
    cpu: Option<usize>,
) -> Result<(u64, u64)> {
    let mut last = None;
    for _ in 0..4 {
        match offer_once(t, f, a, rate, cpu) {
            Ok(r) => return Ok(r),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Err(last.expect("tried"))
}

fn offer_once(
    t: &Topology,
    f: &Files,
    a: &DnsArgs,
    rate: u64,
    cpu: Option<usize>,
) -> Result<(u64, u64)> {
    let secs = a.duration.as_secs().max(1).to_string();
    let aff = cpu.map_or("0s1".to_string(), |c| c.to_string());
    let q = f.queries();
    let out = Command::new("ip")
        .args(["netns", "exec", &t.ns, "kxdpgun", "-t", &secs])
        .args(["-Q", &rate.to_string(), "-F", &aff, "-I", &t.peer_if])
        .arg("-i")
        .arg(&q)
        .arg(HOST_ADDR)
        .output()
        .context("running kxdpgun")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    match (
        total(&text, "total queries:"),
        total(&text, "total replies:"),
    ) {
        (Some(s), Some(r)) => Ok((s, r)),
        _ => bail!(
            "kxdpgun said nothing of its queries: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// `dnsperf -v` at `--latency-rate`: p50 and p99 of the answered queries'
/// times, µs.
fn latency(t: &Topology, f: &Files, a: &DnsArgs, cpu: Option<usize>) -> Result<Option<(f64, f64)>> {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &t.ns]);
    if let Some(c) = cpu {
        cmd.args(["taskset", "-c", &c.to_string()]);
    }
    let out = cmd
        .args(["dnsperf", "-s", HOST_ADDR, "-v", "-q", "1000"])
        .args(["-l", &a.duration.as_secs().max(1).to_string()])
        .args(["-Q", &a.latency_rate.to_string()])
        .arg("-d")
        .arg(f.queries())
        .output()
        .context("running dnsperf")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut v: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("> "))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|s| s * 1e6)
        .collect();
    if v.is_empty() {
        return Ok(None);
    }
    v.sort_by(f64::total_cmp);
    let at = |p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)];
    Ok(Some((at(0.50), at(0.99))))
}

/// One mode's figures in one round.
#[derive(Debug, Clone, Default)]
struct Row {
    /// The highest offered rate lost under `--loss` (`Some(0)`: even the
    /// lowest lost more).
    loss_free: Option<u64>,
    /// The most queries answered per second at any rate tried.
    peak: Option<f64>,
    /// Server CPU per answered query at the loss-free rate, µs.
    cpu_us: Option<f64>,
    /// Each offered rate tried: CPU per answered query and loss.
    at_rates: Vec<AtRate>,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    /// The share of the machine's CPU time the hypervisor took while the
    /// rates ran, %: a round measured with much stolen is worth less.
    steal_pct: Option<f64>,
    /// The rate that lost `--loss` or more and ended the round.
    end_rate: Option<u64>,
    /// Where that rate's queries were lost, from the server's counters
    /// (`None`: the server's counters are its own).
    end_losses: Option<Vec<(String, u64)>>,
}

fn measure(
    m: Mode,
    (t, f, a): (&Topology, &Files, &DnsArgs),
    (ccpu, scpu): (Option<usize>, Option<usize>),
    pb: &indicatif::ProgressBar,
) -> Result<Row> {
    let mut row = Row::default();
    let mut r = start(m, t, f, a, scpu)?;
    if !ready(t) {
        let why = r.peer.stderr_tail();
        stop(r, t)?;
        say(pb, &format!("    {:34} no answer: {why}", m.name()));
        return Ok(row);
    }
    row.loss_free = Some(0);
    let secs = a.duration.as_secs().max(1) as f64;
    let stolen = crate::harness::steal_ticks();
    for &rate in &a.rates {
        r.peer.check_alive()?;
        let counted = r.probe.read()?;
        let before = cpu_secs(r.peer.id());
        let (sent, answered) = match offer(t, f, a, rate, ccpu) {
            Ok(x) => x,
            Err(e) => {
                // The generator, not the server, failed: this round of
                // this mode stops here, said, and the run goes on.
                say(
                    pb,
                    &format!("    {:34} {rate:>7}/s: not measured: {e:#}", m.name()),
                );
                break;
            }
        };
        let used = cpu_secs(r.peer.id()) - before;
        let lost = sent.saturating_sub(answered) as f64 / sent.max(1) as f64 * 100.0;
        row.at_rates.push(AtRate {
            rate,
            cpu_us: used * 1e6 / answered.max(1) as f64,
            lost_pct: lost,
        });
        let qps = answered as f64 / secs;
        row.peak = Some(row.peak.map_or(qps, |p: f64| p.max(qps)));
        say(
            pb,
            &format!(
                "    {:34} {rate:>7}/s: answered {qps:>9.0}/s, lost {lost:6.2} %, {:.2} µs CPU/query",
                m.name(),
                used * 1e6 / answered.max(1) as f64
            ),
        );
        if lost >= a.loss {
            row.end_rate = Some(rate);
            row.end_losses = match (counted, r.probe.read()?) {
                (Some(b), Some(e)) => Some(crate::losses::place(sent, answered, &b, &e)),
                _ => None,
            };
            say(
                pb,
                &format!("    {:34} {rate:>7}/s: {}", m.name(), end_line(&row)),
            );
            break;
        }
        row.loss_free = Some(rate);
        row.cpu_us = Some(used * 1e6 / answered.max(1) as f64);
    }
    row.steal_pct = crate::harness::steal_pct(stolen, crate::harness::steal_ticks());
    if let Some((p50, p99)) = latency(t, f, a, ccpu)? {
        (row.p50_us, row.p99_us) = (Some(p50), Some(p99));
    }
    stop(r, t)?;
    Ok(row)
}

fn require_tools() -> Result<()> {
    if !rxpath_os::sched::is_root() {
        bail!("bench dns needs root (it builds a veth lab and attaches XDP): run it with sudo");
    }
    for (tool, pkg) in [
        ("knotd", "knot"),
        ("kxdpgun", "knot-dnsutils"),
        ("kdig", "knot-dnsutils"),
        ("dnsperf", "dnsperf"),
        ("taskset", "util-linux"),
    ] {
        if crate::harness::which(tool).is_none() {
            bail!("bench dns needs {tool}: apt-get install {pkg}");
        }
    }
    Ok(())
}

/// `rxpath bench dns`.
pub fn dns(a: DnsArgs, rep: &mut Option<ReportDir>) -> Result<ExitCode> {
    require_tools()?;
    for k in &a.modes {
        if !Mode::ALL.iter().any(|m| m.key() == k) {
            let keys: Vec<&str> = Mode::ALL.iter().map(|m| m.key()).collect();
            bail!("unknown mode {k:?}: {}", keys.join(", "));
        }
    }
    let t = Topology {
        ns: "rxp-dns".into(),
        host_if: "rxpdns0".into(),
        peer_if: "rxpdns1".into(),
        queues: 1,
        gro: false,
        threaded: false,
    };
    let guard = t.up_scoped()?;
    let t = &guard.0;
    let files = Files::new()?;
    // knotd pins its UDP worker `i` to CPU `i % CPUs` whatever affinity it
    // was started with (udp-handler.c), so its one worker runs on CPU 0:
    // the server gets CPU 0 (everything else of knotd's and rxpath's
    // threads with it), the generator the other.
    let cpus = match crate::harness::client_server_cpus() {
        (Some(client), Some(server)) => (Some(server), Some(client)),
        none => none,
    };
    println!(
        "rxpath bench dns: knotd (1 UDP worker) on CPU {}, kxdpgun and dnsperf on CPU {} in netns {}; {} s per rate, {} round(s); loss-free: under {} %; latency at {}/s; busy poll {} µs, prefer busy poll {} ns",
        crate::harness::cpu_name(cpus.1),
        crate::harness::cpu_name(cpus.0),
        t.ns,
        a.duration.as_secs(),
        a.rounds,
        a.loss,
        a.latency_rate,
        a.busy_poll,
        a.prefer_busy_poll
    );
    let preload = rxpath_cli::exec::find_preload();
    let wanted =
        |m: Mode| a.modes.is_empty() || m == Mode::Kernel || a.modes.iter().any(|k| k == m.key());
    let is_exec = |m: Mode| matches!(m, Mode::Exec | Mode::ExecBusy);
    if let Err(e) = &preload {
        for m in Mode::ALL.into_iter().filter(|&m| is_exec(m) && wanted(m)) {
            println!("{:34} not measured: {e}", m.name());
            crate::harness::peer_not_measured(m.name(), &e.to_string());
        }
    }
    let order: Vec<Mode> = Mode::ALL
        .into_iter()
        .filter(|&m| wanted(m) && !(is_exec(m) && preload.is_err()))
        .collect();
    let pb = progress((a.rounds * order.len()) as u64, "dns");
    let mut rows: Vec<Vec<Row>> = Vec::new();
    for round in 0..a.rounds {
        let mut row = vec![Row::default(); Mode::ALL.len()];
        for m in in_turn(&order, round) {
            pb.set_message(m.name());
            let r = measure(m, (t, &files, &a), cpus, &pb)?;
            say(&pb, &round_line(round, m, &r));
            row[at(m)] = r;
            pb.inc(1);
        }
        rows.push(row);
    }
    pb.finish_and_clear();
    print_table(&rows, &order);
    let mut verdicts = targets(&rows, &order);
    let cpu = cpu_per_query(&rows, &order, a.loss);
    verdicts.extend(cpu.verdicts.iter().cloned());
    if let Some(rep) = rep {
        report(rep, &a, &rows, &order, (&verdicts, &cpu))?;
        if let Err(e) = dns_cpu::plot(rep, &cpu.by_mode()) {
            println!("no plot of CPU per query: {e:#}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn round_line(round: usize, m: Mode, r: &Row) -> String {
    format!(
        "  round {round}: {:34} loss-free {:>7}/s  peak {:>9}/s  CPU/query {} µs  p50 {} µs  p99 {} µs  steal {} %",
        m.name(),
        figure::cell(r.loss_free.map(|v| v as f64), 1.0, 0),
        figure::cell(r.peak, 1.0, 0),
        figure::cell(r.cpu_us, 1.0, 2),
        figure::cell(r.p50_us, 1.0, 1),
        figure::cell(r.p99_us, 1.0, 1),
        figure::cell(r.steal_pct, 1.0, 1),
    )
}

/// Where the rate that ended a round lost its queries.
fn end_line(r: &Row) -> String {
    match &r.end_losses {
        Some(p) => format!("lost at: {}", crate::losses::line(p)),
        None => "lost at: not known (the server's counters are its own)".into(),
    }
}

fn at(m: Mode) -> usize {
    Mode::ALL.iter().position(|&x| x == m).unwrap_or(0)
}

fn loss_free(r: &Row) -> Option<f64> {
    r.loss_free.map(|v| v as f64)
}

fn print_table(rows: &[Vec<Row>], order: &[Mode]) {
    let (k, x) = (at(Mode::Kernel), at(Mode::KnotXdp));
    let med = |i: usize, f: &dyn Fn(&Row) -> Option<f64>| {
        let v: Vec<f64> = column(rows, i, f).into_iter().flatten().collect();
        (!v.is_empty()).then(|| median(v))
    };
    println!(
        "\n{:34} {:>10} {:>10} {:>9} {:>8} {:>8} {:>9} {:>9} {:>8}",
        "median over rounds",
        "loss-free",
        "peak q/s",
        "CPU/q µs",
        "p50 µs",
        "p99 µs",
        "x kernel",
        "x knotxdp",
        "steal %"
    );
    for &m in order {
        let i = at(m);
        if rows.iter().all(|r| r[i].loss_free.is_none()) {
            println!("{:34} not measured: no answer in any round", m.name());
            crate::harness::peer_not_measured(m.name(), "no answer in any round");
            continue;
        }
        println!(
            "{:34} {:>10} {:>10} {:>9} {:>8} {:>8} {:>9} {:>9} {:>8}",
            m.name(),
            figure::cell(med(i, &loss_free), 1.0, 0),
            figure::cell(med(i, &|r| r.peak), 1.0, 0),
            figure::cell(med(i, &|r| r.cpu_us), 1.0, 2),
            figure::cell(med(i, &|r| r.p50_us), 1.0, 1),
            figure::cell(med(i, &|r| r.p99_us), 1.0, 1),
            ratio_cell(ratio(rows, i, k, &loss_free), 2),
            ratio_cell(ratio(rows, i, x, &loss_free), 2),
            figure::cell(med(i, &|r| r.steal_pct), 1.0, 1),
        );
    }
}

/// The targets on this run's medians of in-round ratios: the loss-free
/// rate under exec (sleeping, the default) at least 2x the kernel
/// socket's and 1.1x Knot's own XDP mode's; busy polling at least 1.5x
/// and 1.0x.
fn targets(rows: &[Vec<Row>], order: &[Mode]) -> Vec<(String, Verdict)> {
    let (k, x) = (at(Mode::Kernel), at(Mode::KnotXdp));
    let mut v = Vec::new();
    println!();
    for m in [Mode::Exec, Mode::ExecBusy] {
        if !order.contains(&m) {
            continue;
        }
        let i = at(m);
        let why = "no round with both loss-free rates";
        let what = format!("{} loss-free rate vs kernel", m.key());
        let (vs_kernel, vs_knot) = if m == Mode::Exec {
            (2.0, 1.1)
        } else {
            (1.5, 1.0)
        };
        let fig = ratio(rows, i, k, &loss_free);
        v.push((
            what.clone(),
            target(&what, fig, Bound::AtLeast(vs_kernel), why),
        ));
        if order.contains(&Mode::KnotXdp) {
            let what = format!("{} loss-free rate vs knot's XDP mode", m.key());
            let fig = ratio(rows, i, x, &loss_free);
            v.push((
                what.clone(),
                target(&what, fig, Bound::AtLeast(vs_knot), why),
            ));
        }
    }
    v
}

/// A ratio's median in each round, and their median.
type PerRound = (Vec<Option<f64>>, Option<f64>);

/// CPU per query at every rate, each mode's; each exec mode's against
/// Knot's XDP mode at the rates both answered without loss.
struct CpuPerQuery {
    /// Each mode measured: its name and CPU per query by rate.
    modes: Vec<(&'static str, Vec<(u64, f64)>)>,
    /// Each exec mode: its key, the per-round medians of its ratio to
    /// Knot's XDP mode, and their median.
    vs_knot: Vec<(&'static str, PerRound)>,
    verdicts: Vec<(String, Verdict)>,
}

impl CpuPerQuery {
    fn by_mode(&self) -> Vec<(&str, Vec<(u64, f64)>)> {
        self.modes.iter().map(|(n, v)| (*n, v.clone())).collect()
    }

    fn json(&self) -> serde_json::Value {
        self.vs_knot
            .iter()
            .map(|(k, (per, med))| {
                (
                    k.to_string(),
                    serde_json::json!({"round_medians": per, "median": med}),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    }
}

/// The server's CPU per answered query at each offered rate (table), and
/// the target of exec (sleeping) against Knot's XDP mode at the rates
/// both answered without loss: at most 0.9x.
fn cpu_per_query(rows: &[Vec<Row>], order: &[Mode], loss: f64) -> CpuPerQuery {
    let of = |m: Mode| -> Vec<&[AtRate]> { rows.iter().map(|r| &r[at(m)].at_rates[..]).collect() };
    let modes: Vec<(&'static str, Vec<(u64, f64)>)> = order
        .iter()
        .map(|&m| (m.key(), dns_cpu::by_rate(&of(m), loss)))
        .collect();
    dns_cpu::print_table(&modes);
    let mut out = CpuPerQuery {
        modes,
        vs_knot: Vec::new(),
        verdicts: Vec::new(),
    };
    if !order.contains(&Mode::KnotXdp) {
        return out;
    }
    for m in [Mode::Exec, Mode::ExecBusy]
        .into_iter()
        .filter(|m| order.contains(m))
    {
        let pairs = of(m).into_iter().zip(of(Mode::KnotXdp));
        let (per, med) = dns_cpu::over_rounds(pairs, loss);
        let what = format!(
            "{} CPU per query vs knot's XDP mode at shared rates",
            m.key()
        );
        if m == Mode::Exec {
            let v = dns_cpu::target(&what, &per, med, 0.9);
            out.verdicts.push((what, v));
        } else {
            let cells: Vec<String> = per.iter().map(|r| ratio_cell(*r, 3)).collect();
            println!("{what}, per round: {}", cells.join(", "));
        }
        out.vs_knot.push((m.key(), (per, med)));
    }
    out
}

fn report(
    rep: &mut ReportDir,
    a: &DnsArgs,
    rows: &[Vec<Row>],
    order: &[Mode],
    (verdicts, cpu): (&[(String, Verdict)], &CpuPerQuery),
) -> Result<()> {
    let j = serde_json::json!({
        "duration_s": a.duration.as_secs(), "rounds": a.rounds, "rates": a.rates,
        "loss_pct": a.loss, "latency_rate": a.latency_rate, "busy_poll_us": a.busy_poll,
        "prefer_busy_poll_ns": a.prefer_busy_poll,
        "server": "knotd, 1 UDP worker, pinned", "generator": "kxdpgun; dnsperf -v for latency",
        "modes": order.iter().map(|&m| {
            let i = at(m);
            serde_json::json!({
                "mode": m.key(), "name": m.name(),
                "rounds": rows.iter().map(|r| {
                    let r = &r[i];
                    serde_json::json!({
                        "loss_free_qps": r.loss_free,
                        "peak_answered_qps": r.peak,
                        "server_cpu_us_per_query": r.cpu_us,
                        "at_rates": r.at_rates.iter().map(AtRate::json).collect::<Vec<_>>(),
                        "p50_us": r.p50_us,
                        "p99_us": r.p99_us,
                        "steal_pct": r.steal_pct,
                        "end_rate": r.end_rate,
                        "end_losses": r.end_losses.as_ref().map(|p| {
                            p.iter().map(|(w, n)| (w.clone(), serde_json::json!(n)))
                                .collect::<serde_json::Map<_, _>>()
                        }),
                    })
                }).collect::<Vec<_>>(),
            })
        }).collect::<Vec<_>>(),
        "cpu_per_query_vs_knot_xdp": cpu.json(),
        "targets": verdicts.iter().map(|(w, v)| serde_json::json!({"target": w, "met": v.json()})).collect::<Vec<_>>(),
    });
    rep.json("dns", &j)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kxdpgun_totals_are_read_from_its_words() {
        let text = "using interface rxp1, XDP threads 1, UDP, native mode\n\
            thread#00: sent 99700, received 44241\n\
            total queries:     99700 (49850 pps)\n\
            total replies:     44241 (22120 pps) (44%)\n";
        assert_eq!(total(text, "total queries:"), Some(99700));
        assert_eq!(total(text, "total replies:"), Some(44241));
        assert_eq!(total("nothing", "total replies:"), None);
    }

    #[test]
    fn a_config_per_mode_and_the_xdp_one_names_the_interface() {
        let f = Files::new().unwrap();
        let k = std::fs::read_to_string(f.config(Mode::Kernel, "if0").unwrap()).unwrap();
        let x = std::fs::read_to_string(f.config(Mode::KnotXdp, "if0").unwrap()).unwrap();
        assert!(k.contains("udp-workers: 1") && !k.contains("xdp:"), "{k}");
        assert!(x.contains("xdp:\n    listen: if0@53"), "{x}");
        assert!(f.queries().exists());
    }
}
