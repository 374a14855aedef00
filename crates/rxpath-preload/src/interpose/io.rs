//! The data calls: reads (`recv*`, `read*`, with packet information) and
//! sends (`send*`, `write*`, with `IP_PKTINFO` and `UDP_SEGMENT`).

use super::{addr_in, addr_out, buf, buf_mut, fail, gather, iovs, recv_iov, ret, tcp};
use crate::ops::{self, Route};
use crate::sys::real;
use crate::table;
use libc::{
    c_int, c_uint, c_void, iovec, mmsghdr, msghdr, size_t, sockaddr, socklen_t, ssize_t, timespec,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

#[no_mangle]
pub extern "C" fn recvfrom(
    fd: c_int,
    b: *mut c_void,
    n: size_t,
    flags: c_int,
    from: *mut sockaddr,
    fromlen: *mut socklen_t,
) -> ssize_t {
    if let Some(t) = table::tcp(fd) {
        let r = tcp::recv(&t, b, n, flags);
        if r >= 0 {
            addr_out(None, from, fromlen);
        }
        return r;
    }
    let Some(a) = ops::Rx::of(fd) else {
        // SAFETY: the C library's recvfrom with the program's arguments.
        return unsafe { real::recvfrom()(fd, b, n, flags, from, fromlen) };
    };
    let rx = || {
        a.recv(buf_mut(b, n), flags).map(|g| {
            addr_out(g.src, from, fromlen);
            g.len
        })
    };
    // SAFETY: the C library's recvfrom with the program's arguments.
    let kernel = |f| unsafe { real::recvfrom()(fd, b, n, flags | f, from, fromlen) };
    read_either(fd, &a, rx, kernel)
}

/// A read of `a` with `rx`; when rxpath's queue is empty and the kernel
/// socket behind the fd holds a datagram ([`ops::NotRead::FromKernel`]), with
/// `kernel` instead: the program's own call on that socket, with the extra
/// flag `MSG_DONTWAIT`. A stale mark (`EAGAIN`) goes back to `rx`. An fd
/// that is the kernel's now ([`ops::NotRead::KernelNow`]) gets the call as
/// it is.
fn read_either(
    fd: c_int,
    a: &ops::Rx,
    mut rx: impl FnMut() -> Result<usize, ops::NotRead>,
    mut kernel: impl FnMut(c_int) -> ssize_t,
) -> ssize_t {
    loop {
        match rx() {
            Err(ops::NotRead::KernelNow) => return kernel(0),
            Err(ops::NotRead::FromKernel) => {
                let r = kernel(libc::MSG_DONTWAIT);
                if r >= 0 {
                    a.got_kernel(fd);
                    return r;
                }
                let e = std::io::Error::last_os_error().raw_os_error();
                if e != Some(libc::EAGAIN) {
                    return r;
                }
            }
            Err(ops::NotRead::Errno(e)) => return fail(e),
            Ok(n) => return n as ssize_t,
        }
    }
}

#[no_mangle]
pub extern "C" fn recv(fd: c_int, b: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    if let Some(t) = table::tcp(fd) {
        return tcp::recv(&t, b, n, flags);
    }
    let Some(a) = ops::Rx::of(fd) else {
        // SAFETY: the C library's recv with the program's arguments.
        return unsafe { real::recv()(fd, b, n, flags) };
    };
    let rx = || a.recv(buf_mut(b, n), flags).map(|g| g.len);
    // SAFETY: the C library's recv with the program's arguments.
    let kernel = |f| unsafe { real::recv()(fd, b, n, flags | f) };
    read_either(fd, &a, rx, kernel)
}

#[no_mangle]
pub extern "C" fn read(fd: c_int, b: *mut c_void, n: size_t) -> ssize_t {
    if let Some(t) = table::tcp(fd) {
        return tcp::recv(&t, b, n, 0);
    }
    let Some(a) = ops::Rx::of(fd) else {
        // SAFETY: the C library's read with the program's arguments.
        return unsafe { real::read()(fd, b, n) };
    };
    let rx = || a.recv(buf_mut(b, n), 0).map(|g| g.len);
    // SAFETY: the C library's recv with the program's buffer.
    let kernel = |f| unsafe { real::recv()(fd, b, n, f) };
    read_either(fd, &a, rx, kernel)
}

#[no_mangle]
pub extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    if let Some(t) = table::tcp(fd) {
        return ret(tcp::recv_iov(&t, iovs(iov, cnt.max(0) as usize), 0));
    }
    let Some(a) = ops::Rx::of(fd) else {
        // SAFETY: the C library's readv with the program's arguments.
        return unsafe { real::readv()(fd, iov, cnt) };
    };
    let rx = || recv_iov(&a, iovs(iov, cnt.max(0) as usize), 0).map(|g| g.len);
    let kernel = |f| {
        // SAFETY: all-zero is a valid msghdr (no name, no control).
        let mut m: msghdr = unsafe { std::mem::zeroed() };
        m.msg_iov = iov.cast_mut();
        m.msg_iovlen = cnt.max(0) as _;
        // SAFETY: the C library's recvmsg over the program's iovecs.
        unsafe { real::recvmsg()(fd, &mut m, f) }
    };
    read_either(fd, &a, rx, kernel)
}

