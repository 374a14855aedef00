//! IP input at the edge: `ip_rcv_core()` / `ipv6_rcv()` and `__udp4_lib_rcv()`
//! / `__udp6_lib_rcv()` as the kernel runs them, on the frame's bytes.
//!
//! ```text
//!  frame ─► L2: our MAC, broadcast or multicast (else PACKET_OTHERHOST);
//!  │        VLAN 0 (priority tag) stripped, any other VLAN is not ours
//!  ├─► v4: version, IHL, header checksum, total length (trim padding,
//!  │       short = InTruncatedPkts), martian source, options
//!  │       (ip_options_compile), destination ours (else InAddrErrors),
//!  │       fragments (ReasmReqds; reassembly in the stage), protocol
//!  │       (InDelivers)
//!  ├─► v6: version, loopback/multicast rules, payload length, hop-by-hop
//!  │       (ip6_parse_tlv), destination ours, routing / destination
//!  │       options / fragment headers, protocol (InDelivers)
//!  └─► udp: length (InErrors), checksum per the device's status and the
//!          policy (InCsumErrors), then the socket stage: NoPorts,
//!          RcvbufErrors, InDatagrams
//! ```
//!
//! Each step runs in the kernel's order and counts under the kernel's SNMP
//! name ([`Snmp`]), so the same frames give the same counters as
//! `/proc/net/snmp` (a root test sends one corpus to both and compares).
//! Fragments are reassembled by the stage ([`IpStage`], with [`Defrag`]:
//! `ip_defrag()` and `ipv6_frag_rcv()`), then the datagram goes through the
//! rest of input once; the stateless functions here ([`input`],
//! [`input_any`]) have no queues and count a fragment's `ReasmFails` at
//! once. Where rxpath differs it says so: it hands no packet to TCP or ICMP
//! (counted [`RxExt::left_to_kernel`]), and it has no routing table (any
//! destination that is not ours is `InAddrErrors`, as for the kernel with
//! forwarding off and the destination on a connected prefix).
//!
//! Nothing here panics on any input: every read is bounds-checked (the
//! property test at the end feeds random and mutated frames).

mod defrag;
mod icmp;
mod input_stage;
pub mod mcast;
mod tcp;
mod udp;
mod v4;
mod v6;

pub use crate::packet::Datagram;
pub use crate::packet::TcpSeg;
pub use crate::snmp::{IpMib, RxExt, Snmp, UdpMib};
pub use defrag::{Defrag, DefragConfig};
pub use input_stage::{Hook, IpStage, NoHook};

use crate::stats::DropReason;
use rxpath_wire::be16;
use rxpath_wire::ethernet::{self, ethertype, Mac};
use std::net::IpAddr;

/// How UDP checksums are trusted (`--csum`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CsumPolicy {
    /// Verify every checksum, whatever the device says.
    Verify,
    /// Verify none.
    Trust,
    /// The kernel's way: trust what the device verified
    /// (`CHECKSUM_UNNECESSARY`) or marked as a local sender's partial
    /// checksum (`CHECKSUM_PARTIAL`), verify the rest; on a driver that
    /// carries local traffic (veth, tun/tap, bridge) whose device cannot
    /// say, accept a field equal to the pseudo-header sum (what
    /// `CHECKSUM_PARTIAL` leaves in it).
    #[default]
    Auto,
}

impl std::str::FromStr for CsumPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "verify" => Ok(CsumPolicy::Verify),
            "trust" => Ok(CsumPolicy::Trust),
            "auto" => Ok(CsumPolicy::Auto),
            o => Err(format!(
                "unknown checksum policy {o:?}: verify, trust or auto"
            )),
        }
    }
}

impl CsumStatus {
    /// The status the NAPI gave a packet.
    pub fn of(meta: &crate::packet::Meta) -> CsumStatus {
        if meta.csum_ok {
            CsumStatus::Unnecessary
        } else if meta.csum_partial {
            CsumStatus::Partial
        } else {
            CsumStatus::None
        }
    }
}

/// What the device said about a frame's L4 checksum (`skb->ip_summed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CsumStatus {
    /// Nothing (`CHECKSUM_NONE`): verify in software.
    #[default]
    None,
    /// Verified by the device (`CHECKSUM_UNNECESSARY`).
    Unnecessary,
    /// Left partial by a local sender (`CHECKSUM_PARTIAL`).
    Partial,
}

