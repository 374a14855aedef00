//! A simulated multi-queue NIC.
//!
//! The NIC side ([`SimPort`]) and the host side ([`SimRxQueue`], one per
//! queue) share a frame region and talk only through descriptor rings, as a
//! real NIC and driver do:
//!
//! ```text
//!  Traffic ──▶ RSS: queue = indir[toeplitz(5-tuple) % 128]
//!               │  frame from the queue's fill ring (none: rx_no_buffer)
//!               │  write the packet (DMA)
//!               ▼  RX ring (full: rx_missed)        coalescing ──▶ IrqLine
//!  SimRxQueue::pull ◀── RX ring                     (rx-usecs, rx-frames)
//!  SimRxQueue::recycle ──▶ fill ring
//! ```
//!
//! Two producer modes: [`SimPort::run`] on another thread writes every frame
//! (so the host meets cold data, as after DMA), and [`NullQueue`] is a
//! same-thread queue whose frames were written once, which measures the
//! engine's cost alone (like DPDK's `net_null`).
//!
//! Tests drive a port by hand with [`SimPort::send`], [`SimPort::inject`]
//! and [`SimPort::flush`] with simulated time.

mod cold;
mod faults;
pub mod ntuple;
mod null;
pub mod traffic;
mod tx;

pub use cold::{cold_frames, last_level_cache, ColdQueue};
pub use faults::{FaultWindows, Faults};
pub use null::NullQueue;
pub use tx::{SimTx, SimTxCounters};

use crate::sys::ring::{self, Consumer, Desc, Producer};
use crate::sys::umem::{Frame, FramePool, Umem, UmemError};
use crate::{DeviceQueueStats, IrqLine, RxQueue};
pub use ntuple::FlowRules;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
pub use traffic::{Mix, SeqStamp, Traffic, TrafficConfig, WireAddrs};

/// Interrupt coalescing, as `ethtool -C`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Coalesce {
    /// Raise at most this long (µs) after the first unsignalled packet.
    pub rx_usecs: u32,
    /// Raise once this many packets are unsignalled (0 acts as 1).
    pub rx_frames: u32,
}

impl Coalesce {
    /// An interrupt for every packet (`ethtool -C rx-usecs 0 rx-frames 1`).
    pub const EVERY_FRAME: Coalesce = Coalesce {
        rx_usecs: 0,
        rx_frames: 1,
    };
}

impl Default for Coalesce {
    fn default() -> Self {
        // mlx5's defaults.
        Coalesce {
            rx_usecs: 8,
            rx_frames: 128,
        }
    }
}

/// Simulated NIC configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SimConfig {
    /// RX queues (1..=64).
    pub queues: usize,
    /// RX ring entries per queue (power of two, 64..=16384).
    pub ring_size: usize,
    /// Frames per queue posted to the fill ring (defaults to 2 × ring).
    pub frames_per_queue: usize,
    /// Frame size.
    pub frame_size: usize,
    /// Interrupt coalescing.
    pub coalesce: Coalesce,
    /// RSS indirection table entries (power of two).
    pub indir_size: usize,
    /// A rate-limited producer thread sleeps until its next batch is due
    /// (leaving the core to others: the steering bench runs a worker
    /// there) instead of spinning. Costs burstiness, not rate.
    pub sleep_pacing: bool,
    /// Link-level flow control (802.3x PAUSE): while the RX ring the next
    /// packet goes to is full (or its queue has no free frame), the link
    /// partner holds off and the producer thread sleeps, instead of
    /// writing packets the NIC must drop as `rx_missed`. A saturating
    /// source that loses nothing and costs its core next to nothing.
    /// Injected faults still happen (a starvation window still counts
    /// `rx_no_buffer`: the fault is the point).
    pub pause: bool,
    /// Faults the producer thread injects (none by default).
    pub faults: Faults,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            queues: 2,
            ring_size: 1024,
            frames_per_queue: 2048,
            frame_size: crate::DEFAULT_FRAME_SIZE,
            coalesce: Coalesce::default(),
            indir_size: 128,
            sleep_pacing: false,
            pause: false,
            faults: Faults::default(),
        }
    }
}

