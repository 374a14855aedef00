//! `rxpath bench rr`: UDP request/response on the lab veth with `sockperf
//! ping-pong` as the client in the peer namespace, against rxpath echo
//! (busy polling, busy polling with the interrupt deferred, sleeping) and
//! the kernel's UDP socket (`sockperf server`, plain and with
//! `net.core.busy_read`/`busy_poll`). One run, the same message size,
//! rounds interleaved; medians of each configuration are compared.
//! `--tcp` runs the same over TCP (seed 000's `TCP_RR`): sockperf's TCP
//! ping-pong against `rxpath echo --tcp` on rxpath's TCP and the kernel's
//! `sockperf server --tcp`.

use crate::figure::{self, finite, in_turn, ratio_cell};
use crate::harness::median;
use crate::plot::{progress, say, Bar, ReportDir};
use crate::sockperf::{client, cpu_jiffies, ready, Measure, PORT};
use anyhow::{bail, Context, Result};
use rxpath_cli::echo::EchoArgs;
use rxpath_cli::echo::EchoServer;
use rxpath_cli::opts::{BackendArg, ModeArg};
use rxpath_os::sched;
use rxpath_runtime::lab::{Topology, HOST_ADDR};
use std::process::{Command, ExitCode, Stdio};

/// Arguments of this bench.
#[derive(Debug, Clone, clap::Args)]
pub struct RrArgs {
    /// Client run per configuration.
    #[arg(long, default_value = "3s", value_parser = rxpath_cli::parse::parse_duration)]
    pub duration: std::time::Duration,
    /// Rounds (each runs every configuration once; medians are compared).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Message size, bytes (sockperf -m; at least its 14-byte header).
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    /// Busy-poll time for rxpath and for the kernel (busy_read/busy_poll), µs.
    #[arg(long, default_value_t = 50)]
    pub busy_poll: u32,
    /// rxpath's prefer-busy-poll interrupt deferral, ns.
    #[arg(long, default_value_t = 200_000)]
    pub prefer_ns: u64,
    /// Only these servers (comma-separated: busy, busy-packet-tx, prefer, xsk, sleep, packet,
    /// exec, exec-busy, kernel, kernel-busy); the kernel is always run, as the reference.
    #[arg(long, value_delimiter = ',')]
    pub servers: Vec<String>,
    /// TCP round trips (seed 000's TCP_RR): sockperf --tcp, rxpath's
    /// servers on rxpath's TCP (`echo --tcp`), the kernel's on its own,
    /// and `sockperf server --tcp` under `rxpath exec --protocols udp,tcp`.
    #[arg(long)]
    pub tcp: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Server {
    RxpathBusy,
    RxpathBusyPacketTx,
    RxpathPrefer,
    RxpathXsk,
    RxpathSleep,
    RxpathPacket,
    ExecSleep,
    ExecBusy,
    Kernel,
    KernelBusy,
}

impl Server {
    const ALL: [Server; 10] = [
        Server::RxpathBusy,
        Server::RxpathBusyPacketTx,
        Server::RxpathPrefer,
        Server::RxpathXsk,
        Server::RxpathSleep,
        Server::RxpathPacket,
        Server::ExecSleep,
        Server::ExecBusy,
        Server::Kernel,
        Server::KernelBusy,
    ];

    fn key(self) -> &'static str {
        match self {
            Server::RxpathBusy => "busy",
            Server::RxpathBusyPacketTx => "busy-packet-tx",
            Server::RxpathPrefer => "prefer",
            Server::RxpathXsk => "xsk",
            Server::RxpathSleep => "sleep",
            Server::RxpathPacket => "packet",
            Server::ExecSleep => "exec",
            Server::ExecBusy => "exec-busy",
            Server::Kernel => "kernel",
            Server::KernelBusy => "kernel-busy",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Server::RxpathBusy => "rxpath echo, busy poll",
            Server::RxpathBusyPacketTx => "rxpath echo, busy poll, AF_PACKET replies",
            Server::RxpathPrefer => "rxpath echo, busy poll + prefer",
            Server::RxpathXsk => "rxpath echo, busy poll + XSK busy poll",
            Server::RxpathSleep => "rxpath echo, sleeping",
            Server::RxpathPacket => "rxpath echo --mode packet, busy poll",
            Server::ExecSleep => "sockperf server, rxpath exec",
            Server::ExecBusy => "sockperf server, rxpath exec, busy poll",
            Server::Kernel => "kernel socket (sockperf server)",
            Server::KernelBusy => "kernel socket, busy_read/busy_poll",
        }
    }
}

