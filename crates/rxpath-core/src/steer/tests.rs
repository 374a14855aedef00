//! Steering decisions with seeded randomness: RPS follows `rps_cpus`, RFS
//! never reorders a flow where steering straight to the reader does, the
//! flow limit takes the elephant and spares the mice, a full backlog is a
//! counted drop.

use super::*;
use crate::sock::SockFlowTable;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use std::collections::VecDeque;

struct View<'a> {
    backlogs: &'a [Backlog],
    online: &'a [bool],
}

impl WorkerView for View<'_> {
    fn online(&self, w: Worker) -> bool {
        self.online.get(w as usize).copied().unwrap_or(false)
    }
    fn head(&self, w: Worker) -> u32 {
        self.backlogs[w as usize].head()
    }
}

/// A view where every worker is online at head 0 (for tables being
/// filled: an empty entry is taken before any is checked for idleness).
struct Idle;

impl WorkerView for Idle {
    fn online(&self, _: Worker) -> bool {
        true
    }
    fn head(&self, _: Worker) -> u32 {
        0
    }
}

#[test]
fn rps_follows_rps_cpus_by_reciprocal_scale() {
    let backlogs = vec![Backlog::new(1000, None); 4];
    let online = [true; 4];
    let v = View {
        backlogs: &backlogs,
        online: &online,
    };
    let map: [Worker; 2] = [1, 3];
    let mut seen = [0u32; 4];
    let mut rng = Pcg64Mcg::seed_from_u64(7);
    for _ in 0..10_000 {
        let h: u32 = rng.gen_range(1..u32::MAX);
        let (w, save) = get_rps_cpu(h, &map, None, None, &v).unwrap();
        assert!(!save);
        assert_eq!(w, map[((h as u64 * 2) >> 32) as usize]);
        seen[w as usize] += 1;
    }
    assert_eq!((seen[0], seen[2]), (0, 0), "only the listed workers");
    assert!(seen[1] > 4000 && seen[3] > 4000, "{seen:?}");
    // Hash 0 and an empty map: run here.
    assert_eq!(get_rps_cpu(0, &map, None, None, &v), None);
    assert_eq!(get_rps_cpu(5, &[], None, None, &v), None);
    // A worker that is gone is skipped.
    let online = [true, false, true, false];
    let v = View {
        backlogs: &backlogs,
        online: &online,
    };
    assert_eq!(get_rps_cpu(5, &map, None, None, &v), None);
}

/// Each worker processes 0..=2 packets, delivering them in order of its
/// queue; a sequence number below the highest delivered is a reorder.
fn work(
    rng: &mut Pcg64Mcg,
    queues: &mut [VecDeque<u64>],
    backlogs: &mut [Backlog],
    last: &mut Option<u64>,
    reordered: &mut u64,
) {
    for (i, q) in queues.iter_mut().enumerate() {
        let k = rng.gen_range(0..=2).min(q.len());
        backlogs[i].dequeue(k);
        for _ in 0..k {
            let seq = q.pop_front().unwrap();
            if last.is_some_and(|l| seq < l) {
                *reordered += 1;
            }
            *last = Some(last.map_or(seq, |l| l.max(seq)));
        }
        backlogs[i].processed(k);
    }
}

