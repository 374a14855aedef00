//! The AF_PACKET backend on a real interface (root only; CI runs it as
//! root): a veth pair in a fresh namespace, known packets sent from the peer
//! end by a kernel UDP socket and by an AF_PACKET socket, received through
//! `rxpath run --iface`: exact counts, every frame back in the pool, and
//! the namespace removed afterwards.

use rxpath_core::DropReason;
use rxpath_dev::sys::af_packet::RawSocket;
use rxpath_os::sched;
use rxpath_runtime::lab::{VethLab, MAC_A, MAC_B};
use rxpath_runtime::{run, IfName, Producer, RunConfig};
use rxpath_testkit::{can_run, Need};
use rxpath_wire::build::{self, Spec};
use std::net::UdpSocket;
use std::time::Duration;

const N_UDP: usize = 3000;
const N_RAW: usize = 2000;

#[test]
fn af_packet_receives_exactly_what_was_sent() {
    if !can_run(&[Need::Root]) {
        return;
    }
    let lab = VethLab::create("afp").expect("netns + veth (iproute2)");
    lab.route_to_b().expect("route to b");
    let path = lab.netns_path();
    let (a, b) = (lab.a.clone(), lab.b.clone());
    // The sender: starts once the receiver is up, sends from `a` to `b`.
    let sender = {
        let path = path.clone();
        std::thread::spawn(move || {
            sched::enter_netns(&path).expect("setns");
            std::thread::sleep(Duration::from_millis(400));
            let s = UdpSocket::bind("198.18.0.1:0").expect("udp socket");
            for i in 0..N_UDP {
                s.send_to(&[i as u8; 64], ("198.18.0.2", 9000 + (i % 8) as u16))
                    .expect("send");
                if i % 256 == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            let raw = RawSocket::bind(&a).expect("AF_PACKET on a");
            for i in 0..N_RAW {
                let mut spec = Spec::new(
                    "198.18.0.1".parse().unwrap(),
                    "198.18.0.2".parse().unwrap(),
                    7000 + (i % 4) as u16,
                    9999,
                );
                spec.src_mac = MAC_A;
                spec.dst_mac = MAC_B;
                raw.send(&build::udp(&spec, &[0xab; 100]))
                    .expect("raw send");
                if i % 256 == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        })
    };
    let report = std::thread::spawn(move || {
        sched::enter_netns(&path).expect("setns");
        let cfg = RunConfig {
            producer: Producer::Packet {
                iface: IfName::new(&b).unwrap(),
            },
            duration: Duration::from_millis(2500),
            pin: false,
            gro: None,
            ..RunConfig::default()
        };
        run(&cfg, |_| {}).expect("run on the veth")
    })
    .join()
    .expect("receiver");
    sender.join().expect("sender");
    let n = report.napi_total();
    let d = report.device_total();
    assert_eq!(
        n.delivered,
        (N_UDP + N_RAW) as u64,
        "every UDP datagram, once: {n:?}"
    );
    assert_eq!(
        n.received,
        n.delivered
            + n.dropped.get(DropReason::UnhandledProto)
            + n.dropped.get(DropReason::NotForUs),
        "only ARP (not IP) and ND (to multicast groups not joined) besides: {n:?}"
    );
    assert_eq!(d.rx_missed + d.rx_no_buffer, 0);
    assert!(
        report.queues.iter().all(|q| q.napi.received > 0),
        "fanout spread flows over both queues"
    );
    assert!(report.consistent(), "{report:?}");
    assert_eq!(
        report.frames_home, report.frames_total,
        "every frame back in the pool"
    );
    let ns = lab.ns.clone();
    drop(lab);
    let list = rxpath_runtime::lab::sh("ip", &["netns", "list"]).unwrap_or_default();
    assert!(!list.contains(&ns), "the namespace was removed");
}

/// A local sender's UDP GSO datagrams cross a veth unsegmented (64 KiB
/// skbs, which no wire carries); AF_PACKET hands them over cut to a ring
/// slot. They are dropped at the device and counted `rx_too_long`, never
/// passed up truncated; the ordinary datagrams around them arrive.
#[test]
fn gso_super_frames_on_a_veth_are_counted_too_long_not_passed_up_cut() {
    if !can_run(&[Need::Root]) {
        return;
    }
    let lab = VethLab::create("afg").expect("netns + veth (iproute2)");
    lab.route_to_b().expect("route to b");
    lab.exec(&["ethtool", "-K", &lab.a, "tx-udp-segmentation", "on"])
        .expect("ethtool");
    let path = lab.netns_path();
    let b = lab.b.clone();
    const SUPER: usize = 20;
    const PLAIN: usize = 100;
    let sender = {
        let path = path.clone();
        std::thread::spawn(move || {
            sched::enter_netns(&path).expect("setns");
            std::thread::sleep(Duration::from_millis(400));
            let gso = UdpSocket::bind("198.18.0.1:0").expect("udp socket");
            rxpath_os::udp::set_udp_segment(&gso, 1200).expect("UDP_SEGMENT");
            let plain = UdpSocket::bind("198.18.0.1:0").expect("udp socket");
            for i in 0..SUPER {
                gso.send_to(&[i as u8; 12_000], ("198.18.0.2", 9000))
                    .expect("GSO send");
                for _ in 0..PLAIN / SUPER {
                    plain.send_to(&[7; 64], ("198.18.0.2", 9001)).expect("send");
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let report = std::thread::spawn(move || {
        sched::enter_netns(&path).expect("setns");
        let cfg = RunConfig {
            producer: Producer::Packet {
                iface: IfName::new(&b).unwrap(),
            },
            duration: Duration::from_millis(1500),
            pin: false,
            gro: None,
            ..RunConfig::default()
        };
        run(&cfg, |_| {}).expect("run on the veth")
    })
    .join()
    .expect("receiver");
    sender.join().expect("sender");
    let n = report.napi_total();
    let d = report.device_total();
    assert_eq!(d.rx_too_long, SUPER as u64, "{d:?}");
    assert_eq!(n.delivered, PLAIN as u64, "{n:?}");
    assert_eq!(n.dropped.get(DropReason::Malformed), 0, "{n:?}");
    assert!(report.consistent(), "{report:?}");
    assert_eq!(report.frames_home, report.frames_total);
}
