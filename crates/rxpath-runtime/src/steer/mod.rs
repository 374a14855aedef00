//! The workers of the bottom half (seeds 002 and 003): threads with a
//! softnet-like backlog each, fed by the NAPI threads' steering stage.
//!
//! ```text
//!  NAPI thread t ─ GRO ─ SteerStage ─┬─► backlog of worker 0 ──► IP, filter, sink (worker 0)
//!  (is worker t)                     ├─► backlog of worker 1 ──► ...
//!                                    └─► inline (no target: the kernel's
//!                                        netif_receive_skb on this CPU)
//!  spread: NAPI admits a sequence number; the workers' survivors go through
//!          Reorder, and the serial part (sink, sockets) sees them in order
//! ```
//!
//! A backlog is the kernel's `softnet_data.input_pkt_queue` with its lock
//! (`rps_lock_irqsave`): a mutex over the queue and its counters
//! ([`Backlog`]: `netdev_max_backlog`, `input_queue_tail`, flow limit).
//! `input_queue_head` advances after a batch was processed, and is mirrored
//! in an atomic so RFS reads it without the lock (`READ_ONCE` in
//! `get_rps_cpu`). The NAPI threads are workers `0..threads` (the CPU that
//! takes the interrupt runs its own backlog too); the rest are threads of
//! their own that sleep when idle. A worker is woken at most once per NAPI
//! poll, and only when its queue went from empty to non-empty (the IPI list
//! of `net_rps_send_ipi`).
//!
//! Frames processed on a worker go home through their queue's
//! [`Port::ret`]; the NAPI thread that owns the queue gives them back to
//! the fill ring.

mod serve;
mod steering_stages;
mod worker;

pub(crate) use serve::{Build, Server};
pub(crate) use steering_stages::{Collect, Ordered, PerQueue, SteerStage};
pub(crate) use worker::{pure_worker_thread, BottomHalf};

use rxpath_core::packet::Packet;
use rxpath_core::sock::{Port, SockFlowTable};
use rxpath_core::stats::{DropReason, NapiStats};
use rxpath_core::steer::{
    Backlog, BacklogStats, Enqueued, FlowLimit, OrderCheck, Reorder, SeqSource, SteerConfig,
    SteerMode, Worker, WorkerView,
};
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::Thread;

/// No sequence number (every mode but `spread`).
pub(crate) const NO_SEQ: u64 = u64::MAX;

/// What a backlog holds.
#[derive(Debug)]
pub(crate) enum Item {
    /// A packet, with its `spread` sequence number (or [`NO_SEQ`]).
    Pkt(Packet, u64),
    /// A `spread` number whose packet was dropped at this backlog's door:
    /// the worker completes it in turn, so the sequence does not wait.
    Hole(u64),
}

#[derive(Debug)]
struct Backq {
    bl: Backlog,
    items: VecDeque<Item>,
}

/// One worker as everyone sees it.
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct WorkerShared {
    q: Mutex<Backq>,
    /// `input_queue_head`, readable without the lock.
    head: AtomicU32,
    /// Packets queued (for `spread`'s least-loaded pick).
    qlen: AtomicUsize,
    online: AtomicBool,
    thread: OnceLock<Thread>,
    /// Wakeups this worker received.
    wakeups: AtomicU64,
    /// Wakeups this worker's NAPI thread sent.
    wakeups_sent: AtomicU64,
    /// RFS packets this NAPI thread ran itself: every entry of the flow's
    /// dev flow set held a flow with packets in flight (or no worker was
    /// online).
    rfs_here: AtomicU64,
    /// A reader waiting in `recv` on this worker's CPU claimed the backlog:
    /// wakeups go to it (see `serve`).
    claimed: AtomicBool,
    claim: Mutex<Option<Thread>>,
    /// Someone (the worker's thread or a reader) is running the backlog.
    busy: AtomicBool,
    /// What readers counted running this backlog.
    served: Mutex<WorkerCounters>,
}

/// Why an enqueue did not queue the packet.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The worker is gone: the caller steers elsewhere.
    Offline(Item),
    /// Dropped for this reason (counted in the backlog's `dropped`).
    Dropped(Packet, DropReason),
}

