//! The socket layer on a simulated NIC: demux, receive queues, blocking and
//! non-blocking receive, busy polling and NAPI ownership, sending, epoll,
//! RFS recording, and every frame home at the end.

use rxpath_core::sock::SockError;
use rxpath_dev::sim::{Coalesce, SimConfig};
use rxpath_runtime::{Epoll, UdpSocket};
use rxpath_runtime::{Host, HostConfig, HostDevice};
use rxpath_wire::build::{self, Spec};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

mod common;
use common::*;

#[test]
fn exact_beats_bound_beats_wildcard_v4_and_v6() {
    let h = host(1, 1);
    let wild4 = h.udp_bind(sa("0.0.0.0", 7000)).unwrap();
    let bound4 = h.udp_bind(sa(HOST4, 7000)).unwrap();
    let conn4 = h.udp_bind(sa(HOST4, 7001)).unwrap();
    conn4.connect(sa(PEER4, 9)).unwrap();
    let wild4b = h.udp_bind(sa("0.0.0.0", 7001)).unwrap();
    let wild6 = h.udp_bind(sa("::", 7000)).unwrap();
    let bound6 = h.udp_bind(sa(HOST6, 7002)).unwrap();
    let wild6only = h.udp_bind(sa("::", 7003)).unwrap();

    inject(&h, sa(PEER4, 5), sa(HOST4, 7000), b"to-bound4");
    assert_eq!(recv_str(&bound4).0, "to-bound4");
    inject(&h, sa(PEER4, 5), sa("198.18.0.9", 7000), b"to-wild4");
    assert_eq!(recv_str(&wild4).0, "to-wild4");
    // Connected: only its peer matches; others fall to the wildcard.
    inject(&h, sa(PEER4, 9), sa(HOST4, 7001), b"to-conn4");
    assert_eq!(recv_str(&conn4).0, "to-conn4");
    inject(&h, sa(PEER4, 10), sa(HOST4, 7001), b"not-peer");
    assert_eq!(recv_str(&wild4b).0, "not-peer");
    // IPv6, and the dual-stack wildcard taking IPv4 no IPv4 socket wants.
    inject(&h, sa(PEER6, 5), sa(HOST6, 7000), b"to-wild6");
    assert_eq!(recv_str(&wild6).0, "to-wild6");
    inject(&h, sa(PEER6, 5), sa(HOST6, 7002), b"to-bound6");
    assert_eq!(recv_str(&bound6).0, "to-bound6");
    inject(&h, sa(PEER4, 5), sa(HOST4, 7003), b"v4-to-v6");
    let (m, src) = recv_str(&wild6only);
    // A dual-stack socket sees the IPv4 peer v4-mapped, as the kernel's.
    assert_eq!((m.as_str(), src), ("v4-to-v6", sa("::ffff:198.18.0.2", 5)));
    // No socket: counted.
    inject(&h, sa(PEER4, 5), sa(HOST4, 7999), b"nobody");
    thread::sleep(Duration::from_millis(50));
    for s in [
        &wild4, &bound4, &conn4, &wild4b, &wild6, &bound6, &wild6only,
    ] {
        assert_eq!(s.queued(), 0, "stray datagram on {}", s.local_addr());
    }
    // The same address twice is refused.
    assert_eq!(
        h.udp_bind(sa(HOST4, 7000)).unwrap_err(),
        SockError::AddrInUse(sa(HOST4, 7000))
    );
    let r = h.shutdown();
    assert_eq!(r.sock.no_ports, 1);
    assert_eq!(r.sock.in_datagrams, 7);
    all_home(&r);
}

