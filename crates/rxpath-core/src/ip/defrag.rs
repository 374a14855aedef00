//! IP reassembly: `ip_defrag()` (net/ipv4/ip_fragment.c) and
//! `ipv6_frag_rcv()` (net/ipv6/reassembly.c), over the queue they share
//! (`inet_frag_find()`, `inet_frag_queue_insert()` in
//! net/ipv4/inet_fragment.c), as Linux 6.x runs them.
//!
//! ```text
//!  fragment ─► the family's table: over `high_thresh` (or out of frames)
//!  │           ReasmFails, dropped
//!  ├─► its queue by (source, destination, id[, IPv4 protocol]); a new
//!  │   queue's timer runs `ipfrag_time` / `ip6frag_time` (not extended)
//!  ├─► IPv4: more than `ipfrag_max_dist` fragments from its source since
//!  │   the queue's last: ReasmFails, the queue starts again
//!  ├─► lengths: a last fragment that disagrees, bytes past the end, an
//!  │   empty fragment: ReasmFails, the queue dies
//!  ├─► insert: inside a run already held, a duplicate (dropped, no
//!  │   counter); overlapping, the queue dies (ReasmOverlaps, ReasmFails;
//!  │   IPv4 since 2018, IPv6 per RFC 5722)
//!  └─► complete: the ECN combination and the 64 KiB limit (ReasmFails),
//!      then ReasmOKs and the datagram, a chain of the fragments' frames
//!      (no copy)
//! ```
//!
//! A queue that times out counts ReasmTimeout and ReasmFails and frees its
//! frames. Differences from the kernel: no ICMP "reassembly time
//! exceeded" is sent (rxpath sends no ICMP); one table per NAPI (the
//! kernel's is per namespace; fragments of one datagram hash alike and
//! reach the same NAPI); and rxpath's frames come from a fixed pool, so a
//! table also holds at most [`DefragConfig::max_frames`] of them.

use crate::packet::{Frag, Packet, RxCtx};
use crate::snmp::IpMib;
use crate::stats::DropReason;
use std::collections::BTreeMap;
// Keyed by what senders choose: seeded per process (as the kernel's jhash
// with its boot secret), and fast (SipHash was a sixth of a fragment's
// cost in `bench reasm`), as the socket table's.
use foldhash::HashMap;
use std::net::IpAddr;

/// What `sizeof(struct ipq)` adds to a table's memory per queue.
const QUEUE_SIZE: usize = 192;

/// The largest IP datagram (`IPV6_MAXPLEN`, and IPv4's total length).
const MAX_LEN: u32 = 65535;

/// One family's reassembly settings, named as the kernel's sysctls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefragConfig {
    /// `ipfrag_high_thresh` / `ip6frag_high_thresh`: the bytes (each
    /// fragment's truesize, and each queue's own) a table may hold before
    /// new fragments fail. 0 turns reassembly off.
    pub high_thresh: usize,
    /// `ipfrag_time` / `ip6frag_time` in ns: a queue's life.
    pub time_ns: u64,
    /// `ipfrag_max_dist` (IPv4; 0 off): fragments from one source that
    /// may arrive between two of one queue's.
    pub max_dist: u32,
    /// Frames a table may hold (rxpath's bound on its frame pool).
    pub max_frames: usize,
}

impl DefragConfig {
    /// The kernel's IPv4 defaults: 4 MiB, 30 s, 64.
    pub const V4: DefragConfig = DefragConfig {
        high_thresh: 4 << 20,
        time_ns: 30_000_000_000,
        max_dist: 64,
        max_frames: 1024,
    };
    /// The kernel's IPv6 defaults: 4 MiB, 60 s.
    pub const V6: DefragConfig = DefragConfig {
        high_thresh: 4 << 20,
        time_ns: 60_000_000_000,
        max_dist: 0,
        max_frames: 1024,
    };
}

/// A queue's key (`frag_v4_compare_key` / `frag_v6_compare_key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub(crate) src: IpAddr,
    pub(crate) dst: IpAddr,
    pub(crate) id: u32,
    /// The IPv4 protocol (0 for IPv6).
    pub(crate) proto: u8,
    /// The frame region (one per RX queue) its frames belong to: a
    /// datagram is put together from one queue's frames.
    pub(crate) umem: u32,
}

