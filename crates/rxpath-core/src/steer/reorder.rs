//! The reorder stage of `spread` (seed 003), as kernel/padata.c orders
//! parallel work: every object gets a sequence number when it is handed
//! out, workers finish objects in any order, and the serial part runs on
//! them strictly in sequence order.
//!
//! ```text
//!  NAPI: admit() → seq ──► any worker's backlog ──► worker: IP, filter (parallel)
//!                                                      │
//!                      complete(seq, Some(pkt) | None) ▼
//!       slots[seq % window]: done?  ── next, next+1, ... ──► serial(pkt): sockets
//! ```
//!
//! The window bounds what is in flight: `admit` refuses a number more than
//! `window` ahead of the oldest unfinished one (padata returns `-EBUSY`
//! past `MAX_OBJ_NUM`), so a slow worker cannot make the buffer grow
//! without bound; the caller counts the refusal as a drop (`reorder_full`).
//! A packet dropped on the way (backlog full, filter) still completes its
//! number, with nothing to deliver, so the sequence never waits for it.
//!
//! The serial part runs under the buffer's lock, by whichever worker
//! completed the number that was next: two workers never deliver at the
//! same time, so what leaves is in order (padata runs it on one CPU).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The reorder buffer.
#[derive(Debug)]
pub struct Reorder<T> {
    /// The next number to hand out.
    assigned: AtomicU64,
    /// The next number the serial part waits for (mirror of `inner.next`).
    serialized: AtomicU64,
    window: u64,
    inner: Mutex<Inner<T>>,
}

#[derive(Debug)]
struct Inner<T> {
    next: u64,
    slots: Vec<Slot<T>>,
    /// Most numbers finished but waiting for an earlier one, ever.
    max_waiting: u64,
    waiting: u64,
}

#[derive(Debug)]
enum Slot<T> {
    Open,
    Done(Option<T>),
}

impl<T> Reorder<T> {
    /// A buffer for `window` numbers in flight (at least 1).
    pub fn new(window: usize) -> Self {
        let window = window.max(1);
        Reorder {
            assigned: AtomicU64::new(0),
            serialized: AtomicU64::new(0),
            window: window as u64,
            inner: Mutex::new(Inner {
                next: 0,
                slots: (0..window).map(|_| Slot::Open).collect(),
                max_waiting: 0,
                waiting: 0,
            }),
        }
    }

    /// Hand out the next sequence number, or `None` if `window` numbers are
    /// already in flight. Every number handed out must be completed.
    pub fn admit(&self) -> Option<u64> {
        let mut a = self.assigned.load(Ordering::Relaxed);
        loop {
            if a.wrapping_sub(self.serialized.load(Ordering::Acquire)) >= self.window {
                return None;
            }
            match self
                .assigned
                .compare_exchange_weak(a, a + 1, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Some(a),
                Err(x) => a = x,
            }
        }
    }

    /// Numbers handed out and not yet through the serial part.
    pub fn in_flight(&self) -> u64 {
        self.assigned
            .load(Ordering::Acquire)
            .wrapping_sub(self.serialized.load(Ordering::Acquire))
    }

    /// The most numbers that were ever finished but waiting for an earlier
    /// one (how much reordering the buffer absorbed).
    pub fn max_waiting(&self) -> u64 {
        lock(&self.inner).max_waiting
    }

    /// Finish numbers (each with its packet, or `None` if it was dropped on
    /// the way), then run `serial` on every packet that is now next in
    /// line, in sequence order. Returns how many went through `serial`.
    pub fn complete(
        &self,
        done: impl IntoIterator<Item = (u64, Option<T>)>,
        mut serial: impl FnMut(T),
    ) -> usize {
        let mut g = lock(&self.inner);
        let w = self.window;
        let inner = &mut *g;
        for (seq, item) in done {
            debug_assert!(
                seq.wrapping_sub(inner.next) < w,
                "number outside the window"
            );
            let slot = &mut inner.slots[(seq % w) as usize];
            debug_assert!(matches!(slot, Slot::Open), "number completed twice");
            *slot = Slot::Done(item);
            inner.waiting += 1;
        }
        let mut ran = 0;
        loop {
            let i = (inner.next % w) as usize;
            match std::mem::replace(&mut inner.slots[i], Slot::Open) {
                Slot::Open => break,
                Slot::Done(item) => {
                    inner.next += 1;
                    inner.waiting -= 1;
                    if let Some(t) = item {
                        serial(t);
                        ran += 1;
                    }
                }
            }
        }
        inner.max_waiting = inner.max_waiting.max(inner.waiting);
        self.serialized.store(inner.next, Ordering::Release);
        ran
    }
}

use rxpath_frames::sync::lock;

#[cfg(test)]
// Tests may start threads and wait (the lint keeps the core itself sans-I/O).
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    #[test]
    fn serial_part_sees_sequence_order_whatever_the_completion_order() {
        let r = Reorder::new(8);
        let seqs: Vec<u64> = (0..8).map(|_| r.admit().unwrap()).collect();
        assert_eq!(seqs, (0..8).collect::<Vec<_>>());
        assert_eq!(r.admit(), None, "the window bounds what is in flight");
        let mut out = Vec::new();
        // 3 and 1 finish first: nothing can leave before 0.
        assert_eq!(r.complete([(3, Some(3)), (1, Some(1))], |t| out.push(t)), 0);
        // 2 was dropped on the way; 0 arrives: 0, 1, 3 leave, in order.
        assert_eq!(r.complete([(2, None)], |t| out.push(t)), 0);
        assert_eq!(r.complete([(0, Some(0))], |t| out.push(t)), 3);
        assert_eq!(out, vec![0, 1, 3]);
        assert_eq!(r.in_flight(), 4);
        assert_eq!(r.max_waiting(), 3);
        // Room again: numbers 8.. reuse the slots of 0..
        assert_eq!(r.admit(), Some(8));
    }

    #[test]
    fn concurrent_workers_deliver_in_order() {
        use std::sync::Arc;
        let r = Arc::new(Reorder::new(64));
        let out = Arc::new(Mutex::new(Vec::new()));
        let (tx0, rx0) = std::sync::mpsc::channel::<u64>();
        let (tx1, rx1) = std::sync::mpsc::channel::<u64>();
        let workers: Vec<_> = [rx0, rx1]
            .into_iter()
            .enumerate()
            .map(|(w, rx)| {
                let (r, out) = (r.clone(), out.clone());
                std::thread::spawn(move || {
                    for s in rx {
                        if w == 1 {
                            std::thread::yield_now();
                        }
                        // Every 7th is dropped on the way.
                        let item = (s % 7 != 0).then_some(s);
                        r.complete([(s, item)], |t| lock(&out).push(t));
                    }
                })
            })
            .collect();
        let mut sent = 0;
        while sent < 20_000 {
            match r.admit() {
                Some(s) => {
                    if s % 2 == 0 { &tx0 } else { &tx1 }.send(s).unwrap();
                    sent += 1;
                }
                None => std::thread::yield_now(),
            }
        }
        drop((tx0, tx1));
        for w in workers {
            w.join().unwrap();
        }
        let out = lock(&out);
        let want: Vec<u64> = (0..20_000).filter(|s| s % 7 != 0).collect();
        assert_eq!(*out, want);
        assert_eq!(r.in_flight(), 0);
    }
}
