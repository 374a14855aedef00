//! An epoll set that may hold rxpath sockets: the kernel's set (the
//! program's epoll fd, with its kernel fds) and the rxpath sockets in it,
//! level- and edge-triggered, `EPOLLONESHOT`.

use crate::served::Served;
use crate::sys;
use crate::sys::{deadline, errno, left_ms};
use crate::tcp::sock::TcpSock;
use crate::udp::sock::{busy_wait_with, readable, Accel, BusyParams};
use crate::watchers::SetWaker;
use rxpath_core::NapiId;
use rxpath_dev::sync::lock;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The token of a set's own eventfd in its kernel epoll set.
const WAKE: u64 = u64::MAX - 0x7270;

/// The token of a device's descriptor in a set's kernel epoll set.
const DEVICE: u64 = u64::MAX - 0x7271;

/// One rxpath socket in an epoll set.
#[derive(Debug)]
struct Member {
    fd: RawFd,
    sock: Served,
    events: u32,
    data: u64,
    /// Edges already reported (edge-triggered).
    seen: u64,
    /// `EPOLLOUT` reported since the last `ADD`/`MOD` (edge-triggered).
    out_seen: bool,
    /// `EPOLLONESHOT` fired: nothing until the next `MOD`.
    disabled: bool,
    /// A TCP member found not ready, at this many edges: not asked again
    /// until its next edge. A TCP socket becomes ready only through one
    /// (the machine touched it: a segment, a timer, a call that can
    /// raise readiness; or its kernel socket behind woke), as the
    /// kernel's ready list holds only what a wakeup callback put there;
    /// so a scan costs the ready members, not every member's look under
    /// the machine's lock.
    idle: Option<u64>,
}

/// The events EPOLLEXCLUSIVE may come with (`EPOLLEXCLUSIVE_OK_BITS`).
const EXCLUSIVE_OK: u32 = (libc::EPOLLIN
    | libc::EPOLLRDNORM
    | libc::EPOLLRDBAND
    | libc::EPOLLOUT
    | libc::EPOLLWRNORM
    | libc::EPOLLWRBAND
    | libc::EPOLLERR
    | libc::EPOLLHUP
    | libc::EPOLLWAKEUP
    | libc::EPOLLET
    | libc::EPOLLEXCLUSIVE) as u32;

/// An epoll set: the kernel's (the program's epoll fd, holding its kernel
/// fds) and the rxpath sockets in it.
#[derive(Debug)]
pub(crate) struct EpSet {
    kfd: RawFd,
    members: Mutex<Vec<Member>>,
    kernel_fds: AtomicUsize,
    /// The set's eventfd in its kernel set, on every member's watchers.
    waker: Mutex<Option<Arc<SetWaker>>>,
    /// The device descriptors in the kernel set: added when a sleep needs
    /// them, removed when one does not (no `epoll_ctl` per sleep while a
    /// program keeps waiting on the same devices).
    devices: Mutex<Vec<RawFd>>,
    /// `EPIOCSPARAMS`: the set's busy-poll parameters.
    params: Mutex<BusyParams>,
    /// The members' sockets, made again after the members changed.
    socks: Mutex<Option<Arc<MemberSocks>>>,
}

/// An epoll set's sockets, kept from one `epoll_ctl` to the next and
/// shared by its waiters: a wait takes the lists, it does not build them.
#[derive(Debug, Default)]
struct MemberSocks {
    udp: Vec<Arc<Accel>>,
    tcp: Vec<Arc<TcpSock>>,
}

impl MemberSocks {
    fn of(m: &[Member]) -> MemberSocks {
        let udp = m.iter().filter_map(|m| m.sock.udp().cloned()).collect();
        let tcp = m
            .iter()
            .filter_map(|m| match &m.sock {
                Served::Tcp(t) => Some(t.clone()),
                Served::Udp(_) => None,
            })
            .collect();
        MemberSocks { udp, tcp }
    }
}

impl EpSet {
    /// The set whose kernel epoll fd is `kfd`.
    pub(crate) fn new(kfd: RawFd) -> EpSet {
        EpSet {
            kfd,
            members: Mutex::default(),
            kernel_fds: AtomicUsize::new(0),
            waker: Mutex::new(None),
            devices: Mutex::default(),
            params: Mutex::default(),
            socks: Mutex::default(),
        }
    }

    /// `EPIOCSPARAMS` (after the kernel took them, so they are valid).
    pub(crate) fn set_params(&self, p: BusyParams) {
        *lock(&self.params) = p;
    }

    /// The rxpath sockets in the set.
    /// Its UDP sockets.
    pub(crate) fn sockets(&self) -> Vec<Arc<Accel>> {
        self.socks().udp.clone()
    }

    fn socks(&self) -> Arc<MemberSocks> {
        if let Some(s) = lock(&self.socks).as_ref() {
            return s.clone();
        }
        // Under the members' lock: no change between the look and the
        // store.
        let m = lock(&self.members);
        let s = Arc::new(MemberSocks::of(&m));
        *lock(&self.socks) = Some(s.clone());
        s
    }

