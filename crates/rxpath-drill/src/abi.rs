//! packetdrill's `struct packetdrill_interface` (its `packetdrill.h`): the
//! C functions it calls, each turned into a [`Shared`] call. This is the
//! crate's interposition layer, the only place with `unsafe`: raw
//! pointers from C become slices and addresses here, checked for null.

use std::ffi::{c_char, c_int, c_long, c_uint, c_ulong, c_void, CStr};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

use libc::{epoll_event, iovec, msghdr, pollfd, size_t, sockaddr, socklen_t, ssize_t, timeval};
use rxpath_tcp::{Errno, SockOpt};

use crate::world::Shared;

type Ud = *mut c_void;

/// The interface's layout, field for field as `packetdrill.h` declares it.
#[repr(C)]
pub struct PacketdrillInterface {
    userdata: Ud,
    free: Option<unsafe extern "C" fn(Ud)>,
    socket: Option<unsafe extern "C" fn(Ud, c_int, c_int, c_int) -> c_int>,
    bind: Option<unsafe extern "C" fn(Ud, c_int, *const sockaddr, socklen_t) -> c_int>,
    listen: Option<unsafe extern "C" fn(Ud, c_int, c_int) -> c_int>,
    accept: Option<unsafe extern "C" fn(Ud, c_int, *mut sockaddr, *mut socklen_t) -> c_int>,
    connect: Option<unsafe extern "C" fn(Ud, c_int, *const sockaddr, socklen_t) -> c_int>,
    read: Option<unsafe extern "C" fn(Ud, c_int, *mut c_void, size_t) -> ssize_t>,
    readv: Option<unsafe extern "C" fn(Ud, c_int, *const iovec, c_int) -> ssize_t>,
    recv: Option<unsafe extern "C" fn(Ud, c_int, *mut c_void, size_t, c_int) -> ssize_t>,
    recvfrom: Option<
        unsafe extern "C" fn(
            Ud,
            c_int,
            *mut c_void,
            size_t,
            c_int,
            *mut sockaddr,
            *mut socklen_t,
        ) -> ssize_t,
    >,
    recvmsg: Option<unsafe extern "C" fn(Ud, c_int, *mut msghdr, c_int) -> ssize_t>,
    write: Option<unsafe extern "C" fn(Ud, c_int, *const c_void, size_t) -> ssize_t>,
    writev: Option<unsafe extern "C" fn(Ud, c_int, *const iovec, c_int) -> ssize_t>,
    send: Option<unsafe extern "C" fn(Ud, c_int, *const c_void, size_t, c_int) -> ssize_t>,
    sendto: Option<
        unsafe extern "C" fn(
            Ud,
            c_int,
            *const c_void,
            size_t,
            c_int,
            *const sockaddr,
            socklen_t,
        ) -> ssize_t,
    >,
    sendmsg: Option<unsafe extern "C" fn(Ud, c_int, *const msghdr, c_int) -> ssize_t>,
    fcntl: Option<unsafe extern "C" fn(Ud, c_int, c_int, c_long) -> c_int>,
    ioctl: Option<unsafe extern "C" fn(Ud, c_int, c_ulong, *mut c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(Ud, c_int) -> c_int>,
    shutdown: Option<unsafe extern "C" fn(Ud, c_int, c_int) -> c_int>,
    getsockopt:
        Option<unsafe extern "C" fn(Ud, c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int>,
    setsockopt:
        Option<unsafe extern "C" fn(Ud, c_int, c_int, c_int, *const c_void, socklen_t) -> c_int>,
    poll: Option<unsafe extern "C" fn(Ud, *mut pollfd, libc::nfds_t, c_int) -> c_int>,
    netdev_send: Option<unsafe extern "C" fn(Ud, *const c_void, size_t) -> c_int>,
    netdev_receive: Option<unsafe extern "C" fn(Ud, *mut c_void, *mut size_t, *mut i64) -> c_int>,
    usleep: Option<unsafe extern "C" fn(Ud, c_uint) -> c_int>,
    gettimeofday: Option<unsafe extern "C" fn(Ud, *mut timeval, *mut c_void) -> c_int>,
    epoll_create: Option<unsafe extern "C" fn(Ud, c_int) -> c_int>,
    epoll_ctl: Option<unsafe extern "C" fn(Ud, c_int, c_int, c_int, *mut epoll_event) -> c_int>,
    epoll_wait: Option<unsafe extern "C" fn(Ud, c_int, *mut epoll_event, c_int, c_int) -> c_int>,
    pipe: Option<unsafe extern "C" fn(Ud, *mut c_int) -> c_int>,
    splice: Option<
        unsafe extern "C" fn(Ud, c_int, *mut i64, c_int, *mut i64, size_t, c_uint) -> ssize_t,
    >,
}

fn set_errno(e: Errno) {
    // SAFETY: `__errno_location` returns this thread's errno slot, valid
    // for the thread's life.
    unsafe { *libc::__errno_location() = e };
}

fn ret<T: Into<i64>>(r: Result<T, Errno>) -> i64 {
    match r {
        Ok(v) => v.into(),
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// # Safety
/// `ud` is the pointer `packetdrill_interface_init` stored.
unsafe fn world<'a>(ud: Ud) -> &'a Shared {
    // SAFETY: the caller passes back the `Box<Shared>` leaked at init,
    // alive until `free`.
    unsafe { &*(ud as *const Shared) }
}

/// # Safety
/// `addr` points to `len` readable bytes, or is null.
unsafe fn read_addr(addr: *const sockaddr, len: socklen_t) -> Result<SocketAddr, Errno> {
    if addr.is_null() {
        return Err(libc::EFAULT);
    }
    if (len as usize) < size_of::<libc::sa_family_t>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: non-null, and the caller vouches for `len` bytes, which cover
    // the family (checked above) and, per family, the structure read
    // (checked in each arm); reads are unaligned, as C promises no more.
    unsafe {
        let family = std::ptr::read_unaligned(addr as *const libc::sa_family_t);
        match family as c_int {
            libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
                let a = std::ptr::read_unaligned(addr as *const libc::sockaddr_in);
                Ok(SocketAddr::new(
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr))),
                    u16::from_be(a.sin_port),
                ))
            }
            libc::AF_INET6 if len as usize >= size_of::<libc::sockaddr_in6>() => {
                let a = std::ptr::read_unaligned(addr as *const libc::sockaddr_in6);
                Ok(SocketAddr::new(
                    IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr)),
                    u16::from_be(a.sin6_port),
                ))
            }
            _ => Err(libc::EINVAL),
        }
    }
}