/// The host as IP input sees it.
#[derive(Debug, Clone, Default)]
pub struct IpConfig {
    /// The interface's MAC address: frames for other unicast MACs are
    /// `PACKET_OTHERHOST`.
    pub mac: Mac,
    /// This host's addresses. A family with none accepts any destination
    /// (the simulated NIC); a family with some accepts only those.
    pub addrs: Vec<IpAddr>,
    /// The checksum policy.
    pub csum: CsumPolicy,
    /// The driver carries traffic from local senders (veth, tun/tap,
    /// bridge): `Auto` may recognise a partial checksum by its value.
    pub local_traffic: bool,
    /// The connected prefixes (address, prefix length) of the interface.
    pub prefixes: Vec<(IpAddr, u8)>,
    /// The kernel routes IPv4 / IPv6 beyond the connected prefixes through
    /// this interface (a default route): then an off-link destination is
    /// reachable.
    pub default_route: [bool; 2],
    /// The end of the path takes every protocol, not only UDP (`rxpath
    /// run`'s sink; sockets take UDP and leave the rest to the kernel).
    pub deliver_all: bool,
    /// In front of sockets: TCP goes up too (a host with rxpath's TCP),
    /// through [`crate::packet::Stack::receive_tcp`].
    pub tcp: bool,
    /// Prefixes that are wholly local (`ip route add local PREFIX`): a
    /// destination in one is ours, like an address in `addrs`.
    pub local_routes: Vec<(IpAddr, u8)>,
    /// Accept any destination MAC and any VLAN (the simulated NIC, which
    /// carries its VLANs, and replayed captures): no `PACKET_OTHERHOST`
    /// drop.
    pub any_l2: bool,
    /// IP reassembly's settings (the kernel's defaults unless set).
    pub reasm: Reasm,
    /// The multicast groups the interface is in (shared with the sockets
    /// that join them): a datagram to another group is not ours.
    pub groups: std::sync::Arc<mcast::Memberships>,
    /// Addresses the interface gained while the host runs (a VIP added
    /// with `ip addr add`), shared with whoever watches the interface:
    /// ours too, as `addrs`.
    pub added: std::sync::Arc<AddedAddrs>,
}

/// Addresses added to the interface while the host runs, as the kernel's
/// `RTM_NEWADDR` tells them. Read for every datagram whose source (or
/// destination) is not in [`IpConfig::addrs`]: a flag, then a lock-free
/// load of the list (the NAPI threads and busy pollers on other CPUs
/// share no written cache line); only adding takes a lock.
#[derive(Debug, Default)]
pub struct AddedAddrs {
    any: std::sync::atomic::AtomicBool,
    list: arc_swap::ArcSwap<Vec<IpAddr>>,
    adding: std::sync::Mutex<()>,
}

impl AddedAddrs {
    /// `a` is ours from now on; false if it already was.
    pub fn add(&self, a: IpAddr) -> bool {
        let _one_at_a_time = rxpath_frames::sync::lock(&self.adding);
        let now = self.list.load_full();
        if now.contains(&a) {
            return false;
        }
        let mut v = (*now).clone();
        v.push(a);
        self.list.store(std::sync::Arc::new(v));
        self.any.store(true, std::sync::atomic::Ordering::Release);
        true
    }

    /// `a` was added.
    #[inline]
    pub fn contains(&self, a: IpAddr) -> bool {
        self.any.load(std::sync::atomic::Ordering::Acquire) && self.list.load().contains(&a)
    }
}

/// IP reassembly's settings, per family (`net.ipv4.ipfrag_*`,
/// `net.ipv6.ip6frag_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reasm {
    /// IPv4.
    pub v4: DefragConfig,
    /// IPv6.
    pub v6: DefragConfig,
}

impl Default for Reasm {
    fn default() -> Self {
        Reasm {
            v4: DefragConfig::V4,
            v6: DefragConfig::V6,
        }
    }
}

/// A TCP/UDP checksum field as a local sender's `CHECKSUM_PARTIAL` leaves
/// it: the pseudo-header sum alone (the offload never ran).
#[inline]
pub fn is_partial(field: u16, src: IpAddr, dst: IpAddr, proto: u8, l4_len: u32) -> bool {
    field != 0 && field == rxpath_wire::checksum::pseudo_header(src, dst, proto, l4_len) as u16
}

/// A route to `a` given the connected `prefixes` and default routes (no
/// prefix of `a`'s family known: reachable).
pub fn routable(prefixes: &[(IpAddr, u8)], default_route: [bool; 2], a: IpAddr) -> bool {
    let mut any = false;
    for &(n, l) in prefixes.iter().filter(|p| p.0.is_ipv4() == a.is_ipv4()) {
        any = true;
        if in_prefix(a, n, l) {
            return true;
        }
    }
    !any || default_route[a.is_ipv6() as usize]
}

