//! One connection's state: the kernel's `tcp_sock` with its
//! `inet_connection_sock` parts (`icsk_ack`, the retransmission timer).
//!
//! The fields carry the kernel's names where there is one (`snd_una`,
//! `rcv_nxt`, `rcv_wup`, `ts_recent`, `srtt_us`, ...), so `tcp_input.c`
//! reads beside this code.

use std::collections::VecDeque;
use std::net::SocketAddr;

use crate::time::Nanos;

/// Milliseconds in [`Nanos`].
pub const MS: Nanos = 1_000_000;
/// `TCP_TIMEOUT_INIT`: the RTO before a round trip was measured.
pub const TCP_TIMEOUT_INIT: Nanos = 1000 * MS;
/// `TCP_RTO_MIN`.
pub const TCP_RTO_MIN: Nanos = 200 * MS;
/// `TCP_RTO_MAX`.
pub const TCP_RTO_MAX: Nanos = 120_000 * MS;
/// `TCP_DELACK_MIN` and `TCP_ATO_MIN`.
pub const TCP_DELACK_MIN: Nanos = 40 * MS;
/// `TCP_DELACK_MAX`.
pub const TCP_DELACK_MAX: Nanos = 200 * MS;
/// `TCP_TIMEWAIT_LEN`.
pub const TCP_TIMEWAIT_LEN: Nanos = 60_000 * MS;
/// `TCP_INIT_CWND`.
pub const TCP_INIT_CWND: u32 = 10;
/// `TCP_MAX_QUICKACKS`.
pub const TCP_MAX_QUICKACKS: u32 = 16;
/// `TCP_PINGPONG_THRESH`: replies within an ATO that make a connection
/// interactive (its ACKs delayed to ride on the replies).
pub const TCP_PINGPONG_THRESH: u32 = 1;
/// `TCP_MSS_DEFAULT`: the MSS assumed when a SYN carries none.
pub const TCP_MSS_DEFAULT: u32 = 536;
/// `TCP_INFINITE_SSTHRESH`.
pub const TCP_INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

/// The TCP states, as `include/net/tcp_states.h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// No connection.
    Closed,
    /// Waiting for SYNs.
    Listen,
    /// SYN sent, waiting for the SYN-ACK.
    SynSent,
    /// SYN received and answered, waiting for its ACK.
    SynRecv,
    /// Open.
    Established,
    /// FIN sent, not acknowledged.
    FinWait1,
    /// FIN acknowledged, the peer's not received.
    FinWait2,
    /// The peer's FIN received; ours not sent.
    CloseWait,
    /// Both FINs sent, ours not acknowledged.
    Closing,
    /// The peer closed first; our FIN sent.
    LastAck,
    /// Both sides closed; waiting out old duplicates.
    TimeWait,
}

impl State {
    /// The number `struct tcp_info`'s `tcpi_state` and `/proc/net/tcp` use.
    pub fn kernel_code(self) -> u8 {
        match self {
            State::Established => 1,
            State::SynSent => 2,
            State::SynRecv => 3,
            State::FinWait1 => 4,
            State::FinWait2 => 5,
            State::TimeWait => 6,
            State::Closed => 7,
            State::CloseWait => 8,
            State::LastAck => 9,
            State::Listen => 10,
            State::Closing => 11,
        }
    }
}

/// A segment sent and not yet acknowledged (the retransmission queue's
/// skb): its sequence range and flags, kept so a retransmission repeats
/// what was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// First sequence number.
    pub seq: u32,
    /// One past the last (SYN and FIN included).
    pub end_seq: u32,
    /// Carries SYN.
    pub syn: bool,
    /// Carries FIN.
    pub fin: bool,
    /// When it was last sent.
    pub sent_at: Nanos,
    /// Sent with PSH.
    pub psh: bool,
    /// Retransmitted at some time (`TCPCB_EVER_RETRANS`: no RTT sample
    /// from its ACK, Karn).
    pub ever_retrans: bool,
    /// Retransmitted, and the retransmission not yet deemed lost
    /// (`TCPCB_SACKED_RETRANS`).
    pub retrans: bool,
    /// SACKed by the peer.
    pub sacked: bool,
    /// Marked lost (RACK, or a timeout), to be retransmitted.
    pub lost: bool,
}

