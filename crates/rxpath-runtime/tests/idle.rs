//! An idle host sleeps: its NAPI thread does not nap a millisecond at a
//! time, and what needs it still wakes it (frames a reader returns after
//! the device ran out of buffers). One test in this file, so that the
//! threads this process has are the test host's own.

use rxpath_dev::sim::{Coalesce, SimConfig};
use rxpath_runtime::{Host, HostConfig, HostDevice};
use rxpath_wire::build::{self, Spec};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Voluntary context switches of this process's threads named `prefix*`.
fn wakeups(prefix: &str) -> u64 {
    let mut total = 0;
    for t in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let dir = t.expect("task").path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !comm.starts_with(prefix) {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        total += status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    total
}

#[test]
fn an_idle_napi_thread_sleeps_and_frames_coming_home_wake_it() {
    const FRAMES: usize = 64;
    let mut cfg = HostConfig {
        queues: 1,
        napi_threads: 1,
        gro: false,
        ..Default::default()
    };
    cfg.sock.local_addrs = vec!["198.18.0.1".parse().unwrap()];
    let sim = SimConfig {
        queues: 1,
        ring_size: FRAMES,
        frames_per_queue: FRAMES,
        coalesce: Coalesce::EVERY_FRAME,
        ..Default::default()
    };
    let h = Host::start(cfg, HostDevice::Sim(sim)).expect("sim host");
    let dst: SocketAddr = "198.18.0.1:7100".parse().unwrap();
    let s = h.udp_bind(dst).unwrap();
    s.set_rcvbuf(16 << 20);
    let f = build::udp(
        &Spec::new("198.18.0.2".parse().unwrap(), dst.ip(), 40000, dst.port()),
        b"held",
    );
    let inject = || {
        let mut p = h.sim_port().unwrap();
        let r = p.inject(&f, 0);
        p.flush(rxpath_dev::mono_ns());
        r.is_ok()
    };
    // Starve the device: datagrams nobody reads hold every frame.
    let give_up = Instant::now() + Duration::from_secs(10);
    let mut held = 0;
    while Instant::now() < give_up {
        if inject() {
            held += 1;
            continue;
        }
        // No buffer: wait until the NAPI thread has delivered what it
        // took, and try again; done once every frame sits in the socket.
        std::thread::sleep(Duration::from_millis(5));
        if s.queued() == held && !inject() {
            break;
        }
        held += 1;
    }
    assert!(held > FRAMES / 2 && held <= FRAMES, "{held} held");
    assert_eq!(s.queued(), held);

    // Idle: past its naps the NAPI thread sleeps (it napped 1 ms at a time
    // before, a thousand wakeups a second).
    std::thread::sleep(Duration::from_millis(100));
    let w0 = wakeups("rxpath-napi");
    std::thread::sleep(Duration::from_millis(500));
    let idle = wakeups("rxpath-napi") - w0;
    assert!(idle < 50, "{idle} wakeups in 500 ms of idleness");

    // The reader frees the frames: they come home, which wakes the NAPI
    // thread, which gives them back to the device.
    s.set_read_timeout(Some(Duration::from_secs(1)));
    let mut b = [0u8; 64];
    for _ in 0..held {
        assert_eq!(s.recv(&mut b).unwrap(), 4);
    }
    // A generous deadline: it only catches a hang.
    let t0 = Instant::now();
    while !inject() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the device got no buffer back"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(s.recv(&mut b).unwrap(), 4);
    drop(s);
    let r = h.shutdown();
    assert_eq!(r.frames_home, r.frames_total, "{r:?}");
}
