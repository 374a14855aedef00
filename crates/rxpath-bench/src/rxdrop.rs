//! `rxpath bench rxdrop`: the lowest RX level (seed 001), bundles against
//! the per-packet loop, and the engine alone against `dpdk-testpmd`.

use super::figure::{finite, in_turn, target, Bound, Verdict};
use super::plot::{progress, say, Bar, ReportDir};
use crate::harness::{
    measure, median, peer_not_measured, range, rxdrop_config, testpmd_field, testpmd_rxonly,
};
use anyhow::{Context, Result};
use rxpath_runtime::Producer;
use std::io::{BufRead, BufReader};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Arguments of this bench.
#[derive(Debug, Clone, clap::Args)]
pub struct RxdropArgs {
    /// Seconds per measurement.
    #[arg(long, default_value = "2s", value_parser = rxpath_cli::parse::parse_duration)]
    pub duration: Duration,
    /// Rounds (each measures every configuration once; the median is kept).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Skip DPDK testpmd even if installed.
    #[arg(long)]
    pub no_dpdk: bool,
    /// Print results as JSON too.
    #[arg(long)]
    pub json: bool,
}

/// The configurations on cold data: name, bundle size, split on hash.
const COLD: [(&str, usize, bool); 4] = [
    ("bundle 1 (per packet)", 1, false),
    ("bundle 16", 16, false),
    ("bundle 64", 64, false),
    ("bundle 16, split on hash", 16, true),
];

