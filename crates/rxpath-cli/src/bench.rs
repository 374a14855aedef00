//! `rxpath bench`: experiments that print ratios measured in one run.

use crate::opts::{BenchCmd, RxdropArgs};
use anyhow::{Context, Result};
use rxpath_core::napi::BundleMode;
use rxpath_dev::sim::{Mix, SimConfig, TrafficConfig};
use rxpath_runtime::{Producer, RunConfig, StackKind};
use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

pub fn bench(a: crate::opts::BenchArgs) -> Result<ExitCode> {
    stop_cleanly_on_signals("bench")?;
    let code = match a.cmd {
        BenchCmd::Rxdrop(a) => rxdrop(a),
        BenchCmd::Gro(a) => crate::bench_gro::gro(a),
        BenchCmd::RxIface(a) => crate::bench_iface::rx_iface(a),
        BenchCmd::Rr(a) => crate::bench_rr::rr(a),
        BenchCmd::Filter(a) => crate::bench_filter::filter(a),
        BenchCmd::Steer(a) => crate::bench_steer::steer(a),
        BenchCmd::Rfs(a) => crate::bench_rfs::rfs(a),
    }?;
    let missing = std::mem::take(&mut *UNMEASURED.lock().unwrap_or_else(|e| e.into_inner()));
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
fn range(v: &[f64]) -> String {
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

fn rxdrop(a: RxdropArgs) -> Result<ExitCode> {
    let d = a.duration;
    let cold: [(&str, usize, bool); 4] = [
        ("bundle 1 (per packet)", 1, false),
        ("bundle 16", 16, false),
        ("bundle 64", 64, false),
        ("bundle 16, split on hash", 16, true),
    ];
    println!("rxpath bench rxdrop: lowest RX level (pull, parse Ethernet/IP/L4, drop), 60-byte UDP, 64 flows, 1 queue, weight 64, polling mode");
    println!(
        "{} round(s) of {:.1}s per configuration, median kept",
        a.rounds,
        d.as_secs_f64()
    );
    let mut cold_pps: Vec<Vec<f64>> = vec![Vec::new(); cold.len()];
    let mut missed: Vec<u64> = vec![0; cold.len()];
    let mut null_pps = Vec::new();
    let mut dpdk_pps = Vec::new();
    let mut dpdk_err = if a.no_dpdk {
        Some("skipped (--no-dpdk)".to_string())
    } else {
        None
    };
    for round in 0..a.rounds {
        for (i, &(_, b, split)) in cold.iter().enumerate() {
            let (pps, r) = measure(&rxdrop_config(b, split, Producer::Thread { pps: None }, d))?;
            cold_pps[i].push(pps);
            missed[i] += r.device_total().rx_missed;
        }
        let (pps, _) = measure(&rxdrop_config(16, false, Producer::Null, d))?;
        null_pps.push(pps);
        // DPDK in the same round, so that both see the same machine.
        if dpdk_err.is_none() {
            match dpdk_null_rxonly(d) {
                Ok(p) => dpdk_pps.push(p),
                Err(e) => dpdk_err = Some(format!("{e:#}")),
            }
        }
        eprintln!("round {} done", round + 1);
    }
    let cold_med: Vec<f64> = cold_pps.iter().map(|v| median(v.clone())).collect();
    // Ratios are taken within each round (both sides saw the same machine)
    // and then the median over rounds is kept.
    let ratio = |a: &[f64], b: &[f64]| median(a.iter().zip(b).map(|(x, y)| x / y).collect());
    let cold_ratio: Vec<f64> = cold_pps.iter().map(|v| ratio(v, &cold_pps[0])).collect();
    println!("\n## Cold data (producer thread on the other core writes every frame)\n");
    println!("| configuration | Mpps (median) | range | vs bundle 1 (median of per-round ratios) | NIC drops, all rounds (rx_missed) |");
    println!("|---|---:|---:|---:|---:|");
    for (i, (name, _, _)) in cold.iter().enumerate() {
        println!(
            "| {name} | {:.2} | {} | {:.2}x | {} |",
            cold_med[i] / 1e6,
            range(&cold_pps[i]),
            cold_ratio[i],
            missed[i]
        );
    }
    let null_med = median(null_pps.clone());
    println!("\n## Null mode (engine alone, same thread; frames written once)\n");
    println!("| engine | Mpps (median) | range | vs DPDK (median of per-round ratios) |");
    println!("|---|---:|---:|---:|");
    let dpdk = match dpdk_err {
        None if !dpdk_pps.is_empty() => Ok(median(dpdk_pps.clone())),
        None => Err(anyhow::anyhow!("no samples")),
        Some(e) => Err(anyhow::anyhow!(e)),
    };
    match &dpdk {
        Ok(dpdk_med) => {
            println!(
                "| rxpath null, bundle 16, parse + drop | {:.2} | {} | {:.2}x |",
                null_med / 1e6,
                range(&null_pps),
                ratio(&null_pps, &dpdk_pps)
            );
            println!(
                "| dpdk-testpmd net_null rxonly (no parse) | {:.2} | {} | 1.00x |",
                dpdk_med / 1e6,
                range(&dpdk_pps)
            );
        }
        Err(e) => {
            println!(
                "| rxpath null, bundle 16, parse + drop | {:.2} | {} | n/a |",
                null_med / 1e6,
                range(&null_pps)
            );
            println!("| dpdk-testpmd net_null rxonly | not measured: {e} | | |");
            if !a.no_dpdk {
                peer_not_measured("dpdk-testpmd net_null rxonly", &e.to_string());
            }
        }
    }
    if a.json {
        let j = serde_json::json!({
            "cold_mpps": cold.iter().zip(&cold_med).map(|((n, _, _), v)| (n.to_string(), v / 1e6)).collect::<std::collections::BTreeMap<_, _>>(),
            "ratio_bundle16_vs_1": cold_ratio[1],
            "ratio_bundle64_vs_1": cold_ratio[2],
            "ratio_null_vs_dpdk": dpdk.as_ref().ok().map(|_| ratio(&null_pps, &dpdk_pps)),
            "null_mpps": null_med / 1e6,
            "null_mpps_rounds": null_pps.iter().map(|v| v / 1e6).collect::<Vec<_>>(),
            "dpdk_null_mpps_rounds": dpdk_pps.iter().map(|v| v / 1e6).collect::<Vec<_>>(),
            "dpdk_null_mpps": dpdk.as_ref().ok().map(|v| v / 1e6),
        });
        println!("\n{}", serde_json::to_string_pretty(&j)?);
    }
    Ok(ExitCode::SUCCESS)
}

/// Run `dpdk-testpmd` with the net_null PMD in rxonly mode for `d` and
/// return its mean Rx-pps (the first, warm-up sample is skipped).
fn dpdk_null_rxonly(d: Duration) -> Result<f64> {
    let bin = which("dpdk-testpmd")
        .context("dpdk-testpmd not installed (apt-get install dpdk dpdk-dev librte-net-null23)")?;
    let mut cmd = Command::new(bin);
    cmd.args([
        "--no-huge",
        "-m",
        "1024",
        "--no-pci",
        "--vdev",
        "net_null0",
        "-l",
        "0-1",
        "--log-level=error",
        "--",
        "--forward-mode=rxonly",
        "--total-num-mbufs=16384",
        "--stats-period",
        "1",
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    let mut child = spawn_unpinned(cmd).context("starting dpdk-testpmd")?;
    let stdout = child.stdout.take().context("testpmd stdout")?;
    let start = Instant::now();
    let mut samples = Vec::new();
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    while start.elapsed() < d + Duration::from_secs(2) {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        if let Some(rest) = line.trim().strip_prefix("Rx-pps:") {
            if let Some(v) = rest
                .split_whitespace()
                .next()
                .and_then(|x| x.parse::<f64>().ok())
            {
                samples.push(v);
            }
        }
    }
    drop(child.stdin.take()); // testpmd exits on EOF at its "Press enter" prompt
    let _ = child.kill();
    let _ = child.wait();
    let useful: Vec<f64> = samples
        .iter()
        .skip(1)
        .copied()
        .filter(|v| *v > 0.0)
        .collect();
    anyhow::ensure!(!useful.is_empty(), "dpdk-testpmd printed no Rx-pps samples");
    Ok(useful.iter().sum::<f64>() / useful.len() as f64)
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

pub(crate) fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join(name))
        .find(|p| p.is_file())
}