/// `recvmsg` into `m` for an rxpath socket, with the control messages
/// the socket asked for: packet information (`IP_PKTINFO`,
/// `IPV6_RECVPKTINFO`), the TOS byte or traffic class (`IP_RECVTOS`,
/// `IPV6_RECVTCLASS`) and a GRO packet's segment size (`UDP_GRO`), in the
/// kernel's order.
fn recvmsg_one(a: &ops::Rx, m: &mut msghdr, flags: c_int) -> Result<usize, ops::NotRead> {
    let g = recv_iov(a, iovs(m.msg_iov, m.msg_iovlen), flags)?;
    addr_out(g.src, m.msg_name.cast(), &mut m.msg_namelen);
    m.msg_flags = if g.truncated { libc::MSG_TRUNC } else { 0 };
    let want = a.cmsgs();
    let mut used = 0;
    if g.src.is_some() && want != 0 {
        control(a, m, &g, want, &mut used);
    }
    m.msg_controllen = used as _;
    Ok(g.len)
}

/// The control messages of one read (`udp_cmsg_recv`, then
/// `ip_cmsg_recv` or `ip6_datagram_recv_ctl`).
fn control(a: &ops::Rx, m: &mut msghdr, g: &ops::Got, want: u16, used: &mut usize) {
    use crate::udp::sock::{GRO, PKTINFO4, PKTINFO6, RECVTCLASS, RECVTOS, UDP_GRO};
    socket_control(m, g, want, used);
    if want & GRO != 0 && g.stride > 0 && g.stride < g.len {
        let seg = g.stride as c_int;
        put_cmsg(m, used, libc::IPPROTO_UDP, UDP_GRO, &seg);
    }
    let ifindex = crate::host::global().ifindex();
    if let IpAddr::V4(d) = g.dst {
        if want & PKTINFO4 != 0 {
            let addr = libc::in_addr {
                s_addr: u32::from(d).to_be(),
            };
            let info = libc::in_pktinfo {
                ipi_ifindex: ifindex as c_int,
                ipi_spec_dst: addr,
                ipi_addr: addr,
            };
            put_cmsg(m, used, libc::IPPROTO_IP, libc::IP_PKTINFO, &info);
        }
        if want & RECVTOS != 0 {
            put_cmsg(m, used, libc::IPPROTO_IP, libc::IP_TOS, &g.tos);
        }
    }
    let d6 = match g.dst {
        IpAddr::V6(d) => Some(d),
        IpAddr::V4(d) if a.v6() => Some(d.to_ipv6_mapped()),
        IpAddr::V4(_) => None,
    };
    if let (Some(d), true) = (d6, want & PKTINFO6 != 0) {
        let info = In6Pktinfo {
            addr: d.octets(),
            ifindex,
        };
        put_cmsg(m, used, libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, &info);
    }
    if let (IpAddr::V6(_), true) = (g.dst, want & RECVTCLASS != 0) {
        let tclass = g.tos as c_int;
        put_cmsg(m, used, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, &tclass);
    }
}

