//! GRO rules, flushing and the flush timer, with literal segments and
//! simulated time.

mod common;

use common::Harness;
use proptest::prelude::*;
use rxpath_core::gro::{Check, FlushReason, GroResult, TICK_NS};
use rxpath_core::ip::CsumPolicy;
use rxpath_core::napi::CsumMode;
use rxpath_core::packet::{Meta, PollEnd};
use rxpath_wire::build::{self, Spec};
use rxpath_wire::tcp::flags;
use std::collections::HashMap;
use std::net::IpAddr;

const MSS: usize = 1448;
const TS: [u8; 12] = [1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 7];

/// A segment to build.
#[derive(Debug, Clone)]
struct Seg {
    v6: bool,
    sport: u16,
    seq: u32,
    ack: u32,
    flags: u16,
    opts: Vec<u8>,
    len: usize,
    ip_id: u16,
    ttl: u8,
    tos: u8,
    df: bool,
    vlan: Option<u16>,
    fill: u8,
}

impl Seg {
    fn new(seq: u32) -> Seg {
        Seg {
            v6: false,
            sport: 40000,
            seq,
            ack: 1,
            flags: flags::ACK,
            opts: TS.to_vec(),
            len: MSS,
            ip_id: 100,
            ttl: 64,
            tos: 0,
            df: false,
            vlan: None,
            fill: (seq % 251) as u8,
        }
    }
    fn bytes(&self) -> Vec<u8> {
        let (s, d): (IpAddr, IpAddr) = if self.v6 {
            ("2001:2::1".parse().unwrap(), "2001:2::2".parse().unwrap())
        } else {
            ("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap())
        };
        let mut spec = Spec::new(s, d, self.sport, 5201);
        spec.ip_id = self.ip_id;
        spec.ttl = self.ttl;
        spec.tos = self.tos;
        spec.df = self.df;
        spec.vlan = self.vlan;
        let payload: Vec<u8> = (0..self.len)
            .map(|i| self.fill.wrapping_add(i as u8))
            .collect();
        build::tcp(&spec, self.seq, self.ack, self.flags, &self.opts, &payload)
    }
    /// The next segment of the same flow.
    fn next(&self) -> Seg {
        let mut n = self.clone();
        n.seq = self.seq.wrapping_add(self.len as u32);
        n.ip_id = self.ip_id.wrapping_add(1);
        n.fill = self.fill.wrapping_add(self.len as u8);
        n.flags = flags::ACK;
        n
    }
}

/// Feed TCP segments.
trait FeedSeg {
    fn feed(&mut self, s: &Seg, now: u64) -> GroResult;
}

impl FeedSeg for Harness {
    fn feed(&mut self, s: &Seg, now: u64) -> GroResult {
        self.feed_raw(&s.bytes(), now, 0, false)
    }
}

/// Feed two segments, flush, return the shape (segments per packet out).
fn pair(a: &Seg, b: &Seg) -> Vec<u16> {
    let mut h = Harness::new(0);
    h.feed(a, 1);
    h.feed(b, 2);
    h.flush(3);
    let s = h.shape();
    h.finish();
    s
}

#[test]
fn a_contiguous_pair_merges_into_one_chain_with_one_header() {
    let a = Seg::new(1000);
    let b = a.next();
    let mut h = Harness::new(0);
    assert_eq!(h.feed(&a, 1), GroResult::Held);
    assert_eq!(h.feed(&b, 2), GroResult::Merged);
    assert_eq!(h.gro.held(), 2);
    h.flush(3);
    assert_eq!(h.shape(), vec![2]);
    let o = &h.out.0[0];
    assert_eq!(o.seq, 1000);
    let mut expect = a.bytes()[66..].to_vec();
    expect.extend_from_slice(&b.bytes()[66..]);
    assert_eq!(o.payload, expect, "payload is the concatenation");
    assert_eq!(h.gro.stats().flushes(FlushReason::PollEnd), 1);
    h.finish();
}

type Mutate = fn(&mut Seg, &mut Seg);

fn rule_cases() -> Vec<(&'static str, Mutate)> {
    vec![
        ("ack number", |_, b| b.ack = b.ack.wrapping_add(1)),
        ("timestamp option value", |_, b| b.opts[7] ^= 1),
        ("option length", |_, b| b.opts = vec![1, 1, 1, 1]),
        ("sequence gap", |_, b| b.seq = b.seq.wrapping_add(1)),
        ("ttl", |_, b| b.ttl ^= 1),
        ("tos", |_, b| b.tos ^= 4),
        ("df", |a, b| b.df = !a.df),
        ("ip id not incrementing", |_, b| {
            b.ip_id = b.ip_id.wrapping_add(1)
        }),
        ("longer than mss", |a, b| {
            b.len = a.len + 1;
        }),
        ("other flag differs (ECE)", |_, b| b.flags |= flags::ECE),
        ("cwr", |_, b| b.flags |= flags::CWR),
        ("psh on the first", |a, _| a.flags |= flags::PSH),
        ("urg on the first", |a, _| a.flags |= flags::URG),
        ("rst on the first", |a, _| a.flags |= flags::RST),
        ("syn on the first", |a, _| a.flags |= flags::SYN),
        ("fin on the first", |a, _| a.flags |= flags::FIN),
        ("other flow (port)", |_, b| {
            b.sport = b.sport.wrapping_add(1)
        }),
        ("other vlan", |a, b| {
            b.vlan = Some(a.vlan.map_or(7, |v| v ^ 1))
        }),
        ("no payload", |_, b| b.len = 0),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// For a generated pair of contiguous segments (random sequence, ACK,
    /// length, IP ID, TTL, TOS, DF, VLAN, family), the pair merges; with
    /// exactly one rule broken, it never does.
    #[test]
    fn each_rule_broken_alone_prevents_the_merge(
        seq in any::<u32>(), ack in any::<u32>(), len in 2usize..MSS, id in any::<u16>(),
        ttl in 1u8..255, tos in prop::sample::select(vec![0u8, 0x10, 0xb8]), df in any::<bool>(),
        vlan in prop::option::of(1u16..4000), v6 in any::<bool>(),
    ) {
        let mut a = Seg::new(seq);
        a.ack = ack;
        a.len = len;
        a.ip_id = id;
        a.ttl = ttl;
        a.tos = tos;
        a.df = df;
        a.vlan = vlan;
        a.v6 = v6;
        let b = a.next();
        let mut b = b;
        b.len = len;
        prop_assert_eq!(pair(&a, &b), vec![2], "the base pair merges");
        for (name, m) in rule_cases() {
            // Rules that only exist for IPv4 are skipped for IPv6 pairs.
            if v6 && matches!(name, "df" | "ip id not incrementing") {
                continue;
            }
            let (mut x, mut y) = (a.clone(), b.clone());
            m(&mut x, &mut y);
            prop_assert_eq!(pair(&x, &y), vec![1, 1], "{} must not merge", name);
        }
    }
}

#[test]
fn ipv6_rules_and_fixed_id_with_df() {
    let mut a = Seg::new(1);
    a.v6 = true;
    let b = a.next();
    assert_eq!(pair(&a, &b), vec![2]);
    let mut c = b.clone();
    c.ttl = 1; // hop limit
    assert_eq!(pair(&a, &c), vec![1, 1]);
    let mut c = b.clone();
    c.tos = 8; // traffic class
    assert_eq!(pair(&a, &c), vec![1, 1]);
    // IPv4 with DF and a fixed ID merges; without DF it does not.
    let mut a = Seg::new(1);
    a.df = true;
    let mut b = a.next();
    b.ip_id = a.ip_id;
    assert_eq!(pair(&a, &b), vec![2]);
    a.df = false;
    b.df = false;
    assert_eq!(pair(&a, &b), vec![1, 1]);
}

#[test]
fn ip_level_checks_go_up_normal_and_keep_the_flow_in_order() {
    let a = Seg::new(1);
    let b = a.next();
    // IPv4 options: rebuild b with IHL 6 by hand.
    let mut opt = b.bytes();
    opt.splice(34..34, [1u8, 1, 1, 0]);
    opt[14] = 0x46;
    let tl = u16::from_be_bytes([opt[16], opt[17]]) + 4;
    opt[16..18].copy_from_slice(&tl.to_be_bytes());
    rxpath_wire::ipv4::Packet::new_unchecked(&mut opt[14..]).fill_checksum();
    let mut h = Harness::new(0);
    h.feed(&a, 1);
    assert_eq!(h.feed_raw(&opt, 2, 0, true), GroResult::Normal);
    assert_eq!(h.gro.stats().not_merged(Check::IpOptions), 1);
    assert_eq!(h.shape(), vec![1, 1]);
    assert_eq!(h.out.0[0].seq, 1, "held packet of the flow went first");
    h.finish();

    // Bad checksum (the device did not verify it): not merged.
    let mut bad = b.bytes();
    let n = bad.len();
    bad[n - 1] ^= 0xff;
    let mut h = Harness::new(0);
    h.feed(&a, 1);
    assert_eq!(h.feed_raw(&bad, 2, 0, false), GroResult::Normal);
    assert_eq!(h.gro.stats().not_merged(Check::BadChecksum), 1);
    h.finish();

    // Fragment.
    let mut frag = b.bytes();
    frag[20] = 0x20; // MF
    rxpath_wire::ipv4::Packet::new_unchecked(&mut frag[14..]).fill_checksum();
    let mut h = Harness::new(0);
    h.feed(&a, 1);
    assert_eq!(h.feed_raw(&frag, 2, 0, true), GroResult::Normal);
    assert_eq!(h.gro.stats().not_merged(Check::Fragment), 1);
    h.finish();
}

/// Found by the `gro` fuzz target (kept as a regression test of the
/// kernel's notion of a flow): a segment with the same 5-tuple but another
/// source MAC (`compare_ether_header`), or for IPv6 another flow label
/// (`ipv6_gro_receive`), is another GRO flow. It neither merges with nor
/// flushes the held packet, so a PSH segment of it leaves first; the held
/// flow merges on with its own next segment. Another hop limit is the same
/// flow (since 6.10 a flush: both leave, in order).
#[test]
fn another_mac_or_ipv6_flow_label_is_another_gro_flow() {
    for (v6, what, edit) in [
        (false, "source MAC", 6usize),
        (true, "IPv6 flow label", 14 + 3),
    ] {
        let mut a = Seg::new(1);
        a.v6 = v6;
        let b = a.next();
        let mut psh = b.bytes();
        psh[edit] ^= 0x01;
        let t = psh.len() - 1448 - 12 - 20 + 13; // TCP flags byte
        psh[t] |= flags::PSH as u8;
        let mut h = Harness::new(0);
        h.feed(&a, 1);
        assert_eq!(h.feed_raw(&psh, 2, 0, true), GroResult::Normal, "{what}");
        assert_eq!(
            h.out.0.len(),
            1,
            "{what}: the other flow's PSH segment left at once"
        );
        assert_eq!(h.out.0[0].seq, b.seq, "{what}: it is the second segment");
        assert_eq!(
            h.feed(&b, 3),
            GroResult::Merged,
            "{what}: the held flow merges on"
        );
        h.flush(4);
        assert_eq!(h.shape(), vec![1, 2], "{what}");
        h.finish();
    }
    let mut a = Seg::new(1);
    a.v6 = true;
    let mut b = a.next().bytes();
    b[14 + 7] ^= 0x01;
    let mut h = Harness::new(0);
    h.feed(&a, 1);
    // The held packet goes up; the new one starts a packet of its own.
    assert_eq!(h.feed_raw(&b, 2, 0, true), GroResult::Held);
    assert_eq!(h.shape(), vec![1], "hop limit: a flush of the held packet");
    h.flush(3);
    assert_eq!(h.shape(), vec![1, 1]);
    assert_eq!(h.out.0[0].seq, 1, "in order");
    h.finish();
}

#[test]
fn short_and_psh_segments_end_the_packet_at_once() {
    let a = Seg::new(1);
    let mut b = a.next();
    b.len = 500;
    let c = b.next();
    let mut h = Harness::new(0);
    h.feed(&a, 1);
    assert_eq!(
        h.feed(&b, 2),
        GroResult::Merged,
        "a shorter segment is merged"
    );
    assert_eq!(h.shape(), vec![2], "...and ends the packet");
    assert_eq!(h.gro.stats().flushes(FlushReason::Short), 1);
    assert_eq!(h.feed(&c, 3), GroResult::Held);
    let mut d = c.next();
    d.flags |= flags::PSH;
    assert_eq!(h.feed(&d, 4), GroResult::Merged);
    assert_eq!(h.shape(), vec![2, 2], "PSH is never delayed");
    assert_eq!(h.gro.stats().flushes(FlushReason::Psh), 1);
    assert_eq!(h.gro.held(), 0);
    h.finish();
}

#[test]
fn merged_size_stays_under_64k() {
    let mut h = Harness::new(0);
    let mut s = Seg::new(1);
    for i in 0..50 {
        h.feed(&s, i);
        s = s.next();
    }
    h.flush(100);
    let shape = h.shape();
    // 20 IP + 32 TCP + 45 × 1448 = 65212 < 65536; a 46th would not fit.
    // (45 × 1448 = 65160: what the kernel's GRO makes of an iperf3 stream.)
    assert_eq!(shape, vec![45, 5]);
    assert_eq!(h.gro.stats().flushes(FlushReason::Size), 1);
    assert_eq!(h.gro.stats().not_merged(Check::SizeLimit), 1);
    h.finish();
}

#[test]
fn a_full_bucket_flushes_its_oldest() {
    let mut h = Harness::new(0);
    // Nine flows whose RX hashes all select bucket 3.
    for f in 0..9u16 {
        let mut s = Seg::new(1);
        s.sport = 1000 + f;
        h.feed_raw(&s.bytes(), f as u64, 8 * f as u32 + 3, false);
    }
    assert_eq!(h.gro.stats().flushes(FlushReason::BucketFull), 1);
    assert_eq!(h.out.0.len(), 1);
    assert_eq!(h.out.0[0].sport, 1000, "the oldest went");
    assert_eq!(h.gro.held(), 8);
    h.finish();
}

#[test]
fn flush_timeout_keeps_packets_across_polls_and_the_timer_flushes_them() {
    let t = 2_000;
    let mut h = Harness::new(t);
    let mut s = Seg::new(1);
    h.feed(&s, 10);
    // The poll found work: nothing young is flushed, the timer is armed.
    assert_eq!(
        h.poll_end(PollEnd::Complete { work_done: 1 }, 10),
        Some(10 + t)
    );
    assert_eq!(h.gro.held(), 1);
    // Traffic continues: the next poll merges across the poll boundary.
    s = s.next();
    assert_eq!(h.feed(&s, 500), GroResult::Merged);
    assert_eq!(
        h.poll_end(PollEnd::Complete { work_done: 1 }, 500),
        Some(500 + t)
    );
    // Traffic stops: the timer's poll finds nothing and flushes everything.
    assert_eq!(
        h.poll_end(PollEnd::Complete { work_done: 0 }, 500 + t),
        None
    );
    assert_eq!(h.shape(), vec![2]);
    assert_eq!(h.gro.stats().flushes(FlushReason::Timer), 1);
    let o = &h.out.0[0];
    assert!(
        o.at - o.first_rx <= 500 + t,
        "held {} ns",
        o.at - o.first_rx
    );
    // The knob changes while running: 0 flushes at the next completion.
    s = s.next();
    h.feed(&s, 10_000);
    h.gro.config().flush_timeout.set(0);
    assert_eq!(h.poll_end(PollEnd::Complete { work_done: 1 }, 10_000), None);
    assert_eq!(h.gro.held(), 0);
    h.finish();
}

#[test]
fn full_polls_flush_only_packets_older_than_a_tick() {
    let mut h = Harness::new(0);
    let mut a = Seg::new(1);
    a.sport = 1;
    let mut b = Seg::new(1);
    b.sport = 2;
    h.feed(&a, 100);
    h.feed(&b, TICK_NS + 100);
    h.poll_end(PollEnd::Full, TICK_NS + 200);
    assert_eq!(h.out.0.iter().map(|o| o.sport).collect::<Vec<_>>(), vec![1]);
    assert_eq!(h.gro.held(), 1);
    h.finish();
}

#[test]
fn udp_is_not_merged() {
    let spec = Spec::new(
        "198.18.0.1".parse().unwrap(),
        "198.18.0.2".parse().unwrap(),
        1,
        2,
    );
    let mut h = Harness::new(0);
    for _ in 0..3 {
        assert_eq!(
            h.feed_raw(&build::udp(&spec, &[1; 100]), 1, 0, true),
            GroResult::Normal
        );
    }
    assert_eq!(h.gro.stats().not_merged(Check::NotTcp), 3);
    h.finish();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Per flow, the payload after GRO is the input payload, in order; every
    /// frame comes home; with the timer, an idle flow is flushed within the
    /// timeout plus one poll, a busy one within a tick plus one poll.
    #[test]
    fn payload_in_order_and_bounded_hold(
        flows in 1usize..12,
        steps in proptest::collection::vec((0usize..12, 1usize..=MSS, 0u8..10, 0u64..3000), 1..300),
        timeout in prop::sample::select(vec![0u64, 2_000, 50_000]),
        poll_every in 1usize..20,
    ) {
        let mut h = Harness::new(timeout);
        let mut next: Vec<Seg> = (0..flows).map(|f| { let mut s = Seg::new(7 * f as u32); s.sport = 100 + f as u16; s }).collect();
        let mut sent: HashMap<u16, Vec<u8>> = HashMap::new();
        let mut now = 1u64;
        let mut timer: Option<u64> = None;
        let mut since_poll = 0;
        for (i, &(f, len, flag, gap)) in steps.iter().enumerate() {
            now += gap;
            // The NAPI timer fires before anything that comes later.
            if let Some(t) = timer {
                if now >= t {
                    timer = h.poll_end(PollEnd::Complete { work_done: 0 }, t);
                }
            }
            let f = f % flows;
            let mut s = next[f].clone();
            s.len = len;
            if flag == 0 { s.flags |= flags::PSH; }
            let bytes = s.bytes();
            sent.entry(s.sport).or_default().extend_from_slice(&bytes[66..]);
            h.feed_raw(&bytes, now, 0, i % 2 == 0);
            let mut n = s.next();
            n.len = MSS;
            next[f] = n;
            since_poll += 1;
            if since_poll == poll_every {
                since_poll = 0;
                let t = h.poll_end(PollEnd::Complete { work_done: poll_every }, now);
                if t.is_some() { timer = t; }
            }
        }
        // The last poll, then the timer if armed: everything must be out.
        let t = h.poll_end(PollEnd::Complete { work_done: since_poll }, now);
        if let Some(t) = t.or(timer) {
            h.poll_end(PollEnd::Complete { work_done: 0 }, t.max(now));
        }
        prop_assert_eq!(h.gro.held(), 0);
        let mut got: HashMap<u16, Vec<u8>> = HashMap::new();
        for o in &h.out.0 {
            got.entry(o.sport).or_default().extend_from_slice(&o.payload);
            // Hold bound: a packet leaves at the latest at the timer's poll
            // after its flow's last segment, or a tick after it started.
            let bound = timeout.max(TICK_NS) + 3000 * (poll_every as u64 + 1);
            prop_assert!(o.at - o.first_rx <= bound, "held {} ns > {}", o.at - o.first_rx, bound);
        }
        prop_assert_eq!(got, sent);
        h.finish();
    }
}

/// A local sender's segment as a veth delivers it: the TCP checksum field
/// holds only the pseudo-header sum (`CHECKSUM_PARTIAL`).
fn partial(s: &Seg) -> Vec<u8> {
    let mut b = s.bytes();
    let h = rxpath_wire::parse(&b).unwrap();
    let t = h.l4_offset as usize;
    let l4_len = (h.payload_offset + h.payload_len) as u32 - t as u32;
    let pseudo = rxpath_wire::checksum::pseudo_header(h.flow.src(), h.flow.dst(), 6, l4_len);
    b[t + 16..t + 18].copy_from_slice(&(pseudo as u16).to_be_bytes());
    b
}

#[test]
fn partial_checksums_merge_as_the_kernel_trusts_them_and_verify_refuses_them() {
    let a = Seg::new(1000);
    let b = a.next();
    let (pa, pb) = (partial(&a), partial(&b));
    // auto on a local-traffic driver (veth): trusted, merged.
    let auto = CsumMode {
        policy: CsumPolicy::Auto,
        local_traffic: true,
    };
    let mut h = Harness::new(0);
    assert_eq!(h.feed_as(&pa, 1, auto), GroResult::Held);
    assert_eq!(h.feed_as(&pb, 2, auto), GroResult::Merged);
    h.flush(3);
    assert_eq!(h.shape(), vec![2]);
    h.finish();
    // auto on a driver that cannot carry local traffic, and verify: the
    // same bytes are bad checksums, passed up unmerged.
    for mode in [
        CsumMode {
            policy: CsumPolicy::Auto,
            local_traffic: false,
        },
        CsumMode {
            policy: CsumPolicy::Verify,
            local_traffic: true,
        },
    ] {
        let mut h = Harness::new(0);
        h.feed_as(&pa, 1, mode);
        h.feed_as(&pb, 2, mode);
        h.flush(3);
        assert_eq!(h.gro.stats().not_merged(Check::BadChecksum), 2, "{mode:?}");
        assert_eq!(h.shape(), vec![1, 1], "{mode:?}");
        h.finish();
    }
    // A segment with a full, correct checksum is not taken for partial.
    let mut m = Meta {
        headers: rxpath_wire::parse(&a.bytes()).unwrap(),
        ..Meta::default()
    };
    auto.classify(&mut m, &a.bytes());
    assert!(!m.csum_partial && !m.csum_ok);
}
