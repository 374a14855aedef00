//! Who sleeps on one served socket, UDP's or TCP's: the eventfds of
//! waiters in `poll`, `select` or `epoll_wait`, signalled when the socket
//! may have become ready, and the count of those edges that
//! edge-triggered epoll reports once each.

use crate::sys;
use rxpath_dev::sync::lock;
use rxpath_runtime::sock::Watch;
use std::os::fd::RawFd;
use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Who sleeps on one rxpath socket: the eventfds of waiters in `poll` or
/// `epoll_wait`, signalled on the socket's edge from empty to readable.
#[derive(Debug, Default)]
pub(crate) struct Watchers {
    sleeping: AtomicUsize,
    list: Mutex<Vec<RawFd>>,
    /// Edges so far (empty → readable, or closed): what edge-triggered
    /// epoll reports once each.
    edges: AtomicU64,
}

impl Watch for Watchers {
    fn ready(&self) {
        self.edges.fetch_add(1, Ordering::SeqCst);
        // Pairs with `arm`: either the waiter's look at the queue sees the
        // datagram, or this sees the waiter.
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) > 0 {
            for fd in lock(&self.list).iter() {
                sys::eventfd_signal(*fd);
            }
        }
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

    pub(crate) fn edges(&self) -> u64 {
        self.edges.load(Ordering::Acquire)
    }
}
