//! Command-line options, named as the kernel names the knobs.

use anyhow::{bail, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use rxpath_core::gro::Adaptive;
use rxpath_core::napi::BundleMode;
use rxpath_core::softnet::SoftnetConfig;
use rxpath_dev::sim::{Coalesce, Mix, SimConfig, TrafficConfig};
use rxpath_runtime::{GroSettings, IfName, Producer, RunConfig, StackKind};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

/// The Linux kernel's fast receive path, in user space.
#[derive(Debug, Parser)]
#[command(name = "rxpath", version, about, args_override_self = true)]
pub struct Cli {
    /// Read flags from a TOML file (keys are the long flags without their
    /// dashes); flags given here override it.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Run the receive path (default: simulated 2-queue NIC, mixed flows, 5 s).
    Run(Box<RunArgs>),
    /// Benchmarks that print ratios measured in one run.
    Bench(BenchArgs),
    /// Send traffic out of an interface (AF_XDP TX or AF_PACKET).
    Gen(GenArgs),
    /// A UDP echo server on rxpath sockets (AF_XDP by default), with busy
    /// polling and a sockperf mode.
    Echo(Box<EchoArgs>),
    /// A QUIC server (quinn) speaking quinn's perf protocol, on rxpath
    /// sockets or, for comparison, on the kernel's.
    Quic(Box<QuicArgs>),
    /// Build, remove or show the test topology: a veth pair, host end here,
    /// peer end in a network namespace, addresses from 198.18.0.0/15.
    Lab(LabArgs),
    /// Rule sets for the INPUT filter: show a file with its counters,
    /// generate ClassBench-shaped sets and traffic.
    #[command(subcommand)]
    Filter(crate::filter::FilterCmd),
    /// The whole path for a while (GRO, filter, every steering mode, a
    /// worker going offline, sockets with busy-polling and sleeping
    /// readers), invariants checked after every round; one verdict line.
    Soak(crate::soak::SoakArgs),
    /// Show or change a running rxpath's knobs (gro_flush_timeout,
    /// net.core.netdev_budget, net.core.netdev_budget_usecs) while packets
    /// flow, through its control socket.
    Ctl(crate::ctl::CtlArgs),
}

/// What `rxpath quic` serves on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QuicSocket {
    /// An rxpath socket (AF_XDP or AF_PACKET, GRO, busy polling).
    Rxpath,
    /// The kernel's UDP socket through quinn-udp (GSO, GRO, ECN).
    Kernel,
}

/// `rxpath quic`.
#[derive(Debug, Parser)]
pub struct QuicArgs {
    /// Interface to serve on (rxpath sockets; the kernel socket binds
    /// --bind).
    #[arg(long, required_unless_present_any = ["connect"])]
    pub iface: Option<String>,
    /// Be a perf client instead (on the kernel's socket): connect to ADDR,
    /// upload --upload bytes and download --download bytes on one stream
    /// each, then time --requests small request/response streams.
    #[arg(long, value_name = "ADDR")]
    pub connect: Option<SocketAddr>,
    /// Client: bytes to upload.
    #[arg(long, default_value_t = 0)]
    pub upload: u64,
    /// Client: bytes to download.
    #[arg(long, default_value_t = 0)]
    pub download: u64,
    /// Client: small request/response streams to time (32 bytes each way).
    #[arg(long, default_value_t = 0)]
    pub requests: u64,
    /// Backend: auto (AF_XDP, else AF_PACKET), xdp or packet.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub mode: BackendArg,
    /// Address to bind.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind: std::net::IpAddr,
    /// UDP port.
    #[arg(long, default_value_t = 4433)]
    pub port: u16,
    /// rxpath's socket or the kernel's.
    #[arg(long, value_enum, default_value_t = QuicSocket::Rxpath)]
    pub socket: QuicSocket,
    /// Busy-poll for US µs when a read finds nothing (SO_BUSY_POLL; 0 =
    /// off). rxpath: one busy-poll round per empty read, as the kernel's
    /// non-blocking recvmsg; kernel socket: set on it.
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub busy_poll: u32,
    /// NAPI threads (rxpath).
    #[arg(long, default_value_t = 1)]
    pub napi_threads: usize,
    /// rxpath: prefer busy polling: after a busy poll keep the queue's
    /// interrupt masked for NS ns (SO_PREFER_BUSY_POLL with
    /// napi_defer_hard_irqs): with --busy-poll the reading task is woken by
    /// the device and polls the queue itself; 0 = off.
    #[arg(long, value_name = "NS", default_value_t = 0)]
    pub prefer_busy_poll: u64,
    /// rxpath: gro_flush_timeout in ns (0: GRO flushes at every
    /// completion; more keeps a flow's datagrams across polls, the NAPI
    /// timer passes them up).
    #[arg(long, value_name = "NS", default_value_t = 0)]
    pub gro_flush_timeout: u64,
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// How `rxpath echo`'s replies leave on AF_XDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EchoTx {
    /// The AF_XDP TX ring of queue 0's socket.
    Ring,
    /// An AF_PACKET socket on the interface.
    Packet,
}

