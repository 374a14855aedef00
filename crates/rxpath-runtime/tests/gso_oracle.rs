//! Kernel oracle for UDP GSO on send (root only; CI runs it as root): the
//! same buffer sent with `UDP_SEGMENT` by a kernel socket (captured on the
//! far end of a veth) and by rxpath's `send_segments` must give the same
//! datagrams byte for byte — MACs, IP header, ports, lengths, payload cuts
//! — except the fields the two stacks choose on their own: the IPv4 ID
//! (each increments it per segment) and the checksums, which each sets
//! right for what it sent (the kernel leaves the UDP one partial for the
//! veth's offload: the pseudo-header sum of the segment's length).

use rxpath_core::sock::CaptureTx;
use rxpath_dev::sim::SimConfig;
use rxpath_dev::sys::af_packet::RawSocket;
use rxpath_os::sched;
use rxpath_runtime::lab::{VethLab, MAC_A, MAC_B};
use rxpath_runtime::{Host, HostConfig, HostDevice};
use rxpath_testkit::{can_run, Need};
use rxpath_wire::checksum;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

const SRC: &str = "198.18.0.1:40001";
const DST: &str = "198.18.0.2:4433";

fn kernel(lab: &VethLab, buf: &[u8], seg: u16) -> Vec<Vec<u8>> {
    let (path, b) = (lab.netns_path(), lab.b.clone());
    let buf = buf.to_vec();
    std::thread::spawn(move || {
        sched::enter_netns(&path).expect("setns");
        let cap = RawSocket::bind(&b).expect("capture socket on b");
        let s = std::net::UdpSocket::bind(SRC).expect("bind");
        rxpath_os::udp::set_udp_segment(&s, seg).expect("UDP_SEGMENT");
        s.send_to(&buf, DST).expect("send with UDP_SEGMENT");
        let mut got = Vec::new();
        let mut f = vec![0u8; 70_000];
        while let Some(n) = cap
            .recv_timeout(&mut f, Duration::from_millis(300))
            .expect("recv")
        {
            let x = &f[..n];
            if x.len() > 42
                && x[12..14] == [8, 0]
                && x[23] == 17
                && x[36..38] == 4433u16.to_be_bytes()
            {
                got.push(x.to_vec());
            }
        }
        got
    })
    .join()
    .expect("kernel side")
}

fn ours(buf: &[u8], seg: u16) -> Vec<Vec<u8>> {
    let mut cfg = HostConfig::default();
    cfg.sock.mac = MAC_A;
    cfg.sock.local_addrs = vec!["198.18.0.1".parse().unwrap()];
    let h = Host::start(cfg, HostDevice::Sim(SimConfig::default())).expect("sim host");
    let tx = CaptureTx::default();
    h.sockets().set_tx(Box::new(tx.clone()));
    h.sockets()
        .add_neighbor("198.18.0.2".parse::<IpAddr>().unwrap(), MAC_B);
    let s = h.udp_bind(SRC.parse().unwrap()).unwrap();
    s.send_segments(
        buf,
        Some(seg as usize),
        DST.parse::<SocketAddr>().unwrap(),
        0,
    )
    .expect("send_segments");
    drop(s);
    let frames = tx.frames.lock().unwrap().clone();
    let r = h.shutdown();
    assert_eq!(r.frames_home, r.frames_total);
    frames
}

#[test]
fn segmented_sends_match_the_kernels_udp_segment() {
    if !can_run(&[Need::Root]) {
        return;
    }
    let lab = VethLab::create("gso").expect("netns + veth (iproute2)");
    lab.route_to_b().unwrap();
    // The kernel segments in software before the veth (as for a device
    // without UDP segmentation offload), keeping the checksum offload.
    lab.exec(&["ethtool", "-K", &lab.a, "tx-udp-segmentation", "off"])
        .expect("ethtool");
    for (len, seg) in [
        (5000usize, 1200u16),
        (12_000, 1400),
        (1300, 1000),
        (64 * 100, 100),
    ] {
        let buf: Vec<u8> = (0..len).map(|i| (i * 13 + len) as u8).collect();
        let k = kernel(&lab, &buf, seg);
        let o = ours(&buf, seg);
        assert_eq!(
            k.len(),
            len.div_ceil(seg as usize),
            "{len}/{seg}: kernel segments"
        );
        assert_eq!(
            o.len(),
            k.len(),
            "{len}/{seg}: as many datagrams as the kernel"
        );
        for (i, (kf, of)) in k.iter().zip(&o).enumerate() {
            assert_eq!(kf.len(), of.len(), "{len}/{seg} #{i}: frame length");
            let masked = |f: &[u8]| {
                let mut f = f.to_vec();
                f[18..20].fill(0); // IPv4 ID
                f[24..26].fill(0); // IPv4 header checksum
                f[40..42].fill(0); // UDP checksum
                f
            };
            assert_eq!(masked(kf), masked(of), "{len}/{seg} #{i}: bytes differ");
            for f in [kf, of] {
                let ip = rxpath_wire::ipv4::Packet::new_unchecked(&f[14..]);
                assert!(ip.verify_checksum(), "{len}/{seg} #{i}: IP checksum");
            }
            let (src, dst): (IpAddr, IpAddr) =
                ("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap());
            assert_eq!(
                checksum::l4(src, dst, 17, &of[34..]),
                0,
                "ours: full UDP checksum"
            );
            let kfield = u16::from_be_bytes([kf[40], kf[41]]);
            let partial = checksum::pseudo_header(src, dst, 17, (kf.len() - 34) as u32) as u16;
            assert!(
                kfield == partial || checksum::l4(src, dst, 17, &kf[34..]) == 0,
                "{len}/{seg} #{i}: the kernel's UDP checksum is neither partial nor full"
            );
        }
        // Both stacks give each segment the next IPv4 ID.
        for f in [&k, &o] {
            let ids: Vec<u16> = f
                .iter()
                .map(|x| u16::from_be_bytes([x[18], x[19]]))
                .collect();
            assert!(
                ids.windows(2).all(|w| w[1] == w[0].wrapping_add(1)),
                "{len}/{seg}: IDs {ids:?}"
            );
        }
    }
}
