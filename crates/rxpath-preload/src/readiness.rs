//! Readiness over rxpath sockets and kernel fds: `poll`/`select` and
//! `epoll_wait` as the program sees them.
//!
//! An rxpath socket's readiness is its queue, read without a system call;
//! a kernel fd's is the kernel's. A wait first looks at both (the kernel
//! only if the set has kernel fds), then busy-polls the sockets' NAPIs for
//! their `busy_poll` window, then sleeps in the kernel (`poll` or the
//! set's own epoll fd) on the kernel fds and an eventfd that a socket's
//! [`Watchers`](crate::udp::sock::Watchers) signal when a datagram arrives while someone sleeps: no
//! system call per datagram unless a waiter is asleep, as the kernel's own
//! wakeups.

use crate::served::Served;
use crate::sys;
use crate::sys::{deadline, errno, left_ms};
use crate::table;
use crate::tcp::sock::TcpSock;
use crate::udp::sock::{busy_wait, readable, Accel};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Instant;

thread_local! {
    /// This thread's eventfd for `poll`/`select` sleeps.
    static POLL_EFD: std::cell::RefCell<Option<crate::sys::Ours>> = const { std::cell::RefCell::new(None) };
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
    loop {
        // Busy-poll before every sleep, as `sk_busy_loop` runs before
        // each wait of `__skb_wait_for_more_packets`.
        if busy_wait(&[a]) && readable(a) {
            return Ok(());
        }
        if until.is_some() && left_ms(until) == 0 {
            return Err(libc::EAGAIN);
        }
        let one = [a];
        let dev = crate::device::sleep_devices(&one);
        let r = with_poll_efd(|efd| {
            a.watch.arm(efd);
            let mut p: Vec<libc::pollfd> = std::iter::once(efd)
                .chain(dev.fds.iter().copied())
                .map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            let r = if readable(a) {
                Ok(0)
            } else {
                a.sock.count_sleep();
                sys::kpoll(&mut p, left_ms(until)).map_err(errno)
            };
            a.watch.disarm(efd);
            // Only a signalled eventfd is read (a read of an empty one
            // is a system call per wakeup for nothing); one signalled
            // after the poll returned wakes the next sleep, which reads it.
            if p.first().is_some_and(|e| e.revents & libc::POLLIN != 0) {
                sys::eventfd_drain(efd);
            }
            r
        })?;
        // Awake: the devices slept on are polled once.
        drop(dev);
        r?;
        if readable(a) {
            return Ok(());
        }
    }
}

/// Wait until served TCP socket `t` is ready for something in `want`
/// (`EPOLL*` bits; errors and hang-ups always end the wait), or until
/// `until`: asleep on an eventfd its watcher signals, on `kernel` (a
/// listener's kernel socket, for what comes over loopback) when given,
/// and on the device where the socket's NAPI keeps its interrupt
/// deferred (IRQ suspension, exec's default: the waiter polls the NAPI
/// itself when the device has packets, one wakeup a request instead of
/// the interrupt thread's and then the waiter's), as UDP's waits do.
/// `EAGAIN` at the deadline, `EINTR` if a signal came.
pub(crate) fn wait_tcp(
    t: &crate::tcp::sock::TcpSock,
    want: u32,
    kernel: Option<RawFd>,
    until: Option<Instant>,
) -> Result<(), i32> {
    let want = want | (libc::EPOLLERR | libc::EPOLLHUP) as u32;
    loop {
        if t.events() & want != 0 {
            return Ok(());
        }
        if until.is_some() && left_ms(until) == 0 {
            return Err(libc::EAGAIN);
        }
        let seen = t.watch.edges();
        let moved = move || t.watch.edges() != seen;
        let polled = crate::tcp::sock::busy_wait_all(&[t], &moved);
        if polled && t.events() & want != 0 {
            return Ok(());
        }
        let (_, id, host) = t.busy_of();
        let budget = rxpath_core::sock::BUSY_POLL_BUDGET;
        let dev = crate::device::sleep_on(Some(host), &[id], budget, Box::new(moved));
        let r = with_poll_efd(|efd| {
            t.watch.arm(efd);
            let mut p: Vec<libc::pollfd> = std::iter::once(efd)
                .chain(kernel)
                .chain(dev.fds.iter().copied())
                .map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            let r = if t.events() & want != 0 {
                Ok(0)
            } else {
                sys::kpoll(&mut p, left_ms(until)).map_err(errno)
            };
            t.watch.disarm(efd);
            if p[0].revents & libc::POLLIN != 0 {
                sys::eventfd_drain(efd);
            }
            if kernel.is_some() && p.get(1).is_some_and(|k| k.revents & libc::POLLIN != 0) {
                t.kernel_ready
                    .store(true, std::sync::atomic::Ordering::SeqCst);
            }
            r
        })?;
        // Awake: the devices slept on are polled once.
        drop(dev);
        r?;
    }
}

