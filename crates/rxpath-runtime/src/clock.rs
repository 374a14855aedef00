//! The real clock, for the stages that take `now`.

use rxpath_core::time::Clock;

/// Monotonic nanoseconds since the process's clock origin
/// ([`rxpath_dev::mono_ns`]), so that times stamped by the simulated NIC and
/// times read by NAPI threads compare.
#[derive(Debug, Clone, Copy, Default)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        rxpath_dev::mono_ns()
    }
    #[inline]
    fn coarse_ns(&self) -> u64 {
        rxpath_dev::mono_coarse_ns()
    }
}
