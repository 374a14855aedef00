//! UDP input up to the socket lookup: `__udp4_lib_rcv()` /
//! `__udp6_lib_rcv()` length checks and the checksum, as the device's
//! status and the policy allow.
//!
//! The kernel checks a datagram's checksum before `NoPorts` when no socket
//! wants it, and when a reader copies it (`udp_recvmsg`) when one does;
//! rxpath checks it here, once, before the lookup: the same datagrams are
//! counted `InCsumErrors` either way.

use super::{CsumPolicy, CsumStatus, Datagram, IpConfig, Snmp, L4};
use crate::stats::DropReason;
use rxpath_wire::{checksum, udp};
use std::net::SocketAddr;

#[inline(always)]
pub(super) fn rcv(
    frame: &[u8],
    more: usize,
    l4: L4,
    csum: CsumStatus,
    cfg: &IpConfig,
    snmp: &mut Snmp,
    rest_sum: Option<u32>,
) -> Result<Datagram, DropReason> {
    let v6 = l4.src.is_ipv6();
    let seg = &frame[l4.off..l4.off + l4.len];
    let short = |snmp: &mut Snmp| {
        snmp.udp_mut(v6).in_errors += 1;
        DropReason::Malformed
    };
    if seg.len() < udp::HEADER_LEN {
        return Err(short(snmp));
    }
    let hdr = udp::Packet::new_unchecked(seg);
    let (mut ulen, field) = (hdr.len() as usize, hdr.checksum());
    if ulen > seg.len() + more {
        return Err(short(snmp));
    }
    if v6 && ulen == 0 {
        // A jumbogram's UDP length: the IP payload's.
        ulen = seg.len() + more;
    }
    if ulen < 8 + more {
        return Err(short(snmp));
    }
    // The head's part; a GRO packet's other `more` bytes are in its chain.
    let seg = &seg[..ulen - more];
    let ok = if let Some(rest) = rest_sum {
        // A reassembled datagram: its fragments' status says nothing of
        // the whole, which is summed here, the UDP length covering it all.
        if ulen != seg.len() + more {
            return Err(short(snmp));
        }
        if field == 0 {
            !v6
        } else if cfg.csum == CsumPolicy::Trust {
            snmp.ext.csum_trusted += 1;
            true
        } else {
            let s = checksum::pseudo_header(l4.src, l4.dst, 17, ulen as u32) as u64
                + checksum::sum(seg) as u64
                + rest as u64;
            checksum::fold((s & 0xffff_ffff) as u32 + (s >> 32) as u32) == 0xffff
        }
    } else if more > 0 {
        // A GRO packet: GRO verified (or trusted, as the device's status
        // and the policy allow) every segment's checksum.
        true
    } else if field == 0 {
        // IPv4 may send no checksum; IPv6 must (RFC 8200 8.1).
        !v6
    } else {
        let ends = (l4.src, l4.dst, 17);
        super::l4_csum_ok(cfg, csum, snmp, ends, seg, field, ulen as u32)
    };
    if !ok {
        let m = snmp.udp_mut(v6);
        m.in_csum_errors += 1;
        m.in_errors += 1;
        return Err(DropReason::BadChecksum);
    }
    let (sport, dport) = (hdr.src_port(), hdr.dst_port());
    Ok(Datagram {
        src: SocketAddr::new(l4.src, sport),
        dst: SocketAddr::new(l4.dst, dport),
        payload_off: l4.off + 8,
        payload_len: ulen - 8,
        multi: match l4.dst {
            std::net::IpAddr::V4(a) => a.is_multicast() || cfg.is_broadcast(a),
            std::net::IpAddr::V6(a) => a.is_multicast(),
        },
    })
}
