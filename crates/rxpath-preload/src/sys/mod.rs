//! The C library's own calls (`real`, found with `dlsym(RTLD_NEXT)`) and
//! the few system calls the library makes for itself (eventfds, kernel
//! waits, the child's clean-up after fork), behind safe functions. With
//! [`crate::interpose`] it is the interposition layer, the only `unsafe`
//! of the crate, each block with its `SAFETY` line.

pub(crate) mod ours;
pub(crate) mod pair;
pub(crate) mod real;

pub(crate) use ours::Ours;

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// Run `f` (which starts threads) with every signal but the synchronous
/// faults (`SIGSEGV`, `SIGBUS`, `SIGFPE`, `SIGILL`, seccomp's `SIGSYS`,
/// `SIGTRAP`) blocked, the caller's mask restored after. Threads inherit
/// their creator's mask, so rxpath's threads inside the program never
/// take a signal meant for it: the kernel gives a process-directed signal
/// to a thread that does not block it, and one of rxpath's would run the
/// program's handler, or, for a `sigsuspend` in the program's own thread
/// (nginx's master waiting for `SIGQUIT`), leave it asleep forever.
pub(crate) fn signals_blocked<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: all-zero storage is a valid sigset_t for sigfillset and
    // sigdelset to fill; the old mask is ours to write.
    let (mut all, mut old): (libc::sigset_t, libc::sigset_t) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: `all` is live storage; each call changes only it.
    unsafe {
        libc::sigfillset(&mut all);
        let faults = [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGSYS,
            libc::SIGTRAP,
        ];
        for s in faults {
            libc::sigdelset(&mut all, s);
        }
    }
    // SAFETY: both sets are live; the thread's mask is changed, not memory.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old) };
    let r = f();
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    r
}

/// A new non-blocking, close-on-exec eventfd of the library's own.
pub(crate) fn eventfd() -> io::Result<Ours> {
    eventfd_owned().map(Ours::new)
}

/// A new non-blocking, close-on-exec eventfd.
fn eventfd_owned() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes two integers and returns a new fd or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just made and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Add one to an eventfd (wakes a sleeper in `poll`/`epoll_wait` on it).
pub(crate) fn eventfd_signal(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64; a full counter (EAGAIN) is
    // already a wakeup.
    unsafe { real::write()(fd, (&one as *const u64).cast(), 8) };
}

/// Empty an eventfd.
pub(crate) fn eventfd_drain(fd: RawFd) {
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a live u64; EAGAIN when already empty.
    unsafe { real::read()(fd, (&mut v as *mut u64).cast(), 8) };
}

/// The kernel's `poll` on kernel fds.
pub(crate) fn kpoll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: `fds` is a live, writable array of `fds.len()` pollfds.
    let r = unsafe { real::poll()(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if r < 0 {
        // EINTR included: a signal ends a wait, as it ends the kernel's.
        return Err(io::Error::last_os_error());
    }
    Ok(r as usize)
}

/// Does the kernel have something to read on `fd` now (a `poll` that
/// does not wait)?
pub(crate) fn readable_now(fd: RawFd) -> bool {
    let mut p = [libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }];
    kpoll(&mut p, 0).is_ok_and(|n| n > 0 && p[0].revents & libc::POLLIN != 0)
}

