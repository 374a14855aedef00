//! Flow steering between GRO and the bottom half (seeds 002 and 003):
//! which worker's backlog a packet goes to, as `get_rps_cpu()` and
//! `enqueue_to_backlog()` in net/core/dev.c (Linux 6.18) decide it.
//!
//! ```text
//!  packet (hash) ─► rfs: sock flow table says the reader's worker (desired)
//!                   │    dev flow table (per RX queue) says the current one;
//!                   │    move only if the current backlog's head has passed
//!                   │    the flow's last tail (no reordering), or the
//!                   │    current worker is gone
//!                   └► rps: rps_cpus[(hash × len) >> 32]
//!                   ─► Backlog::enqueue: netdev_max_backlog, flow_limit
//! ```
//!
//! `spread` (seed 003) hands every packet to any worker and restores each
//! flow's order after the parallel part with [`Reorder`]; [`OrderCheck`]
//! measures order at delivery.
//!
//! Everything here is plain bookkeeping driven by method calls: the
//! worker threads that own the backlogs are the runtime's
//! (`rxpath_runtime::steer`).

mod backlog;
mod order;
mod reorder;
#[cfg(test)]
mod tests;

pub use backlog::{Backlog, BacklogStats, Enqueued, FlowLimit, FLOW_LIMIT_HISTORY};
pub use order::{seq_of, OrderCheck, SeqSource};
pub use reorder::Reorder;

use crate::sock::SockFlowTable;

/// `hash_32()` of include/linux/hash.h: the top `bits` bits of
/// `val × GOLDEN_RATIO_32`.
#[inline]
pub fn hash_32(val: u32, bits: u32) -> u32 {
    if bits == 0 {
        return 0;
    }
    val.wrapping_mul(0x61C8_8647) >> (32 - bits)
}

/// `reciprocal_scale()`: `val` scaled into `0..n` without a division.
#[inline]
pub fn reciprocal_scale(val: u32, n: u32) -> u32 {
    ((val as u64 * n as u64) >> 32) as u32
}

/// A worker: a bottom-half thread with a backlog (the kernel's CPU).
pub type Worker = u16;

/// No worker (an unset dev flow entry: `tcpu >= nr_cpu_ids`).
pub const NO_WORKER: Worker = Worker::MAX;

/// One entry of the per-queue dev flow table (`struct rps_dev_flow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevFlow {
    /// The worker the flow's packets go to now.
    pub cpu: Worker,
    /// That worker's `input_queue_tail` right after the flow's last packet
    /// was enqueued there.
    pub last_qtail: u32,
}

/// Ways per set of the dev flow table.
pub const DEV_FLOW_WAYS: usize = 4;

#[derive(Debug, Clone, Copy)]
struct Way {
    /// The flow's hash (0: empty; hash 0 is never steered).
    tag: u32,
    flow: DevFlow,
}

/// `rps_dev_flow_table` of one RX queue (`rps_flow_cnt` entries).
///
/// One deliberate difference from the kernel: the kernel's table is direct
/// mapped and untagged, so two flows that share a slot share one `cpu` and
/// `last_qtail`, and one can be moved past the other's packets (reordered).
/// Here a set of [`DEV_FLOW_WAYS`] entries is tagged with the flow hash, and
/// an entry is given to another flow only when its own flow has nothing in
/// flight (the head of its worker has passed its tail). A flow without an
/// entry therefore has nothing in flight and may go anywhere; if every entry
/// of its set is busy, [`get_rps_cpu`] runs the packet right here (as the
/// kernel does without a target), which keeps its order too.
///
/// A table resized while packets flow ([`DevFlowTable::resized`]; the
/// kernel swaps in an empty one) keeps every flow in flight: those its
/// sets cannot hold wait in a spill list, still steered to their worker,
/// until they drain or find a free entry. The spill never grows: new
/// flows go to the sets only.
#[derive(Debug, Clone)]
pub struct DevFlowTable {
    ways: Vec<Way>,
    log: u32,
    /// Flows in flight at a resize that their set could not take.
    spill: Vec<Way>,
}

