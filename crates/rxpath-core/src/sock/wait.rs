//! Waiting in `recv`: busy-poll the socket's NAPI (`sk_busy_loop`), run
//! the backlog of the worker on this CPU ([`super::BacklogServer`]), or
//! sleep until a datagram comes (`__skb_wait_for_more_packets`).

use super::socket::UdpSocket;
use super::{lock, SockError};
use crate::napi::NapiId;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl UdpSocket {
    /// Wait until the queue has a datagram: busy-poll the socket's NAPI for
    /// `busy_poll` µs if on (`sk_busy_loop`), then sleep (the kernel's
    /// `__skb_wait_for_more_packets`) until a datagram arrives or the
    /// receive timeout passes.
    pub(super) fn wait_readable(&self) -> Result<(), SockError> {
        let inner = &self.inner;
        if inner.qlen.load(Ordering::Acquire) > 0 {
            return Ok(());
        }
        let us = self.busy_poll();
        let napi = NapiId(inner.napi_id.load(Ordering::Relaxed));
        if us > 0 && napi.0 != 0 {
            inner.count_busy_poll();
            self.host
                .busy_loop(&[napi], us, &|| inner.qlen.load(Ordering::Acquire) > 0);
            if inner.qlen.load(Ordering::Acquire) > 0 {
                return Ok(());
            }
            // Going to sleep: a deferred interrupt must fire again.
            self.host.resume_irqs(&[napi]);
        }
        let timeout = inner.deadline();
        if let Some(r) = self.wait_serving(timeout) {
            return r;
        }
        let mut q = lock(&inner.q);
        while q.dgrams.is_empty() {
            if q.closed {
                return Err(SockError::Closed);
            }
            inner.count_sleep();
            q.waiters += 1;
            q = match timeout {
                None => inner.cv.wait(q).unwrap_or_else(|e| e.into_inner()),
                Some(t) => {
                    let left = t.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        q.waiters -= 1;
                        return Err(SockError::TimedOut);
                    }
                    inner
                        .cv
                        .wait_timeout(q, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
            q.waiters -= 1;
        }
        Ok(())
    }

    /// Wait by running the backlog of the worker on this thread's CPU (see
    /// [`super::BacklogServer`]) until a datagram is queued, the socket
    /// closes or `timeout` passes. `None` if this thread cannot serve (no
    /// workers, no worker on this CPU, claimed by another reader, or
    /// another thread of this socket serves): the caller sleeps as usual.
    fn wait_serving(&self, timeout: Option<Instant>) -> Option<Result<(), SockError>> {
        let srv = self.host.backlog_server()?;
        let cpu = rxpath_dev::sys::sched::current_cpu()?;
        let inner = &self.inner;
        {
            let mut q = lock(&inner.q);
            if !q.dgrams.is_empty() {
                return Some(Ok(()));
            }
            if q.closed {
                return Some(Err(SockError::Closed));
            }
            if q.parked.is_some() {
                return None;
            }
            q.parked = Some(std::thread::current());
        }
        let unpark_me = || lock(&inner.q).parked = None;
        if !srv.claim(cpu) {
            unpark_me();
            return None;
        }
        let r = loop {
            let more = srv.run(cpu);
            {
                let q = lock(&inner.q);
                if !q.dgrams.is_empty() {
                    break Ok(());
                }
                if q.closed {
                    break Err(SockError::Closed);
                }
            }
            if more {
                continue;
            }
            inner.count_sleep();
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
