//! What a QUIC stack asks of a socket: UDP GRO at the socket (`UDP_GRO`),
//! what a read reports with each datagram (segment size, ECN codepoint,
//! destination address), segmented sends (`UDP_SEGMENT`) with the ECN bits
//! set, and reads from a task woken by the thread that queues.

use rxpath_core::sock::{CaptureTx, RecvMeta, SockError, UDP_MAX_SEGMENTS};
use rxpath_dev::sim::{Coalesce, SimConfig};
use rxpath_runtime::{Host, HostConfig, HostDevice};
use rxpath_wire::build::{self, Spec};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

const HOST4: &str = "198.18.0.1";
const PEER4: &str = "198.18.0.2";

fn sa(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse::<IpAddr>().unwrap(), port)
}

fn sim_host(gro: bool) -> Host {
    sim_host_with(gro, 0)
}

fn sim_host_with(gro: bool, gro_flush_timeout_ns: u64) -> Host {
    sim_host_config(HostConfig {
        gro,
        gro_flush_timeout_ns,
        ..Default::default()
    })
}

/// A host on a sim NIC that interrupts for every frame, owning `HOST4`.
fn sim_host_config(mut cfg: HostConfig) -> Host {
    cfg.sock.local_addrs = vec![HOST4.parse().unwrap()];
    let sim = SimConfig {
        coalesce: Coalesce::EVERY_FRAME,
        ..Default::default()
    };
    Host::start(cfg, HostDevice::Sim(sim)).expect("sim host")
}

/// Datagrams from `PEER4:5` to `HOST4:port`, sizes and TOS given; payload
/// byte `i` of datagram `k` is `k * 31 + i`. Returns what was sent.
fn send(h: &Host, port: u16, sizes: &[usize], tos: u8) -> Vec<u8> {
    let mut spec = Spec::new(PEER4.parse().unwrap(), HOST4.parse().unwrap(), 5, port);
    spec.tos = tos;
    let mut all = Vec::new();
    let mut p = h.sim_port().unwrap();
    for (k, &n) in sizes.iter().enumerate() {
        let payload: Vec<u8> = (0..n).map(|i| (k * 31 + i) as u8).collect();
        all.extend_from_slice(&payload);
        spec.ip_id = k as u16;
        p.inject(&build::udp(&spec, &payload), 0)
            .expect("device took the frame");
    }
    p.flush(rxpath_dev::mono_ns());
    all
}

/// Read everything queued (busy polling the queue: no NAPI thread runs),
/// one buffer per read.
fn read_all(s: &rxpath_runtime::UdpSocket, want: usize) -> Vec<(Vec<u8>, RecvMeta)> {
    let mut got = Vec::new();
    let mut total = 0;
    while total < want {
        let mut buf = vec![0u8; 65536];
        let mut m = None;
        s.recv_batch(std::slice::from_mut(&mut buf), |_, r| m = Some(r))
            .expect("read");
        let m = m.unwrap();
        total += m.len;
        buf.truncate(m.len);
        got.push((buf, m));
    }
    got
}

/// Learn the socket's NAPI with one datagram through the NAPI thread, then
/// stop the thread: from here a busy-polling read runs the NAPI itself, so
/// one poll sees everything injected before it.
fn prime(h: &mut Host, s: &rxpath_runtime::UdpSocket, port: u16) {
    s.set_read_timeout(Some(Duration::from_secs(5)));
    send(h, port, &[10], 0);
    read_all(s, 10);
    h.stop_napi_threads();
    s.set_busy_poll(100_000);
}

#[test]
fn a_udp_gro_socket_reads_one_packet_with_its_segment_size() {
    let mut h = sim_host(true);
    let s = h.udp_bind(sa(HOST4, 7000)).unwrap();
    s.set_udp_gro(true);
    assert!(s.udp_gro());
    prime(&mut h, &s, 7000);
    // 6 equal datagrams and a shorter last one, ECT(0): fewer than the
    // busy poll's budget of 8, so one poll takes them all and, finding the
    // queue dry, passes the GRO packet up.
    let mut sizes = vec![1000; 6];
    sizes.push(300);
    let sent = send(&h, 7000, &sizes, 0x02);
    let got = read_all(&s, sent.len());
    assert_eq!(got.len(), 1, "one read for the whole GRO packet");
    let (data, m) = &got[0];
    assert_eq!(data, &sent, "payload in order across the chain");
    assert_eq!(m.stride, 1000, "the UDP_GRO segment size");
    assert!(!m.truncated);
    assert_eq!(m.ecn, 2, "ECT(0) as sent");
    assert_eq!(m.dst, HOST4.parse::<IpAddr>().unwrap());
    assert_eq!(m.src, sa(PEER4, 5));
    drop(s);
    let r = h.shutdown();
    assert_eq!(r.frames_home, r.frames_total, "every frame home");
    assert!(r.napi_total().accounted());
}

