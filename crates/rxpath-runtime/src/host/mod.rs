//! A host: device queues, their NAPIs and NAPI threads, and the socket layer
//! applications read from (seed 000).
//!
//! ```text
//!  device queue ─► NAPI (SharedNapi) ─► SockStack ─► UdpSocket queues ─► app
//!                    ▲   ▲ NAPI thread: IRQ → schedule_prep → poll
//!                    │   └ busy-polling recv: try_busy_poll → poll(8)
//! ```
//!
//! Every NAPI is reachable by id from the sockets, so a `recv` can poll the
//! queue its data comes from. A NAPI thread serves its NAPIs as the kernel's
//! softirq does: an interrupt schedules one, it is polled with its weight
//! until it completes. While a socket owns a NAPI, the NAPI thread's
//! `schedule_prep` fails and records `MISSED`; the socket re-raises the
//! interrupt when it lets go.
//!
//! With `napi_threads: 0` nothing but busy-polling sockets moves packets
//! (useful to show busy polling alone delivers; the tests do).

mod napi_thread;
mod tx;

use crate::run::{check_iface, RunError};
use crate::sock::{BacklogServer, UdpSocket};
use crate::steer::{BottomHalf, Collect, PerQueue, Ports, SteerStage, Workers};
use napi_thread::{napi_in_irq, napi_thread};
use rxpath_core::gro::{GroConfig, GroKnob, UdpGroPolicy};
use rxpath_core::ip::Snmp;
use rxpath_core::napi::{BundleMode, Napi, NapiTable, NAPI_POLL_WEIGHT};
use rxpath_core::sock::{BindOptions, SharedNapi, SockConfig, SockError, Sockets};
use rxpath_core::steer::{SeqSource, SteerMode, Worker};
use rxpath_dev::packet::PacketQueue;
use rxpath_dev::sim::{self, SimConfig, SimPort, SimRxQueue};
use rxpath_dev::sys::af_packet::RawSocket;
use rxpath_dev::sys::iface::KernelPortGuard;
use rxpath_dev::sys::tap::TapProgram;
use rxpath_dev::sys::xdp::{XdpFilter, XdpProgram, XdpQueue};
use rxpath_dev::{FramePool, RxQueue};
use std::any::Any;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use tx::{PacketTx, SimTxPort, XskTxPort};

/// Where a host's packets come from.
#[derive(Debug, Clone)]
pub enum HostDevice {
    /// The simulated NIC; the caller drives its port ([`Host::sim_port`]).
    Sim(SimConfig),
    /// AF_XDP on an interface, taking what `filter` selects (everything
    /// else goes to the kernel). With `fallback`, AF_PACKET if AF_XDP fails.
    Xdp {
        /// Interface.
        iface: String,
        /// What the XDP program redirects to us.
        filter: XdpFilter,
        /// Use AF_PACKET if AF_XDP cannot be set up.
        fallback: bool,
        /// SO_BUSY_POLL µs on the AF_XDP sockets (with SO_PREFER_BUSY_POLL);
        /// 0 = off.
        xsk_busy_poll_us: u32,
    },
    /// AF_PACKET (TPACKET_V3) on an interface.
    Packet {
        /// Interface.
        iface: String,
        /// With a port map (`port_map`, UDP or TCP): the destinations in
        /// it are rxpath's and the kernel never sees their frames (a tap
        /// filter and a tcx ingress program decide once per frame,
        /// [`rxpath_dev::sys::tap`]); the rest are the kernel's. `None`:
        /// every frame is tapped, and the kernel sees them all too.
        filter: Option<XdpFilter>,
    },
}

