//! `rxpath bench gro`: seed 004's experiment on the simulated NIC.
//!
//! Bulk: 200 TCP streams (64 KiB messages, PSH at each end, MSS 1448) over
//! 8 queues, offered as fast as the producer thread can write them; GRO with
//! `gro_flush_timeout` 0, a fixed timeout, and the adaptive mode. The seed's
//! figure of merit is the ACK rate, one ACK per GRO packet passed up: we
//! report packets passed up per second and segments per GRO packet.
//!
//! Request/response: 200 TCP request/response flows (64-byte PSH requests
//! stamped with their send time) at a fixed rate, same three settings:
//! send-to-delivery latency p50/p99 and packets passed up per second.
//!
//! UDP that no socket merges: 64 UDP flows from the null producer on one
//! queue, GRO off against GRO on with no socket asking for `UDP_GRO`
//! (the kernel's `udp_encap_needed_key` off): what GRO costs a path that
//! has nothing for it, per round in one run.

use crate::figure::{finite, in_turn, ratio as ratio_of, ratio_cell};
use crate::harness::{measure, median};
use crate::plot::{progress, say, Bar, ReportDir};
use anyhow::Result;
use rxpath_core::gro::Adaptive;
use rxpath_dev::sim::{Coalesce, Mix, SimConfig, TrafficConfig};
use rxpath_runtime::{GroSettings, Producer, RunConfig, StackKind};
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of this bench.
#[derive(Debug, Clone, clap::Args)]
pub struct GroBenchArgs {
    /// Seconds per measurement.
    #[arg(long, default_value = "3s", value_parser = rxpath_cli::parse::parse_duration)]
    pub duration: Duration,
    /// Rounds (each measures every configuration once; medians are kept).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// The fixed gro_flush_timeout to compare with 0, in ns (the seed: 2000).
    #[arg(long, default_value_t = 2000)]
    pub timeout: u64,
    /// A longer fixed timeout, also the adaptive mode's timeout for bulk traffic, in ns.
    #[arg(long, default_value_t = 20_000)]
    pub adaptive_max: u64,
    /// Request/response offered rate, packets per second.
    #[arg(long, default_value_t = 100_000)]
    pub rr_pps: u64,
    /// Bulk offered rate, packets per second (the seed: 811k).
    #[arg(long, default_value_t = 811_000)]
    pub bulk_pps: u64,
    /// Wait for interrupts sleeping (futex wakeup, 10-50 µs here) instead
    /// of spinning on the lines (idle=poll: taken within ~1 µs, as a hard
    /// IRQ is, which the seed's numbers assume).
    #[arg(long)]
    pub irq_sleep: bool,
    /// Print results as JSON too.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy)]
enum Setting {
    Fixed(u64),
    Adaptive(u64),
}

impl Setting {
    fn name(&self) -> String {
        match self {
            Setting::Fixed(0) => "gro_flush_timeout 0 (default)".into(),
            Setting::Fixed(t) => format!("gro_flush_timeout {t} ns"),
            Setting::Adaptive(m) => format!("adaptive (up to {m} ns)"),
        }
    }
    fn gro(&self) -> GroSettings {
        match *self {
            Setting::Fixed(t) => GroSettings {
                flush_timeout_ns: t,
                adaptive: None,
            },
            Setting::Adaptive(m) => GroSettings {
                flush_timeout_ns: 0,
                adaptive: Some(Adaptive {
                    max_ns: m,
                    ..Adaptive::default()
                }),
            },
        }
    }
}

/// A TSO chunk: 45 segments of 1448 bytes, the last with PSH (what this
/// machine's kernel GRO makes of an iperf3 stream: 65160-byte packets).
const CHUNK: usize = 45;

fn config(mix: Mix, pps: Option<u64>, s: Setting, d: Duration, idle_poll: bool) -> RunConfig {
    RunConfig {
        sim: SimConfig {
            queues: 8,
            ring_size: 1024,
            frames_per_queue: 2048,
            // A NIC tuned for RPC latency: an interrupt per packet (the
            // seed's premise: NICs do not delay interrupts for bulk).
            coalesce: Coalesce::EVERY_FRAME,
            ..SimConfig::default()
        },
        traffic: TrafficConfig {
            flows: 200,
            mix,
            stamp: mix == Mix::TcpRr,
            burst: CHUNK,
            message: CHUNK * 1448,
            ..TrafficConfig::default()
        },
        interrupts: true,
        idle_poll,
        producer: Producer::Thread { pps },
        stack: if mix == Mix::TcpRr {
            StackKind::Latency
        } else {
            StackKind::Sink
        },
        threads: 1,
        duration: d,
        tick: d * 2,
        pin: true,
        gro: Some(s.gro()),
        ..RunConfig::default()
    }
}

#[derive(Debug, Default, Clone)]
struct Sample {
    segs_per_pkt: Vec<f64>,
    pkts_up_per_s: Vec<f64>,
    segs_in_per_s: Vec<f64>,
    p50_us: Vec<f64>,
    p99_us: Vec<f64>,
}

/// Every setting on bulk and on request/response traffic, every round.
fn measure_rounds(a: &GroBenchArgs, settings: &[Setting]) -> Result<(Vec<Sample>, Vec<Sample>)> {
    let d = a.duration;
    let mut bulk: Vec<Sample> = vec![Sample::default(); settings.len()];
    let mut rr: Vec<Sample> = vec![Sample::default(); settings.len()];
    let pb = progress(a.rounds as u64 * settings.len() as u64 * 2, "gro");
    let order: Vec<usize> = (0..settings.len()).collect();
    for round in 0..a.rounds {
        // Every other round in the reverse order: a drift favours none.
        for i in in_turn(&order, round) {
            let s = &settings[i];
            pb.set_message(s.name());
            for (mix, pps, out) in [
                (Mix::TcpBulk, Some(a.bulk_pps), &mut bulk),
                (Mix::TcpRr, Some(a.rr_pps), &mut rr),
            ] {
                let (_, r) = measure(&config(mix, pps, *s, d, !a.irq_sleep))?;
                let g = r
                    .gro_total()
                    .ok_or_else(|| anyhow::anyhow!("the run reported no GRO counters"))?;
                let secs = r.elapsed.as_secs_f64();
                let o = &mut out[i];
                o.segs_per_pkt.push(g.segs_per_packet());
                o.pkts_up_per_s.push(g.packets_out as f64 / secs);
                o.segs_in_per_s.push(g.packets_in as f64 / secs);
                if let Some(l) = &r.latency {
                    o.p50_us.push(l.quantile_ns(0.5) as f64 / 1000.0);
                    o.p99_us.push(l.quantile_ns(0.99) as f64 / 1000.0);
                }
                pb.inc(1);
            }
        }
        say(&pb, &format!("round {} done", round + 1));
    }
    pb.finish_and_clear();
    Ok((bulk, rr))
}

/// The bench's plots.
fn plot(rep: &mut ReportDir, settings: &[Setting], bulk: &[Sample], rr: &[Sample]) -> Result<()> {
    let bars = |v: &[Sample], f: fn(&Sample) -> &Vec<f64>, scale: f64| -> Vec<Bar> {
        settings
            .iter()
            .zip(v)
            .map(|(s, b)| Bar::of(s.name(), f(b), scale))
            .collect()
    };
    rep.bars(
        "gro-segments-per-packet",
        "GRO, 200 bulk TCP streams: segments per GRO packet, per flush setting",
        "segments per packet passed up (median, range of rounds)",
        &bars(bulk, |s| &s.segs_per_pkt, 1.0),
    )?;
    rep.bars(
        "gro-packets-up",
        "GRO, 200 bulk TCP streams: packets passed up per flush setting",
        "thousand packets passed up per second (median, range)",
        &bars(bulk, |s| &s.pkts_up_per_s, 1e-3),
    )?;
    rep.bars(
        "gro-rr-p99",
        "GRO, 200 request/response flows: p99 send-to-delivery latency",
        "p99 latency, µs (median, range)",
        &bars(rr, |s| &s.p99_us, 1.0),
    )?;
    Ok(())
}

/// Adaptive against the best fixed setting on each kind of traffic (the
/// last setting is the adaptive one): the table, and the ratios (bulk
/// segments per packet, request/response p99), each the median of the
/// rounds' own.
fn adaptive_vs_best(bulk: &[Sample], rr: &[Sample]) -> (f64, f64) {
    let med = |v: &Vec<f64>| median(v.clone());
    let fixed = 0..bulk.len() - 1;
    let ad = bulk.len() - 1;
    let best_bulk = fixed
        .clone()
        .map(|i| med(&bulk[i].segs_per_pkt))
        .fold(0.0, f64::max);
    let ad_bulk = med(&bulk[ad].segs_per_pkt);
    let best_p99 = fixed
        .clone()
        .map(|i| med(&rr[i].p99_us))
        .fold(f64::INFINITY, f64::min);
    let ad_p99 = med(&rr[ad].p99_us);
    // The ratios are taken inside each round (adaptive against the best
    // fixed setting of that round), then the median over rounds.
    let per_round = |v: &[Sample], f: fn(&Sample) -> &Vec<f64>, higher_better: bool| {
        let rounds = f(&v[ad]).len();
        let ratios: Vec<f64> = (0..rounds)
            .filter_map(|r| {
                let best = fixed.clone().filter_map(|i| f(&v[i]).get(r).copied()).fold(
                    if higher_better { 0.0 } else { f64::INFINITY },
                    |a, b| {
                        if higher_better {
                            a.max(b)
                        } else {
                            a.min(b)
                        }
                    },
                );
                let x = *f(&v[ad]).get(r)?;
                (best > 0.0 && best.is_finite()).then_some(x / best)
            })
            .collect();
        median(ratios)
    };
    let bulk_ratio = per_round(bulk, |s| &s.segs_per_pkt, true);
    let p99_ratio = per_round(rr, |s| &s.p99_us, false);
    println!("\n## Adaptive vs the best fixed setting\n");
    println!("| traffic | best fixed (median) | adaptive (median) | adaptive / best (median of per-round ratios) |");
    println!("|---|---:|---:|---:|");
    println!(
        "| bulk, segments per GRO packet (higher is better) | {best_bulk:.2} | {ad_bulk:.2} | {} |",
        ratio_cell(finite(bulk_ratio), 2)
    );
    println!(
        "| request/response, p99 µs (lower is better) | {best_p99:.1} | {ad_p99:.1} | {} |",
        ratio_cell(finite(p99_ratio), 2)
    );
    (bulk_ratio, p99_ratio)
}

pub fn gro(a: GroBenchArgs, rep: &mut Option<ReportDir>) -> Result<ExitCode> {
    let settings = [
        Setting::Fixed(0),
        Setting::Fixed(a.timeout),
        Setting::Fixed(a.adaptive_max),
        Setting::Adaptive(a.adaptive_max),
    ];
    let d = a.duration;
    println!(
        "rxpath bench gro: seed 004 on the simulated NIC; 8 queues, 1 NAPI thread, interrupt mode (rx-usecs 0, rx-frames 1), {}",
        if a.irq_sleep {
            "interrupts wake a sleeping NAPI thread (--irq-sleep)"
        } else {
            "interrupts taken by a spinning NAPI thread (idle=poll, as a hard IRQ)"
        }
    );
    println!(
        "bulk: 200 TCP streams at {} pkt/s (the seed's rate), each sending {CHUNK}-segment TSO chunks ending in PSH",
        a.bulk_pps
    );
    println!(
        "{} round(s) of {:.1}s per configuration, medians kept",
        a.rounds,
        d.as_secs_f64()
    );
    let (bulk, rr) = measure_rounds(&a, &settings)?;
    let med = |v: &Vec<f64>| median(v.clone());
    println!("\n## Bulk: 200 TCP streams\n");
    println!("| setting | segments in/s | packets passed up/s | segments per GRO packet | packets up vs timeout 0 |");
    println!("|---|---:|---:|---:|---:|");
    let base_up = med(&bulk[0].pkts_up_per_s);
    for (i, s) in settings.iter().enumerate() {
        let up = med(&bulk[i].pkts_up_per_s);
        println!(
            "| {} | {:.0} | {:.0} | {:.2} | {} fewer |",
            s.name(),
            med(&bulk[i].segs_in_per_s),
            up,
            med(&bulk[i].segs_per_pkt),
            ratio_cell(ratio_of(Some(base_up), Some(up)), 1)
        );
    }
    println!(
        "\n## Request/response: 200 TCP flows, {} requests/s, PSH on every request\n",
        a.rr_pps
    );
    println!("| setting | packets passed up/s | latency p50 (µs) | latency p99 (µs) |");
    println!("|---|---:|---:|---:|");
    for (i, s) in settings.iter().enumerate() {
        println!(
            "| {} | {:.0} | {:.1} | {:.1} |",
            s.name(),
            med(&rr[i].pkts_up_per_s),
            med(&rr[i].p50_us),
            med(&rr[i].p99_us)
        );
    }
    let (bulk_ratio, p99_ratio) = adaptive_vs_best(&bulk, &rr);
    let rounds = |v: &[Sample]| {
        settings
            .iter()
            .zip(v)
            .map(|(s, b)| {
                serde_json::json!({
                    "setting": s.name(),
                    "segs_per_pkt": med(&b.segs_per_pkt), "pkts_up_per_s": med(&b.pkts_up_per_s),
                    "segs_in_per_s": med(&b.segs_in_per_s), "p50_us": med(&b.p50_us), "p99_us": med(&b.p99_us),
                    "rounds": { "segs_per_pkt": b.segs_per_pkt, "pkts_up_per_s": b.pkts_up_per_s,
                        "segs_in_per_s": b.segs_in_per_s, "p50_us": b.p50_us, "p99_us": b.p99_us },
                })
            })
            .collect::<Vec<_>>()
    };
    let udp = udp_passes(a.rounds, d)?;
    let j = serde_json::json!({
        "udp_nobody_merges": udp,
        "bulk": rounds(&bulk),
        "rr": rounds(&rr),
        "packets_up_ratio_0_vs_timeout": ratio_of(Some(base_up), Some(med(&bulk[1].pkts_up_per_s))),
        "packets_up_ratio_0_vs_long_timeout": ratio_of(Some(base_up), Some(med(&bulk[2].pkts_up_per_s))),
        "adaptive_over_best_bulk": bulk_ratio,
        "adaptive_over_best_rr_p99": p99_ratio,
        "rounds": a.rounds,
        "duration_s": d.as_secs_f64(),
    });
    if a.json {
        println!("\n{}", serde_json::to_string_pretty(&j)?);
    }
    if let Some(rep) = rep {
        rep.json("gro", &j)?;
        plot(rep, &settings, &bulk, &rr)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// GRO on vs off for UDP that no socket merges, per stack: Mpps (median)
/// and the median of per-round ratios, printed and returned as JSON.
fn udp_passes(rounds: usize, d: Duration) -> Result<serde_json::Value> {
    println!("\n## UDP that no socket merges: 64 flows, null producer, 1 queue, bundle 16\n");
    println!("| stack | Mpps GRO off | Mpps GRO on | GRO on / off (median of per-round ratios) |");
    println!("|---|---:|---:|---:|");
    let mut out = serde_json::Map::new();
    for stack in [StackKind::Rxdrop, StackKind::Sink] {
        let (mut off, mut on, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let base = RunConfig {
                stack,
                ..crate::harness::rxdrop_config(16, false, Producer::Null, d)
            };
            // GRO off first in even rounds, on first in odd ones.
            let (mut a, mut b) = (0.0, 0.0);
            for gro_on in in_turn(&[false, true], round) {
                let gro = gro_on.then_some(GroSettings {
                    flush_timeout_ns: 0,
                    adaptive: None,
                });
                let pps = measure(&RunConfig {
                    gro,
                    ..base.clone()
                })?
                .0;
                if gro_on {
                    b = pps;
                } else {
                    a = pps;
                }
            }
            off.push(a / 1e6);
            on.push(b / 1e6);
            ratio.push(b / a);
        }
        let name = format!("{stack:?}").to_lowercase();
        println!(
            "| {name} | {:.2} | {:.2} | {} |",
            median(off.clone()),
            median(on.clone()),
            ratio_cell(finite(median(ratio.clone())), 2)
        );
        out.insert(
            name,
            serde_json::json!({ "mpps_off": off, "mpps_on": on, "on_over_off": ratio }),
        );
    }
    Ok(serde_json::Value::Object(out))
}
