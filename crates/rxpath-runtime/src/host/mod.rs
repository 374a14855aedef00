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

mod open;
mod stop;
mod threads;
mod tx;

use crate::run::RunError;
use crate::sock::{BacklogServer, ListenShare, TcpListener, TcpStream, TcpWaits, UdpSocket};
use crate::steer::Workers;
use rxpath_core::gro::GroKnob;
use rxpath_core::napi::{BundleMode, NAPI_POLL_WEIGHT};
use rxpath_core::sock::{BindOptions, SharedNapi, SockConfig, SockError, Sockets};
use rxpath_core::steer::Worker;
use rxpath_dev::sim::{SimConfig, SimPort};
use rxpath_dev::sync::lock;
use rxpath_dev::sys::iface::KernelPortGuard;
use rxpath_dev::sys::tap::TapProgram;
use rxpath_dev::sys::xdp::{XdpFilter, XdpProgram};
use std::any::Any;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

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

impl HostDevice {
    /// AF_XDP on `iface` taking `proto`'s ports the host's sockets bind
    /// (the XDP program's port map: `udp_bind`, `tcp_listen`,
    /// `tcp_connect` take theirs), no AF_PACKET fallback, no XSK busy
    /// polling.
    pub fn xdp_ports(iface: &str, proto: u8) -> HostDevice {
        HostDevice::Xdp {
            iface: iface.to_string(),
            filter: XdpFilter {
                protocol: Some(proto),
                port_map: true,
                ..XdpFilter::default()
            },
            fallback: false,
            xsk_busy_poll_us: 0,
        }
    }
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
    /// GRO on every NAPI (`ethtool -K IF gro on`, the kernel's default):
    /// TCP segments for a host with TCP, and UDP for sockets with
    /// `UDP_GRO` ([`Socket::set_udp_gro`](rxpath_core::sock::Socket::set_udp_gro)); every other
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
    /// Run rxpath's TCP ([`Host::tcp_listen`], [`Host::tcp_connect`]):
    /// IP input hands TCP segments to the host's TCP machine, with the
    /// namespace's `net.ipv4.tcp_*` sysctls as its knobs, and a thread
    /// runs its timers. Off: TCP is the kernel's.
    pub tcp: bool,
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
            tcp: false,
        }
    }
}

mod report;
pub use report::{HostQueue, HostReport, TcpReport};

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
    /// With TCP: its waiters and the thread running its timers.
    tcp: Option<(Arc<TcpWaits>, JoinHandle<()>)>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("backend", &self.backend)
            .field("napis", &self.napis)
            .finish()
    }
}

impl Host {
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
        if cfg.tcp {
            let mtu = match &dev {
                HostDevice::Sim(_) => None,
                HostDevice::Xdp { iface, .. } | HostDevice::Packet { iface, .. } => {
                    rxpath_dev::sys::iface::LinkState::of(iface).map(|l| l.mtu as usize)
                }
            };
            // AF_XDP's TX port sends TCP GSO packets (its packet socket).
            let gso = matches!(dev, HostDevice::Xdp { .. });
            cfg.sock.tcp = Some(crate::sysctl::tcp(mtu.unwrap_or(cfg.sock.mtu), gso));
            cfg.sock.tcp_secret = crate::sysctl::tcp_secret();
        }
        cfg.sock.current_cpu = || rxpath_os::sched::current_cpu().unwrap_or(0) as u32;
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
                Ok(guard) => lock(g).push(guard),
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

