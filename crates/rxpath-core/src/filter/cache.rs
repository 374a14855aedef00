//! A judge's per-thread state: an exact-match flow cache in front of the
//! classifier and counters added up per bundle.
//!
//! The verdict of a rule set is a function of the packet's key alone (the
//! interface is fixed per set), so a thread may remember it per key, as
//! Open vSwitch's exact-match cache remembers a megaflow's actions. The
//! cached key keeps only the fields some rule looks at (a set without
//! `-m length` does not tell packets apart by length), so every packet of
//! a flow hits. An entry holds the verdict and the counters the walk
//! touched (a jump, `LOG`, the deciding rule or policy); a hit adds to the
//! same counters, so counts stay exactly the kernel's. Entries belong to
//! one loaded filter: a new filter empties the cache. The linear walk, the
//! kernel's cost by definition, never goes through the cache.
//!
//! The common packet (IPv4 TCP or UDP, no fragment, with its flow hash)
//! has a cache of its own, keyed in two words (addresses, ports,
//! protocol, TCP flags and IP length), its entries kept apart from their
//! verdicts' counters so that a hit reads half a cache line: a few dozen
//! instructions. IP input, which has checked the headers, hands the hook
//! what it learnt ([`LocalIn`]: addresses, protocol, length), and the key
//! takes only the ports from the parsed headers. Other packets (IPv6 too) build the full
//! [`Key`] first and use the other cache.
//!
//! Counts are added up in the thread per counter, as the kernel keeps
//! per-CPU counters and sums them when read, and written to the shared
//! atomics at the end of each bundle: one atomic add per counter a bundle
//! touched (64 flows that all end at the policy are one), not two per
//! packet.

use super::LocalIn;
use super::{Action, Filter, FilterMode, Key, Ruleset, Used, Verdict};
use arrayvec::ArrayVec;
use rxpath_wire::{Headers, IpAddrs, L3, L4};
use std::net::IpAddr;

/// Counters one walk touched, at most this many (more: counted at once
/// and not cached).
pub(super) const PATH: usize = 4;

/// Counter slots a walk touched.
pub(super) type Path = ArrayVec<u32, PATH>;

/// A cache key: word 0 ports, protocol, fragment and family; word 1 TCP
/// flags, ICMP type and code, IP length (each ≤ 21 bits: a port or type is
/// 16 bits or [`super::ABSENT`]); then the source and destination as
/// numbers (two words each).
pub(super) type Packed = [u64; 6];

/// A quick key (IPv4 TCP or UDP, no fragment): word 0 the source and
/// destination addresses, word 1 the source port, the destination port,
/// the protocol, the TCP flags (0 for UDP: the protocol tells the two
/// apart) and the IP length, 16, 16, 8, 8 and 16 bits. The protocol is
/// never 0, so the all-zero key is an empty entry.
pub(super) type Quick = [u64; 2];

/// What [`Judge::probe`] found.
pub(super) enum Probe {
    /// A hit, counted: its action.
    Hit(Action),
    /// A miss: the packet's quick key and its slot.
    Miss(Quick, usize),
    /// No quick key (not IPv4 TCP or UDP, a fragment, a short frame).
    Other,
}

/// A quick cache entry: the key, the action, the packets and bytes of its
/// hits not yet folded into the counters the walk touched (a hit is two
/// adds; see [`Judge::flush`]), and how many counters that walk touched
/// (at least one: a walk ends at a rule or a policy; their slots are in
/// [`Judge::quick_path`]). 32 bytes, aligned: two to a cache line, and a
/// hit touches one.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(32))]
struct QEntry {
    key: Quick,
    bytes: u64,
    packets: u32,
    n: u8,
    action: Action,
}

const EMPTY: QEntry = QEntry {
    key: [0; 2],
    bytes: 0,
    packets: 0,
    n: 0,
    action: Action::Accept,
};

#[derive(Debug, Clone)]
struct Entry {
    key: Packed,
    action: Action,
    /// Pending-counter indices (v6 slots after the v4 set's).
    path: Path,
    verdict: Verdict,
}