/// Errors building a simulated NIC.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SimError {
    /// A parameter is out of range.
    #[error("{0}")]
    Config(String),
    /// The frame region could not be made.
    #[error(transparent)]
    Umem(#[from] UmemError),
}

#[derive(Debug, Default)]
struct QueueShared {
    irq: Arc<IrqLine>,
    offered: AtomicU64,
    rx_ring: AtomicU64,
    rx_missed: AtomicU64,
    rx_no_buffer: AtomicU64,
    rx_too_long: AtomicU64,
}

#[derive(Debug)]
struct PortQueue {
    rx: Producer,
    fill: Consumer,
    spare: Vec<Frame>,
    shared: Arc<QueueShared>,
    /// Packets written since the last interrupt.
    unsignalled: u32,
    first_unsignalled_ns: u64,
    /// Counters changed since the last flush published them.
    dirty: bool,
    offered: u64,
    rx_ring: u64,
    rx_missed: u64,
    rx_no_buffer: u64,
    rx_too_long: u64,
}

impl PortQueue {
    fn frame(&mut self) -> Option<Frame> {
        self.spare
            .pop()
            .or_else(|| self.fill.pop().map(|d| d.frame))
    }
}

/// The NIC side of a simulated device: receives packets "from the wire"
/// and places them on queues.
#[derive(Debug)]
pub struct SimPort {
    umem: Arc<Umem>,
    indir: Vec<u16>,
    queues: Vec<PortQueue>,
    coalesce: Coalesce,
    scratch: Box<[u8]>,
    sleep_pacing: bool,
    pause: bool,
    /// Times the link paused (the producer slept on a full ring).
    pauses: u64,
    /// ntuple rules (accelerated RFS), looked up before RSS.
    rules: Option<std::sync::Arc<FlowRules>>,
    faults: Faults,
    fault_rng: rand_pcg::Pcg64Mcg,
    starve_windows: u64,
}

/// The host side of one simulated queue.
#[derive(Debug)]
pub struct SimRxQueue {
    index: u16,
    umem: Arc<Umem>,
    rx: Consumer,
    fill: Producer,
    /// Frames the fill ring had no room for yet (retried on `recycle_done`).
    backlog: Vec<Frame>,
    shared: Arc<QueueShared>,
}

/// Build a simulated NIC: the port (NIC side) and one host queue per RX queue.
pub fn build(cfg: &SimConfig) -> Result<(SimPort, Vec<SimRxQueue>), SimError> {
    if !(1..=64).contains(&cfg.queues) {
        return Err(SimError::Config(format!(
            "queues must be in 1..=64, got {}",
            cfg.queues
        )));
    }
    if !cfg.ring_size.is_power_of_two() || !(64..=16384).contains(&cfg.ring_size) {
        return Err(SimError::Config(format!(
            "ring size must be a power of two in 64..=16384, got {}",
            cfg.ring_size
        )));
    }
    if cfg.frames_per_queue == 0 || !cfg.indir_size.is_power_of_two() {
        return Err(SimError::Config(
            "frames per queue must be > 0, indirection size a power of two".into(),
        ));
    }
    let total = cfg.queues * cfg.frames_per_queue;
    let (umem, mut frames) = Umem::new(total, cfg.frame_size)?;
    // A slot the NIC popped stays occupied until its next `flush` releases
    // it, so the fill ring needs room for every frame twice over.
    let fill_size = (2 * total).next_power_of_two();
    let mut port_queues = Vec::with_capacity(cfg.queues);
    let mut host_queues = Vec::with_capacity(cfg.queues);
    for q in 0..cfg.queues {
        let (rx_p, rx_c) = ring::ring(cfg.ring_size, umem.id());
        let (mut fill_p, fill_c) = ring::ring(fill_size, umem.id());
        for f in frames.drain(..cfg.frames_per_queue) {
            fill_p
                .push(Desc::empty(f))
                .expect("fill ring holds every frame");
        }
        fill_p.submit();
        let shared = Arc::new(QueueShared::default());
        port_queues.push(PortQueue {
            rx: rx_p,
            fill: fill_c,
            spare: Vec::new(),
            shared: shared.clone(),
            unsignalled: 0,
            first_unsignalled_ns: 0,
            dirty: false,
            offered: 0,
            rx_ring: 0,
            rx_missed: 0,
            rx_no_buffer: 0,
            rx_too_long: 0,
        });
        host_queues.push(SimRxQueue {
            index: q as u16,
            umem: umem.clone(),
            rx: rx_c,
            fill: fill_p,
            backlog: Vec::new(),
            shared,
        });
    }
    let indir = cfg.default_indirection();
    let port = SimPort {
        umem,
        indir,
        queues: port_queues,
        coalesce: cfg.coalesce,
        sleep_pacing: cfg.sleep_pacing,
        pause: cfg.pause,
        pauses: 0,
        rules: None,
        faults: cfg.faults,
        fault_rng: rand::SeedableRng::seed_from_u64(cfg.faults.seed),
        starve_windows: 0,
        scratch: vec![0; cfg.frame_size].into_boxed_slice(),
    };
    Ok((port, host_queues))
}

