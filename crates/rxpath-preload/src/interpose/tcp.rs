//! TCP's calls: `listen`, `accept`/`accept4`, the addresses and options of
//! a served connection, `sendfile`, and the TCP halves of the read and
//! send families (`io` hands a served TCP fd here).

use super::{addr_out, buf, buf_mut, fail, gather, iovs, ret};
use crate::ops::{self, Accepted};
use crate::sys::real;
use crate::table;
use crate::tcp::sock::TcpSock;
use libc::{c_int, c_uint, c_void, iovec, mmsghdr, msghdr, size_t, sockaddr, socklen_t, ssize_t};

#[no_mangle]
pub extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    if table::kind(fd) == table::TCP {
        // Listening already (a second `listen` changes only the backlog).
        return 0;
    }
    ops::on_listen(fd, backlog);
    // SAFETY: the C library's listen with the program's arguments.
    let r = unsafe { real::listen()(fd, backlog) };
    ops::listen_done(fd, r == 0);
    r
}

#[no_mangle]
pub extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    accept4(fd, addr, len, 0)
}

#[no_mangle]
pub extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    if let Some(t) = table::tcp(fd) {
        match ops::accept(fd, &t, flags) {
            Ok(Accepted::Rxpath(nfd, peer)) => {
                addr_out(Some(peer), addr, len);
                return nfd;
            }
            Ok(Accepted::Kernel) => {
                // SAFETY: the C library's accept4 with the program's
                // arguments; the kernel socket holds a connection.
                let r = unsafe { real::accept4()(fd, addr, len, flags) };
                if crate::sys::readable_now(fd) {
                    t.kernel_ready
                        .store(true, std::sync::atomic::Ordering::SeqCst);
                }
                return r;
            }
            Err(e) => return fail(e) as c_int,
        }
    }
    // SAFETY: the C library's accept4 with the program's arguments.
    unsafe { real::accept4()(fd, addr, len, flags) }
}

#[no_mangle]
pub extern "C" fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    if let Some(t) = table::tcp(fd).filter(|t| t.stream().is_some()) {
        return match ops::tcp_addrs(&t) {
            Ok((local, _)) => {
                addr_out(local, addr, len);
                0
            }
            Err(e) => fail(e) as c_int,
        };
    }
    if let Some((local, _)) = ops::relayed_addrs(fd) {
        addr_out(Some(local), addr, len);
        return 0;
    }
    // SAFETY: the C library's getsockname with the program's arguments.
    unsafe { real::getsockname()(fd, addr, len) }
}

#[no_mangle]
pub extern "C" fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    if let Some(t) = table::tcp(fd).filter(|t| t.stream().is_some()) {
        return match ops::tcp_addrs(&t) {
            Ok((_, Some(peer))) => {
                addr_out(Some(peer), addr, len);
                0
            }
            Ok((_, None)) => fail(libc::ENOTCONN) as c_int,
            Err(e) => fail(e) as c_int,
        };
    }
    if let Some((_, peer)) = ops::relayed_addrs(fd) {
        addr_out(Some(peer), addr, len);
        return 0;
    }
    // SAFETY: the C library's getpeername with the program's arguments.
    unsafe { real::getpeername()(fd, addr, len) }
}

/// Write `v` as the option's value: at most `*len` bytes, `*len` set to
/// what was written, as the kernel does.
fn opt_out<T: Copy>(v: &T, val: *mut c_void, len: *mut socklen_t) -> c_int {
    if val.is_null() || len.is_null() {
        return fail(libc::EFAULT) as c_int;
    }
    // SAFETY: the program gave `*len` writable bytes at `val`; at most
    // that many are written, from a live `T`.
    unsafe {
        let n = (*len as usize).min(std::mem::size_of::<T>());
        std::ptr::copy_nonoverlapping((v as *const T).cast::<u8>(), val.cast::<u8>(), n);
        *len = n as socklen_t;
    }
    0
}

#[no_mangle]
pub extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    if let Some(t) = table::tcp(fd) {
        if (level, name) == (libc::IPPROTO_TCP, libc::TCP_INFO) {
            if let Some(r) = ops::tcp_info(&t) {
                return match r {
                    Ok(info) => opt_out(&info, val, len),
                    Err(e) => fail(e) as c_int,
                };
            }
        }
        if (level, name) == (libc::SOL_SOCKET, libc::SO_LINGER) {
            if let Some(r) = ops::tcp_linger(&t) {
                return match r {
                    Ok((on, secs)) => opt_out(
                        &libc::linger {
                            l_onoff: on as c_int,
                            l_linger: secs,
                        },
                        val,
                        len,
                    ),
                    Err(e) => fail(e) as c_int,
                };
            }
        }
        if let Some(r) = ops::tcp_getsockopt(&t, level, name) {
            return match r {
                Ok(v) => opt_out(&v, val, len),
                Err(e) => fail(e) as c_int,
            };
        }
    }
    // SAFETY: the C library's getsockopt with the program's arguments.
    unsafe { real::getsockopt()(fd, level, name, val, len) }
}