/// Where each RX queue's frames live and go home.
#[derive(Debug)]
pub(crate) enum Ports {
    /// `run`'s own, by queue index.
    Own(Vec<Option<Port>>),
    /// A host's socket layer's (sockets and workers share the way home).
    Host(std::sync::Arc<rxpath_core::sock::Sockets>),
}

/// Every worker, and what the bottom half shares.
#[derive(Debug)]
pub(crate) struct Workers {
    ws: Vec<WorkerShared>,
    pub(crate) cfg: SteerConfig,
    /// `rps_cpus` as a bitmask of workers, changeable while packets flow
    /// (each steering stage picks a change up at the end of a poll).
    pub(crate) rps_mask: std::sync::Arc<AtomicU64>,
    /// `rps_flow_cnt` of every RX queue (RFS), changeable while packets
    /// flow (each steering stage resizes its tables at the end of a poll,
    /// once every flow in flight fits).
    pub(crate) rps_flow_cnt: std::sync::Arc<AtomicU64>,
    pub(crate) reorder: Option<Reorder<Packet>>,
    pub(crate) order: OrderCheck,
    pub(crate) sock: std::sync::Arc<SockFlowTable>,
    /// Each RX queue's frame region and way home.
    ports: Ports,
    /// NAPI threads still polling their devices.
    pub(crate) napis_running: AtomicUsize,
    /// Workers still processing (NAPI threads included).
    pub(crate) bh_running: AtomicUsize,
    /// Accelerated RFS: the NIC's rules, and the queue whose NAPI runs on
    /// each worker (the kernel's `rx_cpu_rmap`).
    pub(crate) accel: Option<Accel>,
}

/// What accelerated RFS needs of the device.
#[derive(Debug)]
pub(crate) struct Accel {
    pub(crate) rules: std::sync::Arc<rxpath_dev::sim::FlowRules>,
    /// Worker → the RX queue its NAPI thread polls.
    pub(crate) rxq_of: Vec<Option<u16>>,
    /// RX queue → the worker whose NAPI thread polls it.
    pub(crate) worker_of: Vec<Option<Worker>>,
}

/// Accelerated RFS at the end of a run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct AccelReport {
    /// Rules `ndo_rx_flow_steer` installed.
    pub installed: u64,
    /// Rules expired (`rps_may_expire_flow`).
    pub expired: u64,
    /// Packets the NIC steered by a rule instead of RSS.
    pub steered: u64,
}

/// The bitmask of a worker list (workers past 63 cannot be named).
pub(crate) fn mask_of(map: &[Worker]) -> u64 {
    map.iter().filter(|&&w| w < 64).fold(0, |m, &w| m | 1 << w)
}

/// `rps_flow_cnt` as the kernel keeps it: rounded up to a power of two
/// (here at least one set of ways).
pub(crate) fn flow_cnt(entries: usize) -> u64 {
    entries
        .max(rxpath_core::steer::DEV_FLOW_WAYS)
        .next_power_of_two() as u64
}

impl Workers {
    /// Share `rps_cpus` with a run's knobs (a control socket changes it).
    pub(crate) fn share_rps_mask(&mut self, knob: &std::sync::Arc<AtomicU64>) {
        knob.store(self.rps_mask.load(Ordering::Relaxed), Ordering::Relaxed);
        self.rps_mask = knob.clone();
    }

    /// Share `rps_flow_cnt` with a run's knobs (RFS only).
    pub(crate) fn share_flow_cnt(&mut self, knob: &std::sync::Arc<AtomicU64>) {
        knob.store(self.rps_flow_cnt.load(Ordering::Relaxed), Ordering::Relaxed);
        self.rps_flow_cnt = knob.clone();
    }

