//! `rxpath run`: the pipeline on threads, with a report per interval.
//! The configuration is in `run/config.rs`, the reports in `run/report.rs`,
//! the body of a NAPI thread in `run/napi_thread.rs`; this file sets up the
//! devices, the workers and the threads, and collects them.

mod config;
mod napi_thread;
mod report;
mod watch;

pub use config::*;
pub use report::*;

use napi_thread::{napi_thread, Live, ThreadOut};

use crate::stages::{PathRest, Sinks, Tap};
use crate::steer::{pure_worker_thread, BottomHalf, SteerStage, Workers};
use rxpath_core::filter::FilterStage;
use rxpath_core::gro::{GroConfig, GroKnob};
use rxpath_core::ip::IpStage;
use rxpath_core::napi::{Napi, NapiTable};
use rxpath_core::packet::{RxDrop, Sink};
use rxpath_core::sock::Port;
use rxpath_core::stats::{LatencyHist, NapiStats, SoftnetStats};
use rxpath_core::steer::{SeqSource, SteerMode, Worker};

use rxpath_dev::packet::PacketQueue;
use rxpath_dev::sim::{self, FaultWindows, NullQueue, Traffic};
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
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let pin_to = |i: usize| {
        if cfg.pin && !cores.is_empty() {
            Some(cores[i % cores.len()])
        } else {
            None
        }
    };
    let mut table: NapiTable<u16> = NapiTable::default();
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
    let stop_napi = Arc::new(AtomicBool::new(false));
    let window_over = Arc::new(AtomicBool::new(false));
    match cfg.producer {
        Producer::Null => {
            let mut qs = Vec::with_capacity(cfg.sim.queues);
            for q in 0..cfg.sim.queues {
                let mut nq = NullQueue::new(q as u16, cfg.null_frames, &mut traffic)?;
                // Order is measured at delivery when steering is on.
                nq.number_datagrams(cfg.steer.mode != SteerMode::None);
                qs.push(nq);
            }
            // Null queues have no interrupt line: always polling mode.
            own_queues(
                cfg,
                qs,
                false,
                &mut table,
                &gro_cfg,
                &pin_to,
                &stop_napi,
                &window_over,
                &mut on_tick,
            )
        }
        Producer::Xdp { iface, fallback } => {
            let name = iface.as_str();
            check_iface(name)?;
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
                    eprintln!("rxpath: AF_XDP on {name} failed ({e}); using AF_PACKET instead");
                    let mut c = cfg.clone();
                    c.producer = Producer::Packet { iface };
                    return run(&c, on_tick);
                }
                Err(e) => return Err(RunError::Device(format!("AF_XDP on {name}: {e}"))),
            };
            eprintln!("rxpath: {}", xdp_backend(name, mode, &qs));
            let (watch, watched) = watch::IfaceWatch::start(name, cfg);
            let r = own_queues(
                &watched,
                qs,
                cfg.interrupts,
                &mut table,
                &gro_cfg,
                &pin_to,
                &stop_napi,
                &window_over,
                &mut on_tick,
            );
            with_watch(r, watch, cfg)
        }
        Producer::Packet { iface } => {
            let name = iface.as_str();
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
            let r = own_queues(
                &watched,
                qs,
                cfg.interrupts,
                &mut table,
                &gro_cfg,
                &pin_to,
                &stop_napi,
                &window_over,
                &mut on_tick,
            );
            with_watch(r, watch, cfg)
        }
        Producer::Thread { .. } | Producer::Pcap { .. } => {
            let trace = match &cfg.producer {
                Producer::Pcap { path, .. } => Some(
                    rxpath_dev::pcap::Trace::load(path)
                        .map_err(|e| RunError::Device(format!("pcap replay: {e}")))?,
                ),
                _ => None,
            };
            let producer_kind = cfg.producer.clone();
            // A capture taken where the sender offloads checksums (every
            // TCP/UDP packet carries the pseudo-header sum): with `auto`,
            // trust such partial checksums by value, as for a veth.
            let partial = cfg.csum == rxpath_core::ip::CsumPolicy::Auto
                && trace.as_ref().is_some_and(|t| t.partial_checksums());
            if partial {
                eprintln!(
                    "rxpath: the capture's first TCP/UDP packets all carry partial checksums (a sender with \
                     checksum offload): --csum auto trusts partial checksums for this replay (--csum verify to check them)"
                );
            }
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
                napi.set_gro(gro_cfg.clone());
                napi.set_csum(cfg.csum, partial);
                table.add(&mut napi, |n| n.queue().queue_index());
                groups[i % cfg.threads].push(napi);
            }
            let stop_producer = Arc::new(AtomicBool::new(false));
            // A replay of a file with an end ends the run when it is done.
            let source_done = Arc::new(AtomicBool::new(false));
            let done = source_done.clone();
            let producer_core = if cores.len() > 1 {
                pin_to(cores.len() - 1)
            } else {
                None
            };
            let sp = stop_producer.clone();
            let producer = thread::Builder::new()
                .name("rxpath-nic".into())
                .spawn(move || {
                    if let Some(c) = producer_core {
                        core_affinity::set_for_current(c);
                    }
                    match (producer_kind, trace) {
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
                            port.run_trace(&t, loops, pace, &sp);
                            done.store(true, Ordering::Release);
                        }
                        (Producer::Thread { pps }, _) => {
                            port.run(&mut traffic, &sp, pps, 64);
                        }
                        _ => {}
                    }
                    port
                })
                .map_err(|e| RunError::Thread(e.to_string()))?;
            let stop_p = stop_producer.clone();
            let mut c = cfg.clone();
            c.local_traffic = partial;
            let (outs, elapsed, _live, steer) = drive(
                &c,
                groups,
                &pin_to,
                &stop_napi,
                &window_over,
                Source {
                    stop: Some(move || stop_p.store(true, Ordering::Relaxed)),
                    done: Some(source_done),
                    rules,
                },
                &mut on_tick,
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
    }
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
    table: &mut NapiTable<u16>,
    gro_cfg: &Option<GroConfig>,
    pin_to: &dyn Fn(usize) -> Option<core_affinity::CoreId>,
    stop_napi: &Arc<AtomicBool>,
    window_over: &Arc<AtomicBool>,
    on_tick: &mut dyn FnMut(&Tick),
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
        napi.set_gro(gro_cfg.clone());
        napi.set_csum(cfg.csum, local_traffic);
        table.add(&mut napi, |n| n.queue().queue_index());
        groups[i % cfg.threads].push(napi);
    }
    if cfg.steer.accel_rfs {
        return Err(RunError::Config(
            "--accel-rfs needs the simulated NIC (its ntuple rules); an interface's are not programmed".into(),
        ));
    }
    let (outs, elapsed, _live, steer) = drive(
        cfg,
        groups,
        pin_to,
        stop_napi,
        window_over,
        Source::<fn()> {
            stop: None,
            done: None,
            rules: None,
        },
        on_tick,
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

/// The stalls the NAPI threads and the pure workers injected.
fn stalls_of<Q: RxQueue>(
    outs: &[ThreadOut<Q>],
    workers: &[crate::steer::WorkerReport],
) -> FaultReport {
    let (n, d) = outs.iter().fold((0, Duration::ZERO), |(n, d), o| {
        (n + o.stalls.0, d + o.stalls.1)
    });
    FaultReport {
        starve_windows: 0,
        stalls: n,
        stalled_ms: d.as_secs_f64() * 1e3,
        worker_stalls: workers.iter().map(|w| w.stalls).sum(),
        worker_stalled_ms: workers.iter().map(|w| w.stalled_ms).sum(),
    }
}

type Collected<Q> = (
    Vec<QueueReport>,
    Vec<SoftnetStats>,
    u64,
    Vec<Q>,
    Option<LatencyHist>,
);

/// Gather what the NAPI threads gave back: per-queue reports and the
/// queues themselves, both in queue order.
fn collect<Q: RxQueue>(outs: Vec<ThreadOut<Q>>) -> Collected<Q> {
    let (mut queues, mut softnet, mut host, mut received) = (Vec::new(), Vec::new(), Vec::new(), 0);
    let mut latency: Option<LatencyHist> = None;
    for o in outs {
        if let Some(l) = &o.latency {
            latency.get_or_insert_with(LatencyHist::default).merge(l);
        }
        softnet.push(o.softnet);
        received += o.received_at_stop;
        for n in o.napis {
            queues.push(queue_report(&n));
            host.push(n.into_queue());
        }
    }
    host.sort_by_key(|q| q.queue_index());
    queues.sort_by_key(|q| q.queue);
    (queues, softnet, received, host, latency)
}

type Outs<Q> = (Vec<ThreadOut<Q>>, Duration, Live, SteerOut);

/// The workers of the bottom half over the queues of `groups` (None:
/// steering off).
fn steer_workers<Q: RxQueue>(
    cfg: &RunConfig,
    groups: &[Vec<Napi<Q>>],
    rules: Option<Arc<sim::FlowRules>>,
) -> Option<Arc<Workers>> {
    if cfg.steer.mode == SteerMode::None {
        return None;
    }
    let max_q = groups
        .iter()
        .flatten()
        .map(|n| n.queue().queue_index() as usize)
        .max()
        .unwrap_or(0);
    let mut ports: Vec<Option<Port>> = (0..=max_q).map(|_| None).collect();
    for n in groups.iter().flatten() {
        ports[n.queue().queue_index() as usize] = Some(Port {
            umem: n.queue().umem().clone(),
            ret: Default::default(),
        });
    }
    // The simulated NIC numbers each UDP flow's datagrams.
    let seq = match cfg.producer {
        Producer::Thread { .. } | Producer::Null => SeqSource::TcpAndUdpCounter,
        _ => SeqSource::Tcp,
    };
    let mut w = Workers::new(
        &cfg.steer,
        crate::steer::Ports::Own(ports),
        groups.len(),
        seq,
        cfg.sock_flows.clone(),
    );
    if let Some(k) = &cfg.knobs {
        w.share_rps_mask(&k.rps_cpus);
        if cfg.steer.mode == SteerMode::Rfs {
            w.share_flow_cnt(&k.rps_flow_cnt);
        }
        k.workers.store(w.len(), Ordering::Relaxed);
    }
    Some(Arc::new(match rules {
        Some(r) => {
            let mut queue_worker = vec![None; max_q + 1];
            for (t, g) in groups.iter().enumerate() {
                for n in g {
                    queue_worker[n.queue().queue_index() as usize] = Some(t as Worker);
                }
            }
            w.with_accel(r, &queue_worker)
        }
        None => w,
    }))
}

/// What `drive` knows of the packet source: how to stop it, whether it
/// has ended (a replay of a file), and its ntuple rules (accelerated RFS).
struct Source<F> {
    stop: Option<F>,
    done: Option<Arc<AtomicBool>>,
    rules: Option<Arc<sim::FlowRules>>,
}

/// Start the NAPI threads, tick until the duration is over, stop the
/// producer (if any), let the threads drain and collect them.
fn drive<Q, F>(
    cfg: &RunConfig,
    groups: Vec<Vec<Napi<Q>>>,
    pin_to: &dyn Fn(usize) -> Option<core_affinity::CoreId>,
    stop_napi: &Arc<AtomicBool>,
    window_over: &Arc<AtomicBool>,
    source: Source<F>,
    on_tick: &mut dyn FnMut(&Tick),
) -> Result<Outs<Q>, RunError>
where
    Q: RxQueue + Send + 'static,
    F: FnOnce(),
{
    let live = Arc::new(Mutex::new(Live::default()));
    let capture = match &cfg.capture {
        Some(p) => Some(Arc::new(Mutex::new(
            rxpath_dev::pcap::Writer::create(p)
                .map_err(|e| RunError::Device(format!("capture: {e}")))?,
        ))),
        None => None,
    };
    // The capture file must outlive every tap: the writer is finished only
    // once all NAPI threads (which own the taps) have been joined.
    // IP input in front of the sink (not of rxdrop, the lowest RX level).
    let ip_cfg = match cfg.stack {
        StackKind::Rxdrop => None,
        StackKind::Sink | StackKind::Latency => Some(ip_config(cfg)),
    };
    let Source {
        stop: stop_producer,
        done: source_done,
        rules,
    } = source;
    let workers = steer_workers(cfg, &groups, rules);
    let rest = PathRest {
        kind: cfg.stack,
        cap: if cfg.capture_at == CaptureAt::Delivered {
            capture.clone()
        } else {
            None
        },
        filter: cfg.filter.clone(),
        ip: ip_cfg.clone(),
    };
    let t0 = Instant::now();
    let mut pure = Vec::new();
    if let Some(w) = &workers {
        for id in groups.len()..w.len() {
            let (w, rest) = (w.clone(), rest.clone());
            let core = pin_to(id);
            let idle_poll = cfg.idle_poll;
            let budget = cfg.softnet.netdev_budget;
            let stop_at = cfg
                .stop_worker
                .filter(|&(s, _)| s as usize == id)
                .map(|(_, d)| t0 + d);
            let f = cfg.sim.faults;
            let stall = FaultWindows::new(
                f.stall_ms,
                f.stall_every_ms,
                f.seed ^ (id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            );
            let h = thread::Builder::new()
                .name(format!("rxpath-bh/{id}"))
                .spawn(move || {
                    if let Some(c) = core {
                        core_affinity::set_for_current(c);
                    }
                    let bh = BottomHalf::for_path(&w, id as Worker, &rest, budget);
                    pure_worker_thread(bh, idle_poll, stop_at, stall)
                })
                .map_err(|e| RunError::Thread(e.to_string()))?;
            pure.push((id as Worker, h));
        }
    }
    let mut handles = Vec::new();
    for (t, mut napis) in groups.into_iter().enumerate() {
        let (stop, over, live) = (stop_napi.clone(), window_over.clone(), live.clone());
        let mut cap = capture.clone();
        if cfg.capture_at == CaptureAt::Rx {
            // Tap each NAPI before GRO instead of the end of the path.
            if let Some(w) = cap.take() {
                for n in napis.iter_mut() {
                    let w = w.clone();
                    n.set_rx_tap(Some(Box::new(move |bytes: &[u8], now: u64| {
                        let ts = Duration::from_nanos(now);
                        // A write error loses the capture, not the packet.
                        let _ = w
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .write(ts, &[bytes]);
                    })));
                }
            }
        }
        let core = pin_to(t);
        // Null queues have no interrupt line: always polling mode.
        let interrupts = cfg.interrupts && cfg.producer != Producer::Null;
        let idle_poll = cfg.idle_poll;
        let (kind, softnet) = (cfg.stack, cfg.softnet);
        let filter = cfg.filter.clone();
        let ip = ip_cfg.clone();
        let (wk, rest) = (workers.clone(), rest.clone());
        let knobs = cfg.knobs.clone();
        let f = cfg.sim.faults;
        let stall = FaultWindows::new(
            f.stall_ms,
            f.stall_every_ms,
            f.seed ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        );
        let h = thread::Builder::new()
            .name(format!("rxpath-napi/{t}"))
            .spawn(move || {
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                if let Some(w) = wk {
                    // The NAPI thread is worker t: steering after GRO, its
                    // own backlog in its loop.
                    let me = t as Worker;
                    w.register(me);
                    let bh = BottomHalf::for_path(&w, me, &rest, softnet.netdev_budget);
                    let stage = SteerStage::new(w.clone(), me, rest.full(&w));
                    return napi_thread(
                        t,
                        napis,
                        stage,
                        softnet,
                        interrupts,
                        idle_poll,
                        &stop,
                        &over,
                        &live,
                        Some(bh),
                        knobs,
                        stall,
                    );
                }
                // The same thread, whatever stack it runs.
                macro_rules! napi_thread_with {
                    ($stack:expr) => {
                        napi_thread(
                            t, napis, $stack, softnet, interrupts, idle_poll, &stop, &over, &live,
                            None, knobs, stall,
                        )
                    };
                }
                // Without a capture or a filter the common ends are their own
                // types, so the whole stack inlines into the poll loop; the
                // rest goes through the `Sinks` enum behind the tap.
                match (kind, cap, filter) {
                    (StackKind::Sink, None, None) => napi_thread_with!(IpStage::new(ip, Sink)),
                    (StackKind::Rxdrop, None, None) => napi_thread_with!(RxDrop),
                    (StackKind::Sink, None, Some(f)) => {
                        napi_thread_with!(IpStage::new(ip, FilterStage::new(f, Sink)))
                    }
                    (k, w, Some(f)) => napi_thread_with!(IpStage::new(
                        ip,
                        FilterStage::new(
                            f,
                            Tap {
                                inner: Sinks::of(k),
                                w
                            }
                        )
                    )),
                    (k, w, None) => {
                        napi_thread_with!(IpStage::new(
                            ip,
                            Tap {
                                inner: Sinks::of(k),
                                w
                            }
                        ))
                    }
                }
            })
            .map_err(|e| RunError::Thread(e.to_string()))?;
        handles.push(h);
    }
    let start = Instant::now();
    let mut next = start + cfg.tick;
    let end = start + cfg.duration;
    // Wake at least every 10 ms to see a replay end.
    let poll = Duration::from_millis(10);
    loop {
        let now = Instant::now();
        if now >= end
            || source_done
                .as_ref()
                .is_some_and(|d| d.load(Ordering::Acquire))
            || cfg.stop.as_ref().is_some_and(|d| d.load(Ordering::Acquire))
        {
            break;
        }
        thread::sleep(next.min(end).saturating_duration_since(now).min(poll));
        if Instant::now() >= next {
            next += cfg.tick;
            on_tick(&tick(&live, start, workers.as_deref()));
        }
    }
    window_over.store(true, Ordering::Release);
    let elapsed = start.elapsed();
    if let Some(f) = stop_producer {
        f();
    }
    // Give the producer's final flush time to land, then drain and stop.
    thread::sleep(Duration::from_millis(20));
    stop_napi.store(true, Ordering::Release);
    let mut outs: Vec<ThreadOut<Q>> = Vec::new();
    for h in handles {
        h.thread().unpark();
        outs.push(
            h.join()
                .map_err(|_| RunError::Thread("NAPI thread panicked".into()))?,
        );
    }
    let mut steer = SteerOut::default();
    if let Some(w) = &workers {
        for (t, o) in outs.iter().enumerate() {
            let c = o.worker.unwrap_or_default();
            steer.workers.push(w.report(t as Worker, &c));
        }
        for (id, h) in pure {
            let c = h
                .join()
                .map_err(|_| RunError::Thread("worker thread panicked".into()))?;
            steer.workers.push(w.report(id, &c));
        }
        steer.order = Some(w.order_report());
        steer.accel = w.accel_report();
    }
    let l = live.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(w) = capture.and_then(|c| Arc::try_unwrap(c).ok()) {
        w.into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .finish()
            .map_err(|e| RunError::Device(format!("capture: {e}")))?;
    }
    Ok((outs, elapsed, l, steer))
}

fn tick(live: &Mutex<Live>, start: Instant, workers: Option<&Workers>) -> Tick {
    let l = live.lock().unwrap_or_else(|e| e.into_inner());
    let mut napi = NapiStats::default();
    for (_, n, _) in &l.queues {
        napi.merge(n);
    }
    // What the workers share (backlog columns, wakeups); their threads'
    // own counters (time_squeeze, the path's) come with the report.
    let workers = workers.map_or_else(Vec::new, |w| {
        (0..w.len())
            .map(|id| w.report(id as Worker, &Default::default()))
            .collect()
    });
    Tick {
        elapsed: start.elapsed(),
        napi,
        device: sum_device(l.queues.iter().map(|q| q.2)),
        softnet: l.softnet,
        queues: l.queues.clone(),
        workers,
    }
}
