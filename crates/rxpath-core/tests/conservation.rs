//! Property tests: every packet is accounted for and every frame comes home,
//! under seeded random traffic, malformed frames, ring overflow and buffer
//! exhaustion, for any bundle mode and budget.

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use rxpath_core::gro::{GroConfig, GroKnob};
use rxpath_core::napi::{BundleMode, Napi};
use rxpath_core::packet::Sink;
use rxpath_core::softnet::{Softnet, SoftnetConfig};
use rxpath_core::time::ManualClock;
use rxpath_dev::sim::{self, Coalesce, Mix, SimConfig, Traffic, TrafficConfig};
use rxpath_dev::RxQueue;
use rxpath_wire::toeplitz::Toeplitz;

#[derive(Debug, Clone)]
struct Case {
    queues: usize,
    ring: usize,
    frames: usize,
    bundle: usize,
    split: bool,
    weight: usize,
    netdev_budget: usize,
    packets: usize,
    burst: usize,
    malformed_pct: u32,
    mix: Mix,
    gro_timeout: Option<u64>,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        1usize..5,
        prop::sample::select(vec![64usize, 128, 256]),
        8usize..600,
        prop::sample::select(vec![1usize, 4, 16, 64]),
        any::<bool>(),
        1usize..100,
        1usize..400,
        0usize..4000,
        1usize..300,
        0u32..20,
        (
            prop::sample::select(vec![Mix::Udp, Mix::TcpBulk, Mix::TcpRr, Mix::Mixed]),
            prop::sample::select(vec![None, Some(0u64), Some(2_000), Some(50_000)]),
        ),
        any::<u64>(),
    )
        .prop_map(
            |(
                queues,
                ring,
                frames,
                bundle,
                split,
                weight,
                netdev_budget,
                packets,
                burst,
                malformed_pct,
                (mix, gro_timeout),
                seed,
            )| Case {
                queues,
                ring,
                frames,
                bundle,
                split,
                weight,
                netdev_budget,
                packets,
                burst,
                malformed_pct,
                mix,
                gro_timeout,
                seed,
            },
        )
}

fn run(c: &Case) -> Result<(), TestCaseError> {
    let cfg = SimConfig {
        queues: c.queues,
        ring_size: c.ring,
        frames_per_queue: c.frames,
        coalesce: Coalesce {
            rx_usecs: 5,
            rx_frames: 8,
        },
        ..Default::default()
    };
    let (mut port, queues) = sim::build(&cfg).unwrap();
    let tz = Toeplitz::default();
    let mut traffic = Traffic::new(
        TrafficConfig {
            flows: 50,
            mix: c.mix,
            seed: c.seed,
            ..Default::default()
        },
        &tz,
    );
    let mut rng = Pcg64Mcg::seed_from_u64(c.seed);
    let mut napis: Vec<_> = queues
        .into_iter()
        .map(|q| {
            let mut n = Napi::new(
                q,
                c.weight,
                BundleMode {
                    size: c.bundle,
                    split_on_hash: c.split,
                },
                true,
            );
            n.set_gro(c.gro_timeout.map(|t| GroConfig {
                enabled: true,
                flush_timeout: GroKnob::new(t),
                adaptive: None,
                udp: None,
            }));
            n
        })
        .collect();
    let mut sn = Softnet::new(SoftnetConfig {
        netdev_budget: c.netdev_budget,
        netdev_budget_usecs: 2000,
    });
    let clock = ManualClock::new(1);
    let mut garbage = [0u8; 128];
    let mut sent = 0;
    let mut offered_by_us = 0u64;
    loop {
        if sent < c.packets {
            let n = c.burst.min(c.packets - sent);
            for _ in 0..n {
                if rng.gen_range(0..100) < c.malformed_pct {
                    let len = rng.gen_range(0..garbage.len());
                    rng.fill(&mut garbage[..len]);
                    let _ = port.inject(&garbage[..len], rng.gen());
                } else {
                    let _ = port.send(&mut traffic);
                }
                offered_by_us += 1;
            }
            sent += n;
        }
        clock.advance(rng.gen_range(0..10_000));
        port.flush(clock.now());
        // Hard IRQ and NAPI timers: schedule the NAPIs whose lines fired.
        for (i, n) in napis.iter_mut().enumerate() {
            if n.take_irq() || (!sn.is_scheduled(i) && n.fire_timer(clock.now())) {
                sn.schedule(i);
            }
        }
        sn.net_rx_action(&mut napis, &mut Sink, &clock);
        let idle = sn.pending() == 0
            && napis
                .iter_mut()
                .all(|n| !n.queue_mut().has_pending() && n.timer().is_none());
        if sent == c.packets && idle {
            break;
        }
        // Packets below rx-frames wait for rx-usecs: time moves on above.
    }
    for n in napis.iter() {
        prop_assert_eq!(n.held(), 0, "the timer flushed everything GRO held");
    }
    let mut offered = 0;
    for n in &napis {
        let d = n.queue().stats();
        let s = n.stats();
        prop_assert_eq!(
            d.offered,
            d.rx_ring + d.rx_missed + d.rx_no_buffer + d.rx_too_long,
            "device conservation"
        );
        prop_assert_eq!(s.received, d.rx_ring, "NAPI took every packet the ring got");
        prop_assert!(s.accounted(), "received = delivered + dropped: {:?}", s);
        prop_assert!(s.polls_full + s.completions <= s.polls);
        offered += d.offered;
    }
    prop_assert_eq!(offered, offered_by_us);
    let queues = napis.into_iter().map(|n| n.into_queue()).collect();
    prop_assert!(port.reclaim(queues).is_home(), "every frame came home");
    Ok(())
}

trait Now {
    fn now(&self) -> u64;
}
impl Now for ManualClock {
    fn now(&self) -> u64 {
        rxpath_core::time::Clock::now_ns(self)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn every_packet_accounted_every_frame_home(c in case()) {
        run(&c)?;
    }
}
