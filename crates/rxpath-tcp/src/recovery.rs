//! The sender's side of an ACK: `tcp_ack` with the SACK scoreboard
//! (`tcp_sacktag_write_queue`), `tcp_clean_rtx_queue`, RACK loss
//! detection (`tcp_rack_detect_loss`), the congestion-state machine of
//! `tcp_fastretrans_alert` (Open, Disorder, Recovery, Loss with F-RTO),
//! PRR (`tcp_cwnd_reduction`), `tcp_xmit_retransmit_queue`, and the
//! congestion window's growth through CUBIC.

use rxpath_wire::tcp::flags::{FIN, SYN};

use crate::conn::{Conn, Sent, XmitTimer, TCP_INFINITE_SSTHRESH};
use crate::cubic::CaView;
use crate::seq::{after, before};
use crate::state::CaState;
use crate::wire::SegIn;
use crate::{Ctx, Nanos};

/// What an ACK did (`FLAG_*` in `tcp_input.c`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AckFlags {
    /// It carried data (`FLAG_DATA`).
    pub data: bool,
    /// It updated the window (`FLAG_WIN_UPDATE`).
    pub win_update: bool,
    /// It moved `snd_una` (`FLAG_SND_UNA_ADVANCED`).
    pub snd_una_advanced: bool,
    /// It acknowledged data (`FLAG_DATA_ACKED`) or a SYN (`FLAG_ACKED`).
    pub acked: bool,
    /// Data was acknowledged, not only a SYN.
    pub data_acked: bool,
    /// It SACKed new data (`FLAG_DATA_SACKED`).
    pub data_sacked: bool,
    /// It carried a D-SACK (`FLAG_DSACKING_ACK`).
    pub dsack: bool,
    /// Never-retransmitted data was (S)ACKed (`FLAG_ORIG_SACK_ACKED`).
    pub orig_sack_acked: bool,
}

impl AckFlags {
    /// `FLAG_NOT_DUP`.
    fn not_dup(&self) -> bool {
        self.data || self.win_update || self.acked
    }
}

/// What the ACK asks to retransmit (`REXMIT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rexmit {
    None,
    /// Lost segments.
    Lost,
    /// New data (F-RTO's step 2.b).
    New,
}

/// The later of two sequence numbers.
fn seq_max(a: u32, b: u32) -> u32 {
    if after(b, a) {
        b
    } else {
        a
    }
}

/// `tcp_rack_sent_after`: `t1`/`seq1` went out after `t2`/`seq2`.
fn sent_after(t1: Nanos, t2: Nanos, seq1: u32, seq2: u32) -> bool {
    t1 > t2 || (t1 == t2 && after(seq1, seq2))
}

struct Cleaned {
    acked_pkts: u32,
    data_acked: bool,
    seq_rtt: Option<u64>,
    ca_rtt: Option<u64>,
    orig_acked: bool,
}

impl Conn {
    /// Segments in flight (`tcp_packets_in_flight`): sent, less SACKed
    /// and lost, plus retransmitted.
    pub fn in_flight(&self) -> u32 {
        (self.packets_out_all() + self.retrans_out())
            .saturating_sub(self.sacked_out() + self.lost_out())
    }

    fn ca_view(&mut self, now: Nanos) -> (CaView<'_>, &mut crate::cubic::Cubic) {
        let pacing_rate = self.pacing_rate();
        (
            CaView {
                cwnd: &mut self.snd_cwnd,
                ssthresh: &mut self.snd_ssthresh,
                cwnd_cnt: &mut self.snd_cwnd_cnt,
                snd_una: self.snd_una,
                snd_nxt: self.snd_nxt,
                pacing_rate,
                now,
            },
            &mut self.cubic,
        )
    }

