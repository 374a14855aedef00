//! TCP Fast Open, the client's half (RFC 7413; the kernel's
//! `tcp_fastopen.c`, `tcp_send_syn_data`, `tcp_rcv_fastopen_synack`).
//!
//! A SYN asks for a cookie (an empty option); the SYN-ACK's cookie is
//! kept per destination with the MSS it announced (the kernel keeps them
//! in `tcp_metrics`). With a cookie kept, the next connection's SYN
//! carries it and the first write's data, as much as the cached MSS less
//! 40 bytes of option room. A SYN-ACK that acknowledges only the SYN
//! sends the data again at once. The server's half is the stack's
//! `fastopen_listen`.

use std::net::IpAddr;

use crate::conn::{Conn, Sent};
use crate::ctx::Ctx;
use crate::seq::after;
use crate::state::Cache;
use crate::wire::{FoCookie, SegIn};
use rxpath_wire::tcp::flags::FIN;

/// `tcp_fastopen` bit 0: clients may use Fast Open.
pub const TFO_CLIENT_ENABLE: u32 = 1;
/// `tcp_fastopen` bit 2: a client sends data in its SYN without a cookie.
pub const TFO_CLIENT_NO_COOKIE: u32 = 4;
/// `tcp_fastopen` bit 1: listeners with `TCP_FASTOPEN` take data on SYNs.
pub const TFO_SERVER_ENABLE: u32 = 2;
/// `tcp_fastopen` `0x200`: a listener takes a SYN's data without a cookie.
pub const TFO_SERVER_COOKIE_NOT_REQD: u32 = 0x200;
/// `tcp_fastopen` `0x400`: every listener takes Fast Open, `TCP_FASTOPEN`
/// or not.
pub const TFO_SERVER_WO_SOCKOPT1: u32 = 0x400;
/// `MAX_TCP_OPTION_SPACE`: the option room a SYN's data leaves free.
const MAX_TCP_OPTION_SPACE: u32 = 40;

/// What `tcp_fastopen_cookie_check` decides for a SYN to `dst`.
pub(crate) enum Syn {
    /// Data may ride on the SYN, with this option (none: no-cookie mode)
    /// and this MSS from the cache (0: none kept).
    Data(Option<FoCookie>, u16),
    /// A plain SYN asking for a cookie with this (empty) option.
    Request(FoCookie),
}

/// `tcp_fastopen_cookie_check` under the `tcp_fastopen` sysctl `mode`.
pub(crate) fn cookie_check(cache: &Cache, mode: u32, dst: IpAddr) -> Syn {
    let (mss, cookie, exp) = cache.get(dst);
    if mode & TFO_CLIENT_NO_COOKIE != 0 {
        return Syn::Data(None, mss);
    }
    match cookie {
        Some(c) => Syn::Data(Some(c), mss),
        None => Syn::Request(FoCookie::default().with_exp(exp)),
    }
}

impl Conn {
    /// The SYN's data room (`tcp_send_syn_data`): the MSS the path allows,
    /// clamped by the cached MSS (`mss`, 0 for none) and `TCP_MAXSEG`,
    /// less [`MAX_TCP_OPTION_SPACE`].
    pub(crate) fn syn_data_room(&mut self, mss: u16) -> u32 {
        let mut clamp = if mss != 0 { mss as u32 } else { self.advmss };
        if let Some(u) = self.user_mss {
            clamp = clamp.min(u);
        }
        self.mss_clamp = clamp;
        self.sync_mss();
        let path = self.pmtu_cookie.saturating_sub(self.net_header_len() + 20);
        path.min(clamp).saturating_sub(MAX_TCP_OPTION_SPACE)
    }

