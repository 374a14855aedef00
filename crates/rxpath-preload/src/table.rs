//! Which fds are rxpath's. A byte per fd says what an fd is and is read
//! without a lock by every interposed call (a kernel fd costs that one
//! load); the entries behind it sit in a map under a lock taken only for
//! fds that are rxpath's.

use crate::epoll::EpSet;
use crate::tcp::sock::TcpSock;
use crate::udp::sock::{Accel, Pending};
use foldhash::HashMap;
use rxpath_dev::sync::{read_lock, write_lock};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Fds at or above this are always the kernel's.
pub(crate) const MAX_FD: usize = 1 << 16;

/// The fd is the kernel's.
pub(crate) const KERNEL: u8 = 0;
/// A UDP socket not bound yet: it may become rxpath's at `bind`.
pub(crate) const CANDIDATE: u8 = 1;
/// A UDP socket rxpath serves.
pub(crate) const SOCKET: u8 = 2;
/// An epoll set that may hold rxpath sockets.
pub(crate) const EPOLL: u8 = 3;
/// In a forked child: a socket its parent served, holding datagrams the
/// parent held at the fork ([`crate::udp::forkq`]); the kernel's after them.
pub(crate) const FORKED: u8 = 4;
/// A TCP socket rxpath serves: a listener or a connection it accepted
/// ([`crate::tcp`]).
pub(crate) const TCP: u8 = 5;

static KIND: [AtomicU8; MAX_FD] = [const { AtomicU8::new(KERNEL) }; MAX_FD];

/// What an fd that is not plain kernel is.
#[derive(Debug, Clone)]
pub(crate) enum Entry {
    Candidate(Arc<Mutex<Pending>>),
    Socket(Arc<Accel>),
    Epoll(Arc<EpSet>),
    Tcp(Arc<TcpSock>),
}

impl Entry {
    fn kind(&self) -> u8 {
        match self {
            Entry::Candidate(_) => CANDIDATE,
            Entry::Socket(_) => SOCKET,
            Entry::Epoll(_) => EPOLL,
            Entry::Tcp(_) => TCP,
        }
    }
}

fn map() -> &'static RwLock<HashMap<RawFd, Entry>> {
    static MAP: std::sync::OnceLock<RwLock<HashMap<RawFd, Entry>>> = std::sync::OnceLock::new();
    MAP.get_or_init(Default::default)
}

/// What `fd` is, without a lock.
#[inline]
pub(crate) fn kind(fd: RawFd) -> u8 {
    match usize::try_from(fd) {
        Ok(i) if i < MAX_FD => KIND[i].load(Ordering::Acquire),
        _ => KERNEL,
    }
}

/// The entry of an fd that is not plain kernel.
pub(crate) fn get(fd: RawFd) -> Option<Entry> {
    if kind(fd) == KERNEL {
        return None;
    }
    read_lock(map()).get(&fd).cloned()
}

/// The rxpath socket behind `fd`, if it is one.
#[inline]
pub(crate) fn socket(fd: RawFd) -> Option<Arc<Accel>> {
    if kind(fd) != SOCKET {
        return None;
    }
    match get(fd) {
        Some(Entry::Socket(a)) => Some(a),
        _ => None,
    }
}

/// The served TCP socket behind `fd`, if it is one.
#[inline]
pub(crate) fn tcp(fd: RawFd) -> Option<Arc<TcpSock>> {
    if kind(fd) != TCP {
        return None;
    }
    match get(fd) {
        Some(Entry::Tcp(t)) => Some(t),
        _ => None,
    }
}

/// The served socket behind `fd`, of either protocol, if it is one.
pub(crate) fn served_sock(fd: RawFd) -> Option<crate::served::Served> {
    match kind(fd) {
        SOCKET => socket(fd).map(crate::served::Served::Udp),
        TCP => tcp(fd).map(crate::served::Served::Tcp),
        _ => None,
    }
}

