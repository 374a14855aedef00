//! `rxpath bench rfs`: seed 002's experiment. UDP (or, with `--tcp`, TCP)
//! request/response on the lab veth (`sockperf ping-pong` in the peer
//! namespace) into a reader pinned to one CPU, with RPS (the flow's hash
//! picks the worker) and with RFS (the worker the reader reads on), on
//! rxpath echo and, as the reference in the same run, on the kernel's own
//! RPS/RFS over the same veth (`rps_cpus`, `rps_flow_cnt`,
//! `net.core.rps_sock_flow_entries`) with a kernel echo socket: for UDP
//! one that connects to its client, as the kernel's RFS needs (it records
//! flows of TCP and connected UDP sockets only), for TCP the accepted
//! connection.

mod kernel;

use crate::figure::{cell, finite, in_turn, ratio, target, target_in, Bound, Unit, Verdict};
use crate::harness::median;
use crate::plot::{progress, say, Bar, ReportDir};
use crate::rr::{read_sysctl, write_sysctl};
use crate::sockperf::{client, ready, Measure, PORT};
use anyhow::{bail, Context, Result};
use clap::Args;
use kernel::KernelEcho;
use rxpath_cli::echo::EchoArgs;
use rxpath_cli::echo::EchoServer;
use rxpath_core::steer::reciprocal_scale;
use rxpath_core::steer::SteerMode;
use rxpath_runtime::lab::{Topology, HOST_ADDR, PEER_ADDR};
use rxpath_wire::{hash::flow_hash, FlowKey};
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of this bench.
#[derive(Debug, Clone, Args)]
pub struct RfsBenchArgs {
    /// Client run per configuration.
    #[arg(long, default_value = "3s", value_parser = rxpath_cli::parse::parse_duration)]
    pub duration: Duration,
    /// Rounds (each runs every configuration once; medians are compared).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Message size, bytes.
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    /// TCP flows (seed 002 steered TCP): `sockperf --tcp` against `rxpath
    /// echo --tcp` on rxpath's TCP, whose reads record the reader's CPU,
    /// and the kernel's TCP socket read on the reader's CPU.
    #[arg(long)]
    pub tcp: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Server {
    RxpathRps,
    RxpathRfs,
    KernelRps,
    KernelRfs,
}

impl Server {
    const ALL: [Server; 4] = [
        Server::RxpathRps,
        Server::RxpathRfs,
        Server::KernelRps,
        Server::KernelRfs,
    ];
    fn name(self, tcp: bool) -> &'static str {
        match (self, tcp) {
            (Server::RxpathRps, false) => "rxpath echo, --steer rps",
            (Server::RxpathRfs, false) => "rxpath echo, --steer rfs",
            (Server::KernelRps, false) => "kernel UDP (connected), RPS",
            (Server::KernelRfs, false) => "kernel UDP (connected), RFS",
            (Server::RxpathRps, true) => "rxpath echo --tcp, --steer rps",
            (Server::RxpathRfs, true) => "rxpath echo --tcp, --steer rfs",
            (Server::KernelRps, true) => "kernel TCP, RPS",
            (Server::KernelRfs, true) => "kernel TCP, RFS",
        }
    }
}

/// The RPS/RFS knobs of the veth's RX queue and the global table, put
/// back on every way out.
struct Knobs {
    iface: String,
    rps_cpus: String,
    rps_flow_cnt: String,
    sock_flow_entries: String,
}

