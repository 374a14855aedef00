//! Receiving: `tcp_input.c`'s `tcp_rcv_state_process` for a connection
//! past LISTEN — the SYN-SENT handshake, the incoming checks in
//! `tcp_validate_incoming`'s order (PAWS, sequence, RST, SYN), `tcp_ack`,
//! and the data path (`tcp_data_queue`, the out-of-order queue, FIN).

use rxpath_wire::tcp::flags::{ACK, FIN, PSH, RST, SYN, URG};

use crate::conn::{
    Conn, State, ACK_PUSHED, ACK_PUSHED2, TCP_DELACK_MIN, TCP_INIT_CWND, TCP_MAX_QUICKACKS,
    TCP_MIN_MSS, TCP_MSS_DEFAULT, TCP_PINGPONG_THRESH, TCP_TIMEWAIT_LEN,
};
use crate::ctx::Ctx;
use crate::seq::{after, before};
use crate::wire::SegIn;

/// What the socket table has to do after a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing.
    Keep,
    /// A SYN_RECV child completed its handshake: queue it for `accept`.
    Established,
    /// The connection is gone: free it.
    Closed,
    /// A SYN that may reopen this TIME_WAIT pair: free it and give the
    /// segment to the listener.
    Reopen,
}

impl Conn {
    /// A segment for this connection.
    pub(crate) fn input(&mut self, ctx: &mut Ctx<'_>, seg: &SegIn<'_>) -> Verdict {
        if self.fo.deferred {
            // No SYN has left (a Fast Open connect waiting for its first
            // write): nothing the peer sends belongs to it yet.
            return Verdict::Keep;
        }
        self.segs_in = self.segs_in.wrapping_add(1);
        if !seg.payload.is_empty() {
            self.data_segs_in = self.data_segs_in.wrapping_add(1);
        }
        match self.state {
            State::SynSent => self.rcv_synsent(ctx, seg),
            State::TimeWait => self.rcv_timewait(ctx, seg),
            State::Closed | State::Listen => Verdict::Keep,
            _ => self.rcv_state_process(ctx, seg),
        }
    }

    /// The options of the peer's SYN or SYN-ACK.
    pub(crate) fn take_syn_options(&mut self, ctx: &Ctx<'_>, seg: &SegIn<'_>) {
        // An MSS option of 0 is ignored, as `tcp_parse_options` does.
        self.mss_clamp = seg
            .opts
            .mss
            .filter(|&m| m != 0)
            .map(u32::from)
            .unwrap_or(TCP_MSS_DEFAULT);
        if let Some(u) = self.user_mss {
            self.mss_clamp = self.mss_clamp.min(u);
        }
        self.ts_ok = ctx.cfg.tcp_timestamps && seg.opts.ts.is_some();
        if let Some((v, _)) = seg.opts.ts.filter(|_| self.ts_ok) {
            self.ts_recent = v;
            self.ts_recent_stamp = ctx.now;
        }
        self.sack_ok = ctx.cfg.tcp_sack && seg.opts.sack_ok;
        match seg.opts.wscale.filter(|_| ctx.cfg.tcp_window_scaling) {
            Some(w) => {
                self.wscale_ok = true;
                self.snd_wscale = w.min(14);
            }
            None => {
                self.wscale_ok = false;
                self.snd_wscale = 0;
                self.rcv_wscale = 0;
            }
        }
        self.irs = seg.seq;
        self.rcv_nxt = seg.seq.wrapping_add(1);
        self.rcv_wup = self.rcv_nxt;
        self.snd_wnd = seg.wnd as u32;
        self.max_window = self.snd_wnd;
        self.snd_wl1 = seg.seq;
        self.sync_mss();
        self.ack.rcv_mss = self.mss_cache.min(TCP_MSS_DEFAULT).min(self.advmss);
    }

