//! `net_rx_action`: the poll list, `netdev_budget`, `netdev_budget_usecs`.
//!
//! A [`Softnet`] is one thread's `softnet_data`: the list of NAPIs it owns
//! and must poll, and its counters. [`Softnet::net_rx_action`] mirrors the
//! kernel's (net/core/dev.c):
//!
//! - each NAPI on the list is polled once with its own weight (`napi_poll`
//!   passes `n->weight`, not the remaining budget, so the budget can go
//!   below zero);
//! - a NAPI that used its whole weight (or whose completion found `MISSED`)
//!   goes to a `repoll` list that is appended after the NAPIs not yet
//!   polled, so one call polls every listed NAPI at most once;
//! - the call stops when the list is empty, or when `netdev_budget` packets
//!   were processed or `netdev_budget_usecs` passed, and then counts
//!   `time_squeeze` (as the kernel does, even if the last poll happened to
//!   empty the list).
//!
//! The time limit: the kernel measures it in jiffies (2000 µs = 2 jiffies
//! at HZ=1000). We compare nanoseconds from the clock passed in: its fine
//! reading when a stage or a NAPI reads the time anyway (GRO, a capture,
//! the latency sink), else its coarse one ([`Clock::coarse_ns`], the
//! kernel's jiffies), which costs a fifth of a fine read here.

use crate::napi::Napi;
use crate::packet::Stack;
use crate::stats::SoftnetStats;
use crate::time::Clock;
use rxpath_frames::RxQueue;
use serde::Serialize;
use std::collections::VecDeque;

/// `net.core.netdev_budget` and `net.core.netdev_budget_usecs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SoftnetConfig {
    /// Packets per `net_rx_action` (default 300).
    pub netdev_budget: usize,
    /// Microseconds per `net_rx_action` (default 2000).
    pub netdev_budget_usecs: u64,
}

impl Default for SoftnetConfig {
    fn default() -> Self {
        SoftnetConfig {
            netdev_budget: 300,
            netdev_budget_usecs: 2000,
        }
    }
}

/// One thread's poll list and counters.
#[derive(Debug, Default)]
pub struct Softnet {
    cfg: SoftnetConfig,
    poll_list: VecDeque<usize>,
    /// Kept between calls so that steady state does not allocate.
    repoll: VecDeque<usize>,
    stats: SoftnetStats,
}

/// What one `net_rx_action` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxActionResult {
    /// Packets processed.
    pub work: usize,
    /// Polls made.
    pub polls: usize,
    /// True if the budget or time ran out (`time_squeeze` was counted).
    pub squeezed: bool,
}

impl Softnet {
    /// Change `netdev_budget`/`netdev_budget_usecs` (a live knob); the next
    /// `net_rx_action` uses them.
    pub fn set_config(&mut self, cfg: SoftnetConfig) {
        self.cfg = cfg;
    }

    /// A softnet with these budgets.
    pub fn new(cfg: SoftnetConfig) -> Self {
        Softnet {
            cfg,
            poll_list: VecDeque::new(),
            repoll: VecDeque::new(),
            stats: SoftnetStats::default(),
        }
    }

    /// The budgets.
    pub fn config(&self) -> SoftnetConfig {
        self.cfg
    }

    /// Put NAPI number `i` (an index into the slice given to
    /// [`net_rx_action`](Self::net_rx_action)) on the poll list. The caller
    /// must have won its `schedule_prep` (`____napi_schedule`).
    pub fn schedule(&mut self, i: usize) {
        debug_assert!(!self.poll_list.contains(&i), "NAPI {i} scheduled twice");
        self.poll_list.push_back(i);
    }

    /// NAPIs waiting to be polled.
    pub fn pending(&self) -> usize {
        self.poll_list.len()
    }

    /// True if NAPI `i` is on the list.
    pub fn is_scheduled(&self, i: usize) -> bool {
        self.poll_list.contains(&i)
    }

    /// Counters.
    pub fn stats(&self) -> &SoftnetStats {
        &self.stats
    }

    /// Poll the listed NAPIs once each, within `netdev_budget` packets and
    /// `netdev_budget_usecs`. Calling context: the thread that owns every
    /// listed NAPI.
    pub fn net_rx_action<Q: RxQueue, S: Stack, C: Clock>(
        &mut self,
        napis: &mut [Napi<Q>],
        stack: &mut S,
        clock: &C,
    ) -> RxActionResult {
        // The fine clock only if someone reads the time (GRO, a capture, a
        // stage that says so); otherwise the coarse one, as the kernel
        // measures this window in jiffies and stamps no packet.
        let fine = stack.wants_time() || self.poll_list.iter().any(|&i| napis[i].wants_time());
        self.net_rx_action_by(fine, clock, |i, now| {
            let napi = &mut napis[i];
            let weight = napi.weight();
            napi.poll(weight, stack, now)
        })
    }

    /// [`Self::net_rx_action`] over NAPIs however they are held: `poll(i,
    /// now)` polls NAPI `i` once with its weight. `fine`: read the fine
    /// clock (someone stamps packets), else the coarse one.
    pub fn net_rx_action_by<C: Clock>(
        &mut self,
        fine: bool,
        clock: &C,
        mut poll: impl FnMut(usize, u64) -> crate::napi::PollResult,
    ) -> RxActionResult {
        let read = |c: &C| if fine { c.now_ns() } else { c.coarse_ns() };
        let mut now = read(clock);
        let time_limit = now + self.cfg.netdev_budget_usecs * 1000;
        let mut budget = self.cfg.netdev_budget as isize;
        let mut list = std::mem::take(&mut self.poll_list);
        let mut repoll = std::mem::take(&mut self.repoll);
        let mut res = RxActionResult {
            work: 0,
            polls: 0,
            squeezed: false,
        };
        self.stats.rx_actions += 1;
        while let Some(i) = list.pop_front() {
            let r = poll(i, now);
            res.work += r.work;
            res.polls += 1;
            if !r.completed {
                repoll.push_back(i);
            }
            budget -= r.work as isize;
            // One clock read per poll: the end of this one is the start of
            // the next (the kernel reads jiffies, which costs nothing).
            now = read(clock);
            if budget <= 0 || now >= time_limit {
                // Counted as the kernel counts it: whenever the window is
                // exhausted, even if the last poll happened to drain the list.
                self.stats.time_squeeze += 1;
                res.squeezed = true;
                break;
            }
        }
        // Not yet polled first, then the ones to poll again, then whatever
        // was scheduled meanwhile.
        list.append(&mut repoll);
        list.append(&mut self.poll_list);
        self.poll_list = list;
        self.repoll = repoll;
        self.stats.processed += res.work as u64;
        res
    }
}
