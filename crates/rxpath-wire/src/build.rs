//! Writing well-formed frames: Ethernet (optionally VLAN-tagged), IPv4 or
//! IPv6, and TCP or UDP with correct checksums.
//!
//! The `write_*` functions fill a caller's buffer (the simulated NIC writes
//! straight into pool frames, without allocating); `udp` and `tcp` return a
//! new `Vec` for tests and tools.

use crate::ethernet::{self, ethertype, Mac};
use crate::ipv4::{self, protocol, FLAG_DF};
use crate::{checksum, ipv6, tcp, udp};
use std::net::IpAddr;

/// Addresses and per-packet IP fields of a frame to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    /// Source MAC.
    pub src_mac: Mac,
    /// Destination MAC.
    pub dst_mac: Mac,
    /// Source IP (both addresses must be of one family).
    pub src: IpAddr,
    /// Destination IP.
    pub dst: IpAddr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// One 802.1Q tag, if any.
    pub vlan: Option<u16>,
    /// TTL / hop limit.
    pub ttl: u8,
    /// TOS / traffic class.
    pub tos: u8,
    /// IPv4 identification.
    pub ip_id: u16,
    /// IPv4 don't-fragment flag.
    pub df: bool,
}

impl Spec {
    /// A spec with locally administered MACs, TTL 64, DF set.
    pub fn new(src: IpAddr, dst: IpAddr, src_port: u16, dst_port: u16) -> Self {
        Spec {
            src_mac: [0x02, 0, 0, 0, 0, 1],
            dst_mac: [0x02, 0, 0, 0, 0, 2],
            src,
            dst,
            src_port,
            dst_port,
            vlan: None,
            ttl: 64,
            tos: 0,
            ip_id: 0,
            df: true,
        }
    }

    /// Length of the L2 + L3 headers this spec produces.
    pub fn l3_header_end(&self) -> usize {
        let l2 = ethernet::HEADER_LEN
            + if self.vlan.is_some() {
                ethernet::TAG_LEN
            } else {
                0
            };
        l2 + match self.src {
            IpAddr::V4(_) => ipv4::HEADER_LEN,
            IpAddr::V6(_) => ipv6::HEADER_LEN,
        }
    }
}

/// The buffer is too small for the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooSmall;

/// Write L2 and L3 headers for an L4 segment of `l4_len` bytes; returns the
/// L4 offset.
fn write_l2_l3(buf: &mut [u8], spec: &Spec, proto: u8, l4_len: usize) -> usize {
    let mut eth = ethernet::Frame::new_unchecked(&mut buf[..]);
    eth.set_dst(spec.dst_mac);
    eth.set_src(spec.src_mac);
    let is_v6 = spec.src.is_ipv6();
    let l3_type = if is_v6 {
        ethertype::IPV6
    } else {
        ethertype::IPV4
    };
    let mut off = ethernet::HEADER_LEN;
    if let Some(vid) = spec.vlan {
        eth.set_ethertype(ethertype::VLAN);
        buf[off..off + 2].copy_from_slice(&(vid & 0x0fff).to_be_bytes());
        buf[off + 2..off + 4].copy_from_slice(&l3_type.to_be_bytes());
        off += ethernet::TAG_LEN;
    } else {
        eth.set_ethertype(l3_type);
    }
    match (spec.src, spec.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut ip = ipv4::Packet::new_unchecked(&mut buf[off..]);
            ip.set_header_len(ipv4::HEADER_LEN);
            ip.set_tos(spec.tos);
            ip.set_total_len((ipv4::HEADER_LEN + l4_len) as u16);
            ip.set_ident(spec.ip_id);
            ip.set_flags_frag(if spec.df { FLAG_DF } else { 0 });
            ip.set_ttl(spec.ttl);
            ip.set_protocol(proto);
            ip.set_src(s);
            ip.set_dst(d);
            ip.fill_checksum();
            off + ipv4::HEADER_LEN
        }
        (s, d) => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            let mut ip = ipv6::Packet::new_unchecked(&mut buf[off..]);
            ip.set_ver_tc_flow(spec.tos, 0);
            ip.set_payload_len(l4_len as u16);
            ip.set_next_header(proto);
            ip.set_hop_limit(spec.ttl);
            ip.set_src(v6(s));
            ip.set_dst(v6(d));
            off + ipv6::HEADER_LEN
        }
    }
}