/// One flow, two workers that process their backlogs at random speeds, and
/// a reader that migrates between them at random. Returns the packets
/// delivered out of order.
fn migrate(rfs: bool, seed: u64) -> (u64, u64) {
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    let sock = SockFlowTable::new(4096);
    let mut flows = DevFlowTable::new(256);
    let mut backlogs = vec![Backlog::new(1000, None); 2];
    let mut queues: Vec<VecDeque<u64>> = vec![VecDeque::new(); 2];
    let online = [true, true];
    let hash = 0x9e37_79b9;
    let mut reader = 0u32;
    sock.record(hash, reader);
    let (mut next, mut last, mut reordered, mut moves) = (0u64, None::<u64>, 0u64, 0u64);
    for _ in 0..20_000 {
        if rng.gen_ratio(1, 50) {
            reader ^= 1;
            sock.record(hash, reader);
        }
        // A packet arrives, at 60 % of the workers' mean speed (a flow
        // moves in a gap of its traffic, as in the kernel).
        if !rng.gen_ratio(3, 5) {
            work(
                &mut rng,
                &mut queues,
                &mut backlogs,
                &mut last,
                &mut reordered,
            );
            continue;
        }
        let w = if rfs {
            let v = View {
                backlogs: &backlogs,
                online: &online,
            };
            get_rps_cpu(hash, &[0, 1], Some(&flows), Some(&sock), &v)
                .unwrap()
                .0
        } else {
            sock.desired_cpu(hash).unwrap() as Worker
        };
        if let Enqueued::Queued { tail, .. } = backlogs[w as usize].enqueue(hash, false) {
            if rfs {
                let prev = flows.get(hash).cpu;
                if prev != w && prev != NO_WORKER {
                    moves += 1;
                }
                flows.set(hash, w, tail, &Idle);
            }
            queues[w as usize].push_back(next);
            next += 1;
        }
        work(
            &mut rng,
            &mut queues,
            &mut backlogs,
            &mut last,
            &mut reordered,
        );
    }
    (reordered, moves)
}

#[test]
fn rfs_moves_a_flow_only_after_the_old_backlog_passed_its_last_tail() {
    for seed in 0..8 {
        let (naive, _) = migrate(false, seed);
        let (rfs, moves) = migrate(true, seed);
        assert!(
            naive > 0,
            "steering straight to the reader reorders (seed {seed})"
        );
        assert_eq!(rfs, 0, "RFS keeps the flow in order (seed {seed})");
        assert!(
            moves > 10,
            "and still follows the reader: {moves} moves (seed {seed})"
        );
    }
    // The rule itself: desired 1, current 0 with the flow's last tail 5.
    let sock = SockFlowTable::new(64);
    let mut flows = DevFlowTable::new(64);
    let h = 77;
    sock.record(h, 1);
    flows.set(h, 0, 5, &Idle);
    let mut backlogs = vec![Backlog::new(1000, None); 2];
    for _ in 0..5 {
        backlogs[0].enqueue(h, false);
    }
    backlogs[0].dequeue(5);
    backlogs[0].processed(4);
    let online = [true, true];
    let pick = |flows: &DevFlowTable, b: &[Backlog], online: &[bool]| {
        get_rps_cpu(
            h,
            &[],
            Some(flows),
            Some(&sock),
            &View {
                backlogs: b,
                online,
            },
        )
    };
    assert_eq!(
        pick(&flows, &backlogs, &online),
        Some((0, true)),
        "head 4 < tail 5: stay"
    );
    backlogs[0].processed(1);
    assert_eq!(
        pick(&flows, &backlogs, &online),
        Some((1, true)),
        "head 5: move"
    );
    // The current worker gone: move at once.
    backlogs[0] = Backlog::new(1000, None);
    flows.set(h, 0, 100, &Idle);
    assert_eq!(pick(&flows, &backlogs, &[false, true]), Some((1, true)));
}

#[test]
fn rfs_first_move_off_an_rps_worker_waits_for_its_backlog() {
    // The flow's first packets go by `rps_cpus` (no reader yet); the
    // entry records where, so the move to the reader's worker waits until
    // that backlog has processed them (the kernel moves at once here).
    let sock = SockFlowTable::new(64);
    let mut flows = DevFlowTable::new(64);
    let map: [Worker; 2] = [0, 1];
    let online = [true, true];
    let mut backlogs = vec![Backlog::new(1000, None); 2];
    // A hash that rps_cpus sends to worker 0; its reader will be on 1.
    let h = (1..u32::MAX)
        .find(|&h| map[reciprocal_scale(h, 2) as usize] == 0)
        .unwrap();
    let pick = |flows: &DevFlowTable, b: &[Backlog]| {
        get_rps_cpu(
            h,
            &map,
            Some(flows),
            Some(&sock),
            &View {
                backlogs: b,
                online: &online,
            },
        )
    };
    for _ in 0..3 {
        let (w, save) = pick(&flows, &backlogs).unwrap();
        assert_eq!((w, save), (0, true), "by rps_cpus, recorded");
        let Enqueued::Queued { tail, .. } = backlogs[0].enqueue(h, false) else {
            panic!("queued")
        };
        flows.set(h, w, tail, &Idle);
    }
    sock.record(h, 1);
    assert_eq!(
        pick(&flows, &backlogs),
        Some((0, true)),
        "three packets still queued on 0: stay"
    );
    backlogs[0].dequeue(3);
    backlogs[0].processed(3);
    assert_eq!(pick(&flows, &backlogs), Some((1, true)), "drained: move");
}

