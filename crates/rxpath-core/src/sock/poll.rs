//! Reading from a task: [`UdpSocket::poll_recv_batch`], what an async
//! runtime (quinn's `AsyncUdpSocket`) calls.
//!
//! No thread per socket and no system call per datagram: a task that finds
//! the queue empty leaves its waker in the socket, and the thread that
//! queues the next datagram (a NAPI thread, a worker, or a busy poller)
//! wakes it. With `busy_poll` set, an empty queue is first polled once
//! through the socket's NAPI, as the kernel's non-blocking `recvmsg` does
//! (`sk_busy_loop(sk, nonblock)`: one `napi_busy_loop` round without a loop
//! end). A task that spins for its busy-poll window, as an epoll loop does
//! before it sleeps, reads with [`UdpSocket::recv_batch_busy`], which arms
//! nothing.

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
        self.poll_recv_batch_irq(cx, bufs, meta, true, true)
    }

    /// [`Self::poll_recv_batch`] for a task that also waits on the device
    /// itself ([`Self::napi_readiness_fd`] in its reactor): a deferred
    /// interrupt (prefer busy polling) stays deferred while the task
    /// sleeps, the device's descriptor being its interrupt, so a burst
    /// costs one wakeup, the task's, instead of the interrupt thread's and
    /// then the task's. The NAPI thread takes the queue back at the
    /// deferral's deadline if the task has not polled by then, as the
    /// kernel's `napi_defer_hard_irqs` with `gro_flush_timeout` does when
    /// the application sleeps (no `irq_suspend_timeout`).
    pub fn poll_recv_batch_device<B: AsMut<[u8]>>(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [B],
        meta: &mut dyn FnMut(usize, RecvMeta),
    ) -> Poll<Result<usize, SockError>> {
        self.poll_recv_batch_irq(cx, bufs, meta, false, true)
    }

    /// [`Self::poll_recv_batch`] (`device` false) or
    /// [`Self::poll_recv_batch_device`] (true) for a task whose
    /// [`Self::recv_batch_busy`] has just found nothing: the queue is
    /// looked at again around the waker's registration but the NAPI is
    /// not polled a second time (a busy poll a few hundred ns after the
    /// last one finds the same empty ring).
    pub fn poll_recv_batch_polled<B: AsMut<[u8]>>(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [B],
        meta: &mut dyn FnMut(usize, RecvMeta),
        device: bool,
    ) -> Poll<Result<usize, SockError>> {
        self.poll_recv_batch_irq(cx, bufs, meta, !device, false)
    }

    fn poll_recv_batch_irq<B: AsMut<[u8]>>(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [B],
        meta: &mut dyn FnMut(usize, RecvMeta),
        resume: bool,
        busy: bool,
    ) -> Poll<Result<usize, SockError>> {
        let n = if busy {
            self.recv_batch_busy(bufs, meta)?
        } else {
            self.take(bufs, meta)?
        };
        if n > 0 {
            return Poll::Ready(Ok(n));
        }
        let inner = &self.inner;
        if let Some(napi) = self.busy_napi().filter(|_| resume) {
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

    /// A task's read that arms nothing: what is queued, else (with
    /// `busy_poll` set) one busy-poll round of the socket's NAPI and what
    /// it queued; 0 when nothing came. No waker is left and no deferred
    /// interrupt resumed: for a task that polls again soon, spinning
    /// within its busy-poll window ([`Self::poll_recv_batch`] is the read
    /// that may wait).
    pub fn recv_batch_busy<B: AsMut<[u8]>>(
        &self,
        bufs: &mut [B],
        meta: &mut dyn FnMut(usize, RecvMeta),
    ) -> Result<usize, SockError> {
        let n = self.take(bufs, meta)?;
        if n > 0 {
            return Ok(n);
        }
        let Some(napi) = self.busy_napi() else {
            return Ok(0);
        };
        let inner = &self.inner;
        inner.count_busy_poll();
        self.host
            .busy_loop(&[napi], 0, &|| inner.qlen.load(Ordering::Acquire) > 0);
        self.take(bufs, meta)
    }

    /// The NAPI a read busy-polls: the socket's, if `busy_poll` is set and
    /// the socket has seen one.
    fn busy_napi(&self) -> Option<NapiId> {
        let napi = NapiId(self.inner.napi_id.load(Ordering::Relaxed));
        (self.busy_poll() > 0 && napi.0 != 0).then_some(napi)
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