/// A host's settings.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Device queues; 0 = as many as the interface has RX queues
    /// (`/sys/class/net/IF/queues/rx-*`).
    pub queues: usize,
    /// NAPI weight.
    pub weight: usize,
    /// RX bulking.
    pub bundle: BundleMode,
    /// Interrupt mode (NAPI threads sleep until an IRQ); else they poll.
    pub interrupts: bool,
    /// NAPI threads (0 = none: only busy polling moves packets).
    pub napi_threads: usize,
    /// Pin NAPI thread `t` to CPU `t`.
    pub pin_napi: bool,
    /// Frames per queue (interfaces).
    pub frames_per_queue: usize,
    /// Prefer busy polling: after a busy poll keep the queue's interrupt
    /// masked this long, ns ([`SharedNapi::set_prefer_busy_poll`]); 0 = off.
    pub prefer_busy_poll_ns: u64,
    /// IRQ suspension (`irq_suspend_timeout`): while an epoll waiter is
    /// handed events, a deferred interrupt stays deferred this long, ns
    /// ([`SharedNapi::set_irq_suspend_timeout`]); 0 = off.
    pub irq_suspend_timeout_ns: u64,
    /// Interfaces: run a NAPI in the context that takes its interrupt (the
    /// queue's IRQ thread), as the kernel runs NAPI in softirq right after
    /// the hard IRQ, instead of waking a NAPI thread (the kernel's threaded
    /// NAPI). One wakeup fewer between a packet and its reader. The NAPI
    /// threads still serve timers, deferrals and frames coming home.
    pub napi_in_irq: bool,
    /// The socket layer's settings (addresses and MAC are filled in from
    /// the interface when empty).
    pub sock: SockConfig,
    /// Flow steering: with a mode other than `none`, the socket stage runs
    /// on `workers` threads of their own (worker `w` pinned to core `w`,
    /// so a reader on core `w` is on worker `w` for RFS), fed by the NAPIs'
    /// steering stage. A host's NAPI threads are not workers.
    pub steer: rxpath_core::steer::SteerConfig,
    /// AF_PACKET: hand each frame over as the kernel writes it (TPACKET_V2;
    /// the default: a socket waiting for one request gets it at once)
    /// rather than a block at a time (TPACKET_V3: a block goes up when full
    /// or after the 1 ms retire timeout, ~0.5 ms per lone request).
    pub packet_per_frame: bool,
    /// AF_XDP: frames of queue 0's share that its socket's TX ring sends
    /// replies from (up to half the share); 0 sends through an AF_PACKET
    /// socket on the interface instead (a trip through the kernel's stack).
    pub xdp_tx_frames: usize,
    /// GRO on every NAPI (`ethtool -K IF gro on`, the kernel's default).
    /// Sockets leave TCP to the kernel, so what it merges is UDP for
    /// sockets with `UDP_GRO` ([`Socket::set_udp_gro`](rxpath_core::sock::Socket::set_udp_gro)); every other
    /// datagram goes up alone.
    pub gro: bool,
    /// `gro_flush_timeout` in ns: 0 flushes GRO at every completion; more
    /// keeps packets across polls and arms the NAPI timer, which the
    /// NAPI thread fires (`napi_watchdog`).
    pub gro_flush_timeout_ns: u64,
    /// `napi_defer_hard_irqs`: after a poll that found packets, keep the
    /// interrupt masked and poll from the NAPI timer every
    /// `gro_flush_timeout_ns` instead, until this many polls in a row find
    /// nothing (interrupt mitigation; needs `gro_flush_timeout_ns`).
    pub defer_hard_irqs: u32,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            queues: 1,
            weight: NAPI_POLL_WEIGHT,
            bundle: BundleMode::default(),
            interrupts: true,
            napi_threads: 1,
            pin_napi: false,
            frames_per_queue: 4096,
            prefer_busy_poll_ns: 0,
            irq_suspend_timeout_ns: 0,
            napi_in_irq: true,
            sock: SockConfig::default(),
            steer: rxpath_core::steer::SteerConfig::default(),
            packet_per_frame: true,
            xdp_tx_frames: 512,
            gro: true,
            gro_flush_timeout_ns: 0,
            defer_hard_irqs: 0,
        }
    }
}

pub use crate::host_report::{HostQueue, HostReport};

type Finish =
    Box<dyn FnOnce(Vec<Box<dyn Any + Send>>, Option<SimPort>) -> (usize, usize) + Send + Sync>;

/// A running host. Dropping it stops it (detaching any XDP program).
pub struct Host {
    sockets: Arc<Sockets>,
    napis: Vec<Arc<SharedNapi>>,
    threads: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    port: Option<Mutex<SimPort>>,
    finish: Option<Finish>,
    backend: String,
    /// On an interface: the kernel sockets that hold the ports rxpath
    /// serves, so that the kernel does not answer them.
    guards: Option<Mutex<Vec<KernelPortGuard>>>,
    /// On AF_XDP: the XDP program (its port map, if any).
    xdp: Option<Arc<XdpProgram>>,
    /// On AF_PACKET with a port map: the tap filter and ingress program.
    tap: Option<TapProgram>,
    /// Steering on: the workers and their threads.
    workers: Option<Arc<Workers>>,
    worker_threads: Vec<(Worker, JoinHandle<crate::steer::WorkerCounters>)>,
    /// With workers: the backlog a reader about to sleep runs itself.
    server: Option<Arc<dyn BacklogServer>>,
    /// The TX ring's "stop completing" fault switch (AF_XDP replies, or
    /// the simulated NIC's TX ring).
    tx_fault: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// The device's `gro_flush_timeout` and `napi_defer_hard_irqs`,
    /// shared by its NAPIs (live knobs, as the kernel's sysfs files).
    irq_knobs: (GroKnob, GroKnob),
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("backend", &self.backend)
            .field("napis", &self.napis)
            .finish()
    }
}