impl SimConfig {
    /// The default indirection table: entries round robin over the
    /// queues, as `ethtool -X equal N` sets it.
    pub fn default_indirection(&self) -> Vec<u16> {
        (0..self.indir_size)
            .map(|i| (i % self.queues.max(1)) as u16)
            .collect()
    }

    /// The queue RSS puts a packet with `rxhash` on under the default
    /// indirection table (`indir[hash % size]`, as [`SimPort::queue_for`]
    /// without ntuple rules).
    pub fn rss_queue(&self, rxhash: u32) -> usize {
        (rxhash as usize & (self.indir_size.max(1) - 1)) % self.queues.max(1)
    }
}

/// Why [`SimPort::inject`] did not place a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceDrop {
    /// RX ring full.
    Missed,
    /// No frame in the fill ring.
    NoBuffer,
    /// Frame larger than a frame buffer.
    TooLong,
}

impl SimPort {
    /// The frame region.
    pub fn umem(&self) -> &Arc<Umem> {
        &self.umem
    }

    /// Number of queues.
    pub fn queues(&self) -> usize {
        self.queues.len()
    }

    /// The queue for an RX hash: an ntuple rule's, else RSS
    /// (`indir[hash % size]`).
    #[inline]
    pub fn queue_for(&self, rxhash: u32) -> usize {
        if let Some(q) = self.rules.as_ref().and_then(|r| r.lookup(rxhash)) {
            if (q as usize) < self.queues.len() {
                return q as usize;
            }
        }
        self.indir[rxhash as usize & (self.indir.len() - 1)] as usize
    }

    /// True if a packet with `rxhash` would find a free frame and a free
    /// RX ring slot on its queue now (a lossless replay waits for both).
    pub fn has_room(&mut self, rxhash: u32) -> bool {
        let qi = self.queue_for(rxhash);
        let q = &mut self.queues[qi];
        if q.spare.is_empty() {
            if let Some(d) = q.fill.pop() {
                q.spare.push(d.frame);
            }
        }
        !q.spare.is_empty() && q.rx.free() > 0
    }

    /// Turn on ntuple filtering (`ethtool -K IF ntuple on`) with `rules`,
    /// which the host's accelerated RFS fills.
    pub fn set_flow_rules(&mut self, rules: std::sync::Arc<FlowRules>) {
        self.rules = Some(rules);
    }

    /// Replace the indirection table (`ethtool -X`). Entries must name
    /// existing queues and the length must be a power of two.
    pub fn set_indirection(&mut self, table: Vec<u16>) -> Result<(), SimError> {
        if !table.len().is_power_of_two() || table.iter().any(|&q| q as usize >= self.queues.len())
        {
            return Err(SimError::Config("bad indirection table".into()));
        }
        self.indir = table;
        Ok(())
    }

