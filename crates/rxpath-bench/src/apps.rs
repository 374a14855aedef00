//! `rxpath bench apps`: an unmodified program on rxpath. The `sockperf
//! server` from Debian's package on the kernel's UDP socket, under `rxpath
//! exec` sleeping and busy polling, beside the native `rxpath echo
//! --sockperf` (busy polling and sleeping); `sockperf` clients in the peer
//! namespace. Per server and round:
//!
//! - ping-pong: round trips/s, p50/p99, and the server process's CPU per
//!   round trip (utime + stime of the process and its threads, as
//!   `/proc/PID/stat` gives them; the kernel's softirq work on the
//!   client's CPU is not the server's, for either side);
//! - throughput: fixed rates, rising, each against a fresh server; the
//!   loss is what the client sent minus what the server counted at exit
//!   (less the probe's requests), and the highest rate under `--loss` is
//!   the loss-free rate.
//!
//! Servers run in turn within a round, every other round reversed; ratios
//! are taken within a round, then the median over rounds.

use crate::figure::{
    self, column, in_turn, median_ratio as ratio, ratio_cell, target, Bound, Verdict,
};
use crate::harness::{cpu_secs, median, Peer};
use crate::plot::{progress, say, ReportDir};
use crate::rr;
use crate::sockperf::{client, field, strip_ansi, Measure, PORT};
use anyhow::{bail, Context, Result};
use rxpath_runtime::lab::{Topology, HOST_ADDR};
use std::process::{Command, ExitCode};
use std::time::Duration;

/// Arguments of this bench.
#[derive(Debug, Clone, clap::Args)]
pub struct AppsArgs {
    /// Client run per ping-pong measurement and per throughput rate.
    #[arg(long, default_value = "2s", value_parser = rxpath_cli::parse::parse_duration)]
    pub duration: Duration,
    /// Rounds (each runs every server once; medians are compared).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Message size, bytes (sockperf -m; at least its 14-byte header).
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    /// Busy-poll time of the busy-polling servers, µs.
    #[arg(long, default_value_t = 50)]
    pub busy_poll: u32,
    /// Offered rates of the throughput part, messages/s, tried in rising
    /// order until one loses `--loss` or more.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "25000,50000,75000,100000,125000,150000,175000,200000,250000"
    )]
    pub rates: Vec<u64>,
    /// The loss (percent of the messages sent) under which a rate counts
    /// as loss-free.
    #[arg(long, default_value_t = 0.1)]
    pub loss: f64,
    /// Only these servers (comma-separated: kernel, exec, exec-busy,
    /// echo-busy, echo); the kernel is always run, as the reference.
    #[arg(long, value_delimiter = ',')]
    pub servers: Vec<String>,
    /// Skip the throughput part (ping-pong only).
    #[arg(long)]
    pub no_throughput: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Server {
    Kernel,
    ExecSleep,
    ExecBusy,
    EchoBusy,
    EchoSleep,
}

impl Server {
    const ALL: [Server; 5] = [
        Server::Kernel,
        Server::ExecSleep,
        Server::ExecBusy,
        Server::EchoBusy,
        Server::EchoSleep,
    ];

    fn key(self) -> &'static str {
        match self {
            Server::Kernel => "kernel",
            Server::ExecSleep => "exec",
            Server::ExecBusy => "exec-busy",
            Server::EchoBusy => "echo-busy",
            Server::EchoSleep => "echo",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Server::Kernel => "sockperf server, kernel UDP",
            Server::ExecSleep => "sockperf server, rxpath exec",
            Server::ExecBusy => "sockperf server, rxpath exec, busy poll",
            Server::EchoBusy => "rxpath echo --sockperf, busy poll",
            Server::EchoSleep => "rxpath echo --sockperf, sleeping",
        }
    }
}

/// A server process of this bench.
struct Running {
    what: Server,
    peer: Peer,
    out: Option<std::process::ChildStdout>,
}

