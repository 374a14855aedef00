//! TCP's listeners: `listen` on a kernel TCP socket bound to an address
//! of the interface makes it rxpath's (the kernel socket listens too,
//! for loopback and other interfaces, which the port map leaves to it),
//! and `accept` takes rxpath's connections first, then the kernel's.

use super::*;
use crate::host::global;
use crate::table::{self, Entry};
use crate::tcp::sock::{End, TcpSock};
use rxpath_runtime::Opening;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Before the kernel's `listen(fd, backlog)`: if `fd` is a TCP socket of
/// an IP family bound to an address rxpath serves, and TCP is asked for,
/// rxpath listens there and the port map takes the port's segments on
/// the interface, before the kernel socket listens (for loopback and
/// other interfaces): the kernel never sees a SYN on the interface, which
/// it would answer. Otherwise it stays the kernel's (counted, said once,
/// when TCP was asked for). [`listen_done`] follows the kernel's call.
pub(crate) fn on_listen(fd: RawFd, backlog: i32) {
    let g = global();
    if table::kind(fd) != table::KERNEL
        || !table::in_range(fd)
        || !g.enabled()
        || !g.cfg.protocols.tcp()
        || crate::host::inside()
    {
        return;
    }
    let tcp = crate::sys::sockopt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL);
    if tcp != Some(libc::IPPROTO_TCP) {
        return;
    }
    let Some(addr) = crate::sys::local_addr(fd) else {
        return;
    };
    let share = rxpath_runtime::ListenShare {
        v6only: addr.is_ipv6()
            && crate::sys::sockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) == Some(1),
        // Listeners sharing the address with `SO_REUSEPORT` (one per
        // thread) are rxpath's group, as the kernel sockets are the
        // kernel's (for loopback).
        reuseport: crate::sys::sockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT) == Some(1),
    };
    // The kernel's backlog as `__sys_listen` takes it.
    let backlog = backlog.clamp(0, somaxconn());
    let (l, keys) = match g.tcp_listen(addr, backlog, share) {
        Ok(x) => x,
        Err((why, detail)) => return g.fallback(why, &detail),
    };
    // Options set before `listen` reach the connections it accepts.
    for (level, name, opt) in INHERITED {
        if let Some(v) = crate::sys::sockopt_int(fd, level, name) {
            if v != 0 {
                let _ = l.set_option(opt, v);
            }
        }
    }
    if let Some((true, secs)) = crate::sys::sockopt_linger(fd) {
        let _ = l.set_option(rxpath_tcp::SockOpt::Linger, secs.max(0));
    }
    for (opt, v) in buffers_set(fd, addr.is_ipv6()) {
        // The kernel doubled what was asked; rxpath's option doubles.
        let _ = l.set_option(opt, v / 2);
    }
    let id = g.served(addr);
    let t = TcpSock::new(
        End::Listener(l, keys),
        crate::sys::nonblocking(fd),
        crate::kside::token(),
        id,
    );
    table::set(fd, Entry::Tcp(t));
}

/// After the kernel's `listen(fd)`: if it failed, rxpath's listener goes
/// (its port back to the kernel); if it listens, what reaches it over
/// loopback is watched ([`crate::kside`]).
pub(crate) fn listen_done(fd: RawFd, ok: bool) {
    let Some(t) = table::tcp(fd) else { return };
    if ok {
        crate::kside::watch_as(t.clone(), t.ktoken, fd);
        return;
    }
    table::remove(fd);
    if let End::Listener(l, keys) = &t.end {
        l.close();
        global().release(keys);
        global().went_to_kernel(t.report_id, "the kernel's listen failed");
    }
}

/// The buffer sizes a listener passes to its connections, fixed (no
/// autotuning: `SOCK_RCVBUF_LOCK`, `SOCK_SNDBUF_LOCK`) when set.
const BUFFERS: [(i32, rxpath_tcp::SockOpt); 2] = [
    (libc::SO_RCVBUF, rxpath_tcp::SockOpt::RcvBuf),
    (libc::SO_SNDBUF, rxpath_tcp::SockOpt::SndBuf),
];

