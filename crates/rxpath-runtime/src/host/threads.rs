//! Starting a host's threads on its queues: each queue's NAPI shared with
//! the socket layer, the NAPI threads that poll them (and the poll in the
//! interrupt's own context, `napi_in_irq`), the steering workers and
//! their backlog server.

use super::{Finish, GroKnob, Host, HostConfig};
use crate::engine::{Engine, NapiSet};
use crate::run::RunError;
use crate::sock::BacklogServer;
use crate::steer::{BottomHalf, Collect, PerQueue, Ports, SteerStage, Workers};
use rxpath_core::gro::{GroConfig, UdpGroPolicy};
use rxpath_core::napi::PollResult;
use rxpath_core::napi::{Napi, NapiTable};
use rxpath_core::sock::{SharedNapi, Sockets};
use rxpath_core::softnet::SoftnetConfig;
use rxpath_core::steer::{SeqSource, SteerMode, Worker};
use rxpath_dev::RxQueue;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::thread::JoinHandle;
use std::time::Duration;

/// The interrupt handler of a NAPI with `napi_in_irq`: take the interrupt
/// and poll the NAPI to completion here. Returns false (the NAPI thread is
/// woken instead) if the cell is busy: its owner is polling, or a busy
/// poller is letting go of it on this very thread.
pub(super) fn napi_in_irq(n: &SharedNapi) -> bool {
    let Some(irq) = &n.irq else { return false };
    let Some(mut g) = n.try_cell() else {
        return false;
    };
    let Some(cell) = g.as_mut() else { return false };
    while irq.take() {
        if !n.state.schedule_prep() {
            // Owned elsewhere (MISSED recorded): the owner polls again.
            return true;
        }
        let w = cell.weight();
        while !cell.poll(w, rxpath_dev::mono_ns()).completed {}
        n.note_timer(cell.as_ref());
        if n.timer_at() != 0 {
            // The NAPI thread fires the timer: let it see the deadline.
            irq.wake_waiter();
        }
        // Completion re-armed the line; a packet that raced in raised it
        // again (pending), which this loop takes.
    }
    true
}

/// A host's NAPIs, shared with busy-polling sockets: each poll takes the
/// cell's lock (uncontended by design: the state word decides who owns it).
struct Shared<'a> {
    napis: &'a [Arc<SharedNapi>],
    socks: &'a Sockets,
    interrupts: bool,
    me: thread::Thread,
}

impl NapiSet for Shared<'_> {
    fn count(&self) -> usize {
        self.napis.len()
    }

    fn take_irq(&mut self, i: usize) -> bool {
        self.napis[i].irq.as_ref().is_some_and(|l| l.take())
    }

    fn schedule_prep(&mut self, i: usize) -> bool {
        self.napis[i].state.schedule_prep()
    }

    fn timer(&self, i: usize) -> Option<u64> {
        Some(self.napis[i].timer_at()).filter(|&t| t != 0)
    }

    fn fire_timer(&mut self, i: usize, now_ns: u64) -> bool {
        let n = &self.napis[i];
        let mut g = n.cell();
        let Some(c) = g.as_mut() else { return false };
        let owned = c.fire_timer(now_ns);
        n.note_timer(c.as_ref());
        owned
    }

    fn deferred_until(&self, i: usize) -> u64 {
        self.napis[i].deferred_until()
    }

    fn clear_deferral(&mut self, i: usize) {
        self.napis[i].clear_deferral();
    }

    fn device_sleepers(&self, i: usize) -> bool {
        self.napis[i].has_device_sleepers()
    }

    fn returning(&self, i: usize) -> bool {
        // A device that ran out of buffers raises no interrupt: frames
        // coming home from sockets need the owner.
        let q = self.napis[i].queue;
        self.socks.port(q).is_some_and(|p| p.ret.pending() > 0)
    }

    fn try_own(&mut self, i: usize) -> bool {
        self.napis[i].state.try_own()
    }

    fn wants_time(&self) -> bool {
        // GRO and the NAPI timer read it.
        true
    }

    fn poll(&mut self, i: usize, now_ns: u64) -> PollResult {
        let n = &self.napis[i];
        let mut g = n.cell();
        match g.as_mut() {
            Some(c) => {
                let r = c.poll(c.weight(), now_ns);
                n.note_timer(c.as_ref());
                r
            }
            None => {
                // Taken at shutdown: nothing to poll; give it back.
                n.state.complete();
                PollResult {
                    work: 0,
                    completed: true,
                }
            }
        }
    }

    fn sleep_idle(&mut self) -> bool {
        if !self.interrupts {
            return false;
        }
        sleep_idle(self.napis, self.socks, &self.me);
        true
    }
}