/// Write a UDP frame with `payload` into `buf`; returns the frame length.
pub fn write_udp(buf: &mut [u8], spec: &Spec, payload: &[u8]) -> Result<usize, TooSmall> {
    let l4_len = udp::HEADER_LEN + payload.len();
    let total = spec.l3_header_end() + l4_len;
    if buf.len() < total || l4_len > u16::MAX as usize - 40 {
        return Err(TooSmall);
    }
    let off = write_l2_l3(buf, spec, protocol::UDP, l4_len);
    buf[off + udp::HEADER_LEN..total].copy_from_slice(payload);
    let mut u = udp::Packet::new_unchecked(&mut buf[off..total]);
    u.set_src_port(spec.src_port);
    u.set_dst_port(spec.dst_port);
    u.set_len(l4_len as u16);
    u.set_checksum(0);
    let c = checksum::l4(spec.src, spec.dst, protocol::UDP, &buf[off..total]);
    let c = if c == 0 { 0xffff } else { c };
    udp::Packet::new_unchecked(&mut buf[off..total]).set_checksum(c);
    Ok(total)
}

/// The headers of a UDP GSO packet carrying `payload_len` bytes, to be cut
/// into datagrams by the device or the kernel's software GSO (`SKB_GSO_UDP_L4`):
/// Ethernet, IP and UDP with the whole packet's lengths, and in the UDP
/// checksum the pseudo-header sum of the whole length, not complemented,
/// as `udp4_hwcsum` leaves it for the segmentation to adjust per datagram.
/// Returns the headers' length.
pub fn write_udp_gso_headers(
    buf: &mut [u8],
    spec: &Spec,
    payload_len: usize,
) -> Result<usize, TooSmall> {
    let l4_len = udp::HEADER_LEN + payload_len;
    let end = spec.l3_header_end() + udp::HEADER_LEN;
    // IPv4's total length and IPv6's payload length are 16 bits.
    let in_length_field = match spec.src {
        IpAddr::V4(_) => ipv4::HEADER_LEN + l4_len,
        IpAddr::V6(_) => l4_len,
    };
    if buf.len() < end || in_length_field > u16::MAX as usize {
        return Err(TooSmall);
    }
    let off = write_l2_l3(buf, spec, protocol::UDP, l4_len);
    let mut u = udp::Packet::new_unchecked(&mut buf[off..end]);
    u.set_src_port(spec.src_port);
    u.set_dst_port(spec.dst_port);
    u.set_len(l4_len as u16);
    let partial = checksum::pseudo_header(spec.src, spec.dst, protocol::UDP, l4_len as u32);
    u.set_checksum(checksum::fold(partial));
    Ok(end)
}

/// One IP fragment of a UDP datagram (`ip_fragment` / `ip6_fragment`):
/// bytes `off..off + len` of the datagram's UDP header and payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpFragment {
    /// Where the piece starts in the UDP header and payload (a multiple
    /// of 8).
    pub off: usize,
    /// Its length (a multiple of 8 unless it is the last).
    pub len: usize,
    /// More fragments follow (MF).
    pub more: bool,
    /// The whole datagram's UDP checksum ([`udp_checksum`]).
    pub csum: u16,
    /// IPv6's fragment identification (IPv4 takes `Spec::ip_id`).
    pub id: u32,
}

