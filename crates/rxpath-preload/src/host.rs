//! One rxpath host per process, on the configured interface, started by the
//! first `bind` it accelerates and shut down when the process exits (its
//! accounting written to `RXPATH_REPORT`).
//!
//! The XDP program takes exactly the bound ports: each `bind` rxpath serves
//! adds its port to the program's port map and the last `close` on it
//! takes it out, so a socket bound at any time is served and every other
//! frame (ARP, ND, TCP, other ports) goes to the kernel. The program goes
//! with the process, however it ends (a BPF link held by an fd).

use crate::config::{Config, Mode};
use rxpath_dev::sys::xdp::{PortKey, XdpFilter};
use rxpath_runtime::{Host, HostConfig, HostDevice, HostReport, UdpSocket};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The report's parts, as the contract with `rxpath exec` has them.
pub use rxpath_contract::report::{
    Accounting, DeviceCounts, Fallback, Path, PreloadReport, SocketPath, TxRing,
};

/// `received = delivered + dropped` over every NAPI of `h`, and its
/// frames.
fn accounting(h: &HostReport) -> Accounting {
    let t = h.napi_total();
    Accounting {
        received: t.received,
        delivered: t.delivered,
        dropped: t.dropped.total(),
        drops: t
            .dropped
            .iter()
            .map(|(r, n)| (r.name().to_string(), n))
            .collect(),
        frames_total: h.frames_total,
        frames_home: h.frames_home,
    }
}

/// The device's counters of `h`, summed over its queues.
fn device_counts(h: &HostReport) -> DeviceCounts {
    let mut d = DeviceCounts::default();
    for q in &h.queues {
        d.offered += q.device.offered;
        d.rx_ring += q.device.rx_ring;
        d.rx_missed += q.device.rx_missed;
        d.rx_no_buffer += q.device.rx_no_buffer;
        d.rx_too_long += q.device.rx_too_long;
    }
    d
}

/// The AF_XDP TX ring's counters of `h`, if it has one.
fn tx_ring(h: &HostReport) -> Option<TxRing> {
    Some(TxRing {
        posted: *h.tx.get("xsk_tx_sent")?,
        completed: h.tx.get("xsk_tx_completed").copied().unwrap_or(0),
        unfinished: h.sock.tx_unfinished,
    })
}

/// The destinations the XDP program takes for a UDP socket bound to
/// `addr`, keyed as the kernel keys sockets: its address (or its family's
/// wildcard) and port; an IPv6 wildcard socket without `IPV6_V6ONLY`
/// takes IPv4 too (as `::ffff:a.b.c.d`), so the IPv4 wildcard as well.
pub(crate) fn map_keys(addr: SocketAddr, v6only: bool) -> Vec<PortKey> {
    let udp = |addr| PortKey {
        proto: libc::IPPROTO_UDP as u8,
        addr,
    };
    let mut keys = vec![udp(addr)];
    match addr.ip() {
        IpAddr::V6(a) if a.is_unspecified() && !v6only => {
            keys.push(udp(SocketAddr::new([0, 0, 0, 0].into(), addr.port())));
        }
        IpAddr::V6(a) => {
            if let Some(v4) = a.to_ipv4_mapped() {
                keys = vec![udp(SocketAddr::new(v4.into(), addr.port()))];
            }
        }
        IpAddr::V4(_) => {}
    }
    keys
}

/// The file this process's report goes to, made when its host starts (a
/// daemon may chroot or drop privileges before it exits): at `path`, or,
/// when another process of the program (one it started with `exec`) made
/// one there first, at `path.PID`. Each process's report is kept, and
/// `rxpath exec` sums them (an empty one: a process that never exited).
fn report_file(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    match o.open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let mut p = path.as_os_str().to_owned();
            p.push(format!(".{}", std::process::id()));
            o.open(p)
        }
        r => r,
    }
}

