//! Multicast and broadcast in front of sockets on a simulated NIC: who
//! gets a datagram to a group (the sockets on its port that joined it,
//! or that listen with `IP_MULTICAST_ALL`), source filters at the
//! interface, one frame shared by every reader, a full queue dropping only
//! its own copy, `IgnoredMulti`, and every frame home at the end.

use rxpath_core::ip::mcast::Change;
use rxpath_core::sock::BindOptions;
use rxpath_dev::sim::{Coalesce, SimConfig};
use rxpath_runtime::{Host, HostConfig, HostDevice, HostReport, UdpSocket};
use rxpath_wire::build::{self, Spec};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

const HOST4: &str = "198.18.0.1";
const PEER4: &str = "198.18.0.2";
const OTHER4: &str = "198.18.0.3";
const HOST6: &str = "2001:2::1";
const PEER6: &str = "2001:2::2";
const G1: &str = "239.1.1.1";
const G2: &str = "239.2.2.2";
const G6: &str = "ff05::1:3";

fn sa(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse::<IpAddr>().unwrap(), port)
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn host() -> Host {
    let mut cfg = HostConfig {
        queues: 2,
        napi_threads: 1,
        ..Default::default()
    };
    cfg.sock.local_addrs = vec![ip(HOST4), ip(HOST6)];
    cfg.sock.prefixes = vec![(ip("198.18.0.0"), 24), (ip("2001:2::"), 64)];
    let sim = SimConfig {
        coalesce: Coalesce::EVERY_FRAME,
        ..Default::default()
    };
    Host::start(cfg, HostDevice::Sim(sim)).expect("sim host")
}

fn send(h: &Host, src: SocketAddr, dst: SocketAddr, payload: &[u8]) {
    let f = build::udp(
        &Spec::new(src.ip(), dst.ip(), src.port(), dst.port()),
        payload,
    );
    let mut p = h.sim_port().unwrap();
    p.inject(&f, u32::from(src.port()))
        .expect("device took the frame");
    p.flush(rxpath_dev::mono_ns());
}

/// Every datagram `s` holds now (after the path settled).
fn drain(s: &UdpSocket) -> Vec<(Vec<u8>, SocketAddr)> {
    std::thread::sleep(Duration::from_millis(100));
    let mut out = Vec::new();
    let mut b = [0u8; 2048];
    while let Ok((n, src)) = s.try_recv_from(&mut b) {
        out.push((b[..n].to_vec(), src));
    }
    out
}

fn payloads(s: &UdpSocket) -> Vec<Vec<u8>> {
    drain(s).into_iter().map(|(p, _)| p).collect()
}

fn all_home(r: &HostReport) {
    assert_eq!(r.frames_home, r.frames_total, "every frame home");
    let t = r.napi_total();
    assert!(t.accounted(), "received = delivered + dropped: {t:?}");
}

fn reuse(h: &Host, addr: SocketAddr) -> UdpSocket {
    h.udp_bind_held_with(
        addr,
        BindOptions {
            reuseport: true,
            ..Default::default()
        },
    )
    .unwrap()
}

#[test]
fn every_socket_that_wants_a_group_gets_it() {
    let h = host();
    // On 0.0.0.0:5000, a group of three: one joined G1, one that listens
    // to any group (IP_MULTICAST_ALL, the default), one that does not.
    let joined = reuse(&h, sa("0.0.0.0", 5000));
    joined
        .socket()
        .change_membership(ip(G1), Change::Join)
        .unwrap();
    let all = reuse(&h, sa("0.0.0.0", 5000));
    let quiet = reuse(&h, sa("0.0.0.0", 5000));
    quiet.socket().set_multicast_all(true, false);
    // Bound to G1 itself (joined to G2: its address keeps G2 out).
    let bound = h.udp_bind(sa(G1, 5000)).unwrap();
    bound
        .socket()
        .change_membership(ip(G2), Change::Join)
        .unwrap();
    // Dual stack: its own IPv6 group and broadcast, no IPv4 group it did
    // not join (its IP_MULTICAST_ALL starts off) but one it did.
    let dual = h.udp_bind(sa("::", 5000)).unwrap();
    for g in [G6, G2] {
        dual.socket()
            .change_membership(ip(g), Change::Join)
            .unwrap();
    }

    send(&h, sa(PEER4, 1), sa(G1, 5000), b"g1");
    send(&h, sa(PEER4, 1), sa(G2, 5000), b"g2");
    send(&h, sa(PEER4, 1), sa("239.3.3.3", 5000), b"nobody joined");
    send(&h, sa(PEER4, 1), sa("198.18.0.255", 5000), b"bcast");
    send(&h, sa(PEER6, 1), sa(G6, 5000), b"g6");
    send(&h, sa(PEER4, 1), sa(HOST4, 5000), b"unicast");

    let mut one = payloads(&joined);
    one.extend(payloads(&all));
    one.extend(payloads(&quiet));
    // The unicast datagram went to one member of the group; the others to
    // those that wanted them.
    let unicast = one.iter().filter(|p| p.as_slice() == b"unicast").count();
    assert_eq!(unicast, 1);
    one.retain(|p| p.as_slice() != b"unicast");
    one.sort();
    // The one that joined G1 takes G2 as well (it listens with
    // IP_MULTICAST_ALL on, and another socket joined G2).
    let want: Vec<&[u8]> = vec![b"bcast", b"bcast", b"bcast", b"g1", b"g1", b"g2", b"g2"];
    assert_eq!(
        one, want,
        "joined G1; MULTICAST_ALL; neither (broadcast only)"
    );
    assert_eq!(payloads(&bound), vec![b"g1".to_vec()], "bound to G1");
    let d = drain(&dual);
    let got: Vec<_> = d.iter().map(|(p, _)| p.as_slice()).collect();
    assert_eq!(got, vec![&b"g2"[..], b"bcast", b"g6"], "dual stack");
    assert_eq!(d[0].1, sa("::ffff:198.18.0.2", 1), "an IPv4 sender, mapped");
    let r = h.shutdown();
    // g1 ×3, g2 ×3, bcast ×4, g6, unicast: 12 copies of 5 frames.
    assert_eq!(r.snmp.udp.in_datagrams + r.snmp.udp6.in_datagrams, 12);
    assert_eq!((r.snmp.udp.ignored_multi, r.snmp.udp.no_ports), (0, 0));
    assert_eq!(r.snmp.ext.otherhost, 1, "a group nobody joined");
    assert_eq!(r.napi_total().delivered, 5, "each frame once");
    all_home(&r);
}