pub(crate) fn write_sysctl(name: &str, v: &str) -> Result<()> {
    std::fs::write(format!("/proc/sys/net/core/{name}"), v)
        .with_context(|| format!("setting net.core.{name}"))
}

pub(crate) fn read_sysctl(name: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "0".into())
}

/// Restores what a configuration changed on every way out.
struct Restore {
    busy: (String, String),
    iface: String,
}

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = write_sysctl("busy_read", &self.busy.0);
        let _ = write_sysctl("busy_poll", &self.busy.1);
        let _ = Command::new("ethtool")
            .args(["-K", &self.iface, "gro", "off"])
            .stderr(Stdio::null())
            .status();
    }
}

pub(crate) enum Running {
    Rxpath(Box<EchoServer>),
    Kernel(crate::harness::Peer),
    /// `rxpath exec` with `sockperf server` under it, and exec's stdout.
    Exec(crate::harness::Peer, Option<std::process::ChildStdout>),
}

/// The unmodified `sockperf server` under `rxpath exec` (this binary),
/// pinned to `cpu` with every thread the preloaded host starts; with
/// `tcp`, `sockperf server --tcp` on rxpath's TCP.
pub(crate) fn start_exec(
    t: &Topology,
    busy_us: u32,
    cpu: Option<usize>,
    tcp: bool,
) -> Result<Running> {
    let exe = std::env::current_exe().context("locating this binary")?;
    let mut cmd = Command::new(exe);
    cmd.args(["exec", "--iface", &t.host_if, "--mode", "xdp"]);
    if tcp {
        cmd.args(["--protocols", "udp,tcp"]);
    }
    cmd.args(["--busy-poll", &busy_us.to_string(), "--"]);
    if let Some(c) = cpu {
        cmd.args(["taskset", "-c", &c.to_string()]);
    }
    cmd.args([
        "sockperf",
        "server",
        "-i",
        HOST_ADDR,
        "-p",
        &PORT.to_string(),
    ]);
    if tcp {
        cmd.arg("--tcp");
    }
    let mut peer = crate::harness::Peer::spawn("rxpath exec sockperf server", cmd)?;
    let out = peer.stdout();
    Ok(Running::Exec(peer, out))
}

/// Stop `rxpath exec`'s program with SIGINT (sockperf's own way out: it
/// exits, the preload writes its report) and require the accounting exec
/// prints to hold.
pub(crate) fn stop_exec(
    peer: crate::harness::Peer,
    out: Option<std::process::ChildStdout>,
) -> Result<String> {
    let kids = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", peer.id()))
        .unwrap_or_default();
    for pid in kids
        .split_whitespace()
        .filter_map(|p| p.parse::<u32>().ok())
    {
        let _ = sched::signal(pid, signal_hook::consts::SIGINT);
    }
    peer.interrupt(std::time::Duration::from_secs(10))?;
    let mut text = String::new();
    if let Some(mut o) = out {
        let _ = std::io::Read::read_to_string(&mut o, &mut text);
    }
    let acc = text
        .lines()
        .find(|l| l.starts_with("accounting:"))
        .unwrap_or("");
    let frames = text
        .lines()
        .find(|l| l.starts_with("frames:"))
        .unwrap_or("");
    if !(acc.ends_with(": ok") && frames.ends_with(": ok")) {
        bail!("rxpath exec's accounting does not hold: {text}");
    }
    Ok(text)
}