/// What the XDP program of `rxpath echo` takes from the interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EchoTake {
    /// UDP to the echo port (IPv4 without options, IPv6 without extension
    /// headers, untagged); everything else goes to the kernel.
    Port,
    /// Every frame: the kernel sees nothing on the interface (no ARP, no
    /// ND: use static neighbour entries on the peer).
    All,
}

/// `rxpath echo`: a UDP echo server on rxpath sockets.
///
/// In packet mode (AF_PACKET) the kernel still receives every frame: it
/// answers ARP, ND, ping and TCP as usual; a kernel UDP socket with a
/// drop-all filter holds the echo port so that it neither answers the
/// datagrams rxpath serves nor sends ICMP port unreachable for them (it
/// counts them in its own `Udp: InErrors`). Frames the host itself sends
/// are not received (PACKET_IGNORE_OUTGOING).
#[derive(Debug, Clone, Args)]
pub struct EchoArgs {
    /// Interface to serve on.
    #[arg(long)]
    pub iface: String,
    /// Backend: auto (AF_XDP, else AF_PACKET), xdp or packet.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub mode: BackendArg,
    /// Address to bind (0.0.0.0 or :: for any; :: is dual-stack: IPv4
    /// peers are answered too, unless --only-v6).
    #[arg(long, default_value = "0.0.0.0")]
    pub bind: std::net::IpAddr,
    /// IPV6_V6ONLY on a socket bound to ::.
    #[arg(long)]
    pub only_v6: bool,
    /// UDP port (sockperf's default is 11111).
    #[arg(long, default_value_t = 11111)]
    pub port: u16,
    /// Device queues (one NAPI each); default: the interface's RX queues.
    #[arg(long)]
    pub queues: Option<usize>,
    /// Application threads reading the socket.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Pin reader thread t to CPU LIST[t % len] (e.g. 1 or 0,1): with
    /// --steer rfs its packets then go to that CPU's worker.
    #[arg(long, value_name = "LIST")]
    pub reader_cpus: Option<String>,
    /// NAPI threads (0 = none: only busy-polling readers move packets).
    #[arg(long, default_value_t = 1)]
    pub napi_threads: usize,
    /// Busy-poll for US µs in recv before sleeping (SO_BUSY_POLL; 0 = off).
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub busy_poll: u32,
    /// NAPI threads sleep until an interrupt, or poll continuously.
    #[arg(long, value_enum, default_value_t = ModeArg::Interrupt)]
    pub napi: ModeArg,
    /// Prefer busy polling: after a busy poll keep the queue's interrupt
    /// masked for NS ns (the kernel's SO_PREFER_BUSY_POLL with
    /// napi_defer_hard_irqs and gro_flush_timeout); 0 = off.
    #[arg(long, value_name = "NS", default_value_t = 0)]
    pub prefer_busy_poll: u64,
    /// AF_XDP: also let the kernel busy-poll the queue for US µs
    /// (SO_PREFER_BUSY_POLL, SO_BUSY_POLL on the XSK).
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub xdp_busy_poll: u32,
    /// Answer the sockperf client: clear the client bit (0x1) of its
    /// header's flags, and answer only messages that ask for a reply.
    #[arg(long)]
    pub sockperf: bool,
    /// UDP checksums: auto trusts what the device verified or marked
    /// partial (a local sender's offload: AF_PACKET says so; on AF_XDP a
    /// veth/tun/bridge's partial checksum is known by its value) and
    /// verifies the rest; verify checks every one; trust none.
    #[arg(long, value_parser = clap::value_parser!(rxpath_core::ip::CsumPolicy), default_value = "auto")]
    pub csum: rxpath_core::ip::CsumPolicy,
    /// Same as --csum trust.
    #[arg(long, hide = true)]
    pub no_verify_csum: bool,
    /// AF_XDP: what the XDP program takes (port: UDP to --port; all: every
    /// frame).
    #[arg(long, value_enum, default_value_t = EchoTake::Port)]
    pub xdp_take: EchoTake,
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// How replies leave on AF_XDP: `ring`, the TX ring of queue 0's own
    /// socket (no trip through the kernel's stack), or `packet`, an
    /// AF_PACKET socket on the interface (what AF_PACKET mode always uses).
    #[arg(long, value_enum, default_value_t = EchoTx::Ring)]
    pub tx: EchoTx,
    /// Fault injection: the TX ring stops completing for MS milliseconds at
    /// a time (every --tx-stall-every); replies then find no free frame and
    /// are counted (SndbufErrors, xsk_tx_busy), nothing is lost.
    #[arg(long, value_name = "MS")]
    pub tx_stall: Option<u64>,
    /// How often a --tx-stall begins, in ms.
    #[arg(long, value_name = "MS", default_value_t = 200)]
    pub tx_stall_every: u64,
    #[command(flatten)]
    pub filt: crate::filter::FilterArgs,
    #[command(flatten)]
    pub steer: crate::steer::SteerArgs,
    /// Serve Prometheus metrics at http://ADDR/metrics (see rxpath run).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:9464")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Keep serving the final metrics this long after echo stops.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub metrics_hold: Option<Duration>,
    /// Print the final report as JSON.
    #[arg(long)]
    pub json: bool,
}

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TxArg {
    Xdp,
    Packet,
}