    /// Workers for `cfg`, over the queues `ports` (index = queue index),
    /// with `napi_threads` NAPI threads among them.
    pub(crate) fn new(
        cfg: &SteerConfig,
        ports: Ports,
        napi_threads: usize,
        seq: SeqSource,
        sock: Option<std::sync::Arc<SockFlowTable>>,
    ) -> Self {
        let ws = (0..cfg.workers)
            .map(|_| WorkerShared {
                q: Mutex::new(Backq {
                    bl: Backlog::new(cfg.netdev_max_backlog, cfg.flow_limit.map(FlowLimit::new)),
                    items: VecDeque::with_capacity(cfg.netdev_max_backlog + 1),
                }),
                head: AtomicU32::new(0),
                qlen: AtomicUsize::new(0),
                online: AtomicBool::new(true),
                thread: OnceLock::new(),
                wakeups: AtomicU64::new(0),
                wakeups_sent: AtomicU64::new(0),
                rfs_here: AtomicU64::new(0),
                claimed: AtomicBool::new(false),
                claim: Mutex::new(None),
                busy: AtomicBool::new(false),
                served: Mutex::new(WorkerCounters::default()),
            })
            .collect();
        Workers {
            ws,
            rps_mask: {
                let m = std::sync::Arc::new(AtomicU64::new(0));
                m.store(mask_of(&cfg.rps_map()), Ordering::Relaxed);
                m
            },
            rps_flow_cnt: std::sync::Arc::new(AtomicU64::new(flow_cnt(cfg.rps_flow_cnt))),
            reorder: (cfg.mode == SteerMode::Spread).then(|| Reorder::new(cfg.reorder_window)),
            order: OrderCheck::new(seq),
            sock: sock.unwrap_or_else(|| {
                std::sync::Arc::new(SockFlowTable::new(cfg.rps_sock_flow_entries))
            }),
            ports,
            napis_running: AtomicUsize::new(napi_threads),
            bh_running: AtomicUsize::new(cfg.workers),
            accel: None,
            cfg: cfg.clone(),
        }
    }

    /// Accelerated RFS through `rules`, with `queue_worker[q]` the worker
    /// whose NAPI thread polls queue `q`.
    pub(crate) fn with_accel(
        mut self,
        rules: std::sync::Arc<rxpath_dev::sim::FlowRules>,
        queue_worker: &[Option<Worker>],
    ) -> Self {
        let mut rxq_of = vec![None; self.ws.len()];
        for (q, w) in queue_worker.iter().enumerate() {
            if let Some(w) = w {
                if let Some(slot) = rxq_of.get_mut(*w as usize) {
                    slot.get_or_insert(q as u16);
                }
            }
        }
        self.accel = Some(Accel {
            rules,
            rxq_of,
            worker_of: queue_worker.to_vec(),
        });
        self
    }

    pub(crate) fn accel_report(&self) -> Option<AccelReport> {
        self.accel.as_ref().map(|a| {
            let (installed, expired, steered) = a.rules.counts();
            AccelReport {
                installed,
                expired,
                steered,
            }
        })
    }

    /// Queue `q`'s port.
    pub(crate) fn port(&self, q: usize) -> Option<&Port> {
        match &self.ports {
            Ports::Own(v) => v.get(q).and_then(|p| p.as_ref()),
            Ports::Host(s) => s.port(q as u16),
        }
    }

    /// RX queues (one past the highest index).
    pub(crate) fn queues(&self) -> usize {
        match &self.ports {
            Ports::Own(v) => v.len(),
            Ports::Host(s) => s.queues(),
        }
    }

    /// Number of workers.
    pub(crate) fn len(&self) -> usize {
        self.ws.len()
    }

    /// Register the calling thread as worker `w`'s (for wakeups).
    pub(crate) fn register(&self, w: Worker) {
        let _ = self.ws[w as usize].thread.set(std::thread::current());
    }

