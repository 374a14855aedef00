//! The socket table and the calls a program makes: `socket`, `bind`,
//! `listen`, `accept`, `connect`, `send`, `recv`, `shutdown`, `close`,
//! options and readiness. Segments find their socket as
//! `__inet_lookup_established` then the listener.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr};

use rxpath_wire::tcp::flags::{ACK, RST, SYN};

use crate::config::TcpConfig;
use crate::conn::{
    AckState, Conn, Sent, State, XmitTimer, TCP_INFINITE_SSTHRESH, TCP_INIT_CWND, TCP_TIMEOUT_INIT,
};
use crate::input::Verdict;
use crate::mib;
use crate::output::{reset_for, Nonagle};
use crate::wire::{self, BadSegment, SegIn};
use crate::{Ctx, Nanos, Transmit};

/// An error as the system call returns it (a positive `errno`).
pub type Errno = i32;

/// A socket's handle in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SockId(pub usize);

/// The options [`Stack::set_option`] and [`Stack::option`] handle, by the
/// kernel's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SockOpt {
    /// `TCP_NODELAY`.
    NoDelay,
    /// `TCP_CORK`.
    Cork,
    /// `SO_REUSEADDR`.
    ReuseAddr,
    /// `SO_SNDBUF` (set doubles it, as the kernel does).
    SndBuf,
    /// `SO_RCVBUF` (likewise).
    RcvBuf,
    /// `SO_LINGER` with `l_onoff` set: the linger time in seconds.
    Linger,
    /// `TCP_MAXSEG` (read: the current send MSS).
    MaxSeg,
    /// `SO_ERROR`: read and clear the pending error.
    Error,
    /// `SO_KEEPALIVE`.
    KeepAlive,
    /// `TCP_NOTSENT_LOWAT`: writable only while fewer unsent bytes wait.
    NotsentLowat,
    /// `IP_TOS` / `IPV6_TCLASS`: the byte every packet carries.
    Tos,
    /// `TCP_INQ`: `recvmsg` reports the bytes left to read.
    Inq,
    /// `TCP_KEEPIDLE` (seconds).
    KeepIdle,
    /// `TCP_KEEPINTVL` (seconds).
    KeepIntvl,
    /// `TCP_KEEPCNT`.
    KeepCnt,
    /// `IPV6_V6ONLY`: an IPv6 socket that takes no IPv4 (set before
    /// `bind`).
    V6Only,
}

#[derive(Debug, Default)]
struct Listener {
    backlog: u32,
    accept_q: VecDeque<SockId>,
}

#[derive(Debug, Default)]
struct Sock {
    v6: bool,
    v6only: bool,
    bound: Option<SocketAddr>,
    reuseaddr: bool,
    keepalive: bool,
    nodelay: bool,
    cork: bool,
    sndbuf: Option<u32>,
    rcvbuf: Option<u32>,
    linger: Option<u32>,
    user_mss: Option<u32>,
    notsent_lowat: Option<u32>,
    tos: u8,
    inq: bool,
    keep_idle: Option<u32>,
    keep_intvl: Option<u32>,
    keep_cnt: Option<u8>,
    listener: Option<Listener>,
    conn: Option<Box<Conn>>,
    /// Wakeups of the socket itself (a listener's accept queue).
    wake_in: u64,
    /// A SYN_RECV child's listener.
    parent: Option<SockId>,
    /// The program closed it; it lives on until its connection ends.
    orphan: bool,
    /// In [`Stack::touched`] (taken by [`Stack::take_touched`]).
    touched: bool,
}

/// The TCP sockets of one host.
pub struct Stack {
    /// The knobs.
    pub cfg: TcpConfig,
    socks: Vec<Option<Sock>>,
    free: Vec<usize>,
    conns: HashMap<(SocketAddr, SocketAddr), SockId>,
    out: VecDeque<Transmit>,
    /// `Tcp:` counters.
    pub mib: mib::Tcp,
    /// `TcpExt:` counters.
    pub ext: mib::TcpExt,
    secret: u64,
    ip_id: u16,
    next_port: u16,
    local_addrs: Vec<IpAddr>,
    /// Sockets whose readiness a segment or a timer may have changed
    /// since [`Stack::take_touched`] last emptied it (the kernel's
    /// `sk_data_ready` / `sk_write_space` / `sk_state_change` calls).
    touched: Vec<SockId>,
}

