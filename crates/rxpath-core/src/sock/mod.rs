//! UDP sockets at the end of the path, with busy polling (seed 000).
//!
//! ```text
//!  NAPI poll ─► IP input ─► SockStack ─demux─► socket receive queue ─► recv()
//!     ▲         (IpStage)    (stage)          (frames held, bytes    │ empty?
//!     │                                        bounded by rcvbuf)     │ busy_poll µs:
//!     └──────── napi_busy_loop: take the NAPI, poll(8) ◄──────────────┘ else sleep
//! ```
//!
//! * [`Sockets`] is one host's socket layer: the demux table (connected
//!   5-tuple first, then bound address, then wildcard, as `__udp4_lib_lookup`
//!   scores them), the NAPIs sockets may busy-poll (the kernel's
//!   `napi_by_id` hash), the RFS sock flow table, the TX port and the
//!   neighbours learned from received packets.
//! * [`SockStack`] is the stage at the end of a NAPI's path ([`SockPath`]:
//!   behind the IP and UDP input that `rxpath run` runs too, which checked
//!   the datagram and its UDP checksum): it looks the socket up, stamps it with the packet's `napi_id` (seed 000:
//!   `sk_mark_napi_id`) and queues the packet **without copying**: the
//!   socket keeps the frame until `recv` copies it out, then the frame goes
//!   home through its queue's [`FrameReturn`] (the kernel's page pool takes
//!   pages freed on other CPUs back through a ring the same way).
//! * [`Socket`] is a socket's state and the calls that never wait:
//!   `bind`, `connect`, options, `try_recv_batch`, `send`, `send_batch`.
//!   When a datagram is queued it tells the socket's [`DataReady`].
//!
//! This module makes no system call: it reads no clock, starts no thread
//! and never sleeps. It is not sans-I/O in quinn-proto's strict sense
//! (state in, events out): it takes locks, sends through the TX port
//! injected into it ([`TxPort`]), and wakes waiters through the
//! [`DataReady`] each socket is given. The waiting half of a socket (blocking
//! `recv`, `SO_RCVTIMEO`, the busy-poll loop, epoll, task wakers) is
//! `rxpath_runtime::sock`, which drives busy polling through
//! [`SharedNapi::busy_begin`] with its own clock: `napi_busy_loop()` takes
//! ownership of the NAPI the socket's last packet came from
//! ([`NapiState::try_busy_poll`]), polls it with a budget of
//! [`BUSY_POLL_BUDGET`] until the queue has data or `busy_poll` µs have
//! passed, and gives it back (`busy_poll_stop()`, net/core/dev.c). While it
//! owns the NAPI the NAPI thread does not poll it; an interrupt that
//! arrives meanwhile is recorded (`MISSED`) and re-raised on release, so
//! nothing is lost.
//!
//! [`NapiState::try_busy_poll`]: crate::napi::NapiState::try_busy_poll

mod busy;
pub mod cbpf;
mod demux;
mod dgram;
mod flow;
mod send;
mod sock_stack;
mod socket;
mod tcp;
mod tx;

pub use busy::{BusyPoll, CellStack, NapiCell, PollCell, SharedNapi, BUSY_POLL_BUDGET};
pub use dgram::RecvMeta;
pub use flow::SockFlowTable;
pub use send::UDP_MAX_SEGMENTS;
pub use sock_stack::{SockPath, SockStack};
pub use socket::{BindOptions, BusySession, DataReady, SockCounters, Socket};
pub use tcp::{TcpTxCounters, TcpWake};
pub use tx::{CaptureTx, TxPort};

use crate::ip::{CsumPolicy, IpConfig, Snmp};
use crate::napi::NapiId;
use rxpath_frames::sync::write_lock;
use rxpath_frames::Umem;
use rxpath_wire::ethernet::Mac;
use serde::Serialize;
// The NAPI and neighbour tables are read on every busy poll and every
// send: foldhash, seeded per process, as the socket table's (`demux`).
use foldhash::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// `net.core.rmem_default`: a socket's receive buffer unless set.
pub const RMEM_DEFAULT: usize = 212_992;

pub use crate::packet::truesize;

