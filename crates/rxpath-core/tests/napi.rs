//! NAPI semantics on the simulated NIC, driven by hand with simulated time.

// Tests may start threads and wait (the lint keeps the core itself sans-I/O).
#![allow(clippy::disallowed_methods)]

use rxpath_core::napi::{
    bits, BundleMode, Napi, NapiState, NapiTable, MIN_NAPI_ID, NAPI_POLL_WEIGHT,
};
use rxpath_core::packet::{Sink, Stack};
use rxpath_core::softnet::{Softnet, SoftnetConfig};
use rxpath_core::time::{ManualClock, SteppingClock};
use rxpath_core::{DropReason, Packet, RxCtx};
use rxpath_dev::sim::{
    self, Coalesce, Mix, SimConfig, SimPort, SimRxQueue, Traffic, TrafficConfig,
};
use rxpath_dev::RxQueue;
use rxpath_wire::toeplitz::Toeplitz;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

fn nic(queues: usize, ring: usize) -> (SimPort, Vec<SimRxQueue>) {
    sim::build(&SimConfig {
        queues,
        ring_size: ring,
        frames_per_queue: ring * 2,
        ..Default::default()
    })
    .unwrap()
}

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

/// Fill every queue with at least `n` packets.
fn fill(port: &mut SimPort, t: &mut Traffic, n: usize) {
    let mut per_q = vec![0; port.queues()];
    while per_q.iter().any(|&c| c < n) {
        if let Ok(q) = port.send(t) {
            per_q[q] += 1;
        }
    }
    port.flush(1);
}

fn napis(queues: Vec<SimRxQueue>, bundle: usize, interrupts: bool) -> Vec<Napi<SimRxQueue>> {
    queues
        .into_iter()
        .map(|q| {
            Napi::new(
                q,
                NAPI_POLL_WEIGHT,
                BundleMode {
                    size: bundle,
                    split_on_hash: false,
                },
                interrupts,
            )
        })
        .collect()
}

/// Counts what the stack sees per poll, to check the budget from inside.
#[derive(Default)]
struct Counting {
    seen: usize,
}
impl Stack for Counting {
    fn receive(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        self.seen += 1;
        ctx.deliver(pkt);
    }
}

fn schedule_all(n: &mut [Napi<SimRxQueue>], sn: &mut Softnet) {
    for (i, x) in n.iter().enumerate() {
        assert!(x.state().schedule_prep());
        sn.schedule(i);
    }
}

fn reclaim(port: SimPort, napis: Vec<Napi<SimRxQueue>>) -> bool {
    let queues = napis.into_iter().map(|n| n.into_queue()).collect();
    port.reclaim(queues).is_home()
}

#[test]
fn a_poll_never_takes_more_than_its_budget() {
    let (mut port, queues) = nic(1, 1024);
    let mut t = udp(8);
    fill(&mut port, &mut t, 200);
    for bundle in [1, 16, 64] {
        let (mut port2, queues2) = nic(1, 1024);
        fill(&mut port2, &mut udp(8), 200);
        let mut n = napis(queues2, bundle, true);
        assert!(n[0].state().schedule_prep());
        for budget in [1, 7, 64, 64] {
            let mut s = Counting::default();
            let r = n[0].poll(budget, &mut s, 0);
            assert_eq!(r.work, budget, "bundle {bundle}");
            assert_eq!(s.seen, budget);
            assert!(!r.completed, "a full poll stays scheduled");
            assert_ne!(n[0].state().bits() & bits::SCHED, 0);
        }
        // 200 - 136 = 64 left: a 64 budget takes them all but is "full".
        let r = n[0].poll(100, &mut Counting::default(), 0);
        assert_eq!(r.work, 64);
        assert!(r.completed, "a poll below budget completes");
        assert_eq!(n[0].state().bits() & bits::SCHED, 0);
        assert!(n[0].stats().accounted());
        assert!(reclaim(port2, n));
    }
    assert!(port.reclaim(queues).is_home());
}

