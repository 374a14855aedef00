//! What the machine's handlers work with: the packets they send
//! ([`Transmit`]) and the context a connection's handler writes into
//! ([`Ctx`]: the knobs, the outgoing queue, the counters, the time).

use crate::config::TcpConfig;
use crate::time::Nanos;
use crate::{mib, state};
use std::collections::VecDeque;

/// A packet to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The IP packet, IP header first.
    pub packet: Vec<u8>,
    /// For a packet carrying more than one MSS (a TSO packet): the MSS
    /// the device cuts it into ([`crate::wire::segment`]); 0 for one segment.
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
