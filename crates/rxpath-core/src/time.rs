//! Time, passed in: the core never reads the OS clock.
//!
//! Stages take `now` in nanoseconds from a [`Clock`]. The runtime supplies a
//! monotonic clock; tests supply [`ManualClock`] (moves only when told) or
//! [`SteppingClock`] (advances a fixed step on every read, to test deadlines
//! such as `netdev_budget_usecs` deterministically).

use std::sync::atomic::{AtomicU64, Ordering};

/// A source of monotonic nanoseconds.
pub trait Clock {
    /// Nanoseconds since an arbitrary origin; never decreases.
    fn now_ns(&self) -> u64;

    /// The same clock at its last tick (the kernel's `jiffies`): cheaper to
    /// read, never later than [`now_ns`](Self::now_ns). Windows measured
    /// in ticks (`netdev_budget_usecs`) use it. By default the fine clock.
    fn coarse_ns(&self) -> u64 {
        self.now_ns()
    }
}

/// A clock that moves only when told. Shareable between threads.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock at `t` ns.
    pub fn new(t: u64) -> Self {
        ManualClock(AtomicU64::new(t))
    }
    /// Move forward by `d` ns.
    pub fn advance(&self, d: u64) {
        self.0.fetch_add(d, Ordering::Relaxed);
    }
    /// Jump to `t` ns (must not go back).
    pub fn set(&self, t: u64) {
        self.0.fetch_max(t, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A clock that advances `step` ns every time it is read.
#[derive(Debug, Default)]
pub struct SteppingClock {
    now: AtomicU64,
    step: u64,
}

impl SteppingClock {
    /// Start at 0, advance `step` per read.
    pub fn new(step: u64) -> Self {
        SteppingClock {
            now: AtomicU64::new(0),
            step,
        }
    }
}

impl Clock for SteppingClock {
    fn now_ns(&self) -> u64 {
        self.now.fetch_add(self.step, Ordering::Relaxed)
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
}