/// # Safety
/// `addr` points to `*len` writable bytes, or either is null.
unsafe fn write_addr(a: SocketAddr, addr: *mut sockaddr, len: *mut socklen_t) {
    if addr.is_null() || len.is_null() {
        return;
    }
    // SAFETY: both non-null; at most `*len` bytes are written.
    unsafe {
        let mut st: libc::sockaddr_storage = std::mem::zeroed();
        let n = match a {
            SocketAddr::V4(v4) => {
                let s = &mut *(&mut st as *mut _ as *mut libc::sockaddr_in);
                s.sin_family = libc::AF_INET as _;
                s.sin_port = v4.port().to_be();
                s.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
                size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(v6) => {
                let s = &mut *(&mut st as *mut _ as *mut libc::sockaddr_in6);
                s.sin6_family = libc::AF_INET6 as _;
                s.sin6_port = v6.port().to_be();
                s.sin6_addr.s6_addr = v6.ip().octets();
                size_of::<libc::sockaddr_in6>()
            }
        };
        let cap = (*len as usize).min(n);
        std::ptr::copy_nonoverlapping(&st as *const _ as *const u8, addr as *mut u8, cap);
        *len = n as socklen_t;
    }
}

/// # Safety
/// `iov` holds `n` valid `iovec`s, or is null with `n` 0.
unsafe fn iovs<'a>(iov: *const iovec, n: c_int) -> Result<&'a [iovec], Errno> {
    if !(0..=1024).contains(&n) {
        return Err(libc::EINVAL);
    }
    if n == 0 {
        return Ok(&[]);
    }
    if iov.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: non-null and `n` entries, the caller vouches.
    Ok(unsafe { std::slice::from_raw_parts(iov, n as usize) })
}

/// The most one call moves: reads and writes longer than this are cut,
/// as the kernel cuts at `MAX_RW_COUNT`.
const MAX_RW: usize = 1 << 30;

/// The total of an iovec array, `EINVAL` past `SSIZE_MAX` as readv(2).
fn iov_total(v: &[iovec]) -> Result<usize, Errno> {
    v.iter()
        .try_fold(0usize, |a, i| a.checked_add(i.iov_len))
        .filter(|&t| t <= isize::MAX as usize)
        .ok_or(libc::EINVAL)
}

fn gather(v: &[iovec]) -> Result<Vec<u8>, Errno> {
    iov_total(v)?;
    let mut out = Vec::new();
    for i in v {
        if i.iov_len == 0 {
            continue;
        }
        if i.iov_base.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: a non-null iovec entry from the caller covers its length.
        out.extend_from_slice(unsafe {
            std::slice::from_raw_parts(i.iov_base as *const u8, i.iov_len)
        });
    }
    Ok(out)
}

fn scatter(v: &[iovec], data: &[u8]) {
    let mut at = 0;
    for i in v {
        if at == data.len() {
            break;
        }
        let n = i.iov_len.min(data.len() - at);
        if n > 0 && !i.iov_base.is_null() {
            // SAFETY: a non-null iovec entry covers `iov_len` >= n bytes.
            unsafe { std::ptr::copy_nonoverlapping(data[at..].as_ptr(), i.iov_base as *mut u8, n) };
        }
        at += n;
    }
}

fn recv_flags(flags: c_int) -> (bool, bool, bool) {
    (
        flags & libc::MSG_PEEK != 0,
        flags & libc::MSG_WAITALL != 0,
        flags & libc::MSG_DONTWAIT != 0,
    )
}

fn do_recv(
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

fn do_send(
    w: &Shared,
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
) -> Result<usize, Errno> {
    if buf.is_null() && len > 0 {
        return Err(libc::EFAULT);
    }
    if len > isize::MAX as usize {
        return Err(libc::EINVAL);
    }
    let len = len.min(MAX_RW);
    let data: &[u8] = if len == 0 {
        &[]
    } else {
        // SAFETY: non-null, `len` bytes from the caller.
        unsafe { std::slice::from_raw_parts(buf as *const u8, len) }
    };
    w.send(
        fd,
        data,
        flags & libc::MSG_MORE != 0,
        flags & libc::MSG_EOR != 0,
        flags & libc::MSG_DONTWAIT != 0,
    )
}

unsafe extern "C" fn pd_free(ud: Ud) {
    if !ud.is_null() {
        let _ = CURRENT.compare_exchange(
            ud as *mut Shared,
            std::ptr::null_mut(),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        // SAFETY: the Box leaked at init, freed once, here.
        drop(unsafe { Box::from_raw(ud as *mut Shared) });
    }
}

unsafe extern "C" fn pd_socket(ud: Ud, domain: c_int, ty: c_int, _proto: c_int) -> c_int {
    // SAFETY: `ud` is ours (see `world`).
    ret(unsafe { world(ud) }.socket(domain, ty)) as c_int
}

unsafe extern "C" fn pd_bind(ud: Ud, fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: `ud` is ours; `addr` covers `len` bytes per bind(2).
    ret(unsafe { read_addr(addr, len) }
        .and_then(|a| unsafe { world(ud) }.bind(fd, a))
        .map(|_| 0)) as c_int
}

unsafe extern "C" fn pd_listen(ud: Ud, fd: c_int, backlog: c_int) -> c_int {
    // SAFETY: `ud` is ours.
    ret(unsafe { world(ud) }.listen(fd, backlog).map(|_| 0)) as c_int
}

unsafe extern "C" fn pd_accept(
    ud: Ud,
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> c_int {
    // SAFETY: `ud` is ours; `addr`/`len` as accept(2) takes them.
    let r = unsafe { world(ud) }.accept(fd).map(|(nfd, peer)| {
        // SAFETY: `addr`/`len` are accept(2)'s out-parameters, null or valid.
        unsafe { write_addr(peer, addr, len) };
        nfd
    });
    ret(r) as c_int
}

unsafe extern "C" fn pd_connect(ud: Ud, fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: `ud` is ours; `addr` covers `len` bytes per connect(2).
    ret(unsafe { read_addr(addr, len) }
        .and_then(|a| unsafe { world(ud) }.connect(fd, a))
        .map(|_| 0)) as c_int
}

unsafe extern "C" fn pd_read(ud: Ud, fd: c_int, buf: *mut c_void, len: size_t) -> ssize_t {
    // SAFETY: `ud` is ours.
    ret(do_recv(unsafe { world(ud) }, fd, buf, len, 0).map(|n| n as i64)) as ssize_t
}

unsafe extern "C" fn pd_recv(
    ud: Ud,
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: `ud` is ours.
    ret(do_recv(unsafe { world(ud) }, fd, buf, len, flags).map(|n| n as i64)) as ssize_t
}

unsafe extern "C" fn pd_recvfrom(
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

fn readv_into(w: &Shared, fd: c_int, v: &[iovec], flags: c_int) -> Result<usize, Errno> {
    let total = iov_total(v)?.min(MAX_RW);
    let mut tmp = vec![0u8; total];
    let (peek, waitall, dontwait) = recv_flags(flags);
    let n = w.recv(fd, &mut tmp, peek, waitall, dontwait)?;
    scatter(v, &tmp[..n]);
    Ok(n)
}

unsafe extern "C" fn pd_readv(ud: Ud, fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    // SAFETY: `ud` is ours; `iov` has `n` entries per readv(2).
    let r = unsafe { iovs(iov, n) }.and_then(|v| readv_into(unsafe { world(ud) }, fd, v, 0));
    ret(r.map(|n| n as i64)) as ssize_t
}

unsafe extern "C" fn pd_recvmsg(ud: Ud, fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
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

unsafe extern "C" fn pd_write(ud: Ud, fd: c_int, buf: *const c_void, len: size_t) -> ssize_t {
    // SAFETY: `ud` is ours.
    ret(do_send(unsafe { world(ud) }, fd, buf, len, 0).map(|n| n as i64)) as ssize_t
}

unsafe extern "C" fn pd_send(
    ud: Ud,
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: `ud` is ours.
    ret(do_send(unsafe { world(ud) }, fd, buf, len, flags).map(|n| n as i64)) as ssize_t
}

unsafe extern "C" fn pd_sendto(
    ud: Ud,
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    _a: *const sockaddr,
    _l: socklen_t,
) -> ssize_t {
    // SAFETY: `ud` is ours. A connected stream socket ignores the address.
    ret(do_send(unsafe { world(ud) }, fd, buf, len, flags).map(|n| n as i64)) as ssize_t
}

unsafe extern "C" fn pd_writev(ud: Ud, fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    // SAFETY: `ud` is ours; `iov` has `n` entries per writev(2).
    let r = unsafe { iovs(iov, n) }
        .and_then(gather)
        .and_then(|d| unsafe { world(ud) }.send(fd, &d, false, false, false));
    ret(r.map(|n| n as i64)) as ssize_t
}

unsafe extern "C" fn pd_sendmsg(ud: Ud, fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    if msg.is_null() {
        set_errno(libc::EFAULT);
        return -1;
    }
    // SAFETY: `ud` is ours; `msg` non-null per sendmsg(2).
    let r = unsafe {
        let m = &*msg;
        iovs(m.msg_iov, m.msg_iovlen as c_int)
            .and_then(gather)
            .and_then(|d| {
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
unsafe extern "C" fn pd_fcntl(ud: Ud, fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    // SAFETY: `ud` is ours.
    ret(unsafe { world(ud) }.fcntl(fd, cmd, arg)) as c_int
}

unsafe extern "C" fn pd_ioctl(ud: Ud, fd: c_int, req: c_ulong, arg: *mut c_int) -> c_int {
    if arg.is_null() {
        set_errno(libc::EFAULT);
        return -1;
    }
    // Only FIONBIO passes a value in; for the others `*arg` is out only.
    let input = if req == libc::FIONBIO {
        // SAFETY: `arg` is non-null (checked above) and an `int *` for FIONBIO.
        unsafe { *arg }
    } else {
        0
    };
    // SAFETY: `ud` is ours.
    let r = unsafe { world(ud) }.ioctl(fd, req, input).map(|v| {
        if req != libc::FIONBIO {
            // SAFETY: `arg` was checked non-null; the requests that fill it take an `int *`.
            unsafe { *arg = v };
        }
        0
    });
    ret(r) as c_int
}

unsafe extern "C" fn pd_close(ud: Ud, fd: c_int) -> c_int {
    // SAFETY: `ud` is ours; `fd` is the `/dev/null` descriptor the world
    // opened for this socket (`World::new_fd`), closed once, here.
    let w = unsafe { world(ud) };
    let ours = w.owns(fd);
    let r = w.close(fd);
    if ours {
        // SAFETY: the world no longer names `fd`, its `/dev/null`
        // descriptor, whatever the stack said: closed once, here.
        unsafe { libc::close(fd) };
    }
    ret(r.map(|_| 0)) as c_int
}

unsafe extern "C" fn pd_shutdown(ud: Ud, fd: c_int, how: c_int) -> c_int {
    // SAFETY: `ud` is ours.
    ret(unsafe { world(ud) }.shutdown(fd, how).map(|_| 0)) as c_int
}

unsafe extern "C" fn pd_getsockopt(
    ud: Ud,
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    if val.is_null() || len.is_null() {
        set_errno(libc::EFAULT);
        return -1;
    }
    // SAFETY: `ud` is ours; `val` holds `*len` bytes per getsockopt(2).
    let w = unsafe { world(ud) };
    let r = if (level, name) == (libc::IPPROTO_TCP, libc::TCP_INFO) {
        w.tcp_info(fd).map(|b| {
            // SAFETY: at most `*len` bytes are written to `val`.
            unsafe {
                let n = (*len as usize).min(b.len());
                std::ptr::copy_nonoverlapping(b.as_ptr(), val as *mut u8, n);
                *len = n as socklen_t;
            }
            0
        })
    } else if (level, name) == (libc::IPPROTO_TCP, libc::TCP_CC_INFO) {
        // CUBIC has no `get_info`: the kernel copies out nothing.
        w.getsockopt(fd, SockOpt::NoDelay).map(|_| {
            // SAFETY: `len` non-null (checked above).
            unsafe { *len = 0 };
            0
        })
    } else if (level, name) == (libc::SOL_SOCKET, libc::SO_MEMINFO) {
        w.meminfo(fd).map(|m| {
            // SAFETY: `val` holds `*len` bytes.
            unsafe { copy_out(&m, val, len) };
            0
        })
    } else if (level, name) == (libc::SOL_SOCKET, libc::SO_LINGER) {
        w.getsockopt(fd, SockOpt::Linger).map(|l| {
            let lg = libc::linger {
                l_onoff: (l >= 0) as c_int,
                l_linger: l.max(0),
            };
            // SAFETY: `val` holds `*len` bytes (getsockopt(2)); `copy_out` writes at most that.
            unsafe { copy_out(&lg, val, len) };
            0
        })
    } else {
        match SockOpt::by_name(level, name) {
            None => Err(libc::ENOPROTOOPT),
            Some(o) => w.getsockopt(fd, o).map(|v| {
                // SAFETY: as above.
                unsafe { copy_out(&v, val, len) };
                0
            }),
        }
    };
    ret(r) as c_int
}

/// # Safety
/// `val` holds `*len` writable bytes.
unsafe fn copy_out<T>(v: &T, val: *mut c_void, len: *mut socklen_t) {
    // SAFETY: at most `*len` bytes of `v` are copied out.
    unsafe {
        let n = (*len as usize).min(size_of::<T>());
        std::ptr::copy_nonoverlapping(v as *const T as *const u8, val as *mut u8, n);
        *len = n as socklen_t;
    }
}

unsafe extern "C" fn pd_setsockopt(
    ud: Ud,
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    if val.is_null() {
        set_errno(libc::EFAULT);
        return -1;
    }
    // SAFETY: `ud` is ours; `val` holds `len` bytes per setsockopt(2).
    let w = unsafe { world(ud) };
    let r = if (level, name) == (libc::SOL_SOCKET, libc::SO_LINGER) {
        if (len as usize) < size_of::<libc::linger>() {
            Err(libc::EINVAL)
        } else {
            // SAFETY: `val` holds `len` >= sizeof(struct linger) bytes, checked above.
            let lg = unsafe { std::ptr::read_unaligned(val as *const libc::linger) };
            w.setsockopt(
                fd,
                SockOpt::Linger,
                if lg.l_onoff != 0 { lg.l_linger } else { -1 },
            )
        }
    } else if level == libc::IPPROTO_IP
        && (len as usize) >= 1
        && matches!(name, libc::IP_TOS | libc::IP_MTU_DISCOVER)
    {
        // `do_ip_setsockopt` takes an int, or a single byte.
        let v = if (len as usize) >= size_of::<c_int>() {
            // SAFETY: `val` holds `len` >= sizeof(int) bytes.
            unsafe { std::ptr::read_unaligned(val as *const c_int) }
        } else {
            // SAFETY: `val` holds at least one byte (`len >= 1`).
            unsafe { *(val as *const u8) as c_int }
        };
        match name {
            libc::IP_TOS => w.setsockopt(fd, SockOpt::Tos, v),
            // Path-MTU discovery is the device layer's; accepted.
            _ => w.getsockopt(fd, SockOpt::NoDelay).map(|_| ()),
        }
    } else if (len as usize) < size_of::<c_int>() {
        Err(libc::EINVAL)
    } else {
        // SAFETY: `val` holds `len` >= sizeof(int) bytes, checked above.
        let v = unsafe { std::ptr::read_unaligned(val as *const c_int) };
        match SockOpt::by_name(level, name) {
            Some(o) => w.setsockopt(fd, o, v),
            // Accepted and without effect on the wire here.
            // Sends are copied whatever MSG_ZEROCOPY says, and no
            // completion is queued: accepted for the scripts' sake, said in
            // docs/RELIABILITY.md.
            None if (level, name) == (libc::SOL_SOCKET, libc::SO_ZEROCOPY) => Ok(()),
            None if (level, name) == (libc::SOL_SOCKET, libc::SO_REUSEPORT)
                || (level, name) == (libc::IPPROTO_TCP, libc::TCP_QUICKACK) =>
            {
                Ok(())
            }
            None => Err(libc::ENOPROTOOPT),
        }
    };
    ret(r.map(|_| 0)) as c_int
}

unsafe extern "C" fn pd_poll(ud: Ud, fds: *mut pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    if fds.is_null() && n > 0 {
        set_errno(libc::EFAULT);
        return -1;
    }
    // SAFETY: `fds` holds `n` entries per poll(2); `ud` is ours.
    let p = if n == 0 {
        &mut [][..]
    } else {
        // SAFETY: `fds` is non-null (checked above) and holds `n` entries (poll(2)).
        unsafe { std::slice::from_raw_parts_mut(fds, n as usize) }
    };
    let want: Vec<(i32, u32)> = p.iter().map(|f| (f.fd, f.events as u16 as u32)).collect();
    // SAFETY: `ud` is ours.
    let r = unsafe { world(ud) }.poll(&want, timeout).map(|got| {
        let mut ready = 0;
        for (f, g) in p.iter_mut().zip(got) {
            f.revents = g as i16;
            ready += (g != 0) as i32;
        }
        ready
    });
    ret(r) as c_int
}

unsafe extern "C" fn pd_netdev_send(ud: Ud, buf: *const c_void, len: size_t) -> c_int {
    if buf.is_null() {
        return -1;
    }
    // SAFETY: `buf` holds `len` bytes of an IP packet; `ud` is ours.
    unsafe { world(ud).netdev_send(std::slice::from_raw_parts(buf as *const u8, len)) };
    0
}

unsafe extern "C" fn pd_netdev_receive(
    ud: Ud,
    buf: *mut c_void,
    count: *mut size_t,
    time_us: *mut i64,
) -> c_int {
    if buf.is_null() || count.is_null() || time_us.is_null() {
        return -1;
    }
    // SAFETY: `ud` is ours; `buf` holds `*count` bytes, per packetdrill.h.
    match unsafe { world(ud) }.netdev_receive() {
        // SAFETY: `buf` holds `*count` bytes and `count`/`time_us` are valid (checked non-null above).
        Some((p, t)) => unsafe {
            let n = p.len().min(*count);
            std::ptr::copy_nonoverlapping(p.as_ptr(), buf as *mut u8, n);
            *count = n;
            *time_us = t as i64;
            0
        },
        None => {
            // packetdrill's loop here has no timeout of its own: say why
            // the run ends instead of spinning for ever.
            eprintln!("rxpath-drill: the script waits for a packet the stack will not send (no data, no timer)");
            std::process::exit(1);
        }
    }
}

unsafe extern "C" fn pd_usleep(ud: Ud, us: c_uint) -> c_int {
    // SAFETY: `ud` is ours.
    unsafe { world(ud) }.usleep(us as u64);
    0
}

unsafe extern "C" fn pd_gettimeofday(ud: Ud, tv: *mut timeval, _tz: *mut c_void) -> c_int {
    if tv.is_null() {
        return -1;
    }
    // SAFETY: `ud` is ours; `tv` non-null.
    unsafe {
        let us = world(ud).now_us();
        (*tv).tv_sec = (us / 1_000_000) as _;
        (*tv).tv_usec = (us % 1_000_000) as _;
    }
    0
}

unsafe extern "C" fn pd_epoll_create(ud: Ud, size: c_int) -> c_int {
    if size <= 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: `ud` is ours.
    ret(unsafe { world(ud) }.epoll_create()) as c_int
}

unsafe extern "C" fn pd_epoll_ctl(
    ud: Ud,
    epfd: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut epoll_event,
) -> c_int {
    let (events, data) = if ev.is_null() {
        if op != libc::EPOLL_CTL_DEL {
            set_errno(libc::EFAULT);
            return -1;
        }
        (0, 0)
    } else {
        // SAFETY: non-null, one event per epoll_ctl(2) (packed on x86-64).
        let e = unsafe { std::ptr::read_unaligned(ev) };
        (e.events, e.u64)
    };
    // SAFETY: `ud` is ours.
    ret(unsafe { world(ud) }
        .epoll_ctl(epfd, op, fd, events, data)
        .map(|_| 0)) as c_int
}

unsafe extern "C" fn pd_epoll_wait(
    ud: Ud,
    epfd: c_int,
    evs: *mut epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    if evs.is_null() || max <= 0 {
        set_errno(if evs.is_null() {
            libc::EFAULT
        } else {
            libc::EINVAL
        });
        return -1;
    }
    // SAFETY: `ud` is ours; `evs` holds `max` events per epoll_wait(2).
    let r = unsafe { world(ud) }
        .epoll_wait(epfd, max as usize, timeout)
        .map(|ready| {
            for (i, (data, events)) in ready.iter().take(max as usize).enumerate() {
                // SAFETY: `evs` holds `max` entries (epoll_wait(2)) and `i < max`.
                unsafe {
                    std::ptr::write_unaligned(
                        evs.add(i),
                        epoll_event {
                            events: *events,
                            u64: *data,
                        },
                    )
                };
            }
            ready.len() as i32
        });
    ret(r) as c_int
}

unsafe extern "C" fn pd_pipe(_ud: Ud, _fds: *mut c_int) -> c_int {
    set_errno(libc::ENOSYS);
    -1
}

unsafe extern "C" fn pd_splice(
    _ud: Ud,
    _a: c_int,
    _b: *mut i64,
    _c: c_int,
    _d: *mut i64,
    _e: size_t,
    _f: c_uint,
) -> ssize_t {
    set_errno(libc::ENOSYS);
    -1
}

/// The world packetdrill made, for [`getsockopt`] below.
static CURRENT: AtomicPtr<Shared> = AtomicPtr::new(std::ptr::null_mut());

type GetsockoptFn = unsafe extern "C" fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int;

/// `getsockopt(2)` for a process that preloaded this library
/// (`LD_PRELOAD`): packetdrill reads `TCP_INFO` for a script's
/// `%{ ... }%` assertions with its own `getsockopt` on the socket's
/// number, not through the interface; a number of ours is answered here,
/// every other goes on to the C library's.
///
/// # Safety
/// As `getsockopt(2)`.
#[no_mangle]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    let w = CURRENT.load(Ordering::Acquire);
    // SAFETY: a non-null CURRENT is the live world (cleared in `pd_free`
    // before it is dropped).
    if !w.is_null() && unsafe { &*w }.owns(fd) {
        // SAFETY: as above; the arguments are the caller's.
        return unsafe { pd_getsockopt(w as Ud, fd, level, name, val, len) };
    }
    static NEXT: OnceLock<usize> = OnceLock::new();
    let next = *NEXT.get_or_init(|| {
        // SAFETY: a C string literal; RTLD_NEXT finds the C library's.
        unsafe { libc::dlsym(libc::RTLD_NEXT, c"getsockopt".as_ptr()) as usize }
    });
    if next == 0 {
        set_errno(libc::ENOSYS);
        return -1;
    }
    // SAFETY: the C library's getsockopt has this signature.
    unsafe {
        let f: GetsockoptFn = std::mem::transmute::<usize, GetsockoptFn>(next);
        f(fd, level, name, val, len)
    }
}

/// What packetdrill calls first: fill in the interface.
///
/// # Safety
/// `ifc` points to a writable `struct packetdrill_interface`; `flags` is
/// null or a C string.
#[no_mangle]
pub unsafe extern "C" fn packetdrill_interface_init(
    flags: *const c_char,
    ifc: *mut PacketdrillInterface,
) {
    if ifc.is_null() {
        return;
    }
    let flags = if flags.is_null() {
        String::new()
    } else {
        // SAFETY: a C string from packetdrill's command line.
        unsafe { CStr::from_ptr(flags) }
            .to_string_lossy()
            .into_owned()
    };
    let flags = match crate::parse_flags(&crate::with_env_defaults(&flags)) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("rxpath-drill: {e}");
            std::process::exit(2);
        }
    };
    let raw = Box::into_raw(Box::new(Shared::new(flags.local_addrs, flags.mtu)));
    CURRENT.store(raw, Ordering::Release);
    let shared = raw as Ud;
    // SAFETY: packetdrill hands a valid interface to fill.
    unsafe {
        ifc.write(PacketdrillInterface {
            userdata: shared,
            free: Some(pd_free),
            socket: Some(pd_socket),
            bind: Some(pd_bind),
            listen: Some(pd_listen),
            accept: Some(pd_accept),
            connect: Some(pd_connect),
            read: Some(pd_read),
            readv: Some(pd_readv),
            recv: Some(pd_recv),
            recvfrom: Some(pd_recvfrom),
            recvmsg: Some(pd_recvmsg),
            write: Some(pd_write),
            writev: Some(pd_writev),
            send: Some(pd_send),
            sendto: Some(pd_sendto),
            sendmsg: Some(pd_sendmsg),
            fcntl: Some(pd_fcntl),
            ioctl: Some(pd_ioctl),
            close: Some(pd_close),
            shutdown: Some(pd_shutdown),
            getsockopt: Some(pd_getsockopt),
            setsockopt: Some(pd_setsockopt),
            poll: Some(pd_poll),
            netdev_send: Some(pd_netdev_send),
            netdev_receive: Some(pd_netdev_receive),
            usleep: Some(pd_usleep),
            gettimeofday: Some(pd_gettimeofday),
            epoll_create: Some(pd_epoll_create),
            epoll_ctl: Some(pd_epoll_ctl),
            epoll_wait: Some(pd_epoll_wait),
            pipe: Some(pd_pipe),
            splice: Some(pd_splice),
        })
    };
}