#[test]
fn net_rx_action_polls_each_napi_once_with_its_weight() {
    let (mut port, queues) = nic(2, 1024);
    let mut t = udp(64);
    fill(&mut port, &mut t, 300);
    let mut n = napis(queues, 16, true);
    let mut sn = Softnet::new(SoftnetConfig::default());
    schedule_all(&mut n, &mut sn);
    let clock = ManualClock::new(0);
    let r = sn.net_rx_action(&mut n, &mut Sink, &clock);
    // 64 + 64 < 300, but each NAPI is polled once per call (repoll list).
    assert_eq!((r.work, r.polls, r.squeezed), (128, 2, false));
    assert_eq!(sn.pending(), 2, "both used their weight and stay listed");
    assert_eq!(sn.stats().time_squeeze, 0);
    while sn.pending() > 0 {
        sn.net_rx_action(&mut n, &mut Sink, &clock);
    }
    let total: u64 = n.iter().map(|x| x.stats().received).sum();
    let offered: u64 = n.iter().map(|x| x.queue().stats().rx_ring).sum();
    assert_eq!(total, offered);
    assert!(n
        .iter()
        .all(|x| x.stats().polls_full + x.stats().completions == x.stats().polls));
    assert!(reclaim(port, n));
}

#[test]
fn netdev_budget_is_honoured_and_time_squeeze_counted() {
    let (mut port, queues) = nic(6, 1024);
    let mut t = udp(256);
    fill(&mut port, &mut t, 200);
    let mut n = napis(queues, 64, true);
    let mut sn = Softnet::new(SoftnetConfig {
        netdev_budget: 300,
        netdev_budget_usecs: 2000,
    });
    schedule_all(&mut n, &mut sn);
    let clock = ManualClock::new(0);
    let r = sn.net_rx_action(&mut n, &mut Sink, &clock);
    // 64 × 5 = 320 ≥ 300: the fifth poll exhausts the budget.
    assert_eq!((r.work, r.polls, r.squeezed), (320, 5, true));
    assert_eq!(sn.stats().time_squeeze, 1);
    assert_eq!(n[5].stats().polls, 0);
    // The NAPI that was not polled is first in line next time.
    let r = sn.net_rx_action(&mut n, &mut Sink, &clock);
    assert_eq!(n[5].stats().polls, 1);
    assert_eq!(r.polls, 5);
    while sn.pending() > 0 {
        sn.net_rx_action(&mut n, &mut Sink, &clock);
    }
    assert!(reclaim(port, n));
}

#[test]
fn netdev_budget_usecs_is_honoured() {
    let (mut port, queues) = nic(4, 1024);
    let mut t = udp(64);
    fill(&mut port, &mut t, 100);
    let mut n = napis(queues, 16, true);
    let mut sn = Softnet::new(SoftnetConfig {
        netdev_budget: 100_000,
        netdev_budget_usecs: 2000,
    });
    schedule_all(&mut n, &mut sn);
    // Every clock read advances 900 µs: one read at the start (0), one after
    // each poll (900, 1800, 2700): the limit (2000 µs) is seen after the
    // third poll, with a fourth NAPI still listed.
    let clock = SteppingClock::new(900_000);
    let r = sn.net_rx_action(&mut n, &mut Sink, &clock);
    assert_eq!(r.polls, 3);
    assert!(r.squeezed);
    assert_eq!(sn.stats().time_squeeze, 1);
    assert_eq!(sn.pending(), 4);
    while sn.pending() > 0 {
        sn.net_rx_action(&mut n, &mut Sink, &ManualClock::new(0));
    }
    assert!(reclaim(port, n));
}

/// Place one packet of each flow in `flows` (of `t`'s UDP flows), in
/// order, and publish them.
fn inject_flows(port: &mut SimPort, t: &mut Traffic, flows: impl Iterator<Item = usize>) {
    let mut buf = [0u8; 2048];
    for f in flows {
        let w = t.write_flow(f, &mut buf).unwrap();
        port.inject(&buf[..w.len], w.rxhash).unwrap();
    }
    port.flush(1);
}

#[test]
fn split_on_hash_cuts_bundles_where_the_flow_changes() {
    let (mut port, queues) = nic(1, 1024);
    // Two flows, alternating in runs of 3: A A A B B B A A A ...
    inject_flows(&mut port, &mut udp(2), (0..24).map(|i| (i / 3) % 2));
    let mut n = Napi::new(
        queues.into_iter().next().unwrap(),
        64,
        BundleMode {
            size: 16,
            split_on_hash: true,
        },
        true,
    );
    assert!(n.state().schedule_prep());
    let r = n.poll(64, &mut Sink, 0);
    assert_eq!(r.work, 24);
    assert_eq!(n.stats().bundles, 8, "one bundle per run of 3");
    assert!(n.stats().accounted());
    assert!(port.reclaim(vec![n.into_queue()]).is_home());
}