/// What IP input learnt of a fragment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FragIn {
    pub(crate) key: Key,
    /// Offset of its data in the datagram (bytes).
    pub(crate) offset: u32,
    /// Its data's length (after the IP or fragment header).
    pub(crate) len: u32,
    /// More fragments follow (MF).
    pub(crate) more: bool,
    /// The ECN bits of its IP header.
    pub(crate) ecn: u8,
    /// Where its data starts, from the start of the packet.
    pub(crate) data: u16,
    /// Where its IP header starts, from the start of the packet.
    pub(crate) l3: u16,
}

/// A reassembled datagram: the first fragment's packet, whose frame holds
/// the headers and the first piece of data, with every other piece
/// chained to it in order.
#[derive(Debug)]
pub(crate) struct Reassembled {
    pub(crate) pkt: Packet,
    /// Where the head's network header starts, from the packet's start.
    pub(crate) l3: u16,
    /// Where the head's data starts (after the IP header, or for IPv6
    /// after the fragment header).
    pub(crate) data: u16,
    /// The data's length (the datagram after its IP header, or for IPv6
    /// after the fragment header).
    pub(crate) len: u32,
    /// The ECN codepoint the kernel ORs into the header (CE when some
    /// fragment carried it).
    pub(crate) ecn: u8,
}

#[derive(Debug)]
struct Piece {
    pkt: Packet,
    data: u16,
    l3: u16,
    len: u32,
}

/// Fragments that arrived as one contiguous stretch at the tail (the
/// kernel's "frag run"): a fragment wholly inside a run is a duplicate.
#[derive(Debug)]
struct Run {
    off: u32,
    end: u32,
    pieces: Vec<Piece>,
}

#[derive(Debug, Default)]
struct Queue {
    runs: Vec<Run>,
    len: u32,
    meat: u32,
    first_in: bool,
    last_in: bool,
    ecn: u8,
    rid: u32,
    gen: u64,
    deadline: u64,
    mem: usize,
}

impl Queue {
    fn frames(&self) -> usize {
        self.runs.iter().map(|r| r.pieces.len()).sum()
    }
}

enum Insert {
    Ok,
    Dup(Piece),
    Overlap(Piece),
}

/// One family's reassembly queues.
#[derive(Debug)]
pub(crate) struct Table {
    cfg: DefragConfig,
    queues: HashMap<Key, Queue>,
    /// Each queue's timer: (deadline, generation) → its key.
    timers: BTreeMap<(u64, u64), Key>,
    /// Per source: the fragments seen (`inet_peer::rid`) and its queues.
    peers: HashMap<IpAddr, (u32, u32)>,
    mem: usize,
    frames: usize,
    gen: u64,
}

impl Table {
    pub(crate) fn new(cfg: DefragConfig) -> Self {
        Table {
            cfg,
            queues: HashMap::default(),
            timers: BTreeMap::new(),
            peers: HashMap::default(),
            mem: 0,
            frames: 0,
            gen: 0,
        }
    }

    /// Frames the queues hold.
    pub(crate) fn frames(&self) -> usize {
        self.frames
    }