#[test]
fn head_and_tail_compare_across_the_wrap() {
    // get_rps_cpu's (int)(head - last_qtail) >= 0 holds across u32 wrap.
    let sock = SockFlowTable::new(64);
    let mut flows = DevFlowTable::new(64);
    let h = 1234;
    sock.record(h, 1);
    let mut b = Backlog::new(1000, None);
    // Advance both counters close to the wrap.
    for _ in 0..3 {
        b.enqueue(h, false);
    }
    b.dequeue(3);
    b.processed(3);
    let mut backlogs = vec![b, Backlog::new(1000, None)];
    // Pretend the flow's last tail is 2 past u32::MAX (wrapped to 1) while
    // the head is at u32::MAX - 1: not yet passed.
    backlogs[0].processed((u32::MAX - 4) as usize);
    assert_eq!(backlogs[0].head(), u32::MAX - 1);
    flows.set(h, 0, 1, &Idle);
    let online = [true, true];
    let v = View {
        backlogs: &backlogs,
        online: &online,
    };
    assert_eq!(
        get_rps_cpu(h, &[], Some(&flows), Some(&sock), &v),
        Some((0, true))
    );
    backlogs[0].processed(3);
    assert_eq!(backlogs[0].head(), 1);
    let v = View {
        backlogs: &backlogs,
        online: &online,
    };
    assert_eq!(
        get_rps_cpu(h, &[], Some(&flows), Some(&sock), &v),
        Some((1, true))
    );
}

#[test]
fn flow_limit_drops_the_elephant_and_spares_the_mice() {
    let mut b = Backlog::new(200, Some(FlowLimit::new(4096)));
    let elephant = 0xdead_beef;
    let mut rng = Pcg64Mcg::seed_from_u64(3);
    let (mut mice_sent, mut mice_dropped, mut eleph_dropped) = (0, 0, 0);
    for i in 0..2000 {
        // 80 % of the packets are one flow; nothing is processed, so the
        // backlog fills past half.
        let (h, mouse) = if i % 5 == 0 {
            (rng.gen_range(1..u32::MAX), true)
        } else {
            (elephant, false)
        };
        let r = b.enqueue(h, false);
        if mouse {
            mice_sent += 1;
            mice_dropped += !matches!(r, Enqueued::Queued { .. }) as u32;
        } else {
            eleph_dropped += matches!(r, Enqueued::FlowLimited) as u32;
        }
        if b.len() > 150 {
            // Keep the backlog between half and full: a slow worker.
            b.dequeue(1);
            b.processed(1);
        }
    }
    let s = b.stats();
    assert!(
        eleph_dropped > 500,
        "the elephant is limited: {eleph_dropped}"
    );
    assert_eq!(mice_dropped, 0, "no mouse dropped ({mice_sent} sent)");
    assert_eq!(s.flow_limit_count, eleph_dropped as u64);
    assert_eq!(s.dropped, s.flow_limit_count, "no backlog_full here");
}

#[test]
fn a_full_backlog_is_a_counted_drop() {
    let mut b = Backlog::new(10, None);
    let mut queued = 0;
    for i in 0..100u32 {
        match b.enqueue(i + 1, i % 2 == 0) {
            Enqueued::Queued { was_empty, .. } => {
                assert_eq!(was_empty, queued == 0, "the first one wakes the worker");
                queued += 1;
            }
            Enqueued::Full => {}
            Enqueued::FlowLimited => unreachable!("no flow limit"),
        }
    }
    // qlen > netdev_max_backlog drops: the queue holds max + 1.
    assert_eq!(queued, 11);
    let s = b.stats();
    assert_eq!(s.dropped, 89);
    assert_eq!(queued + s.dropped, 100, "every packet queued or counted");
    assert_eq!(
        s.received_rps, 6,
        "even-numbered ones came from another worker"
    );
    b.dequeue(11);
    b.processed(11);
    assert_eq!((b.head(), b.tail(), b.stats().processed), (11, 11, 11));
}

