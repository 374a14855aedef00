//! Steering on real threads: RPS follows rps_cpus, backlogs overflow into a
//! counted drop, spread keeps each flow's order where spread-unordered does
//! not, RFS follows migrating readers without reordering, and in every mode
//! every packet is accounted for and every frame comes home, also when a
//! worker goes offline mid-run. Order is measured at delivery (the sim
//! numbers each UDP flow's datagrams).

use rxpath_core::filter::gen::{generate, Shape};
use rxpath_core::filter::{Family, Filter, FilterHandle, FilterMode, Ruleset};
use rxpath_core::sock::SockFlowTable;
use rxpath_core::stats::DropReason;
use rxpath_core::steer::{SpreadPick, SteerConfig, SteerMode};
use rxpath_dev::sim::{Mix, SimConfig, Traffic, TrafficConfig};
use rxpath_runtime::{run, Producer, Report, RunConfig};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// An expensive bottom half: rules walked linearly, every packet missing
/// every one (the sim's addresses are outside the generated rules').
fn slow_filter(rules: usize) -> Arc<FilterHandle> {
    let g = generate(Shape::Acl, Family::V4, rules, 1, 0.8, 1);
    let t = rxpath_core::filter::parse(&g.save).unwrap();
    Arc::new(FilterHandle::new(Some(Filter::new(
        Some(Ruleset::new(t, "sim0", FilterMode::Linear)),
        None,
    ))))
}

fn cfg(mode: SteerMode, workers: usize, flows: usize) -> RunConfig {
    RunConfig {
        sim: SimConfig {
            queues: 1,
            ring_size: 256,
            frames_per_queue: 1024,
            ..Default::default()
        },
        traffic: TrafficConfig {
            flows,
            mix: Mix::Udp,
            ..Default::default()
        },
        producer: Producer::Thread { pps: Some(200_000) },
        duration: Duration::from_millis(400),
        tick: Duration::from_millis(100),
        pin: false,
        steer: SteerConfig {
            mode,
            workers,
            ..SteerConfig::default()
        },
        ..RunConfig::default()
    }
}

fn check_whole(r: &Report, what: &str) {
    let n = r.napi_total();
    assert!(n.received > 0, "{what}: nothing received");
    assert!(
        n.accounted(),
        "{what}: received {} != delivered {} + dropped {}",
        n.received,
        n.delivered,
        n.dropped.total()
    );
    assert!(r.consistent(), "{what}: {r:?}");
    assert_eq!(r.frames_home, r.frames_total, "{what}: frames lost");
}

#[test]
fn rps_follows_rps_cpus_and_a_full_backlog_is_a_counted_drop() {
    for (map, busy) in [(vec![1u16], 1usize), (vec![0u16], 0usize)] {
        let mut c = cfg(SteerMode::Rps, 2, 64);
        c.steer.rps_cpus = map.clone();
        c.steer.netdev_max_backlog = 16;
        c.filter = Some(slow_filter(300));
        let r = run(&c, |_| {}).unwrap();
        let what = format!("rps_cpus {map:?}");
        check_whole(&r, &what);
        assert_eq!(r.workers.len(), 2, "{what}");
        let idle = 1 - busy;
        assert!(
            r.workers[busy].backlog.processed > 0,
            "{what}: {:?}",
            r.workers
        );
        assert_eq!(
            r.workers[idle].backlog.processed, 0,
            "{what}: {:?}",
            r.workers
        );
        // Worker 1 is not the NAPI thread: all it processes was steered
        // there from worker 0 (received_rps counts what was queued).
        assert_eq!(
            r.workers[1].backlog.received_rps, r.workers[1].backlog.processed,
            "{what}"
        );
        assert_eq!(r.workers[0].backlog.received_rps, 0, "{what}");
        // 200 kpps into a slow bottom half with a 16-packet backlog.
        let full = r.napi_total().dropped.get(DropReason::BacklogFull);
        assert!(full > 0, "{what}: no backlog_full drop");
        assert_eq!(full, r.workers[busy].backlog.dropped, "{what}");
        assert_eq!(r.order.unwrap().reordered, 0, "{what}");
    }
}

#[test]
fn spread_keeps_one_elephant_flow_in_order_where_spread_unordered_reorders() {
    let filter = slow_filter(200);
    let mut seen = [0u64; 2];
    for (i, mode) in [SteerMode::Spread, SteerMode::SpreadUnordered]
        .into_iter()
        .enumerate()
    {
        let mut c = cfg(mode, 2, 1);
        c.filter = Some(filter.clone());
        // Strict alternation: the two workers' phases decide the order.
        c.steer.pick = SpreadPick::RoundRobin;
        c.duration = Duration::from_millis(600);
        let r = run(&c, |_| {}).unwrap();
        let what = mode.name();
        check_whole(&r, what);
        let o = r.order.unwrap();
        assert!(o.udp_counters, "{what}: the sim's datagrams carry numbers");
        assert!(
            r.workers.iter().all(|w| w.backlog.processed > 100),
            "{what}: one flow on both workers: {:?}",
            r.workers
        );
        seen[i] = o.reordered;
        assert!(r.napi_total().delivered > 500, "{what}");
    }
    assert_eq!(seen[0], 0, "spread reordered {} packets", seen[0]);
    assert!(
        seen[1] > 0,
        "spread-unordered kept order: the check cannot see reordering"
    );
}