/// `sock_recv_cmsgs`: the time the NAPI took the datagram
/// (`SO_TIMESTAMP*`, `CLOCK_REALTIME`), then the socket's drops when it was
/// queued (`SO_RXQ_OVFL`, only when not 0).
fn socket_control(m: &mut msghdr, g: &ops::Got, want: u16, used: &mut usize) {
    use crate::udp::sock::{RXQ_OVFL, SO_TIMESTAMPNS_NEW, SO_TIMESTAMP_NEW};
    use crate::udp::sock::{TIMESTAMP, TIMESTAMP_NEW, TIMESTAMP_NS};
    if want & TIMESTAMP != 0 && g.stamp_ns != 0 {
        // The NAPI's monotonic time, moved onto the wall clock.
        let ago = rxpath_dev::mono_ns().saturating_sub(g.stamp_ns);
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .saturating_sub(Duration::from_nanos(ago));
        let (sec, nsec) = (wall.as_secs() as i64, wall.subsec_nanos() as i64);
        let new = want & TIMESTAMP_NEW != 0;
        if want & TIMESTAMP_NS != 0 {
            let ty = if new {
                SO_TIMESTAMPNS_NEW
            } else {
                libc::SO_TIMESTAMPNS
            };
            put_cmsg(m, used, libc::SOL_SOCKET, ty, &[sec, nsec]);
        } else {
            let ty = if new {
                SO_TIMESTAMP_NEW
            } else {
                libc::SO_TIMESTAMP
            };
            put_cmsg(m, used, libc::SOL_SOCKET, ty, &[sec, nsec / 1000]);
        }
    }
    if want & RXQ_OVFL != 0 && g.drops != 0 {
        put_cmsg(m, used, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, &g.drops);
    }
}

/// `struct in6_pktinfo`.
#[repr(C)]
#[derive(Clone, Copy)]
struct In6Pktinfo {
    addr: [u8; 16],
    ifindex: u32,
}

/// Append one control message to `m`'s buffer at `*used`, or mark the
/// message `MSG_CTRUNC` when it does not fit (as the kernel does).
fn put_cmsg<T: Copy>(m: &mut msghdr, used: &mut usize, level: c_int, ty: c_int, data: &T) {
    let len = std::mem::size_of::<T>() as u32;
    // SAFETY: CMSG_SPACE and CMSG_LEN only compute sizes.
    let (space, clen) = unsafe { (libc::CMSG_SPACE(len) as usize, libc::CMSG_LEN(len) as usize) };
    if m.msg_control.is_null() || *used + space > m.msg_controllen {
        m.msg_flags |= libc::MSG_CTRUNC;
        return;
    }
    let hdr = libc::cmsghdr {
        cmsg_len: clen as _,
        cmsg_level: level,
        cmsg_type: ty,
    };
    // SAFETY: `used + space` bytes fit in the program's control buffer
    // (checked above); the header and the data are written unaligned.
    unsafe {
        let at = m.msg_control.cast::<u8>().add(*used);
        std::ptr::write_unaligned(at.cast::<libc::cmsghdr>(), hdr);
        let data_at = at.add(libc::CMSG_LEN(0) as usize);
        std::ptr::write_unaligned(data_at.cast::<T>(), *data);
    }
    *used += space;
}

