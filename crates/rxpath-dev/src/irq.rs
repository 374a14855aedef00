//! Level-triggered interrupts for the real-interface queues: a thread per
//! queue that waits for the device's descriptor and raises the queue's
//! [`IrqLine`] (the line itself is `rxpath-frames`').

pub use rxpath_frames::irq::IrqLine;
use std::sync::atomic::{AtomicBool, Ordering};

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
        l.set_irq_thread();
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

impl rxpath_frames::InlineIrq for LevelIrq {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
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
