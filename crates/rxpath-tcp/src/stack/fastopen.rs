//! Fast Open's calls (the client's half, [`crate::fastopen`]): the first
//! SYN of a connection, `connect` deferred by `TCP_FASTOPEN_CONNECT`, and
//! `sendto` with `MSG_FASTOPEN` (`tcp_sendmsg_fastopen`).

use super::*;
use crate::conn::TCP_TIMEOUT_INIT;
use crate::fastopen::{cookie_check, Syn, TFO_CLIENT_ENABLE};

impl Stack {
    /// `tcp_connect`'s first SYN for `c`. With Fast Open asked for (`fo`)
    /// and allowed (`tcp_fastopen`), and a cookie kept for the peer: the
    /// SYN carries it and as much of `data` as fits; from `connect`
    /// (`data` none) no SYN leaves until the first write
    /// (`defer_connect`). Without a cookie: a SYN that asks for one.
    /// Returns the bytes the SYN carries, none when deferred.
    pub(super) fn first_syn(
        &mut self,
        c: &mut Conn,
        fo: bool,
        data: Option<&[u8]>,
        now: Nanos,
    ) -> Option<usize> {
        let mode = self.cfg.tcp_fastopen;
        let check = (fo && mode & TFO_CLIENT_ENABLE != 0)
            .then(|| cookie_check(&self.fo_cache, mode, c.remote.ip()));
        if matches!(check, Some(Syn::Data(..))) && data.is_none() {
            c.fo.deferred = true;
            c.rto_at = None;
            return None;
        }
        c.fo.deferred = false;
        c.rto_at = Some(now + TCP_TIMEOUT_INIT);
        if let Some(syn) = c.rtx.front_mut().filter(|x| x.syn) {
            syn.sent_at = now;
        }
        // `tcp_connect`: the first SYN's time, which the SYN-ACK's echoed
        // timestamp may not precede.
        c.retrans_stamp = Some(c.ts_val(now));
        let mut ctx = ctx!(self, now);
        let n = match check {
            Some(Syn::Data(cookie, mss)) => {
                let room = c.syn_data_room(mss);
                c.send_syn_data(&mut ctx, cookie, room, data.unwrap_or(&[]))
            }
            Some(Syn::Request(req)) => {
                c.fo.req = Some(req);
                c.send_syn(&mut ctx, false);
                0
            }
            None => {
                c.send_syn(&mut ctx, false);
                0
            }
        };
        self.mib.ActiveOpens += 1;
        Some(n)
    }

    /// A writer blocks on `id` until its handshake ends (`pending`), or
    /// no longer (`sk_write_pending`): the SYN-ACK's ACK then waits for
    /// the data that writer is about to send.
    pub fn set_write_pending(&mut self, id: SockId, pending: bool) -> Result<(), Errno> {
        if let Some(c) = self.sock_mut(id)?.conn.as_deref_mut() {
            c.write_pending = pending;
        }
        Ok(())
    }

    /// Whether `connect` on `id` was deferred to its first write
    /// (`TCP_FASTOPEN_CONNECT` with a cookie kept): it returned at once,
    /// and the socket is writable.
    pub fn fastopen_deferred(&self, id: SockId) -> Result<bool, Errno> {
        Ok(self.sock(id)?.conn.as_ref().is_some_and(|c| c.fo.deferred))
    }

    /// `sendto` with `MSG_FASTOPEN` to `remote` (or any write on a socket
    /// whose `connect` was deferred), as `tcp_sendmsg_fastopen`: connect,
    /// with data on the SYN when a cookie is kept. Returns the bytes the
    /// SYN carries (0: none, the call's `EINPROGRESS`); the rest is sent
    /// once connected. On a connected socket the flag means nothing: a
    /// plain send.
    pub fn send_fastopen(
        &mut self,
        id: SockId,
        remote: Option<SocketAddr>,
        data: &[u8],
        now: Nanos,
    ) -> Result<usize, Errno> {
        self.touch(id);
        if self.cfg.tcp_fastopen & TFO_CLIENT_ENABLE == 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let s = self.sock(id)?;
        if s.listener.is_some() {
            return Err(libc::EISCONN);
        }
        match s.conn.as_deref() {
            Some(c) if c.fo.deferred => {}
            Some(c) if c.synchronized() => return self.send(id, data, false, false, now),
            Some(c) if matches!(c.state, State::SynSent | State::SynRecv) => {
                return Err(libc::EALREADY)
            }
            Some(_) => return Err(libc::EISCONN),
            None => {
                let remote = remote.ok_or(libc::EDESTADDRREQ)?;
                return self.connect_as(id, remote, now, |st, c, now| {
                    st.first_syn(c, true, Some(data), now).unwrap_or(0)
                });
            }
        }
        let mut c = self
            .sock_mut(id)?
            .conn
            .take()
            .expect("a deferred connection");
        let n = self.first_syn(&mut c, true, Some(data), now).unwrap_or(0);
        self.sock_mut(id)?.conn = Some(c);
        self.touch(id);
        Ok(n)
    }
}