/// A broadcast address for a host on the connected `prefixes`: the
/// limited broadcast, or a prefix's broadcast address (`RTN_BROADCAST`).
pub fn is_broadcast(prefixes: &[(IpAddr, u8)], a: std::net::Ipv4Addr) -> bool {
    a.is_broadcast()
        || prefixes.iter().any(|&(n, l)| match n {
            IpAddr::V4(n) if l < 31 => u32::from(a) == u32::from(n) | (u32::MAX >> l),
            _ => false,
        })
}

/// True if `a` lies in `net/len`.
pub fn in_prefix(a: IpAddr, net: IpAddr, len: u8) -> bool {
    match (a, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let m = if len == 0 {
                0
            } else {
                u32::MAX << (32 - len.min(32))
            };
            u32::from(a) & m == u32::from(n) & m
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len.min(128) as u32)
            };
            u128::from(a) & m == u128::from(n) & m
        }
        _ => false,
    }
}

impl IpConfig {
    fn is_local(&self, a: IpAddr) -> bool {
        if self.local_routes.iter().any(|&(n, l)| in_prefix(a, n, l)) {
            return true;
        }
        let v6 = a.is_ipv6();
        let mut any = false;
        for l in &self.addrs {
            if l.is_ipv6() == v6 {
                any = true;
                if *l == a {
                    return true;
                }
            }
        }
        !any || self.added.contains(a)
    }

    /// A broadcast address for us: the limited broadcast, or the
    /// broadcast address of a connected IPv4 prefix (`RTN_BROADCAST`).
    fn is_broadcast(&self, a: std::net::Ipv4Addr) -> bool {
        is_broadcast(&self.prefixes, a)
    }

    fn has_addr(&self, a: IpAddr) -> bool {
        self.addrs.contains(&a) || self.added.contains(a)
    }

    /// A route to `a`: on a connected prefix, through a default route, or
    /// no prefixes known (the simulated NIC).
    pub fn routable(&self, a: IpAddr) -> bool {
        routable(&self.prefixes, self.default_route, a)
    }
}

/// A transport segment that IP input handed up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct L4 {
    pub(crate) src: IpAddr,
    pub(crate) dst: IpAddr,
    /// Offset of the L4 header from the start of the frame.
    pub(crate) off: usize,
    /// L4 length (IP payload after extension headers, padding trimmed).
    pub(crate) len: usize,
    /// The transport protocol (17, or 6 with `deliver_all`).
    pub(crate) proto: u8,
}

/// Run a frame through L2, IP and UDP input. `Ok` is a datagram for the
/// socket stage; `Err` a drop reason, already counted in `snmp`.
pub fn input(
    frame: &[u8],
    csum: CsumStatus,
    cfg: &IpConfig,
    snmp: &mut Snmp,
) -> Result<Datagram, DropReason> {
    input_hooked(frame, csum, cfg, snmp, None)
}

/// [`input`] with the `INPUT` hook: after IP input and before UDP
/// (`ip_local_deliver()` → `NF_INET_LOCAL_IN` → `udp_rcv()`), `filter`
/// judges the packet (`headers`: the flow dissector's view of `frame`).
pub fn input_hooked(
    frame: &[u8],
    csum: CsumStatus,
    cfg: &IpConfig,
    snmp: &mut Snmp,
    filter: Option<(&crate::filter::Filter, &rxpath_wire::Headers)>,
) -> Result<Datagram, DropReason> {
    match filter {
        Some((f, h)) => {
            let mut hook =
                |fr: &[u8], _: &LocalIn| f.judge_frame(fr, h).and_then(|v| v.drop_reason());
            input_chain(frame, 0, csum, cfg, snmp, Some(&mut hook))
        }
        None => input_chain(frame, 0, csum, cfg, snmp, None),
    }
}

/// The `INPUT` hook as IP input calls it: the frame and what IP input
/// learnt of it in, a drop reason (the rules dropped it) or `None` (it
/// goes on) out.
pub type InputHook<'a> = &'a mut dyn FnMut(&[u8], &LocalIn) -> Option<DropReason>;

pub use crate::filter::LocalIn;

