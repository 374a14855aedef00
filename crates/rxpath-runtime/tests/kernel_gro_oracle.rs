//! Kernel oracle for GRO (root only; CI runs it as root).
//!
//! In a fresh network namespace, a veth pair: the receiving end `b` has GRO
//! on and threaded NAPI, the sending end `a` has TSO and GSO off. A sequence
//! of TCP segments is sent out of `a` with an AF_PACKET socket by a thread
//! running SCHED_FIFO on the CPU of `b`'s NAPI kthread, so the kthread can
//! only poll once the whole sequence is queued: one NAPI poll sees it all.
//! An AF_PACKET socket on `b` captures what the kernel's GRO passed up
//! (taps run after GRO). The same sequence goes through our GRO in one poll
//! (`gro::replay`); per flow, the merge boundaries must be the same.

use rxpath_core::gro::{replay, replay_udp_gro, Boundary};
use rxpath_dev::sys::af_packet::RawSocket;
use rxpath_os::sched;
use rxpath_runtime::lab::{VethLab, MAC_A, MAC_B};
use rxpath_testkit::{can_run, Need};
use rxpath_wire::build::{self, Spec};
use rxpath_wire::tcp::flags;
use std::collections::BTreeMap;
use std::time::Duration;

const MSS: usize = 1448;
/// The kernel's `UDP_GRO` socket in the namespace listens here.
const UDP_PORT: u16 = 4433;

#[derive(Clone)]
struct S {
    port: u16,
    seq: u32,
    ack: u32,
    flags: u16,
    tsval: u32,
    len: usize,
    id: u16,
}

impl S {
    fn frame(&self) -> Vec<u8> {
        let mut spec = Spec::new(
            "198.18.0.1".parse().unwrap(),
            "198.18.0.2".parse().unwrap(),
            self.port,
            5201,
        );
        spec.src_mac = MAC_A;
        spec.dst_mac = MAC_B;
        spec.ip_id = self.id;
        let mut opts = [1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 7];
        opts[4..8].copy_from_slice(&self.tsval.to_be_bytes());
        let payload: Vec<u8> = (0..self.len)
            .map(|i| (self.seq as usize + i) as u8)
            .collect();
        build::tcp(&spec, self.seq, self.ack, self.flags, &opts, &payload)
    }
}

/// `n` contiguous full segments of flow `port`, then apply `edit` to each.
fn run_of(port: u16, n: usize, edit: impl Fn(usize, &mut S)) -> Vec<S> {
    let mut v = Vec::new();
    let mut seq = 1_000_000;
    for i in 0..n {
        let mut s = S {
            port,
            seq,
            ack: 77,
            flags: flags::ACK,
            tsval: 5,
            len: MSS,
            id: i as u16 + 1,
        };
        edit(i, &mut s);
        seq = s.seq.wrapping_add(s.len as u32);
        v.push(s);
    }
    v
}

fn scenarios() -> Vec<(&'static str, Vec<S>)> {
    vec![
        (
            "contiguous, PSH at the end",
            run_of(41001, 12, |i, s| {
                if i == 11 {
                    s.flags |= flags::PSH
                }
            }),
        ),
        (
            "PSH in the middle",
            run_of(41002, 10, |i, s| {
                if i == 4 {
                    s.flags |= flags::PSH
                }
            }),
        ),
        (
            "timestamp option changes",
            run_of(41003, 10, |i, s| {
                if i >= 5 {
                    s.tsval = 6
                }
            }),
        ),
        (
            "sequence gap",
            run_of(41004, 10, |i, s| {
                if i >= 6 {
                    s.seq += 100
                }
            }),
        ),
        (
            "ACK number changes",
            run_of(41005, 10, |i, s| {
                if i >= 3 {
                    s.ack = 78
                }
            }),
        ),
        (
            "short segment ends the packet",
            run_of(41006, 10, |i, s| {
                if i == 3 {
                    s.len = 600
                }
            }),
        ),
        (
            "no payload (pure ACK) in the middle",
            run_of(41007, 8, |i, s| {
                if i == 4 {
                    s.len = 0
                }
            }),
        ),
        (
            "IP ID jumps",
            run_of(41008, 8, |i, s| {
                if i >= 5 {
                    s.id += 10
                }
            }),
        ),
    ]
}

