//! What each socket call means for an fd rxpath may serve, on safe types:
//! the interposition layer (`sys`) turns the C arguments into these and
//! the results back. `Ok(None)` (or [`Route::Kernel`]) means "the kernel's
//! call, untouched".

use crate::epoll::EpSet;
use crate::host::{global, Fallback};
use crate::sock::{Accel, Pending, Watchers};
use crate::table::{self, Entry};
use rxpath_runtime::sock::{RecvMeta, SockError, Watch};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// An errno.
pub(crate) type Errno = i32;

/// Where a call goes.
#[derive(Debug)]
pub(crate) enum Route<T> {
    /// To the kernel, as if the library were not there.
    Kernel,
    /// Answered by rxpath.
    Done(Result<T, Errno>),
}

/// `socket()` made `fd`: a UDP socket of an IP family may become rxpath's
/// at `bind`.
pub(crate) fn on_socket(fd: RawFd, domain: i32, ty: i32, proto: i32) {
    let udp = (domain == libc::AF_INET || domain == libc::AF_INET6)
        && ty & 0xf == libc::SOCK_DGRAM
        && (proto == 0 || proto == libc::IPPROTO_UDP);
    if table::kind(fd) != table::KERNEL {
        // A number the kernel reuses is the kernel's, whatever it was: a
        // close rxpath did not see (a system call made past the C
        // library) is done now.
        forget_fd(fd);
        table::remove(fd);
    }
    if udp && !crate::host::inside() && global().enabled() {
        let p = Pending {
            nonblock: ty & libc::SOCK_NONBLOCK != 0,
            ..Pending::default()
        };
        table::set(fd, Entry::Candidate(Arc::new(Mutex::new(p))));
    }
}

/// The kernel bound candidate `fd` to `addr`: serve it with rxpath if the
/// host takes it, else it stays the kernel's (counted, said once).
pub(crate) fn on_bind(fd: RawFd, addr: SocketAddr) {
    let Some(Entry::Candidate(p)) = table::get(fd) else {
        return;
    };
    let p = p.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let g = global();
    if let Some(why) = &p.refuse {
        table::remove(fd);
        return g.fallback(Fallback::Option, why);
    }
    let opts = rxpath_core::sock::BindOptions {
        reuseport: p.reuseport,
        reuseaddr: p.reuseaddr,
    };
    // IPV6_V6ONLY as the kernel socket has it: set by the program, or
    // net.ipv6.bindv6only's default.
    let v6only = p.v6only
        || (addr.is_ipv6()
            && crate::sys::sockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) == Some(1));
    let (sock, keys) = match g.bind(addr, opts, v6only) {
        Ok(s) => s,
        Err((why, detail)) => {
            table::remove(fd);
            return g.fallback(why, &detail);
        }
    };
    if g.kernel_sees_frames() {
        // AF_PACKET reads a copy: the kernel socket behind the fd keeps
        // only what came another way (loopback, another interface).
        if let Err(e) = crate::sys::drop_from_iface(fd, g.ifindex()) {
            drop(sock);
            table::remove(fd);
            g.release(&keys);
            let why =
                format!("{addr}: filtering the interface's copies off its kernel socket: {e}");
            return g.fallback(Fallback::HostFailed, &why);
        }
    }
    if let Some(us) = p.busy_poll {
        sock.set_busy_poll(us);
    }
    if let Some(b) = p.busy_budget {
        sock.set_busy_poll_budget(b);
    }
    if let Some(b) = p.rcvbuf {
        sock.set_rcvbuf(b);
    }
    sock.set_read_timeout(p.rcvtimeo);
    sock.set_udp_gro(p.gro);
    sock.socket()
        .set_rxq_ovfl(p.cmsgs & crate::sock::RXQ_OVFL != 0);
    sock.set_only_v6(v6only);
    sock.socket().set_pmtudisc_do(p.pmtudisc_do);
    if let Some(prog) = p.cbpf {
        // Set before bind with SO_REUSEPORT (else the kernel refused it).
        let _ = sock.socket().attach_reuseport_cbpf(Some(prog));
    }
    for (v6, on) in p.mc_all.iter().enumerate() {
        if let Some(on) = *on {
            sock.socket().set_multicast_all(v6 == 0, on);
        }
    }
    for r in p.mcast.iter().filter(|r| g.serves_membership(r)) {
        // The kernel took each in turn; rxpath's table agrees.
        let _ = sock.socket().change_membership(r.group, r.change);
    }
    let watch = Arc::new(Watchers::default());
    let w: Arc<dyn Watch> = watch.clone();
    sock.set_watch(Arc::downgrade(&w));
    drop(w);
    let a = Accel {
        sock,
        nonblock: p.nonblock.into(),
        watch,
        fds: 1.into(),
        cmsgs: p.cmsgs.into(),
        segment: 0.into(),
        kernel_ready: false.into(),
        ktoken: crate::kside::token(),
        shut: 0.into(),
        held: Default::default(),
        kernel_only: false.into(),
        readers: 0.into(),
        parked: Mutex::new(None),
        fork_word: Default::default(),
        report_id: g.served(addr),
        keys,
    };
    let a = Arc::new(a);
    crate::kside::watch(&a, fd);
    table::set(fd, Entry::Socket(a));
}