/// Settings of one host's socket layer, named as the kernel's sysctls.
#[derive(Debug, Clone)]
pub struct SockConfig {
    /// Receive buffer of a new socket in bytes (`net.core.rmem_default`).
    /// Each queued datagram counts its [`truesize`], as the kernel counts
    /// `skb->truesize`.
    pub rcvbuf: usize,
    /// Busy-poll time of a new socket in µs (`net.core.busy_read`; 0 = off).
    pub busy_read_us: u32,
    /// How UDP checksums are trusted (`--csum`): see [`CsumPolicy`].
    pub csum: CsumPolicy,
    /// The device's driver carries local senders' traffic (veth, tun/tap,
    /// bridge; `ETHTOOL_GDRVINFO`): [`CsumPolicy::Auto`] may recognise a
    /// partial checksum by its value.
    pub local_traffic: bool,
    /// The interface's connected prefixes (address, length) and whether
    /// IPv4 / IPv6 have a default route through it: a send to a
    /// destination with no route fails (`OutNoRoutes`), as the kernel's
    /// route lookup does. Empty: every destination is reachable.
    pub prefixes: Vec<(IpAddr, u8)>,
    /// See `prefixes`.
    pub default_route: [bool; 2],
    /// This host's addresses: the source of datagrams sent from a socket
    /// bound to a wildcard address.
    pub local_addrs: Vec<IpAddr>,
    /// The interface's MAC address (source of sent frames).
    pub mac: Mac,
    /// The link MTU (datagrams larger than fit are refused, not fragmented).
    pub mtu: usize,
    /// Entries of the RFS sock flow table (`rps_sock_flow_entries`; rounded
    /// up to a power of two; 0 = off).
    pub sock_flow_entries: usize,
    /// The `INPUT` filter between IP input and UDP (None: no filter).
    pub filter: Option<Arc<crate::filter::FilterHandle>>,
    /// IP reassembly (`net.ipv4.ipfrag_*`, `net.ipv6.ip6frag_*`).
    pub reasm: crate::ip::Reasm,
    /// The CPU the calling thread runs on, for a reuseport group's program
    /// (`SKF_AD_CPU`): the runtime's `sched_getcpu` (the core asks, it
    /// does not look).
    pub current_cpu: fn() -> u32,
    /// rxpath's TCP on this host, with these knobs (the kernel's TCP
    /// sysctls); `None`: TCP is the kernel's and IP input leaves it.
    pub tcp: Option<rxpath_tcp::TcpConfig>,
    /// The key of TCP's initial sequence numbers and timestamp offsets
    /// (`secure_tcp_seq`'s secret, drawn once per host by the runtime).
    pub tcp_secret: u64,
}

impl Default for SockConfig {
    fn default() -> Self {
        SockConfig {
            rcvbuf: RMEM_DEFAULT,
            busy_read_us: 0,
            csum: CsumPolicy::Auto,
            local_traffic: false,
            prefixes: Vec::new(),
            default_route: [false; 2],
            local_addrs: Vec::new(),
            // The simulated NIC's frames are addressed to 02:00:00:00:00:02.
            mac: [0x02, 0, 0, 0, 0, 2],
            mtu: 1500,
            sock_flow_entries: 32_768,
            filter: None,
            reasm: crate::ip::Reasm::default(),
            current_cpu: || 0,
            tcp: None,
            tcp_secret: 0,
        }
    }
}

