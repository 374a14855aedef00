//! `rxpath echo` on a veth pair in a fresh namespace (root only; CI runs it
//! as root): a kernel UDP client gets every datagram back byte for byte,
//! and sockperf's ping-pong client gets answers from the busy-polling
//! sockperf mode. Every frame comes home.

mod common;

use rxpath_runtime::lab::VethLab;
use rxpath_testkit::{can_run, Need};
use std::process::{Command, Stdio};
use std::time::Duration;

fn lab() -> Option<VethLab> {
    lab_with(&[])
}

/// The lab, when the machine has root and `more`; `None` (the test was
/// skipped out loud, or fails where the run requires it) otherwise.
fn lab_with(more: &[Need]) -> Option<VethLab> {
    let needs: Vec<Need> = [Need::Root].iter().chain(more).copied().collect();
    if !can_run(&needs) {
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
    // Sleeping, busy polling, and sleeping with interrupts deferred
    // (`napi_defer_hard_irqs`: each datagram then waits for the NAPI
    // timer, 100 µs, well inside the client's timeout).
    for (busy, defer) in [("0", "0"), ("50", "0"), ("0", "2")] {
        let child = echo(
            &lab,
            &[
                "--port",
                "7777",
                "--busy-poll",
                busy,
                "--defer-hard-irqs",
                defer,
                "--gro-flush-timeout",
                if defer == "0" { "0" } else { "100000" },
                "--duration",
                "5",
            ],
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
        assert_eq!(
            out.trim(),
            "200",
            "busy poll {busy}, defer {defer}: all 200 echoed intact"
        );
        let v = report(child);
        assert!(v["echoed"].as_u64().unwrap() >= 200, "{v}");
        assert_eq!(v["sock"]["csum_errors"], 0, "{v}");
        if busy != "0" {
            assert!(v["sock"]["busy_poll_packets"].as_u64().unwrap() > 0, "{v}");
        }
        // Deferral: completions left the line masked and armed the timer
        // (each poll that found a request defers; under load, as in CI,
        // a poll can find more than one); without it, every completion
        // re-armed the line.
        let deferrals = v["napi"]["irq_deferrals"].as_u64().unwrap();
        let polls = v["napi"]["polls"].as_u64().unwrap();
        match defer {
            "0" => assert_eq!(deferrals, 0, "{}", v["napi"]),
            _ => assert!(
                deferrals > 0 && deferrals <= polls,
                "deferrals after the requests: {}",
                v["napi"]
            ),
        }
    }
}

/// Replies leave through the AF_XDP TX ring of the socket the requests
/// came in on (the default), or an AF_PACKET socket with `--tx packet`:
/// the same answers either way, and with the ring every reply is a frame
/// of our UMEM that comes back through the completion ring.
#[test]
fn replies_leave_through_the_sockets_tx_ring_or_af_packet() {
    let Some(lab) = lab() else { return };
    for tx in ["ring", "packet"] {
        let child = echo(&lab, &["--port", "7777", "--tx", tx, "--duration", "3"]);
        std::thread::sleep(Duration::from_millis(800));
        assert_eq!(
            client(&lab, 7777).trim(),
            "200",
            "--tx {tx}: all 200 echoed"
        );
        let v = report(child);
        let sent = v["snmp"]["Udp"]["OutDatagrams"].as_u64().unwrap();
        assert!(sent >= 200, "{v}");
        match tx {
            "ring" => {
                assert_eq!(v["tx"]["xsk_tx_sent"].as_u64(), Some(sent), "{v}");
                assert_eq!(v["tx"]["xsk_tx_completed"].as_u64(), Some(sent), "{v}");
                assert_eq!(v["tx"]["xsk_tx_busy"], 0, "{v}");
            }
            _ => assert_eq!(v["tx"], serde_json::json!({}), "{v}"),
        }
    }
}

/// Fault injection: the TX ring stops completing for 100 ms of every 150
/// (`--tx-stall`). A client sending faster than 512 frames per stall finds
/// replies missing; each one is counted where the kernel counts a send the
/// device could not take (`SndbufErrors`; `xsk_tx_busy` counts refusals),
/// every datagram read is either sent or counted, the client got no more
/// than was sent, and every frame comes home.
#[test]
fn a_tx_ring_that_stops_completing_is_counted_and_loses_no_frame() {
    let Some(lab) = lab() else { return };
    let child = echo(
        &lab,
        &[
            "--port",
            "7777",
            "--tx-stall",
            "100",
            "--tx-stall-every",
            "150",
            "--duration",
            "4",
        ],
    );
    std::thread::sleep(Duration::from_millis(800));
    let script = r#"
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('198.18.0.1', 0))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
s.setblocking(False)
got = 0
end = time.time() + 1.5
i = 0
while time.time() < end:
    for _ in range(50):
        s.sendto(b'x%d' % i, ('198.18.0.2', 7777))
        i += 1
    time.sleep(0.002)
    while True:
        try:
            s.recvfrom(4096)
            got += 1
        except BlockingIOError:
            break
time.sleep(0.5)
while True:
    try:
        s.recvfrom(4096)
        got += 1
    except BlockingIOError:
        break
print(i, got)
"#;
    let out = lab
        .exec(&["python3", "-c", script])
        .expect("python3 client");
    let nums: Vec<u64> = out.split_whitespace().map(|x| x.parse().unwrap()).collect();
    let (asked, got) = (nums[0], nums[1]);
    let v = report(child);
    let udp = &v["snmp"]["Udp"];
    let sent = udp["OutDatagrams"].as_u64().unwrap();
    let refused = udp["SndbufErrors"].as_u64().unwrap();
    let read = v["socket"]["read"].as_u64().unwrap();
    assert!(v["tx_stalls"].as_u64().unwrap() >= 2, "{v}");
    assert!(refused > 0, "the stalls cost replies: {v}");
    assert!(v["tx"]["xsk_tx_busy"].as_u64().unwrap() >= refused, "{v}");
    assert_eq!(
        read,
        sent + refused,
        "every datagram read is sent or counted: {v}"
    );
    assert_eq!(v["tx"]["xsk_tx_sent"].as_u64(), Some(sent), "{v}");
    assert!(
        got <= sent && sent <= asked,
        "client {got}/{asked}, sent {sent}: {v}"
    );
}

/// One second of sockperf's ping-pong (64-byte messages, `extra` flags)
/// to the echo's default port: the messages it got back, and its output.
fn sockperf_received(lab: &VethLab, extra: &[&str]) -> (f64, String) {
    let mut cmd = vec!["sockperf", "ping-pong"];
    cmd.extend_from_slice(extra);
    cmd.extend_from_slice(&["-i", "198.18.0.2", "-p", "11111", "-t", "1", "-m", "64"]);
    let out = lab.exec(&cmd).unwrap_or_default();
    let received = out
        .find("ReceivedMessages=")
        .map(|i| &out[i + "ReceivedMessages=".len()..])
        .map(|r| {
            r.chars()
                .take_while(|c| c.is_ascii_digit())
                .collect::<String>()
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(0.0);
    (received, out)
}

#[test]
fn sockperf_ping_pong_is_answered_in_sockperf_mode() {
    let Some(lab) = lab_with(&[Need::Tool("sockperf")]) else {
        return;
    };
    let child = echo(
        &lab,
        &["--sockperf", "--busy-poll", "50", "--duration", "5"],
    );
    std::thread::sleep(Duration::from_millis(800));
    let mut received = 0.0;
    for _ in 0..3 {
        received = sockperf_received(&lab, &[]).0;
        if received > 0.0 {
            break;
        }
    }
    assert!(received > 100.0, "sockperf got answers: {received}");
    let v = report(child);
    assert!(v["sock"]["busy_poll_packets"].as_u64().unwrap() > 0, "{v}");
}

#[test]
fn steered_echo_answers_from_the_readers_worker_and_serves_metrics() {
    // RFS to a reader's worker needs 2 cores.
    let Some(lab) = lab_with(&[Need::Cores(2)]) else {
        return;
    };
    // The metrics endpoint listens on the namespace's loopback.
    Command::new("ip")
        .args(["netns", "exec", &lab.ns, "ip", "link", "set", "lo", "up"])
        .status()
        .unwrap();
    // RFS on 2 workers, the reader on CPU 1: the veth has one RX queue, so
    // steering is how its packets reach the other core.
    let mut child = echo(
        &lab,
        &[
            "--port",
            "7777",
            "--steer",
            "rfs",
            "--workers",
            "2",
            "--reader-cpus",
            "1",
            "--duration",
            "4",
            "--metrics",
            "127.0.0.1:19464",
            "--metrics-hold",
            "8s",
        ],
    );
    std::thread::sleep(Duration::from_millis(800));
    if let Ok(Some(st)) = child.try_wait() {
        let o = child.wait_with_output().unwrap();
        panic!(
            "echo ended at once ({st}): {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let script = r#"
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('198.18.0.1', 0))
s.settimeout(0.5)
ok = 0
for i in range(200):
    m = ('steer-%d' % i).encode()
    for attempt in range(6):
        s.sendto(m, ('198.18.0.2', 7777))
        try:
            d, a = s.recvfrom(4096)
        except socket.timeout:
            continue
        if d == m:
            ok += 1
        break
print(ok)
"#;
    let out = lab
        .exec(&["python3", "-c", script])
        .expect("python3 client");
    assert_eq!(out.trim(), "200", "all 200 echoed through the workers");
    // The metrics endpoint lives in echo's namespace: scrape it there until
    // echo has stopped and holds its final counters.
    let mut text = String::new();
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(250));
        let scrape = Command::new("ip")
            .args(["netns", "exec", &lab.ns, "python3", "-c"])
            .arg("import urllib.request as u; print(u.urlopen('http://127.0.0.1:19464/metrics', timeout=5).read().decode())")
            .output()
            .unwrap();
        text = String::from_utf8_lossy(&scrape.stdout).to_string();
        if text.contains("\nrxpath_run_finished 1\n") {
            break;
        }
    }
    let v = report(child);
    let workers = v["workers"].as_array().expect("per-worker counters");
    let p: Vec<u64> = workers
        .iter()
        .map(|w| w["backlog"]["processed"].as_u64().unwrap())
        .collect();
    assert_eq!(p.len(), 2);
    assert!(p.iter().sum::<u64>() >= 200, "{p:?}");
    assert!(
        p[1] >= 190,
        "RFS sent the flow to the reader's worker (1): {p:?}"
    );
    let in_dgrams = v["sock"]["in_datagrams"].as_u64().unwrap();
    assert!(
        text.contains(&format!("rxpath_socket_in_datagrams_total {in_dgrams}\n")),
        "metrics equal the JSON: {in_dgrams} in\n{text}"
    );
    let want = format!(
        "rxpath_worker_processed_packets_total{{worker=\"1\"}} {}\n",
        p[1]
    );
    assert!(text.contains(&want), "{want} in\n{text}");
    assert!(text.contains("\nrxpath_run_finished 1\n"));
}

/// 200 request/response round trips from a kernel client in the lab.
fn client(lab: &VethLab, port: u16) -> String {
    let script = format!(
        r#"
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('198.18.0.1', 0))
s.settimeout(0.5)
ok = 0
for i in range(200):
    m = ('k-%d' % i).encode()
    for attempt in range(6):
        s.sendto(m, ('198.18.0.2', {port}))
        try:
            d, a = s.recvfrom(4096)
        except socket.timeout:
            continue
        ok += d == m
        break
print(ok)
"#
    );
    lab.exec(&["python3", "-c", &script])
        .expect("python3 client")
}

fn ctl(pid: u32, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rxpath"))
        .args(["ctl", "--pid", &pid.to_string()])
        .args(args)
        .output()
        .expect("rxpath ctl")
}

/// `rxpath ctl` on a running echo: `busy_poll` set live (from 0 to 50 µs)
/// makes the socket busy-poll from then on, where a run left at 0 never
/// does, and `napi_defer_hard_irqs` with `gro_flush_timeout` set live make
/// the NAPIs defer the interrupt; a bad value or name is an error that
/// changes nothing.
#[test]
fn echo_knobs_change_live_through_rxpath_ctl() {
    let Some(lab) = lab() else { return };
    for live in [false, true] {
        let child = echo(&lab, &["--port", "7778", "--duration", "6"]);
        let pid = child.id();
        std::thread::sleep(Duration::from_millis(800));
        assert_eq!(client(&lab, 7778).trim(), "200");
        let get = |n: &str| {
            let o = ctl(pid, &["get", n]);
            assert!(o.status.success(), "{o:?}");
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        };
        assert_eq!(get("busy_poll"), "0");
        if live {
            let o = ctl(pid, &["set", "busy_poll", "fifty"]);
            assert!(!o.status.success(), "a bad value is refused");
            assert!(
                String::from_utf8_lossy(&o.stderr).contains("not a number"),
                "{o:?}"
            );
            let o = ctl(pid, &["set", "no_such_knob", "1"]);
            assert!(!o.status.success(), "a bad name is refused");
            assert_eq!(get("busy_poll"), "0", "nothing changed");
            // Interrupt mitigation turned on live: the next requests are
            // taken by the NAPI timer with the line masked.
            assert_eq!(get("napi_defer_hard_irqs"), "0");
            for (k, v) in [
                ("gro_flush_timeout", "100000"),
                ("napi_defer_hard_irqs", "2"),
            ] {
                let o = ctl(pid, &["set", k, v]);
                assert!(o.status.success(), "{o:?}");
                assert_eq!(get(k), v);
            }
            assert_eq!(client(&lab, 7778).trim(), "200");
            let o = ctl(pid, &["set", "busy_poll", "50"]);
            assert!(o.status.success(), "{o:?}");
            assert_eq!(get("busy_poll"), "50");
            let o = ctl(pid, &["show"]);
            let show = String::from_utf8_lossy(&o.stdout).into_owned();
            assert!(
                show.contains("busy_poll 50") && show.contains("net.core.busy_read 0"),
                "{show}"
            );
        }
        assert_eq!(client(&lab, 7778).trim(), "200");
        let v = report(child);
        let polls = v["sock"]["busy_polls"].as_u64().unwrap();
        let deferrals = v["napi"]["irq_deferrals"].as_u64().unwrap();
        if live {
            assert!(polls > 0, "busy polling after the live change: {v}");
            assert!(deferrals > 0, "deferral after the live change: {v}");
        } else {
            assert_eq!(polls, 0, "never busy-polls at 0: {v}");
            assert_eq!(deferrals, 0, "never defers at 0: {v}");
        }
        assert_eq!(v["frames_home"], v["frames_total"], "{v}");
    }
}

/// `rxpath echo` answers whole datagrams up to the largest UDP carries
/// (65507 bytes), reassembled from IP fragments by rxpath (AF_PACKET),
/// not cut to a buffer of its own.
#[test]
fn large_datagrams_come_back_whole() {
    let Some(lab) = lab() else { return };
    let child = echo(
        &lab,
        &["--port", "7779", "--mode", "packet", "--duration", "6"],
    );
    std::thread::sleep(Duration::from_millis(1500));
    let script = r#"
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('198.18.0.1', 0))
s.settimeout(0.5)
ok = []
for size in (3000, 8000, 65507):
    m = bytes((i * 7 + size) % 251 for i in range(size))
    got = None
    for attempt in range(6):
        s.sendto(m, ('198.18.0.2', 7779))
        try:
            d, a = s.recvfrom(65535)
        except socket.timeout:
            continue
        got = len(d) if d == m else -len(d)
        break
    ok.append(got)
print(ok)
"#;
    let out = lab
        .exec(&["python3", "-c", script])
        .expect("python3 client");
    let r = report(child);
    assert_eq!(
        out.trim(),
        "[3000, 8000, 65507]",
        "each whole, byte for byte: {r}"
    );
}