impl Knobs {
    fn path(&self, f: &str) -> String {
        format!("/sys/class/net/{}/queues/rx-0/{f}", self.iface)
    }
    fn save(iface: &str) -> Knobs {
        let mut k = Knobs {
            iface: iface.to_string(),
            rps_cpus: String::new(),
            rps_flow_cnt: String::new(),
            sock_flow_entries: read_sysctl("rps_sock_flow_entries"),
        };
        k.rps_cpus = std::fs::read_to_string(k.path("rps_cpus"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "0".into());
        k.rps_flow_cnt = std::fs::read_to_string(k.path("rps_flow_cnt"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "0".into());
        k
    }
    fn set(&self, cpus: &str, flow_cnt: usize, sock_entries: usize) -> Result<()> {
        std::fs::write(self.path("rps_cpus"), cpus).context("writing rps_cpus")?;
        std::fs::write(self.path("rps_flow_cnt"), flow_cnt.to_string())
            .context("writing rps_flow_cnt")?;
        write_sysctl("rps_sock_flow_entries", &sock_entries.to_string())
    }
}

impl Drop for Knobs {
    fn drop(&mut self) {
        let _ = std::fs::write(self.path("rps_cpus"), &self.rps_cpus);
        let _ = std::fs::write(self.path("rps_flow_cnt"), &self.rps_flow_cnt);
        let _ = write_sysctl("rps_sock_flow_entries", &self.sock_flow_entries);
    }
}

/// One configuration's result in one round: what the client measured and,
/// for rxpath, the packets each worker processed.
type Cell = Option<(Measure, Option<PerWorker>)>;

/// rxpath's workers at the end of a round.
#[derive(Debug, Clone, serde::Serialize)]
struct PerWorker {
    /// Packets each worker's backlog processed.
    processed: Vec<u64>,
    /// Of those, what the reader ran itself while it waited in `recv`.
    reader_ran: Vec<u64>,
}

enum Running {
    Rxpath(Box<EchoServer>),
    Kernel(KernelEcho),
}

fn start(s: Server, lab: &Lab) -> Result<Running> {
    let (t, knobs, reader, ncpu) = (lab.t, lab.knobs, lab.reader, lab.ncpu);
    let all = format!("{:x}", (1u64 << ncpu.min(63)) - 1);
    match s {
        Server::KernelRps | Server::KernelRfs => {
            if s == Server::KernelRps {
                knobs.set(&all, 0, 0)?;
            } else {
                knobs.set(&all, 4096, 32768)?;
            }
            Ok(Running::Kernel(KernelEcho::start(reader, lab.tcp)?))
        }
        _ => {
            knobs.set("0", 0, 0)?;
            let mut steer = rxpath_cli::steer::SteerArgs {
                steer: if s == Server::RxpathRps {
                    SteerMode::Rps
                } else {
                    SteerMode::Rfs
                },
                ..Default::default()
            };
            steer.workers = Some(ncpu);
            let args = EchoArgs {
                steer,
                tcp: lab.tcp,
                reader_cpus: Some(reader.to_string()),
                ..crate::rr::echo_args(&t.host_if)
            };
            Ok(Running::Rxpath(Box::new(EchoServer::start(&args)?)))
        }
    }
}

/// Stop a server; for rxpath, the packets processed on each worker.
fn stop(r: Running) -> Result<Option<PerWorker>> {
    match r {
        Running::Rxpath(s) => {
            let rep = crate::rr::stop_echo(*s)?;
            let ws = &rep.host.workers;
            Ok(Some(PerWorker {
                processed: ws.iter().map(|w| w.backlog.processed).collect(),
                reader_ran: ws.iter().map(|w| w.reader_ran).collect(),
            }))
        }
        Running::Kernel(k) => {
            k.stop()?;
            Ok(None)
        }
    }
}

/// The client's source port for each worker RPS can pick: the flow
/// (peer:port → host:[`PORT`], protocol `proto`) hashes, under `rps_cpus`
/// = every worker, to worker `w` for the `w`-th port. rxpath's software flow hash
/// is the one its steering uses on AF_XDP (the veth gives no RX hash); the
/// kernel's rows get the same ports and hash them their own way.
fn ports_by_rps_worker(workers: usize, proto: u8) -> Vec<u16> {
    (0..workers)
        .map(|w| port_on_worker(w, workers, proto, 40000).expect("a port for every worker"))
        .collect()
}

/// The first client port from `from` on whose flow (protocol `proto`)
/// rxpath's RPS over `workers` picks worker `w`.
fn port_on_worker(w: usize, workers: usize, proto: u8, from: u16) -> Option<u16> {
    let (peer, host) = (
        PEER_ADDR.parse().expect("lab address"),
        HOST_ADDR.parse().expect("lab address"),
    );
    (from..=u16::MAX).find(|&p| {
        let h = flow_hash(&FlowKey::new(peer, host, p, PORT, proto));
        reciprocal_scale(h, workers as u32) as usize == w
    })
}

/// The nearest-rank percentile `q` (0..=1) of `v`.
fn percentile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1]
}