pub(super) fn rxdrop(a: RxdropArgs, rep: &mut Option<ReportDir>) -> Result<ExitCode> {
    let d = a.duration;
    let cold = COLD;
    println!("rxpath bench rxdrop: lowest RX level (pull, parse Ethernet/IP/L4, drop), 60-byte UDP, 64 flows, 1 queue, weight 64, polling mode");
    println!(
        "{} round(s) of {:.1}s per configuration, median kept",
        a.rounds,
        d.as_secs_f64()
    );
    let runs = measure_rounds(&a)?;
    let c = print_cold(&runs);
    let (dram_med, dram_ratio) = print_cold_null(&runs);
    let (null_med, dpdk) = print_null(&a, &runs);
    println!();
    let (cold_ratio, taken_med) = (&c.ratio, &c.taken_med);
    let (null_pps, dpdk_pps) = (&runs.null_pps, &runs.dpdk_pps);
    let bulk = target(
        "bundle 16 vs per packet on cold data from memory (cold null queue)",
        finite(dram_ratio[1]),
        Bound::AtLeast(1.9),
        "no round measured both",
    );
    println!(
        "bundle 16 vs per packet on the producer thread's cold data: {:.2}x{}",
        cold_ratio[1],
        if taken_med[1] >= 0.98 {
            " (the producer thread limits it: not a measure of bulking)"
        } else {
            ""
        }
    );
    let vs_dpdk = match &dpdk {
        Ok(_) => target(
            "null mode vs dpdk-testpmd net_null rxonly",
            finite(ratio(null_pps, dpdk_pps)),
            Bound::AtLeast(1.1),
            "no round measured both",
        ),
        Err(e) => {
            // A skip the user asked for is said, not counted as a failure.
            println!("target null mode vs dpdk-testpmd net_null rxonly: not measured ({e})");
            Verdict::NotMeasured
        }
    };
    let (cold_pps, dram_pps, missed) = (&runs.cold_pps, &runs.dram_pps, &runs.missed);
    let (cold_med, offered_med) = (&c.med, &c.offered_med);
    let j = serde_json::json!({
        "cold_mpps": cold.iter().zip(cold_med.iter()).map(|((n, _, _), v)| (n.to_string(), v / 1e6)).collect::<std::collections::BTreeMap<_, _>>(),
        "ratio_bundle16_vs_1": cold_ratio[1],
        "ratio_bundle64_vs_1": cold_ratio[2],
        "cold_null_mpps": cold.iter().zip(dram_med.iter()).map(|((n, _, _), v)| (n.to_string(), v / 1e6)).collect::<std::collections::BTreeMap<_, _>>(),
        "cold_null_mpps_rounds": cold.iter().zip(dram_pps.iter()).map(|((n, _, _), v)| (n.to_string(), v.iter().map(|x| x / 1e6).collect::<Vec<_>>())).collect::<std::collections::BTreeMap<_, _>>(),
        "cold_null_ratio_bundle16_vs_1": dram_ratio[1],
        "cold_null_ratio_bundle64_vs_1": dram_ratio[2],
        "ratio_null_vs_dpdk": dpdk.as_ref().ok().map(|_| ratio(null_pps, dpdk_pps)),
        "null_mpps": null_med / 1e6,
        "null_mpps_rounds": null_pps.iter().map(|v| v / 1e6).collect::<Vec<_>>(),
        "dpdk_null_mpps_rounds": dpdk_pps.iter().map(|v| v / 1e6).collect::<Vec<_>>(),
        "dpdk_null_mpps": dpdk.as_ref().ok().map(|v| v / 1e6),
        "dpdk_not_measured": dpdk.as_ref().err().map(|e| e.to_string()),
        "cold_mpps_rounds": cold.iter().zip(cold_pps.iter()).map(|((n, _, _), v)| (n.to_string(), v.iter().map(|x| x / 1e6).collect::<Vec<_>>())).collect::<std::collections::BTreeMap<_, _>>(),
        "cold_rx_missed": cold.iter().zip(missed.iter()).map(|((n, _, _), v)| (n.to_string(), *v)).collect::<std::collections::BTreeMap<_, _>>(),
        "cold_offered_mpps": cold.iter().zip(offered_med.iter()).map(|((n, _, _), v)| (n.to_string(), v / 1e6)).collect::<std::collections::BTreeMap<_, _>>(),
        "cold_taken_share": cold.iter().zip(taken_med.iter()).map(|((n, _, _), v)| (n.to_string(), *v)).collect::<std::collections::BTreeMap<_, _>>(),
        "rounds": a.rounds,
        "duration_s": d.as_secs_f64(),
        "targets": { "bundle16_vs_1_cold_null": bulk.json(), "null_vs_dpdk": vs_dpdk.json() },
    });
    if a.json {
        println!("\n{}", serde_json::to_string_pretty(&j)?);
    }
    if let Some(rep) = rep {
        rep.json("rxdrop", &j)?;
        plot(rep, &runs, &dpdk)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Every round's figures.
struct Runs {
    cold_pps: Vec<Vec<f64>>,
    missed: Vec<u64>,
    /// Per round, the share of what the simulated NIC offered that the
    /// host took (the rest is rx_missed): near 100 % the producer is the
    /// limit.
    taken: Vec<Vec<f64>>,
    /// The same configurations on cold null queues: data cold as after
    /// DMA (a cache miss a packet), no producer thread to limit.
    dram_pps: Vec<Vec<f64>>,
    null_pps: Vec<f64>,
    dpdk_pps: Vec<f64>,
    dpdk_err: Option<String>,
}

/// Every configuration, every round: cold data, cold null queues, null
/// mode and DPDK.
fn measure_rounds(a: &RxdropArgs) -> Result<Runs> {
    let (d, cold) = (a.duration, COLD);
    let mut runs = Runs {
        cold_pps: vec![Vec::new(); cold.len()],
        missed: vec![0; cold.len()],
        taken: vec![Vec::new(); cold.len()],
        dram_pps: vec![Vec::new(); cold.len()],
        null_pps: Vec::new(),
        dpdk_pps: Vec::new(),
        dpdk_err: a.no_dpdk.then(|| "skipped (--no-dpdk)".to_string()),
    };
    let pb = progress(a.rounds as u64 * (2 * cold.len() as u64 + 2), "rxdrop");
    let order: Vec<usize> = (0..cold.len()).collect();
    for round in 0..a.rounds {
        // Every other round runs the configurations in the reverse order
        // (and DPDK before rxpath's null mode): a drift favours none.
        for i in in_turn(&order, round) {
            let (name, b, split) = cold[i];
            pb.set_message(name);
            let (pps, r) = measure(&rxdrop_config(b, split, Producer::Thread { pps: None }, d))?;
            runs.cold_pps[i].push(pps);
            let dev = r.device_total();
            runs.missed[i] += dev.rx_missed;
            runs.taken[i].push(dev.rx_ring as f64 / dev.offered.max(1) as f64);
            pb.inc(1);
        }
        for i in in_turn(&order, round) {
            let (name, b, split) = cold[i];
            pb.set_message(format!("{name}, cold null queue"));
            let mut c = rxdrop_config(b, split, Producer::Null, d);
            c.null_cold = true;
            let (pps, _) = measure(&c)?;
            runs.dram_pps[i].push(pps);
            pb.inc(1);
        }
        // DPDK in the same round, so that both see the same machine.
        for engine in in_turn(&[false, true], round) {
            if !engine {
                pb.set_message("null mode");
                let (pps, _) = measure(&rxdrop_config(16, false, Producer::Null, d))?;
                runs.null_pps.push(pps);
            } else if runs.dpdk_err.is_none() {
                pb.set_message("dpdk-testpmd");
                match dpdk_null_rxonly(d) {
                    Ok(p) => runs.dpdk_pps.push(p),
                    Err(e) => runs.dpdk_err = Some(format!("{e:#}")),
                }
            }
            pb.inc(1);
        }
        say(&pb, &format!("round {} done", round + 1));
    }
    pb.finish_and_clear();
    Ok(runs)
}

/// The cold-data table's figures.
struct ColdTable {
    med: Vec<f64>,
    ratio: Vec<f64>,
    taken_med: Vec<f64>,
    offered_med: Vec<f64>,
}

/// Ratios are taken within each round (both sides saw the same machine)
/// and then the median over rounds is kept.
fn ratio(a: &[f64], b: &[f64]) -> f64 {
    median(a.iter().zip(b).map(|(x, y)| x / y).collect())
}

/// The table of cold data from the producer thread.
fn print_cold(runs: &Runs) -> ColdTable {
    let (cold, cold_pps, taken, missed) = (COLD, &runs.cold_pps, &runs.taken, &runs.missed);
    let cold_med: Vec<f64> = cold_pps.iter().map(|v| median(v.clone())).collect();
    let cold_ratio: Vec<f64> = cold_pps.iter().map(|v| ratio(v, &cold_pps[0])).collect();
    println!("\n## Cold data (producer thread on the other core writes every frame)\n");
    println!("| configuration | Mpps (median) | range | vs bundle 1 (median of per-round ratios) | NIC drops, all rounds (rx_missed) | offered Mpps (median) | taken of offered (median) |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let taken_med: Vec<f64> = taken.iter().map(|v| median(v.clone())).collect();
    let offered_med: Vec<f64> = cold_pps
        .iter()
        .zip(taken.iter())
        .map(|(p, t)| median(p.iter().zip(t).map(|(p, t)| p / t.max(1e-9)).collect()))
        .collect();
    for (i, (name, _, _)) in cold.iter().enumerate() {
        println!(
            "| {name} | {:.2} | {} | {:.2}x | {} | {:.2} | {:.1} % |",
            cold_med[i] / 1e6,
            range(&cold_pps[i]),
            cold_ratio[i],
            missed[i],
            offered_med[i] / 1e6,
            100.0 * taken_med[i]
        );
    }
    for (i, (name, _, _)) in cold.iter().enumerate() {
        if taken_med[i] >= 0.98 {
            println!(
                "\n{name} took {:.1} % of what the simulated NIC offered: the producer thread, not the host, limits that row (and any ratio it is part of).",
                100.0 * taken_med[i]
            );
        }
    }
    ColdTable {
        med: cold_med,
        ratio: cold_ratio,
        taken_med,
        offered_med,
    }
}

/// The table of cold data from memory (cold null queues).
fn print_cold_null(runs: &Runs) -> (Vec<f64>, Vec<f64>) {
    let (cold, dram_pps) = (COLD, &runs.dram_pps);
    let dram_med: Vec<f64> = dram_pps.iter().map(|v| median(v.clone())).collect();
    let dram_ratio: Vec<f64> = dram_pps.iter().map(|v| ratio(v, &dram_pps[0])).collect();
    let llc = rxpath_dev::sim::last_level_cache();
    let frames = rxpath_dev::sim::cold_frames();
    println!(
        "\n## Cold data from memory (cold null queue: {frames} frames of 512 bytes, the lines packets touch {} MiB, twice the last-level cache of {} MiB, handed out in a shuffled cycle; same thread, no producer)\n",
        (frames * 64) >> 20,
        llc >> 20
    );
    println!(
        "| configuration | Mpps (median) | range | vs bundle 1 (median of per-round ratios) |"
    );
    println!("|---|---:|---:|---:|");
    for (i, (name, _, _)) in cold.iter().enumerate() {
        println!(
            "| {name} | {:.2} | {} | {:.2}x |",
            dram_med[i] / 1e6,
            range(&dram_pps[i]),
            dram_ratio[i]
        );
    }
    (dram_med, dram_ratio)
}

/// The null-mode table beside DPDK; DPDK's median or why it is missing.
fn print_null(a: &RxdropArgs, runs: &Runs) -> (f64, Result<f64>) {
    let (null_pps, dpdk_pps, dpdk_err) = (&runs.null_pps, &runs.dpdk_pps, runs.dpdk_err.clone());
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
                range(null_pps),
                ratio(null_pps, dpdk_pps)
            );
            println!(
                "| dpdk-testpmd net_null rxonly (no parse) | {:.2} | {} | 1.00x |",
                dpdk_med / 1e6,
                range(dpdk_pps)
            );
        }
        Err(e) => {
            println!(
                "| rxpath null, bundle 16, parse + drop | {:.2} | {} | n/a |",
                null_med / 1e6,
                range(null_pps)
            );
            println!("| dpdk-testpmd net_null rxonly | not measured: {e} | | |");
            if !a.no_dpdk {
                peer_not_measured("dpdk-testpmd net_null rxonly", &e.to_string());
            }
        }
    }
    (null_med, dpdk)
}