    /// The earliest timer, if any queue lives.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.timers.first_key_value().map(|(t, _)| t.0)
    }

    /// `ip_defrag()` / the queueing half of `ipv6_frag_rcv()` for one
    /// fragment (`ReasmReqds` already counted): held, dropped (counted in
    /// `mib` and `ctx`), or the datagram it completed.
    pub(crate) fn queue(
        &mut self,
        pkt: Packet,
        f: FragIn,
        v6: bool,
        mib: &mut IpMib,
        ctx: &mut RxCtx<'_>,
    ) -> Option<Reassembled> {
        // inet_frag_find(): a table over its limit finds no queue.
        if self.cfg.high_thresh == 0
            || self.mem > self.cfg.high_thresh
            || self.frames >= self.cfg.max_frames
        {
            mib.reasm_fails += 1;
            ctx.drop(pkt, DropReason::Fragment);
            return None;
        }
        let now = ctx.now_ns;
        let key = f.key;
        if !self.queues.contains_key(&key) {
            self.create(key, now);
        }
        if !v6 && self.too_far(key) {
            // ip_frag_too_far() and ip_frag_reinit(): the queue starts
            // again with this fragment, its timer too.
            mib.reasm_fails += 1;
            self.free_pieces(key, ctx);
            self.gen += 1;
            let (gen, deadline) = (self.gen, now + self.cfg.time_ns);
            let q = self.queues.get_mut(&key).expect("created above");
            self.timers.remove(&(q.deadline, q.gen));
            self.timers.insert((deadline, gen), key);
            *q = Queue {
                rid: q.rid,
                gen,
                deadline,
                mem: q.mem,
                ..Queue::default()
            };
        }
        let q = self.queues.get_mut(&key).expect("created above");
        let (offset, mut end) = (f.offset, f.offset + f.len);
        if v6 && end > MAX_LEN {
            // A parameter problem: the fragment goes, the queue stays (and
            // times out if nothing completes it).
            mib.in_hdr_errors += 1;
            ctx.drop(pkt, DropReason::IpHeader);
            return None;
        }
        if !f.more {
            if end < q.len || (q.last_in && end != q.len) {
                return self.discard(key, pkt, mib, ctx);
            }
            q.last_in = true;
            q.len = end;
        } else {
            if end & 7 != 0 {
                if v6 {
                    // RFC 8200: a fragment but the last is a multiple of
                    // 8; a parameter problem, as above.
                    mib.in_hdr_errors += 1;
                    ctx.drop(pkt, DropReason::IpHeader);
                    return None;
                }
                end &= !7;
            }
            if end > q.len {
                if q.last_in {
                    return self.discard(key, pkt, mib, ctx);
                }
                q.len = end;
            }
        }
        if end == offset {
            return self.discard(key, pkt, mib, ctx);
        }
        let size = crate::packet::truesize(pkt.len as usize);
        let piece = Piece {
            pkt,
            data: f.data,
            l3: f.l3,
            len: end - offset,
        };
        match insert(&mut q.runs, piece, offset, end) {
            Insert::Ok => {}
            Insert::Dup(p) => {
                ctx.drop(p.pkt, DropReason::Fragment);
                return None;
            }
            Insert::Overlap(p) => {
                mib.reasm_overlaps += 1;
                return self.discard(key, p.pkt, mib, ctx);
            }
        }
        q.meat += end - offset;
        q.ecn |= 1 << (f.ecn & 3);
        q.mem += size;
        self.mem += size;
        self.frames += 1;
        if offset == 0 {
            q.first_in = true;
        }
        if q.first_in && q.last_in && q.meat == q.len {
            return self.reassemble(key, v6, mib, ctx);
        }
        None
    }

    fn create(&mut self, key: Key, now: u64) {
        self.gen += 1;
        let q = Queue {
            gen: self.gen,
            deadline: now + self.cfg.time_ns,
            mem: QUEUE_SIZE,
            ..Queue::default()
        };
        self.mem += QUEUE_SIZE;
        self.timers.insert((q.deadline, q.gen), key);
        self.queues.insert(key, q);
        if self.cfg.max_dist > 0 {
            self.peers.entry(key.src).or_insert((0, 0)).1 += 1;
        }
    }

    /// `ip_frag_too_far()`: count the fragment against its source and say
    /// whether too many others came between this queue's last and it.
    fn too_far(&mut self, key: Key) -> bool {
        if self.cfg.max_dist == 0 {
            return false;
        }
        let Some(peer) = self.peers.get_mut(&key.src) else {
            return false;
        };
        peer.0 = peer.0.wrapping_add(1);
        let end = peer.0;
        let q = self.queues.get_mut(&key).expect("queue exists");
        let start = std::mem::replace(&mut q.rid, end);
        !q.runs.is_empty() && end.wrapping_sub(start) > self.cfg.max_dist
    }

    /// Drop every piece a queue holds, keeping the queue.
    fn free_pieces(&mut self, key: Key, ctx: &mut RxCtx<'_>) {
        let Some(q) = self.queues.get_mut(&key) else {
            return;
        };
        for r in q.runs.drain(..) {
            for p in r.pieces {
                self.frames -= 1;
                ctx.drop(p.pkt, DropReason::Fragment);
            }
        }
        self.mem -= q.mem - QUEUE_SIZE;
        q.mem = QUEUE_SIZE;
    }

    /// `inet_frag_kill()`: the queue goes, its frames dropped.
    fn kill(&mut self, key: Key, ctx: &mut RxCtx<'_>) {
        self.free_pieces(key, ctx);
        self.remove(key);
    }

    /// Forget a queue whose pieces are gone.
    fn remove(&mut self, key: Key) -> Option<Queue> {
        let q = self.queues.remove(&key)?;
        self.timers.remove(&(q.deadline, q.gen));
        self.mem -= q.mem;
        if self.cfg.max_dist > 0 {
            if let Some(p) = self.peers.get_mut(&key.src) {
                p.1 -= 1;
                if p.1 == 0 {
                    self.peers.remove(&key.src);
                }
            }
        }
        Some(q)
    }

    /// `discard_qp`: the fragment and its queue go (`ReasmFails`).
    fn discard(
        &mut self,
        key: Key,
        pkt: Packet,
        mib: &mut IpMib,
        ctx: &mut RxCtx<'_>,
    ) -> Option<Reassembled> {
        mib.reasm_fails += 1;
        ctx.drop(pkt, DropReason::Fragment);
        self.kill(key, ctx);
        None
    }

    /// `ip_frag_reasm()` / `ip6_frag_reasm()`.
    fn reassemble(
        &mut self,
        key: Key,
        v6: bool,
        mib: &mut IpMib,
        ctx: &mut RxCtx<'_>,
    ) -> Option<Reassembled> {
        let mut q = self.remove(key).expect("queue exists");
        self.frames -= q.frames();
        let mut pieces = q.runs.drain(..).flat_map(|r| r.pieces);
        let head = pieces.next().expect("a complete queue has a first piece");
        let ecn = ECN_TABLE[q.ecn as usize & 15];
        // The head's unfragmentable part: IPv4's header, or IPv6's header
        // and extension headers (the fragment header leaves).
        let hdr = (head.data - head.l3) as u32;
        let total = if v6 {
            hdr - 40 - 8 + q.len
        } else {
            hdr + q.len
        };
        if ecn == 0xff || total > MAX_LEN {
            mib.reasm_fails += 1;
            ctx.drop(head.pkt, DropReason::Fragment);
            for p in pieces {
                ctx.drop(p.pkt, DropReason::Fragment);
            }
            return None;
        }
        mib.reasm_oks += 1;
        let mut pkt = head.pkt;
        pkt.len = head.data + head.len as u16;
        for p in pieces {
            let Packet { frame, off, .. } = p.pkt;
            let f = Frag {
                frame,
                off: off + p.data,
                len: p.len as u16,
            };
            ctx.push_frag(&mut pkt, f);
        }
        Some(Reassembled {
            pkt,
            l3: head.l3,
            data: head.data,
            len: q.len,
            ecn,
        })
    }

    /// `ip_expire()` / `ip6_frag_expire()` for every queue of `ctx`'s
    /// frame region due at `now`.
    pub(crate) fn expire(&mut self, now: u64, mib: &mut IpMib, ctx: &mut RxCtx<'_>) {
        let id = ctx.umem().id();
        let due: Vec<Key> = self
            .timers
            .range(..=(now, u64::MAX))
            .map(|(_, k)| *k)
            .filter(|k| k.umem == id)
            .collect();
        for key in due {
            mib.reasm_timeout += 1;
            mib.reasm_fails += 1;
            self.kill(key, ctx);
        }
    }

    /// Let go of every queue of `ctx`'s frame region (the path stops; the
    /// kernel counts nothing when a namespace's queues go).
    pub(crate) fn clear(&mut self, ctx: &mut RxCtx<'_>) {
        let id = ctx.umem().id();
        let keys: Vec<Key> = self
            .queues
            .keys()
            .filter(|k| k.umem == id)
            .copied()
            .collect();
        for k in keys {
            self.kill(k, ctx);
        }
    }
}

