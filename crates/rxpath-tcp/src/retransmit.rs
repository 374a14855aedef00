//! Retransmissions: `tcp_retransmit_skb` and its bookkeeping (an
//! attempt counted whether the device took it or not, `TCPCB_RETRANS`
//! only when it did), and the loss probe that resends the tail.

use rxpath_wire::tcp::flags::{ACK, FIN, PSH};

use crate::conn::{Conn, State};
use crate::ctx::Ctx;

impl Conn {
    /// A loss probe that resends the last MSS sent (`tcp_send_loss_probe`
    /// without new data).
    pub(crate) fn retransmit_tail(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let Some(tail) = self.rtx.back().copied() else {
            return false;
        };
        let pcount = self.pcount(&tail);
        let mut i = self.rtx.len() - 1;
        if pcount > 1 {
            // `tcp_fragment` the tail to its last MSS.
            self.split_at(i, tail.seq.wrapping_add((pcount - 1) * self.mss_cache));
            i += 1;
        }
        self.retransmit_skb(ctx, i, 1)
    }

    /// `tcp_retransmit_skb`: resend retransmission-queue entry `i`, up to
    /// `segs` segments of it (a larger TSO packet is cut), or the SYN;
    /// false when the device refused it (not counted as a retransmission:
    /// `TCPRetransFail`).
    pub(crate) fn retransmit_skb(&mut self, ctx: &mut Ctx<'_>, i: usize, segs: u32) -> bool {
        let Some(x) = self.rtx.get(i).copied() else {
            return false;
        };
        let mut len = 0;
        if x.syn {
            let synack = self.state == State::SynRecv;
            if !synack {
                self.ecn.clear_syn(ctx.cfg);
            }
            self.send_syn(ctx, synack);
        } else {
            let data_len = x.end_seq.wrapping_sub(x.seq) - x.fin as u32;
            let max = segs.max(1) * self.mss_cache;
            if data_len > max {
                self.split_at(i, x.seq.wrapping_add(max));
            }
            let x = self.rtx[i];
            len = x.end_seq.wrapping_sub(x.seq) - x.fin as u32;
            let off = x.seq.wrapping_sub(self.data_base()) as usize;
            let mut fl = ACK;
            if x.fin {
                fl |= FIN;
            }
            if len > 0 && (x.psh || len > self.mss_cache) {
                fl |= PSH;
            }
            let payload = (len > 0).then_some((off, len as usize));
            if !self.emit(ctx, x.seq, fl, payload) {
                // An attempt all the same (`tcp_retransmit_skb`): counted,
                // dated, never an RTT sample; not in flight again.
                ctx.ext.TCPRetransFail += self.pcount(&self.rtx[i]) as u64;
                self.retransmit_attempted(ctx, i, len);
                return false;
            }
        }
        self.mark_retransmitted(ctx, i, len);
        true
    }

    /// What every attempted retransmission counts, sent or refused:
    /// `RetransSegs`, the totals, the first attempt's time, the undo
    /// count, `TCPCB_EVER_RETRANS`.
    fn retransmit_attempted(&mut self, ctx: &mut Ctx<'_>, i: usize, len: u32) {
        let n = self.pcount(&self.rtx[i]);
        ctx.mib.OutSegs -= n as u64;
        ctx.mib.RetransSegs += n as u64;
        self.total_retrans = self.total_retrans.wrapping_add(n);
        self.bytes_retrans += len as u64;
        if self.retrans_stamp.is_none() {
            self.retrans_stamp = Some(self.ts_val(ctx.now));
        }
        if self.undo_retrans < 0 {
            self.undo_retrans = 0;
        }
        self.undo_retrans += n as i32;
        self.rtx[i].ever_retrans = true;
    }

    /// The bookkeeping of a retransmission that left: the attempt's,
    /// `TCPCB_RETRANS`, PRR's sent count.
    fn mark_retransmitted(&mut self, ctx: &mut Ctx<'_>, i: usize, len: u32) {
        self.retransmit_attempted(ctx, i, len);
        let n = self.pcount(&self.rtx[i]);
        if matches!(
            self.ca_state,
            crate::state::CaState::Cwr | crate::state::CaState::Recovery
        ) {
            self.prr_out += n;
        }
        let e = &mut self.rtx[i];
        e.retrans = true;
        e.sent_at = ctx.now;
    }
}
