//! A segment from the device finds its socket as the kernel's
//! `tcp_v4_rcv` finds it: `__inet_lookup_established`, then the
//! listener, whose SYN makes a child.

use super::fastopen_listen::Passive;
use super::*;

impl Stack {
    /// A packet from the device: an IP packet carrying TCP, or an ICMP
    /// error quoting one of this host's segments.
    pub fn input(&mut self, pkt: &[u8], now: Nanos) {
        self.input_checked(pkt, false, now)
    }

    /// [`Stack::input`] of a packet whose checksum the receive path
    /// already verified or trusted (`verified`), as `tcp_v4_rcv` skips
    /// `tcp_checksum_complete` for `CHECKSUM_UNNECESSARY`.
    pub fn input_checked(&mut self, pkt: &[u8], verified: bool, now: Nanos) {
        if icmp::is_icmp(pkt) {
            return self.icmp_input(pkt, now);
        }
        self.mib.InSegs += 1;
        let seg = match wire::parse_checked(pkt, verified) {
            Ok(s) => s,
            Err(BadSegment::Checksum) => {
                self.mib.InErrs += 1;
                self.mib.InCsumErrors += 1;
                return;
            }
            Err(_) => {
                self.mib.InErrs += 1;
                return;
            }
        };
        if let Some(&id) = self.conns.get(&key(seg.dst, seg.src)) {
            return self.deliver(id, &seg, now);
        }
        self.listen_input(&seg, now);
    }

    /// A segment to connection `id`, found in the table.
    fn deliver(&mut self, id: SockId, seg: &SegIn<'_>, now: Nanos) {
        self.touch(id);
        let mut ctx = ctx!(self, now);
        let c = self.socks[id.0]
            .as_mut()
            .and_then(|s| s.conn.as_deref_mut())
            .expect("a connection in the table");
        match c.input(&mut ctx, seg) {
            Verdict::Keep => {}
            Verdict::Established => self.child_established(id, now),
            Verdict::Closed => self.conn_closed(id),
            Verdict::Reopen => {
                self.conns.remove(&key(seg.dst, seg.src));
                // The slot stays while the program holds the socket.
                if self.socks[id.0].as_ref().is_some_and(|s| s.orphan) {
                    self.remove(id);
                } else if let Some(c) = self.socks[id.0]
                    .as_mut()
                    .and_then(|s| s.conn.as_deref_mut())
                {
                    c.state = State::Closed;
                    c.close_at = None;
                }
                self.listen_input(seg, now);
            }
        }
    }

    pub(super) fn conn_closed(&mut self, id: SockId) {
        self.fastopen_done(id);
        let Some(s) = self.socks[id.0].as_mut() else {
            return;
        };
        let orphan = s.orphan;
        let parent = s.parent;
        if let Some(c) = s.conn.as_deref() {
            self.conns.remove(&key(c.local, c.remote));
        }
        // A child already queued for `accept` stays: the program gets it,
        // and its first call the error (as the kernel's accept queue).
        let queued = parent.is_some_and(|p| {
            self.socks
                .get(p.0)
                .and_then(|s| s.as_ref())
                .and_then(|s| s.listener.as_ref())
                .is_some_and(|l| l.accept_q.contains(&id))
        });
        if orphan || (parent.is_some() && !queued) {
            self.remove(id);
        }
    }

    pub(super) fn child_established(&mut self, id: SockId, _now: Nanos) {
        if self.socks[id.0]
            .as_ref()
            .is_some_and(|s| s.tfo_listener.is_some())
        {
            // A Fast Open child: in the accept queue since its SYN.
            self.fastopen_done(id);
            return;
        }
        let Some(parent) = self.socks[id.0].as_ref().and_then(|s| s.parent) else {
            return;
        };
        self.touch(parent);
        let was_half_open = self.socks[id.0]
            .as_mut()
            .is_some_and(|s| std::mem::take(&mut s.in_syn_q));
        match self
            .socks
            .get_mut(parent.0)
            .and_then(|s| s.as_mut())
            .and_then(|s| s.listener.as_mut())
        {
            Some(l) => {
                if was_half_open {
                    l.syn_q = l.syn_q.saturating_sub(1);
                }
                l.accept_q.push_back(id);
                if let Some(p) = self.socks[parent.0].as_mut() {
                    p.wake_in += 1;
                }
            }
            None => self.remove(id),
        }
    }

