//! `rxpath filter show|gen`, and `--filter` for `run` and `echo`: loading,
//! reloading on SIGHUP, and the counters at the end.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use rxpath_core::filter::gen::{generate, Shape};
use rxpath_core::filter::{Family, Filter, FilterHandle, FilterMode, Ruleset};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// `--filter` and friends.
#[derive(Debug, Clone, Args, Default)]
pub struct FilterArgs {
    /// An iptables-save (or ip6tables-save) file, table filter: its INPUT
    /// chain judges every packet after GRO and IP input. Give it twice for
    /// IPv4 and IPv6. SIGHUP reloads the files while packets flow.
    #[arg(long, value_name = "FILE")]
    pub filter: Vec<PathBuf>,
    /// linear (rule after rule, the kernel's cost) or compiled (per-field
    /// bit vectors).
    #[arg(long, value_parser = clap::value_parser!(FilterMode), default_value = "compiled")]
    pub filter_mode: FilterMode,
    /// Flow cache entries per judging thread in compiled mode: a flow's
    /// verdict and the counters it touches are remembered per exact key
    /// (the fields some rule looks at), as Open vSwitch's exact-match
    /// cache does; 0: every packet walks the classifier.
    #[arg(long, value_name = "ENTRIES", default_value_t = rxpath_core::filter::DEFAULT_FLOW_CACHE)]
    pub filter_cache: usize,
    /// At the end, write the rules with this run's counters here
    /// (iptables-save -c format; `rxpath filter show` lists it).
    #[arg(long, value_name = "FILE")]
    pub filter_counters: Option<PathBuf>,
}

fn read_all(files: &[PathBuf]) -> Result<Vec<(String, String)>> {
    files
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).with_context(|| format!("{}", p.display()))?;
            Ok((p.display().to_string(), text))
        })
        .collect()
}

/// Run `f` and say how long it took, in ms.
fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t0 = std::time::Instant::now();
    let v = f();
    (v, t0.elapsed().as_secs_f64() * 1e3)
}

