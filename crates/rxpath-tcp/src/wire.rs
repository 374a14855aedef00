//! Segments in and out: an IP packet carrying TCP parsed into a
//! [`SegIn`], and a [`SegOut`] written as an IP packet with its options
//! laid out as `tcp_options_write` lays them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use rxpath_wire::tcp::{flags, Packet, TcpOption};
use rxpath_wire::{checksum, ipv4, ipv6};

/// The options a segment carried that TCP acts on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OptsIn {
    /// MSS option (SYN only).
    pub mss: Option<u16>,
    /// Window-scale shift (SYN only).
    pub wscale: Option<u8>,
    /// SACK permitted (SYN only).
    pub sack_ok: bool,
    /// Timestamps: value and echo reply.
    pub ts: Option<(u32, u32)>,
    /// SACK blocks, as sent (start, end); at most four.
    pub sacks: Vec<(u32, u32)>,
    /// A Fast Open option (RFC 7413, kind 34) of a valid length: a
    /// cookie, or empty (a cookie request). One of another length counts
    /// as absent, as `tcp_parse_fastopen_option` has it.
    pub fastopen: Option<FoCookie>,
}

/// A TCP Fast Open cookie: 4 to 16 bytes, an even number
/// (`TCP_FASTOPEN_COOKIE_MIN`/`MAX`), or none at all; and the option it
/// travels in (`exp`: the experimental one, kind 254 with magic 0xF989,
/// which clients used before RFC 7413).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FoCookie {
    len: u8,
    val: [u8; 16],
    /// Carried in the experimental option (`tcp_fastopen_cookie.exp`).
    pub exp: bool,
}

/// The experimental option's kind (`TCPOPT_EXP`).
const TCPOPT_EXP: u8 = 254;
/// The experimental option's magic for Fast Open (`TCPOPT_FASTOPEN_MAGIC`).
const TCPOPT_FASTOPEN_MAGIC: [u8; 2] = [0xF9, 0x89];

impl FoCookie {
    /// The cookie `b`, when its length is one a cookie may have (zero
    /// included).
    pub fn new(b: &[u8]) -> Option<FoCookie> {
        if !b.is_empty() && (b.len() < 4 || b.len() > 16 || b.len() % 2 == 1) {
            return None;
        }
        let mut val = [0; 16];
        val[..b.len()].copy_from_slice(b);
        Some(FoCookie {
            len: b.len() as u8,
            val,
            exp: false,
        })
    }

    /// The same cookie in the option `exp` says.
    pub fn with_exp(self, exp: bool) -> FoCookie {
        FoCookie { exp, ..self }
    }

    /// The same bytes (`tcp_fastopen_cookie_match`: the option it came in
    /// does not count).
    pub fn same_bytes(&self, o: &FoCookie) -> bool {
        self.bytes() == o.bytes()
    }

    /// Its bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.val[..self.len as usize]
    }

    /// No bytes: in a SYN, a cookie request.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// An incoming segment.
#[derive(Debug, Clone)]
pub struct SegIn<'a> {
    /// The sender.
    pub src: SocketAddr,
    /// This host.
    pub dst: SocketAddr,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number (meaningful with ACK).
    pub ack: u32,
    /// Flag bits ([`rxpath_wire::tcp::flags`]).
    pub flags: u16,
    /// The window field, unscaled.
    pub wnd: u16,
    /// Options.
    pub opts: OptsIn,
    /// Data.
    pub payload: &'a [u8],
    /// The TCP header's length, options included (`doff * 4`).
    pub hdr_len: u8,
    /// The IP header's ECN field (`INET_ECN_*`: 0 Not-ECT, 1 ECT(1),
    /// 2 ECT(0), 3 CE).
    pub ecn: u8,
}