    /// `tcp_ack`.
    pub(crate) fn tcp_ack(&mut self, ctx: &mut Ctx<'_>, seg: &SegIn<'_>) {
        let ack = seg.ack;
        let prior_snd_una = self.snd_una;
        if let Some((_, ecr)) = seg.opts.ts.filter(|_| self.ts_ok) {
            self.rcv_tsecr = ecr;
        }
        if before(ack, self.snd_una) {
            // An old ACK: only its SACK blocks count (`old_ack`), and may
            // let recovery send.
            if self.sack_ok && !seg.opts.sacks.is_empty() {
                let mut flag = AckFlags::default();
                self.sacktag(ctx, seg, prior_snd_una, &mut flag);
                let mut rexmit = Rexmit::None;
                self.fastretrans_alert(ctx, prior_snd_una, 0, &flag, &mut rexmit);
                self.xmit_recovery(ctx, rexmit);
            }
            return;
        }
        self.rcv_tstamp = ctx.now;
        // Any acceptable ACK answers a probe (`icsk_probes_out = 0`).
        self.probes_out = 0;
        let prior_packets = self.packets_out_all();
        let prior_delivered = self.delivered;
        let prior_lost = self.lost_out();
        let mut flag = AckFlags {
            data: !seg.payload.is_empty(),
            snd_una_advanced: after(ack, self.snd_una),
            ..AckFlags::default()
        };
        self.ack_update_window(ctx, seg, &mut flag);
        // `prior_fack`: the highest SACKed sequence before this ACK's own.
        let prior_fack = (self.sacked_before && self.sacked_out() > 0).then_some(self.highest_sack);
        if self.sack_ok && !seg.opts.sacks.is_empty() {
            self.sacktag(ctx, seg, prior_snd_una, &mut flag);
        }
        if prior_packets == 0 {
            self.ack_with_nothing_out(ctx, seg, &flag);
            return;
        }
        let cleaned = self.clean_rtx_queue(ctx, ack, prior_fack);
        if cleaned.acked_pkts > 0 || flag.snd_una_advanced {
            flag.acked = true;
            flag.data_acked = cleaned.data_acked;
        }
        flag.orig_sack_acked |= cleaned.orig_acked;
        self.ack_samples_and_timer(ctx, ack, &cleaned, flag.acked);
        let is_dupack = !flag.snd_una_advanced && !flag.not_dup();
        let mut rexmit = Rexmit::None;
        let dubious =
            !flag.not_dup() || flag.data_sacked || flag.dsack || self.ca_state != CaState::Open;
        if dubious {
            self.fastretrans_alert(ctx, prior_snd_una, is_dupack as u32, &flag, &mut rexmit);
        }
        let delivered = self.delivered.wrapping_sub(prior_delivered);
        let newly_lost = self.lost_out().saturating_sub(prior_lost);
        if matches!(self.ca_state, CaState::Cwr | CaState::Recovery) {
            self.cwnd_reduction(delivered, newly_lost, &flag);
        } else if (flag.data_acked || (self.reordering > 3 && flag.data_sacked))
            && self.is_cwnd_limited()
        {
            let (mut v, cubic) = self.ca_view(ctx.now);
            cubic.cong_avoid(&mut v, delivered);
        }
        self.xmit_recovery(ctx, rexmit);
        self.check_space(ctx, cleaned.acked_pkts);
    }

    /// `tcp_ack_update_window` (`tcp_may_update_window`'s rule).
    fn ack_update_window(&mut self, ctx: &mut Ctx<'_>, seg: &SegIn<'_>, flag: &mut AckFlags) {
        let ack = seg.ack;
        let nwin = if seg.has(SYN) {
            seg.wnd as u32
        } else {
            (seg.wnd as u32) << self.snd_wscale
        };
        if after(ack, self.snd_una)
            || after(seg.seq, self.snd_wl1)
            || (seg.seq == self.snd_wl1 && (nwin > self.snd_wnd || nwin == 0))
        {
            if self.snd_wnd != nwin {
                flag.win_update = true;
                self.snd_wnd = nwin;
                // `tcp_ack_update_window`: data waiting for this window may
                // have waited an idle RTO.
                if self.unsent() > 0 && self.rtx.is_empty() {
                    self.slow_start_after_idle_check(ctx);
                }
            }
            self.snd_wl1 = seg.seq;
            self.max_window = self.max_window.max(nwin);
        }
    }

    /// An ACK with nothing in flight: a window update or a probe's answer
    /// (`tcp_ack`'s `no_queue`, `tcp_ack_probe`).
    fn ack_with_nothing_out(&mut self, ctx: &mut Ctx<'_>, seg: &SegIn<'_>, flag: &AckFlags) {
        if !flag.snd_una_advanced && seg.payload.is_empty() && !seg.has(FIN) {
            ctx.ext.TCPPureAcks += 1;
        }
        self.probes_out = 0;
        if self.xmit_timer == XmitTimer::Probe0 && self.unsent() > 0 {
            let wnd_end = self.snd_una.wrapping_add(self.snd_wnd);
            if !after(
                self.snd_nxt.wrapping_add(self.unsent().min(self.mss_cache)),
                wnd_end,
            ) {
                self.backoff = 0;
                self.rto_at = None;
            }
        }
    }

