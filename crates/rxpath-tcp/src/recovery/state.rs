//! The congestion-state machine of `tcp_fastretrans_alert` (Open,
//! Disorder, Recovery, Loss with F-RTO), its undo, PRR
//! (`tcp_cwnd_reduction`) and `tcp_xmit_retransmit_queue`.

use super::*;

impl Conn {
    /// `tcp_fastretrans_alert`.
    pub(super) fn fastretrans_alert(
        &mut self,
        ctx: &mut Ctx<'_>,
        prior_snd_una: u32,
        num_dupack: u32,
        flag: &AckFlags,
        rexmit: &mut Rexmit,
    ) {
        let now = ctx.now;
        if self.rtx.is_empty() {
            self.reno_sacked = 0;
        }
        // D. Exit Recovery or CWR when `high_seq` is acknowledged.
        if self.ca_state != CaState::Open && !before(self.snd_una, self.high_seq) {
            match self.ca_state {
                CaState::Cwr if self.snd_una != self.high_seq => {
                    self.end_cwnd_reduction();
                    self.set_ca_state(CaState::Open, now);
                }
                CaState::Recovery => {
                    if !self.sack_ok {
                        self.reno_sacked = 0;
                    }
                    if self.try_undo_recovery(ctx) {
                        return;
                    }
                    self.end_cwnd_reduction();
                }
                _ => {}
            }
        }
        let fall_through = match self.ca_state {
            CaState::Recovery => {
                if !flag.snd_una_advanced && !self.sack_ok {
                    self.add_reno_sack(num_dupack);
                }
                self.identify_packet_loss(now, flag.snd_una_advanced);
                if self.ca_state != CaState::Recovery {
                    if self.lost_out() == 0 {
                        return;
                    }
                    self.enter_recovery(ctx);
                }
                false
            }
            CaState::Loss => {
                self.process_loss(ctx, flag, num_dupack, rexmit);
                let lost_retrans = self.identify_packet_loss(now, flag.snd_una_advanced);
                // On with the default path only when the timeout was undone
                // or a retransmission was lost again.
                if !(self.ca_state == CaState::Open || lost_retrans) {
                    return;
                }
                true
            }
            _ => true,
        };
        if fall_through {
            if !self.sack_ok {
                if flag.snd_una_advanced {
                    self.reno_sacked = 0;
                }
                self.add_reno_sack(num_dupack);
            }
            self.identify_packet_loss(now, flag.snd_una_advanced);
            if self.lost_out() == 0 {
                // `tcp_try_to_open`: an ECN echo reduces the window; CWR
                // holds until `high_seq` is acknowledged (D. above).
                if flag.ece {
                    self.enter_cwr(ctx);
                }
                if !matches!(self.ca_state, CaState::Loss | CaState::Cwr) {
                    let state = if self.sacked_out() + self.lost_out() > 0 || self.retrans_out() > 0
                    {
                        CaState::Disorder
                    } else {
                        CaState::Open
                    };
                    if self.ca_state != state {
                        self.set_ca_state(state, now);
                        self.high_seq = self.snd_nxt;
                    }
                }
                return;
            }
            self.enter_recovery(ctx);
        }
        let _ = prior_snd_una;
        *rexmit = Rexmit::Lost;
    }

    /// `tcp_add_reno_sack`: a duplicate ACK counts as one SACKed segment
    /// without SACK, never more than leaves one hole.
    pub(super) fn add_reno_sack(&mut self, num_dupack: u32) {
        if num_dupack == 0 {
            return;
        }
        let prior = self.reno_sacked;
        self.reno_sacked += num_dupack;
        let holes = self.lost_out().max(1).min(self.packets_out_all());
        if self.reno_sacked + holes > self.packets_out_all() {
            self.reno_sacked = self.packets_out_all() - holes;
        }
        self.delivered = self
            .delivered
            .wrapping_add(self.reno_sacked.saturating_sub(prior));
    }

