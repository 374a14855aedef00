//! IP reassembly in front of sockets on a simulated NIC: a datagram sent
//! as fragments is read whole, in one read, from a plain host and from a
//! steered one; what is left half-assembled at shutdown goes home.

use rxpath_core::steer::{SteerConfig, SteerMode};
use rxpath_dev::sim::{Coalesce, SimConfig};
use rxpath_runtime::{Host, HostConfig, HostDevice, HostReport, UdpSocket};
use rxpath_wire::build::{self, Spec};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

const HOST4: &str = "198.18.0.1";
const PEER4: &str = "198.18.0.2";
const HOST6: &str = "2001:2::1";
const PEER6: &str = "2001:2::2";

fn sa(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse::<IpAddr>().unwrap(), port)
}

fn host(steer: Option<SteerMode>) -> Host {
    let mut cfg = HostConfig {
        queues: 2,
        napi_threads: 1,
        ..Default::default()
    };
    if let Some(mode) = steer {
        cfg.steer = SteerConfig {
            mode,
            workers: 2,
            ..SteerConfig::default()
        };
    }
    cfg.sock.local_addrs = vec![HOST4.parse().unwrap(), HOST6.parse().unwrap()];
    let sim = SimConfig {
        coalesce: Coalesce::EVERY_FRAME,
        ..Default::default()
    };
    Host::start(cfg, HostDevice::Sim(sim)).expect("sim host")
}

fn body(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(13) ^ seed).collect()
}

/// The datagram `payload` from `src` to `dst` as fragments for a 1500-byte
/// link, in the order `order` gives.
fn fragments(src: SocketAddr, dst: SocketAddr, payload: &[u8], id: u32) -> Vec<Vec<u8>> {
    let f = build::udp(
        &Spec::new(src.ip(), dst.ip(), src.port(), dst.port()),
        payload,
    );
    let v6 = src.is_ipv6();
    let len = f.len() - 14 - if v6 { 40 } else { 20 };
    build::fragments(&f, &build::mtu_pieces(len, 1500, v6), id)
}

fn inject(h: &Host, frames: &[Vec<u8>]) {
    let mut p = h.sim_port().unwrap();
    for f in frames {
        // Fragments of one datagram hash alike (addresses only).
        p.inject(f, 0x5eed).expect("device took the frame");
    }
    p.flush(rxpath_dev::mono_ns());
}

fn recv(s: &UdpSocket) -> (Vec<u8>, SocketAddr) {
    s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut b = vec![0u8; 65536];
    let (n, src) = s.recv_from(&mut b).expect("a datagram");
    b.truncate(n);
    (b, src)
}

fn all_home(r: &HostReport, what: &str) {
    assert_eq!(r.frames_home, r.frames_total, "{what}: every frame home");
    let t = r.napi_total();
    assert!(
        t.accounted(),
        "{what}: received = delivered + dropped: {t:?}"
    );
}

fn whole_datagrams(steer: Option<SteerMode>, what: &str) {
    let h = host(steer);
    let s4 = h.udp_bind(sa("0.0.0.0", 7000)).unwrap();
    let s6 = h.udp_bind(sa("::", 7001)).unwrap();
    let (a, b) = (body(8000, 1), body(20_000, 2));
    let mut fa = fragments(sa(PEER4, 5), sa(HOST4, 7000), &a, 11);
    fa.reverse();
    inject(&h, &fa);
    inject(&h, &fragments(sa(PEER6, 6), sa(HOST6, 7001), &b, 12));
    assert_eq!(recv(&s4), (a.clone(), sa(PEER4, 5)), "{what}: IPv4");
    assert_eq!(recv(&s6), (b, sa(PEER6, 6)), "{what}: IPv6");
    // A read shorter than the datagram takes its start, the rest is gone.
    inject(&h, &fragments(sa(PEER4, 5), sa(HOST4, 7000), &a, 13));
    s4.set_read_timeout(Some(Duration::from_secs(5)));
    let mut small = [0u8; 100];
    let (n, _) = s4.recv_from(&mut small).expect("a datagram");
    assert_eq!(&small[..n], &a[..100], "{what}: truncated read");
    let r = h.shutdown();
    assert_eq!(
        (r.snmp.ip.reasm_oks, r.snmp.ip6.reasm_oks),
        (2, 1),
        "{what}"
    );
    assert_eq!((r.snmp.ip.reasm_fails, r.snmp.ip6.reasm_fails), (0, 0));
    assert_eq!(r.snmp.udp.in_datagrams + r.snmp.udp6.in_datagrams, 3);
    all_home(&r, what);
}