/// `connect()` on `fd` (the kernel's call succeeded): an rxpath socket
/// takes the peer too; a candidate connected before `bind` is a client
/// on an ephemeral port and stays the kernel's.
pub(crate) fn on_connect(fd: RawFd, peer: Option<SocketAddr>) -> Result<(), Errno> {
    match table::get(fd) {
        Some(Entry::Socket(a)) => match peer {
            Some(p) => a.sock.connect(p).map_err(sock_errno),
            None => {
                global().unsupported("connect(AF_UNSPEC) (disconnect)");
                Err(libc::EOPNOTSUPP)
            }
        },
        Some(Entry::Candidate(_)) => {
            table::remove(fd);
            global().fallback(
                Fallback::EphemeralPort,
                "connected before bind: a client socket",
            );
            Ok(())
        }
        _ => Ok(()),
    }
}

/// `close()` (before the kernel's): `fd` is the kernel's again. The
/// rxpath socket closes with its last fd, unless a read is blocked on it:
/// then, as the kernel's blocked call holds the open file, the kernel
/// socket is kept open (the port held) and the read may still return a
/// datagram; the last such read to return closes it ([`Reading`]).
pub(crate) fn on_close(fd: RawFd) {
    close_fd(fd, true);
}

/// `fd` names another file now (the kernel reused the number, or `dup2`
/// put another there): forget what rxpath had of it, as a close, but keep
/// nothing open for a blocked read (the file under the number is not the
/// socket's any more).
fn forget_fd(fd: RawFd) {
    close_fd(fd, false);
}

fn close_fd(fd: RawFd, park: bool) {
    let Some(Entry::Socket(a)) = table::remove(fd) else {
        return;
    };
    forget_in_sets(fd);
    if a.fds.fetch_sub(1, Ordering::AcqRel) != 1 {
        return;
    }
    if park {
        let mut parked = crate::sock::lock(&a.parked);
        if a.readers.load(Ordering::SeqCst) > 0 {
            match crate::sys::dup_cloexec(fd) {
                Ok(k) => {
                    *parked = Some(k);
                    return;
                }
                Err(e) => crate::config::say(&format!(
                    "keeping fd {fd}'s socket for the read blocked on it: {e}"
                )),
            }
        }
    }
    closed(&a);
}

/// A thread inside a blocking read of a socket: while one is, a `close`
/// of the socket's last fd keeps it ([`Accel::parked`]); the last reader
/// out lets it go.
pub(crate) struct Reading<'a>(&'a Accel);