/// What the kernel's GRO passed up, per flow: (seq, payload bytes).
fn kernel(lab: &VethLab, frames: &[Vec<u8>], cpu: usize) -> BTreeMap<u16, Vec<(u32, u32)>> {
    let (path, a, b) = (lab.netns_path(), lab.a.clone(), lab.b.clone());
    let frames = frames.to_vec();
    std::thread::spawn(move || {
        sched::enter_netns(&path).expect("setns");
        let cap = RawSocket::bind(&b).expect("capture socket on b");
        let tx = RawSocket::bind(&a).expect("send socket on a");
        sched::pin(0, cpu).expect("pin");
        sched::set_fifo(Some(10)).expect("SCHED_FIFO (root)");
        for f in &frames {
            tx.send(f).expect("send");
        }
        sched::set_fifo(None).expect("SCHED_OTHER");
        let mut got: BTreeMap<u16, Vec<(u32, u32)>> = BTreeMap::new();
        let mut buf = vec![0u8; 70_000];
        while let Some(n) = cap
            .recv_timeout(&mut buf, Duration::from_millis(300))
            .expect("recv")
        {
            let f = &buf[..n.min(buf.len())];
            // The kernel's merged packet carries the whole length in its IP
            // header; parse only the headers.
            if f.len() < 42 || f[12..14] != [0x08, 0x00] {
                continue;
            }
            let ihl = (f[14] & 0x0f) as usize * 4;
            let total = u16::from_be_bytes([f[16], f[17]]) as usize;
            let t = 14 + ihl;
            let dport = u16::from_be_bytes([f[t + 2], f[t + 3]]);
            let sport = u16::from_be_bytes([f[t], f[t + 1]]);
            match f[23] {
                6 if dport == 5201 && f.len() >= 54 => {
                    let seq = u32::from_be_bytes([f[t + 4], f[t + 5], f[t + 6], f[t + 7]]);
                    let doff = (f[t + 12] >> 4) as usize * 4;
                    got.entry(sport)
                        .or_default()
                        .push((seq, (total - ihl - doff) as u32));
                }
                17 if dport == UDP_PORT => {
                    got.entry(sport)
                        .or_default()
                        .push((0, (total - ihl - 8) as u32));
                }
                _ => {}
            }
        }
        got
    })
    .join()
    .expect("oracle thread")
}

fn ours(frames: &[Vec<u8>]) -> BTreeMap<u16, Vec<(u32, u32)>> {
    boundaries(replay(&as_refs(frames)))
}

fn as_refs(frames: &[Vec<u8>]) -> Vec<&[u8]> {
    frames.iter().map(|f| f.as_slice()).collect()
}

fn boundaries(b: Vec<Boundary>) -> BTreeMap<u16, Vec<(u32, u32)>> {
    let mut m: BTreeMap<u16, Vec<(u32, u32)>> = BTreeMap::new();
    for Boundary {
        src_port,
        seq,
        payload,
        ..
    } in b
    {
        m.entry(src_port).or_default().push((seq, payload));
    }
    m
}

#[test]
fn merge_boundaries_match_the_kernel() {
    if !can_run(&[Need::Root, Need::Tool("ethtool")]) {
        return;
    }
    let lab = VethLab::create("gro").expect("netns + veth (iproute2)");
    lab.exec(&["ethtool", "-K", &lab.b, "gro", "on"])
        .expect("ethtool gro on");
    lab.exec(&["ethtool", "-K", &lab.a, "tso", "off", "gso", "off"])
        .expect("ethtool tso/gso off");
    let kthread = lab.threaded_napi().expect("threaded NAPI on the veth");
    let cpu = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    sched::pin(kthread, cpu).expect("pin NAPI kthread");

    let mut mismatches = Vec::new();
    for (name, segs) in scenarios() {
        let frames: Vec<Vec<u8>> = segs.iter().map(S::frame).collect();
        assert!(
            frames.len() <= 64,
            "a scenario must fit in one NAPI poll (weight 64)"
        );
        let k = kernel(&lab, &frames, cpu);
        let o = ours(&frames);
        eprintln!("{name}:\n  kernel {k:?}\n  rxpath {o:?}");
        let total: u32 = k.values().flatten().map(|x| x.1).sum();
        let sent: u32 = segs.iter().map(|s| s.len as u32).sum();
        assert_eq!(
            total, sent,
            "{name}: the capture saw every payload byte once"
        );
        if k != o {
            mismatches.push(name);
        }
    }
    assert!(
        mismatches.is_empty(),
        "merge boundaries differ from the kernel's: {mismatches:?}"
    );
}

/// One UDP datagram of a scenario.
#[derive(Clone)]
struct D {
    port: u16,
    len: usize,
    id: u16,
    ttl: u8,
}