    pub(crate) fn set_ca_state(&mut self, s: CaState, now: Nanos) {
        if s == CaState::Loss {
            let nxt = self.snd_nxt;
            self.cubic.on_loss_state(now, nxt);
        }
        self.ca_state = s;
    }

    /// `tcp_enter_recovery` with `tcp_init_cwnd_reduction`.
    pub(super) fn enter_recovery(&mut self, ctx: &mut Ctx<'_>) {
        if self.sack_ok {
            ctx.ext.TCPSackRecovery += 1;
        } else {
            ctx.ext.TCPRenoRecovery += 1;
        }
        self.init_undo();
        if !matches!(self.ca_state, CaState::Cwr | CaState::Recovery) {
            self.prior_ssthresh = self.current_ssthresh();
            self.init_cwnd_reduction();
        }
        self.set_ca_state(CaState::Recovery, ctx.now);
    }

    /// `tcp_init_cwnd_reduction`: PRR starts from the window now.
    fn init_cwnd_reduction(&mut self) {
        self.high_seq = self.snd_nxt;
        self.tlp_high_seq = None;
        self.snd_cwnd_cnt = 0;
        self.prior_cwnd = self.snd_cwnd;
        self.prr_delivered = 0;
        self.prr_out = 0;
        let cwnd = self.snd_cwnd;
        self.snd_ssthresh = self.cubic.recalc_ssthresh(cwnd);
        self.ecn.queue_cwr();
    }

    /// `tcp_enter_cwr`: an ECN echo, or the device refused a packet (local
    /// congestion); the window is reduced, unless a reduction is on.
    pub(crate) fn enter_cwr(&mut self, ctx: &mut Ctx<'_>) {
        self.prior_ssthresh = 0;
        if matches!(self.ca_state, CaState::Open | CaState::Disorder) {
            self.undo_marker = None;
            self.init_cwnd_reduction();
            self.set_ca_state(CaState::Cwr, ctx.now);
        }
    }

    /// `tcp_current_ssthresh`.
    pub(crate) fn current_ssthresh(&self) -> u32 {
        if matches!(self.ca_state, CaState::Cwr | CaState::Recovery) {
            self.snd_ssthresh
        } else {
            self.snd_ssthresh
                .max((self.snd_cwnd >> 1) + (self.snd_cwnd >> 2))
        }
    }

    /// `tcp_init_undo`.
    pub(super) fn init_undo(&mut self) {
        self.undo_marker = Some(self.snd_una);
        self.undo_retrans = if self.retrans_out() > 0 {
            self.retrans_out() as i32
        } else {
            -1
        };
        // The next retransmission dates the episode; a SYN's stays its
        // first sending (`tcp_connect`), which its timeout counts from.
        if self.state != crate::conn::State::SynSent {
            self.retrans_stamp = None;
        }
    }

    /// `tcp_may_undo`: every retransmission proved needless (D-SACKed), or
    /// the peer's timestamp shows the original arrived.
    pub(super) fn may_undo(&self) -> bool {
        self.undo_marker.is_some() && (self.undo_retrans == 0 || self.packet_delayed())
    }

    /// `tcp_packet_delayed`.
    pub(super) fn packet_delayed(&self) -> bool {
        match self.retrans_stamp {
            Some(stamp) => self.ts_ok && self.rcv_tsecr != 0 && before(self.rcv_tsecr, stamp),
            None => false,
        }
    }

    /// `tcp_undo_cwnd_reduction`.
    pub(super) fn undo_cwnd_reduction(&mut self, unmark_loss: bool) {
        if unmark_loss {
            for x in self.rtx.iter_mut() {
                x.lost = false;
            }
        }
        if self.prior_ssthresh > 0 {
            self.snd_cwnd = self.snd_cwnd.max(self.prior_cwnd);
            if self.prior_ssthresh > self.snd_ssthresh {
                self.snd_ssthresh = self.prior_ssthresh;
                self.ecn.withdraw_cwr();
            }
        }
        self.undo_marker = None;
        self.rack.advanced = true;
    }

