//! GRO: generic receive offload, per NAPI, with the flush timer of seed 004.
//!
//! Mirrors `dev_gro_receive()` (net/core/gro.c), `inet_gro_receive()`,
//! `ipv6_gro_receive()` and `tcp_gro_receive()` (net/ipv4/tcp_offload.c):
//!
//! - held packets live in [`GRO_HASH_BUCKETS`] = 8 buckets chosen by the RX
//!   hash, at most [`MAX_GRO_SKBS`] = 8 per bucket; when a bucket is full its
//!   oldest packet is flushed (`gro_flush_oldest`);
//! - a segment joins a held packet of the same flow (same L2 header,
//!   addresses, ports; same IPv6 flow label) when every [`Check`] passes;
//!   a merged packet is a chain of frames with one header (the head's), not
//!   a copy;
//! - each call returns a [`GroResult`] like the kernel's `gro_result`:
//!   `Merged`, `Held`, or `Normal` (passed up as is).
//!
//! The checks, in the order `tcp_gro_receive` makes them, each counted by
//! name: not TCP, IPv4 options, fragments, IPv6 extension headers other than
//! hop-by-hop/routing/destination options, bad checksum (when the device did
//! not verify it), no payload; then against the held packet: CWR, other flag
//! differences (FIN and PSH excepted), ACK number, TCP options (byte for
//! byte, timestamps included), IPv4 TTL/TOS/DF, IPv4 ID (incrementing, or
//! fixed with DF), IPv6 traffic class/hop limit, a segment longer than the
//! held packet's MSS (`gso_size`), a sequence gap, and the 64 KiB limit. A
//! segment shorter than the MSS is merged and ends the packet; a segment
//! with URG, PSH, RST, SYN or FIN ends it at once: **PSH is never delayed**.
//!
//! When a check against a held packet fails, the held packet is flushed and
//! the new segment starts a new one (or goes up at once if it carries a
//! flag or no payload), as in the kernel. One difference: for a segment that
//! fails the IP-level checks (options, fragment, bad checksum) the kernel
//! passes it up without flushing a held packet of its flow, which can reorder
//! the flow; we flush that packet first, so a flow is never reordered.
//!
//! ## Flushing (seed 004)
//!
//! [`Gro::poll_done`] runs at the end of every NAPI poll:
//!
//! - a poll that used its whole budget (NAPI stays scheduled) flushes only
//!   packets older than one tick: `napi_gro_flush(n, HZ >= 1000)`. We count
//!   ticks as whole milliseconds of the clock (HZ = 1000);
//! - `napi_complete_done(work_done)` with `gro_flush_timeout` = 0 (the
//!   default) flushes everything;
//! - with `gro_flush_timeout` > 0 and a poll that found work, it flushes only
//!   packets older than a tick and arms the NAPI timer for now + timeout; the
//!   timer re-polls the NAPI, and that poll (no work) flushes everything. So
//!   while traffic flows a flow's packets are kept across polls, and once it
//!   stops nothing is held longer than the timeout plus one poll (under
//!   continuous traffic, at most a tick plus one poll).
//!
//! As in the seed, completion still re-enables the interrupt: new packets
//! wake the NAPI before the timer if they come first.
//!
//! The timeout is a [`GroKnob`], read at every poll, so it can be changed
//! while running. [`Adaptive`] goes beyond the kernel: it picks the timeout
//! from what it sees (bulk segments that merge vs. request/response
//! segments that end packets at once).
//!
//! ## UDP
//!
//! Datagrams are merged only for sockets that ask for it (`UDP_GRO`), as in
//! the kernel: see `udp.rs` and [`UdpGroPolicy`]. Each protocol has its
//! file (`tcp.rs`, `udp.rs`); this one holds what they share: the flow
//! table, the network-layer checks, chaining and flushing.

mod config;
mod replay;
mod stats;
mod tcp;
mod udp;