macro_rules! ctx {
    ($s:ident, $now:expr) => {
        Ctx {
            cfg: &$s.cfg,
            out: &mut $s.out,
            mib: &mut $s.mib,
            ext: &mut $s.ext,
            now: $now,
            ip_id: &mut $s.ip_id,
        }
    };
}

impl Stack {
    /// A stack with these knobs; `secret` keys the ISNs and timestamp
    /// offsets (`secure_tcp_seq`), `local_addrs` are the addresses
    /// `connect` may take as its source.
    pub fn new(cfg: TcpConfig, secret: u64, local_addrs: Vec<IpAddr>) -> Self {
        Stack {
            cfg,
            socks: Vec::new(),
            free: Vec::new(),
            conns: HashMap::new(),
            out: VecDeque::new(),
            mib: mib::Tcp::default(),
            ext: mib::TcpExt::default(),
            secret,
            ip_id: secret as u16,
            next_port: 32768 + (secret % 28000) as u16,
            local_addrs,
            touched: Vec::new(),
        }
    }

    fn sock(&self, id: SockId) -> Result<&Sock, Errno> {
        self.socks
            .get(id.0)
            .and_then(|s| s.as_ref())
            .filter(|s| !s.orphan)
            .ok_or(libc::EBADF)
    }

    fn sock_mut(&mut self, id: SockId) -> Result<&mut Sock, Errno> {
        self.socks
            .get_mut(id.0)
            .and_then(|s| s.as_mut())
            .filter(|s| !s.orphan)
            .ok_or(libc::EBADF)
    }

    fn insert(&mut self, s: Sock) -> SockId {
        match self.free.pop() {
            Some(i) => {
                self.socks[i] = Some(s);
                SockId(i)
            }
            None => {
                self.socks.push(Some(s));
                SockId(self.socks.len() - 1)
            }
        }
    }

    fn remove(&mut self, id: SockId) {
        if let Some(s) = self.socks.get_mut(id.0).and_then(|s| s.take()) {
            if let Some(c) = &s.conn {
                if self.conns.get(&key(c.local, c.remote)) == Some(&id) {
                    self.conns.remove(&key(c.local, c.remote));
                }
            }
            // No listener's queue may keep naming a freed slot.
            if let Some(l) = s
                .parent
                .and_then(|p| self.socks.get_mut(p.0))
                .and_then(|p| p.as_mut())
                .and_then(|p| p.listener.as_mut())
            {
                l.accept_q.retain(|&c| c != id);
            }
            self.free.push(id.0);
        }
    }

    /// `socket(AF_INET or AF_INET6, SOCK_STREAM, 0)`.
    pub fn socket(&mut self, v6: bool) -> SockId {
        self.insert(Sock {
            v6,
            ..Sock::default()
        })
    }

    fn port_in_use(&self, addr: SocketAddr, reuse: bool, v6only: bool) -> bool {
        self.socks.iter().flatten().any(|s| {
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
            b.port() == addr.port() && overlap && (!(reuse && s.reuseaddr) || listening)
        })
    }

    fn ephemeral_port(&mut self) -> u16 {
        for _ in 0..28232 {
            self.next_port = if self.next_port >= 60999 {
                32768
            } else {
                self.next_port + 1
            };
            let p = self.next_port;
            if !self
                .socks
                .iter()
                .flatten()
                .any(|s| s.bound.is_some_and(|b| b.port() == p))
            {
                return p;
            }
        }
        0
    }

    /// `bind`.
    pub fn bind(&mut self, id: SockId, mut addr: SocketAddr) -> Result<(), Errno> {
        let (reuse, v6only) = {
            let s = self.sock(id)?;
            (s.reuseaddr, s.v6only)
        };
        if self.sock(id)?.bound.is_some() {
            return Err(libc::EINVAL);
        }
        if addr.port() == 0 {
            addr.set_port(self.ephemeral_port());
        } else if self.port_in_use(addr, reuse, v6only) {
            return Err(libc::EADDRINUSE);
        }
        self.sock_mut(id)?.bound = Some(addr);
        Ok(())
    }

