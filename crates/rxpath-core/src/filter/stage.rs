//! The filter as a stage of the path: judges every packet GRO passes up
//! (a super-packet once, as the kernel judges one skb) and drops what the
//! rules drop, counted `filter` or `filter_reject`.

use super::{Action, Filter, FilterHandle, Judge};
use crate::packet::{Packet, PollEnd, RxCtx, Stack};
use crate::stats::LatencyHist;
use rxpath_wire::Headers;
use std::sync::Arc;

/// One thread's `INPUT` hook: the running filter, held for a bundle, and
/// the thread's [`Judge`] (flow cache, counts added up per bundle). The
/// filter stage and the socket stage judge through it.
#[derive(Debug)]
pub struct InputHook {
    filter: Arc<FilterHandle>,
    /// The set this bundle is judged by: loaded at its first packet and
    /// let go at its end, so a swap takes effect at the next bundle and no
    /// packet sees half of one.
    cur: Option<Option<Arc<Filter>>>,
    judge: Judge,
}

impl InputHook {
    /// A hook judging by what `filter` holds.
    pub fn new(filter: Arc<FilterHandle>) -> Self {
        InputHook {
            judge: filter.judge(),
            filter,
            cur: None,
        }
    }

    /// What the rules do with a parsed frame (accept: not IP, or no set
    /// for its family); `rxhash` the packet's flow hash, or 0.
    #[inline(always)]
    pub fn action(&mut self, frame: &[u8], h: &Headers, rxhash: u32) -> Action {
        let filter = &self.filter;
        match self.cur.get_or_insert_with(|| filter.current()) {
            Some(f) => self.judge.action(f, frame, h, rxhash),
            None => Action::Accept,
        }
    }

    /// Let go of the bundle's filter, its counts written first (at the end
    /// of every bundle and poll).
    pub fn release(&mut self) {
        if let Some(Some(f)) = self.cur.take() {
            self.judge.flush(&f);
        }
    }

    /// Flow cache hits and walks so far.
    pub fn cache_stats(&self) -> (u64, u64) {
        (self.judge.hits, self.judge.misses)
    }
}

/// `inner` behind the filter's `INPUT` hook.
#[derive(Debug)]
pub struct FilterStage<S> {
    inner: S,
    hook: InputHook,
}

impl<S> FilterStage<S> {
    /// Put `filter` in front of `inner`.
    pub fn new(filter: Arc<FilterHandle>, inner: S) -> Self {
        FilterStage {
            inner,
            hook: InputHook::new(filter),
        }
    }

    /// Flow cache hits and walks so far.
    pub fn cache_stats(&self) -> (u64, u64) {
        self.hook.cache_stats()
    }
}

impl<S: Stack> Stack for FilterStage<S> {
    #[inline(always)]
    fn receive(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        let a = self
            .hook
            .action(ctx.data(&pkt), &pkt.meta.headers, pkt.meta.rxhash);
        if let Some(reason) = a.drop_reason() {
            return ctx.drop(pkt, reason);
        }
        self.inner.receive(pkt, ctx)
    }
    fn malformed(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        self.inner.malformed(pkt, ctx)
    }
    fn bundle_done(&mut self, ctx: &mut RxCtx<'_>) {
        self.hook.release();
        self.inner.bundle_done(ctx)
    }
    fn poll_done(&mut self, ctx: &mut RxCtx<'_>, end: PollEnd) -> Option<u64> {
        let t = self.inner.poll_done(ctx, end);
        // Packets GRO flushed here were judged; hold no set while idle.
        self.hook.release();
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
