//! `rxpath bench`: experiments that print ratios measured in one run.

use crate::opts::BenchCmd;
use anyhow::{Context, Result};
use rxpath_core::napi::BundleMode;
use rxpath_dev::sim::{Mix, SimConfig, TrafficConfig};
use rxpath_runtime::{Producer, RunConfig, StackKind};
use std::process::{Command, ExitCode};
use std::time::Duration;

pub(crate) mod filter;
pub(crate) mod gro;
pub(crate) mod iface;
pub(crate) mod plot;
pub(crate) mod quic;
pub(crate) mod rfs;
pub(crate) mod rr;
mod rxdrop;
pub(crate) mod steer;

pub fn bench(a: crate::opts::BenchArgs) -> Result<ExitCode> {
    stop_cleanly_on_signals("bench")?;
    let mut rep = plot::ReportDir::open(a.report.as_deref())?;
    let code = match a.cmd {
        BenchCmd::Rxdrop(a) => rxdrop::rxdrop(a, &mut rep),
        BenchCmd::Gro(a) => gro::gro(a, &mut rep),
        BenchCmd::RxIface(a) => iface::rx_iface(a, &mut rep),
        BenchCmd::Rr(a) => rr::rr(a, &mut rep),
        BenchCmd::Filter(a) => filter::filter(a, &mut rep),
        BenchCmd::Steer(a) => steer::steer(a, &mut rep),
        BenchCmd::Rfs(a) => rfs::rfs(a, &mut rep),
        BenchCmd::Quic(a) => quic::quic(a, &mut rep),
    }?;
    let missing = std::mem::take(&mut *UNMEASURED.lock().unwrap_or_else(|e| e.into_inner()));
    if let Some(mut r) = rep {
        // Beside the bench's own files: which peers it could not measure.
        r.json("peers-not-measured", &serde_json::json!(missing))?;
        r.finish();
    }
    if missing.is_empty() {
        return Ok(code);
    }
    eprintln!(
        "\nrxpath bench: {} peer(s) NOT MEASURED (their ratios are missing above):",
        missing.len()
    );
    for m in &missing {
        eprintln!("  {m}");
    }
    if a.require_peers {
        eprintln!("rxpath bench: --require-peers: failing");
        return Ok(ExitCode::from(3));
    }
    Ok(code)
}

static UNMEASURED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// SIGINT and SIGTERM stop a bench at once and cleanly: the processes it
/// started (peers, generators: every descendant) are killed, the
/// namespaces and veth pairs it made are removed, and it exits with 128 +
/// the signal (130, 143). XDP programs go with the process (BPF links).
pub(crate) fn stop_cleanly_on_signals(what: &'static str) -> Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .context("installing the SIGINT/SIGTERM handler")?;
    std::thread::Builder::new()
        .name("rxpath-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
                eprintln!("\nrxpath {what}: {name}: stopping, removing what it made");
                let killed = kill_descendants();
                let gone = rxpath_runtime::lab::cleanup_all();
                eprintln!(
                    "rxpath {what}: {killed} process(es) stopped, {} removed; no results (exit {})",
                    if gone.is_empty() {
                        "no namespace".to_string()
                    } else {
                        gone.join(", ")
                    },
                    128 + sig
                );
                std::process::exit(128 + sig);
            }
        })
        .context("starting the signal thread")?;
    Ok(())
}

/// Kill every descendant of this process (children first found, then
/// theirs), from `/proc`. Returns how many.
fn kill_descendants() -> usize {
    let me = std::process::id();
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // pid (comm) state ppid ...: comm may hold spaces and parens.
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut tree = vec![me];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parents.iter().filter(|&&(_, pp)| pp == p).map(|&(c, _)| c));
        i += 1;
    }
    let kids: Vec<String> = tree[1..].iter().map(|p| p.to_string()).collect();
    if !kids.is_empty() {
        let mut args = vec!["-KILL"];
        args.extend(kids.iter().map(|s| s.as_str()));
        let _ = rxpath_runtime::lab::sh("kill", &args);
    }
    kids.len()
}