#[test]
fn sources_are_filtered_at_the_interface_and_per_socket() {
    let h = host();
    let ssm = h.udp_bind(sa("0.0.0.0", 5002)).unwrap();
    let g = ip("232.1.1.1");
    ssm.socket()
        .change_membership(g, Change::AddSource(ip(PEER4)))
        .unwrap();
    send(&h, sa(PEER4, 1), sa("232.1.1.1", 5002), b"from the source");
    send(&h, sa(OTHER4, 1), sa("232.1.1.1", 5002), b"from another");
    assert_eq!(payloads(&ssm), vec![b"from the source".to_vec()]);
    // An excluding member elsewhere lets the other source in at the
    // interface; the including socket still refuses it, the other takes
    // it (the kernel's ip_check_mc_rcu, then ip_mc_sf_allow).
    let asm = h.udp_bind(sa("0.0.0.0", 5003)).unwrap();
    asm.socket().change_membership(g, Change::Join).unwrap();
    asm.socket()
        .change_membership(g, Change::Block(ip(PEER4)))
        .unwrap();
    send(&h, sa(OTHER4, 1), sa("232.1.1.1", 5002), b"other to 5002");
    send(&h, sa(OTHER4, 1), sa("232.1.1.1", 5003), b"other to 5003");
    send(&h, sa(PEER4, 1), sa("232.1.1.1", 5003), b"blocked");
    assert!(payloads(&ssm).is_empty());
    assert_eq!(payloads(&asm), vec![b"other to 5003".to_vec()]);
    let r = h.shutdown();
    // "other to 5002" and "blocked" passed the interface (a member lets
    // each source in) and no socket on their port took them.
    assert_eq!(r.snmp.udp.ignored_multi, 2);
    assert_eq!(r.snmp.ext.otherhost, 1, "'from another' before the join");
    all_home(&r);
}

#[test]
fn a_full_queue_drops_its_own_copy_and_leaving_stops_the_group() {
    let h = host();
    let a = h.udp_bind(sa("0.0.0.0", 5004)).unwrap();
    let b = h.udp_bind(sa(G1, 5004)).unwrap();
    a.socket().change_membership(ip(G1), Change::Join).unwrap();
    // One datagram fits `b`'s buffer; the rest overflow it.
    b.set_rcvbuf(1);
    for i in 0..4u8 {
        send(&h, sa(PEER4, 1), sa(G1, 5004), &[i; 100]);
    }
    assert_eq!(payloads(&a).len(), 4);
    assert_eq!(payloads(&b), vec![vec![0u8; 100]]);
    assert_eq!(b.socket().counters().drops, 3);
    assert_eq!(a.socket().counters().drops, 0);
    // Neither joined any more: the interface is out of the group.
    a.socket().change_membership(ip(G1), Change::Leave).unwrap();
    assert!(a.socket().change_membership(ip(G1), Change::Leave).is_err());
    send(&h, sa(PEER4, 1), sa(G1, 5004), b"after");
    assert!(payloads(&a).is_empty() && payloads(&b).is_empty());
    // A socket that closes leaves its groups.
    let c = h.udp_bind(sa("0.0.0.0", 5005)).unwrap();
    c.socket().change_membership(ip(G2), Change::Join).unwrap();
    assert_eq!(h.sockets().ip_config().groups.groups(), vec![ip(G2)]);
    drop(c);
    assert!(h.sockets().ip_config().groups.groups().is_empty());
    let r = h.shutdown();
    assert_eq!(r.snmp.udp.rcvbuf_errors, 3);
    assert_eq!(r.snmp.udp.in_datagrams, 5);
    assert_eq!(r.snmp.ext.otherhost, 1);
    assert_eq!(r.napi_total().delivered, 4, "every frame reached a");
    all_home(&r);
}
