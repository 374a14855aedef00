//! The application's UDP socket.

use super::dgram::{Dgram, RecvMeta};
use super::{lock, read_lock, SockError, Sockets};
use crate::ip::mcast::Change;
use crate::napi::NapiId;
use rxpath_frames::Frame;
use serde::Serialize;
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

#[derive(Debug, Default)]
pub(crate) struct RecvQueue {
    pub(crate) dgrams: VecDeque<Dgram>,
    /// Bytes charged against rcvbuf (truesize of the queued frames).
    pub(crate) bytes: usize,
    pub(crate) closed: bool,
}

/// Per-socket counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SockCounters {
    /// Datagrams queued.
    pub queued: u64,
    /// Datagrams dropped because the receive queue was full.
    pub drops: u64,
    /// Datagrams read by the application.
    pub read: u64,
    /// `recv` calls that busy-polled.
    pub busy_polls: u64,
    /// `recv` calls that slept.
    pub sleeps: u64,
}

#[derive(Debug, Default)]
struct AtomicCounters {
    queued: AtomicU64,
    drops: AtomicU64,
    read: AtomicU64,
    busy_polls: AtomicU64,
    sleeps: AtomicU64,
}

/// Who is told when a socket has something to read (the kernel's
/// `sk_data_ready`): the waiting half of the socket, which lives above the
/// core (threads asleep in `recv`, a task's waker, an epoll set). The core
/// only calls it, from the thread that queued the datagram; it must not
/// block.
pub trait DataReady: Send + Sync + std::fmt::Debug {
    /// A datagram was queued; `was_empty`: the queue was empty before it
    /// (the edge an epoll set waits for).
    fn readable(&self, was_empty: bool);
    /// The socket closed: readers must wake and see it.
    fn closed(&self);
}

/// Socket state shared by the application's handle, the demux table and
/// the NAPI stage that queues into it.
#[derive(Debug)]
pub(crate) struct SockInner {
    pub(crate) id: u64,
    pub(crate) addrs: Mutex<(SocketAddr, Option<SocketAddr>)>,
    pub(crate) q: Mutex<RecvQueue>,
    /// Datagrams queued, readable without the lock (busy-poll exit test).
    pub(crate) qlen: AtomicUsize,
    /// The NAPI of the last packet queued (`sk->sk_napi_id`).
    pub(crate) napi_id: AtomicU32,
    /// RX hash of the last packet queued (`sk->sk_rxhash`), for RFS.
    pub(crate) rxhash: AtomicU32,
    /// Busy-poll µs (`SO_BUSY_POLL`); `u32::MAX` = the host's busy_read.
    busy_poll_us: AtomicU32,
    /// Packets a busy poll may take (`SO_BUSY_POLL_BUDGET`); 0 = the
    /// kernel's `BUSY_POLL_BUDGET`.
    busy_budget: AtomicU16,
    pub(crate) rcvbuf: AtomicUsize,
    /// Receive timeout in ns (`SO_RCVTIMEO`); 0 = none.
    timeout_ns: AtomicU64,
    pub(crate) ip_id: AtomicU16,
    counters: AtomicCounters,
    /// Bound to an IPv6 address (IPv4 senders are seen v4-mapped).
    pub(crate) v6: bool,
    /// `IPV6_V6ONLY`: an IPv6 wildcard socket takes no IPv4.
    pub(crate) v6only: AtomicBool,
    /// `UDP_GRO`: take GRO packets whole (else their datagrams one by one).
    pub(crate) gro: AtomicBool,
    /// `IP_PMTUDISC_DO`/`PROBE`: DF on every datagram.
    pub(crate) pmtudisc_do: AtomicBool,
    /// `SO_REUSEPORT` when it was bound: it may share its address with
    /// others that set it ([`super::demux`]).
    pub(crate) reuseport: bool,
    /// `SO_REUSEADDR` when it was bound.
    pub(crate) reuseaddr: bool,
    /// `SO_RXQ_OVFL`: each datagram carries the drops so far.
    pub(crate) rxq_ovfl: AtomicBool,
    /// `IP_MULTICAST_ALL`, `IPV6_MULTICAST_ALL`: datagrams to an IPv4 or
    /// IPv6 group this socket did not join but another did reach it.
    pub(crate) mc_all: [AtomicBool; 2],
    /// The waiting half, told of every datagram queued and of the close.
    ready: OnceLock<Arc<dyn DataReady>>,
}

