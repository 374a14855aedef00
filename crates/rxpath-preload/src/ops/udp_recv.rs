//! The receive side of a served socket: a read of one datagram (`MSG_PEEK`,
//! `MSG_TRUNC`, blocking with busy polling first), a batch for
//! `recvmmsg`, what a forked child inherited, `FIONREAD`; and where a read
//! goes when rxpath's queue is empty (the kernel socket behind the fd).

use super::*;
use crate::host::global;
use crate::table::{self};
use crate::udp::sock::Accel;
use rxpath_runtime::sock::RecvMeta;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

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

/// `recvfrom()`/`recvmsg()`/`read()` of one datagram into `buf`:
/// `MSG_PEEK` leaves it queued, `MSG_TRUNC` returns its whole length.
pub(crate) fn recv(a: &Arc<Accel>, buf: &mut [u8], flags: i32) -> Result<Got, NotRead> {
    if a.child_took_it() {
        // A forked child took the reading, and the kernel side's watch
        // may not have seen it yet.
        crate::kside::child_took(a);
    }
    crate::kside::take_back_after_fork(a);
    if a.kernel_only.load(Ordering::Relaxed) && !a.held.any() && a.sock.socket().queued() == 0 {
        return Err(NotRead::KernelNow);
    }
    if flags & !RECV_FLAGS != 0 {
        global().unsupported(&flag_name(flags & !RECV_FLAGS));
        return Err(libc::EOPNOTSUPP.into());
    }
    let nonblock = a.nonblock.load(Ordering::Relaxed) || flags & libc::MSG_DONTWAIT != 0;
    // A blocking read holds the socket against a `close` meanwhile.
    let _reading = (!nonblock).then(|| Reading::enter(a));
    let until = a.sock.read_timeout().map(|t| std::time::Instant::now() + t);
    let mut busy_round = nonblock;
    loop {
        if a.kernel_first.load(Ordering::Relaxed) {
            if crate::kside::take_hint(a) {
                return Err(NotRead::FromKernel);
            }
            a.kernel_first.store(false, Ordering::Relaxed);
        }
        if let Some(g) = take(a, buf, flags)? {
            return Ok(g);
        }
        // (Not once its fds are closed: the number may name another
        // file now.)
        if a.fds.load(Ordering::Relaxed) > 0 && crate::kside::take_hint(a) {
            return Err(NotRead::FromKernel);
        }
        if a.shut.load(Ordering::Relaxed) & crate::udp::sock::SHUT_READ != 0 {
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
                crate::udp::sock::busy_wait(&[a]);
                continue;
            }
            return Err(libc::EAGAIN.into());
        }
        match crate::readiness::wait_readable(a, until) {
            Ok(()) => {}
            Err(libc::EINTR) if crate::sys::restart_after_signal() => {}
            Err(e) => return Err(e.into()),
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
        || a.lent.load(Ordering::Relaxed)
        || a.kernel_first.load(Ordering::Relaxed)
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

/// A datagram held since a `fork` ([`crate::udp::forkq`]), as [`take`] reads.
fn take_held(h: &crate::udp::forkq::Held, buf: &mut [u8], flags: i32) -> Option<Got> {
    let (whole, m) = h.take(buf, flags & libc::MSG_PEEK != 0)?;
    let mut g = done(1, Some(m)).ok()?;
    if flags & libc::MSG_TRUNC != 0 {
        g.len = whole;
    }
    Some(g)
}

/// What a read on an fd is answered from.
#[derive(Debug, Clone)]
pub(crate) enum Rx {
    /// A socket rxpath serves.
    Sock(Arc<Accel>),
    /// In a forked child: a socket holding datagrams its parent held.
    Forked(RawFd, Arc<crate::udp::forkq::Inherited>),
}

impl Rx {
    /// The reader of `fd`, if reads on it are rxpath's.
    #[inline]
    pub(crate) fn of(fd: RawFd) -> Option<Rx> {
        match table::kind(fd) {
            table::SOCKET => table::socket(fd).map(Rx::Sock),
            table::FORKED => match crate::udp::forkq::inherited(fd) {
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
    /// (never waiting) and then [`NotRead::KernelNow`].
    pub(crate) fn recv(&self, buf: &mut [u8], flags: i32) -> Result<Got, NotRead> {
        match self {
            Rx::Sock(a) => recv(a, buf, flags),
            Rx::Forked(fd, i) => {
                if let Some(g) = take_held(&i.held, buf, flags) {
                    return Ok(g);
                }
                crate::udp::forkq::child_uses(*fd);
                table::remove(*fd);
                Err(NotRead::KernelNow)
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