    /// `tcp_try_undo_recovery`.
    pub(super) fn try_undo_recovery(&mut self, ctx: &mut Ctx<'_>) -> bool {
        if self.may_undo() {
            self.undo_cwnd_reduction(false);
            ctx.ext.TCPFullUndo += 1;
        }
        if self.snd_una == self.high_seq && !self.sack_ok {
            return true;
        }
        self.set_ca_state(CaState::Open, ctx.now);
        false
    }

    /// `tcp_end_cwnd_reduction`: back to ssthresh after Recovery.
    pub(super) fn end_cwnd_reduction(&mut self) {
        if self.snd_ssthresh < TCP_INFINITE_SSTHRESH
            && (self.ca_state == CaState::Cwr || self.undo_marker.is_some())
        {
            self.snd_cwnd = self.snd_ssthresh;
        }
    }

    /// `tcp_cwnd_reduction`: Proportional Rate Reduction (RFC 6937).
    pub(super) fn cwnd_reduction(
        &mut self,
        newly_acked_sacked: u32,
        newly_lost: u32,
        flag: &AckFlags,
    ) {
        if newly_acked_sacked == 0 || self.prior_cwnd == 0 {
            return;
        }
        let in_flight = self.in_flight() as i64;
        let delta = self.snd_ssthresh as i64 - in_flight;
        self.prr_delivered += newly_acked_sacked;
        let mut sndcnt: i64;
        if delta < 0 {
            let dividend =
                self.snd_ssthresh as u64 * self.prr_delivered as u64 + self.prior_cwnd as u64 - 1;
            sndcnt = (dividend / self.prior_cwnd as u64) as i64 - self.prr_out as i64;
        } else {
            sndcnt =
                (self.prr_delivered as i64 - self.prr_out as i64).max(newly_acked_sacked as i64);
            if flag.snd_una_advanced && newly_lost == 0 {
                sndcnt += 1;
            }
            sndcnt = sndcnt.min(delta);
        }
        sndcnt = sndcnt.max(if self.prr_out > 0 { 0 } else { 1 });
        self.snd_cwnd = (in_flight + sndcnt).max(1) as u32;
    }

    /// `tcp_process_loss`: after a timeout, with F-RTO (RFC 5682).
    pub(super) fn process_loss(
        &mut self,
        ctx: &mut Ctx<'_>,
        flag: &AckFlags,
        num_dupack: u32,
        rexmit: &mut Rexmit,
    ) {
        let recovered = !before(self.snd_una, self.high_seq);
        if flag.snd_una_advanced && self.try_undo_loss(ctx, false) {
            return;
        }
        if self.frto {
            if flag.orig_sack_acked && self.try_undo_loss(ctx, true) {
                return;
            }
            if after(self.snd_nxt, self.high_seq) {
                if flag.data_sacked || num_dupack > 0 {
                    self.frto = false;
                }
            } else if flag.snd_una_advanced && !recovered {
                self.high_seq = self.snd_nxt;
                let wnd_end = self.snd_una.wrapping_add(self.snd_wnd);
                if self.unsent() > 0 && after(wnd_end, self.snd_nxt) {
                    *rexmit = Rexmit::New;
                    return;
                }
                self.frto = false;
            }
        }
        if recovered {
            self.try_undo_recovery(ctx);
            return;
        }
        if !self.sack_ok && flag.snd_una_advanced {
            self.reno_sacked = 0;
        }
        *rexmit = Rexmit::Lost;
    }

    /// `tcp_try_undo_loss`.
    pub(super) fn try_undo_loss(&mut self, ctx: &mut Ctx<'_>, frto_undo: bool) -> bool {
        if frto_undo || self.may_undo() {
            self.undo_cwnd_reduction(true);
            if frto_undo {
                ctx.ext.TCPSpuriousRTOs += 1;
            }
            self.retransmits = 0;
            if frto_undo || self.sack_ok {
                self.set_ca_state(CaState::Open, ctx.now);
            }
            return true;
        }
        false
    }