/// What a send's control messages ask: a source address (`IP_PKTINFO` /
/// `IPV6_PKTINFO`) and a segment size (`UDP_SEGMENT`); `Err` for any
/// other control message, which rxpath does not honour.
fn send_source(m: &msghdr) -> Result<(Option<IpAddr>, Option<u16>), &'static str> {
    if m.msg_control.is_null() || m.msg_controllen == 0 {
        return Ok((None, None));
    }
    let mut src = None;
    let mut seg = None;
    // SAFETY: the program's msghdr with `msg_controllen` bytes of control
    // messages; CMSG_FIRSTHDR/NXTHDR stay inside them, and each message's
    // data is read only if its length covers it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(m);
        while !c.is_null() {
            let h = std::ptr::read_unaligned(c);
            let data = libc::CMSG_DATA(c);
            let n = (h.cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
            let v4 = std::mem::size_of::<libc::in_pktinfo>();
            let v6 = std::mem::size_of::<In6Pktinfo>();
            match (h.cmsg_level, h.cmsg_type) {
                (libc::IPPROTO_IP, libc::IP_PKTINFO) if n >= v4 => {
                    let i = std::ptr::read_unaligned(data.cast::<libc::in_pktinfo>());
                    let a = Ipv4Addr::from(u32::from_be(i.ipi_spec_dst.s_addr));
                    src = Some(IpAddr::V4(a));
                }
                (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) if n >= v6 => {
                    let i = std::ptr::read_unaligned(data.cast::<In6Pktinfo>());
                    src = Some(IpAddr::V6(Ipv6Addr::from(i.addr)));
                }
                (libc::IPPROTO_UDP, crate::udp::sock::UDP_SEGMENT) if n >= 2 => {
                    seg = Some(std::ptr::read_unaligned(data.cast::<u16>()));
                }
                _ => return Err("sendmsg with control messages other than IP_PKTINFO"),
            }
            c = libc::CMSG_NXTHDR(m, c);
        }
    }
    Ok((src, seg))
}

#[no_mangle]
pub extern "C" fn recvmsg(fd: c_int, m: *mut msghdr, flags: c_int) -> ssize_t {
    if let Some(t) = table::tcp(fd) {
        return tcp::recvmsg(&t, m, flags);
    }
    let Some(a) = ops::Rx::of(fd) else {
        // SAFETY: the C library's recvmsg with the program's arguments.
        return unsafe { real::recvmsg()(fd, m, flags) };
    };
    if m.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: the program passed a writable msghdr for this call.
    let rx = || recvmsg_one(&a, unsafe { &mut *m }, flags);
    // SAFETY: the C library's recvmsg with the program's arguments.
    let kernel = |f| unsafe { real::recvmsg()(fd, m, flags | f) };
    read_either(fd, &a, rx, kernel)
}

/// When a `recvmmsg` with this timeout stops taking more (checked after
/// each message, as `do_recvmmsg` checks it).
pub(super) fn deadline(timeout: *const timespec) -> Option<std::time::Instant> {
    (!timeout.is_null()).then(|| {
        // SAFETY: a non-null timeout is a readable timespec.
        let t = unsafe { *timeout };
        std::time::Instant::now()
            + Duration::new(
                t.tv_sec.max(0) as u64,
                t.tv_nsec.clamp(0, 999_999_999) as u32,
            )
    })
}

