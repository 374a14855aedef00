//! `rxpath run`: the pipeline on threads, with a report per interval.

use crate::clock::MonotonicClock;
use crate::stages::{Sinks, Tap};
use rxpath_core::filter::{FilterHandle, FilterStage};
use rxpath_core::gro::{Adaptive, GroConfig, GroKnob, GroStats};
use rxpath_core::ip::CsumPolicy;
use rxpath_core::ip::{IpConfig, IpStage};
use rxpath_core::napi::{BundleMode, Napi, NapiId, NapiTable, NAPI_POLL_WEIGHT};
use rxpath_core::packet::{LatencySink, RxDrop, Sink, Stack};
use rxpath_core::softnet::{Softnet, SoftnetConfig};
use rxpath_core::stats::{LatencyHist, NapiStats, SoftnetStats};
use rxpath_core::time::Clock;
use rxpath_dev::packet::PacketQueue;
use rxpath_dev::sim::{self, NullQueue, SimConfig, SimError, Traffic, TrafficConfig};
use rxpath_dev::sys::xdp::{XdpFilter, XdpMode, XdpProgram, XdpQueue};
use rxpath_dev::{DeviceQueueStats, RxQueue};
use rxpath_wire::toeplitz::Toeplitz;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Where packets come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Producer {
    /// A producer thread on another core plays the NIC and writes every
    /// frame (cold data); `pps` limits its rate (None: as fast as possible).
    Thread {
        /// Offered packets per second, or as fast as possible.
        pps: Option<u64>,
    },
    /// Same-thread null queues: frames written once, handed out forever.
    /// Measures the engine alone. Always polling mode.
    Null,
    /// A real interface through AF_PACKET (TPACKET_V3 rings in a fanout
    /// group, one per queue).
    Packet {
        /// Interface name.
        iface: IfName,
    },
    /// A real interface through AF_XDP (an XDP program redirecting by
    /// queue into one AF_XDP socket per queue); with `fallback`, AF_PACKET
    /// is used when XDP cannot be, with a message.
    Xdp {
        /// Interface name.
        iface: IfName,
        /// Fall back to AF_PACKET if XDP fails.
        fallback: bool,
    },
    /// A pcap file replayed through the simulated NIC by a producer thread.
    Pcap {
        /// The file.
        path: PathBuf,
        /// Times to play it (0: until the run ends).
        loops: u64,
        /// Keep the recorded spacing (else as fast as possible).
        paced: bool,
    },
}

/// Capture points of the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CaptureAt {
    /// Every frame NAPI takes from the device, before GRO.
    Rx,
    /// What reaches the end of the path, after GRO (a merged chain is one
    /// packet).
    Delivered,
}

/// An interface name (at most 15 bytes, as IFNAMSIZ allows), stored inline
/// so that configurations stay `Copy`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct IfName([u8; 16]);

impl IfName {
    /// Check and store a name.
    pub fn new(name: &str) -> Result<IfName, RunError> {
        if name.is_empty() || name.len() > 15 || name.contains(['/', ' ', '\0']) {
            return Err(RunError::Config(format!("bad interface name '{name}'")));
        }
        let mut b = [0u8; 16];
        b[..name.len()].copy_from_slice(name.as_bytes());
        Ok(IfName(b))
    }
    /// The name.
    pub fn as_str(&self) -> &str {
        let n = self.0.iter().position(|&c| c == 0).unwrap_or(16);
        std::str::from_utf8(&self.0[..n]).unwrap_or("?")
    }
}