    /// The RTT samples an ACK gave (`tcp_ack_update_rtt`, CUBIC's
    /// `pkts_acked`), and the transmit timer after it (`tcp_set_xmit_timer`).
    fn ack_samples_and_timer(
        &mut self,
        ctx: &mut Ctx<'_>,
        ack: u32,
        cleaned: &Cleaned,
        acked: bool,
    ) {
        if let Some(rtt) = cleaned.seq_rtt {
            self.rtt_estimator(rtt);
            self.backoff = 0;
        }
        if let Some(rtt) = cleaned.ca_rtt.or(cleaned.seq_rtt) {
            let (mut v, cubic) = self.ca_view(ctx.now);
            cubic.acked(&mut v, rtt);
        }
        if acked {
            self.retransmits = 0;
            self.probes_out = 0;
            if self.tlp_high_seq.is_some_and(|h| !before(ack, h)) {
                self.tlp_high_seq = None;
            }
            // `tcp_set_xmit_timer`.
            if self.rtx.is_empty() {
                self.rto_at = None;
            } else if !self.schedule_loss_probe(ctx, true) {
                self.rearm_rto(ctx.now);
            }
        }
    }

    /// `tcp_check_space`: freed space may grow the buffer with the window
    /// (`tcp_new_space`) and wake a writer that found none.
    fn check_space(&mut self, ctx: &mut Ctx<'_>, acked_pkts: u32) {
        // `tcp_check_space` → `tcp_new_space`: freed space may grow the
        // buffer with the window (`tcp_should_expand_sndbuf`).
        if acked_pkts > 0 && self.in_flight() < self.snd_cwnd {
            self.sndbuf_expand(ctx);
        }
        let empty = self.rtx.is_empty() && self.unsent() == 0;
        if empty {
            self.chrono
                .stop(crate::state::ChronoType::Busy, ctx.now, true);
        }
        // Space freed for a writer that found none.
        if self.nospace && self.writeable() {
            self.chrono
                .stop(crate::state::ChronoType::SndbufLimited, ctx.now, empty);
            self.nospace = false;
            self.wake_out += 1;
        }
    }

    /// `tcp_is_cwnd_limited`.
    pub(crate) fn is_cwnd_limited(&self) -> bool {
        if self.cwnd_limited {
            return true;
        }
        if self.snd_cwnd < self.snd_ssthresh {
            return self.snd_cwnd < 2 * self.max_packets_out;
        }
        false
    }

    /// `tcp_cwnd_validate`: remember how much of the window the last
    /// round used.
    pub(crate) fn cwnd_validate(&mut self, cwnd_limited: bool) {
        let packets_out = self.packets_out_all();
        if !before(self.snd_una, self.cwnd_usage_seq)
            || cwnd_limited
            || (!self.cwnd_limited && packets_out > self.max_packets_out)
        {
            self.cwnd_limited = cwnd_limited;
            self.max_packets_out = packets_out;
            self.cwnd_usage_seq = self.snd_nxt;
        }
    }

