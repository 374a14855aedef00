//! A world that refuses: no CAP_NET_ADMIN/CAP_BPF for AF_XDP, no
//! CAP_NET_RAW for AF_PACKET, `RLIMIT_MEMLOCK` too low to pin the UMEM, an
//! interface another rxpath already holds. Each is one clear line and exit
//! code 2, never a panic or a hang (root: a namespace with a veth pair).

use rxpath_runtime::lab::VethLab;
use rxpath_testkit::{can_run, Need};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn run_in(lab: &VethLab, pre: &[&str], extra: &[&str]) -> Output {
    let mut args: Vec<&str> = vec!["netns", "exec", &lab.ns];
    args.extend_from_slice(pre);
    args.push(env!("CARGO_BIN_EXE_rxpath"));
    args.extend_from_slice(&["run", "--iface", &lab.b, "--duration", "1", "--no-pin"]);
    args.extend_from_slice(extra);
    Command::new("ip")
        .args(&args)
        .output()
        .expect("ip netns exec")
}

/// Exit code 2 and exactly one error line that says `want`.
fn one_clear_line(what: &str, o: &Output, want: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert_eq!(o.status.code(), Some(2), "{what}: {err}");
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("rxpath: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{what}: one error line: {err}");
    assert!(
        errors[0].contains(want),
        "{what}: {:?} should say {want:?}",
        errors[0]
    );
}

const NET_CAPS: &str = "-net_admin,-net_raw,-bpf,-sys_admin,-perfmon";

#[test]
fn missing_capabilities_low_memlock_and_a_held_interface_are_one_clear_line() {
    // Namespaces and capabilities to drop; setpriv (util-linux) drops them.
    if !can_run(&[Need::Root, Need::Tool("setpriv"), Need::Tool("prlimit")]) {
        return;
    }
    let lab = VethLab::create("wld").expect("lab");
    let drop_caps = [
        "setpriv",
        "--bounding-set",
        NET_CAPS,
        "--inh-caps",
        NET_CAPS,
    ];
    let o = run_in(&lab, &drop_caps, &["--mode", "xdp"]);
    one_clear_line(
        "AF_XDP without CAP_BPF/CAP_NET_ADMIN",
        &o,
        "CAP_BPF + CAP_NET_ADMIN",
    );
    let o = run_in(&lab, &drop_caps, &["--mode", "packet"]);
    one_clear_line("AF_PACKET without CAP_NET_RAW", &o, "CAP_NET_RAW");
    let low_memlock = [
        "prlimit",
        "--memlock=0:0",
        "setpriv",
        "--bounding-set",
        "-ipc_lock",
        "--inh-caps",
        "-ipc_lock",
    ];
    let o = run_in(&lab, &low_memlock, &["--mode", "xdp"]);
    one_clear_line(
        "RLIMIT_MEMLOCK 0 without CAP_IPC_LOCK",
        &o,
        "RLIMIT_MEMLOCK",
    );
    // Another rxpath holds the interface: the second is refused, the
    // first runs on undisturbed.
    let first = Command::new("ip")
        .args(["netns", "exec", &lab.ns, env!("CARGO_BIN_EXE_rxpath")])
        .args([
            "run",
            "--iface",
            &lab.b,
            "--mode",
            "xdp",
            "--duration",
            "6",
            "--no-pin",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rxpath");
    let t = Instant::now();
    loop {
        let o = Command::new("ip")
            .args(["-n", &lab.ns, "link", "show", &lab.b])
            .output()
            .expect("ip");
        if String::from_utf8_lossy(&o.stdout).contains("xdp") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the first rxpath attached XDP"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = run_in(&lab, &[], &["--mode", "xdp"]);
    one_clear_line(
        "an interface another rxpath holds",
        &o,
        "another XDP program",
    );
    let o = first.wait_with_output().expect("the first rxpath");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "the first run went on: {err}");
    assert!(
        err.lines().all(|l| !l.starts_with("rxpath: error")),
        "{err}"
    );
}
