//! `rxpath echo` on a veth pair in a fresh namespace (root only; CI runs it
//! as root): a kernel UDP client gets every datagram back byte for byte,
//! and sockperf's ping-pong client gets answers from the busy-polling
//! sockperf mode. Every frame comes home.

mod common;

use rxpath_runtime::lab::VethLab;
use std::process::{Command, Stdio};
use std::time::Duration;

fn lab() -> Option<VethLab> {
    if !rxpath_dev::sys::sched::is_root() {
        eprintln!("skipped: needs root (CI runs it as root)");
        return None;
    }
    let lab = VethLab::create("ec").expect("netns + veth (iproute2)");
    // The kernel's sends to 198.18.0.2 leave through `a` and reach rxpath on
    // `b` (see iface_xdp.rs), with the sender's checksum offload left on:
    // partial checksums, trusted as the kernel trusts them.
    lab.route_to_b().unwrap();
    Some(lab)
}

fn echo(lab: &VethLab, extra: &[&str]) -> std::process::Child {
    Command::new("ip")
        .args(["netns", "exec", &lab.ns, env!("CARGO_BIN_EXE_rxpath")])
        .args(["echo", "--iface", &lab.b, "--bind", "198.18.0.2", "--json"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rxpath echo")
}

use common::echo_report as report;

#[test]
fn a_kernel_udp_client_gets_every_datagram_back() {
    let Some(lab) = lab() else { return };
    for busy in ["0", "50"] {
        let child = echo(
            &lab,
            &["--port", "7777", "--busy-poll", busy, "--duration", "5"],
        );
        std::thread::sleep(Duration::from_millis(800));
        let script = r#"
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('198.18.0.1', 0))
s.settimeout(0.5)
ok = 0
for i in range(200):
    m = ('msg-%d-' % i).encode() + bytes(range(i % 200))
    for attempt in range(6):
        s.sendto(m, ('198.18.0.2', 7777))
        try:
            d, a = s.recvfrom(4096)
        except socket.timeout:
            continue
        if d == m and a == ('198.18.0.2', 7777):
            ok += 1
        break
print(ok)
"#;
        let out = lab
            .exec(&["python3", "-c", script])
            .expect("python3 client");
        assert_eq!(out.trim(), "200", "busy poll {busy}: all 200 echoed intact");
        let v = report(child);
        assert!(v["echoed"].as_u64().unwrap() >= 200, "{v}");
        assert_eq!(v["sock"]["csum_errors"], 0, "{v}");
        if busy != "0" {
            assert!(v["sock"]["busy_poll_packets"].as_u64().unwrap() > 0, "{v}");
        }
    }
}

#[test]
fn sockperf_ping_pong_is_answered_in_sockperf_mode() {
    let Some(lab) = lab() else { return };
    if Command::new("sockperf").arg("--version").output().is_err() {
        eprintln!("skipped: sockperf is not installed (CI installs it)");
        return;
    }
    let child = echo(
        &lab,
        &["--sockperf", "--busy-poll", "50", "--duration", "5"],
    );
    std::thread::sleep(Duration::from_millis(800));
    let mut received = 0.0;
    for _ in 0..3 {
        let out = lab
            .exec(&[
                "sockperf",
                "ping-pong",
                "-i",
                "198.18.0.2",
                "-p",
                "11111",
                "-t",
                "1",
                "-m",
                "64",
            ])
            .unwrap_or_default();
        if let Some(i) = out.find("ReceivedMessages=") {
            let rest = &out[i + "ReceivedMessages=".len()..];
            let n: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
            received = n.parse().unwrap_or(0.0);
        }
        if received > 0.0 {
            break;
        }
    }
    assert!(received > 100.0, "sockperf got answers: {received}");
    let v = report(child);
    assert!(v["sock"]["busy_poll_packets"].as_u64().unwrap() > 0, "{v}");
}