impl<'a> Reading<'a> {
    pub(crate) fn enter(a: &'a Accel) -> Reading<'a> {
        a.readers.fetch_add(1, Ordering::SeqCst);
        Reading(a)
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        let a = self.0;
        if a.readers.fetch_sub(1, Ordering::SeqCst) == 1 {
            let kept = crate::sock::lock(&a.parked).take();
            if kept.is_some() {
                closed(a);
            }
        }
    }
}

/// The rxpath socket `a` closed for good: it leaves the kernel-side
/// watch, and its port the XDP program's map (unless it was handed back
/// to the kernel, which gave the port back then).
pub(crate) fn closed(a: &Accel) {
    crate::kside::forget(a);
    if !a.kernel_only.load(Ordering::SeqCst) {
        global().release(&a.keys);
    }
}

/// `shutdown(fd, how)` (the kernel's call shut its socket down, or said
/// `ENOTCONN` for an unconnected one and shut it anyway, as
/// `inet_shutdown` does): reads of an empty queue end, sends fail, and
/// sleepers wake.
pub(crate) fn on_shutdown(fd: RawFd, how: i32) {
    let Some(a) = table::socket(fd) else { return };
    let bits = match how {
        libc::SHUT_RD => crate::sock::SHUT_READ,
        libc::SHUT_WR => crate::sock::SHUT_WRITE,
        libc::SHUT_RDWR => crate::sock::SHUT_READ | crate::sock::SHUT_WRITE,
        _ => return,
    };
    a.shut.fetch_or(bits, Ordering::SeqCst);
    a.watch.ready();
}

/// `dup`/`dup2`/`dup3`/`F_DUPFD` made `new` name what `old` names (the
/// kernel closed whatever `new` was first). An rxpath socket gets another
/// fd; a candidate duplicated before `bind` stays the kernel's under
/// both numbers (counted).
pub(crate) fn on_dup(old: RawFd, new: RawFd) {
    if new == old {
        return;
    }
    forget_fd(new);
    match table::get(old) {
        Some(Entry::Socket(a)) => {
            a.fds.fetch_add(1, Ordering::AcqRel);
            table::set(new, Entry::Socket(a));
        }
        Some(Entry::Candidate(_)) => {
            table::remove(old);
            global().fallback(Fallback::Dup, "duplicated before bind");
        }
        _ => {}
    }
}

fn forget_in_sets(fd: RawFd) {
    for set in epoll_sets() {
        set.forget(fd);
    }
}

fn epoll_sets() -> Vec<Arc<EpSet>> {
    let sets = SETS.lock().unwrap_or_else(|e| e.into_inner());
    sets.iter().filter_map(Weak::upgrade).collect()
}

static SETS: Mutex<Vec<Weak<EpSet>>> = Mutex::new(Vec::new());

/// `epoll_create*()` made `kfd`.
pub(crate) fn on_epoll_create(kfd: RawFd) {
    if crate::host::inside() || !global().enabled() {
        return;
    }
    let set = Arc::new(EpSet::new(kfd));
    let mut sets = SETS.lock().unwrap_or_else(|e| e.into_inner());
    sets.retain(|w| w.strong_count() > 0);
    sets.push(Arc::downgrade(&set));
    drop(sets);
    table::set(kfd, Entry::Epoll(set));
}

/// `epoll_ctl()`: an rxpath socket joins the set here; anything else is
/// the kernel's (counted for the set).
pub(crate) fn epoll_ctl(
    epfd: RawFd,
    op: i32,
    fd: RawFd,
    ev: Option<libc::epoll_event>,
) -> Route<()> {
    let Some(Entry::Epoll(set)) = table::get(epfd) else {
        return Route::Kernel;
    };
    match table::socket(fd) {
        Some(a) => Route::Done(set.ctl_socket(op, fd, a, ev)),
        None => Route::Kernel,
    }
}

/// A kernel `epoll_ctl` on set `epfd` succeeded.
pub(crate) fn epoll_ctl_done(epfd: RawFd, op: i32) {
    if let Some(Entry::Epoll(set)) = table::get(epfd) {
        match op {
            libc::EPOLL_CTL_ADD => set.kernel_fd(true),
            libc::EPOLL_CTL_DEL => set.kernel_fd(false),
            _ => {}
        }
    }
}

/// `epoll_wait()` on `epfd`.
pub(crate) fn epoll_wait(
    epfd: RawFd,
    out: &mut [libc::epoll_event],
    timeout_ms: i32,
) -> Route<usize> {
    match table::get(epfd) {
        Some(Entry::Epoll(set)) => Route::Done(set.wait(out, timeout_ms)),
        _ => Route::Kernel,
    }
}

/// A datagram read: its length as the call returns it, the sender, and
/// whether it was cut short.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Got {
    pub(crate) len: usize,
    /// The sender; `None` for the end of a socket shut down for reading.
    pub(crate) src: Option<SocketAddr>,
    /// The IP header's TOS byte or traffic class.
    pub(crate) tos: u8,
    /// The segment size of a GRO packet (its length for one datagram).
    pub(crate) stride: usize,
    /// The address it was sent to (`IP_PKTINFO`).
    pub(crate) dst: std::net::IpAddr,
    pub(crate) truncated: bool,
    /// When the NAPI took it (`mono_ns`; 0: not known).
    pub(crate) stamp_ns: u64,
    /// The socket's drops when it was queued (`SO_RXQ_OVFL`).
    pub(crate) drops: u32,
}

/// The flags a read honours; any other is refused on an rxpath socket.
const RECV_FLAGS: i32 = libc::MSG_DONTWAIT
    | libc::MSG_NOSIGNAL
    | libc::MSG_CMSG_CLOEXEC
    | libc::MSG_WAITFORONE
    | libc::MSG_PEEK
    | libc::MSG_TRUNC;

/// Not an errno: rxpath's queue is empty and the kernel socket behind the
/// fd has a datagram; the caller reads it with the program's own call
/// ([`crate::kside`]).
pub(crate) const FROM_KERNEL: Errno = -1;

/// `recvfrom()`/`recvmsg()`/`read()` of one datagram into `buf`:
/// `MSG_PEEK` leaves it queued, `MSG_TRUNC` returns its whole length.
pub(crate) fn recv(a: &Arc<Accel>, buf: &mut [u8], flags: i32) -> Result<Got, Errno> {
    if a.child_took_it() {
        // A forked child took the reading (AF_PACKET), and the kernel
        // side's watch may not have seen it yet.
        crate::kside::child_took(a);
    }
    if a.kernel_only.load(Ordering::Relaxed) && !a.held.any() && a.sock.socket().queued() == 0 {
        return Err(KERNEL_NOW);
    }
    if flags & !RECV_FLAGS != 0 {
        global().unsupported(&flag_name(flags & !RECV_FLAGS));
        return Err(libc::EOPNOTSUPP);
    }
    let nonblock = a.nonblock.load(Ordering::Relaxed) || flags & libc::MSG_DONTWAIT != 0;
    // A blocking read holds the socket against a `close` meanwhile.
    let _reading = (!nonblock).then(|| Reading::enter(a));
    let until = a.sock.read_timeout().map(|t| std::time::Instant::now() + t);
    let mut busy_round = nonblock;
    loop {
        if let Some(g) = take(a, buf, flags)? {
            return Ok(g);
        }
        // (Not once its fds are closed: the number may name another
        // file now.)
        if a.fds.load(Ordering::Relaxed) > 0 && crate::kside::take_hint(a) {
            return Err(FROM_KERNEL);
        }
        if a.shut.load(Ordering::Relaxed) & crate::sock::SHUT_READ != 0 {
            // `__skb_recv_udp` on `RCV_SHUTDOWN`: 0 bytes, no sender.
            return Ok(Got {
                len: 0,
                src: None,
                dst: a.sock.local_addr().ip(),
                truncated: false,
                tos: 0,
                stride: 0,
                stamp_ns: 0,
                drops: 0,
            });
        }
        if nonblock {
            // `sk_busy_loop(sk, nonblock)`: one busy-poll round at most.
            if busy_round && a.sock.busy_poll() > 0 {
                busy_round = false;
                crate::sock::busy_wait(&[a]);
                continue;
            }
            return Err(libc::EAGAIN);
        }
        match crate::wait::wait_readable(a, until) {
            Ok(()) => {}
            Err(libc::EINTR) if crate::sys::restart_after_signal() => {}
            Err(e) => return Err(e),
        }
    }
}