    /// `tcp_clean_rtx_queue`: drop what `ack` covers, take the RTT samples
    /// (Karn: none from a retransmission), advance RACK.
    fn clean_rtx_queue(&mut self, ctx: &mut Ctx<'_>, ack: u32, prior_fack: Option<u32>) -> Cleaned {
        let base = self.data_base();
        let mut c = Cleaned {
            acked_pkts: 0,
            data_acked: false,
            seq_rtt: None,
            ca_rtt: None,
            orig_acked: false,
        };
        let mut acked_syn = false;
        let mut reord: Option<u32> = None;
        let mut first: Option<Nanos> = None;
        let mut last: Option<Nanos> = None;
        let now = ctx.now;
        while let Some(h) = self.rtx.front().copied() {
            let fully = !after(h.end_seq, ack);
            if !fully {
                if after(ack, h.seq) {
                    // A partial ACK of a TSO packet (`tcp_trim_head`).
                    let before_trim = self.pcount(&h);
                    self.rtx[0] = Sent {
                        seq: ack,
                        syn: false,
                        ..h
                    };
                    let n = before_trim - self.pcount(&self.rtx[0]);
                    c.acked_pkts += n;
                    if !h.sacked {
                        self.delivered = self.delivered.wrapping_add(n);
                    }
                    c.data_acked = true;
                    if !h.ever_retrans {
                        first.get_or_insert(h.sent_at);
                        last = Some(h.sent_at);
                        c.orig_acked = true;
                    }
                }
                break;
            }
            self.rtx.pop_front();
            acked_syn |= h.syn;
            let n = if h.syn { 0 } else { self.pcount(&h) };
            c.acked_pkts += n;
            if !h.sacked {
                self.delivered = self.delivered.wrapping_add(n);
                self.rack_advance(h.ever_retrans || h.retrans, h.end_seq, h.sent_at, now);
            }
            if !h.syn {
                c.data_acked = true;
            }
            if !h.ever_retrans && !h.sacked {
                first.get_or_insert(h.sent_at);
                last = Some(h.sent_at);
                c.orig_acked = true;
                if !h.syn && reord.is_none_or(|r| before(h.seq, r)) {
                    reord = Some(h.seq);
                }
            }
        }
        // Never-SACKed data acknowledged below what was SACKed: reordering.
        if let (Some(low), Some(fack)) = (reord, prior_fack) {
            if before(low, fack) {
                self.check_sack_reordering(ctx, low);
            }
        }
        c.seq_rtt = first.map(|t| now.saturating_sub(t) / 1000);
        c.ca_rtt = last.map(|t| now.saturating_sub(t) / 1000);
        if c.seq_rtt.is_none() && c.data_acked && self.ts_ok && self.rcv_tsecr != 0 {
            // `tcp_rtt_tsopt_us`: an RTT from the echoed timestamp when the
            // sequence gives none (every acked segment was retransmitted).
            let delta = self.ts_val(now).wrapping_sub(self.rcv_tsecr);
            if (delta as i32) >= 0 && delta < 1 << 30 {
                c.seq_rtt = Some(delta.max(1) as u64 * 1000);
                c.ca_rtt = c.seq_rtt;
            }
        }
        self.advance_una(ack, base, acked_syn, c.acked_pkts);
        c
    }

    /// `snd_una` moves to `ack`: the send buffer gives up what is acked,
    /// the counters and Reno's duplicate-ACK count follow.
    fn advance_una(&mut self, ack: u32, base: u32, acked_syn: bool, acked_pkts: u32) {
        let data_end = if self.fin_queued && !before(ack, self.write_seq.wrapping_add(1)) {
            self.write_seq
        } else {
            ack
        };
        let drop = data_end.wrapping_sub(base) as i32;
        if drop > 0 {
            let n = (drop as usize).min(self.sndbuf.len());
            self.sndbuf.drain(..n);
        }
        let newly = ack.wrapping_sub(self.snd_una);
        self.bytes_acked += newly.saturating_sub(acked_syn as u32) as u64;
        if !self.sack_ok && acked_pkts > 0 {
            // `tcp_remove_reno_sacks`: one ACK filled the hole, the rest
            // ate duplicate ACKs.
            if acked_pkts > self.reno_sacked {
                self.reno_sacked = 0;
            } else {
                self.reno_sacked -= acked_pkts - 1;
            }
        }
        self.snd_una = ack;
        if before(self.snd_sml, ack) {
            self.snd_sml = ack;
        }
    }

    /// `tcp_rack_advance`: the most recently sent segment (S)ACKed, and
    /// the RTT it saw.
    fn rack_advance(&mut self, retransmitted: bool, end_seq: u32, sent_at: Nanos, now: Nanos) {
        let rtt_us = now.saturating_sub(sent_at) / 1000;
        if retransmitted && rtt_us < self.min_rtt_us {
            // Possibly the original's ACK: ambiguous.
            return;
        }
        self.rack.advanced = true;
        self.rack.rtt_us = rtt_us;
        if sent_after(sent_at, self.rack.mstamp, end_seq, self.rack.end_seq) {
            self.rack.mstamp = sent_at;
            self.rack.end_seq = end_seq;
        }
    }