/// The UDP checksum of a datagram of `payload` from `spec` (0 sent as
/// 0xffff), what every fragment's first piece carries.
pub fn udp_checksum(spec: &Spec, payload: &[u8]) -> u16 {
    let l4_len = udp::HEADER_LEN + payload.len();
    let mut hdr = [0u8; udp::HEADER_LEN];
    hdr[0..2].copy_from_slice(&spec.src_port.to_be_bytes());
    hdr[2..4].copy_from_slice(&spec.dst_port.to_be_bytes());
    hdr[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
    let s = checksum::pseudo_header(spec.src, spec.dst, protocol::UDP, l4_len as u32) as u64
        + checksum::sum(&hdr) as u64
        + checksum::sum(payload) as u64;
    let c = !checksum::fold((s & 0xffff_ffff) as u32 + (s >> 32) as u32);
    if c == 0 {
        0xffff
    } else {
        c
    }
}

/// The pieces the kernel cuts a UDP datagram of `payload_len` bytes into
/// for `mtu` ([`mtu_pieces`] of its UDP header and payload).
pub fn udp_fragments(spec: &Spec, payload: &[u8], mtu: usize, id: u32) -> Vec<UdpFragment> {
    let l4 = udp::HEADER_LEN + payload.len();
    let csum = udp_checksum(spec, payload);
    mtu_pieces(l4, mtu, spec.src.is_ipv6())
        .into_iter()
        .map(|(off, len)| UdpFragment {
            off,
            len,
            more: off + len < l4,
            csum,
            id,
        })
        .collect()
}

/// Write fragment `f` of the UDP datagram of `payload` into `buf`: IPv4
/// with the fragment's offset and MF (DF clear), or IPv6 with a fragment
/// header; returns the frame length.
pub fn write_udp_fragment(
    buf: &mut [u8],
    spec: &Spec,
    payload: &[u8],
    f: UdpFragment,
) -> Result<usize, TooSmall> {
    let v6 = spec.src.is_ipv6();
    let fh = if v6 { 8 } else { 0 };
    let l4 = udp::HEADER_LEN + payload.len();
    let total = spec.l3_header_end() + fh + f.len;
    // The largest datagram: IPv4's total length (20 bytes of header in
    // it), IPv6's payload length (the fragment header in it).
    let max_l4 = u16::MAX as usize - if v6 { fh } else { ipv4::HEADER_LEN };
    if buf.len() < total || f.off + f.len > l4 || l4 > max_l4 {
        return Err(TooSmall);
    }
    let mut s = *spec;
    s.df = false;
    let proto = if v6 { 44 } else { protocol::UDP };
    let off = write_l2_l3(buf, &s, proto, fh + f.len);
    if v6 {
        let fo = (f.off as u16 & 0xfff8) | f.more as u16;
        buf[off] = protocol::UDP;
        buf[off + 1] = 0;
        buf[off + 2..off + 4].copy_from_slice(&fo.to_be_bytes());
        buf[off + 4..off + 8].copy_from_slice(&f.id.to_be_bytes());
    } else {
        let mut ip = ipv4::Packet::new_unchecked(&mut buf[off - ipv4::HEADER_LEN..off]);
        let mf = if f.more { 0x2000 } else { 0 };
        ip.set_flags_frag(((f.off / 8) as u16 & 0x1fff) | mf);
        ip.fill_checksum();
    }
    let mut hdr = [0u8; udp::HEADER_LEN];
    hdr[0..2].copy_from_slice(&spec.src_port.to_be_bytes());
    hdr[2..4].copy_from_slice(&spec.dst_port.to_be_bytes());
    hdr[4..6].copy_from_slice(&(l4 as u16).to_be_bytes());
    hdr[6..8].copy_from_slice(&f.csum.to_be_bytes());
    let out = &mut buf[off + fh..total];
    let (start, end) = (f.off, f.off + f.len);
    let mut at = 0;
    if start < udp::HEADER_LEN {
        let h = &hdr[start..end.min(udp::HEADER_LEN)];
        out[..h.len()].copy_from_slice(h);
        at = h.len();
    }
    let p = &payload[start.max(udp::HEADER_LEN) - udp::HEADER_LEN..end - udp::HEADER_LEN];
    out[at..at + p.len()].copy_from_slice(p);
    Ok(total)
}

/// Write a TCP frame into `buf`; `options` must be a multiple of 4 bytes.
/// Returns the frame length.
#[allow(clippy::too_many_arguments)]
pub fn write_tcp(
    buf: &mut [u8],
    spec: &Spec,
    seq: u32,
    ack: u32,
    flags: u16,
    options: &[u8],
    payload: &[u8],
) -> Result<usize, TooSmall> {
    write_tcp_summed(buf, spec, seq, ack, flags, options, payload, None)
}

/// [`write_tcp`] with the payload's ones'-complement sum
/// ([`checksum::sum`]) known in advance, so the checksum only reads the
/// header (a generator sending the same payload again and again).
#[allow(clippy::too_many_arguments)]
pub fn write_tcp_summed(
    buf: &mut [u8],
    spec: &Spec,
    seq: u32,
    ack: u32,
    flags: u16,
    options: &[u8],
    payload: &[u8],
    payload_sum: Option<u32>,
) -> Result<usize, TooSmall> {
    let hl = tcp::HEADER_LEN + options.len();
    let l4_len = hl + payload.len();
    let total = spec.l3_header_end() + l4_len;
    if buf.len() < total
        || !options.len().is_multiple_of(4)
        || hl > 60
        || l4_len > u16::MAX as usize - 40
    {
        return Err(TooSmall);
    }
    let off = write_l2_l3(buf, spec, protocol::TCP, l4_len);
    buf[off + tcp::HEADER_LEN..off + hl].copy_from_slice(options);
    buf[off + hl..total].copy_from_slice(payload);
    let mut t = tcp::Packet::new_unchecked(&mut buf[off..total]);
    t.set_src_port(spec.src_port);
    t.set_dst_port(spec.dst_port);
    t.set_seq(seq);
    t.set_ack(ack);
    t.set_header_len_flags(hl, flags);
    t.set_window(0xffff);
    t.set_checksum(0);
    t.set_urgent(0);
    let c = match payload_sum {
        // The header is a multiple of 4 bytes, so the payload's words line
        // up with the segment's and its sum can be added as is.
        Some(ps) => {
            let s = checksum::pseudo_header(spec.src, spec.dst, protocol::TCP, l4_len as u32)
                as u64
                + checksum::sum(&buf[off..off + hl]) as u64
                + ps as u64;
            !checksum::fold((s & 0xffff_ffff) as u32 + (s >> 32) as u32)
        }
        None => checksum::l4(spec.src, spec.dst, protocol::TCP, &buf[off..total]),
    };
    tcp::Packet::new_unchecked(&mut buf[off..total]).set_checksum(c);
    Ok(total)
}

/// A new UDP frame.
pub fn udp(spec: &Spec, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0; spec.l3_header_end() + udp::HEADER_LEN + payload.len()];
    let n = write_udp(&mut v, spec, payload).expect("sized above");
    v.truncate(n);
    v
}

