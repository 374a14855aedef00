//! IPv6 input: `ipv6_rcv()` / `ip6_rcv_core()` (with `ipv6_parse_hopopts()`),
//! then, for a local destination, `ip6_protocol_deliver_rcu()` walking the
//! extension headers (`ipv6_destopt_rcv()`, `ipv6_rthdr_rcv()`,
//! `ipv6_frag_rcv()`) to the transport, as net/ipv6 does.

use super::{IpConfig, Snmp, L4};
use crate::stats::DropReason;
use rxpath_wire::ipv6;
use std::net::{IpAddr, Ipv6Addr};

const NEXTHDR_HOP: u8 = 0;
const NEXTHDR_TCP: u8 = 6;
const NEXTHDR_UDP: u8 = 17;
const NEXTHDR_ROUTING: u8 = 43;
const NEXTHDR_FRAGMENT: u8 = 44;
const NEXTHDR_ICMP: u8 = 58;
const NEXTHDR_AUTH: u8 = 51;
const NEXTHDR_NONE: u8 = 59;
const NEXTHDR_DEST: u8 = 60;
const NEXTHDR_UDPLITE: u8 = 136;

/// `net.ipv6.max_hbh_opts_number` and `max_dst_opts_number`.
const MAX_OPTS: usize = 8;

fn hdr_error(snmp: &mut Snmp) -> DropReason {
    snmp.ip6.in_hdr_errors += 1;
    DropReason::IpHeader
}

fn mc_scope(a: &Ipv6Addr) -> Option<u8> {
    a.is_multicast().then(|| a.octets()[1] & 0x0f)
}

#[inline(always)]
pub(super) fn rcv(
    frame: &[u8],
    more: usize,
    l3: usize,
    reasm: bool,
    cfg: &IpConfig,
    snmp: &mut Snmp,
) -> Result<L4, DropReason> {
    snmp.ip6.in_receives += 1;
    let p = frame.get(l3..).unwrap_or(&[]);
    if p.len() < ipv6::HEADER_LEN {
        return Err(hdr_error(snmp));
    }
    // The kernel's checks in its order, on the unchecked view.
    let ip = ipv6::Packet::new_unchecked(p);
    if ip.version() != 6 {
        return Err(hdr_error(snmp));
    }
    let (src, dst) = (ip.src(), ip.dst());
    if src.is_loopback() || dst.is_loopback() {
        return Err(hdr_error(snmp));
    }
    if matches!(mc_scope(&dst), Some(0 | 1)) || src.is_multicast() {
        return Err(hdr_error(snmp));
    }
    let plen = ip.payload_len() as usize;
    let mut nh = ip.next_header();
    let p = if plen != 0 || nh != NEXTHDR_HOP {
        if plen + 40 > p.len() + more {
            snmp.ip6.in_truncated_pkts += 1;
            return Err(DropReason::Malformed);
        }
        if plen < more {
            return Err(hdr_error(snmp));
        }
        // `more` bytes of a GRO packet lie in the chain's other frames.
        &p[..40 + plen - more]
    } else {
        p
    };
    let mut off = 40;
    if nh == NEXTHDR_HOP {
        // ipv6_parse_hopopts()
        match ext_len(p, off) {
            Some(len) if parse_tlv(p, off, len, true, plen, snmp) => {
                nh = p[off];
                off += len;
            }
            _ => return Err(hdr_error(snmp)),
        }
    }
    // ip6_route_input()
    if dst.is_multicast() {
        // ip6_mc_input(): a group the interface is in, its filters
        // letting the source through.
        if !cfg.groups.host_allows(IpAddr::V6(dst), IpAddr::V6(src)) {
            snmp.ext.otherhost += 1;
            return Err(DropReason::NotForUs);
        }
    } else if !cfg.is_local(IpAddr::V6(dst)) {
        if cfg.routable(IpAddr::V6(dst)) {
            // ip6_forward() with forwarding off.
            snmp.ip6.in_addr_errors += 1;
        } else {
            // ip6_pkt_drop(): no route.
            snmp.ip6.in_no_routes += 1;
        }
        return Err(DropReason::NotForUs);
    }
    // ip6_protocol_deliver_rcu()
    let at = Walk {
        l3,
        off,
        nh,
        plen,
        src,
        dst,
        fragmented: false,
        reasm,
    };
    upper(p, at, cfg, snmp)
}

