//! A worker's backlog bookkeeping, as `softnet_data`'s: the queue length
//! against `netdev_max_backlog`, the free-running `input_queue_tail`
//! (advanced on enqueue) and `input_queue_head` (advanced after processing,
//! in batches, as `process_backlog` does), and `skb_flow_limit()`.

use super::hash_32;
use serde::Serialize;

/// `FLOW_LIMIT_HISTORY`: the packets a flow limit remembers (128 since
/// 2015; the documentation's 256 is stale).
pub const FLOW_LIMIT_HISTORY: usize = 1 << 7;

/// `struct sd_flow_limit`: which flows the last 128 packets of a nearly
/// full backlog belonged to.
#[derive(Debug, Clone)]
pub struct FlowLimit {
    history: [u16; FLOW_LIMIT_HISTORY],
    head: usize,
    buckets: Vec<u8>,
    log: u32,
}

impl FlowLimit {
    /// `flow_limit_table_len` buckets (rounded up to a power of two).
    pub fn new(table_len: usize) -> Self {
        let n = table_len.clamp(1, 1 << 16).next_power_of_two();
        FlowLimit {
            history: [0; FLOW_LIMIT_HISTORY],
            head: 0,
            buckets: vec![0; n],
            log: n.trailing_zeros(),
        }
    }

    /// Record a packet of `hash`; true if its flow holds more than half of
    /// the history (the elephant: drop it).
    fn over(&mut self, hash: u32) -> bool {
        let new = hash_32(hash, self.log) as usize;
        let old = self.history[self.head] as usize;
        self.history[self.head] = new as u16;
        self.head = (self.head + 1) & (FLOW_LIMIT_HISTORY - 1);
        if self.buckets[old] > 0 {
            self.buckets[old] -= 1;
        }
        self.buckets[new] = self.buckets[new].saturating_add(1);
        self.buckets[new] as usize > FLOW_LIMIT_HISTORY >> 1
    }
}

/// Counters of one backlog, named as `/proc/net/softnet_stat`'s columns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BacklogStats {
    /// Packets processed from the backlog.
    pub processed: u64,
    /// Dropped: the backlog was full (`netdev_max_backlog`) or the flow
    /// limit took them.
    pub dropped: u64,
    /// Of `dropped`, those the flow limit took.
    pub flow_limit_count: u64,
    /// Packets steered here from another worker (`received_rps`).
    pub received_rps: u64,
}

/// What an enqueue did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// Queued; the tail after it (save it as the flow's `last_qtail`), and
    /// whether the queue was empty before (the worker must be woken: the
    /// kernel's `napi_schedule_rps` / IPI).
    Queued {
        /// `input_queue_tail` after this packet.
        tail: u32,
        /// The backlog was empty.
        was_empty: bool,
    },
    /// Dropped: backlog full (`backlog_full`).
    Full,
    /// Dropped by the flow limit.
    FlowLimited,
}

/// One worker's backlog counters and limits (the packets themselves live
/// in the runtime's queue).
#[derive(Debug, Clone)]
pub struct Backlog {
    qlen: usize,
    max: usize,
    tail: u32,
    head: u32,
    flow_limit: Option<FlowLimit>,
    stats: BacklogStats,
}

impl Backlog {
    /// `netdev_max_backlog` (default 1000) and an optional flow limit.
    pub fn new(max_backlog: usize, flow_limit: Option<FlowLimit>) -> Self {
        Backlog {
            qlen: 0,
            max: max_backlog,
            tail: 0,
            head: 0,
            flow_limit,
            stats: BacklogStats::default(),
        }
    }

    /// `enqueue_to_backlog()`: drop if the queue is over
    /// `netdev_max_backlog`, or if it is at least half full and the flow
    /// limit says the packet's flow is the elephant.
    pub fn enqueue(&mut self, hash: u32, from_other: bool) -> Enqueued {
        let qlen = self.qlen;
        if qlen > self.max {
            self.stats.dropped += 1;
            return Enqueued::Full;
        }
        if qlen >= self.max >> 1 {
            if let Some(fl) = self.flow_limit.as_mut() {
                if fl.over(hash) {
                    self.stats.dropped += 1;
                    self.stats.flow_limit_count += 1;
                    return Enqueued::FlowLimited;
                }
            }
        }
        self.qlen += 1;
        self.tail = self.tail.wrapping_add(1);
        if from_other {
            self.stats.received_rps += 1;
        }
        Enqueued::Queued {
            tail: self.tail,
            was_empty: qlen == 0,
        }
    }

    /// `n` packets taken off the queue for processing (not yet done).
    pub fn dequeue(&mut self, n: usize) {
        self.qlen = self.qlen.saturating_sub(n);
    }

    /// `rps_input_queue_head_add()`: `n` packets were processed; the head
    /// moves past them only now, so a flow is moved away from this worker
    /// only after its packets here are done.
    pub fn processed(&mut self, n: usize) {
        self.head = self.head.wrapping_add(n as u32);
        self.stats.processed += n as u64;
    }

    /// `input_queue_head`.
    pub fn head(&self) -> u32 {
        self.head
    }

    /// `input_queue_tail`.
    pub fn tail(&self) -> u32 {
        self.tail
    }

    /// Packets queued now.
    pub fn len(&self) -> usize {
        self.qlen
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.qlen == 0
    }

    /// Counters.
    pub fn stats(&self) -> BacklogStats {
        self.stats
    }
}
