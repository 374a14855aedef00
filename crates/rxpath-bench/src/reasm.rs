//! `rxpath bench reasm`: IP reassembly against DPDK's `librte_ip_frag`.
//!
//! One capture of IPv4 UDP datagrams, each cut as the kernel cuts it for a
//! 1500-byte link into `--fragments` pieces (4 by default; a DPDK build
//! reassembles 4 to 8 pieces at most), replayed from memory without pause
//! into one queue:
//!
//! - rxpath: the simulated NIC replays it (`--pcap`, a producer thread
//!   writing the ring, as a NIC's DMA would), one NAPI thread polling:
//!   IP input, `ip_defrag` (a chain of the fragments' frames), UDP
//!   delivery to the sink; the UDP checksum verified over the whole
//!   datagram (`--csum auto`, rxpath's default) and not verified
//!   (`--csum trust`, what `librte_ip_frag` does).
//! - DPDK: `peers/reasm_dpdk.c`, built here against `libdpdk`
//!   (`dpdk-dev`): DPDK's pcap driver replays the capture from memory
//!   (`infinite_rx=1`: `rte_eth_rx_burst` copies each packet into a fresh
//!   mbuf) on one lcore and hands the bursts over an `rte_ring` to
//!   another, which runs `rte_ipv4_frag_reassemble_packet` per fragment
//!   and frees every datagram: the same split as rxpath's producer and
//!   NAPI thread.
//!
//! Figure: datagrams reassembled per second on one core, per round, the
//! modes in turn; ratios within a round, medians over rounds.

use crate::figure::{finite, in_turn, ratio, ratio_cell};
use crate::harness::{measure, median, peer_not_measured};
use crate::plot::ReportDir;
use anyhow::{Context, Result};
use rxpath_core::ip::CsumPolicy;
use rxpath_dev::sim::SimConfig;
use rxpath_runtime::{Producer, RunConfig, StackKind};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

/// The DPDK peer's source, built when the bench runs.
const PEER_SOURCE: &str = include_str!("../peers/reasm_dpdk.c");

/// Arguments of this bench.
#[derive(Debug, Clone, clap::Args)]
pub struct ReasmArgs {
    /// Time per measurement.
    #[arg(long, default_value = "2s", value_parser = rxpath_cli::parse::parse_duration)]
    pub duration: Duration,
    /// Rounds (each measures every mode once; medians are compared).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Fragments a datagram is cut into (2 to 8).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(2..=8))]
    pub fragments: u32,
    /// Datagrams in the capture (each its own IPv4 id, 1 to 65535),
    /// replayed in a loop.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=65535))]
    pub datagrams: u32,
    /// Skip DPDK even if installed.
    #[arg(long)]
    pub no_dpdk: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Verify,
    Trust,
    Dpdk,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Verify => "rxpath, UDP checksum verified",
            Mode::Trust => "rxpath, checksum not verified",
            Mode::Dpdk => "DPDK librte_ip_frag (net_pcap)",
        }
    }
}

/// One measurement: datagrams reassembled per second, fragments per
/// second, and what did not reassemble.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
struct Rate {
    datagrams_per_s: f64,
    fragments_per_s: f64,
    failed: u64,
    /// DPDK: ns per datagram of the reassembling lcore's busy time
    /// (reassembly and frees; its idle turns on an empty ring left out).
    reasm_ns_per_datagram: Option<f64>,
    /// The share of the reassembling thread's time it was busy (DPDK), or
    /// of its NAPI polls that used their whole budget (rxpath): near 1,
    /// it is the limit; well below, the core writing the frames is.
    busy: f64,
}

