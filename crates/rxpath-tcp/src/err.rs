//! What an ICMP error does to a connection (`tcp_v4_err()`,
//! `tcp_v6_err()` once the socket is found): a smaller path MTU resizes
//! the segments and resends what no longer fits (`tcp_v4_mtu_reduced`,
//! `tcp_simple_retransmit`); an unreachable peer ends a connection still
//! opening and is remembered by an open one as the error to give if it
//! times out (`sk_err_soft`); "net or host unreachable" about the head's
//! retransmission undoes one RTO backoff (`tcp_ld_RTO_revert`, RFC 6069).

use crate::conn::{Conn, State, TCP_RTO_MAX, TCP_TIMEOUT_INIT};
use crate::ctx::Ctx;
use crate::input::Verdict;
use crate::time::Nanos;

impl Conn {
    /// `tcp_done_with_error`: a connection still opening hears its peer
    /// is unreachable; the call waiting for it gets `err`.
    pub(crate) fn done_with_error(&mut self, ctx: &mut Ctx<'_>, err: i32) -> Verdict {
        self.err = Some(err);
        if matches!(self.state, State::SynSent | State::SynRecv) {
            ctx.mib.AttemptFails += 1;
        }
        self.shut_rd = true;
        self.shut_wr = true;
        self.wake_all();
        self.set_closed()
    }

    /// `tcp_v4_mtu_reduced` / `tcp_v6_mtu_reduced` with the route's MTU
    /// `mtu` (already lowered): a smaller MSS, and what was sent larger
    /// resent now. (The kernel's `EMSGSIZE` soft error for a report under
    /// the IPv4 floor needs a route whose MTU is locked with DF still
    /// set, which the default `IP_PMTUDISC_WANT` never sends.)
    pub(crate) fn mtu_reduced(&mut self, ctx: &mut Ctx<'_>, mtu: u32) {
        if self.state == State::Closed {
            return;
        }
        if self.pmtu_cookie > mtu {
            let old_mss = self.mss_cache;
            self.sync_pmtu(mtu);
            self.simple_retransmit(ctx, old_mss);
        }
    }

    /// `tcp_sync_mss(sk, pmtu)`: the MSS for a path MTU; a connection
    /// still opening advertises no more than the route allows
    /// (`tcp_advertise_mss`).
    pub(crate) fn sync_pmtu(&mut self, mtu: u32) {
        self.pmtu_cookie = mtu;
        if matches!(self.state, State::SynSent | State::SynRecv) {
            let hdr = self.net_header_len() + 20;
            self.advmss = self.advmss.min(mtu.saturating_sub(hdr).max(88));
        }
        self.sync_mss();
    }

    /// `tcp_mtu_to_mss`: the MSS a path MTU gives this connection.
    pub(crate) fn mtu_to_mss(&self, mtu: u32) -> u32 {
        let mss = mtu
            .saturating_sub(self.net_header_len() + 20)
            .min(self.mss_clamp)
            .max(48);
        mss.saturating_sub(self.tcp_header_len() - 20)
    }

    /// `tcp_simple_retransmit`: every packet longer than the new MSS is
    /// lost (one segment of `old_mss` or less counts its length, a larger
    /// one its segments' size); the window is left alone (the same data,
    /// in smaller units) and the loss state entered for them.
    fn simple_retransmit(&mut self, ctx: &mut Ctx<'_>, old_mss: u32) {
        if self.state == State::SynSent && self.fo.syn_data {
            // A Fast Open SYN (its data queued apart) was lost to the
            // path: all of it is, and the SYN goes again at once,
            // advertising the smaller MSS; its data waits for the window
            // the SYN-ACK opens. (A plain SYN is no longer than any MSS.)
            for i in 0..self.rtx.len() {
                self.mark_lost(i);
            }
            self.non_congestion_loss_retransmit(ctx);
            self.retransmit_skb(ctx, 0, 1);
            return;
        }
        let mss = self.mss_cache;
        for i in 0..self.rtx.len() {
            let x = self.rtx[i];
            let len = x.end_seq.wrapping_sub(x.seq) - x.syn as u32 - x.fin as u32;
            if len.min(old_mss) > mss {
                self.mark_lost(i);
            }
        }
        if self.lost_out() == 0 {
            return;
        }
        // The window stays: the units changed, not the data in flight.
        self.non_congestion_loss_retransmit(ctx);
    }

    /// `tcp_ld_RTO_revert` (RFC 6069): an unreachable message about the
    /// head's retransmission says the path, not congestion, lost it: one
    /// backoff is undone and the timer rearmed from the head's sending,
    /// or the head retransmitted now if that time has passed.
    pub(crate) fn ld_rto_revert(&mut self, ctx: &mut Ctx<'_>, seq: u32) -> Verdict {
        if seq != self.snd_una || self.retransmits == 0 || self.backoff == 0 {
            return Verdict::Keep;
        }
        let Some(head) = self.rtx.front() else {
            return Verdict::Keep;
        };
        self.backoff -= 1;
        let base = if self.srtt_us != 0 {
            self.base_rto()
        } else {
            TCP_TIMEOUT_INIT
        };
        self.rto = base
            .checked_shl(self.backoff)
            .unwrap_or(TCP_RTO_MAX)
            .min(TCP_RTO_MAX);
        // In jiffies, as the kernel counts: the time since the head left,
        // rounded up.
        let since = jiffies_up(ctx.now.saturating_sub(head.sent_at));
        if self.rto > since {
            self.rto_at = Some(ctx.now + (self.rto - since));
            self.xmit_timer = crate::conn::XmitTimer::Retrans;
            Verdict::Keep
        } else {
            self.retransmit_timer(ctx)
        }
    }
}

/// `usecs_to_jiffies` at HZ=1000, in nanoseconds.
fn jiffies_up(ns: Nanos) -> Nanos {
    (ns / 1000).div_ceil(1000) * 1_000_000
}
