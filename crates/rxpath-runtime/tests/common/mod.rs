//! What the socket-layer tests share: a host on the simulated NIC, a
//! datagram put on its wire, a read, and the end-of-test accounting.

#![allow(dead_code)]

use rxpath_dev::sim::{Coalesce, SimConfig};
use rxpath_runtime::UdpSocket;
use rxpath_runtime::{Host, HostConfig, HostDevice, HostReport};
use rxpath_wire::build::{self, Spec};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

pub const HOST4: &str = "198.18.0.1";
pub const PEER4: &str = "198.18.0.2";
pub const HOST6: &str = "2001:2::1";
pub const PEER6: &str = "2001:2::2";

pub fn sa(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse::<IpAddr>().unwrap(), port)
}

pub fn host(queues: usize, napi_threads: usize) -> Host {
    let mut cfg = HostConfig {
        queues,
        napi_threads,
        ..Default::default()
    };
    // 198.18.0.9 is the host's too: a destination that is not one of its
    // addresses is dropped (InAddrErrors), as the kernel does.
    cfg.sock.local_addrs = vec![
        HOST4.parse().unwrap(),
        HOST6.parse().unwrap(),
        "198.18.0.9".parse().unwrap(),
    ];
    let sim = SimConfig {
        coalesce: Coalesce::EVERY_FRAME,
        ..Default::default()
    };
    Host::start(cfg, HostDevice::Sim(sim)).expect("sim host")
}

/// Put one UDP datagram on the wire towards the host (queue by `hash`).
pub fn inject_on(h: &Host, src: SocketAddr, dst: SocketAddr, payload: &[u8], hash: u32) {
    let f = build::udp(
        &Spec::new(src.ip(), dst.ip(), src.port(), dst.port()),
        payload,
    );
    let mut p = h.sim_port().unwrap();
    p.inject(&f, hash).expect("device took the frame");
    p.flush(rxpath_dev::mono_ns());
}

pub fn inject(h: &Host, src: SocketAddr, dst: SocketAddr, payload: &[u8]) {
    inject_on(h, src, dst, payload, 0)
}

pub fn recv_str(s: &UdpSocket) -> (String, SocketAddr) {
    s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut b = [0u8; 2048];
    let (n, src) = s.recv_from(&mut b).expect("datagram");
    (String::from_utf8_lossy(&b[..n]).into_owned(), src)
}

pub fn all_home(r: &HostReport) {
    assert!(r.frames_total > 0);
    assert_eq!(r.frames_home, r.frames_total, "every frame home: {r:?}");
    let t = r.napi_total();
    assert!(t.accounted(), "received = delivered + dropped: {t:?}");
}
