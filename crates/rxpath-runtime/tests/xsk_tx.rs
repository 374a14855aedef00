//! The AF_XDP TX ring on a real interface (root only; CI runs it as root):
//! one send of more datagrams than one copy-mode `sendto` transmits (the
//! kernel's `TX_BATCH_SIZE`, 32) must leave whole, with no later send to
//! push the rest out. A kernel UDP socket on the veth's other end counts
//! what arrived.

use rxpath_dev::sys::xdp::XdpFilter;
use rxpath_os::sched;
use rxpath_runtime::lab::{mac_in, sh, Topology, HOST_ADDR, PEER_ADDR};
use rxpath_runtime::{Host, HostConfig, HostDevice};
use rxpath_testkit::{can_run, Need};
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

/// Datagrams sent in one batch: two kernel TX batches.
const N: usize = 64;

/// A veth lab named after `tag` and an AF_XDP host on its host end that
/// knows the peer's MAC: the lab's guard (it removes the lab), the host.
fn xdp_host(tag: &str) -> (rxpath_runtime::lab::LabGuard, Host) {
    let guard = Topology::named(tag)
        .up_scoped()
        .expect("netns + veth (iproute2)");
    let t = &guard.0;
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
    h.sockets().add_neighbor(
        PEER_ADDR.parse().unwrap(),
        mac_in(&t.ns, &t.peer_if).expect("the peer's MAC"),
    );
    (guard, h)
}

#[test]
fn a_batch_past_one_sendto_leaves_whole() {
    if !can_run(&[Need::Root]) {
        return;
    }
    let (guard, h) = xdp_host("xtx");
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

/// A `UDP_SEGMENT` send on an AF_XDP host leaves as one UDP GSO packet
/// through the host's packet socket: cut by the kernel's software GSO
/// when the device does not segment (`tx-udp-segmentation off`), passed
/// whole to the peer when it does. Either way the peer's kernel socket
/// reads every datagram, in order, whole; cut before the veth, each frame
/// has a valid IP checksum, the next IPv4 ID, and in its UDP checksum the
/// pseudo-header sum of its own length, as the kernel's own `UDP_SEGMENT`
/// send leaves them for the checksum offload (tests/gso_oracle.rs).
#[test]
fn a_segmented_send_leaves_as_one_gso_packet() {
    use rxpath_dev::sys::af_packet::RawSocket;
    use rxpath_wire::checksum;
    if !can_run(&[Need::Root]) {
        return;
    }
    let (guard, h) = xdp_host("xgs");
    let t = &guard.0;
    let dst: SocketAddr = format!("{PEER_ADDR}:7002").parse().unwrap();
    let (path, peer_if) = (format!("/run/netns/{}", t.ns), t.peer_if.clone());
    let (rx, cap) = std::thread::spawn(move || {
        sched::enter_netns(&path).expect("setns");
        let cap = RawSocket::bind(&peer_if).expect("capture socket on the peer end");
        (UdpSocket::bind(dst).expect("kernel socket"), cap)
    })
    .join()
    .expect("peer sockets");
    rx.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let from: SocketAddr = format!("{HOST_ADDR}:7000").parse().unwrap();
    let s = h.udp_bind(from).expect("bind");
    let (len, seg) = (12_000usize, 1400usize);
    let buf: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
    let (src_ip, dst_ip) = (from.ip(), dst.ip());
    for offload in ["off", "on"] {
        sh(
            "ethtool",
            &["-K", &t.host_if, "tx-udp-segmentation", offload],
        )
        .expect("ethtool");
        assert_eq!(
            s.send_segments(&buf, Some(seg), dst, 0).expect("send"),
            len.div_ceil(seg)
        );
        let mut got = Vec::new();
        let mut d = [0u8; 2048];
        while let Ok((n, src)) = rx.recv_from(&mut d) {
            assert_eq!(src, from);
            got.extend_from_slice(&d[..n]);
            assert!(
                n == seg || got.len() == len,
                "offload {offload}: a datagram of {n}"
            );
        }
        assert_eq!(got, buf, "offload {offload}: the datagrams, in order");
        let mut frames = Vec::new();
        let mut f = vec![0u8; 70_000];
        while let Some(n) = cap
            .recv_timeout(&mut f, Duration::from_millis(200))
            .expect("capture")
        {
            let x = &f[..n];
            if x.len() > 42
                && x[12..14] == [8, 0]
                && x[23] == 17
                && x[36..38] == 7002u16.to_be_bytes()
            {
                frames.push(x.to_vec());
            }
        }
        if offload == "on" {
            // One packet, whole: the peer's socket cut it.
            assert_eq!(frames.len(), 1, "offload on: frames captured");
            continue;
        }
        assert_eq!(
            frames.len(),
            len.div_ceil(seg),
            "offload off: frames captured"
        );
        for (i, x) in frames.iter().enumerate() {
            let ip = rxpath_wire::ipv4::Packet::new_unchecked(&x[14..]);
            assert!(ip.verify_checksum(), "#{i}: IP checksum");
            let field = u16::from_be_bytes([x[40], x[41]]);
            let partial = checksum::pseudo_header(src_ip, dst_ip, 17, (x.len() - 34) as u32) as u16;
            assert!(
                field == partial || checksum::l4(src_ip, dst_ip, 17, &x[34..]) == 0,
                "#{i}: the UDP checksum is neither the partial sum nor right"
            );
        }
        let ids: Vec<u16> = frames
            .iter()
            .map(|x| u16::from_be_bytes([x[18], x[19]]))
            .collect();
        assert!(
            ids.windows(2).all(|w| w[1] == w[0].wrapping_add(1)),
            "IDs {ids:?}"
        );
    }
    drop(s);
    let report = h.shutdown();
    assert_eq!(report.tx.get("gso_tx_packets"), Some(&2));
    assert_eq!(report.tx.get("xsk_tx_sent"), Some(&0));
    assert_eq!(report.frames_home, report.frames_total);
}
