//! `fcntl`, `ioctl`, `getsockopt` and `setsockopt`.

use super::*;

pub(super) unsafe extern "C" fn pd_fcntl(ud: Ud, fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    // SAFETY: `ud` is ours.
    ret(unsafe { world(ud) }.fcntl(fd, cmd, arg)) as c_int
}

pub(super) unsafe extern "C" fn pd_ioctl(
    ud: Ud,
    fd: c_int,
    req: c_ulong,
    arg: *mut c_int,
) -> c_int {
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

pub(super) unsafe extern "C" fn pd_getsockopt(
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
pub(super) unsafe fn copy_out<T>(v: &T, val: *mut c_void, len: *mut socklen_t) {
    // SAFETY: at most `*len` bytes of `v` are copied out.
    unsafe {
        let n = (*len as usize).min(size_of::<T>());
        std::ptr::copy_nonoverlapping(v as *const T as *const u8, val as *mut u8, n);
        *len = n as socklen_t;
    }
}

pub(super) unsafe extern "C" fn pd_setsockopt(
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