    /// `tcp_rcv_synsent_state_process`.
    fn rcv_synsent(&mut self, ctx: &mut Ctx<'_>, seg: &SegIn<'_>) -> Verdict {
        if seg.has(ACK) && (!after(seg.ack, self.iss) || after(seg.ack, self.snd_nxt)) {
            if !seg.has(RST) {
                crate::output::reset_for(ctx, seg);
            }
            return Verdict::Keep;
        }
        // An echoed timestamp from before the first SYN or the future.
        if let (true, Some((_, ecr)), Some(first)) = (
            seg.has(ACK) && ctx.cfg.tcp_timestamps,
            seg.opts.ts,
            self.retrans_stamp,
        ) {
            let now = self.ts_val(ctx.now);
            if ecr != 0 && (before(ecr, first) || after(ecr, now)) {
                ctx.ext.PAWSActiveRejected += 1;
                if !seg.has(RST) {
                    crate::output::reset_for(ctx, seg);
                }
                return Verdict::Keep;
            }
        }
        if seg.has(RST) {
            if seg.has(ACK) {
                self.err = Some(libc::ECONNREFUSED);
                ctx.mib.AttemptFails += 1;
                return self.set_closed();
            }
            return Verdict::Keep;
        }
        if !seg.has(SYN) {
            return Verdict::Keep;
        }
        self.take_syn_options(ctx, seg);
        self.ecn.rcv_syn(seg);
        if !seg.has(ACK) {
            // Simultaneous open.
            self.state = State::SynRecv;
            self.send_syn(ctx, true);
            return Verdict::Keep;
        }
        self.ack_syn(ctx, seg.ack);
        self.state = State::Established;
        self.wake_all();
        self.init_transfer(ctx);
        // The SYN's data sent again carries the ACK.
        if self.rcv_fastopen_synack(ctx, seg) {
            return Verdict::Keep;
        }
        if self.write_pending {
            // "Save one ACK": the data being written carries it, or the
            // delayed-ACK timer sends it.
            self.ack.pending = true;
            self.enter_quickack_mode(TCP_MAX_QUICKACKS);
            self.ack.timer = Some(ctx.now + crate::conn::TCP_DELACK_MAX);
            return Verdict::Keep;
        }
        self.send_ack(ctx);
        self.write_xmit(ctx, self.nonagle());
        Verdict::Keep
    }

    /// `tcp_init_transfer`: congestion state and the first pacing
    /// estimate once the handshake is done.
    pub(crate) fn init_transfer(&mut self, ctx: &Ctx<'_>) {
        // `tcp_init_transfer`: a SYN or SYN-ACK sent more than twice
        // leaves the window at one segment.
        self.snd_cwnd = if self.total_retrans > 1 {
            1
        } else {
            crate::conn::TCP_INIT_CWND
        };
        let nxt = self.snd_nxt;
        self.cubic.init(ctx.now, nxt);
        self.cwnd_usage_seq = nxt;
        self.retransmits = 0;
        self.backoff = 0;
        self.lsndtime = ctx.now;
        self.ack.lrcvtime = ctx.now;
        self.arm_keepalive(ctx);
        self.sndbuf_expand(ctx);
        self.rcv_ssthresh = self.rcv_wnd;
        self.init_buffer_space(ctx.now);
    }

    /// `tcp_sndbuf_expand`: room for two windows of full-sized skbs
    /// (CUBIC's recovery needs 1.7), unless the program fixed the size.
    pub(crate) fn sndbuf_expand(&mut self, ctx: &Ctx<'_>) {
        if self.sndbuf_locked {
            return;
        }
        let per_mss = (self.mss_clamp.max(self.mss_cache) + 320 + 320).next_power_of_two() + 256;
        let nr_segs = TCP_INIT_CWND.max(self.snd_cwnd).max(self.reordering + 1);
        let sndmem = (2 * nr_segs as u64 * per_mss as u64).min(u32::MAX as u64) as u32;
        if self.sk_sndbuf < sndmem {
            self.sk_sndbuf = sndmem.min(ctx.cfg.tcp_wmem[2]);
        }
    }

