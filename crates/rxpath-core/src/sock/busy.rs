//! NAPIs that sockets can busy-poll: `napi_busy_loop()` and
//! `busy_poll_stop()` (net/core/dev.c).
//!
//! A NAPI that sockets may poll lives in a [`SharedNapi`]: its state word
//! (who owns it) outside any lock, and the NAPI with its stage in a mutex
//! that only the owner takes, so the lock is never contended by design —
//! the state word decides, as in the kernel.

use super::sock_stack::{SockPath, SockStack};
use crate::ip::{Hook, IpStage};
use crate::napi::{Napi, NapiId, NapiState, PollResult};
use crate::stats::NapiStats;
use rxpath_frames::{DeviceQueueStats, IrqLine, RxQueue};
use std::any::Any;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// `BUSY_POLL_BUDGET`: packets one busy-poll iteration may take.
pub const BUSY_POLL_BUDGET: usize = 8;

/// A NAPI and its stage, as the NAPI thread and busy pollers drive it.
///
/// Calling context: the owner of the NAPI (holder of `SCHED`) only.
pub trait PollCell: Send {
    /// The NAPI thread's poll: completes the NAPI if the queue ran dry.
    fn poll(&mut self, budget: usize, now_ns: u64) -> PollResult;
    /// A busy poller's poll: never completes (ownership is given back by
    /// [`NapiState::busy_poll_stop`]).
    fn poll_busy(&mut self, budget: usize, now_ns: u64) -> usize;
    /// Busy polling starts: mask the queue's interrupt (what
    /// `prefer_busy_poll` with `napi_defer_hard_irqs` achieves).
    fn busy_start(&mut self);
    /// Busy polling ended at `now_ns`: unmask; if an interrupt was missed
    /// or packets wait, raise it so the NAPI thread takes over
    /// (`__napi_schedule`).
    fn busy_stop(&mut self, missed: bool, now_ns: u64);
    /// Packets waiting in the device, or frames waiting to go home.
    fn has_work(&mut self) -> bool;
    /// NAPI counters.
    fn napi_stats(&self) -> NapiStats;
    /// Device counters.
    fn device_stats(&self) -> DeviceQueueStats;
    /// The budget of one NAPI-thread poll.
    fn weight(&self) -> usize;
    /// The device queue (a `Box<Q>`), to take it back at shutdown.
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
    /// The NAPI timer's deadline (`gro_flush_timeout`), if armed.
    fn timer(&self) -> Option<u64>;
    /// `napi_watchdog()`: if the timer is due, disarm it and try to
    /// schedule the NAPI; true if the caller now owns it.
    fn fire_timer(&mut self, now_ns: u64) -> bool;
    /// The path stops: GRO and the stages let go of what they hold
    /// ([`Napi::stop`]). Calling context: the owner, the NAPI disabled.
    fn stop(&mut self, now_ns: u64);
    /// The device queue's readiness descriptor ([`RxQueue::readiness_fd`]).
    fn readiness_fd(&self) -> Option<std::io::Result<std::os::fd::OwnedFd>>;
}

/// What a NAPI cell runs after the device: the socket stage, or a stage
/// that steers packets to workers in front of it.
pub trait CellStack: crate::packet::Stack + Send {
    /// Frames waiting to come home to this queue.
    fn returning(&self) -> usize;
}

impl CellStack for SockStack {
    fn returning(&self) -> usize {
        SockStack::returning(self)
    }
}

impl<S: CellStack, H: Hook + Send> CellStack for IpStage<S, H> {
    fn returning(&self) -> usize {
        self.inner().returning()
    }
}

/// The usual cell: a NAPI with the socket stage (or a steering stage in
/// front of it) at the end of its path.
#[derive(Debug)]
pub struct NapiCell<Q: RxQueue, S = SockPath> {
    /// The NAPI.
    pub napi: Napi<Q>,
    /// Its stage.
    pub stack: S,
}

impl<Q: RxQueue + Send + 'static, S: CellStack + 'static> PollCell for NapiCell<Q, S> {
    fn poll(&mut self, budget: usize, now_ns: u64) -> PollResult {
        self.napi.poll(budget, &mut self.stack, now_ns)
    }

    fn poll_busy(&mut self, budget: usize, now_ns: u64) -> usize {
        let work = self.napi.poll_owned(budget, &mut self.stack, now_ns);
        if work < budget && self.napi.held() > 0 {
            // The queue ran dry: pass up what GRO holds now, as a
            // completion would. (The kernel's busy loop keeps it until
            // `busy_poll_stop`; a reader spinning for it would wait in vain.)
            self.napi.flush_gro(&mut self.stack, now_ns);
        }
        work
    }

