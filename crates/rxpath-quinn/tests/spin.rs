//! A busy-polling quinn socket spins for its `busy_poll` window: an empty
//! read wakes its own task (the runtime polls it again, and each poll
//! polls the queue's NAPI) instead of sleeping; a datagram that arrives in
//! the window is read by that poll alone; past the window the task sleeps
//! (its waker left in the socket), and without busy polling it never spins.

use quinn::udp::RecvMeta;
use quinn::AsyncUdpSocket;
use rxpath_dev::sim::{Coalesce, SimConfig};
use rxpath_quinn::RxpathSocket;
use rxpath_runtime::UdpSocket;
use rxpath_runtime::{Host, HostConfig, HostDevice};
use rxpath_wire::build::{self, Spec};
use std::io::IoSliceMut;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

const HOST4: &str = "198.18.0.1";
const PEER4: &str = "198.18.0.2";
const PORT: u16 = 4433;

fn sim_host() -> Host {
    let mut cfg = HostConfig::default();
    cfg.sock.local_addrs = vec![HOST4.parse().unwrap()];
    let sim = SimConfig {
        coalesce: Coalesce::EVERY_FRAME,
        ..Default::default()
    };
    Host::start(cfg, HostDevice::Sim(sim)).expect("sim host")
}

/// One datagram of `n` bytes from the peer to the socket's port, on the
/// simulated NIC's queue.
fn inject(h: &Host, n: usize) {
    let spec = Spec::new(PEER4.parse().unwrap(), HOST4.parse().unwrap(), 5, PORT);
    let mut p = h.sim_port().unwrap();
    p.inject(&build::udp(&spec, &vec![7u8; n]), 0)
        .expect("device took the frame");
    p.flush(rxpath_dev::mono_ns());
}

/// A socket that has seen its NAPI (one datagram through the NAPI
/// thread), then the NAPI threads stopped: from here only a busy poll
/// moves the queue, so a read that returns a datagram polled it itself.
fn primed(h: &mut Host) -> UdpSocket {
    let s = h
        .udp_bind(SocketAddr::new(HOST4.parse().unwrap(), PORT))
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5)));
    inject(h, 10);
    let mut buf = [0u8; 64];
    assert_eq!(s.recv(&mut buf).expect("first datagram"), 10);
    h.stop_napi_threads();
    s
}

#[derive(Default)]
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// One `poll_recv` of quinn's endpoint: the length read, or `None`.
fn poll(sock: &RxpathSocket, cx: &mut Context<'_>) -> Option<usize> {
    let mut buf = [0u8; 2048];
    let mut bufs = [IoSliceMut::new(&mut buf)];
    let mut meta = [RecvMeta::default()];
    match sock.poll_recv(cx, &mut bufs, &mut meta) {
        Poll::Ready(Ok(n)) => {
            assert_eq!(n, 1);
            Some(meta[0].len)
        }
        Poll::Ready(Err(e)) => panic!("read failed: {e}"),
        Poll::Pending => None,
    }
}

#[test]
fn a_busy_polling_read_spins_for_its_window_then_sleeps() {
    let mut h = sim_host();
    let s = primed(&mut h);
    let sock = RxpathSocket::new(s.clone());
    let count = Arc::new(Count::default());
    let waker = Waker::from(count.clone());
    let mut cx = Context::from_waker(&waker);
    let wakes = || count.0.load(Ordering::SeqCst);

    // Without busy polling an empty read waits: no wake of its own.
    assert_eq!(poll(&sock, &mut cx), None);
    assert_eq!(wakes(), 0, "no busy poll: the task sleeps");

    // A window of 10 s: every empty read wakes its own task.
    s.set_busy_poll(10_000_000);
    for i in 1..=3 {
        assert_eq!(poll(&sock, &mut cx), None);
        assert_eq!(wakes(), i, "within the window the task is polled again");
    }
    // A datagram arrives: the spinning poll reads it (no NAPI thread runs).
    let polls = s.counters().busy_polls;
    inject(&h, 100);
    assert_eq!(poll(&sock, &mut cx), Some(100));
    assert!(s.counters().busy_polls > polls, "read by a busy poll");

    // A window of 2 ms: spins at first, sleeps once it is over.
    s.set_busy_poll(2_000);
    let w = wakes();
    let start = Instant::now();
    assert_eq!(poll(&sock, &mut cx), None);
    assert_eq!(wakes(), w + 1, "the first empty read opens the window");
    while start.elapsed() < Duration::from_millis(20) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let w = wakes();
    assert_eq!(poll(&sock, &mut cx), None);
    assert_eq!(wakes(), w, "past the window the task sleeps");
    // The next datagram (its delivery wakes the sleeping task: the busy
    // poll queued it) opens a new window.
    inject(&h, 200);
    assert_eq!(poll(&sock, &mut cx), Some(200));
    let w = wakes();
    assert_eq!(poll(&sock, &mut cx), None);
    assert_eq!(wakes(), w + 1, "a read with data starts the next window");
    drop(sock);
    drop(s);
    drop(h);
}
