//! `rxpath bench tcp`: seed 004's TCP experiment on rxpath's TCP. A bulk
//! TCP sender in the peer namespace (the kernel's, one flow, as fast as it
//! can) into a receiver that reads and discards: rxpath's TCP on
//! AF_XDP with `gro_flush_timeout` 0 and N ns, and the kernel's socket on
//! the same veth (its GRO on, the same two timeouts) beside it. What the
//! receiver's TCP sends back is ACKs: ACKs per second, the data rate, the
//! frames the device delivered and the receiver's CPU, rounds interleaved.
//!
//! Seed 000's TCP round trips are `bench rr --tcp`.

use crate::figure::{self, in_turn, ratio_cell};
use crate::harness::median;
use crate::plot::{progress, say, Bar, ReportDir};
use crate::sockperf::cpu_jiffies;
use anyhow::{bail, Context, Result};
use rxpath_os::sched;
use rxpath_runtime::lab::{mac_in, Topology, HOST_ADDR, PEER_ADDR};
use rxpath_runtime::{Host, HostConfig, HostDevice};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// Arguments of this bench.
#[derive(Debug, Clone, clap::Args)]
pub struct TcpBenchArgs {
    /// Sender run per configuration.
    #[arg(long, default_value = "3s", value_parser = rxpath_cli::parse::parse_duration)]
    pub duration: Duration,
    /// Rounds (each runs every configuration once; medians are compared).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// The gro_flush_timeout compared with 0, in ns (the seed: 2000).
    #[arg(long, default_value_t = 2000)]
    pub flush_ns: u64,
    /// Pace the sender at this many Mbit/s (a `tbf` qdisc two packets
    /// deep on the peer's interface), so packets arrive spread out as
    /// from a NIC rather than in bursts; 0: unpaced.
    #[arg(long, default_value_t = 0)]
    pub pace_mbit: u64,
    /// The sender's TSO and GSO (`ethtool -K PEER tso off gso off` when
    /// off: it sends MSS-sized packets, one at a time, as seed 004's
    /// sender on a wire).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub peer_tso: bool,
}

/// The TCP port the receivers listen on.
const PORT: u16 = 5201;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Receiver {
    Rxpath(u64),
    Kernel(u64),
}

impl Receiver {
    fn name(self) -> String {
        match self {
            Receiver::Rxpath(ns) => format!("rxpath TCP, gro_flush_timeout {ns} ns"),
            Receiver::Kernel(ns) => format!("kernel TCP, gro_flush_timeout {ns} ns"),
        }
    }

    fn key(self) -> String {
        match self {
            Receiver::Rxpath(ns) => format!("rxpath-{ns}"),
            Receiver::Kernel(ns) => format!("kernel-{ns}"),
        }
    }
}

/// One receiver's run.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Measure {
    /// Data received, Gbit/s.
    gbit_s: f64,
    /// Segments the receiver's TCP sent (ACKs), per second.
    acks_s: f64,
    /// Segments (GRO packets included, each once) its TCP took, per second.
    segs_in_s: f64,
    /// The receiver CPU's busy share over the run.
    server_busy: Option<f64>,
}

/// `Tcp:` counter `name` of the calling thread's namespace
/// (`/proc/net/snmp`).
fn kernel_tcp(name: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut rows = text.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (rows.next()?, rows.next()?);
    let i = names.split_whitespace().position(|n| n == name)?;
    values.split_whitespace().nth(i)?.parse().ok()
}

/// The kernel sender in the peer namespace: one connection to the
/// receiver, written to as fast as it goes for `dur`; the bytes it wrote.
fn send(t: &Topology, to: SocketAddr, dur: Duration) -> Result<u64> {
    let path = format!("/run/netns/{}", t.ns);
    let h = std::thread::spawn(move || -> Result<u64> {
        sched::enter_netns(&path).context("entering the peer namespace")?;
        // The port may still be the last receiver's for a moment (its XDP
        // program going): a SYN lost there is tried again, for a while.
        let give_up = Instant::now() + Duration::from_secs(15);
        let c = loop {
            match TcpStream::connect_timeout(&to, Duration::from_secs(3)) {
                Ok(c) => break c,
                Err(_) if Instant::now() < give_up => {
                    std::thread::sleep(Duration::from_millis(200))
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("connecting to the receiver at {to}"))
                }
            }
        };
        let buf = vec![0x5au8; 64 << 10];
        let end = Instant::now() + dur;
        let mut sent = 0u64;
        let mut w = &c;
        while Instant::now() < end {
            sent += w.write(&buf)? as u64;
        }
        c.shutdown(std::net::Shutdown::Write)?;
        Ok(sent)
    });
    h.join()
        .map_err(|_| anyhow::anyhow!("the sender panicked"))?
}