/// Where the walk to the upper layer stands.
#[derive(Debug, Clone, Copy)]
pub(super) struct Walk {
    /// The network header's offset in the frame.
    pub(super) l3: usize,
    /// The next header's offset from the network header.
    pub(super) off: usize,
    /// Its type.
    pub(super) nh: u8,
    /// The payload length.
    pub(super) plen: usize,
    pub(super) src: Ipv6Addr,
    pub(super) dst: Ipv6Addr,
    /// A fragment header was passed (`IP6SKB_FRAGMENTED`).
    pub(super) fragmented: bool,
    /// A fragment goes to reassembly (`Err(Fragment)`, `ReasmReqds`
    /// counted); else it fails here (`ReasmFails`).
    pub(super) reasm: bool,
}

/// `ip6_protocol_deliver_rcu()` from `at`: extension headers to the
/// transport. `p` is the packet from its network header on, as far as
/// this frame holds it.
pub(super) fn upper(p: &[u8], at: Walk, cfg: &IpConfig, snmp: &mut Snmp) -> Result<L4, DropReason> {
    let Walk {
        l3,
        mut off,
        mut nh,
        plen,
        src,
        dst,
        mut fragmented,
        reasm,
    } = at;
    loop {
        match nh {
            NEXTHDR_DEST => {
                let Some(len) = ext_len(p, off) else {
                    return Err(hdr_error(snmp));
                };
                if !parse_tlv(p, off, len, false, plen, snmp) {
                    return Err(hdr_error(snmp));
                }
                nh = p[off];
                off += len;
            }
            NEXTHDR_ROUTING => {
                let Some(len) = ext_len(p, off) else {
                    return Err(hdr_error(snmp));
                };
                let (rtype, segs_left) = (p[off + 2], p[off + 3]);
                if matches!(rtype, 3 | 4) {
                    // RPL and segment routing, off unless configured:
                    // dropped without a counter.
                    snmp.ext.source_route += 1;
                    return Err(DropReason::NotForUs);
                }
                if segs_left != 0 {
                    // unknown_rh: we route for nobody.
                    return Err(hdr_error(snmp));
                }
                nh = p[off];
                off += len;
            }
            NEXTHDR_FRAGMENT => {
                // ipv6_frag_rcv()
                if fragmented {
                    return Err(hdr_error(snmp));
                }
                snmp.ip6.reasm_reqds += 1;
                if plen == 0 || p.len() < off + 8 {
                    return Err(hdr_error(snmp));
                }
                let frag_off = rxpath_wire::be16(p, off + 2).unwrap_or(0);
                if frag_off & 0xfff9 == 0 {
                    // An atomic fragment: not fragmented at all.
                    snmp.ip6.reasm_oks += 1;
                    fragmented = true;
                    nh = p[off];
                    off += 8;
                } else if frag_off & 0xfff8 == 0 && upper_truncated(p, off + 8, p[off]) {
                    // RFC 8200 4.5: a first fragment without the whole
                    // upper-layer header.
                    return Err(hdr_error(snmp));
                } else if reasm {
                    return Err(DropReason::Fragment);
                } else {
                    snmp.ip6.reasm_fails += 1;
                    return Err(DropReason::Fragment);
                }
            }
            NEXTHDR_NONE => {
                // Delivered to the "no next header" handler, which discards.
                snmp.ip6.in_delivers += 1;
                return Err(DropReason::UnhandledProto);
            }
            // UDP, or any upper layer for a path end that takes them all
            // (as the IPv4 side does).
            // `InDelivers`: counted by the caller after the `INPUT` hook.
            nh if nh == NEXTHDR_UDP
                || ((nh == NEXTHDR_TCP || nh == NEXTHDR_ICMP) && cfg.tcp)
                || (cfg.deliver_all && nh != NEXTHDR_HOP) =>
            {
                return Ok(L4 {
                    src: src.into(),
                    dst: dst.into(),
                    off: l3 + off,
                    len: p.len() - off,
                    proto: nh,
                });
            }
            NEXTHDR_TCP | NEXTHDR_ICMP | NEXTHDR_UDPLITE => {
                snmp.ext.left_to_kernel += 1;
                return Err(DropReason::UnhandledProto);
            }
            _ => {
                // Hop-by-hop anywhere but first is unknown here too.
                snmp.ip6.in_unknown_protos += 1;
                return Err(DropReason::UnhandledProto);
            }
        }
    }
}

