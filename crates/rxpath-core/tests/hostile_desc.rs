//! Fault injection at the device boundary: a device whose descriptors claim
//! more bytes than their frame holds (offset or length past its end). The
//! NAPI keeps the packet inside its frame and hands it up as malformed: IP
//! input drops it counted, no stage reads past the frame, and every frame
//! comes home.

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use rxpath_core::ip::{IpConfig, IpStage};
use rxpath_core::napi::{BundleMode, Napi};
use rxpath_core::packet::Sink;
use rxpath_core::softnet::{Softnet, SoftnetConfig};
use rxpath_core::stats::DropReason;
use rxpath_core::time::ManualClock;
use rxpath_dev::sim::{self, Mix, SimConfig, Traffic, TrafficConfig};
use rxpath_dev::RxQueue;
use rxpath_wire::toeplitz::Toeplitz;

/// Flush the device, schedule the NAPIs whose lines fired, run softirq.
fn poll<Q: RxQueue, S: rxpath_core::packet::Stack>(
    port: &mut sim::SimPort,
    napis: &mut [Napi<Q>],
    sn: &mut Softnet,
    stack: &mut S,
    clock: &ManualClock,
) {
    port.flush(rxpath_core::time::Clock::now_ns(clock));
    for (i, n) in napis.iter_mut().enumerate() {
        if n.take_irq()
            || (!sn.is_scheduled(i) && n.fire_timer(rxpath_core::time::Clock::now_ns(clock)))
        {
            sn.schedule(i);
        }
    }
    sn.net_rx_action(napis, stack, clock);
}

#[test]
fn descriptors_that_run_past_their_frame_are_counted_not_read() {
    let cfg = SimConfig {
        queues: 1,
        ring_size: 256,
        frames_per_queue: 512,
        ..Default::default()
    };
    let fs = cfg.frame_size;
    let (mut port, queues) = sim::build(&cfg).unwrap();
    let tz = Toeplitz::default();
    let mut traffic = Traffic::new(
        TrafficConfig {
            flows: 8,
            mix: Mix::Udp,
            ..Default::default()
        },
        &tz,
    );
    let mut napis: Vec<_> = queues
        .into_iter()
        .map(|q| Napi::new(q, 64, BundleMode::default(), true))
        .collect();
    let mut sn = Softnet::new(SoftnetConfig::default());
    let clock = ManualClock::new(1);
    let mut stack = IpStage::new(Some(IpConfig::default()), Sink);
    let mut rng = Pcg64Mcg::seed_from_u64(7);
    let (mut good, mut lying) = (0u64, 0u64);
    let frame = [0x45u8; 64];
    for round in 0..200 {
        for _ in 0..8 {
            if rng.gen_bool(0.3) {
                // Length past the end, offset past the end, or both.
                let (off, len) = match rng.gen_range(0..3) {
                    0 => (0u16, (fs + rng.gen_range(1..4000)) as u16),
                    1 => ((fs + rng.gen_range(0..100)) as u16, 64),
                    _ => ((fs - 10) as u16, 500),
                };
                if port.inject_lying(&frame, rng.gen(), off, len).is_ok() {
                    lying += 1;
                }
            } else if port.send(&mut traffic).is_ok() {
                good += 1;
            }
        }
        clock.advance(10_000 + round);
        poll(&mut port, &mut napis, &mut sn, &mut stack, &clock);
    }
    // Drain: time moves on until every queue is idle.
    for _ in 0..100 {
        clock.advance(100_000);
        poll(&mut port, &mut napis, &mut sn, &mut stack, &clock);
        if sn.pending() == 0 && napis.iter_mut().all(|n| !n.queue_mut().has_pending()) {
            break;
        }
    }
    let s = napis[0].stats();
    assert!(lying > 100 && good > 500, "{lying} lying, {good} good");
    assert_eq!(s.received, good + lying, "{s:?}");
    assert!(s.accounted(), "received = delivered + dropped: {s:?}");
    // A lying descriptor is cut to what its frame holds: too short for
    // IP (malformed), or an Ethernet header that is not IP (not_ip, an
    // unhandled protocol); the good ones are for another host.
    assert_eq!(
        s.dropped.get(DropReason::Malformed) + s.dropped.get(DropReason::UnhandledProto),
        lying,
        "each lying descriptor is one drop of a bad frame: {s:?}"
    );
    assert!(s.dropped.get(DropReason::Malformed) > 0, "{s:?}");
    assert_eq!(s.dropped.get(DropReason::NotForUs), good, "{s:?}");
    let queues = napis.into_iter().map(|n| n.into_queue()).collect();
    assert!(port.reclaim(queues).is_home(), "every frame came home");
}