/// The next datagram if one is queued: taken, or copied and left with
/// `MSG_PEEK`; its whole length with `MSG_TRUNC`. What the queue held at
/// a `fork` comes first.
fn take(a: &Accel, buf: &mut [u8], flags: i32) -> Result<Option<Got>, Errno> {
    if a.held.any() {
        if let Some(g) = take_held(&a.held, buf, flags) {
            return Ok(Some(g));
        }
    }
    let whole = flags & libc::MSG_TRUNC != 0;
    if flags & libc::MSG_PEEK != 0 {
        let Some((len, m)) = a.sock.try_peek(buf).map_err(sock_errno)? else {
            return Ok(None);
        };
        let mut g = done(1, Some(m))?;
        if whole {
            g.len = len;
        }
        return Ok(Some(g));
    }
    // The whole length, asked before the read (another reader of the
    // socket could take this datagram in between: then it is the length
    // of the one it leaves).
    let full = if whole {
        a.sock.try_peek(&mut []).map_err(sock_errno)?.map(|x| x.0)
    } else {
        None
    };
    let mut got: Option<RecvMeta> = None;
    let n = a
        .sock
        .socket()
        .try_recv_batch(&mut [buf], &mut |_, m| got = Some(m))
        .map_err(sock_errno)?;
    if n == 0 {
        return Ok(None);
    }
    let mut g = done(n, got)?;
    if let (Some(f), true) = (full, g.truncated) {
        g.len = f;
    }
    Ok(Some(g))
}

/// Up to `bufs.len()` queued datagrams at once (`recvmmsg`): one lock of
/// the socket's queue, one return of their frames.
/// Only for plain reads (no `MSG_PEEK`, no `MSG_TRUNC`, nothing held since
/// a fork); anything else, or an empty queue, gives 0 and the caller reads
/// one at a time. `out` gets each datagram's index and what it read.
pub(crate) fn take_many(
    a: &Accel,
    bufs: &mut [&mut [u8]],
    flags: i32,
    out: &mut dyn FnMut(usize, Got),
) -> usize {
    if flags & !RECV_FLAGS != 0
        || flags & (libc::MSG_PEEK | libc::MSG_TRUNC) != 0
        || a.held.any()
        || a.sock.socket().queued() == 0
    {
        return 0;
    }
    let mut put = |i, m| {
        if let Ok(g) = done(1, Some(m)) {
            out(i, g);
        }
    };
    a.sock.socket().try_recv_batch(bufs, &mut put).unwrap_or(0)
}

/// A datagram held since a `fork` ([`crate::forkq`]), as [`take`] reads.
fn take_held(h: &crate::forkq::Held, buf: &mut [u8], flags: i32) -> Option<Got> {
    let (whole, m) = h.take(buf, flags & libc::MSG_PEEK != 0)?;
    let mut g = done(1, Some(m)).ok()?;
    if flags & libc::MSG_TRUNC != 0 {
        g.len = whole;
    }
    Some(g)
}

/// Not an errno: the fd is the kernel's now (a forked child read all it
/// inherited); the caller makes the program's own call, as it is.
pub(crate) const KERNEL_NOW: Errno = -2;

/// What a read on an fd is answered from.
#[derive(Debug, Clone)]
pub(crate) enum Rx {
    /// A socket rxpath serves.
    Sock(Arc<Accel>),
    /// In a forked child: a socket holding datagrams its parent held.
    Forked(RawFd, Arc<crate::forkq::Inherited>),
}

impl Rx {
    /// The reader of `fd`, if reads on it are rxpath's.
    #[inline]
    pub(crate) fn of(fd: RawFd) -> Option<Rx> {
        match table::kind(fd) {
            table::SOCKET => table::socket(fd).map(Rx::Sock),
            table::FORKED => match crate::forkq::inherited(fd) {
                Some(i) => Some(Rx::Forked(fd, i)),
                None => {
                    table::remove(fd);
                    None
                }
            },
            _ => None,
        }
    }

    /// One datagram, as [`recv`]; for an inherited socket, what it holds
    /// (never waiting) and then [`KERNEL_NOW`].
    pub(crate) fn recv(&self, buf: &mut [u8], flags: i32) -> Result<Got, Errno> {
        match self {
            Rx::Sock(a) => recv(a, buf, flags),
            Rx::Forked(fd, i) => {
                if let Some(g) = take_held(&i.held, buf, flags) {
                    return Ok(g);
                }
                crate::forkq::child_uses(*fd);
                table::remove(*fd);
                Err(KERNEL_NOW)
            }
        }
    }

