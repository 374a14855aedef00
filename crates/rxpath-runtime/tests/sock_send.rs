//! The socket layer's send side on a simulated NIC: frames built from
//! learned neighbours, `sendmmsg` batches, the NIC's TX ring, and every
//! frame home at the end.

mod common;

use common::*;
use rxpath_core::sock::{CaptureTx, SockError};
use rxpath_wire::build::Spec;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;

#[test]
fn send_builds_frames_from_learned_neighbours() {
    let h = host(1, 1);
    let tx = CaptureTx::default();
    h.sockets().set_tx(Box::new(tx.clone()));
    let s = h.udp_bind(sa("0.0.0.0", 7000)).unwrap();
    // Nobody known yet.
    assert!(matches!(
        s.send_to(b"hi", sa(PEER4, 9)),
        Err(SockError::NoNeighbor(_))
    ));
    inject(&h, sa(PEER4, 9), sa(HOST4, 7000), b"ping");
    let (m, src) = recv_str(&s);
    assert_eq!(m, "ping");
    s.send_to(b"pong", src).unwrap();
    // Past the MTU with IP_PMTUDISC_DO: refused (the default fragments).
    s.socket().set_pmtudisc_do(true);
    assert_eq!(
        s.send_to(&[0u8; 1473], src),
        Err(SockError::MessageTooLong {
            len: 1473,
            max: 1472,
            mtu: 1500
        })
    );
    s.socket().set_pmtudisc_do(false);
    let c = s.clone();
    c.connect(src).unwrap();
    c.send(b"again").unwrap();
    let frames = tx.frames.lock().unwrap().clone();
    assert_eq!(frames.len(), 2);
    for (f, want) in frames.iter().zip([&b"pong"[..], b"again"]) {
        let hd = rxpath_wire::parse(f).expect("valid frame");
        assert_eq!(hd.flow.src(), HOST4.parse::<IpAddr>().unwrap());
        assert_eq!(hd.flow.dst(), PEER4.parse::<IpAddr>().unwrap());
        assert_eq!((hd.flow.src_port, hd.flow.dst_port), (7000, 9));
        let p = hd.payload_offset as usize;
        assert_eq!(&f[p..p + hd.payload_len as usize], want);
        // The destination MAC is the one the ping came from.
        assert_eq!(
            &f[0..6],
            &Spec::new(HOST4.parse().unwrap(), HOST4.parse().unwrap(), 0, 0).src_mac
        );
        let seg = &f[hd.l4_offset as usize..p + hd.payload_len as usize];
        assert_eq!(
            rxpath_wire::checksum::l4(hd.flow.src(), hd.flow.dst(), 17, seg),
            0
        );
    }
    assert_eq!(h.sockets().stats().out_datagrams, 2);
    all_home(&h.shutdown());
}

/// `sendmmsg`: the datagrams of a batch reach the TX port in one send (one
/// kick of a TX ring); the batch stops at the first that cannot leave and
/// says why, so the caller can hand that one elsewhere (the preload: to
/// the kernel socket) and go on with the rest.
#[test]
fn a_batch_leaves_in_one_send_and_stops_where_a_datagram_cannot() {
    let h = host(1, 1);
    let tx = CaptureTx::default();
    h.sockets().set_tx(Box::new(tx.clone()));
    let s = h.udp_bind(sa("0.0.0.0", 7001)).unwrap();
    inject(&h, sa(PEER4, 9), sa(HOST4, 7001), b"ping");
    let (_, peer) = recv_str(&s);
    let sock = s.socket();
    let batch: Vec<(&[u8], SocketAddr)> = vec![(b"one", peer), (b"two", peer), (b"three", peer)];
    assert_eq!(sock.send_batch_until(&batch), (3, None));
    assert_eq!(*tx.batches.lock().unwrap(), vec![3]);
    // The second has no neighbour: the first leaves, the third is not
    // tried, and the caller learns why.
    let unknown = sa("198.18.0.77", 9);
    let stops: Vec<(&[u8], SocketAddr)> = vec![(b"four", peer), (b"five", unknown), (b"six", peer)];
    let (sent, why) = sock.send_batch_until(&stops);
    assert_eq!(sent, 1);
    assert!(matches!(why, Some(SockError::NoNeighbor(_))), "{why:?}");
    assert_eq!(*tx.batches.lock().unwrap(), vec![3, 1]);
    let payloads: Vec<Vec<u8>> = tx
        .frames
        .lock()
        .unwrap()
        .iter()
        .map(|f| {
            let hd = rxpath_wire::parse(f).expect("valid frame");
            let p = hd.payload_offset as usize;
            f[p..p + hd.payload_len as usize].to_vec()
        })
        .collect();
    assert_eq!(payloads, [&b"one"[..], b"two", b"three", b"four"]);
    assert_eq!(h.sockets().stats().out_datagrams, 4);
    all_home(&h.shutdown());
}

