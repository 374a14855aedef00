//! The command line as a user meets it.

use std::process::Command;

fn rxpath(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rxpath"))
        .args(args)
        .output()
        .expect("run rxpath")
}

/// `rxpath ctl --pid PID ARGS...`.
fn ctl(pid: &str, args: &[&str]) -> std::process::Output {
    rxpath(&[&["ctl", "--pid", pid][..], args].concat())
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

/// GET `url` with Python's HTTP client; the body.
fn scrape(url: &str, openmetrics: bool) -> String {
    let accept = if openmetrics {
        "application/openmetrics-text; version=1.0.0"
    } else {
        "text/plain"
    };
    let o = Command::new("python3")
        .args([
            "-c",
            "import sys, urllib.request as u; r = u.urlopen(u.Request(sys.argv[1], headers={'Accept': sys.argv[2]}), timeout=5); sys.stdout.write(r.read().decode())",
            url,
            accept,
        ])
        .output()
        .expect("python3");
    assert!(
        o.status.success(),
        "scrape failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// The value of the sample `name{labels}` (exact text) in a scrape.
fn sample(text: &str, name_labels: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name_labels)?.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no sample {name_labels}")) as u64
}

#[test]
fn metrics_are_scraped_checked_by_promtool_and_match_the_json() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_rxpath"))
        .args([
            "run",
            "--duration",
            "6",
            "--steer",
            "rps",
            "--workers",
            "2",
            "--no-pin",
            "--json",
            "--metrics",
            "127.0.0.1:0",
            "--metrics-hold",
            "4s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rxpath");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut url = None;
    let mut line = String::new();
    while url.is_none() && err.read_line(&mut line).unwrap() > 0 {
        url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .map(str::to_string);
        line.clear();
    }
    let url = url.expect("the metrics address on stderr");
    std::thread::spawn(move || for _ in err.lines() {});
    // While it runs (6 s, loaded CI machines included): the text format,
    // as promtool reads it.
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let live = scrape(&url, false);
    assert!(
        live.contains("rxpath_rx_packets_total{queue=\"0\"}"),
        "{live}"
    );
    assert!(live.contains("\nrxpath_run_finished 0\n"), "{live}");
    // Per-worker counters are live too (what the workers share), and grow.
    let worker1 = |t: &str| {
        t.lines()
            .find_map(|l| {
                l.strip_prefix("rxpath_worker_processed_packets_total{worker=\"1\"}")?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or(0.0) as u64
    };
    let first = worker1(&live);
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let later = scrape(&url, false);
    assert!(
        worker1(&later) > first,
        "worker 1's processed packets grow while the run goes: {first} then {}\n{later}",
        worker1(&later)
    );
    assert!(
        !later.contains("rxpath_worker_delivered_packets"),
        "a worker's own counters come only at the end"
    );
    // Prometheus's own checker reads the exposition (apt-get install prometheus).
    if rxpath_testkit::can_run(&[rxpath_testkit::Need::Tool("promtool")]) {
        use std::io::Write;
        let mut p = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running promtool");
        p.stdin.take().unwrap().write_all(live.as_bytes()).unwrap();
        let o = p.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "promtool check metrics: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // At the end: the JSON on stdout, and the same counters in a scrape.
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut json = String::new();
    loop {
        let mut l = String::new();
        assert!(out.read_line(&mut l).unwrap() > 0, "the JSON ended early");
        json.push_str(&l);
        if l == "}\n" {
            break;
        }
    }
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let end = scrape(&url, true);
    assert!(end.ends_with("# EOF\n"), "OpenMetrics when asked for it");
    assert!(end.contains("\nrxpath_run_finished 1\n"));
    let rx: u64 = v["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            let i = q["queue"].as_u64().unwrap();
            let n = q["napi"]["received"].as_u64().unwrap();
            assert_eq!(
                sample(&end, &format!("rxpath_rx_packets_total{{queue=\"{i}\"}}")),
                n
            );
            n
        })
        .sum();
    assert_eq!(rx, v["total"]["received"].as_u64().unwrap());
    for w in v["workers"].as_array().unwrap() {
        let id = w["worker"].as_u64().unwrap();
        assert_eq!(
            sample(
                &end,
                &format!("rxpath_worker_processed_packets_total{{worker=\"{id}\"}}")
            ),
            w["backlog"]["processed"].as_u64().unwrap()
        );
    }
    let ok = child.wait().unwrap();
    assert!(ok.success());
}

#[test]
fn a_metrics_port_in_use_is_a_one_line_error() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let o = rxpath(&["run", "--duration", "1", "--metrics", &addr]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&addr) && err.contains("cannot listen"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn sigint_and_sigterm_end_a_run_with_its_report() {
    use std::process::Stdio;
    for sig in ["INT", "TERM"] {
        let child = Command::new(env!("CARGO_BIN_EXE_rxpath"))
            .args([
                "run",
                "--duration",
                "60",
                "--steer",
                "rps",
                "--workers",
                "2",
                "--no-pin",
                "--json",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rxpath");
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let t = std::time::Instant::now();
        let k = Command::new("kill")
            .args([format!("-{sig}"), child.id().to_string()])
            .status()
            .unwrap();
        assert!(k.success());
        let o = child.wait_with_output().unwrap();
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "SIG{sig}: took {:?}",
            t.elapsed()
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "SIG{sig}: {:?} {err}", o.status);
        assert!(err.contains("stopped by a signal"), "SIG{sig}: {err}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("the final JSON");
        assert_eq!(v["consistent"], true, "SIG{sig}");
        assert_eq!(v["frames_home"], v["frames_total"], "SIG{sig}");
        assert!(v["elapsed_s"].as_f64().unwrap() < 30.0);
    }
}

#[test]
fn a_config_file_sets_flags_the_command_line_overrides_and_unknown_keys_are_named() {
    let dir = std::env::temp_dir();
    let good = dir.join(format!("rxpath-cfg-good-{}.toml", std::process::id()));
    std::fs::write(
        &good,
        "duration = \"1s\"\nqueues = 1\nsteer = \"rps\"\nworkers = 2\nno-pin = true\njson = true\n",
    )
    .unwrap();
    let o = rxpath(&["run", "--config", good.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["config"]["sim"]["queues"], 1);
    assert_eq!(v["config"]["steer"]["mode"], "rps");
    assert_eq!(v["config"]["steer"]["workers"], 2);
    let o = rxpath(&["run", "--config", good.to_str().unwrap(), "--queues", "2"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["config"]["sim"]["queues"], 2, "the command line wins");
    let bad = dir.join(format!("rxpath-cfg-bad-{}.toml", std::process::id()));
    for (text, want) in [
        ("bogus-knob = 3\n", "unknown key 'bogus-knob'"),
        ("duration = \n", "TOML parse error"),
        ("queues = 0\n", "--queues"),
    ] {
        std::fs::write(&bad, text).unwrap();
        let o = rxpath(&["run", "--config", bad.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{text}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{text}: {err}");
        assert!(err.contains(want), "{text}: {err}");
    }
    let _ = std::fs::remove_file(good);
    let _ = std::fs::remove_file(bad);
}

#[test]
fn a_knob_changed_through_ctl_changes_the_running_path() {
    use std::process::Stdio;
    let run = |change: bool| -> serde_json::Value {
        let child = Command::new(env!("CARGO_BIN_EXE_rxpath"))
            .args([
                "run",
                "--mix",
                "tcp-bulk",
                "--duration",
                "3",
                "--no-pin",
                "--json",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("rxpath");
        let pid = child.id().to_string();
        std::thread::sleep(std::time::Duration::from_millis(800));
        if change {
            let ctl = |args: &[&str]| ctl(&pid, args);
            // Bad input changes nothing and says why in one line.
            for bad in [
                &["set", "bogus", "1"][..],
                &["set", "net.core.netdev_budget", "0"],
                &["set", "gro_flush_timeout", "soon"],
            ] {
                let o = ctl(bad);
                let err = String::from_utf8_lossy(&o.stderr);
                assert_eq!(o.status.code(), Some(2), "{bad:?}: {err}");
                assert_eq!(err.trim_end().lines().count(), 1, "{bad:?}: {err}");
            }
            let o = ctl(&["show"]);
            let shown = String::from_utf8_lossy(&o.stdout).to_string();
            assert!(shown.contains("gro_flush_timeout 0\n"), "{shown}");
            assert!(shown.contains("net.core.netdev_budget 300\n"), "{shown}");
            let o = ctl(&["set", "gro_flush_timeout", "200000"]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let o = ctl(&["get", "gro_flush_timeout"]);
            assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "200000");
        }
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success());
        serde_json::from_slice(&o.stdout).unwrap()
    };
    // FlushReason::ALL's last counter is the gro_flush_timeout timer.
    let timer = |v: &serde_json::Value| v["gro"]["flushes"][7].as_u64().unwrap();
    let before = run(false);
    assert_eq!(timer(&before), 0, "gro_flush_timeout 0: no timer");
    let after = run(true);
    assert!(
        timer(&after) > 0,
        "the timer runs once gro_flush_timeout is set live"
    );
    assert_eq!(after["accounted"], true);
    assert_eq!(after["frames_home"], after["frames_total"]);
}

/// `rxpath ctl set filter_reloads 1` reloads the rule files while packets
/// flow, as SIGHUP does: a run whose file drops nothing at the start drops
/// UDP once the file says so and the reload is asked for; `get
/// filter_reloads` counts it; other values are refused.
#[test]
fn the_filter_reloads_through_ctl_while_packets_flow() {
    use std::process::Stdio;
    let dir = std::env::temp_dir().join(format!("rxpath-ctl-filter-{}", std::process::id()));
    std::fs::write(&dir, "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n").unwrap();
    let file = dir.to_str().unwrap().to_string();
    let child = Command::new(env!("CARGO_BIN_EXE_rxpath"))
        .args([
            "run",
            "--duration",
            "4",
            "--no-pin",
            "--json",
            "--filter",
            &file,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rxpath");
    let pid = child.id().to_string();
    std::thread::sleep(std::time::Duration::from_millis(800));
    let ctl = |args: &[&str]| ctl(&pid, args);
    let get = || {
        String::from_utf8_lossy(&ctl(&["get", "filter_reloads"]).stdout)
            .trim()
            .to_string()
    };
    assert_eq!(get(), "0");
    let o = ctl(&["set", "filter_reloads", "2"]);
    assert_eq!(o.status.code(), Some(2), "only 1 asks for a reload");
    std::fs::write(
        &dir,
        "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p udp -j DROP\nCOMMIT\n",
    )
    .unwrap();
    let o = ctl(&["set", "filter_reloads", "1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t = std::time::Instant::now();
    while get() != "1" {
        assert!(t.elapsed().as_secs() < 3, "reloaded within a tick or two");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let o = child.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&dir);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("filter reloaded"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["drops"]["filter"].as_u64().unwrap() > 0,
        "UDP dropped after the reload: {}",
        v["drops"]
    );
    assert_eq!(v["accounted"], true);
}

/// `rps_cpus` changed through ctl while packets flow: a run that starts
/// with worker 0 only steers to worker 1 once the mask says so (one
/// without the change never does); a mask naming a worker the run does not
/// have is refused.
#[test]
fn rps_cpus_changes_through_ctl_while_packets_flow() {
    use std::process::Stdio;
    let run = |change: bool| -> serde_json::Value {
        let child = Command::new(env!("CARGO_BIN_EXE_rxpath"))
            .args(["run", "--steer", "rps", "--workers", "2", "--rps-cpus", "0"])
            .args(["--duration", "3", "--no-pin", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("rxpath");
        let pid = child.id().to_string();
        std::thread::sleep(std::time::Duration::from_millis(800));
        if change {
            let ctl = |args: &[&str]| ctl(&pid, args);
            let o = ctl(&["get", "rps_cpus"]);
            assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "1");
            let o = ctl(&["set", "rps_cpus", "4"]);
            assert_eq!(o.status.code(), Some(2), "worker 2 does not exist");
            let o = ctl(&["set", "rps_cpus", "2"]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success());
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let processed =
        |v: &serde_json::Value, w: usize| v["workers"][w]["backlog"]["processed"].as_u64().unwrap();
    let before = run(false);
    assert_eq!(processed(&before, 1), 0, "rps_cpus 0: worker 1 idle");
    let after = run(true);
    assert!(
        processed(&after, 1) > 0,
        "steered to worker 1 after the change"
    );
    assert!(processed(&after, 0) > 0, "worker 0 before it");
    assert_eq!(after["accounted"], true);
    assert_eq!(after["frames_home"], after["frames_total"]);
}

/// `rxpath ctl` without `--pid` finds the one running rxpath even when a
/// process killed earlier (SIGKILL) left its socket file behind.
#[test]
fn ctl_finds_the_running_rxpath_past_stale_sockets() {
    use std::process::Stdio;
    let dir = std::env::temp_dir().join(format!("rxpath-ctl-dir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // No process has a pid this large (pid_max is at most 2^22).
    std::fs::write(dir.join("rxpath-99999999.sock"), b"").unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_rxpath"))
        .args(["run", "--duration", "3", "--no-pin"])
        .env("XDG_RUNTIME_DIR", &dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("rxpath");
    std::thread::sleep(std::time::Duration::from_millis(800));
    let o = Command::new(env!("CARGO_BIN_EXE_rxpath"))
        .args(["ctl", "get", "net.core.netdev_budget"])
        .env("XDG_RUNTIME_DIR", &dir)
        .output()
        .unwrap();
    let _ = child.wait_with_output();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "300");
}

/// The file `DATE-NAME-COMMIT.EXT` a bench report wrote into `dir`.
fn report_file(dir: &std::path::Path, name: &str, ext: &str) -> std::path::PathBuf {
    let found: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let f = p.file_name().unwrap().to_str().unwrap();
            // YYYY-MM-DD-, then NAME-, then a commit with no other dash
            // (but for "-dirty"), then .EXT.
            let Some(rest) = f.get(11..).and_then(|r| r.strip_suffix(&format!(".{ext}"))) else {
                return false;
            };
            let date_ok = f.as_bytes()[..10].iter().enumerate().all(|(i, c)| {
                if i == 4 || i == 7 {
                    *c == b'-'
                } else {
                    c.is_ascii_digit()
                }
            });
            date_ok
                && rest
                    .strip_prefix(&format!("{name}-"))
                    .is_some_and(|c| !c.trim_end_matches("-dirty").contains('-'))
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {name}.{ext} in {}: {found:?}",
        dir.display()
    );
    found[0].clone()
}

/// `rxpath bench filter`: the within-10 % ratio is the median of the
/// pairs' own ratios, every pair of both producers in the JSON.
#[test]
fn bench_filter_takes_its_ratio_from_the_pairs() {
    let dir = std::env::temp_dir().join(format!("rxpath-filter-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let o = rxpath(&[
        "bench",
        "filter",
        "--rules",
        "2000",
        "--no-dpdk",
        "--no-kernel",
        "--duration",
        "100ms",
        "--passes",
        "1",
        "--pairs",
        "3",
        "--pair-duration",
        "40ms",
        "--report",
        dir.to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let j = std::fs::read_to_string(report_file(&dir, "filter", "json"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let j: serde_json::Value = serde_json::from_str(&j.unwrap()).unwrap();
    assert_eq!(j["pairs"], 3, "{j}");
    let pairs = &j["rows"][0]["cached_vs_none_by_pair"];
    let ratios = |p: &str| -> Vec<f64> {
        pairs[p]
            .as_array()
            .unwrap_or_else(|| panic!("{j}"))
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    let (mut null, cold) = (ratios("null"), ratios("cold"));
    assert_eq!((null.len(), cold.len()), (3, 3), "{j}");
    assert!(null.iter().chain(&cold).all(|r| *r > 0.0), "{j}");
    null.sort_by(f64::total_cmp);
    let line = format!(
        "within 10 % of the no-filter rate, null mode: {:.3}x (>= 0.900x)",
        null[1]
    );
    assert!(out.contains(&line), "{line} not in:\n{out}");
}

/// `rxpath bench gro --report DIR`: the JSON of the run (every round) and
/// the three plots, each as PNG and SVG, and a line that says where.
#[test]
fn a_bench_report_has_the_json_and_the_plots() {
    let dir = std::env::temp_dir().join(format!("rxpath-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let o = rxpath(&[
        "bench",
        "gro",
        "--duration",
        "100ms",
        "--rounds",
        "2",
        "--report",
        dir.to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains(&format!("report: 7 file(s) in {}", dir.display())),
        "{out}"
    );
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report_file(&dir, "gro", "json")).unwrap())
            .unwrap();
    assert_eq!(j["bulk"].as_array().map(Vec::len), Some(4), "{j}");
    assert_eq!(
        j["bulk"][0]["rounds"]["segs_per_pkt"]
            .as_array()
            .map(Vec::len),
        Some(2),
        "{j}"
    );
    // What the run could not measure (nothing here), and where it ran.
    assert_eq!(j["not_measured"], serde_json::json!([]), "{j}");
    assert_eq!(j["bench"], "gro");
    assert!(j["machine"]["cpus"].as_u64() >= Some(1), "{j}");
    for name in ["gro-segments-per-packet", "gro-packets-up", "gro-rr-p99"] {
        let png = std::fs::read(report_file(&dir, name, "png")).unwrap();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{name}.png");
        image::load_from_memory(&png).unwrap_or_else(|e| panic!("{name}.png: {e}"));
        let svg = std::fs::read_to_string(report_file(&dir, name, "svg")).unwrap();
        roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{name}.svg: {e}"));
    }
    // Not a terminal: no progress bar escape codes in what was captured.
    assert!(!String::from_utf8_lossy(&o.stderr).contains('\x1b'));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `rps_flow_cnt` changed through ctl while packets flow: read back rounded
/// up to a power of two, as the kernel keeps it; 256 flows in a table of 8
/// entries (2 sets of 4) find every entry of their set busy, so the NAPI
/// thread runs their packets itself (`rfs_here`), which a run with 4096
/// entries never does; no flow is reordered and every frame comes home.
/// 0 (the kernel's "no table") is refused and changes nothing.
#[test]
fn rps_flow_cnt_changes_through_ctl_while_packets_flow() {
    use std::process::Stdio;
    let run = |change: bool| -> serde_json::Value {
        let child = Command::new(env!("CARGO_BIN_EXE_rxpath"))
            .args([
                "run",
                "--steer",
                "rfs",
                "--workers",
                "2",
                "--rfs-readers",
                "0,1",
            ])
            .args(["--flows", "256", "--rps-flow-cnt", "4096"])
            .args(["--duration", "3", "--no-pin", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("rxpath");
        let pid = child.id().to_string();
        std::thread::sleep(std::time::Duration::from_millis(800));
        let get = || {
            let o = ctl(&pid, &["get", "rps_flow_cnt"]);
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        };
        assert_eq!(get(), "4096");
        if change {
            let o = ctl(&pid, &["set", "rps_flow_cnt", "0"]);
            assert_eq!(o.status.code(), Some(2), "0 is refused");
            assert_eq!(get(), "4096", "a refused value changes nothing");
            let o = ctl(&pid, &["set", "rps_flow_cnt", "5"]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            assert_eq!(get(), "8");
        }
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success());
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let here = |v: &serde_json::Value| -> u64 {
        v["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["rfs_here"].as_u64().unwrap())
            .sum()
    };
    let big = run(false);
    let small = run(true);
    assert_eq!(here(&big), 0, "4096 entries hold 256 flows");
    assert!(here(&small) > 0, "8 entries cannot hold 256 busy flows");
    for v in [&big, &small] {
        assert_eq!(v["order"]["reordered"], 0);
        assert_eq!(v["accounted"], true);
        assert_eq!(v["frames_home"], v["frames_total"]);
    }
}

/// `rxpath ARGS` under `prlimit --as` (a runaway allocation aborts
/// instead of taking the machine's memory), killed after `secs` (a hang
/// fails the test instead of stopping it).
fn rxpath_bounded(args: &[&str], secs: u64) -> std::process::Output {
    rxpath_bounded_env(args, &[], secs)
}

/// [`rxpath_bounded`] with variables set.
fn rxpath_bounded_env(
    args: &[&str],
    env: &[(&str, &std::path::Path)],
    secs: u64,
) -> std::process::Output {
    use std::process::Stdio;
    let mut child = Command::new("prlimit")
        .arg("--as=2147483648")
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_rxpath"))
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prlimit rxpath");
    let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rxpath {args:?} still ran after {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// A config file is a regular file of at most 1 MiB: `/dev/zero` (which
/// never ends), a FIFO (whose open waits for a writer) and a 2 MiB file
/// are refused in one line, not read until memory runs out or forever.
#[test]
fn a_config_file_must_be_a_small_regular_file() {
    let dir = std::env::temp_dir().join(format!("rxpath-cfg-odd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo.toml");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let big = dir.join("big.toml");
    let comment = format!("# {}\n", "x".repeat(1000));
    std::fs::write(&big, comment.repeat(2100) + "queues = 1\n").unwrap();
    let cases = [
        ("/dev/zero".to_string(), "not a regular file"),
        (fifo.display().to_string(), "not a regular file"),
        (big.display().to_string(), "larger than 1 MiB"),
    ];
    for (file, want) in &cases {
        let o = rxpath_bounded(&["run", "--config", file, "--duration", "1"], 20);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{file}: {:?} {err}", o.status);
        assert_eq!(err.trim_end().lines().count(), 1, "{file}: {err}");
        assert!(err.starts_with("rxpath: error: --config"), "{file}: {err}");
        assert!(err.contains(want), "{file}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A numeric knob out of the range that can work is refused before the
/// run starts, in one line that gives the range: a budget of 2^64-1 was
/// a budget of -1 (every net_rx_action a time_squeeze), a time of 2^64-1
/// overflowed a deadline (a NAPI thread panicked), a table of 2^64-1
/// entries aborted the allocation, a reader that moves every 2^64-1 ms
/// kept the run from ending.
#[test]
fn numeric_knobs_out_of_range_are_refused_with_their_range() {
    const MAX: &str = "18446744073709551615";
    for (args, range) in [
        (&["--netdev-budget", MAX][..], "1..=2147483647"),
        (&["--netdev-budget", "0"], "1..=2147483647"),
        (&["--netdev-budget-usecs", MAX], "1..=2147483647"),
        (&["--gro-flush-timeout", MAX], "0..=1000000000"),
        (&["--gro-adaptive", MAX], "0..=1000000000"),
        (&["--xdp-busy-poll", "4294967295"], "0..=2147483647"),
        (
            &["--steer", "rfs", "--rps-sock-flow-entries", MAX],
            "0..=536870912",
        ),
        (&["--steer", "rfs", "--rps-flow-cnt", MAX], "0..=1048576"),
        (
            &["--steer", "rps", "--netdev-max-backlog", MAX],
            "1..=1048576",
        ),
        (
            &["--steer", "spread", "--reorder-window", MAX],
            "1..=1048576",
        ),
        (
            &[
                "--steer",
                "rfs",
                "--rfs-readers",
                "0",
                "--rfs-migrate-ms",
                MAX,
            ],
            "1..=86400000",
        ),
    ] {
        let o = rxpath_bounded(
            &[&["run", "--duration", "1", "--no-pin"][..], args].concat(),
            20,
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {:?} {err}", o.status);
        assert!(o.stdout.is_empty(), "{args:?}: the run started");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("rxpath: error:"), "{args:?}: {err}");
        assert!(err.contains(args[args.len() - 2]), "{args:?}: {err}");
        assert!(err.contains(range), "{args:?}: want {range}: {err}");
    }
}

/// `rxpath ARGS` in a network namespace of its own with its loopback up:
/// what it does to `lo` there touches no one else's.
fn rxpath_in_netns(args: &[&str]) -> std::process::Output {
    Command::new("unshare")
        .args(["-n", "sh", "-c", "ip link set lo up && exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_rxpath"))
        .args(args)
        .output()
        .expect("unshare -n rxpath")
}

/// The loopback interface is refused: XDP on `lo` takes the host's own
/// traffic away from the kernel (loopback goes dark while rxpath runs),
/// and `exec` would start the program with its sockets there. Tried in a
/// network namespace of its own, so a failure blackholes nothing else.
#[test]
fn the_loopback_interface_is_refused() {
    let mark = std::env::temp_dir().join(format!("rxpath-lo-ran-{}", std::process::id()));
    let _ = std::fs::remove_file(&mark);
    let mark_s = mark.display().to_string();
    for args in [
        &["run", "--mode", "xdp", "--iface", "lo", "--duration", "1"][..],
        &[
            "run",
            "--mode",
            "packet",
            "--iface",
            "lo",
            "--duration",
            "1",
        ],
        &["run", "--iface", "lo", "--queues", "1", "--duration", "1"],
        &["exec", "--iface", "lo", "--", "touch", &mark_s],
    ] {
        let o = rxpath_in_netns(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("rxpath: error:"), "{args:?}: {err}");
        assert!(err.contains("loopback"), "{args:?}: {err}");
    }
    assert!(!mark.exists(), "exec started the program on lo");
}

/// `rxpath ARGS` in a network namespace of its own with a veth pair,
/// rxv0 (up) and rxv1: an interface to name that is nobody's.
fn rxpath_in_netns_with_veth(args: &[&str]) -> std::process::Output {
    // A mount namespace too, with the namespace's own /sys (as `ip netns
    // exec` does): an interface's sysfs files are read there.
    Command::new("unshare")
        .args([
            "-n",
            "-m",
            "sh",
            "-c",
            "mount -t sysfs sysfs /sys && \
             ip link set lo up && ip link add rxv0 type veth peer name rxv1 && \
             ip link set rxv0 up && ip link set rxv1 up && exec \"$0\" \"$@\"",
        ])
        .arg(env!("CARGO_BIN_EXE_rxpath"))
        .args(args)
        .output()
        .expect("unshare -n rxpath")
}

/// A program that binds no socket leaves no report, as nothing was
/// served: exec says so and exits with the program's own status, not 1
/// with "left no report" as if it had been killed.
#[test]
fn exec_of_a_program_that_serves_no_socket_exits_with_its_status() {
    for (prog, code) in [(&["true"][..], 0), (&["sh", "-c", "exit 3"], 3)] {
        let o = rxpath_in_netns_with_veth(&[&["exec", "--iface", "rxv0", "--"][..], prog].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{prog:?}: {err}");
        assert!(err.contains("no socket was served"), "{prog:?}: {err}");
        assert!(!err.contains("left no report"), "{prog:?}: {err}");
    }
}

/// Every value exec hands the preload is checked with the preload's own
/// parsers before the program starts: a bad one was found by the
/// preload inside the program, which ran on the kernel's sockets and
/// exited 1. So is what a RXPATH_CONFIG file in the environment gives
/// for the flags left unset.
#[test]
fn exec_checks_what_the_preload_would_parse_before_the_program_starts() {
    let dir = std::env::temp_dir().join(format!("rxpath-exec-vals-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mark = dir.join("ran");
    let mark_s = mark.display().to_string();
    let cfg = dir.join("bad.toml");
    std::fs::write(&cfg, "rules = \"garbage\"\n").unwrap();
    for (env, args, want) in [
        (None, &["--ports", "70000"][..], "--ports"),
        (None, &["--ports", "abc"], "--ports"),
        (None, &["--kernel-ports", "1-"], "--kernel-ports"),
        (None, &["--rules", "garbage"], "--rules"),
        (None, &["--rules", "kernel *:70000"], "--rules"),
        (Some(&cfg), &[], "RXPATH_CONFIG"),
    ] {
        let mut cmd = Command::new("unshare");
        cmd.args([
            "-n",
            "sh",
            "-c",
            "ip link add rxv0 type veth peer name rxv1 && ip link set rxv0 up && \
             ip link set rxv1 up && exec \"$0\" \"$@\"",
        ])
        .arg(env!("CARGO_BIN_EXE_rxpath"))
        .args(["exec", "--iface", "rxv0"])
        .args(args)
        .args(["--", "touch", &mark_s]);
        if let Some(c) = env {
            cmd.env("RXPATH_CONFIG", c);
        }
        let o = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("rxpath: error:"), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!mark.exists(), "{args:?}: the program ran");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// What answers on a control socket is checked against the protocol
/// (`show`: NAME VALUE lines, `get`: a number, `set`: ok): anything else
/// (another program's socket, a stale path reused) is an error, exit 2,
/// not printed as if it were the answer. A socket that never answers, or
/// never stops, is not waited for or read without end.
#[test]
fn ctl_refuses_an_answer_that_is_not_the_protocol() {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixListener;
    let pid = std::process::id().to_string();
    let serve = |tag: &str, answer: &'static str| -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("rxpath-ctl-fake-{pid}-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let l = UnixListener::bind(dir.join(format!("rxpath-{pid}.sock"))).unwrap();
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let mut line = String::new();
                let _ = BufReader::new(&s).read_line(&mut line);
                let mut w = &s;
                match answer {
                    "<silent>" => std::thread::sleep(std::time::Duration::from_secs(30)),
                    "<endless>" => {
                        let chunk = vec![b'x'; 1 << 20];
                        while w.write_all(&chunk).is_ok() {}
                    }
                    a => {
                        let _ = w.write_all(a.as_bytes());
                    }
                }
            }
        });
        dir
    };
    let good = serve("good", "net.core.netdev_budget 300\ngro_flush_timeout 0\n");
    let o = rxpath_bounded_env(
        &["ctl", "--pid", &pid, "show"],
        &[("XDG_RUNTIME_DIR", &good)],
        20,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "net.core.netdev_budget 300\ngro_flush_timeout 0\n"
    );
    for (tag, answer, req) in [
        ("http", "HTTP/1.1 400 Bad Request\r\n\r\n", &["show"][..]),
        ("empty", "", &["show"]),
        ("word", "ok\n", &["get", "net.core.netdev_budget"]),
        ("number", "42\n", &["set", "net.core.netdev_budget", "42"]),
        ("lines", "300\n301\n", &["get", "net.core.netdev_budget"]),
        ("silent", "<silent>", &["show"]),
        ("endless", "<endless>", &["show"]),
    ] {
        let dir = serve(tag, answer);
        let args = [&["ctl", "--pid", &pid][..], req].concat();
        let t = std::time::Instant::now();
        let o = rxpath_bounded_env(&args, &[("XDG_RUNTIME_DIR", &dir)], 20);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{tag}: {:?} {err}", o.status);
        assert!(
            o.stdout.is_empty(),
            "{tag}: printed {:?}",
            String::from_utf8_lossy(&o.stdout)
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{tag}: {err}");
        assert!(err.starts_with("rxpath: error:"), "{tag}: {err}");
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "{tag}: took {:?}",
            t.elapsed()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
    let _ = std::fs::remove_dir_all(&good);
}

/// `rxpath ARGS` as nobody (uid 65534) with capabilities `caps` (setpriv's
/// `+a,+b` form; "" for none) inherited and ambient, in a network
/// namespace of its own with a veth pair rxv0/rxv1, its control socket
/// in a directory nobody may write.
fn rxpath_as_nobody(caps: &str, args: &[&str]) -> std::process::Output {
    rxpath_as_nobody_under(&[], caps, args)
}

/// [`rxpath_as_nobody`] with `wrap` (`prlimit ...`) around setpriv.
fn rxpath_as_nobody_under(wrap: &[&str], caps: &str, args: &[&str]) -> std::process::Output {
    let dir = std::env::temp_dir().join(format!("rxpath-nobody-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let caps = if caps.is_empty() { "-all" } else { caps };
    let o = Command::new("unshare")
        .args([
            "-n",
            "sh",
            "-c",
            "ip link set lo up && ip link add rxv0 type veth peer name rxv1 && \
             ip link set rxv0 up && ip link set rxv1 up && exec \"$0\" \"$@\"",
        ])
        .args(wrap)
        .args([
            "setpriv",
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
        ])
        .args(["--inh-caps", caps, "--ambient-caps", caps])
        .arg(env!("CARGO_BIN_EXE_rxpath"))
        .args(args)
        .env("XDG_RUNTIME_DIR", &dir)
        .output()
        .expect("unshare setpriv rxpath");
    let _ = std::fs::remove_dir_all(&dir);
    o
}

/// The capabilities decide, not the uid: nobody with CAP_NET_ADMIN,
/// CAP_NET_RAW, CAP_BPF and CAP_IPC_LOCK runs on an interface (it was
/// refused for not being root, with advice to setcap that could not
/// help); without them the error names the missing ones. exec's program
/// opens the interface, so exec asks that they reach it (ambient).
#[test]
fn capabilities_not_the_uid_decide_and_the_missing_are_named() {
    const ALL: &str = "+net_admin,+net_raw,+bpf,+perfmon,+ipc_lock";
    let run = ["run", "--iface", "rxv0", "--queues", "1", "--duration", "1"];
    let o = rxpath_as_nobody(ALL, &[&run[..], &["--no-pin"]].concat());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "nobody with {ALL}: {err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("accounting: received"));

    // AF_PACKET needs CAP_NET_RAW alone (auto falls back to it); AF_XDP
    // more.
    let o = rxpath_as_nobody("+net_raw", &[&run[..], &["--mode", "xdp"]].concat());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("missing CAP_NET_ADMIN, CAP_BPF, CAP_PERFMON, CAP_IPC_LOCK"),
        "{err}"
    );
    assert!(err.contains("setcap"), "{err}");

    let mark = std::env::temp_dir().join(format!("rxpath-nobody-ran-{}", std::process::id()));
    let mark_s = mark.display().to_string();
    let o = rxpath_as_nobody("", &["exec", "--iface", "rxv0", "--", "touch", &mark_s]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("missing CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF, CAP_PERFMON, CAP_IPC_LOCK"),
        "{err}"
    );
    assert!(err.contains("--ambient-caps"), "{err}");
    assert!(!mark.exists(), "exec started the program without them");

    let o = rxpath_as_nobody(ALL, &["exec", "--iface", "rxv0", "--", "true"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "exec as nobody with {ALL}: {err}");
}

/// AF_XDP takes CAP_PERFMON too: without it the verifier refuses the XDP
/// program's packet pointer arithmetic ("prohibited for !root"), so
/// nobody with CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF and CAP_IPC_LOCK got a
/// verifier dump (--mode xdp), or a fallback to AF_PACKET that said so in
/// as many lines (auto). Checked first, it is one line naming it.
#[test]
fn af_xdp_needs_cap_perfmon_and_says_so_in_one_line() {
    const FOUR: &str = "+net_admin,+net_raw,+bpf,+ipc_lock";
    let run = [
        "run",
        "--iface",
        "rxv0",
        "--queues",
        "1",
        "--duration",
        "1",
        "--no-pin",
    ];
    let o = rxpath_as_nobody(FOUR, &[&run[..], &["--mode", "xdp"]].concat());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("missing CAP_PERFMON"), "{err}");

    let o = rxpath_as_nobody(FOUR, &run);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "auto falls back to AF_PACKET: {err}");
    let warned: Vec<&str> = err.lines().filter(|l| l.contains("AF_PACKET")).collect();
    assert_eq!(warned.len(), 1, "{err}");
    assert!(warned[0].contains("missing CAP_PERFMON"), "{err}");
    assert!(!err.contains("verifier"), "{err}");

    let five = format!("{FOUR},+perfmon");
    let o = rxpath_as_nobody(&five, &[&run[..], &["--mode", "xdp"]].concat());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{five}: {err}");
}

/// A memlock limit too low for the rings, without CAP_IPC_LOCK: AF_XDP
/// and AF_PACKET each say the limit is the cause, what it is, and what
/// to raise (AF_PACKET said "Resource temporarily unavailable" alone).
#[test]
fn a_low_memlock_limit_is_named_with_its_value_and_the_fix() {
    const CAPS: &str = "+net_admin,+net_raw,+bpf,+perfmon";
    let low = ["prlimit", "--memlock=65536"];
    let run = [
        "run",
        "--iface",
        "rxv0",
        "--queues",
        "1",
        "--duration",
        "1",
        "--no-pin",
    ];
    let says = |l: &str| {
        l.contains("RLIMIT_MEMLOCK is 64 KiB")
            && l.contains("ulimit -l")
            && l.contains("CAP_IPC_LOCK")
    };
    for mode in ["xdp", "packet"] {
        let o = rxpath_as_nobody_under(&low, CAPS, &[&run[..], &["--mode", mode]].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{mode}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{mode}: {err}");
        assert!(err.starts_with("rxpath: error:"), "{mode}: {err}");
        assert!(says(&err), "{mode}: {err}");
    }
    // auto: AF_XDP's reason in the warning, AF_PACKET's in the error.
    let o = rxpath_as_nobody_under(&low, CAPS, &run);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let lines: Vec<&str> = err.trim_end().lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines[0].contains("AF_XDP") && says(lines[0]), "{err}");
    assert!(lines[1].contains("AF_PACKET") && says(lines[1]), "{err}");
}

/// A missing required argument is named: the error was "the following
/// required arguments were not provided:" and then nothing, clap's list
/// being on the lines the one-line error leaves out.
#[test]
fn a_missing_argument_is_named() {
    for (args, want) in [
        (
            &["exec", "--iface", "rxv0"][..],
            "a program to run is missing: rxpath exec --iface IF -- PROGRAM ARGS",
        ),
        (&["exec", "--", "true"], "--iface"),
        (&["ctl", "set", "gro_flush_timeout"], "<VALUE>"),
    ] {
        let o = rxpath(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: want {want}: {err}");
    }
}

/// A bad --threads is refused as --threads: it was "--workers 1000: must
/// be 1..=256", a flag the user never typed (the workers default to the
/// NAPI threads).
#[test]
fn a_bad_thread_count_is_refused_by_its_own_name() {
    for args in [
        &["run", "--threads", "1000"][..],
        &["run", "--threads", "1000", "--steer", "rps"],
        &["run", "--threads", "0"],
    ] {
        let o = rxpath(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains(&format!("--threads {}", args[2])),
            "{args:?}: {err}"
        );
        assert!(!err.contains("--workers"), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: the run started");
    }
}

/// One duration parser for every command: `echo --duration 1s` and
/// `quic --duration 500ms` were "invalid float literal" where `run`
/// takes them; a bad one is the same one-line error everywhere.
#[test]
fn every_command_takes_durations_as_run_does() {
    let t = std::time::Instant::now();
    let o = rxpath_in_netns_with_veth(&["echo", "--iface", "rxv0", "--duration", "1s"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "echo --duration 1s: {err}");
    assert!(t.elapsed() < std::time::Duration::from_secs(20));
    let o = rxpath_in_netns_with_veth(&[
        "quic",
        "--iface",
        "rxv0",
        "--socket",
        "kernel",
        "--port",
        "4433",
        "--duration",
        "500ms",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "quic --duration 500ms: {err}");
    for cmd in ["run", "echo", "quic"] {
        let o = rxpath(&[cmd, "--iface", "rxv0", "--duration", "soon"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{cmd}: {err}");
        assert!(
            err.contains("'soon' is not a duration (try 5, 5s, 500ms or 1m)"),
            "{cmd}: {err}"
        );
    }
}

/// A program under exec killed by a signal cannot remove its control
/// socket (the preload does at exit): exec removes its child's after it
/// is gone, so no dead pid's socket is left in the directory.
#[test]
fn exec_removes_the_control_socket_of_a_program_killed_by_a_signal() {
    let dir = std::env::temp_dir().join(format!("rxpath-exec-ctl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prog = "import os, socket\n\
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
                s.bind(('0.0.0.0', 5555))\n\
                os.kill(os.getpid(), 9)\n";
    let o = Command::new("unshare")
        .args([
            "-n",
            "-m",
            "sh",
            "-c",
            "mount -t sysfs sysfs /sys && ip link set lo up && \
             ip link add rxv0 type veth peer name rxv1 && ip addr add 198.18.0.1/24 dev rxv0 && \
             ip link set rxv0 up && ip link set rxv1 up && exec \"$0\" \"$@\"",
        ])
        .arg(env!("CARGO_BIN_EXE_rxpath"))
        .args(["exec", "--iface", "rxv0", "--", "python3", "-c", prog])
        .env("XDG_RUNTIME_DIR", &dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(o.status.code(), Some(128 + 9), "{err}");
    assert!(
        err.contains("live knobs"),
        "the program served a socket: {err}"
    );
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A setuid program runs without `LD_PRELOAD` (the dynamic linker's
/// secure-execution mode): exec says its sockets stay the kernel's
/// instead of leaving it there silently.
#[test]
fn exec_says_a_setuid_program_is_not_reached() {
    if !rxpath_testkit::can_run(&[rxpath_testkit::Need::Root]) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("rxpath-suid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prog = dir.join("true");
    std::fs::copy("/bin/true", &prog).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let p = prog.display().to_string();
    let o = rxpath_in_netns_with_veth(&["exec", "--iface", "rxv0", "--", &p]);
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("is setuid"), "{err}");
    assert!(err.contains("stay the kernel's"), "{err}");
}

/// Held by the tests whose bench answers through the kernel's own sockets
/// on a lab: every lab puts the same address on its host end, so two up
/// at once leave the kernel's replies to the route of one of them.
static KERNEL_LAB: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `rxpath bench tcp`, short (root: a veth lab, XDP): every receiver of
/// seed 004's experiment measured in its round, a bulk flow's data and
/// the ACKs it drew counted, the ratios in the JSON.
#[test]
fn bench_tcp_measures_every_receiver() {
    if !rxpath_testkit::can_run(&[rxpath_testkit::Need::Root]) {
        return;
    }
    let _lab = KERNEL_LAB.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("rxpath-btcp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let o = rxpath(&[
        "bench",
        "--report",
        dir.to_str().unwrap(),
        "tcp",
        "--duration",
        "1s",
        "--rounds",
        "1",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report_file(&dir, "tcp", "json")).unwrap())
            .unwrap();
    let receivers = j["receivers"].as_array().expect("receivers");
    assert_eq!(receivers.len(), 4, "{j}");
    for r in receivers {
        let m = &r["rounds"][0];
        assert!(m["gbit_s"].as_f64().unwrap_or(0.0) > 0.0, "{r}\n{out}");
        assert!(m["acks_s"].as_f64().unwrap_or(0.0) > 0.0, "{r}");
    }
    assert!(j["acks_ratio_rxpath"].as_f64().is_some(), "{j}");
    assert!(j["acks_ratio_kernel"].as_f64().is_some(), "{j}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `rxpath bench tcp-apps`, short (root, Debian's redis-server and
/// redis-tools): redis on the kernel and under exec (sleeping, busy
/// polling) answers `redis-benchmark`'s GETs and its new connections in
/// the round, exec's accounting holding (the bench fails a run where it
/// does not), and every target judged in the JSON.
#[test]
fn bench_tcp_apps_measures_redis_on_every_path() {
    use rxpath_testkit::Need;
    let needs = [
        Need::Root,
        Need::Tool("redis-server"),
        Need::Tool("redis-benchmark"),
    ];
    if !rxpath_testkit::can_run(&needs) {
        return;
    }
    let _lab = KERNEL_LAB.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("rxpath-btap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let o = rxpath(&[
        "bench",
        "--report",
        dir.to_str().unwrap(),
        "tcp-apps",
        "--apps",
        "redis,accepts",
        "--rounds",
        "1",
        "--requests",
        "5000",
        "--accepts",
        "2000",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let j: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(report_file(&dir, "tcp-apps", "json")).unwrap(),
    )
    .unwrap();
    let configs = j["configs"].as_array().expect("configs");
    let keys: Vec<&str> = configs
        .iter()
        .filter_map(|c| c["config"].as_str())
        .collect();
    assert_eq!(
        keys,
        [
            "redis-kernel",
            "redis-exec",
            "redis-exec-busy",
            "accepts-kernel",
            "accepts-exec"
        ],
        "{j}"
    );
    for c in configs {
        let m = &c["rounds"][0];
        assert!(m["rate"].as_f64().unwrap_or(0.0) > 0.0, "{c}\n{out}");
        assert!(m["server_cpu"].as_f64().unwrap_or(0.0) > 0.0, "{c}");
    }
    let targets = j["targets"].as_array().expect("targets");
    assert_eq!(targets.len(), 3, "{j}");
    assert!(targets.iter().all(|t| t["met"].is_boolean()), "{j}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `rxpath bench rfs --tcp`, short (root, two cores, sockperf): seed 002
/// on TCP flows. Every server answers on both placements of the flow, and
/// rxpath's RFS processes every segment on the reader's worker, the flow
/// hashed there or not (the reads of `echo --tcp` record the reader's
/// CPU); its RPS row puts the flow where its hash says (on the reader's
/// worker for the placement hashed there, off it for the others). The
/// p99 target is the bench's to judge, not a test's.
#[test]
fn bench_rfs_tcp_steers_every_segment_to_the_reader() {
    use rxpath_testkit::Need;
    if !rxpath_testkit::can_run(&[Need::Root, Need::Cores(2), Need::Tool("sockperf")]) {
        return;
    }
    let _lab = KERNEL_LAB.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("rxpath-brfs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let o = rxpath(&[
        "bench",
        "--report",
        dir.to_str().unwrap(),
        "rfs",
        "--tcp",
        "--duration",
        "1s",
        "--rounds",
        "1",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    let j: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(report_file(&dir, "rfs-tcp", "json")).unwrap(),
    )
    .unwrap_or_else(|e| panic!("{e}\n{out}\n{}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!(j["protocol"], "tcp", "{j}");
    let servers = j["servers"].as_array().expect("servers");
    assert_eq!(servers.len(), 4, "{j}");
    for s in servers {
        for cell in s["rounds"][0].as_array().expect("a round") {
            assert!(
                cell["round_trips_per_s"].as_f64().unwrap_or(0.0) > 0.0,
                "{}: no answer on a placement\n{out}",
                s["name"]
            );
        }
    }
    let share = |i: usize| servers[i]["on_reader_share"].as_f64().unwrap_or(-1.0);
    assert!(
        share(1) >= 0.99,
        "RFS on the reader's worker: {}\n{out}",
        share(1)
    );
    // RPS puts each placement's segments where the flow's hash says: all
    // on the reader's worker for the port hashed there, none for the
    // others (per placement: they run at different rates, so their
    // pooled share says nothing).
    let reader = j["reader_cpu"].as_u64().expect("reader_cpu") as usize;
    for cell in servers[0]["rounds"][0].as_array().expect("a round") {
        let processed: Vec<u64> = cell["processed_per_worker"]
            .as_array()
            .expect("RPS counts per worker")
            .iter()
            .map(|x| x.as_u64().unwrap_or(0))
            .collect();
        let all = processed.iter().sum::<u64>();
        assert!(all > 0, "RPS counted nothing: {cell}\n{out}");
        let share = processed.get(reader).copied().unwrap_or(0) as f64 / all as f64;
        let hashed_to_reader = cell["rps_worker"].as_u64() == Some(reader as u64);
        assert!(
            if hashed_to_reader {
                share >= 0.95
            } else {
                share <= 0.05
            },
            "RPS, the flow hashed to worker {}: {share} on the reader's\n{out}",
            cell["rps_worker"]
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
