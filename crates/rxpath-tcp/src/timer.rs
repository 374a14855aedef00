//! `tcp_timer.c`: the retransmission timer (with the SYN's), the delayed
//! ACK, TIME_WAIT and an orphan's FIN_WAIT2.

use crate::conn::{Conn, State, TCP_DELACK_MIN, TCP_RTO_MAX};
use crate::input::Verdict;
use crate::Ctx;

impl Conn {
    /// The earliest deadline this connection has.
    pub(crate) fn next_deadline(&self) -> Option<crate::Nanos> {
        [self.rto_at, self.ack.timer, self.close_at]
            .into_iter()
            .flatten()
            .min()
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
        if self.rto_at.is_some_and(|t| t <= now) {
            return self.retransmit_timer(ctx);
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

    /// `tcp_retransmit_timer` with `tcp_write_timeout`'s give-up rule.
    fn retransmit_timer(&mut self, ctx: &mut Ctx<'_>) -> Verdict {
        self.rto_at = None;
        if self.rtx.is_empty() {
            return Verdict::Keep;
        }
        let limit = match self.state {
            State::SynSent => ctx.cfg.tcp_syn_retries as u32,
            State::SynRecv => ctx.cfg.tcp_synack_retries as u32,
            _ => ctx.cfg.tcp_retries2 as u32,
        };
        if self.retransmits >= limit {
            self.err = Some(libc::ETIMEDOUT);
            ctx.ext.TCPAbortOnTimeout += 1;
            if matches!(self.state, State::SynSent | State::SynRecv) {
                ctx.mib.AttemptFails += 1;
            }
            self.state = State::Closed;
            self.ack.timer = None;
            return Verdict::Closed;
        }
        ctx.ext.TCPTimeouts += 1;
        if self.synchronized() {
            // `tcp_enter_loss`: CUBIC's β, and everything in flight is lost.
            self.snd_ssthresh = (self.snd_cwnd * 717 / 1024).max(2);
            self.snd_cwnd = 1;
            self.snd_cwnd_cnt = 0;
            self.high_seq = Some(self.snd_nxt);
        }
        self.retransmit_head(ctx);
        self.retransmits += 1;
        self.backoff += 1;
        self.rto_at = Some(ctx.now + self.rto_backed_off().min(TCP_RTO_MAX));
        Verdict::Keep
    }
}