pub use config::{Adaptive, GroConfig, GroKnob, UdpGroPolicy};
pub use replay::{replay, replay_udp_gro, Boundary};
pub use stats::{Check, FlushReason, GroStats, SEGS_BUCKETS};

use crate::packet::{Frag, Packet, PollEnd, RxCtx, Stack};
use rxpath_wire::{L3, L4};
use serde::Serialize;

/// `GRO_HASH_BUCKETS`.
pub const GRO_HASH_BUCKETS: usize = 8;
/// `MAX_GRO_SKBS`: held packets per bucket.
pub const MAX_GRO_SKBS: usize = 8;
/// `GRO_LEGACY_MAX_SIZE`: a merged packet (IP header onwards) stays below this.
pub const GRO_MAX_SIZE: usize = 65536;
/// One jiffy at HZ = 1000, in ns.
pub const TICK_NS: u64 = 1_000_000;

/// The kernel's `gro_result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum GroResult {
    /// Joined a held packet.
    Merged,
    /// Held as the start of a new packet.
    Held,
    /// Passed up as is.
    Normal,
}

struct Held {
    pkt: Packet,
    /// Arrival of the first segment, ns.
    first_ns: u64,
    count: u16,
    /// `gso_size`: the first segment's payload length.
    mss: u16,
    next_seq: u32,
    /// IP length from the network header on (headers + all payload).
    ip_len: u32,
    fixed_id: bool,
}

/// One NAPI's GRO state.
pub struct Gro {
    cfg: GroConfig,
    buckets: [Vec<Held>; GRO_HASH_BUCKETS],
    held_segments: u64,
    stats: GroStats,
    armed: Option<u64>,
    bulk_ewma: f64,
    /// The last UDP flow's `UDP_GRO` answer and the policy's generation it
    /// was given in ([`UdpGroPolicy::generation`]).
    udp_last: Option<(rxpath_wire::FlowKey, u64, bool)>,
}

impl std::fmt::Debug for Gro {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gro")
            .field("enabled", &self.cfg.enabled)
            .field("held_segments", &self.held_segments)
            .field("stats", &self.stats)
            .finish()
    }
}

/// The bucket of `pkt`'s flow (its RX hash, else one computed from the
/// flow taken by value).
#[inline(always)]
fn bucket_of(pkt: &Packet) -> usize {
    let hash = match pkt.meta.rxhash {
        0 => {
            let flow = pkt.meta.headers.flow;
            rxpath_wire::hash::flow_hash(&flow)
        }
        h => h,
    };
    hash as usize & (GRO_HASH_BUCKETS - 1)
}

impl Gro {
    /// A GRO instance.
    pub fn new(cfg: GroConfig) -> Self {
        Gro {
            cfg,
            buckets: Default::default(),
            held_segments: 0,
            stats: GroStats::default(),
            armed: None,
            bulk_ewma: 0.0,
            udp_last: None,
        }
    }

    /// Counters.
    pub fn stats(&self) -> &GroStats {
        &self.stats
    }

    /// Segments currently held.
    pub fn held(&self) -> u64 {
        self.held_segments
    }

    /// The configuration.
    pub fn config(&self) -> &GroConfig {
        &self.cfg
    }

    /// The flush timeout in force now (the knob, or the adaptive choice).
    pub fn effective_timeout(&self) -> u64 {
        match self.cfg.adaptive {
            Some(a) if self.bulk_ewma > a.threshold => a.max_ns,
            Some(_) => 0,
            None => self.cfg.flush_timeout.get(),
        }
    }

    fn count_check(&mut self, c: Check) {
        let i = Check::ALL.iter().position(|&x| x == c).unwrap_or(0);
        self.stats.not_merged[i] += 1;
    }

