//! A worker's side of the backlog: `process_backlog` with `dev_weight`,
//! inside a budget as `net_rx_action` gives it, and the body of a worker
//! thread that is not also a NAPI thread.

use super::{Item, WorkerCounters, Workers};
use rxpath_core::packet::{ChainPool, Packet, RxCtx, Stack};
use rxpath_core::steer::Worker;
use rxpath_dev::Frame;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Where `spread`'s parallel part leaves the packets that survived it.
pub(crate) type Survivors = Rc<RefCell<Vec<Packet>>>;

/// `spread`'s serial part (behind the reorder buffer) and the survivors
/// it takes from.
pub(crate) type Serial = (Box<dyn Stack>, Survivors);

/// What one worker runs on the packets of its backlog. Built on the
/// worker's own thread (the stacks are not `Send`).
pub(crate) struct BottomHalf {
    w: Arc<Workers>,
    id: Worker,
    /// The rest of the path (IP input, filter, the end); for `spread` only
    /// its parallel part (IP input, filter), ending in `survivors`.
    stack: Box<dyn Stack>,
    /// `spread`: the serial part behind the reorder buffer, and where the
    /// parallel part leaves what survived it.
    serial: Option<Serial>,
    batch: Vec<Item>,
    done: Vec<(u64, Option<Packet>)>,
    /// Freed frames per RX queue, sent home after each batch.
    recycle: Vec<Vec<Frame>>,
    chains: ChainPool,
    budget: usize,
    pub(crate) counters: WorkerCounters,
}

impl BottomHalf {
    pub(crate) fn new(
        w: Arc<Workers>,
        id: Worker,
        stack: Box<dyn Stack>,
        serial: Option<Serial>,
        netdev_budget: usize,
    ) -> Self {
        let queues = w.queues();
        BottomHalf {
            id,
            stack,
            serial,
            batch: Vec::with_capacity(w.cfg.dev_weight),
            done: Vec::with_capacity(w.cfg.dev_weight),
            recycle: (0..queues).map(|_| Vec::new()).collect(),
            chains: Vec::new(),
            budget: netdev_budget.max(1),
            counters: WorkerCounters::default(),
            w,
        }
    }

    /// This worker.
    pub(crate) fn id(&self) -> Worker {
        self.id
    }

    /// The shared side.
    pub(crate) fn workers(&self) -> &Arc<Workers> {
        &self.w
    }

    /// `process_backlog(quota)`: take up to `quota` items and run the path
    /// on them; the head moves after they are done. Returns items taken.
    fn process(&mut self, quota: usize) -> usize {
        let BottomHalf {
            w,
            id,
            stack,
            serial,
            batch,
            done,
            recycle,
            chains,
            counters,
            ..
        } = self;
        let pkts = w.take(*id, quota, batch);
        let items = batch.len();
        if items == 0 {
            return 0;
        }
        let now = rxpath_dev::mono_ns();
        let stats = &mut counters.path;
        let mut last = None;
        for it in batch.drain(..) {
            match it {
                Item::Pkt(p, seq) => {
                    let q = p.meta.queue as usize;
                    let Some(port) = w.port(q) else {
                        unreachable!("a packet from a queue without a port");
                    };
                    let mut ctx = RxCtx::new(&port.umem, &mut recycle[q], stats, chains, now);
                    stack.receive(p, &mut ctx);
                    last = Some(q);
                    if let Some((_, survivors)) = serial.as_ref() {
                        done.push((seq, survivors.borrow_mut().pop()));
                    }
                }
                Item::Hole(seq) => done.push((seq, None)),
            }
        }
        if let Some(q) = last {
            let port = w.port(q).expect("checked above");
            let mut ctx = RxCtx::new(&port.umem, &mut recycle[q], stats, chains, now);
            stack.bundle_done(&mut ctx);
        }
        if let (Some((ser, _)), Some(r)) = (serial.as_mut(), w.reorder.as_ref()) {
            r.complete(done.drain(..), |p| {
                let q = p.meta.queue as usize;
                let port = w.port(q).expect("a packet's queue has a port");
                let mut ctx = RxCtx::new(&port.umem, &mut recycle[q], stats, chains, now);
                ser.receive(p, &mut ctx);
            });
        }
        for (q, v) in recycle.iter_mut().enumerate() {
            if !v.is_empty() {
                if let Some(p) = w.port(q) {
                    p.ret.put_all(v.drain(..));
                }
            }
        }
        w.processed(*id, pkts);
        counters.ran += pkts as u64;
        items
    }

