//! A served socket's life: `socket`, `bind` (rxpath's, or the kernel's,
//! said and counted), `connect`, `close` (kept for a read blocked on it),
//! `dup`, `shutdown`, the non-blocking flag, and the hand-back of a socket
//! to the kernel socket behind its fd.

use super::*;
use crate::host::{global, Fallback};
use crate::table::{self, Entry};
use crate::udp::sock::{Accel, Pending};
use rxpath_dev::sync::lock;
use rxpath_runtime::sock::Watch;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

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
    let p = lock(&p).clone();
    let g = global();
    if let Some(why) = &p.refuse {
        table::remove(fd);
        g.kernel_keeps(addr, p.v6only);
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
            g.kernel_keeps(addr, v6only);
            return g.fallback(why, &detail);
        }
    };
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
        .set_rxq_ovfl(p.cmsgs & crate::udp::sock::RXQ_OVFL != 0);
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
    let ktoken = crate::kside::token();
    let a = Accel::new(sock, (p.nonblock, p.cmsgs), ktoken, g.served(addr), keys);
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
    let a = match table::remove(fd) {
        Some(Entry::Socket(a)) => a,
        Some(Entry::Tcp(t)) => return close_tcp(fd, &t, park),
        _ => return,
    };
    forget_in_sets(fd);
    if a.fds.fetch_sub(1, Ordering::AcqRel) != 1 {
        return;
    }
    if park {
        let mut parked = lock(&a.parked);
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

/// A served TCP socket's fd closed: with its last, a connection closes
/// (`close`: a FIN after what was written, or a reset if unread data
/// waits, as `tcp_close`) once no call holds it, and a listener gives its
/// port back to the kernel (connections not accepted are reset). A
/// connection a forked child kept goes on ([`super::hand_to_child`]).
fn close_tcp(fd: RawFd, t: &std::sync::Arc<crate::tcp::sock::TcpSock>, open: bool) {
    forget_in_sets(fd);
    if t.fds.fetch_sub(1, Ordering::AcqRel) != 1 {
        return;
    }
    // A forked child may keep the connection: then it lives on, relayed
    // (and closes when the relay ends), and its port is let go below as
    // for any connection still open.
    let mut linger = None;
    if let Some(s) = t.stream() {
        let secs = s.option(rxpath_tcp::SockOpt::Linger).unwrap_or(-1);
        // `SO_LINGER` with a timeout: the program's `close` waits (below)
        // as the kernel's last `fput` does, so only when no other call
        // holds the socket (a thread blocked in it); then it closes
        // without the wait, when the last holder lets go.
        if !super::hand_to_child(t) && open && secs > 0 && std::sync::Arc::strong_count(t) == 1 {
            linger = Some(std::time::Duration::from_secs(secs as u64));
        }
    }
    // A connection this process opened: its port (the machine closes it
    // once what was written is sent). A listener: its port, which the
    // connections it accepted use too. Either leaves the port map once
    // no connection uses the port ([`crate::host::Global::release_tcp`]).
    let mut keys = std::mem::take(&mut *lock(&t.keys));
    let mut port = t
        .stream()
        .and_then(|s| s.addrs().ok()?.0)
        .map_or(0, |a| a.port());
    // A client's port is held by the kernel socket behind the fd, which
    // the program's close ends: a dup keeps it while rxpath's connection
    // lives (not when the number already names another file).
    let hold = (open && !keys.is_empty())
        .then(|| crate::sys::dup_cloexec(fd).ok())
        .flatten();
    if let crate::tcp::sock::End::Listener(l, lkeys) = &t.end {
        crate::kside::forget_token(t.ktoken);
        l.close();
        port = l.local_addr().port();
        if !t.handed.load(Ordering::SeqCst) {
            keys = lkeys.clone();
        }
    }
    // The port was read above: a closed connection has no addresses.
    if let (Some(d), Some(s)) = (linger, t.stream()) {
        s.close_linger(d);
    }
    global().release_tcp(port, keys, hold);
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
            let kept = lock(&a.parked).take();
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
        libc::SHUT_RD => crate::udp::sock::SHUT_READ,
        libc::SHUT_WR => crate::udp::sock::SHUT_WRITE,
        libc::SHUT_RDWR => crate::udp::sock::SHUT_READ | crate::udp::sock::SHUT_WRITE,
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
        Some(Entry::Tcp(t)) => {
            t.fds.fetch_add(1, Ordering::AcqRel);
            table::set(new, Entry::Tcp(t));
        }
        _ => {}
    }
}

/// `fcntl(F_SETFL)` or `ioctl(FIONBIO)`: the non-blocking flag.
pub(crate) fn set_nonblock(fd: RawFd, on: bool) {
    match table::get(fd) {
        Some(Entry::Socket(a)) => a.nonblock.store(on, Ordering::Relaxed),
        Some(Entry::Candidate(p)) => lock(&p).nonblock = on,
        Some(Entry::Tcp(t)) => t.nonblock.store(on, Ordering::Relaxed),
        _ => {}
    }
}

/// Every served socket back to the kernel: the interface went (`what`),
/// and rxpath's device with it ([`crate::host::Global::link_event`]).
pub(crate) fn hand_all_back(what: &str) {
    for (_, a) in table::sockets() {
        hand_back(&a, Fallback::IfaceGone, what);
    }
}

/// Hand a served socket back to the kernel: its destinations leave the
/// port map (the XDP program's or AF_PACKET's tap filter's), unless
/// another rxpath socket shares them, so from the next frame on the
/// kernel socket behind the fd receives what comes. What rxpath's queue
/// holds is read first ([`recv`]), and sends go to the kernel. `why`
/// counts it; `detail` is said (once per reason).
pub(crate) fn hand_back(a: &Accel, why: Fallback, detail: &str) {
    if a.kernel_only.swap(true, Ordering::SeqCst) {
        return;
    }
    let g = global();
    let shared = g.release(&a.keys);
    g.kernel_keeps(a.sock.local_addr(), a.sock.socket().only_v6());
    if shared {
        // A sibling keeps the port in the XDP program's map: rxpath's
        // group must stop giving this socket its share, which its reads
        // (the kernel socket's now) would never see.
        a.sock.stop_receiving();
    }
    g.went_to_kernel(a.report_id, detail);
    g.fallback(why, detail);
    a.watch.ready();
}
