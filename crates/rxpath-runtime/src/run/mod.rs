//! `rxpath run`: the pipeline on threads, with a report per interval.
//! The configuration is in `run/config.rs`, the reports in `run/report.rs`,
//! the body of a NAPI thread in `run/napi_thread.rs`; this file sets up the
//! devices, the workers and the threads, and collects them.

mod config;
mod drive;
mod napi_thread;
mod report;
mod watch;

pub use config::*;
pub use report::*;

use drive::{collect, drive, stalls_of, Source};
use napi_thread::{napi_thread, Live, ThreadOut};

use crate::path_ends::{PathRest, Sinks, Tap};
use crate::steer::{pure_worker_thread, SteerStage, Workers};
use rxpath_core::gro::{GroConfig, GroKnob};
use rxpath_core::ip::IpStage;
use rxpath_core::napi::{Napi, NapiTable};
use rxpath_core::packet::{RxDrop, Sink};
use rxpath_core::sock::Port;
use rxpath_core::stats::{LatencyHist, NapiStats, SoftnetStats};
use rxpath_core::steer::{SeqSource, SteerMode, Worker};

use rxpath_dev::packet::PacketQueue;
use rxpath_dev::sim::{self, ColdQueue, FaultWindows, NullQueue, Traffic};
use rxpath_dev::sys::xdp::{XdpMode, XdpProgram, XdpQueue};
use rxpath_dev::RxQueue;
use rxpath_wire::toeplitz::Toeplitz;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// What the workers of the bottom half report (steering on).
#[derive(Debug, Default)]
struct SteerOut {
    workers: Vec<crate::steer::WorkerReport>,
    order: Option<crate::steer::OrderReport>,
    accel: Option<crate::steer::AccelReport>,
}

/// Run the pipeline as configured; `on_tick` is called once per
/// [`RunConfig::tick`] with totals so far.
pub fn run(cfg: &RunConfig, mut on_tick: impl FnMut(&Tick)) -> Result<Report, RunError> {
    validate(cfg)?;
    let tz = Toeplitz::default();
    let mut traffic = Traffic::new(cfg.traffic, &tz);
    let mut ctx = Ctx::new(cfg, &mut on_tick);
    match &cfg.producer {
        Producer::Null if cfg.null_cold => {
            let frames = sim::cold_frames();
            let qs = (0..cfg.sim.queues)
                .map(|q| ColdQueue::new(q as u16, frames, &mut traffic, 0xc01d ^ q as u64))
                .collect::<Result<Vec<_>, _>>()?;
            // No interrupt line: always polling mode.
            own_queues(cfg, qs, false, &mut ctx)
        }
        Producer::Null => {
            let mut qs = Vec::with_capacity(cfg.sim.queues);
            for q in 0..cfg.sim.queues {
                // Each queue gets the flows RSS puts on it, as a NIC's.
                let mut nq = NullQueue::for_rss(q as u16, cfg.null_frames, &mut traffic, &cfg.sim)?;
                // Order is measured at delivery when steering is on.
                nq.number_datagrams(cfg.steer.mode != SteerMode::None);
                qs.push(nq);
            }
            // Null queues have no interrupt line: always polling mode.
            own_queues(cfg, qs, false, &mut ctx)
        }
        Producer::Xdp { iface, fallback } => run_xdp(cfg, iface, *fallback, &mut ctx),
        Producer::Packet { iface } => run_packet(cfg, iface.as_str(), &mut ctx),
        Producer::Thread { .. } | Producer::Pcap { .. } => run_sim(cfg, traffic, &mut ctx),
    }
}

/// What every kind of run shares while it sets up its queues and drives
/// them.
struct Ctx<'a> {
    table: NapiTable<u16>,
    gro_cfg: Option<GroConfig>,
    cores: Vec<core_affinity::CoreId>,
    pin: bool,
    stop_napi: Arc<AtomicBool>,
    window_over: Arc<AtomicBool>,
    on_tick: &'a mut dyn FnMut(&Tick),
}

