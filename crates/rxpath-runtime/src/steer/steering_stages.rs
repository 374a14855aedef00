//! The stages steering adds to the path: [`SteerStage`] on the NAPI
//! thread (between GRO and the rest, where `netif_receive_skb` calls
//! `get_rps_cpu`), [`Collect`] at the end of `spread`'s parallel part, and
//! [`Ordered`] at delivery (the order check).

use super::{Item, Refused, Workers, NO_SEQ};
use rxpath_core::packet::{Packet, PollEnd, RxCtx, Stack};
use rxpath_core::stats::{DropReason, LatencyHist};
use rxpath_core::steer::{
    get_rps_cpu, seq_of, DevFlowTable, SpreadPick, SteerMode, Worker, WorkerView,
};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// The flow hash steering uses: the device's RX hash, else the software
/// hash of the 5-tuple (`skb_get_hash`). 0 = none (no flow).
#[inline]
pub(crate) fn steer_hash(pkt: &Packet) -> u32 {
    if pkt.meta.rxhash != 0 {
        return pkt.meta.rxhash;
    }
    if pkt.meta.headers.l3 == rxpath_wire::L3::None {
        return 0;
    }
    rxpath_wire::hash::flow_hash(&pkt.meta.headers.flow)
}

/// `get_rps_cpu` + `enqueue_to_backlog` for the packets of one NAPI
/// thread (worker `me`); what has no target runs `inline` right here.
pub(crate) struct SteerStage<I> {
    w: Arc<Workers>,
    me: Worker,
    inline: I,
    /// The dev flow table of each RX queue (RFS), by queue index.
    flows: Vec<DevFlowTable>,
    /// Workers to wake at the end of this poll (the IPI list).
    ipi: Vec<Worker>,
    rr: usize,
    /// `rps_cpus` in use, and the mask it came from (a change is picked
    /// up at the end of a poll).
    map: Vec<Worker>,
    mask: u64,
    /// `rps_flow_cnt` of the tables in `flows`.
    flow_cnt: u64,
    /// Accelerated RFS: packets since the last expiry scan, where the
    /// next scan starts, and how many scans each rule whose flow has not
    /// reached its queue yet has survived.
    since_scan: u32,
    scan_at: usize,
    unseen: std::collections::HashMap<usize, u8>,
}

/// Accelerated RFS scans this many rules every [`SCAN_EVERY`] packets.
const SCAN_SLOTS: usize = 128;
const SCAN_EVERY: u32 = 1024;
/// A rule whose flow has not shown up on its queue after this many scans
/// of its slot expires.
const UNSEEN_SCANS: u8 = 4;