/// Ten datagrams `m0`..`m9` to `port`, and wait until `s` queued or
/// dropped each.
fn overflow(h: &Host, s: &UdpSocket, port: u16) {
    for i in 0..10 {
        inject(h, sa(PEER4, 5), sa(HOST4, port), format!("m{i}").as_bytes());
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.counters().queued + s.counters().drops < 10 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn receive_queue_overflow_is_a_counted_drop() {
    let h = host(1, 1);
    let s = h.udp_bind(sa(HOST4, 7000)).unwrap();
    // Room for three: the kernel takes a datagram while the queue is not
    // past rcvbuf, so two truesizes' worth holds three.
    let frame = 14 + 20 + 8 + 2;
    s.set_rcvbuf(2 * rxpath_core::sock::truesize(frame));
    overflow(&h, &s, 7000);
    assert_eq!(s.queued(), 3);
    assert_eq!(s.counters().drops, 7);
    // The oldest are kept, in order.
    for i in 0..3 {
        assert_eq!(recv_str(&s).0, format!("m{i}"));
    }
    let r = h.shutdown();
    assert_eq!(r.sock.rcvbuf_errors, 7);
    assert_eq!(
        r.napi_total()
            .dropped
            .get(rxpath_core::DropReason::SocketQueueFull),
        7
    );
    all_home(&r);
}

#[test]
fn each_datagram_carries_when_it_came_and_the_drops_before_it() {
    let h = host(1, 1);
    let s = h.udp_bind(sa(HOST4, 7002)).unwrap();
    let frame = 14 + 20 + 8 + 2;
    s.set_rcvbuf(2 * rxpath_core::sock::truesize(frame));
    s.socket().set_rxq_ovfl(true);
    let before = rxpath_dev::mono_ns();
    overflow(&h, &s, 7002);
    let read_all = || {
        let mut metas = Vec::new();
        let mut b = [0u8; 64];
        while s
            .socket()
            .try_recv_batch(&mut [&mut b[..]], &mut |_, m| metas.push(m))
            .unwrap_or(0)
            > 0
        {}
        metas
    };
    // Queued before any drop: 0 (`sock_skb_set_dropcount` at enqueue).
    let first = read_all();
    assert_eq!(first.len(), 3);
    assert!(first.iter().all(|m| m.drops == 0), "{first:?}");
    let after = rxpath_dev::mono_ns();
    for m in &first {
        assert!((before..=after).contains(&m.stamp_ns), "{m:?}");
    }
    // Queued after seven drops: it says so.
    inject(&h, sa(PEER4, 5), sa(HOST4, 7002), b"m10");
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.queued() == 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(1));
    }
    let next = read_all();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].drops, 7);
    assert!(next[0].stamp_ns >= after);
    drop(s);
    all_home(&h.shutdown());
}

#[test]
fn queued_datagrams_go_home_at_shutdown() {
    let h = host(2, 1);
    let s = h.udp_bind(sa("0.0.0.0", 7000)).unwrap();
    for i in 0..50u32 {
        inject_on(
            &h,
            sa(PEER4, 5),
            sa(HOST4, 7000),
            b"held",
            i.wrapping_mul(0x9e37_79b9),
        );
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.queued() < 50 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(s.queued(), 50);
    let r = h.shutdown();
    // The socket handle outlives the host: it reports closed.
    assert_eq!(s.try_recv_from(&mut [0u8; 64]), Err(SockError::Closed));
    all_home(&r);
}

#[test]
fn try_recv_never_blocks_and_timeouts_hold() {
    let h = host(1, 1);
    let s = h.udp_bind(sa(HOST4, 7000)).unwrap();
    let mut b = [0u8; 64];
    assert_eq!(s.try_recv_from(&mut b), Err(SockError::WouldBlock));
    s.set_read_timeout(Some(Duration::from_millis(50)));
    let t = Instant::now();
    assert_eq!(s.recv(&mut b), Err(SockError::TimedOut));
    assert!(t.elapsed() >= Duration::from_millis(50));
    // With busy polling on, the timeout still ends the wait.
    s.set_busy_poll(10_000);
    assert_eq!(s.recv(&mut b), Err(SockError::TimedOut));
    inject(&h, sa(PEER4, 5), sa(HOST4, 7000), b"x");
    assert_eq!(recv_str(&s).0, "x");
    assert_eq!(s.try_recv_from(&mut b), Err(SockError::WouldBlock));
    all_home(&h.shutdown());
}

#[test]
fn peek_leaves_the_datagram_and_tells_its_whole_length() {
    let h = host(1, 1);
    let s = h.udp_bind(sa(HOST4, 7001)).unwrap();
    assert!(s.try_peek(&mut []).unwrap().is_none());
    inject(&h, sa(PEER4, 5), sa(HOST4, 7001), b"hello world");
    // Wait until the NAPI thread queued it.
    let t = Instant::now();
    while s.queued() == 0 && t.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(1));
    }
    // FIONREAD's question: the length, nothing copied, nothing taken.
    let (len, m) = s.try_peek(&mut []).unwrap().unwrap();
    assert_eq!(
        (len, m.src, m.dst),
        (11, sa(PEER4, 5), sa(HOST4, 7001).ip())
    );
    assert!(m.truncated && m.len == 0);
    // MSG_PEEK into a short buffer: what fits, the whole length.
    let mut b = [0u8; 5];
    assert_eq!(s.try_peek(&mut b).unwrap().unwrap().0, 11);
    assert_eq!(&b, b"hello");
    assert_eq!(s.queued(), 1);
    assert_eq!(recv_str(&s).0, "hello world");
    assert!(s.try_peek(&mut b).unwrap().is_none());
    all_home(&h.shutdown());
}

