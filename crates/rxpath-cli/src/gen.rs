//! `rxpath gen`: traffic out of an interface (AF_XDP TX or AF_PACKET).

use crate::opts::*;
use clap::{Args, ValueEnum};
use rxpath_dev::sim::Mix;
use std::process::ExitCode;
use std::time::Duration;

/// `rxpath gen` arguments.
#[derive(Debug, Clone, Args)]
pub struct GenArgs {
    /// Interface to send from.
    #[arg(long)]
    pub iface: String,
    /// xdp (AF_XDP TX ring) or packet (AF_PACKET send).
    #[arg(long, value_enum, default_value_t = TxArg::Xdp)]
    pub mode: TxArg,
    /// Flow mix: udp, tcp-bulk, tcp-rr or mixed.
    #[arg(long, default_value = "udp")]
    pub mix: Mix,
    /// Number of flows.
    #[arg(long, default_value_t = 64)]
    pub flows: usize,
    /// UDP frame size in bytes (60..=1514).
    #[arg(long, default_value_t = 60)]
    pub size: usize,
    /// Packets per second (default: as fast as possible).
    #[arg(long)]
    pub pps: Option<u64>,
    /// Stop after this many packets.
    #[arg(long)]
    pub count: Option<u64>,
    /// Stop after this long.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Send the frames of a pcap file (in a loop) instead of generated flows.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<std::path::PathBuf>,
    /// Source IPv4 address (198.18.0.0/15 only).
    #[arg(long, default_value = "198.18.0.2")]
    pub src_ip: std::net::Ipv4Addr,
    /// Destination IPv4 address (198.18.0.0/15 only).
    #[arg(long, default_value = "198.18.0.1")]
    pub dst_ip: std::net::Ipv4Addr,
    /// Destination MAC (default: broadcast).
    #[arg(long, default_value = "ff:ff:ff:ff:ff:ff", value_parser = parse_mac)]
    pub dst_mac: [u8; 6],
    /// Frames per batch.
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Print the final report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// How `rxpath gen` transmits.
// Variants as values: a doc comment would become their help text and
// turn the one-line `[possible values: ...]` into a list.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TxArg {
    Xdp,
    Packet,
}

fn in_benchmark_range(a: std::net::Ipv4Addr) -> bool {
    let o = a.octets();
    o[0] == 198 && (o[1] == 18 || o[1] == 19)
}

/// `rxpath gen`: send traffic out of an interface.
pub fn gen(a: GenArgs) -> anyhow::Result<ExitCode> {
    use rxpath_dev::sim::{TrafficConfig, WireAddrs};
    use rxpath_runtime::gen::{GenConfig, TxMode};
    if !in_benchmark_range(a.src_ip) || !in_benchmark_range(a.dst_ip) {
        anyhow::bail!("gen sends only within 198.18.0.0/15 (RFC 2544's benchmarking range)");
    }
    let cfg = GenConfig {
        iface: a.iface.clone(),
        mode: if a.mode == TxArg::Xdp {
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