/// One queue in interrupt mode whose NIC raises the line for every frame.
fn one_queue_interrupting_every_frame() -> (SimPort, Vec<Napi<SimRxQueue>>) {
    let cfg = SimConfig {
        queues: 1,
        ring_size: 256,
        frames_per_queue: 512,
        coalesce: Coalesce::EVERY_FRAME,
        ..Default::default()
    };
    let (port, queues) = sim::build(&cfg).unwrap();
    (port, napis(queues, 16, true))
}

#[test]
fn completion_rearms_the_interrupt_and_catches_a_racing_packet() {
    let (mut port, mut n) = one_queue_interrupting_every_frame();
    let mut t = udp(4);
    port.send(&mut t).unwrap();
    port.flush(10);
    assert!(n[0].take_irq(), "interrupt taken, NAPI scheduled");
    assert_eq!(n[0].stats().wakeups, 1);
    assert!(
        !n[0].queue().irq().unwrap().is_armed(),
        "masked while scheduled"
    );
    // More packets while scheduled: no new interrupt.
    port.send(&mut t).unwrap();
    port.flush(20);
    assert_eq!(n[0].queue().stats().wakeups, 1);
    let r = n[0].poll(64, &mut Sink, 0);
    assert_eq!((r.work, r.completed), (2, true));
    assert!(
        n[0].queue().irq().unwrap().is_armed(),
        "re-armed by napi_complete_done"
    );
    assert!(reclaim(port, n));
}

/// `napi_defer_hard_irqs` with `gro_flush_timeout` (net/core/dev.c
/// `napi_complete_done`): a poll that did work leaves the line masked and
/// arms the timer instead; packets that come meanwhile raise nothing and
/// are taken by the timer's poll; `defer_hard_irqs` empty polls in a row
/// later the line is armed again.
#[test]
fn deferred_interrupts_leave_the_line_masked_and_the_timer_polls() {
    let (mut port, mut n) = one_queue_interrupting_every_frame();
    let flush = rxpath_core::gro::GroKnob::new(200_000);
    n[0].set_defer_hard_irqs(rxpath_core::gro::GroKnob::new(2), flush.clone());
    let mut t = udp(4);
    let line = |n: &Napi<SimRxQueue>| n.queue().irq().unwrap().is_armed();
    port.send(&mut t).unwrap();
    port.flush(10);
    assert!(n[0].take_irq());
    let r = n[0].poll(64, &mut Sink, 1_000);
    assert_eq!((r.work, r.completed), (1, true));
    assert!(!line(&n[0]), "work done: the line stays masked");
    assert_eq!(n[0].timer(), Some(201_000), "the timer polls next");
    assert_eq!(n[0].stats().irq_deferrals, 1);
    // Three packets while deferred: no interrupt, the timer takes them.
    for _ in 0..3 {
        port.send(&mut t).unwrap();
    }
    port.flush(20);
    assert_eq!(n[0].queue().stats().wakeups, 1, "masked: no interrupt");
    assert!(!n[0].take_irq());
    assert!(!n[0].fire_timer(200_999), "not due yet");
    assert!(n[0].fire_timer(201_000));
    let r = n[0].poll(64, &mut Sink, 201_000);
    assert_eq!((r.work, r.completed), (3, true));
    assert!(!line(&n[0]));
    assert_eq!(n[0].timer(), Some(401_000));
    // Two empty polls (defer_hard_irqs = 2): the first still defers, the
    // second re-arms the line and arms no timer.
    assert!(n[0].fire_timer(401_000));
    let r = n[0].poll(64, &mut Sink, 401_000);
    assert_eq!((r.work, r.completed), (0, true));
    assert!(!line(&n[0]));
    assert_eq!(n[0].timer(), Some(601_000));
    assert!(n[0].fire_timer(601_000));
    let r = n[0].poll(64, &mut Sink, 601_000);
    assert_eq!((r.work, r.completed), (0, true));
    assert!(
        line(&n[0]),
        "defer_hard_irqs empty polls: the line is armed"
    );
    assert_eq!(n[0].timer(), None);
    assert_eq!(n[0].stats().irq_deferrals, 3);
    // The next packet interrupts at once.
    port.send(&mut t).unwrap();
    port.flush(30);
    assert!(n[0].take_irq());
    // gro_flush_timeout 0 turns deferral off, as in the kernel.
    flush.set(0);
    let r = n[0].poll(64, &mut Sink, 700_000);
    assert_eq!((r.work, r.completed), (1, true));
    assert!(line(&n[0]));
    assert_eq!(n[0].timer(), None);
    assert!(n[0].stats().accounted());
    assert!(reclaim(port, n));
}