    /// The control messages a read hands back.
    pub(crate) fn cmsgs(&self) -> u16 {
        match self {
            Rx::Sock(a) => a.cmsgs.load(Ordering::Relaxed),
            Rx::Forked(_, i) => i.cmsgs,
        }
    }

    /// The socket is IPv6.
    pub(crate) fn v6(&self) -> bool {
        match self {
            Rx::Sock(a) => a.sock.local_addr().is_ipv6(),
            Rx::Forked(_, i) => i.v6,
        }
    }

    /// A read went to the kernel socket behind `fd` and got a datagram.
    pub(crate) fn got_kernel(&self, fd: RawFd) {
        if let Rx::Sock(a) = self {
            crate::kside::got_one(a, fd);
        }
    }
}

/// `ioctl(FIONREAD)`: the length of the next datagram (0 if none).
pub(crate) fn next_len(a: &Accel) -> Result<usize, Errno> {
    if let Some(n) = a.held.next_len() {
        return Ok(n);
    }
    Ok(a.sock
        .try_peek(&mut [])
        .map_err(sock_errno)?
        .map_or(0, |x| x.0))
}

fn done(n: usize, got: Option<RecvMeta>) -> Result<Got, Errno> {
    match (n, got) {
        (1, Some(m)) => Ok(Got {
            len: m.len,
            src: Some(m.src),
            tos: m.tos,
            stride: m.stride,
            dst: m.dst,
            truncated: m.truncated,
            stamp_ns: m.stamp_ns,
            drops: m.drops,
        }),
        _ => Err(libc::EAGAIN),
    }
}

fn flag_name(f: i32) -> String {
    match f {
        libc::MSG_PEEK => "MSG_PEEK".into(),
        libc::MSG_TRUNC => "MSG_TRUNC".into(),
        libc::MSG_ERRQUEUE => "MSG_ERRQUEUE".into(),
        libc::MSG_WAITALL => "MSG_WAITALL".into(),
        f => format!("recv flags {f:#x}"),
    }
}

/// The errno a socket error reads as.
pub(crate) fn sock_errno(e: SockError) -> Errno {
    match e {
        SockError::AddrInUse(_) => libc::EADDRINUSE,
        SockError::NoPorts => libc::EAGAIN,
        SockError::WouldBlock | SockError::TimedOut => libc::EAGAIN,
        SockError::Closed => libc::EBADF,
        SockError::NotConnected => libc::EDESTADDRREQ,
        SockError::MessageTooLong { .. } => libc::EMSGSIZE,
        SockError::TooManySegments { .. } => libc::EINVAL,
        SockError::Family(_) => libc::EAFNOSUPPORT,
        SockError::NoRoute(_) => libc::ENETUNREACH,
        SockError::NoNeighbor(_) | SockError::NoSource(_) => libc::EHOSTUNREACH,
        SockError::NoTx | SockError::Tx(_) => libc::ENOBUFS,
        SockError::Invalid(_) => libc::EINVAL,
        SockError::Mcast(e) => {
            use rxpath_core::ip::mcast::McastError;
            match e {
                McastError::Invalid => libc::EINVAL,
                McastError::Joined => libc::EADDRINUSE,
                McastError::NotJoined => libc::EADDRNOTAVAIL,
                McastError::TooMany => libc::ENOBUFS,
            }
        }
    }
}

/// `ioctl(EPIOCSPARAMS)` on an epoll set the kernel accepted: the set's
/// busy polling uses them (`ep_busy_loop`).
pub(crate) fn epoll_params(fd: RawFd, us: u32, budget: u16) {
    if let Some(Entry::Epoll(set)) = table::get(fd) {
        set.set_params(crate::sock::BusyParams { us, budget });
    }
}

/// `fcntl(F_SETFL)` or `ioctl(FIONBIO)`: the non-blocking flag.
pub(crate) fn set_nonblock(fd: RawFd, on: bool) {
    match table::get(fd) {
        Some(Entry::Socket(a)) => a.nonblock.store(on, Ordering::Relaxed),
        Some(Entry::Candidate(p)) => p.lock().unwrap_or_else(|e| e.into_inner()).nonblock = on,
        _ => {}
    }
}

/// What `setsockopt` means for an rxpath fd, given the option's value as
/// an int (`None` if it is not one) or a timeval.
/// `IPV6_FREEBIND` (linux/in6.h).
const IPV6_FREEBIND: i32 = 78;

#[derive(Debug, Clone)]
pub(crate) enum OptVal {
    Int(i32),
    Time(Duration),
    /// The bytes of an option that takes a string (`SO_BINDTODEVICE`).
    Bytes(Vec<u8>),
    /// A classic BPF program (`struct sock_fprog`).
    Cbpf(Vec<rxpath_core::sock::cbpf::Insn>),
    Other,
}