#[test]
fn blocking_recv_wakes_on_arrival() {
    let h = Arc::new(host(1, 1));
    let s = h.udp_bind(sa(HOST4, 7000)).unwrap();
    let s2 = s.clone();
    let reader = thread::spawn(move || {
        let mut b = [0u8; 64];
        let n = s2.recv(&mut b).expect("woken with data");
        b[..n].to_vec()
    });
    // Let the reader go to sleep first.
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.counters().sleeps == 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(1));
    }
    assert!(s.counters().sleeps >= 1, "reader slept");
    inject(&h, sa(PEER4, 5), sa(HOST4, 7000), b"wake");
    assert_eq!(reader.join().unwrap(), b"wake");
    drop(s);
    let h = Arc::into_inner(h).unwrap();
    all_home(&h.shutdown());
}

#[test]
fn busy_polling_receives_with_the_napi_thread_stopped() {
    let mut h = host(1, 1);
    let s = h.udp_bind(sa(HOST4, 7000)).unwrap();
    // The first datagram comes through the NAPI thread and tells the
    // socket its NAPI (sk_napi_id).
    inject(&h, sa(PEER4, 5), sa(HOST4, 7000), b"first");
    assert_eq!(recv_str(&s).0, "first");
    assert_eq!(s.napi_id(), h.napis()[0].id);
    h.stop_napi_threads();
    // Without busy polling nothing moves now.
    inject(&h, sa(PEER4, 5), sa(HOST4, 7000), b"second");
    s.set_read_timeout(Some(Duration::from_millis(30)));
    let mut b = [0u8; 64];
    assert_eq!(s.recv(&mut b), Err(SockError::TimedOut));
    // With it, recv polls the queue itself.
    s.set_busy_poll(50_000);
    let n = s.recv(&mut b).expect("busy poll found it");
    assert_eq!(&b[..n], b"second");
    for i in 0..100 {
        inject(
            &h,
            sa(PEER4, 5),
            sa(HOST4, 7000),
            format!("b{i}").as_bytes(),
        );
        assert_eq!(recv_str(&s).0, format!("b{i}"));
    }
    let st = h.sockets().stats();
    assert!(st.busy_polls >= 101, "{st:?}");
    assert_eq!(st.busy_poll_packets, 101, "{st:?}");
    assert!(st.busy_poll_loops >= 101 && st.busy_poll_ns > 0, "{st:?}");
    all_home(&h.shutdown());
}