#[no_mangle]
pub extern "C" fn recvmmsg(
    fd: c_int,
    v: *mut mmsghdr,
    vlen: c_uint,
    flags: c_int,
    timeout: *mut timespec,
) -> c_int {
    if let Some(t) = table::tcp(fd) {
        return tcp::recvmmsg(&t, v, vlen, flags, deadline(timeout));
    }
    let Some(a) = ops::Rx::of(fd) else {
        // SAFETY: the C library's recvmmsg with the program's arguments.
        return unsafe { real::recvmmsg()(fd, v, vlen, flags, timeout) };
    };
    if v.is_null() {
        return fail(libc::EFAULT) as c_int;
    }
    // SAFETY: the program passed `vlen` writable mmsghdrs at `v`.
    let msgs = unsafe { std::slice::from_raw_parts_mut(v, vlen as usize) };
    let end = deadline(timeout);
    let mut n = 0;
    while n < msgs.len() {
        // What is queued goes in one batch; one at a time otherwise.
        let k = recv_batch(&a, &mut msgs[n..], flags);
        if k > 0 {
            n += k;
            if end.is_some_and(|e| std::time::Instant::now() >= e) {
                break;
            }
            continue;
        }
        let m = &mut msgs[n];
        // After the first: MSG_WAITFORONE takes only what is queued.
        let f = if n > 0 && flags & libc::MSG_WAITFORONE != 0 {
            flags | libc::MSG_DONTWAIT
        } else {
            flags
        };
        let h: *mut msghdr = &mut m.msg_hdr;
        // SAFETY: `h` is the program's writable msghdr in this mmsghdr.
        let rx = || recvmsg_one(&a, unsafe { &mut *h }, f);
        let kf = f & !libc::MSG_WAITFORONE;
        // SAFETY: the C library's recvmsg with the program's msghdr.
        let kernel = |x| unsafe { real::recvmsg()(fd, h, kf | x) };
        let r = read_either(fd, &a, rx, kernel);
        if r >= 0 {
            m.msg_len = r as c_uint;
            n += 1;
        } else if n == 0 {
            return -1;
        } else {
            break;
        }
        if end.is_some_and(|e| std::time::Instant::now() >= e) {
            break;
        }
    }
    n as c_int
}

/// The longest batch [`recv_batch`] takes.
const RECV_BATCH: usize = 32;

/// The datagrams queued on `a`, read into `msgs` in one batch
/// ([`ops::take_many`]): only on an rxpath socket, and only into messages
/// of one buffer each. Returns how many (0: read one at a time instead).
fn recv_batch(a: &ops::Rx, msgs: &mut [mmsghdr], flags: c_int) -> usize {
    let ops::Rx::Sock(s) = a else { return 0 };
    let mut bufs = arrayvec::ArrayVec::<&mut [u8], RECV_BATCH>::new();
    for m in msgs.iter().take(RECV_BATCH) {
        match iovs(m.msg_hdr.msg_iov, m.msg_hdr.msg_iovlen) {
            [one] => bufs.push(buf_mut(one.iov_base, one.iov_len)),
            _ => break,
        }
    }
    if bufs.is_empty() {
        return 0;
    }
    let want = a.cmsgs();
    ops::take_many(s, &mut bufs, flags, &mut |i, g| {
        let m = &mut msgs[i];
        m.msg_len = g.len as c_uint;
        let h = &mut m.msg_hdr;
        addr_out(g.src, h.msg_name.cast(), &mut h.msg_namelen);
        h.msg_flags = if g.truncated { libc::MSG_TRUNC } else { 0 };
        let mut used = 0;
        if want != 0 {
            control(a, h, &g, want, &mut used);
        }
        h.msg_controllen = used as _;
    })
}

#[no_mangle]
pub extern "C" fn sendto(
    fd: c_int,
    b: *const c_void,
    n: size_t,
    flags: c_int,
    to: *const sockaddr,
    tolen: socklen_t,
) -> ssize_t {
    if let Some(t) = table::tcp(fd) {
        return tcp::send(&t, b, n, flags);
    }
    if let Some(a) = table::socket(fd) {
        if let Route::Done(r) = crate::ops::udp_send::send(&a, buf(b, n), addr_in(to, tolen)) {
            return ret(r);
        }
    }
    if flags & libc::MSG_FASTOPEN != 0 && table::kind(fd) == table::KERNEL {
        // Fast Open's connect, with the data on the SYN.
        if let Some(dst) = addr_in(to, tolen).filter(|_| !b.is_null() || n == 0) {
            if let Route::Done(r) = crate::ops::tcp_sendto_fastopen(fd, dst, buf(b, n), flags) {
                return ret(r);
            }
        }
    }
    // SAFETY: the C library's sendto with the program's arguments.
    unsafe { real::sendto()(fd, b, n, flags, to, tolen) }
}