    /// `enqueue_to_backlog()` on worker `w`. Returns the outcome (the tail
    /// to save as the flow's `last_qtail`) and whether the worker must be
    /// woken (its queue was empty).
    pub(crate) fn enqueue(
        &self,
        w: Worker,
        item: Item,
        hash: u32,
        from_other: bool,
    ) -> (Result<u32, Refused>, bool) {
        let s = &self.ws[w as usize];
        let mut g = lock(&s.q);
        if !s.online.load(Ordering::Relaxed) {
            return (Err(Refused::Offline(item)), false);
        }
        let wake = g.items.is_empty();
        let r = match g.bl.enqueue(hash, from_other) {
            Enqueued::Queued { tail, .. } => {
                g.items.push_back(item);
                Ok(tail)
            }
            e => {
                let reason = if e == Enqueued::Full {
                    DropReason::BacklogFull
                } else {
                    DropReason::FlowLimit
                };
                match item {
                    Item::Pkt(p, seq) => {
                        if seq != NO_SEQ {
                            g.items.push_back(Item::Hole(seq));
                        }
                        Err(Refused::Dropped(p, reason))
                    }
                    Item::Hole(_) => unreachable!("holes are never enqueued by callers"),
                }
            }
        };
        s.qlen.store(g.bl.len(), Ordering::Relaxed);
        let wake = wake && !g.items.is_empty();
        (r, wake)
    }

    /// Take up to `max` items off worker `w`'s queue (`process_backlog`
    /// splicing `input_pkt_queue`); returns the packets among them.
    pub(crate) fn take(&self, w: Worker, max: usize, out: &mut Vec<Item>) -> usize {
        let s = &self.ws[w as usize];
        let mut g = lock(&s.q);
        let n = max.min(g.items.len());
        let mut pkts = 0;
        for it in g.items.drain(..n) {
            pkts += matches!(it, Item::Pkt(..)) as usize;
            out.push(it);
        }
        g.bl.dequeue(pkts);
        s.qlen.store(g.bl.len(), Ordering::Relaxed);
        pkts
    }

    /// `n` packets taken from worker `w` are processed: the head moves.
    pub(crate) fn processed(&self, w: Worker, n: usize) {
        let s = &self.ws[w as usize];
        let mut g = lock(&s.q);
        g.bl.processed(n);
        s.head.store(g.bl.head(), Ordering::Release);
    }

    /// True if worker `w`'s queue holds nothing.
    pub(crate) fn idle(&self, w: Worker) -> bool {
        lock(&self.ws[w as usize].q).items.is_empty()
    }

    /// Take worker `w` offline: nothing new is queued there (steering goes
    /// elsewhere); what is queued is still processed by it.
    pub(crate) fn set_offline(&self, w: Worker) {
        let s = &self.ws[w as usize];
        let _g = lock(&s.q);
        s.online.store(false, Ordering::Relaxed);
    }