/// Another fd for what `fd` names (close-on-exec), as `dup` makes, the
/// library's own.
pub(crate) fn dup_cloexec(fd: RawFd) -> io::Result<Ours> {
    // SAFETY: the C library's fcntl(F_DUPFD_CLOEXEC) on the caller's fd;
    // a new fd or -1.
    let r = unsafe { real::fcntl()(fd, libc::F_DUPFD_CLOEXEC, 0 as libc::c_ulong) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `r` is a new fd that nothing else owns.
    Ok(Ours::new(unsafe { OwnedFd::from_raw_fd(r) }))
}

/// A new kernel epoll set (close-on-exec), the library's own.
pub(crate) fn kepoll_create() -> io::Result<Ours> {
    // SAFETY: the C library's epoll_create1 with a flag; a new fd or -1.
    let fd = unsafe { real::epoll_create1()(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just made and is owned by no one else.
    Ok(Ours::new(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// The kernel's `epoll_ctl`.
pub(crate) fn kepoll_ctl(
    epfd: RawFd,
    op: i32,
    fd: RawFd,
    ev: Option<libc::epoll_event>,
) -> io::Result<()> {
    let mut ev = ev;
    let p = ev
        .as_mut()
        .map_or(std::ptr::null_mut(), |e| e as *mut libc::epoll_event);
    // SAFETY: `p` is null or points at a live epoll_event.
    let r = unsafe { real::epoll_ctl()(epfd, op, fd, p) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The kernel's `epoll_wait`.
pub(crate) fn kepoll_wait(
    epfd: RawFd,
    out: &mut [libc::epoll_event],
    timeout_ms: i32,
) -> io::Result<usize> {
    let max = out.len().min(i32::MAX as usize) as i32;
    // SAFETY: `out` is a live, writable array of at least `max` events.
    let r = unsafe { real::epoll_wait()(epfd, out.as_mut_ptr(), max, timeout_ms) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as usize)
}

/// After a signal interrupted a blocked read: would the kernel have
/// restarted it? It does when the handler has `SA_RESTART`; which signal
/// came is not known here, so the read restarts only if every caught
/// signal has `SA_RESTART` (a handler without it, as `sockperf`'s
/// `SIGINT`, gets `EINTR`, as from the kernel).
pub(crate) fn restart_after_signal() -> bool {
    for sig in 1..=libc::SIGRTMAX() {
        // SAFETY: an all-zero sigaction is valid storage for the answer.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: reads the disposition of `sig` into `old`; no change.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0 {
            continue;
        }
        let caught = old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
        if caught && old.sa_flags & libc::SA_RESTART == 0 {
            return false;
        }
    }
    true
}

/// In a forked child: close the fds of the parent's host that keep its XDP
/// program and AF_XDP sockets alive (BPF objects, AF_XDP sockets), so that
/// when the parent ends the interface's traffic goes back to the kernel
/// even while the child lives (`daemon()`: the parent exits at once). The
/// port map `keep` stays (it attaches nothing).
pub(crate) fn close_host_fds(keep: Option<RawFd>) {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let mut ours = Vec::new();
    for e in dir.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|s| s.parse::<RawFd>().ok()) else {
            continue;
        };
        if Some(fd) == keep {
            continue;
        }
        let link = std::fs::read_link(e.path()).unwrap_or_default();
        let l = link.to_string_lossy();
        if l.starts_with("anon_inode:bpf")
            || (l.starts_with("socket:") && domain(fd) == Some(libc::AF_XDP))
        {
            ours.push(fd);
        }
    }
    for fd in ours {
        // SAFETY: closes an fd of the parent's host that nothing in the
        // child uses.
        unsafe { real::close()(fd) };
    }
}

/// A socket's address family (`SO_DOMAIN`).
fn domain(fd: RawFd) -> Option<i32> {
    sockopt_int(fd, libc::SOL_SOCKET, libc::SO_DOMAIN)
}

/// An int-valued socket option, as the kernel has it.
pub(crate) fn sockopt_int(fd: RawFd, level: i32, name: i32) -> Option<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: writes at most `len` bytes into a live int.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(v)
}

/// A socket's `SO_LINGER` as the kernel has it: on, and the seconds.
pub(crate) fn sockopt_linger(fd: RawFd) -> Option<(bool, i32)> {
    let mut v = libc::linger {
        l_onoff: 0,
        l_linger: 0,
    };
    let mut len = std::mem::size_of::<libc::linger>() as libc::socklen_t;
    // SAFETY: writes at most `len` bytes into a live `struct linger`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&mut v as *mut libc::linger).cast(),
            &mut len,
        )
    };
    (r == 0).then_some((v.l_onoff != 0, v.l_linger))
}

/// The address a socket is bound to, as the kernel has it.
pub(crate) fn local_addr(fd: RawFd) -> Option<std::net::SocketAddr> {
    // SAFETY: an all-zero sockaddr_storage is valid.
    let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: the C library's getsockname writes at most `len` bytes into
    // a live sockaddr_storage.
    let r = unsafe {
        real::getsockname()(
            fd,
            (&mut st as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return None;
    }
    from_storage(&st)
}

/// The address in a `sockaddr_storage`, if it is IPv4 or IPv6.
fn from_storage(st: &libc::sockaddr_storage) -> Option<std::net::SocketAddr> {
    use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
    let at = (st as *const libc::sockaddr_storage).cast::<u8>();
    match st.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says a sockaddr_in is there.
            let a = unsafe { std::ptr::read_unaligned(at.cast::<libc::sockaddr_in>()) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                u32::from_be(a.sin_addr.s_addr).into(),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says a sockaddr_in6 is there.
            let a = unsafe { std::ptr::read_unaligned(at.cast::<libc::sockaddr_in6>()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                a.sin6_addr.s6_addr.into(),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Bind `fd` to `a` (port 0: one the kernel gives) with the C library's
/// own call; the address it is bound to then.
pub(crate) fn bind_any_port(
    fd: RawFd,
    a: std::net::SocketAddr,
) -> io::Result<std::net::SocketAddr> {
    let (st, len) = sockaddr(a);
    let p = (&st as *const libc::sockaddr_storage).cast::<libc::sockaddr>();
    // SAFETY: `p` points at `len` initialised bytes of an address.
    if unsafe { real::bind()(fd, p, len as libc::socklen_t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    local_addr(fd).ok_or_else(|| io::Error::from(io::ErrorKind::AddrNotAvailable))
}

/// Close `fd` with the C library's own call (an fd of rxpath's making).
pub(crate) fn close_fd(fd: RawFd) {
    ours::release(fd);
    // SAFETY: closes an fd this library made and nothing else holds.
    unsafe { real::close()(fd) };
}

/// Is `fd` in non-blocking mode (`O_NONBLOCK`)?
pub(crate) fn nonblocking(fd: RawFd) -> bool {
    // SAFETY: F_GETFL takes no argument and only reads the fd's flags.
    let fl = unsafe { real::fcntl()(fd, libc::F_GETFL) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

/// A kernel TCP socket that is never bound or connected: the number a
/// connection rxpath accepted goes by (`flags`: `SOCK_NONBLOCK`,
/// `SOCK_CLOEXEC`).
pub(crate) fn stream_placeholder(v6: bool, flags: i32) -> io::Result<RawFd> {
    let domain = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    let ty = libc::SOCK_STREAM | (flags & (libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC));
    // SAFETY: the C library's socket with constant arguments.
    let fd = unsafe { real::socket()(domain, ty, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// `SIGPIPE` to the calling thread, as the kernel raises it on a write to
/// a connection shut for writing (without `MSG_NOSIGNAL`).
pub(crate) fn raise_sigpipe() {
    // SAFETY: sends a signal to the calling thread; no memory involved.
    unsafe {
        libc::raise(libc::SIGPIPE);
    }
}

/// The index of interface `name` (0 if there is none).
pub(crate) fn ifindex(name: &str) -> u32 {
    let Ok(c) = std::ffi::CString::new(name) else {
        return 0;
    };
    // SAFETY: `c` is a NUL-terminated name that lives across the call.
    unsafe { libc::if_nametoindex(c.as_ptr()) }
}

/// Memory shared with the children this process forks (`MAP_SHARED`,
/// anonymous): written whole through `&mut` before anyone else can see it
/// (before the fork), then only its atomic words change.
#[derive(Debug)]
pub(crate) struct Shared {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: after the writes through `&mut self`, the mapping's bytes are
// only read, and its words only touched as atomics: any thread of any
// process may hold it.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Shared {
    /// `len` zeroed bytes (at least one word), page-aligned.
    pub(crate) fn new(len: usize) -> io::Result<Shared> {
        let len = len.max(4);
        // SAFETY: a new anonymous shared mapping; the kernel picks where.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = std::ptr::NonNull::new(p.cast()).ok_or(io::ErrorKind::OutOfMemory)?;
        Ok(Shared { ptr, len })
    }

    /// The bytes, to write before the mapping is shared.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `len` bytes mapped at `ptr`, borrowed exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Copy `out.len()` bytes from `off` (bytes written before the mapping
    /// was shared, never written again).
    pub(crate) fn read(&self, off: usize, out: &mut [u8]) {
        assert!(off + out.len() <= self.len, "read past a shared mapping");
        // SAFETY: in bounds (checked); no process writes these bytes now.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), out.as_mut_ptr(), out.len())
        };
    }

    /// The 32-bit word at byte `off` (4-aligned), as an atomic.
    pub(crate) fn word(&self, off: usize) -> &std::sync::atomic::AtomicU32 {
        assert!(
            off.is_multiple_of(4) && off + 4 <= self.len,
            "a shared word out of place"
        );
        // SAFETY: in bounds and aligned (checked; the mapping is
        // page-aligned); the word is only ever accessed atomically.
        unsafe {
            &*self
                .ptr
                .as_ptr()
                .add(off)
                .cast::<std::sync::atomic::AtomicU32>()
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: unmaps this process's view of the mapping made in `new`;
        // no reference into it outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// The source address the kernel's routes pick towards `dst` (what a UDP
/// socket connected to it, never sending, is bound to), if it has a route:
/// the interface a membership that names none is on.
pub(crate) fn route_source(dst: std::net::IpAddr) -> Option<std::net::IpAddr> {
    use std::net::IpAddr;
    let family = if dst.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain arguments; the descriptor is closed below.
    let fd = unsafe { real::socket()(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    let (st, len) = sockaddr(std::net::SocketAddr::new(dst, 9));
    let p = (&st as *const libc::sockaddr_storage).cast::<libc::sockaddr>();
    // SAFETY: `p` points at `len` initialised bytes of an address.
    let ok = unsafe { real::connect()(fd, p, len as libc::socklen_t) } == 0;
    let mut out: libc::sockaddr_storage = st;
    let mut olen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let q = (&mut out as *mut libc::sockaddr_storage).cast::<libc::sockaddr>();
    // SAFETY: `out` has `olen` writable bytes.
    let named = ok && unsafe { libc::getsockname(fd, q, &mut olen) } == 0;
    // SAFETY: `fd` is the socket made above, closed once.
    unsafe { real::close()(fd) };
    if !named {
        return None;
    }
    if dst.is_ipv4() {
        // SAFETY: getsockname wrote a sockaddr_in for an AF_INET socket.
        let a = unsafe { std::ptr::read_unaligned(q.cast::<libc::sockaddr_in>()) };
        Some(IpAddr::V4(u32::from_be(a.sin_addr.s_addr).into()))
    } else {
        // SAFETY: getsockname wrote a sockaddr_in6 for an AF_INET6 socket.
        let a = unsafe { std::ptr::read_unaligned(q.cast::<libc::sockaddr_in6>()) };
        Some(IpAddr::V6(a.sin6_addr.s6_addr.into()))
    }
}

/// `a` as the C library passes it: a `sockaddr_in` or `sockaddr_in6` in a
/// `sockaddr_storage`, and its size.
pub(crate) fn sockaddr(a: std::net::SocketAddr) -> (libc::sockaddr_storage, usize) {
    use std::net::SocketAddr;
    // SAFETY: an all-zero sockaddr_storage is valid.
    let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let at = (&mut st as *mut libc::sockaddr_storage).cast::<u8>();
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
            unsafe { std::ptr::write_unaligned(at.cast(), sin) };
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
            unsafe { std::ptr::write_unaligned(at.cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (st, size)
}

/// Milliseconds left until `deadline` for a kernel wait (`-1`: none).
pub(crate) fn left_ms(deadline: Option<Instant>) -> i32 {
    match deadline {
        None => -1,
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            // Rounded up: a wait never ends before its deadline.
            left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
        }
    }
}

/// The instant a wait of `timeout_ms` ends (`None`: a negative timeout,
/// no end).
pub(crate) fn deadline(timeout_ms: i32) -> Option<Instant> {
    (timeout_ms >= 0).then(|| Instant::now() + Duration::from_millis(timeout_ms as u64))
}

/// The errno of an I/O error.
pub(crate) fn errno(e: std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Is `sig` blocked in the calling thread?
    fn blocked(sig: i32) -> bool {
        // SAFETY: all-zero storage is a valid sigset_t; a null new mask
        // only reads the thread's mask into it.
        unsafe {
            let mut now: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now);
            libc::sigismember(&now, sig) == 1
        }
    }

    #[test]
    fn threads_started_with_signals_blocked_leave_the_programs_to_it() {
        let t = signals_blocked(|| {
            std::thread::spawn(|| {
                [libc::SIGQUIT, libc::SIGTERM, libc::SIGCHLD, libc::SIGSEGV].map(blocked)
            })
        });
        assert_eq!(t.join().unwrap(), [true, true, true, false]);
        assert!(!blocked(libc::SIGQUIT), "the caller's mask is restored");
    }
}
