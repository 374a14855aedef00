//! Sockets read on workers: a host with steering runs the socket stage on
//! its workers' threads, every mode delivers every datagram in its flow's
//! order, RFS follows the reader's CPU, and every frame comes home.

use rxpath_core::steer::{SteerConfig, SteerMode};
use rxpath_dev::sim::{Coalesce, SimConfig};
use rxpath_runtime::{Host, HostConfig, HostDevice, HostReport};
use rxpath_wire::build::{self, Spec};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

const HOST4: &str = "198.18.0.1";
const PEER4: &str = "198.18.0.2";

fn sa(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse::<IpAddr>().unwrap(), port)
}

fn host(mode: SteerMode, workers: usize) -> Host {
    let mut cfg = HostConfig {
        queues: 1,
        napi_threads: 1,
        steer: SteerConfig {
            mode,
            workers,
            ..SteerConfig::default()
        },
        ..Default::default()
    };
    cfg.sock.local_addrs = vec![HOST4.parse().unwrap()];
    let sim = SimConfig {
        coalesce: Coalesce::EVERY_FRAME,
        ..Default::default()
    };
    Host::start(cfg, HostDevice::Sim(sim)).expect("sim host")
}

fn inject(h: &Host, sport: u16, payload: &[u8]) {
    let f = build::udp(
        &Spec::new(PEER4.parse().unwrap(), HOST4.parse().unwrap(), sport, 7000),
        payload,
    );
    let mut p = h.sim_port().unwrap();
    p.inject(&f, 0).expect("device took the frame");
    p.flush(rxpath_dev::mono_ns());
}

fn all_home(r: &HostReport, what: &str) {
    assert!(r.frames_total > 0);
    assert_eq!(r.frames_home, r.frames_total, "{what}: every frame home");
    let t = r.napi_total();
    assert!(
        t.accounted(),
        "{what}: received = delivered + dropped: {t:?}"
    );
}

/// The cores, an RFS host with 2 workers and a socket on port 7000; `None`
/// (the test is skipped out loud, or fails where the run requires two
/// cores) on one core. `_why` says what needs the second core.
fn rfs_on_two_cores(
    _why: &str,
) -> Option<(Vec<core_affinity::CoreId>, Host, rxpath_runtime::UdpSocket)> {
    if !rxpath_testkit::can_run(&[rxpath_testkit::Need::Cores(2)]) {
        return None;
    }
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    assert!(cores.len() >= 2, "2 CPUs, but {} core ids", cores.len());
    let h = host(SteerMode::Rfs, 2);
    let s = h.udp_bind(sa(HOST4, 7000)).unwrap();
    Some((cores, h, s))
}

#[test]
fn every_mode_delivers_every_datagram_in_flow_order_from_workers() {
    for mode in [
        SteerMode::Rps,
        SteerMode::Rfs,
        SteerMode::Spread,
        SteerMode::SpreadUnordered,
    ] {
        let what = mode.name();
        let h = host(mode, 2);
        let s = h.udp_bind(sa(HOST4, 7000)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5)));
        let (flows, per) = (8u16, 40u32);
        let mut last = vec![None::<u32>; flows as usize];
        let mut got = 0;
        let mut out_of_order = 0;
        let mut b = [0u8; 64];
        // One datagram: its flow (source port) and number, in order or not.
        let mut read_one = |got: &mut u32| {
            let (n, src) = s.recv_from(&mut b).expect("datagram");
            let v: u32 = std::str::from_utf8(&b[..n]).unwrap().parse().unwrap();
            let f = (src.port() - 5000) as usize;
            if last[f].is_some_and(|l| v < l) {
                out_of_order += 1;
            }
            last[f] = Some(v);
            *got += 1;
        };
        for i in 0..per {
            for f in 0..flows {
                inject(&h, 5000 + f, format!("{i}").as_bytes());
            }
            // Read as we go, so the receive queue never overflows.
            while s.queued() > 0 || got < (i + 1) * flows as u32 - 8 {
                read_one(&mut got);
            }
        }
        while got < per * flows as u32 {
            read_one(&mut got);
        }
        drop(s);
        let r = h.shutdown();
        all_home(&r, what);
        assert_eq!(r.sock.in_datagrams, (per * flows as u32) as u64, "{what}");
        let processed: u64 = r.workers.iter().map(|w| w.backlog.processed).sum();
        assert_eq!(
            processed,
            (per * flows as u32) as u64,
            "{what}: every datagram through a worker"
        );
        assert_eq!(r.workers.len(), 2, "{what}");
        if mode != SteerMode::SpreadUnordered {
            assert_eq!(out_of_order, 0, "{what} reordered a flow");
        }
        if mode.spreads() {
            assert!(
                r.workers.iter().all(|w| w.backlog.processed > 0),
                "{what}: both workers used: {:?}",
                r.workers
            );
        }
    }
}

