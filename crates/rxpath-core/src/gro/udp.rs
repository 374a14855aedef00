//! UDP GRO for sockets that ask for it: `udp4_gro_receive` /
//! `udp6_gro_receive` → `udp_gro_receive` → `udp_gro_receive_segment`
//! (net/ipv4/udp_offload.c, Linux 6.18), and `udp_gro_complete_segment`.
//!
//! The kernel merges plain UDP only when the socket the datagram is for has
//! `UDP_GRO` set (`udp_sk(sk)->gro_enabled`; devices with
//! `rx-gro-list`/`rx-udp-gro-forwarding` aside), so GRO looks the socket up
//! through [`UdpGroPolicy`](super::UdpGroPolicy); every other datagram goes
//! up alone. For a datagram of such a flow, in order:
//!
//! - IP checks as for TCP (fragment, IPv4 options, header checksum), then
//!   the UDP checksum in software unless the device verified it;
//! - a zero checksum is not merged (`requires non zero csum, for symmetry
//!   with GSO`): [`Check::UdpNoChecksum`];
//! - the UDP length must exceed 8 and equal the IP payload's (`padded or
//!   malicious packets`): [`Check::UdpLength`];
//! - against the held packet of the flow (same L2 header, addresses, ports,
//!   IPv6 flow label): the network flush checks (TTL/TOS/DF, IP ID;
//!   traffic class/hop limit), then a datagram **longer** than the held
//!   packet's first one flushes it and starts a new packet; the 64 KiB
//!   limit does the same;
//! - otherwise it is chained; a **shorter** one ends the packet at once
//!   (`ulen != ntohs(uh2->len)`), and so does the 64th segment
//!   (`UDP_GRO_CNT_MAX`).
//!
//! At the flush the head's IP and UDP lengths cover the whole packet, the
//! UDP checksum field holds the pseudo-header sum (`CHECKSUM_PARTIAL`, as
//! `udp4_gro_complete` leaves it) and [`Meta::gso_size`] the segment size,
//! which the socket reports with the read (the `UDP_GRO` control message).
//!
//! [`Meta::gso_size`]: crate::packet::Meta::gso_size

use super::{Check, FlushReason, Gro, GroResult, Held, GRO_MAX_SIZE};
use crate::packet::{Packet, RxCtx, Stack};
use rxpath_wire::{be16, Headers};

/// `UDP_GRO_CNT_MAX`: segments in one UDP GRO packet.
pub const UDP_GRO_CNT_MAX: u16 = 64;

impl Gro {
    /// A datagram for a socket with `UDP_GRO`.
    pub(super) fn receive_udp<S: Stack + ?Sized>(
        &mut self,
        bucket: usize,
        pkt: Packet,
        ctx: &mut RxCtx<'_>,
        inner: &mut S,
    ) -> GroResult {
        let len = match Self::udp_alone(&pkt, ctx) {
            Ok(len) => len,
            Err(c) => return self.not_merged(bucket, pkt, c, ctx, inner),
        };
        if let Some(i) = self.lookup(bucket, &pkt, ctx) {
            match Self::udp_can_merge(&self.buckets[bucket][i], &pkt, len, ctx) {
                Ok(()) => {
                    let short = len < self.buckets[bucket][i].mss as usize;
                    self.chain(bucket, i, pkt, ctx);
                    self.sample(!short);
                    if short {
                        self.flush_at(bucket, i, FlushReason::Short, ctx, inner);
                    } else if self.buckets[bucket][i].count >= UDP_GRO_CNT_MAX {
                        self.flush_at(bucket, i, FlushReason::Count, ctx, inner);
                    }
                    return GroResult::Merged;
                }
                Err(c) => {
                    self.count_check(c);
                    let r = match c {
                        Check::SizeLimit => FlushReason::Size,
                        _ => FlushReason::Mismatch,
                    };
                    self.flush_at(bucket, i, r, ctx, inner);
                }
            }
        }
        self.sample(true);
        self.hold(bucket, pkt, len, 0, ctx, inner)
    }

    /// The checks on the datagram alone; its payload length if it may merge.
    fn udp_alone(pkt: &Packet, ctx: &RxCtx<'_>) -> Result<usize, Check> {
        Self::ip_alone(pkt, ctx)?;
        let h = &pkt.meta.headers;
        let b = ctx.data(pkt);
        let u = h.l4_offset as usize;
        let (Some(ulen), Some(check)) = (be16(b, u + 4), be16(b, u + 6)) else {
            return Err(Check::UdpLength);
        };
        if check == 0 {
            return Err(Check::UdpNoChecksum);
        }
        if !Self::l4_checksum_ok(pkt, ctx, 17) {
            return Err(Check::BadChecksum);
        }
        // `skb_gro_len()`: what the IP header says follows the UDP header's
        // start (the parser bounds the payload by the UDP length instead).
        let (l3, l4) = (h.l3_offset as usize, h.l4_offset as usize);
        let ip_l4_len = match h.l3 {
            rxpath_wire::L3::Ipv4 => be16(b, l3 + 2).map(|t| t as usize + l3),
            _ => be16(b, l3 + 4).map(|p| p as usize + l3 + 40),
        }
        .and_then(|end| end.checked_sub(l4));
        let ulen = ulen as usize;
        if ulen <= 8 || Some(ulen) != ip_l4_len {
            return Err(Check::UdpLength);
        }
        Ok(ulen - 8)
    }

    /// `udp_gro_receive_segment` against the held packet of the flow.
    fn udp_can_merge(p: &Held, pkt: &Packet, len: usize, ctx: &RxCtx<'_>) -> Result<(), Check> {
        Self::ip_flush(p, pkt, ctx)?;
        if len > p.mss as usize {
            return Err(Check::TooLong);
        }
        if p.ip_len as usize + len >= GRO_MAX_SIZE {
            return Err(Check::SizeLimit);
        }
        Ok(())
    }
}

/// `udp4_gro_complete` / `udp6_gro_complete`: the head's UDP length covers
/// the whole packet (`ip_len`: from the network header on) and its checksum
/// field holds the pseudo-header sum, as `CHECKSUM_PARTIAL` leaves it.
pub(super) fn complete(frame: &mut [u8], off: usize, h: &Headers, ip_len: u32) {
    let u = off + h.l4_offset as usize;
    let ulen = ip_len - (h.l4_offset - h.l3_offset) as u32;
    frame[u + 4..u + 6].copy_from_slice(&(ulen as u16).to_be_bytes());
    if frame[u + 6..u + 8] != [0, 0] {
        let sum = rxpath_wire::checksum::pseudo_header(h.flow.src(), h.flow.dst(), 17, ulen);
        frame[u + 6..u + 8].copy_from_slice(&(sum as u16).to_be_bytes());
    }
}