    /// TIME_WAIT (`tcp_timewait_state_process`).
    fn rcv_timewait(&mut self, ctx: &mut Ctx<'_>, seg: &SegIn<'_>) -> Verdict {
        if seg.has(RST) {
            return self.set_closed();
        }
        if seg.has(SYN) && !seg.has(ACK) && after(seg.seq, self.rcv_nxt) {
            return Verdict::Reopen;
        }
        if seg.has(FIN) && seg.end_seq() == self.rcv_nxt {
            self.close_at = Some(ctx.now + TCP_TIMEWAIT_LEN);
        }
        if seg.seq_len() > 0 || seg.has(FIN) {
            self.send_ack(ctx);
        }
        Verdict::Keep
    }

    pub(crate) fn set_closed(&mut self) -> Verdict {
        self.state = State::Closed;
        self.rto_at = None;
        self.ack.timer = None;
        self.close_at = None;
        Verdict::Closed
    }

    /// A reset came in (`tcp_reset`).
    pub(crate) fn rcv_reset(&mut self, ctx: &mut Ctx<'_>) -> Verdict {
        self.wake_all();
        self.err = Some(match self.state {
            State::SynSent => libc::ECONNREFUSED,
            State::CloseWait => libc::EPIPE,
            _ => libc::ECONNRESET,
        });
        if matches!(self.state, State::Established | State::CloseWait) {
            ctx.mib.EstabResets += 1;
        }
        if self.state == State::SynRecv {
            ctx.mib.AttemptFails += 1;
        }
        self.reset = true;
        self.shut_rd = true;
        self.shut_wr = true;
        self.set_closed()
    }

    /// `tcp_send_dupack`: an out-of-window or old segment; D-SACK what was
    /// a duplicate.
    fn send_dupack(&mut self, ctx: &mut Ctx<'_>, seg: &SegIn<'_>) {
        if seg.seq_len() > 0 && before(seg.seq, self.rcv_nxt) {
            ctx.ext.DelayedACKLost += 1;
            self.enter_quickack_mode(TCP_MAX_QUICKACKS);
            if self.sack_ok && ctx.cfg.tcp_dsack {
                let end = if after(seg.end_seq(), self.rcv_nxt) {
                    self.rcv_nxt
                } else {
                    seg.end_seq()
                };
                self.dsack = Some((seg.seq, end));
                ctx.ext.TCPDSACKOldSent += 1;
            }
        }
        self.send_ack(ctx);
    }

