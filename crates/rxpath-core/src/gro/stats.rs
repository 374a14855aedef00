//! What GRO counts: why a segment was not merged ([`Check`]), why held
//! packets were flushed ([`FlushReason`]), and the totals ([`GroStats`]).

use serde::Serialize;

/// Why a segment was not merged (each has a counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// Neither TCP nor UDP for a socket that asked for UDP GRO (the
    /// kernel merges plain UDP only for sockets with `UDP_GRO`).
    NotTcp,
    /// IPv4 header with options.
    IpOptions,
    /// IP fragment.
    Fragment,
    /// IPv6 extension header GRO does not handle (fragment), or extension
    /// headers that differ from the held packet's.
    Ipv6ExtHeader,
    /// Checksum wrong (checked when the device did not).
    BadChecksum,
    /// No TCP payload (pure ACK).
    NoPayload,
    /// CWR set on the new segment.
    Cwr,
    /// TCP flags differ (other than CWR, FIN, PSH).
    FlagsDiffer,
    /// ACK number differs.
    AckDiffer,
    /// TCP options differ (byte for byte; timestamps included).
    OptionsDiffer,
    /// IPv4 TTL, TOS or DF differ.
    TtlTosDf,
    /// IPv4 ID neither incrementing nor fixed with DF.
    IpId,
    /// IPv6 traffic class or hop limit differ.
    TclassHopLimit,
    /// Segment longer than the held packet's MSS.
    TooLong,
    /// Sequence number not contiguous.
    SeqGap,
    /// The merged packet would reach 64 KiB.
    SizeLimit,
    /// UDP without a checksum (`udp_gro_receive_segment` merges only
    /// datagrams with one, for symmetry with GSO).
    UdpNoChecksum,
    /// UDP length field of 8 or less, or not the IP payload's (padded or
    /// malicious).
    UdpLength,
}

impl Check {
    /// All checks, in counter order.
    pub const ALL: [Check; 18] = [
        Check::NotTcp,
        Check::IpOptions,
        Check::Fragment,
        Check::Ipv6ExtHeader,
        Check::BadChecksum,
        Check::NoPayload,
        Check::Cwr,
        Check::FlagsDiffer,
        Check::AckDiffer,
        Check::OptionsDiffer,
        Check::TtlTosDf,
        Check::IpId,
        Check::TclassHopLimit,
        Check::TooLong,
        Check::SeqGap,
        Check::SizeLimit,
        Check::UdpNoChecksum,
        Check::UdpLength,
    ];
}

/// Why a held packet was flushed (passed up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FlushReason {
    /// A PSH segment ended it.
    Psh,
    /// A flag ended it (URG, RST, SYN, FIN) or a flag difference/CWR.
    Flags,
    /// A segment shorter than the MSS ended it.
    Short,
    /// Its bucket was full; it was the oldest.
    BucketFull,
    /// It reached the 64 KiB limit.
    Size,
    /// Another check failed for the next segment of its flow.
    Mismatch,
    /// End of a poll (`napi_complete_done`, or older than a tick).
    PollEnd,
    /// The `gro_flush_timeout` timer.
    Timer,
    /// A UDP packet reached `UDP_GRO_CNT_MAX` = 64 segments.
    Count,
}

impl FlushReason {
    /// All reasons, in counter order.
    pub const ALL: [FlushReason; 9] = [
        FlushReason::Psh,
        FlushReason::Flags,
        FlushReason::Short,
        FlushReason::BucketFull,
        FlushReason::Size,
        FlushReason::Mismatch,
        FlushReason::PollEnd,
        FlushReason::Timer,
        FlushReason::Count,
    ];
}

/// Segments-per-packet histogram buckets: 1, 2, 3–4, 5–8, 9–16, 17–32,
/// 33–64, 65+.
pub const SEGS_BUCKETS: usize = 8;

/// GRO counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct GroStats {
    /// Segments (packets) that entered GRO.
    pub packets_in: u64,
    /// Packets passed up (merged chains and normal packets).
    pub packets_out: u64,
    /// Segments passed up inside those packets.
    pub segments_out: u64,
    /// Results by kind: merged, held, normal.
    pub merged: u64,
    /// See `merged`.
    pub held: u64,
    /// See `merged`.
    pub normal: u64,
    /// Segments per packet passed up (see [`SEGS_BUCKETS`]).
    pub segs_hist: [u64; SEGS_BUCKETS],
    /// Flushes by [`FlushReason`] (index = position in `FlushReason::ALL`).
    pub flushes: [u64; 9],
    /// Segments not merged, by [`Check`] (index = position in `Check::ALL`).
    pub not_merged: [u64; 18],
    /// Time from NAPI receive to pass-up, log2 ns buckets (2^i ns).
    pub latency_log2: [u64; 32],
}

impl GroStats {
    /// Mean segments per packet passed up.
    pub fn segs_per_packet(&self) -> f64 {
        if self.packets_out == 0 {
            0.0
        } else {
            self.segments_out as f64 / self.packets_out as f64
        }
    }

    /// Flushes for one reason.
    pub fn flushes(&self, r: FlushReason) -> u64 {
        self.flushes[FlushReason::ALL.iter().position(|&x| x == r).unwrap_or(0)]
    }

    /// Segments not merged for one check.
    pub fn not_merged(&self, c: Check) -> u64 {
        self.not_merged[Check::ALL.iter().position(|&x| x == c).unwrap_or(0)]
    }

    /// Latency quantile estimate (upper bound of the log2 bucket), ns.
    pub fn latency_quantile(&self, q: f64) -> u64 {
        let total: u64 = self.latency_log2.iter().sum();
        if total == 0 {
            return 0;
        }
        let target = (total as f64 * q).ceil() as u64;
        let mut seen = 0;
        for (i, &n) in self.latency_log2.iter().enumerate() {
            seen += n;
            if seen >= target {
                return 1u64 << i;
            }
        }
        1 << 31
    }

    /// Add another instance's counters.
    pub fn merge(&mut self, o: &GroStats) {
        self.packets_in += o.packets_in;
        self.packets_out += o.packets_out;
        self.segments_out += o.segments_out;
        self.merged += o.merged;
        self.held += o.held;
        self.normal += o.normal;
        let add = |a: &mut [u64], b: &[u64]| a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
        add(&mut self.segs_hist, &o.segs_hist);
        add(&mut self.flushes, &o.flushes);
        add(&mut self.not_merged, &o.not_merged);
        add(&mut self.latency_log2, &o.latency_log2);
    }
}