    /// `tcp_sacktag_write_queue`: mark what the SACK blocks cover,
    /// cutting TSO packets at MSS boundaries; a first block below the
    /// ACK, or inside the second, is a D-SACK.
    fn sacktag(
        &mut self,
        ctx: &mut Ctx<'_>,
        seg: &SegIn<'_>,
        prior_snd_una: u32,
        flag: &mut AckFlags,
    ) {
        let blocks = &seg.opts.sacks;
        let mut first = 0;
        if let Some(&(s0, e0)) = blocks.first() {
            let dsack = before(s0, seg.ack)
                || blocks
                    .get(1)
                    .is_some_and(|&(s1, e1)| !after(e0, e1) && !before(s0, s1));
            if dsack {
                flag.dsack = true;
                first = 1;
                if self.undo_retrans > 0 && !after(e0, seq_max(prior_snd_una, seg.ack)) {
                    self.undo_retrans -= 1;
                }
            }
        }
        let mss = self.mss_cache.max(1);
        let now = ctx.now;
        let mut reord: Option<u32> = None;
        if self.sacked_out() == 0 {
            self.sacked_before = false;
        }
        for &(s, e) in &blocks[first..] {
            if !after(e, s) || !after(e, seq_max(self.snd_una, seg.ack)) || after(e, self.snd_nxt) {
                continue;
            }
            let mut i = 0;
            while i < self.rtx.len() {
                let x = self.rtx[i];
                if x.syn || !after(x.end_seq, s) || !before(x.seq, e) || x.sacked {
                    i += 1;
                    continue;
                }
                let data_end = x.end_seq.wrapping_sub(x.fin as u32);
                // Cut at the block's edges, rounded to whole segments
                // (`tcp_match_skb_to_sack`).
                if after(s, x.seq) {
                    let cut = x
                        .seq
                        .wrapping_add(s.wrapping_sub(x.seq).div_ceil(mss) * mss);
                    if before(cut, data_end) {
                        self.split_at(i, cut);
                        i += 1;
                        continue;
                    }
                    i += 1;
                    continue;
                }
                if before(e, x.end_seq) {
                    let cut = x.seq.wrapping_add(e.wrapping_sub(x.seq) / mss * mss);
                    if after(cut, x.seq) && before(cut, data_end) {
                        self.split_at(i, cut);
                    } else {
                        i += 1;
                        continue;
                    }
                }
                let x = self.rtx[i];
                let n = self.pcount(&x);
                self.rtx[i].sacked = true;
                self.rtx[i].lost = false;
                self.rtx[i].retrans = false;
                self.delivered = self.delivered.wrapping_add(n);
                flag.data_sacked = true;
                if !x.ever_retrans {
                    flag.orig_sack_acked = true;
                }
                if !x.ever_retrans
                    && !x.retrans
                    && self.sacked_before
                    && before(x.seq, self.highest_sack)
                {
                    // SACKed below what was SACKed before.
                    reord = Some(
                        reord.map_or(x.seq, |r: u32| if before(x.seq, r) { x.seq } else { r }),
                    );
                }
                if !self.sacked_before || after(x.end_seq, self.highest_sack) {
                    self.highest_sack = x.end_seq;
                }
                self.sacked_before = true;
                self.rack_advance(x.ever_retrans || x.retrans, x.end_seq, x.sent_at, now);
                i += 1;
            }
        }
        if let Some(low) = reord {
            self.check_sack_reordering(ctx, low);
        }
    }

    /// `tcp_check_sack_reordering`: a SACK below the highest SACKed
    /// sequence raises `reordering` to the distance, in segments.
    fn check_sack_reordering(&mut self, ctx: &mut Ctx<'_>, low: u32) {
        let fack = self.highest_sack;
        if !before(low, fack) {
            return;
        }
        let mss = self.mss_cache.max(1);
        let metric = fack.wrapping_sub(low);
        if metric > self.reordering * mss {
            self.reordering = metric.div_ceil(mss).min(ctx.cfg.tcp_max_reordering);
        }
        self.reord_seen = self.reord_seen.wrapping_add(1);
        ctx.ext.TCPSACKReorder += 1;
    }

    /// Cut retransmission-queue entry `i` at `cut` (`tcp_fragment`): both
    /// parts keep its marks, the first loses PSH and FIN.
    pub(crate) fn split_at(&mut self, i: usize, cut: u32) {
        let x = self.rtx[i];
        self.rtx[i] = Sent {
            end_seq: cut,
            fin: false,
            psh: false,
            ..x
        };
        self.rtx.insert(
            i + 1,
            Sent {
                seq: cut,
                syn: false,
                ..x
            },
        );
    }

