//! The filter's `INPUT` hook as the path calls it: IP input
//! ([`crate::ip::IpStage`]) and the socket stage judge every packet GRO
//! passes up through it (a super-packet once, as the kernel judges one
//! skb), and drop what the rules drop, counted `filter` or
//! `filter_reject`.

use super::{Action, Filter, FilterHandle, Judge};
use rxpath_wire::Headers;
use std::sync::Arc;

/// One thread's `INPUT` hook: the running filter, held for a poll (or a
/// bundle), and the thread's [`Judge`] (flow cache, counts added up until
/// the set is let go). IP input and the socket stage judge through it.
#[derive(Debug)]
pub struct InputHook {
    filter: Arc<FilterHandle>,
    /// The set packets are judged by now: loaded at the first packet and
    /// let go at the end of the poll (or of the bundle, for a driver that
    /// has no polls: a worker's backlog), so a swap takes effect at the
    /// next one and no packet sees half of one.
    cur: Option<Option<Arc<Filter>>>,
    /// The driver ends its polls with [`Self::poll_done`]: hold the set
    /// for a poll (one load and one flush per 64 packets, not per 16).
    per_poll: bool,
    judge: Judge,
}

impl InputHook {
    /// A hook judging by what `filter` holds.
    pub fn new(filter: Arc<FilterHandle>) -> Self {
        InputHook {
            judge: filter.judge(),
            filter,
            cur: None,
            per_poll: false,
        }
    }

    /// What the rules do with a parsed frame (accept: not IP, or no set
    /// for its family); `rxhash` the packet's flow hash, or 0.
    #[inline(always)]
    pub fn action(&mut self, frame: &[u8], h: &Headers, rxhash: u32) -> Action {
        let filter = &self.filter;
        match self.cur.get_or_insert_with(|| filter.current()) {
            Some(f) => self.judge.action(f, frame, h, rxhash),
            None => Action::Accept,
        }
    }

    /// The end of a bundle: let go of the set unless it is held per poll.
    pub fn bundle_done(&mut self) {
        if !self.per_poll {
            self.release();
        }
    }

    /// The end of a poll: let go of the set; from now on hold it per poll.
    pub fn poll_done(&mut self) {
        self.per_poll = true;
        self.release();
    }

    /// Let go of the set, its counts written first.
    pub fn release(&mut self) {
        if let Some(Some(f)) = self.cur.take() {
            self.judge.flush(&f);
        }
    }

    /// Flow cache hits and walks so far.
    pub fn cache_stats(&self) -> (u64, u64) {
        (self.judge.hits, self.judge.misses)
    }
}
