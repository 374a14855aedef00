//! The command line as a user meets it.

use std::process::Command;

fn rxpath(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rxpath"))
        .args(args)
        .output()
        .expect("run rxpath")
}

#[test]
fn run_prints_lines_and_a_summary() {
    let o = rxpath(&["run", "--duration", "2", "--no-pin"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.lines()
            .filter(|l| l.contains("Mpps") && l.contains("Gbit/s"))
            .count()
            >= 2,
        "{out}"
    );
    assert!(out.contains("accounting: received"), "{out}");
    assert!(out.contains(": ok\nframes:"), "{out}");
    assert!(out.contains("back in the pool: ok"), "{out}");
}

#[test]
fn run_json_is_parseable_and_consistent() {
    let o = rxpath(&[
        "run",
        "--duration",
        "500ms",
        "--json",
        "--queues",
        "3",
        "--mix",
        "udp",
        "--no-pin",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(v["consistent"], true);
    assert_eq!(v["queues"].as_array().unwrap().len(), 3);
    assert!(v["rx_pps"].as_f64().unwrap() > 0.0);
    let total = &v["total"];
    let dropped: u64 = total["dropped"]
        .as_object()
        .unwrap()
        .values()
        .map(|x| x.as_u64().unwrap())
        .sum();
    assert_eq!(
        total["received"].as_u64().unwrap(),
        total["delivered"].as_u64().unwrap() + dropped
    );
}

#[test]
fn bad_values_give_a_one_line_error() {
    for args in [
        &["run", "--queues", "0"][..],
        &["run", "--duration", "soon"],
        &["run", "--ring", "1000"],
        &["run", "--mix", "tcp-udp"],
        &["run", "--bundle", "0"],
        &["run", "--threads", "5"],
        &["run", "--weight", "0"],
        &["run", "--flows", "0"],
        &["run", "--udp-size", "20"],
        &["run", "--steer", "sideways"],
        &["run", "--steer", "rps", "--workers", "0"],
        &[
            "run",
            "--steer",
            "rps",
            "--workers",
            "2",
            "--rps-cpus",
            "0,5",
        ],
        &["run", "--steer", "rps", "--rps-cpus", "1-x"],
        &["run", "--steer", "rps", "--netdev-max-backlog", "0"],
        &["run", "--steer", "rfs", "--rps-flow-cnt", "0"],
        &["run", "--steer", "spread", "--spread-pick", "random"],
        &[
            "run",
            "--steer",
            "rps",
            "--workers",
            "2",
            "--stop-worker",
            "0@1s",
        ],
        &["run", "--steer", "rps", "--stop-worker", "one"],
        &[
            "run",
            "--queues",
            "2",
            "--threads",
            "2",
            "--steer",
            "rps",
            "--workers",
            "1",
        ],
        &["bogus"],
    ] {
        let o = rxpath(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?} printed:\n{err}"
        );
        assert!(err.starts_with("rxpath: error:"), "{args:?}: {err}");
    }
}
