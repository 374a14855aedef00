//! `TCP_INFO`: `struct tcp_info` in the kernel's layout
//! (`include/uapi/linux/tcp.h`), filled as `tcp_get_info` fills it.

use crate::conn::{Conn, MS};
pub use crate::state::{CaState, Chrono, ChronoType};
use crate::time::Nanos;

/// `tcpi_options` bits.
pub const TCPI_OPT_TIMESTAMPS: u8 = 1;
/// SACK agreed.
pub const TCPI_OPT_SACK: u8 = 2;
/// Window scaling agreed.
pub const TCPI_OPT_WSCALE: u8 = 4;
/// ECN agreed.
pub const TCPI_OPT_ECN: u8 = 8;
/// An ECT or CE segment arrived on an ECN connection.
pub const TCPI_OPT_ECN_SEEN: u8 = 16;
/// The SYN's data was acknowledged (Fast Open).
pub const TCPI_OPT_SYN_DATA: u8 = 32;

/// The kernel's `struct tcp_info`, field for field (bit-fields packed
/// into the bytes they share, low bits first, as GCC lays them out on a
/// little-endian machine).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct TcpInfo {
    pub tcpi_state: u8,
    pub tcpi_ca_state: u8,
    pub tcpi_retransmits: u8,
    pub tcpi_probes: u8,
    pub tcpi_backoff: u8,
    pub tcpi_options: u8,
    /// `tcpi_snd_wscale:4, tcpi_rcv_wscale:4`.
    pub tcpi_wscale: u8,
    /// `tcpi_delivery_rate_app_limited:1, tcpi_fastopen_client_fail:2`.
    pub tcpi_flags: u8,
    pub tcpi_rto: u32,
    pub tcpi_ato: u32,
    pub tcpi_snd_mss: u32,
    pub tcpi_rcv_mss: u32,
    pub tcpi_unacked: u32,
    pub tcpi_sacked: u32,
    pub tcpi_lost: u32,
    pub tcpi_retrans: u32,
    pub tcpi_fackets: u32,
    pub tcpi_last_data_sent: u32,
    pub tcpi_last_ack_sent: u32,
    pub tcpi_last_data_recv: u32,
    pub tcpi_last_ack_recv: u32,
    pub tcpi_pmtu: u32,
    pub tcpi_rcv_ssthresh: u32,
    pub tcpi_rtt: u32,
    pub tcpi_rttvar: u32,
    pub tcpi_snd_ssthresh: u32,
    pub tcpi_snd_cwnd: u32,
    pub tcpi_advmss: u32,
    pub tcpi_reordering: u32,
    pub tcpi_rcv_rtt: u32,
    pub tcpi_rcv_space: u32,
    pub tcpi_total_retrans: u32,
    pub tcpi_pacing_rate: u64,
    pub tcpi_max_pacing_rate: u64,
    pub tcpi_bytes_acked: u64,
    pub tcpi_bytes_received: u64,
    pub tcpi_segs_out: u32,
    pub tcpi_segs_in: u32,
    pub tcpi_notsent_bytes: u32,
    pub tcpi_min_rtt: u32,
    pub tcpi_data_segs_in: u32,
    pub tcpi_data_segs_out: u32,
    pub tcpi_delivery_rate: u64,
    pub tcpi_busy_time: u64,
    pub tcpi_rwnd_limited: u64,
    pub tcpi_sndbuf_limited: u64,
    pub tcpi_delivered: u32,
    pub tcpi_delivered_ce: u32,
    pub tcpi_bytes_sent: u64,
    pub tcpi_bytes_retrans: u64,
    pub tcpi_dsack_dups: u32,
    pub tcpi_reord_seen: u32,
    pub tcpi_rcv_ooopack: u32,
    pub tcpi_snd_wnd: u32,
    pub tcpi_rcv_wnd: u32,
    pub tcpi_rehash: u32,
    pub tcpi_total_rto: u16,
    pub tcpi_total_rto_recoveries: u16,
    pub tcpi_total_rto_time: u32,
    pub tcpi_received_ce: u32,
    pub tcpi_delivered_e1_bytes: u32,
    pub tcpi_delivered_e0_bytes: u32,
    pub tcpi_delivered_ce_bytes: u32,
    pub tcpi_received_e1_bytes: u32,
    pub tcpi_received_e0_bytes: u32,
    pub tcpi_received_ce_bytes: u32,
    /// `tcpi_ecn_mode:2, tcpi_accecn_opt_seen:2, tcpi_accecn_fail_mode:4,
    /// tcpi_options2:24`.
    pub tcpi_ecn_bits: u32,
}

