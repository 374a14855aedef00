//! Fault injection (`rxpath run --fault`): the schedule, and the simulated
//! NIC's part of it (frames of random bytes, lying descriptors, fill-ring
//! starvation). The NAPI and worker threads stall on the same
//! [`FaultWindows`].

use super::{DeviceDrop, SimPort, Traffic};
use crate::sys::ring::Desc;
use serde::Serialize;
use std::time::{Duration, Instant};

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

impl SimPort {
    /// The next packet of `traffic` arrives while the fill ring reads
    /// empty (a starvation window): counted `rx_no_buffer`.
    pub(super) fn send_starved(&mut self, traffic: &mut Traffic) {
        let flow = traffic.pick();
        let qi = self.queue_for(traffic.rxhash(flow));
        let q = &mut self.queues[qi];
        q.offered += 1;
        q.dirty = true;
        q.rx_no_buffer += 1;
        traffic.write_flow(flow, &mut self.scratch);
    }

    /// The next packet of `traffic`, or in its place a fault the schedule
    /// draws (see [`Faults`]).
    pub(super) fn send_or_fault(&mut self, traffic: &mut Traffic) -> Result<usize, DeviceDrop> {
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

    /// Fill-ring starvation windows injected so far (see [`Faults`]).
    pub fn starve_windows(&self) -> u64 {
        self.starve_windows
    }
}