#[test]
fn rfs_follows_migrating_readers_without_reordering() {
    let mut c = cfg(SteerMode::Rfs, 2, 16);
    c.filter = Some(slow_filter(100));
    c.duration = Duration::from_millis(600);
    let sock = Arc::new(SockFlowTable::new(c.steer.rps_sock_flow_entries));
    c.sock_flows = Some(sock.clone());
    // The flows' RX hashes, as the sim NIC computes them.
    let tz = rxpath_wire::toeplitz::Toeplitz::default();
    let traffic = Traffic::new(c.traffic, &tz);
    let hashes: Vec<u32> = (0..traffic.flows())
        .map(|i| tz.hash_flow(&traffic.flow_key(i), true))
        .collect();
    // Every flow has a reader from the start: a flow without one goes by
    // RPS, and its first RFS decision moves it at once (its dev flow entry
    // is unset), which may reorder it, in the kernel as here.
    for (i, &h) in hashes.iter().enumerate() {
        sock.record(h, i as u32 & 1);
    }
    assert!(
        hashes.iter().all(|&h| sock.desired_cpu(h).is_some()),
        "two flows share a sock flow table slot"
    );
    // Readers that migrate between the two workers at random.
    let stop = Arc::new(AtomicBool::new(false));
    let readers = {
        let (sock, stop, hashes) = (sock.clone(), stop.clone(), hashes.clone());
        std::thread::spawn(move || {
            let mut x = 0x9e37_79b9u32;
            let mut moves = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                let h = hashes[x as usize % hashes.len()];
                sock.record(h, (x >> 16) & 1);
                moves += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
            moves
        })
    };
    let r = run(&c, |_| {}).unwrap();
    stop.store(true, Ordering::Relaxed);
    let moves = readers.join().unwrap();
    check_whole(&r, "rfs");
    assert!(moves > 100, "readers moved {moves} times");
    assert!(
        r.workers.iter().all(|w| w.backlog.processed > 0),
        "flows followed their readers to both workers: {:?}",
        r.workers
    );
    assert_eq!(
        r.order.unwrap().reordered,
        0,
        "RFS reordered a migrating flow"
    );
}

#[test]
fn every_mode_accounts_for_everything_also_when_a_worker_goes_offline() {
    let filter = slow_filter(50);
    for mode in [
        SteerMode::None,
        SteerMode::Rps,
        SteerMode::Rfs,
        SteerMode::Spread,
        SteerMode::SpreadUnordered,
    ] {
        for stop in [None, Some((1u16, Duration::from_millis(150)))] {
            if mode == SteerMode::None && stop.is_some() {
                continue;
            }
            let mut c = cfg(mode, 2, 64);
            c.sim.queues = 2;
            c.filter = Some(filter.clone());
            c.stop_worker = stop;
            let r = run(&c, |_| {}).unwrap();
            let what = format!("{} stop {stop:?}", mode.name());
            check_whole(&r, &what);
            if mode == SteerMode::None {
                assert!(r.workers.is_empty(), "{what}");
                continue;
            }
            let o = r.order.unwrap();
            // spread's order survives a worker going away (sequence
            // numbers); rps and rfs process an offline worker's flows where
            // they are while it still drains its queue, which may reorder
            // them, as CPU hotplug does in the kernel.
            if mode == SteerMode::Spread || (stop.is_none() && mode != SteerMode::SpreadUnordered) {
                assert_eq!(o.reordered, 0, "{what}");
            }
            if stop.is_some() {
                assert!(!r.workers[1].online_at_end, "{what}: worker 1 still online");
                assert!(r.workers[0].online_at_end, "{what}");
            }
        }
    }
    // The null device too (its frames never leave the NAPI thread's queue
    // without coming back through the workers).
    let mut c = cfg(SteerMode::Spread, 2, 8);
    c.producer = Producer::Null;
    let r = run(&c, |_| {}).unwrap();
    check_whole(&r, "null spread");
}

