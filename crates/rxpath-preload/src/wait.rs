//! Readiness over rxpath sockets and kernel fds: `poll`/`select` and
//! `epoll_wait` as the program sees them.
//!
//! An rxpath socket's readiness is its queue, read without a system call;
//! a kernel fd's is the kernel's. A wait first looks at both (the kernel
//! only if the set has kernel fds), then busy-polls the sockets' NAPIs for
//! their `busy_poll` window, then sleeps in the kernel (`poll` or the
//! set's own epoll fd) on the kernel fds and an eventfd that a socket's
//! [`Watchers`] signal when a datagram arrives while someone sleeps: no
//! system call per datagram unless a waiter is asleep, as the kernel's own
//! wakeups.

use crate::sys;
use crate::table::{self, Accel};
use rxpath_core::NapiId;
use rxpath_runtime::sock::Watch;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

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
    fn arm(&self, efd: RawFd) {
        lock(&self.list).push(efd);
        self.sleeping.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    fn disarm(&self, efd: RawFd) {
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

/// The socket has a datagram to read (or is closed: a read returns).
fn readable(a: &Accel) -> bool {
    a.sock.queued() > 0 || a.sock.is_closed()
}

/// Busy-poll the NAPIs of `socks` for the longest of their `busy_poll`
/// windows, until one of them is readable. False if none busy-polls.
fn busy_wait(socks: &[&Arc<Accel>]) -> bool {
    let us = socks.iter().map(|a| a.sock.busy_poll()).max().unwrap_or(0);
    let Some(first) = socks.first() else {
        return false;
    };
    if us == 0 {
        return false;
    }
    let mut ids: Vec<NapiId> = socks
        .iter()
        .map(|a| a.sock.napi_id())
        .filter(|i| i.0 != 0)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.is_empty() {
        return false;
    }
    let host = first.sock.host();
    first.sock.count_busy_poll();
    rxpath_runtime::sock::busy_loop(host, &ids, us, &|| socks.iter().any(|a| readable(a)));
    if !socks.iter().any(|a| readable(a)) {
        // Going to sleep: a deferred interrupt must fire again.
        host.resume_irqs(&ids);
    }
    true
}

/// Milliseconds left until `deadline` for a kernel wait (`-1`: none).
fn left_ms(deadline: Option<Instant>) -> i32 {
    match deadline {
        None => -1,
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            // Rounded up: a wait never ends before its deadline.
            left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
        }
    }
}

fn deadline(timeout_ms: i32) -> Option<Instant> {
    (timeout_ms >= 0).then(|| Instant::now() + Duration::from_millis(timeout_ms as u64))
}

thread_local! {
    /// This thread's eventfd for `poll`/`select` sleeps.
    static POLL_EFD: std::cell::RefCell<Option<OwnedFd>> = const { std::cell::RefCell::new(None) };
}

fn with_poll_efd<R>(f: impl FnOnce(RawFd) -> R) -> Result<R, i32> {
    POLL_EFD.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = Some(sys::eventfd().map_err(|e| e.raw_os_error().unwrap_or(libc::ENOMEM))?);
        }
        let fd = c.as_ref().map_or(-1, |f| f.as_raw_fd());
        Ok(f(fd))
    })
}

/// Wait until `a` is readable (or closed): busy-poll its NAPI for its
/// `busy_poll` window, then sleep in the kernel on this thread's eventfd
/// until a datagram comes, `until` passes (`EAGAIN`, as `SO_RCVTIMEO`), or
/// a signal interrupts (`EINTR`).
pub(crate) fn wait_readable(a: &Arc<Accel>, until: Option<Instant>) -> Result<(), i32> {
    if readable(a) {
        return Ok(());
    }
    if busy_wait(&[a]) && readable(a) {
        return Ok(());
    }
    loop {
        if until.is_some() && left_ms(until) == 0 {
            return Err(libc::EAGAIN);
        }
        let r = with_poll_efd(|efd| {
            a.watch.arm(efd);
            let r = if readable(a) {
                Ok(0)
            } else {
                let mut p = [libc::pollfd {
                    fd: efd,
                    events: libc::POLLIN,
                    revents: 0,
                }];
                a.sock.count_sleep();
                sys::kpoll(&mut p, left_ms(until)).map_err(errno)
            };
            a.watch.disarm(efd);
            sys::eventfd_drain(efd);
            r
        })?;
        r?;
        if readable(a) {
            return Ok(());
        }
    }
}

