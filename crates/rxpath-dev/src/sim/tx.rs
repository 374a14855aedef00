//! The simulated NIC's transmit side: a TX ring of descriptors over frames
//! of its own region, and a completion queue, as a real NIC's:
//!
//! ```text
//!  send: frame from the free list (none: busy) ─ copy ─▶ TX ring (full: busy)
//!  the wire: takes what the ring holds, puts each frame on the completion queue
//!  reap (at the next send): completions ─▶ free list
//! ```
//!
//! The wire runs at the next send (or [`SimTx::finish`]): the NIC has sent
//! what was posted by the time the host looks again. The fault
//! `stop_completing` makes the wire stop (as a NIC whose TX engine hangs):
//! posted frames stay on the ring, the free list runs dry, and sends are
//! refused and counted (`busy`); nothing is lost, every frame comes home at
//! [`SimTx::finish`].

use crate::sync::lock;
use crate::sys::umem::{Frame, FramePool, UmemError};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What a [`SimTx`] did.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct SimTxCounters {
    /// Frames posted to the TX ring.
    pub sent: u64,
    /// Frames the wire took and completed.
    pub completed: u64,
    /// Frames a send could not post (no free frame or the ring full); a
    /// caller may offer a refused frame again.
    pub busy: u64,
    /// Bytes the wire took.
    pub wire_bytes: u64,
}

/// The simulated NIC's TX ring.
#[derive(Debug)]
pub struct SimTx {
    pool: FramePool,
    ring: VecDeque<(Frame, usize)>,
    ring_size: usize,
    done: Vec<Frame>,
    /// The fault: while set, the wire takes nothing from the ring.
    pub stop_completing: Arc<AtomicBool>,
    /// The frames the wire took, when asked to keep them.
    pub wire: Option<Arc<Mutex<Vec<Vec<u8>>>>>,
    /// What it did.
    pub counters: SimTxCounters,
}

impl SimTx {
    /// A TX ring of `ring_size` slots over `frames` frames of its own.
    pub fn new(frames: usize, ring_size: usize) -> Result<SimTx, UmemError> {
        Ok(SimTx {
            pool: FramePool::new(frames, crate::DEFAULT_FRAME_SIZE)?,
            ring: VecDeque::with_capacity(ring_size),
            ring_size: ring_size.max(1),
            done: Vec::new(),
            stop_completing: Arc::default(),
            wire: None,
            counters: SimTxCounters::default(),
        })
    }

    /// The wire: everything on the ring is sent and completed, unless the
    /// fault holds it.
    fn wire(&mut self) {
        if self.stop_completing.load(Ordering::Relaxed) {
            return;
        }
        while let Some((f, len)) = self.ring.pop_front() {
            if let Some(w) = &self.wire {
                let data = self.pool.umem().data(&f)[..len].to_vec();
                lock(w).push(data);
            }
            self.counters.completed += 1;
            self.counters.wire_bytes += len as u64;
            self.done.push(f);
        }
    }

    /// Take completed frames back.
    fn reap(&mut self) {
        for f in self.done.drain(..) {
            self.pool.free(f);
        }
    }

    /// Copy whole Ethernet frames into TX frames and post them; returns how
    /// many were posted (the rest counted `busy`).
    pub fn send(&mut self, frames: &[&[u8]]) -> usize {
        self.wire();
        self.reap();
        let mut put = 0;
        for data in frames {
            if self.ring.len() >= self.ring_size {
                break;
            }
            let Some(mut f) = self.pool.alloc() else {
                break;
            };
            let umem = self.pool.umem().clone();
            let buf = umem.data_mut(&mut f);
            let len = data.len().min(buf.len());
            buf[..len].copy_from_slice(&data[..len]);
            self.ring.push_back((f, len));
            put += 1;
        }
        self.counters.sent += put as u64;
        self.counters.busy += (frames.len() - put) as u64;
        put
    }

    /// Frames of its own: (total, free now).
    pub fn frames(&self) -> (usize, usize) {
        (self.pool.umem().frames(), self.pool.available())
    }

    /// The host stops: the fault is lifted, the wire sends what is posted
    /// and every frame comes home. Returns (frames total, frames home).
    pub fn finish(&mut self) -> (usize, usize) {
        self.stop_completing.store(false, Ordering::Relaxed);
        self.wire();
        self.reap();
        self.frames()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_complete_on_the_wire_and_a_stall_is_counted_without_loss() {
        let mut tx = SimTx::new(8, 4).unwrap();
        let wire = Arc::new(Mutex::new(Vec::new()));
        tx.wire = Some(wire.clone());
        let a = [1u8; 60];
        let b = [2u8; 70];
        // The ring holds 4: a batch of 6 posts 4, refuses 2.
        assert_eq!(tx.send(&[&a, &b, &a, &b, &a, &b]), 4);
        assert_eq!((tx.counters.sent, tx.counters.busy), (4, 2));
        // The next send finds them sent and completed.
        assert_eq!(tx.send(&[&b]), 1);
        assert_eq!(tx.counters.completed, 4);
        assert_eq!(wire.lock().unwrap()[1], b.to_vec());
        // The wire stops: 8 frames, 1 on the ring; 7 more fit, then none.
        tx.stop_completing.store(true, Ordering::Relaxed);
        let mut posted = 0;
        for _ in 0..10 {
            posted += tx.send(&[&a]);
        }
        assert_eq!(posted, 3, "the ring (4 slots) is full");
        assert_eq!(tx.counters.busy, 2 + 7);
        assert_eq!(tx.frames(), (8, 4));
        // Finish lifts the fault: everything is sent and comes home.
        assert_eq!(tx.finish(), (8, 8));
        assert_eq!(tx.counters.completed, tx.counters.sent);
        assert_eq!(wire.lock().unwrap().len() as u64, tx.counters.sent);
    }
}