    /// `listen`: the accept queue holds `min(backlog, somaxconn)` (+1, as
    /// `sk_acceptq_is_full` compares with `>`).
    pub fn listen(&mut self, id: SockId, backlog: i32) -> Result<(), Errno> {
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
        }
        let s = self.sock_mut(id)?;
        let backlog = (backlog.max(0) as u32).min(somax);
        s.listener.get_or_insert_with(Listener::default).backlog = backlog;
        Ok(())
    }

    /// `accept`: the oldest established connection, or `EAGAIN`.
    pub fn accept(&mut self, id: SockId) -> Result<(SockId, SocketAddr), Errno> {
        let s = self.sock_mut(id)?;
        let l = s.listener.as_mut().ok_or(libc::EINVAL)?;
        let child = l.accept_q.pop_front().ok_or(libc::EAGAIN)?;
        let c = self.socks[child.0].as_mut().ok_or(libc::ECONNABORTED)?;
        c.parent = None;
        let peer = c
            .conn
            .as_ref()
            .map(|c| c.remote)
            .ok_or(libc::ECONNABORTED)?;
        Ok((child, peer))
    }

    fn new_conn(
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
            h.write(format!("{local}{remote}").as_bytes());
            h.finish()
        };
        let iss = (h(1) as u32).wrapping_add((now >> 6) as u32);
        let v6 = remote.is_ipv6()
            && !matches!(remote.ip(), IpAddr::V6(a) if a.to_ipv4_mapped().is_some());
        let advmss = self.cfg.advmss(v6) as u32;
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
            notsent_lowat: self.cfg.tcp_notsent_lowat,
            tos: 0,
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
            shut_rd: false,
            shut_wr: false,
            orphan: false,
            reset: false,
        }
    }

    fn bufs(&self, s: &Sock) -> (u32, u32) {
        (
            s.sndbuf.unwrap_or(self.cfg.tcp_wmem[1]),
            s.rcvbuf.unwrap_or(self.cfg.tcp_rmem[1]),
        )
    }

    /// `connect`: sends the SYN; the caller waits for [`Stack::state`] to
    /// leave `SynSent` (or returns `EINPROGRESS`).
    pub fn connect(&mut self, id: SockId, remote: SocketAddr, now: Nanos) -> Result<(), Errno> {
        let s = self.sock(id)?;
        if s.listener.is_some() {
            return Err(libc::EISCONN);
        }
        if let Some(c) = &s.conn {
            return Err(match c.state {
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
        let mut ctx = ctx!(self, now);
        c.send_syn(&mut ctx, false);
        self.mib.ActiveOpens += 1;
        self.conns.insert(key(local, remote), id);
        let s = self.sock_mut(id)?;
        s.bound = Some(local);
        s.conn = Some(Box::new(c));
        Ok(())
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
        c.nospace |= !c.writeable();
        if let Some(e) = c.err.take() {
            return Err(e);
        }
        if c.shut_wr || c.fin_queued {
            return Err(libc::EPIPE);
        }
        match c.state {
            State::Established | State::CloseWait => {}
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
            // `tcp_cleanup_rbuf`: announce a window that at least doubled.
            let now_wnd = c.receive_window();
            let mut time_to_ack = false;
            if c.synchronized() && !c.fin_rcvd && !c.shut_rd && 2 * now_wnd <= c.window_clamp {
                let new = c.window_after_read();
                time_to_ack = new > 0 && new >= 2 * now_wnd;
            }
            if time_to_ack {
                let mut ctx = ctx!(self, now);
                let c = self.socks[id.0]
                    .as_mut()
                    .and_then(|s| s.conn.as_deref_mut())
                    .expect("checked above");
                c.send_ack(&mut ctx);
            }
        }
        Ok(n)
    }

    /// `getsockopt(TCP_INFO)`.
    pub fn tcp_info(&self, id: SockId, now: Nanos) -> Result<crate::TcpInfo, Errno> {
        let s = self.sock(id)?;
        Ok(match (&s.conn, &s.listener) {
            (Some(c), _) => c.tcp_info(now),
            (None, l) => crate::TcpInfo {
                tcpi_state: if l.is_some() {
                    State::Listen
                } else {
                    State::Closed
                }
                .kernel_code(),
                tcpi_rto: 1_000_000,
                tcpi_snd_mss: crate::conn::TCP_MSS_DEFAULT,
                tcpi_snd_cwnd: TCP_INIT_CWND,
                tcpi_snd_ssthresh: TCP_INFINITE_SSTHRESH,
                tcpi_reordering: 3,
                tcpi_pmtu: 1500,
                ..crate::TcpInfo::default()
            },
        })
    }

    /// `tcp_inq_hint`: bytes left to read, 1 at the end of the stream
    /// (so the reader goes on to see it).
    pub fn inq_hint(&self, id: SockId) -> Result<i32, Errno> {
        let s = self.sock(id)?;
        Ok(match &s.conn {
            Some(c) if c.rcvq.is_empty() && c.fin_rcvd => 1,
            Some(c) => c.rcvq.len() as i32,
            None => 0,
        })
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

    /// Set an option.
    pub fn set_option(
        &mut self,
        id: SockId,
        opt: SockOpt,
        val: i32,
        now: Nanos,
    ) -> Result<(), Errno> {
        let sysctl_lowat = self.cfg.tcp_notsent_lowat;
        let s = self.sock_mut(id)?;
        match opt {
            SockOpt::NoDelay => {
                s.nodelay = val != 0;
                if let Some(c) = s.conn.as_deref_mut() {
                    c.nodelay = val != 0;
                }
            }
            SockOpt::Cork => {
                s.cork = val != 0;
                if let Some(c) = s.conn.as_deref_mut() {
                    c.cork = val != 0;
                }
            }
            SockOpt::ReuseAddr => s.reuseaddr = val != 0,
            SockOpt::KeepAlive => s.keepalive = val != 0,
            SockOpt::KeepIdle | SockOpt::KeepIntvl | SockOpt::KeepCnt => {
                let max = if opt == SockOpt::KeepCnt { 127 } else { 32767 };
                if !(1..=max).contains(&val) {
                    return Err(libc::EINVAL);
                }
                match opt {
                    SockOpt::KeepIdle => s.keep_idle = Some(val as u32),
                    SockOpt::KeepIntvl => s.keep_intvl = Some(val as u32),
                    _ => s.keep_cnt = Some(val as u8),
                }
            }
            SockOpt::SndBuf => {
                let v = (val.max(2304) as u32).saturating_mul(2);
                s.sndbuf = Some(v);
                if let Some(c) = s.conn.as_deref_mut() {
                    // `SOCK_SNDBUF_LOCK`: no autotuning from here on.
                    c.sk_sndbuf = v;
                    c.sndbuf_locked = true;
                }
            }
            SockOpt::RcvBuf => {
                let v = (val.max(1152) as u32).saturating_mul(2);
                s.rcvbuf = Some(v);
                if let Some(c) = s.conn.as_deref_mut() {
                    c.sk_rcvbuf = v;
                }
            }
            SockOpt::Linger => s.linger = (val >= 0).then_some(val as u32),
            SockOpt::MaxSeg => {
                if !(88..=65535).contains(&val) {
                    return Err(libc::EINVAL);
                }
                s.user_mss = Some(val as u32);
            }
            SockOpt::NotsentLowat => {
                s.notsent_lowat = Some(val as u32);
                if let Some(c) = s.conn.as_deref_mut() {
                    // 0: the sysctl's value (`tcp_notsent_lowat`).
                    c.notsent_lowat = if val == 0 { sysctl_lowat } else { val as u32 };
                }
            }
            SockOpt::Tos => {
                s.tos = val as u8;
                if let Some(c) = s.conn.as_deref_mut() {
                    c.tos = val as u8;
                }
            }
            SockOpt::Inq => s.inq = val != 0,
            SockOpt::V6Only => {
                if !s.v6 || s.bound.is_some() {
                    return Err(libc::EINVAL);
                }
                s.v6only = val != 0;
            }
            SockOpt::Error => return Err(libc::ENOPROTOOPT),
        }
        if matches!(
            opt,
            SockOpt::KeepAlive | SockOpt::KeepIdle | SockOpt::KeepIntvl | SockOpt::KeepCnt
        ) {
            self.keepalive_changed(id, opt, now)?;
            return Ok(());
        }
        // TCP_NODELAY on pushes what waits (`TCP_NAGLE_PUSH`); TCP_CORK
        // off pushes too, past Nagle only with TCP_NODELAY.
        let push = match opt {
            SockOpt::NoDelay if val != 0 => Some(Nonagle::Push),
            SockOpt::Cork if val == 0 => Some(if s.nodelay {
                Nonagle::Push
            } else {
                Nonagle::Nagle
            }),
            _ => None,
        };
        if let Some(nonagle) = push {
            let mut ctx = ctx!(self, now);
            if let Some(c) = self.socks[id.0]
                .as_mut()
                .and_then(|s| s.conn.as_deref_mut())
            {
                c.write_xmit(&mut ctx, nonagle);
            }
        }
        Ok(())
    }

    /// A keepalive option set on a connection: `tcp_set_keepalive` arms
    /// or stops the timer; `TCP_KEEPIDLE` re-arms it for what is left of
    /// the new idle time (`tcp_sock_set_keepidle_locked`).
    fn keepalive_changed(&mut self, id: SockId, opt: SockOpt, now: Nanos) -> Result<(), Errno> {
        let s = self.sock(id)?;
        let (on, idle, intvl, cnt) = (s.keepalive, s.keep_idle, s.keep_intvl, s.keep_cnt);
        let ctx = ctx!(self, now);
        let Some(c) = self.socks[id.0]
            .as_mut()
            .and_then(|s| s.conn.as_deref_mut())
        else {
            return Ok(());
        };
        let was_on = c.keepalive;
        (c.keepalive, c.keep_idle, c.keep_intvl, c.keep_cnt) = (on, idle, intvl, cnt);
        match opt {
            SockOpt::KeepAlive if on && !was_on => c.arm_keepalive(&ctx),
            SockOpt::KeepAlive if !on => c.ka_at = None,
            SockOpt::KeepIdle if on && c.synchronized() => {
                let elapsed = now.saturating_sub(c.ack.lrcvtime.max(c.rcv_tstamp));
                c.ka_at = Some(now + c.keep_time(&ctx).saturating_sub(elapsed));
            }
            _ => {}
        }
        Ok(())
    }

    /// Read an option.
    pub fn option(&mut self, id: SockId, opt: SockOpt) -> Result<i32, Errno> {
        let (snd, rcv) = {
            let s = self.sock(id)?;
            self.bufs(s)
        };
        let (ka_time, ka_intvl, ka_cnt) = (
            self.cfg.tcp_keepalive_time,
            self.cfg.tcp_keepalive_intvl,
            self.cfg.tcp_keepalive_probes,
        );
        let s = self.sock_mut(id)?;
        Ok(match opt {
            SockOpt::NoDelay => s.nodelay as i32,
            SockOpt::Cork => s.cork as i32,
            SockOpt::ReuseAddr => s.reuseaddr as i32,
            SockOpt::KeepAlive => s.keepalive as i32,
            SockOpt::SndBuf => snd as i32,
            SockOpt::RcvBuf => rcv as i32,
            SockOpt::Linger => s.linger.map(|l| l as i32).unwrap_or(-1),
            SockOpt::MaxSeg => match (&s.conn, s.user_mss) {
                (Some(c), _) if c.synchronized() => c.mss_cache as i32,
                (_, Some(m)) => m as i32,
                _ => crate::conn::TCP_MSS_DEFAULT as i32,
            },
            SockOpt::NotsentLowat => s.notsent_lowat.unwrap_or(0) as i32,
            SockOpt::Tos => s.tos as i32,
            SockOpt::Inq => s.inq as i32,
            SockOpt::V6Only => s.v6only as i32,
            SockOpt::KeepIdle => s.keep_idle.unwrap_or(ka_time) as i32,
            SockOpt::KeepIntvl => s.keep_intvl.unwrap_or(ka_intvl) as i32,
            SockOpt::KeepCnt => s.keep_cnt.unwrap_or(ka_cnt) as i32,
            SockOpt::Error => s.conn.as_mut().and_then(|c| c.err.take()).unwrap_or(0),
        })
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

    fn events_inner(&self, id: SockId, nospace: &mut bool) -> Result<u32, Errno> {
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
        if c.fin_rcvd || c.shut_rd {
            m |= inb | rdhup;
        }
        if matches!(c.state, State::SynSent | State::SynRecv) {
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

    fn conn_closed(&mut self, id: SockId) {
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

    fn child_established(&mut self, id: SockId, _now: Nanos) {
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

    fn find_listener(&self, local: SocketAddr) -> Option<SockId> {
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
    fn listen_input(&mut self, seg: &SegIn<'_>, now: Nanos) {
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

    /// Take the sockets whose readiness may have changed since the last
    /// call (a segment or a timer touched them; a listener when a child
    /// became acceptable), each once, in `out` (emptied first).
    pub fn take_touched(&mut self, out: &mut Vec<SockId>) {
        out.clear();
        out.append(&mut self.touched);
        for id in out.iter() {
            if let Some(s) = self.socks.get_mut(id.0).and_then(|s| s.as_mut()) {
                s.touched = false;
            }
        }
        out.sort_unstable();
        out.dedup();
    }

    /// Note `id` for [`Stack::take_touched`]: once until taken, so the
    /// list stays as short as the table (a driver that never takes it,
    /// packetdrill's, keeps no more).
    fn touch(&mut self, id: SockId) {
        if let Some(s) = self.socks.get_mut(id.0).and_then(|s| s.as_mut()) {
            if !s.touched {
                s.touched = true;
                self.touched.push(id);
            }
        }
    }

    /// The next packet to send, IP header first.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// The earliest timer deadline of any connection.
    pub fn next_deadline(&self) -> Option<Nanos> {
        self.socks
            .iter()
            .flatten()
            .filter_map(|s| s.conn.as_ref())
            .filter_map(|c| c.next_deadline())
            .min()
    }

    /// Run the timers due at `now`.
    pub fn on_timeout(&mut self, now: Nanos) {
        let due: Vec<SockId> = (0..self.socks.len())
            .filter(|&i| {
                self.socks[i]
                    .as_ref()
                    .and_then(|s| s.conn.as_ref())
                    .and_then(|c| c.next_deadline())
                    .is_some_and(|t| t <= now)
            })
            .map(SockId)
            .collect();
        for id in due {
            self.touch(id);
            let mut ctx = ctx!(self, now);
            let Some(c) = self.socks[id.0]
                .as_mut()
                .and_then(|s| s.conn.as_deref_mut())
            else {
                continue;
            };
            if c.on_timeout(&mut ctx) == Verdict::Closed {
                self.conn_closed(id);
            }
        }
    }
}

/// The socket's options a new connection takes: Nagle and cork, the
/// program's MSS (`user_mss` caps the MSS advertised and used), the
/// unsent-data low-water mark.
fn apply_sock_opts(c: &mut Conn, s: &Sock) {
    c.keepalive = s.keepalive;
    c.keep_idle = s.keep_idle;
    c.keep_intvl = s.keep_intvl;
    c.keep_cnt = s.keep_cnt;
    c.tos = s.tos;
    c.sndbuf_locked = s.sndbuf.is_some();
    c.nodelay = s.nodelay;
    c.cork = s.cork;
    if let Some(m) = s.user_mss {
        c.advmss = c.advmss.min(m);
        c.user_mss = Some(m);
    }
    if let Some(l) = s.notsent_lowat.filter(|&l| l != 0) {
        c.notsent_lowat = l;
    }
}

/// `tcp_close_state` and `tcp_send_fin`.
fn close_state(c: &mut Conn, ctx: &mut Ctx<'_>) {
    let next = match c.state {
        State::Established | State::SynRecv => State::FinWait1,
        State::CloseWait => State::LastAck,
        State::SynSent => {
            c.rto_at = None;
            State::Closed
        }
        s => s,
    };
    let send_fin = matches!(
        (c.state, next),
        (State::Established | State::SynRecv, State::FinWait1) | (State::CloseWait, State::LastAck)
    );
    c.state = next;
    if send_fin {
        c.fin_queued = true;
        c.write_xmit(ctx, Nonagle::Off);
    }
}

/// The connection table's key: both ends with IPv4-mapped IPv6 addresses
/// written as IPv4, as the packets carry them.
fn key(local: SocketAddr, remote: SocketAddr) -> (SocketAddr, SocketAddr) {
    let canon = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
    (canon(local), canon(remote))
}

fn mapped_eq(a: IpAddr, b: IpAddr) -> bool {
    match (a, b) {
        (IpAddr::V6(a), IpAddr::V4(b)) | (IpAddr::V4(b), IpAddr::V6(a)) => {
            a.to_ipv4_mapped() == Some(b)
        }
        _ => false,
    }
}

fn to_mapped(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V4(v4) => SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), a.port()),
        _ => a,
    }
}