/// A new TCP frame.
pub fn tcp(spec: &Spec, seq: u32, ack: u32, flags: u16, options: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0; spec.l3_header_end() + tcp::HEADER_LEN + options.len() + payload.len()];
    let n = write_tcp(&mut v, spec, seq, ack, flags, options, payload).expect("sized above");
    v.truncate(n);
    v
}

/// Split an untagged IPv4 or IPv6 frame (no IPv4 options, no IPv6
/// extension headers) into IP fragments carrying `pieces` of its IP
/// payload, each `(offset, length)` (offsets a multiple of 8; bytes past
/// the payload are 0xa5): MF is set on each piece that stops short of the
/// payload's end or the furthest piece's, whichever is further. IPv4 fragments take
/// the low 16 bits of `id` as their identification (DF cleared); IPv6
/// fragments a fragment header with `id`. Pieces may overlap, repeat or
/// run past the end, to make any corpus.
pub fn fragments(frame: &[u8], pieces: &[(usize, usize)], id: u32) -> Vec<Vec<u8>> {
    let v6 = frame.get(12..14) == Some(&[0x86, 0xdd][..]);
    let hdr = if v6 { 40 } else { 20 };
    let Some(payload) = frame.get(ethernet::HEADER_LEN + hdr..) else {
        return Vec::new();
    };
    let head = &frame[..ethernet::HEADER_LEN + hdr];
    let end = pieces
        .iter()
        .map(|p| p.0 + p.1)
        .fold(payload.len(), usize::max);
    let mut out = Vec::with_capacity(pieces.len());
    for &(off, len) in pieces {
        let mut data = payload
            .get(off.min(payload.len())..)
            .unwrap_or(&[])
            .to_vec();
        data.resize(len, 0xa5);
        let more = off + len < end;
        let mut f = head.to_vec();
        let l3 = ethernet::HEADER_LEN;
        if v6 {
            let nh = f[l3 + 6];
            f[l3 + 6] = 44;
            f[l3 + 4..l3 + 6].copy_from_slice(&((8 + len) as u16).to_be_bytes());
            let fo = (off as u16 & 0xfff8) | more as u16;
            f.extend_from_slice(&[nh, 0]);
            f.extend_from_slice(&fo.to_be_bytes());
            f.extend_from_slice(&id.to_be_bytes());
        } else {
            let mut ip = ipv4::Packet::new_unchecked(&mut f[l3..]);
            ip.set_total_len((20 + len) as u16);
            ip.set_ident(id as u16);
            ip.set_flags_frag(((off / 8) as u16 & 0x1fff) | if more { 0x2000 } else { 0 });
            ip.fill_checksum();
        }
        f.extend_from_slice(&data);
        out.push(f);
    }
    out
}

