//! IP input as a stage in front of a path end that is not a socket layer
//! (`rxpath run`'s sink): every packet GRO passes up goes through
//! [`super::input_any`] and is counted under the kernel's SNMP names; a GRO
//! super-packet counts once (`InReceives`, `InDelivers`), as the kernel's
//! `ip_rcv` counts one skb, its segments having passed GRO's own checks.
//!
//! The rule filter's `INPUT` hook, if given, runs inside IP input where
//! the kernel's `ip_local_deliver()` runs it: after the IP checks, before
//! the transport's (a UDP datagram the rules drop is the rule's, not a
//! checksum error), on the bytes IP input already holds.

use super::{CsumStatus, IpConfig};
use crate::filter::{FilterHandle, InputHook};
use crate::packet::{Packet, PollEnd, RxCtx, Stack};
use crate::stats::LatencyHist;
use std::sync::Arc;

/// `inner` behind IP input (and the `INPUT` hook, if any).
#[derive(Debug)]
pub struct IpStage<S> {
    inner: S,
    cfg: Option<IpConfig>,
    hook: Option<InputHook>,
}

impl<S> IpStage<S> {
    /// IP input with `cfg` in front of `inner`; `None` passes every packet
    /// straight on (the lowest RX level of `rxdrop`).
    pub fn new(cfg: Option<IpConfig>, inner: S) -> Self {
        IpStage {
            inner,
            cfg,
            hook: None,
        }
    }

    /// [`Self::new`] with the rules `filter` holds at the `INPUT` hook
    /// (a filtered packet is the counted drop `filter` or
    /// `filter_reject`). Without IP input (`cfg` `None`) the rules still
    /// judge every packet.
    pub fn with_filter(cfg: Option<IpConfig>, filter: Arc<FilterHandle>, inner: S) -> Self {
        IpStage {
            inner,
            cfg,
            hook: Some(InputHook::new(filter)),
        }
    }

    /// The filter's flow cache hits and walks so far (`None`: no filter).
    pub fn cache_stats(&self) -> Option<(u64, u64)> {
        self.hook.as_ref().map(InputHook::cache_stats)
    }
}

impl<S: Stack> Stack for IpStage<S> {
    #[inline]
    fn receive(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        let Some(cfg) = &self.cfg else {
            return match &mut self.hook {
                Some(hook) => judge_then(hook, &mut self.inner, pkt, ctx),
                None => self.inner.receive(pkt, ctx),
            };
        };
        if !pkt.frags.is_empty() {
            let s = ctx.snmp();
            let m = if pkt.meta.headers.l3 == rxpath_wire::L3::Ipv6 {
                &mut s.ip6
            } else {
                &mut s.ip
            };
            m.in_receives += 1;
            m.in_delivers += 1;
            return match &mut self.hook {
                Some(hook) => judge_then(hook, &mut self.inner, pkt, ctx),
                None => self.inner.receive(pkt, ctx),
            };
        }
        let csum = CsumStatus::of(&pkt.meta);
        let umem = ctx.umem;
        let off = pkt.off as usize;
        let bytes = &umem.data(&pkt.frame)[off..off + pkt.len as usize];
        let snmp = &mut ctx.stats.snmp;
        let r = match &mut self.hook {
            Some(hook) => {
                let (h, rxhash) = (&pkt.meta.headers, pkt.meta.rxhash);
                super::input_any_hooked(bytes, csum, cfg, snmp, |fr| {
                    hook.action(fr, h, rxhash).drop_reason()
                })
            }
            None => super::input_any(bytes, csum, cfg, snmp),
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
        if let Some(h) = &mut self.hook {
            h.bundle_done();
        }
        self.inner.bundle_done(ctx)
    }
    fn poll_done(&mut self, ctx: &mut RxCtx<'_>, end: PollEnd) -> Option<u64> {
        let t = self.inner.poll_done(ctx, end);
        // Packets GRO flushed here were judged; the hook lets its set go
        // when the queue ran dry (or after a few busy polls).
        if let Some(h) = &mut self.hook {
            h.poll_done(end);
        }
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
fn judge_then<S: Stack>(hook: &mut InputHook, inner: &mut S, pkt: Packet, ctx: &mut RxCtx<'_>) {
    let a = hook.action(ctx.data(&pkt), &pkt.meta.headers, pkt.meta.rxhash);
    match a.drop_reason() {
        Some(reason) => ctx.drop(pkt, reason),
        None => inner.receive(pkt, ctx),
    }
}
