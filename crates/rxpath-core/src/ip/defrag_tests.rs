//! Reassembly through the IP stage: fragments of known datagrams in every
//! order the kernel handles, each outcome's counters, and a property test
//! that every frame comes home whatever arrives.

use super::super::{CsumPolicy, IpConfig, IpStage, Reasm};
use super::DefragConfig;
use crate::packet::{ChainPool, Datagram, Frags, Meta, Packet, PollEnd, RxCtx, Stack};
use crate::snmp::Snmp;
use crate::stats::{DropReason, NapiStats};
use proptest::prelude::*;
use rxpath_frames::{Frame, FramePool};
use rxpath_wire::build::{self, Spec};

const SRV: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
const SEC: u64 = 1_000_000_000;

/// The datagrams that reached the end: payload bytes, source port; and
/// the TCP segments, from their IP header on.
#[derive(Default)]
struct Got(Vec<(Vec<u8>, u16)>, Vec<Vec<u8>>);

impl Stack for Got {
    fn receive_tcp(&mut self, p: Packet, seg: &crate::packet::TcpSeg, ctx: &mut RxCtx<'_>) {
        let mut v = ctx.data(&p)[seg.l3..].to_vec();
        for f in p.frags.iter() {
            v.extend_from_slice(ctx.frag_data(f));
        }
        self.1.push(v);
        ctx.deliver(p);
    }
    fn receive(&mut self, p: Packet, ctx: &mut RxCtx<'_>) {
        ctx.drop(p, DropReason::UnhandledProto)
    }
    fn receive_udp(&mut self, p: Packet, d: &Datagram, ctx: &mut RxCtx<'_>) {
        let head = &ctx.data(&p)[d.payload_off..];
        // A plain packet's UDP length may stop short of its IP length.
        let n = if p.frags.is_empty() {
            d.payload_len
        } else {
            head.len()
        };
        let mut v: Vec<u8> = head[..n].to_vec();
        for f in p.frags.iter() {
            v.extend_from_slice(ctx.frag_data(f));
        }
        assert_eq!(v.len(), d.payload_len, "the datagram's length");
        self.0.push((v, d.src.port()));
        ctx.deliver(p);
    }
}

struct Rig {
    pool: FramePool,
    recycle: Vec<Frame>,
    chains: ChainPool,
    stats: NapiStats,
    stage: IpStage<Got>,
    fed: u64,
}

fn cfg(reasm: Reasm) -> IpConfig {
    IpConfig {
        mac: SRV,
        addrs: vec![
            "198.18.9.6".parse().unwrap(),
            "2001:2:0:9::6".parse().unwrap(),
        ],
        csum: CsumPolicy::Auto,
        reasm,
        ..IpConfig::default()
    }
}

impl Rig {
    fn new() -> Rig {
        Rig::with(Reasm::default())
    }

    fn with(reasm: Reasm) -> Rig {
        Rig::with_cfg(cfg(reasm))
    }

    fn with_cfg(cfg: IpConfig) -> Rig {
        Rig {
            pool: FramePool::new(4096, 2048).unwrap(),
            recycle: Vec::new(),
            chains: Vec::new(),
            stats: NapiStats::default(),
            stage: IpStage::new(Some(cfg), Got::default()),
            fed: 0,
        }
    }

