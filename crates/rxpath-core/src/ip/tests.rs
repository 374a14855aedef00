//! Literal frames through IP input, one rule each, and a property test that
//! nothing panics and every drop is counted.

use super::*;
use proptest::prelude::*;
use rxpath_wire::build::{self, Spec};

const SRV: [u8; 6] = [0x02, 0, 0, 0, 0, 2];

fn cfg() -> IpConfig {
    IpConfig {
        mac: SRV,
        addrs: vec![
            "198.18.9.6".parse().unwrap(),
            "2001:2:0:9::6".parse().unwrap(),
        ],
        csum: CsumPolicy::Auto,
        local_traffic: false,
        prefixes: Vec::new(),
        default_route: [false; 2],
        deliver_all: false,
        tcp: false,
        any_l2: false,
        local_routes: Vec::new(),
        reasm: Default::default(),
        groups: Default::default(),
        added: Default::default(),
    }
}

fn v4(payload: &[u8]) -> Vec<u8> {
    build::udp(
        &Spec::new(
            "198.18.9.5".parse().unwrap(),
            "198.18.9.6".parse().unwrap(),
            4000,
            7,
        ),
        payload,
    )
}

fn v6(payload: &[u8]) -> Vec<u8> {
    build::udp(
        &Spec::new(
            "2001:2:0:9::5".parse().unwrap(),
            "2001:2:0:9::6".parse().unwrap(),
            4000,
            7,
        ),
        payload,
    )
}

fn run(f: &[u8]) -> (Result<Datagram, DropReason>, Snmp) {
    let mut s = Snmp::default();
    (input(f, CsumStatus::None, &cfg(), &mut s), s)
}