#[test]
fn a_socket_without_udp_gro_reads_datagrams_as_they_were_sent() {
    let mut h = sim_host(true);
    let s = h.udp_bind(sa(HOST4, 7001)).unwrap();
    // Another socket asks for GRO, so GRO looks sockets up: this one's
    // datagrams still come one by one.
    let other = h.udp_bind(sa(HOST4, 7002)).unwrap();
    other.set_udp_gro(true);
    prime(&mut h, &s, 7001);
    let sent = send(&h, 7001, &[700, 700, 700, 200], 0x03);
    let got = read_all(&s, sent.len());
    let lens: Vec<usize> = got.iter().map(|(_, m)| m.len).collect();
    assert_eq!(lens, vec![700, 700, 700, 200]);
    for (_, m) in &got {
        assert_eq!(m.stride, m.len, "a single datagram's stride is its length");
        assert_eq!(m.ecn, 3, "CE as sent");
    }
    let data: Vec<u8> = got.into_iter().flat_map(|(d, _)| d).collect();
    assert_eq!(data, sent);
    drop((s, other));
    let r = h.shutdown();
    assert_eq!(r.frames_home, r.frames_total, "every frame home");
}

/// GRO keeps the last flow's `UDP_GRO` answer while the socket table
/// stands still: turning `UDP_GRO` on or off must be seen by the very next
/// burst of the same flow.
#[test]
fn turning_udp_gro_on_and_off_is_seen_by_the_next_burst_of_the_same_flow() {
    let mut h = sim_host(true);
    let s = h.udp_bind(sa(HOST4, 7004)).unwrap();
    prime(&mut h, &s, 7004);
    let lens = |got: &[(Vec<u8>, RecvMeta)]| got.iter().map(|(_, m)| m.len).collect::<Vec<_>>();
    // Off: the flow's answer (no) is kept...
    let sent = send(&h, 7004, &[500, 500, 100], 0);
    assert_eq!(lens(&read_all(&s, sent.len())), vec![500, 500, 100]);
    // ... on: the next burst of the same flow is merged.
    s.set_udp_gro(true);
    let sent = send(&h, 7004, &[500, 500, 100], 0);
    let got = read_all(&s, sent.len());
    assert_eq!(lens(&got), vec![1100]);
    assert_eq!(got[0].1.stride, 500);
    // Off again: single datagrams again.
    s.set_udp_gro(false);
    let sent = send(&h, 7004, &[500, 500, 100], 0);
    assert_eq!(lens(&read_all(&s, sent.len())), vec![500, 500, 100]);
    drop(s);
    let r = h.shutdown();
    assert_eq!(r.frames_home, r.frames_total, "every frame home");
    assert!(r.napi_total().accounted());
}

#[test]
fn a_gro_packet_larger_than_the_buffer_is_truncated_and_its_frames_go_home() {
    let mut h = sim_host(true);
    let s = h.udp_bind(sa(HOST4, 7003)).unwrap();
    s.set_udp_gro(true);
    prime(&mut h, &s, 7003);
    let sent = send(&h, 7003, &[1200; 6], 0);
    let mut buf = vec![0u8; 5000];
    let mut m = None;
    s.recv_batch(std::slice::from_mut(&mut buf), |_, r| m = Some(r))
        .unwrap();
    let m = m.unwrap();
    assert_eq!(m.len, 5000);
    assert!(m.truncated, "MSG_TRUNC: the rest of the packet is gone");
    assert_eq!(&buf[..], &sent[..5000]);
    drop(s);
    let r = h.shutdown();
    assert_eq!(r.frames_home, r.frames_total, "every frame home");
}