fn start(s: Server, t: &Topology, a: &RrArgs, cpu: Option<usize>) -> Result<Running> {
    match s {
        Server::ExecSleep => start_exec(t, 0, cpu, a.tcp),
        Server::ExecBusy => start_exec(t, a.busy_poll, cpu, a.tcp),
        Server::Kernel | Server::KernelBusy => {
            let busy = if s == Server::KernelBusy {
                a.busy_poll.to_string()
            } else {
                "0".into()
            };
            write_sysctl("busy_read", &busy)?;
            write_sysctl("busy_poll", &busy)?;
            // Kernel busy polling needs a NAPI on the veth: GRO gives it one.
            let gro = if s == Server::KernelBusy { "on" } else { "off" };
            let st = Command::new("ethtool")
                .args(["-K", &t.host_if, "gro", gro])
                .status()
                .context("running ethtool")?;
            anyhow::ensure!(
                st.success(),
                "ethtool -K {} gro {gro} failed ({st}): the kernel row would run without its NAPI",
                t.host_if
            );
            let mut cmd = match cpu {
                Some(c) => {
                    let mut t = Command::new("taskset");
                    t.args(["-c", &c.to_string(), "sockperf"]);
                    t
                }
                None => Command::new("sockperf"),
            };
            cmd.args(["server", "-i", HOST_ADDR, "-p", &PORT.to_string()]);
            if a.tcp {
                cmd.arg("--tcp");
            }
            Ok(Running::Kernel(crate::harness::Peer::spawn(
                "sockperf server",
                cmd,
            )?))
        }
        _ => {
            let (busy, prefer, xsk) = match s {
                Server::RxpathBusy | Server::RxpathBusyPacketTx => (a.busy_poll, 0, 0),
                Server::RxpathPrefer => (a.busy_poll, a.prefer_ns, 0),
                Server::RxpathXsk => (a.busy_poll, 0, a.busy_poll),
                Server::RxpathPacket => (a.busy_poll, 0, 0),
                _ => (0, 0, 0),
            };
            let args = EchoArgs {
                tcp: a.tcp,
                busy_poll: busy,
                prefer_busy_poll: prefer,
                xdp_busy_poll: xsk,
                // Replies through the TX ring of the socket the requests
                // came in on, or (to show what that buys) AF_PACKET.
                tx: if s == Server::RxpathBusyPacketTx {
                    rxpath_cli::echo::EchoTx::Packet
                } else {
                    rxpath_cli::echo::EchoTx::Ring
                },
                // The fallback where XDP cannot be used: AF_PACKET, with a
                // frame handed over as soon as the kernel wrote it.
                mode: if s == Server::RxpathPacket {
                    BackendArg::Packet
                } else {
                    BackendArg::Xdp
                },
                ..echo_args(&t.host_if)
            };
            // Started from a thread pinned to the server CPU: every thread
            // of the host inherits it.
            let h = std::thread::spawn(move || {
                if let Some(c) = cpu {
                    core_affinity_pin(c);
                }
                EchoServer::start(&args)
            });
            let server = h
                .join()
                .map_err(|_| anyhow::anyhow!("echo start panicked"))??;
            Ok(Running::Rxpath(Box::new(server)))
        }
    }
}

/// `rxpath echo` as the request/response benches run it: AF_XDP on
/// `iface`, one queue, one reader, one NAPI thread, sockperf mode on
/// [`PORT`], interrupts, no busy polling, no steering.
pub(crate) fn echo_args(iface: &str) -> EchoArgs {
    EchoArgs {
        iface: iface.to_string(),
        mode: BackendArg::Xdp,
        bind: std::net::Ipv4Addr::UNSPECIFIED.into(),
        port: PORT,
        tcp: false,
        queues: Some(1),
        threads: 1,
        napi_threads: 1,
        busy_poll: 0,
        napi: ModeArg::Interrupt,
        prefer_busy_poll: 0,
        gro_flush_timeout: 0,
        defer_hard_irqs: 0,
        xdp_busy_poll: 0,
        sockperf: true,
        no_verify_csum: false,
        csum: Default::default(),
        filt: Default::default(),
        steer: Default::default(),
        metrics: None,
        metrics_hold: None,
        reader_cpus: None,
        only_v6: false,
        xdp_take: rxpath_cli::echo::EchoTake::Port,
        tx: rxpath_cli::echo::EchoTx::Ring,
        tx_stall: None,
        tx_stall_every: 200,
        duration: None,
        json: false,
    }
}

