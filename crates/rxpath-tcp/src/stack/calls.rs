//! The calls a program makes on a socket: `socket`, `bind`, `listen`,
//! `accept`, `connect`, `send`, `recv`, `shutdown`, `close`, and what
//! `poll` says of it.

use super::*;

impl Stack {
    /// `socket(AF_INET or AF_INET6, SOCK_STREAM, 0)`.
    pub fn socket(&mut self, v6: bool) -> SockId {
        self.insert(Sock {
            v6,
            ..Sock::default()
        })
    }

    pub(super) fn port_in_use(&self, addr: SocketAddr, me: &Sock) -> bool {
        let (reuse, reuseport, v6only) = (me.reuseaddr, me.reuseport, me.v6only);
        let Some(on) = self.ports.get(&addr.port()) else {
            return false;
        };
        on.iter()
            .filter_map(|id| self.socks[id.0].as_ref())
            .any(|s| {
                let Some(b) = s.bound else { return false };
                // Across families only an IPv6 wildcard that takes IPv4 too
                // (no `IPV6_V6ONLY`) overlaps an IPv4 address, as
                // `inet_bind_conflict` has it.
                let overlap = if b.is_ipv4() == addr.is_ipv4() {
                    b.ip().is_unspecified() || addr.ip().is_unspecified() || b.ip() == addr.ip()
                } else if b.is_ipv6() {
                    b.ip().is_unspecified() && !s.v6only
                } else {
                    addr.ip().is_unspecified() && !v6only
                };
                let listening = s.listener.is_some();
                // `SO_REUSEADDR` on both: unless the other listens;
                // `SO_REUSEPORT` on both: always (one program, one uid).
                let shared = (reuse && s.reuseaddr && !listening) || (reuseport && s.reuseport);
                b.port() == addr.port() && overlap && !shared
            })
    }

    pub(super) fn ephemeral_port(&mut self) -> u16 {
        for _ in 0..28232 {
            self.next_port = if self.next_port >= 60999 {
                32768
            } else {
                self.next_port + 1
            };
            let p = self.next_port;
            if !self.ports.contains_key(&p) {
                return p;
            }
        }
        0
    }

    /// `bind`.
    pub fn bind(&mut self, id: SockId, mut addr: SocketAddr) -> Result<(), Errno> {
        if self.sock(id)?.bound.is_some() {
            return Err(libc::EINVAL);
        }
        if addr.port() == 0 {
            addr.set_port(self.ephemeral_port());
        } else if self.port_in_use(addr, self.sock(id)?) {
            return Err(libc::EADDRINUSE);
        }
        self.sock_mut(id)?.bound = Some(addr);
        self.note_bound(id, addr.port());
        Ok(())
    }

    /// `listen`: the accept queue holds `min(backlog, somaxconn)` (+1, as
    /// `sk_acceptq_is_full` compares with `>`).
    pub fn listen(&mut self, id: SockId, backlog: i32) -> Result<(), Errno> {
        self.touch(id);
        let somax = self.cfg.somaxconn;
        let s = self.sock(id)?;
        if s.conn.is_some() {
            return Err(libc::EINVAL);
        }
        if s.bound.is_none() {
            let unspec: IpAddr = if s.v6 {
                IpAddr::V6(0.into())
            } else {
                IpAddr::V4(0.into())
            };
            let port = self.ephemeral_port();
            self.sock_mut(id)?.bound = Some(SocketAddr::new(unspec, port));
            self.note_bound(id, port);
        }
        let s = self.sock_mut(id)?;
        let backlog = (backlog.max(0) as u32).min(somax);
        s.listener.get_or_insert_with(Listener::default).backlog = backlog;
        if let Err(at) = self.listeners.binary_search(&id) {
            self.listeners.insert(at, id);
        }
        self.fastopen_listen(id, backlog);
        Ok(())
    }

    /// `accept`: the oldest established connection, or `EAGAIN`.
    pub fn accept(&mut self, id: SockId) -> Result<(SockId, SocketAddr), Errno> {
        let s = self.sock_mut(id)?;
        let l = s.listener.as_mut().ok_or(libc::EINVAL)?;
        let child = l.accept_q.pop_front().ok_or(libc::EAGAIN)?;
        let c = self.socks[child.0].as_mut().ok_or(libc::ECONNABORTED)?;
        c.parent = None;
        let conn = c.conn.as_mut().ok_or(libc::ECONNABORTED)?;
        conn.unaccepted = false;
        let peer = conn.remote;
        Ok((child, peer))
    }