    /// `napi_gro_receive()`: offer one parsed packet. Packets that leave GRO
    /// go to `inner`.
    pub fn receive<S: Stack + ?Sized>(
        &mut self,
        pkt: Packet,
        ctx: &mut RxCtx<'_>,
        inner: &mut S,
    ) -> GroResult {
        self.stats.packets_in += 1;
        if !self.cfg.enabled {
            self.stats.normal += 1;
            self.pass_up(pkt, ctx, inner);
            return GroResult::Normal;
        }
        let bucket = bucket_of(&pkt);
        match pkt.meta.headers.l4 {
            L4::Udp if self.udp_wanted(&pkt.meta.headers) => {
                self.receive_udp(bucket, pkt, ctx, inner)
            }
            _ => self.receive_tcp(bucket, pkt, ctx, inner),
        }
    }

    /// The packets GRO has nothing to do with, told from a look at the
    /// packet without taking it: GRO off, or UDP that no socket asked to
    /// merge (`udp4_gro_receive` with `udp_encap_needed_key` off, or the
    /// socket's `gro_enabled` clear) while nothing is held in its bucket,
    /// so no earlier packet of its flow waits. Counted here as
    /// [`Self::receive`] counts them; the caller passes the packet up
    /// itself. Why: `receive` takes the packet record by value and moves
    /// it through its checks, a copy per packet that cost a UDP-only run
    /// two thirds of its rate; the kernel's static branch makes the same
    /// case a few instructions.
    #[inline(always)]
    pub fn passes(&mut self, pkt: &Packet, now_ns: u64) -> bool {
        let h = &pkt.meta.headers;
        if self.cfg.enabled {
            if h.l4 != L4::Udp {
                return false;
            }
            // A held packet in the bucket: GRO must see it (no lookup).
            if !self.buckets[bucket_of(pkt)].is_empty() || self.udp_wanted(h) {
                return false;
            }
            self.count_check(if h.fragment {
                Check::Fragment
            } else {
                Check::NotTcp
            });
            self.sample(false);
        }
        self.stats.packets_in += 1;
        self.stats.normal += 1;
        self.count_out(pkt.frames(), pkt.meta.rx_ns, now_ns);
        true
    }

    /// `udp4_gro_receive` → `udp_gro_receive`: does the socket this datagram
    /// is for ask for `UDP_GRO`? The kernel looks the socket up for every
    /// segment (`udp4_gro_lookup_skb`, under RCU); here the last flow's
    /// answer is kept while the socket table's generation stands, so a
    /// burst of one flow costs one lookup, not one per datagram (and a
    /// second one in [`Self::receive`] after [`Self::passes`]).
    #[inline(always)]
    fn udp_wanted(&mut self, h: &rxpath_wire::Headers) -> bool {
        let Some(p) = &self.cfg.udp else {
            return false;
        };
        if h.fragment {
            return false;
        }
        // The flow by value: no reference into the packet leaves.
        let flow = h.flow;
        let gen = p.generation();
        if let (Some(g), Some((f, lg, w))) = (gen, self.udp_last) {
            if g == lg && f == flow {
                return w;
            }
        }
        let w = p.wants(&flow);
        self.udp_last = gen.map(|g| (flow, g, w));
        w
    }

    fn sample(&mut self, bulk: bool) {
        if self.cfg.adaptive.is_some() {
            self.bulk_ewma += ((bulk as u8 as f64) - self.bulk_ewma) / 64.0;
        }
    }

    /// A segment that failed a check on its own: counted, passed up as is,
    /// after a held packet of its flow (so the flow stays in order).
    fn not_merged<S: Stack + ?Sized>(
        &mut self,
        bucket: usize,
        pkt: Packet,
        c: Check,
        ctx: &mut RxCtx<'_>,
        inner: &mut S,
    ) -> GroResult {
        self.count_check(c);
        self.sample(false);
        if let Some(i) = self.lookup(bucket, &pkt, ctx) {
            self.flush_at(bucket, i, FlushReason::Mismatch, ctx, inner);
        }
        self.stats.normal += 1;
        self.pass_up(pkt, ctx, inner);
        GroResult::Normal
    }