    /// Everything past SYN-SENT and before TIME_WAIT.
    fn rcv_state_process(&mut self, ctx: &mut Ctx<'_>, seg: &SegIn<'_>) -> Verdict {
        if self.state == State::SynRecv && seg.has(SYN) && !seg.has(ACK) && seg.seq == self.irs {
            // The peer did not hear the SYN-ACK: say it again.
            self.send_syn(ctx, true);
            return Verdict::Keep;
        }
        if !seg.has(RST) && self.paws_discard(ctx, seg) {
            ctx.ext.PAWSEstab += 1;
            self.send_dupack(ctx, seg);
            return Verdict::Keep;
        }
        // `tcp_sequence`.
        let wnd_end = self.rcv_nxt.wrapping_add(self.receive_window());
        if before(seg.end_seq(), self.rcv_wup) || after(seg.seq, wnd_end) {
            // `tcp_validate_incoming`: a SYN out of the window draws a
            // challenge ACK, other segments a duplicate ACK.
            if seg.has(SYN) {
                self.challenge_ack(ctx);
            } else if !seg.has(RST) {
                self.send_dupack(ctx, seg);
            }
            return Verdict::Keep;
        }
        if seg.has(RST) {
            if seg.seq == self.rcv_nxt {
                return self.rcv_reset(ctx);
            }
            self.challenge_ack(ctx);
            return Verdict::Keep;
        }
        if seg.has(SYN) && !self.simultaneous_syn_ack(seg) {
            self.challenge_ack(ctx);
            return Verdict::Keep;
        }
        if !seg.has(ACK) {
            return Verdict::Keep;
        }
        if let Some((v, ecr)) = seg.opts.ts.filter(|_| self.ts_ok) {
            self.rcv_tsecr = ecr;
            // `tcp_replace_ts_recent`.
            if !after(seg.seq, self.rcv_wup) {
                self.ts_recent = v;
                self.ts_recent_stamp = ctx.now;
            }
        }
        let mut verdict = Verdict::Keep;
        if self.state == State::SynRecv {
            if !after(seg.ack, self.snd_una) || after(seg.ack, self.snd_nxt) {
                crate::output::reset_for(ctx, seg);
                return Verdict::Keep;
            }
            // `tcp_check_req` under `TCP_DEFER_ACCEPT`: a bare ACK is
            // dropped until the SYN-ACK went out that many times more.
            if self.retransmits < u32::from(self.defer_accept)
                && seg.end_seq() == self.irs.wrapping_add(1)
            {
                self.defer_acked = true;
                ctx.ext.TCPDeferAcceptDrop += 1;
                return Verdict::Keep;
            }
            self.state = State::Established;
            self.wake_all();
            // The SYN-ACK was delivered (`tcp_ack` does not count it).
            self.delivered = self.delivered.wrapping_add(1);
            self.snd_wnd = (seg.wnd as u32) << self.snd_wscale;
            self.snd_wl1 = seg.seq;
            if std::mem::take(&mut self.fo.passive) {
                // `tcp_rcv_synrecv_state_fastopen`: the transfer began at
                // the SYN; the SYN-ACK's retransmissions are forgotten.
                self.retrans_stamp = None;
                self.retransmits = 0;
                self.rearm_rto(ctx.now);
            } else {
                self.init_transfer(ctx);
            }
            verdict = Verdict::Established;
        }
        if after(seg.ack, self.snd_nxt) {
            // Acknowledges what was never sent.
            self.challenge_ack(ctx);
            return verdict;
        }
        self.tcp_ack(ctx, seg);
        if verdict == Verdict::Established {
            // `tcp_rcv_state_process` sets the window after `tcp_ack`,
            // scaled, even from a SYN-ACK (a simultaneous open's), whose
            // window `tcp_ack` would take unscaled.
            self.snd_wnd = (seg.wnd as u32) << self.snd_wscale;
            self.snd_wl1 = seg.seq;
        }
        if let Some(v) = self.fin_acked_transition(ctx) {
            return v;
        }
        match self.state {
            State::CloseWait | State::Closing | State::LastAck
                if !before(seg.seq, self.rcv_nxt) => {}
            State::FinWait1 | State::FinWait2
                if self.shut_rd
                    && !seg.payload.is_empty()
                    && after(seg.seq.wrapping_add(seg.payload.len() as u32), self.rcv_nxt) =>
            {
                ctx.ext.TCPAbortOnData += 1;
                self.send_active_reset(ctx);
                return self.rcv_reset(ctx);
            }
            _ => {
                if self.state == State::Established && seg.opts.ts.is_some() && self.ts_ok {
                    let len = seg.end_seq().wrapping_sub(seg.seq);
                    self.rcv_rtt_measure_ts(ctx.now, len);
                }
                self.data_queue(ctx, seg)
            }
        }
        if self.state == State::TimeWait && self.orphan {
            self.close_at = Some(ctx.now + TCP_TIMEWAIT_LEN);
        }
        self.write_xmit(ctx, self.nonagle());
        self.ack_snd_check(ctx);
        verdict
    }

    /// `tcp_validate_incoming`'s exception to the challenge ACK: in a
    /// simultaneous open (SYN_RECV with a socket, not a listener's child)
    /// the peer's SYN-ACK answering ours, which repeats the SYN we have
    /// and acknowledges all we sent, goes on as an ACK.
    fn simultaneous_syn_ack(&self, seg: &SegIn<'_>) -> bool {
        self.state == State::SynRecv
            && self.has_socket()
            && seg.has(ACK)
            && seg.seq.wrapping_add(1) == seg.end_seq()
            && seg.seq.wrapping_add(1) == self.rcv_nxt
            && seg.ack == self.snd_nxt
    }

