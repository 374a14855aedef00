//! A judge's per-thread state: an exact-match flow cache in front of the
//! classifier and counters added up per bundle.
//!
//! The verdict of a rule set is a function of the packet's key alone (the
//! interface is fixed per set), so a thread may remember it per key, as
//! Open vSwitch's exact-match cache remembers a megaflow's actions. The
//! cached key keeps only the fields some rule looks at (a set without
//! `-m length` does not tell packets apart by length), so every packet of
//! a flow hits. An entry holds the verdict and the counters the walk
//! touched (a jump, `LOG`, the deciding rule or policy); a hit adds to
//! the same counters, so counts stay exactly the kernel's. Entries belong
//! to one loaded filter: a new filter empties the cache. The linear walk,
//! the kernel's cost by definition, never goes through the cache.
//!
//! Counters are added up in the thread and written to the shared atomics
//! at the end of each bundle (the kernel keeps per-CPU counters and sums
//! them when read): a flow's packets cost one atomic add per bundle, not
//! two per packet.

use super::{Filter, FilterMode, Key, Verdict};
use arrayvec::ArrayVec;

/// Counters one walk touched, at most this many (more: counted at once
/// and not cached).
pub(super) const PATH: usize = 4;

/// Counter slots a walk touched.
pub(super) type Path = ArrayVec<u32, PATH>;

#[derive(Debug, Clone)]
struct Entry {
    key: Key,
    v6: bool,
    verdict: Verdict,
    path: Path,
    /// Packets and bytes of this bundle not yet added to the counters.
    packets: u32,
    bytes: u64,
}

/// What one thread needs to judge packets fast: see the module docs.
#[derive(Debug)]
pub struct Judge {
    cache: Vec<Option<Entry>>,
    mask: usize,
    /// The filter the entries came from.
    filter: u64,
    /// Entries with pending counts.
    dirty: Vec<u32>,
    /// Cache hits.
    pub hits: u64,
    /// Lookups that walked the rules.
    pub misses: u64,
}

impl Judge {
    /// A judge with a flow cache of `entries` (rounded up to a power of
    /// two; 0: no cache, every packet walks).
    pub fn new(entries: usize) -> Judge {
        let n = if entries == 0 {
            0
        } else {
            entries.next_power_of_two()
        };
        Judge {
            cache: vec![None; n],
            mask: n.saturating_sub(1),
            filter: u64::MAX,
            dirty: Vec::with_capacity(n.min(1024)),
            hits: 0,
            misses: 0,
        }
    }

    /// Judge `k` by `f`'s set for its family (`None`: no set, it goes
    /// on). Counts of cached flows stay here until [`Self::flush`].
    /// `rxhash`, if not 0, is the packet's flow hash: it picks the cache
    /// slot (the key decides a hit either way).
    #[inline]
    pub fn judge(&mut self, f: &Filter, k: &Key, v6: bool, rxhash: u32) -> Option<Verdict> {
        let rs = if v6 { f.v6.as_ref() } else { f.v4.as_ref() }?;
        if self.filter != f.id {
            // Another filter: nothing cached is valid, and nothing is
            // pending (the caller flushes before it lets a filter go).
            debug_assert!(self.dirty.is_empty(), "judge: flush before a new filter");
            self.flush_all(None);
            self.cache.iter_mut().for_each(|e| *e = None);
            self.filter = f.id;
        }
        if self.cache.is_empty() || rs.mode() == FilterMode::Linear {
            self.misses += 1;
            return Some(rs.judge(k));
        }
        let nk = rs.cache_key(k);
        let h = if rxhash != 0 {
            rxhash as usize
        } else {
            hash(&nk, v6)
        };
        let slot = h & self.mask;
        if let Some(e) = &mut self.cache[slot] {
            if e.v6 == v6 && e.key == nk {
                self.hits += 1;
                if e.packets == 0 {
                    self.dirty.push(slot as u32);
                }
                e.packets += 1;
                e.bytes += k.len as u64;
                return Some(e.verdict);
            }
        }
        self.misses += 1;
        let mut path = Path::new();
        let (v, whole) = rs.walk_path_checked(k, &mut path);
        if !whole {
            // Counted by the walk already (the part past the path's room
            // at once, the rest here).
            for &s in &path {
                rs.add(s, 1, k.len as u64);
            }
            return Some(v);
        }
        // The evicted entry's pending counts go first.
        if let Some(old) = self.cache[slot].take() {
            flush_entry(f, &old);
        }
        self.dirty.push(slot as u32);
        self.cache[slot] = Some(Entry {
            key: nk,
            v6,
            verdict: v,
            path,
            packets: 1,
            bytes: k.len as u64,
        });
        Some(v)
    }

    /// Write the pending counts to `f`'s shared counters (at the end of a
    /// bundle, while the bundle's filter is still held).
    pub fn flush(&mut self, f: &Filter) {
        if self.filter == f.id {
            self.flush_all(Some(f));
        }
    }

    fn flush_all(&mut self, f: Option<&Filter>) {
        for slot in self.dirty.drain(..) {
            if let Some(e) = &mut self.cache[slot as usize] {
                if let Some(f) = f {
                    flush_entry(f, e);
                }
                e.packets = 0;
                e.bytes = 0;
            }
        }
    }
}

fn flush_entry(f: &Filter, e: &Entry) {
    if e.packets == 0 {
        return;
    }
    if let Some(rs) = if e.v6 { f.v6.as_ref() } else { f.v4.as_ref() } {
        for &s in &e.path {
            rs.add(s, e.packets as u64, e.bytes);
        }
    }
}

#[inline]
fn hash(k: &Key, v6: bool) -> usize {
    // Multiply-fold: cheap, and spreads the fields flows differ in.
    let mut h = (k.src as u64) ^ ((k.src >> 64) as u64).rotate_left(17);
    h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (k.dst as u64) ^ ((k.dst >> 64) as u64);
    h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ ((k.sport as u64) << 32 | k.dport as u64)
        ^ (k.proto as u64) << 56
        ^ (k.len as u64) << 40
        ^ (k.tcp_flags as u64 ^ k.icmp as u64) << 20
        ^ v6 as u64;
    (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize
}
