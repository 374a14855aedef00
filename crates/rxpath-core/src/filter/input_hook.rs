//! The filter's `INPUT` hook as the path calls it: IP input
//! ([`crate::ip::IpStage`]) and the socket stage judge every packet GRO
//! passes up through it (a super-packet once, as the kernel judges one
//! skb), and drop what the rules drop, counted `filter` or
//! `filter_reject`.

use super::cache::{Probe, Quick};
use super::LocalIn;
use super::{Action, Filter, FilterHandle, Judge};
use crate::packet::PollEnd;
use rxpath_wire::Headers;
use std::sync::Arc;

/// One thread's `INPUT` hook: the running filter, held for a while, and
/// the thread's [`Judge`] (flow cache, counts added up until the set is
/// let go). IP input and the socket stage judge through it.
#[derive(Debug)]
pub struct InputHook {
    filter: Arc<FilterHandle>,
    /// The set packets are judged by now: loaded at the first packet and
    /// let go (its counts written first) when the queue runs dry, after
    /// [`HOLD_POLLS`] busy polls, or at the end of each bundle for a
    /// driver that has no polls (a worker's backlog). A swap takes effect
    /// at the next load, and no packet sees half of one.
    cur: Option<Option<Arc<Filter>>>,
    /// The held set is the one the judge's quick path stands for.
    quick: bool,
    /// The driver ends its polls with [`Self::poll_done`].
    per_poll: bool,
    /// Busy polls since the set was loaded.
    polls: u32,
    judge: Judge,
}

/// Busy polls a hook keeps its set (and its counts) for: the counters a
/// reader sees lag by at most this many polls' packets while the queue
/// stays busy (4096 at the default budget: a fraction of a millisecond at
/// full rate), none once it runs dry; a swapped set takes effect as late.
/// After each let-go, a flow's first hit does extra bookkeeping (it
/// joins the list of entries to fold): at 16 polls that cost 6 of the
/// ~600 instructions a packet takes with 64 flows, at 64 under 2.
pub const HOLD_POLLS: u32 = 64;

impl InputHook {
    /// A hook judging by what `filter` holds.
    pub fn new(filter: Arc<FilterHandle>) -> Self {
        InputHook {
            judge: filter.judge(),
            filter,
            cur: None,
            quick: false,
            per_poll: false,
            polls: 0,
        }
    }

    /// What the rules do with a parsed frame (accept: not IP, or no set
    /// for its family); `rxhash` the packet's flow hash, or 0.
    #[inline(always)]
    pub fn action(&mut self, frame: &[u8], h: &Headers, rxhash: u32) -> Action {
        if self.quick {
            let p = self.judge.probe(frame, h, rxhash);
            return self.settle(p, frame, h, rxhash);
        }
        self.action_slow(frame, h, rxhash)
    }

    /// [`Self::action`] of a packet IP input hands the hook: the quick
    /// key from what IP input learnt (`at`).
    #[inline(always)]
    pub fn action_in(&mut self, frame: &[u8], h: &Headers, rxhash: u32, at: &LocalIn) -> Action {
        if self.quick {
            let p = self.judge.probe_in(frame, h, at, rxhash);
            return self.settle(p, frame, h, rxhash);
        }
        self.action_slow(frame, h, rxhash)
    }

    /// Where a quick probe leads: a hit's action, a miss walked and
    /// remembered, anything else (probed already) straight to the general
    /// path.
    #[inline(always)]
    fn settle(&mut self, p: Probe, frame: &[u8], h: &Headers, rxhash: u32) -> Action {
        match p {
            Probe::Hit(a) => a,
            Probe::Miss(key, slot) => self.miss(frame, h, key, slot),
            Probe::Other => self.general(frame, h, rxhash),
        }
    }

    #[inline(never)]
    fn miss(&mut self, frame: &[u8], h: &Headers, key: Quick, slot: usize) -> Action {
        match &self.cur {
            Some(Some(f)) => self.judge.quick_miss(f, frame, h, key, slot),
            _ => Action::Accept,
        }
    }

    #[inline(never)]
    fn general(&mut self, frame: &[u8], h: &Headers, rxhash: u32) -> Action {
        match &self.cur {
            Some(Some(f)) => self.judge.action_slow(f, frame, h, rxhash),
            _ => Action::Accept,
        }
    }

    /// Everything but a quick key judged by a held set: the set loaded
    /// if none is held, then the judge's general path.
    #[inline(never)]
    fn action_slow(&mut self, frame: &[u8], h: &Headers, rxhash: u32) -> Action {
        if self.cur.is_none() {
            let f = self.filter.current();
            self.quick = f.as_ref().is_some_and(|f| self.judge.prepare(f));
            self.cur = Some(f);
        }
        match &self.cur {
            Some(Some(f)) => self.judge.action(f, frame, h, rxhash),
            _ => Action::Accept,
        }
    }

    /// The end of a bundle: let go of the set unless the driver has polls.
    pub fn bundle_done(&mut self) {
        if !self.per_poll {
            self.release();
        }
    }

    /// The end of a poll: let go of the set if the queue ran dry or it was
    /// held for [`HOLD_POLLS`] polls.
    pub fn poll_done(&mut self, end: PollEnd) {
        self.per_poll = true;
        self.polls += 1;
        if matches!(end, PollEnd::Complete { .. }) || self.polls >= HOLD_POLLS {
            self.release();
        }
    }

    /// Let go of the set, its counts written first.
    pub fn release(&mut self) {
        self.polls = 0;
        self.quick = false;
        if let Some(Some(f)) = self.cur.take() {
            self.judge.flush(&f);
        }
    }

    /// Flow cache hits and walks so far.
    pub fn cache_stats(&self) -> (u64, u64) {
        (self.judge.hits, self.judge.misses)
    }
}

impl Drop for InputHook {
    /// A thread that stops writes what it counted.
    fn drop(&mut self) {
        self.release();
    }
}
