//! The exported calls, the top of the interposition layer (with
//! [`crate::sys`] the only `unsafe` of the crate): raw pointers from the
//! program become slices and addresses, and answers go back. Each looks at
//! the fd's kind (one load for a kernel
//! fd) and either falls through to the C library or answers for rxpath
//! through `ops` and `wait`, setting `errno` as the kernel would.

use crate::ops::{self, OptVal, Route};
use crate::sys::real;
use crate::table;
use libc::{
    c_int, c_uint, c_ulong, c_void, epoll_event, fd_set, iovec, mmsghdr, msghdr, nfds_t, pollfd,
    sigset_t, size_t, sockaddr, socklen_t, ssize_t, timespec, timeval,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::time::Duration;

fn set_errno(e: i32) {
    // SAFETY: `__errno_location` is this thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// -1 with `errno` set.
fn fail(e: i32) -> isize {
    set_errno(e);
    -1
}

fn ret(r: Result<usize, i32>) -> isize {
    match r {
        Ok(n) => n as isize,
        Err(e) => fail(e),
    }
}

/// The address a program passed, if it is IPv4 or IPv6.
fn addr_in(p: *const sockaddr, len: socklen_t) -> Option<SocketAddr> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the program passed `len` readable bytes at `p`; the family
    // is read first and the struct only if `len` covers it.
    unsafe {
        match (*p).sa_family as i32 {
            libc::AF_INET if len as usize >= std::mem::size_of::<libc::sockaddr_in>() => {
                let a = std::ptr::read_unaligned(p.cast::<libc::sockaddr_in>());
                Some(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                    u16::from_be(a.sin_port),
                )))
            }
            libc::AF_INET6 if len as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
                let a = std::ptr::read_unaligned(p.cast::<libc::sockaddr_in6>());
                Some(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(a.sin6_addr.s6_addr),
                    u16::from_be(a.sin6_port),
                    a.sin6_flowinfo,
                    a.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// Write `a` for the program: at most `*len` bytes at `p`, `*len` set to
/// the address's full size (as the kernel does).
fn addr_out(a: SocketAddr, p: *mut sockaddr, len: *mut socklen_t) {
    if p.is_null() || len.is_null() {
        return;
    }
    // SAFETY: an all-zero sockaddr_storage is valid.
    let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let size = match a {
        SocketAddr::V4(v) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in.
            unsafe {
                std::ptr::write_unaligned((&mut st as *mut libc::sockaddr_storage).cast(), sin)
            };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v.port().to_be(),
                sin6_flowinfo: v.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v.ip().octets(),
                },
                sin6_scope_id: v.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in6.
            unsafe {
                std::ptr::write_unaligned((&mut st as *mut libc::sockaddr_storage).cast(), sin6)
            };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    // SAFETY: the program gave `*len` writable bytes at `p`; we copy at
    // most that many and then report the full size.
    unsafe {
        let n = (*len as usize).min(size);
        std::ptr::copy_nonoverlapping(
            (&st as *const libc::sockaddr_storage).cast::<u8>(),
            p.cast::<u8>(),
            n,
        );
        *len = size as socklen_t;
    }
}

/// The program's buffer as a slice (empty for a null or empty one).
fn buf_mut<'a>(p: *mut c_void, n: size_t) -> &'a mut [u8] {
    if p.is_null() || n == 0 {
        return &mut [];
    }
    // SAFETY: the program passed `n` writable bytes at `p` for this call.
    unsafe { std::slice::from_raw_parts_mut(p.cast(), n) }
}

fn buf<'a>(p: *const c_void, n: size_t) -> &'a [u8] {
    if p.is_null() || n == 0 {
        return &[];
    }
    // SAFETY: the program passed `n` readable bytes at `p` for this call.
    unsafe { std::slice::from_raw_parts(p.cast(), n) }
}

fn iovs<'a>(iov: *const iovec, n: usize) -> &'a [iovec] {
    if iov.is_null() || n == 0 {
        return &[];
    }
    // SAFETY: the program passed `n` iovecs at `iov` for this call.
    unsafe { std::slice::from_raw_parts(iov, n) }
}

/// Read one datagram into the iovecs: straight into a single buffer, else
/// through a bounce buffer scattered after.
fn recv_iov(
    a: &std::sync::Arc<crate::sock::Accel>,
    v: &[iovec],
    flags: c_int,
) -> Result<ops::Got, i32> {
    if let [one] = v {
        return ops::recv(a, buf_mut(one.iov_base, one.iov_len), flags);
    }
    let total: usize = v.iter().map(|x| x.iov_len).sum();
    let mut tmp = vec![0u8; total.min(1 << 16)];
    let got = ops::recv(a, &mut tmp, flags)?;
    let mut off = 0;
    for x in v {
        if off >= got.len {
            break;
        }
        let n = x.iov_len.min(got.len - off);
        buf_mut(x.iov_base, n).copy_from_slice(&tmp[off..off + n]);
        off += n;
    }
    Ok(got)
}

/// The bytes of the iovecs, gathered.
fn gather(v: &[iovec]) -> std::borrow::Cow<'_, [u8]> {
    if let [one] = v {
        return std::borrow::Cow::Borrowed(buf(one.iov_base, one.iov_len));
    }
    let mut out = Vec::new();
    for x in v {
        out.extend_from_slice(buf(x.iov_base, x.iov_len));
    }
    std::borrow::Cow::Owned(out)
}

#[no_mangle]
pub extern "C" fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int {
    // SAFETY: the C library's socket with the program's arguments.
    let fd = unsafe { real::socket()(domain, ty, proto) };
    if fd >= 0 {
        ops::on_socket(fd, domain, ty, proto);
    }
    fd
}

#[no_mangle]
pub extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the C library's bind with the program's arguments.
    let r = unsafe { real::bind()(fd, addr, len) };
    if r == 0 && table::kind(fd) == table::CANDIDATE {
        if let Some(a) = addr_in(addr, len) {
            ops::on_bind(fd, a);
        }
    }
    r
}

#[no_mangle]
pub extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the C library's connect with the program's arguments.
    let r = unsafe { real::connect()(fd, addr, len) };
    if r == 0 && table::kind(fd) != table::KERNEL {
        if let Err(e) = ops::on_connect(fd, addr_in(addr, len)) {
            return fail(e) as c_int;
        }
    }
    r
}

