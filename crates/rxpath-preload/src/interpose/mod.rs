//! The exported calls, the top of the interposition layer (with
//! [`crate::sys`] the only `unsafe` of the crate): raw pointers from the
//! program become slices and addresses, and answers go back. Each looks at
//! the fd's kind (one load for a kernel
//! fd) and either falls through to the C library or answers for rxpath
//! through `ops` and `wait`, setting `errno` as the kernel would.
//!
//! Here: socket lifetime (`socket`, `bind`, `connect`, `close`, `dup*`),
//! options and flags, the fork and exit hooks, and the C-to-Rust helpers;
//! `io`: reads and sends; `wait`: `poll`, `select`, `epoll`.

mod io;
mod tcp;
mod wait;

use crate::ops::{self, OptVal};
use crate::sys::real;
use crate::table;
use libc::{
    c_int, c_ulong, c_void, iovec, nfds_t, pollfd, size_t, sockaddr, socklen_t, ssize_t, timeval,
};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
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
fn addr_out(a: Option<SocketAddr>, p: *mut sockaddr, len: *mut socklen_t) {
    if p.is_null() || len.is_null() {
        return;
    }
    let Some(a) = a else {
        // No sender (the end of a shut-down socket): an empty address.
        // SAFETY: `len` is the program's writable socklen_t.
        unsafe { *len = 0 };
        return;
    };
    let (st, size) = crate::sys::sockaddr(a);
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
fn recv_iov(a: &ops::Rx, v: &[iovec], flags: c_int) -> Result<ops::Got, ops::NotRead> {
    if let [one] = v {
        return a.recv(buf_mut(one.iov_base, one.iov_len), flags);
    }
    let total: usize = v.iter().map(|x| x.iov_len).sum();
    let mut tmp = vec![0u8; total.min(1 << 16)];
    let got = a.recv(&mut tmp, flags)?;
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
    if let Some(t) = table::tcp(fd) {
        return fail(ops::tcp_connect_again(&t)) as c_int;
    }
    if table::kind(fd) == table::KERNEL {
        if let Some(to) = addr_in(addr, len) {
            if let ops::Route::Done(r) = ops::tcp_connect(fd, to) {
                return match r {
                    Ok(()) => 0,
                    Err(e) => fail(e) as c_int,
                };
            }
        }
    }
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
    if crate::sys::ours::held(fd) {
        // A second close of a number now the library's: the kernel's
        // answer to a second close (see `sys::ours`).
        return fail(libc::EBADF) as c_int;
    }
    if table::kind(fd) != table::KERNEL {
        ops::on_close(fd);
    }
    // SAFETY: the C library's close with the program's fd.
    unsafe { real::close()(fd) }
}

/// `syscall()` on an fd rxpath serves: libuv (named's network manager,
/// ...) closes its fds and moves its UDP batches this way, past the C
/// library's `close()`, `recvmmsg()` and `sendmmsg()`; rxpath answers them
/// as those. Declared with six integer arguments: on x86-64 and
/// AArch64 Linux a variadic caller passes integer arguments in the same
/// registers, and a system call's arguments are integers or pointers.
/// Every call goes on to the C library's `syscall` as it came.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[no_mangle]
pub extern "C" fn syscall(
    n: libc::c_long,
    a1: libc::c_long,
    a2: libc::c_long,
    a3: libc::c_long,
    a4: libc::c_long,
    a5: libc::c_long,
    a6: libc::c_long,
) -> libc::c_long {
    if matches!(
        n,
        libc::SYS_capset | libc::SYS_setuid | libc::SYS_setreuid | libc::SYS_setresuid
    ) {
        // libcap's cap_set_proc makes its capset through here.
        crate::host::before_privileges_drop();
    }
    let fd = a1 as c_int;
    if n == libc::SYS_close && crate::sys::ours::held(fd) {
        return fail(libc::EBADF) as _;
    }
    if table::kind(fd) != table::KERNEL {
        // libuv (1.44, Debian 12's) reads and writes its UDP batches with
        // syscall(__NR_recvmmsg / __NR_sendmmsg): the same calls as the C
        // library's, answered the same way.
        match n {
            libc::SYS_close => ops::on_close(fd),
            libc::SYS_recvmmsg => {
                let t = a5 as *mut libc::timespec;
                return io::recvmmsg(fd, a2 as *mut _, a3 as libc::c_uint, a4 as c_int, t) as _;
            }
            libc::SYS_sendmmsg => {
                return io::sendmmsg(fd, a2 as *mut _, a3 as libc::c_uint, a4 as c_int) as _;
            }
            libc::SYS_recvmsg => return io::recvmsg(fd, a2 as *mut _, a3 as c_int) as _,
            libc::SYS_sendmsg => return io::sendmsg(fd, a2 as *const _, a3 as c_int) as _,
            libc::SYS_recvfrom => {
                let (from, len) = (a5 as *mut sockaddr, a6 as *mut socklen_t);
                return io::recvfrom(fd, a2 as *mut _, a3 as size_t, a4 as c_int, from, len) as _;
            }
            libc::SYS_sendto => {
                let (to, len) = (a5 as *const sockaddr, a6 as socklen_t);
                return io::sendto(fd, a2 as *const _, a3 as size_t, a4 as c_int, to, len) as _;
            }
            _ => {}
        }
    }
    // SAFETY: the C library's syscall with the caller's arguments (the
    // unused ones are whatever the caller's registers held, which the
    // kernel ignores for a call that takes fewer).
    unsafe { real::syscall()(n, a1, a2, a3, a4, a5, a6) }
}

/// `setuid()` and its kin, `capset()`: the process gives up privileges;
/// rxpath opens its device first ([`crate::host::before_privileges_drop`]).
macro_rules! drops_privileges {
    ($($name:ident($($a:ident: $t:ty),*);)*) => {$(
        #[no_mangle]
        pub extern "C" fn $name($($a: $t),*) -> c_int {
            crate::host::before_privileges_drop();
            // SAFETY: the C library's function with the caller's arguments.
            unsafe { real::$name()($($a),*) }
        }
    )*};
}

drops_privileges! {
    setuid(uid: libc::uid_t);
    seteuid(uid: libc::uid_t);
    setreuid(r: libc::uid_t, e: libc::uid_t);
    setresuid(r: libc::uid_t, e: libc::uid_t, s: libc::uid_t);
    capset(hdr: *mut c_void, data: *const c_void);
}

#[no_mangle]
pub extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    if let Some(t) = table::tcp(fd) {
        return tcp::shutdown(fd, &t, how);
    }
    // SAFETY: the C library's shutdown with the program's arguments.
    let r = unsafe { real::shutdown()(fd, how) };
    let done = r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOTCONN);
    if done && table::kind(fd) != table::KERNEL {
        ops::on_shutdown(fd, how);
    }
    r
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
    if r != 0 && level == libc::IPPROTO_TCP && ops::relayed_addrs(fd).is_some() {
        // A connection relayed to this child: its options are the
        // parent's to keep; taken and ignored.
        return 0;
    }
    if table::kind(fd) == table::KERNEL || r != 0 {
        return r;
    }
    let v = opt_val(level, name, val, len);
    if let Some(t) = table::tcp(fd) {
        return match ops::tcp_setsockopt(&t, level, name, v) {
            Ok(()) => 0,
            Err(e) => fail(e) as c_int,
        };
    }
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
    if (level, name) == (libc::SOL_SOCKET, libc::SO_LINGER)
        && len as usize >= std::mem::size_of::<libc::linger>()
    {
        // SAFETY: the kernel accepted a `struct linger` of `len` bytes.
        let l = unsafe { std::ptr::read_unaligned(val.cast::<libc::linger>()) };
        return OptVal::Linger(l.l_onoff != 0, l.l_linger);
    }
    if level == libc::SOL_SOCKET
        && name == crate::udp::sock::SO_ATTACH_REUSEPORT_CBPF
        && len as usize >= std::mem::size_of::<libc::sock_fprog>()
    {
        // SAFETY: the kernel accepted a `sock_fprog` of `len` bytes at `val`.
        let f = unsafe { std::ptr::read_unaligned(val.cast::<libc::sock_fprog>()) };
        if f.filter.is_null() {
            return OptVal::Other;
        }
        // SAFETY: the kernel copied `f.len` instructions from `f.filter`.
        let insns = unsafe { std::slice::from_raw_parts(f.filter, f.len as usize) };
        let insns = insns.iter().map(|i| rxpath_core::sock::cbpf::Insn {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        });
        return OptVal::Cbpf(insns.collect());
    }
    if (level == libc::SOL_SOCKET && name == libc::SO_BINDTODEVICE)
        || crate::udp::mcast::is_membership(level, name)
    {
        // SAFETY: the kernel accepted `len` bytes at `val`.
        let b = unsafe { std::slice::from_raw_parts(val.cast::<u8>(), len as usize) };
        return OptVal::Bytes(b.to_vec());
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
        if let Some(t) = table::tcp(fd) {
            return match ops::tcp_inq(&t) {
                Ok(n) => {
                    // SAFETY: FIONREAD's argument is a writable int.
                    unsafe { *(arg as *mut c_int) = n.min(c_int::MAX as usize) as c_int };
                    0
                }
                Err(e) => fail(e) as c_int,
            };
        }
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
    let r = unsafe { real::ioctl()(fd, req, arg) };
    if r == 0 && req == libc::EPIOCSPARAMS as c_ulong && arg != 0 {
        // SAFETY: the kernel just read a `struct epoll_params` from `arg`.
        let p = unsafe { std::ptr::read_unaligned(arg as *const libc::epoll_params) };
        ops::epoll_params(fd, p.busy_poll_usecs, p.busy_poll_budget);
    }
    r
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
    io::recv(fd, b, n, flags)
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
    io::recvfrom(fd, b, n, flags, from, fromlen)
}

