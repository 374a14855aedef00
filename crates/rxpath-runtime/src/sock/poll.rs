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

use super::{lock, RecvMeta, SockError, UdpSocket};
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
    /// itself ([`Socket::napi_readiness_fd`](rxpath_core::sock::Socket::napi_readiness_fd) in its reactor): a deferred
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
        if let Some(napi) = self.busy_napi().filter(|_| resume) {
            // About to wait: a deferred interrupt must fire again.
            self.host().resume_irqs(&[napi]);
        }
        *lock(&self.wait.waker) = Some(cx.waker().clone());
        self.wait.has_waker.store(true, Ordering::SeqCst);
        // A datagram queued between the first look and the registration
        // found no waker: look again.
        let n = self.take(bufs, meta)?;
        if n > 0 {
            return Poll::Ready(Ok(n));
        }
        Poll::Pending
    }
}