/// What the transmit timer is armed for (`ICSK_TIME_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XmitTimer {
    /// `ICSK_TIME_RETRANS`.
    Retrans,
    /// `ICSK_TIME_LOSS_PROBE`.
    LossProbe,
    /// `ICSK_TIME_PROBE0`: the zero-window probe.
    Probe0,
    /// `ICSK_TIME_REO_TIMEOUT`: RACK's reordering window.
    ReoTimeout,
}

/// The delayed-ACK machine (`icsk_ack`).
#[derive(Debug, Clone, Default)]
pub struct AckState {
    /// An ACK is owed (`ICSK_ACK_SCHED`).
    pub pending: bool,
    /// ACK at once, whatever the delayed-ACK rules say (`ICSK_ACK_NOW`).
    pub force: bool,
    /// The delayed-ACK timer's deadline (`ICSK_ACK_TIMER`).
    pub timer: Option<Nanos>,
    /// Quick ACKs left (`quick`).
    pub quick: u32,
    /// Interactive-mode count (`pingpong`).
    pub pingpong: u32,
    /// The ACK timeout (`ato`).
    pub ato: Nanos,
    /// When data last arrived (`lrcvtime`).
    pub lrcvtime: Nanos,
    /// The largest segment received, an estimate of the peer's MSS
    /// (`rcv_mss`).
    pub rcv_mss: u32,
    /// The last small segment's length when it looked full-sized, its
    /// headers taken off (`last_seg_size`).
    pub last_seg_size: u32,
    /// `ICSK_ACK_PUSHED` (bit 0: a pushed or short segment arrived) and
    /// `ICSK_ACK_PUSHED2` (bit 1: a second one), cleared with the owed ACK.
    pub pushed: u8,
}

/// `ICSK_ACK_PUSHED`.
pub(crate) const ACK_PUSHED: u8 = 1;
/// `ICSK_ACK_PUSHED2`.
pub(crate) const ACK_PUSHED2: u8 = 2;
/// `TCP_MIN_MSS`.
pub(crate) const TCP_MIN_MSS: u32 = 88;

/// One TCP connection.
#[derive(Debug, Clone)]
pub struct Conn {
    /// The state.
    pub state: State,
    /// This end.
    pub local: SocketAddr,
    /// The peer.
    pub remote: SocketAddr,