pub fn rfs(a: RfsBenchArgs, rep: &mut Option<ReportDir>) -> Result<ExitCode> {
    crate::rr::require_root_and_sockperf(
        "rfs",
        "it builds a veth lab, attaches XDP and sets rps_cpus",
    )?;
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    if ncpu < 2 {
        bail!("bench rfs needs 2 CPUs (a reader CPU apart from the one the flow hashes to)");
    }
    let t = Topology {
        ns: "rxp-rfs".into(),
        host_if: "rxprfs0".into(),
        peer_if: "rxprfs1".into(),
        queues: 1,
        gro: false,
        threaded: false,
    };
    let guard = t.up_scoped()?;
    let t = &guard.0;
    let knobs = Knobs::save(&t.host_if);
    let (client_cpu, reader) = (0usize, ncpu - 1);
    let ports = ports_by_rps_worker(ncpu, if a.tcp { 6 } else { 17 });
    println!(
        "rxpath bench rfs (seed 002): sockperf ping-pong, {}-byte {}, {}s per run, {} round(s); veth {} <- {} (netns {}); \
         client on CPU {client_cpu}, the reader (rxpath's echo thread / the kernel's echo socket) on CPU {reader}; {ncpu} workers (rxpath) or CPUs (kernel)",
        a.size,
        if a.tcp { "TCP" } else { "UDP" },
        a.duration.as_secs(),
        a.rounds,
        t.host_if,
        t.peer_if,
        t.ns
    );
    println!(
        "the flow's hash, as RPS sees it, covered evenly: client source port{} {} put the flow on worker{} {} under rxpath's RPS \
         (worker {reader} is the reader's); every configuration runs each port once per round, and p99s are over every round trip of both",
        if ports.len() > 1 { "s" } else { "" },
        ports.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", "),
        if ports.len() > 1 { "s" } else { "" },
        (0..ports.len()).map(|w| w.to_string()).collect::<Vec<_>>().join(", "),
    );
    let lab = Lab {
        t,
        knobs: &knobs,
        reader,
        ncpu,
        client_cpu,
        tcp: a.tcp,
        last_port: std::cell::RefCell::new(vec![0; ncpu]),
    };
    let m = measure(&a, &lab, &ports)?;
    let (p99, p99_by_port) = print_table(&m, &ports);
    println!();
    // The ports were chosen by rxpath's hash: RPS must have followed it.
    // A port with no packets counted is not checked, and says so (and the
    // run does not pass on it).
    let mut placed = true;
    for (p, port) in ports.iter().enumerate() {
        let share = finite(m.share_of(0, Some(p)));
        placed &= share.is_some_and(|s| (s >= 0.9) == (p == reader));
        match share {
            None => println!("NOTE: placement not checked for port {}: rxpath's RPS row counted no packets there", port),
            Some(share) if (share >= 0.9) != (p == reader) => println!(
                "NOTE: rxpath's RPS did not put port {}'s flow where its hash said ({:.1} % on the reader's worker): the placements are not the ones named",
                port,
                100.0 * share
            ),
            Some(_) => {}
        }
    }
    let ok_share = target_in(
        Unit::Share,
        "RFS delivers on the reader's worker",
        finite(m.share_of(1, None)),
        Bound::AtLeast(0.99),
        "the RFS row counted no packets",
    );
    println!(
        "RFS p99 {} µs vs RPS p99 {} µs (every round trip, the flow hashed to each worker alike)",
        cell(Some(p99[1]), 1.0, 2),
        cell(Some(p99[0]), 1.0, 2)
    );
    let ok_p99 = target(
        "RFS p99 over RPS p99 no worse than 1",
        ratio(Some(p99[1]), Some(p99[0])),
        Bound::AtMost(1.0),
        "a row got no answer",
    );
    for (p, q) in p99_by_port.iter().enumerate() {
        println!(
            "  where RPS puts the flow on worker {p}{}: RFS {} vs RPS {} µs",
            if p == reader {
                " (the reader's: the same path as RFS)"
            } else {
                " (not the reader's: what RFS is for)"
            },
            cell(Some(q[1]), 1.0, 2),
            cell(Some(q[0]), 1.0, 2)
        );
    }
    println!(
        "kernel reference: RFS p99 {} µs vs RPS {} µs (every round trip of both ports)",
        cell(Some(p99[3]), 1.0, 2),
        cell(Some(p99[2]), 1.0, 2)
    );
    if let Some(rep) = rep {
        write_report(
            rep,
            &a,
            &m,
            &ports,
            (&p99, &p99_by_port),
            (&ok_share, &ok_p99),
        )?;
    }
    Ok(
        if ok_share == Verdict::Met && ok_p99 == Verdict::Met && placed {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        },
    )
}

