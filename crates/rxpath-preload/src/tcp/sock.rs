//! A TCP socket rxpath serves for the program: a listener (its kernel
//! socket listens too, for what comes over loopback or another
//! interface) or a connection rxpath accepted (its fd a kernel socket
//! that never connects, holding the number).

use crate::watchers::Watchers;
use rxpath_dev::sys::xdp::PortKey;
use rxpath_runtime::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Which end of TCP the socket is.
#[derive(Debug)]
pub(crate) enum End {
    /// A listener, with the destinations the port map takes for it.
    Listener(TcpListener, Vec<PortKey>),
    /// A connection.
    Stream(TcpStream),
}

/// A served TCP socket behind a program's fd.
#[derive(Debug)]
pub(crate) struct TcpSock {
    pub(crate) end: End,
    pub(crate) nonblock: AtomicBool,
    pub(crate) watch: Arc<Watchers>,
    /// Fds that name this socket (`dup` makes more); it closes with the
    /// last.
    pub(crate) fds: AtomicUsize,
    /// A listener's kernel socket may hold a connection (loopback, another
    /// interface): `accept` tries it ([`crate::kside`]).
    pub(crate) kernel_ready: AtomicBool,
    /// Its key in the kernel-side watch (listeners).
    pub(crate) ktoken: u64,
    /// Its line in the report's list of sockets.
    pub(crate) report_id: usize,
    /// The destinations the port map took for a connection this process
    /// opened (`connect`): given back when it closes.
    pub(crate) keys: std::sync::Mutex<Vec<PortKey>>,
    /// A listener handed to the kernel (at a `fork`): its port left the
    /// port map then, and new connections are the kernel socket's.
    pub(crate) handed: AtomicBool,
}

impl TcpSock {
    /// A served socket around `end`, told of every change the machine
    /// makes to it.
    pub(crate) fn new(end: End, nonblock: bool, ktoken: u64, report_id: usize) -> Arc<TcpSock> {
        let watch = Arc::new(Watchers::default());
        let w: Arc<dyn rxpath_runtime::sock::Watch> = watch.clone();
        match &end {
            End::Listener(l, _) => l.set_watch(Arc::downgrade(&w)),
            End::Stream(s) => s.set_watch(Arc::downgrade(&w)),
        }
        Arc::new(TcpSock {
            end,
            nonblock: nonblock.into(),
            watch,
            fds: 1.into(),
            kernel_ready: false.into(),
            ktoken,
            report_id,
            handed: false.into(),
            keys: Default::default(),
        })
    }

    /// The connection, if it is one.
    pub(crate) fn stream(&self) -> Option<&TcpStream> {
        match &self.end {
            End::Stream(s) => Some(s),
            End::Listener(..) => None,
        }
    }

    /// Its busy-poll window (µs), its NAPI and the host's socket layer
    /// ([`rxpath_runtime::TcpStream::busy_poll_of`]).
    pub(crate) fn busy_of(&self) -> (u32, rxpath_core::NapiId, &rxpath_core::sock::Sockets) {
        match &self.end {
            End::Listener(l, _) => l.busy_poll_of(),
            End::Stream(s) => s.busy_poll_of(),
        }
    }

    /// Its readiness as `poll` has it (`EPOLLIN`, `EPOLLOUT`, `EPOLLRDHUP`,
    /// `EPOLLHUP`, `EPOLLERR`): the machine's (`tcp_poll`,
    /// `inet_csk_listen_poll`), and a connection waiting in a listener's
    /// kernel socket.
    pub(crate) fn events(&self) -> u32 {
        let m = match &self.end {
            End::Listener(l, _) => l.events(),
            End::Stream(s) => s.events(),
        };
        let mut m = m.unwrap_or((libc::EPOLLERR | libc::EPOLLHUP) as u32);
        if self.kernel_ready.load(Ordering::Relaxed) {
            m |= (libc::EPOLLIN | libc::EPOLLRDNORM) as u32;
        }
        m
    }
}

/// Busy-poll the NAPIs of `socks` for the longest of their windows, or
/// until `ready()`; false if none has a window and a NAPI. The waiter
/// sleeps on the devices next ([`crate::device`]), so where IRQ
/// suspension or prefer-busy-poll is on it polls once with no window too
/// and leaves the interrupts deferred, as UDP's waiters do.
pub(crate) fn busy_wait_all(socks: &[&TcpSock], ready: &dyn Fn() -> bool) -> bool {
    let mut ids = Vec::new();
    let mut us = 0;
    let mut host = None;
    for t in socks {
        let (w, id, h) = t.busy_of();
        if id.0 == 0 {
            continue;
        }
        if ids.contains(&id) {
            us = us.max(w);
            continue;
        }
        if w > 0 || suspends(h, id) {
            us = us.max(w);
            ids.push(id);
            host.get_or_insert(h);
        }
    }
    let Some(h) = host else { return false };
    rxpath_runtime::sock::busy_loop(h, &ids, us, rxpath_core::sock::BUSY_POLL_BUDGET, ready);
    true
}

/// [`busy_wait_all`] until one of `tcp` is touched (a segment, a
/// state change); false if none busy-polls.
pub(crate) fn busy_wait_touched(tcp: &[Arc<TcpSock>]) -> bool {
    if tcp.is_empty() {
        return false;
    }
    let seen: Vec<u64> = tcp.iter().map(|t| t.watch.edges()).collect();
    let refs: Vec<&TcpSock> = tcp.iter().map(|t| &**t).collect();
    let moved = || tcp.iter().zip(&seen).any(|(t, e)| t.watch.edges() != *e);
    busy_wait_all(&refs, &moved)
}

/// NAPI `id` keeps its interrupt deferred after a poll (IRQ suspension or
/// prefer-busy-poll).
fn suspends(h: &rxpath_core::sock::Sockets, id: rxpath_core::NapiId) -> bool {
    h.napi_by_id(id)
        .is_some_and(|n| n.prefer_busy_poll() > 0 || n.irq_suspend_timeout() > 0)
}