/// A queue whose packets become visible only after the poll's last pull,
/// as when a packet lands between the driver's final check and the re-arm.
struct Racy {
    inner: SimRxQueue,
    hide: bool,
}
impl RxQueue for Racy {
    fn umem(&self) -> &std::sync::Arc<rxpath_dev::Umem> {
        self.inner.umem()
    }
    fn queue_index(&self) -> u16 {
        0
    }
    fn pull(&mut self) -> Option<rxpath_dev::Desc> {
        if self.hide {
            None
        } else {
            self.inner.pull()
        }
    }
    fn pull_done(&mut self) {
        self.inner.pull_done();
        self.hide = false;
    }
    fn recycle(&mut self, f: rxpath_dev::Frame) {
        self.inner.recycle(f)
    }
    fn recycle_done(&mut self) {
        self.inner.recycle_done()
    }
    fn irq(&self) -> Option<&rxpath_dev::IrqLine> {
        self.inner.irq()
    }
    fn has_pending(&mut self) -> bool {
        self.inner.has_pending()
    }
    fn device_stats(&self) -> rxpath_dev::DeviceQueueStats {
        self.inner.stats()
    }
}

#[test]
fn a_packet_racing_with_completion_raises_the_line_at_rearm() {
    let cfg = SimConfig {
        queues: 1,
        ring_size: 256,
        frames_per_queue: 512,
        ..Default::default()
    };
    let (mut port, queues) = sim::build(&cfg).unwrap();
    let q = Racy {
        inner: queues.into_iter().next().unwrap(),
        hide: true,
    };
    let mut n = Napi::new(q, 64, BundleMode::default(), true);
    n.queue().irq().unwrap().disarm(); // masked: the packet raises nothing
    port.send(&mut udp(1)).unwrap();
    port.flush(1);
    assert_eq!(n.queue().device_stats().wakeups, 0);
    assert!(n.state().schedule_prep());
    let r = n.poll(64, &mut Sink, 0);
    assert_eq!(
        (r.work, r.completed),
        (0, true),
        "the poll saw an empty ring"
    );
    assert_eq!(
        n.queue().device_stats().wakeups,
        1,
        "re-arm with work pending raised the line"
    );
    assert!(n.take_irq(), "and the NAPI is scheduled again");
    let r = n.poll(64, &mut Sink, 0);
    assert_eq!(r.work, 1, "the packet is not stranded");
    assert!(port.reclaim(vec![n.into_queue().inner]).is_home());
}

#[test]
fn a_busy_poller_owns_the_napi_and_the_napi_thread_stays_off() {
    let s = NapiState::default();
    assert!(s.try_busy_poll());
    assert!(s.in_busy_poll());
    // The NAPI thread's interrupt handler cannot schedule it...
    assert!(!s.schedule_prep());
    assert_ne!(
        s.bits() & bits::MISSED,
        0,
        "...but records that it missed one"
    );
    // A second busy poller cannot take it either.
    assert!(!s.try_busy_poll());
    // Giving it back reports the missed interrupt, and the NAPI is free.
    assert!(s.busy_poll_stop());
    assert_eq!(s.bits(), 0);
    assert!(s.schedule_prep());
    // While the NAPI thread owns it, a busy poller cannot take it.
    assert!(!s.try_busy_poll());
    assert!(s.complete());
    // Completion with MISSED keeps it scheduled for one more poll.
    assert!(s.schedule_prep());
    assert!(!s.schedule_prep());
    assert!(!s.complete());
    assert_ne!(s.bits() & bits::SCHED, 0);
    assert!(s.complete());
    assert_eq!(s.bits(), 0);
    // Disabled: nobody takes it.
    assert!(s.disable());
    assert!(!s.schedule_prep() && !s.try_busy_poll());
    s.enable();
    assert!(s.try_busy_poll());
}