/// Where a run of the bench happens: the lab, its knobs, the reader's CPU.
struct Lab<'a> {
    t: &'a Topology,
    knobs: &'a Knobs,
    reader: usize,
    ncpu: usize,
    client_cpu: usize,
    /// TCP flows (`--tcp`).
    tcp: bool,
    /// The last client port used on each worker's flow: a TCP client
    /// takes a fresh port hashing to the same worker each time, as the
    /// last one's connection waits out TIME_WAIT on the client's side.
    last_port: std::cell::RefCell<Vec<u16>>,
}

impl Lab<'_> {
    /// The client port for a run on worker `w`'s flow: `first` for UDP,
    /// for TCP the next port after the last one used that hashes there.
    fn client_port(&self, w: usize, first: u16) -> u16 {
        if !self.tcp {
            return first;
        }
        let mut last = self.last_port.borrow_mut();
        let from = last[w].max(first.saturating_sub(1)).saturating_add(1);
        let p = port_on_worker(w, self.ncpu, 6, from).unwrap_or(first);
        last[w] = p;
        p
    }
}

/// Every round's figures: `cells[round][port][server]`, and every round
/// trip (µs) as `samples[server][port]`.
struct Measured {
    cells: Vec<Vec<Vec<Cell>>>,
    samples: Vec<Vec<Vec<f64>>>,
    reader: usize,
    tcp: bool,
}

impl Measured {
    /// The share of server `i`'s packets processed on the reader's worker
    /// (NaN where none were counted: the kernel's rows).
    fn share_of(&self, i: usize, port: Option<usize>) -> f64 {
        let (mut on, mut all) = (0u64, 0u64);
        for by_port in &self.cells {
            for (pi, row) in by_port.iter().enumerate() {
                if port.is_some_and(|p| p != pi) {
                    continue;
                }
                if let Some((_, Some(p))) = &row[i] {
                    on += p.processed.get(self.reader).copied().unwrap_or(0);
                    all += p.processed.iter().sum::<u64>();
                }
            }
        }
        if all == 0 {
            f64::NAN
        } else {
            on as f64 / all as f64
        }
    }

    /// Server `i`'s round trips/s, the median over rounds (and ports).
    fn rate_of(&self, i: usize, port: Option<usize>) -> f64 {
        median(
            self.cells
                .iter()
                .flat_map(|by_port| by_port.iter().enumerate())
                .filter(|(pi, _)| port.is_none_or(|p| p == *pi))
                .filter_map(|(_, row)| row[i].as_ref().map(|(m, _)| m.rt_per_s))
                .collect(),
        )
    }

    /// Every round trip of server `i` (on `port`, or all).
    fn pooled(&self, i: usize, port: Option<usize>) -> Vec<f64> {
        self.samples[i]
            .iter()
            .enumerate()
            .filter(|(pi, _)| port.is_none_or(|p| p == *pi))
            .flat_map(|(_, v)| v.iter().copied())
            .collect()
    }
}

/// Every server for every port, every round, the order reversed every
/// other round.
fn measure(a: &RfsBenchArgs, lab: &Lab, ports: &[u16]) -> Result<Measured> {
    let mut m = Measured {
        cells: Vec::new(),
        samples: vec![vec![Vec::new(); ports.len()]; Server::ALL.len()],
        reader: lab.reader,
        tcp: lab.tcp,
    };
    let pb = progress((a.rounds * ports.len() * Server::ALL.len()) as u64, "rfs");
    let order: Vec<usize> = (0..Server::ALL.len()).collect();
    for round in 0..a.rounds {
        let mut by_port = Vec::new();
        for (pi, &port) in ports.iter().enumerate() {
            let mut row = vec![None; Server::ALL.len()];
            // Every other round in the reverse order: a drift favours none.
            for i in in_turn(&order, round) {
                let what = format!(
                    "round {round}, port {port} (RPS: worker {pi}): {}",
                    Server::ALL[i].name(lab.tcp)
                );
                pb.set_message(Server::ALL[i].name(lab.tcp));
                let (cell, rtts) = measure_one(a, lab, Server::ALL[i], (pi, port))?;
                pb.inc(1);
                m.samples[i][pi].extend(rtts);
                say(&pb, &format!("  {what:68} {}", describe(&cell, lab.reader)));
                row[i] = cell;
            }
            by_port.push(row);
        }
        m.cells.push(by_port);
    }
    pb.finish_and_clear();
    Ok(m)
}