/// Many flows share one set of the dev flow table (12 flows, 4 ways) while
/// their readers move at random and the workers run at random speeds: no
/// flow is reordered (an entry changes flow only when its flow has nothing
/// in flight; with every entry busy the packet runs at once, here), flows
/// still follow their readers, and some packets did run here. The same
/// with `rps_flow_cnt` changed every 2000 packets while they flow (4 to
/// 64 entries; flows in flight that a smaller table cannot hold spill):
/// every resize takes effect at once (the workers stall before each, so
/// that busy flows spill) and still nothing is reordered.
#[test]
fn colliding_flows_never_reorder_each_other() {
    for seed in 0..8u64 {
        colliding_flows(seed, false);
        colliding_flows(seed, true);
    }
}

fn colliding_flows(seed: u64, resize: bool) {
    let mut spilled = 0;
    {
        let mut rng = Pcg64Mcg::seed_from_u64(seed);
        let sock = SockFlowTable::new(1024);
        let mut flows = DevFlowTable::new(DEV_FLOW_WAYS);
        let hashes: Vec<u32> = (0..12u32).map(|i| 0x1000_0001 + i * 0x0101_0101).collect();
        for (i, h) in hashes.iter().enumerate() {
            sock.record(*h, i as u32 & 1);
        }
        let mut backlogs = vec![Backlog::new(100_000, None); 2];
        let mut queues: Vec<VecDeque<(usize, u64)>> = vec![VecDeque::new(); 2];
        let mut last: Vec<Option<u64>> = vec![None; hashes.len()];
        let (mut reordered, mut moves, mut here) = (0u64, 0u64, 0u64);
        let mut deliver = |f: usize, seq: u64, last: &mut Vec<Option<u64>>| {
            if last[f].is_some_and(|l| seq < l) {
                reordered += 1;
            }
            last[f] = Some(seq);
        };
        let online = [true, true];
        for n in 0..40_000u64 {
            if rng.gen_ratio(1, 20) {
                let f = rng.gen_range(0..hashes.len());
                sock.record(hashes[f], rng.gen_range(0..2));
            }
            let f = rng.gen_range(0..hashes.len());
            let h = hashes[f];
            let v = View {
                backlogs: &backlogs,
                online: &online,
            };
            match get_rps_cpu(h, &[0, 1], Some(&flows), Some(&sock), &v) {
                None => {
                    here += 1;
                    deliver(f, n, &mut last);
                }
                Some((w, _)) => {
                    let prev = flows.get(h).cpu;
                    let Enqueued::Queued { tail, .. } = backlogs[w as usize].enqueue(h, false)
                    else {
                        panic!("queued")
                    };
                    let v = View {
                        backlogs: &backlogs,
                        online: &online,
                    };
                    assert!(flows.set(h, w, tail, &v), "checked by get_rps_cpu");
                    moves += (prev != NO_WORKER && prev != w) as u64;
                    queues[w as usize].push_back((f, n));
                }
            }
            // Each worker processes 0..=2 packets, slower at times, and
            // (with resizes) not at all for the 50 packets before one.
            let stalled = resize && n % 2000 >= 1950;
            for w in (0..2).filter(|_| !stalled) {
                for _ in 0..rng.gen_range(0..=2) {
                    if let Some((f, seq)) = queues[w].pop_front() {
                        backlogs[w].dequeue(1);
                        deliver(f, seq, &mut last);
                        backlogs[w].processed(1);
                    }
                }
            }
            let v = View {
                backlogs: &backlogs,
                online: &online,
            };
            if resize && n % 2000 == 1999 {
                let entries = DEV_FLOW_WAYS << rng.gen_range(0..5);
                flows = flows.resized(entries, &v);
                assert_eq!(flows.len(), entries, "seed {seed}: a resize takes effect");
                spilled += flows.spilled();
            }
            flows.tidy(&v);
        }
        if resize {
            assert!(spilled > 0, "seed {seed}: some resizes spilled busy flows");
        }
        assert_eq!(reordered, 0, "seed {seed}: no flow reordered");
        assert!(
            moves > 100,
            "seed {seed}: flows follow their readers: {moves}"
        );
        assert!(here > 0, "seed {seed}: some packets found every entry busy");
    }
}