#[test]
fn two_threads_hammering_one_napi_never_own_it_together() {
    let state = Arc::new(NapiState::default());
    let owners = Arc::new(AtomicU32::new(0));
    let polls = Arc::new(AtomicU64::new(0));
    let run = |busy: bool| {
        let (state, owners, polls) = (state.clone(), owners.clone(), polls.clone());
        std::thread::spawn(move || {
            for _ in 0..200_000 {
                let got = if busy {
                    state.try_busy_poll()
                } else {
                    state.schedule_prep()
                };
                if got {
                    assert_eq!(
                        owners.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two owners at once"
                    );
                    polls.fetch_add(1, Ordering::Relaxed);
                    std::hint::spin_loop();
                    owners.fetch_sub(1, Ordering::SeqCst);
                    if busy {
                        state.busy_poll_stop();
                    } else {
                        while !state.complete() {
                            // MISSED: poll once more while still owning it.
                            assert_eq!(owners.fetch_add(1, Ordering::SeqCst), 0);
                            owners.fetch_sub(1, Ordering::SeqCst);
                        }
                    }
                }
            }
        })
    };
    let (a, b) = (run(true), run(false));
    a.join().unwrap();
    b.join().unwrap();
    assert!(polls.load(Ordering::Relaxed) > 0);
    assert_eq!(state.bits() & (bits::SCHED | bits::IN_BUSY_POLL), 0);
}

#[test]
fn napi_ids_are_unique_and_stamped_on_every_packet() {
    let (mut port, queues) = nic(3, 256);
    let mut n = napis(queues, 16, true);
    let mut table = NapiTable::default();
    let ids: Vec<_> = n
        .iter_mut()
        .map(|x| table.add(x, |x| x.queue().queue_index()))
        .collect();
    assert_eq!(
        ids.iter().map(|i| i.0).collect::<Vec<_>>(),
        vec![MIN_NAPI_ID, MIN_NAPI_ID + 1, MIN_NAPI_ID + 2]
    );
    assert_eq!(table.get(ids[1]), Some(&1));
    struct Check(Vec<(u16, u32)>);
    impl Stack for Check {
        fn receive(&mut self, p: Packet, ctx: &mut RxCtx<'_>) {
            self.0.push((p.meta.queue, p.meta.napi_id.0));
            ctx.deliver(p);
        }
    }
    let mut t = udp(32);
    fill(&mut port, &mut t, 10);
    let mut c = Check(vec![]);
    for x in n.iter_mut() {
        assert!(x.state().schedule_prep());
        let _ = x.poll(64, &mut c, 0);
    }
    assert!(c.0.len() >= 30);
    assert!(c.0.iter().all(|&(q, id)| id == MIN_NAPI_ID + q as u32));
    assert_eq!(table.remove(ids[0]), Some(0));
    assert!(table.get(ids[0]).is_none());
    assert!(reclaim(port, n));
}

#[test]
fn bad_descriptors_and_malformed_frames_are_counted_drops() {
    let (mut port, queues) = nic(1, 256);
    let mut t = udp(1);
    let mut buf = [0u8; 2048];
    let w = t.write_flow(0, &mut buf).unwrap();
    port.inject(&buf[..w.len], 1).unwrap(); // good
    port.inject(&buf[..20], 1).unwrap(); // truncated IPv4
    port.inject(&[0u8; 3], 1).unwrap(); // not even Ethernet
    let mut arp = buf;
    arp[12] = 0x08;
    arp[13] = 0x06;
    port.inject(&arp[..60], 1).unwrap(); // ARP: not for this path
    port.flush(1);
    let mut n = napis(queues, 16, true);
    assert!(n[0].state().schedule_prep());
    let _ = n[0].poll(64, &mut Sink, 0);
    let s = n[0].stats();
    assert_eq!(s.received, 4);
    assert_eq!(s.delivered, 1);
    assert_eq!(s.dropped.get(DropReason::Malformed), 2);
    assert_eq!(s.dropped.get(DropReason::UnhandledProto), 1);
    assert!(s.accounted());
    assert!(reclaim(port, n));
}

/// A queue that counts the descriptors pulled from it.
struct Counted(SimRxQueue, Arc<AtomicU64>);