impl std::fmt::Debug for IfName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl Serialize for IfName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Check that `iface` exists and is up, and that we may open raw sockets;
/// each failure is one line that names the fix.
pub fn check_iface(iface: &str) -> Result<(), RunError> {
    // Asked through the socket API, so the answer is for this thread's
    // network namespace (sysfs shows the mount namespace's).
    match rxpath_dev::sys::af_packet::iface_up(iface) {
        Ok(None) => {
            return Err(RunError::Device(format!(
                "no interface named {iface} (see `ip link`; `rxpath lab up` makes a test pair rxp0/rxp1)"
            )))
        }
        Ok(Some(false)) => {
            return Err(RunError::Device(format!("interface {iface} is down: run `ip link set {iface} up`")))
        }
        _ => {}
    }
    if !rxpath_dev::sys::sched::is_root() {
        return Err(RunError::Device(format!(
            "opening {iface} needs CAP_NET_RAW: run as root, or `setcap cap_net_raw,cap_net_admin+ep $(which rxpath)`"
        )));
    }
    Ok(())
}

/// What the end of the path does with packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StackKind {
    /// Deliver TCP/UDP packets (the path's current end), drop the rest.
    Sink,
    /// Parse and drop everything (seed 001's lowest RX level).
    Rxdrop,
    /// Deliver like `Sink`, and measure send-to-delivery latency of
    /// stamped request/response packets.
    Latency,
}

/// Everything `run` needs.
#[derive(Debug, Clone, Serialize)]
pub struct RunConfig {
    /// The simulated NIC.
    pub sim: SimConfig,
    /// The traffic it receives.
    pub traffic: TrafficConfig,
    /// NAPI weight.
    pub weight: usize,
    /// RX bulking.
    pub bundle: BundleMode,
    /// `netdev_budget` and `netdev_budget_usecs`.
    pub softnet: SoftnetConfig,
    /// Interrupt mode (sleep until an IRQ line fires) or polling mode.
    pub interrupts: bool,
    /// Interrupt mode: wait for an interrupt spinning on the lines (the
    /// kernel's `idle=poll`) instead of sleeping. A NAPI is still polled
    /// only when its interrupt fires, but it is taken within a microsecond,
    /// as a hard IRQ is; a futex wakeup takes 10-50 µs on this VM, during
    /// which packets pile up (GRO then merges more without any timer).
    pub idle_poll: bool,
    /// Where packets come from.
    pub producer: Producer,
    /// What the end of the path does.
    pub stack: StackKind,
    /// NAPI threads (NAPIs are spread over them round robin).
    pub threads: usize,
    /// How long to run.
    pub duration: Duration,
    /// Report interval.
    pub tick: Duration,
    /// Pin NAPI threads to the first cores and the producer to the last.
    pub pin: bool,
    /// Frames per null queue.
    pub null_frames: usize,
    /// GRO on every NAPI (None: off).
    pub gro: Option<GroSettings>,
    /// Write every packet that reaches the end of the path (after GRO) to
    /// this pcap file.
    pub capture: Option<PathBuf>,
    /// Where `capture` taps the path.
    pub capture_at: CaptureAt,
    /// AF_XDP: have the kernel busy-poll each queue for this many µs
    /// (`SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL`, budget 64); 0 = off.
    pub xdp_busy_poll_us: u32,
    /// AF_XDP: what the XDP program takes (the rest goes to the kernel).
    #[serde(skip)]
    pub xdp_filter: XdpFilter,
    /// How TCP/UDP checksums are trusted (`--csum`): `auto` trusts what the
    /// device verified or marked partial, and on a driver that carries
    /// local traffic (veth, tun/tap, bridge) a field equal to the
    /// pseudo-header sum.
    pub csum: CsumPolicy,
    /// Prefixes IP input takes as local besides the interface's addresses
    /// (the kernel's `ip route add local PREFIX`).
    pub local_routes: Vec<(std::net::IpAddr, u8)>,
    /// The `INPUT` filter after GRO (None: no filter stage at all).
    #[serde(skip)]
    pub filter: Option<Arc<FilterHandle>>,
}