    // Send side.
    /// Initial send sequence.
    pub iss: u32,
    /// Oldest unacknowledged.
    pub snd_una: u32,
    /// Next to send.
    pub snd_nxt: u32,
    /// The sequence after the last byte the application wrote (FIN
    /// excluded).
    pub write_seq: u32,
    /// The peer's window, scaled.
    pub snd_wnd: u32,
    /// The segment that last updated the window.
    pub snd_wl1: u32,
    /// Largest window the peer offered.
    pub max_window: u32,
    /// The peer's window-scale shift.
    pub snd_wscale: u8,
    /// Bytes from `snd_una` (SYN excluded) to `write_seq`.
    pub sndbuf: VecDeque<u8>,
    /// Sent and unacknowledged segments, oldest first.
    pub rtx: VecDeque<Sent>,
    /// The end of the last segment shorter than the MSS (`snd_sml`, for
    /// Nagle's Minshall rule).
    pub snd_sml: u32,
    /// Window scaling agreed on both sides.
    pub wscale_ok: bool,
    /// The smallest RTT seen, µs (`tcp_min_rtt`; large before a sample).
    pub min_rtt_us: u64,
    /// Where unsent skbs end, inside (`snd_nxt`, `write_seq`): a packet
    /// never spans two (the kernel sends skb by skb). A boundary comes from
    /// `size_goal` or `MSG_EOR`.
    pub skb_ends: VecDeque<u32>,
    /// The tail skb was closed by `MSG_EOR`: the next write starts another.
    pub eor_tail: bool,
    /// PSH goes on the packets that carry these sequences' last bytes
    /// (`tcp_mark_push` on each skb a write without `MSG_MORE` ended in).
    pub push_marks: VecDeque<u32>,
    /// `write_seq` at the last push mark (`pushed_seq`).
    pub pushed_seq: u32,
    /// The program set `SO_SNDBUF` (`SOCK_SNDBUF_LOCK`): no autotuning.
    pub sndbuf_locked: bool,
    /// `tcp_min_tso_segs` when the connection was made.
    pub min_tso_segs: u32,
    /// The device segments (TSO or GSO): skbs grow to `size_goal`.
    pub gso: bool,
    /// `TCP_MAXSEG` set by the program (`user_mss`).
    pub user_mss: Option<u32>,
    /// Fast Open (the client's half).
    pub fo: crate::state::ClientFo,
    /// `TCP_SYNCNT` (`icsk_syn_retries`): none, the sysctl's.
    pub syn_retries: Option<u8>,
    /// A writer waits for the handshake to end (`sk_write_pending`): the
    /// SYN-ACK's ACK waits for the data it is about to write.
    pub write_pending: bool,
    /// `TCP_NOTSENT_LOWAT`.
    pub notsent_lowat: u32,
    /// `IP_TOS` (IPv6: the traffic class).
    pub tos: u8,
    /// ECN (`ecn_flags`).
    pub ecn: crate::ecn::Ecn,
    /// `SO_KEEPALIVE`, and the keepalive timer's deadline.
    pub keepalive: bool,
    /// See `keepalive`.
    pub ka_at: Option<Nanos>,
    /// `TCP_KEEPIDLE`, `TCP_KEEPINTVL` (seconds), `TCP_KEEPCNT`; `None`:
    /// the sysctls'.
    pub keep_idle: Option<u32>,
    /// See `keep_idle`.
    pub keep_intvl: Option<u32>,
    /// See `keep_idle`.
    pub keep_cnt: Option<u8>,
    /// The application closed its sending side: a FIN follows `write_seq`.
    pub fin_queued: bool,
    /// The MSS the peer accepts (its option, or 536), before options.
    pub mss_clamp: u32,
    /// The MSS this end advertised.
    pub advmss: u32,
    /// Data per segment: the MSS less the options every segment carries
    /// (`mss_cache`).
    pub mss_cache: u32,
    /// The path MTU `mss_cache` was last sized for (`icsk_pmtu_cookie`).
    pub pmtu_cookie: u32,
    /// A listener's child: its listener's `TCP_DEFER_ACCEPT`, in SYN-ACK
    /// retransmissions (`rskq_defer_accept`).
    pub defer_accept: u8,
    /// A bare ACK came while deferring (`inet_rsk(req)->acked`).
    pub defer_acked: bool,
    /// `TCP_NODELAY`.
    pub nodelay: bool,
    /// `TCP_CORK`.
    pub cork: bool,
    /// The send buffer's size (`sk_sndbuf`).
    pub sk_sndbuf: u32,
    /// Congestion window in segments.
    pub snd_cwnd: u32,
    /// Slow-start threshold.
    pub snd_ssthresh: u32,
    /// Additive-increase credit.
    pub snd_cwnd_cnt: u32,
    /// Duplicate ACKs counted as SACKs without SACK (`sacked_out` of a
    /// Reno connection).
    pub reno_sacked: u32,
    /// `snd_nxt` when Recovery or Loss began (`high_seq`).
    pub high_seq: u32,
    /// The end of the highest SACKed segment (`tcp_highest_sack_seq`).
    pub highest_sack: u32,
    /// Whether `highest_sack` holds a SACKed sequence.
    pub sacked_before: bool,
    /// Reordering events seen (`reord_seen`).
    pub reord_seen: u32,
    /// CUBIC's state.
    pub cubic: crate::cubic::Cubic,
    /// The window and threshold before the reduction (`prior_cwnd`,
    /// `prior_ssthresh`), for undo and PRR.
    pub prior_cwnd: u32,
    /// See `prior_cwnd`.
    pub prior_ssthresh: u32,
    /// PRR's delivered and sent counts.
    pub prr_delivered: u32,
    /// See `prr_delivered`.
    pub prr_out: u32,
    /// Undo: where the recovery began, and retransmissions not proved
    /// needless (`undo_marker`, `undo_retrans`).
    pub undo_marker: Option<u32>,
    /// See `undo_marker`.
    pub undo_retrans: i32,
    /// The timestamp of the first retransmission (`retrans_stamp`).
    pub retrans_stamp: Option<u32>,
    /// The last echoed timestamp (`rcv_tsecr`).
    pub rcv_tsecr: u32,
    /// RACK.
    pub rack: crate::state::Rack,
    /// F-RTO is under way.
    pub frto: bool,
    /// `is_cwnd_limited`, `max_packets_out`, `cwnd_usage_seq`.
    pub cwnd_limited: bool,
    /// See `cwnd_limited`.
    pub max_packets_out: u32,
    /// See `cwnd_limited`.
    pub cwnd_usage_seq: u32,

