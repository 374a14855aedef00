//! `rxpath gen`: send traffic out of an interface, over AF_XDP TX (frames
//! written in place in our UMEM, posted in batches, completions reaped) or
//! AF_PACKET (`sendmmsg` batches), with rate control.

use crate::run::RunError;
use rxpath_dev::pcap::Trace;
use rxpath_dev::sim::{Traffic, TrafficConfig};
use rxpath_dev::sys::af_packet::RawSocket;
use rxpath_dev::sys::xdp::XdpTx;
use rxpath_wire::toeplitz::Toeplitz;
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// TX backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TxMode {
    /// AF_XDP TX ring.
    Xdp,
    /// AF_PACKET `send`.
    Packet,
}

/// What to send.
#[derive(Debug, Clone, Serialize)]
pub struct GenConfig {
    /// Interface.
    pub iface: String,
    /// Backend.
    pub mode: TxMode,
    /// Generated traffic (ignored with `pcap`).
    pub traffic: TrafficConfig,
    /// Send a pcap file's frames (in a loop) instead.
    pub pcap: Option<PathBuf>,
    /// Packets per second (None: as fast as possible).
    pub pps: Option<u64>,
    /// Stop after this many packets.
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Duration,
    /// Frames per batch.
    pub batch: usize,
    /// Set to stop early (a signal handler does); the report covers what
    /// was sent.
    #[serde(skip)]
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// What was sent.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct GenReport {
    /// Packets handed to the kernel.
    pub sent: u64,
    /// Completions (AF_XDP) or successful sends (AF_PACKET).
    pub completed: u64,
    /// Send errors (AF_PACKET) or frames not completed in time (AF_XDP).
    pub errors: u64,
    /// Time from first to last send.
    pub elapsed: Duration,
}

impl GenReport {
    /// Packets per second sent.
    pub fn pps(&self) -> f64 {
        self.sent as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

enum Source {
    Traffic(Traffic),
    Trace(Trace, usize),
}

impl Source {
    fn write(&mut self, buf: &mut [u8]) -> Option<usize> {
        match self {
            Source::Traffic(t) => t.write_next(buf).map(|w| w.len),
            Source::Trace(t, i) => {
                let (_, f) = t.packets.get(*i % t.packets.len().max(1))?;
                *i += 1;
                let n = f.len().min(buf.len());
                buf[..n].copy_from_slice(&f[..n]);
                Some(n)
            }
        }
    }
}

/// What `gen` sends: a capture's packets in a loop, or generated traffic.
fn source(cfg: &GenConfig) -> Result<Source, RunError> {
    Ok(match &cfg.pcap {
        Some(p) => {
            let t = Trace::load(p).map_err(|e| RunError::Device(format!("gen: {e}")))?;
            if t.packets.is_empty() {
                return Err(RunError::Config(format!(
                    "{} holds no packets",
                    p.display()
                )));
            }
            Source::Trace(t, 0)
        }
        None => {
            cfg.traffic.validate().map_err(RunError::Config)?;
            Source::Traffic(Traffic::new(cfg.traffic, &Toeplitz::default()))
        }
    })
}

/// Send as configured; `on_tick` gets the report so far once a second.
pub fn gen(cfg: &GenConfig, mut on_tick: impl FnMut(&GenReport)) -> Result<GenReport, RunError> {
    crate::run::check_iface(&cfg.iface)?;
    let mut src = source(cfg)?;
    let batch = cfg.batch.clamp(1, 1024);
    let limit = cfg.count.unwrap_or(u64::MAX);
    let start = Instant::now();
    let mut next_tick = start + Duration::from_secs(1);
    let mut rep = GenReport {
        sent: 0,
        completed: 0,
        errors: 0,
        elapsed: Duration::ZERO,
    };
    enum Tx {
        Xdp(Box<XdpTx>),
        Packet(RawSocket, Vec<Vec<u8>>),
    }
    let mut tx = match cfg.mode {
        TxMode::Xdp => {
            Tx::Xdp(Box::new(XdpTx::open(&cfg.iface, 0, 4096).map_err(|e| {
                RunError::Device(format!("AF_XDP TX on {}: {e}", cfg.iface))
            })?))
        }
        TxMode::Packet => Tx::Packet(
            RawSocket::bind(&cfg.iface)
                .map_err(|e| RunError::Device(format!("AF_PACKET TX on {}: {e}", cfg.iface)))?,
            vec![vec![0u8; 2048]; batch],
        ),
    };
    let stopped = || {
        cfg.stop
            .as_ref()
            .is_some_and(|s| s.load(std::sync::atomic::Ordering::Acquire))
    };
    while rep.sent < limit && start.elapsed() < cfg.duration && !stopped() {
        let now = start.elapsed();
        let due = match cfg.pps {
            Some(r) => ((now.as_nanos() * r as u128) / 1_000_000_000) as u64,
            None => rep.sent + batch as u64,
        };
        let n = due
            .saturating_sub(rep.sent)
            .min(batch as u64)
            .min(limit - rep.sent) as usize;
        if n == 0 {
            std::hint::spin_loop();
        } else {
            match &mut tx {
                Tx::Xdp(x) => {
                    let put = x.send_batch(n, |buf| src.write(buf));
                    rep.sent += put as u64;
                    rep.completed = x.completed;
                }
                Tx::Packet(s, bufs) => {
                    // Batched: one sendmmsg for up to `batch` frames.
                    let mut lens = Vec::with_capacity(n);
                    for b in bufs.iter_mut().take(n) {
                        let Some(len) = src.write(b) else { break };
                        lens.push(len);
                    }
                    let frames: Vec<&[u8]> =
                        bufs.iter().zip(&lens).map(|(b, &l)| &b[..l]).collect();
                    rep.sent += frames.len() as u64;
                    match s.send_batch(&frames) {
                        Ok(k) => {
                            rep.completed += k as u64;
                            rep.errors += (frames.len() - k) as u64;
                        }
                        Err(_) => rep.errors += frames.len() as u64,
                    }
                }
            }
        }
        if Instant::now() >= next_tick {
            next_tick += Duration::from_secs(1);
            rep.elapsed = start.elapsed();
            on_tick(&rep);
        }
    }
    rep.elapsed = start.elapsed();
    if let Tx::Xdp(x) = tx {
        let sent = x.sent;
        let (pool, completed) = x.finish(Duration::from_millis(500));
        rep.completed = completed;
        rep.errors = sent.saturating_sub(completed);
        if !pool.is_home() {
            return Err(RunError::Device("AF_XDP TX: frames lost".into()));
        }
    }
    Ok(rep)
}