/// A queue's NAPI, shared with busy-polling sockets: GRO (with the
/// sockets' `UDP_GRO` policy), interrupt deferral, the socket stage (or
/// the steering stage in front of it) and, with `irq_context`, the poll in
/// the interrupt's own context.
fn share_napi<Q: RxQueue + Send + 'static>(
    cfg: &HostConfig,
    q: Q,
    sockets: &Arc<Sockets>,
    workers: Option<&Arc<Workers>>,
    (gro_knob, defer_knob): &(GroKnob, GroKnob),
    irq_context: bool,
    table: &mut NapiTable<u16>,
) -> Arc<SharedNapi> {
    let qi = q.queue_index();
    let mut napi = Napi::new(q, cfg.weight, cfg.bundle, cfg.interrupts);
    napi.set_csum(cfg.sock.csum, cfg.sock.local_traffic);
    if cfg.gro {
        let udp: Arc<dyn UdpGroPolicy> = sockets.clone();
        napi.set_gro(Some(GroConfig {
            enabled: true,
            udp: Some(udp),
            flush_timeout: gro_knob.clone(),
            adaptive: None,
        }));
    }
    napi.set_defer_hard_irqs(defer_knob.clone(), gro_knob.clone());
    table.add(&mut napi, |n| n.queue().queue_index());
    let shared = match workers {
        // No NAPI context is a worker: `me` is none of them.
        Some(w) => SharedNapi::new(
            napi,
            SteerStage::new(w.clone(), Worker::MAX, sockets.stage(qi)),
        ),
        None => SharedNapi::new(napi, sockets.stage(qi)),
    };
    shared.set_prefer_busy_poll(cfg.prefer_busy_poll_ns);
    shared.set_irq_suspend_timeout(cfg.irq_suspend_timeout_ns);
    if irq_context {
        if let Some(irq) = &shared.irq {
            let weak = Arc::downgrade(&shared);
            irq.set_handler(Box::new(move || {
                weak.upgrade().is_some_and(|n| napi_in_irq(&n))
            }));
        }
    }
    shared
}

/// The host's NAPI threads, the NAPIs dealt out round-robin.
fn spawn_napi_threads(
    cfg: &HostConfig,
    napis: &[Arc<SharedNapi>],
    sockets: &Arc<Sockets>,
    stop: &Arc<AtomicBool>,
) -> Result<Vec<JoinHandle<()>>, RunError> {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let mut threads = Vec::new();
    for t in 0..cfg.napi_threads.min(napis.len()) {
        let mine: Vec<_> = napis
            .iter()
            .enumerate()
            .filter(|(i, _)| i % cfg.napi_threads == t)
            .map(|(_, n)| n.clone())
            .collect();
        let (stop, socks, interrupts) = (stop.clone(), sockets.clone(), cfg.interrupts);
        let core = (cfg.pin_napi && !cores.is_empty()).then(|| cores[t % cores.len()]);
        let h = thread::Builder::new()
            .name(format!("rxpath-napi/{t}"))
            .spawn(move || {
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                napi_thread(mine, &socks, interrupts, &stop)
            })
            .map_err(|e| RunError::Thread(e.to_string()))?;
        threads.push(h);
    }
    Ok(threads)
}

/// Worker threads, one pinned per core, and the backlog server that lets
/// a reader waiting in `recv` run the backlog of the worker on its CPU
/// itself (RFS's single wakeup; [`BacklogServer`]).
#[allow(clippy::type_complexity)]
fn spawn_workers(
    w: &Arc<Workers>,
    sockets: &Arc<Sockets>,
) -> Result<
    (
        Option<Arc<dyn BacklogServer>>,
        Vec<(Worker, JoinHandle<crate::steer::WorkerCounters>)>,
    ),
    RunError,
> {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let socks = Arc::downgrade(sockets);
    let budget = rxpath_core::softnet::SoftnetConfig::default().netdev_budget;
    let build: crate::steer::Build = Box::new(move |w, id| {
        let socks = socks.upgrade()?;
        Some(host_bottom_half(w, id, &socks, budget))
    });
    let server = crate::steer::Server::new(w, build).map(|s| Arc::new(s) as Arc<dyn BacklogServer>);
    let mut worker_threads = Vec::new();
    for id in 0..w.len() {
        let (w, socks) = (w.clone(), sockets.clone());
        let core = (!cores.is_empty()).then(|| cores[id % cores.len()]);
        let h = thread::Builder::new()
            .name(format!("rxpath-bh/{id}"))
            .spawn(move || {
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                let bh = host_bottom_half(&w, id as Worker, &socks, budget);
                crate::steer::pure_worker_thread(bh, false, None, None)
            })
            .map_err(|e| RunError::Thread(e.to_string()))?;
        worker_threads.push((id as Worker, h));
    }
    Ok((server, worker_threads))
}