    // Receive side.
    /// Initial receive sequence.
    pub irs: u32,
    /// Next expected.
    pub rcv_nxt: u32,
    /// `rcv_nxt` when the window was last advertised.
    pub rcv_wup: u32,
    /// The window last advertised, in bytes.
    pub rcv_wnd: u32,
    /// Where the window may grow to (`rcv_ssthresh`).
    pub rcv_ssthresh: u32,
    /// The largest window this end will advertise (`window_clamp`).
    pub window_clamp: u32,
    /// This end's window-scale shift.
    pub rcv_wscale: u8,
    /// In-order data not yet read.
    pub rcvq: VecDeque<u8>,
    /// Out-of-order segments, by sequence.
    pub ofo: Vec<(u32, Vec<u8>)>,
    /// The receive buffer's size (`sk_rcvbuf`), grown by autotuning
    /// (`rcvbuf.rs`).
    pub sk_rcvbuf: u32,
    /// The program set `SO_RCVBUF` (`SOCK_RCVBUF_LOCK`): no autotuning.
    pub rcvbuf_locked: bool,
    /// Bytes the program has read (`copied_seq`, from the start).
    pub copied: u64,
    /// `rcvq_space`: what the program reads per receiver RTT.
    pub rcvq_space: crate::state::RcvqSpace,
    /// `rcv_rtt_est`: the receiver's RTT.
    pub rcv_rtt: crate::state::RcvRtt,
    /// `rcv_rtt_last_tsecr`: the echo the last RTT sample came from.
    pub rcv_rtt_last_tsecr: u32,
    /// The peer's FIN has been taken in order.
    pub fin_rcvd: bool,

    // Options.
    /// Timestamps on.
    pub ts_ok: bool,
    /// The last timestamp worth echoing.
    pub ts_recent: u32,
    /// When `ts_recent` was stored.
    pub ts_recent_stamp: Nanos,
    /// This connection's timestamp offset (`tsoffset`).
    pub ts_off: u32,
    /// SACK on.
    pub sack_ok: bool,
    /// SACK blocks to report, newest first (`selective_acks`).
    pub sacks: Vec<(u32, u32)>,
    /// A D-SACK block to report once (`duplicate_sack`).
    pub dsack: Option<(u32, u32)>,