/// GRO settings of a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GroSettings {
    /// `gro_flush_timeout` in ns (0: flush at every completion).
    pub flush_timeout_ns: u64,
    /// Choose the timeout from the traffic instead.
    pub adaptive: Option<Adaptive>,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            sim: SimConfig::default(),
            traffic: TrafficConfig::default(),
            weight: NAPI_POLL_WEIGHT,
            bundle: BundleMode::default(),
            softnet: SoftnetConfig::default(),
            interrupts: true,
            idle_poll: false,
            producer: Producer::Thread { pps: None },
            stack: StackKind::Sink,
            threads: 1,
            duration: Duration::from_secs(5),
            tick: Duration::from_secs(1),
            pin: true,
            null_frames: 512,
            gro: None,
            capture: None,
            xdp_busy_poll_us: 0,
            xdp_filter: XdpFilter::default(),
            capture_at: CaptureAt::Delivered,
            csum: CsumPolicy::Auto,
            local_routes: Vec::new(),
            filter: None,
        }
    }
}

/// Errors starting a run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad parameter.
    #[error("{0}")]
    Config(String),
    /// The simulated NIC could not be built.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// A thread could not be started or panicked.
    #[error("thread failure: {0}")]
    Thread(String),
    /// The interface could not be opened.
    #[error("{0}")]
    Device(String),
}

/// Counters of one queue at the end of a run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct QueueReport {
    /// Queue index.
    pub queue: u16,
    /// Its NAPI's id.
    pub napi_id: NapiId,
    /// NAPI counters.
    pub napi: NapiStats,
    /// Device counters.
    pub device: DeviceQueueStats,
    /// GRO counters, when GRO is on.
    pub gro: Option<GroStats>,
    /// Segments still held in GRO (0 after a clean stop).
    pub held: u64,
}

/// The result of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The configuration.
    pub config: RunConfig,
    /// Wall time from start to stop (before draining).
    pub elapsed: Duration,
    /// Per queue.
    pub queues: Vec<QueueReport>,
    /// Per NAPI thread.
    pub softnet: Vec<SoftnetStats>,
    /// Packets NAPI received before the stop (the rate's numerator).
    pub received_in_window: u64,
    /// Frames in the region.
    pub frames_total: usize,
    /// Frames back in the pool after the run.
    pub frames_home: usize,
    /// Send-to-delivery latency (with `StackKind::Latency`).
    pub latency: Option<LatencyHist>,
}

impl Report {
    /// All queues' NAPI counters summed.
    pub fn napi_total(&self) -> NapiStats {
        let mut t = NapiStats::default();
        for q in &self.queues {
            t.merge(&q.napi);
        }
        t
    }

    /// All queues' GRO counters summed (None when GRO is off).
    pub fn gro_total(&self) -> Option<GroStats> {
        let mut t: Option<GroStats> = None;
        for g in self.queues.iter().filter_map(|q| q.gro) {
            t.get_or_insert_with(GroStats::default).merge(&g);
        }
        t
    }

    /// All queues' device counters summed.
    pub fn device_total(&self) -> DeviceQueueStats {
        sum_device(self.queues.iter().map(|q| q.device))
    }

    /// Packets per second received by NAPI during the timed window.
    pub fn rx_pps(&self) -> f64 {
        self.received_in_window as f64 / self.elapsed.as_secs_f64()
    }

    /// True when every packet is accounted for and every frame came home.
    pub fn consistent(&self) -> bool {
        let d = self.device_total();
        let n = self.napi_total();
        let device_ok = matches!(self.config.producer, Producer::Null)
            || d.offered == d.rx_ring + d.rx_missed + d.rx_no_buffer + d.rx_too_long
                && n.received == d.rx_ring;
        let held: u64 = self.queues.iter().map(|q| q.held).sum();
        n.accounted() && held == 0 && device_ok && self.frames_home == self.frames_total
    }
}

fn sum_device(it: impl Iterator<Item = DeviceQueueStats>) -> DeviceQueueStats {
    let mut t = DeviceQueueStats::default();
    for d in it {
        t.offered += d.offered;
        t.rx_ring += d.rx_ring;
        t.rx_missed += d.rx_missed;
        t.rx_no_buffer += d.rx_no_buffer;
        t.rx_too_long += d.rx_too_long;
        t.wakeups += d.wakeups;
    }
    t
}