    /// The members changed (the caller holds their lock): the lists are
    /// made again by the next wait, once for any number of changes (an
    /// accept loop adding its connections).
    fn members_changed(&self) {
        *lock(&self.socks) = None;
    }

    /// `epoll_ctl` for an rxpath socket.
    pub(crate) fn ctl_socket(
        &self,
        op: i32,
        fd: RawFd,
        sock: Served,
        ev: Option<libc::epoll_event>,
    ) -> Result<(), i32> {
        let mut m = lock(&self.members);
        let at = m.iter().position(|x| x.fd == fd);
        // `do_epoll_ctl`'s rules for EPOLLEXCLUSIVE: never in a MOD, nor on
        // a member added with it, and only with the bits it allows.
        let excl = libc::EPOLLEXCLUSIVE as u32;
        let asked = ev.map_or(0, |e| e.events);
        if asked & excl != 0 && (op == libc::EPOLL_CTL_MOD || asked & !EXCLUSIVE_OK != 0) {
            return Err(libc::EINVAL);
        }
        if op == libc::EPOLL_CTL_MOD && at.is_some_and(|i| m[i].events & excl != 0) {
            return Err(libc::EINVAL);
        }
        match (op, at) {
            (libc::EPOLL_CTL_ADD, Some(_)) => Err(libc::EEXIST),
            (libc::EPOLL_CTL_ADD, None) => {
                let ev = ev.ok_or(libc::EFAULT)?;
                sock.watch().join(&self.waker()?);
                let seen = first_seen(&sock, ev.events);
                m.push(Member {
                    fd,
                    sock,
                    events: ev.events,
                    data: ev.u64,
                    seen,
                    out_seen: false,
                    disabled: false,
                    idle: None,
                });
                self.members_changed();
                Ok(())
            }
            (libc::EPOLL_CTL_MOD, Some(i)) => {
                let ev = ev.ok_or(libc::EFAULT)?;
                let x = &mut m[i];
                x.events = ev.events;
                x.data = ev.u64;
                x.seen = first_seen(&x.sock, ev.events);
                x.out_seen = false;
                x.idle = None;
                x.disabled = false;
                Ok(())
            }
            (libc::EPOLL_CTL_DEL, Some(i)) => {
                let x = m.swap_remove(i);
                self.left(&x);
                self.members_changed();
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
        let mut m = lock(&self.members);
        let was = m.len();
        m.retain(|x| {
            let gone = x.fd == fd;
            if gone {
                self.left(x);
            }
            !gone
        });
        if m.len() != was {
            self.members_changed();
        }
    }

    /// A member left: its socket no longer wakes the set.
    fn left(&self, x: &Member) {
        if let Some(w) = lock(&self.waker).as_ref() {
            x.sock.watch().leave(w);
        }
    }

    /// The set's eventfd, registered in its kernel set on first use.
    fn waker(&self) -> Result<Arc<SetWaker>, i32> {
        let mut g = lock(&self.waker);
        if let Some(w) = g.as_ref() {
            return Ok(w.clone());
        }
        let f = sys::eventfd().map_err(errno)?;
        let ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: WAKE,
        };
        sys::kepoll_ctl(self.kfd, libc::EPOLL_CTL_ADD, f.as_raw_fd(), Some(ev)).map_err(errno)?;
        let w = Arc::new(SetWaker::new(f));
        *g = Some(w.clone());
        Ok(w)
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
                let socks = self.socks();
                let refs: Vec<&Arc<Accel>> = socks.udp.iter().collect();
                if busy_wait_with(&refs, *lock(&self.params)) {
                    continue;
                }
                if crate::tcp::sock::busy_wait_touched(&socks.tcp) {
                    continue;
                }
            }
            let n = self.sleep(out, until)?;
            if n > 0 || left_ms(until) == 0 {
                return Ok(n);
            }
            // Woken with nothing ready (the device, or an event another
            // waiter took): busy-poll again before the next sleep, as
            // `ep_poll` runs `ep_busy_loop` in each round.
            busy_done = false;
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
                if let Some(w) = lock(&self.waker).as_ref() {
                    sys::eventfd_drain(w.fd());
                }
                continue;
            }
            if out[i].u64 == DEVICE {
                continue;
            }
            out[n] = out[i];
            n += 1;
        }
        Ok(n)
    }

    /// The rxpath members' events into `out`. Handing events over is
    /// `ep_suspend_napi_irqs()`: their NAPIs stay deferred for the IRQ
    /// suspension timeout, as the caller is busy with them now.
    fn scan_members(&self, out: &mut [libc::epoll_event]) -> usize {
        let mut ids = arrayvec::ArrayVec::<NapiId, { rxpath_runtime::sock::SESSION_NAPIS }>::new();
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
                let id = match &x.sock {
                    Served::Udp(a) => a.sock.napi_id(),
                    Served::Tcp(t) => t.busy_of().1,
                };
                if id.0 != 0 && !ids.contains(&id) {
                    let _ = ids.try_push(id);
                }
            }
        }
        let host = m.first().map(|x| match &x.sock {
            Served::Udp(a) => &**a.sock.host(),
            Served::Tcp(t) => t.busy_of().2,
        });
        if let Some(h) = host.filter(|_| !ids.is_empty()) {
            rxpath_runtime::sock::suspend_irqs(h, &ids);
        }
        n
    }

    fn sleep(&self, out: &mut [libc::epoll_event], until: Option<Instant>) -> Result<usize, i32> {
        let waker = self.waker()?;
        let socks = self.socks();
        waker.sleep();
        // The devices of deferred NAPIs wake the set too.
        let refs: Vec<&Arc<Accel>> = socks.udp.iter().collect();
        let dev = crate::device::sleep_devices(&refs);
        let tdev = crate::device::sleep_tcp(&socks.tcp);
        let fds: Vec<RawFd> = dev.fds.iter().chain(&tdev.fds).copied().collect();
        self.watch_devices(&fds);
        let n = self.scan_members(out);
        let r = if n > 0 {
            Ok(n)
        } else {
            self.kernel_wait(out, left_ms(until))
        };
        waker.woke();
        // Awake: the devices slept on are polled once.
        drop(dev);
        drop(tdev);
        let n = r?;
        if n > 0 {
            return Ok(n);
        }
        Ok(self.scan_members(out))
    }

    /// Make the device descriptors in the kernel set exactly `dev`.
    fn watch_devices(&self, dev: &[RawFd]) {
        let mut have = lock(&self.devices);
        let ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: DEVICE,
        };
        for &fd in dev {
            if !have.contains(&fd)
                && sys::kepoll_ctl(self.kfd, libc::EPOLL_CTL_ADD, fd, Some(ev)).is_ok()
            {
                have.push(fd);
            }
        }
        have.retain(|fd| {
            dev.contains(fd) || {
                let _ = sys::kepoll_ctl(self.kfd, libc::EPOLL_CTL_DEL, *fd, None);
                false
            }
        });
    }
}

