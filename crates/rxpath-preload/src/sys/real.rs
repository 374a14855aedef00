//! The C library's own functions, found with `dlsym(RTLD_NEXT, name)` on
//! first use: what every interposed call falls through to.

use libc::{
    c_int, c_uint, c_ulong, c_void, epoll_event, fd_set, iovec, mmsghdr, msghdr, nfds_t, pollfd,
    sigset_t, size_t, sockaddr, socklen_t, ssize_t, timespec, timeval,
};
use std::sync::atomic::{AtomicPtr, Ordering};

/// The address of `name` (NUL-terminated) in the next object after this
/// library, cached in `slot`. A libc without it is not one the program can
/// run on: abort with a message rather than call null.
fn resolve(slot: &AtomicPtr<c_void>, name: &'static [u8]) -> *mut c_void {
    let p = slot.load(Ordering::Relaxed);
    if !p.is_null() {
        return p;
    }
    // SAFETY: `name` is a NUL-terminated symbol name; RTLD_NEXT is valid
    // from a shared object.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) };
    if p.is_null() {
        let msg = b"rxpath-preload: a C library function is missing (dlsym RTLD_NEXT)\n";
        // SAFETY: writes a static buffer to stderr; then abort.
        unsafe {
            libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len());
            libc::abort();
        }
    }
    slot.store(p, Ordering::Relaxed);
    p
}

macro_rules! real {
    ($($name:ident: fn($($a:ty),*) -> $r:ty;)*) => {$(
        /// The C library's function of this name.
        #[inline]
        pub(crate) fn $name() -> unsafe extern "C" fn($($a),*) -> $r {
            static SLOT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
            let p = resolve(&SLOT, concat!(stringify!($name), "\0").as_bytes());
            // SAFETY: the symbol is glibc's function of this name, whose C
            // prototype is the signature given here.
            unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($a),*) -> $r>(p) }
        }
    )*};
}

/// Variadic ones (`fcntl`, `ioctl`): called with their one argument.
macro_rules! real_variadic {
    ($($name:ident: fn($($a:ty),*) -> $r:ty;)*) => {$(
        /// The C library's function of this name.
        #[inline]
        pub(crate) fn $name() -> unsafe extern "C" fn($($a),*, ...) -> $r {
            static SLOT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
            let p = resolve(&SLOT, concat!(stringify!($name), "\0").as_bytes());
            // SAFETY: the symbol is glibc's variadic function of this
            // name, whose C prototype is the signature given here.
            unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($a),*, ...) -> $r>(p) }
        }
    )*};
}

real_variadic! {
    syscall: fn(libc::c_long) -> libc::c_long;
    ioctl: fn(c_int, c_ulong) -> c_int;
    fcntl: fn(c_int, c_int) -> c_int;
    fcntl64: fn(c_int, c_int) -> c_int;
}

real! {
    socket: fn(c_int, c_int, c_int) -> c_int;
    bind: fn(c_int, *const sockaddr, socklen_t) -> c_int;
    connect: fn(c_int, *const sockaddr, socklen_t) -> c_int;
    close: fn(c_int) -> c_int;
    _exit: fn(c_int) -> ();
    fork: fn() -> libc::pid_t;
    listen: fn(c_int, c_int) -> c_int;
    accept4: fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int;
    getsockname: fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
    getpeername: fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
    getsockopt: fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int;
    sendfile: fn(c_int, c_int, *mut libc::off_t, size_t) -> ssize_t;
    sendfile64: fn(c_int, c_int, *mut libc::off64_t, size_t) -> ssize_t;
    shutdown: fn(c_int, c_int) -> c_int;
    dup: fn(c_int) -> c_int;
    dup2: fn(c_int, c_int) -> c_int;
    dup3: fn(c_int, c_int, c_int) -> c_int;
    read: fn(c_int, *mut c_void, size_t) -> ssize_t;
    write: fn(c_int, *const c_void, size_t) -> ssize_t;
    recv: fn(c_int, *mut c_void, size_t, c_int) -> ssize_t;
    recvfrom: fn(c_int, *mut c_void, size_t, c_int, *mut sockaddr, *mut socklen_t) -> ssize_t;
    recvmsg: fn(c_int, *mut msghdr, c_int) -> ssize_t;
    recvmmsg: fn(c_int, *mut mmsghdr, c_uint, c_int, *mut timespec) -> c_int;
    send: fn(c_int, *const c_void, size_t, c_int) -> ssize_t;
    sendto: fn(c_int, *const c_void, size_t, c_int, *const sockaddr, socklen_t) -> ssize_t;
    sendmsg: fn(c_int, *const msghdr, c_int) -> ssize_t;
    sendmmsg: fn(c_int, *mut mmsghdr, c_uint, c_int) -> c_int;
    readv: fn(c_int, *const iovec, c_int) -> ssize_t;
    writev: fn(c_int, *const iovec, c_int) -> ssize_t;
    setsockopt: fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int;
    setuid: fn(libc::uid_t) -> c_int;
    seteuid: fn(libc::uid_t) -> c_int;
    setreuid: fn(libc::uid_t, libc::uid_t) -> c_int;
    setresuid: fn(libc::uid_t, libc::uid_t, libc::uid_t) -> c_int;
    capset: fn(*mut c_void, *const c_void) -> c_int;
    poll: fn(*mut pollfd, nfds_t, c_int) -> c_int;
    ppoll: fn(*mut pollfd, nfds_t, *const timespec, *const sigset_t) -> c_int;
    select: fn(c_int, *mut fd_set, *mut fd_set, *mut fd_set, *mut timeval) -> c_int;
    pselect: fn(c_int, *mut fd_set, *mut fd_set, *mut fd_set, *const timespec, *const sigset_t) -> c_int;
    epoll_create: fn(c_int) -> c_int;
    epoll_create1: fn(c_int) -> c_int;
    epoll_ctl: fn(c_int, c_int, c_int, *mut epoll_event) -> c_int;
    epoll_wait: fn(c_int, *mut epoll_event, c_int, c_int) -> c_int;
    epoll_pwait: fn(c_int, *mut epoll_event, c_int, c_int, *const sigset_t) -> c_int;
    epoll_pwait2: fn(c_int, *mut epoll_event, c_int, *const timespec, *const sigset_t) -> c_int;
}