#[no_mangle]
pub extern "C" fn close(fd: c_int) -> c_int {
    if table::kind(fd) != table::KERNEL {
        ops::on_close(fd);
    }
    // SAFETY: the C library's close with the program's fd.
    unsafe { real::close()(fd) }
}

#[no_mangle]
pub extern "C" fn recvfrom(
    fd: c_int,
    b: *mut c_void,
    n: size_t,
    flags: c_int,
    from: *mut sockaddr,
    fromlen: *mut socklen_t,
) -> ssize_t {
    let Some(a) = table::socket(fd) else {
        // SAFETY: the C library's recvfrom with the program's arguments.
        return unsafe { real::recvfrom()(fd, b, n, flags, from, fromlen) };
    };
    match ops::recv(&a, buf_mut(b, n), flags) {
        Ok(g) => {
            addr_out(g.src, from, fromlen);
            g.len as ssize_t
        }
        Err(e) => fail(e),
    }
}

#[no_mangle]
pub extern "C" fn recv(fd: c_int, b: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    let Some(a) = table::socket(fd) else {
        // SAFETY: the C library's recv with the program's arguments.
        return unsafe { real::recv()(fd, b, n, flags) };
    };
    ret(ops::recv(&a, buf_mut(b, n), flags).map(|g| g.len))
}

#[no_mangle]
pub extern "C" fn read(fd: c_int, b: *mut c_void, n: size_t) -> ssize_t {
    let Some(a) = table::socket(fd) else {
        // SAFETY: the C library's read with the program's arguments.
        return unsafe { real::read()(fd, b, n) };
    };
    ret(ops::recv(&a, buf_mut(b, n), 0).map(|g| g.len))
}

#[no_mangle]
pub extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    let Some(a) = table::socket(fd) else {
        // SAFETY: the C library's readv with the program's arguments.
        return unsafe { real::readv()(fd, iov, cnt) };
    };
    ret(recv_iov(&a, iovs(iov, cnt.max(0) as usize), 0).map(|g| g.len))
}

