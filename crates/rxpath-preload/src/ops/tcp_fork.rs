//! A `fork` while rxpath serves TCP connections: the host (and with it
//! every connection) stays in the parent, so each connection gets a UNIX
//! stream pair at the fork, and in the child the connection's fds name
//! one end of it. Whoever lets go of the connection tells who keeps it:
//! a parent that closes its fd while the child's end is open (`socat
//! TCP-LISTEN,fork`, inetd-style servers) gives the connection to the
//! child, which the parent's threads then relay ([`crate::tcp::relay`]);
//! a parent that goes on using it (redis's background save, whose child
//! never touches it) keeps it, and the pair is dropped once the child let
//! go of its end.
//!
//! In the child, `getsockname`/`getpeername` on such an fd answer the
//! connection's addresses and TCP options set on it are taken and
//! ignored; the rest of the calls are the UNIX socket's.

use crate::host::global;
use crate::sys::pair;
use crate::sys::Ours;
use crate::table;
use crate::tcp::sock::TcpSock;
use rxpath_dev::sync::lock;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A pair made for one connection just before a fork.
#[derive(Debug)]
struct Staged {
    fds: Vec<RawFd>,
    t: Arc<TcpSock>,
    /// The connection's (local, peer) addresses, read before the fork:
    /// the child must not take the machine's lock, which another thread
    /// may have held as the fork copied it.
    addrs: Option<(SocketAddr, SocketAddr)>,
    parent: Ours,
    child: Ours,
}

/// What [`fork_prepare`] made, for [`fork_child`] or [`fork_parent`].
#[derive(Debug, Default)]
pub(crate) struct Fork(Vec<Staged>);

/// A connection whose other end a child holds: the parent's end.
#[derive(Debug)]
struct Pending {
    t: Arc<TcpSock>,
    end: Ours,
}

fn pending() -> &'static Mutex<Vec<Pending>> {
    static P: Mutex<Vec<Pending>> = Mutex::new(Vec::new());
    &P
}

/// In a child: each relayed connection's (local, peer) addresses, by the
/// inode of the UNIX socket its fds name (shared by their dups).
fn child_addrs() -> &'static Mutex<HashMap<u64, (SocketAddr, SocketAddr)>> {
    static M: std::sync::OnceLock<Mutex<HashMap<u64, (SocketAddr, SocketAddr)>>> =
        std::sync::OnceLock::new();
    M.get_or_init(Default::default)
}

/// Any relayed fd in this (child) process.
static RELAYED_HERE: AtomicBool = AtomicBool::new(false);

/// In the parent, before the C library's `fork`: a pair for each served
/// connection not already given a child's end (a pair whose child let go
/// of it, unread, is dropped first).
pub(crate) fn fork_prepare() -> Fork {
    if crate::host::started().is_none() {
        return Fork::default();
    }
    // Found now, not in the child (where the loader's lock may be held).
    crate::sys::pair::resolve_calls();
    let mut pend = lock(pending());
    pend.retain(|p| {
        let (hung_up, readable) = pair::state(&p.end);
        !hung_up || readable
    });
    let mut staged = Vec::new();
    for (fds, t) in table::tcp_streams() {
        if pend.iter().any(|p| Arc::ptr_eq(&p.t, &t)) {
            global().say_once(
                "a TCP connection already shared with a forked child, forked again: \
                 only the first child's copy is relayed",
            );
            continue;
        }
        match pair::socketpair() {
            Ok((parent, child)) => staged.push(Staged {
                fds,
                addrs: match t.stream().and_then(|c| c.addrs().ok()) {
                    Some((Some(l), Some(p))) => Some((l, p)),
                    _ => None,
                },
                t,
                parent,
                child,
            }),
            Err(e) => global().say_once(&format!(
                "no socket pair for a TCP connection at a fork ({e}): the child's copy \
                 of it does not work"
            )),
        }
    }
    Fork(staged)
}

/// In any child, as the fork returns there (the atfork handler, so that
/// `daemon`'s children run it too): the parent's ends of pending pairs
/// and running relays are closed here, so that the parent sees its own
/// child let go of each. No other thread runs, and a lock another thread
/// held at the fork stays held: only `try_lock`, and no socket of the
/// parent's is dropped here (the last reference would call into the
/// machine, whose lock may be one of those).
pub(crate) fn tcp_in_fork_child() {
    if let Ok(mut p) = pending().try_lock() {
        for p in p.drain(..) {
            drop(p.end);
            std::mem::forget(p.t);
        }
    }
    crate::tcp::relay::close_ends_in_child();
}

/// In the child, after the fork: each connection's fds name the child's
/// end of its pair (see [`tcp_in_fork_child`] for what may not be done
/// here).
pub(crate) fn fork_child(f: Fork) {
    let mut addrs = child_addrs().try_lock().ok();
    for s in f.0 {
        let nonblock = s.t.nonblock.load(Ordering::Relaxed);
        for fd in &s.fds {
            if pair::put_at(&s.child, *fd, nonblock).is_err() {
                continue;
            }
            if let (Some(m), Some(a), Some(ino)) = (addrs.as_mut(), s.addrs, pair::inode(*fd)) {
                m.insert(ino, a);
                RELAYED_HERE.store(true, Ordering::Relaxed);
            }
        }
        std::mem::forget(s.t);
    }
}

/// In the parent after the C library's `fork` (`forked`: it made a
/// child): the child's ends are closed here, the parent's kept until the
/// connection's fate is known ([`hand_to_child`]).
pub(crate) fn fork_parent(f: Fork, forked: bool) {
    if f.0.is_empty() {
        return;
    }
    let mut pend = lock(pending());
    for s in f.0 {
        drop(s.child);
        if forked {
            pend.push(Pending {
                t: s.t,
                end: s.parent,
            });
        }
    }
}

/// The parent closed the last fd of connection `t`: if a child holds an
/// end of a pair made for it (open, or left with bytes to pass on), the
/// child keeps the connection and the parent relays it. True if so.
pub(crate) fn hand_to_child(t: &Arc<TcpSock>) -> bool {
    let end = {
        let mut pend = lock(pending());
        let Some(i) = pend.iter().position(|p| Arc::ptr_eq(&p.t, t)) else {
            return false;
        };
        pend.swap_remove(i).end
    };
    let (hung_up, readable) = pair::state(&end);
    if hung_up && !readable {
        return false;
    }
    match crate::tcp::relay::start(t.clone(), end) {
        Ok(()) => {
            global().say_once(
                "a TCP connection kept by a forked child: this process relays it to the child",
            );
            true
        }
        Err(e) => {
            global().say_once(&format!(
                "no relay thread for a TCP connection a forked child keeps ({e}): closed"
            ));
            false
        }
    }
}

/// In a forked child: the (local, peer) addresses of the relayed
/// connection `fd` names, if it names one.
pub(crate) fn relayed_addrs(fd: RawFd) -> Option<(SocketAddr, SocketAddr)> {
    if !RELAYED_HERE.load(Ordering::Relaxed) {
        return None;
    }
    let ino = pair::inode(fd)?;
    lock(child_addrs()).get(&ino).copied()
}
