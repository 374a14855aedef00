//! A segment from the device finds its socket as the kernel's
//! `tcp_v4_rcv` finds it: `__inet_lookup_established`, then the
//! listener, whose SYN makes a child.

use super::*;

impl Stack {
    /// A packet from the device: an IP packet carrying TCP.
    pub fn input(&mut self, pkt: &[u8], now: Nanos) {
        self.input_checked(pkt, false, now)
    }

    /// [`Stack::input`] of a packet whose checksum the receive path
    /// already verified or trusted (`verified`), as `tcp_v4_rcv` skips
    /// `tcp_checksum_complete` for `CHECKSUM_UNNECESSARY`.
    pub fn input_checked(&mut self, pkt: &[u8], verified: bool, now: Nanos) {
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
            self.touch(id);
            let mut ctx = ctx!(self, now);
            let c = self.socks[id.0]
                .as_mut()
                .and_then(|s| s.conn.as_deref_mut())
                .expect("a connection in the table");
            let v = c.input(&mut ctx, &seg);
            match v {
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
                    self.listen_input(&seg, now);
                }
            }
            return;
        }
        self.listen_input(&seg, now);
    }

    pub(super) fn conn_closed(&mut self, id: SockId) {
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
        let Some(parent) = self.socks[id.0].as_ref().and_then(|s| s.parent) else {
            return;
        };
        self.touch(parent);
        match self
            .socks
            .get_mut(parent.0)
            .and_then(|s| s.as_mut())
            .and_then(|s| s.listener.as_mut())
        {
            Some(l) => {
                l.accept_q.push_back(id);
                if let Some(p) = self.socks[parent.0].as_mut() {
                    p.wake_in += 1;
                }
            }
            None => self.remove(id),
        }
    }

    pub(super) fn find_listener(&self, local: SocketAddr) -> Option<SockId> {
        let mut wild = None;
        for (i, s) in self.socks.iter().enumerate() {
            let Some(s) = s.as_ref().filter(|s| s.listener.is_some() && !s.orphan) else {
                continue;
            };
            let Some(b) = s.bound.filter(|b| b.port() == local.port()) else {
                continue;
            };
            let v4_on_v6 = local.is_ipv4() && s.v6 && !s.v6only;
            if b.ip() == local.ip() || mapped_eq(b.ip(), local.ip()) {
                return Some(SockId(i));
            }
            if b.ip().is_unspecified()
                && (b.is_ipv4() == local.is_ipv4() || v4_on_v6 || local.is_ipv6())
            {
                wild = Some(SockId(i));
            }
        }
        wild
    }

    /// `tcp_v4_rcv` for a segment no connection took: a listener's SYN,
    /// or a reset.
    pub(super) fn listen_input(&mut self, seg: &SegIn<'_>, now: Nanos) {
        let Some(lid) = self.find_listener(seg.dst) else {
            let mut ctx = ctx!(self, now);
            reset_for(&mut ctx, seg);
            return;
        };
        if seg.has(RST) {
            return;
        }
        if seg.has(ACK) {
            let mut ctx = ctx!(self, now);
            reset_for(&mut ctx, seg);
            return;
        }
        if !seg.has(SYN) {
            return;
        }
        let l = self.socks[lid.0].as_ref().expect("a listener");
        let (full, v6sock) = {
            let q = l.listener.as_ref().expect("a listener");
            (q.accept_q.len() as u32 > q.backlog, l.v6)
        };
        if full {
            self.ext.ListenOverflows += 1;
            self.ext.ListenDrops += 1;
            return;
        }
        // The SYN queue: half-open children of this listener, bounded (no
        // SYN cookies yet, so a full queue drops the SYN, counted).
        let backlog = l.listener.as_ref().map_or(0, |q| q.backlog);
        let syn_max = backlog.max(self.cfg.tcp_max_syn_backlog) as usize;
        let half_open = self
            .socks
            .iter()
            .flatten()
            .filter(|s| {
                s.parent == Some(lid) && s.conn.as_ref().is_some_and(|c| c.state == State::SynRecv)
            })
            .count();
        if half_open >= syn_max {
            self.ext.ListenDrops += 1;
            return;
        }
        let (snd, rcv) = self.bufs(l);
        let (nodelay, cork, user_mss, lowat) = (l.nodelay, l.cork, l.user_mss, l.notsent_lowat);
        // `sk_clone_lock` copies `sk_reuse`: a child in TIME_WAIT does not
        // keep its listener's successor from binding the port.
        let reuseaddr = l.reuseaddr;
        let local = if v6sock && seg.dst.is_ipv4() {
            to_mapped(seg.dst)
        } else {
            seg.dst
        };
        let remote = if v6sock && seg.src.is_ipv4() {
            to_mapped(seg.src)
        } else {
            seg.src
        };
        let mut c = self.new_conn(local, remote, State::SynRecv, now, snd, rcv);
        apply_sock_opts(&mut c, self.socks[lid.0].as_ref().expect("a listener"));
        let mut ctx = ctx!(self, now);
        c.take_syn_options(&ctx, seg);
        c.send_syn(&mut ctx, true);
        self.mib.PassiveOpens += 1;
        let id = self.insert(Sock {
            v6: v6sock,
            bound: Some(local),
            nodelay,
            cork,
            user_mss,
            notsent_lowat: lowat,
            reuseaddr,
            parent: Some(lid),
            conn: Some(Box::new(c)),
            ..Sock::default()
        });
        self.conns.insert(key(seg.dst, seg.src), id);
    }
}