    /// `tcp_rack_reo_wnd`.
    fn rack_reo_wnd(&self) -> u64 {
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
    fn rack_detect_loss(&mut self, now: Nanos) -> u64 {
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
    fn rack_mark_lost(&mut self, now: Nanos) {
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
    fn identify_packet_loss(&mut self, now: Nanos, snd_una_advanced: bool) -> bool {
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

    /// `tcp_fastretrans_alert`.
    fn fastretrans_alert(
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
                // `tcp_try_to_open`.
                if self.ca_state != CaState::Loss {
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
    fn add_reno_sack(&mut self, num_dupack: u32) {
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

    fn set_ca_state(&mut self, s: CaState, now: Nanos) {
        if s == CaState::Loss {
            let nxt = self.snd_nxt;
            self.cubic.on_loss_state(now, nxt);
        }
        self.ca_state = s;
    }

    /// `tcp_enter_recovery` with `tcp_init_cwnd_reduction`.
    fn enter_recovery(&mut self, ctx: &mut Ctx<'_>) {
        if self.sack_ok {
            ctx.ext.TCPSackRecovery += 1;
        } else {
            ctx.ext.TCPRenoRecovery += 1;
        }
        self.init_undo();
        if !matches!(self.ca_state, CaState::Cwr | CaState::Recovery) {
            self.prior_ssthresh = self.current_ssthresh();
            self.high_seq = self.snd_nxt;
            self.tlp_high_seq = None;
            self.snd_cwnd_cnt = 0;
            self.prior_cwnd = self.snd_cwnd;
            self.prr_delivered = 0;
            self.prr_out = 0;
            let cwnd = self.snd_cwnd;
            self.snd_ssthresh = self.cubic.recalc_ssthresh(cwnd);
        }
        self.set_ca_state(CaState::Recovery, ctx.now);
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
    fn init_undo(&mut self) {
        self.undo_marker = Some(self.snd_una);
        self.undo_retrans = if self.retrans_out() > 0 {
            self.retrans_out() as i32
        } else {
            -1
        };
        self.retrans_stamp = None;
    }

    /// `tcp_may_undo`: every retransmission proved needless (D-SACKed), or
    /// the peer's timestamp shows the original arrived.
    fn may_undo(&self) -> bool {
        self.undo_marker.is_some() && (self.undo_retrans == 0 || self.packet_delayed())
    }

    /// `tcp_packet_delayed`.
    fn packet_delayed(&self) -> bool {
        match self.retrans_stamp {
            Some(stamp) => self.ts_ok && self.rcv_tsecr != 0 && before(self.rcv_tsecr, stamp),
            None => false,
        }
    }

    /// `tcp_undo_cwnd_reduction`.
    fn undo_cwnd_reduction(&mut self, unmark_loss: bool) {
        if unmark_loss {
            for x in self.rtx.iter_mut() {
                x.lost = false;
            }
        }
        if self.prior_ssthresh > 0 {
            self.snd_cwnd = self.snd_cwnd.max(self.prior_cwnd);
            if self.prior_ssthresh > self.snd_ssthresh {
                self.snd_ssthresh = self.prior_ssthresh;
            }
        }
        self.undo_marker = None;
        self.rack.advanced = true;
    }

    /// `tcp_try_undo_recovery`.
    fn try_undo_recovery(&mut self, ctx: &mut Ctx<'_>) -> bool {
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
    fn end_cwnd_reduction(&mut self) {
        if self.snd_ssthresh < TCP_INFINITE_SSTHRESH
            && (self.ca_state == CaState::Cwr || self.undo_marker.is_some())
        {
            self.snd_cwnd = self.snd_ssthresh;
        }
    }

    /// `tcp_cwnd_reduction`: Proportional Rate Reduction (RFC 6937).
    fn cwnd_reduction(&mut self, newly_acked_sacked: u32, newly_lost: u32, flag: &AckFlags) {
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
    fn process_loss(
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
    fn try_undo_loss(&mut self, ctx: &mut Ctx<'_>, frto_undo: bool) -> bool {
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
        self.frto = ctx.cfg.tcp_frto > 0 && (new_recovery || self.retransmits > 0);
    }

    /// `tcp_xmit_recovery`.
    fn xmit_recovery(&mut self, ctx: &mut Ctx<'_>, rexmit: Rexmit) {
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
            self.retransmit_skb(ctx, i, segs);
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