impl SegIn<'_> {
    /// Whether a flag is set.
    pub fn has(&self, f: u16) -> bool {
        self.flags & f != 0
    }
    /// Sequence space the segment occupies (data, SYN and FIN).
    pub fn seq_len(&self) -> u32 {
        self.payload.len() as u32 + self.has(flags::SYN) as u32 + self.has(flags::FIN) as u32
    }
    /// `end_seq` as the kernel's control block has it.
    pub fn end_seq(&self) -> u32 {
        self.seq.wrapping_add(self.seq_len())
    }
}

/// Why a packet was not taken as a segment (each a counter in the MIB).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadSegment {
    /// Not IPv4/IPv6 carrying TCP, or a header that runs past the packet
    /// (`InErrs`).
    Malformed,
    /// The TCP checksum is wrong (`InCsumErrors`).
    Checksum,
    /// A fragment: reassembly is the IP stage's (`ip_defrag`), not TCP's.
    Fragment,
}

/// Parse an IP packet (the IP header first) as a TCP segment, checking the
/// TCP checksum.
pub fn parse(pkt: &[u8]) -> Result<SegIn<'_>, BadSegment> {
    parse_checked(pkt, false)
}

/// [`parse`], the checksum not summed again when the receive path
/// already trusted it (`verified`: the device's or GRO's status,
/// `CHECKSUM_UNNECESSARY` in the kernel).
pub fn parse_checked(pkt: &[u8], verified: bool) -> Result<SegIn<'_>, BadSegment> {
    let (src, dst, l4): (IpAddr, IpAddr, &[u8]) = match pkt.first().map(|b| b >> 4) {
        Some(4) => {
            let ip = ipv4::Packet::new_checked(pkt).map_err(|_| BadSegment::Malformed)?;
            if ip.protocol() != 6 {
                return Err(BadSegment::Malformed);
            }
            if ip.is_fragment() {
                return Err(BadSegment::Fragment);
            }
            let (s, d) = (ip.src(), ip.dst());
            let end = (ip.total_len() as usize).min(pkt.len());
            (s.into(), d.into(), &pkt[ip.header_len()..end])
        }
        Some(6) => {
            let ip = ipv6::Packet::new_checked(pkt).map_err(|_| BadSegment::Malformed)?;
            if ip.next_header() != 6 {
                return Err(BadSegment::Malformed);
            }
            let end = (ipv6::HEADER_LEN + ip.payload_len() as usize).min(pkt.len());
            (
                ip.src().into(),
                ip.dst().into(),
                &pkt[ipv6::HEADER_LEN..end],
            )
        }
        _ => return Err(BadSegment::Malformed),
    };
    let tcp = Packet::new_checked(l4).map_err(|_| BadSegment::Malformed)?;
    if !verified && checksum::l4(src, dst, 6, l4) != 0 {
        return Err(BadSegment::Checksum);
    }
    let mut opts = OptsIn::default();
    for o in tcp.options() {
        match o.map_err(|_| BadSegment::Malformed)? {
            TcpOption::Mss(m) => opts.mss = Some(m),
            TcpOption::WindowScale(w) => opts.wscale = Some(w),
            TcpOption::SackPermitted => opts.sack_ok = true,
            TcpOption::Timestamps(v, e) => opts.ts = Some((v, e)),
            TcpOption::Other(5, data) => {
                opts.sacks = data
                    .chunks_exact(8)
                    .take(4)
                    .map(|c| {
                        (
                            u32::from_be_bytes([c[0], c[1], c[2], c[3]]),
                            u32::from_be_bytes([c[4], c[5], c[6], c[7]]),
                        )
                    })
                    .collect();
            }
            // `tcp_parse_fastopen_option`: an odd length leaves what an
            // earlier option said; another wrong length says no cookie.
            TcpOption::Other(34, data) if data.len() % 2 == 0 => {
                opts.fastopen = FoCookie::new(data);
            }
            TcpOption::Other(TCPOPT_EXP, data)
                if data.starts_with(&TCPOPT_FASTOPEN_MAGIC) && data.len() % 2 == 0 =>
            {
                opts.fastopen = FoCookie::new(&data[2..]).map(|c| c.with_exp(true));
            }
            _ => {}
        }
    }
    let (seq, ack, fl, wnd) = (tcp.seq(), tcp.ack(), tcp.flags(), tcp.window());
    let (sport, dport) = (tcp.src_port(), tcp.dst_port());
    let hl = tcp.header_len();
    Ok(SegIn {
        src: SocketAddr::new(src, sport),
        dst: SocketAddr::new(dst, dport),
        seq,
        ack,
        flags: fl & 0x1ff,
        wnd,
        opts,
        payload: &l4[hl..],
        hdr_len: hl as u8,
        ecn: ip_ecn(pkt),
    })
}