/// Parse aa:bb:cc:dd:ee:ff.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split(':').collect();
    let mut m = [0u8; 6];
    if parts.len() != 6 {
        return Err(format!("'{s}' is not a MAC address"));
    }
    for (d, p) in m.iter_mut().zip(parts) {
        *d = u8::from_str_radix(p, 16).map_err(|_| format!("'{s}' is not a MAC address"))?;
    }
    Ok(m)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LabAction {
    /// Build it (idempotent).
    Up,
    /// Remove it (idempotent).
    Down,
    /// Show what exists.
    Status,
}

#[derive(Debug, Clone, Args)]
pub struct LabArgs {
    /// up, down or status.
    #[arg(value_enum)]
    pub action: LabAction,
    /// RX/TX queues on each veth end.
    #[arg(long, default_value_t = 2)]
    pub queues: usize,
    /// GRO on the host end.
    #[arg(long)]
    pub gro: bool,
    /// Threaded NAPI on the host end (turns GRO on: veth needs it).
    #[arg(long)]
    pub threaded: bool,
    /// Host-side interface name.
    #[arg(long, default_value = "rxp0")]
    pub host_if: String,
    /// Peer-side interface name.
    #[arg(long, default_value = "rxp1")]
    pub peer_if: String,
    /// Peer namespace name.
    #[arg(long, default_value = "rxp-peer")]
    pub netns: String,
}

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

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// Sleep until a queue's interrupt line fires (coalesced wakeups).
    Interrupt,
    /// Never sleep: poll every queue continuously.
    Poll,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CaptureArg {
    Rx,
    Delivered,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum XdpTake {
    /// IPv4 and IPv6.
    Ip,
    /// IPv4 only.
    Ipv4,
    /// IPv6 only.
    Ipv6,
    /// UDP over IPv4 or IPv6.
    Udp,
    /// TCP over IPv4 or IPv6.
    Tcp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// AF_XDP if it can be used, else AF_PACKET (with a message).
    Auto,
    /// AF_XDP.
    Xdp,
    /// AF_PACKET (with fanout over queues; `run` reads TPACKET_V3 blocks,
    /// `echo` a TPACKET_V2 ring that hands over every frame at once).
    Packet,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ProducerArg {
    /// A producer thread on another core writes every frame (cold data).
    Thread,
    /// Same-thread null queues: the engine's cost alone.
    Null,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StackArg {
    /// Deliver TCP/UDP at the end of the path, drop the rest.
    Sink,
    /// Parse and drop everything (lowest RX level).
    Rxdrop,
    /// Deliver, and measure send-to-delivery latency of stamped TCP request/response packets.
    Latency,
}

/// Options shared by `run` and the benchmarks.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub filt: crate::filter::FilterArgs,
    #[command(flatten)]
    pub steer: crate::steer::SteerArgs,
    /// A prefix IP input takes as local besides the interface's addresses,
    /// as the kernel's `ip route add local PREFIX` (repeatable).
    #[arg(long, value_name = "PREFIX", value_parser = parse_prefix)]
    pub local_route: Vec<(std::net::IpAddr, u8)>,
    /// RX queues: of the simulated NIC (default 2), or of the interface
    /// to open (default: all its RX queues, /sys/class/net/IF/queues/rx-*).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub queues: Option<u16>,
    /// TCP/UDP checksums: auto trusts what the device verified or marked
    /// partial (a local sender's offload; on AF_XDP over veth/tun/bridge a
    /// partial checksum is known by its value) and verifies the rest;
    /// verify checks every one; trust none.
    #[arg(long, value_parser = clap::value_parser!(rxpath_core::ip::CsumPolicy), default_value = "auto")]
    pub csum: rxpath_core::ip::CsumPolicy,
    /// Number of flows.
    #[arg(long, default_value_t = 64)]
    pub flows: usize,
    /// Flow mix: udp, tcp-bulk, tcp-rr or mixed.
    #[arg(long, default_value = "mixed")]
    pub mix: Mix,
    /// Run time: 5, 5s, 500ms, 1m.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// RX bulking: descriptors per bundle (1 = per packet).
    #[arg(long, default_value_t = 16)]
    pub bundle: usize,
    /// Also cut bundles where the RX hash changes.
    #[arg(long)]
    pub split_on_hash: bool,
    /// NAPI weight (packets per poll).
    #[arg(long, default_value_t = 64)]
    pub weight: usize,
    /// net.core.netdev_budget: packets per net_rx_action.
    #[arg(long, default_value_t = 300)]
    pub netdev_budget: usize,
    /// net.core.netdev_budget_usecs: time per net_rx_action.
    #[arg(long, default_value_t = 2000)]
    pub netdev_budget_usecs: u64,
    /// NAPI: interrupt (sleep until woken) or poll (never sleep).
    #[arg(long, value_enum, default_value_t = ModeArg::Interrupt)]
    pub napi: ModeArg,
    /// Receive from a real interface instead of the simulated NIC.
    #[arg(long, value_name = "IF")]
    pub iface: Option<String>,
    /// Replay a pcap file through the simulated NIC instead of generated traffic.
    #[arg(long, value_name = "FILE", conflicts_with = "iface")]
    pub pcap: Option<std::path::PathBuf>,
    /// Times to play --pcap (0: until the run ends).
    #[arg(long, default_value_t = 1)]
    pub loops: u64,
    /// Keep the recorded pacing of --pcap (else as fast as possible).
    #[arg(long)]
    pub paced: bool,
    /// Write packets to a pcap file (tcpdump and Wireshark open it).
    #[arg(long, value_name = "FILE")]
    pub capture: Option<std::path::PathBuf>,
    /// Where --capture taps: rx (every frame NAPI takes, before GRO) or delivered (end of the path, after GRO).
    #[arg(long, value_enum, default_value_t = CaptureArg::Delivered)]
    pub capture_at: CaptureArg,
    /// AF_XDP: what the XDP program takes (ip, ipv4, ipv6, udp, tcp); the rest goes to the kernel.
    #[arg(long, value_enum, default_value_t = XdpTake::Ip)]
    pub xdp_take: XdpTake,
    /// AF_XDP: let the kernel busy-poll each queue for US µs (SO_PREFER_BUSY_POLL, SO_BUSY_POLL).
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub xdp_busy_poll: u32,
    /// Backend for --iface: xdp (AF_XDP), packet (AF_PACKET), or auto.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub mode: BackendArg,
    /// thread (producer on another core) or null (engine alone).
    #[arg(long, value_enum, default_value_t = ProducerArg::Thread)]
    pub producer: ProducerArg,
    /// What the end of the path does.
    #[arg(long, value_enum, default_value_t = StackArg::Sink)]
    pub stack: StackArg,
    /// Offered rate in packets per second (default: as fast as possible).
    #[arg(long)]
    pub pps: Option<u64>,
    /// With --pps: the producer thread sleeps until its next batch is due
    /// instead of spinning (it leaves its core to a worker).
    #[arg(long)]
    pub producer_sleeps: bool,
    /// Fault injection (a seeded schedule): garbage=P (a share of frames
    /// of random bytes), lying=P (descriptors whose offset or length runs
    /// past their frame), starve=MS (the simulated NIC's fill ring reads
    /// empty for MS ms, every starve-every=MS on average: rx_no_buffer),
    /// stall=MS (each NAPI thread, and with --steer each other worker, stops
    /// for MS ms every stall-every=MS on average: its ring fills, rx_missed;
    /// a worker's backlog fills, backlog_full), seed=N; e.g. `--fault
    /// garbage=0.01,lying=0.001,stall=2,starve=1`. Each is counted.
    #[arg(long, value_name = "SPEC", value_parser = parse_faults)]
    pub fault: Option<rxpath_dev::sim::Faults>,
    /// Interrupt coalescing: µs after the first packet (ethtool rx-usecs).
    #[arg(long, default_value_t = 8)]
    pub rx_usecs: u32,
    /// Interrupt coalescing: packets (ethtool rx-frames).
    #[arg(long, default_value_t = 128)]
    pub rx_frames: u32,
    /// RX ring entries per queue (power of two).
    #[arg(long, default_value_t = 1024)]
    pub ring: usize,
    /// NAPI threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// UDP frame size in bytes (60..=1514).
    #[arg(long, default_value_t = 60)]
    pub udp_size: usize,
    /// Seed of the traffic generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Segments a bulk TCP flow sends back to back (a TSO chunk); 1 interleaves all flows.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub burst: u16,
    /// Do not pin threads to cores.
    #[arg(long)]
    pub no_pin: bool,
    /// Interrupt mode: wait for interrupts spinning (idle=poll) instead of
    /// sleeping, so an interrupt is taken within a microsecond.
    #[arg(long)]
    pub idle_poll: bool,
    /// Interrupt mode on an interface: wake the NAPI thread through a
    /// separate interrupt thread per queue (the default: a NAPI thread
    /// waits on its queues' sockets itself, one thread hop less).
    #[arg(long)]
    pub irq_thread: bool,
    /// GRO on every queue's NAPI (the kernel's default is on).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub gro: OnOff,
    /// gro_flush_timeout in ns: keep GRO packets across polls while traffic flows.
    #[arg(long, default_value_t = 0)]
    pub gro_flush_timeout: u64,
    /// Adaptive flush timeout: use up to NS for bulk traffic, 0 for request/response.
    #[arg(long, value_name = "NS")]
    pub gro_adaptive: Option<u64>,
    /// Print the final report as JSON on stdout (per-second lines go to stderr).
    #[arg(long)]
    pub json: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics (loopback port 9464
    /// when given without a value; port 0 picks a free one, printed on
    /// stderr).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:9464")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Keep serving the final metrics this long after the run ends.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub metrics_hold: Option<Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
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

/// `198.19.0.0/16`, `2001:2::/48` or an address (a /32 or /128).
pub fn parse_prefix(s: &str) -> Result<(std::net::IpAddr, u8), String> {
    let (a, l) = s.split_once('/').unwrap_or((s, ""));
    let a: std::net::IpAddr = a
        .parse()
        .map_err(|_| format!("'{s}' is not an address or prefix"))?;
    let max = if a.is_ipv4() { 32 } else { 128 };
    let l = if l.is_empty() {
        max
    } else {
        l.parse::<u8>()
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| format!("'{s}': the prefix length must be 0..={max}"))?
    };
    Ok((a, l))
}

/// Accept 5, 5s, 500ms, 2m.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let err = || format!("'{s}' is not a duration (try 5, 5s, 500ms or 1m)");
    let (num, mul) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| err())?;
    if !v.is_finite() || v <= 0.0 || v * mul > 86_400.0 {
        return Err(err());
    }
    Ok(Duration::from_secs_f64(v * mul))
}

impl RunArgs {
    /// Build and check the run configuration.
    pub fn config(&self) -> Result<RunConfig> {
        if !self.ring.is_power_of_two() || !(64..=16384).contains(&self.ring) {
            bail!(
                "--ring must be a power of two in 64..=16384, got {}",
                self.ring
            );
        }
        if self.pps == Some(0) {
            bail!("--pps must be > 0");
        }
        let traffic = TrafficConfig {
            flows: self.flows,
            mix: self.mix,
            udp_frame: self.udp_size,
            seed: self.seed,
            stamp: matches!(self.stack, StackArg::Latency),
            burst: self.burst as usize,
            ..TrafficConfig::default()
        };
        let queues = match (self.queues, &self.iface) {
            (Some(q), _) => q as usize,
            (None, Some(name)) => {
                rxpath_runtime::check_iface(name)?;
                rxpath_dev::sys::iface::rx_queues(name)
                    .map_err(|e| anyhow::anyhow!("{name}: counting its RX queues: {e}"))?
                    .min(64)
            }
            (None, None) => 2,
        };
        let sim = SimConfig {
            queues,
            ring_size: self.ring,
            frames_per_queue: self.ring * 2,
            coalesce: Coalesce {
                rx_usecs: self.rx_usecs,
                rx_frames: self.rx_frames,
            },
            sleep_pacing: self.producer_sleeps,
            faults: self.fault.unwrap_or_default(),
            ..SimConfig::default()
        };
        Ok(RunConfig {
            sim,
            traffic,
            idle_poll: self.idle_poll,
            irq_thread: self.irq_thread,
            weight: self.weight,
            bundle: BundleMode {
                size: self.bundle,
                split_on_hash: self.split_on_hash,
            },
            softnet: SoftnetConfig {
                netdev_budget: self.netdev_budget,
                netdev_budget_usecs: self.netdev_budget_usecs,
            },
            interrupts: matches!(self.napi, ModeArg::Interrupt),
            producer: match (&self.iface, self.producer) {
                (Some(name), _) => {
                    let iface = IfName::new(name)?;
                    match self.mode {
                        BackendArg::Packet => Producer::Packet { iface },
                        BackendArg::Xdp => Producer::Xdp {
                            iface,
                            fallback: false,
                        },
                        BackendArg::Auto => Producer::Xdp {
                            iface,
                            fallback: true,
                        },
                    }
                }
                (None, _) if self.pcap.is_some() => Producer::Pcap {
                    path: self.pcap.clone().unwrap_or_default(),
                    loops: self.loops,
                    paced: self.paced,
                    pps: self.pps,
                },
                (None, ProducerArg::Thread) => Producer::Thread { pps: self.pps },
                (None, ProducerArg::Null) => Producer::Null,
            },
            stack: match self.stack {
                StackArg::Sink => StackKind::Sink,
                StackArg::Rxdrop => StackKind::Rxdrop,
                StackArg::Latency => StackKind::Latency,
            },
            threads: self.threads,
            duration: self.duration,
            tick: Duration::from_secs(1),
            pin: !self.no_pin,
            null_frames: 512,
            gro: (self.gro == OnOff::On).then_some(GroSettings {
                flush_timeout_ns: self.gro_flush_timeout,
                adaptive: self.gro_adaptive.map(|max_ns| Adaptive {
                    max_ns,
                    ..Adaptive::default()
                }),
            }),
            capture: self.capture.clone(),
            csum: self.csum,
            local_routes: self.local_route.clone(),
            filter: None,
            steer: self.steer.config(self.threads)?,
            stop_worker: self.steer.stop_worker,
            sock_flows: None,
            local_traffic: false,
            stop: None,
            knobs: None,
            xdp_busy_poll_us: self.xdp_busy_poll,
            capture_at: match self.capture_at {
                CaptureArg::Rx => rxpath_runtime::CaptureAt::Rx,
                CaptureArg::Delivered => rxpath_runtime::CaptureAt::Delivered,
            },
            xdp_filter: {
                use rxpath_dev::sys::xdp::XdpFilter;
                let ip = XdpFilter::default();
                match self.xdp_take {
                    XdpTake::Ip => ip,
                    XdpTake::Ipv4 => XdpFilter { ipv6: false, ..ip },
                    XdpTake::Ipv6 => XdpFilter { ipv4: false, ..ip },
                    XdpTake::Udp => XdpFilter {
                        protocol: Some(17),
                        ..ip
                    },
                    XdpTake::Tcp => XdpFilter {
                        protocol: Some(6),
                        ..ip
                    },
                }
            },
        })
    }
}

/// As [`exit_on_clap_error`], naming the config file's key when the
/// unknown argument came from it.
pub fn exit_on_clap_error_with(e: clap::Error, config_keys: &[String]) -> ExitCode {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() == ErrorKind::UnknownArgument {
        if let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) {
            let name = arg.trim_start_matches('-');
            if config_keys.iter().any(|k| k == name) {
                eprintln!("rxpath: error: --config: unknown key '{name}' (keys are the subcommand's long flags without dashes)");
                return ExitCode::from(2);
            }
        }
    }
    exit_on_clap_error(e)
}