    pub(super) fn new_conn(
        &self,
        local: SocketAddr,
        remote: SocketAddr,
        state: State,
        now: Nanos,
        sndbuf: u32,
        rcvbuf: u32,
    ) -> Conn {
        let h = |salt: u64| {
            let mut h = foldhash::fast::FixedState::with_seed(self.secret ^ salt).build_hasher();
            // The pair's bytes as they are, not formatted (a format per
            // connection was 2 % of an accept-bound server).
            std::hash::Hash::hash(&(local, remote), &mut h);
            h.finish()
        };
        let iss = (h(1) as u32).wrapping_add((now >> 6) as u32);
        let v6 = remote.is_ipv6()
            && !matches!(remote.ip(), IpAddr::V6(a) if a.to_ipv4_mapped().is_some());
        // The route's MTU (`dst_mtu`), a learnt path MTU included, sizes
        // the MSS advertised (`ipv4_default_advmss`) and used.
        let pmtu = self.path_mtu(remote.ip(), now);
        let hdr = if v6 { 60 } else { 40 };
        let advmss = (self.cfg.advmss(v6) as u32).min(pmtu.saturating_sub(hdr).max(88));
        let rcv_wscale = self.cfg.rcv_wscale();
        let rcv_wnd = (rcvbuf / 2).min(65535);
        Conn {
            state,
            local,
            remote,
            iss,
            snd_una: iss,
            snd_nxt: iss.wrapping_add(1),
            write_seq: iss.wrapping_add(1),
            snd_wnd: 0,
            snd_wl1: 0,
            max_window: 0,
            snd_wscale: 0,
            sndbuf: VecDeque::new(),
            rtx: VecDeque::from([Sent {
                seq: iss,
                end_seq: iss.wrapping_add(1),
                syn: true,
                fin: false,
                psh: false,
                sent_at: now,
                retrans: false,
                ever_retrans: false,
                sacked: false,
                lost: false,
            }]),
            snd_sml: iss,
            skb_ends: VecDeque::new(),
            eor_tail: false,
            pushed_seq: iss.wrapping_add(1),
            sndbuf_locked: false,
            push_marks: VecDeque::new(),
            gso: self.cfg.gso,
            min_tso_segs: self.cfg.tcp_min_tso_segs,
            user_mss: None,
            fo: Default::default(),
            write_pending: false,
            syn_retries: None,
            notsent_lowat: self.cfg.tcp_notsent_lowat,
            tos: 0,
            ecn: Default::default(),
            keepalive: false,
            ka_at: None,
            keep_idle: None,
            keep_intvl: None,
            keep_cnt: None,
            wscale_ok: false,
            min_rtt_us: u64::MAX >> 1,
            fin_queued: false,
            mss_clamp: crate::conn::TCP_MSS_DEFAULT,
            advmss,
            mss_cache: advmss,
            pmtu_cookie: pmtu,
            defer_accept: 0,
            defer_acked: false,
            nodelay: false,
            cork: false,
            sk_sndbuf: sndbuf,
            snd_cwnd: TCP_INIT_CWND,
            snd_ssthresh: TCP_INFINITE_SSTHRESH,
            snd_cwnd_cnt: 0,
            reno_sacked: 0,
            high_seq: iss,
            highest_sack: iss,
            sacked_before: false,
            reord_seen: 0,
            cubic: crate::cubic::Cubic::default(),
            prior_cwnd: 0,
            prior_ssthresh: 0,
            prr_delivered: 0,
            prr_out: 0,
            undo_marker: None,
            undo_retrans: 0,
            retrans_stamp: None,
            rcv_tsecr: 0,
            rack: crate::state::Rack::default(),
            frto: false,
            cwnd_limited: false,
            max_packets_out: 0,
            cwnd_usage_seq: iss,
            irs: 0,
            rcv_nxt: 0,
            rcv_wup: 0,
            rcv_wnd,
            rcv_ssthresh: rcv_wnd,
            window_clamp: (self.cfg.tcp_rmem[2] / 2).max(rcv_wnd),
            rcv_wscale,
            rcvq: VecDeque::new(),
            ofo: Vec::new(),
            sk_rcvbuf: rcvbuf,
            rcvbuf_locked: false,
            copied: 0,
            rcvq_space: Default::default(),
            rcv_rtt: Default::default(),
            rcv_rtt_last_tsecr: 0,
            fin_rcvd: false,
            ts_ok: self.cfg.tcp_timestamps,
            ts_recent: 0,
            ts_recent_stamp: 0,
            ts_off: h(2) as u32,
            sack_ok: self.cfg.tcp_sack,
            sacks: Vec::new(),
            dsack: None,
            ack: AckState::default(),
            srtt_us: 0,
            mdev_us: 0,
            mdev_max_us: 0,
            rttvar_us: 0,
            rtt_seq: iss,
            rto: TCP_TIMEOUT_INIT,
            backoff: 0,
            retransmits: 0,
            total_retrans: 0,
            rto_at: Some(now + TCP_TIMEOUT_INIT),
            xmit_timer: XmitTimer::Retrans,
            tlp_high_seq: None,
            probes_out: 0,
            close_at: None,
            lsndtime: now,
            ca_state: crate::state::CaState::Open,
            rcv_tstamp: now,
            reordering: 3,
            bytes_acked: 0,
            bytes_received: 0,
            bytes_sent: 0,
            bytes_retrans: 0,
            segs_out: 0,
            segs_in: 0,
            data_segs_out: 0,
            data_segs_in: 0,
            delivered: 0,
            rcv_ooopack: 0,
            total_rto: 0,
            chrono: crate::state::Chrono::default(),
            wake_in: 0,
            wake_out: 0,
            nospace: false,
            err: None,
            err_soft: None,
            shut_rd: false,
            shut_wr: false,
            orphan: false,
            unaccepted: false,
            reset: false,
        }
    }