    /// `tcp_paws_discard`: a timestamp older than the last one echoed.
    fn paws_discard(&self, ctx: &Ctx<'_>, seg: &SegIn<'_>) -> bool {
        let Some((v, _)) = seg.opts.ts.filter(|_| self.ts_ok) else {
            return false;
        };
        let stale = ctx.now.saturating_sub(self.ts_recent_stamp) > 24 * 24 * 3600 * 1_000_000_000;
        (self.ts_recent.wrapping_sub(v) as i32) > 0 && !stale
    }

    /// `tcp_send_challenge_ack` (RFC 5961).
    fn challenge_ack(&mut self, ctx: &mut Ctx<'_>) {
        ctx.ext.TCPChallengeACK += 1;
        self.send_ack(ctx);
    }

    /// The SYN-ACK acknowledged our SYN (`tcp_ack` in SYN-SENT): its RTT
    /// sample unless the SYN was sent again; the SYN counts as delivered.
    fn ack_syn(&mut self, ctx: &mut Ctx<'_>, ack: u32) {
        if let Some(h) = self.rtx.front().copied().filter(|h| h.syn) {
            self.rtx.pop_front();
            self.delivered = self.delivered.wrapping_add(1);
            self.retrans_stamp = None;
            if !h.ever_retrans {
                self.rtt_estimator(ctx.now.saturating_sub(h.sent_at) / 1000);
            }
        }
        self.ack_syn_data(ack);
        self.snd_una = ack;
        self.snd_sml = ack;
        // Fast Open's data still out keeps the timer (`tcp_ack`).
        self.rto_at = None;
        if !self.rtx.is_empty() {
            self.rearm_rto(ctx.now);
        }
    }

    /// `tcp_rtt_estimator` and `tcp_set_rto` (µs; `srtt_us` ×8, `mdev_us` ×4).
    pub(crate) fn rtt_estimator(&mut self, mrtt_us: u64) {
        let m = mrtt_us.max(1);
        self.min_rtt_us = self.min_rtt_us.min(m);
        if self.srtt_us != 0 {
            let mut m = m as i64;
            let srtt = self.srtt_us as i64;
            m -= srtt >> 3;
            let mut new_srtt = srtt + m;
            if m < 0 {
                m = -m;
                m -= (self.mdev_us >> 2) as i64;
                if m > 0 {
                    m >>= 3;
                }
            } else {
                m -= (self.mdev_us >> 2) as i64;
            }
            let mdev = self.mdev_us as i64 + m;
            self.mdev_us = mdev.max(0) as u64;
            if self.mdev_us > self.mdev_max_us {
                self.mdev_max_us = self.mdev_us;
                if self.mdev_max_us > self.rttvar_us {
                    self.rttvar_us = self.mdev_max_us;
                }
            }
            if after(self.snd_una, self.rtt_seq) {
                if self.mdev_max_us < self.rttvar_us {
                    self.rttvar_us -= (self.rttvar_us - self.mdev_max_us) >> 2;
                }
                self.rtt_seq = self.snd_nxt;
                self.mdev_max_us = 200_000;
            }
            new_srtt = new_srtt.max(1);
            self.srtt_us = new_srtt as u64;
        } else {
            self.srtt_us = m << 3;
            self.mdev_us = m << 1;
            self.mdev_max_us = self.mdev_us.max(200_000);
            self.rttvar_us = self.mdev_max_us;
            self.rtt_seq = self.snd_nxt;
        }
        self.rto = self.base_rto();
    }

    /// `__tcp_set_rto`: srtt + rttvar (which holds the 200 ms floor), in
    /// whole jiffies rounded up, at most `TCP_RTO_MAX`.
    pub(crate) fn base_rto(&self) -> crate::time::Nanos {
        let rto_us = (self.srtt_us >> 3) + self.rttvar_us;
        (rto_us.div_ceil(1000) * 1_000_000).min(crate::conn::TCP_RTO_MAX)
    }