/// `recvmsg` into `m` for an rxpath socket, with the packet information
/// the socket asked for (`IP_PKTINFO`, `IPV6_RECVPKTINFO`).
fn recvmsg_one(
    a: &std::sync::Arc<crate::sock::Accel>,
    m: &mut msghdr,
    flags: c_int,
) -> Result<usize, i32> {
    let g = recv_iov(a, iovs(m.msg_iov, m.msg_iovlen), flags)?;
    addr_out(g.src, m.msg_name.cast(), &mut m.msg_namelen);
    m.msg_flags = if g.truncated { libc::MSG_TRUNC } else { 0 };
    let want = a.pktinfo.load(std::sync::atomic::Ordering::Relaxed);
    let mut used = 0;
    if want != 0 {
        let ifindex = crate::host::global().ifindex();
        if let (IpAddr::V4(d), true) = (g.dst, want & crate::sock::PKTINFO4 != 0) {
            let addr = libc::in_addr {
                s_addr: u32::from(d).to_be(),
            };
            let info = libc::in_pktinfo {
                ipi_ifindex: ifindex as c_int,
                ipi_spec_dst: addr,
                ipi_addr: addr,
            };
            put_cmsg(m, &mut used, libc::IPPROTO_IP, libc::IP_PKTINFO, &info);
        }
        let d6 = match g.dst {
            IpAddr::V6(d) => Some(d),
            IpAddr::V4(d) if a.sock.local_addr().is_ipv6() => Some(d.to_ipv6_mapped()),
            IpAddr::V4(_) => None,
        };
        if let (Some(d), true) = (d6, want & crate::sock::PKTINFO6 != 0) {
            let info = In6Pktinfo {
                addr: d.octets(),
                ifindex,
            };
            put_cmsg(m, &mut used, libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, &info);
        }
    }
    m.msg_controllen = used as _;
    Ok(g.len)
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
                (libc::IPPROTO_UDP, crate::sock::UDP_SEGMENT) if n >= 2 => {
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
    let Some(a) = table::socket(fd) else {
        // SAFETY: the C library's recvmsg with the program's arguments.
        return unsafe { real::recvmsg()(fd, m, flags) };
    };
    if m.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: the program passed a writable msghdr for this call.
    ret(recvmsg_one(&a, unsafe { &mut *m }, flags))
}

#[no_mangle]
pub extern "C" fn recvmmsg(
    fd: c_int,
    v: *mut mmsghdr,
    vlen: c_uint,
    flags: c_int,
    timeout: *mut timespec,
) -> c_int {
    let Some(a) = table::socket(fd) else {
        // SAFETY: the C library's recvmmsg with the program's arguments.
        return unsafe { real::recvmmsg()(fd, v, vlen, flags, timeout) };
    };
    if v.is_null() {
        return fail(libc::EFAULT) as c_int;
    }
    // SAFETY: the program passed `vlen` writable mmsghdrs at `v`.
    let msgs = unsafe { std::slice::from_raw_parts_mut(v, vlen as usize) };
    let end = (!timeout.is_null()).then(|| {
        // SAFETY: a non-null timeout is a readable timespec.
        let t = unsafe { *timeout };
        std::time::Instant::now()
            + Duration::new(
                t.tv_sec.max(0) as u64,
                t.tv_nsec.clamp(0, 999_999_999) as u32,
            )
    });
    let mut n = 0;
    for m in msgs.iter_mut() {
        // After the first: MSG_WAITFORONE takes only what is queued.
        let f = if n > 0 && flags & libc::MSG_WAITFORONE != 0 {
            flags | libc::MSG_DONTWAIT
        } else {
            flags
        };
        match recvmsg_one(&a, &mut m.msg_hdr, f) {
            Ok(len) => {
                m.msg_len = len as c_uint;
                n += 1;
            }
            Err(e) if n == 0 => return fail(e) as c_int,
            Err(_) => break,
        }
        if end.is_some_and(|e| std::time::Instant::now() >= e) {
            break;
        }
    }
    n
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
    if let Some(a) = table::socket(fd) {
        if let Route::Done(r) = ops::send(&a, buf(b, n), addr_in(to, tolen)) {
            return ret(r);
        }
    }
    // SAFETY: the C library's sendto with the program's arguments.
    unsafe { real::sendto()(fd, b, n, flags, to, tolen) }
}

#[no_mangle]
pub extern "C" fn send(fd: c_int, b: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    if let Some(a) = table::socket(fd) {
        if let Route::Done(r) = ops::send(&a, buf(b, n), None) {
            return ret(r);
        }
    }
    // SAFETY: the C library's send with the program's arguments.
    unsafe { real::send()(fd, b, n, flags) }
}

#[no_mangle]
pub extern "C" fn write(fd: c_int, b: *const c_void, n: size_t) -> ssize_t {
    if let Some(a) = table::socket(fd) {
        if let Route::Done(r) = ops::send(&a, buf(b, n), None) {
            return ret(r);
        }
    }
    // SAFETY: the C library's write with the program's arguments.
    unsafe { real::write()(fd, b, n) }
}

#[no_mangle]
pub extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    if let Some(a) = table::socket(fd) {
        let data = gather(iovs(iov, cnt.max(0) as usize));
        if let Route::Done(r) = ops::send(&a, &data, None) {
            return ret(r);
        }
    }
    // SAFETY: the C library's writev with the program's arguments.
    unsafe { real::writev()(fd, iov, cnt) }
}