#[test]
fn rfs_steers_a_flow_to_its_readers_worker() {
    let Some((cores, h, s)) = rfs_on_two_cores("RFS to a reader's worker") else {
        return;
    };
    s.set_read_timeout(Some(Duration::from_secs(5)));
    // Room for every datagram of a phase: none is dropped if the reader
    // lags.
    s.set_rcvbuf(512 * rxpath_dev::DEFAULT_FRAME_SIZE);
    // The reader reads on core `c`: RFS must send the flow's packets to
    // worker `c` once the old worker has drained past the flow's tail. The
    // first datagram of a phase teaches the table where the reader is; the
    // rest are sent only after the reader has it (so the old worker has
    // drained past the flow's tail and the move is due, whatever the load).
    for c in [1usize, 0] {
        let (s2, core) = (s.clone(), cores[c]);
        let (taught, first_read) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            core_affinity::set_for_current(core);
            let mut b = [0u8; 64];
            for n in 0..200 {
                s2.recv_from(&mut b).expect("datagram");
                if n == 0 {
                    taught.send(()).unwrap();
                }
            }
        });
        inject(&h, 5000, b"0");
        first_read
            .recv_timeout(Duration::from_secs(5))
            .expect("the reader got the phase's first datagram");
        for i in 1..200 {
            inject(&h, 5000, format!("{i}").as_bytes());
            if i % 16 == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        reader.join().unwrap();
    }
    drop(s);
    let r = h.shutdown();
    all_home(&r, "rfs");
    // Phase 1 read on core 1, phase 2 on core 0: after each phase's first
    // datagram, all of its packets went to the reader's worker; RPS alone
    // would have sent all 400 to one.
    let p: Vec<u64> = r.workers.iter().map(|w| w.backlog.processed).collect();
    assert_eq!(p.iter().sum::<u64>(), 400, "{p:?}");
    assert!(p[0] >= 199 && p[1] >= 199, "RFS followed the reader: {p:?}");
}

/// RFS without the second wakeup: a reader blocked in `recv` on the
/// worker's CPU runs that worker's backlog itself (the kernel processes
/// the backlog in softirq on the reader's CPU and wakes the reader once).
/// Request by request, with the reader asleep when each arrives, the
/// reader runs most of them; the worker's own thread takes what comes
/// while the reader is away. Order and frames as in every mode.
#[test]
fn a_reader_waiting_in_recv_runs_its_workers_backlog() {
    let Some((cores, h, s)) = rfs_on_two_cores("a reader on a worker's CPU") else {
        return;
    };
    s.set_read_timeout(Some(Duration::from_secs(5)));
    let (s2, core) = (s.clone(), cores[1]);
    let (read_tx, read_rx) = std::sync::mpsc::channel();
    let n = 100u32;
    let reader = std::thread::spawn(move || {
        core_affinity::set_for_current(core);
        let mut b = [0u8; 64];
        let mut last = None;
        for _ in 0..n {
            let (len, _) = s2.recv_from(&mut b).expect("datagram");
            let v: u32 = std::str::from_utf8(&b[..len]).unwrap().parse().unwrap();
            assert!(last.is_none_or(|l| v > l), "in order: {v} after {last:?}");
            last = Some(v);
            read_tx.send(()).unwrap();
        }
    });
    for i in 0..n {
        inject(&h, 5000, format!("{i}").as_bytes());
        read_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the reader got the datagram");
        // The reader is back asleep in recv before the next one comes.
        std::thread::sleep(Duration::from_millis(2));
    }
    reader.join().unwrap();
    drop(s);
    let r = h.shutdown();
    all_home(&r, "rfs, reader serving");
    let p: Vec<u64> = r.workers.iter().map(|w| w.backlog.processed).collect();
    let ran: Vec<u64> = r.workers.iter().map(|w| w.reader_ran).collect();
    assert_eq!(p.iter().sum::<u64>(), n as u64, "{p:?}");
    assert!(
        p[1] >= n as u64 - 1,
        "RFS sent the flow to the reader's worker: {p:?}"
    );
    assert!(
        ran[1] >= n as u64 / 2 && ran[0] == 0,
        "the reader ran its worker's backlog itself: {ran:?} of {p:?}"
    );
    assert!(
        r.workers[1].path.delivered >= n as u64 - 1,
        "what the reader ran is in its worker's counters: {:?}",
        r.workers[1].path
    );
}

/// A reader serving its worker's backlog still leaves `recv` as a sleeping
/// one does: at its receive timeout, and with `Closed` when the host stops
/// (the host's shutdown does not wait for it).
#[test]
fn a_serving_reader_times_out_and_sees_the_host_stop() {
    let Some((cores, h, s)) = rfs_on_two_cores("a serving reader") else {
        return;
    };
    let (s2, core) = (s.clone(), cores[1]);
    let reader = std::thread::spawn(move || {
        core_affinity::set_for_current(core);
        let mut b = [0u8; 64];
        s2.set_read_timeout(Some(Duration::from_millis(50)));
        let t0 = std::time::Instant::now();
        let timed_out = s2.recv_from(&mut b);
        let waited = t0.elapsed();
        s2.set_read_timeout(None);
        let closed = s2.recv_from(&mut b);
        (timed_out.map(|x| x.0), waited, closed.map(|x| x.0))
    });
    std::thread::sleep(Duration::from_millis(300));
    let r = h.shutdown();
    let (timed_out, waited, closed) = reader.join().unwrap();
    assert_eq!(timed_out, Err(rxpath_core::sock::SockError::TimedOut));
    assert!(
        waited >= Duration::from_millis(50) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    assert_eq!(closed, Err(rxpath_core::sock::SockError::Closed));
    all_home(&r, "rfs, serving reader stopped");
}