impl SockInner {
    /// Queue a datagram (NAPI context: does not sleep; the lock is held
    /// only to link the datagram). Returns it back if the queue is full or
    /// the socket closed.
    #[inline]
    pub(crate) fn enqueue(&self, mut d: Dgram) -> Result<(), Dgram> {
        let truesize = d.truesize();
        if self.rxq_ovfl.load(Ordering::Relaxed) {
            d.drops = self.counters.drops.load(Ordering::Relaxed) as u32;
        }
        let mut q = lock(&self.q);
        // `__udp_enqueue_schedule_skb`: a full buffer is one already past
        // rcvbuf, so that a datagram always fits into an empty one.
        if q.closed || q.bytes > self.rcvbuf.load(Ordering::Relaxed) {
            drop(q);
            self.counters.drops.fetch_add(1, Ordering::Relaxed);
            return Err(d);
        }
        q.bytes += truesize;
        q.dgrams.push_back(d);
        let was_empty = q.dgrams.len() == 1;
        self.qlen.store(q.dgrams.len(), Ordering::Release);
        drop(q);
        self.counters.queued.fetch_add(1, Ordering::Relaxed);
        if let Some(r) = self.ready.get() {
            r.readable(was_empty);
        }
        Ok(())
    }

    /// Close: mark the queue closed, send its frames home, wake sleepers.
    pub(crate) fn close(&self, host: &Sockets) {
        host.groups.leave_all(self.id);
        let mut q = lock(&self.q);
        q.closed = true;
        q.bytes = 0;
        let dgrams = std::mem::take(&mut q.dgrams);
        self.qlen.store(0, Ordering::Release);
        drop(q);
        if let Some(r) = self.ready.get() {
            r.closed();
        }
        for d in dgrams {
            if let Some(p) = host.port(d.queue) {
                p.ret.put_all(d.into_frames());
            }
        }
    }

    pub(crate) fn addrs(&self) -> (SocketAddr, Option<SocketAddr>) {
        *lock(&self.addrs)
    }
}

/// What a socket asks of `bind` ([`Socket::bind_with`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct BindOptions {
    /// `SO_REUSEPORT`: share the address with other sockets that set it,
    /// as a group that spreads flows over its members.
    pub reuseport: bool,
    /// `SO_REUSEADDR`: share the address with other sockets that set it
    /// (as multicast receivers do); a unicast datagram goes to the one
    /// bound last, as the kernel's lookup finds it first.
    pub reuseaddr: bool,
}

/// A UDP socket's state on an rxpath host: its addresses, options,
/// receive queue and counters, and the calls that never wait (`bind`,
/// `connect`, `setsockopt`, a non-blocking read, `send`). The waiting
/// half (blocking reads, timeouts, busy-poll loops, epoll, wakers) is the
/// runtime's `UdpSocket`, which registers a [`DataReady`] here.
///
/// Reads may come from several threads at once; each datagram goes to
/// exactly one of them. Dropping the last handle closes the socket.
#[derive(Debug, Clone)]
pub struct Socket {
    pub(crate) inner: Arc<SockInner>,
    pub(crate) host: Arc<Sockets>,
    _close: Arc<CloseOnDrop>,
}