/// `shutdown` on a served TCP connection (its kernel socket never
/// connected: the kernel's call would say `ENOTCONN`).
pub(super) fn shutdown(fd: c_int, t: &TcpSock, how: c_int) -> c_int {
    if t.stream().is_none() {
        // A listener: the kernel socket stops listening (its blocked
        // `accept`s fail, as ours do when they look at it next), and so
        // does rxpath's.
        ops::tcp_stop_listening(t);
        // SAFETY: the C library's shutdown with the program's arguments.
        return unsafe { real::shutdown()(fd, how) };
    }
    let r = ops::tcp_shutdown(t, how);
    // Threads blocked on it look again (`SHUT_RD` ends their reads).
    rxpath_runtime::sock::Watch::ready(&*t.watch);
    match r {
        Ok(()) => 0,
        Err(e) => fail(e) as c_int,
    }
}

/// A read of a served TCP connection into one buffer.
pub(super) fn recv(t: &TcpSock, b: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    ret(ops::tcp_recv(t, buf_mut(b, n), flags))
}

/// A read of a served TCP connection into iovecs: straight into a single
/// buffer, else through a bounce buffer scattered after.
pub(super) fn recv_iov(t: &TcpSock, v: &[iovec], flags: c_int) -> Result<usize, i32> {
    if let [one] = v {
        return ops::tcp_recv(t, buf_mut(one.iov_base, one.iov_len), flags);
    }
    let total: usize = v.iter().map(|x| x.iov_len).sum();
    let mut tmp = vec![0u8; total.min(1 << 20)];
    let got = ops::tcp_recv(t, &mut tmp, flags)?;
    let mut off = 0;
    for x in v {
        if off >= got {
            break;
        }
        let k = x.iov_len.min(got - off);
        buf_mut(x.iov_base, k).copy_from_slice(&tmp[off..off + k]);
        off += k;
    }
    Ok(got)
}

/// `recvmsg` on a served TCP connection: no address, no control messages.
pub(super) fn recvmsg(t: &TcpSock, m: *mut msghdr, flags: c_int) -> ssize_t {
    if m.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: the program passed a writable msghdr for this call.
    let m = unsafe { &mut *m };
    let r = recv_iov(t, iovs(m.msg_iov, m.msg_iovlen), flags);
    if r.is_ok() {
        m.msg_namelen = 0;
        m.msg_controllen = 0;
        m.msg_flags = 0;
    }
    ret(r)
}

/// `recvmmsg` on a served TCP connection, as `do_recvmmsg` runs it on a
/// stream: one `recvmsg` per entry (the end of the stream fills an entry
/// with 0 bytes, and the next ones too); after the first,
/// `MSG_WAITFORONE` makes the rest non-blocking; an error ends the batch
/// (returned if nothing was read); `end` is checked after each entry.
pub(super) fn recvmmsg(
    t: &TcpSock,
    v: *mut mmsghdr,
    vlen: c_uint,
    flags: c_int,
    end: Option<std::time::Instant>,
) -> c_int {
    if v.is_null() {
        return fail(libc::EFAULT) as c_int;
    }
    // SAFETY: the program passed `vlen` writable mmsghdrs at `v`.
    let msgs = unsafe { std::slice::from_raw_parts_mut(v, vlen as usize) };
    let mut n = 0;
    for m in msgs.iter_mut() {
        let mut f = flags & !libc::MSG_WAITFORONE;
        if n > 0 && flags & libc::MSG_WAITFORONE != 0 {
            f |= libc::MSG_DONTWAIT;
        }
        let r = recvmsg(t, &mut m.msg_hdr, f);
        if r < 0 {
            if n == 0 {
                return -1;
            }
            break;
        }
        m.msg_len = r as c_uint;
        n += 1;
        if end.is_some_and(|e| std::time::Instant::now() >= e) {
            break;
        }
    }
    n
}