impl TcpInfo {
    /// The bytes a `getsockopt(TCP_INFO)` copies out.
    pub fn as_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(size_of::<Self>());
        out.extend_from_slice(&[
            self.tcpi_state,
            self.tcpi_ca_state,
            self.tcpi_retransmits,
            self.tcpi_probes,
            self.tcpi_backoff,
            self.tcpi_options,
            self.tcpi_wscale,
            self.tcpi_flags,
        ]);
        let u32s = [
            self.tcpi_rto,
            self.tcpi_ato,
            self.tcpi_snd_mss,
            self.tcpi_rcv_mss,
            self.tcpi_unacked,
            self.tcpi_sacked,
            self.tcpi_lost,
            self.tcpi_retrans,
            self.tcpi_fackets,
            self.tcpi_last_data_sent,
            self.tcpi_last_ack_sent,
            self.tcpi_last_data_recv,
            self.tcpi_last_ack_recv,
            self.tcpi_pmtu,
            self.tcpi_rcv_ssthresh,
            self.tcpi_rtt,
            self.tcpi_rttvar,
            self.tcpi_snd_ssthresh,
            self.tcpi_snd_cwnd,
            self.tcpi_advmss,
            self.tcpi_reordering,
            self.tcpi_rcv_rtt,
            self.tcpi_rcv_space,
            self.tcpi_total_retrans,
        ];
        for v in u32s {
            out.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [
            self.tcpi_pacing_rate,
            self.tcpi_max_pacing_rate,
            self.tcpi_bytes_acked,
            self.tcpi_bytes_received,
        ] {
            out.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [
            self.tcpi_segs_out,
            self.tcpi_segs_in,
            self.tcpi_notsent_bytes,
            self.tcpi_min_rtt,
            self.tcpi_data_segs_in,
            self.tcpi_data_segs_out,
        ] {
            out.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [
            self.tcpi_delivery_rate,
            self.tcpi_busy_time,
            self.tcpi_rwnd_limited,
            self.tcpi_sndbuf_limited,
        ] {
            out.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [self.tcpi_delivered, self.tcpi_delivered_ce] {
            out.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [self.tcpi_bytes_sent, self.tcpi_bytes_retrans] {
            out.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [
            self.tcpi_dsack_dups,
            self.tcpi_reord_seen,
            self.tcpi_rcv_ooopack,
            self.tcpi_snd_wnd,
            self.tcpi_rcv_wnd,
            self.tcpi_rehash,
        ] {
            out.extend_from_slice(&v.to_ne_bytes());
        }
        out.extend_from_slice(&self.tcpi_total_rto.to_ne_bytes());
        out.extend_from_slice(&self.tcpi_total_rto_recoveries.to_ne_bytes());
        out.extend_from_slice(&self.tcpi_total_rto_time.to_ne_bytes());
        for v in [
            self.tcpi_received_ce,
            self.tcpi_delivered_e1_bytes,
            self.tcpi_delivered_e0_bytes,
            self.tcpi_delivered_ce_bytes,
            self.tcpi_received_e1_bytes,
            self.tcpi_received_e0_bytes,
            self.tcpi_received_ce_bytes,
            self.tcpi_ecn_bits,
        ] {
            out.extend_from_slice(&v.to_ne_bytes());
        }
        out.resize(size_of::<Self>(), 0);
        out
    }
}

impl Conn {
    /// `tcp_get_info`.
    pub fn tcp_info(&self, now: Nanos) -> TcpInfo {
        let ms_since = |t: Nanos| (now.saturating_sub(t) / MS) as u32;
        let mut options = 0;
        if self.ts_ok {
            options |= TCPI_OPT_TIMESTAMPS;
        }
        if self.sack_ok {
            options |= TCPI_OPT_SACK;
        }
        if self.wscale_ok {
            options |= TCPI_OPT_WSCALE;
        }
        if self.ecn.ok() {
            options |= TCPI_OPT_ECN;
        }
        if self.ecn.seen() {
            options |= TCPI_OPT_ECN_SEEN;
        }
        if self.fo.syn_data_acked {
            options |= TCPI_OPT_SYN_DATA;
        }
        let (snd_ws, rcv_ws) = if self.wscale_ok {
            (self.snd_wscale, self.rcv_wscale)
        } else {
            (0, 0)
        };
        TcpInfo {
            tcpi_state: self.state.kernel_code(),
            tcpi_ca_state: self.ca_state as u8,
            tcpi_retransmits: self.retransmits.min(255) as u8,
            tcpi_probes: self.probes_out.min(255) as u8,
            tcpi_backoff: self.backoff.min(255) as u8,
            tcpi_options: options,
            tcpi_wscale: (snd_ws & 0xf) | ((rcv_ws & 0xf) << 4),
            tcpi_flags: 0,
            tcpi_rto: (self.rto / 1000) as u32,
            tcpi_ato: (self.ack.ato / 1000) as u32,
            tcpi_snd_mss: self.mss_cache,
            tcpi_rcv_mss: self.ack.rcv_mss,
            tcpi_unacked: self.packets_out_all(),
            tcpi_sacked: self.sacked_out(),
            tcpi_lost: self.lost_out(),
            tcpi_retrans: self.retrans_out(),
            tcpi_fackets: 0,
            tcpi_last_data_sent: ms_since(self.lsndtime),
            tcpi_last_ack_sent: 0,
            tcpi_last_data_recv: ms_since(self.ack.lrcvtime),
            tcpi_last_ack_recv: ms_since(self.rcv_tstamp),
            tcpi_pmtu: 1500,
            tcpi_rcv_ssthresh: self.rcv_ssthresh,
            tcpi_rtt: (self.srtt_us >> 3) as u32,
            tcpi_rttvar: (self.mdev_us >> 2) as u32,
            tcpi_snd_ssthresh: self.snd_ssthresh,
            tcpi_snd_cwnd: self.snd_cwnd,
            tcpi_advmss: self.advmss
                - if self.ts_ok && self.synchronized() {
                    12
                } else {
                    0
                },
            tcpi_reordering: self.reordering,
            tcpi_rcv_rtt: self.rcv_rtt.rtt_us >> 3,
            tcpi_rcv_space: self.rcvq_space.space,
            tcpi_total_retrans: self.total_retrans,
            tcpi_pacing_rate: self.pacing_rate(),
            tcpi_max_pacing_rate: u64::MAX,
            tcpi_bytes_acked: self.bytes_acked,
            tcpi_bytes_received: self.bytes_received,
            tcpi_segs_out: self.segs_out,
            tcpi_segs_in: self.segs_in,
            tcpi_notsent_bytes: self.unsent(),
            tcpi_min_rtt: if self.min_rtt_us > u32::MAX as u64 {
                u32::MAX
            } else {
                self.min_rtt_us as u32
            },
            tcpi_data_segs_in: self.data_segs_in,
            tcpi_data_segs_out: self.data_segs_out,
            tcpi_delivery_rate: 0,
            tcpi_busy_time: self.chrono.busy(now) / 1000,
            tcpi_rwnd_limited: self.chrono.rwnd_limited(now) / 1000,
            tcpi_sndbuf_limited: self.chrono.sndbuf_limited(now) / 1000,
            tcpi_delivered: self.delivered,
            tcpi_delivered_ce: self.ecn.delivered_ce,
            tcpi_bytes_sent: self.bytes_sent,
            tcpi_bytes_retrans: self.bytes_retrans,
            tcpi_dsack_dups: 0,
            tcpi_reord_seen: self.reord_seen,
            tcpi_rcv_ooopack: self.rcv_ooopack,
            tcpi_snd_wnd: self.snd_wnd,
            tcpi_rcv_wnd: self.rcv_wnd,
            tcpi_rehash: 0,
            tcpi_total_rto: self.total_rto,
            tcpi_total_rto_recoveries: 0,
            tcpi_total_rto_time: 0,
            ..TcpInfo::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_the_kernels() {
        // 6.18: 8 bytes of u8s, 24 u32s, 4 u64s, 6 u32s, 4 u64s, 2 u32s,
        // 2 u64s, 6 u32s, 2 u16s, 9 u32s (the accurate-ECN counters and
        // bits): 280 bytes.
        assert_eq!(size_of::<TcpInfo>(), 280);
        let i = TcpInfo {
            tcpi_snd_cwnd: 10,
            tcpi_wscale: 7 | (8 << 4),
            ..TcpInfo::default()
        };
        let b = i.as_bytes();
        assert_eq!(b.len(), 280);
        assert_eq!(b[6], 0x87);
        // tcpi_snd_cwnd is the 19th u32 after the 8 leading bytes.
        assert_eq!(
            u32::from_ne_bytes(b[8 + 18 * 4..8 + 19 * 4].try_into().unwrap()),
            10
        );
    }
}