/// What a fragment IP input passed says of itself: `p` is the packet, its
/// network header at `l3`, its lengths checked by IP input.
pub(crate) fn parse(p: &[u8], l3: usize, v6: bool, umem: u32) -> Option<FragIn> {
    let q = p.get(l3..)?;
    if !v6 {
        let ip = rxpath_wire::ipv4::Packet::new_unchecked(q);
        let (ihl, tot, ff) = (ip.header_len(), ip.total_len() as usize, ip.flags_frag());
        return Some(FragIn {
            key: Key {
                src: ip.src().into(),
                dst: ip.dst().into(),
                id: ip.ident() as u32,
                proto: ip.protocol(),
                umem,
            },
            offset: ((ff & 0x1fff) as u32) << 3,
            len: tot.checked_sub(ihl)? as u32,
            more: ff & 0x2000 != 0,
            ecn: ip.tos() & 3,
            data: (l3 + ihl) as u16,
            l3: l3 as u16,
        });
    }
    let fh = super::v6::fragment_header(q)?;
    let ip = rxpath_wire::ipv6::Packet::new_unchecked(q);
    let frag_off = rxpath_wire::be16(q, fh + 2)?;
    let id = u32::from_be_bytes(q.get(fh + 4..fh + 8)?.try_into().ok()?);
    Some(FragIn {
        key: Key {
            src: ip.src().into(),
            dst: ip.dst().into(),
            id,
            proto: 0,
            umem,
        },
        offset: (frag_off & 0xfff8) as u32,
        len: (40 + ip.payload_len() as usize).checked_sub(fh + 8)? as u32,
        more: frag_off & 1 != 0,
        ecn: ip.traffic_class() & 3,
        data: (l3 + fh + 8) as u16,
        l3: l3 as u16,
    })
}