    pub(super) fn bufs(&self, s: &Sock) -> (u32, u32) {
        (
            s.sndbuf.unwrap_or(self.cfg.tcp_wmem[1]),
            s.rcvbuf.unwrap_or(self.cfg.tcp_rmem[1]),
        )
    }

    /// `connect`: sends the SYN; the caller waits for [`Stack::state`] to
    /// leave `SynSent` (or returns `EINPROGRESS`), unless
    /// [`Stack::fastopen_deferred`] says the SYN waits for the first
    /// write (`TCP_FASTOPEN_CONNECT`).
    pub fn connect(&mut self, id: SockId, remote: SocketAddr, now: Nanos) -> Result<(), Errno> {
        self.touch(id);
        let fo = self.sock(id)?.fastopen_connect;
        self.connect_as(id, remote, now, |st, c, now| {
            st.first_syn(c, fo, None, now);
        })
    }

    /// `connect`'s checks, the connection's source address and port, and
    /// its first SYN as `syn` sends it.
    pub(super) fn connect_as<T>(
        &mut self,
        id: SockId,
        remote: SocketAddr,
        now: Nanos,
        syn: impl FnOnce(&mut Stack, &mut Conn, Nanos) -> T,
    ) -> Result<T, Errno> {
        let s = self.sock(id)?;
        if s.listener.is_some() {
            return Err(libc::EISCONN);
        }
        if let Some(c) = &s.conn {
            return Err(match c.state {
                // A Fast Open connect waiting for its first write.
                State::SynSent if c.fo.deferred => libc::EISCONN,
                State::SynSent | State::SynRecv => libc::EALREADY,
                State::Closed => libc::ECONNABORTED,
                _ => libc::EISCONN,
            });
        }
        let want_v4 = remote.is_ipv4()
            || matches!(remote.ip(), IpAddr::V6(a) if a.to_ipv4_mapped().is_some());
        let (bound, nodelay, cork) = (s.bound, s.nodelay, s.cork);
        let (snd, rcv) = self.bufs(s);
        let src_ip = match bound.map(|b| b.ip()).filter(|ip| !ip.is_unspecified()) {
            Some(ip) => ip,
            None => self
                .local_addrs
                .iter()
                .copied()
                .find(|a| a.is_ipv4() == want_v4)
                .ok_or(libc::ENETUNREACH)?,
        };
        let src_ip = match (src_ip, remote.ip()) {
            (IpAddr::V4(a), IpAddr::V6(_)) => IpAddr::V6(a.to_ipv6_mapped()),
            (ip, _) => ip,
        };
        let port = match bound {
            Some(b) if b.port() != 0 => b.port(),
            _ => self.ephemeral_port(),
        };
        let local = SocketAddr::new(src_ip, port);
        let mut c = self.new_conn(local, remote, State::SynSent, now, snd, rcv);
        let _ = (nodelay, cork);
        apply_sock_opts(&mut c, self.sock(id)?);
        c.sync_mss();
        c.ecn.send_syn(&self.cfg);
        let out = syn(self, &mut c, now);
        self.conns.insert(key(local, remote), id);
        let s = self.sock_mut(id)?;
        s.bound = Some(local);
        s.conn = Some(Box::new(c));
        self.note_bound(id, port);
        Ok(out)
    }

