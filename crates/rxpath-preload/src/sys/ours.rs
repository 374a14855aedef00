//! The library's own descriptors: the eventfds its waiters sleep on, its
//! kernel epoll sets, the device descriptors it sleeps on, its relays'
//! socket pairs and the kernel sockets it keeps open for a port. Each is
//! held in a bitmap from when it is made until the library closes it, and
//! a `close` from the program on one of these numbers fails with `EBADF`
//! and closes nothing. That is what the program gets where rxpath is not:
//! it can only name one of these numbers by closing a number twice (its
//! own a moment ago, given to the library in between), and the kernel
//! answers a second close `EBADF`. Without the bitmap, the program's
//! mistake would take the descriptor from under the path.

use super::real;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// Numbers at or above this are never held (the library's own are made
/// low, as the kernel gives the lowest free number).
const MAX_FD: usize = 1 << 16;

static HELD: [AtomicU64; MAX_FD / 64] = [const { AtomicU64::new(0) }; MAX_FD / 64];

fn slot(fd: RawFd) -> Option<(&'static AtomicU64, u64)> {
    let i = usize::try_from(fd).ok().filter(|&i| i < MAX_FD)?;
    Some((&HELD[i / 64], 1 << (i % 64)))
}

/// `fd` is one of the library's own descriptors.
#[inline]
pub(crate) fn held(fd: RawFd) -> bool {
    slot(fd).is_some_and(|(w, bit)| w.load(Ordering::Acquire) & bit != 0)
}

/// Let go of every held number whose descriptor is closed: in a forked
/// child, whose clean-up closes the parent's host descriptors and relay
/// ends by number, so that the child's program may close what the kernel
/// gives it on those numbers next.
pub(crate) fn release_closed() {
    for (i, w) in HELD.iter().enumerate() {
        let mut bits = w.load(Ordering::Acquire);
        while bits != 0 {
            let b = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let fd = (i * 64 + b) as RawFd;
            // SAFETY: F_GETFD only reads an fd's flags, open or not.
            if unsafe { real::fcntl()(fd, libc::F_GETFD) } < 0 {
                w.fetch_and(!(1u64 << b), Ordering::AcqRel);
            }
        }
    }
}

/// Let go of `fd` (the library closes it by number).
pub(crate) fn release(fd: RawFd) {
    if let Some((w, bit)) = slot(fd) {
        w.fetch_and(!bit, Ordering::AcqRel);
    }
}

/// A descriptor of the library's own, held (see the module) while it
/// lives and closed when it is dropped.
#[derive(Debug)]
pub(crate) struct Ours(RawFd);

impl Ours {
    /// Take `fd` as the library's own.
    pub(crate) fn new(fd: OwnedFd) -> Ours {
        let fd = fd.into_raw_fd();
        if let Some((w, bit)) = slot(fd) {
            w.fetch_or(bit, Ordering::AcqRel);
        }
        Ours(fd)
    }
}

impl Drop for Ours {
    fn drop(&mut self) {
        // Let the number go before closing it: once closed, the kernel may
        // give it to the program at once.
        release(self.0);
        // SAFETY: the C library's close on the fd this value owns, once;
        // an error (the program closed it between the two lines above) has
        // nothing left to undo.
        unsafe { real::close()(self.0) };
    }
}

/// Free numbers kept from the library while it starts its host: the
/// lowest free numbers are those the program closed last, and one it
/// closes twice is one of them.
const KEPT_FREE: usize = 64;

/// Numbers under the soft `RLIMIT_NOFILE` left to the host's start
/// whatever is kept free.
const HEADROOM: u64 = 128;

/// Run `f` (the host's start) with the lowest [`KEPT_FREE`] free numbers
/// taken, and give them back after: every descriptor `f` makes, on this
/// thread or on those it starts, is numbered above them, none on a number
/// the program freed just before (the kernel gives the lowest free).
/// Those descriptors are the host's (its AF_XDP and packet sockets, BPF
/// maps and program, eventfds, the control socket), closed by number in a
/// forked child, so the bitmap does not hold them; what keeps a program's
/// second close off them is that none is on a number the program had. The
/// numbers go back after `f`, in order, so the program's next descriptor
/// is numbered as on the kernel. Fewer are taken near the soft limit.
pub(crate) fn above_the_program<R>(f: impl FnOnce() -> R) -> R {
    let mut soft = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    let limit = match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut soft) } {
        0 => soft.rlim_cur.saturating_sub(HEADROOM),
        _ => 0,
    };
    let mut kept: Vec<RawFd> = Vec::with_capacity(KEPT_FREE);
    // SAFETY: open of a constant, NUL-terminated path; the result is
    // checked and closed below.
    let first = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    let mut next = first;
    // Each number taken is below the limit: the host's start keeps its
    // headroom whatever the program holds.
    while next >= 0 && (next as u64) < limit {
        kept.push(next);
        if kept.len() == KEPT_FREE {
            next = -1;
            break;
        }
        // SAFETY: F_DUPFD_CLOEXEC of an fd this function opened: a new fd
        // on the lowest free number, or -1.
        next = unsafe { real::fcntl()(first, libc::F_DUPFD_CLOEXEC, 0) };
    }
    if next >= 0 {
        // Past the limit: not kept.
        // SAFETY: close of an fd this function made and nobody else knows.
        unsafe { real::close()(next) };
    }
    let r = f();
    for fd in kept {
        // SAFETY: close of an fd this function made and nobody else knows.
        unsafe { real::close()(fd) };
    }
    r
}

impl AsRawFd for Ours {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

impl AsFd for Ours {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd is open for as long as `self` lives.
        unsafe { BorrowedFd::borrow_raw(self.0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_is_held_while_its_descriptor_lives() {
        let fd = Ours::new(super::super::eventfd_owned().expect("an eventfd"));
        let n = fd.as_raw_fd();
        assert!(held(n));
        drop(fd);
        assert!(!held(n));
        // The number is free again: the kernel says so.
        // SAFETY: F_GETFD only reads the flags of an fd, open or not.
        assert_eq!(unsafe { libc::fcntl(n, libc::F_GETFD) }, -1);
    }

    /// A held number closed by number (a forked child's clean-up) is let
    /// go by the sweep; one still open stays held.
    #[test]
    fn the_sweep_lets_go_of_closed_numbers_only() {
        let open = Ours::new(super::super::eventfd_owned().expect("an eventfd"));
        let closed = Ours::new(super::super::eventfd_owned().expect("an eventfd"));
        let n = closed.as_raw_fd();
        std::mem::forget(closed);
        // SAFETY: closes the fd `closed` owned, which is forgotten.
        unsafe { real::close()(n) };
        assert!(held(n));
        release_closed();
        assert!(!held(n));
        assert!(held(open.as_raw_fd()));
    }
}
