//! `rxpath`: the command line (the binary is `main.rs`; the library
//! exists so that the fuzz targets reach the argument, config file and
//! control socket parsers).

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod config;
pub mod ctl;
pub mod echo;
pub mod filter;
pub mod logger;
pub mod opts;
pub mod parse;
pub mod quic;
pub mod report;
pub mod soak;
pub mod steer;

use std::process::ExitCode;

/// `rxpath lab`: build, remove or show the test topology.
pub fn lab(a: opts::LabArgs) -> anyhow::Result<ExitCode> {
    use rxpath_runtime::lab::{Topology, HOST_ADDR, PEER_ADDR};
    let t = Topology {
        ns: a.netns,
        host_if: a.host_if,
        peer_if: a.peer_if,
        queues: a.queues,
        gro: a.gro,
        threaded: a.threaded,
    };
    t.validate()?;
    if a.action != opts::LabAction::Status && !rxpath_dev::sys::sched::is_root() {
        anyhow::bail!(
            "lab {:?} needs root (CAP_NET_ADMIN): run it with sudo",
            a.action
        );
    }
    match a.action {
        opts::LabAction::Up => {
            t.up()?;
            println!(
                "lab up: {} ({HOST_ADDR}/24) <-> {} ({PEER_ADDR}/24) in netns {}, {} queues, gro {}, threaded napi {}",
                t.host_if,
                t.peer_if,
                t.ns,
                t.queues,
                if t.gro || t.threaded { "on" } else { "off" },
                if t.threaded { "on" } else { "off" }
            );
        }
        opts::LabAction::Down => {
            t.down()?;
            println!("lab down: {} and netns {} removed", t.host_if, t.ns);
        }
        opts::LabAction::Status => {
            let s = t.status();
            println!(
                "netns {}: {}; {}: {}{}",
                t.ns,
                if s.ns { "present" } else { "absent" },
                t.host_if,
                if s.host_if { "present" } else { "absent" },
                match (s.queues, s.gro, s.threaded) {
                    (Some(q), g, th) => format!(
                        ", {q} rx queues, gro {}, threaded napi {}",
                        g.map_or("?", |g| if g { "on" } else { "off" }),
                        th.map_or("?", |t| if t { "on" } else { "off" })
                    ),
                    _ => String::new(),
                }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn in_benchmark_range(a: std::net::Ipv4Addr) -> bool {
    let o = a.octets();
    o[0] == 198 && (o[1] == 18 || o[1] == 19)
}

/// `rxpath gen`: send traffic out of an interface.
pub fn gen(a: opts::GenArgs) -> anyhow::Result<ExitCode> {
    use rxpath_dev::sim::{TrafficConfig, WireAddrs};
    use rxpath_runtime::gen::{GenConfig, TxMode};
    if !in_benchmark_range(a.src_ip) || !in_benchmark_range(a.dst_ip) {
        anyhow::bail!("gen sends only within 198.18.0.0/15 (RFC 2544's benchmarking range)");
    }
    let cfg = GenConfig {
        iface: a.iface.clone(),
        mode: if a.mode == opts::TxArg::Xdp {
            TxMode::Xdp
        } else {
            TxMode::Packet
        },
        traffic: TrafficConfig {
            flows: a.flows,
            mix: a.mix,
            udp_frame: a.size,
            wire: Some(WireAddrs {
                src: a.src_ip,
                dst: a.dst_ip,
                src_mac: [0x02, 0x52, 0x58, 0, 0, 0x99],
                dst_mac: a.dst_mac,
            }),
            ..TrafficConfig::default()
        },
        pcap: a.pcap.clone(),
        pps: a.pps,
        count: a.count,
        duration: a.duration,
        batch: a.batch,
        stop: {
            // SIGINT/SIGTERM: stop sending, print what was sent.
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let s = stop.clone();
            let _ = ctrlc::set_handler(move || s.store(true, std::sync::atomic::Ordering::Release));
            Some(stop)
        },
    };
    let mut last = 0u64;
    let rep = rxpath_runtime::gen::gen(&cfg, |r| {
        if !a.json {
            println!(
                "{:6.1}s  sent {:8.3} Mpps  completed {}",
                r.elapsed.as_secs_f64(),
                (r.sent - last) as f64 / 1e6,
                r.completed
            );
        }
        last = r.sent;
    })?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({"sent": rep.sent, "completed": rep.completed, "errors": rep.errors, "pps": rep.pps(), "elapsed_s": rep.elapsed.as_secs_f64()})
        );
    } else {
        println!(
            "gen: sent {} packets in {:.2}s ({:.3} Mpps), {} completed, {} errors",
            rep.sent,
            rep.elapsed.as_secs_f64(),
            rep.pps() / 1e6,
            rep.completed,
            rep.errors
        );
    }
    Ok(ExitCode::SUCCESS)
}