    /// `tcp_send_syn_data`: the SYN, carrying `cookie` (none in no-cookie
    /// mode) and as much of `data` as `room` holds, queued as the kernel
    /// queues it (the SYN, then the data as its own segment). Returns the
    /// bytes taken.
    pub(crate) fn send_syn_data(
        &mut self,
        ctx: &mut Ctx<'_>,
        cookie: Option<FoCookie>,
        room: u32,
        data: &[u8],
    ) -> usize {
        let n = (room as usize).min(data.len());
        self.fo.req = cookie;
        if n > 0 {
            let seq = self.iss.wrapping_add(1);
            let end = seq.wrapping_add(n as u32);
            self.sndbuf.extend(&data[..n]);
            self.write_seq = end;
            self.snd_nxt = end;
            self.pushed_seq = end;
            self.rtx.push_back(Sent {
                seq,
                end_seq: end,
                syn: false,
                fin: false,
                psh: true,
                sent_at: ctx.now,
                retrans: false,
                ever_retrans: false,
                sacked: false,
                lost: false,
            });
            self.fo.syn_data = true;
            self.lsndtime = ctx.now;
        }
        self.send_syn_with(ctx, false, n);
        n
    }

    /// What of the SYN's data a SYN-ACK acknowledging `ack` covers leaves
    /// the queue (the SYN itself already gone), as `tcp_clean_rtx_queue`
    /// would have it.
    pub(crate) fn ack_syn_data(&mut self, ack: u32) {
        let Some(x) = self.rtx.front().copied().filter(|x| !x.syn) else {
            return;
        };
        if !after(ack, x.seq) {
            return;
        }
        let upto = if after(x.end_seq, ack) {
            ack
        } else {
            x.end_seq
        };
        let n = upto.wrapping_sub(x.seq) as usize;
        self.sndbuf.drain(..n.min(self.sndbuf.len()));
        self.bytes_acked += n as u64;
        self.delivered = self.delivered.wrapping_add(1);
        if upto == x.end_seq {
            self.rtx.pop_front();
        } else {
            self.rtx[0].seq = upto;
        }
    }

    /// `tcp_rcv_fastopen_synack`, after the SYN-ACK moved the connection
    /// to ESTABLISHED: keep the cookie and MSS it brought, and send the
    /// SYN's data again when it acknowledged only the SYN (then true: that
    /// retransmission carries the ACK).
    pub(crate) fn rcv_fastopen_synack(&mut self, ctx: &mut Ctx<'_>, seg: &SegIn<'_>) -> bool {
        if !(self.fo.syn_fastopen || self.fo.syn_data) {
            return false;
        }
        let mss = seg.opts.mss.unwrap_or(0);
        // An unsolicited cookie is ignored.
        let cookie = seg.opts.fastopen.filter(|_| self.fo.syn_fastopen);
        // A request the SYN-ACK ignored, the SYN never sent again: the
        // other option next time, or back to the RFC's for good after the
        // experimental one.
        let try_exp = if self.fo.syn_fastopen
            && self.total_retrans == 0
            && cookie.is_none()
            && !self.fo.syn_data
        {
            if self.fo.syn_fastopen_exp {
                2
            } else {
                1
            }
        } else {
            0
        };
        ctx.fo_cache.set(self.remote.ip(), mss, cookie, try_exp);
        let unacked = self.fo.syn_data && !self.rtx.is_empty();
        if unacked {
            ctx.ext.TCPFastOpenActiveFail += 1;
            for i in 0..self.rtx.len() {
                self.mark_lost(i);
            }
            self.non_congestion_loss_retransmit(ctx);
            return true;
        }
        self.fo.syn_data_acked = self.fo.syn_data;
        if self.fo.syn_data_acked {
            ctx.ext.TCPFastOpenActive += 1;
            // The SYN and its data were two packets to `tcp_ack`.
            if self.delivered > 1 {
                self.delivered -= 1;
            }
        }
        self.fastopen_add_synack(ctx, seg);
        false
    }

    /// `tcp_fastopen_add_skb`: data (and a FIN) on the SYN-ACK go to the
    /// receive queue.
    fn fastopen_add_synack(&mut self, ctx: &mut Ctx<'_>, seg: &SegIn<'_>) {
        if seg.payload.is_empty() && !seg.has(FIN) {
            return;
        }
        self.rcvq.extend(seg.payload);
        self.wake_in += 1;
        self.rcv_nxt = self.rcv_nxt.wrapping_add(seg.payload.len() as u32);
        self.bytes_received = seg.payload.len() as u64;
        self.fo.syn_data_acked = true;
        if seg.has(FIN) {
            self.rcv_fin(ctx);
        }
    }
}