#[no_mangle]
pub extern "C" fn __read_chk(fd: c_int, b: *mut c_void, n: size_t, _buflen: size_t) -> ssize_t {
    io::read(fd, b, n)
}

#[no_mangle]
pub extern "C" fn __poll_chk(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: c_int,
    _fdslen: size_t,
) -> c_int {
    wait::poll(fds, n, timeout)
}

/// How long an exiting process's TCP connections may take to deliver
/// what was written to them (the kernel keeps them as long as their
/// retransmissions last; a host that stops cannot).
const EXIT_PATIENCE: Duration = Duration::from_secs(10);

/// At exit: stop the host and write the report (the library's
/// constructor registers this).
extern "C" fn at_exit() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static STARTED: AtomicBool = AtomicBool::new(false);
    // A `vfork` child (no fork handlers run there) shares the parent's
    // memory, host included: its `_exit` is not the host's end.
    if std::process::id() != LOADED_IN.load(Ordering::Relaxed) {
        return;
    }
    // Once, and never again from inside itself (an `_exit` from a signal
    // handler that interrupted the exit handler goes straight out).
    if STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    finish_host();
}

/// The process the library was loaded in (a forked child records its
/// own: `in_fork_child`).
static LOADED_IN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// `_exit()` (and `_Exit()`): the process ends without its exit
/// handlers (Python's `os._exit`, a forked child's end): rxpath's are
/// run first, so its connections deliver what was written and its
/// report is written, as at `exit()`.
#[no_mangle]
pub extern "C" fn _exit(status: c_int) -> ! {
    at_exit();
    // SAFETY: the C library's _exit with the program's status.
    unsafe { real::_exit()(status) };
    // `_exit` does not return.
    std::process::abort()
}