    // Timers and round trips.
    /// Delayed-ACK state.
    pub ack: AckState,
    /// Smoothed RTT in µs, shifted left by 3 (`srtt_us`); 0 before the
    /// first sample.
    pub srtt_us: u64,
    /// Mean deviation in µs, shifted left by 2 (`mdev_us`).
    pub mdev_us: u64,
    /// Largest `mdev_us` in the current window (`mdev_max_us`).
    pub mdev_max_us: u64,
    /// `rttvar_us`.
    pub rttvar_us: u64,
    /// `snd_una` when `rttvar_us` was last reset (`rtt_seq`).
    pub rtt_seq: u32,
    /// The retransmission timeout before backoff (`icsk_rto`).
    pub rto: Nanos,
    /// Exponential backoff count (`icsk_backoff`).
    pub backoff: u32,
    /// Retransmissions of the current head (`icsk_retransmits`).
    pub retransmits: u32,
    /// Every retransmission of this connection (`total_retrans`).
    pub total_retrans: u32,
    /// The transmit timer's deadline (`icsk_retransmit_timer`) and what
    /// it is armed for (`icsk_pending`).
    pub rto_at: Option<Nanos>,
    /// What `rto_at` is armed for.
    pub xmit_timer: XmitTimer,
    /// A tail-loss probe is out and unanswered up to here
    /// (`tlp_high_seq`).
    pub tlp_high_seq: Option<u32>,
    /// Zero-window probes sent without an answer (`icsk_probes_out`).
    pub probes_out: u32,
    /// TIME_WAIT's end, or an orphan FIN_WAIT2's.
    pub close_at: Option<Nanos>,
    /// When data was last sent (`lsndtime`).
    pub lsndtime: Nanos,

    // Accounting (`tcp_info`).
    /// The congestion-avoidance state.
    pub ca_state: crate::state::CaState,
    /// When the last ACK arrived (`rcv_tstamp`).
    pub rcv_tstamp: Nanos,
    /// `tcp_reordering`: the reordering degree assumed.
    pub reordering: u32,
    /// Bytes acknowledged.
    pub bytes_acked: u64,
    /// Bytes received in order.
    pub bytes_received: u64,
    /// Bytes sent, retransmissions included.
    pub bytes_sent: u64,
    /// Bytes retransmitted.
    pub bytes_retrans: u64,
    /// Segments sent and received, and those carrying data.
    pub segs_out: u32,
    /// See `segs_out`.
    pub segs_in: u32,
    /// See `segs_out`.
    pub data_segs_out: u32,
    /// See `segs_out`.
    pub data_segs_in: u32,
    /// Segments delivered (acknowledged or SACKed).
    pub delivered: u32,
    /// Segments received out of order.
    pub rcv_ooopack: u32,
    /// Retransmission timeouts.
    pub total_rto: u16,
    /// Busy, window- and buffer-limited times.
    pub chrono: crate::state::Chrono,

    // Wakeups, for edge-triggered readiness.
    /// Data, a FIN or a state change arrived (`sk_data_ready`,
    /// `sk_state_change`): bumped each time.
    pub wake_in: u64,
    /// Send space opened after someone found none (`sk_write_space`),
    /// or the state changed.
    pub wake_out: u64,
    /// A poll or a write found no send space (`SOCK_NOSPACE`).
    pub nospace: bool,

    // The socket around it.
    /// A pending error (`sk_err`), taken by the next call.
    pub err: Option<i32>,
    /// The error an ICMP message reported, given if the connection times
    /// out (`sk_err_soft`).
    pub err_soft: Option<i32>,
    /// The reading side was shut down.
    pub shut_rd: bool,
    /// The writing side was shut down.
    pub shut_wr: bool,
    /// `close()` was called: no one will read again.
    pub orphan: bool,
    /// A listener's child not yet taken by `accept`: no socket holds it
    /// (the kernel's `sk->sk_socket` is NULL until `accept`, and again
    /// after `close`, see [`Conn::has_socket`]).
    pub unaccepted: bool,
    /// The reset came in or went out (reads see `ECONNRESET` once).
    pub reset: bool,
}

impl Conn {
    /// The send MSS for a peer MSS and the options every segment carries
    /// (`tcp_sync_mss`).
    pub fn sync_mss(&mut self) {
        let pmtu_mss = self.pmtu_cookie.saturating_sub(self.net_header_len() + 20);
        let mss = self.mss_clamp.min(self.advmss).min(pmtu_mss);
        self.mss_cache = mss.saturating_sub(self.tcp_header_len() - 20).max(48);
    }