/// What one thread needs to judge packets fast: see the module docs.
#[derive(Debug)]
pub struct Judge {
    cache: Vec<Option<Entry>>,
    /// The quick keys' cache, as many entries.
    quick: Vec<QEntry>,
    /// The counter slots of each quick entry's walk.
    quick_path: Vec<[u32; PATH]>,
    mask: usize,
    /// The filter the entries and pending counts belong to.
    filter: u64,
    /// That filter, if its IPv4 set is compiled and there is a cache (the
    /// quick path's precondition, one compare); else `u64::MAX`.
    quick_filter: u64,
    /// The bits of a quick key that set's rules look at.
    quick_mask: Quick,
    /// Counter slots of the filter's v4 set (v6 slots come after).
    v4_slots: usize,
    /// Packets and bytes not yet added to the shared counters, per slot.
    pending: Vec<[u64; 2]>,
    /// Slots with pending counts.
    dirty: Vec<u32>,
    /// Quick entries with hits not yet folded.
    hit: Vec<u32>,
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
            quick: vec![EMPTY; n],
            quick_path: vec![[0; PATH]; n],
            mask: n.saturating_sub(1),
            filter: u64::MAX,
            quick_filter: u64::MAX,
            quick_mask: [0; 2],
            v4_slots: 0,
            pending: Vec::new(),
            dirty: Vec::with_capacity(64),
            hit: Vec::with_capacity(64),
            hits: 0,
            misses: 0,
        }
    }

    /// Start judging by `f`: nothing cached is valid any more, nothing is
    /// pending (the caller flushed before it let the old filter go).
    #[cold]
    fn adopt(&mut self, f: &Filter) {
        debug_assert!(
            self.dirty.is_empty() && self.hit.is_empty(),
            "judge: flush before a new filter"
        );
        self.dirty.clear();
        self.hit.clear();
        self.cache.iter_mut().for_each(|e| *e = None);
        self.quick.iter_mut().for_each(|e| *e = EMPTY);
        self.v4_slots = f.v4.as_ref().map_or(0, |r| r.slots());
        self.quick_filter = u64::MAX;
        if let Some(rs) = f.v4.as_ref() {
            if rs.mode() == FilterMode::Compiled && !self.quick.is_empty() {
                self.quick_filter = f.id;
                self.quick_mask = rs.quick_mask();
            }
        }
        let all = self.v4_slots + f.v6.as_ref().map_or(0, |r| r.slots());
        self.pending.clear();
        self.pending.resize(all, [0; 2]);
        self.filter = f.id;
    }

    /// Judge `k` by `f`'s set for its family (`None`: no set, it goes
    /// on). Counts of cached flows stay here until [`Self::flush`].
    /// `rxhash`, if not 0, is the packet's flow hash: it picks the cache
    /// slot (the key decides a hit either way).
    pub fn judge(&mut self, f: &Filter, k: &Key, v6: bool, rxhash: u32) -> Option<Verdict> {
        let rs = if v6 { f.v6.as_ref() } else { f.v4.as_ref() }?;
        if self.filter != f.id {
            self.adopt(f);
        }
        if self.cache.is_empty() || rs.mode() == FilterMode::Linear {
            return Some(self.walk_uncached(rs, k, v6));
        }
        let key = and(full_key(k, v6), rs.cache_mask());
        let h = if rxhash != 0 {
            rxhash as usize
        } else {
            hash(&key)
        };
        let slot = h & self.mask;
        if self.hit(&key, slot, k.len).is_none() {
            return Some(self.miss(rs, k, key, v6, slot));
        }
        self.cache[slot].as_ref().map(|e| e.verdict)
    }

    /// [`Self::judge`] of a parsed frame (`None`: not IP, or no set for
    /// its family).
    pub fn judge_frame(
        &mut self,
        f: &Filter,
        frame: &[u8],
        h: &Headers,
        rxhash: u32,
    ) -> Option<Verdict> {
        let v6 = match h.l3 {
            L3::Ipv4 => false,
            L3::Ipv6 => true,
            _ => return None,
        };
        self.judge(f, &super::key(frame, h)?, v6, rxhash)
    }

    /// The action of [`Self::judge_frame`] (accept: not IP, or no set for
    /// its family), the stage's fast path: see the module docs.
    #[inline(always)]
    pub fn action(&mut self, f: &Filter, frame: &[u8], h: &Headers, rxhash: u32) -> Action {
        if self.quick_filter == f.id {
            match self.probe(frame, h, rxhash) {
                Probe::Hit(a) => return a,
                Probe::Miss(key, slot) => return self.quick_miss(f, frame, h, key, slot),
                Probe::Other => {}
            }
        }
        self.action_slow(f, frame, h, rxhash)
    }

    /// Start judging by `f` if this judge was not; true if its quick
    /// path ([`Self::probe`]) now stands for `f`.
    pub(super) fn prepare(&mut self, f: &Filter) -> bool {
        if self.filter != f.id {
            self.adopt(f);
        }
        self.quick_filter == f.id
    }

    /// The quick path, for a judge [`Self::prepare`]d for the filter the
    /// packet is judged by: a hit's action (counted), or where a miss goes,
    /// or `Other` for a packet with no quick key.
    #[inline(always)]
    pub(super) fn probe(&mut self, frame: &[u8], h: &Headers, rxhash: u32) -> Probe {
        match quick_key(frame, h) {
            Some((raw, len)) => self.probe_key(raw, len, rxhash),
            None => Probe::Other,
        }
    }

    /// [`Self::probe`] of a packet IP input hands the hook: its key from
    /// what IP input learnt (`at`), with no parsed header to consult.
    #[inline(always)]
    pub(super) fn probe_in(
        &mut self,
        frame: &[u8],
        h: &Headers,
        at: &LocalIn,
        rxhash: u32,
    ) -> Probe {
        match quick_key_in(frame, h, at) {
            Some((raw, len)) => self.probe_key(raw, len, rxhash),
            None => Probe::Other,
        }
    }

    #[inline(always)]
    fn probe_key(&mut self, raw: Quick, len: u32, rxhash: u32) -> Probe {
        let key = self.masked(raw);
        let hash = if rxhash != 0 {
            rxhash
        } else {
            quick_hash(&key)
        };
        let slot = hash as usize & self.mask;
        let Some(e) = self.quick.get_mut(slot).filter(|e| e.key == key) else {
            return Probe::Miss(key, slot);
        };
        // One compare for both rare cases: the entry's first hit since it
        // was folded (remember it) and a count about to wrap (fold it).
        if e.packets.wrapping_add(1) <= 1 {
            return Probe::Hit(self.quick_first_hit(slot, len));
        }
        e.packets += 1;
        e.bytes += len as u64;
        Probe::Hit(e.action)
    }

    #[inline(always)]
    fn masked(&self, raw: Quick) -> Quick {
        [raw[0] & self.quick_mask[0], raw[1] & self.quick_mask[1]]
    }

    #[cold]
    #[inline(never)]
    fn quick_first_hit(&mut self, slot: usize, len: u32) -> Action {
        if self.quick[slot].packets != 0 {
            self.fold(slot);
        }
        self.hit.push(slot as u32);
        let e = &mut self.quick[slot];
        e.packets = 1;
        e.bytes = len as u64;
        e.action
    }

    /// A quick key's miss: walk, and remember the answer in `slot`.
    #[inline(never)]
    pub(super) fn quick_miss(
        &mut self,
        f: &Filter,
        frame: &[u8],
        h: &Headers,
        key: Quick,
        slot: usize,
    ) -> Action {
        let (Some(rs), Some(k)) = (f.v4.as_ref(), super::key(frame, h)) else {
            return Action::Accept;
        };
        let (v, path, whole) = self.walk_pending(rs, &k, false);
        // The walk judged the parsed headers' view of the packet, the key
        // may be IP input's: remembered only if the two agree (a frame the
        // flow dissector reads differently is walked every time).
        let agree = quick_key(frame, h).is_some_and(|(raw, _)| self.masked(raw) == key);
        if whole && !path.is_empty() && agree {
            self.fold(slot);
            self.quick[slot] = QEntry {
                key,
                n: path.len() as u8,
                action: v.action,
                ..EMPTY
            };
            self.quick_path[slot][..path.len()].copy_from_slice(&path);
        }
        v.action
    }

    /// The general path: the full key and the other cache.
    #[inline(never)]
    pub(super) fn action_slow(
        &mut self,
        f: &Filter,
        frame: &[u8],
        h: &Headers,
        rxhash: u32,
    ) -> Action {
        self.judge_frame(f, frame, h, rxhash)
            .map_or(Action::Accept, |v| v.action)
    }

    /// The cached action of `key` (the first `N` words of a key: the
    /// rest are 0 in every key of its kind) in `slot`, its counts added.
    #[inline(always)]
    fn hit<const N: usize>(&mut self, key: &[u64; N], slot: usize, len: u32) -> Option<Action> {
        let e = self.cache[slot].as_ref()?;
        if !same::<N>(&e.key, key) {
            return None;
        }
        self.hits += 1;
        for &s in &e.path {
            pend(&mut self.pending, &mut self.dirty, s, len as u64);
        }
        Some(e.action)
    }

    /// Walk the rules for `k`, its counts pending in this thread (as the
    /// kernel's per-CPU rule counters take them) until the bundle ends:
    /// two threads walking one rule set do not fight over a counter's
    /// cache line per packet. Returns the verdict, the counter slots and
    /// whether they are all of them (slots past the path's room were
    /// counted by the walk at once).
    fn walk_pending(&mut self, rs: &Ruleset, k: &Key, v6: bool) -> (Verdict, Path, bool) {
        self.misses += 1;
        let mut path = Path::new();
        let (v, whole) = rs.walk_path_checked(k, &mut path);
        let base = if v6 { self.v4_slots as u32 } else { 0 };
        for s in path.iter_mut() {
            *s += base;
            pend(&mut self.pending, &mut self.dirty, *s, k.len as u64);
        }
        (v, path, whole)
    }

    /// Walk the rules for `k` without remembering the answer (the linear
    /// walk, or no cache).
    fn walk_uncached(&mut self, rs: &Ruleset, k: &Key, v6: bool) -> Verdict {
        self.walk_pending(rs, k, v6).0
    }

    /// Walk the rules for `k` and remember the answer in `slot` (unless
    /// the walk touched more counters than an entry holds).
    #[inline(never)]
    fn miss(&mut self, rs: &Ruleset, k: &Key, key: Packed, v6: bool, slot: usize) -> Verdict {
        let (v, path, whole) = self.walk_pending(rs, k, v6);
        if whole {
            self.cache[slot] = Some(Entry {
                key,
                action: v.action,
                path,
                verdict: v,
            });
        }
        v
    }

    /// Add a quick entry's hits to its counters' pending counts.
    #[inline]
    fn fold(&mut self, slot: usize) {
        let Some(e) = self.quick.get_mut(slot) else {
            return;
        };
        let (p, b) = (e.packets as u64, e.bytes);
        if p == 0 {
            return;
        }
        (e.packets, e.bytes) = (0, 0);
        self.hits += p;
        let n = e.n as usize;
        for &s in &self.quick_path[slot][..n] {
            let c = &mut self.pending[s as usize];
            if c[0] == 0 {
                self.dirty.push(s);
            }
            c[0] += p;
            c[1] += b;
        }
    }

    /// Write the counts held here (hits of quick entries, walks, other
    /// hits) to `f`'s shared counters, while `f` is still held: once a
    /// poll's worth of packets, or when the thread lets `f` go.
    pub fn flush(&mut self, f: &Filter) {
        if self.filter != f.id {
            return;
        }
        while let Some(slot) = self.hit.pop() {
            self.fold(slot as usize);
        }
        let n4 = self.v4_slots as u32;
        for s in self.dirty.drain(..) {
            let p = std::mem::take(&mut self.pending[s as usize]);
            let (rs, s) = if s < n4 {
                (f.v4.as_ref(), s)
            } else {
                (f.v6.as_ref(), s - n4)
            };
            if let Some(rs) = rs {
                rs.add(s, p[0], p[1]);
            }
        }
    }
}

