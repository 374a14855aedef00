//! `tcp_timer.c`: the retransmission timer (with the SYN's), the delayed
//! ACK, TIME_WAIT and an orphan's FIN_WAIT2.

use crate::conn::{Conn, State, XmitTimer, TCP_DELACK_MIN, TCP_RTO_MAX, TCP_RTO_MIN};
use crate::ctx::Ctx;
use crate::input::Verdict;

impl Conn {
    /// The earliest deadline this connection has.
    pub(crate) fn next_deadline(&self) -> Option<crate::time::Nanos> {
        // Folded by hand: an iterator over the four spilled them to the
        // stack and read them back (a store-forwarding stall per call).
        let min = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, None) => x,
            (None, y) => y,
        };
        min(
            min(self.rto_at, self.ack.timer),
            min(self.close_at, self.ka_at),
        )
    }

    /// Run every timer due at `ctx.now`.
    pub(crate) fn on_timeout(&mut self, ctx: &mut Ctx<'_>) -> Verdict {
        let now = ctx.now;
        if self.close_at.is_some_and(|t| t <= now) {
            self.close_at = None;
            self.state = State::Closed;
            return Verdict::Closed;
        }
        if self.ack.timer.is_some_and(|t| t <= now) {
            self.delack_timer(ctx);
        }
        if self.ka_at.is_some_and(|t| t <= now) && self.keepalive_timer(ctx) == Verdict::Closed {
            return Verdict::Closed;
        }
        if self.rto_at.is_some_and(|t| t <= now) {
            self.rto_at = None;
            match self.xmit_timer {
                XmitTimer::Retrans => return self.retransmit_timer(ctx),
                XmitTimer::LossProbe => self.send_loss_probe(ctx),
                XmitTimer::Probe0 => return self.probe_timer(ctx),
                XmitTimer::ReoTimeout => self.reo_timeout(ctx),
            }
        }
        Verdict::Keep
    }

    /// `tcp_delack_timer_handler`.
    fn delack_timer(&mut self, ctx: &mut Ctx<'_>) {
        self.ack.timer = None;
        if !self.ack.pending {
            return;
        }
        if self.ack.pingpong == 0 {
            self.ack.ato = (self.ack.ato << 1).min(self.rto);
        } else {
            self.ack.pingpong = 0;
            self.ack.ato = TCP_DELACK_MIN;
        }
        ctx.ext.DelayedACKs += 1;
        self.send_ack(ctx);
    }

    /// `tcp_retransmit_timer` with `tcp_write_timeout`'s give-up rule
    /// (counted in retransmissions; SYNs back off linearly four times, as
    /// `tcp_syn_linear_timeouts`).
    pub(crate) fn retransmit_timer(&mut self, ctx: &mut Ctx<'_>) -> Verdict {
        if self.rtx.is_empty() {
            return Verdict::Keep;
        }
        self.tlp_high_seq = None;
        // `tcp_write_timeout`: a handshake by its count of retransmissions,
        // an open connection by the time since its first retransmission.
        let expired = match self.state {
            // By count (the linear timeouts added) or by the time the
            // retries would take backing off from a second, from the
            // first SYN (`retransmits_timed_out`, which the kernel asks
            // of a SYN too).
            State::SynSent => {
                let retries = self.syn_retries.unwrap_or(ctx.cfg.tcp_syn_retries) as u32;
                self.retransmits >= retries + SYN_LINEAR_TIMEOUTS
                    || self.retransmits_timed_out(ctx.now, retries)
            }
            // `syn_ack_recalc` with the deferral as the retries: a
            // deferring child lasts the deferral, ACKed or not.
            State::SynRecv if self.defer_accept > 0 => {
                self.retransmits >= u32::from(self.defer_accept)
            }
            State::SynRecv => self.retransmits >= ctx.cfg.tcp_synack_retries as u32,
            _ => self.retransmits_timed_out(ctx.now, ctx.cfg.tcp_retries2 as u32),
        };
        if expired {
            self.err = Some(self.err_soft.unwrap_or(libc::ETIMEDOUT));
            ctx.ext.TCPAbortOnTimeout += 1;
            if matches!(self.state, State::SynSent | State::SynRecv) {
                ctx.mib.AttemptFails += 1;
            }
            self.state = State::Closed;
            self.ack.timer = None;
            return Verdict::Closed;
        }
        ctx.ext.TCPTimeouts += 1;
        self.total_rto = self.total_rto.saturating_add(1);
        self.enter_loss(ctx);
        self.retransmits += 1;
        // A deferring child whose ACK came waits for data without a
        // SYN-ACK, until the last chance before its deferral ends.
        let quiet = self.state == State::SynRecv
            && self.defer_acked
            && self.retransmits < u32::from(self.defer_accept);
        if !quiet && !self.retransmit_skb(ctx, 0, 1) && self.state != State::SynSent {
            // Local congestion (the device refused it): try again soon,
            // without backing off (`TCP_RESOURCE_PROBE_INTERVAL`).
            self.rto_at = Some(ctx.now + TCP_RESOURCE_PROBE_INTERVAL);
            self.xmit_timer = XmitTimer::Retrans;
            return Verdict::Keep;
        }
        self.backoff += 1;
        if self.state != State::SynSent || self.backoff > SYN_LINEAR_TIMEOUTS {
            self.rto = (self.rto << 1).min(TCP_RTO_MAX);
        }
        self.rto_at = Some(ctx.now + self.rto);
        self.xmit_timer = XmitTimer::Retrans;
        Verdict::Keep
    }

    /// `retransmits_timed_out`: has the time since the first
    /// retransmission (of a SYN: since the first SYN) passed what
    /// `boundary` retransmissions take backing off from `TCP_RTO_MIN` (a
    /// SYN's: `TCP_TIMEOUT_INIT`; `tcp_model_timeout`)? An RTO undone by
    /// an ICMP message (RFC 6069) so allows more retransmissions in that
    /// time.
    pub(crate) fn retransmits_timed_out(&self, now: crate::time::Nanos, boundary: u32) -> bool {
        let Some(start) = self.retrans_stamp.filter(|_| self.retransmits > 0) else {
            return false;
        };
        let rto_base = if matches!(self.state, State::SynSent | State::SynRecv) {
            crate::conn::TCP_TIMEOUT_INIT
        } else {
            TCP_RTO_MIN
        };
        let base = rto_base / crate::conn::MS;
        let linear = (TCP_RTO_MAX / rto_base).ilog2();
        let timeout = if boundary <= linear {
            ((2u64 << boundary) - 1) * base
        } else {
            ((2u64 << linear) - 1) * base
                + (boundary - linear) as u64 * (TCP_RTO_MAX / crate::conn::MS)
        };
        let elapsed = self.ts_val(now).wrapping_sub(start);
        (timeout as u32).wrapping_sub(elapsed) as i32 <= 0
    }

    /// `tcp_schedule_loss_probe`: a probe in two RTTs (plus the minimum
    /// RTO when one packet is out, for the peer's delayed ACK), unless the
    /// RTO comes first. SACK connections outside recovery only.
    pub(crate) fn schedule_loss_probe(&mut self, ctx: &Ctx<'_>, advancing_rto: bool) -> bool {
        let out = self.packets_out_all();
        if !matches!(ctx.cfg.tcp_early_retrans, 3 | 4)
            || out == 0
            || !self.sack_ok
            || !matches!(
                self.ca_state,
                crate::state::CaState::Open | crate::state::CaState::Cwr
            )
            || self.tlp_high_seq.is_some()
            || !self.synchronized()
        {
            return false;
        }
        let mut timeout = if self.srtt_us > 0 {
            let mut t = self.srtt_us >> 2;
            t += if out == 1 { TCP_RTO_MIN / 1000 } else { 2000 };
            t.div_ceil(1000) * 1_000_000
        } else {
            crate::conn::TCP_TIMEOUT_INIT
        };
        let rto_delta = if advancing_rto {
            Some(self.rto)
        } else {
            self.rtx
                .front()
                .map(|h| (h.sent_at + self.rto).saturating_sub(ctx.now))
                .filter(|&d| d > 0)
        };
        if let Some(d) = rto_delta {
            timeout = timeout.min(d.div_ceil(1_000_000) * 1_000_000);
        }
        self.rto_at = Some(ctx.now + timeout);
        self.xmit_timer = XmitTimer::LossProbe;
        true
    }

    /// `tcp_send_loss_probe`: one new segment if the window allows, else
    /// the last MSS sent again; then the RTO.
    fn send_loss_probe(&mut self, ctx: &mut Ctx<'_>) {
        let wnd_end = self.snd_una.wrapping_add(self.snd_wnd);
        let sent = if self.unsent() > 0 && crate::seq::before(self.snd_nxt, wnd_end) {
            self.write_probe_segment(ctx);
            true
        } else {
            self.retransmit_tail(ctx)
        };
        if sent {
            ctx.ext.TCPLossProbes += 1;
            self.tlp_high_seq = Some(self.snd_nxt);
        }
        self.xmit_timer = XmitTimer::LossProbe;
        self.rearm_rto(ctx.now);
    }

    /// `tcp_probe_timer`: a zero-window probe (`tcp_write_wakeup`), backing
    /// off to `TCP_RTO_MAX`; the connection is given up after
    /// `tcp_retries2` unanswered probes.
    fn probe_timer(&mut self, ctx: &mut Ctx<'_>) -> Verdict {
        if !self.rtx.is_empty() || self.unsent() == 0 {
            return Verdict::Keep;
        }
        if self.probes_out >= ctx.cfg.tcp_retries2 as u32 {
            self.err = Some(self.err_soft.unwrap_or(libc::ETIMEDOUT));
            ctx.ext.TCPAbortOnTimeout += 1;
            self.state = State::Closed;
            return Verdict::Closed;
        }
        self.write_wakeup(ctx);
        self.probes_out += 1;
        self.backoff = (self.backoff + 1).min(ctx.cfg.tcp_retries2 as u32);
        self.rto_at = Some(ctx.now + self.probe0_when());
        self.xmit_timer = XmitTimer::Probe0;
        Verdict::Keep
    }

    /// `tcp_check_probe_timer`: nothing in flight, data queued that the
    /// window will not take: arm the zero-window probe.
    pub(crate) fn check_probe_timer(&mut self, now: crate::time::Nanos) {
        if self.rtx.is_empty() && self.unsent() > 0 && self.rto_at.is_none() {
            self.rto_at = Some(now + self.probe0_when());
            self.xmit_timer = XmitTimer::Probe0;
        }
    }

    /// `tcp_probe0_when`: `max(RTO, TCP_RTO_MIN)` backed off.
    pub(crate) fn probe0_when(&self) -> crate::time::Nanos {
        (self.rto.max(TCP_RTO_MIN) << self.backoff.min(10)).min(TCP_RTO_MAX)
    }
}

