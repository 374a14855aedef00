//! The pipeline on real threads: interrupt and polling modes, null queues.
//! Asserts accounting and frame return, not speed.

use rxpath_core::napi::BundleMode;
use rxpath_dev::sim::{Coalesce, Mix, SimConfig, TrafficConfig};
use rxpath_runtime::{run, Producer, Report, RunConfig, RunError, StackKind, Tick};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Run `cfg` until its NAPIs have received `n` packets: a count of
/// events, not a rate (a loaded machine only takes longer); the 60 s
/// deadline only catches a hang. `on_tick` sees every tick.
fn run_until(cfg: RunConfig, n: u64, mut on_tick: impl FnMut(&Tick)) -> Report {
    let stop = Arc::new(AtomicBool::new(false));
    let cfg = RunConfig {
        duration: Duration::from_secs(60),
        tick: Duration::from_millis(20),
        stop: Some(stop.clone()),
        ..cfg
    };
    run(&cfg, |t| {
        on_tick(t);
        if t.napi.received >= n {
            stop.store(true, Ordering::Release);
        }
    })
    .unwrap()
}

fn base() -> RunConfig {
    RunConfig {
        sim: SimConfig {
            queues: 2,
            ring_size: 256,
            frames_per_queue: 512,
            ..Default::default()
        },
        traffic: TrafficConfig {
            flows: 32,
            mix: Mix::Mixed,
            ..Default::default()
        },
        duration: Duration::from_millis(300),
        tick: Duration::from_millis(100),
        pin: false,
        ..RunConfig::default()
    }
}

#[test]
fn interrupt_mode_sleeps_and_wakes_and_accounts_for_everything() {
    let cfg = RunConfig {
        producer: Producer::Thread { pps: Some(100_000) },
        sim: SimConfig {
            coalesce: Coalesce {
                rx_usecs: 50,
                rx_frames: 16,
            },
            ..base().sim
        },
        ..base()
    };
    let mut ticks = 0;
    let r = run_until(cfg, 10_000, |_| ticks += 1);
    let n = r.napi_total();
    let d = r.device_total();
    assert!(ticks >= 2, "ticks {ticks}");
    assert!(n.received >= 10_000, "received {}", n.received);
    assert!(n.wakeups > 0 && d.wakeups >= n.wakeups);
    // Coalescing: at 50k pps per queue a packet comes every 20 µs, so the
    // 16-frame threshold is never reached first; each interrupt waits for
    // rx-usecs (50 µs) after the first unsignalled packet. So there are
    // fewer wakeups than packets, and at most one per queue per 50 µs.
    let bound = r.elapsed.as_micros() as u64 / 50 * 2 + 100;
    assert!(
        n.wakeups < n.received,
        "{} wakeups for {} packets",
        n.wakeups,
        n.received
    );
    assert!(n.wakeups <= bound, "{} wakeups, bound {bound}", n.wakeups);
    // Loss is possible (a descheduled NAPI thread lets the ring fill), but
    // every offered packet is either in the ring or a counted device drop.
    assert_eq!(d.offered, d.rx_ring + d.rx_missed + d.rx_no_buffer);
    assert!(r.consistent(), "{r:?}");
    assert_eq!(r.frames_home, r.frames_total);
    assert!(
        r.queues.iter().all(|q| q.napi.received > 0),
        "RSS used both queues"
    );
}

#[test]
fn polling_mode_never_takes_an_interrupt() {
    let cfg = RunConfig {
        interrupts: false,
        bundle: BundleMode {
            size: 64,
            split_on_hash: false,
        },
        ..base()
    };
    let r = run(&cfg, |_| {}).unwrap();
    assert_eq!(r.napi_total().wakeups, 0);
    assert!(r.napi_total().received > 0);
    assert!(r.consistent());
}

#[test]
fn two_napi_threads_and_rxdrop_account_for_everything() {
    let cfg = RunConfig {
        threads: 2,
        stack: StackKind::Rxdrop,
        ..base()
    };
    let r = run(&cfg, |_| {}).unwrap();
    let n = r.napi_total();
    assert_eq!(r.softnet.len(), 2);
    assert_eq!(n.delivered, 0);
    assert_eq!(n.dropped.get(rxpath_core::DropReason::Rxdrop), n.received);
    assert!(r.consistent());
}