/// Count a packet of `len` bytes to counter slot `s`, in the thread.
#[inline(always)]
fn pend(pending: &mut [[u64; 2]], dirty: &mut Vec<u32>, s: u32, len: u64) {
    let p = &mut pending[s as usize];
    if p[0] == 0 {
        dirty.push(s);
    }
    p[0] += 1;
    p[1] += len;
}

/// Words 0 and 1 of a key.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn head(
    sport: u32,
    dport: u32,
    proto: u8,
    frag: bool,
    v6: bool,
    flags: u32,
    icmp: u32,
    len: u32,
) -> [u64; 2] {
    [
        sport as u64
            | (dport as u64) << 21
            | (proto as u64) << 42
            | (frag as u64) << 50
            | (v6 as u64) << 51,
        flags as u64 | (icmp as u64) << 21 | (len as u64) << 42,
    ]
}

/// The full key of `k`.
#[inline]
fn full_key(k: &Key, v6: bool) -> Packed {
    let [w0, w1] = head(
        k.sport,
        k.dport,
        k.proto,
        k.frag,
        v6,
        k.tcp_flags,
        k.icmp,
        k.len,
    );
    [
        w0,
        w1,
        k.src as u64,
        (k.src >> 64) as u64,
        k.dst as u64,
        (k.dst >> 64) as u64,
    ]
}

