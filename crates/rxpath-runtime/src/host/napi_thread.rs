//! The host's NAPI threads and the interrupt-context poll (`napi_in_irq`).

use rxpath_core::sock::{SharedNapi, Sockets};
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

/// Naps of up to 1 ms in a row with nothing to do before a NAPI thread
/// sleeps without a deadline ([`sleep_idle`]).
const IDLE_NAPS: u32 = 16;

/// An idle NAPI thread's sleep: no interrupt, no deferral, no timer, for
/// [`IDLE_NAPS`] naps. Until now it napped 1 ms at a time, to see frames
/// coming home (a device that ran out of buffers raises no interrupt):
/// an idle host woke a thousand times a second. Now it sleeps until an
/// interrupt, a frame coming home, a busy poller's deferral or timer, or
/// stop wakes it (each unparks it); the 1 s nap is only a safety net.
fn sleep_idle(napis: &[Arc<SharedNapi>], socks: &Sockets, me: &thread::Thread) {
    for n in napis {
        n.watch(true);
        if let Some(p) = socks.port(n.queue) {
            p.ret.wake_on_return(crate::sock::unpark_waker(me.clone()));
        }
    }
    // Anything that came before the flags were up is seen here (an
    // interrupt's unpark, whenever it came, ends the park at once).
    let busy = napis.iter().any(|n| {
        n.deferred_until() != 0
            || n.timer_at() != 0
            || socks.port(n.queue).is_some_and(|p| p.ret.pending() > 0)
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

/// The body of a NAPI thread: take interrupts, poll scheduled NAPIs with
/// their weight round-robin until they complete (`net_rx_action`).
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
    let mut sched: Vec<usize> = Vec::with_capacity(napis.len());
    let mut idle_spins = 0u32;
    // Naps in a row that found nothing to do.
    let mut idle_naps = 0u32;
    while !stop.load(Ordering::Acquire) {
        for (i, n) in napis.iter().enumerate() {
            if sched.contains(&i) {
                continue;
            }
            let irq = if interrupts {
                n.irq.as_ref().is_some_and(|l| l.take())
            } else {
                true
            };
            // Frames coming home from sockets also need the owner: a device
            // that ran out of buffers raises no interrupt.
            let returning = socks.port(n.queue).is_some_and(|p| p.ret.pending() > 0);
            // A busy poller deferred the interrupt and did not come back.
            let d = n.deferred_until();
            let now = rxpath_dev::mono_ns();
            let deferred = d != 0 && now >= d;
            // The NAPI timer (`gro_flush_timeout`) is due: `napi_watchdog`.
            let t = n.timer_at();
            if t != 0 && now >= t {
                let mut g = n.cell();
                if let Some(c) = g.as_mut() {
                    let owned = c.fire_timer(now);
                    n.note_timer(c.as_ref());
                    if owned {
                        drop(g);
                        n.clear_deferral();
                        sched.push(i);
                        continue;
                    }
                }
            }
            // An interrupt or a lapsed deferral is `napi_schedule`
            // (MISSED if owned). Frames coming home only take an idle NAPI
            // that no busy poller deferred: while deferred, the busy poller
            // reclaims them when it polls again, or this thread at the
            // deadline (taking it earlier would end the deferral).
            let owned = if irq || deferred {
                n.state.schedule_prep()
            } else {
                returning && d == 0 && n.state.try_own()
            };
            if owned {
                n.clear_deferral();
                sched.push(i);
            }
        }
        if sched.is_empty() {
            if interrupts {
                let cap = Duration::from_millis(1);
                let next = napis
                    .iter()
                    .flat_map(|n| [n.deferred_until(), n.timer_at()])
                    .filter(|&d| d != 0)
                    .min();
                if next.is_none() && idle_naps >= IDLE_NAPS {
                    sleep_idle(&napis, socks, &me);
                } else {
                    let wait = next.map_or(cap, |d| {
                        Duration::from_nanos(d.saturating_sub(rxpath_dev::mono_ns())).min(cap)
                    });
                    thread::park_timeout(wait);
                }
                // A deadline to watch (a busy poller's deferral, a timer)
                // is not idleness.
                idle_naps = match next {
                    Some(_) => 0,
                    None => idle_naps.saturating_add(1),
                };
            } else {
                idle_spins += 1;
                if idle_spins.is_multiple_of(64) {
                    thread::yield_now();
                }
                std::hint::spin_loop();
            }
            continue;
        }
        idle_spins = 0;
        idle_naps = 0;
        let now = rxpath_dev::mono_ns();
        sched.retain(|&i| {
            let n = &napis[i];
            let mut g = n.cell();
            match g.as_mut() {
                Some(c) => {
                    let done = c.poll(c.weight(), now).completed;
                    n.note_timer(c.as_ref());
                    !done
                }
                None => {
                    n.state.complete();
                    false
                }
            }
        });
    }
    // Give back what this thread still owns.
    for &i in &sched {
        napis[i].state.complete();
    }
}