/// Errors of the socket API, each with what to do about it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SockError {
    /// The address and port are taken (`EADDRINUSE`).
    #[error("address {0} already in use")]
    AddrInUse(SocketAddr),
    /// No ephemeral port is free.
    #[error("no free ephemeral port")]
    NoPorts,
    /// Nothing to receive and the socket must not block (`EAGAIN`).
    #[error("no datagram queued (would block)")]
    WouldBlock,
    /// The receive timeout passed (`SO_RCVTIMEO`).
    #[error("receive timed out")]
    TimedOut,
    /// The host stopped; the socket is closed.
    #[error("socket closed: the host stopped")]
    Closed,
    /// A multicast membership change the kernel would refuse.
    #[error("multicast membership: {0}")]
    Mcast(#[from] crate::ip::mcast::McastError),
    /// `send` on a socket that is not connected (`EDESTADDRREQ`).
    #[error("socket not connected: use send_to or connect first")]
    NotConnected,
    /// The datagram does not fit in one frame at this MTU (`EMSGSIZE`).
    #[error("datagram of {len} bytes exceeds the {max}-byte limit of MTU {mtu}")]
    MessageTooLong {
        /// Payload length asked for.
        len: usize,
        /// The largest payload that fits.
        max: usize,
        /// The MTU.
        mtu: usize,
    },
    /// More than `UDP_MAX_SEGMENTS` datagrams in one segmented send
    /// (`EINVAL`).
    #[error("{len} bytes in segments of {segment} make more than 64 datagrams")]
    TooManySegments {
        /// Bytes to send.
        len: usize,
        /// Segment size asked for.
        segment: usize,
    },
    /// IPv4 to IPv6 or back.
    #[error("address family mismatch: {0}")]
    Family(String),
    /// No route to the destination (`ENETUNREACH`).
    #[error("no route to {0}")]
    NoRoute(IpAddr),
    /// No MAC address known for the destination.
    #[error("no neighbour entry for {0}: rxpath learns neighbours from packets it receives, or add one with Sockets::add_neighbor")]
    NoNeighbor(IpAddr),
    /// No source address: the socket is bound to a wildcard and the host
    /// has no address of that family.
    #[error("no local {0} address to send from: bind to one, or give the host one")]
    NoSource(&'static str),
    /// The host has no TX port.
    #[error("this host cannot transmit (no TX port)")]
    NoTx,
    /// The TX port failed.
    #[error("transmit failed: {0}")]
    Tx(String),
    /// An argument the call does not take (`EINVAL`).
    #[error("invalid argument: {0}")]
    Invalid(String),
}

pub use crate::packet::FrameReturn;

/// One device queue as the socket layer sees it: where its frames' bytes
/// are and how they go home.
#[derive(Debug)]
pub struct Port {
    /// The queue's frame region.
    pub umem: Arc<Umem>,
    /// Frames on their way home.
    pub ret: FrameReturn,
}

/// Counters of one host's socket layer (`/proc/net/snmp` Udp: and the
/// busy-poll counters the issue asks for).
#[derive(Debug, Default)]
struct Counters {
    in_datagrams: AtomicU64,
    no_ports: AtomicU64,
    rcvbuf_errors: AtomicU64,
    csum_errors: AtomicU64,
    ignored_multi: AtomicU64,
    out_datagrams: AtomicU64,
    tx_unfinished: AtomicU64,
    busy_polls: AtomicU64,
    busy_poll_loops: AtomicU64,
    busy_poll_packets: AtomicU64,
    busy_poll_ns: AtomicU64,
    busy_poll_contended: AtomicU64,
    /// Per family (v4, v6): `OutDatagrams`, `SndbufErrors`.
    out: [AtomicU64; 2],
    send_errors: [AtomicU64; 2],
    no_routes: [AtomicU64; 2],
}

/// A snapshot of the socket layer's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SockStats {
    /// Datagrams queued to sockets (`InDatagrams`).
    pub in_datagrams: u64,
    /// Datagrams for no socket (`NoPorts`).
    pub no_ports: u64,
    /// Datagrams dropped on a full receive queue (`RcvbufErrors`).
    pub rcvbuf_errors: u64,
    /// Datagrams with a bad checksum (`InCsumErrors`).
    pub csum_errors: u64,
    /// Multicast and broadcast datagrams no socket took (`IgnoredMulti`).
    pub ignored_multi: u64,
    /// Datagrams sent (`OutDatagrams`): the device took them (a TX
    /// ring's completion, once the host has stopped; while it runs, those
    /// posted to the ring count too).
    pub out_datagrams: u64,
    /// Datagrams posted to a TX ring whose frames the device never
    /// completed (the interface went, a device that stopped): not in
    /// `out_datagrams`. Known when the host stops.
    pub tx_unfinished: u64,
    /// Busy-poll sessions (a `recv` or `Epoll::wait` that busy-polled).
    pub busy_polls: u64,
    /// NAPI polls run by busy pollers (`napi_busy_loop` iterations that
    /// owned the NAPI).
    pub busy_poll_loops: u64,
    /// Packets taken from the device by busy pollers.
    pub busy_poll_packets: u64,
    /// Time spent busy polling, ns.
    pub busy_poll_ns: u64,
    /// Busy-poll iterations that found the NAPI owned by someone else.
    pub busy_poll_contended: u64,
}

