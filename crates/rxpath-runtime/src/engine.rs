//! The NAPI-thread engine: one loop's worth of `napi_schedule` decisions,
//! `net_rx_action` and idling, shared by `rxpath run`'s NAPI threads and a
//! [`crate::Host`]'s.
//!
//! ```text
//!  for each NAPI not on the poll list:            (Engine::schedule_due)
//!     interrupt raised (or polling mode) ──┐
//!     NAPI timer due (napi_watchdog) ──────┼─► schedule_prep / fire_timer ─► poll list
//!     busy poller's deferral lapsed ───────┤     (MISSED if someone owns it)
//!     frames coming home, nobody owns it ──┘──► try_own
//!     (a lapsed deferral while a thread sleeps on the device: ended, the
//!      NAPI left to that thread)
//!  poll list not empty ─► Softnet::net_rx_action (netdev_budget, budget_usecs)
//!  else idle: interrupts: park until a line fires or the next deadline (1 ms
//!             cap), or sleep without a deadline after IDLE_NAPS idle naps;
//!             polling: spin, yielding every 64 empty turns
//! ```
//!
//! What the thread holds its NAPIs as is a [`NapiSet`]: owned `Napi`s with
//! the thread's stage (`run`), or `SharedNapi` cells that busy-polling
//! sockets may take over (`Host`).

use crate::clock::MonotonicClock;
use rxpath_core::napi::PollResult;
use rxpath_core::softnet::{RxActionResult, Softnet, SoftnetConfig};
use rxpath_core::time::Clock;
use std::thread;
use std::time::Duration;

/// Naps of up to [`NAP_CAP`] in a row with nothing to do before a NAPI
/// thread that can ([`NapiSet::sleep_idle`]) sleeps without a deadline.
pub(crate) const IDLE_NAPS: u32 = 16;

/// The longest nap of an idle NAPI thread in interrupt mode (a stop request
/// or a deadline set meanwhile is seen within it).
pub(crate) const NAP_CAP: Duration = Duration::from_millis(1);

/// The NAPIs one NAPI thread serves, by index, however it holds them.
/// Calling context: the NAPI thread.
pub(crate) trait NapiSet {
    /// How many.
    fn count(&self) -> usize;
    /// Take NAPI `i`'s interrupt if it was raised.
    fn take_irq(&mut self, i: usize) -> bool;
    /// `napi_schedule_prep`: true if this thread now owns NAPI `i`.
    fn schedule_prep(&mut self, i: usize) -> bool;
    /// NAPI `i`'s timer (`gro_flush_timeout`), if armed.
    fn timer(&self, i: usize) -> Option<u64>;
    /// `napi_watchdog()`: fire NAPI `i`'s timer if due; true if owned now.
    fn fire_timer(&mut self, i: usize, now_ns: u64) -> bool;
    /// When a busy poller's interrupt deferral of NAPI `i` lapses (0: none).
    fn deferred_until(&self, _i: usize) -> u64 {
        0
    }
    /// This thread took NAPI `i` back from a deferral.
    fn clear_deferral(&mut self, _i: usize) {}
    /// A thread sleeps on NAPI `i`'s device, and polls it when woken.
    fn device_sleepers(&self, _i: usize) -> bool {
        false
    }
    /// Frames wait to come home to NAPI `i`'s queue.
    fn returning(&self, _i: usize) -> bool {
        false
    }
    /// Own NAPI `i` if nobody does, without an interrupt (to take frames
    /// home).
    fn try_own(&mut self, _i: usize) -> bool {
        false
    }
    /// Someone reads the fine clock (GRO, a capture, a stamping stage).
    fn wants_time(&self) -> bool;
    /// Poll NAPI `i` once with its weight.
    fn poll(&mut self, i: usize, now_ns: u64) -> PollResult;
    /// Wait up to `wait` for an interrupt in the devices themselves (queues
    /// whose interrupt is their socket's readiness); false if this set
    /// cannot, and the thread parks instead.
    fn wait_inline(&mut self, _wait: Duration) -> bool {
        false
    }
    /// Sleep without a deadline until an interrupt, a frame coming home or
    /// a new deadline wakes the thread; false if this set cannot (it naps).
    fn sleep_idle(&mut self) -> bool {
        false
    }
}