    /// The connection's state (`Closed` for a socket never connected,
    /// `Listen` for a listener).
    pub fn state(&self, id: SockId) -> Result<State, Errno> {
        let s = self.sock(id)?;
        Ok(match (&s.listener, &s.conn) {
            (Some(_), _) => State::Listen,
            (_, Some(c)) => c.state,
            _ => State::Closed,
        })
    }

    /// Take the pending error (`SO_ERROR`, and what a call after a reset
    /// or timeout returns).
    pub fn take_error(&mut self, id: SockId) -> Result<Option<Errno>, Errno> {
        Ok(self.sock_mut(id)?.conn.as_mut().and_then(|c| c.err.take()))
    }

    /// `send`: queue what fits in the send buffer and push. `more` is
    /// `MSG_MORE`, `eor` `MSG_EOR`. `EAGAIN` when the buffer is full.
    pub fn send(
        &mut self,
        id: SockId,
        data: &[u8],
        more: bool,
        eor: bool,
        now: Nanos,
    ) -> Result<usize, Errno> {
        let s = self.sock_mut(id)?;
        let Some(c) = s.conn.as_deref_mut() else {
            return Err(libc::EPIPE);
        };
        if c.fo.deferred && !c.shut_wr && c.err.is_none() && c.state == State::SynSent {
            // The first write after a deferred connect sends the SYN.
            return match self.send_fastopen(id, None, data, now)? {
                0 => Err(libc::EINPROGRESS),
                n => Ok(n),
            };
        }
        c.nospace |= !c.writeable();
        if let Some(e) = c.err.take() {
            return Err(e);
        }
        if c.shut_wr || c.fin_queued {
            return Err(libc::EPIPE);
        }
        match c.state {
            State::Established | State::CloseWait => {}
            // A listener's Fast Open child sends before its handshake ends.
            State::SynRecv if c.fo.passive => {}
            State::SynSent | State::SynRecv => return Err(libc::EAGAIN),
            _ => return Err(libc::EPIPE),
        }
        let mut ctx = ctx!(self, now);
        let c = self.socks[id.0]
            .as_mut()
            .and_then(|s| s.conn.as_deref_mut())
            .expect("checked above");
        let n = c.sendmsg(&mut ctx, data, more, eor);
        if n == 0 && !data.is_empty() {
            return Err(libc::EAGAIN);
        }
        Ok(n)
    }

    /// `recv`: copy queued data (`peek` leaves it). `Ok(0)` at the end of
    /// the stream, `EAGAIN` when nothing is there yet.
    pub fn recv(
        &mut self,
        id: SockId,
        buf: &mut [u8],
        peek: bool,
        now: Nanos,
    ) -> Result<usize, Errno> {
        let tune = crate::rcvbuf::Tune::of(&self.cfg);
        let s = self.sock_mut(id)?;
        if s.listener.is_some() {
            return Err(libc::ENOTCONN);
        }
        let Some(c) = s.conn.as_deref_mut() else {
            return Err(libc::ENOTCONN);
        };
        if c.rcvq.is_empty() {
            if let Some(e) = c.err.take() {
                return Err(e);
            }
            if c.fin_rcvd || c.shut_rd || c.state == State::Closed {
                return Ok(0);
            }
            return Err(libc::EAGAIN);
        }
        let n = buf.len().min(c.rcvq.len());
        // The queue's two halves, copied whole (no byte-at-a-time walk).
        let (a, b) = c.rcvq.as_slices();
        let k = a.len().min(n);
        buf[..k].copy_from_slice(&a[..k]);
        buf[k..n].copy_from_slice(&b[..n - k]);
        if !peek {
            c.rcvq.drain(..n);
            c.copied += n as u64;
        }
        c.rcv_space_adjust(tune, now);
        if c.cleanup_rbuf(n) {
            let mut ctx = ctx!(self, now);
            let c = self.socks[id.0]
                .as_mut()
                .and_then(|s| s.conn.as_deref_mut())
                .expect("checked above");
            c.send_ack(&mut ctx);
        }
        Ok(n)
    }

