//! Reading from a task: [`UdpSocket::poll_recv_batch`], what an async
//! runtime (quinn's `AsyncUdpSocket`) calls.
//!
//! No thread per socket and no system call per datagram: a task that finds
//! the queue empty leaves its waker in the socket, and the thread that
//! queues the next datagram (a NAPI thread, a worker, or a busy poller)
//! wakes it. With `busy_poll` set, an empty queue is first polled once
//! through the socket's NAPI, as the kernel's non-blocking `recvmsg` does
//! (`sk_busy_loop(sk, nonblock)`: one `napi_busy_loop` round without a loop
//! end).

use super::socket::{RecvMeta, UdpSocket};
use super::{lock, SockError};
use crate::napi::NapiId;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

impl UdpSocket {
    /// Non-blocking `recvmmsg()` for a task: up to `bufs.len()` datagrams
    /// (GRO packets for a `UDP_GRO` socket), `meta` called with each
    /// one's index and [`RecvMeta`]; `Pending` with the task's waker
    /// registered when nothing is queued; `Err(Closed)` once the socket
    /// is closed and drained.
    pub fn poll_recv_batch<B: AsMut<[u8]>>(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [B],
        meta: &mut dyn FnMut(usize, RecvMeta),
    ) -> Poll<Result<usize, SockError>> {
        let n = self.take(bufs, meta)?;
        if n > 0 {
            return Poll::Ready(Ok(n));
        }
        let inner = &self.inner;
        let us = self.busy_poll();
        let napi = NapiId(inner.napi_id.load(Ordering::Relaxed));
        if us > 0 && napi.0 != 0 {
            inner.count_busy_poll();
            self.host
                .busy_loop(&[napi], 0, &|| inner.qlen.load(Ordering::Acquire) > 0);
            let n = self.take(bufs, meta)?;
            if n > 0 {
                return Poll::Ready(Ok(n));
            }
            // About to wait: a deferred interrupt must fire again.
            self.host.resume_irqs(&[napi]);
        }
        *lock(&inner.waker) = Some(cx.waker().clone());
        inner.has_waker.store(true, Ordering::SeqCst);
        // A datagram queued between the first look and the registration
        // found no waker: look again.
        let n = self.take(bufs, meta)?;
        if n > 0 {
            return Poll::Ready(Ok(n));
        }
        Poll::Pending
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
        let napi = super::read(&self.host.napis).get(&NapiId(id))?.clone();
        let g = napi.cell();
        g.as_ref()?.readiness_fd()
    }
}