/// Read `read` to the end of its stream: the bytes, and the time from the
/// first read on.
fn drain(mut read: impl FnMut(&mut [u8]) -> std::io::Result<usize>) -> Result<(u64, Duration)> {
    let t0 = Instant::now();
    let mut buf = vec![0u8; 256 << 10];
    let mut got = 0u64;
    loop {
        match read(&mut buf)? {
            0 => return Ok((got, t0.elapsed())),
            n => got += n as u64,
        }
    }
}

/// One flow into a receiver: `reader` (on a thread pinned to `cpu`)
/// accepts and drains it while the kernel sender in the peer namespace
/// writes for `a.duration`; `counters` reads the receiver's TCP (sent,
/// taken) segments before and after. If the sender fails, `abort` ends
/// the reader's wait (its accept) and the sender's error is returned.
fn one_flow(
    t: &Topology,
    a: &TcpBenchArgs,
    cpu: Option<usize>,
    (counters, abort): (&dyn Fn() -> (u64, u64), &dyn Fn()),
    reader: impl FnOnce() -> Result<(u64, Duration)> + Send,
) -> Result<Measure> {
    let addr: SocketAddr = format!("{HOST_ADDR}:{PORT}").parse()?;
    std::thread::scope(|sc| {
        let r = sc.spawn(move || {
            if let Some(c) = cpu {
                let _ = sched::pin(0, c);
            }
            reader()
        });
        let before = (counters(), cpu.and_then(cpu_jiffies));
        if let Err(e) = send(t, addr, a.duration) {
            abort();
            let _ = r.join();
            return Err(e);
        }
        let (got, took) = r
            .join()
            .map_err(|_| anyhow::anyhow!("the reader panicked"))??;
        let after = (counters(), cpu.and_then(cpu_jiffies));
        let secs = took.as_secs_f64().max(1e-3);
        Ok(Measure {
            gbit_s: got as f64 * 8.0 / secs / 1e9,
            acks_s: after.0 .0.saturating_sub(before.0 .0) as f64 / secs,
            segs_in_s: after.0 .1.saturating_sub(before.0 .1) as f64 / secs,
            server_busy: busy(before.1, after.1),
        })
    })
}

/// One rxpath receiver run: a host with TCP and GRO, `flush` ns of
/// `gro_flush_timeout`, its threads started from one pinned to `cpu`.
fn run_rxpath(t: &Topology, flush: u64, a: &TcpBenchArgs, cpu: Option<usize>) -> Result<Measure> {
    let iface = t.host_if.clone();
    let start = move || -> Result<Host> {
        if let Some(c) = cpu {
            let _ = sched::pin(0, c);
        }
        let cfg = HostConfig {
            queues: 0,
            tcp: true,
            gro: true,
            gro_flush_timeout_ns: flush,
            ..HostConfig::default()
        };
        Ok(Host::start(cfg, HostDevice::xdp_ports(&iface, 6))?)
    };
    let host = std::thread::spawn(start)
        .join()
        .map_err(|_| anyhow::anyhow!("starting the host panicked"))??;
    host.sockets()
        .add_neighbor(PEER_ADDR.parse()?, mac_in(&t.ns, &t.peer_if)?);
    let l = host.tcp_listen(format!("{HOST_ADDR}:{PORT}").parse()?, 4)?;
    let counters = || {
        let (c, _) = host.tcp_counters().unwrap_or_default();
        let get = |n: &str| c.iter().find(|(k, _)| k == n).map_or(0, |(_, v)| *v);
        (get("Tcp:OutSegs"), get("Tcp:InSegs"))
    };
    let m = one_flow(t, a, cpu, (&counters, &|| l.close()), || {
        let (s, _) = l.accept()?;
        drain(|b| s.read(b))
    });
    drop(l);
    let rep = host.shutdown();
    if rep.frames_home != rep.frames_total {
        bail!(
            "rxpath lost frames: {}/{} home",
            rep.frames_home,
            rep.frames_total
        );
    }
    m
}

/// The busy share of a CPU between two `/proc/stat` readings.
fn busy(b: Option<(u64, u64)>, a: Option<(u64, u64)>) -> Option<f64> {
    let (b, a) = (b?, a?);
    let total = a.1.saturating_sub(b.1);
    (total > 0).then(|| a.0.saturating_sub(b.0) as f64 / total as f64)
}

