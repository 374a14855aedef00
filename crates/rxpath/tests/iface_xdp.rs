//! AF_XDP and AF_PACKET through the `rxpath` binary on a veth pair in a
//! fresh namespace (root only; CI runs it as root): exact counts from a
//! kernel UDP sender, no XDP program left after a clean exit or a SIGKILL,
//! and one-line errors.

use rxpath_runtime::lab::{VethLab, MAC_B};
use rxpath_testkit::{can_run, Need};
use std::process::{Command, Stdio};
use std::time::Duration;

fn lab() -> VethLab {
    let lab = VethLab::create("xq").expect("netns + veth (iproute2)");
    // Let the kernel's UDP sends leave through `a` (see iface_packet.rs).
    lab.route_to_b().unwrap();
    lab
}

fn rxpath_in(lab: &VethLab, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &lab.ns, env!("CARGO_BIN_EXE_rxpath")])
        .args(args);
    c
}

fn send_udp(lab: &VethLab, n: usize) {
    let script = format!(
        "import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\nfor i in range({n}):\n    s.sendto(b'x'*64,('198.18.0.2',9000+i%8))\n    if i%200==0: time.sleep(0.001)\n"
    );
    let st = Command::new("ip")
        .args(["netns", "exec", &lab.ns, "python3", "-c", &script])
        .status()
        .expect("python3");
    assert!(st.success());
}

