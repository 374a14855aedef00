//! The program's epoll sets: made, changed (`epoll_ctl` for an rxpath
//! socket), waited on, their busy-poll parameters; and a closed fd taken
//! out of each.

use super::*;
use crate::epoll::EpSet;
use crate::host::global;
use crate::table::{self, Entry};
use rxpath_dev::sync::lock;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, Weak};

pub(super) fn forget_in_sets(fd: RawFd) {
    for set in epoll_sets() {
        set.forget(fd);
    }
}

fn epoll_sets() -> Vec<Arc<EpSet>> {
    let sets = lock(&SETS);
    sets.iter().filter_map(Weak::upgrade).collect()
}

static SETS: Mutex<Vec<Weak<EpSet>>> = Mutex::new(Vec::new());

/// `epoll_create*()` made `kfd`.
pub(crate) fn on_epoll_create(kfd: RawFd) {
    if crate::host::inside() || !global().enabled() {
        return;
    }
    let set = Arc::new(EpSet::new(kfd));
    let mut sets = lock(&SETS);
    sets.retain(|w| w.strong_count() > 0);
    sets.push(Arc::downgrade(&set));
    drop(sets);
    table::set(kfd, Entry::Epoll(set));
}

/// `epoll_ctl()`: an rxpath socket joins the set here; anything else is
/// the kernel's (counted for the set).
pub(crate) fn epoll_ctl(
    epfd: RawFd,
    op: i32,
    fd: RawFd,
    ev: Option<libc::epoll_event>,
) -> Route<()> {
    let Some(Entry::Epoll(set)) = table::get(epfd) else {
        return Route::Kernel;
    };
    match table::served_sock(fd) {
        Some(a) => Route::Done(set.ctl_socket(op, fd, a, ev)),
        None => Route::Kernel,
    }
}

/// A kernel `epoll_ctl` on set `epfd` succeeded.
pub(crate) fn epoll_ctl_done(epfd: RawFd, op: i32) {
    if let Some(Entry::Epoll(set)) = table::get(epfd) {
        match op {
            libc::EPOLL_CTL_ADD => set.kernel_fd(true),
            libc::EPOLL_CTL_DEL => set.kernel_fd(false),
            _ => {}
        }
    }
}

/// `epoll_wait()` on `epfd`.
pub(crate) fn epoll_wait(
    epfd: RawFd,
    out: &mut [libc::epoll_event],
    timeout_ms: i32,
) -> Route<usize> {
    match table::get(epfd) {
        Some(Entry::Epoll(set)) => {
            if crate::kside::any_lent() {
                // A wait on a socket whose port was lent at a fork.
                for a in set.sockets() {
                    crate::kside::take_back_after_fork(&a);
                }
            }
            Route::Done(set.wait(out, timeout_ms))
        }
        _ => Route::Kernel,
    }
}

/// `ioctl(EPIOCSPARAMS)` on an epoll set the kernel accepted: the set's
/// busy polling uses them (`ep_busy_loop`).
pub(crate) fn epoll_params(fd: RawFd, us: u32, budget: u16) {
    if let Some(Entry::Epoll(set)) = table::get(fd) {
        set.set_params(crate::udp::sock::BusyParams { us, budget });
    }
}
