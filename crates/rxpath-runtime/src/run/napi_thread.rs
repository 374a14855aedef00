//! The body of a NAPI thread: interrupts, timers, `net_rx_action`, its own
//! backlog when steering is on, and the drain at the end.

use super::config::RunKnobs;
use crate::engine::{Engine, NapiSet};
use crate::steer::{BottomHalf, WorkerCounters, Workers};
use rxpath_core::napi::Napi;
use rxpath_core::napi::PollResult;
use rxpath_core::packet::Stack;
use rxpath_core::softnet::{Softnet, SoftnetConfig};
use rxpath_core::stats::{LatencyHist, NapiStats, SoftnetStats};
use rxpath_core::time::Clock;
use rxpath_dev::sim::FaultWindows;
use rxpath_dev::sync::lock;
use rxpath_dev::{DeviceQueueStats, RxQueue};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

#[derive(Debug, Default, Clone)]
pub(super) struct Live {
    pub(super) queues: Vec<(u16, NapiStats, DeviceQueueStats)>,
    pub(super) softnet: SoftnetStats,
}

pub(super) struct ThreadOut<Q: RxQueue> {
    pub(super) napis: Vec<Napi<Q>>,
    pub(super) softnet: SoftnetStats,
    pub(super) received_at_stop: u64,
    pub(super) latency: Option<LatencyHist>,
    /// The thread's counters as a worker of the bottom half (steering on).
    pub(super) worker: Option<WorkerCounters>,
    /// Stalls injected (`--fault stall=MS`) and the time they took.
    pub(super) stalls: (u64, Duration),
}

/// Frames the workers freed go back to their queues' fill rings.
pub(super) fn take_home<Q: RxQueue>(
    napis: &mut [Napi<Q>],
    w: &Workers,
    tmp: &mut Vec<rxpath_dev::Frame>,
) {
    for n in napis.iter_mut() {
        let q = n.queue().queue_index() as usize;
        if let Some(p) = w.port(q) {
            if p.ret.drain_into(tmp) > 0 {
                n.recycle_frames(tmp);
            }
        }
    }
}

/// The body of a NAPI thread.
#[allow(clippy::too_many_arguments)]
pub(super) fn napi_thread<Q: RxQueue, S: Stack>(
    t: usize,
    mut napis: Vec<Napi<Q>>,
    mut stack: S,
    cfg: SoftnetConfig,
    interrupts: bool,
    idle_poll: bool,
    stop: &AtomicBool,
    window_over: &AtomicBool,
    live: &Mutex<Live>,
    mut bh: Option<BottomHalf>,
    knobs: Option<RunKnobs>,
    mut stall: Option<FaultWindows>,
) -> ThreadOut<Q> {
    let mut eng = Engine::new(cfg, interrupts, idle_poll);
    let t0 = std::time::Instant::now();
    let mut stalled = Duration::ZERO;
    let mut home = Vec::new();
    let me = thread::current();
    for n in &napis {
        if let Some(irq) = n.queue().irq() {
            irq.set_waiter(me.clone());
        }
    }
    let mut loops = 0u64;
    let mut received_at_stop = None;
    let publish = |napis: &Vec<Napi<Q>>, sn: &Softnet| publish_live(t, napis, sn, live);
    loop {
        if received_at_stop.is_none() && window_over.load(Ordering::Acquire) {
            received_at_stop = Some(napis.iter().map(|n| n.stats().received).sum::<u64>());
        }
        if stop.load(Ordering::Acquire) {
            break;
        }
        // An injected stall: the thread is gone for a while, its rings fill.
        if let Some(s) = stall.as_mut() {
            stalled += s.stall_if_due(t0);
        }
        // This thread's own backlog (steering on), and the frames the
        // workers freed.
        let mut bh_busy = false;
        if let Some(b) = bh.as_mut() {
            take_home(&mut napis, b.workers(), &mut home);
            bh_busy = b.run() || !b.idle();
        }
        let mut set = Owned {
            napis: &mut napis,
            stack: &mut stack,
            inline_ok: bh.is_none(),
        };
        eng.schedule_due(&mut set);
        loops += 1;
        if loops.is_multiple_of(1024) {
            publish(&napis, eng.softnet());
            if let Some(k) = &knobs {
                apply_budgets(&mut eng, k);
            }
        }
        let mut set = Owned {
            napis: &mut napis,
            stack: &mut stack,
            inline_ok: bh.is_none(),
        };
        if eng.pending() == 0 {
            if !bh_busy {
                eng.idle(&mut set);
            }
            continue;
        }
        eng.rx_action(&mut set);
    }
    let sn = eng.softnet();
    drain(&mut napis, &mut stack, sn, bh.as_mut(), &mut home);
    publish(&napis, sn);
    let received_at_stop =
        received_at_stop.unwrap_or_else(|| napis.iter().map(|n| n.stats().received).sum::<u64>());
    ThreadOut {
        napis,
        softnet: *sn.stats(),
        received_at_stop,
        latency: stack.latency().cloned(),
        worker: bh.map(|b| b.counters),
        stalls: (stall.map_or(0, |s| s.count), stalled),
    }
}

