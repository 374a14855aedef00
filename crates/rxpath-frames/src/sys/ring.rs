//! Single-producer single-consumer descriptor rings, shaped like AF_XDP's.
//!
//! A ring moves [`Desc`]s (a frame token plus offset, length and RX hash)
//! from one thread to another. Like `xsk_ring_prod__reserve/submit` and
//! `xsk_ring_cons__peek/release`, each side works on a private copy of the
//! indices and publishes them once per batch: [`Producer::push`] writes a
//! slot, [`Producer::submit`] makes all pushed slots visible; [`Consumer::pop`]
//! reads a slot, [`Consumer::release`] hands the slots back. A per-packet
//! consumer and a bundling consumer therefore pay the same index traffic,
//! and differ only in how they touch packet data (what the RX bulking seed
//! measures).
//!
//! Memory ordering: the producer's `Release` store of `prod` pairs with the
//! consumer's `Acquire` load of it in `refresh`, so slot contents written
//! before `submit` are visible after the consumer sees the new index. The
//! consumer's `Release` store of `cons` pairs with the producer's `Acquire`
//! load, so a slot is not overwritten before it was read.
//!
//! Slots are pairs of `AtomicU64` written and read `Relaxed` (plain moves on
//! x86); the only `unsafe` is rebuilding the [`Frame`] token on `pop`.

use super::umem::Frame;
use crossbeam_utils::CachePadded;
use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// A descriptor: a frame and where the packet lies in it.
#[derive(Debug, PartialEq, Eq)]
pub struct Desc {
    /// The frame (ownership travels with the descriptor).
    pub frame: Frame,
    /// Offset of the packet in the frame.
    pub off: u16,
    /// Packet length.
    pub len: u16,
    /// RX hash computed by the device (0 = none).
    pub rxhash: u32,
    /// Device flags (see [`desc_flags`]).
    pub flags: u32,
}

/// Flags a device sets on a received descriptor.
pub mod desc_flags {
    /// The device verified the L4 checksum (`CHECKSUM_UNNECESSARY`).
    pub const CSUM_OK: u32 = 1;
    /// A local sender left the L4 checksum partial, to be filled in by
    /// hardware that never saw it (`CHECKSUM_PARTIAL`, AF_PACKET's
    /// `TP_STATUS_CSUMNOTREADY`): the kernel trusts it.
    pub const CSUM_PARTIAL: u32 = 2;
}

impl Desc {
    #[inline]
    /// A descriptor for an empty frame (fill and completion rings).
    pub fn empty(frame: Frame) -> Desc {
        Desc {
            frame,
            off: 0,
            len: 0,
            rxhash: 0,
            flags: 0,
        }
    }
}

struct Shared {
    slots: Box<[[AtomicU64; 2]]>,
    mask: u32,
    umem: u32,
    prod: CachePadded<AtomicU32>,
    cons: CachePadded<AtomicU32>,
}

/// The producing end.
pub struct Producer {
    shared: Arc<Shared>,
    local_prod: u32,
    cached_cons: u32,
    /// The index last published: an unchanged index is not stored again,
    /// so an idle ring costs its consumer no cache-line transfer.
    published: u32,
}

/// The consuming end.
pub struct Consumer {
    shared: Arc<Shared>,
    local_cons: u32,
    cached_prod: u32,
    /// The index last released (see [`Producer`]).
    released: u32,
}

impl fmt::Debug for Producer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Producer {{ size: {}, local_prod: {} }}",
            self.shared.mask + 1,
            self.local_prod
        )
    }
}
impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Consumer {{ size: {}, local_cons: {} }}",
            self.shared.mask + 1,
            self.local_cons
        )
    }
}

