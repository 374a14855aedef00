//! Steady state allocates nothing per packet: a counting global allocator
//! watches a NAPI poll loop over the simulated NIC after warm-up.

use rxpath_core::napi::{BundleMode, Napi};
use rxpath_core::packet::Sink;
use rxpath_core::softnet::{Softnet, SoftnetConfig};
use rxpath_core::time::ManualClock;
use rxpath_dev::sim::{self, Mix, NullQueue, SimConfig, Traffic, TrafficConfig};
use rxpath_wire::toeplitz::Toeplitz;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY (test-only allocator): forwards to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn steady_state_allocates_nothing() {
    let tz = Toeplitz::default();
    // Simulated NIC, several flows of every kind, two queues, interrupts.
    let (mut port, queues) = sim::build(&SimConfig {
        queues: 2,
        ring_size: 512,
        frames_per_queue: 1024,
        ..Default::default()
    })
    .unwrap();
    let mut traffic = Traffic::new(
        TrafficConfig {
            flows: 64,
            mix: Mix::Mixed,
            ..Default::default()
        },
        &tz,
    );
    let mut napis: Vec<_> = queues
        .into_iter()
        .map(|q| {
            Napi::new(
                q,
                64,
                BundleMode {
                    size: 16,
                    split_on_hash: true,
                },
                true,
            )
        })
        .collect();
    let mut sn = Softnet::new(SoftnetConfig::default());
    let clock = ManualClock::new(1);
    let mut step = |port: &mut sim::SimPort,
                    napis: &mut Vec<Napi<sim::SimRxQueue>>,
                    sn: &mut Softnet,
                    t: u64| {
        for _ in 0..200 {
            let _ = port.send(&mut traffic);
        }
        port.flush(t);
        for (i, n) in napis.iter_mut().enumerate() {
            if n.take_irq() {
                sn.schedule(i);
            }
        }
        while sn.pending() > 0 {
            sn.net_rx_action(napis, &mut Sink, &clock);
        }
    };
    for t in 0..200 {
        step(&mut port, &mut napis, &mut sn, t * 100_000);
    }
    let before = ALLOCS.load(Ordering::Relaxed);
    let received_before: u64 = napis.iter().map(|n| n.stats().received).sum();
    for t in 200..1200 {
        step(&mut port, &mut napis, &mut sn, t * 100_000);
    }
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    let received: u64 = napis.iter().map(|n| n.stats().received).sum::<u64>() - received_before;
    assert!(received > 100_000, "received {received}");
    assert_eq!(allocs, 0, "{allocs} allocations for {received} packets");

    // Null queue, polling mode.
    let mut t = Traffic::new(TrafficConfig::default(), &tz);
    let mut n = Napi::new(
        NullQueue::new(0, 512, &mut t).unwrap(),
        64,
        BundleMode::default(),
        false,
    );
    // A null queue never runs dry, so the NAPI stays scheduled.
    assert!(n.state().schedule_prep());
    for _ in 0..1000 {
        assert!(!n.poll(64, &mut Sink, 0).completed);
    }
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..10_000 {
        assert!(!n.poll(64, &mut Sink, 0).completed);
    }
    assert_eq!(ALLOCS.load(Ordering::Relaxed) - before, 0);
}
