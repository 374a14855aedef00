//! Order, measured at delivery: a per-flow `reordered` counter.
//!
//! A packet is out of order when its sequence number is before the last one
//! its flow delivered (wrap-safe, as TCP's `before()`). The number is TCP's
//! sequence number, or for the simulated NIC's UDP traffic the 32-bit
//! counter it writes at the start of each datagram's payload. Equal
//! numbers (a retransmission) are not counted.
//!
//! The table is shared by every worker: with RPS or RFS a flow's packets
//! are delivered on one worker at a time, but RFS moves flows between
//! workers, and the check must see the flow's last packet wherever it was
//! delivered. One direct-mapped slot per flow hash (4096 slots); a flow
//! that takes a slot from another starts afresh (never counted as
//! reordered).

use crate::packet::Packet;
use rxpath_wire::L4;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a packet's sequence number comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SeqSource {
    /// TCP only.
    #[default]
    Tcp,
    /// TCP, and the first 4 bytes of a UDP payload (the simulated NIC
    /// numbers each flow's datagrams).
    TcpAndUdpCounter,
}

/// The packet's sequence number, if it carries one.
pub fn seq_of(pkt: &Packet, data: &[u8], src: SeqSource) -> Option<u32> {
    let h = &pkt.meta.headers;
    let at = match h.l4 {
        L4::Tcp { .. } => h.l4_offset as usize + 4,
        L4::Udp if src == SeqSource::TcpAndUdpCounter && h.payload_len >= 4 => {
            h.payload_offset as usize
        }
        _ => return None,
    };
    let b = data.get(at..at + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

const SLOTS: usize = 4096;

/// Per-flow order at delivery.
#[derive(Debug)]
pub struct OrderCheck {
    /// `hash << 32 | last seq` of the flow in the slot.
    last: Box<[AtomicU64]>,
    /// Packets delivered out of order, per slot.
    reordered: Box<[AtomicU64]>,
    src: SeqSource,
}

impl OrderCheck {
    /// An empty table.
    pub fn new(src: SeqSource) -> Self {
        OrderCheck {
            last: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            reordered: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            src,
        }
    }

    /// Where sequence numbers come from.
    pub fn source(&self) -> SeqSource {
        self.src
    }

    /// Check a packet of the flow with `hash` (non-zero) and `seq`;
    /// true if it is out of order.
    pub fn observe(&self, hash: u32, seq: u32) -> bool {
        let i = hash as usize & (SLOTS - 1);
        let new = (hash as u64) << 32 | seq as u64;
        let old = self.last[i].load(Ordering::Acquire);
        let same_flow = (old >> 32) as u32 == hash && old != 0;
        if same_flow && ((seq.wrapping_sub(old as u32)) as i32) < 0 {
            self.reordered[i].fetch_add(1, Ordering::Relaxed);
            return true;
        }
        self.last[i].store(new, Ordering::Release);
        false
    }

    /// Packets delivered out of order, all flows.
    pub fn reordered(&self) -> u64 {
        self.reordered
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Flows (slots) with at least one packet out of order.
    pub fn flows_reordered(&self) -> u64 {
        self.reordered
            .iter()
            .filter(|c| c.load(Ordering::Relaxed) > 0)
            .count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_steps_back_per_flow_wrap_safe() {
        let c = OrderCheck::new(SeqSource::Tcp);
        assert!(!c.observe(7, 10));
        assert!(!c.observe(7, 11));
        assert!(c.observe(7, 9), "9 after 11 is out of order");
        assert!(!c.observe(7, 11), "a repeat is not");
        assert!(!c.observe(8, 1), "another flow has its own order");
        assert!(!c.observe(9, u32::MAX));
        assert!(!c.observe(9, 2), "2 after 2^32-1 is after (wrap)");
        assert_eq!(c.reordered(), 1);
        assert_eq!(c.flows_reordered(), 1);
    }
}