    /// Connections, orphans (closed by their program) included, that
    /// still have data or a FIN the peer has not acknowledged: what an
    /// exiting process's host waits for before it stops.
    pub fn sending(&self) -> usize {
        self.socks
            .iter()
            .flatten()
            .filter_map(|s| s.conn.as_deref())
            .filter(|c| {
                !c.sndbuf.is_empty()
                    || matches!(c.state, State::FinWait1 | State::Closing | State::LastAck)
            })
            .count()
    }

    /// Connections on local port `port` (of either family), orphans
    /// included.
    pub fn connections_on(&self, port: u16) -> usize {
        self.conns
            .values()
            .filter(|id| {
                self.socks[id.0]
                    .as_ref()
                    .and_then(|s| s.conn.as_deref())
                    .is_some_and(|c| c.local.port() == port && c.state != State::Closed)
            })
            .count()
    }

    /// Bytes queued to read (`SIOCINQ`) and bytes unacknowledged
    /// (`SIOCOUTQ`).
    pub fn queues(&self, id: SockId) -> Result<(usize, usize), Errno> {
        let s = self.sock(id)?;
        Ok(s.conn
            .as_ref()
            .map(|c| (c.rcvq.len(), c.sndbuf.len()))
            .unwrap_or((0, 0)))
    }

    /// `shutdown`: `rd`, `wr` as `SHUT_RD`, `SHUT_WR`, `SHUT_RDWR`.
    pub fn shutdown(&mut self, id: SockId, rd: bool, wr: bool, now: Nanos) -> Result<(), Errno> {
        self.touch(id);
        let s = self.sock_mut(id)?;
        if s.listener.is_some() {
            return Ok(());
        }
        let Some(c) = s.conn.as_deref_mut() else {
            return Err(libc::ENOTCONN);
        };
        if matches!(c.state, State::Closed | State::SynSent)
            && !c.synchronized()
            && c.state != State::SynSent
        {
            return Err(libc::ENOTCONN);
        }
        if rd {
            c.shut_rd = true;
        }
        if wr && !c.shut_wr {
            let mut ctx = ctx!(self, now);
            let c = self.socks[id.0]
                .as_mut()
                .and_then(|s| s.conn.as_deref_mut())
                .expect("checked above");
            c.shut_wr = true;
            close_state(c, &mut ctx);
        }
        Ok(())
    }

    /// `close`: a FIN after what was written (or a reset when unread data
    /// would be lost, or with `SO_LINGER` 0); the connection lives on until
    /// its close completes.
    pub fn close(&mut self, id: SockId, now: Nanos) -> Result<(), Errno> {
        let s = self.sock_mut(id)?;
        if let Some(l) = s.listener.take() {
            let children: Vec<SockId> = l.accept_q.into_iter().collect();
            let pending: Vec<SockId> = self
                .conns
                .values()
                .copied()
                .filter(|c| {
                    self.socks[c.0]
                        .as_ref()
                        .is_some_and(|s| s.parent == Some(id))
                })
                .collect();
            for ch in children.into_iter().chain(pending) {
                if let Some(c) = self.socks[ch.0]
                    .as_mut()
                    .and_then(|s| s.conn.as_deref_mut())
                {
                    let mut ctx = ctx!(self, now);
                    c.send_active_reset(&mut ctx);
                }
                self.remove(ch);
            }
            self.remove(id);
            return Ok(());
        }
        let linger0 = s.linger == Some(0);
        if s.conn.is_none() {
            self.remove(id);
            return Ok(());
        }
        let mut ctx = ctx!(self, now);
        let c = self.socks[id.0]
            .as_mut()
            .and_then(|s| s.conn.as_deref_mut())
            .expect("checked above");
        c.orphan = true;
        let gone = if !c.rcvq.is_empty() || linger0 {
            if !c.rcvq.is_empty() {
                ctx.ext.TCPAbortOnClose += 1;
            } else {
                ctx.ext.TCPAbortOnLinger += 1;
            }
            if c.state != State::Closed && c.state != State::SynSent {
                c.send_active_reset(&mut ctx);
            }
            true
        } else {
            c.shut_wr = true;
            c.shut_rd = true;
            close_state(c, &mut ctx);
            c.state == State::Closed
        };
        if gone {
            self.remove(id);
        } else if let Some(s) = self.socks[id.0].as_mut() {
            s.orphan = true;
        }
        Ok(())
    }