fn into_pools<Q: RxQueue + 'static>(
    cells: Vec<Box<dyn Any + Send>>,
    into_pool: impl Fn(Q) -> FramePool,
) -> (usize, usize) {
    let (mut total, mut home) = (0, 0);
    // Queues on a shared UMEM each hold their share of one region: count
    // each region once.
    let mut regions = std::collections::BTreeSet::new();
    for c in cells {
        if let Ok(q) = c.downcast::<Q>() {
            let pool = into_pool(*q);
            if regions.insert(pool.umem().id()) {
                total += pool.umem().frames();
            }
            home += pool.available();
        }
    }
    (total, home)
}

impl Host {
    /// Serve this host's counters for Prometheus on `addr` (port 0: any
    /// free port, see [`crate::metrics::Metrics::addr`]): the socket
    /// layer's and every queue's NAPI and device counters, read at every
    /// scrape (`rxpath_socket_*_total`, busy polling, `rxpath_rx_*`). Give it the report at the end
    /// ([`crate::metrics::Metrics::finish_host`]) for the per-queue,
    /// per-worker and SNMP counters; it serves until dropped.
    pub fn serve_metrics(&self, addr: SocketAddr) -> std::io::Result<crate::metrics::Metrics> {
        let m = crate::metrics::Metrics::start(addr)?;
        m.watch_sockets(self.sockets().clone());
        m.watch_napis(self.napis().to_vec());
        Ok(m)
    }

    /// Fault injection: while the switch is on, the TX ring's completions
    /// are not taken back (AF_XDP), or the simulated NIC's wire takes
    /// nothing from its TX ring, as a device that stopped completing;
    /// sends then find no free frame and count `SndbufErrors`
    /// (`xsk_tx_busy`, `sim_tx_busy`), and nothing is lost. `None` when
    /// replies do not go through a TX ring of ours (AF_PACKET).
    pub fn tx_stop_completing(&self) -> Option<Arc<std::sync::atomic::AtomicBool>> {
        self.tx_fault.clone()
    }

    /// Start a host on `dev`.
    pub fn start(mut cfg: HostConfig, dev: HostDevice) -> Result<Host, RunError> {
        cfg.sock.reasm = crate::sysctl::reasm_frames(cfg.sock.reasm, cfg.frames_per_queue);
        cfg.sock.current_cpu = || rxpath_dev::sys::sched::current_cpu().unwrap_or(0) as u32;
        let iface_default = cfg.queues == 0 && !matches!(dev, HostDevice::Sim(_));
        if !(1..=64).contains(&cfg.queues) && !iface_default {
            return Err(RunError::Config(format!(
                "queues must be in 1..=64, got {}",
                cfg.queues
            )));
        }
        match dev {
            HostDevice::Sim(sc) => Self::start_sim(cfg, sc),
            HostDevice::Xdp {
                iface,
                filter,
                fallback,
                xsk_busy_poll_us,
            } => Self::start_xdp(cfg, iface, filter, fallback, xsk_busy_poll_us),
            HostDevice::Packet { iface, filter } => Self::start_packet(cfg, iface, filter),
        }
    }

    /// On the simulated NIC (its TX ring for sends).
    fn start_sim(cfg: HostConfig, mut sc: SimConfig) -> Result<Host, RunError> {
        sc.queues = cfg.queues;
        let (port, qs) = sim::build(&sc)?;
        let finish: Finish = Box::new(|cells, port| {
            let mut qs: Vec<SimRxQueue> = Vec::new();
            for c in cells {
                if let Ok(q) = c.downcast::<SimRxQueue>() {
                    qs.push(*q);
                }
            }
            match port {
                Some(p) => {
                    let pool = p.reclaim(qs);
                    (pool.umem().frames(), pool.available())
                }
                None => (0, 0),
            }
        });
        // The sim's interrupts are raised by whoever drives the port
        // (tests, the producer): NAPI stays on NAPI threads.
        let mut h = Self::with_queues(&cfg, qs, finish, "simulated NIC".into(), false)?;
        h.port = Some(Mutex::new(port));
        // Sockets send through the NIC's TX ring (256 frames of its
        // own); `set_tx` replaces it.
        let tx = rxpath_dev::sim::SimTx::new(256, 256)
            .map_err(|e| RunError::Device(format!("the simulated NIC's TX ring: {e}")))?;
        h.tx_fault = Some(tx.stop_completing.clone());
        h.sockets.set_tx(Box::new(SimTxPort(tx)));
        Ok(h)
    }