/// `setsockopt()` on `fd` (after the kernel's call succeeded, so the kernel
/// socket has it too): rxpath takes what it honours; an option it cannot
/// honour makes a candidate stay the kernel's at `bind`, and is refused on
/// an rxpath socket (`EOPNOTSUPP`).
pub(crate) fn setsockopt(fd: RawFd, level: i32, name: i32, v: OptVal) -> Result<(), Errno> {
    let e = match table::get(fd) {
        Some(e @ (Entry::Socket(_) | Entry::Candidate(_))) => e,
        _ => return Ok(()),
    };
    let off = matches!(v, OptVal::Int(0));
    let what = match (level, name, v) {
        (libc::SOL_SOCKET, libc::SO_RCVTIMEO_NEW | libc::SO_RCVTIMEO, OptVal::Time(t)) => {
            let t = (!t.is_zero()).then_some(t);
            apply(&e, |a| a.sock.set_read_timeout(t), |p| p.rcvtimeo = t);
            return Ok(());
        }
        (libc::SOL_SOCKET, libc::SO_BUSY_POLL, OptVal::Int(us)) => {
            let us = us.max(0) as u32;
            apply(&e, |a| a.sock.set_busy_poll(us), |p| p.busy_poll = Some(us));
            return Ok(());
        }
        (libc::SOL_SOCKET, libc::SO_BUSY_POLL_BUDGET, OptVal::Int(b)) => {
            // The kernel refused what it refuses (over U16_MAX; a raise
            // without CAP_NET_ADMIN) before this.
            let b = b.clamp(0, u16::MAX as i32) as u16;
            apply(
                &e,
                |a| a.sock.set_busy_poll_budget(b),
                |p| p.busy_budget = Some(b),
            );
            return Ok(());
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF | libc::SO_RCVBUFFORCE, OptVal::Int(b)) => {
            // What the kernel socket now has (doubled for its bookkeeping,
            // capped by `net.core.rmem_max` unless forced): what
            // `getsockopt` says, so rxpath's queue holds the same.
            let b = crate::sys::sockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)
                .map_or((b.max(0) as usize).saturating_mul(2), |v| v.max(0) as usize);
            apply(&e, |a| a.sock.set_rcvbuf(b), |p| p.rcvbuf = Some(b));
            return Ok(());
        }
        (libc::IPPROTO_IP, libc::IP_PKTINFO, OptVal::Int(on)) => {
            set_cmsg(&e, crate::sock::PKTINFO4, on != 0);
            return Ok(());
        }
        (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, OptVal::Int(on)) => {
            set_cmsg(&e, crate::sock::PKTINFO6, on != 0);
            return Ok(());
        }
        (libc::IPPROTO_IP, libc::IP_RECVTOS, OptVal::Int(on)) => {
            set_cmsg(&e, crate::sock::RECVTOS, on != 0);
            return Ok(());
        }
        (libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, OptVal::Int(on)) => {
            set_cmsg(&e, crate::sock::RECVTCLASS, on != 0);
            return Ok(());
        }
        (libc::IPPROTO_UDP, crate::sock::UDP_GRO, OptVal::Int(on)) => {
            set_cmsg(&e, crate::sock::GRO, on != 0);
            apply(&e, |a| a.sock.set_udp_gro(on != 0), |p| p.gro = on != 0);
            return Ok(());
        }
        (libc::IPPROTO_UDP, crate::sock::UDP_SEGMENT, OptVal::Int(v)) => {
            let v = v.clamp(0, u16::MAX as i32) as u16;
            match &e {
                Entry::Socket(a) => a.segment.store(v, Ordering::Relaxed),
                _ if v == 0 => {}
                // Before bind the option has nowhere to go yet: the
                // socket stays the kernel's (rare: set after bind).
                _ => return refuse(&e, fd, "setsockopt(UDP_SEGMENT) before bind"),
            }
            return Ok(());
        }
        (libc::SOL_SOCKET, n @ (libc::SO_TIMESTAMP | libc::SO_TIMESTAMPNS), OptVal::Int(on))
        | (
            libc::SOL_SOCKET,
            n @ (crate::sock::SO_TIMESTAMP_NEW | crate::sock::SO_TIMESTAMPNS_NEW),
            OptVal::Int(on),
        ) => {
            set_timestamp(&e, n, on != 0);
            return Ok(());
        }
        (libc::SOL_SOCKET, libc::SO_RXQ_OVFL, OptVal::Int(on)) => {
            set_cmsg(&e, crate::sock::RXQ_OVFL, on != 0);
            apply(&e, |a| a.sock.socket().set_rxq_ovfl(on != 0), |_| {});
            return Ok(());
        }
        (libc::SOL_SOCKET, crate::sock::SO_ATTACH_REUSEPORT_CBPF, OptVal::Cbpf(insns)) => {
            match rxpath_core::sock::cbpf::Cbpf::new(&insns) {
                Ok(prog) => {
                    let mut r = Ok(());
                    let on =
                        |a: &Accel| r = a.sock.socket().attach_reuseport_cbpf(Some(prog.clone()));
                    apply(&e, on, |p| p.cbpf = Some(prog.clone()));
                    return r.map_err(sock_errno);
                }
                Err(why) => format!("setsockopt(SO_ATTACH_REUSEPORT_CBPF): {why}"),
            }
        }
        (libc::SOL_SOCKET, crate::sock::SO_DETACH_REUSEPORT_BPF, _) => {
            let mut r = Ok(());
            let on = |a: &Accel| r = a.sock.socket().attach_reuseport_cbpf(None);
            apply(&e, on, |p| p.cbpf = None);
            return r.map_err(sock_errno);
        }
        (libc::SOL_SOCKET, libc::SO_REUSEPORT, OptVal::Int(on)) => {
            // Only `bind` reads it (a bound socket keeps its group).
            apply(&e, |_| {}, |p| p.reuseport = on != 0);
            return Ok(());
        }
        (libc::SOL_SOCKET, libc::SO_REUSEADDR, OptVal::Int(on)) => {
            apply(&e, |_| {}, |p| p.reuseaddr = on != 0);
            return Ok(());
        }
        (libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, OptVal::Int(v))
        | (libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, OptVal::Int(v)) => {
            // `IP_PMTUDISC_DO` and beyond: a datagram past the MTU is
            // refused (`EMSGSIZE`) instead of leaving in fragments.
            let on = v >= libc::IP_PMTUDISC_DO;
            let set = |a: &Accel| a.sock.socket().set_pmtudisc_do(on);
            apply(&e, set, |p| p.pmtudisc_do = on);
            return Ok(());
        }
        (libc::IPPROTO_IPV6, libc::IPV6_DONTFRAG, OptVal::Int(on)) => {
            let set = |a: &Accel| a.sock.socket().set_pmtudisc_do(on != 0);
            apply(&e, set, |p| p.pmtudisc_do = on != 0);
            return Ok(());
        }
        (libc::SOL_SOCKET, libc::SO_BINDTODEVICE, OptVal::Bytes(name)) => {
            // rxpath serves one interface: bound to it (or to none), the
            // socket is what it was; bound to another, it is the kernel's.
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            let name = String::from_utf8_lossy(&name[..end]).into_owned();
            if name.is_empty() || global().cfg.iface.as_deref() == Some(name.as_str()) {
                return Ok(());
            }
            format!("setsockopt(SO_BINDTODEVICE, {name}): not the interface rxpath serves")
        }
        // The bound address decides, as ever (one not the interface's
        // stays the kernel's).
        (libc::IPPROTO_IP, libc::IP_FREEBIND, _) | (libc::IPPROTO_IPV6, IPV6_FREEBIND, _) => {
            return Ok(())
        }
        (_, n, OptVal::Bytes(b)) if crate::mcast::is_membership(level, n) => {
            return membership(&e, fd, level, n, &b);
        }
        (libc::IPPROTO_IP, crate::mcast::IP_MULTICAST_ALL, OptVal::Int(on))
        | (libc::IPPROTO_IPV6, crate::mcast::IPV6_MULTICAST_ALL, OptVal::Int(on)) => {
            let v4 = level == libc::IPPROTO_IP;
            let set = |a: &Accel| a.sock.socket().set_multicast_all(v4, on != 0);
            apply(&e, set, |p| p.mc_all[!v4 as usize] = Some(on != 0));
            return Ok(());
        }
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, OptVal::Int(on)) => {
            apply(&e, |a| a.sock.set_only_v6(on != 0), |p| p.v6only = on != 0);
            return Ok(());
        }
        (libc::SOL_SOCKET, n, _) if HARMLESS_SOCKET.contains(&n) => return Ok(()),
        (libc::IPPROTO_IP, n, _) if HARMLESS_IP.contains(&n) => return Ok(()),
        (libc::IPPROTO_IPV6, n, _) if HARMLESS_IPV6.contains(&n) => return Ok(()),
        // Turning a feature off that is off asks nothing.
        _ if off => return Ok(()),
        _ => format!("setsockopt(level {level}, option {name})"),
    };
    refuse(&e, fd, &what)
}