impl D {
    fn frame(&self) -> Vec<u8> {
        let mut spec = Spec::new(
            "198.18.0.1".parse().unwrap(),
            "198.18.0.2".parse().unwrap(),
            self.port,
            UDP_PORT,
        );
        spec.src_mac = MAC_A;
        spec.dst_mac = MAC_B;
        spec.ip_id = self.id;
        spec.ttl = self.ttl;
        let payload: Vec<u8> = (0..self.len)
            .map(|i| (i + self.id as usize) as u8)
            .collect();
        build::udp(&spec, &payload)
    }
}

/// `n` datagrams of `len` bytes on flow `port`, then `edit` each.
fn dgrams(port: u16, n: usize, len: usize, edit: impl Fn(usize, &mut D)) -> Vec<D> {
    (0..n)
        .map(|i| {
            let mut d = D {
                port,
                len,
                id: i as u16 + 1,
                ttl: 64,
            };
            edit(i, &mut d);
            d
        })
        .collect()
}

fn udp_scenarios() -> Vec<(&'static str, Vec<D>)> {
    let mut two = dgrams(42009, 6, 900, |_, _| {});
    for (i, d) in dgrams(42010, 6, 900, |_, _| {}).into_iter().enumerate() {
        two.insert(2 * i + 1, d);
    }
    vec![
        ("equal sizes", dgrams(42001, 12, 1200, |_, _| {})),
        (
            "a shorter one ends the packet",
            dgrams(42002, 10, 1000, |i, d| {
                if i == 4 {
                    d.len = 500
                }
            }),
        ),
        (
            "a longer one starts a new packet",
            dgrams(42003, 12, 800, |i, d| {
                if i >= 8 {
                    d.len = 1200
                }
            }),
        ),
        ("small datagrams, many", dgrams(42004, 60, 100, |_, _| {})),
        (
            "TTL changes",
            dgrams(42005, 10, 700, |i, d| {
                if i >= 5 {
                    d.ttl = 9
                }
            }),
        ),
        (
            "IP ID jumps",
            dgrams(42006, 8, 700, |i, d| {
                if i >= 5 {
                    d.id += 10
                }
            }),
        ),
        ("the 64 KiB limit", dgrams(42007, 50, 1400, |_, _| {})),
        ("two flows interleaved", two),
    ]
}

#[test]
fn udp_gro_merge_boundaries_match_the_kernel() {
    if !can_run(&[Need::Root, Need::Tool("ethtool")]) {
        return;
    }
    let lab = VethLab::create("ugro").expect("netns + veth (iproute2)");
    lab.exec(&["ethtool", "-K", &lab.b, "gro", "on"])
        .expect("ethtool gro on");
    lab.exec(&["ethtool", "-K", &lab.a, "tso", "off", "gso", "off"])
        .expect("ethtool tso/gso off");
    let kthread = lab.threaded_napi().expect("threaded NAPI on the veth");
    let cpu = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    sched::pin(kthread, cpu).expect("pin NAPI kthread");
    // The socket that asks for UDP GRO, in the namespace, for the whole run.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let path = lab.netns_path();
    let holder = std::thread::spawn(move || {
        sched::enter_netns(&path).expect("setns");
        let s = std::net::UdpSocket::bind(("198.18.0.2", UDP_PORT)).expect("bind");
        rxpath_os::udp::set_udp_gro(&s, true).expect("UDP_GRO");
        ready_tx.send(()).unwrap();
        let _ = done_rx.recv();
    });
    ready_rx.recv().expect("socket ready");

    let mut mismatches = Vec::new();
    for (name, ds) in udp_scenarios() {
        let frames: Vec<Vec<u8>> = ds.iter().map(D::frame).collect();
        assert!(frames.len() <= 64, "one NAPI poll (weight 64)");
        let k = kernel(&lab, &frames, cpu);
        let o = boundaries(replay_udp_gro(&as_refs(&frames)));
        eprintln!("{name}:\n  kernel {k:?}\n  rxpath {o:?}");
        let total: u32 = k.values().flatten().map(|x| x.1).sum();
        let sent: u32 = ds.iter().map(|d| d.len as u32).sum();
        assert_eq!(
            total, sent,
            "{name}: the capture saw every payload byte once"
        );
        if k != o {
            mismatches.push(name);
        }
    }
    drop(done_tx);
    holder.join().unwrap();
    assert!(
        mismatches.is_empty(),
        "UDP GRO boundaries differ from the kernel's: {mismatches:?}"
    );
}