    /// On an interface through AF_XDP (`fallback`: AF_PACKET if XDP fails);
    /// replies through queue 0's TX ring when it has one.
    fn start_xdp(
        mut cfg: HostConfig,
        iface: String,
        filter: XdpFilter,
        fallback: bool,
        xsk_busy_poll_us: u32,
    ) -> Result<Host, RunError> {
        check_iface(&iface)?;
        fill_from_iface(&mut cfg, &iface)?;
        let nq = cfg.queues;
        let opened = XdpProgram::attach(&iface, nq as u32, filter).and_then(|prog| {
            let prog = Arc::new(prog);
            // Several queues draw from one UMEM (XDP_SHARED_UMEM).
            let mut qs = XdpQueue::open_all(
                &iface,
                nq as u16,
                cfg.frames_per_queue,
                prog.clone(),
                cfg.interrupts,
                cfg.xdp_tx_frames,
            )?;
            if xsk_busy_poll_us > 0 {
                for xq in &mut qs {
                    xq.set_busy_poll(xsk_busy_poll_us, 8)?;
                }
            }
            Ok((prog, qs))
        });
        let (prog, qs) = match opened {
            Ok(x) => x,
            Err(e) if fallback => {
                log::warn!("AF_XDP on {iface} failed ({e}); using AF_PACKET instead");
                let filter = filter.port_map.then_some(filter);
                let mut h = Self::start(cfg, HostDevice::Packet { iface, filter })?;
                // The backend says why, wherever it is printed.
                h.backend.push_str(&format!(" (AF_XDP failed: {e})"));
                return Ok(h);
            }
            Err(e) => return Err(RunError::Device(format!("AF_XDP on {iface}: {e}"))),
        };
        let mut qs = qs;
        let tx = qs.first_mut().and_then(XdpQueue::take_tx);
        let mut backend = crate::run::xdp_backend(&iface, prog.mode, &qs);
        if tx.is_some() {
            backend.push_str("; replies through queue 0's TX ring");
        }
        let finish: Finish =
            Box::new(|cells, _| into_pools::<XdpQueue>(cells, XdpQueue::into_pool));
        let mut h = Self::with_queues(&cfg, qs, finish, backend, cfg.napi_in_irq)?.on_iface();
        h.xdp = Some(prog);
        match tx {
            Some(tx) => {
                h.tx_fault = Some(tx.stop_completing.clone());
                h.sockets
                    .set_tx(Box::new(XskTxPort(Some(tx), Default::default())));
            }
            None => h.open_tx(&iface)?,
        }
        Ok(h)
    }

    /// On an interface through AF_PACKET, steered by `filter`'s port map
    /// if it has one.
    fn start_packet(
        mut cfg: HostConfig,
        iface: String,
        filter: Option<XdpFilter>,
    ) -> Result<Host, RunError> {
        check_iface(&iface)?;
        fill_from_iface(&mut cfg, &iface)?;
        let tap = filter
            .map(|f| TapProgram::attach(&iface, f))
            .transpose()
            .map_err(|e| RunError::Device(format!("AF_PACKET's steering on {iface}: {e}")))?;
        let nq = cfg.queues;
        let group = (std::process::id() & 0xffff) as u16;
        let mut qs = Vec::with_capacity(nq);
        for q in 0..nq {
            qs.push(
                PacketQueue::open(
                    &iface,
                    q as u16,
                    (nq > 1).then_some(group),
                    cfg.frames_per_queue,
                    cfg.interrupts,
                    cfg.packet_per_frame,
                )
                .map_err(|e| RunError::Device(format!("AF_PACKET on {iface}: {e}")))?,
            );
        }
        if let Some(t) = &tap {
            for q in &qs {
                q.attach_filter(t.filter_fd()).map_err(|e| {
                    RunError::Device(format!("AF_PACKET on {iface}: the tap filter: {e}"))
                })?;
            }
        }
        let steered = if tap.is_some() {
            ", steered by a tap filter and tcx ingress"
        } else {
            ""
        };
        let finish: Finish =
            Box::new(|cells, _| into_pools::<PacketQueue>(cells, PacketQueue::into_pool));
        let mut h = Self::with_queues(
            &cfg,
            qs,
            finish,
            format!("AF_PACKET on {iface}, {nq} queue(s){steered}"),
            cfg.napi_in_irq,
        )?
        .on_iface();
        h.tap = tap;
        h.open_tx(&iface)?;
        Ok(h)
    }