/// A peer the bench meant to run could not be measured: say so at once,
/// loudly, and again at the end (where `--require-peers` fails the run).
/// Skips the user asked for (`--no-dpdk`) are not reported here.
pub(crate) fn peer_not_measured(peer: &str, why: &str) {
    eprintln!("rxpath bench: PEER NOT MEASURED: {peer}: {why}");
    UNMEASURED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(format!("{peer}: {why}"));
}

/// The median (the mean of the middle two for an even count; 0 if empty).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => 0.0,
        n if n % 2 == 0 => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        n => v[n / 2],
    }
}

/// "min–max" of a sample in Mpps.
pub(crate) fn range(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    format!("{:.1}–{:.1}", lo / 1e6, hi / 1e6)
}

pub(crate) fn rxdrop_config(
    bundle: usize,
    split: bool,
    producer: Producer,
    duration: Duration,
) -> RunConfig {
    RunConfig {
        sim: SimConfig {
            queues: 1,
            ring_size: 1024,
            frames_per_queue: 4096,
            ..SimConfig::default()
        },
        traffic: TrafficConfig {
            flows: 64,
            mix: Mix::Udp,
            udp_frame: 60,
            ..TrafficConfig::default()
        },
        bundle: BundleMode {
            size: bundle,
            split_on_hash: split,
        },
        interrupts: false,
        producer,
        stack: StackKind::Rxdrop,
        threads: 1,
        duration,
        tick: duration * 2,
        pin: true,
        ..RunConfig::default()
    }
}

pub(crate) fn measure(cfg: &RunConfig) -> Result<(f64, rxpath_runtime::Report)> {
    let r = rxpath_runtime::run(cfg, |_| {})?;
    anyhow::ensure!(
        r.consistent(),
        "accounting failed in benchmark run: {}",
        crate::report::summary(&r)
    );
    Ok((r.rx_pps(), r))
}

/// Start a peer from a thread that may run on every CPU: a child inherits
/// the affinity of the thread that forks it, and a bench thread is often
/// pinned to one core (testpmd's forwarding lcore then never ran).
pub(crate) fn spawn_unpinned(mut cmd: Command) -> std::io::Result<std::process::Child> {
    std::thread::spawn(move || {
        rxpath_dev::sys::sched::unpin_current()?;
        cmd.spawn()
    })
    .join()
    .unwrap_or_else(|_| Err(std::io::Error::other("spawning thread panicked")))
}

/// Start `dpdk-testpmd` in rxonly mode on `vdev` (no hugepages, both CPUs,
/// counters once a second), from a thread allowed on every CPU; stdin and
/// stdout piped (testpmd exits on EOF at its "Press enter" prompt).
/// `package` names what to install when it is missing.
pub(crate) fn testpmd_rxonly(vdev: &str, package: &str) -> Result<std::process::Child> {
    let bin = which("dpdk-testpmd")
        .with_context(|| format!("dpdk-testpmd not installed (apt-get install {package})"))?;
    let mut cmd = Command::new(bin);
    cmd.args(["--no-huge", "-m", "1024", "--no-pci", "-l", "0-1"])
        .args(["--log-level=error", "--vdev", vdev, "--"])
        .args(["--forward-mode=rxonly", "--total-num-mbufs=16384"])
        .args(["--stats-period", "1"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    spawn_unpinned(cmd).context("starting dpdk-testpmd")
}

/// The number after `field` (e.g. `Rx-pps:`) on a line of testpmd's stats.
pub(crate) fn testpmd_field<T: std::str::FromStr>(line: &str, field: &str) -> Option<T> {
    line.trim()
        .strip_prefix(field)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

pub(crate) fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join(name))
        .find(|p| p.is_file())
}
