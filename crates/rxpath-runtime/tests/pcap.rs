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