    /// The waiting half of the host's TCP, if it runs TCP.
    fn tcp_host(&self) -> std::io::Result<crate::sock::TcpHost> {
        match &self.tcp {
            Some((waits, _)) => Ok(crate::sock::TcpHost {
                socks: self.sockets.clone(),
                waits: waits.clone(),
            }),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "this host runs no TCP (HostConfig::tcp)",
            )),
        }
    }

    /// A TCP socket listening on `addr` (`socket`, `bind`, `listen`), on
    /// rxpath's TCP. On an interface the kernel holds the port
    /// ([`KernelPortGuard::bind_tcp`]: a port 0 is the one it gives) and
    /// the XDP program's port map (or AF_PACKET's steering) takes every
    /// segment to it, so the kernel never answers one. A host that taps
    /// frames the kernel sees too (AF_PACKET without a port map) cannot
    /// serve TCP: the kernel would reset each connection.
    pub fn tcp_listen(&self, addr: SocketAddr, backlog: i32) -> std::io::Result<TcpListener> {
        let tcp = self.tcp_host()?;
        let addr = self.hold_tcp(addr)?;
        TcpListener::listen(tcp, addr, backlog, ListenShare::default())
    }

    /// TCP connections still sending (data or a FIN not yet
    /// acknowledged), those their program closed included.
    pub fn tcp_sending(&self) -> usize {
        self.sockets
            .tcp_call(rxpath_dev::mono_ns(), |s, _| s.sending())
            .unwrap_or(0)
    }

    /// TCP connections on local port `port`, those their program closed
    /// and still sending included: the port map must keep taking the
    /// port's segments while any lives.
    pub fn tcp_connections_on(&self, port: u16) -> usize {
        self.sockets
            .tcp_call(rxpath_dev::mono_ns(), |s, _| s.connections_on(port))
            .unwrap_or(0)
    }

    /// Does this host run rxpath's TCP ([`HostConfig::tcp`])?
    pub fn runs_tcp(&self) -> bool {
        self.tcp.is_some()
    }

    /// A TCP socket listening on `addr`, whose port the caller holds: in
    /// the kernel (a preloaded program's own socket, bound there) and in
    /// the port map ([`Self::take_port`]), as
    /// [`Self::udp_bind_held_with`] is for UDP; `share`: `IPV6_V6ONLY`,
    /// `SO_REUSEPORT`.
    pub fn tcp_listen_held(
        &self,
        addr: SocketAddr,
        backlog: i32,
        share: ListenShare,
    ) -> std::io::Result<TcpListener> {
        TcpListener::listen(self.tcp_host()?, addr, backlog, share)
    }

    /// A TCP connection to `to` from `from` (its port 0: one the kernel
    /// gives, held as [`Self::tcp_listen`] holds a listener's), blocking
    /// until the handshake ends.
    pub fn tcp_connect(&self, from: SocketAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
        let tcp = self.tcp_host()?;
        let from = self.hold_tcp(from)?;
        TcpStream::connect(tcp, from, to)
    }

    /// A TCP connection to `to` from `from`, whose port the caller holds
    /// (in the kernel and in the port map, as for
    /// [`Self::tcp_listen_held`]): the SYN is sent and the call returns;
    /// the handshake ends when the stream's events say `EPOLLOUT`.
    pub fn tcp_connect_held(&self, from: SocketAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
        TcpStream::connect_start(self.tcp_host()?, from, to)
    }

    /// [`Self::tcp_connect_held`], the connection opened as `how` says
    /// (Fast Open); with the bytes its SYN carried.
    pub fn tcp_open_held(
        &self,
        from: SocketAddr,
        to: SocketAddr,
        how: crate::sock::Opening<'_>,
    ) -> std::io::Result<(TcpStream, usize)> {
        TcpStream::open(self.tcp_host()?, from, to, how)
    }

    /// Hold `addr` for rxpath's TCP: the kernel's port guard and the port
    /// map's entry. Returns the address with the port the kernel gave.
    fn hold_tcp(&self, mut addr: SocketAddr) -> std::io::Result<SocketAddr> {
        if self.kernel_sees_frames() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "AF_PACKET without a port map: the kernel sees every frame and would \
                 reset rxpath's TCP connections; use AF_XDP or a port map",
            ));
        }
        if let Some(g) = &self.guards {
            let guard = KernelPortGuard::bind_tcp(addr).map_err(|e| match e.raw_os_error() {
                Some(libc::EADDRINUSE) => std::io::Error::new(
                    e.kind(),
                    format!(
                        "TCP {addr} is taken in the kernel: a socket bound there, or an \
                         earlier server's connections waiting in TIME_WAIT (up to 60 s; \
                         `ss -tan sport = :{}`)",
                        addr.port()
                    ),
                ),
                _ => e,
            })?;
            addr = guard.local_addr()?;
            lock(g).push(guard);
        }
        let key = rxpath_dev::sys::xdp::PortKey { proto: 6, addr };
        self.take_port(key, true)?;
        Ok(addr)
    }

    /// The host's TCP counters (`Tcp:`, `TcpExt:` by the kernel's names)
    /// and what its TCP layer sent, if it runs TCP.
    pub fn tcp_counters(&self) -> Option<(Vec<(String, u64)>, rxpath_core::sock::TcpTxCounters)> {
        self.sockets.tcp_counters()
    }

    /// The NAPIs.
    pub fn napis(&self) -> &[Arc<SharedNapi>] {
        &self.napis
    }

    /// The simulated NIC's port (with [`HostDevice::Sim`]).
    pub fn sim_port(&self) -> Option<MutexGuard<'_, SimPort>> {
        self.port.as_ref().map(|p| lock(p))
    }
}