impl DevFlowTable {
    /// `rps_flow_cnt` entries, rounded up to a power of two (at least one
    /// set).
    pub fn new(entries: usize) -> Self {
        let n = entries.max(DEV_FLOW_WAYS).next_power_of_two();
        let sets = n / DEV_FLOW_WAYS;
        DevFlowTable {
            ways: vec![
                Way {
                    tag: 0,
                    flow: DevFlow {
                        cpu: NO_WORKER,
                        last_qtail: 0
                    }
                };
                n
            ],
            log: sets.trailing_zeros(),
            spill: Vec::new(),
        }
    }

    /// `rfs_slot()`: `hash_32(hash, log)` since 2025 (before: `hash &
    /// mask`); here the set of ways.
    #[inline]
    pub fn slot(&self, hash: u32) -> usize {
        hash_32(hash, self.log) as usize
    }

    fn set_of(&self, hash: u32) -> std::ops::Range<usize> {
        let s = self.slot(hash) * DEV_FLOW_WAYS;
        s..s + DEV_FLOW_WAYS
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.ways.len()
    }

    /// Never true (at least one set).
    pub fn is_empty(&self) -> bool {
        self.ways.is_empty()
    }

    /// A table of `entries` (`rps_flow_cnt` written while packets flow,
    /// `store_rps_dev_flow_table_cnt`) holding every flow of this one that
    /// has packets in flight, so that none of them can be moved past its
    /// own packets; flows with nothing in flight may go anywhere and are
    /// left out. Busy flows that a set of the new table cannot take wait in
    /// its spill list (the kernel swaps in an empty table and may reorder
    /// them). Never refused: a busy flow stays busy as long as packets keep
    /// coming, so waiting until all fit could wait for ever.
    pub fn resized(&self, entries: usize, workers: &dyn WorkerView) -> DevFlowTable {
        let mut t = DevFlowTable::new(entries);
        for w in self
            .ways
            .iter()
            .chain(&self.spill)
            .filter(|w| !Self::idle(w, workers))
        {
            if !t.set(w.tag, w.flow.cpu, w.flow.last_qtail, workers) {
                t.spill.push(*w);
            }
        }
        t
    }

    /// Flows waiting in the spill list (see [`DevFlowTable::resized`]).
    pub fn spilled(&self) -> usize {
        self.spill.len()
    }

    /// Let go of spilled flows that have drained (the end of a poll).
    pub fn tidy(&mut self, workers: &dyn WorkerView) {
        if !self.spill.is_empty() {
            self.spill.retain(|w| !Self::idle(w, workers));
        }
    }

    /// The entry of the flow `hash` (`cpu` is [`NO_WORKER`] if it has
    /// none).
    pub fn get(&self, hash: u32) -> DevFlow {
        self.ways[self.set_of(hash)]
            .iter()
            .chain(&self.spill)
            .find(|w| w.tag == hash && hash != 0)
            .map_or(
                DevFlow {
                    cpu: NO_WORKER,
                    last_qtail: 0,
                },
                |w| w.flow,
            )
    }

    /// An entry whose flow has nothing in flight: empty, on a worker gone,
    /// or passed by its worker's head.
    fn idle(w: &Way, workers: &dyn WorkerView) -> bool {
        w.tag == 0
            || w.flow.cpu == NO_WORKER
            || !workers.online(w.flow.cpu)
            || (workers.head(w.flow.cpu).wrapping_sub(w.flow.last_qtail) as i32) >= 0
    }

    /// The flow's entry ([`NO_WORKER`] if it has none but an entry of its
    /// set is idle, so it can have one), or `None` if every entry of its
    /// set holds another flow with packets in flight. One pass over the set.
    pub fn lookup(&self, hash: u32, workers: &dyn WorkerView) -> Option<DevFlow> {
        let mut free = false;
        for w in &self.ways[self.set_of(hash)] {
            if w.tag == hash {
                return Some(w.flow);
            }
            free = free || Self::idle(w, workers);
        }
        if let Some(w) = self.spill.iter().find(|w| w.tag == hash) {
            return Some(w.flow);
        }
        free.then_some(DevFlow {
            cpu: NO_WORKER,
            last_qtail: 0,
        })
    }