/// The ECN field of IP packet `pkt` (its version checked by the caller):
/// IPv4's TOS or IPv6's traffic class, low two bits.
fn ip_ecn(pkt: &[u8]) -> u8 {
    match pkt.first().map(|b| b >> 4) {
        Some(4) => pkt.get(1).map_or(0, |t| t & 3),
        _ => pkt.get(1).map_or(0, |t| (t >> 4) & 3),
    }
}

/// Options to write, in `tcp_options_write`'s layout.
#[derive(Debug, Clone, Default)]
pub struct OptsOut {
    /// MSS (SYN, SYN-ACK).
    pub mss: Option<u16>,
    /// SACK permitted (SYN, SYN-ACK).
    pub sack_ok: bool,
    /// Timestamps (value, echo reply).
    pub ts: Option<(u32, u32)>,
    /// Window-scale shift (SYN, SYN-ACK).
    pub wscale: Option<u8>,
    /// SACK blocks (D-SACK first).
    pub sacks: Vec<(u32, u32)>,
    /// A Fast Open option: the cookie, or empty to ask for one.
    pub fastopen: Option<FoCookie>,
}

impl OptsOut {
    /// The options area, padded to whole words, exactly as the kernel lays
    /// it out: MSS; then SACK-permitted packed before the timestamps, or
    /// two NOPs before either alone; NOP and window scale; NOP NOP and the
    /// SACK blocks; the Fast Open option, two NOPs after it when its
    /// length leaves half a word.
    pub fn write(&self, out: &mut Vec<u8>) {
        if let Some(m) = self.mss {
            out.extend_from_slice(&[2, 4]);
            out.extend_from_slice(&m.to_be_bytes());
        }
        match (self.ts, self.sack_ok) {
            (Some((v, e)), sack) => {
                if sack {
                    out.extend_from_slice(&[4, 2, 8, 10]);
                } else {
                    out.extend_from_slice(&[1, 1, 8, 10]);
                }
                out.extend_from_slice(&v.to_be_bytes());
                out.extend_from_slice(&e.to_be_bytes());
            }
            (None, true) => out.extend_from_slice(&[1, 1, 4, 2]),
            (None, false) => {}
        }
        if let Some(w) = self.wscale {
            out.extend_from_slice(&[1, 3, 3, w]);
        }
        if !self.sacks.is_empty() {
            out.extend_from_slice(&[1, 1, 5, 2 + 8 * self.sacks.len() as u8]);
            for (s, e) in &self.sacks {
                out.extend_from_slice(&s.to_be_bytes());
                out.extend_from_slice(&e.to_be_bytes());
            }
        }
        if let Some(c) = &self.fastopen {
            let len = if c.exp {
                out.extend_from_slice(&[TCPOPT_EXP, 4 + c.len]);
                out.extend_from_slice(&TCPOPT_FASTOPEN_MAGIC);
                4 + c.len
            } else {
                out.extend_from_slice(&[34, 2 + c.len]);
                2 + c.len
            };
            out.extend_from_slice(c.bytes());
            if len & 3 == 2 {
                out.extend_from_slice(&[1, 1]);
            }
        }
    }
}

