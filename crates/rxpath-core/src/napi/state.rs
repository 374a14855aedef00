//! A NAPI's id and its atomic state word (`napi->state`): who owns it,
//! and the transitions of `napi_schedule_prep()`, `napi_complete_done()`
//! and busy polling.

use std::sync::atomic::{AtomicU32, Ordering};

pub use crate::packet::NapiId;

/// State bits, as `NAPI_STATE_*`.
pub mod bits {
    /// Scheduled: someone owns the NAPI and will poll it.
    pub const SCHED: u32 = 1 << 0;
    /// A schedule attempt came while `SCHED` was held: poll once more.
    pub const MISSED: u32 = 1 << 1;
    /// Disable pending: no new owner may take it.
    pub const DISABLE: u32 = 1 << 2;
    /// Owned by a busy-polling socket.
    pub const IN_BUSY_POLL: u32 = 1 << 3;
}

/// The atomic state word of one NAPI (`napi->state`).
///
/// Every transition is a compare-and-swap loop, as in the kernel. `Acquire`
/// on taking ownership pairs with `Release` on giving it up, so the new
/// owner sees everything the old owner wrote to the NAPI and its rings.
#[derive(Debug, Default)]
pub struct NapiState(AtomicU32);

impl NapiState {
    /// The raw bits.
    pub fn bits(&self) -> u32 {
        self.0.load(Ordering::Acquire)
    }

    fn update(&self, f: impl Fn(u32) -> Option<u32>) -> Result<u32, u32> {
        self.0.fetch_update(Ordering::AcqRel, Ordering::Acquire, f)
    }

    /// `napi_schedule_prep()`: try to become the owner that will poll this
    /// NAPI. Fails when disabled, or when already scheduled (by the NAPI
    /// thread or a busy poller), in which case `MISSED` is recorded so the
    /// current owner polls once more.
    pub fn schedule_prep(&self) -> bool {
        let prev = self.update(|v| {
            if v & bits::DISABLE != 0 {
                return None;
            }
            let mut n = v | bits::SCHED;
            if v & bits::SCHED != 0 {
                n |= bits::MISSED;
            }
            Some(n)
        });
        matches!(prev, Ok(v) if v & bits::SCHED == 0)
    }

    /// `napi_complete_done()`'s state change: give up ownership. Returns
    /// false if `MISSED` was set, in which case `SCHED` stays set and the
    /// caller must poll again (the kernel re-adds the NAPI to the poll list).
    pub fn complete(&self) -> bool {
        let prev = self
            .update(|v| {
                let mut n = v & !(bits::SCHED | bits::MISSED | bits::IN_BUSY_POLL);
                if v & bits::MISSED != 0 {
                    n |= bits::SCHED;
                }
                Some(n)
            })
            .unwrap_or_else(|v| v);
        prev & bits::MISSED == 0
    }

    /// Take an idle NAPI for housekeeping (frames coming home from
    /// sockets) without recording `MISSED` when someone owns it: the owner
    /// reclaims returned frames in its own polls, and such work is no
    /// interrupt, so it must not end a busy poller's interrupt deferral.
    pub fn try_own(&self) -> bool {
        self.update(|v| {
            if v & (bits::DISABLE | bits::SCHED) != 0 {
                None
            } else {
                Some(v | bits::SCHED)
            }
        })
        .is_ok()
    }

    /// `napi_busy_loop()`'s ownership attempt: take an idle NAPI for a busy
    /// poller (`SCHED | IN_BUSY_POLL`). Fails if anyone owns it or it is
    /// being disabled; the busy poller then just checks its socket queue.
    pub fn try_busy_poll(&self) -> bool {
        self.update(|v| {
            if v & (bits::DISABLE | bits::SCHED | bits::IN_BUSY_POLL) != 0 {
                None
            } else {
                Some(v | bits::SCHED | bits::IN_BUSY_POLL)
            }
        })
        .is_ok()
    }

    /// `busy_poll_stop()`: a busy poller gives the NAPI back. Returns true if
    /// an interrupt arrived meanwhile (`MISSED`): the caller must make sure
    /// the NAPI thread polls it (the kernel calls `__napi_schedule`).
    pub fn busy_poll_stop(&self) -> bool {
        let prev = self
            .update(|v| Some(v & !(bits::SCHED | bits::MISSED | bits::IN_BUSY_POLL)))
            .unwrap_or_else(|v| v);
        prev & bits::MISSED != 0
    }

    /// True while a busy poller owns the NAPI.
    pub fn in_busy_poll(&self) -> bool {
        self.bits() & bits::IN_BUSY_POLL != 0
    }

    /// `napi_disable()` first half: forbid new owners. Returns false if it
    /// was already being disabled.
    pub fn disable(&self) -> bool {
        self.update(|v| {
            if v & bits::DISABLE != 0 {
                None
            } else {
                Some(v | bits::DISABLE)
            }
        })
        .is_ok()
    }

    /// `napi_enable()`: allow owners again.
    pub fn enable(&self) {
        self.0.fetch_and(!bits::DISABLE, Ordering::AcqRel);
    }
}