/// `sendmsg` of `m` on an rxpath socket; `None`: the kernel's.
fn sendmsg_one(a: &crate::sock::Accel, m: &msghdr) -> Option<Result<usize, i32>> {
    let segment = match send_source(m) {
        Ok((Some(src), _)) if !ops::pktinfo_source_ok(a, src) => {
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
    match ops::send_seg(a, &data, to, segment) {
        Route::Done(r) => Some(r),
        Route::Kernel => None,
    }
}

#[no_mangle]
pub extern "C" fn sendmsg(fd: c_int, m: *const msghdr, flags: c_int) -> ssize_t {
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
    for m in msgs.iter_mut() {
        let r = match sendmsg_one(&a, &m.msg_hdr) {
            Some(r) => r,
            // SAFETY: the C library's sendmsg of this one message.
            None => match unsafe { real::sendmsg()(fd, &m.msg_hdr, flags) } {
                k if k >= 0 => Ok(k as usize),
                _ => Err(std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO)),
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
    n
}

#[no_mangle]
pub extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    // SAFETY: the C library's setsockopt with the program's arguments.
    let r = unsafe { real::setsockopt()(fd, level, name, val, len) };
    if table::kind(fd) == table::KERNEL || r != 0 {
        return r;
    }
    let v = opt_val(level, name, val, len);
    match ops::setsockopt(fd, level, name, v) {
        Ok(()) => 0,
        Err(e) => fail(e) as c_int,
    }
}

/// An option's value as rxpath reads it.
fn opt_val(level: c_int, name: c_int, val: *const c_void, len: socklen_t) -> OptVal {
    if val.is_null() {
        return OptVal::Other;
    }
    let time =
        level == libc::SOL_SOCKET && (name == libc::SO_RCVTIMEO || name == libc::SO_RCVTIMEO_NEW);
    if time && len as usize >= std::mem::size_of::<timeval>() {
        // SAFETY: the kernel accepted `len` bytes at `val` as a timeval.
        let t = unsafe { std::ptr::read_unaligned(val.cast::<timeval>()) };
        let d = Duration::new(
            t.tv_sec.max(0) as u64,
            (t.tv_usec.clamp(0, 999_999) * 1000) as u32,
        );
        return OptVal::Time(d);
    }
    if len as usize >= 4 {
        // SAFETY: the kernel accepted `len` >= 4 bytes at `val`.
        return OptVal::Int(unsafe { std::ptr::read_unaligned(val.cast::<i32>()) });
    }
    if len == 1 {
        // SAFETY: one readable byte at `val`.
        return OptVal::Int(unsafe { *val.cast::<u8>() } as i32);
    }
    OptVal::Other
}

fn fcntl_common(fd: c_int, cmd: c_int, arg: c_ulong, r: c_int) -> c_int {
    if r >= 0 && table::kind(fd) != table::KERNEL {
        match cmd {
            libc::F_SETFL => ops::set_nonblock(fd, arg as c_int & libc::O_NONBLOCK != 0),
            libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => ops::on_dup(fd, r),
            _ => {}
        }
    }
    r
}

#[no_mangle]
pub extern "C" fn dup(old: c_int) -> c_int {
    // SAFETY: the C library's dup with the program's argument.
    let r = unsafe { real::dup()(old) };
    if r >= 0 && table::kind(old) != table::KERNEL {
        ops::on_dup(old, r);
    }
    r
}

#[no_mangle]
pub extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    // SAFETY: the C library's dup2 with the program's arguments.
    let r = unsafe { real::dup2()(old, new) };
    if r >= 0 && (table::kind(old) != table::KERNEL || table::kind(new) != table::KERNEL) {
        ops::on_dup(old, r);
    }
    r
}

#[no_mangle]
pub extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    // SAFETY: the C library's dup3 with the program's arguments.
    let r = unsafe { real::dup3()(old, new, flags) };
    if r >= 0 && (table::kind(old) != table::KERNEL || table::kind(new) != table::KERNEL) {
        ops::on_dup(old, r);
    }
    r
}

#[no_mangle]
pub extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: the C library's fcntl with the program's arguments (every
    // command takes at most one argument, an int, a long or a pointer,
    // each passed in the same register).
    let r = unsafe { real::fcntl()(fd, cmd, arg) };
    fcntl_common(fd, cmd, arg, r)
}

#[no_mangle]
pub extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: as `fcntl`.
    let r = unsafe { real::fcntl64()(fd, cmd, arg) };
    fcntl_common(fd, cmd, arg, r)
}