    /// Receive the next packet of `traffic` from the wire and place it on its
    /// queue (not yet visible to the host; see [`flush`](Self::flush)).
    /// Returns the queue, or the drop.
    #[inline]
    pub fn send(&mut self, traffic: &mut Traffic) -> Result<usize, DeviceDrop> {
        let flow = traffic.pick();
        let qi = self.queue_for(traffic.rxhash(flow));
        let q = &mut self.queues[qi];
        q.offered += 1;
        q.dirty = true;
        let Some(mut frame) = q.frame() else {
            q.rx_no_buffer += 1;
            // The packet still existed on the wire: advance its flow.
            traffic.write_flow(flow, &mut self.scratch);
            return Err(DeviceDrop::NoBuffer);
        };
        let Some(w) = traffic.write_flow(flow, self.umem.data_mut(&mut frame)) else {
            q.spare.push(frame);
            q.rx_too_long += 1;
            return Err(DeviceDrop::TooLong);
        };
        // The NIC wrote a correct checksum and, like hardware with RX
        // checksum offload, says so.
        let flags = crate::desc_flags::CSUM_OK;
        let d = Desc {
            frame,
            off: 0,
            len: w.len as u16,
            rxhash: w.rxhash,
            flags,
        };
        Self::place(q, d).map(|_| qi)
    }

    #[inline]
    fn place(q: &mut PortQueue, d: Desc) -> Result<(), DeviceDrop> {
        match q.rx.push(d) {
            Ok(()) => {
                q.rx_ring += 1;
                q.unsignalled += 1;
                Ok(())
            }
            Err(d) => {
                q.rx_missed += 1;
                q.spare.push(d.frame);
                Err(DeviceDrop::Missed)
            }
        }
    }

    /// Place raw bytes on the queue RSS picks for `rxhash` (tests, replay).
    pub fn inject(&mut self, bytes: &[u8], rxhash: u32) -> Result<usize, DeviceDrop> {
        let qi = self.queue_for(rxhash);
        let q = &mut self.queues[qi];
        q.offered += 1;
        q.dirty = true;
        if bytes.len() > self.umem.frame_size() || bytes.len() > u16::MAX as usize {
            q.rx_too_long += 1;
            return Err(DeviceDrop::TooLong);
        }
        let Some(mut frame) = q.frame() else {
            q.rx_no_buffer += 1;
            return Err(DeviceDrop::NoBuffer);
        };
        self.umem.data_mut(&mut frame)[..bytes.len()].copy_from_slice(bytes);
        // Raw bytes are not checked by the "hardware": the stack verifies.
        let d = Desc {
            frame,
            off: 0,
            len: bytes.len() as u16,
            rxhash,
            flags: 0,
        };
        Self::place(q, d).map(|_| qi)
    }

    /// Publish placed packets to the host, take back recycled frames, update
    /// counters, and raise interrupts as the coalescing settings say.
    /// `now_ns` is any monotonic clock in nanoseconds.
    pub fn flush(&mut self, now_ns: u64) {
        let frames = self.coalesce.rx_frames.max(1);
        let usecs_ns = self.coalesce.rx_usecs as u64 * 1000;
        for q in &mut self.queues {
            q.rx.submit();
            q.fill.release();
            let s = &q.shared;
            if q.dirty {
                q.dirty = false;
                s.offered.store(q.offered, Ordering::Relaxed);
                s.rx_ring.store(q.rx_ring, Ordering::Relaxed);
                s.rx_missed.store(q.rx_missed, Ordering::Relaxed);
                s.rx_no_buffer.store(q.rx_no_buffer, Ordering::Relaxed);
                s.rx_too_long.store(q.rx_too_long, Ordering::Relaxed);
            }
            if q.unsignalled == 0 {
                continue;
            }
            if !s.irq.is_armed() {
                // NAPI is polling this queue and will see the packets.
                q.unsignalled = 0;
                continue;
            }
            if q.first_unsignalled_ns == 0 {
                q.first_unsignalled_ns = now_ns.max(1);
            }
            if q.unsignalled >= frames || now_ns.saturating_sub(q.first_unsignalled_ns) >= usecs_ns
            {
                s.irq.raise();
                q.unsignalled = 0;
                q.first_unsignalled_ns = 0;
            }
        }
    }