/// The quick key of an IPv4 TCP or UDP packet that is no fragment, from
/// its parsed headers, and its IP length; `None` for anything else (or a
/// frame too short for what the headers say).
#[inline(always)]
fn quick_key(frame: &[u8], h: &Headers) -> Option<(Quick, u32)> {
    let l4 = h.l4_offset as usize;
    let (proto, flags) = match h.l4 {
        L4::Udp => (17, 0),
        L4::Tcp { .. } => (6, tcp_flags(frame, l4)?),
        _ => return None,
    };
    let IpAddrs::V4 { src, dst } = h.flow.addrs else {
        return None;
    };
    if h.l3 != L3::Ipv4 || h.fragment {
        return None;
    }
    let l3 = h.l3_offset as usize;
    let len = u16::from_be_bytes(*frame.get(l3 + 2..)?.first_chunk()?);
    Some(quick_words(src, dst, h, proto, flags, len))
}

/// The quick key of a packet IP input hands the hook (`at`: its
/// addresses, protocol, length and where its transport header is), the
/// ports from the flow dissector's `h`.
#[inline(always)]
fn quick_key_in(frame: &[u8], h: &Headers, at: &LocalIn) -> Option<(Quick, u32)> {
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (at.src, at.dst) else {
        return None;
    };
    let flags = match at.proto {
        17 => 0,
        6 => tcp_flags(frame, at.l4)?,
        _ => return None,
    };
    // An IPv4 length is 16 bits (IP input's for a GRO packet too).
    let len = at.ip_len as u16;
    Some(quick_words(
        src.octets(),
        dst.octets(),
        h,
        at.proto,
        flags,
        len,
    ))
}