/// One server, one client port: its figures and every round trip.
/// `w`: the worker the port's flow hashes to (a TCP run takes fresh ports
/// hashing there for the probe and the run).
fn measure_one(
    a: &RfsBenchArgs,
    lab: &Lab,
    s: Server,
    (w, port): (usize, u16),
) -> Result<(Cell, Vec<f64>)> {
    let t = lab.t;
    let r = start(s, lab)?;
    let tcp: &[&str] = if lab.tcp { &["--tcp"] } else { &[] };
    let (probe, run) = (
        lab.client_port(w, port).to_string(),
        lab.client_port(w, port).to_string(),
    );
    let probe = [&["--client_port", probe.as_str()], tcp].concat();
    let from = [&["--client_port", run.as_str()], tcp].concat();
    let m = if ready(t, a.size, &probe)? {
        client(
            t,
            a.duration.as_secs().max(1),
            a.size,
            Some(lab.client_cpu),
            true,
            &from,
        )?
    } else {
        None
    };
    let per_worker = stop(r)?;
    Ok(match m {
        Some((m, rtts)) => (Some((m, per_worker)), rtts),
        None => (None, Vec::new()),
    })
}

/// A measured cell as its progress line says it.
fn describe(cell: &Cell, reader: usize) -> String {
    let Some((m, per_worker)) = cell else {
        return "no answer".into();
    };
    let share = per_worker.as_ref().map(|p| {
        let total: u64 = p.processed.iter().sum();
        let ran: u64 = p.reader_ran.iter().sum();
        format!(
            "  on the reader's worker: {:.1} % ({:?}), run by the reader in recv: {:.1} %",
            100.0 * p.processed.get(reader).copied().unwrap_or(0) as f64 / total.max(1) as f64,
            p.processed,
            100.0 * ran as f64 / total.max(1) as f64
        )
    });
    format!(
        "{:7.0} round trips/s  avg {:6.2} µs  p99 {:6.2} µs{}",
        m.rt_per_s,
        m.avg_us,
        m.p99_us,
        share.unwrap_or_default()
    )
}

/// Per server and placement: round trips/s (median over rounds), p50 and
/// p99 over every round trip, and the share on the reader's worker.
/// Returns the p99s (all ports; per port).
#[allow(clippy::type_complexity)]
fn print_table(m: &Measured, ports: &[u16]) -> ([f64; 4], Vec<[f64; 4]>) {
    println!(
        "\n{:34} {:>22} {:>9} {:>13} {:>8} {:>8} {:>22}",
        "every round trip of every round",
        "flow (RPS's worker)",
        "samples",
        "round trips/s",
        "p50 µs",
        "p99 µs",
        "on the reader's worker"
    );
    let mut p99 = [f64::NAN; 4];
    let mut p99_by_port = vec![[f64::NAN; 4]; ports.len()];
    for (i, s) in Server::ALL.iter().enumerate() {
        for port in (0..ports.len()).map(Some).chain([None]) {
            let v = m.pooled(i, port);
            let q99 = percentile(&v, 0.99);
            match port {
                Some(p) => p99_by_port[p][i] = q99,
                None => p99[i] = q99,
            }
            let share = m.share_of(i, port);
            println!(
                "{:34} {:>22} {:>9} {:>13} {:>8} {:>8} {:>22}",
                s.name(m.tcp),
                match port {
                    Some(p) => format!("port {} (worker {p})", ports[p]),
                    None => "both".to_string(),
                },
                v.len(),
                cell(Some(m.rate_of(i, port)), 1.0, 0),
                cell(Some(percentile(&v, 0.5)), 1.0, 2),
                cell(Some(q99), 1.0, 2),
                if share.is_nan() {
                    "(kernel: not counted)".to_string()
                } else {
                    format!("{:.1} %", 100.0 * share)
                }
            );
        }
    }
    (p99, p99_by_port)
}

