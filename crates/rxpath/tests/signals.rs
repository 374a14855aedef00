//! SIGINT and SIGTERM: `rxpath run` stops early and reports everything it
//! ran (exit 0, every frame home); a bench stops at once, kills what it
//! started and removes the namespaces and veth pairs it made (exit 128 +
//! the signal).

use rxpath_testkit::{can_run, Need};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

#[test]
fn a_signal_ends_a_run_early_with_the_full_report() {
    for sig in ["INT", "TERM"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rxpath"))
            .args(["run", "--duration", "60", "--no-pin", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rxpath");
        // Wait for the first per-second line: the path is running.
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let mut lines = 0;
        while lines < 2 && err.read_line(&mut line).unwrap() > 0 {
            lines += 1;
            line.clear();
        }
        let t = Instant::now();
        signal(child.id(), sig);
        let rest: Vec<String> = err.lines().map_while(Result::ok).collect();
        let out = child.wait_with_output().expect("rxpath ends");
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "SIG{sig}: stopped in {:?}, not at the end of 60 s",
            t.elapsed()
        );
        assert_eq!(out.status.code(), Some(0), "SIG{sig}: {rest:?}");
        assert!(
            rest.iter().any(|l| l.contains("stopped by a signal")),
            "SIG{sig}: {rest:?}"
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the JSON report");
        assert_eq!(v["accounted"], true, "SIG{sig}");
        assert_eq!(
            v["frames_home"], v["frames_total"],
            "SIG{sig}: every frame home"
        );
        let got = v["queues"][0]["napi"]["received"].as_u64().unwrap_or(0);
        assert!(got > 0, "SIG{sig}: it ran: {v}");
    }
}

fn netns_exists(name: &str) -> bool {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .any(|w| w == name)
}

fn link_exists(name: &str) -> bool {
    Command::new("ip")
        .args(["link", "show", name])
        .stderr(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn a_signal_stops_a_bench_and_removes_what_it_made() {
    // Namespaces and veth; bench rr runs sockperf.
    if !can_run(&[Need::Root, Need::Tool("sockperf")]) {
        return;
    }
    for sig in ["TERM", "INT"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rxpath"))
            .args([
                "bench",
                "rr",
                "--servers",
                "sleep",
                "--duration",
                "30s",
                "--rounds",
                "1",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rxpath");
        // Its lab (namespace rxp-rr, host end rxprr0) and a client in it.
        let t = Instant::now();
        while !(netns_exists("rxp-rr") && link_exists("rxprr0")) {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "the bench made its lab"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_millis(1500));
        signal(child.id(), sig);
        let err: Vec<String> = BufReader::new(child.stderr.take().unwrap())
            .lines()
            .map_while(Result::ok)
            .collect();
        let status = child.wait().expect("rxpath ends");
        let want = if sig == "INT" { 130 } else { 143 };
        assert_eq!(status.code(), Some(want), "SIG{sig}: {err:?}");
        assert!(
            err.iter().any(|l| l.contains("removing what it made")),
            "SIG{sig}: {err:?}"
        );
        assert!(!netns_exists("rxp-rr"), "SIG{sig}: namespace removed");
        assert!(!link_exists("rxprr0"), "SIG{sig}: veth removed");
        // SIGKILL is delivered at once; an exit takes a moment to finish.
        let t = Instant::now();
        let left = loop {
            let left = Command::new("pgrep")
                .args(["-a", "-f", "sockperf.*198.18"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .expect("pgrep (procps)");
            if left.is_empty() || t.elapsed() > Duration::from_secs(3) {
                break left;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(
            left.is_empty(),
            "SIG{sig}: the bench's peers stopped: {left}"
        );
    }
}

#[test]
fn a_signal_stops_echo_with_its_report() {
    if !can_run(&[Need::Root]) {
        return;
    }
    let lab = rxpath_runtime::lab::VethLab::create("sig").expect("lab");
    for sig in ["TERM", "INT"] {
        // `ip netns exec` execs rxpath: the child's pid is rxpath's.
        let child = Command::new("ip")
            .args(["netns", "exec", &lab.ns, env!("CARGO_BIN_EXE_rxpath")])
            .args(["echo", "--iface", &lab.b, "--duration", "60", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rxpath echo");
        std::thread::sleep(Duration::from_millis(1500));
        let t = Instant::now();
        signal(child.id(), sig);
        let out = child.wait_with_output().expect("echo ends");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(t.elapsed() < Duration::from_secs(15), "SIG{sig}: {err}");
        assert_eq!(out.status.code(), Some(0), "SIG{sig}: {err}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("echo's JSON");
        assert_eq!(v["frames_home"], v["frames_total"], "SIG{sig}: {v}");
        assert!(v["frames_total"].as_u64().unwrap_or(0) > 0, "{v}");
    }
}