    /// The listener a SYN from `remote` to `local` goes to
    /// (`__inet_lookup_listener`): one bound to `local`'s address before
    /// one bound to the wildcard (an IPv4 socket before an IPv6 one that
    /// takes IPv4). Listeners sharing that address with `SO_REUSEPORT`
    /// split the connections by the flow's hash (`reuseport_select_sock`:
    /// `reciprocal_scale(hash, n)` over the group), so one flow always
    /// finds the same one.
    pub(super) fn find_listener(&self, local: SocketAddr, remote: SocketAddr) -> Option<SockId> {
        // (score, address, id): a bound address 2, a wildcard of the
        // packet's family 1, an IPv6 wildcard taking IPv4 0.
        let mut found: Vec<(u8, IpAddr, SockId)> = Vec::new();
        for &SockId(i) in &self.listeners {
            let Some(s) = self.socks[i]
                .as_ref()
                .filter(|s| s.listener.is_some() && !s.orphan)
            else {
                continue;
            };
            let Some(b) = s.bound.filter(|b| b.port() == local.port()) else {
                continue;
            };
            let v4_on_v6 = local.is_ipv4() && s.v6 && !s.v6only;
            let score = if b.ip() == local.ip() || mapped_eq(b.ip(), local.ip()) {
                2
            } else if b.ip().is_unspecified() && b.is_ipv4() == local.is_ipv4() {
                1
            } else if b.ip().is_unspecified() && (v4_on_v6 || local.is_ipv6()) {
                0
            } else {
                continue;
            };
            found.push((score, b.ip(), SockId(i)));
        }
        let best = found.iter().map(|f| f.0).max()?;
        let &(_, ip, first) = found.iter().find(|f| f.0 == best)?;
        let group: Vec<SockId> = found
            .iter()
            .filter(|f| f.0 == best && f.1 == ip)
            .map(|f| f.2)
            .filter(|id| self.socks[id.0].as_ref().is_some_and(|s| s.reuseport))
            .collect();
        if group.len() < 2 {
            return Some(first);
        }
        let hash =
            foldhash::fast::FixedState::with_seed(self.secret ^ 3).hash_one(key(local, remote));
        let i = ((hash as u32 as u64 * group.len() as u64) >> 32) as usize;
        Some(group[i])
    }

    /// `tcp_v4_rcv` for a segment no connection took: a listener's SYN,
    /// or a reset.
    pub(super) fn listen_input(&mut self, seg: &SegIn<'_>, now: Nanos) {
        let Some(lid) = self.find_listener(seg.dst, seg.src) else {
            let mut ctx = ctx!(self, now);
            reset_for(&mut ctx, seg);
            return;
        };
        if seg.has(RST) {
            return;
        }
        if seg.has(ACK) {
            if !seg.has(SYN) && self.cookie_ack(lid, seg, now) {
                return;
            }
            let mut ctx = ctx!(self, now);
            reset_for(&mut ctx, seg);
            return;
        }
        if !seg.has(SYN) {
            return;
        }
        let l = self.socks[lid.0].as_ref().expect("a listener");
        let full = {
            let q = l.listener.as_ref().expect("a listener");
            q.accept_q.len() as u32 > q.backlog
        };
        if full {
            self.ext.ListenOverflows += 1;
            self.ext.ListenDrops += 1;
            return;
        }
        // The SYN queue: half-open children of this listener, bounded; a
        // full one answers with a cookie (`tcp_syncookies` 1), or drops the
        // SYN, counted (0). With 2, every SYN gets a cookie.
        let backlog = l.listener.as_ref().map_or(0, |q| q.backlog);
        let syn_max = backlog.max(self.cfg.tcp_max_syn_backlog) as usize;
        let half_open = l.listener.as_ref().map_or(0, |q| q.syn_q);
        let cookies = self.cfg.tcp_syncookies;
        if cookies == 2 || (cookies == 1 && half_open >= syn_max) {
            return self.answer_with_cookie(lid, seg, now);
        }
        if half_open >= syn_max {
            self.ext.ListenDrops += 1;
            return;
        }
        let mut c = self.child_conn(lid, seg, now);
        {
            let ctx = ctx!(self, now);
            c.take_syn_options(&ctx, seg);
            c.ecn.create_request(ctx.cfg, seg);
        }
        let passive = self.try_fastopen(lid, &mut c, seg);
        let mut ctx = ctx!(self, now);
        match passive {
            // `tcp_fastopen_create_child`: the transfer begins now.
            Passive::Child => c.init_transfer(&ctx),
            Passive::No(cookie) => c.fo.req = cookie,
        }
        c.send_syn(&mut ctx, true);
        self.mib.PassiveOpens += 1;
        let id = self.insert_child(lid, c, seg);
        if passive == Passive::Child {
            self.fastopen_child_queued(lid, id);
        }
    }