/// Can `fd` be recorded ([`set`])? Fds at or above [`MAX_FD`] stay the
/// kernel's.
pub(crate) fn in_range(fd: RawFd) -> bool {
    usize::try_from(fd).is_ok_and(|i| i < MAX_FD)
}

/// Record what `fd` is (an fd out of range stays the kernel's).
pub(crate) fn set(fd: RawFd, e: Entry) {
    let Ok(i) = usize::try_from(fd) else { return };
    if i >= MAX_FD {
        return;
    }
    let k = e.kind();
    write_lock(map()).insert(fd, e);
    KIND[i].store(k, Ordering::Release);
}

/// `fd` is the kernel's again (closed, or handed back); its entry, if any.
pub(crate) fn remove(fd: RawFd) -> Option<Entry> {
    match kind(fd) {
        KERNEL => return None,
        FORKED => {
            KIND[fd as usize].store(KERNEL, Ordering::Release);
            crate::udp::forkq::forget(fd);
            return None;
        }
        _ => {}
    }
    if let Ok(i) = usize::try_from(fd) {
        KIND[i].store(KERNEL, Ordering::Release);
    }
    write_lock(map()).remove(&fd)
}

/// Every rxpath socket with the fds that name it.
pub(crate) fn sockets() -> Vec<(Vec<RawFd>, Arc<Accel>)> {
    let m = read_lock(map());
    let mut out: Vec<(Vec<RawFd>, Arc<Accel>)> = Vec::new();
    for (fd, e) in m.iter() {
        if let Entry::Socket(a) = e {
            match out.iter_mut().find(|(_, b)| Arc::ptr_eq(a, b)) {
                Some((fds, _)) => fds.push(*fd),
                None => out.push((vec![*fd], a.clone())),
            }
        }
    }
    out
}

/// Every served TCP socket with an fd that names it.
pub(crate) fn tcp_sockets() -> Vec<(RawFd, Arc<TcpSock>)> {
    let m = read_lock(map());
    let mut out: Vec<(RawFd, Arc<TcpSock>)> = Vec::new();
    for (fd, e) in m.iter() {
        if let Entry::Tcp(t) = e {
            if !out.iter().any(|(_, x)| Arc::ptr_eq(x, t)) {
                out.push((*fd, t.clone()));
            }
        }
    }
    out
}

/// Every served TCP socket with the fds that name it, taken out of the
/// table (the process exits: its fds close).
pub(crate) fn take_tcp() -> Vec<Arc<TcpSock>> {
    let mut m = write_lock(map());
    let fds: Vec<RawFd> = m
        .iter()
        .filter(|(_, e)| matches!(e, Entry::Tcp(_)))
        .map(|(fd, _)| *fd)
        .collect();
    let mut out: Vec<Arc<TcpSock>> = Vec::new();
    for fd in fds {
        if let Some(Entry::Tcp(t)) = m.remove(&fd) {
            KIND[fd as usize].store(KERNEL, Ordering::Release);
            if !out.iter().any(|x| Arc::ptr_eq(x, &t)) {
                out.push(t);
            }
        }
    }
    out
}

/// In the parent's `fork` prepare handler: each served socket's port is
/// lent to the kernel until this process reads it again
/// ([`crate::kside::lend_at_fork`]), what its queue holds moves into
/// memory the child shares ([`crate::udp::forkq`]), and it is staged for the
/// child, with what it holds.
pub(crate) fn before_fork() {
    let mut staged = Vec::new();
    for (fds, a) in sockets() {
        // The port goes to the kernel socket every process shares first,
        // then what rxpath queued moves where the child reads it too.
        crate::kside::lend_at_fork(&a);
        if let Some(r) = crate::udp::forkq::Region::from_queue(&a.sock) {
            a.held.push(r);
        }
        let local = a.sock.local_addr();
        let inh = crate::udp::forkq::Inherited {
            held: a.held.share(),
            cmsgs: a.cmsgs.load(Ordering::Relaxed),
            v6: local.is_ipv6(),
            port: local.port(),
            keys: a.keys.clone(),
            // Nothing to read at the fork, in rxpath's queue or the kernel
            // socket's: a child that reads is one of the socket's readers.
            fresh: !a.held.any() && !fds.first().is_some_and(|&fd| crate::sys::readable_now(fd)),
            released: std::sync::atomic::AtomicBool::new(false),
            parent_word: a.fork_word(),
        };
        staged.push((fds, Arc::new(inh)));
    }
    crate::udp::forkq::stage(staged);
}

