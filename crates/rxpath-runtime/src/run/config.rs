//! What a run is given: where packets come from, the path's knobs, and
//! the errors of a bad configuration.

use rxpath_core::filter::FilterHandle;
use rxpath_core::gro::Adaptive;
use rxpath_core::ip::CsumPolicy;
use rxpath_core::ip::IpConfig;
use rxpath_core::napi::{BundleMode, NAPI_POLL_WEIGHT};
use rxpath_core::softnet::SoftnetConfig;
use rxpath_core::steer::{SteerConfig, SteerMode};
use rxpath_dev::sim::{SimConfig, SimError, TrafficConfig};
use rxpath_dev::sys::xdp::XdpFilter;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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
        /// Keep the recorded spacing (a wire: the NIC may drop).
        paced: bool,
        /// Offer at this rate (a wire: the NIC may drop). Neither this nor
        /// `paced`: as fast as the host takes them, waiting for ring space,
        /// so nothing is lost.
        pps: Option<u64>,
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
            check_not_loopback(iface)?;
            return Err(RunError::Device(format!("interface {iface} is down: run `ip link set {iface} up`")))
        }
        _ => {}
    }
    check_not_loopback(iface)?;
    check_caps(iface, false)
}

/// What capability mask `set` (as `/proc/PID/status` shows it) lacks to
/// open an interface: `None` if it has what the backend needs
/// (`CAP_NET_RAW`; for AF_XDP only, `xdp`, also `CAP_BPF`,
/// `CAP_NET_ADMIN` and `CAP_PERFMON`); else what is needed and every one
/// of [`rxpath_os::sched::NET_CAPS`] it lacks, in words.
pub fn missing_caps(set: u64, xdp: bool) -> Option<String> {
    use rxpath_os::sched;
    let last = sched::cap_last_cap();
    let missing = sched::missing_caps(set, last);
    let all = sched::net_caps();
    let raw = "CAP_NET_RAW";
    let ipc = "CAP_IPC_LOCK";
    let xdp_caps: Vec<&str> = all.iter().copied().filter(|&c| c != ipc).collect();
    let needed: &[&str] = if xdp { &xdp_caps } else { &[raw] };
    if !needed.iter().any(|n| missing.contains(n)) {
        return None;
    }
    let mut xdp_more: Vec<&str> = xdp_caps.iter().copied().filter(|&c| c != raw).collect();
    // As the kernel's own hint puts it: CAP_BPF + CAP_NET_ADMIN, then the rest.
    xdp_more.sort_by_key(|&c| match c {
        "CAP_BPF" => 0,
        "CAP_NET_ADMIN" => 1,
        _ => 2,
    });
    Some(format!(
        "needs {raw}, and for AF_XDP {}, with {ipc} unless RLIMIT_MEMLOCK holds the UMEM; \
         missing {}",
        xdp_more.join(" + "),
        missing.join(", ")
    ))
}

/// Check that this process has the capabilities opening `iface` takes
/// (with `xdp`, AF_XDP's, not just AF_PACKET's), in its effective set:
/// root, or a binary given them with `setcap`. The error names the
/// missing ones and how to give them.
pub fn check_caps(iface: &str, xdp: bool) -> Result<(), RunError> {
    use rxpath_os::sched;
    let Some(missing) = missing_caps(sched::cap_set("CapEff"), xdp) else {
        return Ok(());
    };
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "$(command -v rxpath)".into());
    let caps = sched::net_caps()
        .iter()
        .map(|c| c.to_lowercase())
        .collect::<Vec<_>>()
        .join(",");
    Err(RunError::Device(format!(
        "opening {iface} {missing}: run as root, or give the binary them: \
         `sudo setcap {caps}+ep {exe}`"
    )))
}

/// Refuse the loopback interface (`IFF_LOOPBACK`, or the name `lo`):
/// rxpath takes a device's packets from the kernel, and on loopback those
/// are the host's own traffic, which would go dark while it runs.
pub fn check_not_loopback(iface: &str) -> Result<(), RunError> {
    let flagged = rxpath_dev::sys::af_packet::iface_loopback(iface)
        .ok()
        .flatten()
        .unwrap_or(false);
    if flagged || iface == "lo" {
        return Err(RunError::Device(format!(
            "{iface} is the loopback interface: rxpath would take the host's own traffic \
             from the kernel; use a NIC or a veth pair (`rxpath lab up` makes rxp0/rxp1)"
        )));
    }
    Ok(())
}

pub use crate::path_ends::StackKind;

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
    /// Interrupt mode on an interface: wake NAPI threads through a separate
    /// interrupt thread per queue (poll(2) on the socket, then a futex
    /// wakeup). Off (the default), a NAPI thread with no backlog of its own
    /// waits on its queues' sockets itself: one thread hop less per wakeup.
    pub irq_thread: bool,
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
    /// Null queues of cold data ([`rxpath_dev::sim::ColdQueue`]: a frame
    /// region twice the last-level cache, handed out in a shuffled cycle,
    /// every packet a cache miss) instead of frames reused hot.
    pub null_cold: bool,
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
    /// Flow steering between GRO and the rest of the path (`--steer`,
    /// `--workers`, ...). With `SteerMode::None` the whole path runs on
    /// the NAPI threads.
    pub steer: SteerConfig,
    /// Take a worker offline this long after the start (it processes what
    /// is queued and takes nothing new, as a CPU going down). Only a worker
    /// that is not a NAPI thread.
    pub stop_worker: Option<(u16, Duration)>,
    /// Knobs a caller changes while the run goes (a control socket).
    #[serde(skip)]
    pub knobs: Option<RunKnobs>,
    /// Set to end the run early (a signal handler does): it stops as at
    /// the end of its duration, drains, and reports.
    #[serde(skip)]
    pub stop: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// The source carries local senders' partial checksums (a capture on
    /// a host with checksum offload): `--csum auto` trusts them by value,
    /// as for a veth. Set by the replay when it finds them.
    pub local_traffic: bool,
    /// RFS: the global sock flow table (`rps_sock_flow_table`) where
    /// readers record the worker they read on. `run` has no sockets: a
    /// caller (a test, an experiment) plays the readers through it. None:
    /// a table of `rps_sock_flow_entries` nobody writes (RFS = RPS).
    #[serde(skip)]
    pub sock_flows: Option<Arc<rxpath_core::sock::SockFlowTable>>,
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
            irq_thread: false,
            producer: Producer::Thread { pps: None },
            stack: StackKind::Sink,
            threads: 1,
            duration: Duration::from_secs(5),
            tick: Duration::from_secs(1),
            pin: true,
            null_frames: 512,
            null_cold: false,
            gro: None,
            capture: None,
            xdp_busy_poll_us: 0,
            xdp_filter: XdpFilter::default(),
            capture_at: CaptureAt::Delivered,
            csum: CsumPolicy::Auto,
            local_routes: Vec::new(),
            filter: None,
            steer: SteerConfig::default(),
            stop_worker: None,
            sock_flows: None,
            local_traffic: false,
            stop: None,
            knobs: None,
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