/// `poll()` over `fds`, some of them rxpath sockets. Returns the number of
/// entries with events, or an errno.
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> Result<usize, i32> {
    let accel: Vec<Option<Served>> = fds.iter().map(|p| table::served_sock(p.fd)).collect();
    let socks: Vec<&Arc<Accel>> = accel.iter().flatten().filter_map(Served::udp).collect();
    let tcp: Vec<Arc<TcpSock>> = accel
        .iter()
        .flatten()
        .filter_map(Served::tcp)
        .cloned()
        .collect();
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
            if busy_wait(&socks) || crate::tcp::sock::busy_wait_touched(&tcp) {
                continue;
            }
        }
        let dev = crate::device::sleep_devices(&socks);
        let tdev = crate::device::sleep_tcp(&tcp);
        let devs: Vec<RawFd> = dev.fds.iter().chain(&tdev.fds).copied().collect();
        let sleep = |efd| poll_sleep(fds, &accel, &kernel, &devs, efd, until);
        let n = with_poll_efd(sleep)??;
        drop(dev);
        drop(tdev);
        if n > 0 || left_ms(until) == 0 {
            return Ok(n);
        }
        // Woken with nothing ready (the device, or a datagram another
        // reader took): busy-poll again before the next sleep.
        busy_done = false;
    }
}

/// The readiness of every entry now: rxpath sockets from their queues,
/// kernel fds from a kernel `poll` with `timeout` (only if there are any).
fn poll_scan(
    fds: &mut [libc::pollfd],
    accel: &[Option<Served>],
    kernel: &[usize],
    timeout: i32,
) -> Result<usize, i32> {
    let mut n = 0;
    for (p, a) in fds.iter_mut().zip(accel) {
        if let Some(a) = a {
            if let Some(u) = a.udp() {
                crate::kside::take_back_after_fork(u);
            }
            p.revents = sock_revents(a, p.events);
            n += usize::from(p.revents != 0);
        } else {
            p.revents = 0;
        }
    }
    if !kernel.is_empty() {
        let mut k: Vec<libc::pollfd> = kernel.iter().map(|&i| fds[i]).collect();
        // A forked child's socket holding what its parent held is
        // readable before its kernel socket is; one that held nothing is
        // the child's to read from the kernel ([`crate::udp::forkq::child_uses`]).
        for &i in kernel {
            if table::kind(fds[i].fd) == table::FORKED {
                crate::udp::forkq::child_uses(fds[i].fd);
            }
        }
        let held: Vec<bool> = kernel.iter().map(|&i| inherited_ready(fds[i].fd)).collect();
        let t = if held.contains(&true) { 0 } else { timeout };
        sys::kpoll(&mut k, t).map_err(errno)?;
        for (j, &i) in kernel.iter().enumerate() {
            fds[i].revents = k[j].revents;
            if held[j] {
                fds[i].revents |= fds[i].events & (libc::POLLIN | libc::POLLRDNORM);
            }
            n += usize::from(fds[i].revents != 0);
        }
    }
    Ok(n)
}

/// `fd` is a forked child's socket that still holds a datagram its parent
/// held ([`crate::udp::forkq`]).
fn inherited_ready(fd: RawFd) -> bool {
    table::kind(fd) == table::FORKED
        && crate::udp::forkq::inherited(fd).is_some_and(|i| i.held.any())
}