/// `tcp_syn_linear_timeouts`: SYNs retransmitted at the initial RTO before
/// backing off.
const SYN_LINEAR_TIMEOUTS: u32 = 4;
/// `TCP_RESOURCE_PROBE_INTERVAL`: a retransmission the device refused is
/// tried again this soon.
const TCP_RESOURCE_PROBE_INTERVAL: crate::time::Nanos = 500 * crate::conn::MS;

impl Conn {
    /// The idle time before the first keepalive probe (`keepalive_time_when`).
    pub(crate) fn keep_time(&self, ctx: &Ctx<'_>) -> crate::time::Nanos {
        self.keep_idle.unwrap_or(ctx.cfg.tcp_keepalive_time) as u64 * 1_000_000_000
    }

    /// Arm the keepalive timer a whole idle time from now
    /// (`inet_csk_reset_keepalive_timer` at establishment or `SO_KEEPALIVE`).
    pub(crate) fn arm_keepalive(&mut self, ctx: &Ctx<'_>) {
        self.ka_at = (self.keepalive && self.synchronized()).then(|| ctx.now + self.keep_time(ctx));
    }

    /// `tcp_keepalive_timer`: after the idle time with nothing in flight,
    /// a probe one below `snd_una` every interval; after `TCP_KEEPCNT`
    /// unanswered, a reset and `ETIMEDOUT`.
    fn keepalive_timer(&mut self, ctx: &mut Ctx<'_>) -> Verdict {
        self.ka_at = None;
        if !self.keepalive || !self.synchronized() || self.state == State::TimeWait {
            return Verdict::Keep;
        }
        let when = self.keep_time(ctx);
        if !self.rtx.is_empty() || self.unsent() > 0 {
            self.ka_at = Some(ctx.now + when);
            return Verdict::Keep;
        }
        let elapsed = ctx
            .now
            .saturating_sub(self.ack.lrcvtime.max(self.rcv_tstamp));
        if elapsed < when {
            self.ka_at = Some(ctx.now + (when - elapsed));
            return Verdict::Keep;
        }
        let cnt = self.keep_cnt.unwrap_or(ctx.cfg.tcp_keepalive_probes) as u32;
        if self.probes_out >= cnt {
            ctx.ext.TCPKeepAliveTimeouts += 1;
            self.send_active_reset(ctx);
            self.err = Some(self.err_soft.unwrap_or(libc::ETIMEDOUT));
            self.state = State::Closed;
            self.rto_at = None;
            self.ack.timer = None;
            self.wake_all();
            return Verdict::Closed;
        }
        let seq = self.snd_una.wrapping_sub(1);
        self.emit(ctx, seq, rxpath_wire::tcp::flags::ACK, None);
        ctx.ext.TCPKeepAlive += 1;
        self.probes_out += 1;
        let intvl = self.keep_intvl.unwrap_or(ctx.cfg.tcp_keepalive_intvl) as u64 * 1_000_000_000;
        self.ka_at = Some(ctx.now + intvl);
        Verdict::Keep
    }
}