    /// Take up to `n` frames per queue from the fill rings ahead of use and
    /// prefetch them for writing, so that writing a packet does not wait for
    /// the host's copy of the line (a NIC keeps a cache of posted RX
    /// descriptors in the same way).
    pub fn prefetch_fill(&mut self, n: usize) {
        for q in &mut self.queues {
            while q.spare.len() < n {
                let Some(d) = q.fill.pop() else { break };
                self.umem.prefetch_write(&d.frame);
                q.spare.push(d.frame);
            }
        }
    }

    /// Producer thread body: send `traffic` until `stop`, at `pps` packets per
    /// second or as fast as possible, flushing every `batch` packets. Returns
    /// the packets offered.
    pub fn run(
        &mut self,
        traffic: &mut Traffic,
        stop: &AtomicBool,
        pps: Option<u64>,
        batch: usize,
    ) -> u64 {
        let start = Instant::now();
        let mut sent = 0u64;
        let batch = batch.max(1) as u64;
        let f = self.faults;
        let mut starve = FaultWindows::new(f.starve_ms, f.starve_every_ms, f.seed ^ 0x57a7);
        let mut starved_until = Duration::ZERO;
        let mut pause_wait = Duration::from_micros(50);
        while !stop.load(Ordering::Relaxed) {
            let now = start.elapsed();
            let due = match pps {
                Some(r) => ((now.as_nanos() * r as u128) / 1_000_000_000) as u64,
                None => sent + batch,
            };
            let n = due.saturating_sub(sent).min(batch);
            if let Some(end) = starve.as_mut().and_then(|w| w.begins(now)) {
                starved_until = end;
            }
            if now < starved_until {
                // The fill ring reads empty: every packet is rx_no_buffer.
                for _ in 0..n {
                    self.send_starved(traffic);
                }
                sent += n;
                self.flush(now.as_nanos() as u64 + 1);
                if n == 0 {
                    std::hint::spin_loop();
                }
                continue;
            }
            self.prefetch_fill(2 * batch as usize);
            let mut full = None;
            if self.faults.any() {
                for _ in 0..n {
                    if self.pause {
                        if let Some(q) = self.full_queue(traffic) {
                            full = Some(q);
                            break;
                        }
                    }
                    let _ = self.send_or_fault(traffic);
                }
            } else if self.pause {
                for _ in 0..n {
                    if let Some(q) = self.full_queue(traffic) {
                        full = Some(q);
                        break;
                    }
                    let _ = self.send(traffic);
                }
            } else {
                for _ in 0..n {
                    let _ = self.send(traffic);
                }
            }
            // Packets a pause held back never left the link partner: a
            // rate limit goes on from now, without a burst to catch up.
            sent += n;
            self.flush(now.as_nanos() as u64 + 1);
            if let Some(q) = full {
                self.pauses += 1;
                std::thread::sleep(pause_wait);
                pause_wait = self.next_pause_wait(q, pause_wait);
                continue;
            }
            if n == 0 {
                match pps {
                    Some(r) if self.sleep_pacing => {
                        // Until the next batch is due (at most 1 ms, so
                        // that a stop is seen).
                        let next = ((sent + batch) as u128 * 1_000_000_000 / r as u128) as u64;
                        let gap = next.saturating_sub(start.elapsed().as_nanos() as u64);
                        std::thread::sleep(Duration::from_nanos(gap.min(1_000_000)));
                    }
                    Some(r) if r < 100_000 => std::thread::sleep(Duration::from_micros(5)),
                    _ => std::hint::spin_loop(),
                }
            }
        }
        self.flush(start.elapsed().as_nanos() as u64 + 1);
        self.starve_windows += starve.map_or(0, |w| w.count);
        sent
    }