/// One host's socket layer. Shared (`Arc`) by the NAPI stages, the sockets
/// and the application.
#[derive(Debug)]
pub struct Sockets {
    cfg: SockConfig,
    ports: Vec<Port>,
    demux: RwLock<demux::Demux>,
    /// Sockets that stopped receiving ([`Socket::stop_receiving`]) while
    /// still open: out of the table, but closed with the rest at
    /// [`Sockets::close_all`], so what they hold goes home.
    stopped: Mutex<Vec<Arc<socket::SockInner>>>,
    napis: RwLock<HashMap<NapiId, Arc<SharedNapi>>>,
    neighbors: RwLock<HashMap<IpAddr, Mac>>,
    tx: Mutex<Option<Box<dyn TxPort>>>,
    /// The frames and family of the last datagrams handed to `tx`, to
    /// tell which a TX ring never completed ([`Sockets::finish_tx`]).
    sent: Mutex<tx::SentLog>,
    flows: Arc<SockFlowTable>,
    busy_read: AtomicU32,
    next_port: AtomicU16,
    counters: Counters,
    /// Sockets with `UDP_GRO` on: while 0, GRO asks nothing per datagram
    /// (the kernel's `udp_encap_needed_key` static branch).
    gro_socks: AtomicUsize,
    /// Bumped after every change of the socket table or of a socket's
    /// `UDP_GRO` ([`crate::gro::UdpGroPolicy::generation`]).
    gro_gen: std::sync::atomic::AtomicU64,
    /// The multicast groups its sockets joined (IP input reads them).
    groups: Arc<crate::ip::mcast::Memberships>,
    /// Addresses the interface gained while the host runs (every NAPI's
    /// IP input shares it).
    added: Arc<crate::ip::AddedAddrs>,
    /// rxpath's TCP, if the host runs it.
    tcp: Option<tcp::TcpLayer>,
}

impl crate::gro::UdpGroPolicy for Sockets {
    /// `udp4_gro_lookup_skb()`: the socket the datagram is for, and its
    /// `UDP_GRO` flag.
    fn wants(&self, flow: &rxpath_wire::FlowKey) -> bool {
        if self.gro_socks.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let src = SocketAddr::new(flow.src(), flow.src_port);
        let dst = SocketAddr::new(flow.dst(), flow.dst_port);
        // Multicast and broadcast go to every socket that wants them, one
        // by one (rxpath does not merge them).
        let multi = match flow.dst() {
            IpAddr::V4(a) => a.is_multicast() || crate::ip::is_broadcast(&self.cfg.prefixes, a),
            IpAddr::V6(a) => a.is_multicast(),
        };
        if multi {
            return false;
        }
        read_lock(&self.demux)
            .lookup(dst, src)
            .is_some_and(|s| s.gro.load(Ordering::Relaxed))
    }

    fn generation(&self) -> Option<u64> {
        Some(self.gro_gen.load(Ordering::Acquire))
    }
}

impl Sockets {
    /// A change that may alter [`crate::gro::UdpGroPolicy::wants`] is
    /// complete: GRO's kept answers are stale.
    pub(crate) fn gro_changed(&self) {
        self.gro_gen.fetch_add(1, Ordering::Release);
    }
}

/// Every critical section here leaves its data consistent: a panic
/// elsewhere does not make it unusable ([`rxpath_frames::sync`]).
pub(crate) use rxpath_frames::sync::{lock, read_lock};