/// A segment to send.
#[derive(Debug, Clone)]
pub struct SegOut<'a> {
    /// This host.
    pub src: SocketAddr,
    /// The peer.
    pub dst: SocketAddr,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number (sent as 0 without ACK).
    pub ack: u32,
    /// Flag bits.
    pub flags: u16,
    /// The window field, already scaled down.
    pub wnd: u16,
    /// Options.
    pub opts: OptsOut,
    /// Data.
    pub payload: &'a [u8],
    /// The IPv4 identification field.
    pub ip_id: u16,
    /// The IPv4 TOS byte, or the IPv6 traffic class (`IP_TOS`).
    pub tos: u8,
}

/// Write `seg` as an IP packet: IPv4 with DF and TTL 64, or IPv6 with hop
/// limit 64 (an IPv4-mapped pair of addresses leaves as IPv4).
pub fn build(seg: &SegOut<'_>) -> Vec<u8> {
    build_with_tail(seg, &[])
}

/// [`build`] with `tail` after `seg.payload` (a send queue's data in two
/// pieces, as a ring holds it): the packet is written once, into one
/// buffer.
pub fn build_with_tail(seg: &SegOut<'_>, tail: &[u8]) -> Vec<u8> {
    let v4 = match (seg.src.ip(), seg.dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Some((s, d)),
        (s, d) => match (mapped(s), mapped(d)) {
            (Some(s), Some(d)) => Some((s, d)),
            _ => None,
        },
    };
    let l4 = if v4.is_some() { 20 } else { 40 };
    let data = seg.payload.len() + tail.len();
    let mut pkt = Vec::with_capacity(l4 + 60 + data);
    pkt.resize(l4, 0);
    pkt.extend_from_slice(&seg.src.port().to_be_bytes());
    pkt.extend_from_slice(&seg.dst.port().to_be_bytes());
    pkt.extend_from_slice(&seg.seq.to_be_bytes());
    let ack = if seg.flags & flags::ACK != 0 {
        seg.ack
    } else {
        0
    };
    pkt.extend_from_slice(&ack.to_be_bytes());
    pkt.extend_from_slice(&[0, 0]);
    pkt.extend_from_slice(&seg.wnd.to_be_bytes());
    pkt.extend_from_slice(&[0, 0, 0, 0]);
    seg.opts.write(&mut pkt);
    let hl = pkt.len() - l4;
    pkt[l4 + 12..l4 + 14].copy_from_slice(&((((hl / 4) as u16) << 12) | seg.flags).to_be_bytes());
    pkt.extend_from_slice(seg.payload);
    pkt.extend_from_slice(tail);
    let tcp_len = pkt.len() - l4;
    let (src, dst): (IpAddr, IpAddr) = match v4 {
        Some((s, d)) => {
            let mut h = [0u8; 20];
            h[..2].copy_from_slice(&[0x45, seg.tos]);
            h[2..4].copy_from_slice(&((20 + tcp_len) as u16).to_be_bytes());
            h[4..6].copy_from_slice(&seg.ip_id.to_be_bytes());
            h[6..12].copy_from_slice(&[0x40, 0, 64, 6, 0, 0]);
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            let c = !checksum::fold(checksum::sum(&h));
            h[10..12].copy_from_slice(&c.to_be_bytes());
            pkt[..20].copy_from_slice(&h);
            (s.into(), d.into())
        }
        None => {
            let (s, d) = (v6(seg.src.ip()), v6(seg.dst.ip()));
            let mut h = [0u8; 40];
            h[..4].copy_from_slice(&[0x60 | (seg.tos >> 4), (seg.tos & 0xf) << 4, 0, 0]);
            h[4..6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
            h[6..8].copy_from_slice(&[6, 64]);
            h[8..24].copy_from_slice(&s.octets());
            h[24..40].copy_from_slice(&d.octets());
            pkt[..40].copy_from_slice(&h);
            (s.into(), d.into())
        }
    };
    let c = checksum::l4(src, dst, 6, &pkt[l4..]);
    pkt[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
    pkt
}

/// Cut a TCP packet carrying more than `mss` bytes into packets of `mss`
/// bytes, as the kernel's GSO (`tcp_gso_segment`) or a device's TSO does:
/// the headers repeated, sequence numbers advanced, PSH and FIN only on the
/// last, IPv4 identifications counting up, lengths and checksums
/// rewritten. A packet that is not such a packet comes back whole.
pub fn segment(pkt: &[u8], mss: usize) -> Vec<Vec<u8>> {
    (0..segment_count(pkt, mss))
        .map(|i| {
            let mut p = vec![0; pkt.len()];
            let n = write_segment(pkt, mss, i, &mut p).unwrap_or(0);
            p.truncate(n);
            p
        })
        .collect()
}

/// How many packets [`segment`] cuts `pkt` into (1 for one it leaves
/// whole).
pub fn segment_count(pkt: &[u8], mss: usize) -> usize {
    match tso_layout(pkt, mss) {
        Some((_, l4_off, th)) => (pkt.len() - l4_off - th).div_ceil(mss),
        None => 1,
    }
}

/// Write the `i`th packet [`segment`] cuts `pkt` into at the start of
/// `out` (the packet whole, for one it leaves whole): its length, or
/// `None` if `out` is too short or there is no `i`th.
pub fn write_segment(pkt: &[u8], mss: usize, i: usize, out: &mut [u8]) -> Option<usize> {
    let Some(((src, dst), l4_off, th)) = tso_layout(pkt, mss) else {
        let p = out.get_mut(..pkt.len()).filter(|_| i == 0)?;
        p.copy_from_slice(pkt);
        return Some(pkt.len());
    };
    let payload = &pkt[l4_off + th..];
    let chunk = payload.chunks(mss).nth(i)?;
    let last = i == payload.len().div_ceil(mss) - 1;
    let len = l4_off + th + chunk.len();
    let p = out.get_mut(..len)?;
    p[..l4_off + th].copy_from_slice(&pkt[..l4_off + th]);
    p[l4_off + th..].copy_from_slice(chunk);
    let seq0 = u32::from_be_bytes([
        pkt[l4_off + 4],
        pkt[l4_off + 5],
        pkt[l4_off + 6],
        pkt[l4_off + 7],
    ]);
    let seq = seq0.wrapping_add((i * mss) as u32);
    p[l4_off + 4..l4_off + 8].copy_from_slice(&seq.to_be_bytes());
    // PSH and FIN on the last piece only, CWR on the first only
    // (`tcp_gso_segment`, `SKB_GSO_TCP_ECN`).
    let mut clear = 0;
    if !last {
        clear |= flags::PSH | flags::FIN;
    }
    if i != 0 {
        clear |= flags::CWR;
    }
    let fl = u16::from_be_bytes([p[l4_off + 12], p[l4_off + 13]]) & !clear;
    p[l4_off + 12..l4_off + 14].copy_from_slice(&fl.to_be_bytes());
    if l4_off == 20 && pkt[0] >> 4 == 4 {
        let total = len as u16;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        let id = u16::from_be_bytes([pkt[4], pkt[5]]).wrapping_add(i as u16);
        p[4..6].copy_from_slice(&id.to_be_bytes());
        p[10..12].copy_from_slice(&[0, 0]);
        let c = !checksum::fold(checksum::sum(&p[..20]));
        p[10..12].copy_from_slice(&c.to_be_bytes());
    } else {
        let plen = (len - ipv6::HEADER_LEN) as u16;
        p[4..6].copy_from_slice(&plen.to_be_bytes());
    }
    p[l4_off + 16..l4_off + 18].copy_from_slice(&[0, 0]);
    let c = checksum::l4(src, dst, 6, &p[l4_off..]);
    p[l4_off + 16..l4_off + 18].copy_from_slice(&c.to_be_bytes());
    Some(len)
}

/// Make a packet [`segment`] would cut ready for a device's TSO or the
/// kernel's software GSO to cut instead: its TCP checksum becomes the
/// pseudo-header sum of the whole (not complemented), as the kernel's own
/// `CHECKSUM_PARTIAL` TSO packets carry. Returns the IP and TCP headers'
/// length, whether it is IPv6, and whether CWR is set (kept on the first
/// segment only); `None` (the packet untouched) for one [`segment`]
/// leaves whole.
pub fn gso_prepare(pkt: &mut [u8], mss: usize) -> Option<(usize, bool, bool)> {
    let ((src, dst), l4_off, th) = tso_layout(pkt, mss)?;
    let sum = checksum::pseudo_header(src, dst, 6, (pkt.len() - l4_off) as u32);
    pkt[l4_off + 16..l4_off + 18].copy_from_slice(&checksum::fold(sum).to_be_bytes());
    let cwr = u16::from(pkt[l4_off + 13]) & flags::CWR != 0;
    Some((l4_off + th, src.is_ipv6(), cwr))
}

/// A packet [`segment`] cuts: its addresses, TCP header offset and TCP
/// header length (`None`: one it leaves whole).
fn tso_layout(pkt: &[u8], mss: usize) -> Option<((IpAddr, IpAddr), usize, usize)> {
    let (l3, l4_off) = headers(pkt)?;
    let th = Packet::new_checked(&pkt[l4_off..]).ok()?.header_len();
    let payload = pkt.len().checked_sub(l4_off + th)?;
    (mss > 0 && payload > mss).then_some((l3, l4_off, th))
}

/// The addresses and the TCP header's offset of an IPv4 (without
/// options) or IPv6 packet this module built.
fn headers(pkt: &[u8]) -> Option<((IpAddr, IpAddr), usize)> {
    match pkt.first()? >> 4 {
        4 => {
            let ip = ipv4::Packet::new_checked(pkt).ok()?;
            (ip.protocol() == 6).then(|| ((ip.src().into(), ip.dst().into()), ip.header_len()))
        }
        6 => {
            let ip = ipv6::Packet::new_checked(pkt).ok()?;
            (ip.next_header() == 6).then(|| ((ip.src().into(), ip.dst().into()), ipv6::HEADER_LEN))
        }
        _ => None,
    }
}

fn mapped(a: IpAddr) -> Option<Ipv4Addr> {
    match a {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(a) => a.to_ipv4_mapped(),
    }
}

fn v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_segment_parses_back_with_its_options() {
        let seg = SegOut {
            src: "198.18.0.1:80".parse().unwrap(),
            dst: "198.18.0.2:4000".parse().unwrap(),
            seq: 7,
            ack: 9,
            flags: flags::SYN | flags::ACK,
            wnd: 65535,
            opts: OptsOut {
                mss: Some(1460),
                sack_ok: true,
                ts: Some((100, 5)),
                wscale: Some(8),
                sacks: vec![],
                fastopen: FoCookie::new(&[1, 2, 3, 4, 5, 6, 7, 8]),
            },
            payload: b"",
            ip_id: 0,
            tos: 0,
        };
        let pkt = build(&seg);
        // mss, sackOK+TS packed, nop wscale, a Fast Open cookie of 8
        // bytes with two NOPs: 4 + 12 + 4 + 12 option bytes.
        assert_eq!(pkt.len(), 20 + 20 + 32);
        let p = parse(&pkt).unwrap();
        assert_eq!((p.seq, p.ack, p.wnd), (7, 9, 65535));
        assert_eq!(p.opts.mss, Some(1460));
        assert_eq!(p.opts.wscale, Some(8));
        assert!(p.opts.sack_ok);
        assert_eq!(p.opts.ts, Some((100, 5)));
        assert_eq!(p.opts.fastopen, FoCookie::new(&[1, 2, 3, 4, 5, 6, 7, 8]));
        assert_eq!(segment(&pkt, 1000), vec![pkt.clone()]);
        let mut bad = pkt.clone();
        bad[45] ^= 1;
        assert_eq!(parse(&bad).unwrap_err(), BadSegment::Checksum);
        assert_eq!(parse(&pkt[..30]).unwrap_err(), BadSegment::Malformed);
    }

    #[test]
    fn the_experimental_fast_open_option_is_written_and_read_as_the_kernels() {
        let opts = |c: Option<FoCookie>| OptsOut {
            fastopen: c,
            ..OptsOut::default()
        };
        let mut out = Vec::new();
        // A request: kind 254, length 4, the magic; no padding.
        opts(Some(FoCookie::default().with_exp(true))).write(&mut out);
        assert_eq!(out, [254, 4, 0xF9, 0x89]);
        out.clear();
        let c = FoCookie::new(&[0x12, 0x34, 0xab, 0xcd])
            .unwrap()
            .with_exp(true);
        opts(Some(c)).write(&mut out);
        assert_eq!(out, [254, 8, 0xF9, 0x89, 0x12, 0x34, 0xab, 0xcd]);
        let seg = SegOut {
            src: "198.18.0.2:4000".parse().unwrap(),
            dst: "198.18.0.1:80".parse().unwrap(),
            seq: 1,
            ack: 0,
            flags: flags::SYN,
            wnd: 65535,
            opts: opts(Some(c)),
            payload: b"",
            ip_id: 0,
            tos: 0,
        };
        let pkt = build(&seg);
        let p = parse(&pkt).unwrap();
        assert_eq!(p.opts.fastopen, Some(c));
        assert!(p.opts.fastopen.unwrap().exp);
        // The same bytes in the RFC's option match (the option is not
        // part of the cookie), but they are not the same option.
        let rfc = FoCookie::new(&[0x12, 0x34, 0xab, 0xcd]).unwrap();
        assert!(c.same_bytes(&rfc));
        assert_ne!(c, rfc);
    }
}

#[cfg(test)]
mod segment_tests {
    use super::*;

    #[test]
    fn a_tso_packet_is_cut_as_the_kernel_cuts_it() {
        let data: Vec<u8> = (0..2500u32).map(|i| i as u8).collect();
        let seg = SegOut {
            src: "198.18.0.1:80".parse().unwrap(),
            dst: "198.18.0.2:4000".parse().unwrap(),
            seq: 1000,
            ack: 1,
            flags: flags::ACK | flags::PSH | flags::FIN,
            wnd: 100,
            opts: OptsOut {
                ts: Some((5, 6)),
                ..OptsOut::default()
            },
            payload: &data,
            ip_id: 7,
            tos: 0,
        };
        let parts = segment(&build(&seg), 1000);
        assert_eq!(parts.len(), 3);
        let mut joined = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            let s = parse(p).expect("each part checks out, checksums included");
            assert_eq!(s.seq, 1000 + 1000 * i as u32);
            let last = i == 2;
            assert_eq!(s.has(flags::PSH), last);
            assert_eq!(s.has(flags::FIN), last);
            assert_eq!(s.opts.ts, Some((5, 6)));
            assert_eq!(u16::from_be_bytes([p[4], p[5]]), 7 + i as u16);
            joined.extend_from_slice(s.payload);
        }
        assert_eq!(joined, data);
        // One piece at a time, in place: the same bytes; a buffer too
        // short for a piece, or a piece past the last, writes nothing.
        let pkt = build(&seg);
        assert_eq!(segment_count(&pkt, 1000), 3);
        let mut buf = [0u8; 2048];
        for (i, p) in parts.iter().enumerate() {
            assert_eq!(write_segment(&pkt, 1000, i, &mut buf), Some(p.len()));
            assert_eq!(&buf[..p.len()], &p[..]);
        }
        assert_eq!(write_segment(&pkt, 1000, 3, &mut buf), None);
        assert_eq!(write_segment(&pkt, 1000, 0, &mut buf[..500]), None);
        assert_eq!(segment_count(&pkt, 0), 1);
        assert_eq!(write_segment(&pkt, 0, 0, &mut buf[..100]), None);
        // The payload in two pieces makes the same packet.
        let (a, b) = data.split_at(900);
        assert_eq!(build_with_tail(&SegOut { payload: a, ..seg }, b), pkt);
    }
}
