//! A UDP socket rxpath serves for the program, and one not bound yet:
//! their state, who sleeps on them, and what "readable" means.

use crate::sys;
pub(crate) use crate::watchers::Watchers;
use rxpath_core::NapiId;
use rxpath_runtime::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Datagrams read from the kernel sockets behind served fds
/// ([`crate::kside`]): the kernel's path, counted apart in the report.
pub(crate) static KERNEL_READS: AtomicU64 = AtomicU64::new(0);

/// A UDP socket before `bind`: what was asked of it so far.
/// `SO_ATTACH_REUSEPORT_CBPF` (asm-generic/socket.h).
pub(crate) const SO_ATTACH_REUSEPORT_CBPF: i32 = 51;
/// `SO_DETACH_REUSEPORT_BPF`.
pub(crate) const SO_DETACH_REUSEPORT_BPF: i32 = 68;

#[derive(Debug, Default, Clone)]
pub(crate) struct Pending {
    pub(crate) nonblock: bool,
    pub(crate) rcvtimeo: Option<Duration>,
    pub(crate) busy_poll: Option<u32>,
    /// `SO_BUSY_POLL_BUDGET`.
    pub(crate) busy_budget: Option<u16>,
    pub(crate) rcvbuf: Option<usize>,
    pub(crate) v6only: bool,
    /// The control messages a read hands back ([`PKTINFO4`], ...).
    pub(crate) cmsgs: u16,
    /// `UDP_GRO`: read GRO packets whole.
    pub(crate) gro: bool,
    /// `SO_REUSEPORT`: may share its address with others that set it.
    pub(crate) reuseport: bool,
    /// `SO_REUSEADDR`: may share its address with others that set it.
    pub(crate) reuseaddr: bool,
    /// `IP_MTU_DISCOVER` `DO` or beyond (`IPV6_DONTFRAG`): no fragments.
    pub(crate) pmtudisc_do: bool,
    /// `SO_ATTACH_REUSEPORT_CBPF` before `bind`: the group's program.
    pub(crate) cbpf: Option<rxpath_core::sock::cbpf::Cbpf>,
    /// Multicast memberships on the served interface, made before `bind`.
    pub(crate) mcast: Vec<crate::udp::mcast::Request>,
    /// `IP_MULTICAST_ALL`, `IPV6_MULTICAST_ALL` (`None`: the default).
    pub(crate) mc_all: [Option<bool>; 2],
    /// An option rxpath cannot honour was set: the socket stays the
    /// kernel's at `bind`.
    pub(crate) refuse: Option<String>,
}

/// A socket rxpath serves, behind the kernel socket of the same fd.
#[derive(Debug)]
pub(crate) struct Accel {
    pub(crate) sock: UdpSocket,
    pub(crate) nonblock: AtomicBool,
    pub(crate) watch: Arc<Watchers>,
    /// Fds that name this socket (`dup` makes more); the port goes back
    /// to the kernel when the last one closes.
    pub(crate) fds: std::sync::atomic::AtomicUsize,
    /// The control messages a read hands back ([`PKTINFO4`], [`PKTINFO6`],
    /// [`RECVTOS`], [`RECVTCLASS`], [`GRO`]).
    pub(crate) cmsgs: std::sync::atomic::AtomicU16,
    /// `UDP_SEGMENT` set on the socket: sends cut into datagrams of this
    /// size (0: off).
    pub(crate) segment: std::sync::atomic::AtomicU16,
    /// The kernel socket behind the fd may hold a datagram
    /// ([`crate::kside`]).
    pub(crate) kernel_ready: AtomicBool,
    /// Its key in the kernel-side watch.
    pub(crate) ktoken: u64,
    /// `shutdown()` so far ([`SHUT_READ`], [`SHUT_WRITE`]).
    pub(crate) shut: AtomicU8,
    /// What the queue held at a `fork`, shared with the child and read
    /// before the queue ([`crate::udp::forkq`]).
    pub(crate) held: crate::udp::forkq::Held,
    /// Handed back to the kernel (an option set after `bind` that rxpath
    /// does not honour): its port left the XDP program's map; what
    /// rxpath's queue still holds is read first, then every read and
    /// send is the kernel socket's.
    pub(crate) kernel_only: AtomicBool,
    /// Threads inside a blocking read of this socket
    /// ([`crate::ops::Reading`]).
    pub(crate) readers: AtomicUsize,
    /// Its last fd closed while a read was blocked on it: the kernel
    /// socket, kept open (the port held) until that read returns, as the
    /// kernel's blocked call holds the open file.
    pub(crate) parked: Mutex<Option<crate::sys::Ours>>,
    /// A word shared with the children forked while it was served: one
    /// that reads the socket sets it ([`crate::udp::forkq::child_uses`]) as it
    /// takes the port out of the port map, and this process then reads
    /// and sends through the kernel socket too.
    pub(crate) fork_word: std::sync::OnceLock<Arc<sys::Shared>>,
    /// Its port went to the kernel at a `fork` ([`crate::table::before_fork`])
    /// and this process has not read the socket since: the first read
    /// here takes it back ([`crate::kside::take_back_after_fork`]).
    pub(crate) lent: AtomicBool,
    /// Taken back after a fork: what reached the kernel socket while the
    /// port was lent is older than rxpath's queue, so it is read first.
    pub(crate) kernel_first: AtomicBool,
    /// The destinations the XDP program takes for it
    /// (`host::ports::map_keys`).
    pub(crate) keys: Vec<rxpath_dev::sys::xdp::PortKey>,
    /// Its line in the report's list of sockets ([`crate::host::Global::served`]).
    pub(crate) report_id: usize,
}

