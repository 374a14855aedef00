//! The AF_XDP TX ring on a real interface (root only; CI runs it as root):
//! one send of more datagrams than one copy-mode `sendto` transmits (the
//! kernel's `TX_BATCH_SIZE`, 32) must leave whole, with no later send to
//! push the rest out. A kernel UDP socket on the veth's other end counts
//! what arrived.

use rxpath_dev::sys::xdp::XdpFilter;
use rxpath_os::sched;
use rxpath_runtime::lab::{sh, Topology, HOST_ADDR, PEER_ADDR};
use rxpath_runtime::{Host, HostConfig, HostDevice};
use rxpath_testkit::{can_run, Need};
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

/// Datagrams sent in one batch: two kernel TX batches.
const N: usize = 64;

/// The MAC of `iface` in namespace `ns` (`ip -o link show`).
fn mac_in(ns: &str, iface: &str) -> [u8; 6] {
    let out = sh("ip", &["-n", ns, "-o", "link", "show", "dev", iface]).expect("ip link show");
    let hex = out
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .expect("a MAC");
    let mut mac = [0u8; 6];
    for (m, h) in mac.iter_mut().zip(hex.split(':')) {
        *m = u8::from_str_radix(h, 16).expect("hex");
    }
    mac
}

#[test]
fn a_batch_past_one_sendto_leaves_whole() {
    if !can_run(&[Need::Root]) {
        return;
    }
    let id = std::process::id() % 10_000;
    let guard = Topology {
        ns: format!("rxp-xtx-{id}"),
        host_if: format!("xtx{id}h"),
        peer_if: format!("xtx{id}p"),
        queues: 1,
        gro: false,
        threaded: false,
    }
    .up_scoped()
    .expect("netns + veth (iproute2)");
    let t = &guard.0;
    // The kernel's socket on the peer end, in its namespace.
    let dst: SocketAddr = format!("{PEER_ADDR}:7001").parse().unwrap();
    let path = format!("/run/netns/{}", t.ns);
    let rx = std::thread::spawn(move || {
        sched::enter_netns(&path).expect("setns");
        UdpSocket::bind(dst).expect("kernel socket on the peer end")
    })
    .join()
    .expect("peer socket");
    rx.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let dev = HostDevice::Xdp {
        iface: t.host_if.clone(),
        filter: XdpFilter {
            protocol: Some(17),
            port_map: true,
            ..XdpFilter::default()
        },
        fallback: false,
        xsk_busy_poll_us: 0,
    };
    let h = Host::start(HostConfig::default(), dev).expect("AF_XDP host");
    h.sockets()
        .add_neighbor(PEER_ADDR.parse().unwrap(), mac_in(&t.ns, &t.peer_if));
    let from: SocketAddr = format!("{HOST_ADDR}:7000").parse().unwrap();
    let s = h.udp_bind(from).expect("bind");
    let payloads: Vec<[u8; 32]> = (0..N).map(|i| [i as u8; 32]).collect();
    let msgs: Vec<(&[u8], SocketAddr)> = payloads.iter().map(|p| (&p[..], dst)).collect();
    assert_eq!(s.send_batch(&msgs).expect("one batch"), N);
    let mut got = [false; N];
    let mut buf = [0u8; 64];
    while let Ok((n, src)) = rx.recv_from(&mut buf) {
        assert_eq!((n, src), (32, from));
        got[buf[0] as usize] = true;
    }
    drop(s);
    let report = h.shutdown();
    let missing: Vec<usize> = (0..N).filter(|&i| !got[i]).collect();
    assert!(missing.is_empty(), "datagrams that never left: {missing:?}");
    assert_eq!(report.tx.get("xsk_tx_sent"), Some(&(N as u64)));
    assert_eq!(report.frames_home, report.frames_total);
}
