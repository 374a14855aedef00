//! Counters, named as the kernel names them.
//!
//! Every packet NAPI takes from a queue is accounted for: it is delivered
//! (reached the end of the path) or dropped with a named [`DropReason`].
//! [`NapiStats::accounted`] checks `received = delivered + Σ dropped`, and the
//! tests assert it under load. Device-level losses (`rx_missed`,
//! `rx_no_buffer`) happen before NAPI sees a packet and are kept by the device
//! ([`rxpath_frames::DeviceQueueStats`]).

use serde::Serialize;
use std::fmt;

/// Why a packet was dropped. Each reason has its own counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DropReason {
    /// A header was truncated or inconsistent.
    Malformed,
    /// Not IPv4/IPv6, or an IP protocol the path does not handle.
    UnhandledProto,
    /// Dropped on purpose at the lowest RX level (the `rxdrop` benchmark,
    /// like XDP_DROP or the seed's drop point in the driver).
    Rxdrop,
    /// Dropped by the filter stage (`DROP`, or a chain policy of `DROP`).
    Filter,
    /// The worker's backlog was full (`netdev_max_backlog`).
    BacklogFull,
    /// No socket bound to the destination.
    NoSocket,
    /// The socket's receive queue was full (SO_RCVBUF).
    SocketQueueFull,
    /// The UDP checksum did not verify (`UDP_MIB_CSUMERRORS`).
    BadChecksum,
    /// IP header errors: version, header length, header checksum, options,
    /// extension headers (`InHdrErrors`).
    IpHeader,
    /// Not for this host: another MAC, a VLAN it does not serve, a
    /// destination address not its own, a martian source.
    NotForUs,
    /// An IP fragment (rxpath does not reassemble: `ReasmFails`).
    Fragment,
    /// Rejected by the filter stage (`REJECT`: a drop; rxpath sends no
    /// ICMP error or TCP reset in its place).
    FilterReject,
    /// The flow limit of a nearly full backlog took the packet: its flow
    /// held more than half of the last 128 packets (`flow_limit_count`).
    FlowLimit,
    /// The `spread` reorder window was full (as padata's `-EBUSY` when
    /// too many objects are in flight).
    ReorderFull,
}

impl DropReason {
    /// All reasons, in counter order.
    pub const ALL: [DropReason; 14] = [
        DropReason::Malformed,
        DropReason::UnhandledProto,
        DropReason::Rxdrop,
        DropReason::Filter,
        DropReason::BacklogFull,
        DropReason::NoSocket,
        DropReason::SocketQueueFull,
        DropReason::BadChecksum,
        DropReason::IpHeader,
        DropReason::NotForUs,
        DropReason::Fragment,
        DropReason::FilterReject,
        DropReason::FlowLimit,
        DropReason::ReorderFull,
    ];

    /// The counter's name.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::UnhandledProto => "unhandled_proto",
            DropReason::Rxdrop => "rxdrop",
            DropReason::Filter => "filter",
            DropReason::BacklogFull => "backlog_full",
            DropReason::NoSocket => "no_socket",
            DropReason::SocketQueueFull => "socket_queue_full",
            DropReason::BadChecksum => "bad_checksum",
            DropReason::IpHeader => "ip_header",
            DropReason::NotForUs => "not_for_us",
            DropReason::Fragment => "fragment",
            DropReason::FilterReject => "filter_reject",
            DropReason::FlowLimit => "flow_limit",
            DropReason::ReorderFull => "reorder_full",
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Drop counters by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drops([u64; DropReason::ALL.len()]);

impl Drops {
    /// Count one drop.
    #[inline]
    pub fn add(&mut self, r: DropReason, n: u64) {
        self.0[r as usize] += n;
    }
    /// The counter for `r`.
    pub fn get(&self, r: DropReason) -> u64 {
        self.0[r as usize]
    }
    /// Sum over reasons.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
    /// Non-zero counters with their names.
    pub fn iter(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL
            .iter()
            .map(|&r| (r, self.get(r)))
            .filter(|&(_, n)| n > 0)
    }
    fn merge(&mut self, o: &Drops) {
        for (a, b) in self.0.iter_mut().zip(o.0.iter()) {
            *a += b;
        }
    }
}

impl Serialize for Drops {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(DropReason::ALL.len()))?;
        for r in DropReason::ALL {
            m.serialize_entry(r.name(), &self.get(r))?;
        }
        m.end()
    }
}