/// The buffer sizes of kernel socket `fd` that the program set:
/// `getsockopt` cannot say so, but a size other than a new TCP socket's
/// (`tcp_rmem[1]`, `tcp_wmem[1]`) was set. A size set to exactly the
/// default reads as not set (its connections autotune).
fn buffers_set(fd: RawFd, v6: bool) -> Vec<(rxpath_tcp::SockOpt, i32)> {
    let Ok(fresh) = crate::sys::stream_placeholder(v6, libc::SOCK_CLOEXEC) else {
        return Vec::new();
    };
    let get = |f, name| crate::sys::sockopt_int(f, libc::SOL_SOCKET, name);
    let set = BUFFERS
        .into_iter()
        .filter_map(|(name, opt)| {
            let v = get(fd, name)?;
            (Some(v) != get(fresh, name)).then_some((opt, v))
        })
        .collect();
    crate::sys::close_fd(fresh);
    set
}

/// Options a listener and its connections take from its kernel socket at
/// `listen`, by their kernel names (and `SO_LINGER`, a struct).
const INHERITED: [(i32, i32, rxpath_tcp::SockOpt); 8] = [
    (
        libc::IPPROTO_TCP,
        libc::TCP_NODELAY,
        rxpath_tcp::SockOpt::NoDelay,
    ),
    (
        libc::SOL_SOCKET,
        libc::SO_KEEPALIVE,
        rxpath_tcp::SockOpt::KeepAlive,
    ),
    (
        libc::IPPROTO_TCP,
        libc::TCP_KEEPIDLE,
        rxpath_tcp::SockOpt::KeepIdle,
    ),
    (
        libc::IPPROTO_TCP,
        libc::TCP_KEEPINTVL,
        rxpath_tcp::SockOpt::KeepIntvl,
    ),
    (
        libc::IPPROTO_TCP,
        libc::TCP_KEEPCNT,
        rxpath_tcp::SockOpt::KeepCnt,
    ),
    (libc::IPPROTO_IP, libc::IP_TOS, rxpath_tcp::SockOpt::Tos),
    // The kernel says it in seconds; rxpath keeps the retransmissions
    // they round to, as the kernel does.
    (
        libc::IPPROTO_TCP,
        libc::TCP_DEFER_ACCEPT,
        rxpath_tcp::SockOpt::DeferAccept,
    ),
    // The listener's own: its Fast Open queue.
    (
        libc::IPPROTO_TCP,
        libc::TCP_FASTOPEN,
        rxpath_tcp::SockOpt::Fastopen,
    ),
];

/// `net.core.somaxconn`, which caps a listener's backlog.
fn somaxconn() -> i32 {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4096)
}

/// What `accept` on a served listener gives.
#[derive(Debug)]
pub(crate) enum Accepted {
    /// A connection rxpath accepted: its new fd and the peer.
    Rxpath(RawFd, SocketAddr),
    /// One waits in the kernel socket (loopback, another interface): the
    /// program's own call takes it.
    Kernel,
}

/// `accept4(fd, .., flags)` on served listener `t`: rxpath's accept queue
/// first, then the kernel socket's; waits unless the listener is
/// non-blocking.
pub(crate) fn accept(fd: RawFd, t: &Arc<TcpSock>, flags: i32) -> Result<Accepted, Errno> {
    let End::Listener(l, _) = &t.end else {
        return Err(libc::EINVAL);
    };
    loop {
        if let Some(a) = accept_queued(l, t, flags)? {
            return Ok(a);
        }
        if t.kernel_ready.swap(false, Ordering::SeqCst) && crate::sys::readable_now(fd) {
            return Ok(Accepted::Kernel);
        }
        if t.nonblock.load(Ordering::Relaxed) {
            return Err(libc::EAGAIN);
        }
        crate::readiness::wait_tcp(t, libc::EPOLLIN as u32, Some(fd), None)?;
    }
}

