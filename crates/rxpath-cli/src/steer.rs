//! The steering knobs (`--steer`, `--workers`, ...), named as the kernel
//! names them.

use anyhow::{bail, Result};
use clap::Args;
use rxpath_core::steer::{SpreadPick, SteerConfig, SteerMode, Worker};
use std::time::Duration;

/// Flow steering between GRO and the rest of the path.
#[derive(Debug, Clone, Args)]
pub struct SteerArgs {
    /// none (the whole path on the NAPI thread), rps, rfs, spread (any
    /// worker, flow order restored before delivery), spread-unordered.
    #[arg(long, default_value = "none", value_parser = parse_mode)]
    pub steer: SteerMode,
    /// Workers of the bottom half; the NAPI threads are the first of them
    /// (default: one per core, at least --threads).
    #[arg(long)]
    pub workers: Option<usize>,
    /// rps_cpus of every RX queue: the workers RPS may pick, e.g. 0,1 or
    /// 0-3 (default: all).
    #[arg(long, value_name = "LIST")]
    pub rps_cpus: Option<String>,
    /// net.core.rps_sock_flow_entries (RFS).
    #[arg(long, default_value_t = 32768)]
    pub rps_sock_flow_entries: usize,
    /// rps_flow_cnt of every RX queue (RFS).
    #[arg(long, default_value_t = 4096)]
    pub rps_flow_cnt: usize,
    /// net.core.netdev_max_backlog: packets a worker's backlog holds.
    #[arg(long, default_value_t = 1000)]
    pub netdev_max_backlog: usize,
    /// Flow limit with this flow_limit_table_len (0: off): a backlog at
    /// least half full drops the flow that sent over half of its last 128
    /// packets.
    #[arg(long, default_value_t = 0, value_name = "TABLE_LEN")]
    pub flow_limit: usize,
    /// spread: least-loaded (the shortest backlog) or round-robin.
    #[arg(long, default_value = "least-loaded", value_parser = parse_pick)]
    pub spread_pick: SpreadPick,
    /// spread: sequence numbers in flight at most (more: dropped as
    /// reorder_full).
    #[arg(long, default_value_t = 8192)]
    pub reorder_window: usize,
    /// Take worker W offline after T (W@T, e.g. 1@2s): it finishes its
    /// queue and takes nothing new, as a CPU going down.
    #[arg(long, value_name = "W@T", value_parser = parse_stop)]
    pub stop_worker: Option<(u16, Duration)>,
}

fn parse_mode(s: &str) -> Result<SteerMode, String> {
    SteerMode::parse(s).ok_or_else(|| {
        format!("'{s}' is not a steering mode (none, rps, rfs, spread, spread-unordered)")
    })
}

fn parse_pick(s: &str) -> Result<SpreadPick, String> {
    match s {
        "round-robin" => Ok(SpreadPick::RoundRobin),
        "least-loaded" => Ok(SpreadPick::LeastLoaded),
        _ => Err(format!("'{s}': round-robin or least-loaded")),
    }
}

/// `0,2-3` → [0, 2, 3].
pub fn parse_list(s: &str) -> Result<Vec<Worker>, String> {
    let bad = || format!("'{s}' is not a worker list (e.g. 0,1 or 0-3)");
    let mut out = Vec::new();
    for part in s.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let a: Worker = a.trim().parse().map_err(|_| bad())?;
        let b: Worker = b.trim().parse().map_err(|_| bad())?;
        if a > b || b > 255 {
            return Err(bad());
        }
        out.extend(a..=b);
    }
    Ok(out)
}

fn parse_stop(s: &str) -> Result<(u16, Duration), String> {
    let (w, t) = s
        .split_once('@')
        .ok_or_else(|| format!("'{s}': expected W@T, e.g. 1@2s"))?;
    let w = w
        .parse()
        .map_err(|_| format!("'{s}': '{w}' is not a worker"))?;
    Ok((w, crate::opts::parse_duration(t)?))
}

impl Default for SteerArgs {
    /// The command line's defaults.
    fn default() -> Self {
        let d = SteerConfig::default();
        SteerArgs {
            steer: SteerMode::None,
            workers: None,
            rps_cpus: None,
            rps_sock_flow_entries: d.rps_sock_flow_entries,
            rps_flow_cnt: d.rps_flow_cnt,
            netdev_max_backlog: d.netdev_max_backlog,
            flow_limit: 0,
            spread_pick: d.pick,
            reorder_window: d.reorder_window,
            stop_worker: None,
        }
    }
}

impl SteerArgs {
    /// The steering configuration for a run with `threads` NAPI threads.
    pub fn config(&self, threads: usize) -> Result<SteerConfig> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let workers = match (self.steer, self.workers) {
            (_, Some(0)) => bail!("--workers must be at least 1"),
            (_, Some(w)) => w,
            (SteerMode::None, None) => threads.max(1),
            (_, None) => cores.max(threads),
        };
        let c = SteerConfig {
            mode: self.steer,
            workers,
            rps_cpus: match &self.rps_cpus {
                Some(l) => parse_list(l).map_err(anyhow::Error::msg)?,
                None => Vec::new(),
            },
            rps_sock_flow_entries: self.rps_sock_flow_entries,
            rps_flow_cnt: self.rps_flow_cnt,
            netdev_max_backlog: self.netdev_max_backlog,
            flow_limit: (self.flow_limit > 0).then_some(self.flow_limit),
            dev_weight: 64,
            pick: self.spread_pick,
            reorder_window: self.reorder_window,
        };
        c.validate().map_err(anyhow::Error::msg)?;
        Ok(c)
    }
}