/// `inet_frag_queue_insert()`.
fn insert(runs: &mut Vec<Run>, piece: Piece, offset: u32, end: u32) -> Insert {
    let new = |piece| Run {
        off: offset,
        end,
        pieces: vec![piece],
    };
    let Some(last) = runs.last_mut() else {
        runs.push(new(piece));
        return Insert::Ok;
    };
    if last.end < end {
        // The common case: at the tail.
        if offset < last.end {
            return Insert::Overlap(piece);
        }
        if offset == last.end {
            last.end = end;
            last.pieces.push(piece);
        } else {
            runs.push(new(piece));
        }
        return Insert::Ok;
    }
    let i = runs.partition_point(|r| r.end <= offset);
    match runs.get(i) {
        Some(r) if r.off < end => {
            if offset >= r.off && end <= r.end {
                Insert::Dup(piece)
            } else {
                Insert::Overlap(piece)
            }
        }
        _ => {
            runs.insert(i, new(piece));
            Insert::Ok
        }
    }
}

/// `ip_frag_ecn_table`: indexed by the ECN codepoints seen (bit 1 << ecn),
/// the codepoint to OR into the datagram, or 0xff for a combination that
/// drops it (not-ECT with ECT or CE).
const ECN_TABLE: [u8; 16] = {
    let mut t = [0u8; 16];
    let (not_ect, ect1, ect0, ce) = (1, 2, 4, 8);
    t[ce | ect0] = 3;
    t[ce | ect1] = 3;
    t[ce | ect0 | ect1] = 3;
    t[not_ect | ce] = 0xff;
    t[not_ect | ect0] = 0xff;
    t[not_ect | ect1] = 0xff;
    t[not_ect | ect0 | ect1] = 0xff;
    t[not_ect | ce | ect0] = 0xff;
    t[not_ect | ce | ect1] = 0xff;
    t[not_ect | ce | ect0 | ect1] = 0xff;
    t
};

/// Both families' tables.
#[derive(Debug)]
pub struct Defrag {
    pub(crate) v4: Table,
    pub(crate) v6: Table,
}

impl Defrag {
    /// Tables with these settings.
    pub fn new(v4: DefragConfig, v6: DefragConfig) -> Self {
        Defrag {
            v4: Table::new(v4),
            v6: Table::new(v6),
        }
    }

    /// Frames held in both.
    pub fn frames(&self) -> usize {
        self.v4.frames() + self.v6.frames()
    }

    /// The earliest queue timer.
    pub fn next_deadline(&self) -> Option<u64> {
        match (self.v4.next_deadline(), self.v6.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Time out what is due at `ctx.now_ns`.
    pub fn expire(&mut self, ctx: &mut RxCtx<'_>) {
        let now = ctx.now_ns;
        if self.next_deadline().is_some_and(|d| d <= now) {
            let mut mib = IpMib::default();
            self.v4.expire(now, &mut mib, ctx);
            ctx.snmp().ip.merge(&mib);
            let mut mib = IpMib::default();
            self.v6.expire(now, &mut mib, ctx);
            ctx.snmp().ip6.merge(&mib);
        }
    }

    /// Let go of everything.
    pub fn clear(&mut self, ctx: &mut RxCtx<'_>) {
        self.v4.clear(ctx);
        self.v6.clear(ctx);
    }
}

impl Default for Defrag {
    fn default() -> Self {
        Defrag::new(DefragConfig::V4, DefragConfig::V6)
    }
}

#[cfg(test)]
#[path = "defrag_tests.rs"]
mod tests;