/// The bench's plots.
fn plot(rep: &mut ReportDir, runs: &Runs, dpdk: &Result<f64>) -> Result<()> {
    let (cold, cold_pps, dram_pps) = (COLD, &runs.cold_pps, &runs.dram_pps);
    let (null_pps, dpdk_pps) = (&runs.null_pps, &runs.dpdk_pps);
    let bars: Vec<Bar> = cold
        .iter()
        .zip(cold_pps.iter())
        .map(|((n, _, _), v)| Bar::of(*n, v, 1e-6))
        .collect();
    rep.bars(
        "rxdrop-cold",
        "rxdrop, cold data: Mpps per bundle size (median, range of rounds)",
        "Mpps",
        &bars,
    )?;
    let bars: Vec<Bar> = cold
        .iter()
        .zip(dram_pps.iter())
        .map(|((n, _, _), v)| Bar::of(*n, v, 1e-6))
        .collect();
    rep.bars(
        "rxdrop-cold-null",
        "rxdrop, cold data from memory (cold null queue): Mpps per bundle size (median, range of rounds)",
        "Mpps",
        &bars,
    )?;
    let dpdk_label = match dpdk {
        Ok(_) => "dpdk-testpmd net_null rxonly (no parse)".to_string(),
        Err(e) => format!("dpdk-testpmd: {e}"),
    };
    rep.bars(
        "rxdrop-null",
        "rxdrop, null mode: the engine alone beside DPDK (median, range)",
        "Mpps",
        &[
            Bar::of("rxpath null, bundle 16, parse + drop", null_pps, 1e-6),
            Bar::of(dpdk_label, dpdk_pps, 1e-6),
        ],
    )?;
    Ok(())
}

