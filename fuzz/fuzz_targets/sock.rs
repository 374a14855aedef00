//! The socket layer's receive path: arbitrary frames (and UDP datagrams
//! with single bytes flipped) into a host with an IPv4 socket, a
//! dual-stack socket, a connected one and an IPv6-only one; some read,
//! some left queued, one closed with datagrams in it. Never a panic;
//! received = delivered + dropped; what a socket returns lies inside the
//! datagram; every frame comes home. The sockets' own accounting is held
//! to what this target observes: a socket's `read` counter is the reads
//! that returned a datagram, its `queued` counter those reads plus what
//! it still holds (at its close, or at the end); the datagrams queued in
//! all sockets are the stage's deliveries, and the sockets' queue-full
//! drops are its `SocketQueueFull` drops.

#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use rxpath_core::packet::{ChainPool, Frags, Meta, Packet, RxCtx, Stack};
use rxpath_core::sock::{SockConfig, Socket, Sockets};
use rxpath_core::stats::NapiStats;
use rxpath_dev::{Frame, FramePool};
use rxpath_wire::build::{self, Spec};
use std::net::{IpAddr, SocketAddr};

#[derive(Arbitrary, Debug)]
enum Op {
    /// Arbitrary bytes as a frame.
    Raw(Vec<u8>),
    /// A UDP datagram to one of the bound ports, maybe with a byte flipped.
    Udp {
        v6: bool,
        port: u8,
        sport: u16,
        len: u8,
        flip: Option<(u16, u8)>,
        csum_ok: bool,
    },
    /// Read up to this many datagrams from socket `s`.
    Read { s: u8, n: u8 },
    /// Close socket `s` (its queue goes home).
    Close { s: u8 },
}

const HOST4: &str = "198.18.0.2";
const HOST6: &str = "2001:2::2";
const PORTS: [u16; 4] = [7000, 7001, 7002, 7003];

fn sa(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse::<IpAddr>().unwrap(), port)
}

