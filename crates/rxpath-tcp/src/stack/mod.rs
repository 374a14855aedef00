//! The socket table of one host, its timers and what it sends. The calls
//! a program makes are in `calls` (and `options`), a segment's way to its
//! socket in `segments`.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr};

use rxpath_wire::tcp::flags::{ACK, RST, SYN};

use crate::config::TcpConfig;
use crate::conn::{
    AckState, Conn, Sent, State, XmitTimer, TCP_INFINITE_SSTHRESH, TCP_INIT_CWND, TCP_TIMEOUT_INIT,
};
use crate::ctx::Ctx;
use crate::ctx::Transmit;
use crate::input::Verdict;
use crate::mib;
use crate::output::{reset_for, Nonagle};
use crate::time::Nanos;
use crate::wire::{self, BadSegment, SegIn};

/// An error as the system call returns it (a positive `errno`).
pub type Errno = i32;

/// `TCP_FASTOPEN_CONNECT` (`include/uapi/linux/tcp.h`).
pub const TCP_FASTOPEN_CONNECT: i32 = 30;

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
    /// `SO_REUSEPORT`: listeners bound to one address share its
    /// connections (set before `bind`).
    ReusePort,
    /// `TCP_DEFER_ACCEPT` (seconds, kept as SYN-ACK retransmissions): a
    /// listener's connection waits for data before `accept` sees it.
    DeferAccept,
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
    /// `TCP_FASTOPEN_CONNECT`: `connect` sends no SYN when a Fast Open
    /// cookie is kept; the first write sends it with its data.
    FastopenConnect,
    /// `TCP_SYNCNT`: SYN retransmissions before `connect` gives up (the
    /// `tcp_syn_retries` sysctl's, for this socket).
    SynCnt,
    /// `TCP_FASTOPEN` on a listener: the queue of Fast Open children
    /// (`fastopen_queue_tune`: at most `somaxconn`); with `tcp_fastopen`'s
    /// server bit (not the default) its SYNs' data is taken.
    Fastopen,
}

