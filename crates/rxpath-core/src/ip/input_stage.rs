//! IP input as the stage after GRO (and steering), in front of the end of
//! the path, whatever the end is: the same stage for `rxpath run`, `echo`,
//! `quic` and a `Host`.
//!
//! * In front of a socket layer (`IpConfig::deliver_all` off): L2, IP and
//!   UDP input ([`super::input_chain`]), once for a UDP GRO packet, as the
//!   kernel's `ip_rcv` runs once per GRO skb; the end gets the checked
//!   [`Datagram`](crate::packet::Datagram) ([`Stack::receive_udp`]) and hears of every refusal
//!   ([`Stack::refused`]). With `IpConfig::tcp` a TCP segment (or TCP
//!   GRO packet) goes on by [`Stack::receive_tcp`]; otherwise other
//!   chains are the kernel's.
//! * In front of an end that takes every protocol (`rxpath run`'s sink):
//!   every packet goes through [`super::input_any`]; a GRO super-packet
//!   counts once (`InReceives`, `InDelivers`), its segments having passed
//!   GRO's own checks.
//!
//! The rule filter's `INPUT` hook, if given, runs inside IP input where
//! the kernel's `ip_local_deliver()` runs it: after the IP checks, before
//! the transport's (a UDP datagram the rules drop is the rule's, not a
//! checksum error), on the bytes IP input already holds.

use super::defrag::{self, Defrag, Reassembled};
use super::{CsumStatus, IpConfig, LocalIn};
use crate::filter::{FilterHandle, InputHook};
use crate::packet::{Packet, PollEnd, RxCtx, Stack};
use crate::snmp::IpMib;
use crate::stats::{DropReason, LatencyHist};
use rxpath_wire::{Headers, L4};
use std::sync::Arc;

/// What IP input runs at the `INPUT` hook: the filter's [`InputHook`], or
/// [`NoHook`], which compiles away (the path without a filter has not even
/// a branch for it).
pub trait Hook {
    /// There is a hook (a constant for [`NoHook`] and [`InputHook`], so
    /// the branch compiles away).
    fn on(&self) -> bool;
    /// Why the rules drop this packet, or `None`.
    fn judge(&mut self, frame: &[u8], h: &Headers, rxhash: u32) -> Option<DropReason>;
    /// [`Hook::judge`] of a packet from IP input, with what it learnt.
    fn judge_in(
        &mut self,
        frame: &[u8],
        h: &Headers,
        rxhash: u32,
        at: &LocalIn,
    ) -> Option<DropReason>;
    /// The end of a bundle.
    fn bundle_done(&mut self);
    /// The end of a poll.
    fn poll_done(&mut self, end: PollEnd);
}

/// No `INPUT` hook.
#[derive(Debug, Default)]
pub struct NoHook;

impl Hook for NoHook {
    #[inline(always)]
    fn on(&self) -> bool {
        false
    }
    #[inline(always)]
    fn judge(&mut self, _: &[u8], _: &Headers, _: u32) -> Option<DropReason> {
        None
    }
    #[inline(always)]
    fn judge_in(&mut self, _: &[u8], _: &Headers, _: u32, _: &LocalIn) -> Option<DropReason> {
        None
    }
    fn bundle_done(&mut self) {}
    fn poll_done(&mut self, _: PollEnd) {}
}

impl Hook for InputHook {
    #[inline(always)]
    fn on(&self) -> bool {
        true
    }
    #[inline(always)]
    fn judge(&mut self, frame: &[u8], h: &Headers, rxhash: u32) -> Option<DropReason> {
        self.action(frame, h, rxhash).drop_reason()
    }
    #[inline(always)]
    fn judge_in(
        &mut self,
        frame: &[u8],
        h: &Headers,
        rxhash: u32,
        at: &LocalIn,
    ) -> Option<DropReason> {
        self.action_in(frame, h, rxhash, at).drop_reason()
    }
    fn bundle_done(&mut self) {
        InputHook::bundle_done(self)
    }
    fn poll_done(&mut self, end: PollEnd) {
        InputHook::poll_done(self, end)
    }
}

/// A hook chosen at run time (a `Host` with or without a filter).
impl Hook for Option<InputHook> {
    #[inline(always)]
    fn on(&self) -> bool {
        self.is_some()
    }
    #[inline(always)]
    fn judge(&mut self, frame: &[u8], h: &Headers, rxhash: u32) -> Option<DropReason> {
        self.as_mut()?.judge(frame, h, rxhash)
    }
    #[inline(always)]
    fn judge_in(
        &mut self,
        frame: &[u8],
        h: &Headers,
        rxhash: u32,
        at: &LocalIn,
    ) -> Option<DropReason> {
        self.as_mut()?.judge_in(frame, h, rxhash, at)
    }
    fn bundle_done(&mut self) {
        if let Some(h) = self {
            h.bundle_done()
        }
    }
    fn poll_done(&mut self, end: PollEnd) {
        if let Some(h) = self {
            h.poll_done(end)
        }
    }
}