    /// The state change when our FIN is acknowledged.
    fn fin_acked_transition(&mut self, ctx: &mut Ctx<'_>) -> Option<Verdict> {
        let fin_acked = self.fin_queued && self.snd_una == self.write_seq.wrapping_add(1);
        if !fin_acked {
            return None;
        }
        match self.state {
            State::FinWait1 => {
                self.state = State::FinWait2;
                self.shut_wr = true;
                if self.orphan {
                    self.close_at = Some(ctx.now + ctx.cfg.tcp_fin_timeout as u64 * 1_000_000_000);
                }
                None
            }
            State::Closing => {
                self.state = State::TimeWait;
                self.close_at = Some(ctx.now + TCP_TIMEWAIT_LEN);
                Some(Verdict::Keep)
            }
            State::LastAck => Some(self.set_closed()),
            _ => None,
        }
    }

    /// `tcp_data_queue`.
    fn data_queue(&mut self, ctx: &mut Ctx<'_>, seg: &SegIn<'_>) {
        let fin = seg.has(FIN);
        if seg.seq == seg.end_seq() {
            return;
        }
        let mut seq = seg.seq;
        let mut data = seg.payload;
        if !after(seg.end_seq(), self.rcv_nxt) {
            // A retransmission of what we have (data, a FIN, a SYN):
            // D-SACK it, ACK at once.
            ctx.ext.DelayedACKLost += 1;
            if self.sack_ok && ctx.cfg.tcp_dsack {
                self.dsack = Some((seg.seq, seg.end_seq()));
                ctx.ext.TCPDSACKOldSent += 1;
            }
            self.enter_quickack_mode(TCP_MAX_QUICKACKS);
            self.ack.pending = true;
            self.ack.force = true;
            return;
        }
        if !before(seq, self.rcv_nxt.wrapping_add(self.receive_window())) {
            self.enter_quickack_mode(TCP_MAX_QUICKACKS);
            self.ack.pending = true;
            self.ack.force = true;
            return;
        }
        if before(seq, self.rcv_nxt) {
            let old = self.rcv_nxt.wrapping_sub(seq);
            if self.sack_ok && ctx.cfg.tcp_dsack {
                self.dsack = Some((seq, self.rcv_nxt));
                ctx.ext.TCPDSACKOldSent += 1;
            }
            data = data.get(old as usize..).unwrap_or_default();
            seq = self.rcv_nxt;
        }
        if seq != self.rcv_nxt {
            self.ecn_check_ce(seg.ecn);
            self.data_queue_ofo(ctx, seq, data, fin);
            return;
        }
        if self.receive_window() == 0 && !data.is_empty() {
            self.enter_quickack_mode(TCP_MAX_QUICKACKS);
            self.ack.pending = true;
            self.ack.force = true;
            return;
        }
        self.ack.pending = true;
        if !data.is_empty() {
            self.rcvq.extend(data);
            self.wake_in += 1;
            self.bytes_received += data.len() as u64;
            self.rcv_nxt = self.rcv_nxt.wrapping_add(data.len() as u32);
            self.measure_rcv_mss(data.len() as u32, seg);
            self.event_data_recv(ctx, data.len() as u32);
            self.ecn_check_ce(seg.ecn);
            ctx.ext.TCPHPHits += 1;
        }
        if fin {
            self.rcv_fin(ctx);
        }
        if !self.ofo.is_empty() {
            self.ofo_queue(ctx);
            if self.ofo.is_empty() {
                // RFC 5681 4.2: ACK at once when the gap is filled.
                self.ack.force = true;
            }
        }
    }

    /// `tcp_measure_rcv_mss`: the peer's MSS from what it sends in order,
    /// and whether it pushed (a short segment, or a full one with PSH: an
    /// application's write ended, so the reader's read ACKs at once).
    fn measure_rcv_mss(&mut self, len: u32, seg: &SegIn<'_>) {
        let lss = self.ack.last_seg_size;
        self.ack.last_seg_size = 0;
        if len >= self.ack.rcv_mss {
            self.ack.rcv_mss = len.min(self.advmss);
            if seg.has(PSH) {
                self.ack.pushed |= ACK_PUSHED;
            }
            return;
        }
        // The length with the TCP header, whose SACK blocks vary: a
        // segment of a full-sized sender (not the end of a write) says the
        // MSS once two in a row agree.
        let len = len + seg.hdr_len as u32;
        let remnant = seg.flags & (FIN | URG | SYN | PSH) != 0;
        if len >= TCP_MSS_DEFAULT + 20 || (len >= TCP_MIN_MSS + 20 && !remnant) {
            let len = len.saturating_sub(self.tcp_header_len());
            self.ack.last_seg_size = len;
            if len == lss {
                self.ack.rcv_mss = len;
                return;
            }
        }
        if self.ack.pushed & ACK_PUSHED != 0 {
            self.ack.pushed |= ACK_PUSHED2;
        }
        self.ack.pushed |= ACK_PUSHED;
    }