/// Counters of one NAPI instance (one device queue).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct NapiStats {
    /// Packets taken from the queue.
    pub received: u64,
    /// Bytes taken from the queue.
    pub bytes: u64,
    /// Packets that reached the end of the path.
    pub delivered: u64,
    /// Dropped packets by reason.
    pub dropped: Drops,
    /// Calls of `poll`.
    pub polls: u64,
    /// Polls that used their whole budget (stayed scheduled).
    pub polls_full: u64,
    /// Bundles handed to the stack (RX bulking).
    pub bundles: u64,
    /// `napi_complete_done` calls that completed the NAPI.
    pub completions: u64,
    /// Interrupts taken (`napi_schedule` from the IRQ line).
    pub wakeups: u64,
    /// Completions that left the interrupt masked and armed the timer
    /// instead (`napi_defer_hard_irqs`).
    pub irq_deferrals: u64,
    /// SNMP counters of the IP and UDP input this NAPI ran.
    pub snmp: crate::snmp::Snmp,
}

impl NapiStats {
    /// `received == delivered + Σ dropped`.
    pub fn accounted(&self) -> bool {
        self.received == self.delivered + self.dropped.total()
    }

    /// Add another instance's counters.
    pub fn merge(&mut self, o: &NapiStats) {
        self.received += o.received;
        self.bytes += o.bytes;
        self.delivered += o.delivered;
        self.dropped.merge(&o.dropped);
        self.polls += o.polls;
        self.polls_full += o.polls_full;
        self.bundles += o.bundles;
        self.completions += o.completions;
        self.wakeups += o.wakeups;
        self.irq_deferrals += o.irq_deferrals;
        self.snmp.merge(&o.snmp);
    }
}

/// Per-thread `softnet_stat` counters (`/proc/net/softnet_stat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SoftnetStats {
    /// Packets processed by `net_rx_action` on this thread.
    pub processed: u64,
    /// Times `net_rx_action` stopped with work left because `netdev_budget`
    /// or `netdev_budget_usecs` ran out.
    pub time_squeeze: u64,
    /// `net_rx_action` invocations.
    pub rx_actions: u64,
}

impl SoftnetStats {
    /// Add another thread's counters.
    pub fn merge(&mut self, o: &SoftnetStats) {
        self.processed += o.processed;
        self.time_squeeze += o.time_squeeze;
        self.rx_actions += o.rx_actions;
    }
}

/// A latency histogram: 100 ns buckets below 100 µs (where request/response
/// latencies of a few µs must be told apart), 1 µs buckets up to
/// [`LatencyHist::MAX_US`] µs, and one overflow bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatencyHist {
    buckets: Vec<u64>,
    count: u64,
    sum_ns: u128,
}

/// Width of the fine buckets, ns.
const FINE_NS: u64 = 100;
/// Where the fine buckets end, ns.
const FINE_END_NS: u64 = 100_000;
const FINE_BUCKETS: usize = (FINE_END_NS / FINE_NS) as usize;

impl Default for LatencyHist {
    fn default() -> Self {
        LatencyHist {
            buckets: vec![0; Self::bucket(u64::MAX) + 1],
            count: 0,
            sum_ns: 0,
        }
    }
}

impl LatencyHist {
    /// The last bucket counts everything at or above this many µs.
    pub const MAX_US: usize = 20_000;