fuzz_target!(|ops: Vec<Op>| {
    let mut pool = FramePool::new(256, 2048).unwrap();
    let umem = pool.umem().clone();
    let cfg = SockConfig {
        local_addrs: vec![HOST4.parse().unwrap(), HOST6.parse().unwrap()],
        rcvbuf: 16 * 2048,
        ..SockConfig::default()
    };
    let host = Sockets::new(cfg, vec![umem.clone()]);
    let mut socks: Vec<Option<Socket>> = vec![
        Socket::bind(&host, sa(HOST4, PORTS[0])).ok(),
        Socket::bind(&host, sa("::", PORTS[1])).ok(),
        Socket::bind(&host, sa(HOST4, PORTS[2])).ok(),
        Socket::bind(&host, sa(HOST6, PORTS[3])).ok(),
    ];
    if let Some(s) = &socks[2] {
        s.connect(sa("198.18.0.1", 5000)).unwrap();
    }
    let mut stage = host.stage(0);
    let (mut recycle, mut chains, mut stats): (Vec<Frame>, ChainPool, NapiStats) =
        (Vec::new(), Vec::new(), NapiStats::default());
    let mut buf = [0u8; 2048];
    // What the target saw: reads that returned a datagram, per socket, and
    // the datagrams queued and dropped by the sockets already closed.
    let mut reads = [0u64; 4];
    let (mut queued_closed, mut drops_closed) = (0u64, 0u64);
    let settle = |s: &Socket, reads: u64| {
        let c = s.counters();
        assert_eq!(c.read, reads, "read counter against the reads seen");
        assert_eq!(
            c.queued,
            reads + s.queued() as u64,
            "queued = read + still queued: {c:?}"
        );
        (c.queued, c.drops)
    };
    for op in ops.iter().take(500) {
        let frame = match op {
            Op::Raw(b) => b.clone(),
            Op::Udp {
                v6,
                port,
                sport,
                len,
                flip,
                csum_ok: _,
            } => {
                let (s, d) = if *v6 {
                    ("2001:2::1", HOST6)
                } else {
                    ("198.18.0.1", HOST4)
                };
                let mut spec = Spec::new(
                    s.parse().unwrap(),
                    d.parse().unwrap(),
                    *sport,
                    PORTS[*port as usize % 4],
                );
                spec.dst_mac = [0x02, 0, 0, 0, 0, 2];
                let mut b = build::udp(&spec, &vec![*len; *len as usize]);
                if let Some((at, x)) = flip {
                    let i = *at as usize % b.len();
                    b[i] ^= x;
                }
                b
            }
            Op::Read { s, n } => {
                let i = *s as usize % 4;
                if let Some(sock) = &socks[i] {
                    for _ in 0..*n {
                        match sock.try_recv_from(&mut buf) {
                            Ok((len, _)) => {
                                assert!(len <= 255, "a datagram longer than sent");
                                reads[i] += 1;
                            }
                            Err(_) => break,
                        }
                    }
                }
                continue;
            }
            Op::Close { s } => {
                let i = *s as usize % 4;
                if let Some(sock) = socks[i].take() {
                    let (q, d) = settle(&sock, reads[i]);
                    queued_closed += q;
                    drops_closed += d;
                }
                continue;
            }
        };
        let frame = &frame[..frame.len().min(2048)];
        // The NAPI's part: a frame that parses reaches the stage.
        let Ok(headers) = rxpath_wire::parse(frame) else {
            continue;
        };
        let csum_ok = matches!(
            op,
            Op::Udp {
                csum_ok: true,
                flip: None,
                ..
            }
        );
        let Some(mut f) = pool.alloc() else {
            // Every frame is queued in a socket: read some back.
            let mut back = Vec::new();
            host.port(0).unwrap().ret.drain_into(&mut back);
            for f in back {
                pool.free(f);
            }
            continue;
        };
        umem.data_mut(&mut f)[..frame.len()].copy_from_slice(frame);
        let pkt = Packet {
            frame: f,
            off: 0,
            len: frame.len() as u16,
            meta: Meta {
                segs: 1,
                headers,
                csum_ok,
                ..Meta::default()
            },
            frags: Frags::new(),
        };
        // The NAPI counts what it takes from the queue.
        stats.received += 1;
        let mut ctx = RxCtx::new(&umem, &mut recycle, &mut stats, &mut chains, 1);
        stage.receive(pkt, &mut ctx);
        for f in recycle.drain(..) {
            pool.free(f);
        }
        let mut back = Vec::new();
        host.port(0).unwrap().ret.drain_into(&mut back);
        for f in back {
            pool.free(f);
        }
    }
    // The path stops: what IP reassembly holds (a flip can make any
    // frame a fragment) is let go, counted dropped.
    let mut ctx = RxCtx::new(&umem, &mut recycle, &mut stats, &mut chains, 1);
    stage.stop(&mut ctx);
    for f in recycle.drain(..) {
        pool.free(f);
    }
    assert!(
        stats.accounted(),
        "received = delivered + dropped: {stats:?}"
    );
    let (mut queued, mut drops) = (queued_closed, drops_closed);
    for (s, r) in socks.iter().zip(reads) {
        if let Some(s) = s {
            let (q, d) = settle(s, r);
            queued += q;
            drops += d;
        }
    }
    assert_eq!(
        stats.delivered, queued,
        "the stage's deliveries are the sockets' queued datagrams"
    );
    assert_eq!(
        stats
            .dropped
            .get(rxpath_core::stats::DropReason::SocketQueueFull),
        drops,
        "queue-full drops on the stage and on the sockets"
    );
    drop(socks);
    drop(stage);
    host.close_all();
    let mut back = Vec::new();
    host.port(0).unwrap().ret.drain_into(&mut back);
    for f in back {
        pool.free(f);
    }
    assert!(pool.is_home(), "every frame came home");
});
