//! Who sleeps on one served socket, UDP's or TCP's: the eventfds of
//! waiters in `poll`, `select` or `epoll_wait`, signalled when the socket
//! may have become ready, and the count of those edges that
//! edge-triggered epoll reports once each.

use crate::sys;
use rxpath_dev::sync::lock;
use rxpath_runtime::sock::Watch;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Who sleeps on one rxpath socket: the eventfds of waiters in `poll` or
/// `select` (armed for one wait), and the epoll sets it is a member of
/// (for as long as it is one), signalled on the socket's edge from empty
/// to readable.
#[derive(Debug, Default)]
pub(crate) struct Watchers {
    sleeping: AtomicUsize,
    list: Mutex<Vec<RawFd>>,
    /// The epoll sets holding the socket, and how many.
    sets: Mutex<Vec<Arc<SetWaker>>>,
    nsets: AtomicUsize,
    /// Edges so far (empty → readable, or closed): what edge-triggered
    /// epoll reports once each.
    edges: AtomicU64,
}

impl Watch for Watchers {
    fn ready(&self) {
        self.edges.fetch_add(1, Ordering::SeqCst);
        // Pairs with `arm` and `SetWaker::sleep`: either the waiter's look
        // at the queue sees the datagram, or this sees the waiter.
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) > 0 {
            for fd in lock(&self.list).iter() {
                sys::eventfd_signal(*fd);
            }
        }
        if self.nsets.load(Ordering::SeqCst) > 0 {
            for s in lock(&self.sets).iter() {
                if s.sleeping.load(Ordering::SeqCst) > 0 {
                    sys::eventfd_signal(s.fd.as_raw_fd());
                }
            }
        }
    }
}

/// An epoll set's wakeup, on each member's [`Watchers`] from `ADD` to
/// `DEL` (the kernel's `ep_poll_callback` on each item's wait queue): a
/// member's edge signals the set's eventfd while a waiter sleeps on it.
/// A wait raises one count instead of arming every member. The eventfd is
/// the waker's own, so a member that outlives its set never signals a
/// reused descriptor.
#[derive(Debug)]
pub(crate) struct SetWaker {
    fd: crate::sys::Ours,
    sleeping: AtomicUsize,
}

impl SetWaker {
    pub(crate) fn new(fd: crate::sys::Ours) -> SetWaker {
        SetWaker {
            fd,
            sleeping: AtomicUsize::new(0),
        }
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// A waiter sleeps on the set from here: the members' edges signal it
    /// (then it looks at the members, and waits).
    pub(crate) fn sleep(&self) {
        self.sleeping.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// The waiter is awake.
    pub(crate) fn woke(&self) {
        self.sleeping.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Watchers {
    pub(crate) fn arm(&self, efd: RawFd) {
        lock(&self.list).push(efd);
        self.sleeping.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    pub(crate) fn disarm(&self, efd: RawFd) {
        let mut l = lock(&self.list);
        if let Some(i) = l.iter().position(|f| *f == efd) {
            l.swap_remove(i);
            self.sleeping.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The socket joined the epoll set `s`.
    pub(crate) fn join(&self, s: &Arc<SetWaker>) {
        lock(&self.sets).push(s.clone());
        self.nsets.fetch_add(1, Ordering::SeqCst);
    }

    /// The socket left the epoll set `s` (once per join).
    pub(crate) fn leave(&self, s: &Arc<SetWaker>) {
        let mut l = lock(&self.sets);
        if let Some(i) = l.iter().position(|x| Arc::ptr_eq(x, s)) {
            l.swap_remove(i);
            self.nsets.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The epoll sets the socket is in.
    #[cfg(test)]
    pub(crate) fn sets(&self) -> usize {
        self.nsets.load(Ordering::SeqCst)
    }

    pub(crate) fn edges(&self) -> u64 {
        self.edges.load(Ordering::Acquire)
    }
}