/// What IP input hands the `INPUT` hook for `l4` (its network header at
/// `l3`; `more` bytes of a UDP GRO packet in other frames).
#[inline(always)]
fn local_in(l3: usize, l4: &L4, more: usize) -> LocalIn {
    LocalIn {
        src: l4.src,
        dst: l4.dst,
        l4: l4.off,
        ip_len: l4.off - l3 + l4.len + more,
        proto: l4.proto,
    }
}

/// [`input_hooked`] for a UDP GRO packet: `frame` is its head, whose IP
/// and UDP lengths cover `more` bytes of payload in the chain's other
/// frames. Input runs once for the packet, as the kernel's `ip_rcv` runs
/// once per GRO skb (one `InReceives`, one `InDatagrams`); the checksum of
/// each segment was verified by GRO. `Datagram::payload_len` is the whole
/// packet's.
pub fn input_chain(
    frame: &[u8],
    more: usize,
    csum: CsumStatus,
    cfg: &IpConfig,
    snmp: &mut Snmp,
    filter: Option<InputHook<'_>>,
) -> Result<Datagram, DropReason> {
    input_chain_at(frame, more, false, csum, cfg, snmp, filter)
}

/// [`input_chain`], a fragment going to reassembly if `reasm` (returned as
/// `Err(Fragment)` with `ReasmReqds` counted).
#[inline(always)]
pub(crate) fn input_chain_at(
    frame: &[u8],
    more: usize,
    reasm: bool,
    csum: CsumStatus,
    cfg: &IpConfig,
    snmp: &mut Snmp,
    filter: Option<InputHook<'_>>,
) -> Result<Datagram, DropReason> {
    let (_, l4) = input_l4(frame, more, reasm, cfg, snmp, filter)?;
    if l4.proto != 17 {
        return Err(DropReason::UnhandledProto);
    }
    udp::rcv(frame, more, l4, csum, cfg, snmp, None)
}

/// L2 and IP input of a TCP segment in front of a socket layer with TCP
/// (`ip_local_deliver()` → `tcp_v4_rcv()`): the `INPUT` hook, then the
/// checksum's status. A fragment is dropped (`ReasmFails`): rxpath's TCP
/// does not take IP fragments yet.
#[inline]
pub(crate) fn input_tcp_at(
    frame: &[u8],
    more: usize,
    csum: CsumStatus,
    cfg: &IpConfig,
    snmp: &mut Snmp,
    filter: Option<InputHook<'_>>,
) -> Result<TcpSeg, DropReason> {
    let (l3, l4) = input_l4(frame, more, false, cfg, snmp, filter)?;
    if l4.proto != 6 {
        return Err(DropReason::UnhandledProto);
    }
    Ok(tcp::rcv(frame, more, l3, l4, csum, cfg, snmp))
}

/// L2 and IP input of an ICMP or ICMPv6 packet in front of a socket
/// layer with TCP: an error quoting TCP through the `INPUT` hook to
/// `icmp_rcv()`, for the TCP machine; anything else left to the kernel.
#[inline(never)]
pub(crate) fn input_icmp_at(
    frame: &[u8],
    cfg: &IpConfig,
    snmp: &mut Snmp,
    filter: Option<InputHook<'_>>,
) -> Result<TcpSeg, DropReason> {
    let (etype, l3) = l2_rcv(frame, cfg, snmp)?;
    let l4 = l3_rcv(frame, 0, etype, l3, false, cfg, snmp)?;
    let parsed = match l4.proto {
        1 | 58 => icmp::wanted(frame, l3),
        _ => None,
    };
    let Some(parsed) = parsed else {
        snmp.ext.left_to_kernel += 1;
        return Err(DropReason::UnhandledProto);
    };
    if let Some(hook) = filter {
        if let Some(reason) = hook(frame, &local_in(l3, &l4, 0)) {
            return Err(reason);
        }
    }
    delivered(snmp, etype == ethertype::IPV6);
    icmp::rcv(parsed, l3, &l4, snmp)
}

/// L2 and IP input up to the transport (`ip_local_deliver()`): the
/// `INPUT` hook, `InDelivers`; where the network header starts and the
/// transport segment.
#[inline(always)]
fn input_l4(
    frame: &[u8],
    more: usize,
    reasm: bool,
    cfg: &IpConfig,
    snmp: &mut Snmp,
    filter: Option<InputHook<'_>>,
) -> Result<(usize, L4), DropReason> {
    let (etype, l3) = l2_rcv(frame, cfg, snmp)?;
    let l4 = l3_rcv(frame, more, etype, l3, reasm, cfg, snmp)?;
    if let Some(hook) = filter {
        let at = local_in(l3, &l4, more);
        if let Some(reason) = hook(frame, &at) {
            return Err(reason);
        }
    }
    delivered(snmp, etype == ethertype::IPV6);
    Ok((l3, l4))
}