    /// `sk_stream_wait_close`'s question after a `close` with `SO_LINGER`:
    /// is the connection from `local` to `remote` still delivering what
    /// was written and its FIN (`FIN_WAIT1`, `CLOSING`, `LAST_ACK`)?
    pub fn closing(&self, local: SocketAddr, remote: SocketAddr) -> bool {
        self.conns
            .get(&key(local, remote))
            .and_then(|id| self.socks[id.0].as_ref())
            .and_then(|s| s.conn.as_ref())
            .is_some_and(|c| matches!(c.state, State::FinWait1 | State::Closing | State::LastAck))
    }

    /// The bound address and the peer's.
    pub fn addrs(&self, id: SockId) -> Result<(Option<SocketAddr>, Option<SocketAddr>), Errno> {
        let s = self.sock(id)?;
        let peer = s
            .conn
            .as_ref()
            .filter(|c| c.state != State::Closed)
            .map(|c| c.remote);
        Ok((s.bound, peer))
    }

    /// Readiness as `poll` reports it (`tcp_poll`): `EPOLLIN`, `EPOLLOUT`,
    /// `EPOLLRDHUP`, `EPOLLHUP`, `EPOLLERR` bits.
    pub fn events(&mut self, id: SockId) -> Result<u32, Errno> {
        let mut nospace = false;
        let m = self.events_inner(id, &mut nospace)?;
        if nospace {
            // `tcp_poll` sets SOCK_NOSPACE: the next send space wakes.
            if let Some(c) = self.sock_mut(id)?.conn.as_deref_mut() {
                c.nospace = true;
            }
        }
        Ok(m)
    }

    /// Wakeup counts (readers, writers): an edge-triggered waiter reports
    /// when one moved since it last looked (`ep_poll_callback`).
    pub fn wakeups(&self, id: SockId) -> Result<(u64, u64), Errno> {
        let s = self.sock(id)?;
        Ok(match &s.conn {
            Some(c) => (c.wake_in + s.wake_in, c.wake_out + s.wake_in),
            None => (s.wake_in, s.wake_in),
        })
    }

    pub(super) fn events_inner(&self, id: SockId, nospace: &mut bool) -> Result<u32, Errno> {
        let s = self.sock(id)?;
        let (inb, out, rdhup, hup, err) = (
            (libc::EPOLLIN | libc::EPOLLRDNORM) as u32,
            (libc::EPOLLOUT | libc::EPOLLWRNORM) as u32,
            libc::EPOLLRDHUP as u32,
            libc::EPOLLHUP as u32,
            libc::EPOLLERR as u32,
        );
        if let Some(l) = &s.listener {
            return Ok(if l.accept_q.is_empty() { 0 } else { inb });
        }
        let Some(c) = &s.conn else {
            return Ok(out | hup);
        };
        let mut m = 0;
        if c.err.is_some() {
            m |= err;
        }
        if c.state == State::Closed || (c.shut_wr && c.fin_rcvd) {
            m |= hup;
        }
        // A connection done (`tcp_done`: reset, timed out, closed) is shut
        // both ways: readable, to read its end or error.
        if c.fin_rcvd || c.shut_rd || c.state == State::Closed {
            m |= inb | rdhup;
        }
        if matches!(c.state, State::SynSent | State::SynRecv) && !c.fo.passive {
            // A connect Fast Open deferred: writable, the write sends
            // the SYN.
            if c.fo.deferred {
                m |= out;
            }
            return Ok(m);
        }
        if !c.rcvq.is_empty() {
            m |= inb;
        }
        if c.shut_wr || c.state == State::Closed || c.writeable() {
            m |= out;
        } else {
            *nospace = true;
        }
        Ok(m)
    }
}