    fn busy_start(&mut self) {
        if self.napi.interrupts() {
            if let Some(irq) = self.napi.queue().irq() {
                irq.disarm();
            }
        }
    }

    fn busy_stop(&mut self, missed: bool, now_ns: u64) {
        if self.napi.held() > 0 {
            // `busy_poll_stop()` polls once more and completes: GRO flushed.
            self.napi.flush_gro(&mut self.stack, now_ns);
        }
        if !self.napi.interrupts() {
            return;
        }
        let pending = self.napi.queue_mut().has_pending();
        if let Some(irq) = self.napi.queue().irq() {
            irq.arm();
            if missed || pending {
                irq.raise();
            }
        }
    }

    fn has_work(&mut self) -> bool {
        self.napi.has_work() || self.stack.returning() > 0
    }

    fn napi_stats(&self) -> NapiStats {
        *self.napi.stats()
    }

    fn device_stats(&self) -> DeviceQueueStats {
        self.napi.queue().device_stats()
    }

    fn weight(&self) -> usize {
        self.napi.weight()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        Box::new(self.napi.into_queue())
    }

    fn timer(&self) -> Option<u64> {
        self.napi.timer()
    }

    fn fire_timer(&mut self, now_ns: u64) -> bool {
        self.napi.fire_timer(now_ns)
    }

    fn stop(&mut self, now_ns: u64) {
        self.napi.stop(&mut self.stack, now_ns)
    }

    fn readiness_fd(&self) -> Option<std::io::Result<std::os::fd::OwnedFd>> {
        self.napi.queue().readiness_fd()
    }
}

/// A NAPI reachable by id: its ownership word, its interrupt line, and the
/// cell the owner polls.
pub struct SharedNapi {
    /// `napi_id`.
    pub id: NapiId,
    /// Device queue index.
    pub queue: u16,
    /// Ownership (`napi->state`).
    pub state: Arc<NapiState>,
    /// The queue's interrupt line, taken by the NAPI thread without the
    /// cell's lock (the hard-IRQ handler).
    pub irq: Option<Arc<IrqLine>>,
    cell: Mutex<Option<Box<dyn PollCell>>>,
    /// Prefer busy polling: after a busy poll, keep the interrupt masked
    /// this long (ns) instead of re-arming it; 0 = off.
    defer_ns: AtomicU64,
    /// While deferred: when the NAPI thread must take the NAPI back.
    defer_until: AtomicU64,
    /// IRQ suspension (`irq_suspend_timeout`, ns; 0 = off): how long a
    /// deferral lasts once a waiter was handed events ([`Self::suspend_irqs`]).
    suspend_ns: AtomicU64,
    /// The NAPI timer's deadline as its last poller left it (0: none), for
    /// the NAPI thread to watch without the cell's lock.
    timer_at: AtomicU64,
    /// The NAPI thread sleeps with no deadline (idle): a busy poller that
    /// leaves a deferral or a timer must wake it ([`Self::watch`]).
    watcher_asleep: std::sync::atomic::AtomicBool,
    /// Threads asleep on the device's own descriptor while the interrupt
    /// is deferred ([`Self::sleep_on_device`]).
    device_sleepers: std::sync::atomic::AtomicU32,
}

impl fmt::Debug for SharedNapi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedNapi")
            .field("id", &self.id)
            .field("queue", &self.queue)
            .field("state", &self.state.bits())
            .finish()
    }
}

impl SharedNapi {
    /// Share `napi` (already registered in a [`crate::NapiTable`], so it has
    /// its id) with its socket stage.
    pub fn new<Q: RxQueue + Send + 'static, S: CellStack + 'static>(
        napi: Napi<Q>,
        stack: S,
    ) -> Arc<SharedNapi> {
        Arc::new(SharedNapi {
            id: napi.id(),
            queue: napi.queue().queue_index(),
            state: napi.state().clone(),
            irq: napi.queue().irq_handle(),
            cell: Mutex::new(Some(Box::new(NapiCell { napi, stack }))),
            defer_ns: AtomicU64::new(0),
            defer_until: AtomicU64::new(0),
            suspend_ns: AtomicU64::new(0),
            timer_at: AtomicU64::new(0),
            watcher_asleep: std::sync::atomic::AtomicBool::new(false),
            device_sleepers: std::sync::atomic::AtomicU32::new(0),
        })
    }

    /// Prefer busy polling (the kernel's `SO_PREFER_BUSY_POLL` with a
    /// device's `napi_defer_hard_irqs` and `gro_flush_timeout`): when a busy
    /// poller lets go, the queue's interrupt stays masked for `ns`, as the
    /// application is expected to poll again soon; if it does not, the NAPI
    /// thread takes the NAPI back at the deadline ([`Self::deferred_until`])
    /// and re-arms it. This keeps interrupts (and the wakeups they cost the
    /// CPU that receives the packets) away while an application polls. 0 =
    /// off: the interrupt is re-armed at once.
    pub fn set_prefer_busy_poll(&self, ns: u64) {
        self.defer_ns.store(ns, Ordering::Relaxed);
    }

