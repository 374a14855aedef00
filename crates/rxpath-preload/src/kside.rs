//! The kernel socket behind a served fd. A datagram can still reach it:
//! sent over loopback or another interface to a socket bound to the
//! wildcard address, or arrived before the XDP program took the port. One
//! thread per process sleeps in a kernel epoll on those sockets
//! (edge-triggered: a wakeup per arrival there, none for rxpath's traffic)
//! and marks the socket; a read that finds rxpath's queue empty then reads
//! the kernel socket with the program's own call, so nothing sent to the
//! port is lost, whichever way it came.

use crate::sys;
use crate::udp::sock::Accel;
use rxpath_runtime::sock::Watch;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// A served socket whose kernel socket the watch looks at: told when
/// something arrives there.
pub(crate) trait KernelWatched: Send + Sync {
    /// The kernel socket behind it may hold something to read (a
    /// datagram; a connection, for a listener).
    fn kernel_event(&self);
}

struct KernelSide {
    epfd: crate::sys::Ours,
    socks: Mutex<HashMap<u64, Weak<dyn KernelWatched>>>,
}

static SIDE: OnceLock<Option<KernelSide>> = OnceLock::new();
static NEXT: AtomicU64 = AtomicU64::new(1);

fn side() -> Option<&'static KernelSide> {
    SIDE.get_or_init(|| {
        let epfd = match sys::kepoll_create() {
            Ok(fd) => fd,
            Err(e) => {
                crate::config::say(&format!(
                    "no epoll for the kernel side of served sockets ({e}): \
                     datagrams that reach the kernel socket wait there unread"
                ));
                return None;
            }
        };
        Some(KernelSide {
            epfd,
            socks: Mutex::new(HashMap::new()),
        })
    })
    .as_ref()
    .inspect(|_| start_thread())
}

fn start_thread() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let r = crate::sys::signals_blocked(|| {
            std::thread::Builder::new()
                .name("rxpath-kside".into())
                .spawn(|| {
                    if let Some(s) = SIDE.get().and_then(Option::as_ref) {
                        run(s);
                    }
                })
        });
        if let Err(e) = r {
            crate::config::say(&format!("the kernel-side thread did not start: {e}"));
        }
    });
}

fn run(s: &KernelSide) {
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
    loop {
        let n = match sys::kepoll_wait(s.epfd.as_raw_fd(), &mut evs, -1) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(_) => return,
        };
        for ev in &evs[..n] {
            let token = ev.u64;
            let a = rxpath_dev::sync::lock(&s.socks)
                .get(&token)
                .and_then(Weak::upgrade);
            if let Some(a) = a {
                a.kernel_event();
            }
        }
    }
}

impl KernelWatched for Accel {
    fn kernel_event(&self) {
        if self.child_took_it() {
            child_took(self);
        }
        self.kernel_ready.store(true, Ordering::SeqCst);
        self.watch.ready();
    }
}

impl KernelWatched for crate::tcp::sock::TcpSock {
    fn kernel_event(&self) {
        self.kernel_ready.store(true, Ordering::SeqCst);
        self.watch.ready();
    }
}

/// A forked child took the reading of `a` (the port map no longer takes
/// its port): this process stops receiving on rxpath's socket too, and
/// reads and sends through the kernel socket once its queue is read, as
/// after a hand-back.
pub(crate) fn child_took(a: &Accel) {
    if a.kernel_only.swap(true, Ordering::SeqCst) {
        return;
    }
    crate::host::global().release(&a.keys);
    a.sock.stop_receiving();
    crate::host::global().went_to_kernel(a.report_id, "a forked child reads it");
}