/// At exit, before the report: a socket whose port a `fork` lent to the
/// kernel and this process never read again was the kernel's since (its
/// children's, if they read it).
pub(crate) fn before_exit() {
    for (_, a) in sockets() {
        if a.child_took_it() {
            crate::host::global().went_to_kernel(a.report_id, "a forked child reads it");
        } else if a.lent.load(Ordering::Relaxed) {
            crate::host::global().went_to_kernel(
                a.report_id,
                "lent to the kernel at a fork, not read here again",
            );
        }
    }
}

/// Each served TCP connection with every fd that names it.
pub(crate) fn tcp_streams() -> Vec<(Vec<RawFd>, Arc<TcpSock>)> {
    let m = read_lock(map());
    let mut out: Vec<(Vec<RawFd>, Arc<TcpSock>)> = Vec::new();
    for (fd, e) in m.iter() {
        let Entry::Tcp(t) = e else { continue };
        if t.stream().is_none() {
            continue;
        }
        match out.iter_mut().find(|(_, x)| Arc::ptr_eq(x, t)) {
            Some((fds, _)) => fds.push(*fd),
            None => out.push((vec![*fd], t.clone())),
        }
    }
    out
}

pub(crate) fn forget_all() {
    for k in KIND.iter() {
        k.store(KERNEL, Ordering::Relaxed);
    }
}

/// In a forked child: `fd` holds datagrams its parent held.
pub(crate) fn mark_forked(fd: RawFd) {
    if let Ok(i) = usize::try_from(fd) {
        if i < MAX_FD {
            KIND[i].store(FORKED, Ordering::Release);
        }
    }
}

/// Reads and waits on `fd` are rxpath's to answer (a socket it serves, or
/// a child's inherited one).
#[inline]
pub(crate) fn served(fd: RawFd) -> bool {
    matches!(kind(fd), SOCKET | FORKED | TCP)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate() -> Entry {
        Entry::Candidate(Arc::new(Mutex::new(Pending::default())))
    }

    /// Fds of this test alone (the table is the process's).
    const FD: RawFd = 61_000;

    #[test]
    fn an_fd_is_the_kernels_until_set_and_again_once_removed() {
        assert_eq!(kind(FD), KERNEL);
        assert!(get(FD).is_none() && remove(FD).is_none());
        set(FD, candidate());
        assert_eq!(kind(FD), CANDIDATE);
        assert!(matches!(get(FD), Some(Entry::Candidate(_))));
        assert!(socket(FD).is_none(), "a candidate is not a socket");
        assert!(matches!(remove(FD), Some(Entry::Candidate(_))));
        assert_eq!(kind(FD), KERNEL);
        assert!(get(FD).is_none());
    }

    #[test]
    fn fds_out_of_range_are_always_the_kernels() {
        for fd in [-1, MAX_FD as RawFd, RawFd::MAX] {
            set(fd, candidate());
            assert_eq!(kind(fd), KERNEL, "{fd}");
            assert!(get(fd).is_none() && remove(fd).is_none());
        }
    }

    #[test]
    fn a_number_set_again_holds_the_newer_entry() {
        let fd = FD + 1;
        let first = Arc::new(Mutex::new(Pending::default()));
        set(fd, Entry::Candidate(first.clone()));
        set(fd, candidate());
        let Some(Entry::Candidate(now)) = get(fd) else {
            panic!("a candidate")
        };
        assert!(!Arc::ptr_eq(&now, &first));
        remove(fd);
    }
}
