//! The cold null queue: null mode's engine-alone measurement, but every
//! packet's data is a cache miss, as after a NIC's DMA.
//!
//! The producer thread of the simulated NIC makes data cold by writing
//! every frame from another core, and at high rates it is what limits
//! (it must take each frame's cache line away from the host's core).
//! This queue makes data cold without a second thread: its frames are
//! written once, at creation, and handed out over and over in one fixed,
//! shuffled cycle through a region whose touched lines are larger than
//! the last-level cache (by default twice its size). A frame comes round
//! again only after every other frame has been read, so its line has left
//! every cache level by then (a cyclic reuse distance beyond the cache's
//! size misses under LRU), and the shuffled order leaves the hardware
//! prefetchers nothing to follow. The descriptors themselves are read in
//! order, as from a NIC's descriptor ring. This is what seed 001's RX
//! bulking is about: loop 1 issues a prefetch per descriptor of a bundle
//! so that the misses overlap, where a per-packet loop takes them one
//! after another.

use super::{SimError, Traffic};
use crate::sys::ring::Desc;
use crate::sys::umem::{Frame, FramePool, Umem};
use crate::{DeviceQueueStats, IrqLine, RxQueue};
use rand::seq::SliceRandom;
use std::sync::Arc;

/// Frame size of a cold queue's region: the smallest the region allows,
/// so that the pool's size is mostly the lines a packet touches.
const FRAME_SIZE: usize = 512;

/// One descriptor of the cycle: its frame while the queue holds it.
#[derive(Debug)]
struct Slot {
    frame: Option<Frame>,
    index: u32,
    off: u16,
    len: u16,
    rxhash: u32,
}

/// A same-thread queue of cold data: see the module docs.
#[derive(Debug)]
pub struct ColdQueue {
    index: u16,
    umem: Arc<Umem>,
    slots: Vec<Slot>,
    /// Next slot to hand out.
    next: usize,
    /// Oldest slot whose frame is out (frames come back in the order they
    /// went, or close to it).
    back: usize,
    /// Slot of each frame (for a frame that comes back out of order).
    slot_of: Vec<u32>,
    out: usize,
    pulled: u64,
}

/// The last-level cache's size in bytes, from sysfs (32 MiB if unknown).
pub fn last_level_cache() -> usize {
    let mut best = 0usize;
    for i in 0..8 {
        let p = format!("/sys/devices/system/cpu/cpu0/cache/index{i}/size");
        let Ok(s) = std::fs::read_to_string(p) else {
            continue;
        };
        let s = s.trim();
        let (num, mul) = match s.as_bytes().last() {
            Some(b'K') => (&s[..s.len() - 1], 1 << 10),
            Some(b'M') => (&s[..s.len() - 1], 1 << 20),
            _ => (s, 1),
        };
        if let Ok(n) = num.parse::<usize>() {
            best = best.max(n * mul);
        }
    }
    if best == 0 {
        32 << 20
    } else {
        best
    }
}

/// Frames for a cold queue: the lines packets touch (one 64-byte line
/// each) twice the last-level cache, a power of two, at least 64 Ki.
pub fn cold_frames() -> usize {
    (2 * last_level_cache() / 64)
        .next_power_of_two()
        .clamp(1 << 16, 1 << 22)
}

impl ColdQueue {
    /// `frames` frames of `traffic`, written once, in a cycle shuffled
    /// with `seed`.
    pub fn new(
        index: u16,
        frames: usize,
        traffic: &mut Traffic,
        seed: u64,
    ) -> Result<Self, SimError> {
        let (umem, mut tokens) = Umem::new(frames, FRAME_SIZE)?;
        let mut rng: rand_pcg::Pcg64Mcg = rand::SeedableRng::seed_from_u64(seed);
        tokens.shuffle(&mut rng);
        let mut buf = vec![0u8; FRAME_SIZE];
        let mut slots = Vec::with_capacity(frames);
        let mut slot_of = vec![0u32; frames];
        for (i, mut f) in tokens.into_iter().enumerate() {
            let w = traffic
                .write_next(&mut buf)
                .ok_or_else(|| SimError::Config("packet larger than a cold frame".into()))?;
            // Spread the packets over the lines of a frame, as the null
            // queue does, so that they do not crowd a few L1 sets.
            let stagger = 64 * (f.index() as usize % (FRAME_SIZE / 64));
            let off = if stagger + w.len <= FRAME_SIZE {
                stagger
            } else {
                0
            };
            umem.data_mut(&mut f)[off..off + w.len].copy_from_slice(&buf[..w.len]);
            slot_of[f.index() as usize] = i as u32;
            slots.push(Slot {
                index: f.index(),
                frame: Some(f),
                off: off as u16,
                len: w.len as u16,
                rxhash: w.rxhash,
            });
        }
        Ok(ColdQueue {
            index,
            umem,
            slots,
            next: 0,
            back: 0,
            slot_of,
            out: 0,
            pulled: 0,
        })
    }

    /// Return the pool; every frame must have been recycled.
    pub fn into_pool(self) -> FramePool {
        let frames = self.slots.into_iter().filter_map(|s| s.frame).collect();
        FramePool::from_frames(self.umem, frames)
    }
}

impl RxQueue for ColdQueue {
    fn umem(&self) -> &Arc<Umem> {
        &self.umem
    }
    fn queue_index(&self) -> u16 {
        self.index
    }
    #[inline(always)]
    fn pull(&mut self) -> Option<Desc> {
        let s = &mut self.slots[self.next];
        // The stack still holds this frame (a whole cycle is out): empty.
        let frame = s.frame.take()?;
        let d = Desc {
            frame,
            off: s.off,
            len: s.len,
            rxhash: s.rxhash,
            flags: crate::desc_flags::CSUM_OK,
        };
        self.next = if self.next + 1 == self.slots.len() {
            0
        } else {
            self.next + 1
        };
        self.out += 1;
        self.pulled += 1;
        Some(d)
    }
    #[inline]
    fn pull_done(&mut self) {}
    #[inline]
    fn recycle(&mut self, frame: Frame) {
        let n = self.slots.len();
        let at = if self.slots[self.back].index == frame.index() {
            let at = self.back;
            // Move past every slot already back.
            self.back = if at + 1 == n { 0 } else { at + 1 };
            at
        } else {
            self.slot_of[frame.index() as usize] as usize
        };
        self.slots[at].frame = Some(frame);
        self.out -= 1;
        if self.out == 0 {
            self.back = self.next;
            return;
        }
        while self.slots[self.back].frame.is_some() {
            self.back = if self.back + 1 == n { 0 } else { self.back + 1 };
        }
    }
    #[inline]
    fn recycle_bulk(&mut self, frames: &mut Vec<Frame>) {
        for f in frames.drain(..) {
            self.recycle(f);
        }
    }
    #[inline]
    fn recycle_done(&mut self) {}
    fn irq(&self) -> Option<&IrqLine> {
        None
    }
    /// As the null queue: nothing pending, so that stopping ends at once.
    fn has_pending(&mut self) -> bool {
        false
    }
    fn device_stats(&self) -> DeviceQueueStats {
        DeviceQueueStats {
            offered: self.pulled,
            rx_ring: self.pulled,
            ..Default::default()
        }
    }
}