/// What the reporter sees once per interval: totals so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tick {
    /// Time since start.
    pub elapsed: Duration,
    /// NAPI counters summed over queues.
    pub napi: NapiStats,
    /// Device counters summed over queues.
    pub device: DeviceQueueStats,
    /// Softnet counters summed over threads.
    pub softnet: SoftnetStats,
}

#[derive(Debug, Default, Clone)]
struct Live {
    queues: Vec<(u16, NapiStats, DeviceQueueStats)>,
    softnet: SoftnetStats,
}

struct ThreadOut<Q: RxQueue> {
    napis: Vec<Napi<Q>>,
    softnet: SoftnetStats,
    received_at_stop: u64,
    latency: Option<LatencyHist>,
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
    let knob = GroKnob::new(cfg.gro.map_or(0, |g| g.flush_timeout_ns));
    let gro_cfg = cfg.gro.map(|g| GroConfig {
        enabled: true,
        flush_timeout: knob.clone(),
        adaptive: g.adaptive,
    });
    let stop_napi = Arc::new(AtomicBool::new(false));
    let window_over = Arc::new(AtomicBool::new(false));
    match cfg.producer {
        Producer::Null => {
            let mut qs = Vec::with_capacity(cfg.sim.queues);
            for q in 0..cfg.sim.queues {
                qs.push(NullQueue::new(q as u16, cfg.null_frames, &mut traffic)?);
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
                let mut qs = Vec::new();
                for q in 0..nq {
                    qs.push(XdpQueue::open(
                        name,
                        q as u16,
                        cfg.sim.frames_per_queue,
                        prog.clone(),
                        cfg.interrupts,
                    )?);
                }
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
            own_queues(
                cfg,
                qs,
                cfg.interrupts,
                &mut table,
                &gro_cfg,
                &pin_to,
                &stop_napi,
                &window_over,
                &mut on_tick,
            )
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
                )
                .map_err(|e| RunError::Device(format!("AF_PACKET on {name}: {e}")))?;
                qs.push(pq);
            }
            own_queues(
                cfg,
                qs,
                cfg.interrupts,
                &mut table,
                &gro_cfg,
                &pin_to,
                &stop_napi,
                &window_over,
                &mut on_tick,
            )
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
            let (mut port, host) = sim::build(&cfg.sim)?;
            let mut groups: Vec<Vec<Napi<sim::SimRxQueue>>> =
                (0..cfg.threads).map(|_| Vec::new()).collect();
            for q in host {
                let i = q.queue_index() as usize;
                let mut napi = Napi::new(q, cfg.weight, cfg.bundle, cfg.interrupts);
                napi.set_gro(gro_cfg.clone());
                napi.set_csum(cfg.csum, false);
                table.add(&mut napi, |n| n.queue().queue_index());
                groups[i % cfg.threads].push(napi);
            }
            let stop_producer = Arc::new(AtomicBool::new(false));
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
                        (Producer::Pcap { loops, paced, .. }, Some(t)) => {
                            port.run_trace(&t, loops, paced, &sp);
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
            let (outs, elapsed, _live) = drive(
                cfg,
                groups,
                &pin_to,
                &stop_napi,
                &window_over,
                Some(move || stop_p.store(true, Ordering::Relaxed)),
                &mut on_tick,
            )
            .inspect_err(|_| stop_producer.store(true, Ordering::Relaxed))?;
            let port = producer
                .join()
                .map_err(|_| RunError::Thread("producer panicked".into()))?;
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
            })
        }
    }
}

