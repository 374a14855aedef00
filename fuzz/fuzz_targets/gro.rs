//! GRO fed arbitrary segment sequences: flows of TCP segments with every
//! field the merge rules look at varied (sequence gaps, flags, options,
//! IP ID, TTL, TOS, DF, VLAN, IPv6, checksum status, lengths up to 64 KiB
//! merged), single bytes flipped, UDP, polls that complete or run out of
//! budget, and time passing with the flush timer.
//!
//! Invariants checked inside: per flow, the payload that leaves GRO is the
//! payload that came in, byte for byte and in order; every packet fed
//! leaves; nothing is held after the last flush; every frame comes home.

#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use rxpath_core::gro::{Gro, GroConfig, GroKnob};
use rxpath_core::packet::{ChainPool, Frags, Meta, Packet, PollEnd, RxCtx, Stack};
use rxpath_core::stats::NapiStats;
use rxpath_dev::{Frame, FramePool};
use rxpath_wire::build::{self, Spec};
use rxpath_wire::FlowKey;
use std::collections::HashMap;
use std::net::IpAddr;

#[derive(Arbitrary, Debug)]
enum Op {
    /// The next segment of flow `flow`, changed as `tweak` says.
    Seg {
        flow: u8,
        len: u16,
        tweak: u8,
        csum_ok: bool,
        gap_ns: u16,
    },
    /// A segment with one byte changed anywhere (headers included).
    Flip { flow: u8, at: u16, xor: u8 },
    /// A UDP datagram of the flow's addresses.
    Udp { flow: u8, len: u8 },
    /// The poll ends: complete, or out of budget.
    Poll { complete: bool },
    /// Time passes (the NAPI timer fires if due).
    Wait { ns: u32 },
}

#[derive(Arbitrary, Debug)]
struct Input {
    timeout: u8,
    ops: Vec<Op>,
}

#[derive(Default)]
struct Out(HashMap<GroFlow, Vec<u8>>, u64);

/// What makes two packets one GRO flow, as the kernel tells them apart
/// (`same_flow`): the link header (MACs, VLAN tags: `compare_ether_header`),
/// for IPv6 the version and flow label (`ipv6_gro_receive`), and the
/// 5-tuple. Packets of different GRO flows may leave in either order, as in
/// the kernel; differences within a flow (TTL, hop limit, TOS, IP ID,
/// flags, options) flush instead, and keep the order.
type GroFlow = (Vec<u8>, [u8; 4], FlowKey);

fn gro_flow(frame: &[u8], h: &rxpath_wire::Headers) -> GroFlow {
    let l3 = h.l3_offset as usize;
    let mut v6 = [0u8; 4];
    if h.l3 == rxpath_wire::L3::Ipv6 {
        v6.copy_from_slice(&frame[l3..l3 + 4]);
        v6[1] &= 0x0f;
        v6[0] &= 0xf0;
    }
    (frame[..l3].to_vec(), v6, h.flow)
}

impl Stack for Out {
    fn receive(&mut self, p: Packet, ctx: &mut RxCtx<'_>) {
        let e = self
            .0
            .entry(gro_flow(ctx.data(&p), &p.meta.headers))
            .or_default();
        for part in ctx.payload_parts(&p) {
            e.extend_from_slice(part);
        }
        self.1 += p.frames() as u64;
        ctx.deliver(p);
    }
}

struct Flow {
    v6: bool,
    vlan: Option<u16>,
    sport: u16,
    seq: u32,
    ip_id: u16,
    fill: u8,
}

impl Flow {
    fn new(i: u8) -> Flow {
        Flow {
            v6: i & 1 == 1,
            vlan: (i & 2 == 2).then_some(100),
            sport: 1000 + i as u16,
            seq: (i as u32).wrapping_mul(0x1000_0001),
            ip_id: i as u16,
            fill: i,
        }
    }

