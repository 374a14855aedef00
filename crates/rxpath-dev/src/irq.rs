//! Interrupt lines: how a device wakes the thread that runs its NAPI.
//!
//! Mirrors the driver side of interrupt mitigation: the device raises the
//! line only while it is armed; raising disarms it (`napi_schedule` masks the
//! queue's IRQ) and `napi_complete_done` re-arms it. Between the two the NAPI
//! is polled and no further wakeups are paid for. Coalescing (`rx-usecs`,
//! `rx-frames`) decides *when* an armed device raises the line; see
//! [`crate::sim`].

use crate::sync::lock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread::Thread;

/// One queue's interrupt line.
pub struct IrqLine {
    armed: AtomicBool,
    pending: AtomicBool,
    wakeups: AtomicU64,
    waiter: Mutex<Option<Thread>>,
    /// The thread that raises the line from a descriptor (interfaces).
    irq_thread: std::sync::OnceLock<Thread>,
    /// Runs in the raiser's context when the line fires; returns true if it
    /// handled the interrupt (see [`IrqLine::set_handler`]).
    handler: std::sync::OnceLock<IrqHandler>,
}

/// An interrupt handler: called in the raiser's context; returns true if it
/// handled the interrupt, false to wake the waiter thread instead.
pub type IrqHandler = Box<dyn Fn() -> bool + Send + Sync>;

impl std::fmt::Debug for IrqLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IrqLine")
            .field("armed", &self.is_armed())
            .field("pending", &self.pending.load(Ordering::Relaxed))
            .field("wakeups", &self.wakeups())
            .field("handler", &self.handler.get().is_some())
            .finish()
    }
}

impl Default for IrqLine {
    fn default() -> Self {
        IrqLine {
            armed: AtomicBool::new(true),
            pending: AtomicBool::new(false),
            wakeups: AtomicU64::new(0),
            waiter: Mutex::new(None),
            irq_thread: std::sync::OnceLock::new(),
            handler: std::sync::OnceLock::new(),
        }
    }
}

impl IrqLine {
    /// Install the handler that runs when the line fires, in the context of
    /// whoever raises it (once; later calls are ignored). It must take the
    /// interrupt ([`IrqLine::take`]) itself when it handles it.
    pub fn set_handler(&self, h: IrqHandler) {
        let _ = self.handler.set(h);
    }

    /// Register the thread to unpark when the line is raised.
    pub fn set_waiter(&self, t: Thread) {
        *lock(&self.waiter) = Some(t);
    }

    /// Unpark the waiter thread without raising the line (a handler that
    /// polled in interrupt context armed a timer the waiter must watch).
    pub fn wake_waiter(&self) {
        if let Some(t) = lock(&self.waiter).as_ref() {
            t.unpark();
        }
    }

    /// True while the device may raise the line.
    #[inline]
    pub fn is_armed(&self) -> bool {
        self.armed.load(Ordering::Acquire)
    }

    /// Device side: raise the line if armed. Returns true if it fired.
    /// Disarms the line (the IRQ is masked until re-armed).
    pub fn raise(&self) -> bool {
        // The swap's Acquire pairs with the Release in `arm`.
        if !self.armed.swap(false, Ordering::AcqRel) {
            return false;
        }
        self.wakeups.fetch_add(1, Ordering::Relaxed);
        // Release pairs with the Acquire in `take`: ring contents published
        // before the raise are visible to whoever takes the interrupt.
        self.pending.store(true, Ordering::Release);
        // A handler runs the NAPI right here, as the kernel runs the softirq
        // on the CPU that took the hard IRQ; if it cannot, the waiter does.
        if self.handler.get().is_some_and(|h| h()) {
            return true;
        }
        if let Some(t) = lock(&self.waiter).as_ref() {
            t.unpark();
        }
        true
    }

    /// NAPI side: consume a raised interrupt (the hard-IRQ handler calling
    /// `napi_schedule`). Returns true if one was pending.
    #[inline]
    pub fn take(&self) -> bool {
        self.pending.load(Ordering::Relaxed) && self.pending.swap(false, Ordering::Acquire)
    }

    /// NAPI side: re-enable the interrupt (`napi_complete_done`).
    #[inline]
    pub fn arm(&self) {
        // Pairs with the AcqRel swap in `raise`.
        if !self.armed.swap(true, Ordering::AcqRel) {
            // A descriptor-driven line's thread sleeps while masked.
            if let Some(t) = self.irq_thread.get() {
                t.unpark();
            }
        }
    }

    /// NAPI side: mask the interrupt (busy-poll or polling mode).
    #[inline]
    pub fn disarm(&self) {
        self.armed.store(false, Ordering::Release);
    }

    /// Interrupts raised so far.
    pub fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }
}

