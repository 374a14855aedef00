//! The host's NAPI threads and the interrupt-context poll (`napi_in_irq`).

use crate::engine::{Engine, NapiSet};
use rxpath_core::napi::PollResult;
use rxpath_core::sock::{SharedNapi, Sockets};
use rxpath_core::softnet::SoftnetConfig;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// The interrupt handler of a NAPI with `napi_in_irq`: take the interrupt
/// and poll the NAPI to completion here. Returns false (the NAPI thread is
/// woken instead) if the cell is busy: its owner is polling, or a busy
/// poller is letting go of it on this very thread.
pub(super) fn napi_in_irq(n: &SharedNapi) -> bool {
    let Some(irq) = &n.irq else { return false };
    let Some(mut g) = n.try_cell() else {
        return false;
    };
    let Some(cell) = g.as_mut() else { return false };
    while irq.take() {
        if !n.state.schedule_prep() {
            // Owned elsewhere (MISSED recorded): the owner polls again.
            return true;
        }
        let w = cell.weight();
        while !cell.poll(w, rxpath_dev::mono_ns()).completed {}
        n.note_timer(cell.as_ref());
        if n.timer_at() != 0 {
            // The NAPI thread fires the timer: let it see the deadline.
            irq.wake_waiter();
        }
        // Completion re-armed the line; a packet that raced in raised it
        // again (pending), which this loop takes.
    }
    true
}

/// A host's NAPIs, shared with busy-polling sockets: each poll takes the
/// cell's lock (uncontended by design: the state word decides who owns it).
struct Shared<'a> {
    napis: &'a [Arc<SharedNapi>],
    socks: &'a Sockets,
    interrupts: bool,
    me: thread::Thread,
}

impl NapiSet for Shared<'_> {
    fn count(&self) -> usize {
        self.napis.len()
    }

    fn take_irq(&mut self, i: usize) -> bool {
        self.napis[i].irq.as_ref().is_some_and(|l| l.take())
    }

    fn schedule_prep(&mut self, i: usize) -> bool {
        self.napis[i].state.schedule_prep()
    }

    fn timer(&self, i: usize) -> Option<u64> {
        Some(self.napis[i].timer_at()).filter(|&t| t != 0)
    }

    fn fire_timer(&mut self, i: usize, now_ns: u64) -> bool {
        let n = &self.napis[i];
        let mut g = n.cell();
        let Some(c) = g.as_mut() else { return false };
        let owned = c.fire_timer(now_ns);
        n.note_timer(c.as_ref());
        owned
    }

    fn deferred_until(&self, i: usize) -> u64 {
        self.napis[i].deferred_until()
    }

    fn clear_deferral(&mut self, i: usize) {
        self.napis[i].clear_deferral();
    }

    fn device_sleepers(&self, i: usize) -> bool {
        self.napis[i].has_device_sleepers()
    }

    fn returning(&self, i: usize) -> bool {
        // A device that ran out of buffers raises no interrupt: frames
        // coming home from sockets need the owner.
        let q = self.napis[i].queue;
        self.socks.port(q).is_some_and(|p| p.ret.pending() > 0)
    }

    fn try_own(&mut self, i: usize) -> bool {
        self.napis[i].state.try_own()
    }

    fn wants_time(&self) -> bool {
        // GRO and the NAPI timer read it.
        true
    }

    fn poll(&mut self, i: usize, now_ns: u64) -> PollResult {
        let n = &self.napis[i];
        let mut g = n.cell();
        match g.as_mut() {
            Some(c) => {
                let r = c.poll(c.weight(), now_ns);
                n.note_timer(c.as_ref());
                r
            }
            None => {
                // Taken at shutdown: nothing to poll; give it back.
                n.state.complete();
                PollResult {
                    work: 0,
                    completed: true,
                }
            }
        }
    }

    fn sleep_idle(&mut self) -> bool {
        if !self.interrupts {
            return false;
        }
        sleep_idle(self.napis, self.socks, &self.me);
        true
    }
}

/// An idle NAPI thread's sleep: no interrupt, no deferral, no timer, for
/// [`crate::engine::IDLE_NAPS`] naps. It sleeps until an interrupt, a frame
/// coming home, a busy poller's deferral or timer, or stop wakes it (each
/// unparks it); the 1 s nap is only a safety net. (Napping 1 ms at a time
/// instead, an idle host would wake a thousand times a second.)
fn sleep_idle(napis: &[Arc<SharedNapi>], socks: &Sockets, me: &thread::Thread) {
    // A sixteenth of a queue's frames may wait for its next poll.
    let at = |p: &rxpath_core::sock::Port| p.umem.frames() / 16;
    for n in napis {
        n.watch(true);
        if let Some(p) = socks.port(n.queue) {
            p.ret
                .wake_on_return(crate::sock::unpark_waker(me.clone()), at(p));
        }
    }
    // Anything that came before the flags were up is seen here (an
    // interrupt's unpark, whenever it came, ends the park at once).
    let busy = napis.iter().any(|n| {
        n.deferred_until() != 0
            || n.timer_at() != 0
            || socks
                .port(n.queue)
                .is_some_and(|p| p.ret.pending() >= at(p).max(1))
    });
    if !busy {
        thread::park_timeout(Duration::from_secs(1));
    }
    for n in napis {
        n.watch(false);
        if let Some(p) = socks.port(n.queue) {
            p.ret.stop_waking();
        }
    }
}

/// The body of a host's NAPI thread: the engine over the shared NAPIs
/// ([`crate::engine`]), then what the thread still owns is given back.
pub(super) fn napi_thread(
    napis: Vec<Arc<SharedNapi>>,
    socks: &Sockets,
    interrupts: bool,
    stop: &AtomicBool,
) {
    let me = thread::current();
    for n in &napis {
        if let Some(irq) = &n.irq {
            irq.set_waiter(me.clone());
        }
    }
    let mut eng = Engine::new(SoftnetConfig::default(), interrupts, false);
    let mut set = Shared {
        napis: &napis,
        socks,
        interrupts,
        me,
    };
    while !stop.load(Ordering::Acquire) {
        eng.schedule_due(&mut set);
        if eng.pending() == 0 {
            eng.idle(&mut set);
            continue;
        }
        eng.rx_action(&mut set);
    }
    // Give back what this thread still owns.
    let sn = eng.softnet();
    for (i, n) in napis.iter().enumerate() {
        if sn.is_scheduled(i) {
            n.state.complete();
        }
    }
}