/// `poll()` over `fds`, some of them rxpath sockets. Returns the number of
/// entries with events, or an errno.
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> Result<usize, i32> {
    let accel: Vec<Option<Arc<Accel>>> = fds.iter().map(|p| table::socket(p.fd)).collect();
    let socks: Vec<&Arc<Accel>> = accel.iter().flatten().collect();
    let kernel: Vec<usize> = (0..fds.len())
        .filter(|&i| accel[i].is_none() && fds[i].fd >= 0)
        .collect();
    let until = deadline(timeout_ms);
    let mut busy_done = false;
    loop {
        let n = poll_scan(fds, &accel, &kernel, 0)?;
        if n > 0 || timeout_ms == 0 {
            return Ok(n);
        }
        if !busy_done {
            busy_done = true;
            if busy_wait(&socks) {
                continue;
            }
        }
        let n = with_poll_efd(|efd| poll_sleep(fds, &accel, &kernel, &socks, efd, until))??;
        if n > 0 || left_ms(until) == 0 {
            return Ok(n);
        }
    }
}

/// The readiness of every entry now: rxpath sockets from their queues,
/// kernel fds from a kernel `poll` with `timeout` (only if there are any).
fn poll_scan(
    fds: &mut [libc::pollfd],
    accel: &[Option<Arc<Accel>>],
    kernel: &[usize],
    timeout: i32,
) -> Result<usize, i32> {
    let mut n = 0;
    for (p, a) in fds.iter_mut().zip(accel) {
        if let Some(a) = a {
            p.revents = sock_revents(a, p.events);
            n += usize::from(p.revents != 0);
        } else {
            p.revents = 0;
        }
    }
    if !kernel.is_empty() {
        let mut k: Vec<libc::pollfd> = kernel.iter().map(|&i| fds[i]).collect();
        sys::kpoll(&mut k, timeout).map_err(errno)?;
        for (j, &i) in kernel.iter().enumerate() {
            fds[i].revents = k[j].revents;
            n += usize::from(k[j].revents != 0);
        }
    }
    Ok(n)
}

fn sock_revents(a: &Accel, events: i16) -> i16 {
    let mut r = 0;
    if readable(a) {
        r |= libc::POLLIN | libc::POLLRDNORM;
    }
    // A UDP socket can always send (a full TX ring is a counted drop).
    r |= libc::POLLOUT | libc::POLLWRNORM;
    r & (events | libc::POLLERR | libc::POLLHUP)
}

/// Sleep in the kernel on the kernel fds and `efd` until one is ready, a
/// socket's watcher signals, or `until`.
fn poll_sleep(
    fds: &mut [libc::pollfd],
    accel: &[Option<Arc<Accel>>],
    kernel: &[usize],
    socks: &[&Arc<Accel>],
    efd: RawFd,
    until: Option<Instant>,
) -> Result<usize, i32> {
    for a in socks {
        a.watch.arm(efd);
    }
    let r = (|| {
        let n = poll_scan(fds, accel, kernel, 0)?;
        if n > 0 {
            return Ok(n);
        }
        let mut k: Vec<libc::pollfd> = kernel.iter().map(|&i| fds[i]).collect();
        k.push(libc::pollfd {
            fd: efd,
            events: libc::POLLIN,
            revents: 0,
        });
        sys::kpoll(&mut k, left_ms(until)).map_err(errno)?;
        Ok(0)
    })();
    for a in socks {
        a.watch.disarm(efd);
    }
    sys::eventfd_drain(efd);
    match r {
        Ok(0) => poll_scan(fds, accel, kernel, 0),
        r => r,
    }
}

