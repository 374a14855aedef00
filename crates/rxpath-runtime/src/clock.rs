//! The real clock, for the stages that take `now`.

use rxpath_core::time::Clock;
use std::time::Instant;

/// Monotonic nanoseconds since the clock was made.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock(Instant);

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock(Instant::now())
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}