    /// The IRQ suspension timeout (`irq_suspend_timeout`, Linux 6.13), ns:
    /// while a waiter is being handed events, a deferred interrupt stays
    /// deferred this long from each hand-over ([`Self::suspend_irqs`]),
    /// however short the prefer-busy-poll deferral. 0 = off.
    pub fn set_irq_suspend_timeout(&self, ns: u64) {
        self.suspend_ns.store(ns, Ordering::Relaxed);
    }

    /// The IRQ suspension timeout, ns (0: off).
    pub fn irq_suspend_timeout(&self) -> u64 {
        self.suspend_ns.load(Ordering::Relaxed)
    }

    /// `napi_suspend_irqs()`, as `ep_poll` calls it when it hands events to
    /// the application with prefer busy polling: the application is busy
    /// with them and polls again when done, so a deferred interrupt stays
    /// deferred for the suspension timeout from `now_ns` (never shortened).
    /// Without it, an application that takes longer than the short
    /// prefer-busy-poll deferral over what it was given loses its queue to
    /// the NAPI thread, which then moves the ring's backlog into its socket
    /// buffer. A NAPI that is not deferred (its thread took it back) is
    /// left alone, as is every NAPI when the timeout is 0.
    pub fn suspend_irqs(&self, now_ns: u64) {
        let ns = self.suspend_ns.load(Ordering::Relaxed);
        if ns == 0 {
            return;
        }
        let until = now_ns.saturating_add(ns);
        let mut cur = self.defer_until.load(Ordering::Acquire);
        // Only a live deferral is extended: a 0 stored by the NAPI thread
        // (it owns the NAPI now) wins over this.
        while cur != 0 && cur < until {
            match self.defer_until.compare_exchange_weak(
                cur,
                until,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
    }

    /// The NAPI timer's deadline (0: none), as the last poll left it.
    pub fn timer_at(&self) -> u64 {
        self.timer_at.load(Ordering::Acquire)
    }

    /// Record the timer `cell` has after a poll (the poller calls this
    /// while it holds the cell).
    pub fn note_timer(&self, cell: &dyn PollCell) {
        self.timer_at
            .store(cell.timer().unwrap_or(0), Ordering::Release);
    }

    /// The NAPI thread is about to sleep with no deadline (true) or is
    /// awake again (false). Before it sleeps it looks at
    /// [`Self::deferred_until`] and [`Self::timer_at`] once more: a busy
    /// poller that sets either after that wakes it.
    pub fn watch(&self, asleep: bool) {
        self.watcher_asleep.store(asleep, Ordering::SeqCst);
    }

    /// A busy poller left a deadline (a deferral or the NAPI timer): wake
    /// the NAPI thread if it sleeps with none.
    fn wake_watcher(&self) {
        // SeqCst pairs with `watch`: either the thread sees the deadline,
        // or this sees it asleep.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.watcher_asleep.load(Ordering::Relaxed)
            && self.watcher_asleep.swap(false, Ordering::AcqRel)
        {
            if let Some(irq) = &self.irq {
                irq.wake_waiter();
            }
        }
    }

    /// The deadline (ns, `mono_ns`) at which a deferred NAPI must be polled
    /// by its NAPI thread; 0 if none.
    pub fn deferred_until(&self) -> u64 {
        self.defer_until.load(Ordering::Acquire)
    }

    /// End a deferral early: the busy poller is going to sleep, so nobody
    /// will poll soon; unmask the interrupt and raise it, so what arrived
    /// meanwhile is polled now and the next packet interrupts as usual
    /// (the kernel's IRQ suspension ends when the application blocks:
    /// `napi_resume_irqs` from `ep_poll`).
    pub fn resume_irqs(&self) {
        if self.defer_until.swap(0, Ordering::AcqRel) != 0 {
            if let Some(irq) = &self.irq {
                irq.arm();
                irq.raise();
            }
        }
    }

    /// The prefer-busy-poll deferral, ns (0: off).
    pub fn prefer_busy_poll(&self) -> u64 {
        self.defer_ns.load(Ordering::Relaxed)
    }

    /// A thread goes to sleep on the device's descriptor while the
    /// interrupt is deferred: packets wake it and it polls the NAPI. When
    /// it wakes (for any reason) it calls [`Self::wake_from_device`] and
    /// then polls the NAPI once (a busy poll, which defers the interrupt
    /// anew), so the NAPI is never left masked with nobody to poll it.
    pub fn sleep_on_device(&self) {
        self.device_sleepers.fetch_add(1, Ordering::SeqCst);
    }

    /// The thread of [`Self::sleep_on_device`] woke.
    pub fn wake_from_device(&self) {
        self.device_sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// A thread sleeps on the device: at the end of a deferral the NAPI
    /// thread leaves the interrupt to it instead of taking the NAPI back
    /// and re-arming (which would wake two threads for the next packet).
    pub fn has_device_sleepers(&self) -> bool {
        self.device_sleepers.load(Ordering::SeqCst) > 0
    }

    /// The NAPI thread took a deferred NAPI back (it owns it now).
    pub fn clear_deferral(&self) {
        self.defer_until.store(0, Ordering::Release);
    }

    /// The cell. Calling context: the owner (holder of `SCHED`), or anyone
    /// once the NAPI is disabled. `None` once taken at shutdown.
    pub fn cell(&self) -> MutexGuard<'_, Option<Box<dyn PollCell>>> {
        super::lock(&self.cell)
    }

    /// The cell if nobody holds its lock (an interrupt handler must not
    /// wait for it: the holder may be the same thread).
    pub fn try_cell(&self) -> Option<MutexGuard<'_, Option<Box<dyn PollCell>>>> {
        match self.cell.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Take the cell out (shutdown, after [`NapiState::disable`] and once no
    /// one owns the NAPI).
    pub fn take(&self) -> Option<Box<dyn PollCell>> {
        self.cell().take()
    }

    /// Start a busy-poll session on this NAPI (`napi_busy_loop`): take
    /// ownership if no one has it and mask its interrupt. `None` if someone
    /// else owns it (the caller just watches its queue, as the kernel's
    /// socket does). The caller polls with [`BusyPoll::poll`], reading its
    /// own clock, and ownership goes back when the session is dropped.
    pub fn busy_begin(&self) -> Option<BusyPoll<'_>> {
        if !self.state.try_busy_poll() {
            return None;
        }
        let mut cell = self.cell();
        self.defer_until.store(0, Ordering::Release);
        if let Some(c) = cell.as_mut() {
            c.busy_start();
        }
        Some(BusyPoll {
            napi: self,
            cell,
            now: 0,
        })
    }
}

/// A busy-poll session: the caller owns the NAPI until this is dropped.
pub struct BusyPoll<'a> {
    napi: &'a SharedNapi,
    cell: MutexGuard<'a, Option<Box<dyn PollCell>>>,
    /// The clock as the last poll was given it.
    now: u64,
}

impl fmt::Debug for BusyPoll<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BusyPoll")
            .field("napi", &self.napi.id)
            .field("now", &self.now)
            .finish()
    }
}

