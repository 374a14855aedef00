//! The application's UDP socket.

use super::demux::Key;
use super::{lock, read, SockError, Sockets};
use crate::napi::NapiId;
use crate::packet::Frag;
use rxpath_dev::Frame;
use serde::Serialize;
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

/// A queued datagram: the frame it arrived in (not copied) and where its
/// payload lies; for a socket with `UDP_GRO`, possibly a GRO packet: the
/// first segment here and the others in `frags`, each in its own frame.
#[derive(Debug)]
pub(crate) struct Dgram {
    pub(crate) frame: Frame,
    pub(crate) off: u16,
    /// Payload bytes in `frame`.
    pub(crate) len: u16,
    pub(crate) src: SocketAddr,
    /// The address it was sent to (`IP_PKTINFO`).
    pub(crate) dst: IpAddr,
    pub(crate) queue: u16,
    /// ECN codepoint of the IP header (`IP_RECVTOS`'s low two bits).
    pub(crate) ecn: u8,
    /// `gso_size` of a GRO packet (0: one datagram).
    pub(crate) gso: u16,
    /// Further segments of a GRO packet (empty: not allocated).
    pub(crate) frags: Vec<Frag>,
}

impl Dgram {
    /// Payload bytes in all its frames.
    fn payload_len(&self) -> usize {
        self.len as usize + self.frags.iter().map(|f| f.len as usize).sum::<usize>()
    }

    /// Frames it holds.
    pub(crate) fn frames(&self) -> usize {
        1 + self.frags.len()
    }

    /// Its frames, to go home.
    pub(crate) fn into_frames(self) -> impl Iterator<Item = Frame> {
        std::iter::once(self.frame).chain(self.frags.into_iter().map(|f| f.frame))
    }

    /// Copy the payload into `buf` (as much as fits); returns the bytes
    /// copied.
    fn copy_to(&self, umem: &rxpath_dev::Umem, buf: &mut [u8]) -> usize {
        let mut at = 0;
        let parts = std::iter::once((&self.frame, self.off, self.len))
            .chain(self.frags.iter().map(|f| (&f.frame, f.off, f.len)));
        for (frame, off, len) in parts {
            let o = off as usize;
            let data = &umem.data(frame)[o..o + len as usize];
            let n = data.len().min(buf.len() - at);
            buf[at..at + n].copy_from_slice(&data[..n]);
            at += n;
            if at == buf.len() {
                break;
            }
        }
        at
    }
}

#[derive(Debug, Default)]
pub(crate) struct RecvQueue {
    pub(crate) dgrams: VecDeque<Dgram>,
    /// Bytes charged against rcvbuf (truesize of the queued frames).
    pub(crate) bytes: usize,
    /// Threads sleeping in `recv`.
    pub(crate) waiters: u32,
    /// A thread in `recv` running its worker's backlog between naps
    /// ([`super::BacklogServer`]): unparked by the next datagram.
    pub(crate) parked: Option<std::thread::Thread>,
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

/// A readiness watcher registered on a socket ([`super::Epoll`]).
#[derive(Debug)]
pub(crate) struct Watch {
    pub(crate) ep: Weak<super::epoll::EpollShared>,
}

/// Socket state shared by the application's handle, the demux table and
/// the NAPI stage that queues into it.
#[derive(Debug)]
pub(crate) struct SockInner {
    pub(crate) id: u64,
    addrs: Mutex<(SocketAddr, Option<SocketAddr>)>,
    pub(crate) q: Mutex<RecvQueue>,
    pub(crate) cv: Condvar,
    /// Datagrams queued, readable without the lock (busy-poll exit test).
    pub(crate) qlen: AtomicUsize,
    /// The NAPI of the last packet queued (`sk->sk_napi_id`).
    pub(crate) napi_id: AtomicU32,
    /// RX hash of the last packet queued (`sk->sk_rxhash`), for RFS.
    pub(crate) rxhash: AtomicU32,
    /// Busy-poll µs (`SO_BUSY_POLL`); `u32::MAX` = the host's busy_read.
    busy_poll_us: AtomicU32,
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
    /// The task waiting in [`UdpSocket::poll_recv_batch`], woken by the
    /// thread that queues the next datagram (no thread per socket).
    pub(crate) waker: Mutex<Option<std::task::Waker>>,
    /// A waker is registered (read without the lock on every enqueue).
    pub(crate) has_waker: AtomicBool,
    pub(crate) watch: Mutex<Option<Watch>>,
}

impl SockInner {
    /// Queue a datagram (NAPI context: does not sleep; the lock is held
    /// only to link the datagram). Returns it back if the queue is full or
    /// the socket closed.
    #[inline]
    pub(crate) fn enqueue(&self, d: Dgram, truesize: usize) -> Result<(), Dgram> {
        let mut q = lock(&self.q);
        if q.closed || q.bytes + truesize > self.rcvbuf.load(Ordering::Relaxed) {
            drop(q);
            self.counters.drops.fetch_add(1, Ordering::Relaxed);
            return Err(d);
        }
        q.bytes += truesize;
        q.dgrams.push_back(d);
        let was_empty = q.dgrams.len() == 1;
        self.qlen.store(q.dgrams.len(), Ordering::Release);
        let wake = q.waiters > 0;
        let parked = q.parked.clone();
        drop(q);
        self.counters.queued.fetch_add(1, Ordering::Relaxed);
        if wake {
            self.cv.notify_one();
        }
        if let Some(t) = parked {
            t.unpark();
        }
        self.wake_task();
        if was_empty {
            if let Some(ep) = lock(&self.watch).as_ref().and_then(|w| w.ep.upgrade()) {
                ep.notify();
            }
        }
        Ok(())
    }

