//! IP input as the stage after GRO (and steering), in front of the end of
//! the path, whatever the end is: the same stage for `rxpath run`, `echo`,
//! `quic` and a `Host`.
//!
//! * In front of a socket layer (`IpConfig::deliver_all` off): L2, IP and
//!   UDP input ([`super::input_chain`]), once for a UDP GRO packet, as the
//!   kernel's `ip_rcv` runs once per GRO skb; the end gets the checked
//!   [`Datagram`](crate::packet::Datagram) ([`Stack::receive_udp`]) and hears of every refusal
//!   ([`Stack::refused`]). Other chains (TCP) are the kernel's.
//! * In front of an end that takes every protocol (`rxpath run`'s sink):
//!   every packet goes through [`super::input_any`]; a GRO super-packet
//!   counts once (`InReceives`, `InDelivers`), its segments having passed
//!   GRO's own checks.
//!
//! The rule filter's `INPUT` hook, if given, runs inside IP input where
//! the kernel's `ip_local_deliver()` runs it: after the IP checks, before
//! the transport's (a UDP datagram the rules drop is the rule's, not a
//! checksum error), on the bytes IP input already holds.

use super::{CsumStatus, IpConfig, LocalIn};
use crate::filter::{FilterHandle, InputHook};
use crate::packet::{Packet, PollEnd, RxCtx, Stack};
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
}

impl<S> IpStage<S> {
    /// IP input with `cfg` in front of `inner`; `None` passes every packet
    /// straight on (the lowest RX level of `rxdrop`).
    pub fn new(cfg: Option<IpConfig>, inner: S) -> Self {
        IpStage {
            inner,
            cfg,
            hook: NoHook,
        }
    }
}

impl<S, H: Hook> IpStage<S, H> {
    /// IP input with `cfg` and the `INPUT` hook `hook` in front of `inner`.
    pub fn with_hook(cfg: Option<IpConfig>, hook: H, inner: S) -> Self {
        IpStage { inner, cfg, hook }
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
            return udp_input(cfg, &mut self.hook, &mut self.inner, pkt, ctx);
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
            super::input_any_hooked(bytes, csum, cfg, snmp, |fr, at| {
                hook.judge_in(fr, h, rxhash, at)
            })
        } else {
            super::input_any(bytes, csum, cfg, snmp)
        };
        match r {
            Ok(proto) => {
                if proto == 17 {
                    let v6 = pkt.meta.headers.l3 == rxpath_wire::L3::Ipv6;
                    ctx.snmp().udp_mut(v6).in_datagrams += 1;
                }
                self.inner.receive(pkt, ctx)
            }
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
        let t = self.inner.poll_done(ctx, end);
        // Packets GRO flushed here were judged; the hook lets its set go
        // when the queue ran dry (or after a few busy polls).
        self.hook.poll_done(end);
        t
    }
    fn held(&self) -> u64 {
        self.inner.held()
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
/// to the kernel) is dropped as `unhandled_proto`.
#[inline(always)]
fn udp_input<S: Stack, H: Hook>(
    cfg: &IpConfig,
    hook: &mut H,
    inner: &mut S,
    pkt: Packet,
    ctx: &mut RxCtx<'_>,
) {
    let more = if pkt.frags.is_empty() {
        0
    } else if pkt.meta.headers.l4 == L4::Udp && pkt.meta.gso_size > 0 {
        pkt.frags.iter().map(|f| f.len as usize).sum()
    } else {
        return ctx.drop(pkt, DropReason::UnhandledProto);
    };
    let csum = CsumStatus::of(&pkt.meta);
    // The frame bytes (through the region, not `ctx`) and the counters are
    // borrowed apart: no copy of the SNMP block per packet.
    let umem = ctx.umem;
    let off = pkt.off as usize;
    let bytes = &umem.data(&pkt.frame)[off..off + pkt.len as usize];
    let snmp = &mut ctx.stats.snmp;
    let r = if hook.on() {
        let (h, rxhash) = (&pkt.meta.headers, pkt.meta.rxhash);
        let mut judge = |fr: &[u8], at: &LocalIn| hook.judge_in(fr, h, rxhash, at);
        super::input_chain(bytes, more, csum, cfg, snmp, Some(&mut judge))
    } else {
        super::input_chain(bytes, more, csum, cfg, snmp, None)
    };
    match r {
        Ok(d) => inner.receive_udp(pkt, &d, ctx),
        Err(reason) => {
            inner.refused(reason);
            ctx.drop(pkt, reason)
        }
    }
}