/// A connection from rxpath's accept queue, if it holds one. The fd
/// first: without one (`EMFILE`) the connection stays queued, as the
/// kernel leaves it; but only when the queue holds one, so an accept loop
/// that ends on `EAGAIN` makes and closes no socket for its last call.
fn accept_queued(
    l: &rxpath_runtime::sock::TcpListener,
    t: &TcpSock,
    flags: i32,
) -> Result<Option<Accepted>, Errno> {
    // A listener that cannot say (closed) goes on to `accept`'s error.
    let queued = l.events().map_or(true, |m| m & libc::EPOLLIN as u32 != 0);
    if !queued {
        return Ok(None);
    }
    let v6 = l.local_addr().is_ipv6();
    let nfd = crate::sys::stream_placeholder(v6, flags).map_err(crate::sys::errno)?;
    if !table::in_range(nfd) {
        crate::sys::close_fd(nfd);
        global().unsupported("an fd above 65535 for an accepted TCP connection");
        return Err(libc::EMFILE);
    }
    match l.try_accept() {
        Ok((s, peer)) => {
            s.set_nonblocking(true);
            let nb = flags & libc::SOCK_NONBLOCK != 0;
            let c = TcpSock::new(End::Stream(s), nb, 0, t.report_id);
            table::set(nfd, Entry::Tcp(c));
            Ok(Some(Accepted::Rxpath(nfd, peer)))
        }
        Err(e) => {
            crate::sys::close_fd(nfd);
            if e.kind() != std::io::ErrorKind::WouldBlock {
                return Err(e.raw_os_error().unwrap_or(libc::EINVAL));
            }
            Ok(None)
        }
    }
}

/// In the parent, just before a `fork`: a forked child's copies of
/// rxpath's TCP fds are not served (the host is the parent's), so each
/// served listener a child may accept on goes to the kernel first: its
/// port leaves the port map, and the kernel socket, which every process
/// shares and which listens already, takes the connections that come
/// (a pre-forking server's workers accept them there). What rxpath's
/// accept queue holds stays for this process's `accept` (which takes it
/// before the kernel's). A listener with connections of this process on
/// its port stays rxpath's (its port in the map carries their segments):
/// a child's copy of the listener accepts only what reaches the kernel
/// socket (loopback), and a connection the child keeps is relayed to it
/// ([`super::hand_to_child`]).
pub(crate) fn tcp_before_fork() {
    for (_, t) in &table::tcp_sockets() {
        let End::Listener(l, keys) = &t.end else {
            continue;
        };
        if t.handed.load(Ordering::SeqCst) {
            continue;
        }
        let port = l.local_addr().port();
        // Any connection on the port (accepted or not yet, closed and
        // still sending) needs its segments to keep coming to rxpath.
        if global().tcp_connections_on(port) > 0 {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                crate::config::say(&format!(
                    "a fork while rxpath serves TCP connections on port {port}: they and \
                     their listener stay this process's (a connection the child keeps is \
                     relayed to it)"
                ))
            });
            continue;
        }
        t.handed.store(true, Ordering::SeqCst);
        global().release(keys);
        global().went_to_kernel(
            t.report_id,
            "handed to the kernel at a fork (workers accept there)",
        );
    }
}

/// `connect(fd, to)` on a kernel TCP socket, before the kernel's call: if
/// TCP is asked for and `to` is reached through the interface, the
/// socket is bound in the kernel (an ephemeral port, held there, unless
/// the program bound one) and rxpath opens the connection: `Done` with
/// `connect`'s answer (`EINPROGRESS` on a non-blocking socket). Else the
/// kernel's call (a fallback said once, when TCP was asked for).
/// `TCP_FASTOPEN_CONNECT` set on the kernel socket is honoured.
pub(crate) fn tcp_connect(fd: RawFd, to: SocketAddr) -> Route<()> {
    let fo = crate::sys::sockopt_int(fd, libc::IPPROTO_TCP, rxpath_tcp::TCP_FASTOPEN_CONNECT);
    let how = match fo {
        Some(1) => Opening::FastopenConnect,
        _ => Opening::Connect,
    };
    match tcp_open(fd, to, how, crate::sys::nonblocking(fd)) {
        Route::Done(r) => Route::Done(r.map(drop)),
        Route::Kernel => Route::Kernel,
    }
}

