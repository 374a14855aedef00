//! Fast Open's server half (`tcp_try_fastopen`,
//! `tcp_fastopen_create_child`): with the server bit of `tcp_fastopen`, a
//! listener with `TCP_FASTOPEN` (or any, `0x400`) makes cookies for the
//! SYNs that ask, and takes the data of a SYN whose cookie checks (or of
//! any SYN, `0x200`): the connection joins the accept queue before its
//! handshake ends, the SYN's data readable and acknowledged by the
//! SYN-ACK.

use std::hash::Hasher;
use std::net::IpAddr;

use super::{SockId, Stack};
use crate::conn::Conn;
use crate::fastopen::{TFO_SERVER_COOKIE_NOT_REQD, TFO_SERVER_ENABLE, TFO_SERVER_WO_SOCKOPT1};
use crate::wire::{FoCookie, SegIn};

/// What `tcp_try_fastopen` decided for a SYN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Passive {
    /// An ordinary handshake; the SYN-ACK carries this cookie, if any.
    No(Option<FoCookie>),
    /// The connection took the SYN's data and joins the accept queue now.
    Child,
}

impl Stack {
    /// `tcp_try_fastopen` for SYN `seg` to listener `lid`; `c` is the
    /// connection made for it, its options taken.
    pub(super) fn try_fastopen(&mut self, lid: SockId, c: &mut Conn, seg: &SegIn<'_>) -> Passive {
        let foc = seg.opts.fastopen;
        if foc.is_some_and(|f| f.is_empty()) {
            self.ext.TCPFastOpenCookieReqd += 1;
        }
        let syn_data = !seg.payload.is_empty();
        let mode = self.cfg.tcp_fastopen;
        if mode & TFO_SERVER_ENABLE == 0
            || !(syn_data || foc.is_some())
            || !self.fastopen_queue_check(lid)
        {
            return Passive::No(None);
        }
        if mode & TFO_SERVER_COOKIE_NOT_REQD == 0 {
            let valid = self.fastopen_cookie(seg.src.ip(), seg.dst.ip());
            // The SYN-ACK's cookie goes in the option the SYN's came in.
            match foc {
                Some(f) if f.is_empty() => return Passive::No(Some(valid.with_exp(f.exp))),
                Some(f) if f.same_bytes(&valid) => {}
                Some(f) => {
                    self.ext.TCPFastOpenPassiveFail += 1;
                    return Passive::No(Some(valid.with_exp(f.exp)));
                }
                None => return Passive::No(None),
            }
        }
        // `tcp_fastopen_add_skb`: the SYN's data is the connection's.
        c.fo.passive = true;
        if syn_data {
            c.rcvq.extend(seg.payload);
            c.rcv_nxt = c.rcv_nxt.wrapping_add(seg.payload.len() as u32);
            c.bytes_received = seg.payload.len() as u64;
            c.fo.syn_data_acked = true;
            c.wake_in += 1;
        }
        c.rcv_wup = c.rcv_nxt;
        self.ext.TCPFastOpenPassive += 1;
        Passive::Child
    }

    /// `tcp_fastopen_queue_check`: the listener takes Fast Open at all
    /// (its queue length is not 0) and has room for one more half-open
    /// Fast Open connection.
    fn fastopen_queue_check(&mut self, lid: SockId) -> bool {
        let Some(s) = self.socks[lid.0].as_ref() else {
            return false;
        };
        let max = s.fastopen_qlen as usize;
        let qlen = s.listener.as_ref().map_or(0, |l| l.tfo_qlen);
        if max == 0 {
            return false;
        }
        if qlen >= max {
            self.ext.TCPFastOpenListenOverflow += 1;
            return false;
        }
        true
    }

    /// `__tcp_fastopen_cookie_gen_cipher`: SipHash-2-4 of the SYN's source
    /// and destination addresses under the key, 8 bytes little-endian.
    fn fastopen_cookie(&self, src: IpAddr, dst: IpAddr) -> FoCookie {
        let k = self.cfg.tcp_fastopen_key.map(u64::from);
        let (k0, k1) = if k == [0; 4] {
            // The host's own key, as the kernel makes one when none is set.
            (
                self.secret.rotate_left(29) ^ 0x7466_6f6b,
                self.secret ^ 0x6b65_7931,
            )
        } else {
            // `tcp_fastopen_reset_cipher`: the words little-endian in turn.
            (k[0] | k[1] << 32, k[2] | k[3] << 32)
        };
        let mut h = siphasher::sip::SipHasher24::new_with_keys(k0, k1);
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                h.write(&s.octets());
                h.write(&d.octets());
            }
            (s, d) => {
                h.write(&v6(s).octets());
                h.write(&v6(d).octets());
            }
        }
        FoCookie::new(&h.finish().to_le_bytes()).expect("8 bytes make a cookie")
    }

    /// `listen` under `tcp_fastopen`'s `0x400` (with the server bit): a
    /// listener not given `TCP_FASTOPEN` takes Fast Open with its backlog.
    pub(super) fn fastopen_listen(&mut self, id: SockId, backlog: u32) {
        let mode = self.cfg.tcp_fastopen;
        let both = TFO_SERVER_ENABLE | TFO_SERVER_WO_SOCKOPT1;
        if let Some(s) = self.socks[id.0].as_mut() {
            if mode & both == both && s.fastopen_qlen == 0 {
                s.fastopen_qlen = backlog;
            }
        }
    }

    /// A Fast Open child leaves its listener's half-open count: its
    /// handshake ended, or it closed first (`reqsk_fastopen_remove`).
    pub(super) fn fastopen_done(&mut self, id: SockId) {
        let Some(lid) = self.socks[id.0]
            .as_mut()
            .and_then(|s| s.tfo_listener.take())
        else {
            return;
        };
        if let Some(l) = self.socks[lid.0].as_mut().and_then(|s| s.listener.as_mut()) {
            l.tfo_qlen = l.tfo_qlen.saturating_sub(1);
        }
    }
}

fn v6(a: IpAddr) -> std::net::Ipv6Addr {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}