    /// `tp->tcp_header_len`: the TCP header every segment of ours
    /// carries, its fixed options (timestamps) included.
    pub(crate) fn tcp_header_len(&self) -> u32 {
        if self.ts_ok {
            32
        } else {
            20
        }
    }

    /// The IP header's length: 40 over IPv6, 20 over IPv4 (an IPv6
    /// socket's v4-mapped peer included).
    pub fn net_header_len(&self) -> u32 {
        match self.remote.ip() {
            std::net::IpAddr::V6(a) if a.to_ipv4_mapped().is_none() => 40,
            _ => 20,
        }
    }

    /// The segments a packet counts for (`tcp_skb_pcount`).
    pub fn pcount(&self, s: &Sent) -> u32 {
        let len = s.end_seq.wrapping_sub(s.seq) - s.fin as u32 - s.syn as u32;
        len.div_ceil(self.mss_cache.max(1)).max(1)
    }

    /// Every segment sent and not acknowledged (`packets_out`).
    pub fn packets_out_all(&self) -> u32 {
        self.rtx.iter().map(|s| self.pcount(s)).sum()
    }

    /// Segments SACKed (`sacked_out`).
    pub fn sacked_out(&self) -> u32 {
        self.rtx
            .iter()
            .filter(|s| s.sacked)
            .map(|s| self.pcount(s))
            .sum::<u32>()
            + self.reno_sacked
    }

    /// Segments marked lost (`lost_out`).
    pub fn lost_out(&self) -> u32 {
        self.rtx
            .iter()
            .filter(|s| s.lost && !s.sacked)
            .map(|s| self.pcount(s))
            .sum()
    }

    /// Segments retransmitted and not yet acknowledged (`retrans_out`).
    pub fn retrans_out(&self) -> u32 {
        self.rtx
            .iter()
            .filter(|s| s.retrans && !s.sacked)
            .map(|s| self.pcount(s))
            .sum()
    }

    /// `sk_pacing_rate` as `tcp_update_pacing_rate` sets it, bytes/s.
    pub fn pacing_rate(&self) -> u64 {
        let ratio = if self.snd_cwnd < self.snd_ssthresh / 2 {
            200
        } else {
            120
        };
        let rate = self.mss_cache as u64 * 80_000 * ratio / 100
            * self.snd_cwnd.max(self.packets_out_all()) as u64;
        rate.checked_div(self.srtt_us).unwrap_or(rate)
    }

    /// `__sk_stream_is_writeable(sk, 1)`: a third of the send buffer free
    /// and unsent bytes (doubled) under `TCP_NOTSENT_LOWAT`.
    pub fn writeable(&self) -> bool {
        self.sndbuf.len() * 3 / 2 <= self.sk_sndbuf as usize
            && (self.unsent() as u64) * 2 < self.notsent_lowat as u64
    }

    /// A program's socket holds the connection (`sk->sk_socket`): not a
    /// child waiting for `accept`, not closed.
    pub fn has_socket(&self) -> bool {
        !self.unaccepted && !self.orphan
    }

    /// A state change wakes readers and writers (`sk_state_change`).
    pub fn wake_all(&mut self) {
        self.wake_in += 1;
        self.wake_out += 1;
    }

    /// Bytes written and not yet sent.
    pub fn unsent(&self) -> u32 {
        // Once the FIN is out, `snd_nxt` is one past `write_seq`.
        (self.write_seq.wrapping_sub(self.snd_nxt) as i32).max(0) as u32
    }

    /// The receive window's space left (`tcp_receive_window`).
    pub fn receive_window(&self) -> u32 {
        let edge = self.rcv_wup.wrapping_add(self.rcv_wnd);
        (edge.wrapping_sub(self.rcv_nxt) as i32).max(0) as u32
    }

    /// Data queued for the application to read.
    pub fn readable(&self) -> usize {
        self.rcvq.len()
    }

    /// Whether the connection is synchronized (past the handshake).
    pub fn synchronized(&self) -> bool {
        !matches!(
            self.state,
            State::Closed | State::Listen | State::SynSent | State::SynRecv
        )
    }

