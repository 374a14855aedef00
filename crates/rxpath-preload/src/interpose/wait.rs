//! The waits: `poll`, `ppoll`, `select` and the `epoll` calls.

use super::{fail, ret};
use crate::ops::{self, Route};
use crate::sys::real;
use crate::table;
use libc::{c_int, epoll_event, fd_set, nfds_t, pollfd, sigset_t, timespec, timeval};

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
    if !set.iter().any(|p| table::served(p.fd)) {
        // SAFETY: the C library's poll with the program's arguments.
        return unsafe { real::poll()(fds, n, timeout) };
    }
    ret(crate::readiness::poll(set, timeout)) as c_int
}

#[no_mangle]
pub extern "C" fn ppoll(
    fds: *mut pollfd,
    n: nfds_t,
    ts: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    let set = pollfds(fds, n);
    if !set.iter().any(|p| table::served(p.fd)) {
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
    with_mask(mask, || ret(crate::readiness::poll(set, timeout)) as c_int)
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
    if !any_socket(nfds, r, w) {
        // SAFETY: the C library's select with the program's arguments.
        return unsafe { real::select()(nfds, r, w, e, tv) };
    }
    let timeout = if tv.is_null() {
        -1
    } else {
        // SAFETY: a non-null timeout is a readable timeval.
        let t = unsafe { *tv };
        ms(t.tv_sec, t.tv_usec, 1000)
    };
    select_sets(nfds, [r, w, e], timeout)
}

#[no_mangle]
pub extern "C" fn pselect(
    nfds: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    ts: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    if !any_socket(nfds, r, w) {
        // SAFETY: the C library's pselect with the program's arguments.
        return unsafe { real::pselect()(nfds, r, w, e, ts, mask) };
    }
    let timeout = if ts.is_null() {
        -1
    } else {
        // SAFETY: a non-null timeout is a readable timespec.
        let t = unsafe { *ts };
        ms(t.tv_sec, t.tv_nsec, 1_000_000)
    };
    with_mask(mask, || select_sets(nfds, [r, w, e], timeout))
}

/// Is `fd` in the program's set `s` (null: no set)?
fn is_set(s: *mut fd_set, fd: c_int) -> bool {
    // SAFETY: a non-null set is the program's fd_set; fd < FD_SETSIZE.
    !s.is_null() && unsafe { libc::FD_ISSET(fd, s) }
}

/// Does the read or write set name an rxpath socket?
fn any_socket(nfds: c_int, r: *mut fd_set, w: *mut fd_set) -> bool {
    let nfds = nfds.clamp(0, libc::FD_SETSIZE as c_int);
    (0..nfds).any(|fd| table::served(fd) && (is_set(r, fd) || is_set(w, fd)))
}

/// `select` over the program's three sets as a poll of their fds, the
/// sets filled again with what is ready.
fn select_sets(nfds: c_int, [r, w, e]: [*mut fd_set; 3], timeout: c_int) -> c_int {
    let nfds = nfds.clamp(0, libc::FD_SETSIZE as c_int);
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
    if let Err(err) = crate::readiness::poll(&mut fds, timeout) {
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
    if table::kind(fd) == table::FORKED {
        // A forked child waits on a socket it inherited.
        crate::udp::forkq::child_uses(fd);
    }
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