/// One kernel receiver run on the veth's host end: GRO on, `flush` ns of
/// `gro_flush_timeout`, a reader pinned to `cpu`.
fn run_kernel(t: &Topology, flush: u64, a: &TcpBenchArgs, cpu: Option<usize>) -> Result<Measure> {
    let dev = &t.host_if;
    let st = Command::new("ethtool")
        .args(["-K", dev, "gro", "on"])
        .stderr(Stdio::null())
        .status()
        .context("running ethtool")?;
    anyhow::ensure!(st.success(), "ethtool -K {dev} gro on failed ({st})");
    let knob = format!("/sys/class/net/{dev}/gro_flush_timeout");
    std::fs::write(&knob, flush.to_string()).context("setting gro_flush_timeout")?;
    let addr: SocketAddr = format!("{HOST_ADDR}:{PORT}").parse()?;
    let l = TcpListener::bind(addr).context("the kernel's listener")?;
    let c = |n| kernel_tcp(n).unwrap_or(0);
    // The reader's accept ends on a connection of our own, closed at once.
    let abort = || drop(TcpStream::connect_timeout(&addr, Duration::from_secs(1)));
    let counters = || (c("OutSegs"), c("InSegs"));
    let m = one_flow(t, a, cpu, (&counters, &abort), || {
        let (mut s, _) = l.accept()?;
        drain(|b| s.read(b))
    });
    let _ = std::fs::write(&knob, "0");
    m
}

/// The sender's side as `a` asks: its TSO and GSO, a qdisc pacing it.
fn shape_sender(t: &Topology, a: &TcpBenchArgs) -> Result<()> {
    let run = |args: &[&str]| -> Result<()> {
        let st = Command::new("ip")
            .args(["netns", "exec", &t.ns])
            .args(args)
            .stderr(Stdio::null())
            .status()
            .with_context(|| format!("running {}", args[0]))?;
        anyhow::ensure!(st.success(), "{} failed ({st})", args.join(" "));
        Ok(())
    };
    if !a.peer_tso {
        run(&["ethtool", "-K", &t.peer_if, "tso", "off", "gso", "off"])?;
    }
    if a.pace_mbit > 0 {
        let rate = format!("{}mbit", a.pace_mbit);
        // A token bucket two packets deep: the flow leaves spread at the
        // rate (tbf is what this kernel has; fq and netem may be absent).
        let q = ["tbf", "rate", &rate, "burst", "4kb", "latency", "50ms"];
        let mut args = vec!["tc", "qdisc", "replace", "dev", &t.peer_if, "root"];
        args.extend_from_slice(&q);
        run(&args)?;
    }
    Ok(())
}