impl SockOpt {
    /// The option a `setsockopt`/`getsockopt` names by its kernel level
    /// and name, if the machine keeps it. `SO_LINGER` (a struct) and
    /// `IPV6_V6ONLY` (a bind-time choice) are the caller's to map.
    pub fn by_name(level: i32, name: i32) -> Option<SockOpt> {
        Some(match (level, name) {
            (libc::SOL_SOCKET, libc::SO_REUSEADDR) => SockOpt::ReuseAddr,
            (libc::SOL_SOCKET, libc::SO_REUSEPORT) => SockOpt::ReusePort,
            (libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT) => SockOpt::DeferAccept,
            (libc::SOL_SOCKET, libc::SO_SNDBUF) => SockOpt::SndBuf,
            (libc::SOL_SOCKET, libc::SO_RCVBUF) => SockOpt::RcvBuf,
            (libc::SOL_SOCKET, libc::SO_ERROR) => SockOpt::Error,
            (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => SockOpt::KeepAlive,
            (libc::IPPROTO_TCP, libc::TCP_NODELAY) => SockOpt::NoDelay,
            (libc::IPPROTO_TCP, libc::TCP_CORK) => SockOpt::Cork,
            (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => SockOpt::MaxSeg,
            (libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT) => SockOpt::NotsentLowat,
            (libc::IPPROTO_TCP, libc::TCP_INQ) => SockOpt::Inq,
            (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => SockOpt::KeepIdle,
            (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL) => SockOpt::KeepIntvl,
            (libc::IPPROTO_TCP, libc::TCP_KEEPCNT) => SockOpt::KeepCnt,
            (libc::IPPROTO_TCP, TCP_FASTOPEN_CONNECT) => SockOpt::FastopenConnect,
            (libc::IPPROTO_TCP, libc::TCP_SYNCNT) => SockOpt::SynCnt,
            (libc::IPPROTO_TCP, libc::TCP_FASTOPEN) => SockOpt::Fastopen,
            (libc::IPPROTO_IP, libc::IP_TOS) | (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                SockOpt::Tos
            }
            _ => return None,
        })
    }
}

#[derive(Debug, Default)]
struct Listener {
    backlog: u32,
    accept_q: VecDeque<SockId>,
    /// When it last answered a SYN with a cookie (`tcp_synq_overflow`).
    cookie_at: Option<Nanos>,
    /// Children not yet established (`inet_csk_reqsk_queue_len`).
    syn_q: usize,
    /// Fast Open children not yet established (`fastopenq.qlen`).
    tfo_qlen: usize,
}

#[derive(Debug, Default)]
struct Sock {
    v6: bool,
    v6only: bool,
    bound: Option<SocketAddr>,
    reuseaddr: bool,
    reuseport: bool,
    /// `TCP_DEFER_ACCEPT` as SYN-ACK retransmissions (`rskq_defer_accept`).
    defer_accept: u8,
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
    /// `TCP_FASTOPEN_CONNECT`.
    fastopen_connect: bool,
    /// `TCP_SYNCNT`.
    syn_retries: Option<u8>,
    /// `TCP_FASTOPEN`'s queue length.
    fastopen_qlen: u32,
    listener: Option<Listener>,
    conn: Option<Box<Conn>>,
    /// Wakeups of the socket itself (a listener's accept queue).
    wake_in: u64,
    /// A SYN_RECV child's listener.
    parent: Option<SockId>,
    /// Counted in its listener's [`Listener::syn_q`].
    in_syn_q: bool,
    /// A Fast Open child counted in this listener's
    /// [`Listener::tfo_qlen`] until its handshake ends.
    tfo_listener: Option<SockId>,
    /// The program closed it; it lives on until its connection ends.
    orphan: bool,
    /// In [`Stack::touched`] (taken by [`Stack::take_touched`]).
    touched: bool,
}

/// The TCP sockets of one host.
pub struct Stack {
    /// The knobs.
    pub cfg: TcpConfig,
    socks: Socks,
    free: Vec<usize>,
    /// Established and half-open connections by (local, remote): the
    /// kernel's `ehash`.
    conns: HashMap<(SocketAddr, SocketAddr), SockId>,
    /// The slots that were made listeners, in slot order (the kernel's
    /// `lhash2`): a SYN looks at these, not at every socket. A slot whose
    /// listener went stays until the slot is freed; readers check.
    listeners: Vec<SockId>,
    /// The sockets bound to each local port (the kernel's `bhash`):
    /// `bind`, `connect` and the ephemeral port search look here, not at
    /// every socket.
    ports: HashMap<u16, foldhash::HashSet<SockId>>,
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
    /// Path MTUs learnt from ICMP, by destination, and when each expires
    /// (the route's exception, `fib_nh_exception`).
    pmtu: HashMap<IpAddr, (u32, Nanos)>,
    /// Fast Open cookies and MSSes by destination.
    pub fo_cache: crate::state::Cache,
    /// The device takes no packets now ([`Stack::set_tx_stopped`]).
    tx_stopped: bool,
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
            fo_cache: &mut $s.fo_cache,
            tx_stopped: $s.tx_stopped,
        }
    };
}

mod calls;
mod cookies;
mod fastopen;
mod fastopen_listen;
mod icmp;
mod options;
mod segments;
mod table;

use table::Socks;

/// The stack's maps: keyed by addresses a peer chooses, hashed with a
/// per-process random seed (as the kernel's `inet_ehashfn` keys `jhash`
/// with `net_secret`), and cheaper per segment than SipHash.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

impl Stack {
    /// A stack with these knobs; `secret` keys the ISNs and timestamp
    /// offsets (`secure_tcp_seq`), `local_addrs` are the addresses
    /// `connect` may take as its source.
    pub fn new(cfg: TcpConfig, secret: u64, local_addrs: Vec<IpAddr>) -> Self {
        Stack {
            cfg,
            socks: Socks::default(),
            free: Vec::new(),
            conns: HashMap::default(),
            listeners: Vec::new(),
            ports: HashMap::default(),
            out: VecDeque::new(),
            mib: mib::Tcp::default(),
            ext: mib::TcpExt::default(),
            secret,
            ip_id: secret as u16,
            next_port: 32768 + (secret % 28000) as u16,
            local_addrs,
            touched: Vec::new(),
            pmtu: HashMap::default(),
            fo_cache: Default::default(),
            tx_stopped: false,
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
        let port = s.bound.map(|b| b.port());
        let id = self.insert_slot(s);
        if let Some(p) = port {
            self.note_bound(id, p);
        }
        id
    }

    /// Index `id`, just bound, under its port.
    fn note_bound(&mut self, id: SockId, port: u16) {
        self.ports.entry(port).or_default().insert(id);
    }

    fn insert_slot(&mut self, s: Sock) -> SockId {
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
                if s.in_syn_q {
                    l.syn_q = l.syn_q.saturating_sub(1);
                }
            }
            self.listeners.retain(|&l| l != id);
            if let Some(p) = s.bound.map(|b| b.port()) {
                if let Some(on) = self.ports.get_mut(&p) {
                    on.remove(&id);
                    if on.is_empty() {
                        self.ports.remove(&p);
                    }
                }
            }
            self.free.push(id.0);
        }
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
    /// packetdrill's, keeps no more). A touch is the kernel's wakeup
    /// callback: every segment and timer, and the calls that can raise
    /// readiness (`connect`, `listen`, `shutdown`: `sk_state_change`;
    /// options that move a threshold: `sk_write_space`,
    /// `sk_data_ready`), so a waiter that found a socket not ready need
    /// not look again until it is touched.
    fn touch(&mut self, id: SockId) {
        if let Some(s) = self.socks.get_mut(id.0).and_then(|s| s.as_mut()) {
            if !s.touched {
                s.touched = true;
                self.touched.push(id);
            }
        }
    }

    /// The device below takes no packets (`stopped`: its queue is full,
    /// a qdisc that drops) or does again. While it does not, a packet the
    /// connections send fails as the kernel's does on `NET_XMIT_DROP`:
    /// new data stays unsent, a retransmission is not counted as one
    /// (`TCPRetransFail`), and the window shrinks as in CWR.
    pub fn set_tx_stopped(&mut self, stopped: bool) {
        self.tx_stopped = stopped;
    }

    /// The next packet to send, IP header first.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// The earliest timer deadline of any connection.
    pub fn next_deadline(&mut self) -> Option<Nanos> {
        self.socks.next_deadline()
    }

    /// Run the timers due at `now`.
    pub fn on_timeout(&mut self, now: Nanos) {
        for id in self.socks.due(now).into_iter().map(SockId) {
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
    c.syn_retries = s.syn_retries;
    c.tos = s.tos;
    c.sndbuf_locked = s.sndbuf.is_some();
    c.rcvbuf_locked = s.rcvbuf.is_some();
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
            c.fo.deferred = false;
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