#[test]
fn null_queues_measure_the_engine_and_return_every_frame() {
    let cfg = RunConfig {
        producer: Producer::Null,
        ..base()
    };
    let r = run_until(cfg, 1000, |_| {});
    assert!(r.napi_total().received >= 1000);
    assert!(r.consistent());
    assert_eq!(r.frames_home, r.frames_total);
}

#[test]
fn bad_configuration_is_an_error_not_a_panic() {
    let e = run(
        &RunConfig {
            threads: 3,
            ..base()
        },
        |_| {},
    )
    .unwrap_err();
    assert!(matches!(e, RunError::Config(_)), "{e}");
    let e = run(
        &RunConfig {
            bundle: BundleMode {
                size: 65,
                split_on_hash: false,
            },
            ..base()
        },
        |_| {},
    )
    .unwrap_err();
    assert!(e.to_string().contains("bundle"), "{e}");
    let e = run(
        &RunConfig {
            sim: SimConfig {
                ring_size: 100,
                ..base().sim
            },
            ..base()
        },
        |_| {},
    )
    .unwrap_err();
    assert!(e.to_string().contains("ring size"), "{e}");
}

#[test]
fn gro_with_the_flush_timer_merges_bulk_and_accounts_for_every_segment() {
    use rxpath_runtime::GroSettings;
    let run_with = |timeout: u64| {
        let cfg = RunConfig {
            traffic: TrafficConfig {
                flows: 16,
                mix: Mix::TcpBulk,
                burst: 45,
                message: 45 * 1448,
                ..Default::default()
            },
            producer: Producer::Thread { pps: Some(200_000) },
            sim: SimConfig {
                coalesce: Coalesce::EVERY_FRAME,
                ..base().sim
            },
            gro: Some(GroSettings {
                flush_timeout_ns: timeout,
                adaptive: None,
            }),
            ..base()
        };
        run(&cfg, |_| {}).unwrap()
    };
    // 5 µs: shorter than the ~10 µs between packets of a queue at this
    // rate, so the timer fires whatever the scheduling (50 µs did not,
    // under a loaded test run).
    for timeout in [0, 5_000] {
        let r = run_with(timeout);
        let g = r.gro_total().expect("gro on");
        assert!(r.consistent(), "{r:?}");
        assert_eq!(g.packets_in, r.napi_total().received);
        assert_eq!(g.segments_out, g.packets_in, "every segment left GRO");
        assert!(g.merged > 0, "bulk segments merged");
        assert!(
            g.segs_per_packet() > 1.5,
            "{} segments/packet",
            g.segs_per_packet()
        );
        if timeout > 0 {
            assert!(
                g.flushes(rxpath_core::gro::FlushReason::Timer) > 0,
                "the timer flushed"
            );
        }
    }
}

/// Fault injection on the simulated NIC (`--fault`): frames of random bytes
/// and descriptors that run past their frame, a few percent of the traffic,
/// through GRO and IP input on real threads: each is a counted drop of a bad
/// frame, the rest goes on, and every frame comes home.
#[test]
fn injected_faults_are_counted_drops_and_every_frame_comes_home() {
    use rxpath_core::stats::DropReason;
    let c = RunConfig {
        sim: SimConfig {
            faults: rxpath_dev::sim::Faults {
                garbage: 0.02,
                lying: 0.02,
                seed: 3,
                ..Default::default()
            },
            ..base().sim
        },
        producer: Producer::Thread { pps: Some(200_000) },
        ..base()
    };
    let r = run_until(c, 10_000, |_| {});
    assert!(r.consistent(), "received = delivered + dropped");
    assert_eq!(r.frames_home, r.frames_total, "every frame home");
    let t = r.napi_total();
    let bad = t.dropped.get(DropReason::Malformed) + t.dropped.get(DropReason::UnhandledProto);
    let share = bad as f64 / t.received as f64;
    assert!(t.received >= 10_000, "{t:?}");
    assert!(
        (0.02..0.08).contains(&share),
        "about 4 % of the packets were faults: {share:.4} ({bad} of {})",
        t.received
    );
    assert!(t.dropped.get(DropReason::Malformed) > 0, "{t:?}");
    assert!(t.delivered > t.received / 2, "{t:?}");
}