#[no_mangle]
pub extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: c_ulong) -> c_int {
    if req == libc::FIONREAD as c_ulong && arg != 0 {
        if let Some(a) = table::socket(fd) {
            return match ops::next_len(&a) {
                Ok(n) => {
                    // SAFETY: FIONREAD's argument is a writable int.
                    unsafe { *(arg as *mut c_int) = n.min(c_int::MAX as usize) as c_int };
                    0
                }
                Err(e) => fail(e) as c_int,
            };
        }
    }
    if table::kind(fd) != table::KERNEL && req == libc::FIONBIO as c_ulong && arg != 0 {
        // SAFETY: FIONBIO's argument is a readable int.
        let on = unsafe { *(arg as *const c_int) } != 0;
        ops::set_nonblock(fd, on);
    }
    // SAFETY: the C library's ioctl with the program's arguments.
    unsafe { real::ioctl()(fd, req, arg) }
}

fn pollfds<'a>(fds: *mut pollfd, n: nfds_t) -> &'a mut [pollfd] {
    if fds.is_null() || n == 0 {
        return &mut [];
    }
    // SAFETY: the program passed `n` writable pollfds at `fds`.
    unsafe { std::slice::from_raw_parts_mut(fds, n as usize) }
}

#[no_mangle]
pub extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    let set = pollfds(fds, n);
    if set.iter().all(|p| table::kind(p.fd) != table::SOCKET) {
        // SAFETY: the C library's poll with the program's arguments.
        return unsafe { real::poll()(fds, n, timeout) };
    }
    ret(crate::wait::poll(set, timeout)) as c_int
}

#[no_mangle]
pub extern "C" fn ppoll(
    fds: *mut pollfd,
    n: nfds_t,
    ts: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    let set = pollfds(fds, n);
    if set.iter().all(|p| table::kind(p.fd) != table::SOCKET) {
        // SAFETY: the C library's ppoll with the program's arguments.
        return unsafe { real::ppoll()(fds, n, ts, mask) };
    }
    let timeout = if ts.is_null() {
        -1
    } else {
        // SAFETY: a non-null timeout is a readable timespec.
        let t = unsafe { *ts };
        ms(t.tv_sec, t.tv_nsec, 1_000_000)
    };
    with_mask(mask, || ret(crate::wait::poll(set, timeout)) as c_int)
}

/// A C timeout (seconds and a fraction of `per_ms` units a millisecond) in
/// milliseconds, rounded up: a wait never ends before its time.
fn ms(sec: libc::time_t, frac: i64, per_ms: u64) -> c_int {
    let m = (sec.max(0) as u64)
        .saturating_mul(1000)
        .saturating_add((frac.max(0) as u64).div_ceil(per_ms));
    m.min(i32::MAX as u64) as c_int
}