/// End a run once its packets are sent: give the NAPI a moment, then
/// SIGINT (the run reports and exits 0). Tests end runs this way rather
/// than by a duration: on a loaded machine (the whole suite at once) the
/// senders can take longer than a fixed run leaves them.
fn end(child: std::process::Child) -> std::process::Output {
    std::thread::sleep(Duration::from_millis(1000));
    assert!(Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    child.wait_with_output().unwrap()
}

/// `rxpath run` on the lab's `b` end (up to 60 s: end it with [`end`]),
/// one queue, JSON out, started; `extra` adds flags.
fn run_on_b(lab: &VethLab, mode: &str, extra: &[&str]) -> std::process::Child {
    run_on_b_queues(lab, mode, "1", extra)
}

/// [`run_on_b`] on `queues` queues.
fn run_on_b_queues(lab: &VethLab, mode: &str, queues: &str, extra: &[&str]) -> std::process::Child {
    run_on_b_for(lab, mode, queues, "60s", extra)
}

/// [`run_on_b_queues`] for `duration`.
fn run_on_b_for(
    lab: &VethLab,
    mode: &str,
    queues: &str,
    duration: &str,
    extra: &[&str],
) -> std::process::Child {
    let mut args = vec![
        "run",
        "--iface",
        &lab.b,
        "--queues",
        queues,
        "--mode",
        mode,
        "--duration",
        duration,
        "--json",
        "--no-pin",
    ];
    args.extend_from_slice(extra);
    rxpath_in(lab, &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn xdp_attached(lab: &VethLab) -> bool {
    lab.ip(&["link", "show", &lab.b])
        .unwrap_or_default()
        .contains("prog/xdp")
}

#[test]
fn af_xdp_and_af_packet_receive_exact_counts_and_leave_nothing_attached() {
    if !can_run(&[Need::Root]) {
        return;
    }
    let lab = lab();
    for mode in ["xdp", "packet"] {
        let child = run_on_b(&lab, mode, &[]);
        std::thread::sleep(Duration::from_millis(700));
        if mode == "xdp" {
            assert!(
                xdp_attached(&lab),
                "the XDP program is attached while running"
            );
        }
        send_udp(&lab, 4000);
        // And our own generator, over AF_XDP TX on `a`.
        let mac = MAC_B
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect::<Vec<_>>()
            .join(":");
        let g = Command::new("ip")
            .args([
                "netns",
                "exec",
                &lab.ns,
                env!("CARGO_BIN_EXE_rxpath"),
                "gen",
                "--iface",
                &lab.a,
                "--mode",
                "xdp",
            ])
            .args([
                "--count",
                "3000",
                "--pps",
                "50000",
                "--dst-mac",
                &mac,
                "--src-ip",
                "198.18.0.1",
                "--dst-ip",
                "198.18.0.2",
            ])
            .args(["--json"])
            .output()
            .unwrap();
        assert!(
            g.status.success(),
            "gen: {}",
            String::from_utf8_lossy(&g.stderr)
        );
        let gv: serde_json::Value = serde_json::from_slice(&g.stdout).unwrap();
        assert_eq!(gv["completed"].as_u64(), Some(3000), "{gv}");
        let out = end(child);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{mode}: {err}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(v["total"]["delivered"].as_u64(), Some(7000), "{mode}: {v}");
        assert_eq!(v["consistent"], true, "{mode}");
        assert_eq!(v["frames_home"], v["frames_total"], "{mode}");
        assert!(
            !xdp_attached(&lab),
            "{mode}: nothing left attached after exit"
        );
    }
    // SIGKILL: the BPF link dies with the process, and the program with it.
    let mut child = rxpath_in(
        &lab,
        &[
            "run",
            "--iface",
            &lab.b,
            "--queues",
            "1",
            "--mode",
            "xdp",
            "--duration",
            "30s",
            "--no-pin",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    assert!(xdp_attached(&lab));
    // `ip netns exec` execs the binary, so this is rxpath's pid.
    let _ = Command::new("kill")
        .args(["-9", &child.id().to_string()])
        .status();
    let _ = child.wait();
    std::thread::sleep(Duration::from_millis(300));
    assert!(!xdp_attached(&lab), "no XDP program left after SIGKILL");
}

/// Threads of process `pid` whose name starts with `prefix`.
fn threads_named(pid: u32, prefix: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.starts_with(prefix))
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_napi_thread_with_one_queue_waits_on_the_socket_itself() {
    if !can_run(&[Need::Root]) {
        return;
    }
    let lab = lab();
    // Interrupt mode (the default): inline, then the interrupt thread; on
    // both backends.
    let cases = [("xdp", "rxpath-xdp-irq"), ("packet", "rxpath-irq")]
        .into_iter()
        .flat_map(|(m, t)| [(m, t, &[][..], 0), (m, t, &["--irq-thread"][..], 1)]);
    for (mode, thread, extra, irq_threads) in cases {
        let child = run_on_b(&lab, mode, extra);
        std::thread::sleep(Duration::from_millis(700));
        // `ip netns exec` execs the binary, so this is rxpath's pid.
        let seen = threads_named(child.id(), thread);
        let extra = (mode, extra);
        send_udp(&lab, 3000);
        let out = end(child);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{extra:?}: {err}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(seen, irq_threads, "{extra:?}: interrupt threads");
        assert_eq!(
            v["total"]["delivered"].as_u64(),
            Some(3000),
            "{extra:?}: {v}"
        );
        assert_eq!(v["consistent"], true, "{extra:?}");
        assert_eq!(v["frames_home"], v["frames_total"], "{extra:?}");
        // The line fired (the NAPI slept and was woken by its queue).
        let wakeups = v["queues"][0]["device"]["wakeups"].as_u64().unwrap_or(0);
        assert!(wakeups > 0, "{extra:?}: no interrupt was raised: {v}");
        assert!(!xdp_attached(&lab), "{extra:?}: nothing left attached");
    }
}

#[test]
fn interface_errors_are_one_line_and_name_the_fix() {
    if !can_run(&[Need::Root]) {
        return;
    }
    let lab = lab();
    let run = |args: &[&str]| {
        let o = rxpath_in(&lab, args).output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).trim_end().to_string(),
        )
    };
    let (code, err) = run(&[
        "run",
        "--iface",
        "nosuch0",
        "--mode",
        "xdp",
        "--duration",
        "1",
    ]);
    assert_eq!(code, Some(2));
    assert!(
        err.lines()
            .last()
            .unwrap()
            .contains("no interface named nosuch0"),
        "{err}"
    );
    lab.ip(&["link", "set", &lab.b, "down"]).unwrap();
    let (code, err) = run(&[
        "run",
        "--iface",
        &lab.b,
        "--mode",
        "packet",
        "--duration",
        "1",
    ]);
    assert_eq!(code, Some(2));
    let last = err.lines().last().unwrap();
    assert!(
        last.contains("is down") && last.contains("ip link set"),
        "{err}"
    );
    lab.ip(&["link", "set", &lab.b, "up"]).unwrap();
    let (code, err) = run(&[
        "run",
        "--iface",
        &lab.b,
        "--mode",
        "xdp",
        "--queues",
        "9",
        "--duration",
        "1",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.lines().last().unwrap().contains("out of range"),
        "{err}"
    );
    assert!(
        !xdp_attached(&lab),
        "nothing left attached after a failed start"
    );
}

#[test]
fn the_xdp_filter_passes_what_it_does_not_take_to_the_kernel() {
    if !can_run(&[Need::Root]) {
        return;
    }
    let lab = lab();
    for (take, want) in [("udp", 500u64), ("tcp", 0), ("ipv6", 0)] {
        let child = rxpath_in(
            &lab,
            &[
                "run",
                "--iface",
                &lab.b,
                "--queues",
                "1",
                "--mode",
                "xdp",
                "--xdp-take",
                take,
            ],
        )
        .args(["--duration", "60s", "--json", "--no-pin"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        std::thread::sleep(Duration::from_millis(600));
        send_udp(&lab, 500);
        let out = end(child);
        assert!(
            out.status.success(),
            "{take}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            v["total"]["delivered"].as_u64(),
            Some(want),
            "--xdp-take {take}: {v}"
        );
    }
}

#[test]
fn sigint_stops_gen_with_its_report() {
    if !can_run(&[Need::Root]) {
        return;
    }
    let lab = lab();
    let child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.ns,
            env!("CARGO_BIN_EXE_rxpath"),
            "gen",
        ])
        .args([
            "--iface",
            &lab.a,
            "--mode",
            "packet",
            "--duration",
            "60",
            "--pps",
            "20000",
        ])
        .args([
            "--dst-mac",
            "02:00:00:00:00:02",
            "--src-ip",
            "198.18.0.1",
            "--dst-ip",
            "198.18.0.2",
        ])
        .args(["--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    let t = std::time::Instant::now();
    // `ip netns exec` runs rxpath in its place (exec): the child is rxpath.
    assert!(Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let o = child.wait_with_output().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "gen took {:?} to stop",
        t.elapsed()
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("the report");
    assert!(v["sent"].as_u64().unwrap() > 1000, "{v}");
    assert!(v["elapsed_s"].as_f64().unwrap() < 10.0, "{v}");
}

#[test]
fn steering_spreads_one_veth_queue_over_both_workers_on_both_backends() {
    if !can_run(&[Need::Root]) {
        return;
    }
    let lab = lab();
    for mode in ["xdp", "packet"] {
        let child = run_on_b(&lab, mode, &["--steer", "spread", "--workers", "2"]);
        std::thread::sleep(Duration::from_millis(700));
        send_udp(&lab, 3000);
        let out = end(child);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{mode}: {err}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(v["total"]["delivered"].as_u64(), Some(3000), "{mode}: {v}");
        assert_eq!(v["consistent"], true, "{mode}");
        assert_eq!(v["frames_home"], v["frames_total"], "{mode}");
        let w = v["workers"].as_array().unwrap();
        assert_eq!(w.len(), 2, "{mode}");
        assert!(
            w.iter()
                .all(|x| x["backlog"]["processed"].as_u64().unwrap() > 0),
            "{mode}: one veth queue's packets on both workers: {w:?}"
        );
        assert_eq!(v["order"]["reordered"], 0, "{mode}");
    }
}

/// Two queues on one UMEM (`XDP_SHARED_UMEM`, a fill and completion ring
/// per queue): 32 kernel UDP flows land on both queues of a 2-queue veth,
/// every datagram is received once, every frame of the one region comes
/// home, and the backend line says the UMEM is shared.
#[test]
fn two_queues_share_one_umem_and_receive_exact_counts() {
    if !can_run(&[Need::Root]) {
        return;
    }
    let lab = VethLab::create_with_queues("xs", 2).expect("netns + veth (iproute2)");
    lab.route_to_b().unwrap();
    let child = run_on_b_queues(&lab, "xdp", "2", &[]);
    std::thread::sleep(Duration::from_millis(700));
    // One NAPI thread waits on both sockets itself: no interrupt threads.
    let irq_threads = threads_named(child.id(), "rxpath-xdp-irq");
    let script = "import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\nfor i in range(4000):\n    s.sendto(b'x'*64,('198.18.0.2',9000+i%32))\n    if i%200==0: time.sleep(0.001)\n";
    let st = Command::new("ip")
        .args(["netns", "exec", &lab.ns, "python3", "-c", script])
        .status()
        .expect("python3");
    assert!(st.success());
    let out = end(child);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("one shared UMEM"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["total"]["delivered"].as_u64(), Some(4000), "{v}");
    assert_eq!(v["consistent"], true);
    assert_eq!(v["frames_home"], v["frames_total"], "{v}");
    let per_queue: Vec<u64> = v["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .map(|q| q["device"]["rx_ring"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(per_queue.len(), 2, "{v}");
    assert!(
        per_queue.iter().all(|&n| n > 0),
        "both queues took frames from the shared UMEM: {per_queue:?}"
    );
    assert_eq!(irq_threads, 0, "interrupt threads beside the NAPI thread");
    let woken: Vec<u64> = v["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .map(|q| q["device"]["wakeups"].as_u64().unwrap_or(0))
        .collect();
    assert!(
        woken.iter().all(|&n| n > 0),
        "each queue's line fired: {woken:?}"
    );
    assert!(!xdp_attached(&lab), "nothing left attached after exit");
}

/// The world changes under a running rxpath: the interface set down (AF_XDP)
/// or deleted (AF_PACKET) stops the run at once with the report so far,
/// every frame home, a one-line reason and exit code 4 — not a run that
/// idles to the end of its duration on a queue that never delivers again.
#[test]
fn an_interface_that_goes_down_or_away_stops_the_run_cleanly() {
    if !can_run(&[Need::Root]) {
        return;
    }
    for (mode, action) in [("xdp", "down"), ("packet", "delete")] {
        let lab = lab();
        let child = run_on_b_for(&lab, mode, "1", "20s", &[]);
        std::thread::sleep(Duration::from_millis(800));
        send_udp(&lab, 500);
        let t0 = std::time::Instant::now();
        match action {
            "down" => lab.ip(&["link", "set", &lab.b, "down"]).unwrap(),
            _ => lab.ip(&["link", "del", &lab.b]).unwrap(),
        };
        let out = child.wait_with_output().unwrap();
        let took = t0.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{mode}/{action}: {err}");
        assert!(
            took < Duration::from_secs(5),
            "{mode}/{action}: stopped {took:?} after the change, not at the end of 20 s"
        );
        assert!(
            err.contains("stopped early: interface")
                && err.contains(if action == "down" {
                    "went down"
                } else {
                    "was deleted"
                }),
            "{err}"
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(v["consistent"], true, "{mode}: {v}");
        assert_eq!(v["frames_home"], v["frames_total"], "{mode}");
        assert_eq!(v["total"]["delivered"].as_u64(), Some(500), "{mode}: {v}");
        assert!(v["stopped_early"].is_string(), "{v}");
        if action == "down" {
            assert!(!xdp_attached(&lab), "nothing left attached");
        }
    }
}
