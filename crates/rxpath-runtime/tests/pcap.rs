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

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rxpath-{}-{name}", std::process::id()))
}

#[test]
fn replay_then_capture_is_byte_exact() {
    let input = frames();
    let (src, out) = (tmp("in.pcap"), tmp("out.pcap"));
    Trace::save(&src, &input, Duration::from_micros(10)).unwrap();
    let cfg = RunConfig {
        producer: Producer::Pcap {
            path: src.clone(),
            loops: 1,
            paced: false,
        },
        sim: SimConfig {
            queues: 1,
            ..SimConfig::default()
        },
        duration: Duration::from_millis(500),
        pin: false,
        gro: None,
        capture: Some(out.clone()),
        ..RunConfig::default()
    };
    let r = run(&cfg, |_| {}).unwrap();
    assert!(r.consistent());
    assert_eq!(r.napi_total().delivered, input.len() as u64);
    let got = Trace::load(&out).unwrap();
    let got: Vec<Vec<u8>> = got.packets.into_iter().map(|p| p.1).collect();
    assert_eq!(got.len(), input.len());
    assert!(got == input, "the capture differs from the replayed file");
    if let Ok(o) = std::process::Command::new("tcpdump")
        .args(["-nn", "-r"])
        .arg(&out)
        .output()
    {
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "tcpdump could not read the capture: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(
            text.lines().count(),
            input.len(),
            "tcpdump sees every packet"
        );
    } else {
        eprintln!("tcpdump not installed: format check skipped (CI installs it)");
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
            producer: Producer::Pcap {
                path: src.clone(),
                loops: 1,
                paced: false,
            },
            sim: SimConfig {
                queues: 1,
                ..SimConfig::default()
            },
            duration: Duration::from_millis(400),
            pin: false,
            gro: Some(GroSettings {
                flush_timeout_ns: 0,
                adaptive: None,
            }),
            capture: Some(out.clone()),
            capture_at: at,
            ..RunConfig::default()
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
        producer: Producer::Pcap {
            path: src.clone(),
            loops: 1,
            paced: false,
        },
        sim: SimConfig {
            queues: 1,
            ..SimConfig::default()
        },
        duration: Duration::from_millis(300),
        pin: false,
        ..RunConfig::default()
    };
    let r = run(&cfg, |_| {}).unwrap();
    let d = r.device_total();
    assert_eq!(d.rx_too_long, 1);
    assert_eq!(d.offered, 21);
    assert_eq!(r.napi_total().delivered, 20);
    assert!(r.consistent());
    let _ = std::fs::remove_file(src);
}