pub(super) fn reasm(a: ReasmArgs, rep: &mut Option<ReportDir>) -> Result<ExitCode> {
    let dir = std::env::temp_dir().join(format!("rxpath-bench-reasm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let r = run(&a, &dir, rep);
    let _ = std::fs::remove_dir_all(&dir);
    r
}

fn run(a: &ReasmArgs, dir: &Path, rep: &mut Option<ReportDir>) -> Result<ExitCode> {
    let pcap = dir.join("fragments.pcap");
    let size = write_corpus(&pcap, a.datagrams, a.fragments)?;
    println!(
        "rxpath bench reasm: {} IPv4 UDP datagrams of {size} bytes, {} fragments each, replayed from memory into one queue; {:.1}s per measurement, {} round(s)",
        a.datagrams,
        a.fragments,
        a.duration.as_secs_f64(),
        a.rounds
    );
    let peer = if a.no_dpdk {
        Err("skipped (--no-dpdk)".to_string())
    } else {
        build_peer(dir).inspect_err(|e| peer_not_measured("DPDK librte_ip_frag", e))
    };
    let mut modes = vec![Mode::Verify, Mode::Trust];
    if peer.is_ok() {
        modes.push(Mode::Dpdk);
    }
    let mut rows: Vec<Vec<(Mode, Option<Rate>)>> = Vec::new();
    for round in 0..a.rounds {
        let mut row = Vec::new();
        for m in in_turn(&modes, round) {
            let r = match m {
                Mode::Dpdk => peer.as_ref().ok().and_then(|p| {
                    dpdk(p, &pcap, a)
                        .inspect_err(|e| peer_not_measured("DPDK librte_ip_frag", &e.to_string()))
                        .ok()
                }),
                _ => Some(rxpath(&pcap, a, m)?),
            };
            match r {
                Some(r) => println!(
                    "  round {round}: {:<34} {:>10.0} datagrams/s  {:>10.0} fragments/s  failed {}  {} {:.0} %{}",
                    m.name(),
                    r.datagrams_per_s,
                    r.fragments_per_s,
                    r.failed,
                    if m == Mode::Dpdk { "busy" } else { "full polls" },
                    100.0 * r.busy,
                    r.reasm_ns_per_datagram
                        .map_or(String::new(), |ns| format!("  ({ns:.0} ns busy per datagram)"))
                ),
                None => println!("  round {round}: {:<34} not measured", m.name()),
            }
            row.push((m, r));
        }
        rows.push(row);
    }
    report(a, &rows, &peer, rep)
}

/// The figure of mode `m` in each round.
fn of(rows: &[Vec<(Mode, Option<Rate>)>], m: Mode) -> Vec<Option<f64>> {
    rows.iter()
        .map(|row| {
            row.iter()
                .find(|(x, _)| *x == m)
                .and_then(|(_, r)| r.map(|r| r.datagrams_per_s))
                .and_then(finite)
        })
        .collect()
}

/// The median over rounds of `m`'s figure over `base`'s, round by round.
fn median_ratio(rows: &[Vec<(Mode, Option<Rate>)>], m: Mode, base: Mode) -> Option<f64> {
    let r: Vec<f64> = of(rows, m)
        .into_iter()
        .zip(of(rows, base))
        .filter_map(|(a, b)| ratio(a, b))
        .collect();
    finite(median(r))
}

fn report(
    a: &ReasmArgs,
    rows: &[Vec<(Mode, Option<Rate>)>],
    peer: &Result<PathBuf, String>,
    rep: &mut Option<ReportDir>,
) -> Result<ExitCode> {
    println!("\nmedian over rounds                          datagrams/s  x DPDK");
    for m in [Mode::Verify, Mode::Trust, Mode::Dpdk] {
        let med = finite(median(of(rows, m).into_iter().flatten().collect()));
        let x = median_ratio(rows, m, Mode::Dpdk);
        let v = med.map_or("not measured".into(), |v| format!("{v:.0}"));
        println!("{:<40} {v:>14}  {}", m.name(), ratio_cell(x, 2));
    }
    let trust = median_ratio(rows, Mode::Trust, Mode::Dpdk);
    let verify = median_ratio(rows, Mode::Verify, Mode::Dpdk);
    // No target line: each side's figure is of a pipeline (a core that
    // writes the frames, a core that reassembles), and which core limits
    // it is printed beside it (full NAPI polls; DPDK's busy share).
    println!(
        "rxpath reassembly vs librte_ip_frag: {} checksum not verified, {} verified",
        ratio_cell(trust, 3),
        ratio_cell(verify, 3)
    );
    let rounds = |m: Mode| -> Vec<Option<Rate>> {
        rows.iter()
            .map(|row| row.iter().find(|(x, _)| *x == m).and_then(|(_, r)| *r))
            .collect()
    };
    let modes: Vec<serde_json::Value> = [Mode::Verify, Mode::Trust, Mode::Dpdk]
        .iter()
        .map(|&m| serde_json::json!({ "name": m.name(), "rounds": rounds(m) }))
        .collect();
    let j = serde_json::json!({
        "bench": "reasm",
        "fragments": a.fragments,
        "datagrams": a.datagrams,
        "duration_s": a.duration.as_secs_f64(),
        "rounds": a.rounds,
        "modes": modes,
        "ratio_verify_vs_dpdk": verify,
        "ratio_trust_vs_dpdk": trust,
        "dpdk_not_measured": peer.as_ref().err(),
    });
    if let Some(rep) = rep {
        rep.json("reasm", &j)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Write the capture: `n` datagrams from one sender to one port, each
/// with its own IP id, cut into `pieces` fragments of the kernel's sizes
/// for a 1500-byte link. Returns the UDP payload's size.
fn write_corpus(path: &Path, n: u32, pieces: u32) -> Result<usize> {
    use rxpath_wire::build;
    // The last piece carries 400 bytes of the IP payload.
    let size = (pieces as usize - 1) * 1480 + 400 - 8;
    let spec = build::Spec::new("198.18.0.2".parse()?, "198.18.0.1".parse()?, 40000, 9000);
    let mut frames = Vec::with_capacity((n * pieces) as usize);
    for id in 0..n {
        let payload: Vec<u8> = (0..size).map(|i| (i as u32 ^ id) as u8).collect();
        let whole = build::udp(&spec, &payload);
        let cut = build::mtu_pieces(8 + size, 1500, false);
        anyhow::ensure!(cut.len() == pieces as usize, "{} pieces", cut.len());
        frames.extend(build::fragments(&whole, &cut, id + 1));
    }
    rxpath_dev::pcap::Trace::save(path, &frames, Duration::from_micros(1))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(size)
}

/// rxpath on the capture: one queue, one NAPI thread polling.
fn rxpath(pcap: &Path, a: &ReasmArgs, m: Mode) -> Result<Rate> {
    let cfg = RunConfig {
        sim: SimConfig {
            queues: 1,
            ring_size: 1024,
            frames_per_queue: 4096,
            ..SimConfig::default()
        },
        producer: Producer::Pcap {
            path: pcap.to_path_buf(),
            loops: 0,
            paced: false,
            pps: None,
        },
        csum: if m == Mode::Trust {
            CsumPolicy::Trust
        } else {
            CsumPolicy::Auto
        },
        interrupts: false,
        stack: StackKind::Sink,
        threads: 1,
        duration: a.duration,
        tick: a.duration * 2,
        pin: true,
        ..RunConfig::default()
    };
    let (_, r) = measure(&cfg)?;
    let ip = r.napi_total().snmp.ip;
    let secs = r.elapsed.as_secs_f64();
    // Reassembled over the run, drain included: the share of the window.
    let window = r.received_in_window as f64 / ip.reasm_reqds.max(1) as f64;
    Ok(Rate {
        datagrams_per_s: ip.reasm_oks as f64 * window.min(1.0) / secs,
        fragments_per_s: r.rx_pps(),
        failed: ip.reasm_fails,
        reasm_ns_per_datagram: None,
        busy: r.queues.iter().map(|q| q.napi.polls_full).sum::<u64>() as f64
            / r.queues.iter().map(|q| q.napi.polls).sum::<u64>().max(1) as f64,
    })
}

/// Build the DPDK peer against `libdpdk`: its path, or why not.
fn build_peer(dir: &Path) -> Result<PathBuf, String> {
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "libdpdk"])
        .output()
        .map_err(|e| format!("pkg-config: {e} (apt-get install pkg-config dpdk-dev)"))?;
    if !flags.status.success() {
        return Err("libdpdk not found by pkg-config (apt-get install dpdk-dev)".into());
    }
    let src = dir.join("reasm_dpdk.c");
    let exe = dir.join("reasm_dpdk");
    std::fs::write(&src, PEER_SOURCE).map_err(|e| format!("{}: {e}", src.display()))?;
    let flags = String::from_utf8_lossy(&flags.stdout).to_string();
    let out = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(flags.split_whitespace())
        .output()
        .map_err(|e| format!("cc: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("building the peer failed: {}", err.trim()));
    }
    Ok(exe)
}

/// The DPDK peer on the capture: reassembly on CPU 0, the driver's copy
/// on CPU 1 (as rxpath's NAPI thread and producer), or both on CPU 0 on a
/// machine of one.
fn dpdk(exe: &Path, pcap: &Path, a: &ReasmArgs) -> Result<Rate> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let lcores = if cpus > 1 { "0,1" } else { "0" };
    let vdev = format!("net_pcap0,rx_pcap={},infinite_rx=1", pcap.display());
    let prefix = format!("rxpath-reasm-{}", std::process::id());
    let out = Command::new(exe)
        .args(["-l", lcores, "--no-huge", "-m", "512", "--no-pci"])
        .args([
            "--no-shconf",
            "--file-prefix",
            &prefix,
            "--log-level",
            "*:error",
        ])
        .args(["--vdev", &vdev, "--"])
        .arg(format!("{}", a.duration.as_secs_f64()))
        .output()
        .context("running the DPDK peer")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with('{'));
    let Some(line) = line.filter(|_| out.status.success()) else {
        anyhow::bail!(
            "the DPDK peer failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    };
    let v: serde_json::Value = serde_json::from_str(line).context("the DPDK peer's JSON")?;
    let get = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let secs = get("seconds");
    let (frags, dgrams) = (get("fragments"), get("datagrams"));
    Ok(Rate {
        datagrams_per_s: dgrams / secs,
        fragments_per_s: frags / secs,
        failed: (frags / a.fragments as f64 - dgrams).max(0.0) as u64,
        reasm_ns_per_datagram: finite(get("reasm_seconds") * 1e9 / dgrams),
        busy: get("reasm_seconds") / secs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rxpath_testkit::{can_run, Need};

    fn args(datagrams: u32) -> ReasmArgs {
        ReasmArgs {
            duration: Duration::from_millis(300),
            rounds: 1,
            fragments: 4,
            datagrams,
            no_dpdk: false,
        }
    }

    #[test]
    fn the_corpus_reassembles_on_rxpath_whole_and_checksummed() {
        let dir = std::env::temp_dir().join(format!("rxpath-reasm-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pcap = dir.join("f.pcap");
        let a = args(64);
        let size = write_corpus(&pcap, a.datagrams, a.fragments).unwrap();
        assert_eq!(size, 3 * 1480 + 392);
        let t = rxpath_dev::pcap::Trace::load(&pcap).unwrap();
        assert_eq!(t.packets.len(), 64 * 4);
        // Verified: every datagram whole and its checksum right (a wrong
        // one would be a UDP InCsumErrors drop, not a delivery).
        let r = rxpath(&pcap, &a, Mode::Verify).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(r.datagrams_per_s > 0.0, "{r:?}");
        assert_eq!(r.failed, 0, "{r:?}");
        let per = r.fragments_per_s / r.datagrams_per_s;
        assert!((3.9..=4.1).contains(&per), "fragments per datagram {per}");
    }

    #[test]
    fn the_dpdk_peer_builds_and_reassembles_the_corpus() {
        if !can_run(&[
            Need::Root,
            Need::Tool("pkg-config"),
            Need::Tool("dpdk-testpmd"),
        ]) {
            return;
        }
        let dir = std::env::temp_dir().join(format!("rxpath-reasm-peer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pcap = dir.join("f.pcap");
        let a = args(64);
        write_corpus(&pcap, a.datagrams, a.fragments).unwrap();
        let r = build_peer(&dir).and_then(|exe| dpdk(&exe, &pcap, &a).map_err(|e| e.to_string()));
        let _ = std::fs::remove_dir_all(&dir);
        let r = r.unwrap();
        assert!(r.datagrams_per_s > 0.0, "{r:?}");
        let per = r.fragments_per_s / r.datagrams_per_s;
        assert!((3.9..=4.1).contains(&per), "fragments per datagram {per}");
    }
}