/// An idle NAPI thread's sleep: no interrupt, no deferral, no timer, for
/// [`crate::engine::IDLE_NAPS`] naps. It sleeps until an interrupt, a frame
/// coming home, a busy poller's deferral or timer, or stop wakes it (each
/// unparks it); the 1 s nap is only a safety net. (Napping 1 ms at a time
/// instead, an idle host would wake a thousand times a second.)
fn sleep_idle(napis: &[Arc<SharedNapi>], socks: &Sockets, me: &thread::Thread) {
    // A sixteenth of a queue's frames may wait for its next poll.
    let at = |p: &rxpath_core::sock::Port| p.umem.frames() / 16;
    for n in napis {
        n.watch(true);
        if let Some(p) = socks.port(n.queue) {
            p.ret
                .wake_on_return(crate::sock::unpark_waker(me.clone()), at(p));
        }
    }
    // Anything that came before the flags were up is seen here (an
    // interrupt's unpark, whenever it came, ends the park at once).
    let busy = napis.iter().any(|n| {
        n.deferred_until() != 0
            || n.timer_at() != 0
            || socks
                .port(n.queue)
                .is_some_and(|p| p.ret.pending() >= at(p).max(1))
    });
    if !busy {
        thread::park_timeout(Duration::from_secs(1));
    }
    for n in napis {
        n.watch(false);
        if let Some(p) = socks.port(n.queue) {
            p.ret.stop_waking();
        }
    }
}

/// The body of a host's NAPI thread: the engine over the shared NAPIs
/// ([`crate::engine`]), then what the thread still owns is given back.
pub(super) fn napi_thread(
    napis: Vec<Arc<SharedNapi>>,
    socks: &Sockets,
    interrupts: bool,
    stop: &AtomicBool,
) {
    let me = thread::current();
    for n in &napis {
        if let Some(irq) = &n.irq {
            irq.set_waiter(me.clone());
        }
    }
    let mut eng = Engine::new(SoftnetConfig::default(), interrupts, false);
    let mut set = Shared {
        napis: &napis,
        socks,
        interrupts,
        me,
    };
    while !stop.load(Ordering::Acquire) {
        eng.schedule_due(&mut set);
        if eng.pending() == 0 {
            eng.idle(&mut set);
            continue;
        }
        eng.rx_action(&mut set);
    }
    // Give back what this thread still owns.
    let sn = eng.softnet();
    for (i, n) in napis.iter().enumerate() {
        if sn.is_scheduled(i) {
            n.state.complete();
        }
    }
}

