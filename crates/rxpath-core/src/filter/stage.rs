//! The filter as a stage of the path: judges every packet GRO passes up
//! (a super-packet once, as the kernel judges one skb) and drops what the
//! rules drop, counted `filter` or `filter_reject`.

use super::{FilterHandle, Judge};
use crate::packet::{Packet, PollEnd, RxCtx, Stack};
use crate::stats::LatencyHist;
use std::sync::Arc;

/// `inner` behind the filter's `INPUT` hook.
#[derive(Debug)]
pub struct FilterStage<S> {
    inner: S,
    filter: Arc<FilterHandle>,
    /// The set this bundle is judged by: loaded at its first packet and
    /// let go at its end, so a swap takes effect at the next bundle and no
    /// packet sees half of one.
    cur: Option<Option<Arc<super::Filter>>>,
    /// This thread's flow cache and pending counts.
    judge: Judge,
}

impl<S> FilterStage<S> {
    /// Put `filter` in front of `inner`.
    pub fn new(filter: Arc<FilterHandle>, inner: S) -> Self {
        FilterStage {
            inner,
            judge: filter.judge(),
            filter,
            cur: None,
        }
    }

    /// Let go of the bundle's filter, its counts written first.
    fn release(&mut self) {
        if let Some(Some(f)) = self.cur.take() {
            self.judge.flush(&f);
        }
    }

    /// Flow cache hits and walks so far.
    pub fn cache_stats(&self) -> (u64, u64) {
        (self.judge.hits, self.judge.misses)
    }
}

impl<S: Stack> Stack for FilterStage<S> {
    #[inline(always)]
    fn receive(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        let filter = &self.filter;
        let cur = self.cur.get_or_insert_with(|| filter.current());
        if let Some(f) = cur {
            let a = self
                .judge
                .action(f, ctx.data(&pkt), &pkt.meta.headers, pkt.meta.rxhash);
            if let Some(reason) = a.drop_reason() {
                return ctx.drop(pkt, reason);
            }
        }
        self.inner.receive(pkt, ctx)
    }
    fn malformed(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        self.inner.malformed(pkt, ctx)
    }
    fn bundle_done(&mut self, ctx: &mut RxCtx<'_>) {
        self.release();
        self.inner.bundle_done(ctx)
    }
    fn poll_done(&mut self, ctx: &mut RxCtx<'_>, end: PollEnd) -> Option<u64> {
        let t = self.inner.poll_done(ctx, end);
        // Packets GRO flushed here were judged; hold no set while idle.
        self.release();
        t
    }
    fn held(&self) -> u64 {
        self.inner.held()
    }
    fn latency(&self) -> Option<&LatencyHist> {
        self.inner.latency()
    }
}
