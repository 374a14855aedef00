//! ntuple steering rules on the simulated NIC: what a driver's
//! `ndo_rx_flow_steer()` installs for accelerated RFS (`ethtool -N IF
//! flow-type ... action Q`), so that a flow's packets arrive on the queue
//! whose NAPI runs on its reader's CPU. A rule overrides RSS for its flow
//! until the stack lets it expire (`rps_may_expire_flow()`).
//!
//! The table is direct-mapped by flow hash (like a NIC's hash filter
//! table): one slot per `hash & mask`, a new rule replaces an old one in its
//! slot. Slots are atomics: the host installs and removes rules while the
//! port (the producer thread) reads them.

use std::sync::atomic::{AtomicU64, Ordering};

/// The NIC's ntuple filter table.
#[derive(Debug)]
pub struct FlowRules {
    /// `hash << 32 | (queue + 1)`; 0 = empty.
    slots: Box<[AtomicU64]>,
    installed: AtomicU64,
    expired: AtomicU64,
    hits: AtomicU64,
}

/// A rule's id (`filter_id`): its slot.
pub type FilterId = usize;

impl FlowRules {
    /// A table of `entries` slots (rounded up to a power of two, at least 1).
    pub fn new(entries: usize) -> Self {
        let n = entries.max(1).next_power_of_two();
        FlowRules {
            slots: (0..n).map(|_| AtomicU64::new(0)).collect(),
            installed: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            hits: AtomicU64::new(0),
        }
    }

    fn slot(&self, hash: u32) -> usize {
        hash as usize & (self.slots.len() - 1)
    }

    /// `ndo_rx_flow_steer()`: packets of the flow with `hash` go to
    /// `queue` from now on. Returns the rule's id.
    pub fn steer(&self, hash: u32, queue: u16) -> FilterId {
        let i = self.slot(hash);
        self.slots[i].store((hash as u64) << 32 | (queue as u64 + 1), Ordering::Release);
        self.installed.fetch_add(1, Ordering::Relaxed);
        i
    }

    /// The queue a rule sends `hash` to, if one does (the NIC's lookup
    /// before RSS).
    #[inline]
    pub fn lookup(&self, hash: u32) -> Option<u16> {
        let v = self.slots[self.slot(hash)].load(Ordering::Acquire);
        if v != 0 && (v >> 32) as u32 == hash {
            self.hits.fetch_add(1, Ordering::Relaxed);
            Some(((v & 0xffff_ffff) - 1) as u16)
        } else {
            None
        }
    }

    /// The rule in slot `id`: its flow hash and queue.
    pub fn rule(&self, id: FilterId) -> Option<(u32, u16)> {
        let v = self.slots.get(id)?.load(Ordering::Acquire);
        (v != 0).then(|| ((v >> 32) as u32, ((v & 0xffff_ffff) - 1) as u16))
    }

    /// Remove rule `id` if it still is the flow `hash`'s (the driver, once
    /// `rps_may_expire_flow()` said yes).
    pub fn expire(&self, id: FilterId, hash: u32) -> bool {
        let Some(s) = self.slots.get(id) else {
            return false;
        };
        let v = s.load(Ordering::Acquire);
        if v == 0 || (v >> 32) as u32 != hash {
            return false;
        }
        let gone = s
            .compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok();
        if gone {
            self.expired.fetch_add(1, Ordering::Relaxed);
        }
        gone
    }

    /// Slots.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True if the table has no slot (never: at least one).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Rules installed, expired, and packets a rule steered.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.installed.load(Ordering::Relaxed),
            self.expired.load(Ordering::Relaxed),
            self.hits.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_overrides_until_it_expires() {
        let r = FlowRules::new(64);
        assert_eq!(r.lookup(0xabcd_0001), None);
        let id = r.steer(0xabcd_0001, 3);
        assert_eq!(r.lookup(0xabcd_0001), Some(3));
        assert_eq!(r.lookup(0x1234_0001), None, "another flow in the same slot");
        assert_eq!(r.rule(id), Some((0xabcd_0001, 3)));
        assert!(!r.expire(id, 0x1234_0001), "not that flow's rule");
        assert!(r.expire(id, 0xabcd_0001));
        assert_eq!(r.lookup(0xabcd_0001), None);
        assert_eq!(r.counts(), (1, 1, 1), "installed, expired, packets steered");
    }
}
