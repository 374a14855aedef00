//! Socket options on a served socket or one not bound yet: those rxpath
//! honours, those only the kernel socket behind the fd needs, and those
//! it cannot (the socket stays, or goes back to, the kernel).

use super::*;
use crate::host::{global, Fallback};
use crate::table::{self, Entry};
use crate::udp::sock::{Accel, Pending};
use rxpath_dev::sync::lock;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// What `setsockopt` means for an rxpath fd, given the option's value as
/// an int (`None` if it is not one) or a timeval.
/// `IPV6_FREEBIND` (linux/in6.h).
const IPV6_FREEBIND: i32 = 78;

#[derive(Debug, Clone)]
pub(crate) enum OptVal {
    Int(i32),
    Time(Duration),
    /// The bytes of an option that takes a string (`SO_BINDTODEVICE`).
    Bytes(Vec<u8>),
    /// A classic BPF program (`struct sock_fprog`).
    Cbpf(Vec<rxpath_core::sock::cbpf::Insn>),
    /// `SO_LINGER`'s `struct linger`: on, and the seconds.
    Linger(bool, i32),
    Other,
}

/// `setsockopt()` on `fd` (after the kernel's call succeeded, so the kernel
/// socket has it too): rxpath takes what it honours; an option it cannot
/// honour makes a candidate stay the kernel's at `bind`, and is refused on
/// an rxpath socket (`EOPNOTSUPP`).
pub(crate) fn setsockopt(fd: RawFd, level: i32, name: i32, v: OptVal) -> Result<(), Errno> {
    let e = match table::get(fd) {
        Some(e @ (Entry::Socket(_) | Entry::Candidate(_))) => e,
        _ => return Ok(()),
    };
    let off = matches!(v, OptVal::Int(0));
    if let Some(r) = reading_option(&e, fd, level, name, &v) {
        return r;
    }
    let what = match path_option(&e, level, name, v) {
        Ok(r) => return r,
        Err(Some(what)) => what,
        // Turning a feature off that is off asks nothing.
        Err(None) if off => return Ok(()),
        Err(None) => format!("setsockopt(level {level}, option {name})"),
    };
    refuse(&e, &what)
}

/// The options of a socket's reads: timeouts, busy polling, the buffer,
/// the control messages a read hands back. `None`: not one of these.
fn reading_option(
    e: &Entry,
    fd: RawFd,
    level: i32,
    name: i32,
    v: &OptVal,
) -> Option<Result<(), Errno>> {
    let on = |x: i32| x != 0;
    match (level, name, v.clone()) {
        (libc::SOL_SOCKET, libc::SO_RCVTIMEO_NEW | libc::SO_RCVTIMEO, OptVal::Time(t)) => {
            let t = (!t.is_zero()).then_some(t);
            apply(e, |a| a.sock.set_read_timeout(t), |p| p.rcvtimeo = t);
        }
        (libc::SOL_SOCKET, libc::SO_BUSY_POLL, OptVal::Int(us)) => {
            let us = us.max(0) as u32;
            apply(e, |a| a.sock.set_busy_poll(us), |p| p.busy_poll = Some(us));
        }
        (libc::SOL_SOCKET, libc::SO_BUSY_POLL_BUDGET, OptVal::Int(b)) => {
            // The kernel refused what it refuses (over U16_MAX; a raise
            // without CAP_NET_ADMIN) before this.
            let b = b.clamp(0, u16::MAX as i32) as u16;
            apply(
                e,
                |a| a.sock.set_busy_poll_budget(b),
                |p| p.busy_budget = Some(b),
            );
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF | libc::SO_RCVBUFFORCE, OptVal::Int(b)) => {
            // What the kernel socket now has (doubled for its bookkeeping,
            // capped by `net.core.rmem_max` unless forced): what
            // `getsockopt` says, so rxpath's queue holds the same.
            let b = crate::sys::sockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)
                .map_or((b.max(0) as usize).saturating_mul(2), |v| v.max(0) as usize);
            apply(e, |a| a.sock.set_rcvbuf(b), |p| p.rcvbuf = Some(b));
        }
        (libc::IPPROTO_IP, libc::IP_PKTINFO, OptVal::Int(x)) => {
            set_cmsg(e, crate::udp::sock::PKTINFO4, on(x))
        }
        (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, OptVal::Int(x)) => {
            set_cmsg(e, crate::udp::sock::PKTINFO6, on(x))
        }
        (libc::IPPROTO_IP, libc::IP_RECVTOS, OptVal::Int(x)) => {
            set_cmsg(e, crate::udp::sock::RECVTOS, on(x))
        }
        (libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, OptVal::Int(x)) => {
            set_cmsg(e, crate::udp::sock::RECVTCLASS, on(x))
        }
        (libc::IPPROTO_UDP, crate::udp::sock::UDP_GRO, OptVal::Int(x)) => {
            set_cmsg(e, crate::udp::sock::GRO, on(x));
            apply(e, |a| a.sock.set_udp_gro(on(x)), |p| p.gro = on(x));
        }
        (libc::SOL_SOCKET, n @ (libc::SO_TIMESTAMP | libc::SO_TIMESTAMPNS), OptVal::Int(x))
        | (
            libc::SOL_SOCKET,
            n @ (crate::udp::sock::SO_TIMESTAMP_NEW | crate::udp::sock::SO_TIMESTAMPNS_NEW),
            OptVal::Int(x),
        ) => set_timestamp(e, n, on(x)),
        (libc::SOL_SOCKET, libc::SO_RXQ_OVFL, OptVal::Int(x)) => {
            set_cmsg(e, crate::udp::sock::RXQ_OVFL, on(x));
            apply(e, |a| a.sock.socket().set_rxq_ovfl(on(x)), |_| {});
        }
        _ => return None,
    }
    Some(Ok(()))
}