/// Run `dpdk-testpmd` with the net_null PMD in rxonly mode for `d` and
/// return its mean Rx-pps (the first, warm-up sample is skipped).
fn dpdk_null_rxonly(d: Duration) -> Result<f64> {
    let mut peer = testpmd_rxonly("net_null0", "dpdk dpdk-dev librte-net-null23")?;
    let stdout = peer.stdout().context("testpmd stdout")?;
    // testpmd's start (memory without hugepages) takes seconds on a busy
    // machine: count samples, not time since the spawn. The first sample
    // (warm-up) is dropped; then one per second for `d`.
    let start = Instant::now();
    let want = 1 + (d.as_secs_f64().round() as usize).max(1);
    let mut samples = Vec::new();
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    while samples.iter().filter(|v: &&f64| **v > 0.0).count() < want
        && start.elapsed() < d + Duration::from_secs(15)
    {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        if let Some(v) = testpmd_field::<f64>(&line, "Rx-pps:") {
            samples.push(v);
        }
    }
    let tail = peer.stderr_tail();
    peer.interrupt(Duration::from_secs(10))?;
    let useful: Vec<f64> = samples
        .iter()
        .skip(1)
        .copied()
        .filter(|v| *v > 0.0)
        .collect();
    anyhow::ensure!(
        !useful.is_empty(),
        "dpdk-testpmd printed no Rx-pps samples: {tail}"
    );
    Ok(useful.iter().sum::<f64>() / useful.len() as f64)
}