    /// Count a `recv` that busy-polled.
    pub(crate) fn count_busy_poll(&self) {
        self.counters.busy_polls.fetch_add(1, Ordering::Relaxed);
    }

    /// Count a `recv` that slept (once per sleep).
    pub(super) fn count_sleep(&self) {
        self.counters.sleeps.fetch_add(1, Ordering::Relaxed);
    }

    /// When a `recv` starting now times out (`SO_RCVTIMEO`), if ever.
    pub(super) fn deadline(&self) -> Option<Instant> {
        match self.timeout_ns.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Instant::now() + Duration::from_nanos(ns)),
        }
    }

    /// Wake the task registered by `poll_recv_batch`, if any.
    #[inline]
    pub(crate) fn wake_task(&self) {
        // SeqCst pairs with the store in `poll_recv_batch`: either it sees
        // the datagram just queued, or this sees its waker.
        if self.has_waker.load(Ordering::SeqCst) {
            let w = lock(&self.waker).take();
            self.has_waker.store(false, Ordering::SeqCst);
            if let Some(w) = w {
                w.wake();
            }
        }
    }

    /// Close: mark the queue closed, send its frames home, wake sleepers.
    pub(crate) fn close(&self, host: &Sockets) {
        let mut q = lock(&self.q);
        q.closed = true;
        q.bytes = 0;
        let dgrams = std::mem::take(&mut q.dgrams);
        self.qlen.store(0, Ordering::Release);
        let parked = q.parked.clone();
        drop(q);
        self.cv.notify_all();
        if let Some(t) = parked {
            t.unpark();
        }
        self.wake_task();
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

/// What `recv_batch` reports per datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvMeta {
    /// Bytes copied into the buffer.
    pub len: usize,
    /// The datagram was longer than the buffer (`MSG_TRUNC`).
    pub truncated: bool,
    /// Sender.
    pub src: SocketAddr,
    /// The address it was sent to (`IP_PKTINFO` / `IPV6_RECVPKTINFO`).
    pub dst: IpAddr,
    /// Segment size: each `stride` bytes of the buffer are one datagram
    /// as sent, the last one possibly shorter (the `UDP_GRO` control
    /// message; equal to the whole length for a single datagram).
    pub stride: usize,
    /// ECN codepoint of the IP header (0 Not-ECT, 1 ECT(1), 2 ECT(0), 3
    /// CE; `IP_RECVTOS` / `IPV6_RECVTCLASS`).
    pub ecn: u8,
}

/// A UDP socket on an rxpath host.
///
/// `recv*` may be called from several threads at once; each datagram goes
/// to exactly one of them. Dropping the last handle closes the socket.
#[derive(Debug, Clone)]
pub struct UdpSocket {
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
        let (l, r) = self.inner.addrs();
        lock_write(&self.host).remove(Key::of(l, r), self.inner.id);
        // The removal above made GRO's kept answers stale (the guard's
        // drop): the socket is no longer found, whatever its flag says.
        if self.inner.gro.swap(false, Ordering::Relaxed) {
            self.host.gro_socks.fetch_sub(1, Ordering::Relaxed);
        }
        self.inner.close(&self.host);
    }
}