/// A ring of `size` (a power of two) descriptors of frames of region `umem_id`.
pub fn ring(size: usize, umem_id: u32) -> (Producer, Consumer) {
    assert!(
        size.is_power_of_two() && size <= 1 << 20,
        "ring size must be a power of two"
    );
    let slots = (0..size)
        .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
        .collect();
    let shared = Arc::new(Shared {
        slots,
        mask: size as u32 - 1,
        umem: umem_id,
        prod: CachePadded::new(AtomicU32::new(0)),
        cons: CachePadded::new(AtomicU32::new(0)),
    });
    (
        Producer {
            shared: shared.clone(),
            local_prod: 0,
            cached_cons: 0,
            published: 0,
        },
        Consumer {
            shared,
            local_cons: 0,
            cached_prod: 0,
            released: 0,
        },
    )
}

impl Producer {
    /// Free slots, refreshing the consumer index only when the cached view
    /// says the ring is full.
    #[inline]
    pub fn free(&mut self) -> usize {
        let size = self.shared.mask + 1;
        let mut free = size - self.local_prod.wrapping_sub(self.cached_cons);
        if free == 0 {
            // Pairs with the Release store in `Consumer::release`.
            self.cached_cons = self.shared.cons.load(Ordering::Acquire);
            free = size - self.local_prod.wrapping_sub(self.cached_cons);
        }
        free as usize
    }

    /// Write a descriptor into the next slot; not visible until [`submit`].
    /// Gives the descriptor back when the ring is full.
    ///
    /// [`submit`]: Self::submit
    #[inline]
    pub fn push(&mut self, d: Desc) -> Result<(), Desc> {
        if self.free() == 0 {
            return Err(d);
        }
        assert_eq!(
            d.frame.umem_id(),
            self.shared.umem,
            "frame of another UMEM pushed"
        );
        let slot = &self.shared.slots[(self.local_prod & self.shared.mask) as usize];
        let (index, _) = d.frame.into_raw();
        slot[0].store(
            index as u64 | (d.off as u64) << 32 | (d.len as u64) << 48,
            Ordering::Relaxed,
        );
        slot[1].store(d.rxhash as u64 | (d.flags as u64) << 32, Ordering::Relaxed);
        self.local_prod = self.local_prod.wrapping_add(1);
        Ok(())
    }

    /// Publish everything pushed so far.
    #[inline]
    pub fn submit(&mut self) {
        if self.local_prod != self.published {
            // Pairs with the Acquire load in `Consumer::refresh`.
            self.shared.prod.store(self.local_prod, Ordering::Release);
            self.published = self.local_prod;
        }
    }

    #[inline]
    /// Slots in the ring.
    pub fn size(&self) -> usize {
        self.shared.mask as usize + 1
    }

    #[inline]
    /// Descriptors pushed but not yet taken by the consumer (approximate
    /// from the producer's side).
    pub fn in_flight(&self) -> usize {
        self.local_prod
            .wrapping_sub(self.shared.cons.load(Ordering::Acquire)) as usize
    }
}

impl Consumer {
    /// Descriptors available to pop, refreshing the producer index when the
    /// cached view is empty.
    #[inline]
    pub fn available(&mut self) -> usize {
        let mut n = self.cached_prod.wrapping_sub(self.local_cons);
        if n == 0 {
            self.refresh();
            n = self.cached_prod.wrapping_sub(self.local_cons);
        }
        n as usize
    }

    #[inline]
    fn refresh(&mut self) {
        // Pairs with the Release store in `Producer::submit`.
        self.cached_prod = self.shared.prod.load(Ordering::Acquire);
    }

    /// Take the next descriptor, if any. The slot is not handed back to the
    /// producer until [`release`](Self::release).
    #[inline]
    pub fn pop(&mut self) -> Option<Desc> {
        if self.available() == 0 {
            return None;
        }
        let slot = &self.shared.slots[(self.local_cons & self.shared.mask) as usize];
        let w0 = slot[0].load(Ordering::Relaxed);
        let w1 = slot[1].load(Ordering::Relaxed);
        self.local_cons = self.local_cons.wrapping_add(1);
        // SAFETY: the slot was written by `Producer::push` from a token it
        // consumed (`into_raw`), and each published slot is popped exactly
        // once (local_cons only advances), so this is the only live token.
        let frame = unsafe { Frame::from_raw(w0 as u32, self.shared.umem) };
        Some(Desc {
            frame,
            off: (w0 >> 32) as u16,
            len: (w0 >> 48) as u16,
            rxhash: w1 as u32,
            flags: (w1 >> 32) as u32,
        })
    }