fn describe(f: &Filter, build_ms: f64) -> String {
    let sets = f
        .sets()
        .map(|r| {
            format!(
                "{:?} {} rules {}, {} KiB",
                r.table().family,
                r.table().rules(),
                match r.mode() {
                    FilterMode::Linear => "linear",
                    FilterMode::Compiled => "compiled",
                },
                r.memory() / 1024
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    format!("{sets}; built in {build_ms:.1} ms")
}

/// A loaded filter and how to reload it.
#[derive(Debug)]
pub struct Loaded {
    /// The running filter.
    pub handle: Arc<FilterHandle>,
    args: FilterArgs,
    iface: String,
    hup: Arc<AtomicBool>,
    reloads: Arc<std::sync::atomic::AtomicU64>,
}

impl Loaded {
    /// Load the files of `a` for packets received on `iface`; `None` if no
    /// `--filter` was given.
    pub fn load(a: &FilterArgs, iface: &str) -> Result<Option<Loaded>> {
        if a.filter.is_empty() {
            return Ok(None);
        }
        let text = read_all(&a.filter)?;
        let (f, ms) = timed(|| Filter::load(&text, iface, a.filter_mode));
        let f = f.map_err(anyhow::Error::msg)?;
        eprintln!("rxpath: filter: {}", describe(&f, ms));
        let hup = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGHUP, hup.clone())
            .context("SIGHUP handler")?;
        Ok(Some(Loaded {
            handle: Arc::new(FilterHandle::new(Some(f)).with_flow_cache(a.filter_cache)),
            args: a.clone(),
            iface: iface.to_string(),
            hup,
            reloads: Arc::default(),
        }))
    }

    /// Reload the files if SIGHUP came (call it now and then, e.g. once a
    /// second). A file that does not load leaves the running set in place.
    pub fn poll_reload(&self) {
        if !self.hup.swap(false, Ordering::AcqRel) {
            return;
        }
        match read_all(&self.args.filter).and_then(|t| {
            let (f, ms) = timed(|| Filter::load(&t, &self.iface, self.args.filter_mode));
            f.map(|f| (f, ms)).map_err(anyhow::Error::msg)
        }) {
            Ok((f, ms)) => {
                let d = describe(&f, ms);
                // Judges finish their packet with the old set first (up to 1 s).
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
                self.handle.replace(f, || {
                    std::thread::yield_now();
                    std::time::Instant::now() < deadline
                });
                self.reloads.fetch_add(1, Ordering::AcqRel);
                eprintln!("rxpath: filter reloaded: {d}");
            }
            Err(e) => eprintln!("rxpath: filter reload failed, the running rules stay: {e:#}"),
        }
    }

    /// What the control socket needs to ask for a reload (the flag SIGHUP
    /// sets) and to count the reloads done.
    pub fn reload_handles(&self) -> (Arc<AtomicBool>, Arc<std::sync::atomic::AtomicU64>) {
        (self.hup.clone(), self.reloads.clone())
    }

    /// Per-rule counters as JSON.
    pub fn json(&self) -> serde_json::Value {
        let f = self.handle.current();
        let sets: Vec<serde_json::Value> = f
            .iter()
            .flat_map(|f| f.sets())
            .map(|r| {
                serde_json::json!({
                    "family": r.table().family,
                    "mode": r.mode(),
                    "rules": r.table().rules(),
                    "memory_bytes": r.memory(),
                    "counters": r.stats(),
                })
            })
            .collect();
        serde_json::Value::Array(sets)
    }

    /// Write the counters file if asked; say where.
    pub fn finish(&self) -> Result<()> {
        let Some(out) = &self.args.filter_counters else {
            return Ok(());
        };
        let f = self.handle.current();
        let text: String = f.iter().flat_map(|f| f.sets()).map(Ruleset::save).collect();
        std::fs::write(out, text).with_context(|| format!("{}", out.display()))?;
        eprintln!("rxpath: filter counters written to {}", out.display());
        Ok(())
    }
}

/// `rxpath filter` verbs.
#[derive(Debug, Subcommand)]
pub enum FilterCmd {
    /// Print a rule file's rules with their counters, like iptables -L -v -x -n.
    Show(ShowArgs),
    /// Write a ClassBench-shaped rule set (and traffic that hits it) to test with.
    Gen(GenArgs),
}

/// `rxpath filter show` arguments.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The iptables-save file.
    pub file: PathBuf,
    /// The interface rules with -i are judged for.
    #[arg(long, default_value = "eth0")]
    pub iface: String,
    /// JSON instead of the listing.
    #[arg(long)]
    pub json: bool,
}

/// `rxpath filter gen` arguments.
#[derive(Debug, Args)]
pub struct GenArgs {
    /// acl or fw.
    #[arg(long, default_value = "acl", value_parser = clap::value_parser!(Shape))]
    pub shape: Shape,
    /// Rules in INPUT.
    #[arg(long, default_value_t = 2000)]
    pub rules: usize,
    /// 4 or 6.
    #[arg(long, default_value_t = 4)]
    pub family: u8,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where to write the rule set.
    #[arg(long, short)]
    pub out: PathBuf,
    /// Also write this many packets of traffic as a pcap file.
    #[arg(long, value_name = "PCAP")]
    pub traffic: Option<PathBuf>,
    /// Packets of traffic.
    #[arg(long, default_value_t = 10_000)]
    pub packets: usize,
    /// Share of the traffic aimed at rules (the rest matches none).
    #[arg(long, default_value_t = 0.8)]
    pub hit: f64,
}

/// `rxpath filter`: show or generate rule sets.
pub fn filter_cmd(c: FilterCmd) -> Result<ExitCode> {
    match c {
        FilterCmd::Show(a) => {
            let text = std::fs::read_to_string(&a.file)
                .with_context(|| format!("{}", a.file.display()))?;
            let t = rxpath_core::filter::parse(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", a.file.display()))?;
            let lin = Ruleset::new(t.clone(), &a.iface, FilterMode::Linear);
            let (comp, build_ms) = timed(|| Ruleset::new(t, &a.iface, FilterMode::Compiled));
            if a.json {
                let v = serde_json::json!({
                    "family": lin.table().family,
                    "rules": lin.table().rules(),
                    "compiled_build_ms": build_ms,
                    "compiled_memory_bytes": comp.memory(),
                    "counters": lin.stats(),
                });
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{}", lin.listing());
                println!(
                    "{} rules ({:?}); compiled in {:.1} ms, {} KiB",
                    lin.table().rules(),
                    lin.table().family,
                    build_ms,
                    comp.memory() / 1024
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        FilterCmd::Gen(a) => {
            let fam = match a.family {
                4 => Family::V4,
                6 => Family::V6,
                o => bail!("--family must be 4 or 6, got {o}"),
            };
            let g = generate(a.shape, fam, a.rules, a.packets, a.hit, a.seed);
            std::fs::write(&a.out, &g.save).with_context(|| format!("{}", a.out.display()))?;
            println!("wrote {} rules to {}", a.rules, a.out.display());
            if let Some(p) = &a.traffic {
                let mut w = rxpath_dev::pcap::Writer::create(p)
                    .with_context(|| format!("{}", p.display()))?;
                for (i, probe) in g.traffic.iter().enumerate() {
                    let f = probe.frame([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], &[0u8; 18]);
                    w.write(std::time::Duration::from_micros(i as u64), &[&f])?;
                }
                w.finish()?;
                println!("wrote {} packets to {}", g.traffic.len(), p.display());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