    /// Run `f` on the stage in a context at `now`, then take the frames
    /// it freed home.
    fn run<R>(&mut self, now: u64, f: impl FnOnce(&mut IpStage<Got>, &mut RxCtx<'_>) -> R) -> R {
        let umem = self.pool.umem().clone();
        let mut ctx = RxCtx::new(
            &umem,
            &mut self.recycle,
            &mut self.stats,
            &mut self.chains,
            now,
        );
        let r = f(&mut self.stage, &mut ctx);
        self.home();
        r
    }

    fn feed(&mut self, bytes: &[u8], now: u64) {
        let mut f = self.pool.alloc().expect("a frame");
        self.pool.umem().data_mut(&mut f)[..bytes.len()].copy_from_slice(bytes);
        let headers = rxpath_wire::parse(bytes).unwrap_or_default();
        let pkt = Packet {
            frame: f,
            off: 0,
            len: bytes.len() as u16,
            meta: Meta {
                rx_ns: now,
                segs: 1,
                headers,
                ..Meta::default()
            },
            frags: Frags::new(),
        };
        self.fed += 1;
        self.run(now, |s, ctx| {
            s.receive(pkt, ctx);
            s.poll_done(ctx, PollEnd::Complete { work_done: 1 });
        });
    }

    fn feed_all(&mut self, frames: &[Vec<u8>], now: u64) {
        for f in frames {
            self.feed(f, now);
        }
    }

    /// A poll with nothing received at `now` (a timer).
    fn tick(&mut self, now: u64) -> Option<u64> {
        self.run(now, |s, ctx| {
            s.poll_done(ctx, PollEnd::Complete { work_done: 0 })
        })
    }

    fn stop(&mut self) {
        self.run(0, |s, ctx| s.stop(ctx))
    }

    fn home(&mut self) {
        for f in self.recycle.drain(..) {
            self.pool.free(f);
        }
    }

    fn snmp(&self) -> &Snmp {
        &self.stats.snmp
    }

    fn got(&self) -> &[(Vec<u8>, u16)] {
        &self.stage.inner().0
    }

    /// Nothing held, every frame counted and home.
    fn settled(&self) {
        assert_eq!(self.stage.held(), 0, "nothing held");
        assert_eq!(
            self.stats.delivered + self.stats.dropped.total(),
            self.fed,
            "every frame delivered or dropped"
        );
        assert!(self.pool.is_home(), "every frame home");
    }
}

fn payload(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

fn dgram(v6: bool, sport: u16, body: &[u8]) -> Vec<u8> {
    let (src, dst) = if v6 {
        ("2001:2:0:9::5", "2001:2:0:9::6")
    } else {
        ("198.18.9.5", "198.18.9.6")
    };
    let mut s = Spec::new(src.parse().unwrap(), dst.parse().unwrap(), sport, 7);
    s.dst_mac = SRV;
    build::udp(&s, body)
}

fn v4(sport: u16, body: &[u8]) -> Vec<u8> {
    dgram(false, sport, body)
}

fn v6(sport: u16, body: &[u8]) -> Vec<u8> {
    dgram(true, sport, body)
}

/// The IP payload length (UDP header and data) of a frame `build::udp` made.
fn ip_payload(frame: &[u8]) -> usize {
    frame.len() - 14 - if frame[12] == 0x86 { 40 } else { 20 }
}

fn cut(frame: &[u8], mtu: usize, id: u32) -> Vec<Vec<u8>> {
    let v6 = frame[12] == 0x86;
    build::fragments(frame, &build::mtu_pieces(ip_payload(frame), mtu, v6), id)
}

#[test]
fn an_8k_datagram_in_order_and_reversed_comes_out_whole() {
    for make in [v4 as fn(u16, &[u8]) -> Vec<u8>, v6] {
        let body = payload(8000, 1);
        let frame = make(4000, &body);
        let mut frags = cut(&frame, 1500, 77);
        assert_eq!(frags.len(), 6);
        let mut r = Rig::new();
        r.feed_all(&frags, 0);
        frags.reverse();
        r.feed_all(&frags, 1);
        assert_eq!(r.got().len(), 2);
        assert!(r.got().iter().all(|g| g.0 == body && g.1 == 4000));
        let m = if make(1, b"")[12] == 0x86 {
            r.snmp().ip6
        } else {
            r.snmp().ip
        };
        assert_eq!((m.reasm_reqds, m.reasm_oks, m.reasm_fails), (12, 2, 0));
        assert_eq!((m.in_receives, m.in_delivers), (12, 2));
        r.settled();
    }
}

/// A TCP segment in fragments (the XDP program takes the pieces of a
/// datagram whose first piece went to one of rxpath's ports): reassembled
/// and handed to TCP whole, in either order, IPv6's fragment header taken
/// out; the machine reads it as the segment that was sent.
#[test]
fn a_fragmented_tcp_segment_reaches_tcp_whole() {
    for v6 in [false, true] {
        for reversed in [false, true] {
            let mut r = Rig::with_cfg(IpConfig {
                tcp: true,
                ..cfg(Reasm::default())
            });
            let (src, dst) = if v6 {
                ("2001:2:0:9::5", "2001:2:0:9::6")
            } else {
                ("198.18.9.5", "198.18.9.6")
            };
            let mut s = Spec::new(src.parse().unwrap(), dst.parse().unwrap(), 40000, 5201);
            s.dst_mac = SRV;
            let body = payload(3000, 9);
            let frame = build::tcp(&s, 1000, 2000, 0x18, &[], &body);
            let mut pieces = cut(&frame, 1280, 77);
            assert!(pieces.len() >= 3);
            if reversed {
                pieces.reverse();
            }
            r.feed_all(&pieces, 0);
            let what = format!("v6 {v6} reversed {reversed}");
            let got = &r.stage.inner().1;
            assert_eq!(got.len(), 1, "{what}: one segment");
            let seg = rxpath_tcp::wire::parse(&got[0]).unwrap_or_else(|e| panic!("{what}: {e:?}"));
            assert_eq!((seg.seq, seg.ack), (1000, 2000), "{what}");
            assert_eq!(seg.dst.port(), 5201, "{what}");
            assert_eq!(seg.payload, &body[..], "{what}");
            r.stop();
            r.home();
        }
    }
}

#[test]
fn interleaved_datagrams_each_find_their_queue() {
    let (a, b) = (payload(3000, 2), payload(4100, 3));
    let fa = cut(&v4(1, &a), 1500, 1);
    let fb = cut(&v4(2, &b), 1500, 2);
    let mut r = Rig::new();
    for i in 0..fa.len().max(fb.len()) {
        if let Some(f) = fb.get(i) {
            r.feed(f, 0);
        }
        if let Some(f) = fa.get(fa.len() - 1 - i.min(fa.len() - 1)) {
            if i < fa.len() {
                r.feed(f, 0);
            }
        }
    }
    let mut got = r.got().to_vec();
    got.sort_by_key(|g| g.1);
    assert_eq!(got, vec![(a, 1), (b, 2)]);
    r.settled();
}

#[test]
fn an_overlap_drops_the_queue_and_a_duplicate_only_itself() {
    let body = payload(2000, 4);
    let frame = v4(9, &body);
    let n = ip_payload(&frame);
    // An overlap: [0,1480) then [1000, n).
    let mut r = Rig::new();
    r.feed_all(
        &build::fragments(&frame, &[(0, 1480), (1000, n - 1000)], 5),
        0,
    );
    let m = r.snmp().ip;
    assert_eq!((m.reasm_overlaps, m.reasm_fails, m.reasm_oks), (1, 1, 0));
    assert!(r.got().is_empty());
    r.settled();
    // A duplicate inside the run held: dropped, the datagram completes.
    let mut r = Rig::new();
    let p = [
        (0, 800),
        (800, 800),
        (0, 1600),
        (800, 800),
        (1600, n - 1600),
    ];
    r.feed_all(&build::fragments(&frame, &p, 6), 0);
    let m = r.snmp().ip;
    assert_eq!((m.reasm_overlaps, m.reasm_fails, m.reasm_oks), (0, 0, 1));
    assert_eq!(r.got()[0].0, body);
    assert_eq!(r.stats.dropped.get(DropReason::Fragment), 2);
    r.settled();
    // The same bytes out of order are two runs: the spanning copy overlaps.
    let mut r = Rig::new();
    let p = [(800, 800), (0, 800), (0, 1600)];
    r.feed_all(&build::fragments(&frame, &p, 7), 0);
    assert_eq!(r.snmp().ip.reasm_overlaps, 1);
    r.settled();
}

#[test]
fn a_missing_piece_times_out_after_ipfrag_time() {
    let frame = v6(3, &payload(3000, 5));
    let frags = cut(&frame, 1280, 9);
    let mut r = Rig::new();
    r.feed_all(&frags[1..], SEC);
    assert_eq!(r.stage.held(), frags.len() as u64 - 1);
    assert_eq!(r.tick(SEC), Some(61 * SEC), "the timer: ip6frag_time");
    r.tick(61 * SEC - 1);
    assert_eq!(r.snmp().ip6.reasm_timeout, 0);
    assert_eq!(r.tick(61 * SEC), None);
    let m = r.snmp().ip6;
    assert_eq!((m.reasm_timeout, m.reasm_fails, m.reasm_oks), (1, 1, 0));
    r.settled();
    // The first piece alone later starts a queue of its own.
    r.feed(&frags[0], 62 * SEC);
    assert_eq!(r.stage.held(), 1);
    r.stop();
    r.settled();
}

#[test]
fn lengths_the_kernel_refuses() {
    let frame = v4(3, &payload(3000, 6));
    let n = ip_payload(&frame);
    // Two different ends: the queue dies.
    let mut r = Rig::new();
    r.feed_all(
        &build::fragments(&frame, &[(1480, n - 1480), (0, 1480)], 1),
        0,
    );
    let mut last = build::fragments(&frame, &[(1480, n - 1480 - 8)], 2);
    last[0][14 + 6] &= !0x20; // no MF: a second, shorter end
    rxpath_wire::corpus::fix_ipv4_checksum(&mut last[0]);
    r.feed_all(&build::fragments(&frame, &[(1480, n - 1480)], 2), 0);
    r.feed_all(&last, 0);
    assert_eq!(r.snmp().ip.reasm_fails, 1);
    r.settled();
    // Over 64 KiB: every piece queued, then refused whole.
    let mut r = Rig::new();
    let big = v4(4, &payload(1000, 7));
    let mut p: Vec<(usize, usize)> = (0..44).map(|i| (i * 1480, 1480)).collect();
    p.push((44 * 1480, 1000));
    let frags = build::fragments(&big, &p, 3);
    r.feed_all(&frags, 0);
    let m = r.snmp().ip;
    assert_eq!((m.reasm_reqds, m.reasm_fails, m.reasm_oks), (45, 1, 0));
    r.settled();
}

#[test]
fn ipv6_header_errors_drop_the_fragment_and_keep_the_queue() {
    let frame = v6(3, &payload(3000, 8));
    let n = ip_payload(&frame);
    let mut r = Rig::new();
    // A fragment with MF whose length is not a multiple of 8: a header
    // error; the queue stays, and the right piece completes it.
    let p = [(0, 1000), (1000, 1001), (1000, 1000), (2000, n - 2000)];
    r.feed_all(&build::fragments(&frame, &p, 4), 0);
    let m = r.snmp().ip6;
    assert_eq!((m.in_hdr_errors, m.reasm_fails, m.reasm_oks), (1, 0, 1));
    r.settled();
    // Past 64 KiB: a header error, the queue left to time out.
    let mut r = Rig::new();
    r.feed_all(
        &build::fragments(&frame, &[(0, 1000), (65_000, 1000)], 5),
        0,
    );
    assert_eq!((r.snmp().ip6.in_hdr_errors, r.stage.held()), (1, 1));
    r.tick(61 * SEC);
    let m = r.snmp().ip6;
    assert_eq!((m.reasm_timeout, m.reasm_fails), (1, 1));
    r.settled();
    // A first fragment without the whole UDP header.
    let mut r = Rig::new();
    r.feed_all(&build::fragments(&frame, &[(0, 0)], 5), 0);
    assert_eq!(r.snmp().ip6.in_hdr_errors, 1);
    r.settled();
}

#[test]
fn a_bad_checksum_over_the_whole_is_counted() {
    let mut frame = v4(3, &payload(3000, 9));
    let last = frame.len() - 1;
    frame[last] ^= 0xff;
    let mut r = Rig::new();
    r.feed_all(&cut(&frame, 1500, 6), 0);
    let (ip, udp) = (r.snmp().ip, r.snmp().udp);
    assert_eq!((ip.reasm_oks, udp.in_csum_errors, udp.in_errors), (1, 1, 1));
    assert!(r.got().is_empty());
    r.settled();
}

#[test]
fn mixed_ecn_fails_and_ce_is_carried() {
    let frame = v4(3, &payload(2000, 10));
    let mut frags = cut(&frame, 1500, 7);
    let set_tos = |f: &mut Vec<u8>, tos: u8| {
        f[15] = tos;
        rxpath_wire::corpus::fix_ipv4_checksum(f);
    };
    set_tos(&mut frags[1], 2);
    let mut r = Rig::new();
    r.feed_all(&frags, 0);
    assert_eq!((r.snmp().ip.reasm_fails, r.snmp().ip.reasm_oks), (1, 0));
    r.settled();
    set_tos(&mut frags[0], 2);
    set_tos(&mut frags[1], 3);
    let mut r = Rig::new();
    r.feed_all(&frags, 0);
    assert_eq!(r.snmp().ip.reasm_oks, 1);
    r.settled();
}

#[test]
fn limits_refuse_new_fragments() {
    let frame = v4(3, &payload(3000, 11));
    let frags = cut(&frame, 1500, 8);
    let tight = DefragConfig {
        max_frames: 2,
        ..DefragConfig::V4
    };
    let mut r = Rig::with(Reasm {
        v4: tight,
        v6: DefragConfig::V6,
    });
    // Three other datagrams' first pieces fill the table.
    for id in 20..23 {
        r.feed(&cut(&frame, 1500, id)[0], 0);
    }
    r.feed_all(&frags, 0);
    assert_eq!(r.snmp().ip.reasm_fails, 1 + 3);
    assert!(r.got().is_empty());
    r.stop();
    r.settled();
}

#[test]
fn a_queue_too_far_behind_its_source_starts_again() {
    let frame = v4(3, &payload(2000, 12));
    let frags = cut(&frame, 1500, 30);
    let other = v4(4, &payload(100, 13));
    let mut r = Rig::new();
    r.feed(&frags[0], 0);
    // 65 fragments of other datagrams from the same source in between.
    for id in 100..165 {
        r.feed(&build::fragments(&other, &[(8, 8)], id)[0], 0);
    }
    r.feed(&frags[1], 0);
    assert_eq!(r.snmp().ip.reasm_fails, 1);
    assert!(r.got().is_empty(), "the first piece went with the restart");
    r.feed(&frags[0], 0);
    assert_eq!(r.got().len(), 1);
    r.stop();
    r.settled();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Any pieces of any datagram, in any order, with repeats: no panic,
    /// the datagram comes out right if at all, every frame comes home.
    #[test]
    fn any_pieces_in_any_order(
        len in 8usize..6000,
        cuts in proptest::collection::vec((0usize..760, 1usize..200), 1..12),
        six in any::<bool>(),
    ) {
        let body = payload(len, 14);
        let frame = if six { v6(5, &body) } else { v4(5, &body) };
        let n = ip_payload(&frame);
        let pieces: Vec<(usize, usize)> = cuts
            .iter()
            .map(|&(o, l)| ((o * 8).min(n / 8 * 8), l * 8))
            .collect();
        let mut r = Rig::new();
        r.feed_all(&build::fragments(&frame, &pieces, 40), 0);
        for g in r.got() {
            prop_assert_eq!(&g.0, &body);
        }
        r.tick(100 * SEC);
        r.settled();
    }
}