/// `inner` behind IP input and the `INPUT` hook `H`.
#[derive(Debug)]
pub struct IpStage<S, H = NoHook> {
    inner: S,
    cfg: Option<IpConfig>,
    hook: H,
    defrag: Defrag,
}

fn defrag_of(cfg: &Option<IpConfig>) -> Defrag {
    let r = cfg.as_ref().map(|c| c.reasm).unwrap_or_default();
    Defrag::new(r.v4, r.v6)
}

impl<S> IpStage<S> {
    /// IP input with `cfg` in front of `inner`; `None` passes every packet
    /// straight on (the lowest RX level of `rxdrop`).
    pub fn new(cfg: Option<IpConfig>, inner: S) -> Self {
        IpStage {
            inner,
            defrag: defrag_of(&cfg),
            cfg,
            hook: NoHook,
        }
    }
}

impl<S, H: Hook> IpStage<S, H> {
    /// IP input with `cfg` and the `INPUT` hook `hook` in front of `inner`.
    pub fn with_hook(cfg: Option<IpConfig>, hook: H, inner: S) -> Self {
        IpStage {
            inner,
            defrag: defrag_of(&cfg),
            cfg,
            hook,
        }
    }

    /// The stage behind IP input.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S> IpStage<S, InputHook> {
    /// [`IpStage::new`] with the rules `filter` holds at the `INPUT` hook
    /// (a filtered packet is the counted drop `filter` or
    /// `filter_reject`). Without IP input (`cfg` `None`) the rules still
    /// judge every packet.
    pub fn with_filter(cfg: Option<IpConfig>, filter: Arc<FilterHandle>, inner: S) -> Self {
        IpStage {
            inner,
            defrag: defrag_of(&cfg),
            cfg,
            hook: InputHook::new(filter),
        }
    }

    /// The filter's flow cache hits and walks so far.
    pub fn cache_stats(&self) -> (u64, u64) {
        self.hook.cache_stats()
    }
}