/// A multicast membership change the kernel made on `fd`'s socket: one
/// on the interface rxpath serves is made in rxpath's table too (or
/// kept for `bind`); one on another interface is the kernel socket's
/// alone (what arrives there, it reads).
fn membership(e: &Entry, fd: RawFd, level: i32, name: i32, b: &[u8]) -> Result<(), Errno> {
    let Some(r) = crate::mcast::parse(level, name, b) else {
        return refuse(
            e,
            fd,
            &format!("setsockopt(level {level}, option {name}): unreadable"),
        );
    };
    let mut res = Ok(());
    let on = |a: &Accel| {
        if global().serves_membership(&r) {
            res = a.sock.socket().change_membership(r.group, r.change);
        }
    };
    apply(e, on, |p| p.mcast.push(r));
    res.map_err(sock_errno)
}

/// `SO_TIMESTAMP*` as `sock_set_timestamp`: on sets the form option `n`
/// names (a `timeval` or a `timespec`, the old or the `_NEW` message
/// type), off clears both.
fn set_timestamp(e: &Entry, n: i32, on: bool) {
    use crate::sock::{
        SO_TIMESTAMPNS_NEW, SO_TIMESTAMP_NEW, TIMESTAMP, TIMESTAMP_NEW, TIMESTAMP_NS,
    };
    set_cmsg(e, TIMESTAMP | TIMESTAMP_NS | TIMESTAMP_NEW, false);
    if on {
        let ns = n == libc::SO_TIMESTAMPNS || n == SO_TIMESTAMPNS_NEW;
        let new = n == SO_TIMESTAMP_NEW || n == SO_TIMESTAMPNS_NEW;
        let mut bits = TIMESTAMP;
        if ns {
            bits |= TIMESTAMP_NS;
        }
        if new {
            bits |= TIMESTAMP_NEW;
        }
        set_cmsg(e, bits, true);
    }
}

