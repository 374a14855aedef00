//! The monotonic clock, read straight from the vDSO.
//!
//! `Instant::now().elapsed()` turns two `timespec`s into a `Duration` with
//! checked arithmetic and 128-bit nanoseconds; the NAPI loop reads the clock
//! once per poll, and that arithmetic showed in null mode's profile. Here a
//! read is one `clock_gettime` and one multiply-add.
//!
//! [`monotonic_coarse_ns`] is the kernel's `jiffies` for user space
//! (`CLOCK_MONOTONIC_COARSE`: the time of the last tick, a few ns to read
//! because it reads no hardware counter), for windows measured in ticks
//! such as `netdev_budget_usecs`.

/// `CLOCK_MONOTONIC` in nanoseconds.
#[inline]
pub fn monotonic_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_MONOTONIC_COARSE` in nanoseconds: the same clock as
/// [`monotonic_ns`] at the last timer tick (`clock_getres` gives the tick).
#[inline]
pub fn monotonic_coarse_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC_COARSE)
}

#[inline]
fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration;
    // both clock ids exist on every Linux since 2.6.32, so the call cannot
    // fail and leaves `ts` set.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The coarse clock is the same clock as the fine one at its last
    /// tick: never ahead of it, and it moves on once the fine clock has
    /// passed it (orders of events, which no load can reverse; the
    /// deadline only catches a coarse clock that never ticks).
    #[test]
    fn coarse_is_the_same_clock_at_the_last_tick() {
        for _ in 0..1000 {
            let c = monotonic_coarse_ns();
            let f = monotonic_ns();
            assert!(c <= f, "coarse {c} after fine {f}");
        }
        let c = monotonic_coarse_ns();
        let give_up = monotonic_ns() + 10_000_000_000;
        while monotonic_coarse_ns() == c {
            assert!(monotonic_ns() < give_up, "the coarse clock never ticked");
            std::thread::yield_now();
        }
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(b >= a);
    }
}