impl Drop for EpSet {
    /// The set is gone (its last descriptor closed): its members no
    /// longer wake it.
    fn drop(&mut self) {
        let m = std::mem::take(&mut *lock(&self.members));
        for x in &m {
            self.left(x);
        }
    }
}

/// The edges an edge-triggered member has seen when it is added: all but
/// one if the socket is readable now (the kernel reports a readable socket
/// once after `ADD`).
/// The edge count a member starts from: one behind if it is ready for
/// what it asks now, so that an edge-triggered wait reports it once.
fn first_seen(a: &Served, want: u32) -> u64 {
    let e = a.watch().edges();
    let ready = match a {
        Served::Udp(a) => readable(a),
        Served::Tcp(_) => a.mask() & want != 0,
    };
    if ready {
        e.wrapping_sub(1)
    } else {
        e
    }
}

fn member_events(x: &mut Member) -> u32 {
    match &x.sock {
        Served::Udp(_) => udp_events(x),
        Served::Tcp(_) => tcp_events(x),
    }
}

/// A TCP member's events (`ep_item_poll` over `tcp_poll`): what it asks
/// of the mask, and `EPOLLERR`/`EPOLLHUP` always; edge-triggered, once
/// per edge the machine made (`ep_poll_callback`).
fn tcp_events(x: &mut Member) -> u32 {
    // Read before the look: an edge after it is seen next time.
    let edges = x.sock.watch().edges();
    if x.idle == Some(edges) {
        return 0;
    }
    let always = (libc::EPOLLERR | libc::EPOLLHUP) as u32;
    let ev = x.sock.mask() & (x.events | always);
    if ev == 0 {
        x.idle = Some(edges);
        return 0;
    }
    x.idle = None;
    if x.events & libc::EPOLLET as u32 != 0 {
        if edges == x.seen {
            return 0;
        }
        x.seen = edges;
    }
    ev
}

/// A UDP member's events.
fn udp_events(x: &mut Member) -> u32 {
    let Served::Udp(a) = &x.sock else { return 0 };
    let a = a.clone();
    let want = x.events;
    let et = want & libc::EPOLLET as u32 != 0;
    let mut ev = 0u32;
    if want & (libc::EPOLLIN | libc::EPOLLRDNORM) as u32 != 0 && readable(&a) {
        let edges = a.watch.edges();
        if !et || edges != x.seen {
            x.seen = edges;
            ev |= want & (libc::EPOLLIN | libc::EPOLLRDNORM) as u32;
        }
    }
    if want & (libc::EPOLLOUT | libc::EPOLLWRNORM) as u32 != 0 && (!et || !x.out_seen) {
        x.out_seen = true;
        ev |= want & (libc::EPOLLOUT | libc::EPOLLWRNORM) as u32;
    }
    if a.sock.is_closed() {
        ev |= libc::EPOLLHUP as u32;
    }
    ev
}