/// A served socket's `poll` bits (the same values as epoll's): what it
/// asks, and errors and hang-ups always.
fn sock_revents(a: &Served, events: i16) -> i16 {
    let m = a.mask() as i16;
    m & (events | libc::POLLERR | libc::POLLHUP)
}

/// Sleep in the kernel on the kernel fds, `efd` and the devices `dev`
/// until one is ready, a socket's watcher signals, or `until`.
fn poll_sleep(
    fds: &mut [libc::pollfd],
    accel: &[Option<Served>],
    kernel: &[usize],
    dev: &[RawFd],
    efd: RawFd,
    until: Option<Instant>,
) -> Result<usize, i32> {
    for a in accel.iter().flatten() {
        a.watch().arm(efd);
    }
    let signalled = std::cell::Cell::new(false);
    let r = (|| {
        let n = poll_scan(fds, accel, kernel, 0)?;
        if n > 0 {
            return Ok(n);
        }
        let mut k: Vec<libc::pollfd> = kernel.iter().map(|&i| fds[i]).collect();
        for &fd in std::iter::once(&efd).chain(dev) {
            k.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let r = sys::kpoll(&mut k, left_ms(until)).map_err(errno);
        // Read the eventfd only if signalled (see `wait_readable`).
        signalled.set(k[kernel.len()].revents & libc::POLLIN != 0);
        r?;
        Ok(0)
    })();
    for a in accel.iter().flatten() {
        a.watch().disarm(efd);
    }
    if signalled.get() {
        sys::eventfd_drain(efd);
    }
    match r {
        Ok(0) => poll_scan(fds, accel, kernel, 0),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rxpath_dev::sim::{Coalesce, SimConfig};
    use rxpath_runtime::{Host, HostConfig, HostDevice};
    use rxpath_wire::build::{self, Spec};

    const HOST: &str = "198.18.0.2";

    fn sim_host() -> Host {
        let mut cfg = HostConfig {
            queues: 1,
            napi_threads: 1,
            ..Default::default()
        };
        cfg.sock.local_addrs = vec![HOST.parse().unwrap()];
        let sim = SimConfig {
            coalesce: Coalesce::EVERY_FRAME,
            ..Default::default()
        };
        Host::start(cfg, HostDevice::Sim(sim)).expect("a simulated NIC's host")
    }

    fn inject(h: &Host, port: u16, payload: &[u8]) {
        let spec = Spec::new(
            "198.18.0.1".parse().unwrap(),
            HOST.parse().unwrap(),
            5000,
            port,
        );
        let mut p = h.sim_port().unwrap();
        p.inject(&build::udp(&spec, payload), 0)
            .expect("the NIC took it");
        p.flush(rxpath_dev::mono_ns());
    }

    /// `poll` on a served socket (and only on it: no kernel fd to ask):
    /// not readable while its queue is empty, readable when a datagram
    /// arrives through the simulated NIC while it sleeps, not readable
    /// once the datagram is read.
    #[test]
    fn poll_follows_a_served_sockets_queue_on_the_simulated_nic() {
        let h = sim_host();
        let sock = h
            .udp_bind_held(format!("{HOST}:7000").parse().unwrap())
            .unwrap();
        let a = Accel::for_test(sock);
        let fd = 63_000;
        table::set(fd, table::Entry::Socket(a.clone()));
        let pfd = |events| libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        let mut fds = [pfd(libc::POLLIN)];
        assert_eq!(poll(&mut fds, 0), Ok(0), "nothing queued");
        // The datagram comes while the poll sleeps: the socket's watcher
        // wakes it.
        let slept = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(100));
                inject(&h, 7000, b"ping");
            });
            let t = std::time::Instant::now();
            assert_eq!(poll(&mut fds, 5000), Ok(1));
            t.elapsed()
        });
        assert_eq!(fds[0].revents, libc::POLLIN);
        assert!(
            slept < std::time::Duration::from_secs(4),
            "woken, not timed out"
        );
        // Writable always (a full TX ring is a counted drop).
        let mut w = [pfd(libc::POLLOUT)];
        assert_eq!(poll(&mut w, 0), Ok(1));
        let mut buf = [0u8; 64];
        let got = crate::ops::recv(&a, &mut buf, libc::MSG_DONTWAIT).expect("the datagram");
        assert_eq!(&buf[..got.len], b"ping");
        let mut fds = [pfd(libc::POLLIN)];
        assert_eq!(poll(&mut fds, 0), Ok(0), "read: empty again");
        table::remove(fd);
        drop(a);
        let r = h.shutdown();
        assert_eq!(r.frames_home, r.frames_total);
    }

    /// An epoll set holding a served socket, level-triggered: no event
    /// while its queue is empty, the socket's data (as the program gave
    /// it) when a datagram arrives while the wait sleeps, and none once
    /// the datagram is read.
    #[test]
    fn epoll_follows_a_served_sockets_queue_on_the_simulated_nic() {
        let h = sim_host();
        let sock = h
            .udp_bind_held(format!("{HOST}:7001").parse().unwrap())
            .unwrap();
        let a = Accel::for_test(sock);
        let kfd = sys::kepoll_create().unwrap();
        let set = crate::epoll::EpSet::new(kfd.as_raw_fd());
        let ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 7,
        };
        let fd = 63_001;
        set.ctl_socket(
            libc::EPOLL_CTL_ADD,
            fd,
            crate::served::Served::Udp(a.clone()),
            Some(ev),
        )
        .unwrap();
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 4];
        assert_eq!(set.wait(&mut out, 0), Ok(0), "nothing queued");
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(100));
                inject(&h, 7001, b"pong");
            });
            assert_eq!(set.wait(&mut out, 5000), Ok(1));
        });
        let (events, data) = (out[0].events, out[0].u64);
        assert_eq!((events, data), (libc::EPOLLIN as u32, 7));
        // Level-triggered: still ready until read.
        assert_eq!(set.wait(&mut out, 0), Ok(1));
        let mut buf = [0u8; 64];
        let got = crate::ops::recv(&a, &mut buf, libc::MSG_DONTWAIT).expect("the datagram");
        assert_eq!(&buf[..got.len], b"pong");
        assert_eq!(set.wait(&mut out, 0), Ok(0), "read: empty again");
        set.forget(fd);
        drop(a);
        let r = h.shutdown();
        assert_eq!(r.frames_home, r.frames_total);
    }

    /// A member wakes a sleeper on its epoll set from `ADD` on, with no
    /// arming per wait, and stops being the set's when it leaves: by
    /// `DEL`, by its descriptor's close, or by the set's.
    #[test]
    fn an_epoll_member_wakes_its_set_until_it_leaves() {
        let h = sim_host();
        let sock = h
            .udp_bind_held(format!("{HOST}:7002").parse().unwrap())
            .unwrap();
        let a = Accel::for_test(sock);
        let kfd = sys::kepoll_create().unwrap();
        let set = crate::epoll::EpSet::new(kfd.as_raw_fd());
        let ev = Some(libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 9,
        });
        let served = || crate::served::Served::Udp(a.clone());
        let fd = 63_002;
        set.ctl_socket(libc::EPOLL_CTL_ADD, fd, served(), ev)
            .unwrap();
        assert_eq!(a.watch.sets(), 1);
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 4];
        let t = std::time::Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(100));
                inject(&h, 7002, b"wake");
            });
            assert_eq!(set.wait(&mut out, 20_000), Ok(1));
        });
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "the datagram woke the sleeper, not the timeout"
        );
        set.ctl_socket(libc::EPOLL_CTL_DEL, fd, served(), None)
            .unwrap();
        assert_eq!(a.watch.sets(), 0, "DEL");
        set.ctl_socket(libc::EPOLL_CTL_ADD, fd, served(), ev)
            .unwrap();
        set.forget(fd);
        assert_eq!(a.watch.sets(), 0, "the member's close");
        set.ctl_socket(libc::EPOLL_CTL_ADD, fd, served(), ev)
            .unwrap();
        drop(set);
        assert_eq!(a.watch.sets(), 0, "the set's close");
        drop(a);
        let r = h.shutdown();
        assert_eq!(r.frames_home, r.frames_total);
    }
}