fn errno(e: std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// The token of a set's own eventfd in its kernel epoll set.
const WAKE: u64 = u64::MAX - 0x7270;

/// One rxpath socket in an epoll set.
#[derive(Debug)]
struct Member {
    fd: RawFd,
    sock: Arc<Accel>,
    events: u32,
    data: u64,
    /// Edges already reported (edge-triggered).
    seen: u64,
    /// `EPOLLOUT` reported since the last `ADD`/`MOD` (edge-triggered).
    out_seen: bool,
    /// `EPOLLONESHOT` fired: nothing until the next `MOD`.
    disabled: bool,
}

/// An epoll set: the kernel's (the program's epoll fd, holding its kernel
/// fds) and the rxpath sockets in it.
#[derive(Debug)]
pub(crate) struct EpSet {
    kfd: RawFd,
    members: Mutex<Vec<Member>>,
    kernel_fds: AtomicUsize,
    efd: Mutex<Option<OwnedFd>>,
}

impl EpSet {
    /// The set whose kernel epoll fd is `kfd`.
    pub(crate) fn new(kfd: RawFd) -> EpSet {
        EpSet {
            kfd,
            members: Mutex::default(),
            kernel_fds: AtomicUsize::new(0),
            efd: Mutex::new(None),
        }
    }

    /// `epoll_ctl` for an rxpath socket.
    pub(crate) fn ctl_socket(
        &self,
        op: i32,
        fd: RawFd,
        sock: Arc<Accel>,
        ev: Option<libc::epoll_event>,
    ) -> Result<(), i32> {
        let mut m = lock(&self.members);
        let at = m.iter().position(|x| x.fd == fd);
        match (op, at) {
            (libc::EPOLL_CTL_ADD, Some(_)) => Err(libc::EEXIST),
            (libc::EPOLL_CTL_ADD, None) => {
                let ev = ev.ok_or(libc::EFAULT)?;
                self.wake_fd()?;
                let seen = first_seen(&sock);
                m.push(Member {
                    fd,
                    sock,
                    events: ev.events,
                    data: ev.u64,
                    seen,
                    out_seen: false,
                    disabled: false,
                });
                Ok(())
            }
            (libc::EPOLL_CTL_MOD, Some(i)) => {
                let ev = ev.ok_or(libc::EFAULT)?;
                let x = &mut m[i];
                x.events = ev.events;
                x.data = ev.u64;
                x.seen = first_seen(&x.sock);
                x.out_seen = false;
                x.disabled = false;
                Ok(())
            }
            (libc::EPOLL_CTL_DEL, Some(i)) => {
                m.swap_remove(i);
                Ok(())
            }
            (libc::EPOLL_CTL_MOD | libc::EPOLL_CTL_DEL, None) => Err(libc::ENOENT),
            _ => Err(libc::EINVAL),
        }
    }

    /// A kernel fd was added (`+1`) or removed (`-1`) by a kernel
    /// `epoll_ctl` that succeeded.
    pub(crate) fn kernel_fd(&self, added: bool) {
        if added {
            self.kernel_fds.fetch_add(1, Ordering::Relaxed);
        } else {
            let _ = self
                .kernel_fds
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }

    /// A closed fd leaves the set (the kernel drops closed fds itself).
    pub(crate) fn forget(&self, fd: RawFd) {
        lock(&self.members).retain(|m| m.fd != fd);
    }

    /// The set's eventfd, registered in its kernel set on first use.
    fn wake_fd(&self) -> Result<RawFd, i32> {
        let mut g = lock(&self.efd);
        if let Some(f) = g.as_ref() {
            return Ok(f.as_raw_fd());
        }
        let f = sys::eventfd().map_err(errno)?;
        let ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: WAKE,
        };
        sys::kepoll_ctl(self.kfd, libc::EPOLL_CTL_ADD, f.as_raw_fd(), Some(ev)).map_err(errno)?;
        let fd = f.as_raw_fd();
        *g = Some(f);
        Ok(fd)
    }

    /// `epoll_wait` on this set.
    pub(crate) fn wait(
        &self,
        out: &mut [libc::epoll_event],
        timeout_ms: i32,
    ) -> Result<usize, i32> {
        if out.is_empty() {
            return Err(libc::EINVAL);
        }
        if lock(&self.members).is_empty() {
            return self.kernel_wait(out, timeout_ms);
        }
        let until = deadline(timeout_ms);
        let mut busy_done = false;
        loop {
            let n = self.scan(out, 0)?;
            if n > 0 || timeout_ms == 0 {
                return Ok(n);
            }
            if !busy_done {
                busy_done = true;
                let socks: Vec<Arc<Accel>> =
                    lock(&self.members).iter().map(|m| m.sock.clone()).collect();
                let refs: Vec<&Arc<Accel>> = socks.iter().collect();
                if busy_wait(&refs) {
                    continue;
                }
            }
            let n = self.sleep(out, until)?;
            if n > 0 || left_ms(until) == 0 {
                return Ok(n);
            }
        }
    }

    /// What is ready now: the rxpath sockets, then (if the set has kernel
    /// fds, and room is left) the kernel's with `timeout`.
    fn scan(&self, out: &mut [libc::epoll_event], timeout: i32) -> Result<usize, i32> {
        let mut n = self.scan_members(out);
        let has_kernel = self.kernel_fds.load(Ordering::Relaxed) > 0;
        if has_kernel && n < out.len() {
            n += self.kernel_wait(&mut out[n..], if n > 0 { 0 } else { timeout })?;
        }
        Ok(n)
    }

    /// A kernel wait on the set, the set's own wakeups taken out.
    fn kernel_wait(&self, out: &mut [libc::epoll_event], timeout: i32) -> Result<usize, i32> {
        let k = sys::kepoll_wait(self.kfd, out, timeout).map_err(errno)?;
        let mut n = 0;
        for i in 0..k {
            if out[i].u64 == WAKE {
                if let Some(f) = lock(&self.efd).as_ref() {
                    sys::eventfd_drain(f.as_raw_fd());
                }
                continue;
            }
            out[n] = out[i];
            n += 1;
        }
        Ok(n)
    }

    fn scan_members(&self, out: &mut [libc::epoll_event]) -> usize {
        let mut m = lock(&self.members);
        let mut n = 0;
        for x in m.iter_mut() {
            if n == out.len() {
                break;
            }
            if x.disabled {
                continue;
            }
            let ev = member_events(x);
            if ev != 0 {
                out[n] = libc::epoll_event {
                    events: ev,
                    u64: x.data,
                };
                n += 1;
                if x.events & libc::EPOLLONESHOT as u32 != 0 {
                    x.disabled = true;
                }
            }
        }
        n
    }

    fn sleep(&self, out: &mut [libc::epoll_event], until: Option<Instant>) -> Result<usize, i32> {
        let efd = self.wake_fd()?;
        let socks: Vec<Arc<Accel>> = lock(&self.members).iter().map(|m| m.sock.clone()).collect();
        for a in &socks {
            a.watch.arm(efd);
        }
        let n = self.scan_members(out);
        let r = if n > 0 {
            Ok(n)
        } else {
            self.kernel_wait(out, left_ms(until))
        };
        for a in &socks {
            a.watch.disarm(efd);
        }
        let n = r?;
        if n > 0 {
            return Ok(n);
        }
        Ok(self.scan_members(out))
    }
}

/// The edges an edge-triggered member has seen when it is added: all but
/// one if the socket is readable now (the kernel reports a readable socket
/// once after `ADD`).
fn first_seen(a: &Accel) -> u64 {
    let e = a.watch.edges();
    if readable(a) {
        e.wrapping_sub(1)
    } else {
        e
    }
}

/// The events `x` reports now (and, edge-triggered, marks as seen).
fn member_events(x: &mut Member) -> u32 {
    let want = x.events;
    let et = want & libc::EPOLLET as u32 != 0;
    let mut ev = 0u32;
    if want & (libc::EPOLLIN | libc::EPOLLRDNORM) as u32 != 0 && readable(&x.sock) {
        let edges = x.sock.watch.edges();
        if !et || edges != x.seen {
            x.seen = edges;
            ev |= want & (libc::EPOLLIN | libc::EPOLLRDNORM) as u32;
        }
    }
    if want & (libc::EPOLLOUT | libc::EPOLLWRNORM) as u32 != 0 && (!et || !x.out_seen) {
        x.out_seen = true;
        ev |= want & (libc::EPOLLOUT | libc::EPOLLWRNORM) as u32;
    }
    if x.sock.sock.is_closed() {
        ev |= libc::EPOLLHUP as u32;
    }
    ev
}
