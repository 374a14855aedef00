//! pcap round trip: frames written to a pcap file, replayed through the
//! simulated NIC, captured at the end of the path, come back byte for byte;
//! tcpdump reads the capture.

use rxpath_dev::pcap::Trace;
use rxpath_dev::sim::SimConfig;
use rxpath_runtime::{run, Producer, RunConfig};
use rxpath_wire::build::{self, Spec};
use rxpath_wire::tcp::flags;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

fn frames() -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for i in 0..400u32 {
        let (s, d): (IpAddr, IpAddr) = if i % 5 == 4 {
            ("2001:2::1".parse().unwrap(), "2001:2::2".parse().unwrap())
        } else {
            ("198.18.0.1".parse().unwrap(), "198.18.1.2".parse().unwrap())
        };
        let mut spec = Spec::new(s, d, 1000 + (i % 7) as u16, 9000);
        spec.ip_id = i as u16;
        if i % 9 == 0 {
            spec.vlan = Some(42);
        }
        let payload: Vec<u8> = (0..(i % 300) as usize)
            .map(|k| (k as u32 * 31 + i) as u8)
            .collect();
        v.push(if i % 2 == 0 {
            build::udp(&spec, &payload)
        } else {
            build::tcp(&spec, i * 1000, 1, flags::ACK | flags::PSH, &[], &payload)
        });
    }
    v
}

/// A lossless replay of `path`, once, on one queue.
fn replay(path: &std::path::Path) -> RunConfig {
    RunConfig {
        producer: Producer::Pcap {
            path: path.to_path_buf(),
            loops: 1,
            paced: false,
            pps: None,
        },
        sim: SimConfig {
            queues: 1,
            ..SimConfig::default()
        },
        duration: Duration::from_secs(5),
        pin: false,
        gro: None,
        ..RunConfig::default()
    }
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rxpath-{}-{name}", std::process::id()))
}

