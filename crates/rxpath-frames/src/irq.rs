//! Interrupt lines: how a device wakes the thread that runs its NAPI.
//!
//! Mirrors the driver side of interrupt mitigation: the device raises the
//! line only while it is armed; raising disarms it (`napi_schedule` masks the
//! queue's IRQ) and `napi_complete_done` re-arms it. Between the two the NAPI
//! is polled and no further wakeups are paid for. Coalescing (`rx-usecs`,
//! `rx-frames`) decides *when* an armed device raises the line; see
//! `rxpath-dev`'s simulated NIC.

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

    /// The calling thread raises this line from a device's descriptor
    /// (a level-triggered interrupt thread): [`IrqLine::arm`] unparks it,
    /// as it sleeps while the line is masked. Set once.
    pub fn set_irq_thread(&self) {
        let _ = self.irq_thread.set(std::thread::current());
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