/// A host on the simulated NIC sends through the NIC's TX ring (256
/// frames of its own): replies reach the wire; when the ring stops
/// completing (the fault), sends are refused and counted `SndbufErrors`
/// (`sim_tx_busy`), nothing is lost, and once it completes again replies
/// flow; every frame, the TX ring's too, comes home.
#[test]
fn the_sim_tx_ring_sends_and_a_ring_that_stops_completing_is_counted() {
    let h = host(1, 1);
    let s = h.udp_bind(sa("0.0.0.0", 7000)).unwrap();
    inject(&h, sa(PEER4, 9), sa(HOST4, 7000), b"ping");
    let (_, src) = recv_str(&s);
    let stall = h.tx_stop_completing().expect("the sim NIC has a TX ring");
    for _ in 0..10 {
        s.send_to(b"pong", src).unwrap();
    }
    stall.store(true, Ordering::Relaxed);
    // 256 frames, the last pong still on the ring (the wire takes what was
    // posted at the next send): 255 more fit on the stopped ring, then none.
    for _ in 0..300 {
        // Refused sends succeed, as the kernel's UDP does, and are counted.
        s.send_to(b"stuck", src).unwrap();
    }
    let st = h.sockets().stats();
    assert_eq!(st.out_datagrams, 10 + 255, "{st:?}");
    stall.store(false, Ordering::Relaxed);
    s.send_to(b"again", src).unwrap();
    drop(s);
    let r = h.shutdown();
    assert_eq!(r.snmp.udp.out_datagrams, 10 + 255 + 1);
    assert_eq!(r.snmp.udp.sndbuf_errors, 300 - 255);
    assert_eq!(r.tx["sim_tx_sent"], 10 + 255 + 1);
    assert_eq!(r.tx["sim_tx_completed"], 10 + 255 + 1);
    assert_eq!(r.tx["sim_tx_busy"], 300 - 255);
    all_home(&r);
}

/// A TX port that takes every frame and, when the host stops, says the
/// newest `unfinished` never completed (a TX ring whose interface went
/// with frames in flight).
#[derive(Debug)]
struct NeverCompletes {
    inner: CaptureTx,
    unfinished: u64,
}

impl rxpath_core::sock::TxPort for NeverCompletes {
    fn send(&mut self, frames: &[&[u8]]) -> std::io::Result<usize> {
        self.inner.send(frames)
    }

    fn unfinished(&self) -> u64 {
        self.unfinished
    }
}

/// `OutDatagrams` counts what the device took: a datagram whose frames a
/// TX ring never completed is taken out of it when the host stops, and
/// counted `tx_unfinished`, by datagram (a fragmented one with any frame
/// left counts once), in its family.
#[test]
fn datagrams_a_tx_ring_never_completed_are_not_counted_sent() {
    let h = host(1, 1);
    h.sockets().set_tx(Box::new(NeverCompletes {
        inner: CaptureTx::default(),
        unfinished: 2,
    }));
    let s = h.udp_bind(sa("0.0.0.0", 7002)).unwrap();
    inject(&h, sa(PEER4, 9), sa(HOST4, 7002), b"ping");
    let (_, peer) = recv_str(&s);
    for _ in 0..3 {
        s.send_to(b"small", peer).unwrap();
    }
    // Three fragments, then one frame: the last two frames are the big
    // one's last fragment and the small one after it.
    s.send_to(&[7u8; 3000], peer).unwrap();
    s.send_to(b"last", peer).unwrap();
    assert_eq!(h.sockets().stats().out_datagrams, 5, "posted, counted");
    drop(s);
    let r = h.shutdown();
    assert_eq!(r.snmp.udp.out_datagrams, 3, "{:?}", r.sock);
    assert_eq!(r.sock.out_datagrams, 3);
    assert_eq!(r.sock.tx_unfinished, 2);
    assert_eq!(r.snmp.udp6.out_datagrams, 0);
    all_home(&r);
}
