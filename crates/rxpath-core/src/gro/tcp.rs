//! TCP GRO: `tcp4_gro_receive` / `tcp6_gro_receive` → `tcp_gro_receive`
//! (net/ipv4/tcp_offload.c). See the module docs of [`super`] for the
//! checks and their order.

use super::{Check, FlushReason, Gro, GroResult, Held, GRO_MAX_SIZE};
use crate::packet::{Packet, RxCtx, Stack};
use rxpath_wire::ipv4::protocol;
use rxpath_wire::tcp::flags;
use rxpath_wire::L4;

/// The parts of a segment the checks compare, read once.
struct Seg {
    seq: u32,
    flags: u16,
    len: usize,
}

impl Gro {
    /// A TCP segment (or any packet that is not UDP for a `UDP_GRO`
    /// socket: it fails the first check and goes up as is).
    pub(super) fn receive_tcp<S: Stack + ?Sized>(
        &mut self,
        bucket: usize,
        pkt: Packet,
        ctx: &mut RxCtx<'_>,
        inner: &mut S,
    ) -> GroResult {
        let seg = match Self::tcp_alone(&pkt, ctx) {
            Ok(seg) => seg,
            Err(c) => return self.not_merged(bucket, pkt, c, ctx, inner),
        };
        let ends =
            seg.flags & (flags::URG | flags::PSH | flags::RST | flags::SYN | flags::FIN) != 0;
        if let Some(i) = self.lookup(bucket, &pkt, ctx) {
            match Self::tcp_can_merge(&self.buckets[bucket][i], &pkt, &seg, ctx) {
                Ok(()) => {
                    let short = seg.len < self.buckets[bucket][i].mss as usize;
                    self.tcp_merge(bucket, i, pkt, &seg, ctx);
                    self.sample(!ends && !short);
                    if ends || short {
                        let r = if seg.flags & flags::PSH != 0 {
                            FlushReason::Psh
                        } else if ends {
                            FlushReason::Flags
                        } else {
                            FlushReason::Short
                        };
                        self.flush_at(bucket, i, r, ctx, inner);
                    }
                    return GroResult::Merged;
                }
                Err(c) => {
                    self.count_check(c);
                    let r = match c {
                        Check::Cwr | Check::FlagsDiffer => FlushReason::Flags,
                        Check::SizeLimit => FlushReason::Size,
                        _ => FlushReason::Mismatch,
                    };
                    self.flush_at(bucket, i, r, ctx, inner);
                }
            }
        }
        // A new packet: held unless it must go up at once (no payload was
        // excluded above; flags end it).
        self.sample(!ends);
        if ends {
            self.stats.normal += 1;
            self.pass_up(pkt, ctx, inner);
            return GroResult::Normal;
        }
        let next = seg.seq.wrapping_add(seg.len as u32);
        self.hold(bucket, pkt, seg.len, next, ctx, inner)
    }

    /// The checks on the segment alone (`inet_gro_receive`,
    /// `ipv6_gro_receive`, `tcp4_gro_receive`).
    fn tcp_alone(pkt: &Packet, ctx: &RxCtx<'_>) -> Result<Seg, Check> {
        let h = &pkt.meta.headers;
        let L4::Tcp { flags: tcp_flags } = h.l4 else {
            return Err(if h.fragment {
                Check::Fragment
            } else {
                Check::NotTcp
            });
        };
        if h.fragment {
            return Err(Check::Fragment);
        }
        if h.l3 == rxpath_wire::L3::Ipv4 && h.ip_options {
            return Err(Check::IpOptions);
        }
        if !Self::l4_checksum_ok(pkt, ctx, protocol::TCP) {
            return Err(Check::BadChecksum);
        }
        Self::ip_alone(pkt, ctx)?;
        if h.payload_len == 0 {
            return Err(Check::NoPayload);
        }
        let b = ctx.data(pkt);
        let t = h.l4_offset as usize;
        let be32 = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Ok(Seg {
            seq: be32(t + 4),
            flags: tcp_flags,
            len: h.payload_len as usize,
        })
    }

    /// The checks against the held packet (`tcp_gro_receive`, the network
    /// flush checks, `skb_gro_receive`).
    fn tcp_can_merge(p: &Held, pkt: &Packet, seg: &Seg, ctx: &RxCtx<'_>) -> Result<(), Check> {
        let h = &pkt.meta.headers;
        let h2 = &p.pkt.meta.headers;
        let b = ctx.data(pkt);
        let b2 = ctx.data(&p.pkt);
        let (t, t2) = (h.l4_offset as usize, h2.l4_offset as usize);
        let flags2 = u16::from_be_bytes([b2[t2 + 12], b2[t2 + 13]]) & 0x01ff;
        if seg.flags & flags::CWR != 0 {
            return Err(Check::Cwr);
        }
        if (seg.flags ^ flags2) & !(flags::CWR | flags::FIN | flags::PSH) != 0 {
            return Err(Check::FlagsDiffer);
        }
        if b[t + 8..t + 12] != b2[t2 + 8..t2 + 12] {
            return Err(Check::AckDiffer);
        }
        let thl = (h.payload_offset as usize) - t;
        let thl2 = (h2.payload_offset as usize) - t2;
        if thl != thl2 || b[t + 20..t + thl] != b2[t2 + 20..t2 + thl2] {
            return Err(Check::OptionsDiffer);
        }
        Self::ip_flush(p, pkt, ctx)?;
        if seg.len > p.mss as usize {
            return Err(Check::TooLong);
        }
        if seg.seq != p.next_seq {
            return Err(Check::SeqGap);
        }
        if p.ip_len as usize + seg.len >= GRO_MAX_SIZE {
            return Err(Check::SizeLimit);
        }
        Ok(())
    }

    /// Chain the segment; FIN and PSH are carried into the head's flags.
    fn tcp_merge(&mut self, bucket: usize, i: usize, pkt: Packet, seg: &Seg, ctx: &mut RxCtx<'_>) {
        let carry = seg.flags & (flags::FIN | flags::PSH);
        if carry != 0 {
            let held = &mut self.buckets[bucket][i];
            let t = held.pkt.off as usize + held.pkt.meta.headers.l4_offset as usize;
            let d = ctx.umem().data_mut(&mut held.pkt.frame);
            d[t + 13] |= carry as u8;
        }
        self.chain(bucket, i, pkt, ctx);
        let held = &mut self.buckets[bucket][i];
        held.next_seq = held.next_seq.wrapping_add(seg.len as u32);
    }
}