/// Pin the calling thread to `cpu`; a failure is said (the run goes on
/// unpinned, which its figures then reflect).
fn core_affinity_pin(cpu: usize) {
    if let Err(e) = sched::pin(0, cpu) {
        eprintln!("rxpath bench: could not pin the server to CPU {cpu}: {e}");
    }
}

fn stop(r: Running) -> Result<String> {
    match r {
        Running::Rxpath(s) => {
            let rep = crate::rr::stop_echo(*s)?;
            Ok(format!(
                "busy-poll packets {}, sleeps {}",
                rep.host.sock.busy_poll_packets, rep.socket.sleeps
            ))
        }
        Running::Kernel(peer) => {
            peer.kill()?;
            Ok(String::new())
        }
        Running::Exec(peer, out) => Ok(stop_exec(peer, out)?
            .lines()
            .find(|l| l.starts_with("frames:"))
            .unwrap_or("")
            .to_string()),
    }
}

/// Stop an rxpath echo server; losing a frame fails the run.
pub(crate) fn stop_echo(s: EchoServer) -> Result<rxpath_cli::echo::EchoReport> {
    let rep = s.stop()?;
    if rep.host.frames_home != rep.host.frames_total {
        bail!(
            "rxpath echo lost frames: {}/{} home",
            rep.host.frames_home,
            rep.host.frames_total
        );
    }
    Ok(rep)
}

/// A request/response bench needs root (a veth lab, XDP) and sockperf (the
/// client and the kernel's server); say which is missing.
pub(crate) fn require_root_and_sockperf(bench: &str, why_root: &str) -> Result<()> {
    if !sched::is_root() {
        bail!("bench {bench} needs root ({why_root}): run it with sudo");
    }
    if Command::new("sockperf")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_err()
    {
        bail!("bench {bench} needs sockperf (the client and the kernel's server): apt-get install sockperf");
    }
    Ok(())
}

/// One client run against the server just started, with the server CPU's
/// busy share over it; `None` if the server never answered.
fn serve_one(
    a: &RrArgs,
    t: &Topology,
    (client_cpu, server_cpu): (Option<usize>, Option<usize>),
    samples: bool,
) -> Result<Option<(Measure, Vec<f64>)>> {
    let extra: &[&str] = if a.tcp { &["--tcp"] } else { &[] };
    if !ready(t, a.size, extra)? {
        return Ok(None);
    }
    let before = server_cpu.and_then(cpu_jiffies);
    let m = client(
        t,
        a.duration.as_secs().max(1),
        a.size,
        client_cpu,
        samples,
        extra,
    )?;
    let after = server_cpu.and_then(cpu_jiffies);
    Ok(m.map(|(mut m, rtts)| {
        if let (Some(b), Some(a)) = (before, after) {
            let total = a.1.saturating_sub(b.1);
            m.server_busy = (total > 0).then(|| a.0.saturating_sub(b.0) as f64 / total as f64);
        }
        (m, rtts)
    }))
}

/// The medians over rounds per server, and each against the kernel.
fn print_table(results: &[Vec<Option<Measure>>], chosen: &dyn Fn(Server) -> bool) {
    let at = |s: Server| Server::ALL.iter().position(|&x| x == s).unwrap_or(0);
    let (k, kb) = (at(Server::Kernel), at(Server::KernelBusy));
    // A ratio is taken inside each round, then the median over rounds.
    // A round where either side got no answer gives no ratio; no round
    // with both, "not measured".
    let ratio = |i: usize, base: usize, f: fn(&Measure) -> f64| {
        let v: Vec<f64> = results
            .iter()
            .filter_map(|row| figure::ratio(row[i].map(|m| f(&m)), row[base].map(|b| f(&b))))
            .collect();
        ratio_cell(finite(median(v)), 2)
    };
    println!(
        "\n{:40} {:>12} {:>9} {:>9} {:>12} {:>10} {:>13}",
        "median over rounds",
        "round trips/s",
        "avg µs",
        "p99 µs",
        "x kernel RT/s",
        "x kernel p99",
        "x k-busy RT/s"
    );
    for (i, s) in Server::ALL.iter().enumerate() {
        if !chosen(*s) {
            continue;
        }
        if results.iter().all(|row| row[i].is_none()) {
            println!("{:40} not measured: no answer in any round", s.name());
            crate::harness::peer_not_measured(s.name(), "no answer in any round");
            continue;
        }
        let col = |f: fn(&Measure) -> f64| crate::harness::column_median(results, i, f);
        println!(
            "{:40} {:>12.0} {:>9.2} {:>9.2} {:>13} {:>10} {:>13}",
            s.name(),
            col(|m| m.rt_per_s),
            col(|m| m.avg_us),
            col(|m| m.p99_us),
            ratio(i, k, |m| m.rt_per_s),
            ratio(i, k, |m| m.p99_us),
            ratio(i, kb, |m| m.rt_per_s),
        );
    }
}