impl BusyPoll<'_> {
    /// Poll once at `now_ns`, taking up to `budget` packets (a socket's
    /// [`super::Socket::busy_poll_budget`], [`BUSY_POLL_BUDGET`] unless
    /// set); the packets taken, or `None` once the NAPI is gone (shutdown).
    pub fn poll(&mut self, budget: usize, now_ns: u64) -> Option<usize> {
        self.now = now_ns;
        let cell = self.cell.as_mut()?;
        Some(cell.poll_busy(budget.max(1), now_ns))
    }
}

impl Drop for BusyPoll<'_> {
    /// `busy_poll_stop()` at the time of the last poll (a session is a few
    /// hundred ns, so the clock is not read again for the deferral): the
    /// interrupt stays masked for the prefer-busy-poll deferral, else is
    /// re-armed; ownership goes back.
    fn drop(&mut self) {
        let napi = self.napi;
        let now = self.now;
        // The prefer-busy-poll deferral; without one, the IRQ suspension
        // (rxpath suspends the interrupt for a thread that polls before it
        // sleeps, busy-polling or not: `irq_suspend_timeout` alone asks
        // for it).
        let defer = match napi.defer_ns.load(Ordering::Relaxed) {
            0 => napi.suspend_ns.load(Ordering::Relaxed),
            ns => ns,
        };
        if defer > 0 {
            // Masked until the deadline; the NAPI thread watches it. Set
            // before ownership is given back, so the thread cannot miss it.
            napi.defer_until.store(now + defer, Ordering::Release);
        }
        let missed = napi.state.busy_poll_stop();
        if let Some(cell) = self.cell.as_mut() {
            if defer == 0 || missed {
                napi.defer_until.store(0, Ordering::Release);
                cell.busy_stop(missed, now);
            }
            napi.note_timer(cell.as_ref());
        }
        if napi.deferred_until() != 0 || napi.timer_at() != 0 {
            napi.wake_watcher();
        }
    }
}