    fn spec(&self) -> Spec {
        let (s, d): (IpAddr, IpAddr) = if self.v6 {
            ("2001:2::1".parse().unwrap(), "2001:2::2".parse().unwrap())
        } else {
            ("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap())
        };
        let mut spec = Spec::new(s, d, self.sport, 5201);
        spec.vlan = self.vlan;
        spec.ip_id = self.ip_id;
        spec.ttl = 64;
        spec.df = true;
        spec
    }

    /// The flow's next segment with `tweak` applied; advances the flow.
    fn next(&mut self, len: usize, tweak: u8) -> Vec<u8> {
        let mut spec = self.spec();
        let mut flags = rxpath_wire::tcp::flags::ACK;
        let mut seq = self.seq;
        let mut opts: Vec<u8> = vec![1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 7];
        match tweak % 16 {
            0 => flags |= rxpath_wire::tcp::flags::PSH,
            1 => flags |= rxpath_wire::tcp::flags::FIN,
            2 => flags |= rxpath_wire::tcp::flags::SYN,
            3 => flags |= rxpath_wire::tcp::flags::RST,
            4 => flags |= rxpath_wire::tcp::flags::URG,
            5 => seq = seq.wrapping_add(tweak as u32 * 7),
            6 => seq = seq.wrapping_sub(100),
            7 => spec.ttl = 1,
            8 => spec.tos = 4,
            9 => spec.df = false,
            10 => spec.ip_id = spec.ip_id.wrapping_add(9),
            11 => opts = vec![1, 1, 8, 10, 0, 0, 0, 10, 0, 0, 0, 7],
            12 => opts.clear(),
            13 => flags |= rxpath_wire::tcp::flags::CWR,
            _ => {}
        }
        let payload: Vec<u8> = (0..len).map(|i| self.fill.wrapping_add(i as u8)).collect();
        let b = build::tcp(&spec, seq, 1, flags, &opts, &payload);
        self.seq = seq.wrapping_add(len as u32);
        self.ip_id = spec.ip_id.wrapping_add(1);
        self.fill = self.fill.wrapping_add(len as u8).wrapping_add(1);
        b
    }
}

struct Harness {
    pool: FramePool,
    recycle: Vec<Frame>,
    chains: ChainPool,
    stats: NapiStats,
    gro: Gro,
    out: Out,
    sent: HashMap<GroFlow, Vec<u8>>,
    fed: u64,
    timer: Option<u64>,
}

impl Harness {
    fn feed(&mut self, bytes: &[u8], now: u64, csum_ok: bool) {
        // A frame that does not parse never reaches GRO (the NAPI hands it
        // up as malformed); one larger than a frame is cut as the NIC would.
        let bytes = &bytes[..bytes.len().min(2048)];
        let Ok(headers) = rxpath_wire::parse(bytes) else {
            return;
        };
        let Some(mut f) = self.pool.alloc() else {
            return;
        };
        let umem = self.pool.umem().clone();
        umem.data_mut(&mut f)[..bytes.len()].copy_from_slice(bytes);
        let p = headers.payload_offset as usize;
        self.sent
            .entry(gro_flow(bytes, &headers))
            .or_default()
            .extend_from_slice(&bytes[p..p + headers.payload_len as usize]);
        let meta = Meta {
            rx_ns: now,
            segs: 1,
            headers,
            csum_ok,
            ..Meta::default()
        };
        let pkt = Packet {
            frame: f,
            off: 0,
            len: bytes.len() as u16,
            meta,
            frags: Frags::new(),
        };
        self.fed += 1;
        self.in_poll(now, |gro, ctx, out| {
            let _ = gro.receive(pkt, ctx, out);
        });
    }

    fn poll_end(&mut self, end: PollEnd, now: u64) {
        let t = self.in_poll(now, |gro, ctx, out| gro.poll_done(ctx, end, out));
        if t.is_some() {
            self.timer = t;
        }
    }