/// The packets tcpdump reads from `file` (it must read it); `None` when
/// tcpdump is missing and the run does not require it (skipped aloud).
fn tcpdump_packets(file: &std::path::Path) -> Option<usize> {
    if !rxpath_testkit::can_run(&[rxpath_testkit::Need::Tool("tcpdump")]) {
        return None;
    }
    let o = std::process::Command::new("tcpdump")
        .args(["-nn", "-r"])
        .arg(file)
        .output()
        .expect("running tcpdump");
    assert!(
        o.status.success(),
        "tcpdump could not read {}: {}",
        file.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    Some(String::from_utf8_lossy(&o.stdout).lines().count())
}

#[test]
fn replay_then_capture_is_byte_exact() {
    let input = frames();
    let (src, out) = (tmp("in.pcap"), tmp("out.pcap"));
    Trace::save(&src, &input, Duration::from_micros(10)).unwrap();
    let cfg = RunConfig {
        duration: Duration::from_millis(500),
        capture: Some(out.clone()),
        ..replay(&src)
    };
    let r = run(&cfg, |_| {}).unwrap();
    assert!(r.consistent());
    assert_eq!(r.napi_total().delivered, input.len() as u64);
    let got = Trace::load(&out).unwrap();
    let got: Vec<Vec<u8>> = got.packets.into_iter().map(|p| p.1).collect();
    assert_eq!(got.len(), input.len());
    assert!(got == input, "the capture differs from the replayed file");
    // The format check: another reader of pcap files sees every packet.
    if let Some(n) = tcpdump_packets(&out) {
        assert_eq!(n, input.len(), "tcpdump sees every packet");
    }
    let _ = std::fs::remove_file(src);
    let _ = std::fs::remove_file(out);
}

#[test]
fn a_missing_pcap_is_a_clear_error() {
    let cfg = RunConfig {
        producer: Producer::Pcap {
            path: "/nonexistent/x.pcap".into(),
            loops: 1,
            paced: false,
            pps: None,
        },
        ..RunConfig::default()
    };
    let e = run(&cfg, |_| {}).unwrap_err().to_string();
    assert!(e.contains("/nonexistent/x.pcap"), "{e}");
}

#[test]
fn capture_points_rx_and_delivered_see_before_and_after_gro() {
    use rxpath_runtime::{CaptureAt, GroSettings};
    let spec = Spec::new(
        "198.18.0.1".parse().unwrap(),
        "198.18.1.2".parse().unwrap(),
        40000,
        5201,
    );
    let input: Vec<Vec<u8>> = (0..10u32)
        .map(|i| {
            let fl = if i == 9 {
                flags::ACK | flags::PSH
            } else {
                flags::ACK
            };
            let mut s = spec;
            s.ip_id = i as u16;
            build::tcp(&s, 1000 + i * 1000, 1, fl, &[], &[i as u8; 1000])
        })
        .collect();
    let src = tmp("gro-in.pcap");
    Trace::save(&src, &input, Duration::from_micros(1)).unwrap();
    let mut outs = Vec::new();
    for at in [CaptureAt::Rx, CaptureAt::Delivered] {
        let out = tmp(&format!("gro-out-{at:?}.pcap"));
        let cfg = RunConfig {
            duration: Duration::from_millis(400),
            gro: Some(GroSettings {
                flush_timeout_ns: 0,
                adaptive: None,
            }),
            capture: Some(out.clone()),
            capture_at: at,
            ..replay(&src)
        };
        let r = run(&cfg, |_| {}).unwrap();
        assert!(r.consistent());
        outs.push(
            Trace::load(&out)
                .unwrap()
                .packets
                .into_iter()
                .map(|p| p.1)
                .collect::<Vec<_>>(),
        );
        let _ = std::fs::remove_file(out);
    }
    assert_eq!(outs[0], input, "rx: the frames as replayed");
    // delivered: GRO merged them (how many packets depends on poll
    // boundaries); the payload is all there, in order, behind one header each.
    let payload: Vec<u8> = outs[1].iter().flat_map(|f| f[54..].to_vec()).collect();
    let want: Vec<u8> = input.iter().flat_map(|f| f[54..].to_vec()).collect();
    assert_eq!(payload, want);
    assert!(outs[1].len() < input.len(), "GRO merged segments");
    let _ = std::fs::remove_file(src);
}

#[test]
fn frames_longer_than_a_frame_buffer_are_counted_not_lost() {
    let mut input = frames();
    input.truncate(20);
    let spec = Spec::new(
        "198.18.0.1".parse().unwrap(),
        "198.18.1.2".parse().unwrap(),
        1,
        2,
    );
    input.insert(5, build::udp(&spec, &[7u8; 3000])); // a jumbo frame from a capture
    let src = tmp("jumbo.pcap");
    Trace::save(&src, &input, Duration::from_micros(10)).unwrap();
    let cfg = RunConfig {
        duration: Duration::from_millis(300),
        pin: false,
        ..replay(&src)
    };
    let r = run(&cfg, |_| {}).unwrap();
    let d = r.device_total();
    assert_eq!(d.rx_too_long, 1);
    assert_eq!(d.offered, 21);
    assert_eq!(r.napi_total().delivered, 20);
    assert!(r.consistent());
    let _ = std::fs::remove_file(src);
}

/// One bulk TCP flow's segments, `n` of them, 1000 bytes each; PSH on the
/// last. With `partial`, the checksum field holds the pseudo-header sum, as
/// a sender with checksum offload leaves it (and a capture there records).
fn bulk(n: u32, partial: bool) -> Vec<Vec<u8>> {
    let spec = Spec::new(
        "198.18.0.1".parse().unwrap(),
        "198.18.1.2".parse().unwrap(),
        40000,
        5201,
    );
    (0..n)
        .map(|i| {
            let fl = if i + 1 == n {
                flags::ACK | flags::PSH
            } else {
                flags::ACK
            };
            let mut s = spec;
            s.ip_id = i as u16;
            let mut f = build::tcp(&s, 1000 + i * 1000, 1, fl, &[], &[i as u8; 1000]);
            if partial {
                let l4_len = (f.len() - 34) as u32;
                let p = rxpath_wire::checksum::pseudo_header(spec.src, spec.dst, 6, l4_len) as u16;
                f[34 + 16..34 + 18].copy_from_slice(&p.to_be_bytes());
            }
            f
        })
        .collect()
}

#[test]
fn a_replay_with_defaults_loses_nothing_and_ends_with_the_file() {
    // 4000 frames into a 256-entry ring: as fast as possible would lose
    // most of them; the default waits for room.
    let input = bulk(4000, false);
    let (src, out) = (tmp("lossless-in.pcap"), tmp("lossless-out.pcap"));
    Trace::save(&src, &input, Duration::from_micros(1)).unwrap();
    let cfg = RunConfig {
        producer: Producer::Pcap {
            path: src.clone(),
            loops: 1,
            paced: false,
            pps: None,
        },
        sim: SimConfig {
            queues: 1,
            ring_size: 256,
            frames_per_queue: 512,
            ..SimConfig::default()
        },
        duration: Duration::from_secs(30),
        pin: false,
        capture: Some(out.clone()),
        capture_at: rxpath_runtime::CaptureAt::Rx,
        ..RunConfig::default()
    };
    let t = std::time::Instant::now();
    let r = run(&cfg, |_| {}).unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "the run ended with the file: {:?}",
        t.elapsed()
    );
    let d = r.device_total();
    assert_eq!(
        (d.offered, d.rx_missed, d.rx_no_buffer),
        (4000, 0, 0),
        "{d:?}"
    );
    assert!(r.consistent());
    assert_eq!(r.napi_total().received, 4000);
    let got: Vec<Vec<u8>> = Trace::load(&out)
        .unwrap()
        .packets
        .into_iter()
        .map(|p| p.1)
        .collect();
    assert!(got == input, "the capture is the file, byte for byte");
    // The same file at a wire's pace into the same ring loses frames, and
    // says so.
    let cfg = RunConfig {
        producer: Producer::Pcap {
            path: src.clone(),
            loops: 1,
            paced: false,
            pps: Some(50_000_000),
        },
        capture: None,
        ..cfg
    };
    let r = run(&cfg, |_| {}).unwrap();
    let d = r.device_total();
    assert_eq!(d.offered, 4000);
    assert_eq!(d.offered, d.rx_ring + d.rx_missed + d.rx_no_buffer);
    assert!(r.consistent());
    let _ = std::fs::remove_file(src);
    let _ = std::fs::remove_file(out);
}