    /// Start the connection's sequence space at `iss` instead of the one
    /// it was made with (a SYN cookie's), before anything was sent.
    pub(crate) fn set_iss(&mut self, iss: u32) {
        let one = iss.wrapping_add(1);
        self.iss = iss;
        self.snd_una = iss;
        self.snd_nxt = one;
        self.write_seq = one;
        self.snd_sml = iss;
        self.pushed_seq = one;
        self.high_seq = iss;
        self.highest_sack = iss;
        self.cwnd_usage_seq = iss;
        self.rtt_seq = iss;
        if let Some(s) = self.rtx.front_mut() {
            s.seq = iss;
            s.end_seq = one;
        }
    }

    /// The timestamp clock: milliseconds plus the connection's offset
    /// (`tcp_time_stamp_ts`).
    pub fn ts_val(&self, now: Nanos) -> u32 {
        ((now / MS) as u32).wrapping_add(self.ts_off)
    }

    /// In quick-ACK mode (`tcp_in_quickack_mode`).
    pub fn in_quickack_mode(&self) -> bool {
        self.ack.quick > 0 && self.ack.pingpong < TCP_PINGPONG_THRESH
    }

    /// `tcp_incr_quickack`: allow up to `max` quick ACKs, as many as half
    /// the window holds segments.
    pub fn incr_quickack(&mut self, max: u32) {
        let mut quickacks = self.rcv_wnd / (2 * self.ack.rcv_mss.max(1));
        if quickacks == 0 {
            quickacks = 2;
        }
        let quickacks = quickacks.min(max);
        if quickacks > self.ack.quick {
            self.ack.quick = quickacks;
        }
    }

    /// `tcp_enter_quickack_mode`.
    pub fn enter_quickack_mode(&mut self, max: u32) {
        self.incr_quickack(max);
        self.ack.pingpong = 0;
        self.ack.ato = TCP_DELACK_MIN;
    }

    /// `tcp_rearm_rto`: the retransmission timer from now, or from the
    /// head's transmission when a probe timer held its place.
    pub fn rearm_rto(&mut self, now: Nanos) {
        if self.rtx.is_empty() {
            self.rto_at = None;
            return;
        }
        let mut at = now + self.rto;
        if matches!(
            self.xmit_timer,
            XmitTimer::LossProbe | XmitTimer::ReoTimeout
        ) && self.rto_at.is_some()
        {
            let head = self.rtx.front().map(|s| s.sent_at).unwrap_or(now);
            at = (head + self.rto).max(now + 1000);
        }
        self.rto_at = Some(at);
        self.xmit_timer = XmitTimer::Retrans;
    }
}

/// Bytes `off..off + len` of a ring (the send queue) as its two slices hold them (the
/// second empty unless the range wraps).
pub(crate) fn ring_range(
    q: &std::collections::VecDeque<u8>,
    off: usize,
    len: usize,
) -> (&[u8], &[u8]) {
    let (a, b) = q.as_slices();
    if off >= a.len() {
        let o = off - a.len();
        return (&b[o..o + len], &[]);
    }
    let first = (a.len() - off).min(len);
    (&a[off..off + first], &b[..len - first])
}

#[cfg(test)]
mod ring_tests {
    use super::ring_range;
    use std::collections::VecDeque;

    /// A range of a ring that wrapped: the same bytes as the ring holds
    /// them in order, whether it sits in the first slice, the second, or
    /// spans both.
    #[test]
    fn a_ring_range_is_its_bytes_in_order() {
        let mut q: VecDeque<u8> = VecDeque::with_capacity(16);
        q.extend(0..12u8);
        q.drain(..8);
        q.extend(12..20u8);
        assert!(!q.as_slices().1.is_empty(), "the ring wrapped");
        let all: Vec<u8> = q.iter().copied().collect();
        for off in 0..all.len() {
            for len in 0..=all.len() - off {
                let (a, b) = ring_range(&q, off, len);
                assert_eq!([a, b].concat(), all[off..off + len], "{off}+{len}");
            }
        }
    }
}