impl<'a> Ctx<'a> {
    fn new(cfg: &RunConfig, on_tick: &'a mut dyn FnMut(&Tick)) -> Ctx<'a> {
        // One gro_flush_timeout per device, shared by its NAPIs.
        let knob = match &cfg.knobs {
            Some(k) => k.gro_flush_timeout.clone(),
            None => GroKnob::new(cfg.gro.map_or(0, |g| g.flush_timeout_ns)),
        };
        let gro_cfg = cfg.gro.map(|g| GroConfig {
            enabled: true,
            flush_timeout: knob.clone(),
            adaptive: g.adaptive,
            // No sockets: no datagram is for a socket with UDP_GRO.
            udp: None,
        });
        Ctx {
            table: NapiTable::default(),
            gro_cfg,
            cores: core_affinity::get_core_ids().unwrap_or_default(),
            pin: cfg.pin,
            stop_napi: Arc::new(AtomicBool::new(false)),
            window_over: Arc::new(AtomicBool::new(false)),
            on_tick,
        }
    }
}

/// The core thread `i` is pinned to, if pinning.
fn pin_core(cores: &[core_affinity::CoreId], pin: bool, i: usize) -> Option<core_affinity::CoreId> {
    (pin && !cores.is_empty()).then(|| cores[i % cores.len()])
}

/// An interface through AF_XDP (`fallback`: AF_PACKET if XDP fails).
fn run_xdp(
    cfg: &RunConfig,
    iface: &IfName,
    fallback: bool,
    ctx: &mut Ctx,
) -> Result<Report, RunError> {
    let name = iface.as_str();
    check_iface(name)?;
    // What AF_XDP takes besides: --mode xdp stops, auto falls back at
    // once (trying would cost a verifier dump to say the same).
    if let Err(e) = config::check_caps(name, true) {
        if !fallback {
            return Err(e);
        }
        let missing = config::missing_caps(rxpath_os::sched::cap_set("CapEff"), true);
        log::warn!(
            "AF_XDP on {name} {}; using AF_PACKET instead",
            missing.unwrap_or_default()
        );
        let mut c = cfg.clone();
        c.producer = Producer::Packet { iface: *iface };
        return run_packet(&c, name, ctx);
    }
    let nq = cfg.sim.queues;
    let opened = XdpProgram::attach(name, nq as u32, cfg.xdp_filter).and_then(|prog| {
        let prog = Arc::new(prog);
        // Several queues draw from one UMEM (XDP_SHARED_UMEM).
        let qs = XdpQueue::open_all(
            name,
            nq as u16,
            cfg.sim.frames_per_queue,
            prog.clone(),
            cfg.interrupts,
            0,
        )?;
        Ok((prog.mode, qs))
    });
    let (mode, qs) = match opened {
        Ok(x) => x,
        Err(e) if fallback => {
            log::warn!("AF_XDP on {name} failed ({e}); using AF_PACKET instead");
            let mut c = cfg.clone();
            c.producer = Producer::Packet { iface: *iface };
            return run_packet(&c, name, ctx);
        }
        Err(e) => return Err(RunError::Device(format!("AF_XDP on {name}: {e}"))),
    };
    log::info!("{}", xdp_backend(name, mode, &qs));
    let (watch, watched) = watch::IfaceWatch::start(name, cfg);
    let r = own_queues(&watched, qs, cfg.interrupts, ctx);
    with_watch(r, watch, cfg)
}

/// An interface through AF_PACKET (a fanout group for several queues).
fn run_packet(cfg: &RunConfig, name: &str, ctx: &mut Ctx) -> Result<Report, RunError> {
    check_iface(name)?;
    let nq = cfg.sim.queues;
    let group = (std::process::id() & 0xffff) as u16;
    let mut qs = Vec::with_capacity(nq);
    for q in 0..nq {
        let pq = PacketQueue::open(
            name,
            q as u16,
            (nq > 1).then_some(group),
            cfg.sim.frames_per_queue,
            cfg.interrupts,
            // Bulk receive: TPACKET_V3 blocks.
            false,
        )
        .map_err(|e| RunError::Device(format!("AF_PACKET on {name}: {e}")))?;
        qs.push(pq);
    }
    let (watch, watched) = watch::IfaceWatch::start(name, cfg);
    let r = own_queues(&watched, qs, cfg.interrupts, ctx);
    with_watch(r, watch, cfg)
}

/// The simulated NIC, fed by a producer thread (generated flows or a pcap
/// replay).
/// The capture a pcap replay plays, and whether its checksums are partial
/// ones to trust: a capture taken where the sender offloads checksums
/// (every TCP/UDP packet carries the pseudo-header sum), with `--csum
/// auto`, is trusted by value, as for a veth.
fn load_trace(cfg: &RunConfig) -> Result<(Option<rxpath_dev::pcap::Trace>, bool), RunError> {
    let trace = match &cfg.producer {
        Producer::Pcap { path, .. } => Some(
            rxpath_dev::pcap::Trace::load(path)
                .map_err(|e| RunError::Device(format!("pcap replay: {e}")))?,
        ),
        _ => None,
    };
    let partial = cfg.csum == rxpath_core::ip::CsumPolicy::Auto
        && trace.as_ref().is_some_and(|t| t.partial_checksums());
    if partial {
        log::info!(
            "the capture's first TCP/UDP packets all carry partial checksums (a sender with \
             checksum offload): --csum auto trusts partial checksums for this replay (--csum verify to check them)"
        );
    }
    Ok((trace, partial))
}

/// The simulated NIC's producer thread: the capture replayed (setting
/// `done` at its end) or the generated traffic, until `stop`; it hands
/// the port back when it ends.
fn spawn_producer(
    mut port: sim::SimPort,
    kind: Producer,
    trace: Option<rxpath_dev::pcap::Trace>,
    mut traffic: Traffic,
    core: Option<core_affinity::CoreId>,
    (stop, done, finished): (Arc<AtomicBool>, Arc<AtomicBool>, Arc<AtomicBool>),
) -> Result<thread::JoinHandle<sim::SimPort>, RunError> {
    thread::Builder::new()
        .name("rxpath-nic".into())
        .spawn(move || {
            // Set when the thread ends, by a panic too.
            let _finished = SetOnDrop(finished);
            if let Some(c) = core {
                core_affinity::set_for_current(c);
            }
            match (kind, trace) {
                (
                    Producer::Pcap {
                        loops, paced, pps, ..
                    },
                    Some(t),
                ) => {
                    let pace = match (paced, pps) {
                        (true, _) => rxpath_dev::pcap::Pace::Recorded,
                        (false, Some(r)) => rxpath_dev::pcap::Pace::Pps(r),
                        (false, None) => rxpath_dev::pcap::Pace::Lossless,
                    };
                    port.run_trace(&t, loops, pace, &stop);
                    done.store(true, Ordering::Release);
                }
                (Producer::Thread { pps }, _) => {
                    port.run(&mut traffic, &stop, pps, 64);
                }
                _ => {}
            }
            port
        })
        .map_err(|e| RunError::Thread(e.to_string()))
}

fn run_sim(cfg: &RunConfig, traffic: Traffic, ctx: &mut Ctx) -> Result<Report, RunError> {
    let (trace, partial) = load_trace(cfg)?;
    let (mut port, host) = sim::build(&cfg.sim)?;
    // Accelerated RFS: the NIC's ntuple table, filled by the host.
    let rules = cfg.steer.accel_rfs.then(|| {
        let r = Arc::new(sim::FlowRules::new(1024));
        port.set_flow_rules(r.clone());
        r
    });
    let mut groups: Vec<Vec<Napi<sim::SimRxQueue>>> =
        (0..cfg.threads).map(|_| Vec::new()).collect();
    for q in host {
        let i = q.queue_index() as usize;
        let mut napi = Napi::new(q, cfg.weight, cfg.bundle, cfg.interrupts);
        napi.set_gro(ctx.gro_cfg.clone());
        napi.set_csum(cfg.csum, partial);
        ctx.table.add(&mut napi, |n| n.queue().queue_index());
        groups[i % cfg.threads].push(napi);
    }
    let stop_producer = Arc::new(AtomicBool::new(false));
    let producer_finished = Arc::new(AtomicBool::new(false));
    // A replay of a file with an end ends the run when it is done.
    let source_done = Arc::new(AtomicBool::new(false));
    let done = source_done.clone();
    let producer_core = if ctx.cores.len() > 1 {
        pin_core(&ctx.cores, ctx.pin, ctx.cores.len() - 1)
    } else {
        None
    };
    let producer = spawn_producer(
        port,
        cfg.producer.clone(),
        trace,
        traffic,
        producer_core,
        (stop_producer.clone(), done, producer_finished.clone()),
    )?;
    let stop_p = stop_producer.clone();
    let mut c = cfg.clone();
    c.local_traffic = partial;
    let (cores, pin) = (&ctx.cores, ctx.pin);
    let (outs, elapsed, _live, steer) = drive(
        &c,
        groups,
        &|i| pin_core(cores, pin, i),
        &ctx.stop_napi,
        &ctx.window_over,
        Source {
            // Stopping waits for the producer's last frames to be in the
            // rings: the NAPI threads' drain comes after it, and a frame
            // written later would be offered and never received.
            stop: Some(move || {
                stop_p.store(true, Ordering::Relaxed);
                wait_for(&producer_finished, Duration::from_secs(10));
            }),
            done: Some(source_done),
            rules,
        },
        ctx.on_tick,
    )
    .inspect_err(|_| stop_producer.store(true, Ordering::Relaxed))?;
    let port = producer
        .join()
        .map_err(|_| RunError::Thread("producer panicked".into()))?;
    let mut faults = stalls_of(&outs, &steer.workers);
    faults.starve_windows = port.starve_windows();
    let (queues, softnet, received_in_window, host, latency) = collect(outs);
    let pool = port.reclaim(host);
    Ok(Report {
        config: cfg.clone(),
        elapsed,
        queues,
        softnet,
        received_in_window,
        frames_total: pool.umem().frames(),
        frames_home: pool.available(),
        latency,
        workers: steer.workers,
        order: steer.order,
        accel_rfs: steer.accel,
        stopped_early: None,
        faults,
    })
}

/// How AF_XDP came up on `iface`: XDP mode, copy or zero-copy, queues.
/// A run on a watched interface: the report with why it stopped early (if
/// it did), and the caller's configuration (not the watcher's stop flag).
fn with_watch(
    r: Result<Report, RunError>,
    watch: watch::IfaceWatch,
    cfg: &RunConfig,
) -> Result<Report, RunError> {
    let why = watch.finish();
    r.map(|mut rep| {
        rep.stopped_early = why;
        rep.config = cfg.clone();
        rep
    })
}

pub(crate) fn xdp_backend(iface: &str, mode: XdpMode, qs: &[XdpQueue]) -> String {
    format!(
        "AF_XDP on {iface}: {} XDP, {} mode, {} queue(s){}",
        if mode == XdpMode::Native {
            "native"
        } else {
            "generic (skb)"
        },
        if qs.iter().all(|q| q.zero_copy()) {
            "zero-copy"
        } else {
            "copy"
        },
        qs.len(),
        if qs.iter().any(|q| q.shares_umem()) {
            ", one shared UMEM"
        } else {
            ""
        }
    )
}

/// Queues that own their frame pool (null, AF_PACKET, AF_XDP).
trait OwnPool {
    fn into_pool(self) -> rxpath_dev::FramePool;
}
impl OwnPool for NullQueue {
    fn into_pool(self) -> rxpath_dev::FramePool {
        NullQueue::into_pool(self)
    }
}
impl OwnPool for ColdQueue {
    fn into_pool(self) -> rxpath_dev::FramePool {
        ColdQueue::into_pool(self)
    }
}
impl OwnPool for PacketQueue {
    fn into_pool(self) -> rxpath_dev::FramePool {
        PacketQueue::into_pool(self)
    }
}
impl OwnPool for XdpQueue {
    fn into_pool(self) -> rxpath_dev::FramePool {
        XdpQueue::into_pool(self)
    }
}

/// Run NAPIs over queues that own their frames, and gather every frame back.
#[allow(clippy::too_many_arguments)]
fn own_queues<Q: RxQueue + OwnPool + Send + 'static>(
    cfg: &RunConfig,
    qs: Vec<Q>,
    interrupts: bool,
    ctx: &mut Ctx,
) -> Result<Report, RunError> {
    let mut groups: Vec<Vec<Napi<Q>>> = (0..cfg.threads).map(|_| Vec::new()).collect();
    let local_traffic = match &cfg.producer {
        Producer::Xdp { iface, .. } | Producer::Packet { iface } => {
            rxpath_dev::sys::iface::carries_local_traffic(iface.as_str())
        }
        _ => false,
    };
    // A NAPI thread with no backlog of its own has nothing to wait for but
    // its queues: it waits on their sockets itself.
    let inline =
        interrupts && !cfg.irq_thread && !cfg.idle_poll && cfg.steer.mode == SteerMode::None;
    for (i, mut q) in qs.into_iter().enumerate() {
        if inline {
            q.irq_inline();
        }
        let mut napi = Napi::new(q, cfg.weight, cfg.bundle, interrupts);
        napi.set_gro(ctx.gro_cfg.clone());
        napi.set_csum(cfg.csum, local_traffic);
        ctx.table.add(&mut napi, |n| n.queue().queue_index());
        groups[i % cfg.threads].push(napi);
    }
    if cfg.steer.accel_rfs {
        return Err(RunError::Config(
            "--accel-rfs needs the simulated NIC (its ntuple rules); an interface's are not programmed".into(),
        ));
    }
    let (cores, pin) = (&ctx.cores, ctx.pin);
    let (outs, elapsed, _live, steer) = drive(
        cfg,
        groups,
        &|i| pin_core(cores, pin, i),
        &ctx.stop_napi,
        &ctx.window_over,
        Source::<fn()> {
            stop: None,
            done: None,
            rules: None,
        },
        ctx.on_tick,
    )?;
    let faults = stalls_of(&outs, &steer.workers);
    let (queues, softnet, received_in_window, host, latency) = collect(outs);
    let (mut frames_total, mut frames_home) = (0, 0);
    // Queues on a shared UMEM each hold their share of one region: count
    // each region once.
    let mut regions = std::collections::BTreeSet::new();
    for q in host {
        let pool = q.into_pool();
        if regions.insert(pool.umem().id()) {
            frames_total += pool.umem().frames();
        }
        frames_home += pool.available();
    }
    Ok(Report {
        config: cfg.clone(),
        elapsed,
        queues,
        softnet,
        received_in_window,
        frames_total,
        frames_home,
        latency,
        workers: steer.workers,
        order: steer.order,
        accel_rfs: steer.accel,
        stopped_early: None,
        faults,
    })
}

/// Wait until `flag` is set, at most `limit`.
fn wait_for(flag: &AtomicBool, limit: Duration) {
    let t0 = std::time::Instant::now();
    while !flag.load(Ordering::Acquire) && t0.elapsed() < limit {
        thread::sleep(Duration::from_millis(1));
    }
}

/// Sets its flag when dropped.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}
