//! Waiting and the wire: `poll`, the epoll calls, the device's send and
//! receive, packetdrill's clock (`usleep`, `gettimeofday`), and the calls
//! the stack does not have (`pipe`, `splice`).

use super::*;

pub(super) unsafe extern "C" fn pd_poll(
    ud: Ud,
    fds: *mut pollfd,
    n: libc::nfds_t,
    timeout: c_int,
) -> c_int {
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

pub(super) unsafe extern "C" fn pd_netdev_send(ud: Ud, buf: *const c_void, len: size_t) -> c_int {
    if buf.is_null() {
        return -1;
    }
    // SAFETY: `buf` holds `len` bytes of an IP packet; `ud` is ours.
    unsafe { world(ud).netdev_send(std::slice::from_raw_parts(buf as *const u8, len)) };
    0
}

pub(super) unsafe extern "C" fn pd_netdev_receive(
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

pub(super) unsafe extern "C" fn pd_usleep(ud: Ud, us: c_uint) -> c_int {
    // SAFETY: `ud` is ours.
    unsafe { world(ud) }.usleep(us as u64);
    0
}

pub(super) unsafe extern "C" fn pd_gettimeofday(
    ud: Ud,
    tv: *mut timeval,
    _tz: *mut c_void,
) -> c_int {
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

pub(super) unsafe extern "C" fn pd_epoll_create(ud: Ud, size: c_int) -> c_int {
    if size <= 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: `ud` is ours.
    ret(unsafe { world(ud) }.epoll_create()) as c_int
}

pub(super) unsafe extern "C" fn pd_epoll_ctl(
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

pub(super) unsafe extern "C" fn pd_epoll_wait(
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

pub(super) unsafe extern "C" fn pd_pipe(_ud: Ud, _fds: *mut c_int) -> c_int {
    set_errno(libc::ENOSYS);
    -1
}

pub(super) unsafe extern "C" fn pd_splice(
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
