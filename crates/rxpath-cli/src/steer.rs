//! The steering knobs (`--steer`, `--workers`, ...), named as the kernel
//! names them.

use anyhow::{bail, Result};
use clap::Args;
use rxpath_core::steer::{SpreadPick, SteerConfig, SteerMode, Worker};
use std::time::Duration;

/// `net.core.rps_sock_flow_entries`: the kernel's limit (`1 << 29`).
pub const RPS_SOCK_FLOW_ENTRIES: std::ops::RangeInclusive<u64> = 0..=1 << 29;

/// `rps_flow_cnt` (the flag and `rxpath ctl set`): up to 2^20 entries
/// per RX queue (the kernel's limit, 2^32 on 64 bits, is a table of
/// 32 GiB per queue).
pub const RPS_FLOW_CNT: std::ops::RangeInclusive<u64> = 0..=1 << 20;

/// `net.core.netdev_max_backlog`: a worker's backlog is allocated up
/// front, so up to 2^20 packets (the kernel's default is 1000).
pub const NETDEV_MAX_BACKLOG: std::ops::RangeInclusive<u64> = 1..=1 << 20;

/// `--reorder-window`: its slots are allocated up front.
pub const REORDER_WINDOW: std::ops::RangeInclusive<u64> = 1..=1 << 20;

/// A `usize` flag within `r`; the error gives the range.
fn ranged(r: std::ops::RangeInclusive<u64>) -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(r)
}

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
    #[arg(long, default_value_t = 32768, value_parser = ranged(RPS_SOCK_FLOW_ENTRIES))]
    pub rps_sock_flow_entries: usize,
    /// rps_flow_cnt of every RX queue (RFS).
    #[arg(long, default_value_t = 4096, value_parser = ranged(RPS_FLOW_CNT))]
    pub rps_flow_cnt: usize,
    /// net.core.netdev_max_backlog: packets a worker's backlog holds.
    #[arg(long, default_value_t = 1000, value_parser = ranged(NETDEV_MAX_BACKLOG))]
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
    #[arg(long, default_value_t = 8192, value_parser = ranged(REORDER_WINDOW))]
    pub reorder_window: usize,
    /// rfs: accelerated RFS on the simulated NIC (ntuple rules put a flow
    /// on the RX queue whose NAPI thread is its reader's worker).
    #[arg(long)]
    pub accel_rfs: bool,
    /// rfs on the simulated NIC, which has no sockets: play the readers.
    /// Flow i's reader reads on worker LIST[i % len] (recorded in the sock
    /// flow table as recv would).
    #[arg(long, value_name = "LIST")]
    pub rfs_readers: Option<String>,
    /// With --rfs-readers: every MS milliseconds one random flow's reader
    /// moves to another worker of the list.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub rfs_migrate_ms: Option<u64>,
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
    Ok((w, crate::parse::parse_duration(t)?))
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
            accel_rfs: false,
            rfs_readers: None,
            rfs_migrate_ms: None,
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
            accel_rfs: self.accel_rfs,
        };
        c.validate().map_err(anyhow::Error::msg)?;
        Ok(c)
    }
}

/// Readers played for `rxpath run` (`--rfs-readers`): the sock flow table
/// they write, and the thread that moves them while the run lasts.
pub struct Readers {
    /// The RFS sock flow table.
    pub table: std::sync::Arc<rxpath_core::sock::SockFlowTable>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    mover: Option<std::thread::JoinHandle<u64>>,
}

impl Readers {
    /// Readers for the flows of `cfg`'s simulated traffic, if asked for.
    pub fn start(a: &SteerArgs, cfg: &rxpath_runtime::RunConfig) -> Result<Option<Readers>> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let Some(list) = &a.rfs_readers else {
            if a.rfs_migrate_ms.is_some() {
                bail!("--rfs-migrate-ms needs --rfs-readers");
            }
            return Ok(None);
        };
        if a.steer != SteerMode::Rfs {
            bail!("--rfs-readers needs --steer rfs");
        }
        let workers = parse_list(list).map_err(anyhow::Error::msg)?;
        if let Some(&w) = workers.iter().find(|&&w| w as usize >= cfg.steer.workers) {
            bail!(
                "--rfs-readers: worker {w} does not exist (--workers {})",
                cfg.steer.workers
            );
        }
        let tz = rxpath_wire::toeplitz::Toeplitz::default();
        let traffic = rxpath_dev::sim::Traffic::new(cfg.traffic, &tz);
        let hashes: Vec<u32> = (0..traffic.flows())
            .map(|i| tz.hash_flow(&traffic.flow_key(i), true))
            .collect();
        let table = std::sync::Arc::new(rxpath_core::sock::SockFlowTable::new(
            cfg.steer.rps_sock_flow_entries,
        ));
        for (i, h) in hashes.iter().enumerate() {
            table.record(*h, workers[i % workers.len()] as u32);
        }
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let mover = match a.rfs_migrate_ms {
            Some(0) => bail!("--rfs-migrate-ms must be at least 1"),
            Some(ms) => {
                let (t, s) = (table.clone(), stop.clone());
                Some(std::thread::spawn(move || {
                    let mut x = 0x2545_f491u32;
                    let mut moves = 0;
                    let every = std::time::Duration::from_millis(ms);
                    loop {
                        // Parked, not asleep: `finish` wakes it at once.
                        let due = std::time::Instant::now() + every;
                        while !s.load(Ordering::Relaxed) && std::time::Instant::now() < due {
                            std::thread::park_timeout(
                                due.saturating_duration_since(std::time::Instant::now()),
                            );
                        }
                        if s.load(Ordering::Relaxed) {
                            break;
                        }
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        let h = hashes[x as usize % hashes.len()];
                        t.record(h, workers[(x >> 8) as usize % workers.len()] as u32);
                        moves += 1;
                    }
                    moves
                }))
            }
            None => None,
        };
        Ok(Some(Readers { table, stop, mover }))
    }

    /// Stop moving readers; returns how many moves there were.
    pub fn finish(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let Some(m) = self.mover.take() else { return 0 };
        m.thread().unpark();
        m.join().unwrap_or(0)
    }
}