    /// A Fast Open child goes straight to its listener's accept queue
    /// (`inet_csk_reqsk_queue_add`), counted half-open for Fast Open.
    fn fastopen_child_queued(&mut self, lid: SockId, id: SockId) {
        if let Some(s) = self.socks[id.0].as_mut() {
            s.in_syn_q = false;
            s.tfo_listener = Some(lid);
        }
        if let Some(p) = self.socks[lid.0].as_mut() {
            p.wake_in += 1;
            if let Some(l) = p.listener.as_mut() {
                l.syn_q = l.syn_q.saturating_sub(1);
                l.tfo_qlen += 1;
                l.accept_q.push_back(id);
            }
        }
        self.touch(lid);
    }

    /// A connection for listener `lid`'s SYN `seg` (its options not yet
    /// taken).
    fn child_conn(&self, lid: SockId, seg: &SegIn<'_>, now: Nanos) -> Conn {
        let l = self.socks[lid.0].as_ref().expect("a listener");
        let (local, remote) = child_addrs(l.v6, seg);
        let (snd, rcv) = self.bufs(l);
        let mut c = self.new_conn(local, remote, State::SynRecv, now, snd, rcv);
        c.unaccepted = true;
        apply_sock_opts(&mut c, l);
        c.defer_accept = l.defer_accept;
        c
    }

    /// Put connection `c`, made for listener `lid`'s peer in `seg`, in
    /// the table.
    fn insert_child(&mut self, lid: SockId, c: Conn, seg: &SegIn<'_>) -> SockId {
        let l = self.socks[lid.0].as_ref().expect("a listener");
        // `sk_clone_lock` copies the listener whole, its options with it
        // (`SO_KEEPALIVE` and the keepalive times, `SO_LINGER`, the
        // buffer sizes a program set, `IP_TOS`, `TCP_INQ`, `TCP_SYNCNT`,
        // `TCP_NODELAY`, `TCP_CORK`, `TCP_MAXSEG`, `TCP_NOTSENT_LOWAT`),
        // and `sk_reuse` and `sk_reuseport`: a child (in TIME_WAIT or not)
        // does not keep its listener's successor, or another listener of
        // its `SO_REUSEPORT` group, from binding the port. What belongs to
        // the accept queue (`TCP_DEFER_ACCEPT`, `TCP_FASTOPEN`) is the
        // listener's alone (`inet_csk_clone_lock` clears it).
        let child = Sock {
            v6: l.v6,
            v6only: l.v6only,
            bound: Some(c.local),
            reuseaddr: l.reuseaddr,
            reuseport: l.reuseport,
            keepalive: l.keepalive,
            nodelay: l.nodelay,
            cork: l.cork,
            sndbuf: l.sndbuf,
            rcvbuf: l.rcvbuf,
            linger: l.linger,
            user_mss: l.user_mss,
            notsent_lowat: l.notsent_lowat,
            tos: l.tos,
            inq: l.inq,
            keep_idle: l.keep_idle,
            keep_intvl: l.keep_intvl,
            keep_cnt: l.keep_cnt,
            syn_retries: l.syn_retries,
            parent: Some(lid),
            in_syn_q: true,
            conn: Some(Box::new(c)),
            ..Sock::default()
        };
        let id = self.insert(child);
        self.conns.insert(key(seg.dst, seg.src), id);
        if let Some(q) = self.socks[lid.0].as_mut().and_then(|s| s.listener.as_mut()) {
            q.syn_q += 1;
        }
        id
    }