/// An option rxpath does not honour (the kernel socket behind the fd took
/// it): a candidate stays the kernel's at `bind`; an rxpath socket is
/// handed back to the kernel (said, counted), so a program that works on
/// the kernel keeps working.
fn refuse(e: &Entry, fd: RawFd, what: &str) -> Result<(), Errno> {
    match e {
        Entry::Candidate(p) => {
            p.lock().unwrap_or_else(|e| e.into_inner()).refuse = Some(format!(
                "{what}: rxpath does not honour it, so the socket is the kernel's"
            ));
            Ok(())
        }
        Entry::Socket(a) => {
            let why = format!(
                "{what} after bind on {}: rxpath does not honour it, so the socket is handed back to the kernel",
                a.sock.local_addr()
            );
            hand_back(a, fd, Fallback::OptionAfterBind, &why);
            Ok(())
        }
        Entry::Epoll(_) => {
            global().unsupported(what);
            Err(libc::EOPNOTSUPP)
        }
    }
}

/// Hand a served socket back to the kernel: its port leaves the XDP
/// program's map (unless another rxpath socket shares it), so what comes
/// next reaches the kernel socket behind the fd; on AF_PACKET the kernel
/// socket takes the interface's datagrams again and rxpath's socket stops
/// taking its copies. What rxpath's queue holds is read first ([`recv`]),
/// and sends go to the kernel.
/// Every served socket back to the kernel: the interface went (`what`),
/// and rxpath's device with it ([`crate::host::Global::link_event`]).
pub(crate) fn hand_all_back(what: &str) {
    for (fds, a) in table::sockets() {
        let Some(&fd) = fds.first() else { continue };
        hand_back(&a, fd, Fallback::IfaceGone, what);
    }
}

/// `why` counts it; `detail` is said (once per reason).
pub(crate) fn hand_back(a: &Accel, fd: RawFd, why: Fallback, detail: &str) {
    if a.kernel_only.swap(true, Ordering::SeqCst) {
        return;
    }
    let g = global();
    let shared = g.release(&a.keys);
    if g.kernel_sees_frames() {
        if let Err(e) = crate::sys::detach_filter(fd) {
            crate::config::say(&format!("fd {fd}: the kernel socket keeps its filter: {e}"));
        }
        a.sock.stop_receiving();
    } else if shared {
        // A sibling keeps the port in the XDP program's map: rxpath's
        // group must stop giving this socket its share, which its reads
        // (the kernel socket's now) would never see.
        a.sock.stop_receiving();
    }
    g.went_to_kernel(a.report_id, detail);
    g.fallback(why, detail);
    a.watch.ready();
}

fn set_cmsg(e: &Entry, bit: u16, on: bool) {
    let set = |v: u16| if on { v | bit } else { v & !bit };
    match e {
        Entry::Socket(a) => {
            let _ = a
                .cmsgs
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(set(v)));
        }
        Entry::Candidate(p) => {
            let mut p = p.lock().unwrap_or_else(|e| e.into_inner());
            p.cmsgs = set(p.cmsgs);
        }
        Entry::Epoll(_) => {}
    }
}

fn apply(e: &Entry, on_sock: impl FnOnce(&Accel), on_pending: impl FnOnce(&mut Pending)) {
    match e {
        Entry::Socket(a) => on_sock(a),
        Entry::Candidate(p) => on_pending(&mut p.lock().unwrap_or_else(|e| e.into_inner())),
        Entry::Epoll(_) => {}
    }
}

/// Socket options whose effect rxpath keeps as the kernel would, or that
/// only the kernel socket behind the fd needs (sending buffers, address
/// reuse of the reserved port, priority, timeouts of sends).
const HARMLESS_SOCKET: &[i32] = &[
    libc::SO_SNDBUF,
    libc::SO_SNDBUFFORCE,
    libc::SO_SNDTIMEO_NEW,
    libc::SO_SNDTIMEO,
    libc::SO_PRIORITY,
    libc::SO_KEEPALIVE,
    libc::SO_BROADCAST,
    libc::SO_PREFER_BUSY_POLL,
];
const HARMLESS_IP: &[i32] = &[
    libc::IP_TTL,
    libc::IP_MULTICAST_TTL,
    libc::IP_MULTICAST_LOOP,
    libc::IP_MULTICAST_IF,
];
const HARMLESS_IPV6: &[i32] = &[
    libc::IPV6_UNICAST_HOPS,
    libc::IPV6_MULTICAST_HOPS,
    libc::IPV6_MULTICAST_LOOP,
    libc::IPV6_MULTICAST_IF,
];