/// Frames per queue of a program's host (2048 bytes each: 32 MiB a queue),
/// four times a `Host`'s default: the AF_XDP RX ring is half of them, 8192
/// deep, about 40 ms of 200 k datagrams/s. A served program is away from
/// its reads while the scheduler runs something else on its core, and its
/// generator may send what it owes in a burst; at 2048 such bursts overflowed
/// the ring well below the core's limit (`bench dns`: knotd lost at the RX
/// ring at 200 k/s with its core 80 % busy), at 8192 they did not.
const FRAMES_PER_QUEUE: usize = 16384;

struct Running {
    /// The metrics endpoint (`RXPATH_METRICS`), stopped before the host.
    metrics: Option<rxpath_runtime::metrics::Metrics>,
    /// The control socket `rxpath ctl --pid PID` talks to.
    control: Option<rxpath_runtime::ctl::Control>,
    host: Host,
    /// Sockets per destination the XDP program takes.
    ports: BTreeMap<PortKey, usize>,
}

struct State {
    running: Option<Running>,
    /// The host could not start: why (said to each bind after).
    failed: Option<String>,
    accelerated: u64,
    fallbacks: BTreeMap<Fallback, u64>,
    unsupported: BTreeMap<String, u64>,
    told: std::collections::BTreeSet<String>,
    /// What the interface watch saw ([`PreloadReport::link_events`]).
    link_events: Vec<String>,
    /// Each socket rxpath took ([`PreloadReport::sockets`]), by the id
    /// its [`crate::sock::Accel`] keeps.
    sockets: Vec<SocketPath>,
    /// The interface went away: nothing more is served.
    gone: Option<String>,
    /// Where the report goes ([`report_file`]), opened as the host started.
    report: Option<std::fs::File>,
    /// Specific addresses whose socket is the kernel's: the port map says
    /// so ([`Global::kernel_keeps`]) unless an rxpath socket takes them.
    kernel_keys: std::collections::BTreeSet<PortKey>,
}

/// The process's preload state.
pub(crate) struct Global {
    pub(crate) cfg: Config,
    state: Mutex<State>,
    ifindex: OnceLock<u32>,
}

static GLOBAL: OnceLock<Global> = OnceLock::new();

thread_local! {
    /// This thread is inside the library (starting or stopping the host):
    /// the sockets it makes are rxpath's own, the kernel's untouched.
    static INSIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// This thread is running the library's own code.
pub(crate) fn inside() -> bool {
    INSIDE.with(|c| c.get())
}

/// Run `f` as the library's own code (see [`inside`]).
fn as_library<R>(f: impl FnOnce() -> R) -> R {
    let was = INSIDE.with(|c| c.replace(true));
    let r = f();
    INSIDE.with(|c| c.set(was));
    r
}

/// The process's state, made on first use from the environment.
pub(crate) fn global() -> &'static Global {
    GLOBAL.get_or_init(|| {
        let cfg = Config::from_env().unwrap_or_else(|e| {
            say(&format!("{e}; every socket stays the kernel's"));
            Config::default()
        });
        Global {
            cfg,
            ifindex: OnceLock::new(),
            state: Mutex::new(State {
                kernel_keys: Default::default(),
                running: None,
                failed: None,
                accelerated: 0,
                fallbacks: BTreeMap::new(),
                unsupported: BTreeMap::new(),
                told: Default::default(),
                link_events: Vec::new(),
                sockets: Vec::new(),
                gone: None,
                report: None,
            }),
        }
    })
}

/// What hands every served socket back to the kernel when the interface
/// goes ([`Global::link_event`]): the socket layer's, set at load
/// ([`set_hand_all_back`]), so that this layer calls up through it
/// without naming it.
static HAND_ALL_BACK: OnceLock<fn(&str)> = OnceLock::new();

/// Set [`HAND_ALL_BACK`] (once, at load).
pub(crate) fn set_hand_all_back(f: fn(&str)) {
    let _ = HAND_ALL_BACK.set(f);
}