/// Run `f` with the thread's signal mask set to `mask` (if given), as
/// `ppoll` and `epoll_pwait` do (not atomically with the wait: a signal
/// that arrives just before it is taken at once, not lost).
fn with_mask<R>(mask: *const sigset_t, f: impl FnOnce() -> R) -> R {
    if mask.is_null() {
        return f();
    }
    // SAFETY: an all-zero sigset_t is valid storage for the old mask.
    let mut old: sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `mask` is the program's readable sigset; `old` is ours.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, mask, &mut old) };
    let r = f();
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    r
}

#[no_mangle]
pub extern "C" fn select(
    nfds: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    tv: *mut timeval,
) -> c_int {
    let nfds = nfds.clamp(0, libc::FD_SETSIZE as c_int);
    let is_set = |s: *mut fd_set, fd: c_int| {
        // SAFETY: a non-null set is the program's fd_set; fd < FD_SETSIZE.
        !s.is_null() && unsafe { libc::FD_ISSET(fd, s) }
    };
    let any =
        (0..nfds).any(|fd| table::kind(fd) == table::SOCKET && (is_set(r, fd) || is_set(w, fd)));
    if !any {
        // SAFETY: the C library's select with the program's arguments.
        return unsafe { real::select()(nfds, r, w, e, tv) };
    }
    let mut fds: Vec<pollfd> = Vec::new();
    for fd in 0..nfds {
        let mut ev = 0;
        if is_set(r, fd) {
            ev |= libc::POLLIN;
        }
        if is_set(w, fd) {
            ev |= libc::POLLOUT;
        }
        if is_set(e, fd) {
            ev |= libc::POLLPRI;
        }
        if ev != 0 {
            fds.push(pollfd {
                fd,
                events: ev,
                revents: 0,
            });
        }
    }
    let timeout = if tv.is_null() {
        -1
    } else {
        // SAFETY: a non-null timeout is a readable timeval.
        let t = unsafe { *tv };
        ms(t.tv_sec, t.tv_usec, 1000)
    };
    if let Err(err) = crate::wait::poll(&mut fds, timeout) {
        return fail(err) as c_int;
    }
    for s in [r, w, e] {
        if !s.is_null() {
            // SAFETY: the program's fd_set, cleared to be filled again.
            unsafe { libc::FD_ZERO(s) };
        }
    }
    let mut n = 0;
    for p in &fds {
        let marks = [
            (r, libc::POLLIN | libc::POLLHUP | libc::POLLERR),
            (w, libc::POLLOUT | libc::POLLERR),
            (e, libc::POLLPRI),
        ];
        for (s, bits) in marks {
            if !s.is_null() && p.revents & bits != 0 && p.events & bits != 0 {
                // SAFETY: the program's fd_set; fd < FD_SETSIZE.
                unsafe { libc::FD_SET(p.fd, s) };
                n += 1;
            }
        }
    }
    n
}

#[no_mangle]
pub extern "C" fn epoll_create(size: c_int) -> c_int {
    // SAFETY: the C library's epoll_create with the program's argument.
    let fd = unsafe { real::epoll_create()(size) };
    if fd >= 0 {
        ops::on_epoll_create(fd);
    }
    fd
}

#[no_mangle]
pub extern "C" fn epoll_create1(flags: c_int) -> c_int {
    // SAFETY: the C library's epoll_create1 with the program's argument.
    let fd = unsafe { real::epoll_create1()(flags) };
    if fd >= 0 {
        ops::on_epoll_create(fd);
    }
    fd
}

#[no_mangle]
pub extern "C" fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, ev: *mut epoll_event) -> c_int {
    if table::kind(epfd) == table::EPOLL {
        // SAFETY: a non-null event is the program's readable epoll_event.
        let e = (!ev.is_null()).then(|| unsafe { std::ptr::read_unaligned(ev) });
        match ops::epoll_ctl(epfd, op, fd, e) {
            Route::Done(Ok(())) => return 0,
            Route::Done(Err(err)) => return fail(err) as c_int,
            Route::Kernel => {
                // SAFETY: the C library's epoll_ctl with the program's arguments.
                let r = unsafe { real::epoll_ctl()(epfd, op, fd, ev) };
                if r == 0 {
                    ops::epoll_ctl_done(epfd, op);
                }
                return r;
            }
        }
    }
    // SAFETY: the C library's epoll_ctl with the program's arguments.
    unsafe { real::epoll_ctl()(epfd, op, fd, ev) }
}