fn start(s: Server, t: &Topology, a: &AppsArgs, cpu: Option<usize>) -> Result<Running> {
    let exe = std::env::current_exe().context("locating this binary")?;
    let mut cmd = match cpu {
        Some(c) => {
            let mut k = Command::new("taskset");
            k.args(["-c", &c.to_string()]);
            k
        }
        None => Command::new("env"),
    };
    let busy = match s {
        Server::ExecBusy | Server::EchoBusy => a.busy_poll,
        _ => 0,
    };
    match s {
        Server::Kernel => {
            cmd.args([
                "sockperf",
                "server",
                "-i",
                HOST_ADDR,
                "-p",
                &PORT.to_string(),
            ]);
        }
        Server::ExecSleep | Server::ExecBusy => {
            cmd.arg(&exe)
                .args(["exec", "--iface", &t.host_if, "--mode", "xdp"])
                .args(["--busy-poll", &busy.to_string(), "--"])
                .args([
                    "sockperf",
                    "server",
                    "-i",
                    HOST_ADDR,
                    "-p",
                    &PORT.to_string(),
                ]);
        }
        Server::EchoBusy | Server::EchoSleep => {
            cmd.arg(&exe)
                .args(["echo", "--iface", &t.host_if, "--mode", "xdp", "--sockperf"])
                .args(["--queues", "1", "--busy-poll", &busy.to_string()])
                .args(["--port", &PORT.to_string()]);
        }
    }
    let mut peer = Peer::spawn("apps server", cmd)?;
    let out = peer.stdout();
    Ok(Running { what: s, peer, out })
}

/// Stop a server with SIGINT and return how many messages it read, from
/// its own words; an rxpath server must also account for every frame.
fn stop(r: Running) -> Result<u64> {
    let text = match r.what {
        Server::ExecSleep | Server::ExecBusy => rr::stop_exec(r.peer, r.out)?,
        _ => {
            let mut out = r.out;
            r.peer.interrupt(Duration::from_secs(10))?;
            let mut text = String::new();
            if let Some(o) = out.as_mut() {
                let _ = std::io::Read::read_to_string(o, &mut text);
            }
            text
        }
    };
    received(r.what, &strip_ansi(&text))
}

/// The messages a stopped server says it read: sockperf's `Total N
/// messages received`, or `rxpath echo`'s `N datagrams read` (which must
/// also say every frame came home).
fn received(what: Server, text: &str) -> Result<u64> {
    if matches!(what, Server::EchoBusy | Server::EchoSleep) {
        let home = text
            .split("frames home ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.split_once('/'));
        if home.is_none_or(|(a, b)| a != b) {
            bail!("rxpath echo lost frames: {text}");
        }
        let read = text
            .split(" datagrams read")
            .next()
            .and_then(|s| s.rsplit(' ').next())
            .and_then(|n| n.parse().ok());
        return read.with_context(|| format!("no count of datagrams read in: {text}"));
    }
    let i = text
        .find("Total ")
        .filter(|_| text.contains("messages received"))
        .with_context(|| format!("no count of messages received in: {text}"))?;
    field(&text[i..], "Total")
        .map(|n| n as u64)
        .with_context(|| format!("no count of messages received in: {text}"))
}

/// Short ping-pong runs until the server answers (an XDP attach takes a
/// moment): the requests they sent (the server counts them too), or
/// `None` if it never answered.
fn probe(t: &Topology, size: usize) -> Result<Option<u64>> {
    let mut sent = 0;
    for _ in 0..8 {
        let out = crate::sockperf::probe_run(t, size)
            .output()
            .context("running the sockperf client")?;
        let text = strip_ansi(&String::from_utf8_lossy(&out.stdout));
        let Some(all) = text.find("[Total Run]").map(|i| &text[i..]) else {
            continue;
        };
        sent += field(all, "SentMessages").unwrap_or(0.0) as u64;
        if field(all, "ReceivedMessages").is_some_and(|n| n > 0.0) {
            return Ok(Some(sent));
        }
    }
    Ok(None)
}

/// `sockperf throughput` at `rate` messages/s: the messages it sent.
fn offer(t: &Topology, a: &AppsArgs, rate: u64, cpu: Option<usize>) -> Result<Option<u64>> {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &t.ns]);
    if let Some(c) = cpu {
        cmd.args(["taskset", "-c", &c.to_string()]);
    }
    let out = cmd
        .args(["sockperf", "throughput", "-i", HOST_ADDR])
        .args(["-p", &PORT.to_string(), "-m", &a.size.to_string()])
        .args(["-t", &a.duration.as_secs().max(1).to_string()])
        .args(["--mps", &rate.to_string()])
        .output()
        .context("running the sockperf throughput client")?;
    let text = strip_ansi(&String::from_utf8_lossy(&out.stdout));
    Ok(text
        .find("Total of ")
        .and_then(|i| field(&text[i..], "Total of"))
        .map(|n| n as u64))
}

