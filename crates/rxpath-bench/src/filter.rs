//! `rxpath bench filter`: the INPUT filter at 0 to 10 000 rules, the
//! linear walk (the kernel's cost) against the compiled classifier, on one
//! core of the simulated NIC, and per classification beside DPDK's
//! `dpdk-test-acl` on the same rules and packets.

use crate::figure::{ratio, ratio_cell, target, Bound, Verdict};
use crate::harness::{measure, median, which};
use crate::plot::{progress, Axes, Legend, ReportDir, Series};
use anyhow::{Context, Result};
use clap::Args;
use rxpath_core::filter::gen::{generate, Generated, Shape};
use rxpath_core::filter::{Family, Filter, FilterHandle, FilterMode, Key, Ruleset, ABSENT};
use rxpath_runtime::{Producer, RunConfig, StackKind};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Arguments of this bench.
#[derive(Debug, Clone, Args)]
pub struct FilterBenchArgs {
    /// Seconds per measurement.
    #[arg(long, default_value = "1500ms", value_parser = rxpath_cli::parse::parse_duration)]
    pub duration: Duration,
    /// Rule counts.
    #[arg(long, value_delimiter = ',', default_value = "0,100,1000,2000,10000")]
    pub rules: Vec<usize>,
    /// Rule set shape (acl or fw).
    #[arg(long, default_value = "acl", value_parser = clap::value_parser!(Shape))]
    pub shape: Shape,
    /// Skip dpdk-test-acl even if installed.
    #[arg(long)]
    pub no_dpdk: bool,
    /// Skip the kernel's iptables row (needs root and iptables).
    #[arg(long)]
    pub no_kernel: bool,
    /// Passes of the compiled bursts and dpdk-test-acl, alternating, per
    /// row: the VM's drift lands on both, and the ratio is the median of
    /// the passes' own.
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u64).range(1..=20))]
    pub passes: u64,
    /// Pairs of a no-filter and a cached run, back to back, per row and
    /// producer; "cached vs no filter" is the median of the pairs' own
    /// ratios. Many short pairs: this VM's speed wanders by up to 1.7x
    /// within seconds (the same code read 14-24 Mpps in passes 3 s
    /// apart), so the two runs of a pair must be close in time.
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub pairs: u64,
    /// Length of each run of a pair.
    #[arg(long, default_value = "200ms", value_parser = rxpath_cli::parse::parse_duration)]
    pub pair_duration: Duration,
}

fn config(producer: Producer, filter: Option<Arc<FilterHandle>>, d: Duration) -> RunConfig {
    // rxdrop's setup (1 queue, 60-byte UDP, 64 flows, polling, bundle 16),
    // ending in the sink behind the filter.
    RunConfig {
        stack: StackKind::Sink,
        filter,
        ..crate::harness::rxdrop_config(16, false, producer, d)
    }
}

pub(crate) fn keys(g: &Generated) -> Vec<Key> {
    let to = |a: std::net::IpAddr| match a {
        std::net::IpAddr::V4(a) => u32::from(a) as u128,
        std::net::IpAddr::V6(a) => u128::from(a),
    };
    g.traffic
        .iter()
        .map(|p| {
            let ports = matches!(p.proto, 6 | 17);
            Key {
                src: to(p.src),
                dst: to(p.dst),
                proto: p.proto,
                sport: if ports { p.sport as u32 } else { ABSENT },
                dport: if ports { p.dport as u32 } else { ABSENT },
                tcp_flags: if p.proto == 6 { 0x10 } else { ABSENT },
                icmp: if matches!(p.proto, 1 | 58) {
                    8 << 8
                } else {
                    ABSENT
                },
                len: 64,
                frag: false,
            }
        })
        .collect()
}

/// ns per classification over `keys`, repeated for at least `d`.
fn ns_per_class(rs: &Ruleset, keys: &[Key], d: Duration) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    let mut sink = 0usize;
    while start.elapsed() < d {
        for k in keys {
            let v = rs.judge_quiet(std::hint::black_box(k));
            sink = sink.wrapping_add(v.rule.unwrap_or(0));
        }
        n += keys.len() as u64;
    }
    std::hint::black_box(sink);
    start.elapsed().as_nanos() as f64 / n as f64
}

