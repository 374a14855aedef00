//! The RFS sock flow table (seed 002: `rps_sock_flow_table`).
//!
//! `recv` records, for the flow of the socket's last packet, the CPU the
//! application reads it on (`sock_rps_record_flow`); a flow-steering stage
//! reads the entry to send the flow's packets to that CPU
//! (`get_rps_cpu`). Each entry keeps the hash's high bits next to the CPU
//! number, as the kernel's does, so a reader can tell a stale entry of
//! another flow that shares the slot.

use std::sync::atomic::{AtomicU32, Ordering};

/// Bits of an entry that hold the CPU (`rps_cpu_mask` for up to 4096 CPUs
/// would be 0xfff; 1024 CPUs is plenty here).
const CPU_BITS: u32 = 10;
const CPU_MASK: u32 = (1 << CPU_BITS) - 1;
const NO_CPU: u32 = CPU_MASK;

/// `rps_sock_flow_table`: flow hash → desired CPU.
#[derive(Debug)]
pub struct SockFlowTable {
    ents: Box<[AtomicU32]>,
    mask: u32,
}

impl SockFlowTable {
    /// A table of `entries` slots (rounded up to a power of two; 0 = off).
    pub fn new(entries: usize) -> Self {
        let n = if entries == 0 {
            0
        } else {
            entries.next_power_of_two()
        };
        SockFlowTable {
            ents: (0..n).map(|_| AtomicU32::new(NO_CPU)).collect(),
            mask: n.saturating_sub(1) as u32,
        }
    }

    /// Slots.
    pub fn len(&self) -> usize {
        self.ents.len()
    }

    /// True if the table is off.
    pub fn is_empty(&self) -> bool {
        self.ents.is_empty()
    }

    /// `rps_record_sock_flow()`: the flow with `hash` is read on `cpu`.
    #[inline]
    pub fn record(&self, hash: u32, cpu: u32) {
        if self.ents.is_empty() || hash == 0 {
            return;
        }
        let e = &self.ents[(hash & self.mask) as usize];
        let val = (hash & !CPU_MASK) | (cpu & CPU_MASK);
        // Only write on change, so readers' cache lines stay shared. This
        // store pairs with the load in `desired_cpu` (the kernel's
        // WRITE_ONCE/READ_ONCE pair).
        if e.load(Ordering::Relaxed) != val {
            e.store(val, Ordering::Relaxed);
        }
    }

    /// `get_rps_cpu()`'s read: the CPU the flow's reader last ran on, if
    /// the slot holds this flow.
    #[inline]
    pub fn desired_cpu(&self, hash: u32) -> Option<u32> {
        if self.ents.is_empty() || hash == 0 {
            return None;
        }
        let v = self.ents[(hash & self.mask) as usize].load(Ordering::Relaxed);
        ((v ^ hash) & !CPU_MASK == 0 && v & CPU_MASK != NO_CPU).then_some(v & CPU_MASK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_tells_flows_apart() {
        let t = SockFlowTable::new(1000);
        assert_eq!(t.len(), 1024);
        let (a, b) = (0xdead_b001u32, 0x1234_5001u32); // same slot (low bits)
        assert_eq!(t.desired_cpu(a), None);
        t.record(a, 3);
        assert_eq!(t.desired_cpu(a), Some(3));
        assert_eq!(t.desired_cpu(b), None, "another flow in the same slot");
        t.record(b, 1);
        assert_eq!(t.desired_cpu(b), Some(1));
        assert_eq!(t.desired_cpu(a), None);
        let off = SockFlowTable::new(0);
        off.record(a, 1);
        assert_eq!(off.desired_cpu(a), None);
    }
}