pub fn rr(a: RrArgs, rep: &mut Option<ReportDir>) -> Result<ExitCode> {
    require_root_and_sockperf("rr", "it builds a veth lab and attaches XDP")?;
    let t = Topology {
        ns: "rxp-rr".into(),
        host_if: "rxprr0".into(),
        peer_if: "rxprr1".into(),
        queues: 1,
        gro: false,
        threaded: false,
    };
    let guard = t.up_scoped()?;
    let t = &guard.0;
    let _restore = Restore {
        busy: (read_sysctl("busy_read"), read_sysctl("busy_poll")),
        iface: t.host_if.clone(),
    };
    // The peer keeps its checksum offload (the default): its partial
    // checksums are trusted as the kernel trusts them (`--csum auto`).
    let (client_cpu, server_cpu) = crate::harness::client_server_cpus();
    println!(
        "rxpath bench rr: sockperf ping-pong, {}-byte {}, {}s per run, {} round(s); veth {} <- {} (netns {}); client on CPU {}, server on CPU {}; busy poll {} µs, prefer {} ns",
        a.size,
        proto(&a),
        a.duration.as_secs(),
        a.rounds,
        t.host_if,
        t.peer_if,
        t.ns,
        crate::harness::cpu_name(client_cpu),
        crate::harness::cpu_name(server_cpu),
        a.busy_poll,
        a.prefer_ns
    );
    for k in &a.servers {
        if !Server::ALL.iter().any(|s| s.key() == k) {
            let keys: Vec<&str> = Server::ALL.iter().map(|s| s.key()).collect();
            bail!("unknown server {k:?}: {}", keys.join(", "));
        }
    }
    // The exec rows run this binary's preload library; without it they
    // are said not measured, and the rest runs.
    let preload = rxpath_cli::exec::find_preload();
    if let Err(e) = &preload {
        for s in [Server::ExecSleep, Server::ExecBusy] {
            if a.servers.is_empty() || a.servers.iter().any(|k| k == s.key()) {
                println!("{:40} not measured: {e}", s.name());
                crate::harness::peer_not_measured(s.name(), &e.to_string());
            }
        }
    }
    let chosen = |s: Server| {
        if matches!(s, Server::ExecSleep | Server::ExecBusy) && preload.is_err() {
            return false;
        }
        a.servers.is_empty() || s == Server::Kernel || a.servers.iter().any(|k| k == s.key())
    };
    // results[round][config]: None when the configuration was not run or
    // got no answer that round.
    let mut results: Vec<Vec<Option<Measure>>> = Vec::new();
    // Every round trip of every round, per server (for the CDFs).
    let mut rtts: Vec<Vec<f64>> = vec![Vec::new(); Server::ALL.len()];
    let runs = Server::ALL.iter().filter(|s| chosen(**s)).count() as u64;
    let pb = progress(a.rounds as u64 * runs, "rr");
    let order: Vec<usize> = (0..Server::ALL.len()).collect();
    for round in 0..a.rounds {
        let mut row = vec![None; Server::ALL.len()];
        // Every other round in the reverse order: a drift favours none.
        for i in in_turn(&order, round) {
            let s = Server::ALL[i];
            if !chosen(s) {
                continue;
            }
            pb.set_message(s.name());
            let r = start(s, t, &a, server_cpu)?;
            let m = serve_one(&a, t, (client_cpu, server_cpu), rep.is_some())?;
            let m = m.map(|(m, samples)| {
                rtts[i].extend(samples);
                m
            });
            let note = stop(r)?;
            pb.inc(1);
            match m {
                Some(m) => {
                    say(&pb, &format!(
                        "  round {round}: {:40} {:9.0} round trips/s  avg {:6.2} µs  p99 {:6.2} µs  server CPU {}  {note}",
                        s.name(),
                        m.rt_per_s,
                        m.avg_us,
                        m.p99_us,
                        m.server_busy.map_or("n/a".into(), |b| format!("{:.0} %", b * 100.0)),
                    ));
                    row[i] = Some(m);
                }
                None => say(&pb, &format!("  round {round}: {:40} no answer", s.name())),
            }
        }
        results.push(row);
    }
    pb.finish_and_clear();
    print_table(&results, &chosen);
    if let Some(rep) = rep {
        report(rep, &a, &results, &rtts, &chosen)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The transport the run measures.
fn proto(a: &RrArgs) -> &'static str {
    if a.tcp {
        "TCP"
    } else {
        "UDP"
    }
}

/// The report of `bench rr`: every round of every server, the latency
/// CDFs, and the server's CPU per round trip.
fn report(
    rep: &mut ReportDir,
    a: &RrArgs,
    results: &[Vec<Option<Measure>>],
    rtts: &[Vec<f64>],
    chosen: &dyn Fn(Server) -> bool,
) -> Result<()> {
    // µs of the server's CPU per round trip: its busy share over the rate.
    let cpu_us = |m: &Measure| {
        m.server_busy
            .filter(|_| m.rt_per_s > 0.0)
            .map(|b| b * 1e6 / m.rt_per_s)
    };
    let servers: Vec<(usize, Server)> = Server::ALL
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, s)| chosen(*s))
        .collect();
    let j = serde_json::json!({
        "protocol": proto(a),
        "size": a.size, "duration_s": a.duration.as_secs(), "rounds": a.rounds,
        "busy_poll_us": a.busy_poll, "prefer_ns": a.prefer_ns,
        "servers": servers.iter().map(|&(i, s)| serde_json::json!({
            "server": s.key(), "name": s.name(),
            "rounds": results.iter().map(|row| row[i].map(|m| serde_json::json!({
                "round_trips_per_s": m.rt_per_s, "avg_rtt_us": m.avg_us, "p99_rtt_us": m.p99_us,
                "server_cpu_busy": m.server_busy, "server_cpu_us_per_round_trip": cpu_us(&m),
            }))).collect::<Vec<_>>(),
            "samples": rtts[i].len(),
        })).collect::<Vec<_>>(),
    });
    let name = |n: &str| {
        if a.tcp {
            format!("{n}-tcp")
        } else {
            n.to_string()
        }
    };
    rep.json(&name("rr"), &j)?;
    let cdfs: Vec<(String, Vec<f64>)> = servers
        .iter()
        .filter(|(i, _)| !rtts[*i].is_empty())
        .map(|&(i, s)| (s.name().to_string(), rtts[i].clone()))
        .collect();
    if !cdfs.is_empty() {
        rep.cdf(
            &name("rr-latency-cdf"),
            &format!(
                "sockperf ping-pong, {}-byte {}: round-trip time, every round",
                a.size,
                proto(a)
            ),
            "round-trip time, µs (log scale)",
            &cdfs,
        )?;
    }
    let per = |f: &dyn Fn(&Measure) -> Option<f64>| -> Vec<Bar> {
        servers
            .iter()
            .map(|&(i, s)| {
                let v: Vec<f64> = results
                    .iter()
                    .filter_map(|row| f(row[i].as_ref()?))
                    .collect();
                Bar::of(s.name(), &v, 1.0)
            })
            .collect()
    };
    rep.bars(
        &name("rr-round-trips"),
        "Round trips per second per server (median, range of rounds)",
        "thousand round trips per second",
        &per(&|m| Some(m.rt_per_s / 1e3)),
    )?;
    rep.bars(
        &name("rr-server-cpu"),
        "Server CPU per round trip (its core, user + system + softirq)",
        "µs of the server's core per round trip (median, range)",
        &per(&cpu_us),
    )?;
    Ok(())
}
