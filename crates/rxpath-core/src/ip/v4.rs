//! IPv4 input: `ip_rcv_core()`, `ip_rcv_finish_core()`, `ip_rcv_options()`
//! (with `__ip_options_compile()`), `ip_local_deliver()` and
//! `ip_protocol_deliver_rcu()` of net/ipv4, in that order.

use super::{IpConfig, Snmp, L4};
use crate::stats::DropReason;
use rxpath_wire::{checksum, ipv4};
use std::net::IpAddr;

const IPOPT_END: u8 = 0;
const IPOPT_NOOP: u8 = 1;
const IPOPT_RR: u8 = 7;
const IPOPT_TIMESTAMP: u8 = 68;
const IPOPT_LSRR: u8 = 131;
const IPOPT_SSRR: u8 = 137;
const IPOPT_RA: u8 = 148;
const IPOPT_CIPSO: u8 = 134;
const IPOPT_TS_TSONLY: u8 = 0;
const IPOPT_TS_TSANDADDR: u8 = 1;
const IPOPT_TS_PRESPEC: u8 = 3;

/// Protocols the kernel's IPv4 stack has a handler for and rxpath does not
/// serve (ICMP, IGMP, TCP, UDP-Lite).
const KERNEL_PROTOS: [u8; 4] = [1, 2, 6, 136];

fn hdr_error(snmp: &mut Snmp) -> DropReason {
    snmp.ip.in_hdr_errors += 1;
    DropReason::IpHeader
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
    snmp.ip.in_receives += 1;
    let p = frame.get(l3..).unwrap_or(&[]);
    if p.len() < ipv4::HEADER_LEN {
        return Err(hdr_error(snmp));
    }
    // The kernel's checks in its order, on the unchecked view.
    let ip = ipv4::Packet::new_unchecked(p);
    let ihl = ip.header_len();
    if ihl < ipv4::HEADER_LEN || ip.version() != 4 {
        return Err(hdr_error(snmp));
    }
    if p.len() < ihl {
        return Err(hdr_error(snmp));
    }
    if checksum::fold(checksum::sum(&p[..ihl])) != 0xffff {
        snmp.ip.in_csum_errors += 1;
        return Err(hdr_error(snmp));
    }
    let tot = ip.total_len() as usize;
    if p.len() + more < tot {
        snmp.ip.in_truncated_pkts += 1;
        return Err(DropReason::Malformed);
    } else if tot < ihl + more {
        return Err(hdr_error(snmp));
    }
    // pskb_trim_rcsum(): the medium may have padded the frame. (`more`
    // bytes of a GRO packet lie in the chain's other frames.)
    let (src, dst, frag, proto) = (ip.src(), ip.dst(), ip.flags_frag(), ip.protocol());
    let p = &p[..tot - more];
    // ip_route_input_slow(): martian sources first.
    if src.is_multicast() || src.is_broadcast() || src.octets()[0] == 0 {
        snmp.ext.martian_source += 1;
        return Err(DropReason::NotForUs);
    }
    if dst.is_multicast() && !cfg.groups.host_allows(IpAddr::V4(dst), IpAddr::V4(src)) {
        // ip_route_input_rcu(): not a group the interface is in (or its
        // filters refuse the source): dropped without an SNMP counter.
        snmp.ext.otherhost += 1;
        return Err(DropReason::NotForUs);
    }
    let local = dst.is_multicast() || cfg.is_broadcast(dst) || cfg.is_local(IpAddr::V4(dst));
    if local && cfg.has_addr(IpAddr::V4(src)) {
        // fib_validate_source(): a source that is one of our addresses.
        snmp.ext.martian_source += 1;
        return Err(DropReason::NotForUs);
    }
    if ihl > 20 {
        match compile_options(&p[ipv4::HEADER_LEN..ihl]) {
            Err(()) => return Err(hdr_error(snmp)),
            Ok(true) => {
                // Source routing with accept_source_route 0.
                snmp.ext.source_route += 1;
                return Err(DropReason::NotForUs);
            }
            Ok(false) => {}
        }
    }
    if !local {
        // ip_error() with forwarding off.
        snmp.ip.in_addr_errors += 1;
        return Err(DropReason::NotForUs);
    }
    if frag & 0x3fff != 0 {
        // ip_local_deliver() → ip_defrag(), which the caller runs when it
        // reassembles (`reasm`); a path that does not fails it here.
        snmp.ip.reasm_reqds += 1;
        if !reasm {
            snmp.ip.reasm_fails += 1;
        }
        return Err(DropReason::Fragment);
    }
    deliver(src, dst, l3 + ihl, p.len() - ihl, proto, cfg, snmp)
}