    fn open_tx(&self, iface: &str) -> Result<(), RunError> {
        let raw = RawSocket::bind_tx(iface)
            .map_err(|e| RunError::Device(format!("AF_PACKET TX on {iface}: {e}")))?;
        self.sockets.set_tx(Box::new(PacketTx(raw)));
        Ok(())
    }

    fn on_iface(mut self) -> Self {
        self.guards = Some(Mutex::new(Vec::new()));
        self
    }

    fn with_queues<Q: RxQueue + Send + 'static>(
        cfg: &HostConfig,
        qs: Vec<Q>,
        finish: Finish,
        backend: String,
        irq_context: bool,
    ) -> Result<Host, RunError> {
        let sockets = Sockets::new(
            cfg.sock.clone(),
            qs.iter().map(|q| q.umem().clone()).collect(),
        );
        let mut table: NapiTable<u16> = NapiTable::default();
        let mut napis = Vec::new();
        let workers = (cfg.steer.mode != SteerMode::None)
            .then(|| {
                cfg.steer.validate().map_err(RunError::Config)?;
                Ok::<_, RunError>(Arc::new(Workers::new(
                    &cfg.steer,
                    Ports::Host(sockets.clone()),
                    // One token for "the device side runs" (the NAPIs are
                    // not workers here); given back at shutdown.
                    1,
                    SeqSource::Tcp,
                    Some(sockets.sock_flows().clone()),
                )))
            })
            .transpose()?;
        // One gro_flush_timeout per device, shared by its NAPIs.
        let gro_knob = GroKnob::new(cfg.gro_flush_timeout_ns);
        let defer_knob = GroKnob::new(cfg.defer_hard_irqs as u64);
        let knobs = (gro_knob.clone(), defer_knob.clone());
        for q in qs {
            let shared = share_napi(
                cfg,
                q,
                &sockets,
                workers.as_ref(),
                &knobs,
                irq_context,
                &mut table,
            );
            sockets.register_napi(shared.clone());
            napis.push(shared);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let threads = spawn_napi_threads(cfg, &napis, &sockets, &stop)?;
        let (server, worker_threads) = match &workers {
            Some(w) => spawn_workers(w, &sockets)?,
            None => (None, Vec::new()),
        };
        Ok(Host {
            sockets,
            napis,
            threads,
            stop,
            port: None,
            finish: Some(finish),
            backend,
            guards: None,
            xdp: None,
            tap: None,
            workers,
            worker_threads,
            server,
            tx_fault: None,
            irq_knobs: (gro_knob, defer_knob),
        })
    }

    /// The device's `gro_flush_timeout` (ns) and `napi_defer_hard_irqs`,
    /// which every NAPI of the host reads at its next completion: change
    /// them while it runs as the kernel's
    /// `/sys/class/net/IF/{gro_flush_timeout,napi_defer_hard_irqs}`.
    pub fn irq_knobs(&self) -> (&GroKnob, &GroKnob) {
        (&self.irq_knobs.0, &self.irq_knobs.1)
    }

    /// What the host runs on (backend, XDP mode, queues).
    pub fn backend(&self) -> &str {
        &self.backend
    }

    /// The kernel receives every frame this host reads, too: AF_PACKET
    /// without a port map taps a copy where AF_XDP's program (or
    /// AF_PACKET's steering) takes the frame. A program
    /// that reads a kernel socket on a port rxpath serves must then
    /// leave the interface's datagrams to rxpath, or read them twice.
    pub fn kernel_sees_frames(&self) -> bool {
        self.guards.is_some() && self.xdp.is_none() && self.tap.is_none()
    }

    /// The socket layer.
    pub fn sockets(&self) -> &Arc<Sockets> {
        &self.sockets
    }

    /// A UDP socket bound to `addr`. On an interface the kernel's own
    /// UDP is kept off the port while the host runs: a kernel socket holds
    /// it with a filter that drops everything ([`KernelPortGuard`]), so the
    /// kernel neither answers datagrams it also sees (AF_PACKET, or what
    /// the XDP program passes on) with ICMP port unreachable nor queues
    /// them. If the kernel already has a socket there, a warning says so.
    pub fn udp_bind(&self, addr: SocketAddr) -> Result<UdpSocket, SockError> {
        let sock = UdpSocket::bind(&self.sockets, addr, self.server.clone())?;
        if let Some(g) = &self.guards {
            match KernelPortGuard::bind(sock.local_addr()) {
                Ok(guard) => g.lock().unwrap_or_else(|e| e.into_inner()).push(guard),
                Err(e) => log::warn!(
                    "could not hold {} in the kernel ({e}): the kernel may answer \
                     datagrams it sees for this port itself",
                    sock.local_addr()
                ),
            }
        }
        Ok(sock)
    }

    /// Take (`on`) the frames for destination `key` (protocol, address or
    /// its family's wildcard, port) into rxpath, or give them back to the
    /// kernel, through the XDP program's port map (a filter with
    /// `port_map`). `Ok(false)` for a host that takes what its filter says
    /// whatever the port (a fixed port, or AF_PACKET, which sees every
    /// frame).
    pub fn take_port(&self, key: rxpath_dev::sys::xdp::PortKey, on: bool) -> std::io::Result<bool> {
        match (&self.xdp, &self.tap) {
            (Some(p), _) if p.has_port_map() => p.take_port(key, on).map(|()| true),
            (_, Some(t)) => t.take_port(key, on).map(|()| true),
            _ => Ok(false),
        }
    }

    /// Leave destination `key` (a specific address, whose socket is the
    /// kernel's) to the kernel even where the port map takes its port's
    /// wildcard, as the kernel's lookup prefers the bound address.
    /// `Ok(false)` for a host without a port map.
    pub fn leave_port(&self, key: rxpath_dev::sys::xdp::PortKey) -> std::io::Result<bool> {
        match (&self.xdp, &self.tap) {
            (Some(p), _) if p.has_port_map() => p.leave_port(key).map(|()| true),
            (_, Some(t)) => t.leave_port(key).map(|()| true),
            _ => Ok(false),
        }
    }

    /// The XDP program's port map descriptor, if it has one (a forked
    /// child of the process keeps it to give a port back).
    pub fn port_map_fd(&self) -> Option<std::os::fd::RawFd> {
        match &self.tap {
            Some(t) => Some(t.port_map_fd()),
            None => self.xdp.as_ref().and_then(|p| p.port_map_fd()),
        }
    }

    /// [`Self::udp_bind`] for a port the caller already holds in the
    /// kernel (a preloaded program's own UDP socket, bound to `addr` behind
    /// the same fd): no guard socket of the host's.
    pub fn udp_bind_held(&self, addr: SocketAddr) -> Result<UdpSocket, SockError> {
        self.udp_bind_held_with(addr, BindOptions::default())
    }

    /// [`Self::udp_bind_held`] with the options set before `bind`
    /// (`SO_REUSEPORT`: sockets that all set it share the address as a
    /// group that spreads flows over its members).
    pub fn udp_bind_held_with(
        &self,
        addr: SocketAddr,
        opts: BindOptions,
    ) -> Result<UdpSocket, SockError> {
        UdpSocket::bind_with(&self.sockets, addr, opts, self.server.clone())
    }

    /// The NAPIs.
    pub fn napis(&self) -> &[Arc<SharedNapi>] {
        &self.napis
    }

    /// The simulated NIC's port (with [`HostDevice::Sim`]).
    pub fn sim_port(&self) -> Option<MutexGuard<'_, SimPort>> {
        self.port
            .as_ref()
            .map(|p| p.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Stop the NAPI threads, leaving the NAPIs to busy-polling sockets
    /// (what a kernel with `napi_defer_hard_irqs` and `prefer_busy_poll`
    /// approaches; the tests use it to show busy polling alone delivers).
    pub fn stop_napi_threads(&mut self) {
        self.stop.store(true, Ordering::Release);
        for h in self.threads.drain(..) {
            h.thread().unpark();
            let _ = h.join();
        }
    }

    /// Stop: NAPI threads end, sockets close (their frames go home), each
    /// NAPI is disabled, drained and its queue's frames counted home.
    pub fn shutdown(mut self) -> HostReport {
        self.stop_all()
    }

    fn stop_all(&mut self) -> HostReport {
        self.stop_napi_threads();
        self.sockets.close_all();
        // The TX port gives its frames back to the queue they came from
        // (AF_XDP), or counts its own (the simulated NIC's TX ring).
        let (tx, (tx_total, tx_home)) = self.sockets.finish_tx();
        let tx = tx.into_iter().collect();
        self.sockets.unregister_napis();
        let mut cells = Vec::new();
        let mut queues = Vec::new();
        let mut taken = Vec::new();
        for n in &self.napis {
            // `napi_disable()`: no new owner; wait for a busy poller to leave.
            n.state.disable();
            while n.state.bits() & rxpath_core::napi::bits::SCHED != 0 {
                if n.state.in_busy_poll() {
                    thread::yield_now();
                } else {
                    // Left scheduled by a NAPI thread that stopped mid-poll.
                    n.state.complete();
                }
            }
            let Some(mut cell) = n.take() else { continue };
            self.drain(&mut cell);
            taken.push((n.queue, cell));
        }
        // Steering on: the devices are drained, nothing new reaches the
        // workers; they finish their backlogs and end, and what they freed
        // comes home through the cells.
        let mut workers = Vec::new();
        if let Some(w) = self.workers.take() {
            w.napis_running.store(0, Ordering::Release);
            for (id, h) in self.worker_threads.drain(..) {
                h.thread().unpark();
                let c = h.join().unwrap_or_default();
                workers.push(w.report(id, &c));
            }
        }
        for (queue, mut cell) in taken {
            cell.stop(rxpath_dev::mono_ns());
            self.drain(&mut cell);
            queues.push(HostQueue {
                queue,
                napi: cell.napi_stats(),
                device: cell.device_stats(),
            });
            cells.push(cell.into_any());
        }
        let port = self
            .port
            .take()
            .map(|p| p.into_inner().unwrap_or_else(|e| e.into_inner()));
        let (frames_total, frames_home) = match self.finish.take() {
            Some(f) => f(cells, port),
            None => (0, 0),
        };
        let (frames_total, frames_home) = (frames_total + tx_total, frames_home + tx_home);
        let mut snmp = Snmp::default();
        for q in &queues {
            snmp.merge(&q.napi.snmp);
        }
        for w in &workers {
            snmp.merge(&w.path.snmp);
        }
        self.sockets.add_send_snmp(&mut snmp);
        if let Some(g) = &self.guards {
            g.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
        HostReport {
            snmp,
            queues,
            sock: self.sockets.stats(),
            frames_total,
            frames_home,
            workers,
            tx,
        }
    }

    /// Poll a disabled NAPI's cell until its device and the frames coming
    /// home are drained. A real interface keeps receiving, so this is
    /// bounded.
    fn drain(&self, cell: &mut Box<dyn rxpath_core::sock::PollCell>) {
        let mut rounds = 0;
        while rounds < 100_000 && cell.has_work() {
            rounds += 1;
            if let Some(mut p) = self.sim_port() {
                p.flush(rxpath_dev::mono_ns());
            }
            let w = cell.weight();
            let _ = cell.poll_busy(w, rxpath_dev::mono_ns());
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if self.finish.is_some() {
            self.stop_all();
        }
    }
}

/// Fill in the interface's MAC and addresses where the config has none.
fn fill_from_iface(cfg: &mut HostConfig, iface: &str) -> Result<(), RunError> {
    let (mac, addrs) = rxpath_dev::sys::af_packet::iface_addrs(iface)
        .map_err(|e| RunError::Device(format!("{iface}: reading its addresses: {e}")))?;
    cfg.sock.mac = mac;
    cfg.sock.reasm = crate::sysctl::reasm(cfg.sock.reasm);
    if cfg.sock.local_addrs.is_empty() {
        cfg.sock.local_addrs = addrs;
    }
    if cfg.queues == 0 {
        cfg.queues = rxpath_dev::sys::iface::rx_queues(iface)
            .map_err(|e| RunError::Device(format!("{iface}: counting its RX queues: {e}")))?
            .min(64);
    }
    cfg.sock.local_traffic = rxpath_dev::sys::iface::carries_local_traffic(iface);
    if cfg.sock.prefixes.is_empty() {
        cfg.sock.prefixes = rxpath_dev::sys::iface::prefixes(iface).unwrap_or_default();
        cfg.sock.default_route = rxpath_dev::sys::iface::default_routes(iface);
    }
    Ok(())
}

/// A host worker's path on the calling thread: every queue's socket stage;
/// for `spread`, nothing in parallel before the sockets (IP input is
/// theirs) and the order restored in front of them.
fn host_bottom_half(
    w: &Arc<Workers>,
    id: Worker,
    socks: &Arc<Sockets>,
    budget: usize,
) -> BottomHalf {
    let stacks = || PerQueue((0..socks.queues()).map(|q| socks.stage(q as u16)).collect());
    if w.reorder.is_some() {
        let survivors = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let serial: Box<dyn rxpath_core::Stack> = Box::new(stacks());
        BottomHalf::new(
            w.clone(),
            id,
            Box::new(Collect(survivors.clone())),
            Some((serial, survivors)),
            budget,
        )
    } else {
        BottomHalf::new(w.clone(), id, Box::new(stacks()), None, budget)
    }
}