#[test]
fn a_fragmented_datagram_is_read_whole() {
    whole_datagrams(None, "plain host");
}

#[test]
fn a_steered_host_reassembles_on_its_workers() {
    whole_datagrams(Some(SteerMode::Rps), "rps");
}

#[test]
fn half_a_datagram_goes_home_at_shutdown() {
    for steer in [None, Some(SteerMode::Rps)] {
        let h = host(steer);
        let _s = h.udp_bind(sa("0.0.0.0", 7000)).unwrap();
        let f = fragments(sa(PEER4, 5), sa(HOST4, 7000), &body(6000, 3), 21);
        inject(&h, &f[1..]);
        std::thread::sleep(Duration::from_millis(200));
        let r = h.shutdown();
        assert_eq!(r.snmp.ip.reasm_reqds, f.len() as u64 - 1);
        assert_eq!(r.snmp.ip.reasm_oks, 0);
        all_home(&r, &format!("{steer:?}"));
    }
}

/// The IP payloads of captured IPv4 or IPv6 fragments put in order by
/// their offsets: the datagram's UDP header and payload; with the
/// fragments' sizes.
fn defragment(frames: &[Vec<u8>]) -> (Vec<u8>, Vec<usize>) {
    let mut pieces: Vec<(usize, Vec<u8>)> = frames
        .iter()
        .map(|f| {
            if f[12] == 0x86 {
                assert_eq!(f[14 + 6], 44, "a fragment header");
                let fo = u16::from_be_bytes([f[56], f[57]]) as usize;
                (fo & !7, f[62..].to_vec())
            } else {
                let fo = u16::from_be_bytes([f[20], f[21]]) as usize;
                assert_eq!(fo & 0x4000, 0, "no DF on a fragment");
                ((fo & 0x1fff) * 8, f[34..].to_vec())
            }
        })
        .collect();
    pieces.sort_by_key(|p| p.0);
    let sizes = frames.iter().map(Vec::len).collect();
    let mut out = Vec::new();
    for (off, p) in pieces {
        assert_eq!(off, out.len(), "pieces abut");
        out.extend_from_slice(&p);
    }
    (out, sizes)
}

#[test]
fn a_datagram_past_the_mtu_leaves_in_fragments_and_an_echo_goes_back_whole() {
    use rxpath_core::sock::CaptureTx;
    let h = host(None);
    let tx = CaptureTx::default();
    h.sockets().set_tx(Box::new(tx.clone()));
    let s4 = h.udp_bind(sa("0.0.0.0", 7000)).unwrap();
    let s6 = h.udp_bind(sa("::", 7001)).unwrap();
    for (s, peer, local, id) in [
        (&s4, sa(PEER4, 5), sa(HOST4, 7000), 31),
        (&s6, sa(PEER6, 6), sa(HOST6, 7001), 32),
    ] {
        let b = body(8000, 4);
        inject(&h, &fragments(peer, local, &b, id));
        let (got, from) = recv(s);
        assert_eq!((got.len(), from), (8000, peer));
        tx.frames.lock().unwrap().clear();
        assert_eq!(s.send_to(&got, from), Ok(8000), "the echo");
        let frames = tx.frames.lock().unwrap().clone();
        let (l4, sizes) = defragment(&frames);
        // 8008 bytes of UDP in pieces of 1480 (IPv4) or 1448 (IPv6).
        assert_eq!(frames.len(), 6, "{sizes:?}");
        assert!(sizes.iter().all(|&n| n <= 1514), "{sizes:?}");
        assert_eq!(&l4[8..], &b[..], "the datagram, whole");
        let c = rxpath_wire::checksum::l4(local.ip(), peer.ip(), 17, &l4);
        assert_eq!(c, 0, "the UDP checksum covers the whole datagram");
        // IP_PMTUDISC_DO: refused instead.
        s.socket().set_pmtudisc_do(true);
        assert!(matches!(
            s.send_to(&got, from),
            Err(rxpath_core::sock::SockError::MessageTooLong { .. })
        ));
        s.socket().set_pmtudisc_do(false);
    }
    drop((s4, s6));
    let r = h.shutdown();
    assert_eq!(r.snmp.udp.out_datagrams + r.snmp.udp6.out_datagrams, 2);
    all_home(&r, "send");
}
