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

pub mod ntuple;
pub mod traffic;

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
    /// Faults the producer thread injects (none by default).
    pub faults: Faults,
}

/// Faults injected into a run (a seeded schedule: the same seed gives the
/// same faults). `garbage` and `lying` are a share of the packets the
/// simulated NIC receives; starvation windows are the simulated NIC's;
/// stalls are the NAPI threads' (on any device).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Faults {
    /// Frames of random bytes (0 to 200 of them), not checked by the
    /// "hardware": IP input must count each as a drop.
    pub garbage: f64,
    /// Descriptors whose offset or length runs past their frame (a buggy
    /// device): the NAPI must cut them to the frame and count them.
    pub lying: f64,
    /// Fill-ring starvation: windows of this many ms in which the NIC
    /// finds no posted frame (as when the host does not refill the ring);
    /// every packet then is `rx_no_buffer`, as a NIC counts it. 0 = off.
    pub starve_ms: f64,
    /// Mean gap between starvation windows, ms (exponential gaps).
    pub starve_every_ms: f64,
    /// A NAPI thread stalls this many ms (preempted, a long softirq
    /// elsewhere); its RX ring fills and the NIC counts `rx_missed`. 0 = off.
    pub stall_ms: f64,
    /// Mean gap between stalls of each NAPI thread, ms.
    pub stall_every_ms: f64,
    /// Seed of the schedule.
    pub seed: u64,
}

impl Faults {
    /// Whether a per-packet fault (garbage, lying) is on.
    pub fn any(&self) -> bool {
        self.garbage > 0.0 || self.lying > 0.0
    }

    /// Whether anything at all is injected.
    pub fn on(&self) -> bool {
        self.any() || self.starve_ms > 0.0 || self.stall_ms > 0.0
    }
}

/// A seeded schedule of windows: each `len` long, separated by
/// exponentially distributed gaps of mean `every` (a Poisson process).
#[derive(Debug, Clone)]
pub struct FaultWindows {
    len: Duration,
    every_ns: f64,
    next: Duration,
    rng: rand_pcg::Pcg64Mcg,
    /// Windows begun.
    pub count: u64,
}

impl FaultWindows {
    /// Windows of `len_ms` every `every_ms` on average from time 0; `None`
    /// if `len_ms` is 0.
    pub fn new(len_ms: f64, every_ms: f64, seed: u64) -> Option<FaultWindows> {
        if len_ms <= 0.0 {
            return None;
        }
        let mut w = FaultWindows {
            len: Duration::from_secs_f64(len_ms / 1e3),
            every_ns: every_ms.max(0.001) * 1e6,
            next: Duration::ZERO,
            rng: rand::SeedableRng::seed_from_u64(seed),
            count: 0,
        };
        w.next = w.gap();
        Some(w)
    }

    fn gap(&mut self) -> Duration {
        use rand::Rng;
        let u: f64 = self.rng.gen_range(f64::EPSILON..1.0);
        Duration::from_nanos((-u.ln() * self.every_ns) as u64)
    }

    /// A thread's stall: if a window begins at this moment (`t0`: the
    /// schedule's start), sleep through it. Returns the time slept.
    pub fn stall_if_due(&mut self, t0: Instant) -> Duration {
        let at = t0.elapsed();
        match self.begins(at) {
            Some(end) => {
                std::thread::sleep(end - at);
                t0.elapsed() - at
            }
            None => Duration::ZERO,
        }
    }

    /// At `t` since the start: the end of a window that begins now (the
    /// next one is then scheduled after it), or `None`.
    pub fn begins(&mut self, t: Duration) -> Option<Duration> {
        if t < self.next {
            return None;
        }
        let end = t + self.len;
        self.next = end + self.gap();
        self.count += 1;
        Some(end)
    }
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
    // The default indirection table spreads entries round robin, as
    // `ethtool -X equal N` does.
    let indir = (0..cfg.indir_size)
        .map(|i| (i % cfg.queues) as u16)
        .collect();
    let port = SimPort {
        umem,
        indir,
        queues: port_queues,
        coalesce: cfg.coalesce,
        sleep_pacing: cfg.sleep_pacing,
        rules: None,
        faults: cfg.faults,
        fault_rng: rand::SeedableRng::seed_from_u64(cfg.faults.seed),
        starve_windows: 0,
        scratch: vec![0; cfg.frame_size].into_boxed_slice(),
    };
    Ok((port, host_queues))
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