/// The options of where a socket's datagrams go and come from: sends
/// (`UDP_SEGMENT`, path MTU discovery), its group and its program, the
/// device and address it is bound to, multicast, `IPV6_V6ONLY`, and
/// those only the kernel socket needs. `Ok(r)`: done, with the call's
/// result; `Err(Some(why))`: one rxpath cannot honour; `Err(None)`: not
/// one it knows.
fn path_option(
    e: &Entry,
    level: i32,
    name: i32,
    v: OptVal,
) -> Result<Result<(), Errno>, Option<String>> {
    let e = e.clone();
    let what = match (level, name, v) {
        (libc::IPPROTO_UDP, crate::udp::sock::UDP_SEGMENT, OptVal::Int(v)) => {
            let v = v.clamp(0, u16::MAX as i32) as u16;
            match &e {
                Entry::Socket(a) => a.segment.store(v, Ordering::Relaxed),
                _ if v == 0 => {}
                // Before bind the option has nowhere to go yet: the
                // socket stays the kernel's (rare: set after bind).
                _ => return Ok(refuse(&e, "setsockopt(UDP_SEGMENT) before bind")),
            }
            return Ok(Ok(()));
        }
        (libc::SOL_SOCKET, crate::udp::sock::SO_ATTACH_REUSEPORT_CBPF, OptVal::Cbpf(insns)) => {
            match rxpath_core::sock::cbpf::Cbpf::new(&insns) {
                Ok(prog) => {
                    let mut r = Ok(());
                    let on =
                        |a: &Accel| r = a.sock.socket().attach_reuseport_cbpf(Some(prog.clone()));
                    apply(&e, on, |p| p.cbpf = Some(prog.clone()));
                    return Ok(r.map_err(sock_errno));
                }
                Err(why) => format!("setsockopt(SO_ATTACH_REUSEPORT_CBPF): {why}"),
            }
        }
        (libc::SOL_SOCKET, crate::udp::sock::SO_DETACH_REUSEPORT_BPF, _) => {
            let mut r = Ok(());
            let on = |a: &Accel| r = a.sock.socket().attach_reuseport_cbpf(None);
            apply(&e, on, |p| p.cbpf = None);
            return Ok(r.map_err(sock_errno));
        }
        (libc::SOL_SOCKET, libc::SO_REUSEPORT, OptVal::Int(on)) => {
            // Only `bind` reads it (a bound socket keeps its group).
            apply(&e, |_| {}, |p| p.reuseport = on != 0);
            return Ok(Ok(()));
        }
        (libc::SOL_SOCKET, libc::SO_REUSEADDR, OptVal::Int(on)) => {
            apply(&e, |_| {}, |p| p.reuseaddr = on != 0);
            return Ok(Ok(()));
        }
        (libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, OptVal::Int(v))
        | (libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, OptVal::Int(v)) => {
            // `IP_PMTUDISC_DO` and beyond: a datagram past the MTU is
            // refused (`EMSGSIZE`) instead of leaving in fragments.
            let on = v >= libc::IP_PMTUDISC_DO;
            let set = |a: &Accel| a.sock.socket().set_pmtudisc_do(on);
            apply(&e, set, |p| p.pmtudisc_do = on);
            return Ok(Ok(()));
        }
        (libc::IPPROTO_IPV6, libc::IPV6_DONTFRAG, OptVal::Int(on)) => {
            let set = |a: &Accel| a.sock.socket().set_pmtudisc_do(on != 0);
            apply(&e, set, |p| p.pmtudisc_do = on != 0);
            return Ok(Ok(()));
        }
        (libc::SOL_SOCKET, libc::SO_BINDTODEVICE, OptVal::Bytes(name)) => {
            // rxpath serves one interface: bound to it (or to none), the
            // socket is what it was; bound to another, it is the kernel's.
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            let name = String::from_utf8_lossy(&name[..end]).into_owned();
            if name.is_empty() || global().cfg.iface.as_deref() == Some(name.as_str()) {
                return Ok(Ok(()));
            }
            format!("setsockopt(SO_BINDTODEVICE, {name}): not the interface rxpath serves")
        }
        // The bound address decides, as ever (one not the interface's
        // stays the kernel's).
        (libc::IPPROTO_IP, libc::IP_FREEBIND, _) | (libc::IPPROTO_IPV6, IPV6_FREEBIND, _) => {
            return Ok(Ok(()))
        }
        (_, n, OptVal::Bytes(b)) if crate::udp::mcast::is_membership(level, n) => {
            return Ok(membership(&e, level, n, &b));
        }
        (libc::IPPROTO_IP, crate::udp::mcast::IP_MULTICAST_ALL, OptVal::Int(on))
        | (libc::IPPROTO_IPV6, crate::udp::mcast::IPV6_MULTICAST_ALL, OptVal::Int(on)) => {
            let v4 = level == libc::IPPROTO_IP;
            let set = |a: &Accel| a.sock.socket().set_multicast_all(v4, on != 0);
            apply(&e, set, |p| p.mc_all[!v4 as usize] = Some(on != 0));
            return Ok(Ok(()));
        }
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, OptVal::Int(on)) => {
            apply(&e, |a| a.sock.set_only_v6(on != 0), |p| p.v6only = on != 0);
            return Ok(Ok(()));
        }
        (libc::SOL_SOCKET, n, _) if HARMLESS_SOCKET.contains(&n) => return Ok(Ok(())),
        (libc::IPPROTO_IP, n, _) if HARMLESS_IP.contains(&n) => return Ok(Ok(())),
        (libc::IPPROTO_IPV6, n, _) if HARMLESS_IPV6.contains(&n) => return Ok(Ok(())),
        _ => return Err(None),
    };
    Err(Some(what))
}