    /// Run `f` on GRO inside a poll at `now`; what it frees goes home.
    fn in_poll<T>(
        &mut self,
        now: u64,
        f: impl FnOnce(&mut Gro, &mut RxCtx<'_>, &mut Out) -> T,
    ) -> T {
        let umem = self.pool.umem().clone();
        let mut ctx = RxCtx::new(
            &umem,
            &mut self.recycle,
            &mut self.stats,
            &mut self.chains,
            now,
        );
        let r = f(&mut self.gro, &mut ctx, &mut self.out);
        drop(ctx);
        self.give_back();
        r
    }

    fn give_back(&mut self) {
        for f in self.recycle.drain(..) {
            self.pool.free(f);
        }
    }
}

/// A host whose every UDP socket asked for `UDP_GRO`.
#[derive(Debug)]
struct AllUdp;

impl rxpath_core::gro::UdpGroPolicy for AllUdp {
    fn wants(&self, _: &rxpath_wire::FlowKey) -> bool {
        true
    }
}

fuzz_target!(|input: Input| {
    let timeout = [0u64, 2_000, 50_000, 1_000_000][input.timeout as usize % 4];
    let mut h = Harness {
        pool: FramePool::new(512, 2048).unwrap(),
        recycle: Vec::new(),
        chains: Vec::new(),
        stats: NapiStats::default(),
        gro: Gro::new(GroConfig {
            enabled: true,
            flush_timeout: GroKnob::new(timeout),
            adaptive: None,
            // Every UDP datagram is for a socket with UDP_GRO.
            udp: Some(std::sync::Arc::new(AllUdp)),
        }),
        out: Out::default(),
        sent: HashMap::new(),
        fed: 0,
        timer: None,
    };
    let mut flows: Vec<Flow> = (0..8).map(Flow::new).collect();
    let mut now = 1u64;
    let mut work = 0usize;
    for op in input.ops.iter().take(2000) {
        if let Some(t) = h.timer {
            if now >= t {
                h.timer = None;
                h.poll_end(PollEnd::Complete { work_done: 0 }, t);
            }
        }
        match *op {
            Op::Seg {
                flow,
                len,
                tweak,
                csum_ok,
                gap_ns,
            } => {
                now += gap_ns as u64;
                let f = &mut flows[flow as usize % 8];
                let b = f.next(len as usize % 1449, tweak);
                h.feed(&b, now, csum_ok);
                work += 1;
            }
            Op::Flip { flow, at, xor } => {
                let mut b = flows[flow as usize % 8].next(1448, 255);
                let i = at as usize % b.len();
                b[i] ^= xor;
                h.feed(&b, now, xor & 1 == 1);
                work += 1;
            }
            Op::Udp { flow, len } => {
                let spec = flows[flow as usize % 8].spec();
                let payload = vec![flow; len as usize];
                h.feed(&build::udp(&spec, &payload), now, true);
                work += 1;
            }
            Op::Poll { complete } => {
                let end = if complete {
                    PollEnd::Complete { work_done: work }
                } else {
                    PollEnd::Full
                };
                h.poll_end(end, now);
                work = 0;
            }
            Op::Wait { ns } => now += ns as u64,
        }
    }
    // The last poll completes; the timer, if armed, fires: all out.
    h.poll_end(PollEnd::Complete { work_done: work }, now);
    if let Some(t) = h.timer.take() {
        h.poll_end(PollEnd::Complete { work_done: 0 }, t.max(now));
    }
    h.poll_end(PollEnd::Complete { work_done: 0 }, u64::MAX / 2);
    assert_eq!(h.gro.held(), 0, "nothing held after the last flush");
    assert_eq!(h.out.1, h.fed, "every segment left GRO");
    assert_eq!(h.stats.delivered, h.fed, "every segment counted delivered");
    for (flow, sent) in &h.sent {
        let got = h.out.0.get(flow).map_or(&[][..], |v| &v[..]);
        let at = sent.iter().zip(got).position(|(a, b)| a != b);
        assert!(
            got == &sent[..],
            "flow {flow:?}: {} bytes in, {} out, first difference at {at:?}",
            sent.len(),
            got.len()
        );
    }
    assert_eq!(
        h.out.0.len(),
        h.sent.len(),
        "no flow out that did not come in"
    );
    assert!(h.pool.is_home(), "every frame came home");
});
