//! The read and write families: `read`, `recv`, `recvfrom`, `readv`,
//! `recvmsg`, `write`, `send`, `sendto`, `writev`, `sendmsg`.

use super::*;

pub(super) fn recv_flags(flags: c_int) -> (bool, bool, bool) {
    (
        flags & libc::MSG_PEEK != 0,
        flags & libc::MSG_WAITALL != 0,
        flags & libc::MSG_DONTWAIT != 0,
    )
}

pub(super) fn do_recv(
    w: &Shared,
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
) -> Result<usize, Errno> {
    if buf.is_null() && len > 0 {
        return Err(libc::EFAULT);
    }
    if len > isize::MAX as usize {
        return Err(libc::EINVAL);
    }
    let mut tmp = vec![0u8; len.min(MAX_RW)];
    let (peek, waitall, dontwait) = recv_flags(flags);
    let n = w.recv(fd, &mut tmp, peek, waitall, dontwait)?;
    if n > 0 {
        // SAFETY: non-null, the caller's buffer of `len` >= n bytes.
        unsafe { std::ptr::copy_nonoverlapping(tmp.as_ptr(), buf as *mut u8, n) };
    }
    Ok(n)
}

pub(super) fn do_send(
    w: &Shared,
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
) -> Result<usize, Errno> {
    let data = send_buf(buf, len)?;
    w.send(
        fd,
        data,
        flags & libc::MSG_MORE != 0,
        flags & libc::MSG_EOR != 0,
        flags & libc::MSG_DONTWAIT != 0,
    )
}

pub(super) unsafe extern "C" fn pd_read(
    ud: Ud,
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
) -> ssize_t {
    // SAFETY: `ud` is ours.
    ret(do_recv(unsafe { world(ud) }, fd, buf, len, 0).map(|n| n as i64)) as ssize_t
}

pub(super) unsafe extern "C" fn pd_recv(
    ud: Ud,
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: `ud` is ours.
    ret(do_recv(unsafe { world(ud) }, fd, buf, len, flags).map(|n| n as i64)) as ssize_t
}

pub(super) unsafe extern "C" fn pd_recvfrom(
    ud: Ud,
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    // SAFETY: `ud` is ours; `addr`/`alen` as recvfrom(2) takes them.
    let w = unsafe { world(ud) };
    let r = do_recv(w, fd, buf, len, flags);
    if r.is_ok() {
        if let Ok((_, Some(peer))) = w.addrs(fd) {
            // SAFETY: `addr`/`alen` are recvfrom(2)'s out-parameters, null or valid.
            unsafe { write_addr(peer, addr, alen) };
        }
    }
    ret(r.map(|n| n as i64)) as ssize_t
}

pub(super) fn readv_into(w: &Shared, fd: c_int, v: &[iovec], flags: c_int) -> Result<usize, Errno> {
    let total = iov_total(v)?.min(MAX_RW);
    let mut tmp = vec![0u8; total];
    let (peek, waitall, dontwait) = recv_flags(flags);
    let n = w.recv(fd, &mut tmp, peek, waitall, dontwait)?;
    scatter(v, &tmp[..n]);
    Ok(n)
}

pub(super) unsafe extern "C" fn pd_readv(
    ud: Ud,
    fd: c_int,
    iov: *const iovec,
    n: c_int,
) -> ssize_t {
    // SAFETY: `ud` is ours; `iov` has `n` entries per readv(2).
    let r = unsafe { iovs(iov, n) }.and_then(|v| readv_into(unsafe { world(ud) }, fd, v, 0));
    ret(r.map(|n| n as i64)) as ssize_t
}

pub(super) unsafe extern "C" fn pd_recvmsg(
    ud: Ud,
    fd: c_int,
    msg: *mut msghdr,
    flags: c_int,
) -> ssize_t {
    if msg.is_null() {
        set_errno(libc::EFAULT);
        return -1;
    }
    // SAFETY: `ud` is ours; `msg` non-null per recvmsg(2).
    let w = unsafe { world(ud) };
    // SAFETY: `ud` is ours; `msg` was checked non-null above.
    let r = unsafe {
        let m = &mut *msg;
        m.msg_flags = 0;
        iovs(m.msg_iov, m.msg_iovlen as c_int).and_then(|v| readv_into(w, fd, v, flags))
    };
    // SAFETY: `msg` non-null; its control buffer holds `msg_controllen`
    // bytes, checked against the one message written.
    unsafe {
        let m = &mut *msg;
        let room = m.msg_controllen;
        m.msg_controllen = 0;
        if let (Ok(_), Ok(Some(inq))) = (&r, w.inq_cmsg(fd)) {
            let space = libc::CMSG_SPACE(size_of::<c_int>() as u32) as usize;
            if !m.msg_control.is_null() && room >= space {
                m.msg_controllen = space as _;
                let c = libc::CMSG_FIRSTHDR(m);
                std::ptr::write_unaligned(
                    c,
                    libc::cmsghdr {
                        cmsg_len: libc::CMSG_LEN(size_of::<c_int>() as u32) as _,
                        cmsg_level: libc::IPPROTO_TCP,
                        cmsg_type: libc::TCP_CM_INQ,
                    },
                );
                std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut c_int, inq);
            } else if !m.msg_control.is_null() {
                m.msg_flags |= libc::MSG_CTRUNC;
            }
        }
    }
    ret(r.map(|n| n as i64)) as ssize_t
}