/// `f` on a thread of its own pinned to the first core, where
/// `dpdk-test-acl` runs (`-l 0`): both classifiers timed on one core (the
/// VM's two cores do not run alike).
fn on_first_core<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            if let Some(c) = core_affinity::get_core_ids().and_then(|c| c.into_iter().next()) {
                core_affinity::set_for_current(c);
            }
            f()
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// The same through the burst interface, 64 packets a call
/// (`dpdk-test-acl` classifies 256 a call).
fn ns_per_class_burst(rs: &Ruleset, keys: &[Key], d: Duration) -> f64 {
    let Some(k0) = keys.first() else {
        return f64::NAN;
    };
    let mut out = vec![rs.judge_quiet(k0); 64];
    let start = Instant::now();
    let mut n = 0u64;
    let mut sink = 0usize;
    while start.elapsed() < d {
        for ks in keys.chunks(64) {
            let out = &mut out[..ks.len()];
            rs.judge_burst_quiet(std::hint::black_box(ks), out);
            sink = out
                .iter()
                .fold(sink, |s, v| s.wrapping_add(v.rule.unwrap_or(0)));
        }
        n += keys.len() as u64;
    }
    std::hint::black_box(sink);
    start.elapsed().as_nanos() as f64 / n as f64
}

/// Mpps with no filter, the linear walk, the compiled classifier and the
/// cached path, on null queues and on the producer's cold data
/// (`[producer][none, linear, compiled, cached]`; cold data skips the
/// uncached classifier, whose cost shows in null mode), and each
/// producer's pairs' cached/none ratios. Linear and compiled run once;
/// then `pairs` short no-filter and cached runs back to back, each pair
/// in the other order from the one before (a drift does not favour
/// either).
#[allow(clippy::type_complexity)]
fn rates(
    a: &FilterBenchArgs,
    table: &rxpath_core::filter::Table,
) -> Result<([[f64; 4]; 2], [Vec<f64>; 2])> {
    let d = a.duration;
    let mk = |mode, cache| {
        let f = Filter::new(Some(Ruleset::new(table.clone(), "sim0", mode)), None);
        Arc::new(FilterHandle::new(Some(f)).with_flow_cache(cache))
    };
    let (lin, comp, cached) = (
        mk(FilterMode::Linear, 0),
        mk(FilterMode::Compiled, 0),
        mk(
            FilterMode::Compiled,
            rxpath_core::filter::DEFAULT_FLOW_CACHE,
        ),
    );
    let mut mpps = [[f64::NAN; 4]; 2];
    let mut pair_ratios: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for (i, p) in [Producer::Null, Producer::Thread { pps: None }]
        .into_iter()
        .enumerate()
    {
        for (j, h) in [Some(&lin), (i == 0).then_some(&comp)]
            .into_iter()
            .enumerate()
        {
            if let Some(h) = h {
                mpps[i][j + 1] = measure(&config(p.clone(), Some(h.clone()), d))?.0;
            }
        }
        let (mut none, mut hit) = (Vec::new(), Vec::new());
        let run = |f: Option<&Arc<FilterHandle>>| {
            measure(&config(p.clone(), f.cloned(), a.pair_duration)).map(|r| r.0)
        };
        for pair in 0..a.pairs {
            if pair % 2 == 0 {
                none.push(run(None)?);
                hit.push(run(Some(&cached))?);
            } else {
                hit.push(run(Some(&cached))?);
                none.push(run(None)?);
            }
        }
        pair_ratios[i] = hit.iter().zip(&none).map(|(h, n)| h / n).collect();
        mpps[i][0] = median(none);
        mpps[i][3] = median(hit);
    }
    Ok((mpps, pair_ratios))
}

/// ns per classification at `n` rules.
struct Classify {
    ns_lin: f64,
    ns_comp: f64,
    ns_burst: f64,
    ns_dpdk: Option<f64>,
    /// dpdk-test-acl's ns over the bursts' (median of the passes').
    vs_acl: Option<f64>,
    /// Every pass ran dpdk-test-acl.
    full: bool,
    acl_ratios: Vec<f64>,
}