/// The interface watch's report ([`crate::linkwatch`]).
/// [`Host::leave_port`], a failure said.
fn leave(host: &Host, k: PortKey) {
    if let Err(e) = host.leave_port(k) {
        say(&format!(
            "leaving {} to the kernel in the port map: {e}",
            k.addr
        ));
    }
}

fn on_link_event(what: &str, gone: bool) {
    global().link_event(what, gone);
}

fn on_address(a: std::net::IpAddr, on: &str, added: bool) {
    global().address(a, on, added);
}

/// The process is about to give up privileges (`capset`, `setuid` and
/// their kin): open the device now, while it still may. A daemon that
/// drops them before it binds (named keeps only `CAP_NET_BIND_SERVICE`
/// from its first moments; NSD, unbound, knotd and pdns change user)
/// could not open it at its first bind. Started here, it is said as at a
/// bind; a failure is kept and said to each bind after.
pub(crate) fn before_privileges_drop() {
    let Some(g) = GLOBAL.get() else {
        // The first call into the library: its state is made now.
        return before_privileges_drop_with(global());
    };
    before_privileges_drop_with(g);
}

fn before_privileges_drop_with(g: &Global) {
    let Some(iface) = g.cfg.iface.clone() else {
        return;
    };
    if !g.enabled() || inside() {
        return;
    }
    let mut s = g.state();
    if s.running.is_some() || s.failed.is_some() {
        return;
    }
    if let Err(e) = g.ensure_running(&mut s, &iface) {
        drop(s);
        say(&format!("{e}; every socket stays the kernel's"));
    }
}

/// The global state if it was ever made (the exit handler must not make it).
pub(crate) fn started() -> Option<&'static Global> {
    if is_fork_child() {
        // The host and its threads are the parent's.
        return None;
    }
    GLOBAL.get()
}

static FORK_CHILD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// This process is a child forked from one whose sockets rxpath served:
/// its copies of them are the kernel's, and it starts no host (the
/// interface is the parent's).
pub(crate) fn set_fork_child() {
    FORK_CHILD.store(true, std::sync::atomic::Ordering::SeqCst);
}

fn is_fork_child() -> bool {
    FORK_CHILD.load(std::sync::atomic::Ordering::SeqCst)
}

pub(crate) use crate::config::say;

