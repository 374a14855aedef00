//! UDP GRO (`udp_gro_receive_segment`) for sockets that ask for it.

mod common;

use common::Harness;
use proptest::prelude::*;
use rxpath_core::gro::{Check, FlushReason, GroResult, UdpGroPolicy};
use rxpath_wire::build::{self, Spec};
use rxpath_wire::FlowKey;
use std::collections::HashMap;
use std::sync::Arc;

/// Sockets with `UDP_GRO` on these destination ports.
#[derive(Debug)]
struct Ports(Vec<u16>);

impl UdpGroPolicy for Ports {
    fn wants(&self, flow: &FlowKey) -> bool {
        self.0.contains(&flow.dst_port)
    }
}

const GRO_PORT: u16 = 4433;

fn harness() -> Harness {
    Harness::with_udp(0, Some(Arc::new(Ports(vec![GRO_PORT]))))
}

fn spec(sport: u16, dport: u16) -> Spec {
    Spec::new(
        "198.18.0.1".parse().unwrap(),
        "198.18.0.2".parse().unwrap(),
        sport,
        dport,
    )
}

/// A datagram of `len` bytes whose payload says where it sits in the flow.
fn dgram(s: &Spec, len: usize, fill: u8) -> Vec<u8> {
    let payload: Vec<u8> = (0..len).map(|i| fill.wrapping_add(i as u8)).collect();
    build::udp(s, &payload)
}

/// Feed datagrams of these sizes on one flow, flush, return segments per
/// packet out.
fn shape_of(sizes: &[usize]) -> (Vec<u16>, Harness) {
    let mut h = harness();
    let s = spec(5000, GRO_PORT);
    for (i, &n) in sizes.iter().enumerate() {
        h.feed_raw(&dgram(&s, n, i as u8), 1 + i as u64, 0, false);
    }
    h.flush(1000);
    (h.shape(), h)
}

#[test]
fn equal_datagrams_merge_into_one_packet_whose_head_covers_them_all() {
    let s = spec(5000, GRO_PORT);
    let mut h = harness();
    let mut sent = Vec::new();
    for i in 0..5u8 {
        let d = dgram(&s, 1200, i * 7);
        sent.extend_from_slice(&d[42..]);
        let r = h.feed_raw(&d, 1 + i as u64, 0, false);
        assert_eq!(
            r,
            if i == 0 {
                GroResult::Held
            } else {
                GroResult::Merged
            }
        );
    }
    h.flush(10);
    assert_eq!(h.shape(), vec![5]);
    let o = &h.out.0[0];
    assert_eq!(o.payload, sent, "the payload, in order, not copied apart");
    assert_eq!(o.gso, 1200, "gso_size: the segment size the socket reports");
    let head = &o.head;
    // udp4_gro_complete: IP and UDP lengths cover the packet, the UDP
    // checksum field holds the pseudo-header sum (CHECKSUM_PARTIAL).
    assert_eq!(u16::from_be_bytes([head[16], head[17]]), 20 + 8 + 6000);
    assert_eq!(u16::from_be_bytes([head[38], head[39]]), 8 + 6000);
    let ip = rxpath_wire::ipv4::Packet::new_unchecked(&head[14..]);
    assert!(ip.verify_checksum(), "IPv4 header checksum redone");
    let pseudo = rxpath_wire::checksum::pseudo_header(
        "198.18.0.1".parse().unwrap(),
        "198.18.0.2".parse().unwrap(),
        17,
        8 + 6000,
    ) as u16;
    assert_eq!(u16::from_be_bytes([head[40], head[41]]), pseudo);
    h.finish();
}

#[test]
fn datagrams_for_sockets_without_udp_gro_go_up_alone() {
    let mut h = harness();
    let other = spec(5000, 53);
    for i in 0..4 {
        assert_eq!(
            h.feed_raw(&dgram(&other, 500, i), 1, 0, false),
            GroResult::Normal
        );
    }
    // No policy at all: the same.
    let mut none = Harness::new(0);
    let mine = spec(5000, GRO_PORT);
    for i in 0..4 {
        assert_eq!(
            none.feed_raw(&dgram(&mine, 500, i), 1, 0, false),
            GroResult::Normal
        );
    }
    assert_eq!(h.gro.stats().not_merged(Check::NotTcp), 4);
    assert_eq!(h.shape(), vec![1; 4]);
    assert_eq!(none.shape(), vec![1; 4]);
    h.finish();
    none.finish();
}

#[test]
fn a_shorter_datagram_ends_the_packet_and_a_longer_one_starts_a_new_one() {
    // 1000 1000 500 | 1000 | 1200 1200
    let (shape, h) = shape_of(&[1000, 1000, 500, 1000, 1200, 1200]);
    assert_eq!(shape, vec![3, 1, 2]);
    assert_eq!(h.gro.stats().flushes(FlushReason::Short), 1);
    assert_eq!(h.gro.stats().not_merged(Check::TooLong), 1);
    let gso: Vec<u16> = h.out.0.iter().map(|o| o.gso).collect();
    assert_eq!(gso, vec![1000, 0, 1200]);
    h.finish();
}

