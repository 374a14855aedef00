//! The simulated NIC by hand: RSS, a full ring, an empty fill ring,
//! coalescing, the null queue.

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

/// Seeded UDP traffic of `flows` flows.
fn udp(flows: usize) -> Traffic {
    Traffic::new(
        TrafficConfig {
            flows,
            mix: Mix::Udp,
            ..Default::default()
        },
        &Toeplitz::default(),
    )
}

#[test]
fn rss_spreads_flows_and_keeps_a_flow_on_one_queue() {
    let (mut port, mut queues) = build(&small()).unwrap();
    let mut t = udp(64);
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
    let mut t = udp(4);
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
    let mut t = udp(1);
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
    let mut t = udp(1);
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

/// Null queues split the flows as RSS would: each flow's packets are on
/// one queue only, the one the indirection table names; a queue no flow
/// hashes to hands out nothing and still gives every frame back.
#[test]
fn null_queues_split_flows_as_rss_does() {
    let sim = SimConfig {
        queues: 2,
        ..SimConfig::default()
    };
    for flows in [1, 64] {
        let mut t = Traffic::new(
            TrafficConfig {
                flows,
                mix: Mix::Udp,
                ..TrafficConfig::default()
            },
            &Toeplitz::default(),
        );
        let mut seen = vec![0usize; 2];
        for qi in 0..2u16 {
            let mut q = NullQueue::for_rss(qi, 64, &mut t, &sim).unwrap();
            let mut held = Vec::new();
            while let Some(d) = q.pull() {
                assert_eq!(sim.rss_queue(d.rxhash), qi as usize, "{flows} flows");
                held.push(d.frame);
            }
            seen[qi as usize] = held.len();
            for f in held {
                q.recycle(f);
            }
            assert!(q.into_pool().is_home());
        }
        if flows == 1 {
            assert!(
                seen.contains(&0) && seen.contains(&64),
                "one flow, one queue: {seen:?}"
            );
        } else {
            assert_eq!(seen, vec![64, 64], "64 flows cover both queues");
        }
    }
}

/// A saturating source against a slow host: with flow control the link
/// waits (nothing is dropped at the ring, every packet offered arrives);
/// without it the same source loses packets as rx_missed.
fn saturate(pause: bool) -> (DeviceQueueStats, u64, u64) {
    let cfg = SimConfig {
        queues: 1,
        ring_size: 64,
        frames_per_queue: 128,
        pause,
        ..Default::default()
    };
    let (mut port, mut queues) = build(&cfg).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let producer = std::thread::spawn(move || {
        let mut t = udp(4);
        port.run(&mut t, &s, None, 16);
        port
    });
    let q = &mut queues[0];
    let mut pulled = 0u64;
    let drain = |q: &mut SimRxQueue, pulled: &mut u64| {
        while let Some(d) = q.pull() {
            q.recycle(d.frame);
            *pulled += 1;
        }
        q.pull_done();
        q.recycle_done();
    };
    while pulled < 2000 {
        drain(q, &mut pulled);
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    stop.store(true, Ordering::Relaxed);
    let port = producer.join().unwrap();
    drain(q, &mut pulled);
    let st = q.stats();
    let pauses = port.pauses();
    assert!(port.reclaim(queues).is_home());
    (st, pulled, pauses)
}

#[test]
fn flow_control_pauses_the_link_instead_of_dropping() {
    let (st, pulled, pauses) = saturate(true);
    assert_eq!((st.rx_missed, st.rx_no_buffer), (0, 0), "{st:?}");
    assert_eq!(st.offered, pulled, "{st:?}");
    assert_eq!(st.rx_ring, pulled, "{st:?}");
    assert!(pauses > 0);
    let (st, pulled, pauses) = saturate(false);
    assert!(st.rx_missed > 0, "{st:?}");
    assert_eq!(st.rx_ring, pulled, "{st:?}");
    assert_eq!(pauses, 0);
}

/// The cold queue hands its frames out in one fixed cycle, not in the
/// order of the region (nothing for a prefetcher to follow), takes them
/// back in any order, and stops when the stack still holds the next one.
#[test]
fn cold_queue_cycles_in_a_fixed_shuffled_order() {
    let mut t = udp(4);
    let n = 64;
    let mut q = ColdQueue::new(0, n, &mut t, 7).unwrap();
    let mut cycles: Vec<Vec<u32>> = Vec::new();
    for round in 0..3 {
        let mut held = Vec::new();
        while let Some(d) = q.pull() {
            let (off, len) = (d.off as usize, d.len as usize);
            assert!(rxpath_wire::parse(&q.umem().data(&d.frame)[off..off + len]).is_ok());
            held.push(d.frame);
        }
        assert_eq!(held.len(), n, "the whole cycle, then empty");
        cycles.push(held.iter().map(|f| f.index()).collect());
        // Back in order, in reverse, or half and half.
        match round {
            0 => held.into_iter().for_each(|f| q.recycle(f)),
            1 => held.into_iter().rev().for_each(|f| q.recycle(f)),
            _ => {
                let rest = held.split_off(n / 2);
                rest.into_iter().for_each(|f| q.recycle(f));
                held.into_iter().for_each(|f| q.recycle(f));
            }
        }
    }
    assert!(cycles.windows(2).all(|w| w[0] == w[1]), "one fixed cycle");
    let sorted: Vec<u32> = (0..n as u32).collect();
    assert_ne!(cycles[0], sorted, "shuffled, not the region's order");
    let mut seen = cycles[0].clone();
    seen.sort_unstable();
    assert_eq!(seen, sorted, "every frame once per cycle");
    // The stack holds the next frame: the queue reads empty until it is back.
    let a = q.pull().unwrap();
    let b = q.pull().unwrap();
    q.recycle(b.frame);
    for _ in 0..n - 2 {
        let d = q.pull().unwrap();
        q.recycle(d.frame);
    }
    assert!(q.pull().is_none(), "the next frame is still out");
    q.recycle(a.frame);
    let d = q.pull().expect("back in the cycle");
    assert_eq!(d.frame.index(), cycles[0][0]);
    q.recycle(d.frame);
    assert!(q.into_pool().is_home());
}