impl<S: Stack, H: Hook> Stack for IpStage<S, H> {
    #[inline]
    fn receive(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        let Some(cfg) = &self.cfg else {
            return judge_then(&mut self.hook, &mut self.inner, pkt, ctx);
        };
        if !cfg.deliver_all {
            let (hook, inner) = (&mut self.hook, &mut self.inner);
            if let Some(frag) = udp_input(cfg, hook, inner, pkt, ctx) {
                fragment(cfg, &mut self.defrag, hook, inner, frag, ctx)
            }
            return;
        }
        if !pkt.frags.is_empty() {
            let v6 = pkt.meta.headers.l3 == rxpath_wire::L3::Ipv6;
            let s = ctx.snmp();
            if v6 {
                s.ip6.in_receives += 1;
            } else {
                s.ip.in_receives += 1;
            }
            if self.hook.on() {
                let h = &pkt.meta.headers;
                if let Some(reason) = self.hook.judge(ctx.data(&pkt), h, pkt.meta.rxhash) {
                    return ctx.drop(pkt, reason);
                }
            }
            super::delivered(ctx.snmp(), v6);
            return self.inner.receive(pkt, ctx);
        }
        let csum = CsumStatus::of(&pkt.meta);
        let umem = ctx.umem;
        let off = pkt.off as usize;
        let bytes = &umem.data(&pkt.frame)[off..off + pkt.len as usize];
        let snmp = &mut ctx.stats.snmp;
        let r = if self.hook.on() {
            let (h, rxhash) = (&pkt.meta.headers, pkt.meta.rxhash);
            let hook = &mut self.hook;
            super::input_any_at(bytes, true, csum, cfg, snmp, |fr, at| {
                hook.judge_in(fr, h, rxhash, at)
            })
        } else {
            super::input_any_at(bytes, true, csum, cfg, snmp, |_, _| None)
        };
        match r {
            Ok(proto) => {
                if proto == 17 {
                    let v6 = pkt.meta.headers.l3 == rxpath_wire::L3::Ipv6;
                    ctx.snmp().udp_mut(v6).in_datagrams += 1;
                }
                self.inner.receive(pkt, ctx)
            }
            Err(DropReason::Fragment) => fragment(
                cfg,
                &mut self.defrag,
                &mut self.hook,
                &mut self.inner,
                pkt,
                ctx,
            ),
            Err(reason) => ctx.drop(pkt, reason),
        }
    }
    fn malformed(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        // IP input reads the frame itself and counts why it fails.
        match self.cfg {
            Some(_) => self.receive(pkt, ctx),
            None => self.inner.malformed(pkt, ctx),
        }
    }
    fn bundle_done(&mut self, ctx: &mut RxCtx<'_>) {
        self.hook.bundle_done();
        self.inner.bundle_done(ctx)
    }
    fn poll_done(&mut self, ctx: &mut RxCtx<'_>, end: PollEnd) -> Option<u64> {
        self.defrag.expire(ctx);
        let t = self.inner.poll_done(ctx, end);
        // Packets GRO flushed here were judged; the hook lets its set go
        // when the queue ran dry (or after a few busy polls).
        self.hook.poll_done(end);
        match (t, self.defrag.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
    fn stop(&mut self, ctx: &mut RxCtx<'_>) {
        self.defrag.clear(ctx);
        self.inner.stop(ctx)
    }
    fn held(&self) -> u64 {
        self.inner.held() + self.defrag.frames() as u64
    }
    fn latency(&self) -> Option<&LatencyHist> {
        self.inner.latency()
    }
    fn wants_time(&self) -> bool {
        self.inner.wants_time()
    }
}

/// Judge `pkt` by the frame (a GRO chain's head, or a packet without IP
/// input), then pass it to `inner` or drop it.
#[inline(always)]
fn judge_then<S: Stack, H: Hook>(hook: &mut H, inner: &mut S, pkt: Packet, ctx: &mut RxCtx<'_>) {
    if hook.on() {
        if let Some(reason) = hook.judge(ctx.data(&pkt), &pkt.meta.headers, pkt.meta.rxhash) {
            return ctx.drop(pkt, reason);
        }
    }
    inner.receive(pkt, ctx)
}

/// L2, IP and UDP input in front of a socket layer: a UDP datagram (or a
/// UDP GRO packet, checked once with `more` bytes in its chain's other
/// frames) goes to `inner` as a `Datagram`; a packet input refuses is
/// dropped and `inner` told why; another chain (TCP, which sockets leave
/// to the kernel) is dropped as `unhandled_proto`. A fragment is handed
/// back for reassembly.
#[inline(always)]
fn udp_input<S: Stack, H: Hook>(
    cfg: &IpConfig,
    hook: &mut H,
    inner: &mut S,
    pkt: Packet,
    ctx: &mut RxCtx<'_>,
) -> Option<Packet> {
    if cfg.tcp && !pkt.meta.headers.fragment {
        match pkt.meta.headers.l4 {
            L4::Tcp { .. } => {
                tcp_input(cfg, hook, inner, pkt, ctx);
                return None;
            }
            L4::Other(1 | 58) if pkt.frags.is_empty() => {
                icmp_input(cfg, hook, inner, pkt, ctx);
                return None;
            }
            _ => {}
        }
    }
    let more = if pkt.frags.is_empty() {
        0
    } else if pkt.meta.headers.l4 == L4::Udp && pkt.meta.gso_size > 0 {
        pkt.frags.iter().map(|f| f.len as usize).sum()
    } else {
        ctx.drop(pkt, DropReason::UnhandledProto);
        return None;
    };
    let csum = CsumStatus::of(&pkt.meta);
    let r = hooked(hook, &pkt, ctx, |bytes, snmp, judge| {
        super::input_chain_at(bytes, more, true, csum, cfg, snmp, judge)
    });
    match r {
        Ok(d) => inner.receive_udp(pkt, &d, ctx),
        Err(DropReason::Fragment) => return Some(pkt),
        Err(reason) => {
            inner.refused(reason);
            ctx.drop(pkt, reason)
        }
    }
    None
}

/// Run `input` over `pkt`'s bytes and this NAPI's counters, with the
/// `INPUT` hook if there is one. The frame bytes (through the region, not
/// `ctx`) and the counters are borrowed apart: no copy of the SNMP block
/// per packet.
#[inline(always)]
fn hooked<H: Hook, T>(
    hook: &mut H,
    pkt: &Packet,
    ctx: &mut RxCtx<'_>,
    input: impl FnOnce(&[u8], &mut crate::snmp::Snmp, Option<super::InputHook<'_>>) -> T,
) -> T {
    let umem = ctx.umem;
    let off = pkt.off as usize;
    let bytes = &umem.data(&pkt.frame)[off..off + pkt.len as usize];
    let snmp = &mut ctx.stats.snmp;
    if hook.on() {
        let (h, rxhash) = (&pkt.meta.headers, pkt.meta.rxhash);
        let mut judge = |fr: &[u8], at: &LocalIn| hook.judge_in(fr, h, rxhash, at);
        input(bytes, snmp, Some(&mut judge))
    } else {
        input(bytes, snmp, None)
    }
}

/// L2 and IP input of a TCP segment (or a TCP GRO packet, checked once,
/// `more` bytes in its chain's other frames) in front of a socket layer
/// with TCP: on to `inner` as [`Stack::receive_tcp`], or dropped.
#[inline(never)]
fn tcp_input<S: Stack, H: Hook>(
    cfg: &IpConfig,
    hook: &mut H,
    inner: &mut S,
    pkt: Packet,
    ctx: &mut RxCtx<'_>,
) {
    let more: usize = pkt.frags.iter().map(|f| f.len as usize).sum();
    let csum = CsumStatus::of(&pkt.meta);
    let r = hooked(hook, &pkt, ctx, |bytes, snmp, judge| {
        super::input_tcp_at(bytes, more, csum, cfg, snmp, judge)
    });
    match r {
        Ok(seg) => inner.receive_tcp(pkt, &seg, ctx),
        Err(reason) => {
            inner.refused(reason);
            ctx.drop(pkt, reason)
        }
    }
}

/// An ICMP error quoting TCP, in front of a socket layer with TCP: on to
/// `inner` as [`Stack::receive_tcp`] (the machine takes it as the kernel's
/// `tcp_v4_err`), or dropped.
#[cold]
fn icmp_input<S: Stack, H: Hook>(
    cfg: &IpConfig,
    hook: &mut H,
    inner: &mut S,
    pkt: Packet,
    ctx: &mut RxCtx<'_>,
) {
    let r = hooked(hook, &pkt, ctx, |bytes, snmp, judge| {
        super::input_icmp_at(bytes, cfg, snmp, judge)
    });
    match r {
        Ok(seg) => inner.receive_tcp(pkt, &seg, ctx),
        Err(reason) => {
            inner.refused(reason);
            ctx.drop(pkt, reason)
        }
    }
}

/// A fragment IP input passed (`ReasmReqds` counted) goes to its queue;
/// a datagram it completes goes on through the rest of input.
#[cold]
fn fragment<S: Stack, H: Hook>(
    cfg: &IpConfig,
    defrag: &mut Defrag,
    hook: &mut H,
    inner: &mut S,
    pkt: Packet,
    ctx: &mut RxCtx<'_>,
) {
    // IP input took it as a fragment: its link header was taken off
    // (`l2_rcv`) where the parsed headers say.
    let h = &pkt.meta.headers;
    let v6 = match h.l3 {
        rxpath_wire::L3::Ipv4 => false,
        rxpath_wire::L3::Ipv6 => true,
        _ => return ctx.drop(pkt, DropReason::Malformed),
    };
    let l3 = h.l3_offset as usize;
    let bytes = ctx.data(&pkt);
    let Some(f) = defrag::parse(bytes, l3, v6, pkt.frame.umem_id()) else {
        return ctx.drop(pkt, DropReason::Malformed);
    };
    // Queues time out here too: a worker's path has no poll end.
    defrag.expire(ctx);
    let mut mib = IpMib::default();
    let table = if v6 { &mut defrag.v6 } else { &mut defrag.v4 };
    let done = table.queue(pkt, f, v6, &mut mib, ctx);
    let s = ctx.snmp();
    if v6 { &mut s.ip6 } else { &mut s.ip }.merge(&mib);
    if let Some(r) = done {
        reassembled(cfg, hook, inner, r, ctx)
    }
}

/// The head's network header as the kernel leaves it after reassembly:
/// IPv4's total length, no fragment bits, the ECN codepoint ORed in, the
/// checksum again; IPv6's payload length and ECN (the fragment header
/// stays, where the kernel moves the headers over it).
fn rewrite_head(pkt: &mut Packet, l3: usize, data: usize, len: usize, ecn: u8, ctx: &RxCtx<'_>) {
    let at = pkt.off as usize + l3;
    let b = &mut ctx.umem().data_mut(&mut pkt.frame)[at..];
    let unfrag = data - l3;
    if pkt.meta.headers.l3 == rxpath_wire::L3::Ipv6 {
        b[1] |= ecn << 4;
        let plen = (unfrag - 40 + len) as u16;
        b[4..6].copy_from_slice(&plen.to_be_bytes());
    } else {
        let mut ip = rxpath_wire::ipv4::Packet::new_unchecked(b);
        ip.set_tos(ip.tos() | ecn);
        ip.set_total_len((unfrag + len) as u16);
        ip.set_flags_frag(0);
        ip.fill_checksum();
    }
}

/// The rest of input for a reassembled datagram: its transport, the
/// `INPUT` hook, UDP's length and checksum over the whole chain; then to
/// `inner` as any datagram.
fn reassembled<S: Stack, H: Hook>(
    cfg: &IpConfig,
    hook: &mut H,
    inner: &mut S,
    r: Reassembled,
    ctx: &mut RxCtx<'_>,
) {
    let Reassembled {
        mut pkt,
        l3,
        data,
        len,
        ecn,
    } = r;
    rewrite_head(&mut pkt, l3 as usize, data as usize, len as usize, ecn, ctx);
    // The rest of the chain is summed for UDP's checksum, unless the
    // policy trusts checksums (then its bytes are not touched).
    let summed = cfg.csum != super::CsumPolicy::Trust;
    let (mut more, mut sum) = (0usize, 0u64);
    for f in pkt.frags.iter() {
        let b = ctx.frag_data(f);
        more += b.len();
        if summed {
            sum += rxpath_wire::checksum::sum(b) as u64;
        }
    }
    let rest_sum = rxpath_wire::checksum::fold((sum & 0xffff_ffff) as u32 + (sum >> 32) as u32);
    let umem = ctx.umem;
    let off = pkt.off as usize;
    let bytes = &umem.data(&pkt.frame)[off..off + pkt.len as usize];
    let snmp = &mut ctx.stats.snmp;
    let (h, rxhash) = (&pkt.meta.headers, pkt.meta.rxhash);
    let (l3, data) = (l3 as usize, data as usize);
    let judge = |fr: &[u8], at: &LocalIn| {
        if hook.on() {
            hook.judge_in(fr, h, rxhash, at)
        } else {
            None
        }
    };
    let out = super::input_reassembled(bytes, l3, data, more, rest_sum as u32, cfg, snmp, judge);
    match out {
        Ok((proto, d)) => {
            let hd = &mut pkt.meta.headers;
            hd.fragment = false;
            if let Some(d) = d {
                hd.l4 = L4::Udp;
                hd.payload_offset = d.payload_off as u16;
                hd.payload_len = (d.payload_len - more) as u16;
                if !cfg.deliver_all {
                    return inner.receive_udp(pkt, &d, ctx);
                }
            }
            if proto == 6 && cfg.tcp && !cfg.deliver_all {
                return reassembled_tcp(inner, pkt, l3, data, ctx);
            }
            if proto == 17 {
                let v6 = pkt.meta.headers.l3 == rxpath_wire::L3::Ipv6;
                ctx.snmp().udp_mut(v6).in_datagrams += 1;
            }
            inner.receive(pkt, ctx)
        }
        Err(reason) => {
            inner.refused(reason);
            ctx.drop(pkt, reason)
        }
    }
}

/// A reassembled TCP segment (the XDP program takes the pieces of the
/// datagrams whose first piece went to one of rxpath's ports) on to the
/// TCP machine as any segment. IPv6's fragment header, which reassembly
/// leaves, is taken out (the headers before it moved over it, as the
/// kernel's `ip6_frag_reasm` does).
fn reassembled_tcp<S: Stack>(
    inner: &mut S,
    mut pkt: Packet,
    l3: usize,
    data: usize,
    ctx: &mut RxCtx<'_>,
) {
    let v6 = pkt.meta.headers.l3 == rxpath_wire::L3::Ipv6;
    let at = pkt.off as usize + l3;
    let b = &mut ctx.umem().data_mut(&mut pkt.frame)[at..];
    let (l3, src) = if v6 {
        // Only a fragment header right behind the fixed header; one
        // behind other extension headers stays, and the machine counts
        // the segment malformed.
        let frag = data - l3;
        if frag == 48 {
            let next = b[40];
            b[6] = next;
            let plen = u16::from_be_bytes([b[4], b[5]]).saturating_sub(8);
            b[4..6].copy_from_slice(&plen.to_be_bytes());
            b.copy_within(0..40, 8);
        }
        let off = if frag == 48 { 8 } else { 0 };
        let src: [u8; 16] = b[off + 8..off + 24].try_into().expect("16 bytes");
        (l3 + off, std::net::IpAddr::from(src))
    } else {
        let src: [u8; 4] = b[12..16].try_into().expect("4 bytes");
        (l3, std::net::IpAddr::from(src))
    };
    let seg = crate::packet::TcpSeg {
        l3,
        src,
        verified: false,
    };
    inner.receive_tcp(pkt, &seg, ctx)
}