/// The socket table for a change; GRO's kept `UDP_GRO` answers go stale
/// when the guard is dropped (the change made, the lock still held).
fn lock_write(host: &Sockets) -> DemuxWrite<'_> {
    DemuxWrite {
        guard: host.demux.write().unwrap_or_else(|e| e.into_inner()),
        host,
    }
}

struct DemuxWrite<'a> {
    guard: std::sync::RwLockWriteGuard<'a, super::demux::Demux>,
    host: &'a Sockets,
}

impl std::ops::Deref for DemuxWrite<'_> {
    type Target = super::demux::Demux;
    fn deref(&self) -> &Self::Target {
        &self.guard
    }
}

impl std::ops::DerefMut for DemuxWrite<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.guard
    }
}

impl Drop for DemuxWrite<'_> {
    fn drop(&mut self) {
        self.host.gro_changed();
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Ephemeral ports, as `net.ipv4.ip_local_port_range`.
const EPHEMERAL: std::ops::RangeInclusive<u16> = 32768..=60999;

impl UdpSocket {
    /// `bind()`: a socket on `addr` (address or wildcard; port 0 picks an
    /// ephemeral port).
    pub fn bind(host: &Arc<Sockets>, mut addr: SocketAddr) -> Result<UdpSocket, SockError> {
        let mut t = lock_write(host);
        if addr.port() == 0 {
            let span = (EPHEMERAL.end() - EPHEMERAL.start()) as u32 + 1;
            let start = host.next_port.fetch_add(1, Ordering::Relaxed) as u32;
            let free = (0..span)
                .map(|i| EPHEMERAL.start() + ((start + i) % span) as u16)
                .find(|&p| !t.port_used(addr.is_ipv6(), p))
                .ok_or(SockError::NoPorts)?;
            addr.set_port(free);
        }
        let key = Key::of(addr, None);
        if t.taken(key) {
            return Err(SockError::AddrInUse(addr));
        }
        let inner = Arc::new(SockInner {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            addrs: Mutex::new((addr, None)),
            q: Mutex::default(),
            cv: Condvar::new(),
            qlen: AtomicUsize::new(0),
            napi_id: AtomicU32::new(0),
            rxhash: AtomicU32::new(0),
            busy_poll_us: AtomicU32::new(u32::MAX),
            rcvbuf: AtomicUsize::new(host.cfg.rcvbuf),
            timeout_ns: AtomicU64::new(0),
            ip_id: AtomicU16::new(0),
            counters: AtomicCounters::default(),
            watch: Mutex::new(None),
            v6: addr.is_ipv6(),
            v6only: AtomicBool::new(false),
            gro: AtomicBool::new(false),
            pmtudisc_do: AtomicBool::new(false),
            waker: Mutex::new(None),
            has_waker: AtomicBool::new(false),
        });
        t.insert(key, inner.clone());
        drop(t);
        Ok(UdpSocket {
            _close: Arc::new(CloseOnDrop {
                inner: inner.clone(),
                host: host.clone(),
            }),
            inner,
            host: host.clone(),
        })
    }

    /// `connect()`: receive only from `remote` (the full 5-tuple wins over
    /// bound and wildcard sockets) and make it the default destination.
    pub fn connect(&self, remote: SocketAddr) -> Result<(), SockError> {
        let mut t = lock_write(&self.host);
        let mut a = lock(&self.inner.addrs);
        if a.0.is_ipv4() != remote.is_ipv4() {
            return Err(SockError::Family(format!("{} to {remote}", a.0)));
        }
        let new = Key::of(a.0, Some(remote));
        if new != Key::of(a.0, a.1) && t.taken(new) {
            return Err(SockError::AddrInUse(a.0));
        }
        t.remove(Key::of(a.0, a.1), self.inner.id);
        t.insert(new, self.inner.clone());
        a.1 = Some(remote);
        Ok(())
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

    pub(crate) fn inner(&self) -> &Arc<SockInner> {
        &self.inner
    }

    /// The host this socket lives on.
    pub fn host(&self) -> &Arc<Sockets> {
        &self.host
    }

    /// `recvfrom()`: block until a datagram arrives (busy-polling first if
    /// on), copy it into `buf` (truncating), return its length and sender.
    pub fn recv_from(&self, buf: &mut [u8]) -> Result<(usize, SocketAddr), SockError> {
        let mut m = None;
        self.recv_batch(std::slice::from_mut(&mut &mut *buf), |_, r| m = Some(r))?;
        m.map(|r| (r.len, r.src)).ok_or(SockError::WouldBlock)
    }

    /// `recv()` on a socket: the payload length.
    pub fn recv(&self, buf: &mut [u8]) -> Result<usize, SockError> {
        self.recv_from(buf).map(|(n, _)| n)
    }

    /// `recvfrom(MSG_DONTWAIT)`: never blocks; [`SockError::WouldBlock`]
    /// when nothing is queued.
    pub fn try_recv_from(&self, buf: &mut [u8]) -> Result<(usize, SocketAddr), SockError> {
        let mut m = None;
        let n = self.take(std::slice::from_mut(&mut &mut *buf), &mut |_, r| {
            m = Some(r)
        })?;
        match (n, m) {
            (1, Some(r)) => Ok((r.len, r.src)),
            _ => Err(SockError::WouldBlock),
        }
    }

    /// Read one datagram without copying it: `f` sees the payload in its
    /// frame. Blocks like [`recv_from`](Self::recv_from).
    pub fn recv_with<R>(&self, f: impl FnOnce(&[u8], SocketAddr) -> R) -> Result<R, SockError> {
        let mut f = Some(f);
        let mut out = None;
        self.wait_readable()?;
        loop {
            let d = {
                let mut q = lock(&self.inner.q);
                let d = q.dgrams.pop_front();
                if let Some(d) = &d {
                    q.bytes = q.bytes.saturating_sub(self.truesize(d));
                }
                self.inner.qlen.store(q.dgrams.len(), Ordering::Release);
                d
            };
            match d {
                Some(d) => {
                    if let Some(p) = self.host.port(d.queue) {
                        if let Some(f) = f.take() {
                            if d.frags.is_empty() {
                                let o = d.off as usize;
                                out = Some(f(&p.umem.data(&d.frame)[o..o + d.len as usize], d.src));
                            } else {
                                // A GRO packet spans frames: one copy.
                                let mut v = vec![0u8; d.payload_len()];
                                d.copy_to(&p.umem, &mut v);
                                out = Some(f(&v, d.src));
                            }
                        }
                        p.ret.put_all(d.into_frames());
                    }
                    self.after_read(1);
                    return out.ok_or(SockError::Closed);
                }
                None => self.wait_readable()?,
            }
        }
    }

    /// `recvmmsg()`: block until at least one datagram is queued, then copy
    /// up to `bufs.len()` of them; `meta` is called with each one's index
    /// and [`RecvMeta`]. Returns how many were read.
    pub fn recv_batch<B: AsMut<[u8]>>(
        &self,
        bufs: &mut [B],
        mut meta: impl FnMut(usize, RecvMeta),
    ) -> Result<usize, SockError> {
        loop {
            let n = self.take(bufs, &mut meta)?;
            if n > 0 {
                return Ok(n);
            }
            self.wait_readable()?;
        }
    }

    /// Copy out up to `bufs.len()` queued datagrams; frames go home in one
    /// batch.
    pub(crate) fn take<B: AsMut<[u8]>>(
        &self,
        bufs: &mut [B],
        meta: &mut dyn FnMut(usize, RecvMeta),
    ) -> Result<usize, SockError> {
        if bufs.is_empty() {
            return Ok(0);
        }
        let mut taken: [Option<Dgram>; 32] = Default::default();
        let want = bufs.len().min(taken.len());
        let n = {
            let mut q = lock(&self.inner.q);
            if q.dgrams.is_empty() && q.closed {
                return Err(SockError::Closed);
            }
            let mut n = 0;
            while n < want {
                match q.dgrams.pop_front() {
                    Some(d) => {
                        q.bytes = q.bytes.saturating_sub(self.truesize(&d));
                        taken[n] = Some(d);
                        n += 1;
                    }
                    None => break,
                }
            }
            self.inner.qlen.store(q.dgrams.len(), Ordering::Release);
            n
        };
        if n == 0 {
            return Ok(0);
        }
        // Frames of the first datagram's queue go home under one lock.
        let first_q = taken[0].as_ref().map(|d| d.queue);
        let mut home: [Option<Frame>; 32] = Default::default();
        for (i, slot) in taken.iter_mut().take(n).enumerate() {
            let Some(d) = slot.take() else { continue };
            let Some(p) = self.host.port(d.queue) else {
                continue;
            };
            let buf = bufs[i].as_mut();
            let whole = d.payload_len();
            let len = d.copy_to(&p.umem, buf);
            meta(
                i,
                RecvMeta {
                    len,
                    truncated: len < whole,
                    src: d.src,
                    dst: d.dst,
                    stride: if d.gso > 0 { d.gso as usize } else { whole },
                    ecn: d.ecn,
                },
            );
            if Some(d.queue) == first_q && d.frags.is_empty() {
                home[i] = Some(d.frame);
            } else {
                p.ret.put_all(d.into_frames());
            }
        }
        if let Some(p) = first_q.and_then(|q| self.host.port(q)) {
            p.ret.put_all(home.iter_mut().filter_map(Option::take));
        }
        self.after_read(n);
        Ok(n)
    }

    /// What a queued datagram is charged against rcvbuf: the frame it pins
    /// (as `SockStack` charged it).
    fn truesize(&self, d: &Dgram) -> usize {
        d.frames()
            * self
                .host
                .port(d.queue)
                .map_or(rxpath_dev::DEFAULT_FRAME_SIZE, |p| p.umem.frame_size())
    }

    /// RFS: record the CPU this thread reads the flow on
    /// (`sock_rps_record_flow`).
    fn after_read(&self, n: usize) {
        self.inner
            .counters
            .read
            .fetch_add(n as u64, Ordering::Relaxed);
        let hash = self.inner.rxhash.load(Ordering::Relaxed);
        if hash != 0 {
            if let Some(cpu) = rxpath_dev::sys::sched::current_cpu() {
                self.host.flows.record(hash, cpu as u32);
            }
        }
    }
}

impl Sockets {
    /// End the interrupt deferral of these NAPIs (a busy poller blocks).
    pub(crate) fn resume_irqs(&self, ids: &[NapiId]) {
        let m = read(&self.napis);
        for id in ids {
            if let Some(n) = m.get(id) {
                n.resume_irqs();
            }
        }
    }

    /// `napi_busy_loop()`: own the NAPIs in `ids` in turn and poll each with
    /// [`super::BUSY_POLL_BUDGET`] until `ready()` or `us` µs have passed.
    /// A NAPI someone else owns is skipped (the caller just watches its
    /// queue, as the kernel's socket does).
    pub(crate) fn busy_loop(&self, ids: &[NapiId], us: u32, ready: &dyn Fn() -> bool) {
        // Up to 8 NAPIs per session, without allocating (a `recv` passes
        // one; an epoll set the distinct NAPIs of its sockets).
        let mut slots: [Option<Arc<super::SharedNapi>>; 8] = Default::default();
        let mut k = 0;
        {
            let m = read(&self.napis);
            for id in ids {
                if let (Some(n), Some(slot)) = (m.get(id), slots.get_mut(k)) {
                    *slot = Some(n.clone());
                    k += 1;
                }
            }
        }
        let napis = &slots[..k];
        if napis.is_empty() {
            return;
        }
        let c = &self.counters;
        c.busy_polls.fetch_add(1, Ordering::Relaxed);
        let start = rxpath_dev::mono_ns();
        let end = start + us as u64 * 1000;
        let (mut loops, mut packets, mut contended) = (0u64, 0u64, 0u64);
        // The clock as last read: a session's polls read it (one round
        // with `us` = 0, a non-blocking read's, reads it twice in all).
        let mut now = start;
        'outer: loop {
            for n in napis.iter().flatten() {
                match n.busy_poll(end, ready) {
                    Some((l, p, t)) => {
                        loops += l;
                        packets += p;
                        now = t;
                    }
                    None => contended += 1,
                }
                if ready() {
                    break 'outer;
                }
            }
            if now >= end {
                break;
            }
            std::hint::spin_loop();
            now = rxpath_dev::mono_ns();
        }
        c.busy_poll_loops.fetch_add(loops, Ordering::Relaxed);
        c.busy_poll_packets.fetch_add(packets, Ordering::Relaxed);
        c.busy_poll_contended
            .fetch_add(contended, Ordering::Relaxed);
        c.busy_poll_ns
            .fetch_add(now.saturating_sub(start), Ordering::Relaxed);
    }
}
