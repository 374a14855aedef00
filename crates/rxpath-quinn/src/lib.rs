//! rxpath's UDP sockets under quinn.
//!
//! [`RxpathSocket`] is quinn 0.11's `AsyncUdpSocket` over an rxpath
//! [`UdpSocket`]: quinn's endpoint reads GRO packets (`stride` is the
//! segment size), sends segmented transmits in one hand-over to the device
//! (`UDP_SEGMENT`), sees and sets the ECN bits, and is woken by the thread
//! that queues its datagrams: no thread per socket, no system call per
//! datagram. With `busy_poll` set on the socket, every read polls the
//! queue's NAPI, and for `busy_poll` µs after the last datagram an empty
//! read wakes its own task instead of sleeping, as an epoll loop busy polls
//! before it sleeps: a request that comes within the window is read with no
//! wakeup at all.
//!
//! ```no_run
//! # async fn serve() -> anyhow::Result<()> {
//! use rxpath_dev::sys::xdp::XdpFilter;
//! use rxpath_runtime::{Host, HostConfig, HostDevice};
//! use std::sync::Arc;
//! // AF_XDP on eth1, UDP to port 4433 only; the rest stays with the kernel.
//! let filter = XdpFilter { protocol: Some(17), dst_port: Some(4433), ..XdpFilter::default() };
//! let dev = HostDevice::Xdp { iface: "eth1".into(), filter, fallback: true, xsk_busy_poll_us: 0 };
//! let host = Host::start(HostConfig::default(), dev)?;
//! let sock = rxpath_quinn::RxpathSocket::new(host.udp_bind("0.0.0.0:4433".parse()?)?);
//! let (server_config, _cert) = rxpath_quinn::perf::self_signed_server()?;
//! let endpoint = quinn::Endpoint::new_with_abstract_socket(
//!     quinn::EndpointConfig::default(), Some(server_config),
//!     Arc::new(sock), Arc::new(quinn::TokioRuntime))?;
//! while let Some(incoming) = endpoint.accept().await { let _conn = incoming.await?; }
//! # Ok(()) }
//! //! ```

#![forbid(unsafe_code)]
#![deny(missing_docs, missing_debug_implementations)]

pub mod perf;

use quinn::udp::{EcnCodepoint, RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};
use rxpath_core::sock::{SockError, UDP_MAX_SEGMENTS};
use rxpath_dev::sync::lock;
use rxpath_runtime::UdpSocket;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::unix::AsyncFd;

/// Datagrams a GRO packet may hold (`UDP_GRO_CNT_MAX`).
const GRO_SEGMENTS: usize = 64;

/// quinn's socket over an rxpath UDP socket (see the crate docs).
#[derive(Debug)]
pub struct RxpathSocket {
    sock: UdpSocket,
    /// With `busy_poll` set: the device queue's descriptor in tokio's
    /// reactor, so that the device wakes this task, which then polls the
    /// queue itself (made once the socket knows its NAPI).
    device: Mutex<Option<AsyncFd<OwnedFd>>>,
    /// With `busy_poll` set: when the reads started finding nothing (ns,
    /// 0: the last read had datagrams). For `busy_poll` µs from then the
    /// task spins instead of sleeping (see [`Self::spin`]).
    empty_since: AtomicU64,
}

impl RxpathSocket {
    /// Wrap `sock`, turning `UDP_GRO` on (quinn reads GRO packets) and DF
    /// on every datagram (`IP_PMTUDISC_PROBE`, as quinn-udp sets it).
    pub fn new(sock: UdpSocket) -> Self {
        sock.set_udp_gro(true);
        sock.set_pmtudisc_do(true);
        RxpathSocket {
            sock,
            device: Mutex::new(None),
            empty_since: AtomicU64::new(0),
        }
    }

    /// An empty read with `busy_poll` set: within `busy_poll` µs of the
    /// start of the first empty read the task wakes itself and is polled
    /// again once the runtime has run what else is ready, each poll
    /// polling the queue's NAPI; the thread never sleeps in the reactor
    /// meanwhile. This is the kernel's epoll busy poll (`ep_busy_loop`:
    /// `epoll_wait` polls the NAPI for up to `busy_poll` µs from its call
    /// before it sleeps), in a task: a request that arrives within the
    /// window is read by the task's own poll, with no wakeup. `started` is
    /// when this read began (read only for the first empty one). Returns
    /// false once the window is over (the caller sleeps as without busy
    /// polling, and the next datagram opens a new window).
    fn spin(&self, cx: &mut Context<'_>, started: u64) -> bool {
        let us = self.sock.busy_poll() as u64;
        let now = rxpath_dev::mono_ns();
        let since = match self.empty_since.load(Ordering::Relaxed) {
            0 => {
                self.empty_since.store(started, Ordering::Relaxed);
                started
            }
            t => t,
        };
        if now.saturating_sub(since) < us * 1000 {
            cx.waker().wake_by_ref();
            return true;
        }
        false
    }

    /// The rxpath socket underneath (counters, busy poll).
    pub fn socket(&self) -> &UdpSocket {
        &self.sock
    }
}

/// Sends never wait for room: the TX port takes a batch or refuses it at
/// once (counted), so a send is always worth trying.
#[derive(Debug)]
struct Writable;