/// `rps_flow_cnt` changed while packets flow: the new table keeps every
/// flow with packets in flight (its worker and tail), drops the idle ones,
/// and what its sets cannot hold waits in the spill list, still steered to
/// its worker, until it drains.
#[test]
fn a_resized_dev_flow_table_keeps_the_flows_in_flight() {
    let mut backlogs = vec![Backlog::new(100_000, None); 2];
    let online = [true, true];
    let mut flows = DevFlowTable::new(256);
    let hashes: Vec<u32> = (1..=40u32).map(|i| i.wrapping_mul(0x9e37_79b9)).collect();
    for (i, &h) in hashes.iter().enumerate() {
        let w = (i % 2) as Worker;
        let Enqueued::Queued { tail, .. } = backlogs[w as usize].enqueue(h, false) else {
            panic!("queued")
        };
        let v = View {
            backlogs: &backlogs,
            online: &online,
        };
        assert!(flows.set(h, w, tail, &v));
    }
    // Worker 0 processes everything it has: its 20 flows are idle now.
    let n0 = backlogs[0].len();
    backlogs[0].dequeue(n0);
    backlogs[0].processed(n0);
    let v = View {
        backlogs: &backlogs,
        online: &online,
    };
    let bigger = flows.resized(1024, &v);
    assert_eq!((bigger.len(), bigger.spilled()), (1024, 0));
    for (i, &h) in hashes.iter().enumerate() {
        let e = bigger.get(h);
        if i % 2 == 1 {
            assert_eq!(e, flows.get(h), "busy flow {i} kept");
        } else {
            assert_eq!(e.cpu, NO_WORKER, "idle flow {i} left out");
        }
    }
    // 20 busy flows in one set of 4 ways: 4 in the set, 16 spilled, every
    // one still where it was; a new flow finds the set busy and runs here.
    let sock = SockFlowTable::new(1024);
    let mut small = flows.resized(DEV_FLOW_WAYS, &v);
    assert_eq!((small.len(), small.spilled()), (DEV_FLOW_WAYS, 16));
    for (i, &h) in hashes.iter().enumerate().filter(|(i, _)| i % 2 == 1) {
        assert_eq!(small.get(h), flows.get(h), "busy flow {i} kept");
        sock.record(h, 0);
        assert_eq!(
            get_rps_cpu(h, &[0, 1], Some(&small), Some(&sock), &v),
            Some((1, true)),
            "busy flow {i} stays on its worker though its reader is on 0"
        );
    }
    let new = 0x5151_5151;
    sock.record(new, 0);
    assert_eq!(
        get_rps_cpu(new, &[0, 1], Some(&small), Some(&sock), &v),
        None
    );
    // A spilled flow's next packet updates its spill entry.
    let h = hashes[39];
    let Enqueued::Queued { tail, .. } = backlogs[1].enqueue(h, false) else {
        panic!("queued")
    };
    let v = View {
        backlogs: &backlogs,
        online: &online,
    };
    assert!(small.set(h, 1, tail, &v));
    assert_eq!(small.get(h).last_qtail, tail);
    small.tidy(&v);
    assert_eq!(small.spilled(), 16, "nothing drained yet");
    // Once worker 1 has drained, the spill empties and flows move freely.
    let n1 = backlogs[1].len();
    backlogs[1].dequeue(n1);
    backlogs[1].processed(n1);
    let v = View {
        backlogs: &backlogs,
        online: &online,
    };
    small.tidy(&v);
    assert_eq!(small.spilled(), 0);
    assert_eq!(
        get_rps_cpu(h, &[0, 1], Some(&small), Some(&sock), &v),
        Some((0, true))
    );
    let again = flows.resized(DEV_FLOW_WAYS, &v);
    assert_eq!(again.spilled(), 0);
    assert!(hashes.iter().all(|&h| again.get(h).cpu == NO_WORKER));
}