/// TCP's flags byte as the frame holds it (GRO may have ORed a segment's
/// PSH or FIN into it since the headers were parsed).
#[inline(always)]
fn tcp_flags(frame: &[u8], l4: usize) -> Option<u64> {
    frame.get(l4 + 13).map(|&f| f as u64)
}

/// The words of a quick key (the addresses in the frame's byte order:
/// each keeps its own 32 bits, which is all a mask needs).
#[inline(always)]
fn quick_words(
    src: [u8; 4],
    dst: [u8; 4],
    h: &Headers,
    proto: u8,
    flags: u64,
    len: u16,
) -> (Quick, u32) {
    let w0 = u32::from_ne_bytes(src) as u64 | (u32::from_ne_bytes(dst) as u64) << 32;
    let w1 = h.flow.src_port as u64
        | (h.flow.dst_port as u64) << 16
        | (proto as u64) << 32
        | flags << 40
        | (len as u64) << 48;
    ([w0, w1], len as u32)
}

/// A quick key's slot when the device gave no flow hash (AF_XDP).
#[inline]
fn quick_hash(k: &Quick) -> u32 {
    ((k[0] ^ k[1].rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as u32
}

/// The mask of a rule set's quick keys: the fields some rule looks at
/// (`u`); the protocol always.
pub(super) fn quick_mask(u: &Used) -> Quick {
    let all = |b: bool| if b { u64::MAX } else { 0 };
    let lo = 0xffff_ffff;
    [
        (all(u.src) & lo) | (all(u.dst) & lo << 32),
        (all(u.ports) & lo)
            | 0xff << 32
            | (all(u.flags) & 0xff << 40)
            | (all(u.len) & 0xffff << 48),
    ]
}

/// The masks of a rule set's keys: the fields some rule looks at (`u`).
pub(super) fn key_mask(u: &Used, v6: bool) -> Packed {
    let all = |b: bool| if b { u64::MAX } else { 0 };
    let f21 = (1u64 << 21) - 1;
    let w0 = (all(u.ports) & (f21 | f21 << 21)) | 0xff << 42 | (all(u.frag) & 1 << 50) | 1 << 51;
    let w1 = (all(u.flags) & f21) | (all(u.icmp) & f21 << 21) | (all(u.len) & f21 << 42);
    let (src, dst) = (all(u.src), all(u.dst));
    if v6 {
        [w0, w1, src, src, dst, dst]
    } else {
        // An IPv4 key holds the source in word 2's low half (the rest 0)
        // and the destination in word 4's.
        let lo = 0xffff_ffff;
        [w0, w1, src & lo, 0, dst & lo, 0]
    }
}

#[inline(always)]
fn and(a: Packed, m: &Packed) -> Packed {
    let mut out = a;
    for (o, m) in out.iter_mut().zip(m) {
        *o &= m;
    }
    out
}

/// `a`'s first `N` words equal `b`, without a call to `memcmp`.
#[inline(always)]
fn same<const N: usize>(a: &Packed, b: &[u64; N]) -> bool {
    a.iter().zip(b).fold(0, |d, (x, y)| d | (x ^ y)) == 0
}

#[inline]
fn hash(k: &Packed) -> usize {
    // Multiply-fold: cheap, and spreads the fields flows differ in.
    let mut h = 0u64;
    for &w in k {
        h = (h ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    }
    (h >> 32) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry's hit count about to wrap is folded first: nothing lost.
    #[test]
    fn a_count_about_to_wrap_is_folded() {
        use rxpath_wire::build::{self, Spec};
        let rules = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p udp -j ACCEPT\nCOMMIT\n";
        let f = Filter::load(&[("t".into(), rules.into())], "x", FilterMode::Compiled).unwrap();
        let spec = Spec::new(
            "198.18.0.1".parse().unwrap(),
            "198.18.0.2".parse().unwrap(),
            1,
            2,
        );
        let frame = build::udp(&spec, b"");
        let h = rxpath_wire::parse(&frame).unwrap();
        let mut j = Judge::new(4);
        for _ in 0..3 {
            assert_eq!(j.action(&f, &frame, &h, 1), Action::Accept);
        }
        let slot = j.hit[0] as usize;
        // As if u32::MAX - 2 more hits had come since the last fold.
        j.quick[slot].packets = u32::MAX;
        j.quick[slot].bytes = 28 * u32::MAX as u64;
        assert_eq!(j.action(&f, &frame, &h, 1), Action::Accept);
        j.flush(&f);
        let st = f.v4.as_ref().unwrap().stats();
        let r = st.iter().find(|r| r.rule == Some(0)).unwrap();
        // Two walks (the first call adopts the filter on the general
        // path, the second fills the quick entry), u32::MAX folded, then
        // the last hit.
        assert_eq!(r.packets, 2 + u32::MAX as u64 + 1);
        assert_eq!(r.bytes, 28 * r.packets);
    }
}
