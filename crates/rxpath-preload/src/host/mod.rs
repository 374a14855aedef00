//! One rxpath host per process, on the configured interface, started by the
//! first `bind` it accelerates and shut down when the process exits (its
//! accounting written to `RXPATH_REPORT`).
//!
//! The XDP program takes exactly the bound ports: each `bind` rxpath serves
//! adds its port to the program's port map and the last `close` on it
//! takes it out, so a socket bound at any time is served and every other
//! frame (ARP, ND, TCP, other ports) goes to the kernel. The program goes
//! with the process, however it ends (a BPF link held by an fd).

use crate::config::Config;
use rxpath_dev::sync::lock;
use rxpath_dev::sys::xdp::PortKey;
use rxpath_runtime::Host;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The report's parts, as the contract with `rxpath exec` has them.
pub use rxpath_contract::report::{
    Accounting, DeviceCounts, Fallback, Path, PreloadReport, SocketPath, TxRing,
};

mod ports;
mod report;
mod start;

use ports::leave;
use report::report_file;

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
    /// its [`crate::udp::sock::Accel`] keeps.
    sockets: Vec<SocketPath>,
    /// The interface went away: nothing more is served.
    gone: Option<String>,
    /// Where the report goes ([`report_file`]), opened as the host started.
    report: Option<std::fs::File>,
    /// Specific addresses whose socket is the kernel's: the port map says
    /// so ([`Global::kernel_keeps`]) unless an rxpath socket takes them.
    kernel_keys: std::collections::BTreeSet<PortKey>,
    /// TCP ports whose last socket closed while connections of the
    /// machine still used them (sending what was written): their keys
    /// leave the port map once none does ([`Global::release_tcp`]).
    /// With each, the kernel socket that held a client's port (a dup of
    /// its fd): the kernel must not give the port to another socket
    /// while rxpath's connection on it lives.
    tcp_deferred: Vec<(u16, Vec<PortKey>, Option<crate::sys::Ours>)>,
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
                tcp_deferred: Vec::new(),
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

/// The thread that gives deferred TCP ports back once their connections
/// end ([`Global::release_tcp`]): one at a time, while any waits.
fn start_port_sweeper() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static RUNNING: AtomicBool = AtomicBool::new(false);
    if RUNNING.swap(true, Ordering::AcqRel) {
        return;
    }
    let r = crate::sys::signals_blocked(|| {
        std::thread::Builder::new()
            .name("rxpath-tcp-ports".into())
            .spawn(|| {
                std::thread::sleep(std::time::Duration::from_secs(1));
                // The next look starts its own thread if ports still wait.
                RUNNING.store(false, Ordering::Release);
                global().release_tcp(0, Vec::new(), None);
            })
    });
    if r.is_err() {
        RUNNING.store(false, Ordering::Release);
    }
}

impl Global {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
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
    pub(crate) fn serves_membership(&self, r: &crate::udp::mcast::Request) -> bool {
        use crate::udp::mcast::Iface;
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
        // The host's descriptors, and the report's file, are numbered
        // above those the program freed (`above_the_program`).
        let start = || {
            let h = crate::sys::signals_blocked(|| self.start(iface))?;
            let report = self.cfg.report.as_ref().map(|p| (p, report_file(p)));
            Ok::<_, String>((h, report))
        };
        match as_library(|| crate::sys::ours::above_the_program(start)) {
            Ok((h, report)) => {
                for k in &s.kernel_keys {
                    leave(&h.host, *k);
                }
                s.running = Some(h);
                match report {
                    Some((_, Ok(f))) => s.report = Some(f),
                    Some((path, Err(e))) => say(&format!("the report at {}: {e}", path.display())),
                    None => {}
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

    /// The host's TCP connections still sending
    /// ([`rxpath_runtime::Host::tcp_sending`]); 0 without a host.
    pub(crate) fn tcp_sending(&self) -> usize {
        self.state()
            .running
            .as_ref()
            .map_or(0, |r| r.host.tcp_sending())
    }

    /// A TCP socket on `port` that took `keys` closed: they leave the
    /// port map once no connection of the machine uses the port (one
    /// closed by its program may still be sending, or wait in
    /// TIME_WAIT; the kernel would reset it), and `hold`, the kernel
    /// socket that reserved a client's port, closes then. Until then
    /// they wait here, looked at again each second (a thread runs while
    /// any waits) and at every close.
    pub(crate) fn release_tcp(
        &self,
        port: u16,
        keys: Vec<PortKey>,
        hold: Option<crate::sys::Ours>,
    ) {
        let (free, left): (Vec<PortKey>, bool) = {
            let mut s = self.state();
            let mut waiting = std::mem::take(&mut s.tcp_deferred);
            if !keys.is_empty() {
                waiting.push((port, keys, hold));
            }
            let Some(r) = s.running.as_ref() else { return };
            let (keep, go): (Vec<_>, Vec<_>) = waiting
                .into_iter()
                .partition(|(p, _, _)| r.host.tcp_connections_on(*p) > 0);
            s.tcp_deferred = keep;
            let left = !s.tcp_deferred.is_empty();
            (go.into_iter().flat_map(|(_, k, _)| k).collect(), left)
        };
        if !free.is_empty() {
            self.release(&free);
        }
        if left {
            start_port_sweeper();
        }
    }

    /// The host's TCP connections on local port `port`
    /// ([`rxpath_runtime::Host::tcp_connections_on`]).
    pub(crate) fn tcp_connections_on(&self, port: u16) -> usize {
        self.state()
            .running
            .as_ref()
            .map_or(0, |r| r.host.tcp_connections_on(port))
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

    /// Say `msg` the first time it comes.
    pub(crate) fn say_once(&self, msg: &str) {
        if self.state().told.insert(msg.to_string()) {
            say(msg);
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
}