    /// Hold `pkt` as the start of a new packet with segment size `mss`.
    fn hold<S: Stack + ?Sized>(
        &mut self,
        bucket: usize,
        pkt: Packet,
        mss: usize,
        next_seq: u32,
        ctx: &mut RxCtx<'_>,
        inner: &mut S,
    ) -> GroResult {
        if self.buckets[bucket].len() >= MAX_GRO_SKBS {
            self.flush_at(bucket, 0, FlushReason::BucketFull, ctx, inner);
        }
        let h = &pkt.meta.headers;
        let ip_len = (h.payload_offset - h.l3_offset) as u32 + mss as u32;
        self.buckets[bucket].push(Held {
            first_ns: pkt.meta.rx_ns,
            count: 1,
            mss: mss as u16,
            next_seq,
            ip_len,
            fixed_id: false,
            pkt,
        });
        self.held_segments += 1;
        self.stats.held += 1;
        GroResult::Held
    }

    /// The IP-level checks on a segment alone (`inet_gro_receive`,
    /// `ipv6_gro_receive`): fragments, IPv4 options, the IPv4 header
    /// checksum (unless the device verified the packet).
    fn ip_alone(pkt: &Packet, ctx: &RxCtx<'_>) -> Result<(), Check> {
        let h = &pkt.meta.headers;
        if h.fragment {
            return Err(Check::Fragment);
        }
        match h.l3 {
            L3::Ipv4 if h.ip_options => Err(Check::IpOptions),
            L3::Ipv4 if !pkt.meta.csum_ok => {
                let b = ctx.data(pkt);
                let ip = rxpath_wire::ipv4::Packet::new_unchecked(&b[h.l3_offset as usize..]);
                if ip.verify_checksum() {
                    Ok(())
                } else {
                    Err(Check::BadChecksum)
                }
            }
            // Hop-by-hop, routing and destination options are pulled
            // (`ipv6_gso_pull_exthdrs`) and must match the held packet's
            // (`lookup`); the parser reports anything else as a fragment or
            // another protocol.
            L3::Ipv4 | L3::Ipv6 => Ok(()),
            _ => Err(Check::NotTcp),
        }
    }

    /// `__skb_gro_checksum_validate()`: the L4 checksum of a segment, in
    /// software unless the device verified it or a local sender left it
    /// partial.
    fn l4_checksum_ok(pkt: &Packet, ctx: &RxCtx<'_>, proto: u8) -> bool {
        if pkt.meta.csum_ok || pkt.meta.csum_partial {
            return true;
        }
        let h = &pkt.meta.headers;
        let b = ctx.data(pkt);
        let l4 = &b[h.l4_offset as usize..(h.payload_offset + h.payload_len) as usize];
        rxpath_wire::checksum::l4(h.flow.src(), h.flow.dst(), proto, l4) == 0
    }

    /// The network-layer flush checks against the held packet, the same for
    /// every protocol (`inet_gro_flush`, `ipv6_gro_receive`): IPv4 TTL, TOS
    /// and DF equal, the ID incrementing by the segments held (or fixed
    /// with DF); IPv6 traffic class and hop limit equal.
    fn ip_flush(p: &Held, pkt: &Packet, ctx: &RxCtx<'_>) -> Result<(), Check> {
        let h = &pkt.meta.headers;
        let b = ctx.data(pkt);
        let b2 = ctx.data(&p.pkt);
        let l3 = h.l3_offset as usize;
        match h.l3 {
            L3::Ipv4 => {
                if b[l3 + 8] != b2[l3 + 8]
                    || b[l3 + 1] != b2[l3 + 1]
                    || (b[l3 + 6] ^ b2[l3 + 6]) & 0x40 != 0
                {
                    return Err(Check::TtlTosDf);
                }
                let id = u16::from_be_bytes([b[l3 + 4], b[l3 + 5]]);
                let id2 = u16::from_be_bytes([b2[l3 + 4], b2[l3 + 5]]);
                let df = b[l3 + 6] & 0x40 != 0;
                let offset = id.wrapping_sub(id2);
                let fixed = p.fixed_id || (p.count == 1 && df && offset == 0);
                let want = if fixed { 0 } else { p.count };
                if offset != want {
                    return Err(Check::IpId);
                }
                Ok(())
            }
            L3::Ipv6 => {
                let tc = |x: &[u8]| (u16::from_be_bytes([x[l3], x[l3 + 1]]) >> 4) & 0xff;
                if tc(b) != tc(b2) || b[l3 + 7] != b2[l3 + 7] {
                    return Err(Check::TclassHopLimit);
                }
                Ok(())
            }
            _ => Err(Check::NotTcp),
        }
    }