/// Level-triggered interrupts over `poll(2)`: a thread that, while `line`
/// is armed, waits for `waiter`'s descriptor to become readable and raises
/// the line. Used by the AF_PACKET and AF_XDP queues. Stop it with
/// [`IrqThread::stop`].
fn spawn_level_irq(
    name: String,
    waiter: crate::sys::af_packet::FdWaiter,
    line: std::sync::Arc<IrqLine>,
) -> std::io::Result<IrqThread> {
    use crate::sys::af_packet::FdWaiter;
    // Belt and braces only: the thread is woken by the descriptor, by
    // `arm`, and by the stop event, so an idle queue costs one wakeup a
    // second, not one per timeout of a short poll.
    const NAP: std::time::Duration = std::time::Duration::from_secs(1);
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let stop_event = FdWaiter::event()?;
    let event = stop_event.try_clone()?;
    let s = stop.clone();
    let l = line.clone();
    let h = std::thread::Builder::new().name(name).spawn(move || {
        let _ = l.irq_thread.set(std::thread::current());
        let mut ready = Vec::with_capacity(2);
        while !s.load(Ordering::Acquire) {
            if !line.is_armed() {
                // Masked (NAPI or a busy poller owns the queue): sleep until
                // `arm` wakes us, so a busy poller's CPU is left alone.
                std::thread::park_timeout(NAP);
                continue;
            }
            if let Ok(n) = FdWaiter::wait_any(&[&waiter, &event], NAP, &mut ready) {
                if n > 0 && ready[0] && !line.raise() {
                    std::thread::yield_now();
                }
            }
        }
    })?;
    Ok(IrqThread {
        stop,
        stop_event,
        handle: h,
    })
}

/// A level interrupt's thread and what stops it.
#[derive(Debug)]
struct IrqThread {
    stop: std::sync::Arc<AtomicBool>,
    stop_event: crate::sys::af_packet::FdWaiter,
    handle: std::thread::JoinHandle<()>,
}

impl IrqThread {
    /// Stop the thread wherever it sleeps, and join it.
    fn stop(self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.stop_event.notify();
        self.handle.thread().unpark();
        let _ = self.handle.join();
    }
}

/// A queue's level-triggered interrupt over `poll(2)` on its socket: a
/// thread of its own (`spawn_level_irq`) by default, or, after
/// [`LevelIrq::make_inline`], waits made by the NAPI thread itself
/// ([`LevelIrq::wait_any`]), which saves the thread hop and two context
/// switches per wakeup. Stops its thread when dropped.
#[derive(Debug)]
pub struct LevelIrq {
    line: std::sync::Arc<IrqLine>,
    waiter: crate::sys::af_packet::FdWaiter,
    thread: Option<IrqThread>,
    inline: bool,
}

impl LevelIrq {
    /// Raise `line` from `waiter`'s descriptor, from a thread called `name`.
    pub fn spawn(
        name: String,
        waiter: crate::sys::af_packet::FdWaiter,
        line: std::sync::Arc<IrqLine>,
    ) -> std::io::Result<LevelIrq> {
        let thread = spawn_level_irq(name, waiter.try_clone()?, line.clone())?;
        Ok(LevelIrq {
            line,
            waiter,
            thread: Some(thread),
            inline: false,
        })
    }

    /// Stop the thread: from now on the caller waits ([`LevelIrq::wait_any`]).
    pub fn make_inline(&mut self) {
        self.stop_thread();
        self.inline = true;
    }

    /// A duplicate of the descriptor the interrupt is taken from (readable
    /// when the device has packets), for an event loop that polls the
    /// queue itself.
    pub fn readiness_fd(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        self.waiter.dup_fd()
    }

    /// True after [`LevelIrq::make_inline`].
    pub fn is_inline(&self) -> bool {
        self.inline
    }

    /// The NAPI thread's wait over all its queues' lines (inline mode):
    /// up to `timeout` until one of those armed has work, raising each
    /// that has. False, without waiting, when none is inline and armed
    /// (the caller parks instead).
    pub fn wait_any(irqs: &[&LevelIrq], timeout: std::time::Duration) -> bool {
        let armed: Vec<&LevelIrq> = irqs
            .iter()
            .copied()
            .filter(|l| l.inline && l.line.is_armed())
            .collect();
        if armed.is_empty() {
            return false;
        }
        let waiters: Vec<&crate::sys::af_packet::FdWaiter> =
            armed.iter().map(|l| &l.waiter).collect();
        let mut ready = Vec::with_capacity(armed.len());
        let n = crate::sys::af_packet::FdWaiter::wait_any(&waiters, timeout, &mut ready);
        if n.unwrap_or(0) > 0 {
            for (l, r) in armed.iter().zip(ready) {
                if r {
                    l.line.raise();
                }
            }
        }
        true
    }

    fn stop_thread(&mut self) {
        if let Some(t) = self.thread.take() {
            t.stop();
        }
    }
}

impl Drop for LevelIrq {
    fn drop(&mut self) {
        self.stop_thread();
    }
}