#[test]
fn at_most_64_segments_and_under_64k() {
    let (shape, h) = shape_of(&[100; 100]);
    assert_eq!(shape, vec![64, 36], "UDP_GRO_CNT_MAX");
    assert_eq!(h.gro.stats().flushes(FlushReason::Count), 1);
    h.finish();
    // 28 + 1400 n stays under 65536 up to n = 46.
    let (shape, h) = shape_of(&[1400; 50]);
    assert_eq!(shape, vec![46, 4], "GRO_LEGACY_MAX_SIZE");
    assert_eq!(h.gro.stats().not_merged(Check::SizeLimit), 1);
    h.finish();
}

#[test]
fn what_the_kernel_refuses_to_merge_goes_up_alone_in_order() {
    let s = spec(5000, GRO_PORT);
    let mut h = harness();
    h.feed_raw(&dgram(&s, 800, 0), 1, 0, false);
    // No checksum: not merged, and the held packet goes first.
    let mut zero = dgram(&s, 800, 1);
    zero[40..42].copy_from_slice(&[0, 0]);
    assert_eq!(h.feed_raw(&zero, 2, 0, false), GroResult::Normal);
    // A UDP length shorter than the IP payload (padded), the checksum
    // verified by the device.
    let mut padded = dgram(&s, 800, 2);
    padded[38..40].copy_from_slice(&(8u16 + 700).to_be_bytes());
    assert_eq!(h.feed_raw(&padded, 3, 0, true), GroResult::Normal);
    // A wrong checksum, not verified by the device.
    let mut bad = dgram(&s, 800, 3);
    bad[50] ^= 0xff;
    assert_eq!(h.feed_raw(&bad, 4, 0, false), GroResult::Normal);
    // Another TTL: the held packet is flushed, this one held anew.
    let mut s2 = s;
    s2.ttl = 9;
    h.feed_raw(&dgram(&s, 800, 4), 5, 0, false);
    assert_eq!(
        h.feed_raw(&dgram(&s2, 800, 5), 6, 0, false),
        GroResult::Held
    );
    h.flush(7);
    let st = h.gro.stats();
    assert_eq!(st.not_merged(Check::UdpNoChecksum), 1);
    assert_eq!(st.not_merged(Check::UdpLength), 1);
    assert_eq!(st.not_merged(Check::BadChecksum), 1);
    assert_eq!(st.not_merged(Check::TtlTosDf), 1);
    let fills: Vec<u8> = h.out.0.iter().map(|o| o.payload[0]).collect();
    assert_eq!(fills, vec![0, 1, 2, 3, 4, 5], "the flow stays in order");
    h.finish();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Per flow the payload comes out in order; every packet out is equal
    /// segments and at most one shorter last one, at most 64, under 64 KiB;
    /// flows whose socket did not ask are never merged; every frame home.
    #[test]
    fn merged_packets_keep_the_kernels_shape(
        steps in proptest::collection::vec((0usize..6, 1usize..1472, 0u8..4), 1..400),
        poll_every in 1usize..80,
    ) {
        let mut h = harness();
        // Flows 0-3 go to the UDP_GRO socket, 4-5 to one without it.
        let specs: Vec<Spec> = (0..6)
            .map(|f| spec(6000 + f as u16, if f < 4 { GRO_PORT } else { 9 }))
            .collect();
        let mut sent: HashMap<u16, Vec<u8>> = HashMap::new();
        let mut sizes: HashMap<u16, Vec<usize>> = HashMap::new();
        let mut since = 0;
        for (i, &(f, len, same)) in steps.iter().enumerate() {
            // Mostly one size per flow, so that packets grow.
            let len = if same > 0 { 300 + 100 * f } else { len };
            let d = dgram(&specs[f], len, i as u8);
            sent.entry(specs[f].src_port).or_default().extend_from_slice(&d[42..]);
            sizes.entry(specs[f].src_port).or_default().push(len);
            h.feed_raw(&d, 1 + i as u64, 0, i % 3 == 0);
            since += 1;
            if since == poll_every {
                since = 0;
                h.flush(1 + i as u64);
            }
        }
        h.flush(1_000_000);
        let mut got: HashMap<u16, Vec<u8>> = HashMap::new();
        for o in &h.out.0 {
            got.entry(o.sport).or_default().extend_from_slice(&o.payload);
            prop_assert!(o.segs <= 64);
            prop_assert!(o.payload.len() + 28 < 65536);
            if o.sport >= 6004 {
                prop_assert_eq!(o.segs, 1, "no UDP_GRO, no merge");
            }
            if o.segs > 1 {
                let g = o.gso as usize;
                prop_assert!(g > 0);
                let n = o.payload.len();
                // (segs - 1) full segments and a last one of 1..=g bytes.
                prop_assert!(n > (o.segs as usize - 1) * g && n <= o.segs as usize * g);
            }
        }
        prop_assert_eq!(got, sent);
        h.finish();
    }
}