    /// A SYN-ACK that keeps nothing: the connection is in its sequence
    /// number (and, with timestamps, its `tsval`), see `cookies`.
    fn answer_with_cookie(&mut self, lid: SockId, seg: &SegIn<'_>, now: Nanos) {
        let mut c = self.child_conn(lid, seg, now);
        let ctx = ctx!(self, now);
        c.take_syn_options(&ctx, seg);
        c.ecn.create_request(ctx.cfg, seg);
        if !c.ts_ok {
            // No timestamp to keep the agreement in (`tcp_conn_request`).
            c.ecn.set_ok(false);
        }
        let (iss, mss) = self.cookie_isn(seg, now);
        c.set_iss(iss);
        c.mss_clamp = c.mss_clamp.min(u32::from(mss));
        if c.ts_ok {
            let raw = (now / 1_000_000) as u32;
            let ts = cookies::ts_with_options(raw, cookies::ts_options(&c));
            c.ts_off = c.ts_off.wrapping_add(ts.wrapping_sub(raw));
        } else {
            // `tcp_clear_options`: nothing would bring them back.
            c.wscale_ok = false;
            c.snd_wscale = 0;
            c.rcv_wscale = 0;
            c.sack_ok = false;
        }
        let mut ctx = ctx!(self, now);
        c.send_syn(&mut ctx, true);
        self.ext.SyncookiesSent += 1;
        if let Some(q) = self.socks[lid.0].as_mut().and_then(|s| s.listener.as_mut()) {
            q.cookie_at = Some(now);
        }
    }

    /// An ACK to listener `lid` that matches no connection: if it brings
    /// back a cookie this listener sent lately, the connection is made
    /// from it and takes the ACK (`cookie_v4_check`). True if it was one
    /// (accepted, or dropped for a full accept queue).
    fn cookie_ack(&mut self, lid: SockId, seg: &SegIn<'_>, now: Nanos) -> bool {
        let Some(q) = self.socks[lid.0].as_ref().and_then(|s| s.listener.as_ref()) else {
            return false;
        };
        let recent = q
            .cookie_at
            .is_some_and(|t| now.saturating_sub(t) < cookies::SYNCOOKIE_VALID);
        if self.cfg.tcp_syncookies == 0 || !recent {
            return false;
        }
        let Some(mss) = self.cookie_check(seg, now) else {
            self.ext.SyncookiesFailed += 1;
            return false;
        };
        self.ext.SyncookiesRecv += 1;
        if q.accept_q.len() as u32 > q.backlog {
            self.ext.ListenOverflows += 1;
            self.ext.ListenDrops += 1;
            return true;
        }
        // The SYN as the cookie remembers it.
        let mut syn = SegIn {
            seq: seg.seq.wrapping_sub(1),
            ack: 0,
            flags: SYN,
            opts: wire::OptsIn {
                mss: Some(mss),
                ts: seg.opts.ts.map(|(v, _)| (v, 0)),
                ..Default::default()
            },
            payload: &[],
            ..seg.clone()
        };
        let mut c = self.child_conn(lid, &syn, now);
        let mut ecn_ok = false;
        if let Some((_, ecr)) = seg.opts.ts {
            let (wscale, sack_ok, ecn) = cookies::ts_decode(ecr.wrapping_sub(c.ts_off));
            syn.opts.wscale = wscale;
            syn.opts.sack_ok = sack_ok;
            ecn_ok = ecn && self.cfg.tcp_ecn != 0;
        }
        let ctx = ctx!(self, now);
        c.take_syn_options(&ctx, &syn);
        c.ecn.set_ok(ecn_ok);
        c.set_iss(seg.ack.wrapping_sub(1));
        // The SYN-ACK was not timed: no RTT sample from it.
        if let Some(s) = c.rtx.front_mut() {
            s.retrans = true;
        }
        self.mib.PassiveOpens += 1;
        let id = self.insert_child(lid, c, seg);
        self.deliver(id, seg, now);
        true
    }
}

/// A child's (local, remote) for SYN `seg` on a listener (`v6`: an IPv6
/// one, whose IPv4 peers it sees as mapped addresses).
fn child_addrs(v6: bool, seg: &SegIn<'_>) -> (SocketAddr, SocketAddr) {
    let map = |a: SocketAddr| {
        if v6 && a.is_ipv4() {
            to_mapped(a)
        } else {
            a
        }
    };
    (map(seg.dst), map(seg.src))
}
