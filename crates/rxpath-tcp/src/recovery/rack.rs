//! RACK-TLP's loss detection (`tcp_rack_detect_loss`, its reordering
//! window and timer) and marking packets lost.

use super::*;

impl Conn {
    /// `tcp_rack_reo_wnd`.
    pub(super) fn rack_reo_wnd(&self) -> u64 {
        if self.reord_seen == 0 {
            if matches!(self.ca_state, CaState::Recovery | CaState::Loss) {
                return 0;
            }
            if self.sacked_out() >= self.reordering {
                return 0;
            }
        }
        (self.min_rtt_us >> 2).min(self.srtt_us >> 3)
    }

    /// `tcp_rack_detect_loss`: a segment sent before the most recently
    /// (S)ACKed one and older than its RTT plus the reordering window is
    /// lost; the earliest still undecided arms the reordering timer.
    pub(super) fn rack_detect_loss(&mut self, now: Nanos) -> u64 {
        let reo_wnd = self.rack_reo_wnd();
        let mut order: Vec<usize> = (0..self.rtx.len())
            .filter(|&i| !self.rtx[i].sacked && !self.rtx[i].syn)
            .collect();
        order.sort_by_key(|&i| {
            (
                self.rtx[i].sent_at,
                self.rtx[i].seq.wrapping_sub(self.snd_una),
            )
        });
        let mut timeout = 0u64;
        for i in order {
            let x = self.rtx[i];
            if x.lost && !x.retrans {
                continue;
            }
            if !sent_after(self.rack.mstamp, x.sent_at, self.rack.end_seq, x.end_seq) {
                break;
            }
            let elapsed = now.saturating_sub(x.sent_at) / 1000;
            let remaining = (self.rack.rtt_us + reo_wnd) as i64 - elapsed as i64;
            if remaining <= 0 {
                self.mark_lost(i);
            } else {
                timeout = timeout.max(remaining as u64);
            }
        }
        timeout
    }

    /// `tcp_mark_skb_lost`.
    pub(crate) fn mark_lost(&mut self, i: usize) {
        let x = &mut self.rtx[i];
        if x.sacked {
            return;
        }
        if x.lost {
            // A retransmission lost again.
            x.retrans = false;
        } else {
            x.lost = true;
        }
    }

    /// `tcp_rack_mark_lost`: RACK after new (S)ACKs; the reordering timer
    /// when a segment is not yet overdue.
    pub(super) fn rack_mark_lost(&mut self, now: Nanos) {
        if !self.sack_ok || !self.rack.advanced {
            return;
        }
        self.rack.advanced = false;
        let timeout = self.rack_detect_loss(now);
        if timeout > 0 {
            let t = timeout.div_ceil(1000) * 1_000_000 + 2_000_000;
            self.rto_at = Some(now + t.min(self.rto));
            self.xmit_timer = XmitTimer::ReoTimeout;
        }
    }

    /// `tcp_identify_packet_loss`: RACK with SACK, the first hole after
    /// `tcp_reordering` duplicate ACKs without (`tcp_newreno_mark_lost`).
    /// Whether a retransmission was found lost (`FLAG_LOST_RETRANS`).
    pub(super) fn identify_packet_loss(&mut self, now: Nanos, snd_una_advanced: bool) -> bool {
        if self.rtx.is_empty() {
            return false;
        }
        if !self.sack_ok {
            let in_recovery = self.ca_state == CaState::Recovery;
            if (!in_recovery && self.reno_sacked >= self.reordering)
                || (in_recovery && snd_una_advanced)
            {
                let h = self.rtx[0];
                if h.lost {
                    return false;
                }
                let mss = self.mss_cache.max(1);
                if self.pcount(&h) > 1 {
                    self.split_at(0, h.seq.wrapping_add(mss));
                }
                self.mark_lost(0);
            }
            return false;
        }
        let prior_retrans = self.retrans_out();
        self.rack_mark_lost(now);
        self.retrans_out() < prior_retrans
    }

    /// `tcp_rack_reo_timeout`: the reordering window passed.
    pub(crate) fn reo_timeout(&mut self, ctx: &mut Ctx<'_>) {
        let prior = self.in_flight();
        let timeout = self.rack_detect_loss(ctx.now);
        if prior != self.in_flight() {
            if self.ca_state != CaState::Recovery {
                self.enter_recovery(ctx);
                let flag = AckFlags::default();
                self.cwnd_reduction(1, 0, &flag);
            }
            self.xmit_retransmit_queue(ctx);
        }
        if timeout > 0 && self.rto_at.is_none() {
            let t = timeout.div_ceil(1000) * 1_000_000 + 2_000_000;
            self.rto_at = Some(ctx.now + t);
            self.xmit_timer = XmitTimer::ReoTimeout;
        } else if self.xmit_timer != XmitTimer::Retrans || self.rto_at.is_none() {
            self.xmit_timer = XmitTimer::ReoTimeout;
            self.rearm_rto(ctx.now);
        }
    }
}
