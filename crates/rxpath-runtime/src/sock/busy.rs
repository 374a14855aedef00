//! Busy polling with the clock: `napi_busy_loop()` (net/core/dev.c) over
//! the core's [`SharedNapi::busy_begin`] sessions.

use super::{RecvMeta, UdpSocket};
use rxpath_core::sock::{BusySession, SharedNapi, SockError, Sockets};
use rxpath_core::NapiId;
use std::sync::Arc;

/// NAPIs one busy-poll session polls, at most (the first of `ids`).
pub const SESSION_NAPIS: usize = 8;

/// `ep_suspend_napi_irqs()`: a waiter on these NAPIs' sockets is handed
/// events; each deferred NAPI with an IRQ suspension timeout stays
/// deferred that long from now ([`SharedNapi::suspend_irqs`]). The clock
/// is read only if one does.
pub fn suspend_irqs(socks: &Sockets, ids: &[NapiId]) {
    socks.suspend_irqs(ids, rxpath_dev::mono_ns);
}

/// `napi_busy_loop()`: own the NAPIs in `ids` in turn and poll each,
/// `budget` packets a poll (`SO_BUSY_POLL_BUDGET`, or
/// [`rxpath_core::sock::BUSY_POLL_BUDGET`]), until `ready()` or `us` µs
/// have passed (`us` = 0: one round). A NAPI someone else owns is skipped (the
/// caller just watches its queue, as the kernel's socket does). The session
/// is counted in the host's socket counters.
pub fn busy_loop(
    socks: &Sockets,
    ids: &[NapiId],
    us: u32,
    budget: usize,
    ready: &dyn Fn() -> bool,
) {
    // Up to SESSION_NAPIS per session, without allocating (a `recv`
    // passes one; an epoll set the distinct NAPIs of its sockets).
    let mut slots: [Option<Arc<SharedNapi>>; SESSION_NAPIS] = Default::default();
    let mut k = 0;
    for id in ids {
        if let (Some(n), Some(slot)) = (socks.napi_by_id(*id), slots.get_mut(k)) {
            *slot = Some(n);
            k += 1;
        }
    }
    let napis = &slots[..k];
    if napis.is_empty() {
        return;
    }
    let mut s = BusySession::default();
    let start = rxpath_dev::mono_ns();
    let end = start + us as u64 * 1000;
    // The clock as last read: a session's polls read it (one round with
    // `us` = 0, a non-blocking read's, reads it twice in all).
    let mut now = start;
    'outer: loop {
        for n in napis.iter().flatten() {
            match n.busy_begin() {
                Some(mut session) => {
                    let mut t = rxpath_dev::mono_ns();
                    while let Some(p) = session.poll(budget, t) {
                        s.loops += 1;
                        s.packets += p as u64;
                        if ready() || t >= end {
                            break;
                        }
                        std::hint::spin_loop();
                        t = rxpath_dev::mono_ns();
                    }
                    now = t;
                }
                None => s.contended += 1,
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
    s.ns = now.saturating_sub(start);
    socks.count_busy_session(s);
}

impl UdpSocket {
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
        self.count_busy_poll();
        busy_loop(self.host(), &[napi], 0, self.busy_poll_budget(), &|| {
            self.queued() > 0
        });
        self.take(bufs, meta)
    }

    /// The NAPI a read busy-polls: the socket's, if `busy_poll` is set and
    /// the socket has seen one.
    pub(crate) fn busy_napi(&self) -> Option<NapiId> {
        let napi = self.napi_id();
        (self.busy_poll() > 0 && napi.0 != 0).then_some(napi)
    }

    /// [`rxpath_core::sock::Socket::try_recv_batch`], counted for RFS.
    pub(crate) fn take<B: AsMut<[u8]>>(
        &self,
        bufs: &mut [B],
        meta: &mut dyn FnMut(usize, RecvMeta),
    ) -> Result<usize, SockError> {
        let n = self.sock.try_recv_batch(bufs, meta)?;
        if n > 0 {
            self.after_read();
        }
        Ok(n)
    }
}