/// One server's figures in one round.
#[derive(Debug, Clone, Copy, Default)]
struct Row {
    pp: Option<Measure>,
    /// Server CPU (utime + stime) per round trip, µs.
    cpu_us_per_rt: Option<f64>,
    /// The highest offered rate lost under `--loss`, messages/s (`Some(0)`:
    /// even the lowest lost more).
    loss_free: Option<u64>,
    /// Server CPU per message at the loss-free rate, µs.
    cpu_us_per_msg: Option<f64>,
}

/// The ping-pong part against a fresh server.
fn ping_pong(
    s: Server,
    t: &Topology,
    a: &AppsArgs,
    (ccpu, scpu): (Option<usize>, Option<usize>),
) -> Result<(Option<Measure>, Option<f64>)> {
    let r = start(s, t, a, scpu)?;
    if probe(t, a.size)?.is_none() {
        stop(r)?;
        return Ok((None, None));
    }
    let before = cpu_secs(r.peer.id());
    let m = client(t, a.duration.as_secs().max(1), a.size, ccpu, false, &[])?.map(|m| m.0);
    let used = cpu_secs(r.peer.id()) - before;
    stop(r)?;
    let cpu = m
        .filter(|m| m.total.1 > 0)
        .map(|m| used * 1e6 / m.total.1 as f64);
    Ok((m, cpu))
}

/// One throughput step: a fresh server, the probe, `rate` offered. The
/// loss (share of the messages sent) and the server's CPU per message.
fn step(
    s: Server,
    t: &Topology,
    a: &AppsArgs,
    rate: u64,
    (ccpu, scpu): (Option<usize>, Option<usize>),
) -> Result<Option<(f64, f64)>> {
    let r = start(s, t, a, scpu)?;
    let Some(probe_sent) = probe(t, a.size)? else {
        stop(r)?;
        return Ok(None);
    };
    let before = cpu_secs(r.peer.id());
    let sent = offer(t, a, rate, ccpu)?;
    let used = cpu_secs(r.peer.id()) - before;
    let got = stop(r)?.saturating_sub(probe_sent);
    Ok(sent.filter(|&n| n > 0).map(|n| {
        let lost = n.saturating_sub(got) as f64 / n as f64;
        (lost, used * 1e6 / got.max(1) as f64)
    }))
}

fn throughput(
    s: Server,
    t: &Topology,
    a: &AppsArgs,
    cpus: (Option<usize>, Option<usize>),
    pb: &indicatif::ProgressBar,
) -> Result<(Option<u64>, Option<f64>)> {
    let mut best = (Some(0), None);
    for &rate in &a.rates {
        let Some((lost, cpu)) = step(s, t, a, rate, cpus)? else {
            say(pb, &format!("    {:40} {rate:>7}/s: no answer", s.name()));
            return Ok((None, None));
        };
        say(
            pb,
            &format!(
                "    {:40} {rate:>7}/s: lost {:.3} %, {cpu:.2} µs CPU/msg",
                s.name(),
                lost * 100.0
            ),
        );
        if lost * 100.0 >= a.loss {
            break;
        }
        best = (Some(rate), Some(cpu));
    }
    Ok(best)
}

