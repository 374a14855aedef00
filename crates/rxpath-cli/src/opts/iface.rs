//! Options of the commands on an interface: `echo`, `quic`, `gen`, `lab`.

use super::*;
use clap::{Args, Parser, ValueEnum};
use rxpath_dev::sim::Mix;
use std::net::SocketAddr;
use std::time::Duration;

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
    /// rxpath: napi_defer_hard_irqs (interrupt mitigation): after a poll
    /// that found packets the interrupt stays masked and the NAPI timer
    /// polls every --gro-flush-timeout ns, until N polls in a row find
    /// nothing; what arrives meanwhile is taken, and read, in one go.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub defer_hard_irqs: u32,
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
    /// gro_flush_timeout in ns (0: GRO flushes at every completion; the
    /// NAPI timer's period with --defer-hard-irqs).
    #[arg(long, value_name = "NS", default_value_t = 0)]
    pub gro_flush_timeout: u64,
    /// napi_defer_hard_irqs (interrupt mitigation): after a poll that
    /// found packets the interrupt stays masked and the NAPI timer polls
    /// every --gro-flush-timeout ns, until N polls in a row find nothing.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub defer_hard_irqs: u32,
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
    /// The INPUT filter.
    #[command(flatten)]
    pub filt: crate::filter::FilterArgs,
    /// Steering to workers (RPS/RFS, spread).
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

/// What `rxpath lab` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LabAction {
    /// Build it (idempotent).
    Up,
    /// Remove it (idempotent).
    Down,
    /// Show what exists.
    Status,
}

/// `rxpath lab` arguments.
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