impl Global {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The interface's index (`IP_PKTINFO`'s `ipi_ifindex`).
    pub(crate) fn ifindex(&self) -> u32 {
        *self
            .ifindex
            .get_or_init(|| self.cfg.iface.as_deref().map_or(0, crate::sys::ifindex))
    }

    /// Is a membership request on the interface rxpath serves (named by
    /// index or address, or the kernel's route to the group leads there)?
    /// False while no socket is served (the interface's addresses are
    /// known once the host runs).
    pub(crate) fn serves_membership(&self, r: &crate::mcast::Request) -> bool {
        use crate::mcast::Iface;
        let addrs = match self.state().running.as_ref() {
            Some(h) => h.host.sockets().config().local_addrs.clone(),
            None => return false,
        };
        match r.iface {
            Iface::Index(i) => i == self.ifindex(),
            Iface::Addr(a) => addrs.contains(&a),
            Iface::Route => crate::sys::route_source(r.group).is_some_and(|a| addrs.contains(&a)),
        }
    }

    /// The interface watch saw `what` ([`crate::linkwatch`]): said, and
    /// kept for the report. With `gone`, rxpath's device went with it:
    /// every served socket goes back to the kernel, and nothing bound
    /// later is served.
    /// The host has address `a` on interface `on` ([`crate::linkwatch`]):
    /// rxpath's IP input takes it too from now on, as the kernel takes
    /// any interface's address; one `added` while the program runs is
    /// said and kept for the report.
    pub(crate) fn address(&self, a: std::net::IpAddr, on: &str, added: bool) {
        let mut s = self.state();
        let Some(r) = &s.running else { return };
        if !r.host.sockets().add_local_addr(a) || !added {
            return;
        }
        let what = format!("address {a} added on {on}: served as the host's others");
        say(&what);
        s.link_events.push(what);
    }

    pub(crate) fn link_event(&self, what: &str, gone: bool) {
        say(what);
        {
            let mut s = self.state();
            s.link_events.push(what.to_string());
            if !gone || s.gone.is_some() {
                return;
            }
            s.gone = Some(what.to_string());
        }
        if let Some(hand_all_back) = HAND_ALL_BACK.get() {
            hand_all_back(what);
        }
    }

    /// Start the host on `iface` unless it runs or could not start (then
    /// why).
    fn ensure_running(&self, s: &mut State, iface: &str) -> Result<(), String> {
        if s.running.is_some() {
            return Ok(());
        }
        if let Some(why) = &s.failed {
            return Err(why.clone());
        }
        match as_library(|| self.start(iface)) {
            Ok(h) => {
                for k in &s.kernel_keys {
                    leave(&h.host, *k);
                }
                s.running = Some(h);
                if let Some(path) = &self.cfg.report {
                    match report_file(path) {
                        Ok(f) => s.report = Some(f),
                        Err(e) => say(&format!("the report at {}: {e}", path.display())),
                    }
                }
                Ok(())
            }
            Err(e) => {
                let why = format!("rxpath on {iface}: {e}");
                s.failed = Some(why.clone());
                Err(why)
            }
        }
    }

    /// A socket on `addr` is served: its index in the report's list.
    pub(crate) fn served(&self, addr: SocketAddr) -> usize {
        let mut s = self.state();
        s.sockets.push(SocketPath {
            addr,
            path: Path::Rxpath,
            why: None,
        });
        s.sockets.len() - 1
    }

    /// Socket `id` ([`Global::served`]) went back to the kernel: `why`.
    pub(crate) fn went_to_kernel(&self, id: usize, why: &str) {
        if let Some(p) = self.state().sockets.get_mut(id) {
            p.path = Path::Kernel;
            p.why = Some(why.to_string());
        }
    }

    /// The interface is configured: sockets may be accelerated.
    pub(crate) fn enabled(&self) -> bool {
        self.cfg.iface.is_some() && !is_fork_child()
    }

    /// Count a socket left to the kernel, and say why the first time.
    pub(crate) fn fallback(&self, why: Fallback, detail: &str) {
        let mut s = self.state();
        *s.fallbacks.entry(why).or_default() += 1;
        let key = format!("{why:?}");
        if s.told.insert(key) {
            say(&format!("a socket stays the kernel's: {detail}"));
        }
    }

    /// Count a call refused on an accelerated socket (`EOPNOTSUPP`), and
    /// say so the first time.
    pub(crate) fn unsupported(&self, what: &str) {
        let mut s = self.state();
        *s.unsupported.entry(what.to_string()).or_default() += 1;
        if s.told.insert(format!("unsupported {what}")) {
            say(&format!(
                "{what} is not supported on an rxpath socket: EOPNOTSUPP"
            ));
        }
    }

    /// An rxpath socket for `addr`, which the caller's kernel socket has
    /// just bound (the port is held in the kernel), with the destinations
    /// the XDP program now takes for it ([`map_keys`]), or why not.
    pub(crate) fn bind(
        &self,
        addr: SocketAddr,
        opts: rxpath_core::sock::BindOptions,
        v6only: bool,
    ) -> Result<(UdpSocket, Vec<PortKey>), (Fallback, String)> {
        let Some(iface) = self.cfg.iface.clone() else {
            return Err((Fallback::NoIface, "no RXPATH_IFACE".into()));
        };
        if let Err(why) = self.cfg.allowed(addr) {
            return Err((Fallback::Rule, why));
        }
        if addr.port() == 0 {
            return Err((
                Fallback::EphemeralPort,
                format!("{addr}: an ephemeral port"),
            ));
        }
        let mut s = self.state();
        if let Some(why) = &s.gone {
            return Err((Fallback::IfaceGone, format!("{addr}: {why}")));
        }
        if let Err(e) = self.ensure_running(&mut s, &iface) {
            return Err((Fallback::HostFailed, e));
        }
        let Some(r) = s.running.as_mut() else {
            return Err((Fallback::HostFailed, "no host".into()));
        };
        // A group or broadcast address takes what is sent to it here.
        let c = r.host.sockets().config();
        let ours = addr.ip().is_unspecified()
            || addr.ip().is_multicast()
            || c.local_addrs.contains(&addr.ip())
            || matches!(addr.ip(), IpAddr::V4(a) if rxpath_core::ip::is_broadcast(&c.prefixes, a));
        if !ours {
            return Err((
                Fallback::OtherAddress,
                format!("{addr} is not an address of {iface}"),
            ));
        }
        let sock = r
            .host
            .udp_bind_held_with(addr, opts)
            .map_err(|e| (Fallback::BindRefused, format!("{addr}: {e}")))?;
        let keys = map_keys(addr, v6only);
        for (i, k) in keys.iter().enumerate() {
            if r.ports.contains_key(k) {
                continue;
            }
            if let Err(e) = r.host.take_port(*k, true) {
                for k in keys[..i].iter().filter(|k| !r.ports.contains_key(k)) {
                    let _ = r.host.take_port(*k, false);
                }
                return Err((
                    Fallback::PortMapFull,
                    format!("{addr}: the XDP program's port map: {e}"),
                ));
            }
        }
        for k in &keys {
            *r.ports.entry(*k).or_default() += 1;
        }
        if self.cfg.busy_poll_us > 0 {
            sock.set_busy_poll(self.cfg.busy_poll_us);
        }
        sock.set_busy_poll_budget(self.cfg.busy_poll_budget);
        s.accelerated += 1;
        Ok((sock, keys))
    }

    /// An rxpath socket that took `keys` closed (or went back to the
    /// kernel): the last one on each gives it back to the kernel.
    /// True if another rxpath socket still takes one of them (a
    /// `SO_REUSEPORT` sibling): its datagrams still come to rxpath.
    pub(crate) fn release(&self, keys: &[PortKey]) -> bool {
        let mut s = self.state();
        let State {
            running,
            kernel_keys,
            ..
        } = &mut *s;
        let Some(r) = running.as_mut() else {
            return false;
        };
        let mut shared = false;
        for k in keys {
            let Some(n) = r.ports.get_mut(k) else {
                continue;
            };
            *n -= 1;
            if *n == 0 {
                r.ports.remove(k);
                if kernel_keys.contains(k) {
                    leave(&r.host, *k);
                } else if let Err(e) = r.host.take_port(*k, false) {
                    say(&format!("giving {} back to the kernel: {e}", k.addr));
                }
            } else {
                shared = true;
            }
        }
        shared
    }

    /// A socket bound to `addr` is the kernel's (it stayed there at
    /// `bind`, or was handed back): if `addr` is a specific address, the
    /// port map leaves it to the kernel even where an rxpath socket takes
    /// the port's wildcard, as the kernel's lookup prefers the bound
    /// address. Kept until the process exits: should that socket close,
    /// the kernel gives what comes to its wildcard socket, the one behind
    /// rxpath's fd, which the program reads all the same.
    pub(crate) fn kernel_keeps(&self, addr: SocketAddr, v6only: bool) {
        if addr.port() == 0 {
            return;
        }
        let mut s = self.state();
        for k in map_keys(addr, v6only) {
            if k.addr.ip().is_unspecified() || !s.kernel_keys.insert(k) {
                continue;
            }
            if let Some(r) = s.running.as_ref().filter(|r| !r.ports.contains_key(&k)) {
                leave(&r.host, k);
            }
        }
    }

    fn start(&self, iface: &str) -> Result<Running, String> {
        let c = &self.cfg;
        let mut cfg = HostConfig {
            queues: 0,
            napi_threads: c.napi_threads,
            // Prefer busy polling's deferral as asked; without one, a
            // thread that polls before it sleeps defers by the IRQ
            // suspension, which also holds while a thread is being handed
            // events.
            prefer_busy_poll_ns: c.prefer_busy_poll_ns,
            irq_suspend_timeout_ns: c.irq_suspend_timeout_ns,
            gro_flush_timeout_ns: c.gro_flush_timeout_ns,
            defer_hard_irqs: c.defer_hard_irqs,
            frames_per_queue: FRAMES_PER_QUEUE,
            ..HostConfig::default()
        };
        cfg.sock.busy_read_us = c.busy_poll_us;
        let filter = XdpFilter {
            protocol: Some(17),
            port_map: true,
            ..XdpFilter::default()
        };
        let dev = match c.mode {
            Mode::Packet => HostDevice::Packet {
                iface: iface.to_string(),
                filter: Some(filter),
            },
            m => HostDevice::Xdp {
                iface: iface.to_string(),
                filter,
                fallback: m == Mode::Auto,
                xsk_busy_poll_us: 0,
            },
        };
        let host = Host::start(cfg, dev).map_err(|e| e.to_string())?;
        // Every interface's addresses are the host's (the watch adds
        // those that come later).
        for (_, a) in crate::linkwatch::host_addresses(iface) {
            host.sockets().add_local_addr(a);
        }
        say(&format!(
            "UDP on {iface} through rxpath ({})",
            host.backend()
        ));
        let metrics =
            c.metrics.and_then(
                |a| match rxpath_runtime::metrics::Metrics::for_host(&host, a) {
                    Ok(m) => {
                        say(&format!("metrics on http://{}/metrics", m.addr));
                        Some(m)
                    }
                    Err(e) => {
                        say(&format!(
                            "metrics on {a}: {e}; the program runs without them"
                        ));
                        None
                    }
                },
            );
        let control =
            match rxpath_runtime::ctl::Control::start(rxpath_runtime::ctl::HostKnobs::of(&host)) {
                Ok(c) => {
                    say(&format!(
                        "live knobs: rxpath ctl --pid {} (socket {})",
                        std::process::id(),
                        c.path().display()
                    ));
                    Some(c)
                }
                Err(e) => {
                    say(&format!("{e}; rxpath ctl cannot reach this process"));
                    None
                }
            };
        crate::forkq::set_port_map(host.port_map_fd());
        crate::linkwatch::start(iface, on_link_event, on_address);
        Ok(Running {
            metrics,
            control,
            host,
            ports: BTreeMap::new(),
        })
    }

    /// Stop the host (the process is exiting) and write the report.
    pub(crate) fn finish(&self) {
        let mut s = self.state();
        let backend = s.running.as_ref().map(|r| r.host.backend().to_string());
        let host = s.running.take().map(|r| {
            drop(r.metrics);
            drop(r.control);
            crate::device::forget();
            as_library(|| r.host.shutdown())
        });
        let rep = PreloadReport {
            config: self.cfg.clone(),
            accounting: host.as_ref().map(accounting),
            device: host.as_ref().map(device_counts),
            tx: host.as_ref().and_then(tx_ring),
            host: host.as_ref().and_then(|h| serde_json::to_value(h).ok()),
            backend,
            accelerated: s.accelerated,
            fallbacks: s.fallbacks.clone(),
            unsupported: s.unsupported.clone(),
            kernel_reads: crate::sock::KERNEL_READS.load(std::sync::atomic::Ordering::Relaxed),
            link_events: s.link_events.clone(),
            sockets: s.sockets.clone(),
            processes: 1,
        };
        drop(s);
        if let Some(path) = &self.cfg.report {
            let text = serde_json::to_string_pretty(&rep).unwrap_or_default();
            let file = self
                .state()
                .report
                .take()
                .map_or_else(|| report_file(path), Ok);
            let written = file.and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()));
            if let Err(e) = written {
                say(&format!("writing the report to {}: {e}", path.display()));
            }
        }
    }
}