/// Starved fill rings and stalled NAPI threads (`--fault starve=MS,stall=MS`)
/// on real threads: the NIC counts what they cost where a NIC does
/// (`rx_no_buffer` while the fill ring reads empty, `rx_missed` once a
/// stalled thread's ring is full), the schedule counts what it injected,
/// and still received = delivered + dropped with every frame home. The
/// same run without a schedule injects nothing.
#[test]
fn starved_fill_rings_and_stalled_napi_threads_are_counted_where_a_nic_counts_them() {
    let with = |faults| RunConfig {
        sim: SimConfig {
            faults,
            ..base().sim
        },
        producer: Producer::Thread { pps: Some(200_000) },
        duration: Duration::from_millis(600),
        ..base()
    };
    let faults = rxpath_dev::sim::Faults {
        starve_ms: 2.0,
        starve_every_ms: 40.0,
        stall_ms: 25.0,
        stall_every_ms: 60.0,
        seed: 5,
        ..Default::default()
    };
    let r = run(&with(faults), |_| {}).unwrap();
    assert!(r.consistent(), "received = delivered + dropped");
    assert_eq!(r.frames_home, r.frames_total, "every frame home");
    let d = r.device_total();
    assert!(r.faults.starve_windows > 0, "{:?}", r.faults);
    assert!(d.rx_no_buffer > 0, "starved: rx_no_buffer {d:?}");
    assert!(
        r.faults.stalls > 0 && r.faults.stalled_ms >= 25.0,
        "{:?}",
        r.faults
    );
    assert!(
        d.rx_missed > 0,
        "a 25 ms stall at 200 kpps fills a 1024-entry ring: {d:?}"
    );
    assert_eq!(
        d.offered,
        d.rx_ring + d.rx_missed + d.rx_no_buffer + d.rx_too_long
    );
    let t = r.napi_total();
    assert_eq!(t.received, d.rx_ring, "what reached the ring was polled");
    let clean = run(&with(rxpath_dev::sim::Faults::default()), |_| {}).unwrap();
    assert_eq!(
        clean.faults,
        rxpath_runtime::run::FaultReport::default(),
        "no schedule, nothing injected"
    );
    assert!(clean.consistent() && clean.frames_home == clean.frames_total);
}

/// A stalled worker (`--fault stall=MS` with steering: workers that are
/// not NAPI threads stall too): its backlog fills and the packets steered
/// to it meanwhile are `backlog_full` drops, counted on the NAPI thread as
/// the kernel's `enqueue_to_backlog` counts them; everything adds up.
#[test]
fn a_stalled_worker_fills_its_backlog_and_the_overflow_is_counted() {
    use rxpath_core::stats::DropReason;
    use rxpath_core::steer::{SteerConfig, SteerMode};
    let c = RunConfig {
        sim: SimConfig {
            faults: rxpath_dev::sim::Faults {
                stall_ms: 80.0,
                stall_every_ms: 150.0,
                seed: 9,
                ..Default::default()
            },
            ..base().sim
        },
        producer: Producer::Thread { pps: Some(200_000) },
        steer: SteerConfig {
            mode: SteerMode::Rps,
            workers: 2,
            ..SteerConfig::default()
        },
        threads: 1,
        duration: Duration::from_secs(1),
        ..base()
    };
    let r = run(&c, |_| {}).unwrap();
    assert!(r.consistent(), "received = delivered + dropped");
    assert_eq!(r.frames_home, r.frames_total, "every frame home");
    assert!(r.faults.worker_stalls > 0, "{:?}", r.faults);
    let t = r.napi_total();
    assert!(
        t.dropped.get(DropReason::BacklogFull) > 0,
        "80 ms of a stalled worker overflows its 1000-packet backlog even at a loaded machine's rate: {:?} {:?} {:#?}",
        t.dropped,
        r.faults,
        r.workers
    );
}