fn fix_ip_csum(f: &mut [u8]) {
    let ihl = (f[14] & 0xf) as usize * 4;
    f[24] = 0;
    f[25] = 0;
    let c = !rxpath_wire::checksum::fold(rxpath_wire::checksum::sum(&f[14..14 + ihl]));
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

#[test]
fn valid_datagrams_pass() {
    let (r, s) = run(&v4(b"hello"));
    let d = r.unwrap();
    assert_eq!(d.payload_len, 5);
    assert_eq!(d.dst.port(), 7);
    assert_eq!((s.ip.in_receives, s.ip.in_delivers), (1, 1));
    let (r, s) = run(&v6(b"hello"));
    assert_eq!(r.unwrap().payload_len, 5);
    assert_eq!((s.ip6.in_receives, s.ip6.in_delivers), (1, 1));
}

#[test]
fn ip_header_checksum_is_verified() {
    let mut f = v4(b"x");
    f[14 + 8] ^= 1; // TTL
    let (r, s) = run(&f);
    assert_eq!(r, Err(DropReason::IpHeader));
    assert_eq!((s.ip.in_csum_errors, s.ip.in_hdr_errors), (1, 1));
}

#[test]
fn padding_trimmed_and_truncation_counted() {
    let mut f = v4(b"abc");
    f.extend_from_slice(&[0; 20]);
    assert_eq!(run(&f).0.unwrap().payload_len, 3);
    let f = v4(b"abcdef");
    let (r, s) = run(&f[..f.len() - 1]);
    assert_eq!(r, Err(DropReason::Malformed));
    assert_eq!(s.ip.in_truncated_pkts, 1);
    let f = v6(b"abcdef");
    let (_, s) = run(&f[..f.len() - 1]);
    assert_eq!(s.ip6.in_truncated_pkts, 1);
}

/// An address the interface gains while the host runs (a VIP): not ours
/// before, ours from then on, as the kernel's `RTM_NEWADDR`.
#[test]
fn an_address_added_while_running_is_ours() {
    let c = cfg();
    let vip = "198.18.9.16".parse().unwrap();
    let f = build::udp(
        &Spec::new("198.18.9.5".parse().unwrap(), vip, 4000, 7),
        b"x",
    );
    let mut s = Snmp::default();
    assert_eq!(
        input(&f, CsumStatus::None, &c, &mut s),
        Err(DropReason::NotForUs)
    );
    assert!(c.added.add(vip));
    assert!(!c.added.add(vip), "once");
    let d = input(&f, CsumStatus::None, &c, &mut s).expect("ours now");
    assert_eq!(d.dst.ip(), vip);
}

#[test]
fn not_ours_and_otherhost() {
    let mut f = v4(b"x");
    f[14 + 19] = 7;
    fix_ip_csum(&mut f);
    let (r, s) = run(&f);
    assert_eq!(r, Err(DropReason::NotForUs));
    assert_eq!(s.ip.in_addr_errors, 1);
    let mut f = v4(b"x");
    f[5] = 9; // another unicast MAC
    let (_, s) = run(&f);
    assert_eq!((s.ext.otherhost, s.ip.in_receives), (1, 0));
    let mut f = v4(b"x");
    f[0] |= 1; // L2 multicast still reaches IP
    assert!(run(&f).0.is_ok());
}

#[test]
fn a_group_is_ours_while_joined_and_a_prefix_broadcast_always() {
    use super::mcast::Change;
    let mut c = cfg();
    c.prefixes = vec![("198.18.9.0".parse().unwrap(), 24)];
    let to = |dst: &str, src: &str| {
        let spec = Spec::new(src.parse().unwrap(), dst.parse().unwrap(), 1, 7);
        build::udp(&spec, b"x")
    };
    let run = |c: &IpConfig, f: &[u8]| {
        let mut s = Snmp::default();
        (input(f, CsumStatus::None, c, &mut s), s)
    };
    let g = "239.9.9.9";
    let (r, s) = run(&c, &to(g, "198.18.9.5"));
    assert_eq!(r, Err(DropReason::NotForUs));
    assert_eq!((s.ext.otherhost, s.ip.in_addr_errors), (1, 0));
    c.groups
        .change(
            1,
            g.parse().unwrap(),
            Change::AddSource("198.18.9.5".parse().unwrap()),
        )
        .unwrap();
    let d = run(&c, &to(g, "198.18.9.5")).0.expect("a member's source");
    assert!(d.multi);
    assert_eq!(run(&c, &to(g, "198.18.9.4")).0, Err(DropReason::NotForUs));
    // All-hosts, limited and prefix broadcast: always ours, for every
    // socket on the port; a unicast datagram is not.
    for dst in ["224.0.0.1", "255.255.255.255", "198.18.9.255"] {
        assert!(run(&c, &to(dst, "198.18.9.5")).0.unwrap().multi, "{dst}");
    }
    assert!(!run(&c, &to("198.18.9.6", "198.18.9.5")).0.unwrap().multi);
    let g6 = "ff05::1:3";
    assert_eq!(
        run(&c, &to(g6, "2001:2:0:9::5")).0,
        Err(DropReason::NotForUs)
    );
    c.groups
        .change(2, g6.parse().unwrap(), Change::Join)
        .unwrap();
    assert!(run(&c, &to(g6, "2001:2:0:9::5")).0.unwrap().multi);
    assert!(run(&c, &to("ff02::1", "fe80::5")).0.unwrap().multi);
}

#[test]
fn vlan_zero_is_a_priority_tag_and_other_vlans_are_not_ours() {
    let mut spec = Spec::new(
        "198.18.9.5".parse().unwrap(),
        "198.18.9.6".parse().unwrap(),
        1,
        7,
    );
    spec.vlan = Some(0);
    assert!(run(&build::udp(&spec, b"x")).0.is_ok());
    spec.vlan = Some(5);
    let (r, s) = run(&build::udp(&spec, b"x"));
    assert_eq!(r, Err(DropReason::NotForUs));
    assert_eq!((s.ext.vlan_otherhost, s.ip.in_receives), (1, 0));
}

#[test]
fn udp_length_and_checksum() {
    let mut f = v4(b"hello");
    f[14 + 20 + 5] = 200; // UDP length past the IP payload
    let (r, s) = run(&f);
    assert_eq!(r, Err(DropReason::Malformed));
    assert_eq!((s.udp.in_errors, s.ip.in_delivers), (1, 1));
    let mut f = v4(b"hello");
    *f.last_mut().unwrap() ^= 1;
    let (r, s) = run(&f);
    assert_eq!(r, Err(DropReason::BadChecksum));
    assert_eq!((s.udp.in_csum_errors, s.udp.in_errors), (1, 1));
    // IPv4 without a checksum is fine; IPv6 without one is not.
    let mut f = v4(b"hello");
    f[40] = 0;
    f[41] = 0;
    assert!(run(&f).0.is_ok());
    let mut f = v6(b"hello");
    f[14 + 40 + 6] = 0;
    f[14 + 40 + 7] = 0;
    assert_eq!(run(&f).1.udp6.in_csum_errors, 1);
}

#[test]
fn partial_checksum_trusted_on_local_traffic_drivers_only() {
    let mut f = v4(b"hello");
    let pseudo = rxpath_wire::checksum::pseudo_header(
        "198.18.9.5".parse().unwrap(),
        "198.18.9.6".parse().unwrap(),
        17,
        13,
    ) as u16;
    f[40..42].copy_from_slice(&pseudo.to_be_bytes());
    assert_eq!(run(&f).0, Err(DropReason::BadChecksum));
    let mut c = cfg();
    c.local_traffic = true;
    let mut s = Snmp::default();
    assert!(input(&f, CsumStatus::None, &c, &mut s).is_ok());
    assert_eq!(s.ext.csum_partial, 1);
    // The device's word is taken under auto, not under verify.
    let mut s = Snmp::default();
    assert!(input(&f, CsumStatus::Partial, &cfg(), &mut s).is_ok());
    c.csum = CsumPolicy::Verify;
    c.local_traffic = false;
    assert!(input(&f, CsumStatus::Partial, &c, &mut s).is_err());
}

#[test]
fn fragments_fail_reassembly() {
    let mut f = v4(b"hello");
    f[14 + 6] = 0x20; // MF
    fix_ip_csum(&mut f);
    let (r, s) = run(&f);
    assert_eq!(r, Err(DropReason::Fragment));
    assert_eq!((s.ip.reasm_reqds, s.ip.reasm_fails), (1, 1));
}

#[test]
fn ip_options_compiled() {
    // A valid record-route option (7 bytes + NOP: IHL 7).
    let opt = [7u8, 7, 4, 0, 0, 0, 0, 1];
    let mut f = v4(b"hi");
    f.splice(34..34, opt);
    f[14] = 0x47;
    let tot = u16::from_be_bytes([f[16], f[17]]) + 8;
    f[16..18].copy_from_slice(&tot.to_be_bytes());
    fix_ip_csum(&mut f);
    assert!(run(&f).0.is_ok());
    // Option length past the options area.
    f[35] = 9;
    fix_ip_csum(&mut f);
    assert_eq!(run(&f).1.ip.in_hdr_errors, 1);
    // Loose source route: compiled, then refused.
    f[34] = 131;
    f[35] = 7;
    fix_ip_csum(&mut f);
    assert_eq!(run(&f).1.ext.source_route, 1);
}

#[test]
fn ipv6_extension_headers() {
    // Destination options (PadN 4) then UDP.
    let mut f = v6(b"hi");
    let dopts = [17u8, 0, 1, 4, 0, 0, 0, 0];
    f.splice(54..54, dopts);
    f[14 + 6] = 60;
    let plen = u16::from_be_bytes([f[18], f[19]]) + 8;
    f[18..20].copy_from_slice(&plen.to_be_bytes());
    assert!(run(&f).0.is_ok());
    // PadN with a non-zero byte is refused.
    f[58] = 1;
    let (r, s) = run(&f);
    assert_eq!(r, Err(DropReason::IpHeader));
    assert_eq!(s.ip6.in_hdr_errors, 1);
    // An unknown option whose top bits say "drop".
    f[56] = 0x41;
    f[58] = 0;
    assert_eq!(run(&f).1.ip6.in_hdr_errors, 1);
    // An unknown option that says "skip" is skipped.
    f[56] = 0x21;
    assert!(run(&f).0.is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]
    /// No frame makes input panic; a datagram's payload lies in the frame;
    /// a packet IP saw is either delivered to a protocol or counted by
    /// exactly one reason.
    #[test]
    fn never_panics(pos in 0usize..90, val in any::<u8>(), cut in 0usize..100, six in any::<bool>()) {
        let mut f = if six { v6(&[7; 30]) } else { v4(&[7; 30]) };
        if pos < f.len() { f[pos] = val; }
        f.truncate(cut);
        let mut c = cfg();
        c.local_traffic = true;
        let mut s = Snmp::default();
        if let Ok(d) = input(&f, CsumStatus::None, &c, &mut s) {
            prop_assert!(d.payload_off + d.payload_len <= f.len());
        }
        let m = if six { s.ip6 } else { s.ip };
        prop_assert!(m.in_receives <= 1);
    }
}

#[test]
fn input_any_delivers_tcp_for_a_sink_and_any_l2_takes_every_vlan() {
    let mut spec = build::Spec::new(
        "198.18.9.5".parse().unwrap(),
        "198.18.9.6".parse().unwrap(),
        5000,
        80,
    );
    spec.dst_mac = SRV;
    let tcp = build::tcp(&spec, 1, 1, rxpath_wire::tcp::flags::ACK, &[], b"x");
    let mut c = cfg();
    let mut snmp = Snmp::default();
    assert_eq!(
        input_any(&tcp, CsumStatus::None, &c, &mut snmp),
        Err(DropReason::UnhandledProto)
    );
    assert_eq!(snmp.ext.left_to_kernel, 1);
    c.deliver_all = true;
    assert_eq!(input_any(&tcp, CsumStatus::None, &c, &mut snmp), Ok(6));
    assert_eq!((snmp.ip.in_receives, snmp.ip.in_delivers), (2, 1));
    spec.vlan = Some(7);
    spec.dst_mac = [0x02, 9, 9, 9, 9, 9];
    let tagged = build::udp(&spec, b"y");
    assert_eq!(
        input_any(&tagged, CsumStatus::None, &c, &mut snmp),
        Err(DropReason::NotForUs)
    );
    c.any_l2 = true;
    assert_eq!(input_any(&tagged, CsumStatus::None, &c, &mut snmp), Ok(17));
}

/// The `INPUT` hook runs where `ip_local_deliver()` runs it: after the IP
/// checks and before UDP's. A datagram with a bad UDP checksum that a rule
/// drops is the rule's (its counter, the drop `filter`, no UDP error); one
/// the rules accept goes on to fail UDP's checksum; a bad IP header never
/// reaches the rules; `InDelivers` counts what the hook let through.
#[test]
fn the_input_hook_runs_between_ip_and_udp() {
    use crate::filter::{Filter, FilterHandle, FilterMode, InputHook};
    let rules = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p udp --dport 7 -j DROP\nCOMMIT\n";
    let f = Filter::load(&[("t".into(), rules.into())], "x", FilterMode::Compiled).unwrap();
    let handle = std::sync::Arc::new(FilterHandle::new(Some(f)));
    let mut hook = InputHook::new(handle.clone());
    let mut through = |f: &[u8], s: &mut Snmp| {
        let h = rxpath_wire::parse(f).unwrap();
        let r = input_any_hooked(f, CsumStatus::None, &cfg(), s, |fr, at| {
            hook.action_in(fr, &h, 0, at).drop_reason()
        });
        hook.release();
        r
    };
    let mut bad = v4(b"hello");
    *bad.last_mut().unwrap() ^= 1;
    let mut s = Snmp::default();
    assert_eq!(through(&bad, &mut s), Err(DropReason::Filter));
    assert_eq!((s.udp.in_csum_errors, s.udp.in_errors), (0, 0));
    // Received, not delivered: `InDelivers` comes after `LOCAL_IN`.
    assert_eq!((s.ip.in_receives, s.ip.in_delivers), (1, 0));
    let rule = |h: &FilterHandle| {
        let st = h.current().unwrap().v4.as_ref().unwrap().stats();
        let r = st.iter().find(|r| r.rule == Some(0)).unwrap();
        (r.packets, r.bytes)
    };
    assert_eq!(rule(&handle), (1, bad.len() as u64 - 14));
    // Port 8: accepted by the rules, then UDP finds the checksum bad.
    let mut other = build::udp(
        &Spec::new(
            "198.18.9.5".parse().unwrap(),
            "198.18.9.6".parse().unwrap(),
            4000,
            8,
        ),
        b"hello",
    );
    *other.last_mut().unwrap() ^= 1;
    let mut s = Snmp::default();
    assert_eq!(through(&other, &mut s), Err(DropReason::BadChecksum));
    assert_eq!(s.udp.in_csum_errors, 1);
    // Delivered to UDP, which then dropped it (as `udp_rcv` returns 0).
    assert_eq!((s.ip.in_receives, s.ip.in_delivers), (1, 1));
    // A bad IP header checksum: IP input's drop; the rule counts nothing.
    let mut hdr = v4(b"hello");
    hdr[24] ^= 0xff;
    let mut s = Snmp::default();
    assert_eq!(through(&hdr, &mut s), Err(DropReason::IpHeader));
    assert_eq!(rule(&handle).0, 1);
}

/// An ICMP message of `typ`/`code` (word `rest`) from a router to the
/// server, quoting a segment the server sent (protocol `quoted`).
fn icmp4(typ: u8, code: u8, rest: [u8; 4], quoted: u8) -> Vec<u8> {
    let mut f = v4(&[0u8; 36]);
    f[14 + 9] = 1;
    f[26..30].copy_from_slice(&[198, 18, 0, 254]);
    let mut msg = vec![typ, code, 0, 0, rest[0], rest[1], rest[2], rest[3]];
    let mut q = [0u8; 28];
    q[0] = 0x45;
    q[2..4].copy_from_slice(&1500u16.to_be_bytes());
    q[9] = quoted;
    q[12..16].copy_from_slice(&[198, 18, 9, 6]);
    q[16..20].copy_from_slice(&[198, 19, 2, 1]);
    msg.extend_from_slice(&q);
    let c = !rxpath_wire::checksum::fold(rxpath_wire::checksum::sum(&msg));
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    f.truncate(34);
    f.extend_from_slice(&msg);
    f[16..18].copy_from_slice(&((20 + msg.len()) as u16).to_be_bytes());
    fix_ip_csum(&mut f);
    f
}

#[test]
fn icmp_errors_quoting_tcp_go_to_tcp_and_the_rest_to_the_kernel() {
    let c = IpConfig { tcp: true, ..cfg() };
    let mut s = Snmp::default();
    let frag = icmp4(3, 4, [0, 0, 0x04, 0xb0], 6);
    let seg = input_icmp_at(&frag, &c, &mut s, None).unwrap();
    assert_eq!((seg.l3, seg.verified), (14, true));
    assert_eq!((s.icmp.in_msgs, s.icmp.in_dest_unreachs), (1, 1));
    assert_eq!(s.ip.in_delivers, 1);
    // About UDP, or an echo: the kernel's.
    for f in [icmp4(3, 3, [0; 4], 17), icmp4(8, 0, [0; 4], 0)] {
        assert_eq!(
            input_icmp_at(&f, &c, &mut s, None),
            Err(DropReason::UnhandledProto)
        );
    }
    assert_eq!((s.ext.left_to_kernel, s.icmp.in_msgs), (2, 1));
    // A damaged message is counted as icmp_rcv counts it.
    let mut bad = frag.clone();
    *bad.last_mut().unwrap() ^= 1;
    assert_eq!(
        input_icmp_at(&bad, &c, &mut s, None),
        Err(DropReason::BadChecksum)
    );
    assert_eq!((s.icmp.in_csum_errors, s.icmp.in_errors), (1, 1));
    let names: Vec<_> = s.sections().into_iter().map(|(n, _)| n).collect();
    assert!(names.contains(&"Icmp") && names.contains(&"Icmp6"));
}