impl<I: Stack> SteerStage<I> {
    pub(crate) fn new(w: Arc<Workers>, me: Worker, inline: I) -> Self {
        let flows = if w.cfg.mode == SteerMode::Rfs {
            (0..w.queues())
                .map(|_| {
                    DevFlowTable::new(
                        w.rps_flow_cnt.load(std::sync::atomic::Ordering::Relaxed) as usize
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        let map = w.cfg.rps_map();
        let mask = w.rps_mask.load(std::sync::atomic::Ordering::Relaxed);
        let flow_cnt = w.rps_flow_cnt.load(std::sync::atomic::Ordering::Relaxed);
        SteerStage {
            map,
            mask,
            flow_cnt,
            w,
            me,
            inline,
            flows,
            ipi: Vec::new(),
            rr: me as usize,
            since_scan: 0,
            scan_at: 0,
            unseen: std::collections::HashMap::new(),
        }
    }

    /// `set_rps_cpu()` with a device that has ntuple filters: the flow moves
    /// to worker `t`; have the NIC deliver it on the queue `t` polls
    /// (`ndo_rx_flow_steer`), unless it already arrives there.
    fn accel_steer(&mut self, hash: u32, t: Worker, arrived_on: usize) {
        let Some(a) = &self.w.accel else { return };
        if let Some(Some(rxq)) = a.rxq_of.get(t as usize) {
            if *rxq as usize != arrived_on {
                a.rules.steer(hash, *rxq);
            }
        }
    }

    /// The driver's periodic `rps_may_expire_flow()` over a slice of the
    /// rules that send flows to this thread's queues: a rule expires when
    /// its flow's entry in the queue's dev flow table points at another
    /// worker, or the flow has been idle for 10 × the table's size of this
    /// worker's packets (as the kernel), or its flow never arrived.
    fn accel_expire(&mut self) {
        let Some(a) = &self.w.accel else { return };
        let n = a.rules.len();
        for k in 0..SCAN_SLOTS.min(n) {
            let id = (self.scan_at + k) % n;
            let Some((hash, q)) = a.rules.rule(id) else {
                self.unseen.remove(&id);
                continue;
            };
            if a.worker_of.get(q as usize).copied().flatten() != Some(self.me) {
                continue;
            }
            let Some(table) = self.flows.get(q as usize) else {
                continue;
            };
            let e = table.get(hash);
            let expire = if e.cpu == rxpath_core::steer::NO_WORKER {
                let c = self.unseen.entry(id).or_insert(0);
                *c += 1;
                *c > UNSEEN_SCANS
            } else {
                self.unseen.remove(&id);
                let idle = self.w.head(e.cpu).wrapping_sub(e.last_qtail) as i32;
                e.cpu != self.me || idle > 10 * table.len() as i32
            };
            if expire {
                a.rules.expire(id, hash);
                self.unseen.remove(&id);
            }
        }
        self.scan_at = (self.scan_at + SCAN_SLOTS) % n.max(1);
    }

    /// `spread`: the next online worker in turn, or the least loaded one.
    fn pick(&mut self) -> Option<Worker> {
        let n = self.w.len();
        match self.w.cfg.pick {
            SpreadPick::RoundRobin => {
                for _ in 0..n {
                    self.rr = (self.rr + 1) % n;
                    if self.w.online(self.rr as Worker) {
                        return Some(self.rr as Worker);
                    }
                }
                None
            }
            SpreadPick::LeastLoaded => (0..n as Worker)
                .filter(|&w| self.w.online(w))
                .min_by_key(|&w| (self.w.qlen(w), w != self.me)),
        }
    }

    fn mark(&mut self, t: Worker) {
        if t != self.me && !self.ipi.contains(&t) {
            self.ipi.push(t);
        }
    }

    /// Queue `item` at worker `t`; what cannot be queued is dropped with
    /// its reason, or (worker gone) taken by this worker instead. `rflow`:
    /// the RX queue whose dev flow entry records where the flow went.
    fn queue(
        &mut self,
        t: Worker,
        item: Item,
        hash: u32,
        rflow: Option<usize>,
        ctx: &mut RxCtx<'_>,
    ) {
        let (r, wake) = self.w.enqueue(t, item, hash, t != self.me);
        if wake {
            self.mark(t);
        }
        match r {
            Ok(tail) => {
                if let Some(f) = rflow.and_then(|q| self.flows.get_mut(q)) {
                    // get_rps_cpu checked that the flow has an entry or can
                    // have one; heads only move on since.
                    let _ = f.set(hash, t, tail, &*self.w);
                }
            }
            Err(Refused::Dropped(p, reason)) => ctx.drop(p, reason),
            Err(Refused::Offline(Item::Pkt(p, seq))) => {
                if seq == NO_SEQ {
                    // The kernel's get_rps_cpu skips an offline CPU: the
                    // packet is processed where it is.
                    self.inline.receive(p, ctx)
                } else {
                    // A `spread` number must go through a worker: this
                    // one (a NAPI thread never goes offline), or on a
                    // host (no NAPI thread is a worker) another online one.
                    let to = if (self.me as usize) < self.w.len() {
                        Some(self.me)
                    } else {
                        self.pick()
                    };
                    match to {
                        Some(t) => self.queue(t, Item::Pkt(p, seq), hash, None, ctx),
                        None => unreachable!("every worker offline with spread"),
                    }
                }
            }
            Err(Refused::Offline(Item::Hole(_))) => unreachable!("holes are never enqueued here"),
        }
    }
}

impl<I: Stack> Stack for SteerStage<I> {
    fn receive(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        let hash = steer_hash(&pkt);
        let mode = self.w.cfg.mode;
        let target = if hash == 0 {
            None
        } else {
            match mode {
                SteerMode::None => None,
                SteerMode::Rps => get_rps_cpu(hash, &self.map, None, None, &*self.w),
                SteerMode::Rfs => {
                    let q = pkt.meta.queue as usize;
                    // Accelerated RFS steers the NIC when the flow moves.
                    let before = self
                        .w
                        .accel
                        .as_ref()
                        .and_then(|_| self.flows.get(q).map(|f| f.get(hash).cpu));
                    let r = get_rps_cpu(
                        hash,
                        &self.map,
                        self.flows.get(q),
                        Some(&self.w.sock),
                        &*self.w,
                    );
                    if self.w.accel.is_some() {
                        if let Some((t, true)) = r {
                            // `set_rps_cpu` steers the NIC on a move to the
                            // reader's worker only, not to an RPS one.
                            if before != Some(t) && self.w.sock.desired_cpu(hash) == Some(t as u32)
                            {
                                self.accel_steer(hash, t, q);
                            }
                        }
                        self.since_scan += 1;
                        if self.since_scan >= SCAN_EVERY {
                            self.since_scan = 0;
                            self.accel_expire();
                        }
                    }
                    if r.is_none() {
                        self.w.count_rfs_here(self.me);
                    }
                    r
                }
                SteerMode::Spread | SteerMode::SpreadUnordered => self.pick().map(|t| (t, false)),
            }
        };
        let Some((t, rflow)) = target else {
            return self.inline.receive(pkt, ctx);
        };
        let seq = match &self.w.reorder {
            Some(r) => match r.admit() {
                Some(s) => s,
                None => return ctx.drop(pkt, DropReason::ReorderFull),
            },
            None => NO_SEQ,
        };
        let rflow = rflow.then_some(pkt.meta.queue as usize);
        self.queue(t, Item::Pkt(pkt, seq), hash, rflow, ctx);
    }

    fn malformed(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        // No flow to hash: processed where it is.
        self.inline.malformed(pkt, ctx)
    }

    fn bundle_done(&mut self, ctx: &mut RxCtx<'_>) {
        self.inline.bundle_done(ctx)
    }

    fn poll_done(&mut self, ctx: &mut RxCtx<'_>, end: PollEnd) -> Option<u64> {
        // `net_rps_send_ipi`: each worker on the list once.
        for t in self.ipi.drain(..) {
            self.w.wake(self.me, t);
        }
        // `rps_cpus` written while packets flow (`store_rps_map`).
        let m = self.w.rps_mask.load(std::sync::atomic::Ordering::Relaxed);
        if m != self.mask {
            self.mask = m;
            self.map = (0..self.w.len().min(64) as Worker)
                .filter(|&w| m & 1 << w != 0)
                .collect();
        }
        // `rps_flow_cnt` written while packets flow: new tables that keep
        // every flow in flight where it is.
        let n = self
            .w
            .rps_flow_cnt
            .load(std::sync::atomic::Ordering::Relaxed);
        if n != self.flow_cnt && !self.flows.is_empty() {
            self.flows = self
                .flows
                .iter()
                .map(|f| f.resized(n as usize, &*self.w))
                .collect();
            self.flow_cnt = n;
        }
        for f in &mut self.flows {
            f.tidy(&*self.w);
        }
        self.inline.poll_done(ctx, end)
    }

    fn stop(&mut self, ctx: &mut RxCtx<'_>) {
        self.inline.stop(ctx)
    }

    fn held(&self) -> u64 {
        self.inline.held()
    }

    fn latency(&self) -> Option<&LatencyHist> {
        self.inline.latency()
    }
}

/// The end of `spread`'s parallel part: keeps what survived IP input and
/// the filter, for the reorder stage.
pub(crate) struct Collect(pub(crate) Rc<RefCell<Vec<Packet>>>);

impl Stack for Collect {
    #[inline]
    fn receive(&mut self, pkt: Packet, _ctx: &mut RxCtx<'_>) {
        self.0.borrow_mut().push(pkt);
    }
}

/// The order check at delivery, in front of the end of the path.
pub(crate) struct Ordered<S> {
    pub(crate) inner: S,
    pub(crate) w: Arc<Workers>,
}

impl<S: Stack> Stack for Ordered<S> {
    #[inline]
    fn receive(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        if let Some(seq) = seq_of(&pkt, ctx.data(&pkt), self.w.order.source()) {
            let h = steer_hash(&pkt);
            if h != 0 {
                self.w.order.observe(h, seq);
            }
        }
        self.inner.receive(pkt, ctx)
    }
    fn malformed(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        self.inner.malformed(pkt, ctx)
    }
    fn bundle_done(&mut self, ctx: &mut RxCtx<'_>) {
        self.inner.bundle_done(ctx)
    }
    fn poll_done(&mut self, ctx: &mut RxCtx<'_>, end: PollEnd) -> Option<u64> {
        self.inner.poll_done(ctx, end)
    }
    fn stop(&mut self, ctx: &mut RxCtx<'_>) {
        self.inner.stop(ctx)
    }
    fn held(&self) -> u64 {
        self.inner.held()
    }
    fn latency(&self) -> Option<&LatencyHist> {
        self.inner.latency()
    }
}

/// On a host, the steering stage is what a NAPI cell runs: frames coming
/// home are the socket stage's.
impl<I: rxpath_core::sock::CellStack> rxpath_core::sock::CellStack for SteerStage<I> {
    fn returning(&self) -> usize {
        self.inline.returning()
    }
}

/// One stage per RX queue (a host's socket stages), chosen by the
/// packet's queue: what a host's worker runs.
pub(crate) struct PerQueue<S>(pub(crate) Vec<S>);

impl<S: Stack> Stack for PerQueue<S> {
    fn receive(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        match self.0.get_mut(pkt.meta.queue as usize) {
            Some(s) => s.receive(pkt, ctx),
            None => ctx.drop(pkt, DropReason::Malformed),
        }
    }
    fn bundle_done(&mut self, ctx: &mut RxCtx<'_>) {
        for s in self.0.iter_mut() {
            s.bundle_done(ctx);
        }
    }
    fn stop(&mut self, ctx: &mut RxCtx<'_>) {
        // Each stage lets go of the frames of `ctx`'s region only.
        for s in self.0.iter_mut() {
            s.stop(ctx);
        }
    }
    fn held(&self) -> u64 {
        self.0.iter().map(|s| s.held()).sum()
    }
}