    /// Record that the flow's packet went to `cpu` and left its tail at
    /// `tail` (`set_rps_cpu` plus `rps_input_queue_tail_save`), in its
    /// entry or one whose flow has nothing in flight (a spilled flow
    /// moves there, else keeps its spill entry). False if there was none
    /// (every entry busy).
    pub fn set(&mut self, hash: u32, cpu: Worker, tail: u32, workers: &dyn WorkerView) -> bool {
        let r = self.set_of(hash);
        let ways = &mut self.ways[r];
        let at = ways.iter().position(|w| w.tag == hash).or_else(|| {
            ways.iter()
                .position(|w| w.tag == 0)
                .or_else(|| ways.iter().position(|w| Self::idle(w, workers)))
        });
        let way = Way {
            tag: hash,
            flow: DevFlow {
                cpu,
                last_qtail: tail,
            },
        };
        let spilled = self.spill.iter().position(|w| w.tag == hash);
        match (at, spilled) {
            (Some(i), s) => {
                ways[i] = way;
                if let Some(s) = s {
                    self.spill.swap_remove(s);
                }
                true
            }
            (None, Some(s)) => {
                self.spill[s] = way;
                true
            }
            (None, None) => false,
        }
    }
}

/// How packets are steered (`--steer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SteerMode {
    /// The whole path on the NAPI thread.
    #[default]
    None,
    /// `rps_cpus` per RX queue.
    Rps,
    /// RFS over RPS.
    Rfs,
    /// Any worker for every packet, flow order restored before delivery
    /// (seed 003).
    Spread,
    /// `spread` without the reorder stage (to show what it buys).
    SpreadUnordered,
}

impl SteerMode {
    /// The name `--steer` takes.
    pub fn name(self) -> &'static str {
        match self {
            SteerMode::None => "none",
            SteerMode::Rps => "rps",
            SteerMode::Rfs => "rfs",
            SteerMode::Spread => "spread",
            SteerMode::SpreadUnordered => "spread-unordered",
        }
    }

    /// Parse `--steer`'s value.
    pub fn parse(s: &str) -> Option<SteerMode> {
        [
            SteerMode::None,
            SteerMode::Rps,
            SteerMode::Rfs,
            SteerMode::Spread,
            SteerMode::SpreadUnordered,
        ]
        .into_iter()
        .find(|m| m.name() == s)
    }

    /// Any worker may take any packet.
    pub fn spreads(self) -> bool {
        matches!(self, SteerMode::Spread | SteerMode::SpreadUnordered)
    }
}

/// How `spread` picks a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SpreadPick {
    /// The next online worker in turn.
    RoundRobin,
    /// The online worker with the shortest backlog (the default: a worker
    /// that falls behind gets less, so the reorder buffer holds less).
    #[default]
    LeastLoaded,
}

/// The steering knobs, named as the kernel names them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SteerConfig {
    /// `--steer`.
    pub mode: SteerMode,
    /// Bottom-half workers (the kernel's CPUs). The NAPI threads are
    /// workers 0.., the rest are threads of their own.
    pub workers: usize,
    /// `rps_cpus` of every RX queue (empty = all workers).
    pub rps_cpus: Vec<Worker>,
    /// `net.core.rps_sock_flow_entries` (RFS).
    pub rps_sock_flow_entries: usize,
    /// `rps_flow_cnt` of every RX queue (RFS).
    pub rps_flow_cnt: usize,
    /// `net.core.netdev_max_backlog`.
    pub netdev_max_backlog: usize,
    /// `net.core.flow_limit_table_len` when the flow limit is on.
    pub flow_limit: Option<usize>,
    /// `net.core.dev_weight`: packets a backlog poll takes.
    pub dev_weight: usize,
    /// `spread`: how a worker is picked.
    pub pick: SpreadPick,
    /// `spread`: sequence numbers in flight at most.
    pub reorder_window: usize,
    /// `rfs`: accelerated RFS (the simulated NIC's ntuple rules steer a
    /// flow to the RX queue whose NAPI runs on its reader's worker).
    pub accel_rfs: bool,
}

impl Default for SteerConfig {
    fn default() -> Self {
        SteerConfig {
            mode: SteerMode::None,
            workers: 1,
            rps_cpus: Vec::new(),
            rps_sock_flow_entries: 32768,
            rps_flow_cnt: 4096,
            netdev_max_backlog: 1000,
            flow_limit: None,
            dev_weight: 64,
            pick: SpreadPick::LeastLoaded,
            reorder_window: 8192,
            accel_rfs: false,
        }
    }
}