/// ns per classification: linear, compiled one at a time, compiled in
/// bursts of 64 beside dpdk-test-acl, on the first core.
fn classify(
    a: &FilterBenchArgs,
    n: usize,
    g: &Generated,
    table: &rxpath_core::filter::Table,
    dpdk_note: Option<&str>,
) -> Classify {
    let d = a.duration;
    let ks = keys(g);
    let rs_lin = Ruleset::new(table.clone(), "sim0", FilterMode::Linear);
    let rs_comp = Ruleset::new(table.clone(), "sim0", FilterMode::Compiled);
    // The linear walk at 10 000 rules takes long: fewer keys.
    let lk = &ks[..ks.len().min(if n >= 5000 { 5_000 } else { 100_000 })];
    let ns_lin = on_first_core(|| ns_per_class(&rs_lin, lk, d));
    let ns_comp = on_first_core(|| ns_per_class(&rs_comp, &ks, d));
    // Bursts and dpdk-test-acl alternate for `passes` passes (the VM
    // drifts between them as between the rate runs); the ratio is the
    // median of each pass's own.
    let (mut bursts, mut dpdks, mut acl_ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..a.passes {
        let b = on_first_core(|| ns_per_class_burst(&rs_comp, &ks, d));
        bursts.push(b);
        if dpdk_note.is_some() || n == 0 {
            continue;
        }
        match dpdk_acl(&rs_comp, &ks) {
            Ok(v) => {
                dpdks.push(v);
                acl_ratios.push(v / b);
            }
            Err(e) => {
                crate::harness::peer_not_measured(
                    &format!("dpdk-test-acl at {n} rules"),
                    &format!("{e:#}"),
                );
                break;
            }
        }
    }
    let ns_burst = median(bursts);
    // A pass that could not run dpdk-test-acl leaves it unmeasured.
    let full = dpdks.len() as u64 == a.passes;
    let ns_dpdk = full.then(|| median(dpdks.clone()));
    let vs_acl = full.then(|| median(acl_ratios.clone()));
    Classify {
        ns_lin,
        ns_comp,
        ns_burst,
        ns_dpdk,
        vs_acl,
        full,
        acl_ratios,
    }
}

/// The kernel's iptables (nft backend) on a veth, 2000 rules vs none, and
/// rxpath's rates at 2000 rules against it; its JSON.
fn kernel_section(a: &FilterBenchArgs, at2000: Option<&[[f64; 4]; 2]>) -> serde_json::Value {
    let d = a.duration;
    println!("\n## The kernel: iptables (nft backend) on a veth, 2000 rules vs none\n");
    let mut kernel = serde_json::Value::Null;
    if a.no_kernel {
        println!("skipped (--no-kernel)");
    } else {
        let g = generate(a.shape, Family::V4, 2000, 0, 0.0, 1);
        match kernel_rows(&g.save, d.max(Duration::from_secs(3))) {
            Ok((none, with)) => {
                kernel = serde_json::json!({ "mpps_0_rules": none / 1e6, "mpps_2000_rules": with / 1e6 });
                println!("| rules | Mpps received (INPUT policy counter) | vs no rules |");
                println!("|---:|---:|---:|");
                println!("| 0 | {:.3} | 1.00x |", none / 1e6);
                println!("| 2000 | {:.3} | {:.2}x |", with / 1e6, with / none);
                if let Some(m) = at2000 {
                    println!(
                        "\nrxpath at 2000 rules vs the kernel at 2000 rules: linear {:.2}x (null) / {:.2}x (cold), compiled {:.1}x (null), cached {:.1}x (null) / {:.1}x (cold)",
                        m[0][1] / with,
                        m[1][1] / with,
                        m[0][2] / with,
                        m[0][3] / with,
                        m[1][3] / with
                    );
                }
            }
            Err(e) => {
                println!("not measured: {e:#}");
                kernel = serde_json::json!({ "not_measured": format!("{e:#}") });
                crate::harness::peer_not_measured("kernel iptables on a veth", &format!("{e:#}"));
            }
        }
    }
    kernel
}

pub fn filter(a: FilterBenchArgs, rep: &mut Option<ReportDir>) -> Result<ExitCode> {
    let d = a.duration;
    println!(
        "rxpath bench filter: INPUT filter after GRO, ClassBench-shaped {:?} rule sets (seed 1), 1 queue, 1 NAPI core, polling mode, bundle 16; {:.1}s per measurement",
        a.shape,
        d.as_secs_f64()
    );
    println!("Mpps: 60-byte UDP, 64 flows from the sim NIC (198.18.x.y -> 198.19.0.1: they miss almost every rule, the walk's worst case, as in seed 003).");
    println!("ns/classification: 100 000 generated packets, 80 % aimed at rules spread over the list, 20 % at none; in-process, no packet I/O; one at a time (Ruleset::judge) and in bursts of 64 (Ruleset::judge_burst; dpdk-test-acl classifies in bursts of 256, and the ratio to rte_acl is the bursts'); bursts and dpdk-test-acl alternate for the same passes, their ns are medians and the ratio the median of each pass's own; both run on the first core.\n");
    println!("Each row measures its own no-filter rate beside its filters: linear and compiled run once ({:.1}s), then {} pair(s) of a no-filter and a cached run of {:.2}s back to back per producer, in turn order (the VM's speed wanders within seconds: a pair's two runs must be close in time); their Mpps are medians and \"cached vs no filter\" is the median of the pairs' own ratios. \"cached\" is the default compiled path with the per-thread flow cache (--filter-cache), \"compiled\" the classifier on every packet (--filter-cache 0).\n", d.as_secs_f64(), a.pairs, a.pair_duration.as_secs_f64());
    println!("| rules | build ms | memory KiB | null no filter Mpps | null linear Mpps | null compiled Mpps | null cached Mpps | cached vs no filter | compiled vs no filter | cached vs linear | compiled vs linear | cold no filter Mpps | cold linear Mpps | cold cached Mpps | cold cached vs no filter | ns/class linear | ns/class compiled, one at a time | ns/class compiled, bursts of 64 | ns/class dpdk-test-acl | compiled (bursts) vs rte_acl |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let dpdk_note: Option<String> = if a.no_dpdk {
        Some("skipped (--no-dpdk)".into())
    } else if which("dpdk-test-acl").is_none() {
        let why = "dpdk-test-acl is not installed (apt-get install dpdk)";
        crate::harness::peer_not_measured("dpdk-test-acl", why);
        Some(format!("not measured: {why}"))
    } else {
        None
    };
    let mut at2000: Option<[[f64; 4]; 2]> = None;
    let mut pairs2000: Option<[Vec<f64>; 2]> = None;
    let mut acl2000: Option<Vec<f64>> = None;
    let mut rows = Vec::new();
    let pb = progress(a.rules.len() as u64, "filter");
    for &n in &a.rules {
        pb.set_message(format!("{n} rules"));
        let g = generate(a.shape, Family::V4, n, 100_000, 0.8, 1);
        let table = rxpath_core::filter::parse(&g.save).map_err(|e| anyhow::anyhow!("{e}"))?;
        let (build_ms, mem) = {
            // The compile on its own, timed (the handles above built theirs).
            let t0 = Instant::now();
            let r = Ruleset::new(table.clone(), "sim0", FilterMode::Compiled);
            (t0.elapsed().as_secs_f64() * 1e3, r.memory())
        };
        let (mpps, pair_ratios) = rates(&a, &table)?;
        let cached_vs_none = [
            median(pair_ratios[0].clone()),
            median(pair_ratios[1].clone()),
        ];
        if n == 2000 {
            at2000 = Some(mpps);
        }
        let c = classify(&a, n, &g, &table, dpdk_note.as_deref());
        let (ns_lin, ns_comp, ns_burst) = (c.ns_lin, c.ns_comp, c.ns_burst);
        let (ns_dpdk, vs_acl, full, acl_ratios) = (c.ns_dpdk, c.vs_acl, c.full, c.acl_ratios);
        if n == 2000 && full {
            acl2000 = Some(acl_ratios.clone());
        }
        let m = |i: usize, j: usize| mpps[i][j] / 1e6;
        println!(
            "| {n} | {build_ms:.1} | {} | {:.2} | {:.3} | {:.2} | {:.2} | {:.2}x | {:.2}x | {:.1}x | {:.1}x | {:.2} | {:.3} | {:.2} | {:.2}x | {ns_lin:.0} | {ns_comp:.1} | {ns_burst:.1} | {} | {} |",
            mem / 1024,
            m(0, 0),
            m(0, 1),
            m(0, 2),
            m(0, 3),
            cached_vs_none[0],
            m(0, 2) / m(0, 0),
            m(0, 3) / m(0, 1),
            m(0, 2) / m(0, 1),
            m(1, 0),
            m(1, 1),
            m(1, 3),
            cached_vs_none[1],
            ns_dpdk.map_or("n/a".into(), |v| format!("{v:.1}")),
            vs_acl.map_or("n/a".into(), |v| format!("{v:.2}x")),
        );
        let nan = |v: f64| v.is_finite().then_some(v);
        rows.push(serde_json::json!({
            "rules": n, "build_ms": build_ms, "memory_bytes": mem,
            "null_mpps": { "none": nan(m(0, 0)), "linear": nan(m(0, 1)), "compiled": nan(m(0, 2)), "cached": nan(m(0, 3)) },
            "cold_mpps": { "none": nan(m(1, 0)), "linear": nan(m(1, 1)), "cached": nan(m(1, 3)) },
            "ns_per_class": { "linear": ns_lin, "compiled": ns_comp, "compiled_burst": nan(ns_burst), "dpdk_test_acl": ns_dpdk },
            "dpdk_test_acl_vs_burst_by_pass": &acl_ratios,
            "cached_vs_none_by_pair": { "null": &pair_ratios[0], "cold": &pair_ratios[1] },
        }));
        if n == 2000 {
            pairs2000 = Some(pair_ratios.clone());
        }
        pb.inc(1);
    }
    pb.finish_and_clear();
    if let Some([null, cold]) = &pairs2000 {
        let list = |v: &[f64]| {
            v.iter()
                .map(|r| format!("{r:.2}x"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "\ncached vs no filter at 2000 rules, pair by pair: null mode {}; cold data {}",
            list(null),
            list(cold)
        );
    }
    if let Some(r) = &acl2000 {
        let list: Vec<String> = r.iter().map(|r| format!("{r:.2}x")).collect();
        println!(
            "compiled (bursts) vs rte_acl at 2000 rules, pass by pass: {}",
            list.join(", ")
        );
    }
    if let Some(n) = &dpdk_note {
        println!("\ndpdk-test-acl: {n}");
    }
    let verdicts = print_targets(pairs2000.as_ref(), at2000.as_ref(), acl2000.as_ref());
    let kernel = kernel_section(&a, at2000.as_ref());
    if let Some(rep) = rep {
        report(rep, &a, rows, kernel, dpdk_note, verdicts)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The report of `bench filter`: every row, Mpps and ns per
/// classification against the number of rules.
/// The three targets at 2000 rules, each with its verdict for
/// this run (a target counts as met when it holds in three runs). The
/// first ratio is printed to three places: it has sat at 0.90x.
fn print_targets(
    passes: Option<&[Vec<f64>; 2]>,
    mpps: Option<&[[f64; 4]; 2]>,
    acl: Option<&Vec<f64>>,
) -> [Verdict; 3] {
    println!();
    let no_row = "no 2000-rule row";
    let near = target(
        "compiled (with its flow cache) at 2000 rules within 10 % of the no-filter rate, null mode",
        passes.map(|[null, _]| median(null.clone())),
        Bound::AtLeast(0.9),
        no_row,
    );
    // The classifier alone (--filter-cache 0) against the walk: the
    // uncached column.
    let fast = target(
        "compiled (the classifier on every packet, no flow cache) >= 50x linear at 2000 rules, null mode",
        mpps.and_then(|m| ratio(Some(m[0][2]), Some(m[0][1]))),
        Bound::AtLeast(50.0),
        no_row,
    );
    if let Some(m) = mpps {
        println!(
            "cached (compiled with its flow cache, 64 flows) vs linear at 2000 rules, null mode: {}",
            ratio_cell(ratio(Some(m[0][3]), Some(m[0][1])), 1)
        );
    }
    let acl = target(
        "compiled (bursts) no slower than rte_acl at 2000 rules",
        acl.map(|v| median(v.clone())),
        Bound::AtLeast(1.0),
        "dpdk-test-acl did not run at 2000 rules",
    );
    [near, fast, acl]
}

fn report(
    rep: &mut ReportDir,
    a: &FilterBenchArgs,
    rows: Vec<serde_json::Value>,
    kernel: serde_json::Value,
    dpdk_note: Option<String>,
    verdicts: [Verdict; 3],
) -> Result<()> {
    let series = |path: &[&str], label: &str| Series {
        label: label.into(),
        points: rows
            .iter()
            .filter_map(|r| {
                let y = path.iter().try_fold(r, |v, k| v.get(k))?.as_f64()?;
                Some((r["rules"].as_f64()?, y))
            })
            .collect(),
    };
    rep.lines(
        "filter-mpps",
        "INPUT filter, null mode: Mpps against the number of rules",
        ("rules (log scale)", "Mpps on one core (log scale)"),
        &[
            series(&["null_mpps", "none"], "no filter"),
            series(&["null_mpps", "linear"], "linear walk"),
            series(&["null_mpps", "compiled"], "compiled"),
            series(&["null_mpps", "cached"], "compiled + flow cache"),
        ],
        Axes {
            legend: Legend::LowerLeft,
            ..Axes::LOG_XY
        },
    )?;
    let dpdk = match &dpdk_note {
        None => "dpdk-test-acl (rte_acl)".to_string(),
        Some(n) => format!("dpdk-test-acl: {n}"),
    };
    rep.lines(
        "filter-ns-per-class",
        "ns per classification against the number of rules",
        ("rules (log scale)", "ns per classification (log scale)"),
        &[
            series(&["ns_per_class", "linear"], "linear walk"),
            series(&["ns_per_class", "compiled"], "compiled, one at a time"),
            series(
                &["ns_per_class", "compiled_burst"],
                "compiled, bursts of 64",
            ),
            series(&["ns_per_class", "dpdk_test_acl"], &dpdk),
        ],
        Axes::LOG_XY,
    )?;
    let j = serde_json::json!({
        "shape": format!("{:?}", a.shape), "duration_s": a.duration.as_secs_f64(),
        "pairs": a.pairs, "pair_duration_s": a.pair_duration.as_secs_f64(),
        "rows": rows, "kernel_iptables": kernel, "dpdk_test_acl": dpdk_note,
        "targets": {
            "cached_within_10pct_of_no_filter": verdicts[0].json(),
            "compiled_uncached_50x_linear": verdicts[1].json(),
            "compiled_burst_vs_rte_acl": verdicts[2].json(),
        },
    });
    rep.json("filter", &j)
}

/// The kernel's receive rate on a veth in a namespace of its own (never the
/// machine's): `rxpath gen` sends 60-byte UDP from `a` to `b`'s address for
/// `d`; the `INPUT` policy counter says how many the kernel took. Once
/// without rules, once with `rules` (which this traffic all misses: a full
/// walk, as seed 003).
fn kernel_rows(rules: &str, d: Duration) -> Result<(f64, f64)> {
    use rxpath_runtime::lab::{VethLab, MAC_B};
    anyhow::ensure!(
        rxpath_os::sched::is_root(),
        "needs root (a network namespace and iptables)"
    );
    which("iptables-restore").context("iptables is not installed (apt-get install iptables)")?;
    let lab = VethLab::create("flt").context("making the lab namespace")?;
    let rules_file =
        std::env::temp_dir().join(format!("rxpath-bench-rules-{}", std::process::id()));
    let empty =
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n";
    let me = std::env::current_exe()?;
    let mac = MAC_B.map(|b| format!("{b:02x}")).join(":");
    let rate = |text: &str| -> Result<f64> {
        std::fs::write(&rules_file, text)?;
        lab.exec(&["iptables-restore", rules_file.to_str().unwrap_or_default()])
            .context("iptables-restore")?;
        let gen = lab
            .exec(&[
                me.to_str().unwrap_or("rxpath"),
                "gen",
                "--iface",
                &lab.a,
                "--dst-ip",
                "198.18.0.2",
                // Not one of the namespace's addresses: a local source would be
                // a martian, dropped before INPUT.
                "--src-ip",
                "198.18.0.9",
                "--dst-mac",
                &mac,
                "--duration",
                &format!("{}ms", d.as_millis()),
                "--json",
            ])
            .context("rxpath gen in the lab")?;
        // The kernel counted what arrived while the generator sent: its
        // own measured time, not the time asked for.
        let g: serde_json::Value = serde_json::from_str(&gen).context("rxpath gen's JSON")?;
        let secs = g["elapsed_s"]
            .as_f64()
            .filter(|s| *s > 0.0)
            .with_context(|| format!("rxpath gen's JSON has no elapsed_s: {g}"))?;
        let save = lab.exec(&["iptables-save", "-c", "-t", "filter"])?;
        let t =
            rxpath_core::filter::parse(&save).map_err(|e| anyhow::anyhow!("iptables-save: {e}"))?;
        let input = t.chain("INPUT").context("INPUT")?;
        Ok(t.chains[input].policy_counters.0 as f64 / secs)
    };
    let none = rate(empty);
    let with = rate(rules);
    let _ = std::fs::remove_file(&rules_file);
    drop(lab);
    Ok((none?, with?))
}

/// Run `dpdk-test-acl` on the rules of `rs` (INPUT only, converted to its
/// rule format) and the same packets; ns per classification as it reports
/// for its best method.
fn dpdk_acl(rs: &Ruleset, keys: &[Key]) -> Result<f64> {
    let bin = which("dpdk-test-acl").context("dpdk-test-acl not installed")?;
    let dir = std::env::temp_dir().join(format!("rxpath-acl-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (rules, trace) = (dir.join("rules"), dir.join("trace"));
    std::fs::write(&rules, acl_rules(rs)?)?;
    let mut t = String::new();
    for k in keys {
        let port = |p: u32| if p == ABSENT { 0 } else { p };
        t.push_str(&format!(
            "{:#x}\t{:#x}\t{}\t{}\t{}\n",
            k.src as u32,
            k.dst as u32,
            port(k.sport),
            port(k.dport),
            k.proto
        ));
    }
    std::fs::write(&trace, t)?;
    let out = Command::new(bin)
        .args([
            "--no-huge",
            "-m",
            "1024",
            "--no-pci",
            "-l",
            "0",
            "--log-level=error",
            "--",
        ])
        .arg(format!("--rulesf={}", rules.display()))
        .arg(format!("--tracef={}", trace.display()))
        .args(["--iter=20", "--verbose=0"])
        .arg(format!("--tracenum={}", keys.len()))
        .output()
        .context("running dpdk-test-acl")?;
    let _ = std::fs::remove_dir_all(&dir);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    anyhow::ensure!(
        out.status.success(),
        "dpdk-test-acl failed: {}",
        text.lines().last().unwrap_or("")
    );
    // Lines like "... search_avx2: ... cycles/pkt: 123.45 ..." or
    // "... ns/pkt ..."; take the smallest time per packet reported.
    parse_acl_output(&text).with_context(|| {
        format!(
            "no per-packet time in its output: {}",
            text.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
        )
    })
}

fn parse_acl_output(text: &str) -> Option<f64> {
    // "search_ip5tuples  @lcore 0: 20 iterations, 2000000 pkts, 1
    // categories, 244296 cycles (0.10 sec), 122.03 cycles/pkt, 20077096.05
    // pkt/sec": the best rate of the lines it prints.
    let mut best: Option<f64> = None;
    for l in text.lines().filter(|l| l.contains("pkt/sec")) {
        let pps = l
            .split(',')
            .find(|x| x.contains("pkt/sec"))
            .and_then(|x| x.split_whitespace().next())
            .and_then(|x| x.parse::<f64>().ok());
        if let Some(pps) = pps.filter(|p| *p > 0.0) {
            let ns = 1e9 / pps;
            best = Some(best.map_or(ns, |b: f64| b.min(ns)));
        }
    }
    best
}

/// The INPUT chain in `dpdk-test-acl`'s ClassBench rule format:
/// `@src/len dst/len sport_lo : sport_hi dport_lo : dport_hi proto/mask`.
/// Rules it cannot express (negations, user chains, flags, ICMP types,
/// lengths, multiport) make the conversion fail, and the row says so; an
/// `--icmp-type 8` is left out (every ICMP packet of the generated traffic
/// is an echo request, so the verdicts are the same).
fn acl_rules(rs: &Ruleset) -> Result<String> {
    let t = rs.table();
    let input = t.chain("INPUT").context("no INPUT chain")?;
    let mut s = String::new();
    for r in &t.chains[input].rules {
        let m = &r.m;
        let pfx = |p: &Option<
            rxpath_core::filter::rule::Neg<rxpath_core::filter::rule::Prefix>,
        >|
         -> Result<String> {
            match p {
                None => Ok("0.0.0.0/0".into()),
                Some(p) if !p.invert => Ok(format!(
                    "{}/{}",
                    std::net::Ipv4Addr::from(p.v.addr as u32),
                    p.v.len
                )),
                Some(_) => anyhow::bail!("line {}: a negated address", r.line),
            }
        };
        let range =
            |p: &Option<rxpath_core::filter::rule::Neg<Vec<(u32, u32)>>>| -> Result<(u32, u32)> {
                match p {
                    None => Ok((0, 65535)),
                    Some(p) if !p.invert && p.v.len() == 1 => Ok(p.v[0]),
                    Some(_) => anyhow::bail!("line {}: a negated or multiport match", r.line),
                }
            };
        anyhow::ensure!(
            m.iface.is_none()
                && m.tcp_flags.is_none()
                && m.length.is_none()
                && m.frag.is_none()
                && m.ports.is_none()
                && m.icmp.as_ref().is_none_or(|i| !i.invert && i.v.0 == 8),
            "line {}: a match rte_acl's 5-tuple format cannot express",
            r.line
        );
        let (sa, sb) = range(&m.sport)?;
        let (da, db) = range(&m.dport)?;
        let proto = match &m.proto {
            None => "0x00/0x00".to_string(),
            Some(p) if !p.invert => format!("{:#04x}/0xff", p.v),
            Some(_) => anyhow::bail!("line {}: a negated protocol", r.line),
        };
        s.push_str(&format!(
            "@{}\t{}\t{sa} : {sb}\t{da} : {db}\t{proto}\n",
            pfx(&m.src)?,
            pfx(&m.dst)?
        ));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The "compiled >= 50x linear" target is the classifier alone (the
    /// uncached column): a run whose flow cache is 300x the walk while the
    /// classifier is 40x does not meet it (the old line read the cached
    /// column and said "met").
    #[test]
    fn the_50x_target_reads_the_uncached_classifier() {
        // [producer][no filter, linear, compiled, cached], pkt/s.
        let m = [[30e6, 0.1e6, 4e6, 30e6], [20e6, 0.1e6, f64::NAN, 20e6]];
        let v = print_targets(None, Some(&m), None);
        assert_eq!(v[1], Verdict::NotMet, "40x uncached is under 50x");
        let m = [[30e6, 0.1e6, 8e6, 30e6], [20e6, 0.1e6, f64::NAN, 20e6]];
        assert_eq!(print_targets(None, Some(&m), None)[1], Verdict::Met);
        // Nothing measured at 2000 rules: not measured, never met.
        assert_eq!(print_targets(None, None, None), [Verdict::NotMeasured; 3]);
    }
}