#[test]
fn a_segmented_send_makes_one_datagram_per_segment_with_the_ecn_bits() {
    let mut h = sim_host(true);
    let tx = CaptureTx::default();
    h.sockets().set_tx(Box::new(tx.clone()));
    let s = h.udp_bind(sa(HOST4, 4433)).unwrap();
    // Learn the peer's MAC from one datagram.
    prime(&mut h, &s, 4433);
    let contents: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    let n = s
        .send_segments(&contents, Some(1200), sa(PEER4, 5), 2)
        .unwrap();
    assert_eq!(n, 5, "4 x 1200 and one of 200");
    let frames = tx.frames.lock().unwrap().clone();
    assert_eq!(frames.len(), 5);
    let mut back = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let hd = rxpath_wire::parse(f).expect("valid frame");
        let want = if i < 4 { 1200 } else { 200 };
        assert_eq!(hd.payload_len as usize, want);
        assert_eq!(f[15] & 3, 2, "ECT(0) in the TOS byte");
        let ip = rxpath_wire::ipv4::Packet::new_unchecked(&f[14..]);
        assert!(ip.verify_checksum());
        let p = hd.payload_offset as usize;
        let seg = &f[hd.l4_offset as usize..p + want];
        assert_eq!(
            rxpath_wire::checksum::l4(hd.flow.src(), hd.flow.dst(), 17, seg),
            0,
            "each segment's own UDP checksum"
        );
        back.extend_from_slice(&f[p..p + want]);
    }
    assert_eq!(back, contents);
    // More than 64 segments is refused, as the kernel's EINVAL.
    let big = vec![0u8; 65 * 10];
    assert!(matches!(
        s.send_segments(&big, Some(10), sa(PEER4, 5), 0),
        Err(SockError::TooManySegments { .. })
    ));
    assert_eq!(
        s.send_segments(&big[..640], Some(10), sa(PEER4, 5), 0),
        Ok(UDP_MAX_SEGMENTS)
    );
    drop(s);
    let r = h.shutdown();
    assert_eq!(r.frames_home, r.frames_total);
}

struct CountWake(AtomicUsize);