impl UdpPoller for Writable {
    fn poll_writable(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncUdpSocket for RxpathSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(Writable)
    }

    fn try_send(&self, t: &Transmit<'_>) -> io::Result<()> {
        let ecn = t.ecn.map_or(0, |e| e as u8);
        match self
            .sock
            .send_segments(t.contents, t.segment_size, t.destination, ecn)
        {
            Ok(_) => Ok(()),
            // As quinn-udp does with the kernel's errors: a datagram that
            // cannot leave is lost (counted by the host), the endpoint
            // goes on; QUIC retransmits.
            Err(SockError::Closed) => Err(io::Error::from(io::ErrorKind::NotConnected)),
            Err(_) => Ok(()),
        }
    }

    /// Datagrams queued by the NAPI thread are read at once; when none are
    /// queued the task's waker stays in the socket (the thread that queues
    /// the next one wakes it). With `busy_poll` set on the socket, a read
    /// polls the queue's NAPI once, and an empty one within the window
    /// spins (`spin`); past it the read looks at the queue once
    /// more around leaving its waker (`poll_recv_batch_polled`: no second
    /// busy poll right after the first) and may wait, and the task also
    /// waits on the device's own descriptor in tokio's reactor: when the
    /// device has packets, tokio wakes this task and it polls the queue
    /// itself, as an epoll loop with `SO_PREFER_BUSY_POLL` does. With the
    /// host's prefer-busy-poll deferral the interrupt stays masked while
    /// the task sleeps on the device (`poll_recv_batch_device`, the
    /// kernel's deferral without `irq_suspend_timeout`: only its deadline
    /// ends it), so the interrupt thread stays out of it: one wakeup per
    /// burst, the task's.
    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let n = bufs.len().min(meta.len()).min(32);
        let mut slices: [&mut [u8]; 32] = Default::default();
        for (s, b) in slices.iter_mut().zip(bufs.iter_mut()) {
            *s = &mut b[..];
        }
        let mut fill = |i: usize, m: rxpath_core::sock::RecvMeta| {
            meta[i] = RecvMeta {
                addr: m.src,
                len: m.len,
                stride: m.stride.max(1),
                ecn: EcnCodepoint::from_bits(m.ecn),
                dst_ip: Some(m.dst),
            };
        };
        // This read's busy poll found nothing: the read that may wait
        // looks at the queue, it does not poll the NAPI again at once.
        let mut polled = false;
        if self.sock.busy_poll() > 0 {
            let started = match self.empty_since.load(Ordering::Relaxed) {
                0 => rxpath_dev::mono_ns(),
                _ => 0,
            };
            match self.sock.recv_batch_busy(&mut slices[..n], &mut fill) {
                Ok(0) => {
                    if self.spin(cx, started) {
                        return Poll::Pending;
                    }
                    polled = true;
                }
                Ok(n) => {
                    self.empty_since.store(0, Ordering::Relaxed);
                    return Poll::Ready(Ok(n));
                }
                Err(e) => return Poll::Ready(Err(io::Error::other(e.to_string()))),
            }
        }
        // No busy poll, or its window is over: a read that may wait.
        // Once the task waits on the device itself, a deferred interrupt
        // stays deferred while it sleeps: the device's descriptor wakes
        // it (see `poll_recv_batch_device`).
        let device = self.sock.busy_poll() > 0 && lock(&self.device).is_some();
        for _ in 0..4 {
            let r = if std::mem::take(&mut polled) {
                self.sock
                    .poll_recv_batch_polled(cx, &mut slices[..n], &mut fill, device)
            } else if device {
                self.sock
                    .poll_recv_batch_device(cx, &mut slices[..n], &mut fill)
            } else {
                self.sock.poll_recv_batch(cx, &mut slices[..n], &mut fill)
            };
            match r {
                Poll::Ready(Ok(n)) => {
                    self.empty_since.store(0, Ordering::Relaxed);
                    return Poll::Ready(Ok(n));
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(io::Error::other(e.to_string()))),
                Poll::Pending => {}
            }
            if self.sock.busy_poll() == 0 {
                return Poll::Pending;
            }
            let mut dev = lock(&self.device);
            if dev.is_none() {
                if let Some(Ok(fd)) = self.sock.napi_readiness_fd() {
                    *dev = rxpath_dev::sys::reactor::register(fd).ok();
                }
            }
            let Some(fd) = dev.as_ref() else {
                return Poll::Pending;
            };
            match fd.poll_read_ready(cx) {
                // The device has packets: poll the queue again.
                Poll::Ready(Ok(mut g)) => g.clear_ready(),
                _ => return Poll::Pending,
            }
        }
        // Still nothing after the device said it had packets (the NAPI
        // thread owns the queue): its delivery wakes us.
        Poll::Pending
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.sock.local_addr())
    }

    fn max_transmit_segments(&self) -> usize {
        UDP_MAX_SEGMENTS
    }

    fn max_receive_segments(&self) -> usize {
        GRO_SEGMENTS
    }

    /// rxpath sends every datagram with DF set and never fragments.
    fn may_fragment(&self) -> bool {
        false
    }
}