/// `rxpath bench tcp`.
pub fn tcp(a: TcpBenchArgs, rep: &mut Option<ReportDir>) -> Result<ExitCode> {
    if !sched::is_root() {
        bail!("bench tcp needs root (it builds a veth lab and attaches XDP): run it with sudo");
    }
    let t = Topology::named("btcp");
    let guard = t.up_scoped()?;
    let t = &guard.0;
    shape_sender(t, &a)?;
    let (_, server_cpu) = crate::harness::client_server_cpus();
    let receivers = [
        Receiver::Rxpath(0),
        Receiver::Rxpath(a.flush_ns),
        Receiver::Kernel(0),
        Receiver::Kernel(a.flush_ns),
    ];
    println!(
        "rxpath bench tcp: one bulk TCP flow from the kernel in netns {} over veth {} into a reader that discards, {}s per run, {} round(s); sender {}, TSO {}; receiver on CPU {}",
        t.ns,
        t.host_if,
        a.duration.as_secs_f64(),
        a.rounds,
        if a.pace_mbit > 0 { format!("paced at {} Mbit/s", a.pace_mbit) } else { "unpaced".into() },
        if a.peer_tso { "on" } else { "off" },
        crate::harness::cpu_name(server_cpu),
    );
    let pb = progress((a.rounds * receivers.len()) as u64, "tcp");
    let order: Vec<usize> = (0..receivers.len()).collect();
    let mut results: Vec<Vec<Option<Measure>>> = Vec::new();
    for round in 0..a.rounds {
        let mut row = vec![None; receivers.len()];
        for i in in_turn(&order, round) {
            let r = receivers[i];
            pb.set_message(r.name());
            let m = match r {
                Receiver::Rxpath(ns) => run_rxpath(t, ns, &a, server_cpu),
                Receiver::Kernel(ns) => run_kernel(t, ns, &a, server_cpu),
            };
            pb.inc(1);
            match m {
                Ok(m) => {
                    say(&pb, &format!(
                        "  round {round}: {:42} {:6.2} Gbit/s  ACKs {:9.0}/s  segments in {:9.0}/s  receiver CPU {}",
                        r.name(), m.gbit_s, m.acks_s, m.segs_in_s,
                        m.server_busy.map_or("n/a".into(), |b| format!("{:.0} %", b * 100.0)),
                    ));
                    row[i] = Some(m);
                }
                Err(e) => say(
                    &pb,
                    &format!("  round {round}: {:42} failed: {e:#}", r.name()),
                ),
            }
        }
        results.push(row);
    }
    pb.finish_and_clear();
    print_table(&results, &receivers);
    if let Some(rep) = rep {
        report(rep, &a, &results, &receivers)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Within each round, `f` of receiver `i` over receiver `j`; the median
/// over rounds as a cell.
fn round_ratio(
    results: &[Vec<Option<Measure>>],
    (i, j): (usize, usize),
    f: fn(&Measure) -> f64,
) -> Option<f64> {
    let v: Vec<f64> = results
        .iter()
        .filter_map(|row| figure::ratio(row[i].map(|m| f(&m)), row[j].map(|m| f(&m))))
        .collect();
    (!v.is_empty()).then(|| median(v))
}

fn print_table(results: &[Vec<Option<Measure>>], receivers: &[Receiver]) {
    println!(
        "\n{:42} {:>8} {:>11} {:>13} {:>9}",
        "median over rounds", "Gbit/s", "ACKs/s", "segments in/s", "CPU"
    );
    for (i, r) in receivers.iter().enumerate() {
        let col = |f: fn(&Measure) -> f64| crate::harness::column_median(results, i, f);
        if results.iter().all(|row| row[i].is_none()) {
            println!("{:42} not measured: every run failed", r.name());
            crate::harness::peer_not_measured(&r.name(), "every run failed");
            continue;
        }
        println!(
            "{:42} {:>8.2} {:>11.0} {:>13.0} {:>8.0}%",
            r.name(),
            col(|m| m.gbit_s),
            col(|m| m.acks_s),
            col(|m| m.segs_in_s),
            col(|m| m.server_busy.unwrap_or(f64::NAN)) * 100.0,
        );
    }
    for (name, (z, n)) in [("rxpath", (0, 1)), ("kernel", (2, 3))] {
        println!(
            "{name}: ACKs/s with gro_flush_timeout 0 over with it set: {} (seed 004: 16x; target >= 10x); data rate with it set over 0: {} (target >= 0.95x)",
            ratio_cell(round_ratio(results, (z, n), |m| m.acks_s), 1),
            ratio_cell(round_ratio(results, (n, z), |m| m.gbit_s), 2),
        );
    }
    println!(
        "rxpath over the kernel, Gbit/s per receiver CPU share, gro_flush_timeout set: {}",
        ratio_cell(
            round_ratio(results, (1, 3), |m| m.gbit_s
                / m.server_busy.unwrap_or(f64::NAN)),
            2
        ),
    );
}

fn report(
    rep: &mut ReportDir,
    a: &TcpBenchArgs,
    results: &[Vec<Option<Measure>>],
    receivers: &[Receiver],
) -> Result<()> {
    let j = serde_json::json!({
        "duration_s": a.duration.as_secs_f64(), "rounds": a.rounds,
        "flush_ns": a.flush_ns, "pace_mbit": a.pace_mbit, "peer_tso": a.peer_tso,
        "receivers": receivers.iter().enumerate().map(|(i, r)| serde_json::json!({
            "receiver": r.key(), "name": r.name(),
            "rounds": results.iter().map(|row| row[i]).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "acks_ratio_rxpath": round_ratio(results, (0, 1), |m| m.acks_s),
        "rate_ratio_rxpath": round_ratio(results, (1, 0), |m| m.gbit_s),
        "acks_ratio_kernel": round_ratio(results, (2, 3), |m| m.acks_s),
        "rate_ratio_kernel": round_ratio(results, (3, 2), |m| m.gbit_s),
    });
    rep.json("tcp", &j)?;
    let per = |f: fn(&Measure) -> f64, scale: f64| -> Vec<Bar> {
        receivers
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let v: Vec<f64> = results
                    .iter()
                    .filter_map(|row| row[i])
                    .map(|m| f(&m))
                    .collect();
                Bar::of(r.name(), &v, scale)
            })
            .collect()
    };
    rep.bars(
        "tcp-acks",
        "ACKs a bulk TCP receiver sends, gro_flush_timeout 0 and set (seed 004)",
        "thousand ACKs per second (median, range of rounds)",
        &per(|m| m.acks_s, 1e-3),
    )?;
    rep.bars(
        "tcp-throughput",
        "One bulk TCP flow into a reader that discards",
        "Gbit/s (median, range of rounds)",
        &per(|m| m.gbit_s, 1.0),
    )?;
    Ok(())
}