/// The caller's `len` bytes at `buf` (`EFAULT` for a null pointer with a
/// length).
fn send_buf<'a>(buf: *const c_void, len: size_t) -> Result<&'a [u8], Errno> {
    if buf.is_null() && len > 0 {
        return Err(libc::EFAULT);
    }
    if len > isize::MAX as usize {
        return Err(libc::EINVAL);
    }
    let len = len.min(MAX_RW);
    Ok(if len == 0 {
        &[]
    } else {
        // SAFETY: non-null, `len` bytes from the caller.
        unsafe { std::slice::from_raw_parts(buf as *const u8, len) }
    })
}

/// The address of a `MSG_FASTOPEN` send: none, or where to connect
/// (`AF_UNSPEC` is `EOPNOTSUPP`, as `tcp_sendmsg_fastopen` says).
///
/// # Safety
/// `a` points to `l` readable bytes, or is null.
unsafe fn fastopen_addr(a: *const sockaddr, l: socklen_t) -> Result<Option<SocketAddr>, Errno> {
    if a.is_null() {
        return Ok(None);
    }
    if l as usize >= size_of::<libc::sa_family_t>()
        // SAFETY: non-null, `l` bytes cover the family.
        && unsafe { std::ptr::read_unaligned(a as *const libc::sa_family_t) } as c_int
            == libc::AF_UNSPEC
    {
        return Err(libc::EOPNOTSUPP);
    }
    // SAFETY: as the caller vouches.
    unsafe { read_addr(a, l) }.map(Some)
}

pub(super) unsafe extern "C" fn pd_write(
    ud: Ud,
    fd: c_int,
    buf: *const c_void,
    len: size_t,
) -> ssize_t {
    // SAFETY: `ud` is ours.
    ret(do_send(unsafe { world(ud) }, fd, buf, len, 0).map(|n| n as i64)) as ssize_t
}

pub(super) unsafe extern "C" fn pd_send(
    ud: Ud,
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: `ud` is ours.
    ret(do_send(unsafe { world(ud) }, fd, buf, len, flags).map(|n| n as i64)) as ssize_t
}

pub(super) unsafe extern "C" fn pd_sendto(
    ud: Ud,
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    a: *const sockaddr,
    l: socklen_t,
) -> ssize_t {
    // SAFETY: `ud` is ours. A connected stream socket ignores the address.
    let w = unsafe { world(ud) };
    if flags & libc::MSG_FASTOPEN != 0 {
        // SAFETY: `a` has `l` bytes or is null, per sendto(2).
        let r = unsafe { fastopen_addr(a, l) }.and_then(|to| {
            let data = send_buf(buf, len)?;
            w.send_fastopen(fd, to, data, flags & libc::MSG_DONTWAIT != 0)
        });
        return ret(r.map(|n| n as i64)) as ssize_t;
    }
    ret(do_send(w, fd, buf, len, flags).map(|n| n as i64)) as ssize_t
}

pub(super) unsafe extern "C" fn pd_writev(
    ud: Ud,
    fd: c_int,
    iov: *const iovec,
    n: c_int,
) -> ssize_t {
    // SAFETY: `ud` is ours; `iov` has `n` entries per writev(2).
    let r = unsafe { iovs(iov, n) }
        .and_then(gather)
        .and_then(|d| unsafe { world(ud) }.send(fd, &d, false, false, false));
    ret(r.map(|n| n as i64)) as ssize_t
}

pub(super) unsafe extern "C" fn pd_sendmsg(
    ud: Ud,
    fd: c_int,
    msg: *const msghdr,
    flags: c_int,
) -> ssize_t {
    if msg.is_null() {
        set_errno(libc::EFAULT);
        return -1;
    }
    // SAFETY: `ud` is ours; `msg` non-null per sendmsg(2).
    let r = unsafe {
        let m = &*msg;
        let data = iovs(m.msg_iov, m.msg_iovlen as c_int).and_then(gather);
        if flags & libc::MSG_FASTOPEN != 0 {
            let r = fastopen_addr(m.msg_name as *const sockaddr, m.msg_namelen).and_then(|to| {
                world(ud).send_fastopen(fd, to, &data?, flags & libc::MSG_DONTWAIT != 0)
            });
            return ret(r.map(|n| n as i64)) as ssize_t;
        }
        data.and_then(|d| {
            world(ud).send(
                fd,
                &d,
                flags & libc::MSG_MORE != 0,
                flags & libc::MSG_EOR != 0,
                flags & libc::MSG_DONTWAIT != 0,
            )
        })
    };
    ret(r.map(|n| n as i64)) as ssize_t
}

// SAFETY (ABI): packetdrill declares `fcntl` and `ioctl` variadic. On
// x86-64 System V a variadic call passes its integer and pointer arguments
// in the same registers as a fixed one, so one fixed trailing argument
// reads what packetdrill passed (or an unused register when it passed
// none, which these functions then ignore).
