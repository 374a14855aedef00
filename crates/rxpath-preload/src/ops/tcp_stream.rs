//! TCP's connections: the read and send families with their flags
//! (`MSG_PEEK`, `MSG_WAITALL`, `MSG_DONTWAIT`, `MSG_MORE`,
//! `MSG_NOSIGNAL`), `shutdown`, the options rxpath's machine keeps, and
//! the addresses, for a connection rxpath accepted.

use super::*;
use crate::tcp::sock::TcpSock;
use rxpath_tcp::SockOpt;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

fn io_errno(e: std::io::Error) -> Errno {
    match e.kind() {
        ErrorKind::WouldBlock => libc::EAGAIN,
        _ => e.raw_os_error().unwrap_or(libc::EIO),
    }
}

const IN: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
const OUT: u32 = libc::EPOLLOUT as u32;

/// `recv(fd, buf, flags)` on a served connection: what is queued (left
/// there with `MSG_PEEK`), waiting for it unless `MSG_DONTWAIT` or the
/// fd is non-blocking; with `MSG_WAITALL`, until `buf` is full, the
/// stream ends or an error comes (what was read is returned first).
pub(crate) fn tcp_recv(t: &TcpSock, buf: &mut [u8], flags: i32) -> Result<usize, Errno> {
    let Some(s) = t.stream() else {
        return Err(libc::ENOTCONN);
    };
    let peek = flags & libc::MSG_PEEK != 0;
    let dontwait = flags & libc::MSG_DONTWAIT != 0 || t.nonblock.load(Ordering::Relaxed);
    let waitall = flags & libc::MSG_WAITALL != 0 && !peek && !dontwait;
    if flags & libc::MSG_OOB != 0 {
        // No urgent data is kept (`SO_OOBINLINE` off, none received).
        return Err(libc::EINVAL);
    }
    if buf.is_empty() {
        // `tcp_recvmsg` with nothing to copy returns at once.
        return Ok(0);
    }
    let mut got = 0;
    loop {
        match s.recv(&mut buf[got..], peek, true) {
            Ok(0) => return Ok(got),
            Ok(n) => {
                got += n;
                if !waitall || got == buf.len() {
                    return Ok(got);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if dontwait {
                    return if got > 0 { Ok(got) } else { Err(libc::EAGAIN) };
                }
            }
            Err(e) if got > 0 => {
                // The error stays for the next call, as the kernel's
                // `sk_err` does after a short read.
                drop(e);
                return Ok(got);
            }
            Err(e) => return Err(io_errno(e)),
        }
        if let Err(e) = crate::readiness::wait_tcp(t, IN, None, None) {
            return if got > 0 { Ok(got) } else { Err(e) };
        }
    }
}

/// `send(fd, data, flags)` on a served connection: all of `data` when
/// the fd blocks (waiting for room in the send buffer), what fits when
/// it does not or with `MSG_DONTWAIT`. A connection shut for writing
/// fails with `EPIPE` and raises `SIGPIPE` unless `MSG_NOSIGNAL`.
pub(crate) fn tcp_send(t: &TcpSock, data: &[u8], flags: i32) -> Result<usize, Errno> {
    let Some(s) = t.stream() else {
        return Err(libc::ENOTCONN);
    };
    let more = flags & libc::MSG_MORE != 0;
    let dontwait = flags & libc::MSG_DONTWAIT != 0 || t.nonblock.load(Ordering::Relaxed);
    let mut sent = 0;
    loop {
        match s.send(&data[sent..], more, true) {
            Ok(n) => {
                sent += n;
                if sent == data.len() || dontwait {
                    return Ok(sent);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if dontwait {
                    return if sent > 0 {
                        Ok(sent)
                    } else {
                        Err(libc::EAGAIN)
                    };
                }
            }
            // A Fast Open SYN that carried nothing: a blocking write
            // waits for the handshake, as the kernel's.
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) && !dontwait => {}
            Err(_) if sent > 0 => return Ok(sent),
            Err(e) => {
                let e = io_errno(e);
                if e == libc::EPIPE && flags & libc::MSG_NOSIGNAL == 0 {
                    crate::sys::raise_sigpipe();
                }
                return Err(e);
            }
        }
        if let Err(e) = crate::readiness::wait_tcp(t, OUT, None, None) {
            return if sent > 0 { Ok(sent) } else { Err(e) };
        }
    }
}

/// `shutdown(fd, how)` on a served connection.
pub(crate) fn tcp_shutdown(t: &TcpSock, how: i32) -> Result<(), Errno> {
    let Some(s) = t.stream() else {
        return Err(libc::ENOTCONN);
    };
    let (rd, wr) = match how {
        libc::SHUT_RD => (true, false),
        libc::SHUT_WR => (false, true),
        libc::SHUT_RDWR => (true, true),
        _ => return Err(libc::EINVAL),
    };
    s.shutdown(rd, wr).map_err(io_errno)
}

/// Both ends of a served connection (`getsockname`, `getpeername`).
pub(crate) fn tcp_addrs(t: &TcpSock) -> Result<(Option<SocketAddr>, Option<SocketAddr>), Errno> {
    match t.stream() {
        Some(s) => s.addrs().map_err(io_errno),
        None => Err(libc::EOPNOTSUPP),
    }
}

/// `FIONREAD` / `SIOCINQ`: bytes queued to read.
pub(crate) fn tcp_inq(t: &TcpSock) -> Result<usize, Errno> {
    match t.stream() {
        Some(s) => s.queues().map(|q| q.0).map_err(io_errno),
        None => Err(libc::EINVAL),
    }
}

/// The machine's name for an option by its kernel level and name, if it
/// keeps it. `SO_REUSEADDR` and `TCP_INQ` on a connection stay the kernel
/// socket's to answer (it took them first).
fn machine_option(level: i32, name: i32) -> Option<SockOpt> {
    SockOpt::by_name(level, name).filter(|o| !matches!(o, SockOpt::ReuseAddr | SockOpt::Inq))
}

/// `setsockopt` on a served connection (the kernel socket behind the fd
/// took it first): the options the machine keeps go to it; `SO_LINGER`
/// as its seconds when on. Others (`TCP_QUICKACK`, priorities, ...) ask
/// nothing of rxpath's machine.
pub(crate) fn tcp_setsockopt(t: &TcpSock, level: i32, name: i32, v: OptVal) -> Result<(), Errno> {
    // On a listener, `TCP_DEFER_ACCEPT` and `TCP_FASTOPEN` set after
    // `listen` (nginx's `deferred`, `fastopen=`) reach rxpath's listener
    // too.
    if let (
        crate::tcp::sock::End::Listener(l, _),
        Some(o @ (SockOpt::DeferAccept | SockOpt::Fastopen)),
        OptVal::Int(x),
    ) = (&t.end, SockOpt::by_name(level, name), &v)
    {
        return l.set_option(o, *x).map_err(io_errno);
    }
    let Some(s) = t.stream() else { return Ok(()) };
    if (level, name) == (libc::SOL_SOCKET, libc::SO_LINGER) {
        if let OptVal::Linger(on, secs) = v {
            let secs = if on { secs.max(0) } else { -1 };
            return s.set_option(SockOpt::Linger, secs).map_err(io_errno);
        }
        return Ok(());
    }
    match (machine_option(level, name), v) {
        (Some(SockOpt::Error), _) => Ok(()),
        (Some(o), OptVal::Int(v)) => s.set_option(o, v).map_err(io_errno),
        _ => Ok(()),
    }
}

/// `getsockopt` on a served connection: the machine's value of the
/// options it keeps (`SO_ERROR` read and cleared); `None`: the kernel
/// socket's answer.
pub(crate) fn tcp_getsockopt(t: &TcpSock, level: i32, name: i32) -> Option<Result<i32, Errno>> {
    let s = t.stream()?;
    let o = machine_option(level, name)?;
    Some(s.option(o).map_err(io_errno))
}

/// `getsockopt(SO_LINGER)` on a served connection: the machine's (a
/// connection may have it from its listener), as `l_onoff` and seconds.
pub(crate) fn tcp_linger(t: &TcpSock) -> Option<Result<(bool, i32), Errno>> {
    let s = t.stream()?;
    Some(
        s.option(SockOpt::Linger)
            .map(|secs| (secs >= 0, secs.max(0)))
            .map_err(io_errno),
    )
}

/// `getsockopt(TCP_INFO)` on a served connection.
pub(crate) fn tcp_info(t: &TcpSock) -> Option<Result<rxpath_tcp::TcpInfo, Errno>> {
    Some(t.stream()?.tcp_info().map_err(io_errno))
}

/// The process exits: as the kernel closes its fds and keeps the
/// connections until what was written is sent, each served connection
/// still open is shut for writing and closed (a FIN after its data), and
/// the host runs until every connection of its machine, those the
/// program closed before included, has its data and FIN acknowledged,
/// or `patience` passes. Listeners close (what they had not accepted is
/// reset). Returns the connections still sending when the host stopped
/// (said by the caller).
pub(crate) fn tcp_close_at_exit(patience: std::time::Duration) -> usize {
    let socks = crate::table::take_tcp();
    let mut streams = Vec::new();
    for t in socks {
        match &t.end {
            crate::tcp::sock::End::Listener(l, _) => l.close(),
            crate::tcp::sock::End::Stream(s) => {
                let _ = s.shutdown(false, true);
                streams.push(t);
            }
        }
    }
    // Closed now, as the kernel closes an exiting process's fds: each
    // connection an orphan of the machine, sending on.
    drop(streams);
    let until = std::time::Instant::now() + patience;
    loop {
        let unsent = crate::host::global().tcp_sending();
        if unsent == 0 || std::time::Instant::now() >= until {
            return unsent;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