/// A transport checksum as the policy and the device's status settle it
/// (`skb_checksum_init()`): trusted, verified by the device, a local
/// sender's partial sum (by the status, or on a driver that carries local
/// traffic by its value), or summed over `seg` (`len` bytes in all, the
/// header's `field`). Each way is counted.
#[inline(always)]
pub(crate) fn l4_csum_ok(
    cfg: &IpConfig,
    csum: CsumStatus,
    snmp: &mut Snmp,
    (src, dst, proto): (IpAddr, IpAddr, u8),
    seg: &[u8],
    field: u16,
    len: u32,
) -> bool {
    match (cfg.csum, csum) {
        (CsumPolicy::Trust, _) => {
            snmp.ext.csum_trusted += 1;
            true
        }
        (CsumPolicy::Auto, CsumStatus::Unnecessary) => {
            snmp.ext.csum_device += 1;
            true
        }
        (CsumPolicy::Auto, CsumStatus::Partial) => {
            snmp.ext.csum_partial += 1;
            true
        }
        (policy, _) => {
            if rxpath_wire::checksum::l4(src, dst, proto, seg) == 0 {
                true
            } else if policy == CsumPolicy::Auto
                && cfg.local_traffic
                && is_partial(field, src, dst, proto, len)
            {
                snmp.ext.csum_partial += 1;
                true
            } else {
                false
            }
        }
    }
}

/// IP input for a path end that takes every protocol (`rxpath run`'s
/// sink): L2 and IP checks, then for UDP its length and checksum. Returns
/// the transport protocol. Others are not checked further (the kernel's
/// `tcp_v4_rcv`, `icmp_rcv` are not modelled).
pub fn input_any(
    frame: &[u8],
    csum: CsumStatus,
    cfg: &IpConfig,
    snmp: &mut Snmp,
) -> Result<u8, DropReason> {
    input_any_hooked(frame, csum, cfg, snmp, |_, _| None)
}

/// [`input_any`] with the `INPUT` hook where the kernel runs it
/// (`ip_local_deliver()`: after the IP checks, before UDP's length and
/// checksum), so a packet the rules drop is counted by its rule and not
/// as a UDP error. `hook` sees the frame and returns why it drops it.
pub fn input_any_hooked(
    frame: &[u8],
    csum: CsumStatus,
    cfg: &IpConfig,
    snmp: &mut Snmp,
    hook: impl FnOnce(&[u8], &LocalIn) -> Option<DropReason>,
) -> Result<u8, DropReason> {
    input_any_at(frame, false, csum, cfg, snmp, hook)
}

/// [`input_any_hooked`], a fragment going to reassembly if `reasm`.
#[inline(always)]
pub(crate) fn input_any_at(
    frame: &[u8],
    reasm: bool,
    csum: CsumStatus,
    cfg: &IpConfig,
    snmp: &mut Snmp,
    hook: impl FnOnce(&[u8], &LocalIn) -> Option<DropReason>,
) -> Result<u8, DropReason> {
    let (etype, l3) = l2_rcv(frame, cfg, snmp)?;
    let l4 = l3_rcv(frame, 0, etype, l3, reasm, cfg, snmp)?;
    let at = local_in(l3, &l4, 0);
    if let Some(reason) = hook(frame, &at) {
        return Err(reason);
    }
    delivered(snmp, etype == ethertype::IPV6);
    if l4.proto == 17 {
        udp::rcv(frame, 0, l4, csum, cfg, snmp, None)?;
    }
    Ok(l4.proto)
}