    /// `tcp_event_data_recv`: the ACK timeout from the arrival gaps (the
    /// MSS estimate is the caller's).
    fn event_data_recv(&mut self, ctx: &Ctx<'_>, len: u32) {
        self.rcv_rtt_measure(ctx.now);
        let now = ctx.now;
        if self.ack.ato == 0 {
            self.incr_quickack(TCP_MAX_QUICKACKS);
            self.ack.ato = TCP_DELACK_MIN;
        } else {
            let m = now.saturating_sub(self.ack.lrcvtime);
            if m <= TCP_DELACK_MIN / 2 {
                self.ack.ato = (self.ack.ato >> 1) + TCP_DELACK_MIN / 2;
            } else if m < self.ack.ato {
                self.ack.ato = (self.ack.ato >> 1) + m;
                if self.ack.ato > self.rto {
                    self.ack.ato = self.rto;
                }
            } else if m > self.rto {
                self.incr_quickack(TCP_MAX_QUICKACKS);
            }
        }
        self.ack.lrcvtime = now;
        self.grow_window(len);
    }

    /// `tcp_ecn_check_ce`: a CE mark (or a Not-ECT segment after ECT ones)
    /// is ACKed without delay.
    fn ecn_check_ce(&mut self, field: u8) {
        if self.ecn.check_ce(field) {
            self.enter_quickack_mode(2);
        }
    }

    /// `tcp_fin`.
    pub(crate) fn rcv_fin(&mut self, ctx: &mut Ctx<'_>) {
        self.wake_all();
        self.rcv_nxt = self.rcv_nxt.wrapping_add(1);
        self.fin_rcvd = true;
        self.ack.pending = true;
        match self.state {
            State::SynRecv | State::Established => {
                self.state = State::CloseWait;
                self.ack.pingpong = 1;
            }
            State::FinWait1 => {
                self.state = State::Closing;
                self.send_ack(ctx);
            }
            State::FinWait2 => {
                self.send_ack(ctx);
                self.state = State::TimeWait;
                self.close_at = Some(ctx.now + TCP_TIMEWAIT_LEN);
            }
            _ => {}
        }
        // The out-of-order queue is no longer of use (`tcp_fin` purges it).
        self.ofo.clear();
        self.sacks.clear();
    }

    /// `tcp_data_queue_ofo`: keep it, and say so in SACK blocks.
    fn data_queue_ofo(&mut self, ctx: &mut Ctx<'_>, seq: u32, data: &[u8], _fin: bool) {
        ctx.ext.TCPOFOQueue += 1;
        self.rcv_ooopack = self.rcv_ooopack.wrapping_add(1);
        self.ack.pending = true;
        self.ack.force = true;
        // Only what the advertised window covers, and only while the
        // receive buffer has room (`tcp_try_rmem_schedule` prunes; here the
        // segment is dropped, counted, and the peer will send it again).
        let wnd_end = self.rcv_nxt.wrapping_add(self.receive_window());
        let room = wnd_end.wrapping_sub(seq) as usize;
        let data = &data[..data.len().min(room)];
        if data.is_empty() {
            return;
        }
        if self.free_space() < data.len() as u32 {
            ctx.ext.TCPOFODrop += 1;
            return;
        }
        let end = seq.wrapping_add(data.len() as u32);
        if self
            .ofo
            .iter()
            .any(|(s, d)| !before(seq, *s) && !after(end, s.wrapping_add(d.len() as u32)))
        {
            if self.sack_ok && ctx.cfg.tcp_dsack {
                self.dsack = Some((seq, end));
                ctx.ext.TCPDSACKOfoSent += 1;
            }
            return;
        }
        let at = self
            .ofo
            .iter()
            .position(|(s, _)| after(*s, seq))
            .unwrap_or(self.ofo.len());
        self.ofo.insert(at, (seq, data.to_vec()));
        if self.sack_ok {
            self.sack_new_ofo(seq, end);
        }
        self.grow_after_ofo(ctx, data.len() as u32);
    }