    /// NAPI thread `me` ran an RFS packet itself (see `rfs_here`).
    pub(crate) fn count_rfs_here(&self, me: Worker) {
        if let Some(s) = self.ws.get(me as usize) {
            s.rfs_here.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Worker `from` wakes worker `w` (`napi_schedule_rps` through an
    /// IPI).
    pub(crate) fn wake(&self, from: Worker, w: Worker) {
        if let Some(f) = self.ws.get(from as usize) {
            f.wakeups_sent.fetch_add(1, Ordering::Relaxed);
        }
        let s = &self.ws[w as usize];
        s.wakeups.fetch_add(1, Ordering::Relaxed);
        // SeqCst pairs with `Server::release`: either the reader leaving
        // sees the packet just queued, or this sees the claim gone.
        if s.claimed.load(Ordering::SeqCst) {
            if let Some(t) = lock(&s.claim).as_ref() {
                t.unpark();
                return;
            }
        }
        if let Some(t) = s.thread.get() {
            t.unpark();
        }
    }

    /// Packets queued at worker `w` now.
    pub(crate) fn qlen(&self, w: Worker) -> usize {
        self.ws[w as usize].qlen.load(Ordering::Relaxed)
    }

    fn backlog_stats(&self, w: Worker) -> BacklogStats {
        lock(&self.ws[w as usize].q).bl.stats()
    }

    /// The report of worker `w`, given what its thread counted.
    pub(crate) fn report(&self, w: Worker, own: &WorkerCounters) -> WorkerReport {
        let served = *lock(&self.ws[w as usize].served);
        let mut own = *own;
        own.merge(&served);
        WorkerReport {
            worker: w,
            backlog: self.backlog_stats(w),
            time_squeeze: own.time_squeeze,
            wakeups: self.ws[w as usize].wakeups.load(Ordering::Relaxed),
            wakeups_sent: self.ws[w as usize].wakeups_sent.load(Ordering::Relaxed),
            rfs_here: self.ws[w as usize].rfs_here.load(Ordering::Relaxed),
            online_at_end: self.ws[w as usize].online.load(Ordering::Relaxed),
            path: own.path,
            stalls: own.stalls.0,
            stalled_ms: own.stalls.1.as_secs_f64() * 1e3,
            reader_ran: served.ran,
        }
    }
}

impl WorkerView for Workers {
    fn online(&self, w: Worker) -> bool {
        self.ws
            .get(w as usize)
            .is_some_and(|s| s.online.load(Ordering::Relaxed))
    }
    fn head(&self, w: Worker) -> u32 {
        self.ws[w as usize].head.load(Ordering::Acquire)
    }
}

/// What a worker's thread counts itself.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WorkerCounters {
    pub(crate) time_squeeze: u64,
    /// Packets run.
    pub(crate) ran: u64,
    pub(crate) path: NapiStats,
    /// Stalls injected into a pure worker (`--fault stall=MS`), and their
    /// time.
    pub(crate) stalls: (u64, std::time::Duration),
}

impl WorkerCounters {
    /// Add `o` (stalls are a worker thread's own, not added).
    pub(crate) fn merge(&mut self, o: &WorkerCounters) {
        self.time_squeeze += o.time_squeeze;
        self.ran += o.ran;
        self.path.merge(&o.path);
    }
}

/// The NAPIs' counters summed, with what the path counted on the
/// workers (steering on): a run's or a host's whole path.
pub(crate) fn napi_total<'a>(
    napis: impl IntoIterator<Item = &'a rxpath_core::stats::NapiStats>,
    workers: &[WorkerReport],
) -> rxpath_core::stats::NapiStats {
    let mut t = rxpath_core::stats::NapiStats::default();
    for n in napis {
        t.merge(n);
    }
    for w in workers {
        t.merge(&w.path);
    }
    t
}

/// One worker at the end of a run: `/proc/net/softnet_stat`'s columns and
/// what the path counted on it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct WorkerReport {
    /// Worker index (NAPI threads are the first).
    pub worker: Worker,
    /// processed, dropped, flow_limit_count, received_rps.
    pub backlog: BacklogStats,
    /// Backlog polls that ended with work left after `netdev_budget`.
    pub time_squeeze: u64,
    /// Wakeups this worker received.
    pub wakeups: u64,
    /// Wakeups its NAPI thread sent to other workers (a NAPI thread only).
    pub wakeups_sent: u64,
    /// RFS packets its NAPI thread ran itself, not steered: the flow's dev
    /// flow set was all busy, or no worker online (a NAPI thread only).
    pub rfs_here: u64,
    /// Still online when the run ended.
    pub online_at_end: bool,
    /// Delivered, dropped (by reason), SNMP: the path's counters on this
    /// worker (`received` is 0: NAPI counts what it takes from devices).
    pub path: NapiStats,
    /// Injected stalls of a worker that is not a NAPI thread (a NAPI
    /// thread's are the run's `faults.stalls`).
    pub stalls: u64,
    /// Their time, ms.
    pub stalled_ms: f64,
    /// Packets of this backlog that readers waiting in `recv` on this
    /// worker's CPU ran themselves (RFS without a second wakeup).
    pub reader_ran: u64,
}

/// Order at delivery.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct OrderReport {
    /// Packets delivered out of their flow's order.
    pub reordered: u64,
    /// Flows with at least one such packet.
    pub flows_reordered: u64,
    /// Sequence numbers from TCP only, or also the sim's UDP counters.
    pub udp_counters: bool,
    /// `spread`: the most packets that ever waited in the reorder buffer.
    pub reorder_max_waiting: u64,
}

impl Workers {
    pub(crate) fn order_report(&self) -> OrderReport {
        OrderReport {
            reordered: self.order.reordered(),
            flows_reordered: self.order.flows_reordered(),
            udp_counters: self.order.source() == SeqSource::TcpAndUdpCounter,
            reorder_max_waiting: self.reorder.as_ref().map_or(0, |r| r.max_waiting()),
        }
    }
}

use rxpath_dev::sync::lock;