impl RxQueue for Counted {
    fn umem(&self) -> &Arc<rxpath_dev::Umem> {
        self.0.umem()
    }
    fn queue_index(&self) -> u16 {
        self.0.queue_index()
    }
    fn pull(&mut self) -> Option<rxpath_dev::Desc> {
        let d = self.0.pull()?;
        self.1.fetch_add(1, Ordering::Relaxed);
        Some(d)
    }
    fn pull_done(&mut self) {
        self.0.pull_done()
    }
    fn recycle(&mut self, frame: rxpath_dev::Frame) {
        self.0.recycle(frame)
    }
    fn recycle_done(&mut self) {
        self.0.recycle_done()
    }
    fn irq(&self) -> Option<&rxpath_dev::IrqLine> {
        self.0.irq()
    }
    fn has_pending(&mut self) -> bool {
        self.0.has_pending()
    }
    fn device_stats(&self) -> rxpath_dev::DeviceQueueStats {
        self.0.device_stats()
    }
}

/// Records, for each packet the stack receives, how many descriptors had
/// been pulled by then.
struct PulledAt(Arc<AtomicU64>, Vec<u64>);

impl Stack for PulledAt {
    fn receive(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        self.1.push(self.0.load(Ordering::Relaxed));
        ctx.drop(pkt, DropReason::Rxdrop);
    }
}

#[test]
fn split_on_hash_still_prefetches_a_bundle_ahead() {
    // Every packet of another flow than the one before: bundles of one,
    // but loop 1 keeps 16 descriptors pulled (and prefetched) ahead.
    let (mut port, queues) = nic(1, 1024);
    inject_flows(&mut port, &mut udp(2), (0..40).map(|i| i % 2));
    let pulled = Arc::new(AtomicU64::new(0));
    let q = Counted(queues.into_iter().next().unwrap(), pulled.clone());
    let mut n = Napi::new(
        q,
        64,
        BundleMode {
            size: 16,
            split_on_hash: true,
        },
        true,
    );
    assert!(n.state().schedule_prep());
    let mut s = PulledAt(pulled, Vec::new());
    let r = n.poll(64, &mut s, 0);
    assert_eq!(r.work, 40);
    assert_eq!(n.stats().bundles, 40, "one flow per bundle");
    // Packet i reached the stack with min(i + 16, 40) pulled: ahead.
    let want: Vec<u64> = (0..40).map(|i| (i + 16).min(40)).collect();
    assert_eq!(s.1, want);
    assert!(n.stats().accounted());
    assert!(port.reclaim(vec![n.into_queue().0]).is_home());
}

/// A clock that counts its fine and coarse reads; the coarse one lags a
/// tick (1 ms) behind.
#[derive(Default)]
struct CountingClock {
    fine: AtomicU64,
    coarse: AtomicU64,
}

impl rxpath_core::time::Clock for CountingClock {
    fn now_ns(&self) -> u64 {
        10_000_000 + self.fine.fetch_add(1, Ordering::Relaxed)
    }
    fn coarse_ns(&self) -> u64 {
        self.coarse.fetch_add(1, Ordering::Relaxed);
        9_000_000
    }
}

/// A sink that reads the time (as the latency sink and a capture do) and
/// records each packet's stamp.
#[derive(Default)]
struct Stamps(Vec<u64>);

impl Stack for Stamps {
    fn receive(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        self.0.push(pkt.meta.rx_ns);
        ctx.drop(pkt, DropReason::Rxdrop);
    }
}

/// One `net_rx_action` over a queue of 200 packets with `stack` (GRO on
/// or off), then the rest drained; returns (fine reads, coarse reads,
/// polls) of the first call, after checking every frame came home.
fn clock_reads<S: Stack>(stack: &mut S, gro: bool) -> (u64, u64, usize) {
    let (mut port, queues) = nic(1, 1024);
    fill(&mut port, &mut udp(8), 200);
    let mut n = napis(queues, 16, true);
    if gro {
        n[0].set_gro(Some(rxpath_core::gro::GroConfig::default()));
    }
    let mut sn = Softnet::new(SoftnetConfig::default());
    schedule_all(&mut n, &mut sn);
    let clock = CountingClock::default();
    let r = sn.net_rx_action(&mut n, stack, &clock);
    assert!(r.work > 0);
    let reads = (
        clock.fine.load(Ordering::Relaxed),
        clock.coarse.load(Ordering::Relaxed),
        r.polls,
    );
    while sn.pending() > 0 {
        sn.net_rx_action(&mut n, stack, &clock);
    }
    for x in n.iter_mut() {
        x.flush_gro(stack, 20_000_000);
    }
    assert!(reclaim(port, n));
    reads
}