    #[inline]
    fn bucket(ns: u64) -> usize {
        if ns < FINE_END_NS {
            (ns / FINE_NS) as usize
        } else {
            let coarse = ((ns - FINE_END_NS) / 1000) as usize;
            FINE_BUCKETS + coarse.min(Self::MAX_US - (FINE_END_NS / 1000) as usize)
        }
    }

    /// The upper edge of bucket `i`, ns.
    fn upper_ns(i: usize) -> u64 {
        if i < FINE_BUCKETS {
            (i as u64 + 1) * FINE_NS
        } else {
            FINE_END_NS + (i - FINE_BUCKETS) as u64 * 1000 + 1000
        }
    }

    /// Record one sample.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.buckets[Self::bucket(ns)] += 1;
        self.count += 1;
        self.sum_ns += ns as u128;
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Mean, ns.
    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.count as f64
        }
    }

    /// Quantile `q` (0..=1), as the upper edge of its bucket (100 ns wide
    /// below 100 µs, 1 µs above), in ns.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let target = ((self.count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= target {
                return Self::upper_ns(i);
            }
        }
        Self::upper_ns(self.buckets.len() - 1)
    }

    /// Sum of all samples, ns.
    pub fn sum_ns(&self) -> u128 {
        self.sum_ns
    }

    /// The samples per coarser bucket, for an exporter: `edges_ns` are
    /// ascending upper edges; sample buckets are assigned to the first edge
    /// at or above their own upper edge; the last element counts the rest
    /// (+Inf). Not cumulative.
    pub fn coarse(&self, edges_ns: &[u64]) -> Vec<u64> {
        let mut out = vec![0; edges_ns.len() + 1];
        for (i, &n) in self.buckets.iter().enumerate() {
            if n == 0 {
                continue;
            }
            let up = Self::upper_ns(i);
            let at = edges_ns
                .iter()
                .position(|&e| up <= e)
                .unwrap_or(edges_ns.len());
            out[at] += n;
        }
        out
    }

    /// Add another histogram.
    pub fn merge(&mut self, o: &LatencyHist) {
        for (a, b) in self.buckets.iter_mut().zip(&o.buckets) {
            *a += b;
        }
        self.count += o.count;
        self.sum_ns += o.sum_ns;
    }
}

impl Serialize for LatencyHist {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("count", &self.count)?;
        m.serialize_entry("mean_ns", &self.mean_ns())?;
        m.serialize_entry("p50_ns", &self.quantile_ns(0.5))?;
        m.serialize_entry("p99_ns", &self.quantile_ns(0.99))?;
        m.end()
    }
}

#[cfg(test)]
mod latency_tests {
    use super::LatencyHist;

    #[test]
    fn fine_below_100us_coarse_above_and_an_overflow_bucket() {
        let mut h = LatencyHist::default();
        for ns in [3_150, 3_180, 3_420, 150_400, 90_000_000_000] {
            h.record(ns);
        }
        assert_eq!(h.count(), 5);
        assert_eq!(h.quantile_ns(0.2), 3_200, "100 ns buckets");
        assert_eq!(h.quantile_ns(0.6), 3_500);
        assert_eq!(h.quantile_ns(0.8), 151_000, "1 µs buckets");
        assert_eq!(
            h.quantile_ns(1.0),
            (LatencyHist::MAX_US as u64 + 1) * 1000,
            "overflow"
        );
        let mut m = LatencyHist::default();
        m.merge(&h);
        assert_eq!(m, h);
        // For an exporter: 3.15 µs and 3.18 µs fall in (3.1, 3.2] µs, at
        // or below 5 µs; 3.42 µs too; 150.4 µs below 200 µs; 90 s above all.
        assert_eq!(h.coarse(&[1_000, 5_000, 200_000]), vec![0, 3, 1, 1]);
        assert_eq!(h.sum_ns(), 3_150 + 3_180 + 3_420 + 150_400 + 90_000_000_000);
    }
}