#[test]
fn a_busy_poll_takes_the_sockets_budget() {
    let mut h = host(1, 1);
    let s = h.udp_bind(sa(HOST4, 7000)).unwrap();
    inject(&h, sa(PEER4, 5), sa(HOST4, 7000), b"first");
    assert_eq!(recv_str(&s).0, "first");
    h.stop_napi_threads();
    s.set_busy_poll(50_000);
    for i in 0..100 {
        let p = format!("d{i}");
        inject(&h, sa(PEER4, 5), sa(HOST4, 7000), p.as_bytes());
    }
    let mut next = 0;
    // Each read on an empty queue makes one poll of the budget in effect:
    // the kernel's 8 unset, SO_BUSY_POLL_BUDGET when set, 8 again at 0.
    for (set, takes) in [(None, 8), (Some(32), 32), (Some(0), 8), (Some(1), 1)] {
        if let Some(b) = set {
            s.set_busy_poll_budget(b);
        }
        assert_eq!(s.busy_poll_budget(), takes);
        let before = h.sockets().stats().busy_poll_packets;
        assert_eq!(recv_str(&s).0, format!("d{next}"));
        next += 1;
        let st = h.sockets().stats();
        assert_eq!(st.busy_poll_packets - before, takes as u64, "{st:?}");
        assert_eq!(s.queued(), takes - 1);
        // Read what that poll queued without polling again.
        for _ in 1..takes {
            assert_eq!(recv_str(&s).0, format!("d{next}"));
            next += 1;
        }
        assert_eq!(h.sockets().stats().busy_poll_packets - before, takes as u64);
    }
    all_home(&h.shutdown());
}