/// What follows reassembly: the transport of the datagram whose head
/// frame is `head` (network header at `l3`, the reassembled data from
/// `data` on, `more` bytes of it in the chain's other frames), through
/// the `INPUT` hook, then for UDP its length and checksum (`rest_sum`: the
/// other frames' one's-complement sum). `Ok` carries the protocol and, for
/// UDP, the datagram.
#[allow(clippy::too_many_arguments)]
pub(crate) fn input_reassembled(
    head: &[u8],
    l3: usize,
    data: usize,
    more: usize,
    rest_sum: u32,
    cfg: &IpConfig,
    snmp: &mut Snmp,
    hook: impl FnOnce(&[u8], &LocalIn) -> Option<DropReason>,
) -> Result<(u8, Option<Datagram>), DropReason> {
    let v6 = ethertype_of(head, l3) == ethertype::IPV6;
    let l4 = if v6 {
        let p = &head[l3..];
        let at = v6::Walk {
            l3,
            off: data - l3,
            nh: p[data - l3 - 8],
            plen: data - l3 - 40 - 8 + (head.len() - data) + more,
            src: rxpath_wire::ipv6::Packet::new_unchecked(p).src(),
            dst: rxpath_wire::ipv6::Packet::new_unchecked(p).dst(),
            fragmented: true,
            reasm: true,
        };
        v6::upper(p, at, cfg, snmp)?
    } else {
        v4::transport(head, l3, data, cfg, snmp)?
    };
    let at = local_in(l3, &l4, more);
    if let Some(reason) = hook(head, &at) {
        return Err(reason);
    }
    delivered(snmp, v6);
    if l4.proto != 17 {
        return Ok((l4.proto, None));
    }
    let d = udp::rcv(head, more, l4, CsumStatus::None, cfg, snmp, Some(rest_sum))?;
    Ok((17, Some(d)))
}

/// The ethertype of the network header at `l3` (the two bytes before it).
fn ethertype_of(frame: &[u8], l3: usize) -> u16 {
    be16(frame, l3.wrapping_sub(2)).unwrap_or(0)
}

/// `InDelivers`, counted where `ip_protocol_deliver_rcu()` (and IPv6's)
/// counts it: after the `INPUT` hook let the packet through, whatever the
/// transport then does with it.
#[inline(always)]
pub(crate) fn delivered(snmp: &mut Snmp, v6: bool) {
    if v6 {
        snmp.ip6.in_delivers += 1;
    } else {
        snmp.ip.in_delivers += 1;
    }
}

/// `eth_type_trans()` and the VLAN step of `__netif_receive_skb_core()`:
/// the ethertype and the offset of the network header.
#[inline(always)]
pub(crate) fn l2_rcv(
    frame: &[u8],
    cfg: &IpConfig,
    snmp: &mut Snmp,
) -> Result<(u16, usize), DropReason> {
    let Some(dst_mac) = frame.get(..6) else {
        return Err(DropReason::Malformed);
    };
    if frame.len() < 14 {
        return Err(DropReason::Malformed);
    }
    // eth_type_trans(): our address, broadcast and multicast are for us;
    // any other unicast address is PACKET_OTHERHOST, which IP drops first.
    if !cfg.any_l2 && dst_mac != cfg.mac && dst_mac[0] & 1 == 0 {
        snmp.ext.otherhost += 1;
        return Err(DropReason::NotForUs);
    }
    let mut etype = ethernet::Frame::new_unchecked(frame).ethertype();
    let mut off = ethernet::HEADER_LEN;
    let mut tags = 0;
    while etype == ethertype::VLAN || etype == ethertype::QINQ {
        // __netif_receive_skb_core(): a tag with a VLAN id and no VLAN
        // device makes the frame PACKET_OTHERHOST; a priority tag (id 0)
        // is taken off and the frame goes on.
        let Some(tci) = be16(frame, off) else {
            return Err(DropReason::Malformed);
        };
        tags += 1;
        if (tci & 0x0fff != 0 && !cfg.any_l2) || tags > 2 {
            snmp.ext.vlan_otherhost += 1;
            return Err(DropReason::NotForUs);
        }
        let Some(inner) = be16(frame, off + 2) else {
            return Err(DropReason::Malformed);
        };
        etype = inner;
        off += 4;
    }
    Ok((etype, off))
}

// L2, L3 and UDP input are always inlined into their caller: called, each
// returned a `Result` with two addresses through memory, written narrow and
// read wide by the next step (store-forwarding stalls: 40 % of the samples of
// `input_any`). Null mode with `--stack sink`: 19.4-20.4 -> 27.4 Mpps.
#[inline(always)]
fn l3_rcv(
    frame: &[u8],
    more: usize,
    etype: u16,
    l3: usize,
    reasm: bool,
    cfg: &IpConfig,
    snmp: &mut Snmp,
) -> Result<L4, DropReason> {
    Ok(match etype {
        ethertype::IPV4 => v4::rcv(frame, more, l3, reasm, cfg, snmp)?,
        ethertype::IPV6 => v6::rcv(frame, more, l3, reasm, cfg, snmp)?,
        _ => {
            snmp.ext.not_ip += 1;
            return Err(DropReason::UnhandledProto);
        }
    })
}

#[cfg(test)]
mod tests;
