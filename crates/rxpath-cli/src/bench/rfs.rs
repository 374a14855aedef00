//! `rxpath bench rfs`: seed 002's experiment. UDP request/response on the
//! lab veth (`sockperf ping-pong` in the peer namespace) into a reader
//! pinned to one CPU, with RPS (the flow's hash picks the worker) and with
//! RFS (the worker the reader reads on), on rxpath echo and, as the
//! reference in the same run, on the kernel's own RPS/RFS over the same
//! veth (`rps_cpus`, `rps_flow_cnt`, `net.core.rps_sock_flow_entries`) with
//! `sockperf server`.

use crate::bench::median;
use crate::bench::plot::{progress, say, Bar, ReportDir};
use crate::bench::rr::{client, read_sysctl, ready, write_sysctl, Measure, PORT};
use crate::echo::EchoServer;
use crate::opts::EchoArgs;
use anyhow::{bail, Context, Result};
use clap::Args;
use rxpath_core::steer::SteerMode;
use rxpath_runtime::lab::{Topology, HOST_ADDR};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Duration;

#[derive(Debug, Clone, Args)]
pub struct RfsBenchArgs {
    /// Client run per configuration.
    #[arg(long, default_value = "3s", value_parser = crate::opts::parse_duration)]
    pub duration: Duration,
    /// Rounds (each runs every configuration once; medians are compared).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Message size, bytes.
    #[arg(long, default_value_t = 64)]
    pub size: usize,
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
    fn name(self) -> &'static str {
        match self {
            Server::RxpathRps => "rxpath echo, --steer rps",
            Server::RxpathRfs => "rxpath echo, --steer rfs",
            Server::KernelRps => "kernel UDP, RPS (rps_cpus)",
            Server::KernelRfs => "kernel UDP, RFS (+ flow tables)",
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
    Kernel(Child),
}

fn start(s: Server, t: &Topology, knobs: &Knobs, reader: usize, ncpu: usize) -> Result<Running> {
    let all = format!("{:x}", (1u64 << ncpu.min(63)) - 1);
    match s {
        Server::KernelRps | Server::KernelRfs => {
            if s == Server::KernelRps {
                knobs.set(&all, 0, 0)?;
            } else {
                knobs.set(&all, 4096, 32768)?;
            }
            let child = Command::new("taskset")
                .args(["-c", &reader.to_string(), "sockperf"])
                .args(["server", "-i", HOST_ADDR, "-p", &PORT.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting sockperf server")?;
            Ok(Running::Kernel(child))
        }
        _ => {
            knobs.set("0", 0, 0)?;
            let mut steer = crate::steer::SteerArgs {
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
                reader_cpus: Some(reader.to_string()),
                ..crate::bench::rr::echo_args(&t.host_if)
            };
            Ok(Running::Rxpath(Box::new(EchoServer::start(&args)?)))
        }
    }
}

/// Stop a server; for rxpath, the packets processed on each worker.
fn stop(r: Running) -> Result<Option<PerWorker>> {
    match r {
        Running::Rxpath(s) => {
            let rep = s.stop()?;
            if rep.host.frames_home != rep.host.frames_total {
                bail!(
                    "rxpath echo lost frames: {}/{} home",
                    rep.host.frames_home,
                    rep.host.frames_total
                );
            }
            let ws = &rep.host.workers;
            Ok(Some(PerWorker {
                processed: ws.iter().map(|w| w.backlog.processed).collect(),
                reader_ran: ws.iter().map(|w| w.reader_ran).collect(),
            }))
        }
        Running::Kernel(mut c) => {
            let _ = c.kill();
            let _ = c.wait();
            Ok(None)
        }
    }
}

pub fn rfs(a: RfsBenchArgs, rep: &mut Option<ReportDir>) -> Result<ExitCode> {
    crate::bench::rr::require_root_and_sockperf(
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
    println!(
        "rxpath bench rfs (seed 002): sockperf ping-pong, {}-byte UDP, {}s per run, {} round(s); veth {} <- {} (netns {}); \
         client on CPU {client_cpu}, the reader (echo thread / sockperf server) on CPU {reader}; {ncpu} workers (rxpath) or CPUs (kernel)",
        a.size,
        a.duration.as_secs(),
        a.rounds,
        t.host_if,
        t.peer_if,
        t.ns
    );
    let mut results: Vec<Vec<Cell>> = Vec::new();
    let mut rtts: Vec<Vec<f64>> = vec![Vec::new(); Server::ALL.len()];
    let pb = progress(a.rounds as u64 * Server::ALL.len() as u64, "rfs");
    for round in 0..a.rounds {
        let mut row = vec![None; Server::ALL.len()];
        for (i, &s) in Server::ALL.iter().enumerate() {
            pb.set_message(s.name());
            let r = start(s, t, &knobs, reader, ncpu)?;
            let m = if ready(t, a.size)? {
                client(
                    t,
                    a.duration.as_secs().max(1),
                    a.size,
                    Some(client_cpu),
                    rep.is_some(),
                )?
                .map(|(m, samples)| {
                    rtts[i].extend(samples);
                    m
                })
            } else {
                None
            };
            let per_worker = stop(r)?;
            pb.inc(1);
            match m {
                Some(m) => {
                    let share = per_worker.as_ref().map(|p| {
                        let total: u64 = p.processed.iter().sum();
                        let ran: u64 = p.reader_ran.iter().sum();
                        format!(
                            "  on the reader's worker: {:.1} % ({:?}), run by the reader in recv: {:.1} %",
                            100.0 * p.processed.get(reader).copied().unwrap_or(0) as f64
                                / total.max(1) as f64,
                            p.processed,
                            100.0 * ran as f64 / total.max(1) as f64
                        )
                    });
                    say(&pb, &format!(
                        "  round {round}: {:34} {:9.0} round trips/s  avg {:6.2} µs  p99 {:6.2} µs{}",
                        s.name(),
                        m.rt_per_s,
                        m.avg_us,
                        m.p99_us,
                        share.unwrap_or_default()
                    ));
                    row[i] = Some((m, per_worker));
                }
                None => say(&pb, &format!("  round {round}: {:34} no answer", s.name())),
            }
        }
        results.push(row);
    }
    pb.finish_and_clear();
    println!(
        "\n{:34} {:>13} {:>9} {:>9} {:>22}",
        "median over rounds", "round trips/s", "avg µs", "p99 µs", "on the reader's worker"
    );
    let mut p99 = [f64::NAN; 4];
    let mut on_reader = [f64::NAN; 4];
    for (i, s) in Server::ALL.iter().enumerate() {
        let col = |f: &dyn Fn(&Measure) -> f64| {
            median(
                results
                    .iter()
                    .filter_map(|r| r[i].as_ref())
                    .map(|(m, _)| f(m))
                    .collect(),
            )
        };
        let shares: Vec<f64> = results
            .iter()
            .filter_map(|r| r[i].as_ref())
            .filter_map(|(_, p)| p.as_ref())
            .map(|p| {
                p.processed.get(reader).copied().unwrap_or(0) as f64
                    / p.processed.iter().sum::<u64>().max(1) as f64
            })
            .collect();
        p99[i] = col(&|m| m.p99_us);
        on_reader[i] = if shares.is_empty() {
            f64::NAN
        } else {
            median(shares)
        };
        println!(
            "{:34} {:>13.0} {:>9.2} {:>9.2} {:>22}",
            s.name(),
            col(&|m| m.rt_per_s),
            col(&|m| m.avg_us),
            p99[i],
            if on_reader[i].is_nan() {
                "(kernel: not counted)".to_string()
            } else {
                format!("{:.1} %", 100.0 * on_reader[i])
            }
        );
    }
    println!();
    let ok_share = on_reader[1] >= 0.99;
    println!(
        "target RFS delivers on the reader's worker: {:.1} % of packets: {}",
        100.0 * on_reader[1],
        if ok_share { "met" } else { "NOT met" }
    );
    let ok_p99 = p99[1] <= p99[0];
    println!(
        "target RFS p99 no worse than RPS: {:.2} vs {:.2} µs: {}",
        p99[1],
        p99[0],
        if ok_p99 { "met" } else { "NOT met" }
    );
    println!(
        "kernel reference: RFS p99 {:.2} µs vs RPS {:.2} µs",
        p99[3], p99[2]
    );
    if let Some(rep) = rep {
        let j = serde_json::json!({
            "size": a.size, "duration_s": a.duration.as_secs(), "rounds": a.rounds, "reader_cpu": reader,
            "servers": Server::ALL.iter().enumerate().map(|(i, s)| serde_json::json!({
                "name": s.name(),
                "rounds": results.iter().map(|row| row[i].as_ref().map(|(m, p)| serde_json::json!({
                    "round_trips_per_s": m.rt_per_s, "avg_rtt_us": m.avg_us, "p99_rtt_us": m.p99_us,
                    "processed_per_worker": p.as_ref().map(|p| &p.processed),
                    "reader_ran_per_worker": p.as_ref().map(|p| &p.reader_ran),
                }))).collect::<Vec<_>>(),
                "on_reader_share": on_reader[i].is_finite().then_some(on_reader[i]),
                "samples": rtts[i].len(),
            })).collect::<Vec<_>>(),
            "targets": { "rfs_on_reader": ok_share, "rfs_p99_no_worse_than_rps": ok_p99 },
        });
        rep.json("rfs", &j)?;
        let cdfs: Vec<(String, Vec<f64>)> = Server::ALL
            .iter()
            .zip(&rtts)
            .filter(|(_, v)| !v.is_empty())
            .map(|(s, v)| (s.name().to_string(), v.clone()))
            .collect();
        if !cdfs.is_empty() {
            rep.cdf(
                "rfs-latency-cdf",
                "RPS vs RFS, reader pinned to one CPU: round-trip time, every round",
                "round-trip time, µs (log scale)",
                &cdfs,
            )?;
        }
        let p99s: Vec<Bar> = Server::ALL
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let v: Vec<f64> = results
                    .iter()
                    .filter_map(|r| Some(r[i].as_ref()?.0.p99_us))
                    .collect();
                Bar::of(s.name(), &v, 1.0)
            })
            .collect();
        rep.bars(
            "rfs-p99",
            "RPS vs RFS: p99 round-trip time (median, range of rounds)",
            "p99 round-trip time, µs",
            &p99s,
        )?;
    }
    Ok(if ok_share && ok_p99 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