    /// One turn of this worker's backlog in `net_rx_action`: `dev_weight`
    /// at a time up to `netdev_budget`. Returns true if work is left (a
    /// `time_squeeze`).
    pub(crate) fn run(&mut self) -> bool {
        let mut used = 0;
        let weight = self.w.cfg.dev_weight;
        while used < self.budget {
            let n = self.process(weight);
            if n == 0 {
                return false;
            }
            used += n;
        }
        if self.w.idle(self.id) {
            return false;
        }
        self.counters.time_squeeze += 1;
        true
    }

    /// The path stops: its stages let go of what they keep across
    /// batches (reassembly queues), queue by queue, and the frames go home.
    pub(crate) fn stop(&mut self) {
        let BottomHalf {
            w,
            stack,
            serial,
            recycle,
            chains,
            counters,
            ..
        } = self;
        let now = rxpath_dev::mono_ns();
        for (q, v) in recycle.iter_mut().enumerate() {
            let Some(port) = w.port(q) else { continue };
            let mut ctx = RxCtx::new(&port.umem, v, &mut counters.path, chains, now);
            stack.stop(&mut ctx);
            if let Some((ser, _)) = serial.as_mut() {
                ser.stop(&mut ctx);
            }
            port.ret.put_all(v.drain(..));
        }
    }

    /// Nothing queued here.
    pub(crate) fn idle(&self) -> bool {
        self.w.idle(self.id)
    }
}

/// The body of a worker that is not a NAPI thread: run the backlog, sleep
/// when it is empty (or spin with `idle_poll`), go offline at `stop_at`
/// (process what is queued, take nothing new), and end once no NAPI thread
/// runs and the backlog is empty.
pub(crate) fn pure_worker_thread(
    mut bh: BottomHalf,
    idle_poll: bool,
    stop_at: Option<Instant>,
    mut stall: Option<rxpath_dev::sim::FaultWindows>,
) -> WorkerCounters {
    let w = bh.workers().clone();
    let id = bh.id();
    w.register(id);
    let mut offline = false;
    let t0 = Instant::now();
    let mut stalled = Duration::ZERO;
    loop {
        if !offline && stop_at.is_some_and(|t| Instant::now() >= t) {
            w.set_offline(id);
            offline = true;
        }
        // An injected stall: the backlog fills (backlog_full, flow_limit).
        if let Some(s) = stall.as_mut() {
            stalled += s.stall_if_due(t0);
        }
        match w.try_run(&mut bh) {
            Some(true) => continue,
            Some(false) => {}
            None => {
                // A reader on this CPU runs the backlog now.
                thread::park_timeout(Duration::from_millis(1));
                continue;
            }
        }
        // Once no NAPI thread runs (or this worker is offline) nothing new
        // can arrive: empty now means done.
        let last = offline || w.napis_running.load(Ordering::Acquire) == 0;
        if last && bh.idle() {
            break;
        }
        if !bh.idle() {
            continue;
        }
        if idle_poll {
            std::hint::spin_loop();
        } else {
            thread::park_timeout(Duration::from_millis(1));
        }
    }
    bh.stop();
    w.bh_running.fetch_sub(1, Ordering::AcqRel);
    bh.counters.stalls = (stall.map_or(0, |s| s.count), stalled);
    bh.counters
}