fn events<'a>(ev: *mut epoll_event, max: c_int) -> Option<&'a mut [epoll_event]> {
    if ev.is_null() || max <= 0 {
        return None;
    }
    // SAFETY: the program passed `max` writable events at `ev`.
    Some(unsafe { std::slice::from_raw_parts_mut(ev, max as usize) })
}

#[no_mangle]
pub extern "C" fn epoll_wait(
    epfd: c_int,
    ev: *mut epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    if table::kind(epfd) == table::EPOLL {
        let Some(out) = events(ev, max) else {
            return fail(libc::EINVAL) as c_int;
        };
        if let Route::Done(r) = ops::epoll_wait(epfd, out, timeout) {
            return ret(r) as c_int;
        }
    }
    // SAFETY: the C library's epoll_wait with the program's arguments.
    unsafe { real::epoll_wait()(epfd, ev, max, timeout) }
}

#[no_mangle]
pub extern "C" fn epoll_pwait(
    epfd: c_int,
    ev: *mut epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const sigset_t,
) -> c_int {
    if table::kind(epfd) == table::EPOLL {
        let Some(out) = events(ev, max) else {
            return fail(libc::EINVAL) as c_int;
        };
        let r = with_mask(mask, || ops::epoll_wait(epfd, out, timeout));
        if let Route::Done(r) = r {
            return ret(r) as c_int;
        }
    }
    // SAFETY: the C library's epoll_pwait with the program's arguments.
    unsafe { real::epoll_pwait()(epfd, ev, max, timeout, mask) }
}

#[no_mangle]
pub extern "C" fn epoll_pwait2(
    epfd: c_int,
    ev: *mut epoll_event,
    max: c_int,
    ts: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    if table::kind(epfd) == table::EPOLL {
        let Some(out) = events(ev, max) else {
            return fail(libc::EINVAL) as c_int;
        };
        let timeout = if ts.is_null() {
            -1
        } else {
            // SAFETY: a non-null timeout is a readable timespec.
            let t = unsafe { *ts };
            ms(t.tv_sec, t.tv_nsec, 1_000_000)
        };
        let r = with_mask(mask, || ops::epoll_wait(epfd, out, timeout));
        if let Route::Done(r) = r {
            return ret(r) as c_int;
        }
    }
    // SAFETY: the C library's epoll_pwait2 with the program's arguments.
    unsafe { real::epoll_pwait2()(epfd, ev, max, ts, mask) }
}

// glibc's fortify (`_FORTIFY_SOURCE`) calls these checked forms.

#[no_mangle]
pub extern "C" fn __recv_chk(
    fd: c_int,
    b: *mut c_void,
    n: size_t,
    _buflen: size_t,
    flags: c_int,
) -> ssize_t {
    recv(fd, b, n, flags)
}

#[no_mangle]
pub extern "C" fn __recvfrom_chk(
    fd: c_int,
    b: *mut c_void,
    n: size_t,
    _buflen: size_t,
    flags: c_int,
    from: *mut sockaddr,
    fromlen: *mut socklen_t,
) -> ssize_t {
    recvfrom(fd, b, n, flags, from, fromlen)
}

#[no_mangle]
pub extern "C" fn __read_chk(fd: c_int, b: *mut c_void, n: size_t, _buflen: size_t) -> ssize_t {
    read(fd, b, n)
}

#[no_mangle]
pub extern "C" fn __poll_chk(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: c_int,
    _fdslen: size_t,
) -> c_int {
    poll(fds, n, timeout)
}

/// At exit: stop the host and write the report (the library's
/// constructor registers this).
extern "C" fn at_exit() {
    if let Some(g) = crate::host::started() {
        g.finish();
    }
}

/// In the child of `fork` (and `daemon`): its copies of rxpath sockets are
/// the kernel's, it starts no host, and it lets go of the parent's XDP
/// program, so nothing is lost whichever process ends first.
extern "C" fn in_fork_child() {
    crate::host::set_fork_child();
    crate::table::forget_all();
    crate::sys::close_host_fds();
}

extern "C" fn init() {
    // SAFETY: registers functions with C linkage that take nothing.
    unsafe {
        libc::atexit(at_exit);
        libc::pthread_atfork(None, None, Some(in_fork_child));
    }
}

/// The library's constructor: runs when the loader maps it.
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