    /// The next packet of `traffic` arrives while the fill ring reads
    /// empty (a starvation window): counted `rx_no_buffer`.
    fn send_starved(&mut self, traffic: &mut Traffic) {
        let flow = traffic.pick();
        let qi = self.queue_for(traffic.rxhash(flow));
        let q = &mut self.queues[qi];
        q.offered += 1;
        q.dirty = true;
        q.rx_no_buffer += 1;
        traffic.write_flow(flow, &mut self.scratch);
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

    /// The next packet of `traffic`, or in its place a fault the schedule
    /// draws (see [`Faults`]).
    fn send_or_fault(&mut self, traffic: &mut Traffic) -> Result<usize, DeviceDrop> {
        use rand::Rng;
        let r: f64 = self.fault_rng.gen();
        let f = self.faults;
        if r < f.garbage {
            let mut b = [0u8; 200];
            let len = self.fault_rng.gen_range(0..b.len());
            self.fault_rng.fill(&mut b[..len]);
            let h = self.fault_rng.gen();
            self.inject(&b[..len], h)
        } else if r < f.garbage + f.lying {
            let fs = self.umem.frame_size();
            let (off, len) = match self.fault_rng.gen_range(0..3) {
                0 => (0, fs + self.fault_rng.gen_range(1..4000)),
                1 => (fs + self.fault_rng.gen_range(0..100), 64),
                _ => (fs - 10, 500),
            };
            let h = self.fault_rng.gen();
            self.inject_lying(&[0x45; 64], h, off as u16, len as u16)
        } else {
            self.send(traffic)
        }
    }

    /// Fault injection: place `bytes` as [`Self::inject`] does, but with a
    /// descriptor that claims `claimed_len` bytes at offset `off` (a buggy
    /// device whose length runs past the frame). The host must neither read
    /// past the frame nor lose it.
    pub fn inject_lying(
        &mut self,
        bytes: &[u8],
        rxhash: u32,
        off: u16,
        claimed_len: u16,
    ) -> Result<usize, DeviceDrop> {
        let qi = self.queue_for(rxhash);
        let q = &mut self.queues[qi];
        q.offered += 1;
        q.dirty = true;
        let Some(mut frame) = q.frame() else {
            q.rx_no_buffer += 1;
            return Err(DeviceDrop::NoBuffer);
        };
        let n = bytes.len().min(self.umem.frame_size());
        self.umem.data_mut(&mut frame)[..n].copy_from_slice(&bytes[..n]);
        let d = Desc {
            frame,
            off,
            len: claimed_len,
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
            if self.faults.any() {
                for _ in 0..n {
                    let _ = self.send_or_fault(traffic);
                }
            } else {
                for _ in 0..n {
                    let _ = self.send(traffic);
                }
            }
            sent += n;
            self.flush(now.as_nanos() as u64 + 1);
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

    /// Fill-ring starvation windows injected so far (see [`Faults`]).
    pub fn starve_windows(&self) -> u64 {
        self.starve_windows
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
}

impl NullQueue {
    /// `frames` frames of `traffic`, written once.
    ///
    /// Each packet starts at a different cache-line offset in its frame
    /// (`64 × (index % 32)`, where it fits), so that the headers of frames
    /// at a power-of-two stride do not all fall into the same two L1 sets.
    /// DPDK's mempool gets the same effect by padding objects to a
    /// non-power-of-two stride.
    pub fn new(index: u16, frames: usize, traffic: &mut Traffic) -> Result<Self, SimError> {
        let (umem, tokens) = Umem::new(frames, crate::DEFAULT_FRAME_SIZE)?;
        let mut meta = vec![(0, 0, 0); frames];
        let mut flow_of = vec![0; frames];
        let mut free = Vec::with_capacity(frames);
        let mut buf = vec![0u8; crate::DEFAULT_FRAME_SIZE];
        for mut f in tokens {
            let w = traffic
                .write_next(&mut buf)
                .ok_or_else(|| SimError::Config("packet larger than a frame".into()))?;
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
    pub fn into_pool(self) -> FramePool {
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
    #[inline]
    fn pull(&mut self) -> Option<Desc> {
        let mut frame = self.free.pop()?;
        let (off, len, rxhash) = self.meta[frame.index() as usize];
        self.pulled += 1;
        if let Some(seqs) = self.seqs.as_mut() {
            let flow = self.flow_of[frame.index() as usize] as usize;
            if let Some(st) = &self.stamps[flow] {
                let (o, l) = (off as usize, len as usize);
                st.write(&mut self.umem.data_mut(&mut frame)[o..o + l], seqs[flow]);
                seqs[flow] = seqs[flow].wrapping_add(1);
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use rxpath_wire::toeplitz::Toeplitz;

    fn small() -> SimConfig {
        SimConfig {
            queues: 2,
            ring_size: 64,
            frames_per_queue: 96,
            ..Default::default()
        }
    }

    #[test]
    fn rss_spreads_flows_and_keeps_a_flow_on_one_queue() {
        let (mut port, mut queues) = build(&small()).unwrap();
        let mut t = Traffic::new(
            TrafficConfig {
                flows: 64,
                mix: Mix::Udp,
                ..Default::default()
            },
            &Toeplitz::default(),
        );
        let mut per_q = [0usize; 2];
        let mut flow_q = std::collections::HashMap::new();
        for _ in 0..40 {
            let flow = t.peek_pick();
            if let Ok(q) = port.send(&mut t) {
                assert_eq!(q, port.queue_for(t.rxhash(flow)));
                per_q[q] += 1;
                assert_eq!(*flow_q.entry(flow).or_insert(q), q);
            }
        }
        port.flush(1);
        for (i, q) in queues.iter_mut().enumerate() {
            let mut n = 0;
            while let Some(d) = q.pull() {
                let h = rxpath_wire::parse(&q.umem().data(&d.frame)[..d.len as usize]).unwrap();
                assert_eq!(Toeplitz::default().hash_flow(&h.flow, true), d.rxhash);
                q.recycle(d.frame);
                n += 1;
            }
            q.pull_done();
            q.recycle_done();
            assert_eq!(n, per_q[i]);
        }
        assert!(per_q[0] > 5 && per_q[1] > 5, "{per_q:?}");
        assert!(port.reclaim(queues).is_home());
    }

    #[test]
    fn full_ring_counts_missed_and_frames_come_home() {
        let (mut port, queues) = build(&SimConfig {
            queues: 1,
            ..small()
        })
        .unwrap();
        let mut t = Traffic::new(
            TrafficConfig {
                flows: 4,
                mix: Mix::Udp,
                ..Default::default()
            },
            &Toeplitz::default(),
        );
        let results: Vec<_> = (0..100).map(|_| port.send(&mut t)).collect();
        port.flush(1);
        let st = queues[0].stats();
        assert_eq!(st.offered, 100);
        assert_eq!(st.rx_ring, 64);
        assert_eq!(st.rx_missed, 36);
        assert_eq!(
            results
                .iter()
                .filter(|r| **r == Err(DeviceDrop::Missed))
                .count(),
            36
        );
        assert!(port.reclaim(queues).is_home());
    }

    #[test]
    fn empty_fill_ring_counts_no_buffer() {
        let cfg = SimConfig {
            queues: 1,
            ring_size: 64,
            frames_per_queue: 10,
            ..Default::default()
        };
        let (mut port, queues) = build(&cfg).unwrap();
        let mut t = Traffic::new(
            TrafficConfig {
                flows: 1,
                mix: Mix::Udp,
                ..Default::default()
            },
            &Toeplitz::default(),
        );
        for _ in 0..15 {
            let _ = port.send(&mut t);
        }
        port.flush(1);
        let st = queues[0].stats();
        assert_eq!((st.rx_ring, st.rx_no_buffer), (10, 5));
        assert!(port.reclaim(queues).is_home());
    }

    #[test]
    fn coalescing_by_frames_and_by_time() {
        let cfg = SimConfig {
            queues: 1,
            coalesce: Coalesce {
                rx_usecs: 10,
                rx_frames: 4,
            },
            ..small()
        };
        let (mut port, mut queues) = build(&cfg).unwrap();
        let mut t = Traffic::new(
            TrafficConfig {
                flows: 1,
                mix: Mix::Udp,
                ..Default::default()
            },
            &Toeplitz::default(),
        );
        let irq = |q: &SimRxQueue| q.stats().wakeups;
        for _ in 0..3 {
            port.send(&mut t).unwrap();
        }
        port.flush(1_000);
        assert_eq!(irq(&queues[0]), 0, "3 frames, 0 µs: no interrupt yet");
        port.flush(5_000);
        assert_eq!(irq(&queues[0]), 0, "4 µs: still within rx-usecs");
        port.flush(11_000);
        assert_eq!(irq(&queues[0]), 1, "rx-usecs expired");
        assert!(queues[0].irq().unwrap().take());
        // Masked until re-armed: more packets, no interrupt.
        for _ in 0..8 {
            port.send(&mut t).unwrap();
        }
        port.flush(20_000);
        assert_eq!(irq(&queues[0]), 1);
        queues[0].irq().unwrap().arm();
        for _ in 0..4 {
            port.send(&mut t).unwrap();
        }
        port.flush(20_500);
        assert_eq!(irq(&queues[0]), 2, "rx-frames reached");
        while let Some(d) = queues[0].pull() {
            queues[0].recycle(d.frame);
        }
        queues[0].pull_done();
        queues[0].recycle_done();
        assert!(port.reclaim(queues).is_home());
    }

    #[test]
    fn null_queue_cycles_its_frames() {
        let mut t = Traffic::new(TrafficConfig::default(), &Toeplitz::default());
        let mut q = NullQueue::new(0, 8, &mut t).unwrap();
        for _ in 0..3 {
            let mut held = Vec::new();
            while let Some(d) = q.pull() {
                let (off, len) = (d.off as usize, d.len as usize);
                assert!(rxpath_wire::parse(&q.umem().data(&d.frame)[off..off + len]).is_ok());
                held.push(d.frame);
            }
            assert_eq!(held.len(), 8, "every frame handed out once per cycle");
            for f in held {
                q.recycle(f);
            }
        }
        assert!(q.into_pool().is_home());
    }
}