/// One NAPI thread's engine: its softnet and its idling state.
#[derive(Debug)]
pub(crate) struct Engine {
    sn: Softnet,
    clock: MonotonicClock,
    interrupts: bool,
    /// Spin instead of parking when idle in interrupt mode (`--idle-poll`).
    idle_poll: bool,
    idle_naps: u32,
    idle_spins: u32,
}

impl Engine {
    /// An engine with these budgets, in interrupt or polling mode.
    pub(crate) fn new(cfg: SoftnetConfig, interrupts: bool, idle_poll: bool) -> Engine {
        Engine {
            sn: Softnet::new(cfg),
            clock: MonotonicClock,
            interrupts,
            idle_poll,
            idle_naps: 0,
            idle_spins: 0,
        }
    }

    /// The softnet (budgets, counters, poll list).
    pub(crate) fn softnet(&mut self) -> &mut Softnet {
        &mut self.sn
    }

    /// Put on the poll list every NAPI that is due: its interrupt (always,
    /// in polling mode), its timer, a lapsed deferral, or frames coming
    /// home to a NAPI nobody owns. The clock is read only if a NAPI has a
    /// timer or a deferral.
    pub(crate) fn schedule_due<N: NapiSet>(&mut self, set: &mut N) {
        let mut now = None;
        for i in 0..set.count() {
            if self.sn.is_scheduled(i) {
                continue;
            }
            let irq = !self.interrupts || set.take_irq(i);
            let d = set.deferred_until(i);
            let timer = set.timer(i);
            if d != 0 || timer.is_some() {
                let t = *now.get_or_insert_with(|| self.clock.now_ns());
                if timer.is_some_and(|at| t >= at) && set.fire_timer(i, t) {
                    set.clear_deferral(i);
                    self.sn.schedule(i);
                    continue;
                }
            }
            let lapsed = d != 0 && now.is_some_and(|t| t >= d);
            if lapsed && !irq && set.device_sleepers(i) {
                // The deferral ends, but a thread asleep on the device
                // polls as soon as packets come (and defers again when
                // it wakes): the interrupt stays with it.
                set.clear_deferral(i);
                continue;
            }
            // An interrupt or a lapsed deferral is `napi_schedule` (MISSED
            // if owned). Frames coming home only take an idle NAPI that no
            // busy poller deferred: while deferred, the busy poller
            // reclaims them when it polls again, or this thread at the
            // deadline (taking it earlier would end the deferral).
            let owned = if irq || lapsed {
                set.schedule_prep(i)
            } else {
                d == 0 && set.returning(i) && set.try_own(i)
            };
            if owned {
                set.clear_deferral(i);
                self.sn.schedule(i);
            }
        }
    }

    /// NAPIs on the poll list.
    pub(crate) fn pending(&self) -> usize {
        self.sn.pending()
    }

    /// `net_rx_action` over the poll list.
    pub(crate) fn rx_action<N: NapiSet>(&mut self, set: &mut N) -> RxActionResult {
        self.idle_naps = 0;
        self.idle_spins = 0;
        let fine = set.wants_time();
        self.sn
            .net_rx_action_by(fine, &self.clock, |i, now| set.poll(i, now))
    }

    /// Nothing is scheduled: wait as the mode says, until an interrupt, the
    /// next deadline of the set (timers, deferrals) or [`NAP_CAP`].
    pub(crate) fn idle<N: NapiSet>(&mut self, set: &mut N) {
        if !self.interrupts {
            self.idle_spins = self.idle_spins.wrapping_add(1);
            if self.idle_spins.is_multiple_of(64) {
                thread::yield_now();
            }
            std::hint::spin_loop();
            return;
        }
        if self.idle_poll {
            std::hint::spin_loop();
            return;
        }
        let next = (0..set.count())
            .flat_map(|i| [set.deferred_until(i), set.timer(i).unwrap_or(0)])
            .filter(|&d| d != 0)
            .min();
        if next.is_some() || self.idle_naps < IDLE_NAPS || !set.sleep_idle() {
            let wait = next.map_or(NAP_CAP, |d| {
                Duration::from_nanos(d.saturating_sub(self.clock.now_ns())).min(NAP_CAP)
            });
            if !wait.is_zero() && !set.wait_inline(wait) {
                thread::park_timeout(wait);
            }
        }
        // A deadline to watch (a busy poller's deferral, a timer) is not
        // idleness.
        self.idle_naps = match next {
            Some(_) => 0,
            None => self.idle_naps.saturating_add(1),
        };
    }
}
