//! `rxpath bench`: experiments that print ratios measured in one run.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use anyhow::Result;
use std::process::ExitCode;

mod apps;
mod dns;
mod dns_cpu;
mod figure;
mod filter;
mod gro;
mod harness;
mod iface;
mod losses;
mod plot;
mod quic;
mod reasm;
mod rfs;
mod rr;
mod rxdrop;
mod sockperf;
mod steer;
mod tcp;
mod tcp_apps;

pub use apps::AppsArgs;
pub use dns::DnsArgs;
pub use filter::FilterBenchArgs;
pub use gro::GroBenchArgs;
pub use iface::RxIfaceArgs;
pub use quic::QuicBenchArgs;
pub use reasm::ReasmArgs;
pub use rfs::RfsBenchArgs;
pub use rr::RrArgs;
pub use rxdrop::RxdropArgs;
pub use steer::SteerBenchArgs;
pub use tcp::TcpBenchArgs;
pub use tcp_apps::TcpAppsArgs;

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
    /// The bench.
    #[command(subcommand)]
    pub cmd: BenchCmd,
}

/// The benches.
#[derive(Debug, clap::Subcommand)]
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
    Filter(FilterBenchArgs),
    /// Seed 003's experiment: an expensive bottom half (2000 rules walked
    /// linearly) on 1 worker vs 2, 1 flow and 64, for every steering mode;
    /// reordered packets counted at delivery.
    Steer(SteerBenchArgs),
    /// Seed 002's experiment (root, sockperf): UDP request/response into a
    /// reader pinned to one CPU, rxpath echo with RPS vs RFS, the kernel's
    /// own RPS/RFS on the same veth as the reference.
    Rfs(RfsBenchArgs),
    /// quinn's perf protocol on the lab veth (root): the server on the
    /// kernel's socket vs on rxpath (sleeping, busy polling), the peer's
    /// UDP GSO off and on; Gbit/s, server CPU per GB, request p50/p99.
    Quic(QuicBenchArgs),
    /// An unmodified program on rxpath (root, sockperf): `sockperf server`
    /// on the kernel's socket and under `rxpath exec` (sleeping, busy
    /// polling) beside the native `rxpath echo --sockperf`; round trips,
    /// p50/p99, server CPU per round trip, loss-free rate.
    Apps(AppsArgs),
    /// An unmodified DNS server on rxpath (root, knot, knot-dnsutils,
    /// dnsperf): knotd with one UDP worker on the kernel's socket, under
    /// `rxpath exec` (sleeping, busy polling) and in Knot's own AF_XDP
    /// mode; loss-free queries/s (kxdpgun), server CPU per query, p50/p99
    /// (dnsperf).
    Dns(DnsArgs),
    /// IP reassembly against DPDK's librte_ip_frag (dpdk-dev): IPv4
    /// datagrams cut into fragments, replayed from memory into one queue;
    /// datagrams reassembled per second on one core.
    Reasm(ReasmArgs),
    /// Seed 004's TCP experiment on rxpath's TCP (root): one bulk TCP flow
    /// from the kernel into a reader that discards, rxpath's TCP with
    /// gro_flush_timeout 0 vs N ns beside the kernel's socket; ACKs/s,
    /// Gbit/s, receiver CPU. (Seed 000's TCP round trips: rr --tcp.)
    Tcp(TcpBenchArgs),
    /// Unmodified TCP servers (root; Debian's redis-server, nginx, iperf3
    /// and their clients): on the kernel's sockets and under `rxpath exec`;
    /// redis GETs/s (sleeping, busy polling), accepted connections/s, nginx
    /// requests/s, iperf3 Gbit/s per server CPU.
    TcpApps(TcpAppsArgs),
}

/// Run the bench `a` names.
pub fn bench(a: BenchArgs) -> Result<ExitCode> {
    harness::stop_cleanly_on_signals("bench")?;
    let name = match &a.cmd {
        BenchCmd::Rxdrop(_) => "rxdrop",
        BenchCmd::Gro(_) => "gro",
        BenchCmd::RxIface(_) => "rx-iface",
        // The JSON's name, which the report folder keeps runs of apart.
        BenchCmd::Rr(r) if r.tcp => "rr-tcp",
        BenchCmd::Rr(_) => "rr",
        BenchCmd::Filter(_) => "filter",
        BenchCmd::Steer(_) => "steer",
        BenchCmd::Rfs(r) if r.tcp => "rfs-tcp",
        BenchCmd::Rfs(_) => "rfs",
        BenchCmd::Quic(_) => "quic",
        BenchCmd::Apps(_) => "apps",
        BenchCmd::Dns(_) => "dns",
        BenchCmd::Reasm(_) => "reasm",
        BenchCmd::Tcp(_) => "tcp",
        BenchCmd::TcpApps(_) => "tcp-apps",
    };
    let mut rep = plot::ReportDir::open(a.report.as_deref(), name)?;
    let code = match a.cmd {
        BenchCmd::Rxdrop(a) => rxdrop::rxdrop(a, &mut rep),
        BenchCmd::Gro(a) => gro::gro(a, &mut rep),
        BenchCmd::RxIface(a) => iface::rx_iface(a, &mut rep),
        BenchCmd::Rr(a) => rr::rr(a, &mut rep),
        BenchCmd::Filter(a) => filter::filter(a, &mut rep),
        BenchCmd::Steer(a) => steer::steer(a, &mut rep),
        BenchCmd::Rfs(a) => rfs::rfs(a, &mut rep),
        BenchCmd::Quic(a) => quic::quic(a, &mut rep),
        BenchCmd::Apps(a) => apps::apps(a, &mut rep),
        BenchCmd::Dns(a) => dns::dns(a, &mut rep),
        BenchCmd::Reasm(a) => reasm::reasm(a, &mut rep),
        BenchCmd::Tcp(a) => tcp::tcp(a, &mut rep),
        BenchCmd::TcpApps(a) => tcp_apps::tcp_apps(a, &mut rep),
    }?;
    let missing = harness::take_unmeasured();
    if let Some(r) = rep {
        // Each JSON says which peers and targets the run could not measure.
        r.finish(&missing)?;
    }
    if missing.is_empty() {
        return Ok(code);
    }
    eprintln!(
        "\nrxpath bench: {} peer(s) NOT MEASURED (their ratios are missing above):",
        missing.len()
    );
    for m in &missing {
        eprintln!("  {m}");
    }
    if a.require_peers {
        eprintln!("rxpath bench: --require-peers: failing");
        return Ok(ExitCode::from(3));
    }
    Ok(code)
}
