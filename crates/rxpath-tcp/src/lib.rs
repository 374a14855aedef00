//! rxpath's TCP: a sans-I/O protocol machine with Linux's behaviour.
//!
//! In the manner of `quinn-proto`: segments (IP packets) and the time go
//! in ([`Stack::input`], [`Stack::on_timeout`]); segments, the next timer
//! deadline and socket readiness come out ([`Stack::poll_transmit`],
//! [`Stack::next_deadline`], [`Stack::events`]). Nothing here reads a
//! clock, opens a file or parks a thread.
//!
//! The kernel's TCP is the specification and its names the vocabulary
//! (`tcp_input.c`: `tcp_rcv_state_process`, `tcp_data_queue`,
//! `__tcp_ack_snd_check`; `tcp_output.c`: `tcp_write_xmit`; `tcp_timer.c`).
//! packetdrill's scripts judge it (`docs/RELIABILITY.md`).
//!
//! ICMP errors quoting its segments go in by the same door
//! ([`Stack::input`]): path MTU, unreachable peers (`tcp_v4_err`).
//!
//! Not yet here (said in the README and the guide's TCP page): urgent
//! data, the experimental Fast Open option, Accurate ECN, pacing. On the path `rxpath-core`'s socket
//! layer drives it (a host with TCP); `rxpath-drill` drives it for
//! packetdrill.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod conn;
pub mod cubic;
pub mod ecn;
mod err;
pub mod fastopen;
pub mod info;
mod input;
pub mod mib;
mod output;
pub mod rcvbuf;
pub mod recovery;
mod retransmit;
pub mod seq;
mod stack;
pub mod state;
mod timer;
pub mod wire;

pub use config::TcpConfig;
pub use conn::State;
pub use info::TcpInfo;
pub use stack::{Errno, SockId, SockOpt, Stack, TCP_FASTOPEN_CONNECT};

use std::collections::VecDeque;

/// A packet to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The IP packet, IP header first.
    pub packet: Vec<u8>,
    /// For a packet carrying more than one MSS (a TSO packet): the MSS
    /// the device cuts it into ([`wire::segment`]); 0 for one segment.
    pub gso_size: u16,
}

impl Transmit {
    /// A single-segment packet.
    pub fn one(packet: Vec<u8>) -> Self {
        Transmit {
            packet,
            gso_size: 0,
        }
    }
}

/// Time in nanoseconds from an origin the driver chooses (the machine
/// only compares and subtracts).
pub type Nanos = u64;

/// What a connection's handlers write into: the knobs, the outgoing
/// packets and the counters.
pub(crate) struct Ctx<'a> {
    pub cfg: &'a TcpConfig,
    pub out: &'a mut VecDeque<Transmit>,
    pub mib: &'a mut mib::Tcp,
    pub ext: &'a mut mib::TcpExt,
    pub now: Nanos,
    pub ip_id: &'a mut u16,
    pub fo_cache: &'a mut state::Cache,
    /// The device refuses packets now (a full queue, `NET_XMIT_DROP`).
    pub tx_stopped: bool,
}

impl Ctx<'_> {
    pub(crate) fn next_ip_id(&mut self) -> u16 {
        *self.ip_id = self.ip_id.wrapping_add(1);
        *self.ip_id
    }
}