pub fn apps(a: AppsArgs, rep: &mut Option<ReportDir>) -> Result<ExitCode> {
    rr::require_root_and_sockperf("apps", "it builds a veth lab and attaches XDP")?;
    for k in &a.servers {
        if !Server::ALL.iter().any(|s| s.key() == k) {
            let keys: Vec<&str> = Server::ALL.iter().map(|s| s.key()).collect();
            bail!("unknown server {k:?}: {}", keys.join(", "));
        }
    }
    let t = Topology {
        ns: "rxp-apps".into(),
        host_if: "rxpapp0".into(),
        peer_if: "rxpapp1".into(),
        queues: 1,
        gro: false,
        threaded: false,
    };
    let guard = t.up_scoped()?;
    let t = &guard.0;
    let cpus = crate::harness::client_server_cpus();
    println!(
        "rxpath bench apps: sockperf, {}-byte UDP, {} s per client run, {} round(s); veth {} <- {} (netns {}); client on CPU {}, server on CPU {}; busy poll {} µs; loss-free: under {} %",
        a.size,
        a.duration.as_secs(),
        a.rounds,
        t.host_if,
        t.peer_if,
        t.ns,
        crate::harness::cpu_name(cpus.0),
        crate::harness::cpu_name(cpus.1),
        a.busy_poll,
        a.loss
    );
    // The exec rows need this binary's preload library; without it they
    // are said not measured, and the rest runs.
    let preload = rxpath_cli::exec::find_preload();
    let wanted = |s: Server| {
        a.servers.is_empty() || s == Server::Kernel || a.servers.iter().any(|k| k == s.key())
    };
    let is_exec = |s: Server| matches!(s, Server::ExecSleep | Server::ExecBusy);
    if let Err(e) = &preload {
        for s in Server::ALL.into_iter().filter(|&s| is_exec(s) && wanted(s)) {
            println!("{:40} not measured: {e}", s.name());
            crate::harness::peer_not_measured(s.name(), &e.to_string());
        }
    }
    let chosen = |s: Server| wanted(s) && !(is_exec(s) && preload.is_err());
    let order: Vec<Server> = Server::ALL.into_iter().filter(|&s| chosen(s)).collect();
    let pb = progress((a.rounds * order.len()) as u64, "apps");
    let mut rows: Vec<Vec<Row>> = Vec::new();
    for round in 0..a.rounds {
        let mut row = vec![Row::default(); Server::ALL.len()];
        for s in in_turn(&order, round) {
            pb.set_message(s.name());
            let i = Server::ALL.iter().position(|&x| x == s).unwrap_or(0);
            let (pp, cpu) = ping_pong(s, t, &a, cpus)?;
            row[i].pp = pp;
            row[i].cpu_us_per_rt = cpu;
            if !a.no_throughput {
                (row[i].loss_free, row[i].cpu_us_per_msg) = throughput(s, t, &a, cpus, &pb)?;
            }
            say(&pb, &round_line(round, s, &row[i]));
            pb.inc(1);
        }
        rows.push(row);
    }
    pb.finish_and_clear();
    print_table(&rows, &order);
    let verdicts = targets(&rows, &order, &a);
    if let Some(rep) = rep {
        report(rep, &a, &rows, &order, &verdicts)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn round_line(round: usize, s: Server, r: &Row) -> String {
    let pp = r.pp.map_or("no answer".to_string(), |m| {
        format!(
            "{:8.0} RT/s  p50 {:6.2} µs  p99 {:6.2} µs",
            m.rt_per_s, m.p50_us, m.p99_us
        )
    });
    format!(
        "  round {round}: {:40} {pp}  CPU/RT {} µs  loss-free {}/s",
        s.name(),
        figure::cell(r.cpu_us_per_rt, 1.0, 2),
        figure::cell(r.loss_free.map(|v| v as f64), 1.0, 0),
    )
}

fn at(s: Server) -> usize {
    Server::ALL.iter().position(|&x| x == s).unwrap_or(0)
}

fn rt(r: &Row) -> Option<f64> {
    r.pp.map(|m| m.rt_per_s)
}

fn p99(r: &Row) -> Option<f64> {
    r.pp.map(|m| m.p99_us)
}

fn loss_free(r: &Row) -> Option<f64> {
    r.loss_free.map(|v| v as f64)
}

fn print_table(rows: &[Vec<Row>], order: &[Server]) {
    let k = at(Server::Kernel);
    let med = |i: usize, f: &dyn Fn(&Row) -> Option<f64>| {
        let v: Vec<f64> = column(rows, i, f).into_iter().flatten().collect();
        (!v.is_empty()).then(|| median(v))
    };
    println!(
        "\n{:40} {:>9} {:>8} {:>8} {:>8} {:>10} {:>9} {:>9} {:>9}",
        "median over rounds",
        "RT/s",
        "p50 µs",
        "p99 µs",
        "CPU/RT",
        "loss-free",
        "x k RT/s",
        "x k p99",
        "x k l-f"
    );
    for &s in order {
        let i = at(s);
        if rows.iter().all(|r| r[i].pp.is_none()) {
            println!("{:40} not measured: no answer in any round", s.name());
            crate::harness::peer_not_measured(s.name(), "no answer in any round");
            continue;
        }
        println!(
            "{:40} {:>9} {:>8} {:>8} {:>8} {:>10} {:>9} {:>9} {:>9}",
            s.name(),
            figure::cell(med(i, &rt), 1.0, 0),
            figure::cell(med(i, &|r| r.pp.map(|m| m.p50_us)), 1.0, 2),
            figure::cell(med(i, &p99), 1.0, 2),
            figure::cell(med(i, &|r| r.cpu_us_per_rt), 1.0, 2),
            figure::cell(med(i, &loss_free), 1.0, 0),
            ratio_cell(ratio(rows, i, k, &rt), 2),
            ratio_cell(ratio(rows, i, k, &p99), 2),
            ratio_cell(ratio(rows, i, k, &loss_free), 2),
        );
    }
}

/// The targets, judged on this run's medians of in-round ratios.
fn targets(rows: &[Vec<Row>], order: &[Server], a: &AppsArgs) -> Vec<(String, Verdict)> {
    let has = |s: Server| order.contains(&s);
    let (k, eb, es, nb) = (
        at(Server::Kernel),
        at(Server::ExecBusy),
        at(Server::ExecSleep),
        at(Server::EchoBusy),
    );
    let mut v = Vec::new();
    println!();
    let mut judge = |what: &str, fig: Option<f64>, b: Bound, why: &str| {
        v.push((what.to_string(), target(what, fig, b, why)));
    };
    if has(Server::ExecBusy) {
        let why = "no round with both servers answering";
        judge(
            "exec busy poll RT/s vs kernel",
            ratio(rows, eb, k, &rt),
            Bound::AtLeast(2.0),
            why,
        );
        judge(
            "exec busy poll p99 vs kernel",
            ratio(rows, eb, k, &p99),
            Bound::AtMost(1.0),
            why,
        );
        if has(Server::EchoBusy) {
            judge(
                "exec busy poll RT/s vs native echo",
                ratio(rows, eb, nb, &rt),
                Bound::AtLeast(0.9),
                why,
            );
        }
    }
    if has(Server::ExecSleep) {
        let why = "no round with both servers answering";
        judge(
            "exec sleeping RT/s vs kernel",
            ratio(rows, es, k, &rt),
            Bound::AtLeast(1.0),
            why,
        );
        if !a.no_throughput {
            judge(
                "exec sleeping loss-free rate vs kernel",
                ratio(rows, es, k, &loss_free),
                Bound::AtLeast(1.0),
                "no round with both loss-free rates",
            );
        }
    }
    v
}

fn report(
    rep: &mut ReportDir,
    a: &AppsArgs,
    rows: &[Vec<Row>],
    order: &[Server],
    verdicts: &[(String, Verdict)],
) -> Result<()> {
    let j = serde_json::json!({
        "size": a.size, "duration_s": a.duration.as_secs(), "rounds": a.rounds,
        "busy_poll_us": a.busy_poll, "rates": a.rates, "loss_pct": a.loss,
        "servers": order.iter().map(|&s| {
            let i = at(s);
            serde_json::json!({
                "server": s.key(), "name": s.name(),
                "rounds": rows.iter().map(|r| {
                    let r = &r[i];
                    serde_json::json!({
                        "round_trips_per_s": r.pp.map(|m| m.rt_per_s),
                        "p50_rtt_us": r.pp.map(|m| m.p50_us),
                        "p99_rtt_us": r.pp.map(|m| m.p99_us),
                        "avg_rtt_us": r.pp.map(|m| m.avg_us),
                        "server_cpu_us_per_round_trip": r.cpu_us_per_rt,
                        "loss_free_msgs_per_s": r.loss_free,
                        "server_cpu_us_per_msg_at_loss_free": r.cpu_us_per_msg,
                    })
                }).collect::<Vec<_>>(),
            })
        }).collect::<Vec<_>>(),
        "targets": verdicts.iter().map(|(w, v)| serde_json::json!({"target": w, "met": v.json()})).collect::<Vec<_>>(),
    });
    rep.json("apps", &j)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_count_is_read_from_its_own_words() {
        let sp = "sockperf: Test end (interrupted by user)\n\
            sockperf: Total 399374 messages received and handled\n";
        assert_eq!(received(Server::Kernel, sp).unwrap(), 399374);
        assert!(received(Server::ExecSleep, "sockperf: nothing").is_err());
        let echo =
            "echo: 4.0s, 1234 datagrams read, 0 answered; sleeps 80; frames home 4096/4096\n";
        assert_eq!(received(Server::EchoBusy, echo).unwrap(), 1234);
        let lost = "echo: 4.0s, 1234 datagrams read, 0 answered; frames home 4000/4096\n";
        assert!(received(Server::EchoSleep, lost).is_err());
    }

    #[test]
    fn cpu_of_this_process_is_read() {
        let t0 = cpu_secs(std::process::id());
        let until = std::time::Instant::now() + Duration::from_millis(300);
        let mut x = 0u64;
        while std::time::Instant::now() < until {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let used = cpu_secs(std::process::id()) - t0;
        assert!(used > 0.1, "{used}");
    }
}