/// clap prints multi-line errors with usage; ours are one line. Help and
/// version go out as clap renders them.
pub fn exit_on_clap_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        _ => {
            let text = e.render().to_string();
            let first = text
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("bad arguments");
            let first = first.trim_start_matches("error: ");
            eprintln!("rxpath: error: {first} (see rxpath --help)");
            ExitCode::from(2)
        }
    }
}

/// `--fault garbage=P,lying=P,starve=MS[,starve-every=MS],stall=MS[,stall-every=MS],seed=N`.
pub(crate) fn parse_faults(s: &str) -> Result<rxpath_dev::sim::Faults, String> {
    const KINDS: &str = "garbage, lying, starve, starve-every, stall, stall-every, seed";
    let mut f = rxpath_dev::sim::Faults {
        starve_every_ms: 100.0,
        stall_every_ms: 100.0,
        ..Default::default()
    };
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?}: want KIND=VALUE ({KINDS})"))?;
        let num = || -> Result<f64, String> {
            let x: f64 = v.parse().map_err(|_| format!("{k}={v}: not a number"))?;
            if !x.is_finite() || x < 0.0 {
                return Err(format!("{k}={v}: not a number of 0 or more"));
            }
            Ok(x)
        };
        let share = || -> Result<f64, String> {
            let p = num()?;
            if p > 1.0 {
                return Err(format!("{k}={v}: a share is 0 to 1"));
            }
            Ok(p)
        };
        let ms = || -> Result<f64, String> {
            let m = num()?;
            if m > 10_000.0 {
                return Err(format!("{k}={v}: at most 10000 ms"));
            }
            Ok(m)
        };
        match k {
            "garbage" => f.garbage = share()?,
            "lying" => f.lying = share()?,
            "starve" => f.starve_ms = ms()?,
            "starve-every" => f.starve_every_ms = ms()?.max(0.01),
            "stall" => f.stall_ms = ms()?,
            "stall-every" => f.stall_every_ms = ms()?.max(0.01),
            "seed" => f.seed = v.parse().map_err(|_| format!("seed={v}: not a number"))?,
            o => return Err(format!("unknown fault {o:?}: {KINDS}")),
        }
    }
    if f.garbage + f.lying > 1.0 {
        return Err("the shares add up to more than 1".into());
    }
    Ok(f)
}