#[test]
fn two_busy_pollers_and_the_napi_thread_see_every_packet_once() {
    const N: u32 = 20_000;
    let h = Arc::new(host(1, 1));
    let s = h.udp_bind(sa(HOST4, 7000)).unwrap();
    s.set_busy_poll(200);
    s.set_read_timeout(Some(Duration::from_millis(200)));
    // Learn the NAPI id first.
    inject(&h, sa(PEER4, 5), sa(HOST4, 7000), &u32::MAX.to_be_bytes());
    assert_eq!(recv_str(&s).1, sa(PEER4, 5));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (s, seen, done) = (s.clone(), seen.clone(), done.clone());
            thread::spawn(move || {
                let mut mine = Vec::new();
                let mut bufs = vec![[0u8; 16]; 8];
                let mut lens = [0usize; 8];
                loop {
                    match s.recv_batch(&mut bufs, |i, m| lens[i] = m.len) {
                        Ok(n) => {
                            for i in 0..n {
                                let b = &bufs[i][..lens[i]];
                                mine.push(u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                            }
                        }
                        Err(SockError::TimedOut) if done.load(Ordering::Acquire) => break,
                        Err(SockError::TimedOut) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                seen.lock().unwrap().extend(mine);
            })
        })
        .collect();
    let send = |i: u32| {
        let f = build::udp(
            &Spec::new(PEER4.parse().unwrap(), HOST4.parse().unwrap(), 5, 7000),
            &i.to_be_bytes(),
        );
        loop {
            let mut p = h.sim_port().unwrap();
            let r = p.inject(&f, 0);
            p.flush(rxpath_dev::mono_ns());
            if r.is_ok() {
                break;
            }
            drop(p);
            thread::yield_now();
        }
    };
    for i in 0..N {
        send(i);
    }
    // On a loaded machine the readers may have had no CPU while the burst
    // went by (the NAPI thread then delivers everything): a paced tail
    // meets them busy polling between reads.
    let mut sent = N;
    let tail_end = Instant::now() + Duration::from_secs(10);
    while h.sockets().stats().busy_poll_packets == 0 && Instant::now() < tail_end {
        send(sent);
        sent += 1;
        thread::sleep(Duration::from_micros(50));
    }
    // Let the readers drain, then stop them.
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.lock().unwrap().len() < sent as usize
        && s.counters().read < sent as u64 + 1
        && Instant::now() < deadline
    {
        thread::sleep(Duration::from_millis(5));
    }
    done.store(true, Ordering::Release);
    for r in readers {
        r.join().unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    let unique: HashSet<u32> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len(), "a packet was processed twice");
    let st = h.sockets().stats();
    let dropped = s.counters().drops;
    assert_eq!(
        seen.len() as u64 + dropped,
        sent as u64,
        "every packet once (read or counted drop); busy-poll stats {st:?}"
    );
    assert!(
        st.busy_poll_packets > 0,
        "busy pollers took packets: {st:?}"
    );
    drop(s);
    let h = Arc::into_inner(h).unwrap();
    let r = h.shutdown();
    assert_eq!(r.napi_total().received, sent as u64 + 1);
    all_home(&r);
}

#[test]
fn bad_checksum_is_a_counted_drop() {
    let h = host(1, 1);
    let s = h.udp_bind(sa(HOST4, 7000)).unwrap();
    let mut f = build::udp(
        &Spec::new(PEER4.parse().unwrap(), HOST4.parse().unwrap(), 5, 7000),
        b"corrupt",
    );
    let last = f.len() - 1;
    f[last] ^= 0xff;
    {
        let mut p = h.sim_port().unwrap();
        p.inject(&f, 0).unwrap();
        p.flush(rxpath_dev::mono_ns());
    }
    inject(&h, sa(PEER4, 5), sa(HOST4, 7000), b"good");
    assert_eq!(recv_str(&s).0, "good");
    let r = h.shutdown();
    assert_eq!(r.sock.csum_errors, 1);
    all_home(&r);
}

#[test]
fn epoll_reports_the_ready_socket_and_rfs_records_the_reader() {
    let h = host(2, 1);
    let a = h.udp_bind(sa(HOST4, 7000)).unwrap();
    let b = h.udp_bind(sa(HOST4, 7001)).unwrap();
    let mut ep = Epoll::new(h.sockets());
    ep.add(&a, 10);
    ep.add(&b, 11);
    let mut ready = Vec::new();
    assert_eq!(ep.wait(&mut ready, Some(Duration::from_millis(10))), 0);
    let hs = h.sockets().clone();
    let injector = {
        let port_host = &h;
        thread::scope(|sc| {
            sc.spawn(|| {
                thread::sleep(Duration::from_millis(20));
                inject(port_host, sa(PEER4, 5), sa(HOST4, 7001), b"for-b");
            });
            ep.wait(&mut ready, Some(Duration::from_secs(5)))
        })
    };
    assert_eq!(injector, 1);
    assert_eq!(ready, vec![11]);
    assert_eq!(recv_str(&b).0, "for-b");
    // recv recorded this thread's CPU for the flow (the RFS sock flow table).
    let key =
        rxpath_wire::FlowKey::new(PEER4.parse().unwrap(), HOST4.parse().unwrap(), 5, 7001, 17);
    let hash = rxpath_wire::hash::flow_hash(&key);
    let cpu = hs.sock_flows().desired_cpu(hash);
    assert!(cpu.is_some(), "flow recorded");
    drop((a, b, ep));
    all_home(&h.shutdown());
}

/// A host on the simulated NIC (an interrupt per frame) with these
/// prefer-busy-poll deferral and IRQ suspension timeouts, and a socket on
/// port 7000 that has read a first datagram.
fn deferring_host(prefer_ns: u64, suspend_ns: u64) -> (Arc<Host>, UdpSocket) {
    let mut cfg = HostConfig {
        prefer_busy_poll_ns: prefer_ns,
        irq_suspend_timeout_ns: suspend_ns,
        ..Default::default()
    };
    cfg.sock.local_addrs = vec![HOST4.parse().unwrap()];
    let sim = SimConfig {
        coalesce: Coalesce::EVERY_FRAME,
        ..Default::default()
    };
    let h = Arc::new(Host::start(cfg, HostDevice::Sim(sim)).unwrap());
    let s = h.udp_bind(sa(HOST4, 7000)).unwrap();
    inject(&h, sa(PEER4, 5), sa(HOST4, 7000), b"learn");
    assert_eq!(recv_str(&s).0, "learn");
    (h, s)
}

/// Send "busy" to port 7000 once a busy poller owns the NAPI and has
/// masked the queue's interrupt (`busy_start`), so that busy polling finds
/// it: on a loaded machine the NAPI thread may still be finishing the
/// previous poll, and a packet it takes by interrupt defers nothing.
fn inject_once_busy_polled(h: &Arc<Host>) -> thread::JoinHandle<()> {
    let h = h.clone();
    thread::spawn(move || {
        let give_up = Instant::now() + Duration::from_secs(1);
        let n = &h.napis()[0];
        let masked = || n.state.in_busy_poll() && !n.irq.as_ref().unwrap().is_armed();
        while !masked() && Instant::now() < give_up {
            thread::yield_now();
        }
        inject(&h, sa(PEER4, 5), sa(HOST4, 7000), b"busy");
    })
}

/// An epoll set busy-polls a host whose prefer-busy-poll deferral is
/// 200 µs and whose IRQ suspension timeout is `suspend_ns`, and is handed
/// one datagram found by that busy poll. Returns whether the interrupt is
/// still deferred 50 ms later (the waiter is busy with what it was handed
/// and has not polled again).
fn deferred_after_handing_over(suspend_ns: u64) -> bool {
    let (h, s) = deferring_host(200_000, suspend_ns);
    let mut ep = Epoll::new(h.sockets());
    ep.add(&s, 1);
    ep.set_busy_poll(2_000_000);
    let t = inject_once_busy_polled(&h);
    let mut ready = Vec::new();
    assert_eq!(ep.wait(&mut ready, Some(Duration::from_secs(5))), 1);
    t.join().unwrap();
    assert!(h.napis()[0].deferred_until() != 0, "interrupt deferred");
    // Busy with the datagram, far longer than the 200 µs deferral.
    thread::sleep(Duration::from_millis(50));
    let deferred = h.napis()[0].deferred_until() != 0;
    assert_eq!(recv_str(&s).0, "busy");
    drop((ep, s));
    all_home(&Arc::into_inner(h).unwrap().shutdown());
    deferred
}

#[test]
fn an_epoll_wait_that_hands_over_events_suspends_the_interrupt() {
    // `ep_suspend_napi_irqs()`: the deferral runs on for the suspension
    // timeout (60 s here) from the hand-over...
    assert!(deferred_after_handing_over(60_000_000_000));
    // ...and without one the NAPI thread takes the queue back when the
    // 200 µs deferral lapses.
    assert!(!deferred_after_handing_over(0));
}

#[test]
fn prefer_busy_poll_defers_the_interrupt_until_the_socket_sleeps() {
    // Deferral far longer than the test: only resume_irqs can end it.
    let (h, s) = deferring_host(60_000_000_000, 0);
    // Found by busy polling (a busy poll long enough for any scheduling);
    // the interrupt stays masked afterwards.
    s.set_busy_poll(2_000_000);
    let t = inject_once_busy_polled(&h);
    assert_eq!(recv_str(&s).0, "busy");
    t.join().unwrap();
    assert!(h.napis()[0].deferred_until() != 0, "interrupt deferred");
    s.set_busy_poll(2_000);
    // Now the socket busy-polls 2 ms, finds nothing and sleeps: that ends
    // the deferral, so a packet that comes later wakes it through the
    // interrupt instead of waiting for the 60 s deadline.
    let h2 = h.clone();
    let t = thread::spawn(move || {
        thread::sleep(Duration::from_millis(50));
        inject(&h2, sa(PEER4, 5), sa(HOST4, 7000), b"late");
    });
    s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut b = [0u8; 64];
    let n = s.recv(&mut b).expect("woken by the interrupt");
    assert_eq!(&b[..n], b"late");
    assert!(s.counters().sleeps >= 1);
    t.join().unwrap();
    drop(s);
    all_home(&Arc::into_inner(h).unwrap().shutdown());
}

/// `GET /metrics` from `addr`, the classic text format.
fn scrape(addr: SocketAddr) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("metrics endpoint");
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn sample(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

/// A host's metrics for an application (`Metrics::for_host`): the socket
/// counters are read at every scrape while it runs, and the final report
/// adds the per-queue counters, equal to the report's.
#[test]
fn a_host_serves_its_counters_for_prometheus() {
    let h = host(1, 1);
    let m = rxpath_runtime::metrics::Metrics::for_host(&h, "127.0.0.1:0".parse().unwrap())
        .expect("listen on loopback");
    let s = h.udp_bind(sa(HOST4, 7100)).unwrap();
    let before = scrape(m.addr);
    assert_eq!(
        sample(&before, "rxpath_socket_in_datagrams_total"),
        Some(0),
        "{before}"
    );
    for i in 0..50 {
        inject(
            &h,
            sa(PEER4, 5000),
            sa(HOST4, 7100),
            format!("m{i}").as_bytes(),
        );
        recv_str(&s);
    }
    // Two for a port nobody has.
    inject(&h, sa(PEER4, 5000), sa(HOST4, 7199), b"x");
    inject(&h, sa(PEER4, 5000), sa(HOST4, 7199), b"y");
    let t = Instant::now();
    let live = loop {
        let t2 = scrape(m.addr);
        if sample(&t2, "rxpath_socket_no_ports_total") == Some(2) || t.elapsed().as_secs() > 5 {
            break t2;
        }
        thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        sample(&live, "rxpath_socket_in_datagrams_total"),
        Some(50),
        "{live}"
    );
    assert_eq!(
        sample(&live, "rxpath_socket_no_ports_total"),
        Some(2),
        "{live}"
    );
    assert!(live.contains("\nrxpath_run_finished 0\n"), "{live}");
    assert_eq!(
        sample(&live, "rxpath_rx_packets_total{queue=\"0\"}"),
        Some(52),
        "the queue's NAPI counters are live too: {live}"
    );
    drop(s);
    let r = h.shutdown();
    m.finish_host(&r);
    let end = scrape(m.addr);
    assert!(end.contains("\nrxpath_run_finished 1\n"), "{end}");
    assert_eq!(
        sample(&end, "rxpath_rx_packets_total{queue=\"0\"}"),
        Some(r.queues[0].napi.received),
        "{end}"
    );
}

/// Read everything queued on `s` now: each datagram's payload.
fn drain(s: &UdpSocket) -> Vec<String> {
    let mut out = Vec::new();
    let mut b = [0u8; 2048];
    while let Ok((n, _)) = s.try_recv_from(&mut b) {
        out.push(String::from_utf8_lossy(&b[..n]).into_owned());
    }
    out
}

#[test]
fn a_reuseport_group_keeps_each_flow_on_one_member_and_spreads_them() {
    use rxpath_core::sock::BindOptions;
    let h = host(1, 1);
    let rp = BindOptions {
        reuseport: true,
        ..Default::default()
    };
    let group: Vec<UdpSocket> = (0..4)
        .map(|_| h.udp_bind_held_with(sa("0.0.0.0", 7100), rp).unwrap())
        .collect();
    // Without SO_REUSEPORT the address is taken; a latecomer with it
    // cannot join a socket that did not set it.
    assert!(matches!(
        h.udp_bind_held(sa("0.0.0.0", 7100)),
        Err(SockError::AddrInUse(_))
    ));
    let plain = h.udp_bind(sa("0.0.0.0", 7101)).unwrap();
    assert!(matches!(
        h.udp_bind_held_with(sa("0.0.0.0", 7101), rp),
        Err(SockError::AddrInUse(_))
    ));
    drop(plain);
    // 64 flows, three datagrams each.
    let send_all = |round: &str| {
        for f in 0..64u16 {
            for k in 0..3 {
                inject(
                    &h,
                    sa(PEER4, 20000 + f),
                    sa(HOST4, 7100),
                    format!("{round} {f} {k}").as_bytes(),
                );
            }
        }
        thread::sleep(Duration::from_millis(200));
    };
    send_all("a");
    let got: Vec<Vec<String>> = group.iter().map(drain).collect();
    let flows_of = |got: &[Vec<String>]| -> Vec<HashSet<String>> {
        got.iter()
            .map(|v| {
                v.iter()
                    .map(|d| d.split(' ').nth(1).unwrap().to_string())
                    .collect()
            })
            .collect()
    };
    let flows = flows_of(&got);
    let total: usize = got.iter().map(Vec::len).sum();
    assert_eq!(total, 64 * 3, "every datagram reached a member");
    for (i, a) in flows.iter().enumerate() {
        assert!(!a.is_empty(), "member {i} got no flow: {flows:?}");
        for b in flows.iter().skip(i + 1) {
            assert!(a.is_disjoint(b), "a flow split across members");
        }
    }
    // The same flows land where they did while the group is the same.
    send_all("b");
    let again = flows_of(&group.iter().map(drain).collect::<Vec<_>>());
    assert_eq!(again, flows, "each flow on the member it had");
    // A member leaves: the others take every flow, theirs still theirs
    // where the scale keeps them; nothing is lost.
    let mut group = group;
    let gone = group.remove(3);
    drop(gone);
    send_all("c");
    let after: Vec<Vec<String>> = group.iter().map(drain).collect();
    assert_eq!(after.iter().map(Vec::len).sum::<usize>(), 64 * 3);
    // A connected socket in the group wins for its peer (udp4_lib_lookup2
    // returns an established socket before the group picks).
    group[0].connect(sa(PEER4, 20005)).unwrap();
    inject(
        &h,
        sa(PEER4, 20005),
        sa(HOST4, 7100),
        b"to the connected one",
    );
    assert_eq!(recv_str(&group[0]).0, "to the connected one");
    drop(group);
    all_home(&h.shutdown());
}

#[test]
fn a_reuseport_program_picks_the_member_it_names() {
    use rxpath_core::sock::cbpf::{Cbpf, Insn};
    use rxpath_core::sock::BindOptions;
    let h = host(1, 1);
    let rp = BindOptions {
        reuseport: true,
        ..Default::default()
    };
    let group: Vec<UdpSocket> = (0..4)
        .map(|_| h.udp_bind_held_with(sa("0.0.0.0", 7200), rp).unwrap())
        .collect();
    // `ld b[0]; ret a`: the payload's first byte names the member.
    let insn = |code, k| Insn {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let prog = Cbpf::new(&[insn(0x30, 0), insn(0x16, 0)]).unwrap();
    group[2]
        .socket()
        .attach_reuseport_cbpf(Some(prog.clone()))
        .unwrap();
    for f in 0..32u16 {
        let m = [(f % 4) as u8, b'x'];
        inject(&h, sa(PEER4, 21000 + f), sa(HOST4, 7200), &m);
    }
    thread::sleep(Duration::from_millis(200));
    for (i, s) in group.iter().enumerate() {
        let got = drain(s);
        assert_eq!(got.len(), 8, "member {i}: {got:?}");
        assert!(got.iter().all(|d| d.as_bytes()[0] == i as u8), "{got:?}");
    }
    // An index past the group: the hash picks; nothing is lost.
    for f in 0..32u16 {
        inject(&h, sa(PEER4, 21000 + f), sa(HOST4, 7200), &[9, b'y']);
    }
    thread::sleep(Duration::from_millis(200));
    let n: usize = group.iter().map(|s| drain(s).len()).sum();
    assert_eq!(n, 32);
    // Detached, the hash again; a socket without SO_REUSEPORT has no group.
    group[0].socket().attach_reuseport_cbpf(None).unwrap();
    for f in 0..32u16 {
        inject(&h, sa(PEER4, 21000 + f), sa(HOST4, 7200), &[0, b'z']);
    }
    thread::sleep(Duration::from_millis(200));
    let per: Vec<usize> = group.iter().map(|s| drain(s).len()).collect();
    assert_eq!(per.iter().sum::<usize>(), 32);
    assert!(per[0] < 32, "the hash spreads again: {per:?}");
    let plain = h.udp_bind(sa("0.0.0.0", 7201)).unwrap();
    assert!(matches!(
        plain.socket().attach_reuseport_cbpf(Some(prog)),
        Err(SockError::Invalid(_))
    ));
    drop((group, plain));
    all_home(&h.shutdown());
}