    /// `tcp_sack_new_ofo_skb`: the block holding the new segment goes
    /// first, merged with any it touches.
    fn sack_new_ofo(&mut self, seq: u32, end: u32) {
        let (mut s, mut e) = (seq, end);
        self.sacks.retain(|&(bs, be)| {
            let touches = !after(bs, e) && !before(be, s);
            if touches {
                if before(bs, s) {
                    s = bs;
                }
                if after(be, e) {
                    e = be;
                }
            }
            !touches
        });
        self.sacks.insert(0, (s, e));
        self.sacks.truncate(4);
    }

    /// `tcp_ofo_queue`: move what became in-order to the receive queue.
    fn ofo_queue(&mut self, ctx: &Ctx<'_>) {
        while let Some((s, _)) = self.ofo.first() {
            if after(*s, self.rcv_nxt) {
                break;
            }
            let (s, d) = self.ofo.remove(0);
            let end = s.wrapping_add(d.len() as u32);
            if after(end, self.rcv_nxt) {
                let skip = self.rcv_nxt.wrapping_sub(s) as usize;
                self.rcvq.extend(&d[skip..]);
                self.rcv_nxt = end;
                let len = (d.len() - skip) as u32;
                if len >= self.ack.rcv_mss {
                    self.ack.rcv_mss = len.min(self.advmss);
                }
                self.event_data_recv(ctx, len);
            }
        }
        let nxt = self.rcv_nxt;
        self.sacks.retain(|&(_, e)| after(e, nxt));
    }

    /// `__tcp_cleanup_rbuf` after a read of `copied` bytes: whether to ACK
    /// now. An owed ACK goes when more than a segment came since the last
    /// window update (the every-second-segment ACK that
    /// [`Self::ack_snd_check`] held back because the data still sat
    /// unread), or when this read emptied the queue of a pushed segment;
    /// and a window that at least doubled is announced.
    pub(crate) fn cleanup_rbuf(&self, copied: usize) -> bool {
        if self.ack.pending {
            let p = self.ack.pushed;
            let pushed = p & ACK_PUSHED2 != 0
                || (p & ACK_PUSHED != 0 && self.ack.pingpong < TCP_PINGPONG_THRESH);
            if self.rcv_nxt.wrapping_sub(self.rcv_wup) > self.ack.rcv_mss
                || (copied > 0 && pushed && self.rcvq.is_empty() && self.ofo.is_empty())
            {
                return true;
            }
        }
        if copied == 0 || !self.synchronized() || self.fin_rcvd || self.shut_rd {
            return false;
        }
        let now_wnd = self.receive_window();
        if 2 * now_wnd > self.window_clamp {
            return false;
        }
        let new = self.window_after_read();
        new > 0 && new >= 2 * now_wnd
    }

    /// `__tcp_ack_snd_check`: ACK now, or arm the delayed ACK.
    pub(crate) fn ack_snd_check(&mut self, ctx: &mut Ctx<'_>) {
        if !self.ack.pending {
            return;
        }
        let full_frame = self.rcv_nxt.wrapping_sub(self.rcv_wup) > self.ack.rcv_mss
            && self.free_space().min(self.rcv_ssthresh) >= self.rcv_wnd;
        if full_frame || self.in_quickack_mode() || self.ack.force || !self.ofo.is_empty() {
            self.ack.force = false;
            self.send_ack(ctx);
        } else {
            self.send_delayed_ack(ctx);
        }
    }
}