impl Wake for CountWake {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A waker that counts its wakes.
fn counting_waker() -> (Arc<CountWake>, Waker) {
    let count = Arc::new(CountWake(AtomicUsize::new(0)));
    let waker = Waker::from(count.clone());
    (count, waker)
}

#[test]
fn a_task_is_woken_by_the_thread_that_queues_its_datagram() {
    let h = sim_host(true);
    let s = h.udp_bind(sa(HOST4, 7010)).unwrap();
    let (count, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    let mut bufs = [vec![0u8; 2048]];
    let mut got = Vec::new();
    let mut meta = |_: usize, m: RecvMeta| got.push(m.len);
    assert!(s
        .poll_recv_batch(&mut cx, &mut bufs, &mut meta)
        .is_pending());
    assert_eq!(count.0.load(Ordering::SeqCst), 0);
    // The NAPI thread queues it and wakes the task.
    send(&h, 7010, &[321], 0);
    let t0 = std::time::Instant::now();
    while count.0.load(Ordering::SeqCst) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(5), "never woken");
        std::thread::yield_now();
    }
    match s.poll_recv_batch(&mut cx, &mut bufs, &mut meta) {
        Poll::Ready(Ok(1)) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(got, vec![321]);
    assert_eq!(count.0.load(Ordering::SeqCst), 1, "one wake per wait");
    drop(s);
    let r = h.shutdown();
    assert_eq!(r.frames_home, r.frames_total);
}

/// With prefer busy polling, a task that waits on the device itself
/// (`poll_recv_batch_device`) leaves the interrupt deferred while it
/// sleeps; one that waits only for a delivery (`poll_recv_batch`) ends the
/// deferral. Either way the datagram that comes next reaches it: by the
/// NAPI thread at the deadline, or by the interrupt at once.
#[test]
fn a_task_waiting_on_the_device_keeps_the_interrupt_deferred() {
    for device in [true, false] {
        let h = sim_host_config(HostConfig {
            // Long enough for any scheduling; short enough for the test.
            prefer_busy_poll_ns: 2_000_000_000,
            ..Default::default()
        });
        let s = h.udp_bind(sa(HOST4, 7030)).unwrap();
        let (count, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        let mut bufs = [vec![0u8; 2048]];
        let mut got = Vec::new();
        let mut meta = |_: usize, m: RecvMeta| got.push(m.len);
        // The socket learns its NAPI from a first datagram.
        send(&h, 7030, &[10], 0);
        s.set_read_timeout(Some(Duration::from_secs(5)));
        let mut b = [0u8; 64];
        assert_eq!(s.recv(&mut b).unwrap(), 10);
        s.set_busy_poll(50);
        // Busy-poll until one poll has owned the NAPI and deferred the
        // interrupt (on a loaded machine the NAPI thread may still be
        // finishing its previous poll, and a busy poll that finds it owned
        // defers nothing).
        let napi = &h.napis()[0];
        let give_up = std::time::Instant::now() + Duration::from_secs(5);
        while napi.deferred_until() == 0 {
            assert!(
                std::time::Instant::now() < give_up,
                "no busy poll owned the NAPI"
            );
            assert_eq!(s.recv_batch_busy(&mut bufs, &mut meta), Ok(0));
            std::thread::yield_now();
        }
        let mut read = |cx: &mut Context<'_>| {
            if device {
                s.poll_recv_batch_device(cx, &mut bufs, &mut meta)
            } else {
                s.poll_recv_batch(cx, &mut bufs, &mut meta)
            }
        };
        // The read busy-polls (which defers the interrupt again if it owns
        // the NAPI), finds nothing and waits.
        assert!(read(&mut cx).is_pending());
        assert_eq!(
            napi.deferred_until() != 0,
            device,
            "deferred while the task sleeps on the device: {device}"
        );
        let deadline = napi.deferred_until();
        let t0 = std::time::Instant::now();
        send(&h, 7030, &[321], 0);
        while count.0.load(Ordering::SeqCst) == 0 {
            assert!(t0.elapsed() < Duration::from_secs(30), "never woken");
            std::thread::yield_now();
        }
        if device {
            // Nobody took the interrupt: the NAPI thread polled once the
            // deferral's deadline had passed (an order of events on the
            // NAPI's own clock, which a loaded machine cannot reverse).
            let woke = rxpath_dev::mono_ns();
            assert!(
                woke >= deadline,
                "woken at {woke}, before the deadline {deadline}"
            );
        }
        assert!(matches!(read(&mut cx), Poll::Ready(Ok(1))));
        assert_eq!(got, vec![321]);
        drop(s);
        let r = h.shutdown();
        assert_eq!(r.frames_home, r.frames_total);
    }
}

/// A task whose busy poll has just found nothing waits without polling the
/// NAPI a second time (`poll_recv_batch_polled`), where a plain waiting
/// read polls it first; either way the next datagram wakes the task.
#[test]
fn a_read_right_after_a_busy_poll_waits_without_polling_again() {
    let h = sim_host(false);
    let s = h.udp_bind(sa(HOST4, 7040)).unwrap();
    send(&h, 7040, &[10], 0);
    s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut b = [0u8; 64];
    assert_eq!(s.recv(&mut b).unwrap(), 10);
    s.set_busy_poll(50);
    let (count, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    let mut bufs = [vec![0u8; 2048]];
    let mut got = Vec::new();
    let mut meta = |_: usize, m: RecvMeta| got.push(m.len);
    let polls = s.counters().busy_polls;
    assert!(s
        .poll_recv_batch_polled(&mut cx, &mut bufs, &mut meta, false)
        .is_pending());
    assert_eq!(s.counters().busy_polls, polls, "no busy poll");
    assert!(s
        .poll_recv_batch(&mut cx, &mut bufs, &mut meta)
        .is_pending());
    assert_eq!(s.counters().busy_polls, polls + 1, "one busy poll");
    send(&h, 7040, &[77], 0);
    let t0 = std::time::Instant::now();
    while count.0.load(Ordering::SeqCst) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(5), "never woken");
        std::thread::yield_now();
    }
    assert!(matches!(
        s.poll_recv_batch_polled(&mut cx, &mut bufs, &mut meta, false),
        Poll::Ready(Ok(1))
    ));
    assert_eq!(got, vec![77]);
    drop(s);
    let r = h.shutdown();
    assert_eq!(r.frames_home, r.frames_total);
}

#[test]
fn with_gro_flush_timeout_the_napi_timer_delivers_what_gro_held() {
    // 300 µs: a lone datagram is held past its poll (the poll found work,
    // so napi_complete_done arms the timer instead of flushing); only the
    // timer, fired by the NAPI thread, can pass it up.
    let h = sim_host_with(true, 300_000);
    let s = h.udp_bind(sa(HOST4, 7020)).unwrap();
    s.set_udp_gro(true);
    // Without the timer the datagram would stay held for good: the read
    // would time out and find nothing (the timeout only catches that).
    s.set_read_timeout(Some(Duration::from_secs(10)));
    for round in 0..20 {
        let sent = send(&h, 7020, &[100 + round], 0);
        let got = read_all(&s, sent.len());
        assert_eq!(got.len(), 1, "round {round}: the timer passed it up");
        assert_eq!(got[0].0, sent);
    }
    drop(s);
    let r = h.shutdown();
    assert_eq!(r.frames_home, r.frames_total);
}