#[test]
fn pcapng_is_read_and_written_and_other_link_types_are_refused() {
    let input = frames();
    let (src, ng) = (tmp("ng-in.pcap"), tmp("ng-out.pcapng"));
    Trace::save(&src, &input, Duration::from_micros(10)).unwrap();
    let cfg = RunConfig {
        capture: Some(ng.clone()),
        ..replay(&src)
    };
    let r = run(&cfg, |_| {}).unwrap();
    assert!(r.consistent());
    let bytes = std::fs::read(&ng).unwrap();
    assert_eq!(&bytes[..4], &[0x0a, 0x0d, 0x0d, 0x0a], "a pcapng file");
    let got: Vec<Vec<u8>> = Trace::load(&ng)
        .unwrap()
        .packets
        .into_iter()
        .map(|p| p.1)
        .collect();
    assert!(got == input, "pcapng round trip");
    // And it replays.
    let cfg2 = replay(&ng);
    let r = run(&cfg2, |_| {}).unwrap();
    assert_eq!(r.napi_total().received, input.len() as u64);
    if let Some(n) = tcpdump_packets(&ng) {
        assert_eq!(n, input.len(), "tcpdump reads our pcapng");
    }
    // A pcapng whose interface is not Ethernet (link type 101, raw IP).
    let raw = tmp("raw.pcapng");
    let mut b = Vec::new();
    for w in [0x0a0d_0d0au32, 28, 0x1a2b_3c4d, 1] {
        b.extend_from_slice(&w.to_le_bytes());
    }
    b.extend_from_slice(&(-1i64).to_le_bytes());
    b.extend_from_slice(&28u32.to_le_bytes());
    for w in [1u32, 20] {
        b.extend_from_slice(&w.to_le_bytes());
    }
    b.extend_from_slice(&101u16.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&65535u32.to_le_bytes());
    b.extend_from_slice(&20u32.to_le_bytes());
    std::fs::write(&raw, &b).unwrap();
    let e = Trace::load(&raw).unwrap_err().to_string();
    assert!(
        e.contains("not Ethernet") && e.contains("raw.pcapng"),
        "{e}"
    );
    for p in [src, ng, raw] {
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn a_capture_with_partial_checksums_merges_under_auto_and_is_dropped_under_verify() {
    use rxpath_core::ip::CsumPolicy;
    use rxpath_core::stats::DropReason;
    // 48 TCP segments of one flow and 16 UDP datagrams, all with partial
    // checksums.
    let mut input = bulk(48, true);
    let spec = Spec::new(
        "198.18.0.1".parse().unwrap(),
        "198.18.1.2".parse().unwrap(),
        40001,
        53,
    );
    for i in 0..16u8 {
        let mut f = build::udp(&spec, &[i; 100]);
        let l4_len = (f.len() - 34) as u32;
        let p = rxpath_wire::checksum::pseudo_header(spec.src, spec.dst, 17, l4_len) as u16;
        f[34 + 6..34 + 8].copy_from_slice(&p.to_be_bytes());
        input.push(f);
    }
    let src = tmp("partial.pcap");
    Trace::save(&src, &input, Duration::from_micros(1)).unwrap();
    for csum in [CsumPolicy::Auto, CsumPolicy::Verify] {
        let cfg = RunConfig {
            gro: Some(rxpath_runtime::GroSettings {
                flush_timeout_ns: 0,
                adaptive: None,
            }),
            csum,
            ..replay(&src)
        };
        let r = run(&cfg, |_| {}).unwrap();
        assert!(r.consistent());
        let n = r.napi_total();
        let g = r.gro_total().unwrap();
        match csum {
            CsumPolicy::Auto => {
                assert_eq!(n.delivered, 64, "{n:?}");
                assert!(g.merged > 0, "GRO merged the capture's segments: {g:?}");
            }
            _ => {
                // GRO does not merge what fails verification, and UDP input
                // drops it; `run`'s sink takes TCP without a socket's
                // checksum check (it delivers the 48 segments unmerged).
                assert_eq!(g.merged, 0, "verify: nothing merges");
                assert_eq!(n.dropped.get(DropReason::BadChecksum), 16, "{n:?}");
                assert_eq!(n.delivered, 48, "{n:?}");
            }
        }
    }
    let _ = std::fs::remove_file(src);
}
