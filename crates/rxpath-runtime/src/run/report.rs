//! What a run reports: per queue, in total, and once per interval.

use super::config::{Producer, RunConfig};
use rxpath_core::gro::GroStats;
use rxpath_core::napi::{Napi, NapiId};
use rxpath_core::stats::{LatencyHist, NapiStats, SoftnetStats};
use rxpath_dev::{DeviceQueueStats, RxQueue};
use serde::Serialize;
use std::time::Duration;

/// Counters of one queue at the end of a run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct QueueReport {
    /// Queue index.
    pub queue: u16,
    /// Its NAPI's id.
    pub napi_id: NapiId,
    /// NAPI counters.
    pub napi: NapiStats,
    /// Device counters.
    pub device: DeviceQueueStats,
    /// GRO counters, when GRO is on.
    pub gro: Option<GroStats>,
    /// Segments still held in GRO (0 after a clean stop).
    pub held: u64,
}

/// The result of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The configuration.
    pub config: RunConfig,
    /// Wall time from start to stop (before draining).
    pub elapsed: Duration,
    /// Per queue.
    pub queues: Vec<QueueReport>,
    /// Per NAPI thread.
    pub softnet: Vec<SoftnetStats>,
    /// Packets NAPI received before the stop (the rate's numerator).
    pub received_in_window: u64,
    /// Frames in the region.
    pub frames_total: usize,
    /// Frames back in the pool after the run.
    pub frames_home: usize,
    /// Send-to-delivery latency (with `StackKind::Latency`).
    pub latency: Option<LatencyHist>,
    /// Per worker of the bottom half (steering on; empty otherwise).
    pub workers: Vec<crate::steer::WorkerReport>,
    /// Order at delivery (steering on).
    pub order: Option<crate::steer::OrderReport>,
    /// Accelerated RFS (`--accel-rfs`).
    pub accel_rfs: Option<crate::steer::AccelReport>,
    /// Why the run stopped before its end, if the world made it (the
    /// interface was deleted or went down); the report covers what ran.
    pub stopped_early: Option<String>,
    /// Faults injected by the schedule (`--fault`), beside what they cost
    /// in the device's and the path's own counters.
    pub faults: FaultReport,
}

/// What a fault schedule injected that no other counter shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct FaultReport {
    /// Fill-ring starvation windows of the simulated NIC (their packets
    /// are its `rx_no_buffer`).
    pub starve_windows: u64,
    /// NAPI thread stalls (their cost: `rx_missed` once a ring is full).
    pub stalls: u64,
    /// Time the NAPI threads spent stalled, ms (summed over threads).
    pub stalled_ms: f64,
    /// Stalls of workers that are not NAPI threads (steering on; their
    /// cost: `backlog_full` once a backlog is full).
    pub worker_stalls: u64,
    /// Their time, ms.
    pub worker_stalled_ms: f64,
}

impl Report {
    /// All queues' NAPI counters summed, with what the path counted on
    /// the workers (steering on).
    pub fn napi_total(&self) -> NapiStats {
        crate::steer::napi_total(self.queues.iter().map(|q| &q.napi), &self.workers)
    }

    /// All queues' GRO counters summed (None when GRO is off).
    pub fn gro_total(&self) -> Option<GroStats> {
        let mut t: Option<GroStats> = None;
        for g in self.queues.iter().filter_map(|q| q.gro) {
            t.get_or_insert_with(GroStats::default).merge(&g);
        }
        t
    }

    /// All queues' device counters summed.
    pub fn device_total(&self) -> DeviceQueueStats {
        sum_device(self.queues.iter().map(|q| q.device))
    }

    /// Packets per second received by NAPI during the timed window.
    pub fn rx_pps(&self) -> f64 {
        self.received_in_window as f64 / self.elapsed.as_secs_f64()
    }

    /// True when every packet is accounted for and every frame came home.
    pub fn consistent(&self) -> bool {
        let d = self.device_total();
        let n = self.napi_total();
        let device_ok = matches!(self.config.producer, Producer::Null)
            || d.offered == d.rx_ring + d.rx_missed + d.rx_no_buffer + d.rx_too_long
                && n.received == d.rx_ring;
        let held: u64 = self.queues.iter().map(|q| q.held).sum();
        n.accounted() && held == 0 && device_ok && self.frames_home == self.frames_total
    }
}

pub(crate) fn sum_device(it: impl Iterator<Item = DeviceQueueStats>) -> DeviceQueueStats {
    let mut t = DeviceQueueStats::default();
    for d in it {
        t.offered += d.offered;
        t.rx_ring += d.rx_ring;
        t.rx_missed += d.rx_missed;
        t.rx_no_buffer += d.rx_no_buffer;
        t.rx_too_long += d.rx_too_long;
        t.wakeups += d.wakeups;
    }
    t
}

/// What the reporter sees once per interval: totals so far.
#[derive(Debug, Clone, Default)]
pub struct Tick {
    /// Time since start.
    pub elapsed: Duration,
    /// NAPI counters summed over queues.
    pub napi: NapiStats,
    /// Device counters summed over queues.
    pub device: DeviceQueueStats,
    /// Softnet counters summed over threads.
    pub softnet: SoftnetStats,
    /// Per queue: index, NAPI counters, device counters.
    pub queues: Vec<(u16, NapiStats, DeviceQueueStats)>,
    /// Per worker (steering on): the backlog columns and wakeups so far;
    /// `time_squeeze` and `path` are 0 here (each worker's own, in the
    /// report at the end).
    pub workers: Vec<crate::steer::WorkerReport>,
}

pub(crate) fn queue_report<Q: RxQueue>(n: &Napi<Q>) -> QueueReport {
    QueueReport {
        queue: n.queue().queue_index(),
        napi_id: n.id(),
        napi: *n.stats(),
        device: n.queue().device_stats(),
        gro: n.gro().map(|g| *g.stats()),
        held: n.held(),
    }
}