    /// Hand popped slots back to the producer.
    #[inline]
    pub fn release(&mut self) {
        if self.local_cons != self.released {
            // Pairs with the Acquire load in `Producer::free`.
            self.shared.cons.store(self.local_cons, Ordering::Release);
            self.released = self.local_cons;
        }
    }

    #[inline]
    /// True when nothing is published and unread (fresh look at the producer).
    pub fn is_empty(&mut self) -> bool {
        self.refresh();
        self.cached_prod == self.local_cons
    }

    #[inline]
    /// Published descriptors not yet popped (fresh look at the producer).
    pub fn len(&mut self) -> usize {
        self.refresh();
        self.cached_prod.wrapping_sub(self.local_cons) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::umem::FramePool;

    #[test]
    fn fifo_with_batched_publish() {
        let mut pool = FramePool::new(8, 2048).unwrap();
        let (mut p, mut c) = ring(4, pool.umem().id());
        for i in 0..4 {
            let f = pool.alloc().unwrap();
            p.push(Desc {
                frame: f,
                off: 64,
                len: 100 + i,
                rxhash: i as u32,
                flags: 1,
            })
            .unwrap();
        }
        let extra = pool.alloc().unwrap();
        let back = p.push(Desc::empty(extra)).unwrap_err();
        pool.free(back.frame);
        assert_eq!(c.pop(), None, "nothing visible before submit");
        p.submit();
        for i in 0..4 {
            let d = c.pop().unwrap();
            assert_eq!(
                (d.off, d.len, d.rxhash, d.flags),
                (64, 100 + i, i as u32, 1)
            );
            pool.free(d.frame);
        }
        assert_eq!(c.pop(), None);
        assert_eq!(p.free(), 0, "slots not released yet");
        c.release();
        assert_eq!(p.free(), 4);
        assert!(pool.is_home());
    }

    #[test]
    fn threads_move_every_frame_once() {
        let pool = FramePool::new(1024, 2048).unwrap();
        let umem = pool.umem().clone();
        let (mut p, mut c) = ring(64, umem.id());
        let mut frames: Vec<_> = (0..1024).map(|_| None).collect::<Vec<Option<Frame>>>();
        let mut pool = pool;
        let all: Vec<Frame> = std::iter::from_fn(|| pool.alloc()).collect();
        let t = std::thread::spawn(move || {
            for (i, f) in all.into_iter().enumerate() {
                let mut d = Desc {
                    frame: f,
                    off: 0,
                    len: i as u16,
                    rxhash: 0,
                    flags: 0,
                };
                loop {
                    match p.push(d) {
                        Ok(()) => break,
                        Err(back) => {
                            d = back;
                            p.submit();
                            std::hint::spin_loop();
                        }
                    }
                }
                if i % 7 == 0 {
                    p.submit();
                }
            }
            p.submit();
        });
        let mut got = 0;
        while got < 1024 {
            if let Some(d) = c.pop() {
                assert_eq!(d.len as usize, got, "FIFO order");
                let idx = d.frame.index() as usize;
                assert!(frames[idx].is_none(), "frame {idx} delivered twice");
                frames[idx] = Some(d.frame);
                got += 1;
                if got % 5 == 0 {
                    c.release();
                }
            } else {
                c.release();
            }
        }
        t.join().unwrap();
        for f in frames.into_iter().flatten() {
            pool.free(f);
        }
        assert!(pool.is_home());
    }
}
