//! The null queue: the engine's cost alone (DPDK's `net_null`).

use super::{SeqStamp, SimError, Traffic};
use crate::sys::ring::Desc;
use crate::sys::umem::{Frame, FramePool, Umem};
use crate::{DeviceQueueStats, IrqLine, RxQueue};
use std::sync::Arc;

/// A same-thread queue whose frames were written once at creation and are
/// handed out again and again: the engine's cost alone, as DPDK's
/// `net_null` PMD measures a forwarding engine. Frames are reused last-in
/// first-out, as a DPDK mempool's per-core cache hands out mbufs. Never
/// empty, never raises interrupts.
#[derive(Debug)]
pub struct NullQueue {
    index: u16,
    umem: Arc<Umem>,
    free: Vec<Frame>,
    meta: Vec<(u16, u16, u32)>,
    pulled: u64,
    /// Each frame's flow, each flow's stamp and next sequence number
    /// (with [`NullQueue::number_datagrams`]).
    flow_of: Vec<u32>,
    stamps: Vec<Option<SeqStamp>>,
    seqs: Option<Vec<u32>>,
    /// The frames of a queue no flow hashes to: never handed out, given
    /// back with the pool.
    parked: Vec<Frame>,
}

impl NullQueue {
    /// Number the datagram in `frame` (off, len) for the order check.
    #[inline(never)]
    fn stamp(&mut self, frame: &mut Frame, off: u16, len: u16) {
        let Some(seqs) = self.seqs.as_mut() else {
            return;
        };
        let flow = self.flow_of[frame.index() as usize] as usize;
        if let Some(st) = &self.stamps[flow] {
            let (o, l) = (off as usize, len as usize);
            st.write(&mut self.umem.data_mut(frame)[o..o + l], seqs[flow]);
            seqs[flow] = seqs[flow].wrapping_add(1);
        }
    }

    /// `frames` frames of `traffic`, written once.
    ///
    /// Each packet starts at a different cache-line offset in its frame
    /// (`64 × (index % 32)`, where it fits), so that the headers of frames
    /// at a power-of-two stride do not all fall into the same two L1 sets.
    /// DPDK's mempool gets the same effect by padding objects to a
    /// non-power-of-two stride.
    ///
    /// Every flow of `traffic` goes to this queue; [`NullQueue::for_rss`]
    /// gives a queue only the flows RSS would put on it.
    pub fn new(index: u16, frames: usize, traffic: &mut Traffic) -> Result<Self, SimError> {
        Self::with_flows(index, frames, traffic, &|_| true)
    }

    /// Queue `index` of a null device of `sim.queues` queues: `frames`
    /// frames of the flows of `traffic` whose RSS hash the default
    /// indirection table puts on this queue, as a NIC's RSS splits flows
    /// (a flow is on one queue only, so its order is kept). A queue no
    /// flow hashes to hands out nothing.
    pub fn for_rss(
        index: u16,
        frames: usize,
        traffic: &mut Traffic,
        sim: &super::SimConfig,
    ) -> Result<Self, SimError> {
        Self::with_flows(index, frames, traffic, &|h| {
            sim.rss_queue(h) == index as usize
        })
    }

    /// `frames` frames of the flows of `traffic` whose RSS hash `ours`
    /// takes.
    fn with_flows(
        index: u16,
        frames: usize,
        traffic: &mut Traffic,
        ours: &dyn Fn(u32) -> bool,
    ) -> Result<Self, SimError> {
        let (umem, tokens) = Umem::new(frames, crate::DEFAULT_FRAME_SIZE)?;
        let mut meta = vec![(0, 0, 0); frames];
        let mut flow_of = vec![0; frames];
        let mut free = Vec::with_capacity(frames);
        let mut buf = vec![0u8; crate::DEFAULT_FRAME_SIZE];
        let mine: Vec<bool> = (0..traffic.flows())
            .map(|i| ours(traffic.rxhash(i)))
            .collect();
        // A queue no flow hashes to keeps its frames parked.
        let (tokens, parked) = if mine.contains(&true) {
            (tokens, Vec::new())
        } else {
            (Vec::new(), tokens)
        };
        for mut f in tokens {
            // The next packet of one of this queue's flows (the traffic's
            // order visits every flow).
            let w = loop {
                let w = traffic
                    .write_next(&mut buf)
                    .ok_or_else(|| SimError::Config("packet larger than a frame".into()))?;
                if mine[w.flow] {
                    break w;
                }
            };
            let stagger = 64 * (f.index() as usize % 32);
            let off = if stagger + w.len <= umem.frame_size() {
                stagger
            } else {
                0
            };
            umem.data_mut(&mut f)[off..off + w.len].copy_from_slice(&buf[..w.len]);
            meta[f.index() as usize] = (off as u16, w.len as u16, w.rxhash);
            flow_of[f.index() as usize] = w.flow as u32;
            free.push(f);
        }
        Ok(NullQueue {
            index,
            umem,
            free,
            meta,
            pulled: 0,
            flow_of,
            stamps: (0..traffic.flows()).map(|i| traffic.seq_stamp(i)).collect(),
            seqs: None,
            parked,
        })
    }

    /// Number each UDP flow's datagrams as they are handed out (the first
    /// 4 payload bytes, as the producer thread's traffic does), so that
    /// order can be measured at delivery. Off by default: it writes to
    /// every frame, which the null device otherwise never does.
    pub fn number_datagrams(&mut self, on: bool) {
        self.seqs = on.then(|| vec![1; self.stamps.len()]);
    }

    /// Return the pool; every frame must have been recycled.
    pub fn into_pool(mut self) -> FramePool {
        self.free.append(&mut self.parked);
        FramePool::from_frames(self.umem, self.free)
    }
}

impl RxQueue for NullQueue {
    fn umem(&self) -> &Arc<Umem> {
        &self.umem
    }
    fn queue_index(&self) -> u16 {
        self.index
    }
    // Always inlined into the poll loop: returned through memory, the
    // descriptor's fields (written narrow, read wide) stalled store
    // forwarding in the caller (a quarter of null mode's cycles, perf).
    #[inline(always)]
    fn pull(&mut self) -> Option<Desc> {
        let mut frame = self.free.pop()?;
        let (off, len, rxhash) = self.meta[frame.index() as usize];
        self.pulled += 1;
        if self.seqs.is_some() {
            self.stamp(&mut frame, off, len);
        }
        Some(Desc {
            frame,
            off,
            len,
            rxhash,
            flags: crate::desc_flags::CSUM_OK,
        })
    }
    #[inline]
    fn pull_done(&mut self) {}
    #[inline]
    fn recycle(&mut self, frame: Frame) {
        self.free.push(frame);
    }
    #[inline]
    fn recycle_bulk(&mut self, frames: &mut Vec<Frame>) {
        self.free.append(frames);
    }
    #[inline]
    fn recycle_done(&mut self) {}
    fn irq(&self) -> Option<&IrqLine> {
        None
    }
    /// A null device is never drained: it reports nothing pending so that
    /// stopping (which polls until queues are empty) ends at once. Every
    /// frame is back in the queue after each poll anyway.
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