    /// `tcp_enter_loss`: a retransmission timeout marks what is out lost
    /// (all but the recently sent, by RACK) and restarts from one segment.
    pub(crate) fn enter_loss(&mut self, ctx: &mut Ctx<'_>) {
        let new_recovery = matches!(
            self.ca_state,
            CaState::Open | CaState::Disorder | CaState::Cwr
        );
        // `tcp_timeout_mark_lost`.
        if !self.sack_ok {
            self.reno_sacked = 0;
        }
        let now = ctx.now;
        for i in 0..self.rtx.len() {
            let x = self.rtx[i];
            if x.sacked || x.syn {
                continue;
            }
            let elapsed = now.saturating_sub(x.sent_at) / 1000;
            if i > 0 && self.rack.rtt_us as i64 - elapsed as i64 > 0 {
                continue;
            }
            self.mark_lost(i);
        }
        if matches!(self.ca_state, CaState::Open | CaState::Disorder)
            || !after(self.high_seq, self.snd_una)
            || (self.ca_state == CaState::Loss && self.retransmits == 0)
        {
            self.prior_ssthresh = self.current_ssthresh();
            self.prior_cwnd = self.snd_cwnd;
            let cwnd = self.snd_cwnd;
            self.snd_ssthresh = self.cubic.recalc_ssthresh(cwnd);
            self.init_undo();
        }
        self.snd_cwnd = self.in_flight() + 1;
        self.snd_cwnd_cnt = 0;
        self.set_ca_state(CaState::Loss, now);
        self.high_seq = self.snd_nxt;
        self.tlp_high_seq = None;
        self.ecn.queue_cwr();
        self.frto = ctx.cfg.tcp_frto > 0 && (new_recovery || self.retransmits > 0);
    }

    /// `tcp_non_congestion_loss_retransmit`: resend what is marked lost
    /// without touching the window (a path MTU's shrink, a Fast Open
    /// SYN-ACK that took only the SYN).
    pub(crate) fn non_congestion_loss_retransmit(&mut self, ctx: &mut Ctx<'_>) {
        if self.ca_state != CaState::Loss {
            self.high_seq = self.snd_nxt;
            self.snd_ssthresh = self.current_ssthresh();
            self.prior_ssthresh = 0;
            self.undo_marker = None;
            self.set_ca_state(CaState::Loss, ctx.now);
        }
        self.xmit_retransmit_queue(ctx);
    }

    /// `tcp_xmit_recovery`.
    pub(super) fn xmit_recovery(&mut self, ctx: &mut Ctx<'_>, rexmit: Rexmit) {
        match rexmit {
            Rexmit::None => {}
            Rexmit::New => {
                self.write_xmit(ctx, crate::output::Nonagle::Off);
                if after(self.snd_nxt, self.high_seq) {
                    return;
                }
                self.frto = false;
                self.xmit_retransmit_queue(ctx);
            }
            Rexmit::Lost => self.xmit_retransmit_queue(ctx),
        }
    }

    /// `tcp_xmit_retransmit_queue`: resend lost segments as the window
    /// allows, oldest first, up to a TSO packet at a time.
    pub(crate) fn xmit_retransmit_queue(&mut self, ctx: &mut Ctx<'_>) {
        let mut rearm = false;
        let mut i = 0;
        while i < self.rtx.len() {
            let segs = self.snd_cwnd as i64 - self.in_flight() as i64;
            if segs <= 0 {
                break;
            }
            if self.retrans_out() >= self.lost_out() {
                break;
            }
            let x = self.rtx[i];
            if !x.lost || x.sacked || x.retrans || x.syn {
                i += 1;
                continue;
            }
            let segs = (segs as u32).min(self.tso_segs_now());
            if !self.retransmit_skb(ctx, i, segs) {
                break;
            }
            if i == 0 && self.xmit_timer != XmitTimer::ReoTimeout {
                rearm = true;
            }
            i += 1;
        }
        if rearm {
            self.rto_at = Some(ctx.now + self.rto);
            self.xmit_timer = XmitTimer::Retrans;
        }
    }
}