/// `sendto(fd, data, MSG_FASTOPEN, to)` on a kernel TCP socket, as
/// [`tcp_connect`] routes it: rxpath opens the connection with Fast
/// Open's SYN. `Done` with `sendto`'s answer: non-blocking, the bytes the
/// SYN carried (`EINPROGRESS` for none); blocking, after the handshake,
/// with the rest sent.
pub(crate) fn tcp_sendto_fastopen(
    fd: RawFd,
    to: SocketAddr,
    data: &[u8],
    flags: i32,
) -> Route<usize> {
    let nb = crate::sys::nonblocking(fd) || flags & libc::MSG_DONTWAIT != 0;
    let carried = match tcp_open(fd, to, Opening::FastopenData(data), nb) {
        Route::Done(Ok(n)) if !nb && n < data.len() => n,
        other => return other,
    };
    let Some(t) = table::tcp(fd) else {
        return Route::Done(Ok(carried));
    };
    Route::Done(
        match super::tcp_stream::tcp_send(&t, &data[carried..], flags) {
            Ok(m) => Ok(carried + m),
            Err(_) if carried > 0 => Ok(carried),
            Err(e) => Err(e),
        },
    )
}

/// The connection [`tcp_connect`] and [`tcp_sendto_fastopen`] open:
/// `Done` with the bytes its SYN carried once it is connected (at once
/// when `nb`: `EINPROGRESS` unless the SYN carried data, or the SYN
/// waits for the first write).
fn tcp_open(fd: RawFd, to: SocketAddr, how: Opening<'_>, nb: bool) -> Route<usize> {
    let g = global();
    if table::kind(fd) != table::KERNEL
        || !table::in_range(fd)
        || !g.enabled()
        || !g.cfg.protocols.tcp()
        || crate::host::inside()
        || to.ip().is_loopback()
        || to.ip().is_multicast()
        || to.ip().is_unspecified()
    {
        return Route::Kernel;
    }
    if crate::sys::sockopt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL) != Some(libc::IPPROTO_TCP) {
        return Route::Kernel;
    }
    let Some(src) = crate::sys::route_source(to.ip()) else {
        return Route::Kernel;
    };
    // The kernel holds the local port: the program's, or one it gives.
    let mut from = match crate::sys::local_addr(fd) {
        Some(a) if a.port() != 0 => a,
        _ => match crate::sys::bind_any_port(fd, SocketAddr::new(src, 0)) {
            Ok(a) => a,
            Err(_) => return Route::Kernel,
        },
    };
    if from.ip().is_unspecified() {
        from.set_ip(src);
    }
    let (c, keys, carried) = match g.tcp_connect(from, to, how) {
        Ok(x) => x,
        Err((why, detail)) => {
            g.fallback(why, &detail);
            return Route::Kernel;
        }
    };
    c.set_nonblocking(true);
    let deferred = c.fastopen_deferred();
    let t = TcpSock::new(End::Stream(c), crate::sys::nonblocking(fd), 0, usize::MAX);
    *rxpath_dev::sync::lock(&t.keys) = keys;
    table::set(fd, Entry::Tcp(t.clone()));
    if deferred {
        // No SYN until the first write: connected, as the program sees it.
        return Route::Done(Ok(0));
    }
    if nb {
        return Route::Done(if carried > 0 {
            Ok(carried)
        } else {
            Err(libc::EINPROGRESS)
        });
    }
    let r = t.stream().map(|s| s.wait_connected());
    Route::Done(match r {
        Some(Ok(())) => Ok(carried),
        Some(Err(e)) => Err(e.raw_os_error().unwrap_or(libc::ECONNREFUSED)),
        None => Err(libc::EINVAL),
    })
}

/// `connect()` again on a served TCP socket: answered from its state, as
/// `__inet_stream_connect` does (the kernel socket behind the fd must
/// not start a handshake of its own from the port).
pub(crate) fn tcp_connect_again(t: &TcpSock) -> Errno {
    match t.stream().map(|s| s.state()) {
        Some(Ok(rxpath_tcp::State::SynSent | rxpath_tcp::State::SynRecv)) => libc::EALREADY,
        Some(Ok(rxpath_tcp::State::Closed)) => libc::ECONNABORTED,
        Some(_) => libc::EISCONN,
        None => libc::EINVAL,
    }
}

/// `shutdown()` on a served listener: rxpath's stops listening (what it
/// had not accepted is reset, as `inet_csk_listen_stop`), and a thread
/// blocked in `accept` looks at the kernel socket, which the caller shuts
/// down too, and fails as the kernel's `accept` then does.
pub(crate) fn tcp_stop_listening(t: &TcpSock) {
    if let End::Listener(l, _) = &t.end {
        l.close();
        t.kernel_ready.store(true, Ordering::SeqCst);
        rxpath_runtime::sock::Watch::ready(&*t.watch);
    }
}
