//! Options of `rxpath bench` and its benches.

use super::*;
use clap::{Args, Subcommand};
use std::time::Duration;

/// `rxpath bench [--require-peers] KIND ...`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Exit non-zero (3) when a peer the bench runs (DPDK, the kernel's
    /// iptables, ...) could not be measured; the lines that say why are
    /// printed either way.
    #[arg(long, global = true)]
    pub require_peers: bool,
    /// Write into DIR the JSON of every run and the bench's plots (PNG and
    /// SVG); DIR is created if missing.
    #[arg(long, global = true, value_name = "DIR")]
    pub report: Option<std::path::PathBuf>,
    #[command(subcommand)]
    pub cmd: BenchCmd,
}

#[derive(Debug, Subcommand)]
pub enum BenchCmd {
    /// Mpps at the lowest RX level (pull, parse, drop): bundle 1 vs 16 vs 64
    /// on cold data, and null mode beside DPDK testpmd when installed.
    Rxdrop(RxdropArgs),
    /// Seed 004's experiment: GRO with gro_flush_timeout 0 vs N ns (and
    /// adaptive) on 200 bulk TCP flows, and request/response latency.
    Gro(GroBenchArgs),
    /// Receivers side by side on the lab veth (root): rxpath AF_XDP
    /// spinning and sleeping, AF_PACKET, the kernel UDP socket, DPDK
    /// net_af_xdp, and XDP_DROP.
    RxIface(RxIfaceArgs),
    /// UDP request/response on the lab veth (root, sockperf): rxpath echo
    /// busy-polling and sleeping vs the kernel's UDP socket, plain and
    /// busy-polling; round trips/s, average and p99.
    Rr(RrArgs),
    /// The INPUT filter at 0 to 10 000 rules: linear walk vs compiled
    /// classifier, Mpps on one core and ns per classification beside
    /// DPDK's dpdk-test-acl.
    Filter(crate::bench::filter::FilterBenchArgs),
    /// Seed 003's experiment: an expensive bottom half (2000 rules walked
    /// linearly) on 1 worker vs 2, 1 flow and 64, for every steering mode;
    /// reordered packets counted at delivery.
    Steer(crate::bench::steer::SteerBenchArgs),
    /// Seed 002's experiment (root, sockperf): UDP request/response into a
    /// reader pinned to one CPU, rxpath echo with RPS vs RFS, the kernel's
    /// own RPS/RFS on the same veth as the reference.
    Rfs(crate::bench::rfs::RfsBenchArgs),
    /// quinn's perf protocol on the lab veth (root): the server on the
    /// kernel's socket vs on rxpath (sleeping, busy polling), the peer's
    /// UDP GSO off and on; Gbit/s, server CPU per GB, request p50/p99.
    Quic(crate::bench::quic::QuicBenchArgs),
}

#[derive(Debug, Clone, Args)]
pub struct RrArgs {
    /// Client run per configuration.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub duration: Duration,
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
    /// Only these servers (comma-separated: busy, busy-packet-tx, prefer, xsk, sleep, packet, kernel,
    /// kernel-busy); the kernel is always run, as the reference.
    #[arg(long, value_delimiter = ',')]
    pub servers: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct RxIfaceArgs {
    /// Generator run per receiver.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub duration: Duration,
    /// The fixed offered rate (packets/s) at which whole-machine CPU per
    /// received packet is compared (one every receiver can take).
    #[arg(long, default_value_t = 100_000)]
    pub cpu_rate: u64,
    /// Generator run per step of the RFC 2544 search.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub step: Duration,
    /// Steps of the RFC 2544 search (a binary search of the offered rate;
    /// 0 skips it).
    #[arg(long, default_value_t = 5)]
    pub steps: u32,
}

#[derive(Debug, Clone, Args)]
pub struct GroBenchArgs {
    /// Seconds per measurement.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Rounds (each measures every configuration once; medians are kept).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// The fixed gro_flush_timeout to compare with 0, in ns (the seed: 2000).
    #[arg(long, default_value_t = 2000)]
    pub timeout: u64,
    /// A longer fixed timeout, also the adaptive mode's timeout for bulk traffic, in ns.
    #[arg(long, default_value_t = 20_000)]
    pub adaptive_max: u64,
    /// Request/response offered rate, packets per second.
    #[arg(long, default_value_t = 100_000)]
    pub rr_pps: u64,
    /// Bulk offered rate, packets per second (the seed: 811k).
    #[arg(long, default_value_t = 811_000)]
    pub bulk_pps: u64,
    /// Wait for interrupts sleeping (futex wakeup, 10-50 µs here) instead
    /// of spinning on the lines (idle=poll: taken within ~1 µs, as a hard
    /// IRQ is, which the seed's numbers assume).
    #[arg(long)]
    pub irq_sleep: bool,
    /// Print results as JSON too.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct RxdropArgs {
    /// Seconds per measurement.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Rounds (each measures every configuration once; the median is kept).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Skip DPDK testpmd even if installed.
    #[arg(long)]
    pub no_dpdk: bool,
    /// Print results as JSON too.
    #[arg(long)]
    pub json: bool,
}
