//! Values the commands' options share (NAPI mode, backend, producer,
//! stack, capture point, what XDP takes, on/off).

use clap::ValueEnum;

/// How NAPI threads learn of packets.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// Sleep until a queue's interrupt line fires (coalesced wakeups).
    Interrupt,
    /// Never sleep: poll every queue continuously.
    Poll,
}

/// Where `--capture` taps the path.
// Variants as values: a doc comment would become their help text and
// turn the one-line `[possible values: ...]` into a list.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CaptureArg {
    Rx,
    Delivered,
}

/// What the XDP program takes.
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

/// Which device backend.
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

/// What feeds the simulated NIC.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ProducerArg {
    /// A producer thread on another core writes every frame (cold data).
    Thread,
    /// Same-thread null queues: the engine's cost alone.
    Null,
    /// Same-thread null queues of cold data: a frame region twice the
    /// last-level cache, handed out in a shuffled cycle (every packet's
    /// data a cache miss, as after DMA; no producer thread to limit).
    NullCold,
}

/// What runs at the end of the path.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StackArg {
    /// Deliver TCP/UDP at the end of the path, drop the rest.
    Sink,
    /// Parse and drop everything (lowest RX level).
    Rxdrop,
    /// Deliver, and measure send-to-delivery latency of stamped TCP request/response packets.
    Latency,
}