/// A queue's NAPI, shared with busy-polling sockets: GRO (with the
/// sockets' `UDP_GRO` policy), interrupt deferral, the socket stage (or
/// the steering stage in front of it) and, with `irq_context`, the poll in
/// the interrupt's own context.
fn share_napi<Q: RxQueue + Send + 'static>(
    cfg: &HostConfig,
    q: Q,
    sockets: &Arc<Sockets>,
    workers: Option<&Arc<Workers>>,
    (gro_knob, defer_knob): &(GroKnob, GroKnob),
    irq_context: bool,
    table: &mut NapiTable<u16>,
) -> Arc<SharedNapi> {
    let qi = q.queue_index();
    let mut napi = Napi::new(q, cfg.weight, cfg.bundle, cfg.interrupts);
    napi.set_csum(cfg.sock.csum, cfg.sock.local_traffic);
    if cfg.gro {
        let udp: Arc<dyn UdpGroPolicy> = sockets.clone();
        napi.set_gro(Some(GroConfig {
            enabled: true,
            udp: Some(udp),
            flush_timeout: gro_knob.clone(),
            adaptive: None,
        }));
    }
    napi.set_defer_hard_irqs(defer_knob.clone(), gro_knob.clone());
    table.add(&mut napi, |n| n.queue().queue_index());
    let shared = match workers {
        // No NAPI context is a worker: `me` is none of them.
        Some(w) => SharedNapi::new(
            napi,
            SteerStage::new(w.clone(), Worker::MAX, sockets.stage(qi)),
        ),
        None => SharedNapi::new(napi, sockets.stage(qi)),
    };
    shared.set_prefer_busy_poll(cfg.prefer_busy_poll_ns);
    shared.set_irq_suspend_timeout(cfg.irq_suspend_timeout_ns);
    if irq_context {
        if let Some(irq) = &shared.irq {
            let weak = Arc::downgrade(&shared);
            irq.set_handler(Box::new(move || {
                weak.upgrade().is_some_and(|n| napi_in_irq(&n))
            }));
        }
    }
    shared
}

/// The host's NAPI threads, the NAPIs dealt out round-robin.
fn spawn_napi_threads(
    cfg: &HostConfig,
    napis: &[Arc<SharedNapi>],
    sockets: &Arc<Sockets>,
    stop: &Arc<AtomicBool>,
) -> Result<Vec<JoinHandle<()>>, RunError> {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let mut threads = Vec::new();
    for t in 0..cfg.napi_threads.min(napis.len()) {
        let mine: Vec<_> = napis
            .iter()
            .enumerate()
            .filter(|(i, _)| i % cfg.napi_threads == t)
            .map(|(_, n)| n.clone())
            .collect();
        let (stop, socks, interrupts) = (stop.clone(), sockets.clone(), cfg.interrupts);
        let core = (cfg.pin_napi && !cores.is_empty()).then(|| cores[t % cores.len()]);
        let h = thread::Builder::new()
            .name(format!("rxpath-napi/{t}"))
            .spawn(move || {
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                napi_thread(mine, &socks, interrupts, &stop)
            })
            .map_err(|e| RunError::Thread(e.to_string()))?;
        threads.push(h);
    }
    Ok(threads)
}

/// Worker threads, one pinned per core, and the backlog server that lets
/// a reader waiting in `recv` run the backlog of the worker on its CPU
/// itself (RFS's single wakeup; [`BacklogServer`]).
#[allow(clippy::type_complexity)]
fn spawn_workers(
    w: &Arc<Workers>,
    sockets: &Arc<Sockets>,
) -> Result<
    (
        Option<Arc<dyn BacklogServer>>,
        Vec<(Worker, JoinHandle<crate::steer::WorkerCounters>)>,
    ),
    RunError,
> {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let socks = Arc::downgrade(sockets);
    let budget = rxpath_core::softnet::SoftnetConfig::default().netdev_budget;
    let build: crate::steer::Build = Box::new(move |w, id| {
        let socks = socks.upgrade()?;
        Some(host_bottom_half(w, id, &socks, budget))
    });
    let server = crate::steer::Server::new(w, build).map(|s| Arc::new(s) as Arc<dyn BacklogServer>);
    let mut worker_threads = Vec::new();
    for id in 0..w.len() {
        let (w, socks) = (w.clone(), sockets.clone());
        let core = (!cores.is_empty()).then(|| cores[id % cores.len()]);
        let h = thread::Builder::new()
            .name(format!("rxpath-bh/{id}"))
            .spawn(move || {
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                let bh = host_bottom_half(&w, id as Worker, &socks, budget);
                crate::steer::pure_worker_thread(bh, false, None, None)
            })
            .map_err(|e| RunError::Thread(e.to_string()))?;
        worker_threads.push((id as Worker, h));
    }
    Ok((server, worker_threads))
}