#[test]
fn accelerated_rfs_moves_flows_to_the_queue_of_their_readers_worker() {
    // Two queues, each on its own NAPI thread (workers 0 and 1). Every
    // flow's reader is on worker 1: the NIC's ntuple rules must bring the
    // flows to queue 1, so that worker 1's NAPI takes them and almost
    // nothing crosses between workers.
    let mut c = cfg(SteerMode::Rfs, 2, 32);
    c.sim.queues = 2;
    c.threads = 2;
    c.steer.accel_rfs = true;
    c.duration = Duration::from_millis(600);
    let sock = Arc::new(SockFlowTable::new(c.steer.rps_sock_flow_entries));
    let tz = rxpath_wire::toeplitz::Toeplitz::default();
    let traffic = Traffic::new(c.traffic, &tz);
    for i in 0..traffic.flows() {
        sock.record(tz.hash_flow(&traffic.flow_key(i), true), 1);
    }
    c.sock_flows = Some(sock);
    let r = run(&c, |_| {}).unwrap();
    check_whole(&r, "accel rfs");
    let a = r.accel_rfs.expect("accelerated RFS report");
    assert!(a.installed > 0 && a.steered > 0, "{a:?}");
    let q: Vec<u64> = r.queues.iter().map(|q| q.napi.received).collect();
    assert!(
        q[1] > 10 * q[0],
        "the NIC put the flows on queue 1 (worker 1's NAPI): {q:?}"
    );
    // What still arrives on queue 0 (before a flow's rule) crosses over.
    let crossed = r.workers[1].backlog.received_rps;
    assert!(crossed * 10 < q[1], "crossed {crossed} of {}", q[0] + q[1]);
    // The same without acceleration: RSS spreads the flows over both
    // queues and RFS carries queue 0's half across.
    c.steer.accel_rfs = false;
    let sock = Arc::new(SockFlowTable::new(c.steer.rps_sock_flow_entries));
    for i in 0..traffic.flows() {
        sock.record(tz.hash_flow(&traffic.flow_key(i), true), 1);
    }
    c.sock_flows = Some(sock);
    let r = run(&c, |_| {}).unwrap();
    check_whole(&r, "rfs");
    assert!(r.accel_rfs.is_none());
    let q: Vec<u64> = r.queues.iter().map(|q| q.napi.received).collect();
    assert!(q[0] > 0 && q[1] > 0, "RSS used both queues: {q:?}");
    assert!(
        r.workers[1].backlog.received_rps * 4 > q[0],
        "{:?}",
        r.workers
    );
}

/// The compiled filter with its per-thread flow cache on the workers of
/// every steering mode: each packet the path judged is counted once, by
/// the INPUT policy (the sim's flows miss every rule), so the counters add
/// up to exactly what was delivered — pending cache counts are flushed at
/// the end of every worker's bundle, none is lost or counted twice.
#[test]
fn the_cached_filter_counts_every_packet_once_on_workers() {
    let g = generate(Shape::Acl, Family::V4, 500, 1, 0.8, 1);
    for mode in [
        SteerMode::None,
        SteerMode::Rps,
        SteerMode::Spread,
        SteerMode::SpreadUnordered,
    ] {
        let t = rxpath_core::filter::parse(&g.save).unwrap();
        let h = Arc::new(FilterHandle::new(Some(Filter::new(
            Some(Ruleset::new(t, "sim0", FilterMode::Compiled)),
            None,
        ))));
        let mut c = cfg(mode, 2, 8);
        c.filter = Some(h.clone());
        c.duration = Duration::from_millis(500);
        let r = run(&c, |_| {}).unwrap();
        let what = mode.name();
        check_whole(&r, what);
        let f = h.current().unwrap();
        let counted: u64 =
            f.v4.as_ref()
                .unwrap()
                .stats()
                .iter()
                .filter(|s| s.chain == "INPUT")
                .map(|s| s.packets)
                .sum();
        let t = r.napi_total();
        assert!(t.delivered > 1000, "{what}: {t:?}");
        assert_eq!(
            counted, t.delivered,
            "{what}: counted once per judged packet"
        );
    }
}

/// Null queues split the flows as RSS does: one flow on two null queues
/// and two NAPI threads, steered by RPS to two workers, reads 0 reordered
/// (when every queue emitted every flow, about half of the packets of a
/// single flow read as reordered under any steering mode).
#[test]
fn rps_with_one_flow_on_two_null_queues_reorders_nothing() {
    let c = RunConfig {
        sim: SimConfig {
            queues: 2,
            ..cfg(SteerMode::Rps, 2, 1).sim
        },
        producer: Producer::Null,
        threads: 2,
        ..cfg(SteerMode::Rps, 2, 1)
    };
    let r = run(&c, |_| {}).unwrap();
    check_whole(&r, "rps, 1 flow, 2 null queues");
    let order = r.order.expect("order measured with steering");
    assert!(order.udp_counters, "the null queues number their datagrams");
    assert!(r.napi_total().delivered > 0);
    assert_eq!(order.reordered, 0, "{order:?}");
    // The one flow lives on one queue: the other queue received nothing.
    let per_queue: Vec<u64> = r.queues.iter().map(|q| q.napi.received).collect();
    assert_eq!(
        per_queue.iter().filter(|&&n| n > 0).count(),
        1,
        "{per_queue:?}"
    );
}