impl Sockets {
    /// A socket layer over a device whose queue `i` keeps its frames in
    /// `umems[i]`.
    pub fn new(cfg: SockConfig, umems: Vec<Arc<Umem>>) -> Arc<Sockets> {
        let ports = umems
            .into_iter()
            .map(|umem| Port {
                umem,
                ret: FrameReturn::default(),
            })
            .collect();
        let tcp = cfg
            .tcp
            .clone()
            .map(|t| tcp::TcpLayer::new(t, cfg.tcp_secret, cfg.local_addrs.clone()));
        Arc::new(Sockets {
            tcp,
            busy_read: AtomicU32::new(cfg.busy_read_us),
            gro_socks: AtomicUsize::new(0),
            gro_gen: std::sync::atomic::AtomicU64::new(0),
            flows: Arc::new(SockFlowTable::new(cfg.sock_flow_entries)),
            cfg,
            ports,
            demux: RwLock::default(),
            stopped: Mutex::default(),
            napis: RwLock::default(),
            neighbors: RwLock::default(),
            tx: Mutex::new(None),
            sent: Mutex::default(),
            next_port: AtomicU16::new(0),
            counters: Counters::default(),
            groups: Arc::default(),
            added: Arc::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SockConfig {
        &self.cfg
    }

    /// What IP input needs to know of this host.
    pub fn ip_config(&self) -> IpConfig {
        IpConfig {
            mac: self.cfg.mac,
            addrs: self.cfg.local_addrs.clone(),
            csum: self.cfg.csum,
            local_traffic: self.cfg.local_traffic,
            prefixes: self.cfg.prefixes.clone(),
            default_route: self.cfg.default_route,
            deliver_all: false,
            tcp: self.cfg.tcp.is_some(),
            any_l2: false,
            local_routes: Vec::new(),
            reasm: self.cfg.reasm,
            groups: self.groups.clone(),
            added: self.added.clone(),
        }
    }

    /// Add the send side of the SNMP counters (`OutDatagrams`,
    /// `SndbufErrors`, counted where applications send) to `s`.
    pub fn add_send_snmp(&self, s: &mut Snmp) {
        let c = &self.counters;
        for (i, m) in [&mut s.udp, &mut s.udp6].into_iter().enumerate() {
            m.out_datagrams += c.out[i].load(Ordering::Relaxed);
            m.sndbuf_errors += c.send_errors[i].load(Ordering::Relaxed);
        }
        s.ip.out_no_routes += c.no_routes[0].load(Ordering::Relaxed);
        s.ip6.out_no_routes += c.no_routes[1].load(Ordering::Relaxed);
    }

    /// Count a send that failed (`SndbufErrors`: no room in the TX ring,
    /// no neighbour, no route). The kernel's `udp_sendmsg` counts its
    /// `ENOBUFS`; rxpath counts every failed datagram here.
    pub(crate) fn count_no_route(&self, v6: bool) {
        self.counters.no_routes[v6 as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The datagrams of `lost` (per family) counted sent were not: the
    /// device never completed them.
    fn uncount_sent(&self, lost: [u64; 2]) {
        let c = &self.counters;
        for (v6, n) in lost.into_iter().enumerate() {
            c.out[v6].fetch_sub(n, Ordering::Relaxed);
            c.out_datagrams.fetch_sub(n, Ordering::Relaxed);
            c.tx_unfinished.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The interface gained address `a` (`RTM_NEWADDR`): IP input takes
    /// datagrams for it from the next one on. False if it was ours
    /// already.
    pub fn add_local_addr(&self, a: IpAddr) -> bool {
        !self.cfg.local_addrs.contains(&a) && self.added.add(a)
    }

    /// Count sent and failed datagrams of a family.
    pub(crate) fn count_send(&self, v6: bool, ok: u64, failed: u64) {
        let c = &self.counters;
        c.out[v6 as usize].fetch_add(ok, Ordering::Relaxed);
        c.out_datagrams.fetch_add(ok, Ordering::Relaxed);
        c.send_errors[v6 as usize].fetch_add(failed, Ordering::Relaxed);
    }

    /// Device queues.
    pub fn queues(&self) -> usize {
        self.ports.len()
    }

    /// Queue `i`'s port.
    pub fn port(&self, i: u16) -> Option<&Port> {
        self.ports.get(i as usize)
    }

    /// Frames held by sockets or on their way home, over all queues.
    pub fn frames_returning(&self) -> usize {
        self.ports.iter().map(|p| p.ret.pending()).sum()
    }

    /// The stage to run at the end of queue `queue`'s NAPI.
    pub fn stage(self: &Arc<Self>, queue: u16) -> SockPath {
        SockStack::path(self.clone(), queue)
    }

    /// Make a NAPI reachable by id for busy polling (`napi_hash_add`).
    pub fn register_napi(&self, n: Arc<SharedNapi>) {
        write_lock(&self.napis).insert(n.id, n);
    }

    /// `napi_by_id()`.
    pub fn napi_by_id(&self, id: NapiId) -> Option<Arc<SharedNapi>> {
        read_lock(&self.napis).get(&id).cloned()
    }

    /// A descriptor that becomes readable when NAPI `id`'s device queue
    /// has packets ([`Socket::napi_readiness_fd`] by the NAPI's id).
    pub fn napi_readiness_fd(&self, id: NapiId) -> Option<std::io::Result<std::os::fd::OwnedFd>> {
        let napi = self.napi_by_id(id)?;
        let g = napi.cell();
        g.as_ref()?.readiness_fd()
    }

    /// Forget every NAPI (`napi_hash_del`, at shutdown).
    pub fn unregister_napis(&self) -> Vec<Arc<SharedNapi>> {
        let mut m = write_lock(&self.napis);
        m.drain().map(|(_, n)| n).collect()
    }

    /// Set the TX port sockets send through.
    pub fn set_tx(&self, tx: Box<dyn TxPort>) {
        *lock(&self.tx) = Some(tx);
    }

    /// Add (or replace) a neighbour entry: the MAC to send to `ip` with.
    pub fn add_neighbor(&self, ip: IpAddr, mac: Mac) {
        write_lock(&self.neighbors).insert(ip, mac);
    }

    /// The MAC known for `ip`.
    pub fn neighbor(&self, ip: IpAddr) -> Option<Mac> {
        read_lock(&self.neighbors).get(&ip).copied()
    }

    /// `net.core.busy_read` in µs: the busy-poll time of sockets that did
    /// not set their own. Can be changed while running.
    pub fn set_busy_read(&self, us: u32) {
        self.busy_read.store(us, Ordering::Relaxed);
    }

    /// The current `net.core.busy_read`.
    pub fn busy_read(&self) -> u32 {
        self.busy_read.load(Ordering::Relaxed)
    }

    /// The RFS sock flow table `recv` writes to.
    pub fn sock_flows(&self) -> &Arc<SockFlowTable> {
        &self.flows
    }

    /// Counters.
    pub fn stats(&self) -> SockStats {
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SockStats {
            in_datagrams: g(&c.in_datagrams),
            no_ports: g(&c.no_ports),
            rcvbuf_errors: g(&c.rcvbuf_errors),
            ignored_multi: g(&c.ignored_multi),
            csum_errors: g(&c.csum_errors),
            out_datagrams: g(&c.out_datagrams),
            tx_unfinished: g(&c.tx_unfinished),
            busy_polls: g(&c.busy_polls),
            busy_poll_loops: g(&c.busy_poll_loops),
            busy_poll_packets: g(&c.busy_poll_packets),
            busy_poll_ns: g(&c.busy_poll_ns),
            busy_poll_contended: g(&c.busy_poll_contended),
        }
    }

    /// Close every socket: their queued frames go home, and blocked
    /// `recv`s return [`SockError::Closed`]. Used when the host stops.
    pub fn close_all(&self) {
        let socks = write_lock(&self.demux).take_all();
        let stopped = std::mem::take(&mut *lock(&self.stopped));
        for s in socks.into_iter().chain(stopped) {
            s.close(self);
        }
    }

    /// The source address for a datagram from `local` to `dst`.
    fn source_for(&self, local: SocketAddr, dst: &SocketAddr) -> Result<IpAddr, SockError> {
        if !local.ip().is_unspecified() {
            return Ok(local.ip());
        }
        self.cfg
            .local_addrs
            .iter()
            .find(|a| a.is_ipv4() == dst.is_ipv4())
            .copied()
            .ok_or(SockError::NoSource(if dst.is_ipv4() {
                "IPv4"
            } else {
                "IPv6"
            }))
    }
}