#[no_mangle]
pub extern "C" fn send(fd: c_int, b: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    if let Some(t) = table::tcp(fd) {
        return tcp::send(&t, b, n, flags);
    }
    if let Some(a) = table::socket(fd) {
        if let Route::Done(r) = crate::ops::udp_send::send(&a, buf(b, n), None) {
            return ret(r);
        }
    }
    // SAFETY: the C library's send with the program's arguments.
    unsafe { real::send()(fd, b, n, flags) }
}

#[no_mangle]
pub extern "C" fn write(fd: c_int, b: *const c_void, n: size_t) -> ssize_t {
    if let Some(t) = table::tcp(fd) {
        return tcp::send(&t, b, n, 0);
    }
    if let Some(a) = table::socket(fd) {
        if let Route::Done(r) = crate::ops::udp_send::send(&a, buf(b, n), None) {
            return ret(r);
        }
    }
    // SAFETY: the C library's write with the program's arguments.
    unsafe { real::write()(fd, b, n) }
}

#[no_mangle]
pub extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    if let Some(t) = table::tcp(fd) {
        return tcp::send_iov(&t, iovs(iov, cnt.max(0) as usize), 0);
    }
    if let Some(a) = table::socket(fd) {
        let data = gather(iovs(iov, cnt.max(0) as usize));
        if let Route::Done(r) = crate::ops::udp_send::send(&a, &data, None) {
            return ret(r);
        }
    }
    // SAFETY: the C library's writev with the program's arguments.
    unsafe { real::writev()(fd, iov, cnt) }
}

/// `sendmsg` of `m` on an rxpath socket; `None`: the kernel's.
fn sendmsg_one(a: &crate::udp::sock::Accel, m: &msghdr) -> Option<Result<usize, i32>> {
    let segment = match send_source(m) {
        Ok((Some(src), _)) if !crate::ops::udp_send::pktinfo_source_ok(a, src) => {
            let what = "sendmsg from another source address (IP_PKTINFO)";
            crate::host::global().unsupported(what);
            return Some(Err(libc::EOPNOTSUPP));
        }
        Ok((_, seg)) => seg,
        Err(what) => {
            crate::host::global().unsupported(what);
            return Some(Err(libc::EOPNOTSUPP));
        }
    };
    let data = gather(iovs(m.msg_iov, m.msg_iovlen));
    let to = addr_in(m.msg_name.cast(), m.msg_namelen);
    match crate::ops::udp_send::send_seg(a, &data, to, segment) {
        Route::Done(r) => Some(r),
        Route::Kernel => None,
    }
}

#[no_mangle]
pub extern "C" fn sendmsg(fd: c_int, m: *const msghdr, flags: c_int) -> ssize_t {
    if let Some(t) = table::tcp(fd) {
        return tcp::sendmsg(&t, m, flags);
    }
    if let (Some(a), false) = (table::socket(fd), m.is_null()) {
        // SAFETY: the program passed a readable msghdr for this call.
        if let Some(r) = sendmsg_one(&a, unsafe { &*m }) {
            return ret(r);
        }
    }
    // SAFETY: the C library's sendmsg with the program's arguments.
    unsafe { real::sendmsg()(fd, m, flags) }
}