/// `ipv6frag_thdr_truncated()`: from `off` (after the fragment header,
/// whose next header is `nh`), `ipv6_skip_exthdr()` to the upper layer,
/// whose header (TCP 20, UDP 8, ICMPv6 8, anything else 1 byte) the packet
/// must hold. A chain the walk cannot follow is not called truncated.
fn upper_truncated(p: &[u8], mut off: usize, mut nh: u8) -> bool {
    loop {
        match nh {
            NEXTHDR_HOP | NEXTHDR_ROUTING | NEXTHDR_DEST | NEXTHDR_AUTH | NEXTHDR_FRAGMENT => {
                if p.len() < off + 8 {
                    return false;
                }
                let len = match nh {
                    NEXTHDR_AUTH => (p[off + 1] as usize + 2) * 4,
                    NEXTHDR_FRAGMENT => {
                        if rxpath_wire::be16(p, off + 2).unwrap_or(0) & 0xfff8 != 0 {
                            return false;
                        }
                        8
                    }
                    _ => (p[off + 1] as usize + 1) * 8,
                };
                nh = p[off];
                off += len;
            }
            NEXTHDR_NONE => return false,
            _ => break,
        }
    }
    let need = match nh {
        NEXTHDR_TCP => 20,
        NEXTHDR_UDP | NEXTHDR_ICMP => 8,
        _ => 1,
    };
    off + need > p.len()
}

/// The offset of the fragment header of a packet IP input passed as a
/// fragment (`p` from its network header), and its next header.
pub(super) fn fragment_header(p: &[u8]) -> Option<usize> {
    let (mut off, mut nh) = (40, *p.get(6)?);
    while nh != NEXTHDR_FRAGMENT {
        if !matches!(nh, NEXTHDR_HOP | NEXTHDR_ROUTING | NEXTHDR_DEST) {
            return None;
        }
        let len = ext_len(p, off)?;
        nh = p[off];
        off += len;
    }
    (p.len() >= off + 8).then_some(off)
}

/// The length of the extension header at `off` if the packet holds it
/// (`pskb_may_pull` of 8 bytes, then of `(hdrlen + 1) * 8`).
fn ext_len(p: &[u8], off: usize) -> Option<usize> {
    if p.len() < off + 8 {
        return None;
    }
    let len = (p[off + 1] as usize + 1) * 8;
    (p.len() >= off + len).then_some(len)
}

/// `ip6_parse_tlv()`: the options of a hop-by-hop (`hop`) or destination
/// options header. False means drop.
fn parse_tlv(p: &[u8], start: usize, len: usize, hop: bool, plen: usize, snmp: &mut Snmp) -> bool {
    let mut off = start + 2;
    let mut left = len as isize - 2;
    let (mut padlen, mut count) = (0usize, 0usize);
    while left > 0 {
        let t = p[off];
        if t == 0 {
            // Pad1
            padlen += 1;
            if padlen > 7 {
                return false;
            }
            off += 1;
            left -= 1;
            continue;
        }
        if left < 2 {
            return false;
        }
        let optlen = p[off + 1] as usize + 2;
        if optlen as isize > left {
            return false;
        }
        if t == 1 {
            // PadN: at most 7 bytes of padding, all zero (RFC 4942).
            padlen += optlen;
            if padlen > 7 || p[off + 2..off + optlen].iter().any(|&b| b != 0) {
                return false;
            }
        } else {
            count += 1;
            if count > MAX_OPTS {
                return false;
            }
            let ok = match (hop, t) {
                // ipv6_hop_ra()
                (true, 0x05) => p[off + 1] == 2,
                // ipv6_hop_ioam(): 4n-aligned, then ignored (not enabled).
                (true, 0x31) => off & 3 == 0,
                // ipv6_hop_jumbo(): never valid on packets this small.
                (true, 0xc2) => {
                    if p[off + 1] == 4 && off & 3 == 2 && plen == 0 {
                        let jl =
                            u32::from_be_bytes([p[off + 2], p[off + 3], p[off + 4], p[off + 5]])
                                as usize;
                        if jl > 65535 && jl > p.len() - 40 {
                            snmp.ip6.in_truncated_pkts += 1;
                        }
                    }
                    false
                }
                // ipv6_hop_calipso(): no DOI configured.
                (true, 0x07) => false,
                // ip6_tlvopt_unknown(): the top two bits say skip or drop.
                _ => t >> 6 == 0,
            };
            if !ok {
                return false;
            }
            padlen = 0;
        }
        off += optlen;
        left -= optlen as isize;
    }
    left == 0
}
