//! packetdrill's TCP suites against rxpath's TCP: every script, every
//! address family, in virtual time, through `librxpath_drill.so`. The
//! verdicts must be the ones recorded in `packetdrill-verdicts.txt`
//! (docs/RELIABILITY.md sets them beside the kernel's): a script that
//! starts failing is a regression, one that starts passing must be
//! recorded.
//!
//! Needs root (each run has its own network namespace), packetdrill on
//! `PATH` (CI builds it from `../shared/tools/packetdrill`), and the
//! tools the scripts call.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use rxpath_testkit::{can_run, Need};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The shared object cargo built for this test: in `deps/` beside the
/// test binary (a `cargo test` build), or one up (`cargo build`).
fn shared_object() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("target/<profile>/deps");
    [
        deps.to_path_buf(),
        deps.parent().expect("target/<profile>").to_path_buf(),
    ]
    .into_iter()
    .map(|d| d.join("librxpath_drill.so"))
    .find(|p| p.is_file())
    .unwrap_or_else(|| panic!("librxpath_drill.so not built near {}", exe.display()))
}

fn which(tool: &str) -> PathBuf {
    let path = std::env::var_os("PATH").expect("PATH");
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|f| f.is_file())
        .unwrap_or_else(|| panic!("{tool} on PATH"))
}

fn verdicts(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (script, verdict) = l.split_once(' ').expect("`suite/script verdict`");
            (script.to_string(), verdict.trim().to_string())
        })
        .collect()
}

const NEEDS: [Need; 7] = [
    Need::Root,
    Need::Tool("packetdrill"),
    Need::Tool("unshare"),
    Need::Tool("python3"),
    Need::Tool("ip"),
    Need::Tool("ethtool"),
    Need::Tool("tc"),
];

/// Run `scripts/packetdrill-suites.sh` with `args`; the verdict of each
/// script it ran.
fn run_suites(args: &[OsString], out: &Path) -> BTreeMap<String, String> {
    // One run at a time: the kernel's runs keep real time.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let status = Command::new(repo().join("scripts/packetdrill-suites.sh"))
        .args(args)
        .arg("--out")
        .arg(out)
        .status()
        .expect("scripts/packetdrill-suites.sh runs");
    assert!(status.success(), "the suite runner failed to run: {status}");
    let mut got = BTreeMap::new();
    for line in std::fs::read_to_string(out)
        .expect("the runner's JSON")
        .lines()
    {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        let key = format!(
            "{}/{}",
            v["suite"].as_str().unwrap(),
            v["script"].as_str().unwrap()
        );
        got.insert(key, v["verdict"].as_str().unwrap().to_string());
    }
    got
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

/// rxpath's own scripts for the state machine's corners (a lost SYN-ACK,
/// resets in SYN_SENT, SYN_RECV, CLOSE_WAIT and after close, a zero
/// window, a peer that vanishes, keepalive, ICMP errors and path MTU,
/// ECN agreed, echoed and answered, and its SYN fallback):
/// each passes on the kernel, the oracle
/// of what goes on the wire, and under rxpath, in every family.
#[test]
fn corner_scripts_pass_on_the_kernel_and_under_rxpath() {
    if !can_run(&NEEDS) {
        return;
    }
    let pkt = repo().join("crates/rxpath-drill/tests/pkt");
    let scripts = std::fs::read_dir(pkt.join("corners"))
        .expect("the corner scripts")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "pkt"))
        })
        .count();
    assert!(scripts >= 14, "the corner scripts are there");
    let runs = [
        (
            "rxpath",
            vec![OsString::from("--so"), shared_object().into()],
        ),
        ("kernel", os(&["--route-cc", "cubic"])),
    ];
    for (who, mut args) in runs {
        args.extend([OsString::from("--scripts"), pkt.clone().into()]);
        // The kernel keeps real time: a run that missed by a tick runs again.
        args.extend(os(&[
            "--suites",
            "corners",
            "--retries",
            "3",
            "--timeout",
            "60",
        ]));
        let out = repo().join(format!("target/packetdrill-corners-{who}.json"));
        let got = run_suites(&args, &out);
        assert_eq!(
            got.len(),
            scripts,
            "{who}: every corner script ran ({})",
            out.display()
        );
        let failed: Vec<_> = got
            .iter()
            .filter(|(_, v)| *v != "pass")
            .map(|(k, _)| k.as_str())
            .collect();
        assert!(
            failed.is_empty(),
            "{who} fails {failed:?} (details in {})",
            out.display()
        );
    }
}

#[test]
fn packetdrill_suites_give_the_recorded_verdicts() {
    if !can_run(&NEEDS) {
        return;
    }
    let pd = std::fs::canonicalize(which("packetdrill")).expect("packetdrill's path");
    // The build's layout: <net>/packetdrill/packetdrill beside <net>/tcp.
    let scripts = pd
        .parent()
        .and_then(|d| d.parent())
        .expect("the build's net/")
        .join("tcp");
    assert!(
        scripts.is_dir(),
        "packetdrill's scripts at {}",
        scripts.display()
    );
    let out = repo().join("target/packetdrill-rxpath.json");
    let mut args = vec![
        OsString::from("--so"),
        shared_object().into(),
        "--packetdrill".into(),
        pd.into(),
        "--scripts".into(),
        scripts.into(),
    ];
    args.extend(os(&["--retries", "0", "--timeout", "60"]));
    let mut got = run_suites(&args, &out);
    // Fast Open's client and server (both options) suites, ECN's and the
    // congestion window's moderation (ECN's CWR) beside the 18 (rxpath only: the
    // kernel's verdicts on them are result files, not a CI run).
    args.extend(os(&[
        "--suites",
        "fastopen/client fastopen/server fastopen/server/opt34 ecn cwnd_moderation",
    ]));
    got.extend(run_suites(
        &args,
        &repo().join("target/packetdrill-rxpath-beside.json"),
    ));
    let want = verdicts(include_str!("packetdrill-verdicts.txt"));
    let mut diff = Vec::new();
    for (script, w) in &want {
        match got.get(script) {
            Some(g) if g == w => {}
            Some(g) => diff.push(format!("{script}: recorded {w}, now {g}")),
            None => diff.push(format!("{script}: recorded {w}, not run")),
        }
    }
    for script in got.keys().filter(|s| !want.contains_key(*s)) {
        diff.push(format!("{script}: ran, not recorded"));
    }
    let passed = got.values().filter(|v| *v == "pass").count();
    eprintln!(
        "packetdrill under rxpath: {passed} of {} scripts pass",
        got.len()
    );
    assert!(
        diff.is_empty(),
        "verdicts differ from packetdrill-verdicts.txt (details in {}):\n{}",
        out.display(),
        diff.join("\n")
    );
}