impl SteerConfig {
    /// Check the knobs: a one-line reason if they make no sense.
    pub fn validate(&self) -> Result<(), String> {
        if self.workers == 0 || self.workers > 256 {
            return Err(format!("--workers {}: must be 1..=256", self.workers));
        }
        if let Some(&w) = self.rps_cpus.iter().find(|&&w| w as usize >= self.workers) {
            return Err(format!(
                "--rps-cpus: worker {w} does not exist (--workers {})",
                self.workers
            ));
        }
        if self.netdev_max_backlog == 0 {
            return Err("--netdev-max-backlog must be at least 1".into());
        }
        if self.dev_weight == 0 {
            return Err("dev_weight must be at least 1".into());
        }
        if self.mode == SteerMode::Rfs
            && (self.rps_flow_cnt == 0 || self.rps_sock_flow_entries == 0)
        {
            return Err(
                "--steer rfs needs --rps-flow-cnt and --rps-sock-flow-entries above 0".into(),
            );
        }
        if self.accel_rfs && self.mode != SteerMode::Rfs {
            return Err("--accel-rfs needs --steer rfs".into());
        }
        if self.reorder_window == 0 {
            return Err("the reorder window must be at least 1".into());
        }
        Ok(())
    }

    /// The `rps_cpus` map in use: the configured one, or every worker.
    pub fn rps_map(&self) -> Vec<Worker> {
        if self.rps_cpus.is_empty() {
            (0..self.workers as Worker).collect()
        } else {
            self.rps_cpus.clone()
        }
    }
}

/// What the steering stage sees of a worker: alive, and how far its backlog
/// has been processed (`input_queue_head`).
pub trait WorkerView {
    /// The worker exists and runs (`cpu_online`).
    fn online(&self, w: Worker) -> bool;
    /// Its `input_queue_head`.
    fn head(&self, w: Worker) -> u32;
}

/// `get_rps_cpu()` for one RX queue: the worker for a packet with `hash`,
/// or `None` to run the rest of the path right here (no map, no table,
/// hash 0, or nothing online). Returns also whether the dev flow entry
/// must be saved with the tail the enqueue gives (`rflow`).
///
/// `desired`: the sock flow table (RFS; `None` = RPS only). `map`: the
/// queue's `rps_cpus` (empty = none).
pub fn get_rps_cpu(
    hash: u32,
    map: &[Worker],
    flows: Option<&DevFlowTable>,
    desired: Option<&SockFlowTable>,
    workers: &dyn WorkerView,
) -> Option<(Worker, bool)> {
    if hash == 0 || (map.is_empty() && flows.is_none()) {
        return None;
    }
    if let (Some(table), Some(sock)) = (flows, desired) {
        let Some(DevFlow { cpu, last_qtail }) = table.lookup(hash, workers) else {
            // Every entry of its set holds a flow with packets in flight:
            // this flow has none (see DevFlowTable), and run here it keeps
            // its order.
            return None;
        };
        if let Some(next) = sock.desired_cpu(hash) {
            let next = next as Worker;
            let mut tcpu = cpu;
            // Move to the desired worker only if the current one is unset or
            // gone, or its head has passed the flow's last tail (wrap-safe):
            // every earlier packet of the flow has been processed there.
            if tcpu != next
                && (tcpu == NO_WORKER
                    || !workers.online(tcpu)
                    || (workers.head(tcpu).wrapping_sub(last_qtail) as i32) >= 0)
            {
                tcpu = next;
            }
            if tcpu != NO_WORKER && workers.online(tcpu) {
                return Some((tcpu, true));
            }
        }
    }
    if !map.is_empty() {
        let w = map[reciprocal_scale(hash, map.len() as u32) as usize];
        if workers.online(w) {
            // The kernel leaves the dev flow entry alone here, so a flow's
            // first move to its reader's CPU finds it unset and goes at
            // once, overtaking what `rps_cpus` queued before: a window of
            // reordering. rxpath records the RPS worker and its tail
            // (`rflow`), so that first move waits for the head too.
            return Some((w, flows.is_some()));
        }
    }
    None
}