    /// With flow control: the queue the next packet of `traffic` goes to,
    /// if it cannot take it (its RX ring is full, or it has no free frame).
    #[inline]
    fn full_queue(&mut self, traffic: &Traffic) -> Option<usize> {
        let qi = self.queue_for(traffic.rxhash(traffic.peek_pick()));
        let q = &mut self.queues[qi];
        let room = q.rx.free() > 0 && (!q.spare.is_empty() || q.fill.available() > 0);
        (!room).then_some(qi)
    }

    /// How long the next pause sleeps: the producer aims to wake when
    /// queue `qi`'s ring is about half drained, so that it neither runs
    /// dry (the host would idle) nor costs a wakeup per few packets.
    fn next_pause_wait(&mut self, qi: usize, wait: Duration) -> Duration {
        let q = &mut self.queues[qi];
        let size = q.rx.size();
        let free = q.rx.free();
        if free < size / 4 {
            (wait * 2).min(Duration::from_millis(2))
        } else if free > size * 3 / 4 {
            (wait / 2).max(Duration::from_micros(5))
        } else {
            wait
        }
    }

    /// Times the link paused (see [`SimConfig::pause`]).
    pub fn pauses(&self) -> u64 {
        self.pauses
    }

    /// Stop the device and gather every frame back into a pool: frames in
    /// RX rings, fill rings, and the port's spares. Call after the host side
    /// has stopped polling; the result says whether every frame came home.
    pub fn reclaim(mut self, queues: Vec<SimRxQueue>) -> FramePool {
        let mut frames = Vec::with_capacity(self.umem.frames());
        for (pq, mut hq) in self.queues.iter_mut().zip(queues) {
            pq.rx.submit();
            hq.fill.submit();
            while let Some(d) = hq.rx.pop() {
                frames.push(d.frame);
            }
            frames.append(&mut hq.backlog);
            hq.rx.release();
            while let Some(d) = pq.fill.pop() {
                frames.push(d.frame);
            }
            pq.fill.release();
            frames.append(&mut pq.spare);
        }
        FramePool::from_frames(self.umem.clone(), frames)
    }
}

impl SimRxQueue {
    /// Counters of this queue as the NIC keeps them.
    pub fn stats(&self) -> DeviceQueueStats {
        let s = &self.shared;
        DeviceQueueStats {
            offered: s.offered.load(Ordering::Relaxed),
            rx_ring: s.rx_ring.load(Ordering::Relaxed),
            rx_missed: s.rx_missed.load(Ordering::Relaxed),
            rx_no_buffer: s.rx_no_buffer.load(Ordering::Relaxed),
            rx_too_long: s.rx_too_long.load(Ordering::Relaxed),
            wakeups: s.irq.wakeups(),
        }
    }
}

impl RxQueue for SimRxQueue {
    fn umem(&self) -> &Arc<Umem> {
        &self.umem
    }
    fn queue_index(&self) -> u16 {
        self.index
    }
    #[inline]
    fn pull(&mut self) -> Option<Desc> {
        self.rx.pop()
    }
    #[inline]
    fn pull_done(&mut self) {
        self.rx.release();
    }
    #[inline]
    fn recycle(&mut self, frame: Frame) {
        if let Err(d) = self.fill.push(Desc::empty(frame)) {
            // The fill ring is sized so this does not happen; if the NIC is
            // slow to release slots, keep the frame and retry.
            self.backlog.push(d.frame);
        }
    }
    #[inline]
    fn recycle_done(&mut self) {
        while let Some(f) = self.backlog.pop() {
            if let Err(d) = self.fill.push(Desc::empty(f)) {
                self.backlog.push(d.frame);
                break;
            }
        }
        self.fill.submit();
    }
    fn irq(&self) -> Option<&IrqLine> {
        Some(&self.shared.irq)
    }
    fn irq_handle(&self) -> Option<Arc<IrqLine>> {
        Some(self.shared.irq.clone())
    }
    fn has_pending(&mut self) -> bool {
        !self.rx.is_empty()
    }
    fn device_stats(&self) -> DeviceQueueStats {
        self.stats()
    }
}

#[cfg(test)]
mod tests;
