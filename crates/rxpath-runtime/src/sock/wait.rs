//! Reads that wait: busy-poll the socket's NAPI (`sk_busy_loop`), run the
//! backlog of the worker on this CPU ([`super::BacklogServer`]), or sleep
//! until a datagram comes (`__skb_wait_for_more_packets`), as long as
//! `SO_RCVTIMEO` allows.

use super::{busy_loop, lock, RecvMeta, SockError, UdpSocket};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl UdpSocket {
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
        let r = self.sock.try_recv_from(buf);
        if r.is_ok() {
            self.after_read();
        }
        r
    }

    /// Read one datagram without copying it: `f` sees the payload in its
    /// frame. Blocks like [`recv_from`](Self::recv_from).
    pub fn recv_with<R>(&self, f: impl FnOnce(&[u8], SocketAddr) -> R) -> Result<R, SockError> {
        let mut f = Some(f);
        loop {
            self.wait_readable()?;
            let Some(g) = f.take() else {
                return Err(SockError::Closed);
            };
            let mut slot = Some(g);
            let got = self
                .sock
                .try_recv_with(|b, a| slot.take().map(|g| g(b, a)))?;
            match got {
                Some(r) => {
                    self.after_read();
                    return r.ok_or(SockError::Closed);
                }
                None => f = slot,
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

    /// Wait until the queue has a datagram: busy-poll the socket's NAPI for
    /// `busy_poll` µs if on (`sk_busy_loop`), then sleep (the kernel's
    /// `__skb_wait_for_more_packets`) until a datagram arrives or the
    /// receive timeout passes.
    fn wait_readable(&self) -> Result<(), SockError> {
        if self.queued() > 0 {
            return Ok(());
        }
        if let Some(napi) = self.busy_napi() {
            self.count_busy_poll();
            busy_loop(
                self.host(),
                &[napi],
                self.busy_poll(),
                self.busy_poll_budget(),
                &|| self.queued() > 0,
            );
            if self.queued() > 0 {
                return Ok(());
            }
            // Going to sleep: a deferred interrupt must fire again.
            self.host().resume_irqs(&[napi]);
        }
        let timeout = self.read_timeout().map(|t| Instant::now() + t);
        if let Some(r) = self.wait_serving(timeout) {
            return r;
        }
        self.sleep(timeout)
    }

    /// Sleep until a datagram is queued, the socket closes or `timeout`.
    fn sleep(&self, timeout: Option<Instant>) -> Result<(), SockError> {
        let w = &self.wait;
        let mut g = lock(&w.lock);
        loop {
            // Raised before the look: an enqueue after the look sees it
            // and notifies under the lock we hold until we wait.
            w.sleepers.fetch_add(1, Ordering::SeqCst);
            match self.readable() {
                Ok(false) => {}
                r => {
                    w.sleepers.fetch_sub(1, Ordering::SeqCst);
                    return r.map(|_| ());
                }
            }
            self.count_sleep();
            g = match timeout {
                None => w.cv.wait(g).unwrap_or_else(|e| e.into_inner()),
                Some(t) => {
                    let left = t.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        w.sleepers.fetch_sub(1, Ordering::SeqCst);
                        return Err(SockError::TimedOut);
                    }
                    w.cv.wait_timeout(g, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
            w.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Wait by running the backlog of the worker on this thread's CPU (see
    /// [`super::BacklogServer`]) until a datagram is queued, the socket
    /// closes or `timeout` passes. `None` if this thread cannot serve (no
    /// workers, no worker on this CPU, claimed by another reader, or
    /// another thread of this socket serves): the caller sleeps as usual.
    fn wait_serving(&self, timeout: Option<Instant>) -> Option<Result<(), SockError>> {
        let srv = self.server.as_ref()?;
        let cpu = rxpath_os::sched::current_cpu()?;
        let w = &self.wait;
        {
            let mut p = lock(&w.parked);
            if p.is_some() {
                return None;
            }
            *p = Some(std::thread::current());
            w.has_parked.store(true, Ordering::SeqCst);
        }
        let unpark_me = || {
            w.has_parked.store(false, Ordering::SeqCst);
            *lock(&w.parked) = None;
        };
        match self.readable() {
            Ok(false) => {}
            r => {
                unpark_me();
                return Some(r.map(|_| ()));
            }
        }
        if !srv.claim(cpu) {
            unpark_me();
            return None;
        }
        let r = loop {
            let more = srv.run(cpu);
            match self.readable() {
                Ok(false) => {}
                r => break r.map(|_| ()),
            }
            if more {
                continue;
            }
            self.count_sleep();
            match timeout {
                None => std::thread::park(),
                Some(t) => {
                    let left = t.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break Err(SockError::TimedOut);
                    }
                    std::thread::park_timeout(left);
                }
            }
        };
        srv.release(cpu);
        unpark_me();
        Some(r)
    }
}