#[no_mangle]
pub extern "C" fn _Exit(status: c_int) -> ! {
    _exit(status)
}

fn finish_host() {
    if let Some(g) = crate::host::started() {
        crate::table::before_exit();
        let relayed = crate::tcp::relay::running();
        if relayed > 0 {
            crate::config::say(&format!(
                "{relayed} TCP connection(s) relayed to forked children end with this \
                 process (the kernel would have kept them)"
            ));
        }
        let left = ops::tcp_close_at_exit(EXIT_PATIENCE);
        if left > 0 {
            crate::config::say(&format!(
                "{left} TCP connection(s) still sending after {} s at exit: \
                 stopped with them (the kernel would have kept them)",
                EXIT_PATIENCE.as_secs()
            ));
        }
        g.finish();
    }
}

/// `fork`: the C library's, with rxpath's TCP connections made ready for
/// a child that keeps one ([`ops::fork_prepare`]; the atfork handlers
/// below run inside it).
#[no_mangle]
pub extern "C" fn fork() -> libc::pid_t {
    let staged = ops::fork_prepare();
    // SAFETY: the C library's fork, which takes nothing.
    let pid = unsafe { real::fork()() };
    if pid == 0 {
        ops::fork_child(staged);
        return 0;
    }
    let e = std::io::Error::last_os_error();
    ops::fork_parent(staged, pid > 0);
    if pid < 0 {
        return fail(e.raw_os_error().unwrap_or(libc::EAGAIN)) as libc::pid_t;
    }
    pid
}

/// In the child of `fork` (and `daemon`): its copies of rxpath sockets are
/// the kernel's, it starts no host, and it lets go of the parent's XDP
/// program, so nothing is lost whichever process ends first.
extern "C" fn in_fork_child() {
    LOADED_IN.store(std::process::id(), std::sync::atomic::Ordering::Relaxed);
    crate::host::set_fork_child();
    crate::table::forget_all();
    // The port map stays open: a child that reads a socket it inherited
    // gives its port back with it.
    crate::sys::close_host_fds(crate::udp::forkq::port_map());
    // The parent's ends of its TCP relays (see `ops::fork_child`).
    ops::tcp_in_fork_child();
    // The library's numbers those closed are the child's program's again.
    crate::sys::ours::release_closed();
    // What the parent's queues held at the fork, this child may read
    // (`socat UDP-RECVFROM:P,fork`: the child reads what the parent
    // peeked at).
    for fd in crate::udp::forkq::in_child() {
        crate::table::mark_forked(fd);
    }
}

/// In the parent just before a fork (where taking the table's lock is
/// safe): what each socket's queue holds moves where the child can read
/// it too.
extern "C" fn before_fork() {
    if crate::host::started().is_some() {
        crate::table::before_fork();
        ops::tcp_before_fork();
    }
    crate::udp::forkq::restage_inherited(|fd| table::kind(fd) == table::FORKED);
}

extern "C" fn after_fork_parent() {
    crate::udp::forkq::after_fork_parent();
}

extern "C" fn init() {
    LOADED_IN.store(std::process::id(), std::sync::atomic::Ordering::Relaxed);
    crate::host::set_hand_all_back(ops::hand_all_back);
    // SAFETY: registers functions with C linkage that take nothing.
    unsafe {
        libc::atexit(at_exit);
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_parent),
            Some(in_fork_child),
        );
    }
}

/// The library's constructor: runs when the loader maps it.
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