/// Thread `t`'s queues' counters where the run's live report reads them
/// (once every 1024 loops, and at the end).
fn publish_live<Q: RxQueue>(t: usize, napis: &[Napi<Q>], sn: &Softnet, live: &Mutex<Live>) {
    let mut l = lock(live);
    for n in napis {
        let qi = n.queue().queue_index();
        let entry = (qi, *n.stats(), n.queue().device_stats());
        match l.queues.iter_mut().find(|e| e.0 == qi) {
            Some(e) => *e = entry,
            None => l.queues.push(entry),
        }
    }
    // Threads own disjoint NAPIs; softnet totals are per thread, so only
    // thread 0 reports them live (the final report has all).
    if t == 0 {
        l.softnet = *sn.stats();
    }
}

/// The live budgets (a control socket may have changed them), into the
/// engine's `net_rx_action` if they did.
fn apply_budgets(eng: &mut Engine, k: &RunKnobs) {
    let c = SoftnetConfig {
        netdev_budget: k.netdev_budget.load(Ordering::Relaxed).max(1),
        netdev_budget_usecs: k.netdev_budget_usecs.load(Ordering::Relaxed).max(1),
    };
    if c != eng.softnet().config() {
        eng.softnet().set_config(c);
    }
}

/// The end of a NAPI thread: poll until no queue has work, ignoring IRQ
/// lines, so every frame goes back to its fill ring (`napi_disable`'s
/// job); then what GRO holds goes up, so every packet is accounted for,
/// and the thread's part of the bottom half finishes. A real interface
/// keeps receiving after the stop; what arrives later stays in the
/// kernel's ring, so the drain is bounded.
fn drain<Q: RxQueue, S: Stack>(
    napis: &mut [Napi<Q>],
    stack: &mut S,
    sn: &mut Softnet,
    mut bh: Option<&mut BottomHalf>,
    home: &mut Vec<rxpath_dev::Frame>,
) {
    let clock = crate::clock::MonotonicClock;
    let mut rounds = 0;
    while rounds < 100_000 && napis.iter_mut().any(|n| n.has_work()) {
        rounds += 1;
        for (i, n) in napis.iter_mut().enumerate() {
            if !sn.is_scheduled(i) && n.state().schedule_prep() {
                sn.schedule(i);
            }
        }
        sn.net_rx_action(napis, stack, &clock);
        if let Some(b) = bh.as_deref_mut() {
            take_home(napis, b.workers(), home);
            b.run();
        }
    }
    for n in napis.iter_mut() {
        n.stop(stack, clock.now_ns());
    }
    if let Some(b) = bh {
        finish_bottom_half(b, napis, home);
    }
}

/// A NAPI thread's last part as a worker: its devices are drained; run its
/// backlog until no NAPI thread can queue anything, then wait for every
/// worker to finish, so that each frame they freed is home.
fn finish_bottom_half<Q: RxQueue>(
    b: &mut BottomHalf,
    napis: &mut [Napi<Q>],
    home: &mut Vec<rxpath_dev::Frame>,
) {
    let w = b.workers().clone();
    w.napis_running.fetch_sub(1, Ordering::AcqRel);
    loop {
        take_home(napis, &w, home);
        let more = b.run();
        if !more && w.napis_running.load(Ordering::Acquire) == 0 && b.idle() {
            break;
        }
        if !more {
            thread::yield_now();
        }
    }
    b.stop();
    w.bh_running.fetch_sub(1, Ordering::AcqRel);
    while w.bh_running.load(Ordering::Acquire) > 0 {
        take_home(napis, &w, home);
        thread::sleep(Duration::from_micros(50));
    }
    take_home(napis, &w, home);
}

/// A `run` thread's NAPIs, owned, with the thread's stage.
struct Owned<'a, Q: RxQueue, S: Stack> {
    napis: &'a mut Vec<Napi<Q>>,
    stack: &'a mut S,
    /// No bottom half to run: the thread may block in the devices' own
    /// readiness (`LevelIrq::wait_any`).
    inline_ok: bool,
}

impl<Q: RxQueue, S: Stack> NapiSet for Owned<'_, Q, S> {
    fn count(&self) -> usize {
        self.napis.len()
    }

    fn take_irq(&mut self, i: usize) -> bool {
        self.napis[i].irq_raised()
    }

    fn schedule_prep(&mut self, i: usize) -> bool {
        self.napis[i].state().schedule_prep()
    }

    fn timer(&self, i: usize) -> Option<u64> {
        self.napis[i].timer()
    }

    fn fire_timer(&mut self, i: usize, now_ns: u64) -> bool {
        self.napis[i].fire_timer(now_ns)
    }

    fn wants_time(&self) -> bool {
        self.stack.wants_time() || self.napis.iter().any(|n| n.wants_time())
    }

    #[inline]
    fn poll(&mut self, i: usize, now_ns: u64) -> PollResult {
        let n = &mut self.napis[i];
        let w = n.weight();
        n.poll(w, self.stack, now_ns)
    }

    fn wait_inline(&mut self, wait: Duration) -> bool {
        // Queues that wait inline: block in poll(2) on their sockets and
        // raise their own lines; otherwise the thread parks until an
        // interrupt thread unparks it.
        if !self.inline_ok {
            return false;
        }
        let levels: Vec<_> = self
            .napis
            .iter()
            .filter_map(|n| n.queue().inline_irq())
            .filter_map(|i| i.as_any().downcast_ref::<rxpath_dev::irq::LevelIrq>())
            .collect();
        levels.len() == self.napis.len() && rxpath_dev::irq::LevelIrq::wait_any(&levels, wait)
    }
}