/// The host on queues `qs`: their NAPIs, shared with the socket layer,
/// and the threads that poll them (NAPI threads, steering workers).
pub(super) fn with_queues<Q: RxQueue + Send + 'static>(
    cfg: &HostConfig,
    qs: Vec<Q>,
    finish: Finish,
    backend: String,
    irq_context: bool,
) -> Result<Host, RunError> {
    let sockets = Sockets::new(
        cfg.sock.clone(),
        qs.iter().map(|q| q.umem().clone()).collect(),
    );
    let mut table: NapiTable<u16> = NapiTable::default();
    let mut napis = Vec::new();
    let workers = (cfg.steer.mode != SteerMode::None)
        .then(|| {
            cfg.steer.validate().map_err(RunError::Config)?;
            Ok::<_, RunError>(Arc::new(Workers::new(
                &cfg.steer,
                Ports::Host(sockets.clone()),
                // One token for "the device side runs" (the NAPIs are
                // not workers here); given back at shutdown.
                1,
                SeqSource::Tcp,
                Some(sockets.sock_flows().clone()),
            )))
        })
        .transpose()?;
    // One gro_flush_timeout per device, shared by its NAPIs.
    let gro_knob = GroKnob::new(cfg.gro_flush_timeout_ns);
    let defer_knob = GroKnob::new(cfg.defer_hard_irqs as u64);
    let knobs = (gro_knob.clone(), defer_knob.clone());
    for q in qs {
        let shared = share_napi(
            cfg,
            q,
            &sockets,
            workers.as_ref(),
            &knobs,
            irq_context,
            &mut table,
        );
        sockets.register_napi(shared.clone());
        napis.push(shared);
    }
    let tcp = match sockets.has_tcp() {
        true => {
            let waits = Arc::new(crate::sock::TcpWaits::default());
            sockets.set_tcp_wake(waits.clone());
            let h = waits
                .start_timer(sockets.clone())
                .map_err(|e| RunError::Thread(e.to_string()))?;
            Some((waits, h))
        }
        false => None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let threads = spawn_napi_threads(cfg, &napis, &sockets, &stop)?;
    let (server, worker_threads) = match &workers {
        Some(w) => spawn_workers(w, &sockets)?,
        None => (None, Vec::new()),
    };
    Ok(Host {
        sockets,
        napis,
        threads,
        stop,
        port: None,
        finish: Some(finish),
        backend,
        guards: None,
        xdp: None,
        tap: None,
        workers,
        worker_threads,
        server,
        tx_fault: None,
        irq_knobs: (gro_knob, defer_knob),
        tcp,
    })
}

/// A host worker's path on the calling thread: every queue's socket stage;
/// for `spread`, nothing in parallel before the sockets (IP input is
/// theirs) and the order restored in front of them.
fn host_bottom_half(
    w: &Arc<Workers>,
    id: Worker,
    socks: &Arc<Sockets>,
    budget: usize,
) -> BottomHalf {
    let stacks = || PerQueue((0..socks.queues()).map(|q| socks.stage(q as u16)).collect());
    if w.reorder.is_some() {
        let survivors = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let serial: Box<dyn rxpath_core::Stack> = Box::new(stacks());
        BottomHalf::new(
            w.clone(),
            id,
            Box::new(Collect(survivors.clone())),
            Some((serial, survivors)),
            budget,
        )
    } else {
        BottomHalf::new(w.clone(), id, Box::new(stacks()), None, budget)
    }
}