/// The run's JSON and plots.
fn write_report(
    rep: &mut ReportDir,
    a: &RfsBenchArgs,
    m: &Measured,
    ports: &[u16],
    (p99, p99_by_port): (&[f64; 4], &[[f64; 4]]),
    (ok_share, ok_p99): (&Verdict, &Verdict),
) -> Result<()> {
    let (cells, samples, reader) = (&m.cells, &m.samples, m.reader);
    let shares: Vec<Option<f64>> = (0..Server::ALL.len())
        .map(|i| Some(m.share_of(i, None)).filter(|s| s.is_finite()))
        .collect();
    let name = |n: &str| {
        if m.tcp {
            n.replacen("rfs", "rfs-tcp", 1)
        } else {
            n.to_string()
        }
    };
    let j = serde_json::json!({
        "protocol": if m.tcp { "tcp" } else { "udp" },
        "size": a.size, "duration_s": a.duration.as_secs(), "rounds": a.rounds, "reader_cpu": reader,
        "client_ports_by_rps_worker": ports,
        "servers": Server::ALL.iter().enumerate().map(|(i, s)| serde_json::json!({
            "name": s.name(m.tcp),
            "rounds": cells.iter().map(|by_port| by_port.iter().enumerate().map(|(pi, row)| row[i].as_ref().map(|(m, p)| serde_json::json!({
                "client_port": ports[pi], "rps_worker": pi,
                "round_trips_per_s": m.rt_per_s, "avg_rtt_us": m.avg_us, "p99_rtt_us": m.p99_us,
                "processed_per_worker": p.as_ref().map(|p| &p.processed),
                "reader_ran_per_worker": p.as_ref().map(|p| &p.reader_ran),
            }))).collect::<Vec<_>>()).collect::<Vec<_>>(),
            "p99_us": p99[i].is_finite().then_some(p99[i]),
            "p99_us_by_rps_worker": p99_by_port.iter().map(|q| q[i].is_finite().then_some(q[i])).collect::<Vec<_>>(),
            "on_reader_share": shares[i],
            "samples": samples[i].iter().map(Vec::len).sum::<usize>(),
        })).collect::<Vec<_>>(),
        "targets": { "rfs_on_reader": ok_share.json(), "rfs_p99_no_worse_than_rps": ok_p99.json() },
    });
    rep.json(&name("rfs"), &j)?;
    let cdfs: Vec<(String, Vec<f64>)> = (0..Server::ALL.len())
        .map(|i| (Server::ALL[i].name(m.tcp).to_string(), m.pooled(i, None)))
        .filter(|(_, v)| !v.is_empty())
        .collect();
    if !cdfs.is_empty() {
        rep.cdf(
            &name("rfs-latency-cdf"),
            "RPS vs RFS, reader pinned to one CPU: round-trip time, every round and port",
            "round-trip time, µs (log scale)",
            &cdfs,
        )?;
    }
    let p99s: Vec<Bar> = Server::ALL
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let v: Vec<f64> = cells
                .iter()
                .flat_map(|by_port| by_port.iter())
                .filter_map(|r| Some(r[i].as_ref()?.0.p99_us))
                .collect();
            Bar::of(s.name(m.tcp), &v, 1.0)
        })
        .collect();
    rep.bars(
        &name("rfs-p99"),
        "RPS vs RFS: p99 round-trip time (median, range of runs)",
        "p99 round-trip time, µs",
        &p99s,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rxpath_core::steer::{get_rps_cpu, Worker, WorkerView};

    struct AllOnline;
    impl WorkerView for AllOnline {
        fn online(&self, _: Worker) -> bool {
            true
        }
        fn head(&self, _: Worker) -> u32 {
            0
        }
    }

    /// The bench's premise: a client on port `ports[w]` is steered to
    /// worker `w` by rxpath's RPS, judged from the frame the client sends
    /// as the runtime judges it (parsed headers, software hash, the RPS
    /// map of every worker), for UDP and for TCP.
    #[test]
    fn each_client_port_lands_on_its_named_worker() {
        for (proto, workers) in [17u8, 6]
            .into_iter()
            .flat_map(|p| [(p, 2usize), (p, 3), (p, 4)])
        {
            let ports = ports_by_rps_worker(workers, proto);
            assert_eq!(ports.len(), workers);
            let map: Vec<Worker> = (0..workers as Worker).collect();
            for (w, &port) in ports.iter().enumerate() {
                let spec = rxpath_wire::build::Spec::new(
                    PEER_ADDR.parse().unwrap(),
                    HOST_ADDR.parse().unwrap(),
                    port,
                    PORT,
                );
                let frame = match proto {
                    17 => rxpath_wire::build::udp(&spec, &[0u8; 64]),
                    _ => rxpath_wire::build::tcp(&spec, 1, 1, 0x10, &[], &[0u8; 64]),
                };
                let h = rxpath_wire::parse(&frame).expect("a UDP or TCP frame");
                let hash = flow_hash(&h.flow);
                let got = get_rps_cpu(hash, &map, None, None, &AllOnline);
                assert_eq!(
                    got,
                    Some((w as Worker, false)),
                    "{workers} workers, protocol {proto}: port {port}"
                );
            }
        }
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
        assert!(percentile(&[], 0.5).is_nan());
    }
}