impl Accel {
    /// A served socket around `sock`, as `bind` makes one: its reads'
    /// non-blocking flag and control messages as the candidate had them,
    /// its key in the kernel-side watch, its line in the report, the
    /// destinations the port map takes for it.
    pub(crate) fn new(
        sock: UdpSocket,
        (nonblock, cmsgs): (bool, u16),
        ktoken: u64,
        report_id: usize,
        keys: Vec<rxpath_dev::sys::xdp::PortKey>,
    ) -> Arc<Accel> {
        let watch = Arc::new(Watchers::default());
        let w: Arc<dyn rxpath_runtime::sock::Watch> = watch.clone();
        sock.set_watch(Arc::downgrade(&w));
        Arc::new(Accel {
            sock,
            nonblock: nonblock.into(),
            watch,
            fds: 1.into(),
            cmsgs: cmsgs.into(),
            segment: 0.into(),
            kernel_ready: false.into(),
            ktoken,
            shut: 0.into(),
            held: Default::default(),
            kernel_only: false.into(),
            readers: 0.into(),
            parked: Mutex::new(None),
            fork_word: Default::default(),
            lent: false.into(),
            kernel_first: false.into(),
            keys,
            report_id,
        })
    }

    /// A served socket around `sock` with nothing set (the unit tests'
    /// own, on a simulated NIC's host).
    #[cfg(test)]
    pub(crate) fn for_test(sock: UdpSocket) -> Arc<Accel> {
        Accel::new(sock, (false, 0), 0, 0, Vec::new())
    }

    /// The word shared with children forked now ([`Accel::fork_word`]).
    pub(crate) fn fork_word(&self) -> Option<Arc<sys::Shared>> {
        if let Some(w) = self.fork_word.get() {
            return Some(w.clone());
        }
        let w = Arc::new(sys::Shared::new(4).ok()?);
        Some(self.fork_word.get_or_init(|| w).clone())
    }

    /// A forked child took this socket's reading.
    pub(crate) fn child_took_it(&self) -> bool {
        self.fork_word
            .get()
            .is_some_and(|w| w.word(0).load(Ordering::Acquire) != 0)
    }
}

/// Shut down for reading: an empty queue reads as the end (0 bytes).
pub(crate) const SHUT_READ: u8 = 1;
/// Shut down for writing: sends fail with `EPIPE`.
pub(crate) const SHUT_WRITE: u8 = 2;

/// `UDP_SEGMENT` (`linux/udp.h`).
pub(crate) const UDP_SEGMENT: i32 = 103;

/// `IP_PKTINFO` is on.
pub(crate) const PKTINFO4: u16 = 1;
/// `IPV6_RECVPKTINFO` is on.
pub(crate) const PKTINFO6: u16 = 2;
/// `IP_RECVTOS` is on (`IP_TOS`, one byte, on IPv4 datagrams).
pub(crate) const RECVTOS: u16 = 4;
/// `IPV6_RECVTCLASS` is on (`IPV6_TCLASS`, an int, on IPv6 datagrams).
pub(crate) const RECVTCLASS: u16 = 8;
/// `UDP_GRO` is on (`UDP_GRO`, the segment size, on a GRO packet).
pub(crate) const GRO: u16 = 16;
/// `SO_TIMESTAMP` or `SO_TIMESTAMPNS` is on (the time the NAPI took the
/// datagram, `CLOCK_REALTIME`).
pub(crate) const TIMESTAMP: u16 = 32;
/// ... as a `timespec` (`SO_TIMESTAMPNS`), else a `timeval`.
pub(crate) const TIMESTAMP_NS: u16 = 64;
/// ... with the `_NEW` message types (`SO_TIMESTAMP_NEW`, 64-bit times).
pub(crate) const TIMESTAMP_NEW: u16 = 128;
/// `SO_RXQ_OVFL` is on (the socket's drops, a u32, when not 0).
pub(crate) const RXQ_OVFL: u16 = 256;

