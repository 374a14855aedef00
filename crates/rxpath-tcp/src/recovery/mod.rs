//! The sender's side of an ACK: `tcp_ack`, `tcp_clean_rtx_queue` and the
//! congestion window's growth through CUBIC, here; the SACK scoreboard in
//! `sack`, RACK loss detection in `rack`, the congestion-state machine
//! (`tcp_fastretrans_alert`, PRR, retransmits) in `state`.

use rxpath_wire::tcp::flags::{FIN, SYN};

use crate::conn::{Conn, Sent, State, XmitTimer, TCP_INFINITE_SSTHRESH};
use crate::ctx::Ctx;
use crate::cubic::CaView;
use crate::seq::{after, before};
use crate::state::CaState;
use crate::time::Nanos;
use crate::wire::SegIn;

mod rack;
mod sack;
mod state;

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
    /// It echoed congestion (`FLAG_ECE`).
    pub ece: bool,
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
        // `packets_out + retrans_out - (sacked_out + lost_out)`, the four
        // counts taken in one walk of the queue.
        let (mut out, mut retrans, mut left) = (0u32, 0u32, self.reno_sacked);
        for s in &self.rtx {
            let n = self.pcount(s);
            out += n;
            if s.sacked {
                left += n;
                continue;
            }
            if s.retrans {
                retrans += n;
            }
            if s.lost {
                left += n;
            }
        }
        let n = (out + retrans).saturating_sub(left);
        debug_assert_eq!(
            n,
            (self.packets_out_all() + self.retrans_out())
                .saturating_sub(self.sacked_out() + self.lost_out())
        );
        n
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
            ece: self.ecn.echo(seg),
            ..AckFlags::default()
        };
        self.ack_update_window(ctx, seg, &mut flag);
        // `prior_fack`: the highest SACKed sequence before this ACK's own.
        let prior_fack = (self.sacked_before && self.sacked_out() > 0).then_some(self.highest_sack);
        if self.sack_ok && !seg.opts.sacks.is_empty() {
            self.sacktag(ctx, seg, prior_snd_una, &mut flag);
        }
        // On any ACK, data or not (`tcp_ack`: CWR on a pure ACK counts).
        if self.ecn.accept_cwr(seg) {
            self.ack.force = true;
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
        let dubious = !flag.not_dup()
            || flag.data_sacked
            || flag.dsack
            || flag.ece
            || self.ca_state != CaState::Open;
        if dubious {
            self.fastretrans_alert(ctx, prior_snd_una, is_dupack as u32, &flag, &mut rexmit);
        }
        let delivered = self.delivered.wrapping_sub(prior_delivered);
        if flag.ece {
            self.ecn.delivered_ce = self.ecn.delivered_ce.wrapping_add(delivered);
        }
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
    /// round used; a sender that is not held by the window, has sent all
    /// it has and whose writer found the buffer full is held by its send
    /// buffer (`TCP_CHRONO_SNDBUF_LIMITED`).
    pub(crate) fn cwnd_validate(&mut self, cwnd_limited: bool, now: Nanos) {
        let packets_out = self.packets_out_all();
        if !before(self.snd_una, self.cwnd_usage_seq)
            || cwnd_limited
            || (!self.cwnd_limited && packets_out > self.max_packets_out)
        {
            self.cwnd_limited = cwnd_limited;
            self.max_packets_out = packets_out;
            self.cwnd_usage_seq = self.snd_nxt;
        }
        if !self.is_cwnd_limited()
            && self.unsent() == 0
            && self.nospace
            && self.has_socket()
            && matches!(self.state, State::Established | State::CloseWait)
        {
            self.chrono
                .start(crate::state::ChronoType::SndbufLimited, now);
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
            if h.syn {
                // `FLAG_SYN_ACKED`.
                self.retrans_stamp = None;
            }
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
}
