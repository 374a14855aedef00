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

mod events;
mod io;
mod opts;

use events::*;
use io::*;
use opts::*;

type Ud = *mut c_void;

/// Run as the library loads, in packetdrill and in each shell command of
/// a script it runs ([`crate::metrics::note_flush`]).
// SAFETY: an `.init_array` entry is a plain `extern "C" fn()` the loader
// calls once, after relocation; it takes no arguments and the function
// only reads /proc and writes a file.
#[used]
#[link_section = ".init_array"]
static NOTE_METRICS_FLUSH: extern "C" fn() = note_metrics_flush;

extern "C" fn note_metrics_flush() {
    crate::metrics::note_flush();
}

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