/// A multicast membership change the kernel made on `fd`'s socket: one
/// on the interface rxpath serves is made in rxpath's table too (or
/// kept for `bind`); one on another interface is the kernel socket's
/// alone (what arrives there, it reads).
fn membership(e: &Entry, level: i32, name: i32, b: &[u8]) -> Result<(), Errno> {
    let Some(r) = crate::udp::mcast::parse(level, name, b) else {
        return refuse(
            e,
            &format!("setsockopt(level {level}, option {name}): unreadable"),
        );
    };
    let mut res = Ok(());
    let on = |a: &Accel| {
        if global().serves_membership(&r) {
            res = a.sock.socket().change_membership(r.group, r.change);
        }
    };
    apply(e, on, |p| p.mcast.push(r));
    res.map_err(sock_errno)
}

/// `SO_TIMESTAMP*` as `sock_set_timestamp`: on sets the form option `n`
/// names (a `timeval` or a `timespec`, the old or the `_NEW` message
/// type), off clears both.
fn set_timestamp(e: &Entry, n: i32, on: bool) {
    use crate::udp::sock::{
        SO_TIMESTAMPNS_NEW, SO_TIMESTAMP_NEW, TIMESTAMP, TIMESTAMP_NEW, TIMESTAMP_NS,
    };
    set_cmsg(e, TIMESTAMP | TIMESTAMP_NS | TIMESTAMP_NEW, false);
    if on {
        let ns = n == libc::SO_TIMESTAMPNS || n == SO_TIMESTAMPNS_NEW;
        let new = n == SO_TIMESTAMP_NEW || n == SO_TIMESTAMPNS_NEW;
        let mut bits = TIMESTAMP;
        if ns {
            bits |= TIMESTAMP_NS;
        }
        if new {
            bits |= TIMESTAMP_NEW;
        }
        set_cmsg(e, bits, true);
    }
}

/// An option rxpath does not honour (the kernel socket behind the fd took
/// it): a candidate stays the kernel's at `bind`; an rxpath socket is
/// handed back to the kernel (said, counted), so a program that works on
/// the kernel keeps working.
pub(super) fn refuse(e: &Entry, what: &str) -> Result<(), Errno> {
    match e {
        Entry::Candidate(p) => {
            lock(p).refuse = Some(format!(
                "{what}: rxpath does not honour it, so the socket is the kernel's"
            ));
            Ok(())
        }
        Entry::Socket(a) => {
            let why = format!(
                "{what} after bind on {}: rxpath does not honour it, so the socket is handed back to the kernel",
                a.sock.local_addr()
            );
            hand_back(a, Fallback::OptionAfterBind, &why);
            Ok(())
        }
        Entry::Epoll(_) | Entry::Tcp(_) => {
            global().unsupported(what);
            Err(libc::EOPNOTSUPP)
        }
    }
}