/// `net_rx_action` reads the fine clock once per poll only when someone
/// reads the time (a stage that says so, or GRO); otherwise the coarse
/// one (the kernel's jiffies), and no fine read at all.
#[test]
fn net_rx_action_reads_the_fine_clock_only_for_who_reads_the_time() {
    // Sink reads no time: one coarse read at the start, one after each poll.
    let (fine, coarse, polls) = clock_reads(&mut Sink, false);
    assert_eq!((fine, coarse), (0, 1 + polls as u64));

    // A stage that reads the time: fine reads instead, and every packet
    // stamped with a fine reading.
    let mut st = Stamps::default();
    let (fine, coarse, polls) = clock_reads(&mut st, false);
    assert_eq!((fine, coarse), (1 + polls as u64, 0));
    assert_eq!(st.0.len(), 200);
    assert!(st.0.iter().all(|&t| t >= 10_000_000));

    // GRO reads the time itself: fine reads even behind a sink that does not.
    let (fine, coarse, polls) = clock_reads(&mut Sink, true);
    assert_eq!((fine, coarse), (1 + polls as u64, 0));
}

/// Sockets with `UDP_GRO`: all of them, or none (switched while running).
#[derive(Debug)]
struct AllOrNone(std::sync::atomic::AtomicBool);

impl rxpath_core::gro::UdpGroPolicy for AllOrNone {
    fn wants(&self, _: &rxpath_wire::FlowKey) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Each packet a stage saw: its first datagram's sequence number and how
/// many datagrams it carries.
#[derive(Default)]
struct Seqs(Vec<(u32, u64)>);

impl Stack for Seqs {
    fn receive(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        let at = pkt.meta.headers.l4_offset as usize + 8;
        let b = ctx.data(&pkt);
        let seq = u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        self.0.push((seq, pkt.frames()));
        ctx.deliver(pkt);
    }
}

/// UDP that no socket asked to merge goes past GRO without GRO taking the
/// packet (`Gro::passes`, the kernel's `udp_encap_needed_key` branch),
/// counted as GRO's normal path counts it; a datagram behind a held packet
/// of its own flow still waits for that packet to go up first.
#[test]
fn udp_nobody_merges_goes_past_gro_counted_and_in_order() {
    use rxpath_core::gro::{Check, GroConfig, GroKnob};
    let (mut port, queues) = nic(1, 1024);
    let wants = Arc::new(AllOrNone(true.into()));
    let mut n = napis(queues, 16, false).pop().unwrap();
    n.set_gro(Some(GroConfig {
        enabled: true,
        udp: Some(wants.clone()),
        // Held packets stay held across polls until flushed by hand.
        flush_timeout: GroKnob::new(1_000_000_000),
        adaptive: None,
    }));
    let mut seen = Seqs::default();
    // One traffic source, so sequence numbers go on across injections.
    let mut t = udp(2);
    // Flow 0's datagrams 1-4 for a socket that merges: one packet, held.
    inject_flows(&mut port, &mut t, std::iter::repeat_n(0, 4));
    assert!(n.state().schedule_prep());
    assert_eq!(n.poll(64, &mut seen, 10).work, 4);
    assert_eq!(n.gro().unwrap().held(), 4);
    assert!(seen.0.is_empty());
    // The socket stops merging: datagrams 5-8 go up alone, after 1-4.
    wants.0.store(false, Ordering::Relaxed);
    inject_flows(&mut port, &mut t, std::iter::repeat_n(0, 4));
    assert!(n.state().schedule_prep());
    assert_eq!(n.poll(64, &mut seen, 20).work, 4);
    assert_eq!(seen.0, vec![(1, 4), (5, 1), (6, 1), (7, 1), (8, 1)]);
    // Nothing held: 100 datagrams of two flows straight past GRO.
    inject_flows(&mut port, &mut t, (0..100).map(|i| i % 2));
    assert!(n.state().schedule_prep());
    assert_eq!(n.poll(128, &mut seen, 30).work, 100);
    n.flush_gro(&mut seen, 2_000_000_000);
    assert_eq!(seen.0.len(), 105);
    let s = n.gro().unwrap().stats();
    let not_tcp = Check::ALL.iter().position(|&c| c == Check::NotTcp).unwrap();
    assert_eq!(
        (s.packets_in, s.normal, s.not_merged[not_tcp]),
        (108, 104, 104)
    );
    assert_eq!((s.packets_out, s.segments_out), (105, 108));
    assert!(n.stats().accounted());
    assert!(reclaim(port, vec![n]));
}