/// `SO_TIMESTAMP_NEW` (`asm-generic/socket.h`).
pub(crate) const SO_TIMESTAMP_NEW: i32 = 63;
/// `SO_TIMESTAMPNS_NEW`.
pub(crate) const SO_TIMESTAMPNS_NEW: i32 = 64;

/// `UDP_GRO` (`linux/udp.h`).
pub(crate) const UDP_GRO: i32 = 104;

/// The socket has a datagram to read, in rxpath's queue or in the kernel
/// socket behind its fd (or is closed: a read returns).
pub(crate) fn readable(a: &Accel) -> bool {
    a.sock.queued() > 0
        || a.held.any()
        || a.kernel_ready.load(Ordering::Relaxed)
        || a.shut.load(Ordering::Relaxed) & SHUT_READ != 0
        || a.sock.is_closed()
}

/// Poll the NAPIs of `socks` before a wait: for the longest of their
/// `busy_poll` windows, until one of them is readable; without a window,
/// one round if their interrupts are suspended while threads wait
/// (`RXPATH_IRQ_SUSPEND_TIMEOUT`, prefer busy polling), so that the sleep
/// that follows waits on the device ([`crate::device`]). False if nothing
/// was polled.
pub(crate) fn busy_wait(socks: &[&Arc<Accel>]) -> bool {
    busy_wait_with(socks, BusyParams::default())
}

/// An epoll set's own busy-poll parameters (`EPIOCSPARAMS`): what is set
/// (non-zero) overrides what its sockets say.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BusyParams {
    /// `busy_poll_usecs`.
    pub(crate) us: u32,
    /// `busy_poll_budget`.
    pub(crate) budget: u16,
    // `prefer_busy_poll` is not kept: rxpath's interrupt deferral is the
    // host's (`RXPATH_PREFER_BUSY_POLL`); the kernel set keeps all three
    // and answers `EPIOCGPARAMS`.
}

/// The busy-poll budget of a wait over `socks`: the largest of theirs.
pub(crate) fn budget_of(socks: &[&Arc<Accel>]) -> usize {
    let b = socks.iter().map(|a| a.sock.busy_poll_budget()).max();
    b.unwrap_or(rxpath_core::sock::BUSY_POLL_BUDGET)
}

/// [`busy_wait`] with an epoll set's parameters.
pub(crate) fn busy_wait_with(socks: &[&Arc<Accel>], set: BusyParams) -> bool {
    let Some(first) = socks.first() else {
        return false;
    };
    let us = match set.us {
        0 => socks.iter().map(|a| a.sock.busy_poll()).max().unwrap_or(0),
        us => us,
    };
    let budget = match set.budget {
        0 => budget_of(socks),
        b => b as usize,
    };
    // The distinct NAPIs, as many as a busy-poll session takes.
    let mut ids = arrayvec::ArrayVec::<NapiId, { rxpath_runtime::sock::SESSION_NAPIS }>::new();
    for id in socks.iter().map(|a| a.sock.napi_id()) {
        if id.0 != 0 && !ids.contains(&id) && ids.try_push(id).is_err() {
            break;
        }
    }
    let host = first.sock.host();
    let suspends = || {
        ids.iter().any(|&i| {
            host.napi_by_id(i)
                .is_some_and(|n| n.prefer_busy_poll() > 0 || n.irq_suspend_timeout() > 0)
        })
    };
    if ids.is_empty() || (us == 0 && !suspends()) {
        return false;
    }
    first.sock.count_busy_poll();
    rxpath_runtime::sock::busy_loop(host, &ids, us, budget, &|| {
        socks.iter().any(|a| readable(a))
    });
    // A deferred interrupt stays deferred: the caller polls again soon, or
    // sleeps and then either waits on the device or raises it
    // ([`crate::device::sleep_devices`]).
    true
}