    /// `gro_list_prepare` + the IP and L4 lookups: the held packet of the
    /// same flow in `bucket`, if any.
    fn lookup(&self, bucket: usize, pkt: &Packet, ctx: &RxCtx<'_>) -> Option<usize> {
        let h = &pkt.meta.headers;
        let b = ctx.data(pkt);
        self.buckets[bucket].iter().position(|p| {
            let h2 = &p.pkt.meta.headers;
            if h2.flow != h.flow || h2.l3_offset != h.l3_offset || h2.l3 != h.l3 {
                return false;
            }
            let b2 = ctx.data(&p.pkt);
            let l3 = h.l3_offset as usize;
            // Same MACs, tags and ethertype.
            if b[..l3] != b2[..l3] {
                return false;
            }
            if h.l3 == L3::Ipv6 {
                // Version and flow label (`first_word & 0xF00FFFFF`), and the
                // same extension headers.
                let fl = |x: &[u8]| {
                    u32::from_be_bytes([x[l3], x[l3 + 1], x[l3 + 2], x[l3 + 3]]) & 0xF00F_FFFF
                };
                let ext = b.get(l3 + 40..h.l4_offset as usize);
                let ext2 = b2.get(l3 + 40..h2.l4_offset as usize);
                if fl(b) != fl(b2) || ext != ext2 {
                    return false;
                }
            }
            true
        })
    }

    /// `skb_gro_receive`: chain the segment's payload to the held packet;
    /// its headers are not kept.
    fn chain(&mut self, bucket: usize, i: usize, pkt: Packet, ctx: &mut RxCtx<'_>) {
        let h = pkt.meta.headers;
        let held = &mut self.buckets[bucket][i];
        if held.count == 1 {
            // Decide fixed-ID mode on the second segment, as the kernel does.
            let b = ctx.data(&pkt);
            let b2 = ctx.data(&held.pkt);
            let l3 = h.l3_offset as usize;
            if h.l3 == L3::Ipv4 && b[l3 + 6] & 0x40 != 0 && b[l3 + 4..l3 + 6] == b2[l3 + 4..l3 + 6]
            {
                held.fixed_id = true;
            }
        }
        ctx.push_frag(
            &mut held.pkt,
            Frag {
                frame: pkt.frame,
                off: pkt.off + h.payload_offset,
                len: h.payload_len,
            },
        );
        held.count += 1;
        held.ip_len += h.payload_len as u32;
        held.pkt.meta.segs = held.count;
        self.held_segments += 1;
        self.stats.merged += 1;
    }

    /// `napi_gro_complete`: fix the head's lengths and pass it up.
    fn flush_at<S: Stack + ?Sized>(
        &mut self,
        bucket: usize,
        i: usize,
        r: FlushReason,
        ctx: &mut RxCtx<'_>,
        inner: &mut S,
    ) {
        let held = self.buckets[bucket].remove(i);
        self.held_segments -= held.count as u64;
        let ri = FlushReason::ALL.iter().position(|&x| x == r).unwrap_or(0);
        self.stats.flushes[ri] += 1;
        let mut pkt = held.pkt;
        if held.count > 1 {
            let h = pkt.meta.headers;
            let l3 = pkt.off as usize + h.l3_offset as usize;
            let d = ctx.umem().data_mut(&mut pkt.frame);
            match h.l3 {
                L3::Ipv4 => {
                    let mut ip = rxpath_wire::ipv4::Packet::new_unchecked(&mut d[l3..]);
                    ip.set_total_len(held.ip_len as u16);
                    ip.fill_checksum();
                }
                _ => {
                    let mut ip = rxpath_wire::ipv6::Packet::new_unchecked(&mut d[l3..]);
                    ip.set_payload_len(
                        (held.ip_len as usize - rxpath_wire::ipv6::HEADER_LEN) as u16,
                    );
                }
            }
            if h.l4 == L4::Udp {
                udp::complete(d, pkt.off as usize, &h, held.ip_len);
            }
            // The L4 checksum covered the first segment only; the chain's
            // segments were each verified, as the kernel's CHECKSUM_PARTIAL
            // conversion trusts.
            pkt.meta.csum_ok = true;
            pkt.meta.gso_size = held.mss;
        }
        self.pass_up(pkt, ctx, inner);
    }