/// The pieces the kernel cuts an IP payload of `len` bytes into for a
/// link of `mtu` (`ip_fragment`/`ip6_fragment`: each but the last the
/// largest multiple of 8 that fits beside the IPv4 header, or the IPv6
/// and fragment headers).
pub fn mtu_pieces(len: usize, mtu: usize, v6: bool) -> Vec<(usize, usize)> {
    let room = (mtu - if v6 { 48 } else { 20 }) & !7;
    (0..len)
        .step_by(room.max(8))
        .map(|o| (o, room.min(len - o)))
        .collect()
}

#[cfg(test)]
mod tests {

    #[test]
    fn fragments_written_put_the_datagram_back_together() {
        use super::*;
        for (src, dst) in [("198.18.0.2", "198.18.0.1"), ("2001:2::2", "2001:2::1")] {
            let spec = Spec::new(src.parse().unwrap(), dst.parse().unwrap(), 5000, 53);
            let payload: Vec<u8> = (0..4000u32).map(|i| (i * 13) as u8).collect();
            let whole = udp(&spec, &payload);
            let v6 = spec.src.is_ipv6();
            let hdr = spec.l3_header_end();
            let pieces = udp_fragments(&spec, &payload, 1500, 7);
            assert_eq!(pieces.len(), 3);
            let mut l4 = Vec::new();
            for f in &pieces {
                let mut buf = [0u8; 2048];
                let n = write_udp_fragment(&mut buf, &spec, &payload, *f).unwrap();
                assert!(n <= 1514, "{n}");
                l4.extend_from_slice(&buf[hdr + if v6 { 8 } else { 0 }..n]);
            }
            assert_eq!(l4, whole[hdr..], "the pieces are the datagram");
        }
    }

    #[test]
    fn tcp_with_a_known_payload_sum_is_the_same_frame() {
        let spec = Spec::new(
            "198.18.0.2".parse().unwrap(),
            "198.18.0.1".parse().unwrap(),
            5000,
            80,
        );
        let payload: Vec<u8> = (0..1449u32).map(|i| (i * 7 + 3) as u8).collect();
        let opts = [1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 4];
        for n in [0usize, 1, 2, 1447, 1448, 1449] {
            let p = &payload[..n];
            let (mut a, mut b) = ([0u8; 2048], [0u8; 2048]);
            let la = write_tcp(&mut a, &spec, 7, 9, 0x18, &opts, p).unwrap();
            let lb = write_tcp_summed(&mut b, &spec, 7, 9, 0x18, &opts, p, Some(checksum::sum(p)))
                .unwrap();
            assert_eq!(&a[..la], &b[..lb], "payload of {n} bytes");
        }
    }
    use super::*;

    #[test]
    fn checksums_verify() {
        for (s, d) in [("198.18.0.1", "198.18.0.2"), ("2001:2::1", "2001:2::2")] {
            let spec = Spec::new(s.parse().unwrap(), d.parse().unwrap(), 1, 2);
            let f = udp(&spec, b"abc");
            let h = crate::parse(&f).unwrap();
            let l4 = &f[h.l4_offset as usize..];
            assert_eq!(checksum::l4(spec.src, spec.dst, 17, l4), 0, "udp {s}");
            let f = tcp(&spec, 1, 2, tcp::flags::ACK, &[1, 1, 1, 1], b"abcd");
            let h = crate::parse(&f).unwrap();
            let l4 = &f[h.l4_offset as usize..];
            assert_eq!(checksum::l4(spec.src, spec.dst, 6, l4), 0, "tcp {s}");
            if !spec.src.is_ipv6() {
                let ip = ipv4::Packet::new_checked(&f[14..]).unwrap();
                assert!(ip.verify_checksum());
            }
        }
    }

    #[test]
    fn too_small_buffer_is_an_error() {
        let spec = Spec::new(
            "198.18.0.1".parse().unwrap(),
            "198.18.0.2".parse().unwrap(),
            1,
            2,
        );
        let mut buf = [0u8; 40];
        assert_eq!(write_udp(&mut buf, &spec, &[0; 10]), Err(TooSmall));
        assert_eq!(
            write_tcp(&mut buf, &spec, 0, 0, 0, &[1, 1, 1], &[]),
            Err(TooSmall)
        );
    }
}