/// `echo --tcp` on rxpath's TCP: kernel clients (eight connections at
/// once, 512 KB each) read back every byte they wrote, then sockperf's
/// TCP ping-pong is answered in sockperf mode. The kernel on rxpath's end
/// never sees a segment (it would reset the connections).
#[test]
fn tcp_clients_are_echoed_over_rxpaths_tcp() {
    let Some(lab) = lab_with(&[Need::Tool("sockperf")]) else {
        return;
    };
    let child = echo(&lab, &["--tcp", "--port", "7100", "--duration", "5"]);
    std::thread::sleep(Duration::from_millis(800));
    let script = r#"
import socket, threading, hashlib
bad = []
def run(i):
    data = hashlib.sha256(str(i).encode()).digest() * (512 * 1024 // 32)
    c = socket.create_connection(('198.18.0.2', 7100), timeout=10)
    def w():
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)
    t = threading.Thread(target=w)
    t.start()
    back = bytearray()
    while True:
        d = c.recv(65536)
        if not d:
            break
        back += d
    t.join()
    if bytes(back) != data:
        bad.append((i, len(back)))
ts = [threading.Thread(target=run, args=(i,)) for i in range(8)]
[t.start() for t in ts]
[t.join() for t in ts]
print('bad', bad)
"#;
    let out = lab.exec(&["python3", "-c", script]);
    assert!(
        out.as_ref().is_ok_and(|o| o.contains("bad []")),
        "clients: {out:?}"
    );
    let v = report(child);
    assert_eq!(v["tcp"]["mib"]["Tcp:PassiveOpens"], 8, "{v}");
    assert!(v["tcp"]["mib"]["Tcp:InErrs"].is_null(), "{v}");
    assert_eq!(v["tcp"]["tx"]["no_neighbour"], 0, "{v}");

    let child = echo(
        &lab,
        &[
            "--tcp",
            "--sockperf",
            "--busy-poll",
            "50",
            "--duration",
            "4",
        ],
    );
    std::thread::sleep(Duration::from_millis(800));
    let (received, out) = sockperf_received(&lab, &["--tcp"]);
    assert!(received > 100.0, "sockperf got answers: {received}: {out}");
    let v = report(child);
    assert!(v["echoed"].as_u64().unwrap() as f64 >= received, "{v}");
    assert!(v["sock"]["busy_poll_packets"].as_u64().unwrap() > 0, "{v}");
}