    fn pass_up<S: Stack + ?Sized>(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>, inner: &mut S) {
        self.count_out(pkt.frames(), pkt.meta.rx_ns, ctx.now_ns);
        inner.receive(pkt, ctx);
    }

    /// Count a packet of `segs` segments leaving GRO.
    #[inline(always)]
    fn count_out(&mut self, segs: u64, rx_ns: u64, now_ns: u64) {
        self.stats.packets_out += 1;
        self.stats.segments_out += segs;
        let bucket = (64 - (segs.max(1) - 1).leading_zeros() as usize).min(SEGS_BUCKETS - 1);
        self.stats.segs_hist[bucket] += 1;
        let lat = now_ns.saturating_sub(rx_ns).max(1);
        self.stats.latency_log2[(64 - lat.leading_zeros() as usize).min(31)] += 1;
    }

    /// Flush everything held (`napi_gro_flush(n, false)`).
    pub fn flush_all<S: Stack + ?Sized>(
        &mut self,
        r: FlushReason,
        ctx: &mut RxCtx<'_>,
        inner: &mut S,
    ) {
        for b in 0..GRO_HASH_BUCKETS {
            while !self.buckets[b].is_empty() {
                self.flush_at(b, 0, r, ctx, inner);
            }
        }
    }

    /// Flush packets whose first segment arrived in an earlier tick
    /// (`napi_gro_flush(n, true)` with HZ = 1000).
    pub fn flush_old<S: Stack + ?Sized>(
        &mut self,
        r: FlushReason,
        ctx: &mut RxCtx<'_>,
        inner: &mut S,
    ) {
        let tick = ctx.now_ns / TICK_NS;
        for b in 0..GRO_HASH_BUCKETS {
            let mut i = 0;
            while i < self.buckets[b].len() {
                if self.buckets[b][i].first_ns / TICK_NS != tick {
                    self.flush_at(b, i, r, ctx, inner);
                } else {
                    i += 1;
                }
            }
        }
    }

    /// The end of a poll: flush as the kernel does and say whether to arm
    /// the NAPI timer (see the module docs).
    pub fn poll_done<S: Stack + ?Sized>(
        &mut self,
        ctx: &mut RxCtx<'_>,
        end: PollEnd,
        inner: &mut S,
    ) -> Option<u64> {
        if self.held_segments == 0 {
            self.armed = None;
            return None;
        }
        match end {
            PollEnd::Full => {
                self.flush_old(FlushReason::PollEnd, ctx, inner);
                self.armed
            }
            PollEnd::Complete { work_done } => {
                let timeout = if work_done > 0 {
                    self.effective_timeout()
                } else {
                    0
                };
                if timeout > 0 {
                    self.flush_old(FlushReason::PollEnd, ctx, inner);
                    let at = ctx.now_ns + timeout;
                    self.armed = Some(at);
                    if self.held_segments > 0 {
                        return Some(at);
                    }
                    return None;
                }
                let r = match self.armed {
                    Some(t) if ctx.now_ns >= t => FlushReason::Timer,
                    _ => FlushReason::PollEnd,
                };
                self.flush_all(r, ctx, inner);
                self.armed = None;
                None
            }
        }
    }
}