#[no_mangle]
pub extern "C" fn sendmmsg(fd: c_int, v: *mut mmsghdr, vlen: c_uint, flags: c_int) -> c_int {
    if let Some(t) = table::tcp(fd) {
        return tcp::sendmmsg(&t, v, vlen, flags);
    }
    let Some(a) = table::socket(fd) else {
        // SAFETY: the C library's sendmmsg with the program's arguments.
        return unsafe { real::sendmmsg()(fd, v, vlen, flags) };
    };
    if v.is_null() {
        return fail(libc::EFAULT) as c_int;
    }
    // SAFETY: the program passed `vlen` mmsghdrs at `v`.
    let msgs = unsafe { std::slice::from_raw_parts_mut(v, vlen as usize) };
    let mut n = 0;
    while n < msgs.len() {
        // A run of plain datagrams leaves in one batch (one kick of the
        // TX ring); the datagram after a run goes alone, as `sendmsg`.
        // The runs are filled in place, never returned or collected: an
        // ArrayVec moved is a copy of all its 64 slots (3.5 KiB here),
        // which cost more than the datagrams' own copies.
        let mut lens = RunOf::<usize>::new();
        let (sent, next) = {
            let mut run = RunOf::new();
            plain_run(&a, &msgs[n..], &mut run);
            let mut r = RunOf::<(&[u8], std::net::SocketAddr)>::new();
            for (d, to) in &run {
                r.push((&d[..], *to));
                lens.push(d.len());
            }
            crate::ops::udp_send::send_run(&a, &r)
        };
        for (m, len) in msgs[n..].iter_mut().zip(&lens).take(sent) {
            m.msg_len = *len as c_uint;
        }
        n += sent;
        if n == msgs.len() || (sent == lens.len() && sent > 0) {
            continue;
        }
        let m = &mut msgs[n];
        let r = match next {
            Some(Route::Done(r)) => r,
            Some(Route::Kernel) => kernel_sendmsg(fd, &m.msg_hdr, flags),
            None => match sendmsg_one(&a, &m.msg_hdr) {
                Some(r) => r,
                None => kernel_sendmsg(fd, &m.msg_hdr, flags),
            },
        };
        match r {
            Ok(len) => {
                m.msg_len = len as c_uint;
                n += 1;
            }
            Err(e) if n == 0 => return fail(e) as c_int,
            Err(_) => break,
        }
    }
    n as c_int
}

/// One message through the kernel socket behind the fd.
fn kernel_sendmsg(fd: c_int, m: &msghdr, flags: c_int) -> Result<usize, i32> {
    // SAFETY: the C library's sendmsg of this one message.
    match unsafe { real::sendmsg()(fd, m, flags) } {
        k if k >= 0 => Ok(k as usize),
        _ => Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)),
    }
}

/// Most datagrams one `sendmmsg` run takes to the TX ring at once.
const RUN: usize = 64;

/// A run's worth of something, on the stack (a `sendmmsg` allocates
/// nothing for its run).
type RunOf<T> = arrayvec::ArrayVec<T, RUN>;

/// The datagrams at the head of `msgs` that can leave in one batch: no
/// control message but a source the socket may use, no segmentation, a
/// destination (given, or the peer); at most [`RUN`].
fn plain_run<'a>(
    a: &crate::udp::sock::Accel,
    msgs: &'a [mmsghdr],
    run: &mut RunOf<(std::borrow::Cow<'a, [u8]>, std::net::SocketAddr)>,
) {
    let seg = a.segment.load(std::sync::atomic::Ordering::Relaxed) as usize;
    for m in msgs.iter().take(RUN) {
        let h = &m.msg_hdr;
        match send_source(h) {
            Ok((src, None))
                if src.is_none_or(|s| crate::ops::udp_send::pktinfo_source_ok(a, s)) => {}
            _ => break,
        }
        let Some(to) = addr_in(h.msg_name.cast(), h.msg_namelen).or_else(|| a.sock.peer_addr())
        else {
            break;
        };
        let data = gather(iovs(h.msg_iov, h.msg_iovlen));
        if seg > 0 && data.len() > seg {
            break;
        }
        run.push((data, to));
    }
}