/// `sendmmsg` on a served TCP connection, as `__sys_sendmmsg` runs it: one
/// `sendmsg` per entry, its count in `msg_len`; an error (returned if
/// nothing was sent) or a message sent in part ends the batch.
pub(super) fn sendmmsg(t: &TcpSock, v: *mut mmsghdr, vlen: c_uint, flags: c_int) -> c_int {
    if v.is_null() {
        return fail(libc::EFAULT) as c_int;
    }
    // SAFETY: the program passed `vlen` mmsghdrs at `v`.
    let msgs = unsafe { std::slice::from_raw_parts_mut(v, vlen as usize) };
    let mut n = 0;
    for m in msgs.iter_mut() {
        let h = &m.msg_hdr;
        let want: usize = iovs(h.msg_iov, h.msg_iovlen)
            .iter()
            .map(|x| x.iov_len)
            .sum();
        let r = sendmsg(t, h, flags);
        if r < 0 {
            if n == 0 {
                return -1;
            }
            break;
        }
        m.msg_len = r as c_uint;
        n += 1;
        if (r as usize) < want {
            break;
        }
    }
    n
}

/// A send on a served TCP connection.
pub(super) fn send(t: &TcpSock, b: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    ret(ops::tcp_send(t, buf(b, n), flags))
}

/// A send of iovecs on a served TCP connection.
pub(super) fn send_iov(t: &TcpSock, v: &[iovec], flags: c_int) -> ssize_t {
    ret(ops::tcp_send(t, &gather(v), flags))
}

/// `sendmsg` on a served TCP connection (an address, if any, is ignored,
/// as on a connected stream; control messages are not read).
pub(super) fn sendmsg(t: &TcpSock, m: *const msghdr, flags: c_int) -> ssize_t {
    if m.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: the program passed a readable msghdr for this call.
    let m = unsafe { &*m };
    send_iov(t, iovs(m.msg_iov, m.msg_iovlen), flags)
}

/// `sendfile(out, in_fd, offset, count)` to a served TCP connection: the
/// file's bytes read with `pread` from `*offset` (or the file position,
/// moved past what was sent) and sent as `send` sends them.
fn sendfile_tcp(t: &TcpSock, in_fd: c_int, offset: Option<&mut i64>, count: usize) -> ssize_t {
    let start = match &offset {
        Some(o) => **o,
        // SAFETY: lseek on the program's fd only reads its position.
        None => unsafe { libc::lseek64(in_fd, 0, libc::SEEK_CUR) },
    };
    if start < 0 {
        return -1;
    }
    let mut chunk = vec![0u8; count.min(1 << 16)];
    let mut sent = 0usize;
    let mut err = None;
    while sent < count {
        let want = (count - sent).min(chunk.len());
        // SAFETY: pread into a live buffer of `want` bytes.
        let n =
            unsafe { libc::pread64(in_fd, chunk.as_mut_ptr().cast(), want, start + sent as i64) };
        if n <= 0 {
            if n < 0 {
                err = Some(
                    std::io::Error::last_os_error()
                        .raw_os_error()
                        .unwrap_or(libc::EIO),
                );
            }
            break;
        }
        match ops::tcp_send(t, &chunk[..n as usize], libc::MSG_NOSIGNAL) {
            Ok(m) => {
                sent += m;
                if m < n as usize {
                    break;
                }
            }
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    let end = start + sent as i64;
    match offset {
        Some(o) => *o = end,
        // SAFETY: moves the program's file position past what was sent.
        None => unsafe {
            libc::lseek64(in_fd, end, libc::SEEK_SET);
        },
    }
    match (sent, err) {
        (0, Some(e)) => {
            if e == libc::EPIPE {
                crate::sys::raise_sigpipe();
            }
            fail(e)
        }
        _ => sent as ssize_t,
    }
}

/// `sendfile` to served connection `t`, `offset` the program's (null:
/// the file position).
fn sendfile_at(t: &TcpSock, in_fd: c_int, offset: *mut i64, count: size_t) -> ssize_t {
    let mut o = (!offset.is_null()).then(|| {
        // SAFETY: the program passed a readable offset.
        unsafe { *offset }
    });
    let r = sendfile_tcp(t, in_fd, o.as_mut(), count);
    if let (Some(v), false) = (o, offset.is_null()) {
        // SAFETY: the program passed a writable offset.
        unsafe { *offset = v };
    }
    r
}

#[no_mangle]
pub extern "C" fn sendfile(
    out: c_int,
    in_fd: c_int,
    offset: *mut libc::off_t,
    count: size_t,
) -> ssize_t {
    if let Some(t) = table::tcp(out) {
        return sendfile_at(&t, in_fd, offset, count);
    }
    // SAFETY: the C library's sendfile with the program's arguments.
    unsafe { real::sendfile()(out, in_fd, offset, count) }
}

#[no_mangle]
pub extern "C" fn sendfile64(
    out: c_int,
    in_fd: c_int,
    offset: *mut libc::off64_t,
    count: size_t,
) -> ssize_t {
    if let Some(t) = table::tcp(out) {
        return sendfile_at(&t, in_fd, offset, count);
    }
    // SAFETY: the C library's sendfile64 with the program's arguments.
    unsafe { real::sendfile64()(out, in_fd, offset, count) }
}