/// A reassembled datagram's transport: `head` is its first frame, the
/// network header at `l3`, the data from `data` on.
pub(super) fn transport(
    head: &[u8],
    l3: usize,
    data: usize,
    cfg: &IpConfig,
    snmp: &mut Snmp,
) -> Result<L4, DropReason> {
    let ip = ipv4::Packet::new_unchecked(&head[l3..]);
    deliver(
        ip.src(),
        ip.dst(),
        data,
        head.len() - data,
        ip.protocol(),
        cfg,
        snmp,
    )
}

/// `ip_protocol_deliver_rcu()`: the transport `proto` at `off` (`len`
/// bytes in this frame) if rxpath serves it.
#[inline(always)]
fn deliver(
    src: std::net::Ipv4Addr,
    dst: std::net::Ipv4Addr,
    off: usize,
    len: usize,
    proto: u8,
    cfg: &IpConfig,
    snmp: &mut Snmp,
) -> Result<L4, DropReason> {
    match proto {
        // `InDelivers` is counted by the caller once the `INPUT` hook let
        // the packet through (`ip_protocol_deliver_rcu()`).
        proto if proto == 17 || cfg.deliver_all || ((proto == 6 || proto == 1) && cfg.tcp) => {
            Ok(L4 {
                src: src.into(),
                dst: dst.into(),
                off,
                len,
                proto,
            })
        }
        proto if KERNEL_PROTOS.contains(&proto) => {
            snmp.ext.left_to_kernel += 1;
            Err(DropReason::UnhandledProto)
        }
        _ => {
            snmp.ip.in_unknown_protos += 1;
            Err(DropReason::UnhandledProto)
        }
    }
}

/// `__ip_options_compile()` on a received packet (`skb` set): `Err` if the
/// options are malformed, `Ok(true)` if they ask for source routing.
/// Options the kernel accepts on input without knowing them are skipped.
fn compile_options(o: &[u8]) -> Result<bool, ()> {
    let (mut srr, mut rr, mut ts) = (false, false, false);
    let mut i = 0;
    while i < o.len() {
        let l = o.len() - i;
        match o[i] {
            IPOPT_END => break,
            IPOPT_NOOP => {
                i += 1;
                continue;
            }
            _ => {}
        }
        if l < 2 {
            return Err(());
        }
        let optlen = o[i + 1] as usize;
        if optlen < 2 || optlen > l {
            return Err(());
        }
        let opt = &o[i..i + optlen];
        match opt[0] {
            IPOPT_SSRR | IPOPT_LSRR => {
                if optlen < 3 || opt[2] < 4 || srr {
                    return Err(());
                }
                srr = true;
            }
            IPOPT_RR => {
                if rr || optlen < 3 || opt[2] < 4 {
                    return Err(());
                }
                if opt[2] as usize <= optlen && opt[2] as usize + 3 > optlen {
                    return Err(());
                }
                rr = true;
            }
            IPOPT_TIMESTAMP => {
                if ts || optlen < 4 || opt[2] < 5 {
                    return Err(());
                }
                let ptr = opt[2] as usize;
                if ptr <= optlen {
                    if ptr + 3 > optlen {
                        return Err(());
                    }
                    match opt[3] & 0x0f {
                        IPOPT_TS_TSONLY => {}
                        IPOPT_TS_TSANDADDR | IPOPT_TS_PRESPEC if ptr + 7 > optlen => {
                            return Err(());
                        }
                        _ => {}
                    }
                } else if opt[3] & 0x0f != IPOPT_TS_PRESPEC && opt[3] >> 4 == 15 {
                    // The overflow counter would wrap.
                    return Err(());
                }
                ts = true;
            }
            IPOPT_RA if optlen < 4 => return Err(()),
            IPOPT_CIPSO => {
                // cipso_v4_validate() finds no DOI on a host that has not
                // configured CIPSO: every such option is refused.
                return Err(());
            }
            _ => {}
        }
        i += optlen;
    }
    Ok(srr)
}