pub(crate) fn validate(cfg: &RunConfig) -> Result<(), RunError> {
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
    if cfg.null_cold && cfg.steer.mode != SteerMode::None {
        return bad(
            "cold null queues do not number their datagrams, which steering's order check needs: no --steer with them"
                .into(),
        );
    }
    cfg.steer.validate().map_err(RunError::Config)?;
    if cfg.steer.mode != SteerMode::None && cfg.steer.workers < cfg.threads {
        return bad(format!(
            "--workers {} is less than the NAPI threads ({}): each NAPI thread is a worker",
            cfg.steer.workers, cfg.threads
        ));
    }
    if let Some((w, _)) = cfg.stop_worker {
        if cfg.steer.mode == SteerMode::None
            || (w as usize) < cfg.threads
            || w as usize >= cfg.steer.workers
        {
            return bad(format!(
                "worker {w} cannot be stopped: only workers {}..{} are not NAPI threads",
                cfg.threads, cfg.steer.workers
            ));
        }
    }
    cfg.traffic.validate().map_err(RunError::Config)
}

/// What IP input knows of the host: the interface's MAC and addresses, or
/// for the simulated NIC and replayed captures any MAC and any address.
pub(crate) fn ip_config(cfg: &RunConfig) -> IpConfig {
    let mut ip = IpConfig {
        csum: cfg.csum,
        deliver_all: true,
        tcp: false,
        local_routes: cfg.local_routes.clone(),
        ..IpConfig::default()
    };
    match &cfg.producer {
        Producer::Xdp { iface, .. } | Producer::Packet { iface } => {
            let name = iface.as_str();
            ip.reasm = crate::sysctl::reasm(ip.reasm);
            ip.local_traffic = rxpath_dev::sys::iface::carries_local_traffic(name);
            match rxpath_dev::sys::af_packet::iface_addrs(name) {
                Ok((mac, addrs)) => {
                    ip.mac = mac;
                    ip.addrs = addrs;
                }
                // A thread that entered another network namespace with
                // setns() still sees the old one's /sys.
                Err(e) => {
                    log::warn!(
                        "{name}: its addresses could not be read ({e}); \
                         IP input takes every MAC and destination"
                    );
                    ip.any_l2 = true;
                }
            }
        }
        _ => {
            ip.any_l2 = true;
            ip.local_traffic = cfg.local_traffic;
        }
    }
    ip
}

/// The knobs of a run that can change while packets flow, named as the
/// kernel names them (`/sys/class/net/IF/gro_flush_timeout`,
/// `net.core.netdev_budget`, `net.core.netdev_budget_usecs`).
#[derive(Debug, Clone)]
pub struct RunKnobs {
    /// `gro_flush_timeout`, ns (every NAPI of the device).
    pub gro_flush_timeout: rxpath_core::gro::GroKnob,
    /// `netdev_budget`: packets per `net_rx_action`.
    pub netdev_budget: Arc<std::sync::atomic::AtomicUsize>,
    /// `netdev_budget_usecs`.
    pub netdev_budget_usecs: Arc<std::sync::atomic::AtomicU64>,
    /// `rps_cpus` of every RX queue as a bitmask of workers (`--steer rps`
    /// or `rfs`; 0: RPS off, the rest of the path runs on the NAPI thread).
    /// The run fills it in when its workers start.
    pub rps_cpus: Arc<std::sync::atomic::AtomicU64>,
    /// `rps_flow_cnt` of every RX queue (`--steer rfs`; 0 otherwise, or
    /// until the run's workers start), a power of two.
    pub rps_flow_cnt: Arc<std::sync::atomic::AtomicU64>,
    /// Workers of the run (0 until its workers start, or without
    /// steering): the bits `rps_cpus` may have.
    pub workers: Arc<std::sync::atomic::AtomicUsize>,
}

impl RunKnobs {
    /// Knobs starting at `cfg`'s values.
    pub fn new(cfg: &RunConfig) -> RunKnobs {
        RunKnobs {
            gro_flush_timeout: rxpath_core::gro::GroKnob::new(
                cfg.gro.map_or(0, |g| g.flush_timeout_ns),
            ),
            netdev_budget: Arc::new(cfg.softnet.netdev_budget.into()),
            netdev_budget_usecs: Arc::new(cfg.softnet.netdev_budget_usecs.into()),
            rps_cpus: Arc::default(),
            rps_flow_cnt: Arc::default(),
            workers: Arc::default(),
        }
    }
}
