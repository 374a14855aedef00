//! `rxpath quic` on a veth pair in a fresh namespace (root only; CI runs
//! it as root): quinn's perf protocol between `rxpath quic --connect` on
//! the kernel's socket and the server on an rxpath socket (AF_XDP, then
//! AF_PACKET), the client's UDP GSO off as a wire would have it: every
//! byte arrives, every frame comes home.

use rxpath_runtime::lab::VethLab;
use rxpath_testkit::{can_run, Need};
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn a_quinn_client_moves_every_byte_through_an_rxpath_quic_server() {
    if !can_run(&[Need::Root]) {
        return;
    }
    let lab = VethLab::create("quic").expect("netns + veth (iproute2)");
    lab.route_to_b().unwrap();
    // As on a wire, the client's GSO batches leave as single datagrams
    // (with an XDP program on `b` the veth does this itself; AF_PACKET
    // would see 64 KiB super-frames it cannot take, counted rx_too_long).
    lab.exec(&["ethtool", "-K", &lab.a, "tx-udp-segmentation", "off"])
        .expect("ethtool tx-udp-segmentation off");
    let bin = env!("CARGO_BIN_EXE_rxpath");
    // The busy-polling server with prefer-busy-poll is woken by the device
    // (its queue's descriptor in tokio's reactor) and polls it itself.
    let busy: &[&str] = &["--busy-poll", "50", "--prefer-busy-poll", "500000"];
    for (mode, extra) in [("xdp", &[][..]), ("packet", &[][..]), ("xdp", busy)] {
        let server = Command::new("ip")
            .args(["netns", "exec", &lab.ns, bin, "quic", "--iface", &lab.b])
            .args(["--bind", "198.18.0.2", "--mode", mode])
            .args(["--duration", "6", "--json"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rxpath quic");
        std::thread::sleep(Duration::from_millis(1200));
        let up = 8_000_000u64;
        let down = 6_000_000u64;
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &lab.ns,
                bin,
                "quic",
                "--connect",
                "198.18.0.2:4433",
            ])
            .args(["--upload", &up.to_string(), "--download", &down.to_string()])
            .args(["--requests", "50", "--json"])
            .output()
            .expect("rxpath quic --connect");
        assert!(
            out.status.success(),
            "{mode}: client failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let c: serde_json::Value = serde_json::from_slice(&out.stdout).expect("client JSON");
        assert_eq!(c["upload"]["bytes"], up, "{c}");
        assert_eq!(c["download"]["bytes"], down, "{c}");
        assert_eq!(c["requests"]["n"], 50, "{c}");
        let o = server.wait_with_output().expect("server ends");
        assert!(
            o.status.success(),
            "{mode}: server: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let s: serde_json::Value = serde_json::from_slice(&o.stdout).expect("server JSON");
        let p = &s["perf"];
        assert_eq!(p["connections"], 1, "{s}");
        assert_eq!(p["failed_streams"], 0, "{s}");
        assert_eq!(p["bytes_in"], up + 50 * 32, "{s}");
        assert_eq!(p["bytes_out"], down + 50 * 32, "{s}");
        let path = &s["path"];
        assert_eq!(path["frames_home"], path["frames_total"], "{s}");
        if !extra.is_empty() {
            assert!(path["socket"]["busy_polls"].as_u64() > Some(0), "{s}");
        }
        eprintln!("{mode}: client {c}");
    }
}