/// How AF_XDP came up on `iface`: XDP mode, copy or zero-copy, queues.
pub(crate) fn xdp_backend(iface: &str, mode: XdpMode, qs: &[XdpQueue]) -> String {
    format!(
        "AF_XDP on {iface}: {} XDP, {} mode, {} queue(s)",
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
        qs.len()
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
    for (i, q) in qs.into_iter().enumerate() {
        let mut napi = Napi::new(q, cfg.weight, cfg.bundle, interrupts);
        napi.set_gro(gro_cfg.clone());
        napi.set_csum(cfg.csum, local_traffic);
        table.add(&mut napi, |n| n.queue().queue_index());
        groups[i % cfg.threads].push(napi);
    }
    let (outs, elapsed, _live) = drive(
        cfg,
        groups,
        pin_to,
        stop_napi,
        window_over,
        None::<fn()>,
        on_tick,
    )?;
    let (queues, softnet, received_in_window, host, latency) = collect(outs);
    let (mut frames_total, mut frames_home) = (0, 0);
    for q in host {
        let pool = q.into_pool();
        frames_total += pool.umem().frames();
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
    })
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

fn validate(cfg: &RunConfig) -> Result<(), RunError> {
    let bad = |m: String| Err(RunError::Config(m));
    if cfg.threads == 0 || cfg.threads > cfg.sim.queues {
        return bad(format!(
            "threads must be in 1..=queues ({}), got {}",
            cfg.sim.queues, cfg.threads
        ));
    }
    if !(1..=1024).contains(&cfg.weight) {
        return bad(format!("weight must be in 1..=1024, got {}", cfg.weight));
    }
    if !(1..=1024).contains(&cfg.bundle.size) || cfg.bundle.size > cfg.weight {
        return bad(format!(
            "bundle must be in 1..=weight ({}), got {}",
            cfg.weight, cfg.bundle.size
        ));
    }
    if cfg.softnet.netdev_budget == 0 || cfg.softnet.netdev_budget_usecs == 0 {
        return bad("netdev_budget and netdev_budget_usecs must be > 0".into());
    }
    if cfg.duration.is_zero() {
        return bad("duration must be > 0".into());
    }
    if cfg.null_frames < cfg.weight {
        return bad(format!(
            "null frames must be at least the weight ({})",
            cfg.weight
        ));
    }
    cfg.traffic.validate().map_err(RunError::Config)
}

fn queue_report<Q: RxQueue>(n: &Napi<Q>) -> QueueReport {
    QueueReport {
        queue: n.queue().queue_index(),
        napi_id: n.id(),
        napi: *n.stats(),
        device: n.queue().device_stats(),
        gro: n.gro().map(|g| *g.stats()),
        held: n.held(),
    }
}

type Outs<Q> = (Vec<ThreadOut<Q>>, Duration, Live);

/// Start the NAPI threads, tick until the duration is over, stop the
/// producer (if any), let the threads drain and collect them.
fn drive<Q, F>(
    cfg: &RunConfig,
    groups: Vec<Vec<Napi<Q>>>,
    pin_to: &dyn Fn(usize) -> Option<core_affinity::CoreId>,
    stop_napi: &Arc<AtomicBool>,
    window_over: &Arc<AtomicBool>,
    stop_producer: Option<F>,
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
        let h = thread::Builder::new()
            .name(format!("rxpath-napi/{t}"))
            .spawn(move || {
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                // Without a capture each end of the path is its own type, so
                // the whole stack inlines into the poll loop; a capture adds
                // the tap in front.
                match (kind, cap, filter) {
                    (k, w, Some(f)) => {
                        let inner = Sinks::of(k);
                        napi_thread(
                            t,
                            napis,
                            IpStage::new(ip, FilterStage::new(f, Tap { inner, w })),
                            softnet,
                            interrupts,
                            idle_poll,
                            &stop,
                            &over,
                            &live,
                        )
                    }
                    (StackKind::Sink, None, None) => napi_thread(
                        t,
                        napis,
                        IpStage::new(ip, Sink),
                        softnet,
                        interrupts,
                        idle_poll,
                        &stop,
                        &over,
                        &live,
                    ),
                    (StackKind::Rxdrop, None, None) => napi_thread(
                        t, napis, RxDrop, softnet, interrupts, idle_poll, &stop, &over, &live,
                    ),
                    (StackKind::Latency, None, None) => napi_thread(
                        t,
                        napis,
                        IpStage::new(
                            ip,
                            Tap {
                                inner: Sinks::Latency(LatencySink::default()),
                                w: None,
                            },
                        ),
                        softnet,
                        interrupts,
                        idle_poll,
                        &stop,
                        &over,
                        &live,
                    ),
                    (k, w, None) => {
                        let inner = Sinks::of(k);
                        napi_thread(
                            t,
                            napis,
                            IpStage::new(ip, Tap { inner, w }),
                            softnet,
                            interrupts,
                            idle_poll,
                            &stop,
                            &over,
                            &live,
                        )
                    }
                }
            })
            .map_err(|e| RunError::Thread(e.to_string()))?;
        handles.push(h);
    }
    let start = Instant::now();
    let mut next = start + cfg.tick;
    let end = start + cfg.duration;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        thread::sleep(next.min(end).saturating_duration_since(now));
        if Instant::now() >= next {
            next += cfg.tick;
            on_tick(&tick(&live, start));
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
    let mut outs = Vec::new();
    for h in handles {
        h.thread().unpark();
        outs.push(
            h.join()
                .map_err(|_| RunError::Thread("NAPI thread panicked".into()))?,
        );
    }
    let l = live.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(w) = capture.and_then(|c| Arc::try_unwrap(c).ok()) {
        w.into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .finish()
            .map_err(|e| RunError::Device(format!("capture: {e}")))?;
    }
    Ok((outs, elapsed, l))
}

/// What IP input knows of the host: the interface's MAC and addresses, or
/// for the simulated NIC and replayed captures any MAC and any address.
fn ip_config(cfg: &RunConfig) -> IpConfig {
    let mut ip = IpConfig {
        csum: cfg.csum,
        deliver_all: true,
        local_routes: cfg.local_routes.clone(),
        ..IpConfig::default()
    };
    match &cfg.producer {
        Producer::Xdp { iface, .. } | Producer::Packet { iface } => {
            let name = iface.as_str();
            ip.local_traffic = rxpath_dev::sys::iface::carries_local_traffic(name);
            match rxpath_dev::sys::af_packet::iface_addrs(name) {
                Ok((mac, addrs)) => {
                    ip.mac = mac;
                    ip.addrs = addrs;
                }
                // A thread that entered another network namespace with
                // setns() still sees the old one's /sys.
                Err(e) => {
                    eprintln!(
                        "rxpath: warning: {name}: its addresses could not be read ({e}); \
                         IP input takes every MAC and destination"
                    );
                    ip.any_l2 = true;
                }
            }
        }
        _ => ip.any_l2 = true,
    }
    ip
}

fn tick(live: &Mutex<Live>, start: Instant) -> Tick {
    let l = live.lock().unwrap_or_else(|e| e.into_inner());
    let mut napi = NapiStats::default();
    for (_, n, _) in &l.queues {
        napi.merge(n);
    }
    Tick {
        elapsed: start.elapsed(),
        napi,
        device: sum_device(l.queues.iter().map(|q| q.2)),
        softnet: l.softnet,
    }
}

/// The body of a NAPI thread.
#[allow(clippy::too_many_arguments)]
fn napi_thread<Q: RxQueue, S: Stack>(
    t: usize,
    mut napis: Vec<Napi<Q>>,
    mut stack: S,
    cfg: SoftnetConfig,
    interrupts: bool,
    idle_poll: bool,
    stop: &AtomicBool,
    window_over: &AtomicBool,
    live: &Mutex<Live>,
) -> ThreadOut<Q> {
    let clock = MonotonicClock;
    let me = thread::current();
    for n in &napis {
        if let Some(irq) = n.queue().irq() {
            irq.set_waiter(me.clone());
        }
    }
    let mut sn = Softnet::new(cfg);
    let mut loops = 0u64;
    let mut received_at_stop = None;
    let publish = |napis: &Vec<Napi<Q>>, sn: &Softnet| {
        let mut l = live.lock().unwrap_or_else(|e| e.into_inner());
        for n in napis {
            let qi = n.queue().queue_index();
            let entry = (qi, *n.stats(), n.queue().device_stats());
            match l.queues.iter_mut().find(|e| e.0 == qi) {
                Some(e) => *e = entry,
                None => l.queues.push(entry),
            }
        }
        // Threads own disjoint NAPIs; softnet totals are per thread, so
        // only thread 0 reports them live (the final report has all).
        if t == 0 {
            l.softnet = *sn.stats();
        }
    };
    loop {
        if received_at_stop.is_none() && window_over.load(Ordering::Acquire) {
            received_at_stop = Some(napis.iter().map(|n| n.stats().received).sum::<u64>());
        }
        if stop.load(Ordering::Acquire) {
            break;
        }
        if interrupts {
            for (i, n) in napis.iter_mut().enumerate() {
                if n.take_irq() {
                    sn.schedule(i);
                }
            }
        } else {
            for (i, n) in napis.iter_mut().enumerate() {
                if !sn.is_scheduled(i) && n.state().schedule_prep() {
                    sn.schedule(i);
                }
            }
        }
        // NAPI timers (gro_flush_timeout): `napi_watchdog` schedules the
        // NAPI when its timer expires.
        let next_timer = napis.iter().filter_map(|n| n.timer()).min();
        let mut now = None;
        if let Some(t) = next_timer {
            let n_ns = clock.now_ns();
            now = Some(n_ns);
            if n_ns >= t {
                for (i, n) in napis.iter_mut().enumerate() {
                    if !sn.is_scheduled(i) && n.fire_timer(n_ns) {
                        sn.schedule(i);
                    }
                }
            }
        }
        loops += 1;
        if loops.is_multiple_of(1024) {
            publish(&napis, &sn);
        }
        if sn.pending() == 0 {
            if interrupts {
                // Sleep until an IRQ line fires (it unparks us) or the next
                // NAPI timer is due, with a cap so a stop request is seen.
                let cap = Duration::from_millis(2);
                let wait = match (next_timer, now) {
                    (Some(t), Some(n)) => Duration::from_nanos(t.saturating_sub(n)).min(cap),
                    _ => cap,
                };
                if idle_poll {
                    std::hint::spin_loop();
                } else if !wait.is_zero() {
                    thread::park_timeout(wait);
                }
            }
            continue;
        }
        sn.net_rx_action(&mut napis, &mut stack, &clock);
    }
    // Drain: poll until no queue has work, ignoring IRQ lines, so every
    // frame goes back to its fill ring (napi_disable's job).
    // A real interface keeps receiving after the stop; what arrives later
    // stays in the kernel's ring, so the drain is bounded.
    let mut rounds = 0;
    while rounds < 100_000 && napis.iter_mut().any(|n| n.has_work()) {
        rounds += 1;
        for (i, n) in napis.iter_mut().enumerate() {
            if !sn.is_scheduled(i) && n.state().schedule_prep() {
                sn.schedule(i);
            }
        }
        sn.net_rx_action(&mut napis, &mut stack, &clock);
    }
    // Whatever GRO still holds goes up, so every packet is accounted for.
    for n in napis.iter_mut() {
        n.flush_gro(&mut stack, clock.now_ns());
    }
    publish(&napis, &sn);
    let received_at_stop =
        received_at_stop.unwrap_or_else(|| napis.iter().map(|n| n.stats().received).sum::<u64>());
    ThreadOut {
        napis,
        softnet: *sn.stats(),
        received_at_stop,
        latency: stack.latency().cloned(),
    }
}