/// The socket's port was lent to the kernel at a `fork` ([`lend_at_fork`])
/// and this process reads or waits on it: rxpath takes the port back, unless a forked child took the
/// reading first ([`crate::udp::forkq::child_uses`]). A child that takes it
/// while the port is taken back sets the word before it gives the port
/// back, so one of the two looks sees the other, and the port ends the
/// kernel's.
pub(crate) fn take_back_after_fork(a: &Accel) {
    if !a.lent.load(Ordering::Relaxed) || !a.lent.swap(false, Ordering::AcqRel) {
        return;
    }
    LENT.fetch_sub(1, Ordering::Relaxed);
    if a.kernel_only.load(Ordering::Relaxed) {
        return;
    }
    if a.child_took_it() {
        return child_took(a);
    }
    crate::host::global().take_back(&a.keys);
    if a.child_took_it() {
        return child_took(a);
    }
    a.kernel_first.store(true, Ordering::Relaxed);
}

/// Sockets of this process whose port is lent ([`lend_at_fork`]).
static LENT: AtomicUsize = AtomicUsize::new(0);

/// In the process that forks, before the child exists: the port of `a`
/// goes to the kernel socket every process shares, so that whichever
/// process reads next finds what comes, the parent included
/// ([`take_back_after_fork`] when it reads or waits on `a`).
pub(crate) fn lend_at_fork(a: &Accel) {
    if a.kernel_only.load(Ordering::Relaxed) || a.lent.swap(true, Ordering::AcqRel) {
        return;
    }
    LENT.fetch_add(1, Ordering::Relaxed);
    crate::host::global().lend(&a.keys);
}

/// Some socket of this process has its port lent since a `fork`.
pub(crate) fn any_lent() -> bool {
    LENT.load(Ordering::Relaxed) > 0
}

/// A token for a socket about to be watched.
pub(crate) fn token() -> u64 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Watch the kernel socket `fd` behind `a` (registered as `a.ktoken`).
/// One already holding datagrams is reported at once.
pub(crate) fn watch(a: &Arc<Accel>, fd: RawFd) {
    watch_as(a.clone(), a.ktoken, fd);
}

/// Watch the kernel socket `fd` behind `a` under `token` ([`token`]).
pub(crate) fn watch_as<T: KernelWatched + 'static>(a: Arc<T>, token: u64, fd: RawFd) {
    let Some(s) = side() else { return };
    let a: Arc<dyn KernelWatched> = a;
    rxpath_dev::sync::lock(&s.socks).insert(token, Arc::downgrade(&a));
    let ev = libc::epoll_event {
        events: (libc::EPOLLIN | libc::EPOLLET) as u32,
        u64: token,
    };
    if let Err(e) = sys::kepoll_ctl(s.epfd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, Some(ev)) {
        crate::config::say(&format!(
            "watching the kernel socket behind fd {fd}: {e}; what reaches it waits there unread"
        ));
    }
}

/// The socket closed for good (the kernel drops its epoll entry with the
/// file).
pub(crate) fn forget(a: &Accel) {
    forget_token(a.ktoken);
}

/// The socket watched under `token` closed for good.
pub(crate) fn forget_token(token: u64) {
    if let Some(s) = SIDE.get().and_then(Option::as_ref) {
        rxpath_dev::sync::lock(&s.socks).remove(&token);
    }
}

/// Should a read try the kernel socket? Clears the mark first, so a
/// datagram that arrives after the read's look marks it again.
pub(crate) fn take_hint(a: &Accel) -> bool {
    a.kernel_ready.swap(false, Ordering::SeqCst)
}

/// A read got a datagram from the kernel socket `fd`: count it, and mark
/// the socket again if more wait there. The mark is exact, never a guess:
/// a wait that reports the socket readable on a stale mark sends the
/// program into a blocking read that sleeps while its other fds have
/// data. One that arrives after the look marks it through the watch
/// (the read cleared the mark before it read).
pub(crate) fn got_one(a: &Accel, fd: RawFd) {
    crate::udp::sock::KERNEL_READS.fetch_add(1, Ordering::Relaxed);
    if sys::readable_now(fd) {
        a.kernel_ready.store(true, Ordering::SeqCst);
    }
}