fn set_cmsg(e: &Entry, bit: u16, on: bool) {
    let set = |v: u16| if on { v | bit } else { v & !bit };
    match e {
        Entry::Socket(a) => {
            let _ = a
                .cmsgs
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(set(v)));
        }
        Entry::Candidate(p) => {
            let mut p = lock(p);
            p.cmsgs = set(p.cmsgs);
        }
        Entry::Epoll(_) | Entry::Tcp(_) => {}
    }
}

fn apply(e: &Entry, on_sock: impl FnOnce(&Accel), on_pending: impl FnOnce(&mut Pending)) {
    match e {
        Entry::Socket(a) => on_sock(a),
        Entry::Candidate(p) => on_pending(&mut lock(p)),
        Entry::Epoll(_) | Entry::Tcp(_) => {}
    }
}

/// Socket options whose effect rxpath keeps as the kernel would, or that
/// only the kernel socket behind the fd needs (sending buffers, address
/// reuse of the reserved port, priority, timeouts of sends).
const HARMLESS_SOCKET: &[i32] = &[
    libc::SO_SNDBUF,
    libc::SO_SNDBUFFORCE,
    libc::SO_SNDTIMEO_NEW,
    libc::SO_SNDTIMEO,
    libc::SO_PRIORITY,
    libc::SO_KEEPALIVE,
    libc::SO_BROADCAST,
    libc::SO_PREFER_BUSY_POLL,
];

const HARMLESS_IP: &[i32] = &[
    libc::IP_TTL,
    libc::IP_MULTICAST_TTL,
    libc::IP_MULTICAST_LOOP,
    libc::IP_MULTICAST_IF,
];

const HARMLESS_IPV6: &[i32] = &[
    libc::IPV6_UNICAST_HOPS,
    libc::IPV6_MULTICAST_HOPS,
    libc::IPV6_MULTICAST_LOOP,
    libc::IPV6_MULTICAST_IF,
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table;
    use crate::udp::sock::Pending;
    use std::sync::{Arc, Mutex};

    /// A candidate at `fd` (the table is the process's: each test its own
    /// fds), and its pending state.
    fn candidate(fd: RawFd) -> Arc<Mutex<Pending>> {
        let p = Arc::new(Mutex::new(Pending::default()));
        table::set(fd, Entry::Candidate(p.clone()));
        p
    }

    fn pending(p: &Arc<Mutex<Pending>>) -> Pending {
        p.lock().unwrap().clone()
    }

    #[test]
    fn options_before_bind_are_kept_for_it() {
        let fd = 62_000;
        let p = candidate(fd);
        let set = |level, name, v| setsockopt(fd, level, name, v);
        set(libc::SOL_SOCKET, libc::SO_BUSY_POLL, OptVal::Int(50)).unwrap();
        set(libc::SOL_SOCKET, libc::SO_REUSEPORT, OptVal::Int(1)).unwrap();
        let t = std::time::Duration::from_millis(250);
        set(libc::SOL_SOCKET, libc::SO_RCVTIMEO, OptVal::Time(t)).unwrap();
        set(libc::IPPROTO_IP, libc::IP_PKTINFO, OptVal::Int(1)).unwrap();
        let got = pending(&p);
        assert_eq!(got.busy_poll, Some(50));
        assert!(got.reuseport);
        assert_eq!(got.rcvtimeo, Some(t));
        assert_ne!(got.cmsgs & crate::udp::sock::PKTINFO4, 0);
        assert_eq!(got.refuse, None, "each is one rxpath honours");
        table::remove(fd);
    }

    #[test]
    fn an_option_rxpath_cannot_honour_keeps_the_socket_on_the_kernel() {
        let fd = 62_001;
        let p = candidate(fd);
        // Turning off what is off asks nothing.
        setsockopt(fd, libc::IPPROTO_IP, libc::IP_RECVTTL, OptVal::Int(0)).unwrap();
        assert_eq!(pending(&p).refuse, None);
        // On, it succeeds (the kernel socket took it) and the socket
        // stays the kernel's at bind, said why.
        setsockopt(fd, libc::IPPROTO_IP, libc::IP_RECVTTL, OptVal::Int(1)).unwrap();
        let why = pending(&p).refuse.expect("refused");
        assert!(why.contains("rxpath does not honour it"), "{why}");
        table::remove(fd);
    }

    #[test]
    fn options_on_kernel_fds_are_not_rxpaths_business() {
        let fd = 62_002;
        assert_eq!(
            setsockopt(fd, libc::IPPROTO_IP, libc::IP_RECVTTL, OptVal::Int(1)),
            Ok(())
        );
        assert_eq!(table::kind(fd), table::KERNEL);
    }
}