#[derive(Debug)]
struct CloseOnDrop {
    inner: Arc<SockInner>,
    host: Arc<Sockets>,
}

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.host.unbind(&self.inner);
        // The removal above made GRO's kept answers stale (the guard's
        // drop): the socket is no longer found, whatever its flag says.
        if self.inner.gro.swap(false, Ordering::Relaxed) {
            self.host.gro_socks.fetch_sub(1, Ordering::Relaxed);
        }
        lock(&self.host.stopped).retain(|s| !Arc::ptr_eq(s, &self.inner));
        self.inner.close(&self.host);
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Socket {
    /// `bind()`: a socket on `addr` (address or wildcard; port 0 picks an
    /// ephemeral port).
    pub fn bind(host: &Arc<Sockets>, addr: SocketAddr) -> Result<Socket, SockError> {
        Self::bind_with(host, addr, BindOptions::default())
    }

    /// `bind()` with the options set before it (`SO_REUSEPORT`,
    /// `SO_REUSEADDR`).
    pub fn bind_with(
        host: &Arc<Sockets>,
        addr: SocketAddr,
        opts: BindOptions,
    ) -> Result<Socket, SockError> {
        let inner = host.bind_entry(addr, opts, |addr| {
            Arc::new(SockInner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                addrs: Mutex::new((addr, None)),
                q: Mutex::default(),
                qlen: AtomicUsize::new(0),
                napi_id: AtomicU32::new(0),
                rxhash: AtomicU32::new(0),
                busy_poll_us: AtomicU32::new(u32::MAX),
                busy_budget: AtomicU16::new(0),
                rcvbuf: AtomicUsize::new(host.cfg.rcvbuf),
                timeout_ns: AtomicU64::new(0),
                ip_id: AtomicU16::new(0),
                counters: AtomicCounters::default(),
                v6: addr.is_ipv6(),
                v6only: AtomicBool::new(false),
                gro: AtomicBool::new(false),
                pmtudisc_do: AtomicBool::new(false),
                reuseport: opts.reuseport,
                reuseaddr: opts.reuseaddr,
                rxq_ovfl: AtomicBool::new(false),
                // `inet_create()` sets MC_ALL; `inet6_create()` sets only
                // MC6_ALL, so an IPv6 socket takes no IPv4 group it did
                // not join.
                mc_all: [AtomicBool::new(addr.is_ipv4()), AtomicBool::new(true)],
                ready: OnceLock::new(),
            })
        })?;
        Ok(Socket {
            _close: Arc::new(CloseOnDrop {
                inner: inner.clone(),
                host: host.clone(),
            }),
            inner,
            host: host.clone(),
        })
    }

    /// `SO_ATTACH_REUSEPORT_CBPF` (`None`: `SO_DETACH_REUSEPORT_BPF`): the
    /// socket's `SO_REUSEPORT` group picks a member for each datagram by
    /// what `prog` returns ([`super::cbpf`]), falling back to the hash for
    /// an index past the group. `Invalid` for a socket without
    /// `SO_REUSEPORT`.
    pub fn attach_reuseport_cbpf(&self, prog: Option<super::cbpf::Cbpf>) -> Result<(), SockError> {
        self.host.attach_prog(&self.inner, prog.map(Arc::new))
    }

    /// `connect()`: receive only from `remote` (the full 5-tuple wins over
    /// bound and wildcard sockets) and make it the default destination.
    pub fn connect(&self, remote: SocketAddr) -> Result<(), SockError> {
        self.host.connect_entry(&self.inner, remote)
    }

    /// A change to this socket's multicast memberships on the interface
    /// rxpath serves (`IP_ADD_MEMBERSHIP`, `IPV6_JOIN_GROUP`,
    /// `IP_ADD_SOURCE_MEMBERSHIP`, `IP_BLOCK_SOURCE` and the rest;
    /// [`crate::ip::mcast`]), refused as the kernel refuses it. IP input
    /// takes a group's datagrams while some socket is in it; each socket
    /// on the port then gets a copy as its filter, or for a group it did
    /// not join its [`set_multicast_all`](Self::set_multicast_all) setting,
    /// says.
    /// Closing leaves every group. (rxpath runs no IGMP or MLD: the
    /// kernel socket behind a preloaded fd joins too, and the kernel
    /// reports it.)
    pub fn change_membership(&self, group: IpAddr, change: Change) -> Result<(), SockError> {
        self.host.groups.change(self.inner.id, group, change)?;
        Ok(())
    }

    /// `IP_MULTICAST_ALL` (`ipv4`) or `IPV6_MULTICAST_ALL`: a datagram to
    /// a group of that family some other socket joined reaches this one
    /// too if it listens on the port. On by default for the socket's own
    /// family; an IPv6 socket's IPv4 setting starts off (`inet6_create()`
    /// leaves it), so a dual-stack socket takes the IPv4 groups it joined
    /// itself, and broadcast.
    pub fn set_multicast_all(&self, ipv4: bool, on: bool) {
        self.inner.mc_all[!ipv4 as usize].store(on, Ordering::Relaxed);
    }

    /// The `IP_MULTICAST_ALL` (`ipv4`) or `IPV6_MULTICAST_ALL` setting.
    pub fn multicast_all(&self, ipv4: bool) -> bool {
        self.inner.mc_all[!ipv4 as usize].load(Ordering::Relaxed)
    }

    /// `SO_RXQ_OVFL`: datagrams queued from now on carry the socket's
    /// drops so far ([`RecvMeta::drops`]).
    pub fn set_rxq_ovfl(&self, on: bool) {
        self.inner.rxq_ovfl.store(on, Ordering::Relaxed);
    }

    /// `setsockopt(UDP_GRO)`: take datagrams GRO merged as one read of up
    /// to 64 segments, each [`RecvMeta::stride`] bytes but the last (the
    /// device's NAPIs must run GRO: `HostConfig::gro`). Off (the default):
    /// one datagram per read, as sent, whatever GRO did.
    pub fn set_udp_gro(&self, on: bool) {
        if self.inner.gro.swap(on, Ordering::Relaxed) != on {
            if on {
                self.host.gro_socks.fetch_add(1, Ordering::Relaxed);
            } else {
                self.host.gro_socks.fetch_sub(1, Ordering::Relaxed);
            }
            self.host.gro_changed();
        }
    }

    /// `getsockopt(UDP_GRO)`.
    pub fn udp_gro(&self) -> bool {
        self.inner.gro.load(Ordering::Relaxed)
    }

    /// `IPV6_V6ONLY`: with `true` an IPv6 socket bound to `::` receives
    /// no IPv4 and cannot send to it. Off by default
    /// (`net.ipv6.bindv6only = 0`): `::` is dual-stack, IPv4 peers appear
    /// as `::ffff:a.b.c.d` and answers to them leave as IPv4.
    pub fn set_only_v6(&self, only: bool) {
        self.inner.v6only.store(only, Ordering::Relaxed);
    }

    /// The `IPV6_V6ONLY` setting.
    pub fn only_v6(&self) -> bool {
        self.inner.v6only.load(Ordering::Relaxed)
    }

    /// The local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.addrs().0
    }

    /// The connected peer.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.inner.addrs().1
    }

    /// `SO_BUSY_POLL`: busy-poll this long (µs) in `recv` before sleeping;
    /// 0 = off. Unset, the host's `busy_read` applies.
    pub fn set_busy_poll(&self, us: u32) {
        self.inner.busy_poll_us.store(us, Ordering::Relaxed);
    }

    /// The busy-poll time in effect, µs.
    pub fn busy_poll(&self) -> u32 {
        match self.inner.busy_poll_us.load(Ordering::Relaxed) {
            u32::MAX => self.host.busy_read(),
            us => us,
        }
    }

    /// `SO_BUSY_POLL_BUDGET`: the packets one busy poll of this socket's
    /// NAPI may take; 0 = [`super::BUSY_POLL_BUDGET`] (`sk_busy_loop`'s
    /// `READ_ONCE(sk->sk_busy_poll_budget) ?: BUSY_POLL_BUDGET`).
    pub fn set_busy_poll_budget(&self, budget: u16) {
        self.inner.busy_budget.store(budget, Ordering::Relaxed);
    }

    /// The busy-poll budget in effect, packets.
    pub fn busy_poll_budget(&self) -> usize {
        match self.inner.busy_budget.load(Ordering::Relaxed) {
            0 => super::BUSY_POLL_BUDGET,
            b => b as usize,
        }
    }

    /// `SO_RCVBUF`: the receive queue's limit in bytes of truesize.
    pub fn set_rcvbuf(&self, bytes: usize) {
        self.inner.rcvbuf.store(bytes, Ordering::Relaxed);
    }

    /// `SO_RCVTIMEO`: how long a blocking `recv` waits (`None` = forever).
    pub fn set_read_timeout(&self, t: Option<Duration>) {
        let ns = t.map_or(0, |d| d.as_nanos().clamp(1, u64::MAX as u128) as u64);
        self.inner.timeout_ns.store(ns, Ordering::Relaxed);
    }

    /// `SO_INCOMING_NAPI_ID`: the NAPI the last datagram came through.
    pub fn napi_id(&self) -> NapiId {
        NapiId(self.inner.napi_id.load(Ordering::Relaxed))
    }

    /// Datagrams queued now.
    pub fn queued(&self) -> usize {
        self.inner.qlen.load(Ordering::Acquire)
    }

    /// Counters.
    pub fn counters(&self) -> SockCounters {
        let c = &self.inner.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SockCounters {
            queued: g(&c.queued),
            drops: g(&c.drops),
            read: g(&c.read),
            busy_polls: g(&c.busy_polls),
            sleeps: g(&c.sleeps),
        }
    }

    /// The host this socket lives on.
    pub fn host(&self) -> &Arc<Sockets> {
        &self.host
    }

    /// `recvfrom(MSG_DONTWAIT)`: never blocks; [`SockError::WouldBlock`]
    /// when nothing is queued.
    pub fn try_recv_from(&self, buf: &mut [u8]) -> Result<(usize, SocketAddr), SockError> {
        let mut m = None;
        let n = self.try_recv_batch(std::slice::from_mut(&mut &mut *buf), &mut |_, r| {
            m = Some(r)
        })?;
        match (n, m) {
            (1, Some(r)) => Ok((r.len, r.src)),
            _ => Err(SockError::WouldBlock),
        }
    }

    /// `recv(MSG_PEEK)`: copy the next datagram into `buf` (as much as
    /// fits) and leave it queued. Returns its whole payload length and
    /// what a read of it would say, or `None` when nothing is queued
    /// (`FIONREAD` peeks with an empty `buf`).
    pub fn try_peek(&self, buf: &mut [u8]) -> Result<Option<(usize, RecvMeta)>, SockError> {
        let q = lock(&self.inner.q);
        let Some(d) = q.dgrams.front() else {
            return if q.closed {
                Err(SockError::Closed)
            } else {
                Ok(None)
            };
        };
        let p = self.host.port(d.queue).ok_or(SockError::Closed)?;
        let len = d.copy_to(&p.umem, buf);
        Ok(Some((d.payload_len(), d.meta(len))))
    }

    /// Read one datagram without copying it, if one is queued: `f` sees
    /// the payload in its frame (a GRO packet that spans frames is copied
    /// once). `Ok(None)`: nothing queued.
    pub fn try_recv_with<R>(
        &self,
        f: impl FnOnce(&[u8], SocketAddr) -> R,
    ) -> Result<Option<R>, SockError> {
        let d = {
            let mut q = lock(&self.inner.q);
            let d = q.dgrams.pop_front();
            if let Some(d) = &d {
                q.bytes = q.bytes.saturating_sub(d.truesize());
            } else if q.closed {
                return Err(SockError::Closed);
            }
            self.inner.qlen.store(q.dgrams.len(), Ordering::Release);
            d
        };
        let Some(d) = d else { return Ok(None) };
        let mut out = None;
        if let Some(p) = self.host.port(d.queue) {
            if d.frags().is_empty() {
                let o = d.off as usize;
                out = Some(f(&p.umem.data(d.head())[o..o + d.len as usize], d.src));
            } else {
                let mut v = vec![0u8; d.payload_len()];
                d.copy_to(&p.umem, &mut v);
                out = Some(f(&v, d.src));
            }
            p.ret.put_all(d.into_frames());
        }
        self.after_read(1);
        out.map(Some).ok_or(SockError::Closed)
    }

    /// The receive timeout (`SO_RCVTIMEO`), if set.
    pub fn read_timeout(&self) -> Option<Duration> {
        match self.inner.timeout_ns.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// Register the waiting half (once; a second call is ignored and
    /// returns false).
    pub fn set_data_ready(&self, r: Arc<dyn DataReady>) -> bool {
        self.inner.ready.set(r).is_ok()
    }

    /// Stop receiving: the socket leaves the demux table and its
    /// `SO_REUSEPORT` group, so nothing more is queued on it (what comes
    /// for its address is another socket's, or a counted `no_socket`
    /// drop); what it holds stays readable. For a socket handed to
    /// another path (the kernel socket behind a preloaded program's fd).
    pub fn stop_receiving(&self) {
        self.host.unbind(&self.inner);
        self.host.groups.leave_all(self.inner.id);
        let mut stopped = lock(&self.host.stopped);
        if !stopped.iter().any(|s| Arc::ptr_eq(s, &self.inner)) {
            stopped.push(self.inner.clone());
        }
    }

    /// The socket is closed (its host stopped, or it was dropped).
    pub fn is_closed(&self) -> bool {
        lock(&self.inner.q).closed
    }

    /// Whether a read would find a datagram, looked at under the queue's
    /// lock: a waiter that raised its flag in its [`DataReady`] before
    /// this look either sees the datagram or is told of it.
    /// `Err(Closed)` once closed and drained.
    pub fn readable(&self) -> Result<bool, SockError> {
        let q = lock(&self.inner.q);
        match (q.dgrams.is_empty(), q.closed) {
            (false, _) => Ok(true),
            (true, true) => Err(SockError::Closed),
            (true, false) => Ok(false),
        }
    }

    /// Count a read that busy-polled.
    pub fn count_busy_poll(&self) {
        self.inner
            .counters
            .busy_polls
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Count a read that slept (once per sleep).
    pub fn count_sleep(&self) {
        self.inner.counters.sleeps.fetch_add(1, Ordering::Relaxed);
    }

    /// The socket has seen a flow RFS can steer (an RX hash), so a reader
    /// should say its CPU ([`Self::record_flow`]).
    pub fn has_flow(&self) -> bool {
        self.inner.rxhash.load(Ordering::Relaxed) != 0
    }

    /// RFS: this socket's flow is read on `cpu` (`sock_rps_record_flow`;
    /// the reader tells, the core does not ask the OS).
    pub fn record_flow(&self, cpu: u32) {
        let hash = self.inner.rxhash.load(Ordering::Relaxed);
        if hash != 0 {
            self.host.flows.record(hash, cpu);
        }
    }

    /// Copy out up to `bufs.len()` queued datagrams; frames go home in one
    /// batch.
    /// `recvmmsg(MSG_DONTWAIT)`: `meta` is called with each datagram's
    /// index and [`RecvMeta`]; 0 when nothing is queued.
    pub fn try_recv_batch<B: AsMut<[u8]>>(
        &self,
        bufs: &mut [B],
        meta: &mut dyn FnMut(usize, RecvMeta),
    ) -> Result<usize, SockError> {
        if bufs.is_empty() {
            return Ok(0);
        }
        // Only as many slots as datagrams taken are touched (a read of one
        // datagram is the common case: no array to fill and drop).
        let mut taken = arrayvec::ArrayVec::<Dgram, 32>::new();
        let want = bufs.len().min(taken.capacity());
        {
            let mut q = lock(&self.inner.q);
            if q.dgrams.is_empty() && q.closed {
                return Err(SockError::Closed);
            }
            while taken.len() < want {
                match q.dgrams.pop_front() {
                    Some(d) => {
                        q.bytes = q.bytes.saturating_sub(d.truesize());
                        taken.push(d);
                    }
                    None => break,
                }
            }
            self.inner.qlen.store(q.dgrams.len(), Ordering::Release);
        }
        let n = taken.len();
        if n == 0 {
            return Ok(0);
        }
        // Frames of the first datagram's queue go home under one lock.
        let first_q = taken[0].queue;
        let mut home = arrayvec::ArrayVec::<Frame, 32>::new();
        // Drained, not moved into an iterator: moving the ArrayVec copies
        // all its slots (3.5 KiB), more than the datagrams' bytes.
        for (i, d) in taken.drain(..).enumerate() {
            let Some(p) = self.host.port(d.queue) else {
                continue;
            };
            let buf = bufs[i].as_mut();
            let len = d.copy_to(&p.umem, buf);
            meta(i, d.meta(len));
            let same = d.queue == first_q;
            match d.into_single() {
                Ok(f) if same => home.push(f),
                Ok(f) => p.ret.put(f),
                Err(d) => p.ret.put_all(d.into_frames()),
            }
        }
        if let Some(p) = self.host.port(first_q) {
            p.ret.put_all(home.drain(..));
        }
        self.after_read(n);
        Ok(n)
    }

    /// A descriptor that becomes readable when the device queue of this
    /// socket's NAPI has packets (the AF_XDP or AF_PACKET socket's), for an
    /// event loop that wants to be woken by the device itself and then
    /// busy-poll (`SO_PREFER_BUSY_POLL` with epoll in the kernel): one
    /// wakeup per burst instead of the interrupt thread's and then the
    /// task's. `None` before the socket has seen its NAPI (its first
    /// datagram) or on a device without one (the simulated NIC).
    pub fn napi_readiness_fd(&self) -> Option<std::io::Result<std::os::fd::OwnedFd>> {
        let id = self.inner.napi_id.load(Ordering::Relaxed);
        if id == 0 {
            return None;
        }
        self.host.napi_readiness_fd(NapiId(id))
    }

    fn after_read(&self, n: usize) {
        self.inner
            .counters
            .read
            .fetch_add(n as u64, Ordering::Relaxed);
    }
}

impl Sockets {
    /// End the interrupt deferral of these NAPIs (a busy poller blocks).
    pub fn resume_irqs(&self, ids: &[NapiId]) {
        let m = read_lock(&self.napis);
        for id in ids {
            if let Some(n) = m.get(id) {
                n.resume_irqs();
            }
        }
    }

    /// `napi_suspend_irqs()` on these NAPIs
    /// ([`super::SharedNapi::suspend_irqs`]): a waiter was handed events.
    /// `now` is read once, and only if one of them is deferred with an IRQ
    /// suspension timeout.
    pub fn suspend_irqs(&self, ids: &[NapiId], now: impl FnOnce() -> u64) {
        let m = read_lock(&self.napis);
        let mut now = Some(now);
        let mut t = 0;
        for n in ids.iter().filter_map(|id| m.get(id)) {
            if n.irq_suspend_timeout() > 0 && n.deferred_until() != 0 {
                if let Some(f) = now.take() {
                    t = f();
                }
                n.suspend_irqs(t);
            }
        }
    }

    /// Add one busy-poll session's figures to the counters.
    pub fn count_busy_session(&self, s: BusySession) {
        let c = &self.counters;
        c.busy_polls.fetch_add(1, Ordering::Relaxed);
        c.busy_poll_loops.fetch_add(s.loops, Ordering::Relaxed);
        c.busy_poll_packets.fetch_add(s.packets, Ordering::Relaxed);
        c.busy_poll_contended
            .fetch_add(s.contended, Ordering::Relaxed);
        c.busy_poll_ns.fetch_add(s.ns, Ordering::Relaxed);
    }
}

/// What one busy-poll session did (`napi_busy_loop`), for the counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct BusySession {
    /// NAPI polls run.
    pub loops: u64,
    /// Packets they took from the device.
    pub packets: u64,
    /// NAPIs found owned by someone else.
    pub contended: u64,
    /// Time spent, ns.
    pub ns: u64,
}
