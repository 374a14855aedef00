//! IP input as a stage in front of a path end that is not a socket layer
//! (`rxpath run`'s sink): every packet GRO passes up goes through
//! [`super::input_any`] and is counted under the kernel's SNMP names; a GRO
//! super-packet counts once (`InReceives`, `InDelivers`), as the kernel's
//! `ip_rcv` counts one skb, its segments having passed GRO's own checks.

use super::{CsumStatus, IpConfig};
use crate::packet::{Packet, PollEnd, RxCtx, Stack};
use crate::stats::LatencyHist;

/// `inner` behind IP input.
#[derive(Debug)]
pub struct IpStage<S> {
    inner: S,
    cfg: Option<IpConfig>,
}

impl<S> IpStage<S> {
    /// IP input with `cfg` in front of `inner`; `None` passes every packet
    /// straight on (the lowest RX level of `rxdrop`).
    pub fn new(cfg: Option<IpConfig>, inner: S) -> Self {
        IpStage { inner, cfg }
    }
}

impl<S: Stack> Stack for IpStage<S> {
    #[inline]
    fn receive(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        let Some(cfg) = &self.cfg else {
            return self.inner.receive(pkt, ctx);
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
            return self.inner.receive(pkt, ctx);
        }
        let csum = CsumStatus::of(&pkt.meta);
        let umem = ctx.umem;
        let off = pkt.off as usize;
        let bytes = &umem.data(&pkt.frame)[off..off + pkt.len as usize];
        match super::input_any(bytes, csum, cfg, &mut ctx.stats.snmp) {
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
        self.inner.bundle_done(ctx)
    }
    fn poll_done(&mut self, ctx: &mut RxCtx<'_>, end: PollEnd) -> Option<u64> {
        self.inner.poll_done(ctx, end)
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
