//! ICMP and ICMPv6 error messages, as `icmp_rcv()` / `icmpv6_rcv()` take
//! them apart before handing one to the transport it quotes
//! (`icmp_unreach()` → `err_handler`, `icmpv6_notify()`): the type, code
//! and the 32-bit word after them (the next-hop MTU of "fragmentation
//! needed" and "packet too big"), and the quoted packet's addresses,
//! protocol and first transport bytes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::{checksum, ipv4, ipv6};

/// ICMP type "destination unreachable".
pub const ICMP_DEST_UNREACH: u8 = 3;
/// ICMP type "source quench".
pub const ICMP_SOURCE_QUENCH: u8 = 4;
/// ICMP type "redirect".
pub const ICMP_REDIRECT: u8 = 5;
/// ICMP type "time exceeded".
pub const ICMP_TIME_EXCEEDED: u8 = 11;
/// ICMP type "parameter problem".
pub const ICMP_PARAMETERPROB: u8 = 12;
/// ICMP "destination unreachable" code "fragmentation needed and DF set".
pub const ICMP_FRAG_NEEDED: u8 = 4;
/// ICMPv6 type "destination unreachable".
pub const ICMPV6_DEST_UNREACH: u8 = 1;
/// ICMPv6 type "packet too big".
pub const ICMPV6_PKT_TOOBIG: u8 = 2;
/// ICMPv6 type "time exceeded".
pub const ICMPV6_TIME_EXCEED: u8 = 3;
/// ICMPv6 type "parameter problem".
pub const ICMPV6_PARAMPROB: u8 = 4;

/// An ICMP or ICMPv6 error message about a packet this host sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Error<'a> {
    /// ICMPv6 (else ICMP).
    pub v6: bool,
    /// Who sent the error.
    pub from: IpAddr,
    /// The message's type.
    pub typ: u8,
    /// The message's code.
    pub code: u8,
    /// The word after the checksum, in host order: for "fragmentation
    /// needed" the next-hop MTU (its low 16 bits, `icmph->un.frag.mtu`),
    /// for "packet too big" the MTU, for a parameter problem the pointer.
    pub info: u32,
    /// The quoted packet's source: this host's address.
    pub src: IpAddr,
    /// The quoted packet's destination.
    pub dst: IpAddr,
    /// The quoted packet's transport protocol.
    pub proto: u8,
    /// The quoted transport header: at least its first 8 bytes.
    pub l4: &'a [u8],
}

/// Why a packet is not an ICMP error this host hands to a transport,
/// each counted as `icmp_rcv()` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bad {
    /// Not IPv4 carrying ICMP nor IPv6 carrying ICMPv6, or cut short
    /// (`InErrors`).
    Malformed,
    /// The ICMP checksum is wrong (`InCsumErrors`, `InErrors`).
    Checksum,
    /// An informational message (echo, ...): none of a transport's
    /// business.
    NotError,
    /// An error whose quoted packet is cut before its first 8 transport
    /// bytes, or is a later fragment (`InErrors`).
    ShortQuote,
}

/// Parse an IP packet (its IP header first) as an ICMP or ICMPv6 error,
/// checking the ICMP checksum.
pub fn parse_error(pkt: &[u8]) -> Result<Error<'_>, Bad> {
    match pkt.first().map(|b| b >> 4) {
        Some(4) => parse_v4(pkt),
        Some(6) => parse_v6(pkt),
        _ => Err(Bad::Malformed),
    }
}

fn parse_v4(pkt: &[u8]) -> Result<Error<'_>, Bad> {
    let ip = ipv4::Packet::new_checked(pkt).map_err(|_| Bad::Malformed)?;
    if ip.protocol() != ipv4::protocol::ICMP || ip.is_fragment() {
        return Err(Bad::Malformed);
    }
    let end = (ip.total_len() as usize).min(pkt.len());
    let msg = &pkt[ip.header_len()..end];
    if msg.len() < 8 {
        return Err(Bad::Malformed);
    }
    if checksum::fold(checksum::sum(msg)) != 0xffff {
        return Err(Bad::Checksum);
    }
    let (typ, code) = (msg[0], msg[1]);
    if !matches!(
        typ,
        ICMP_DEST_UNREACH
            | ICMP_SOURCE_QUENCH
            | ICMP_REDIRECT
            | ICMP_TIME_EXCEEDED
            | ICMP_PARAMETERPROB
    ) {
        return Err(Bad::NotError);
    }
    let info = match (typ, code) {
        // `icmph->un.frag.mtu`: the low half of the word.
        (ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED) => u16::from_be_bytes([msg[6], msg[7]]) as u32,
        // The pointer of a parameter problem: its first byte.
        (ICMP_PARAMETERPROB, _) => (msg[4] as u32) << 24,
        _ => u32::from_be_bytes([msg[4], msg[5], msg[6], msg[7]]),
    };
    // `icmp_unreach()`: the quoted header whole, then 8 bytes past it.
    let q = &msg[8..];
    if q.len() < ipv4::HEADER_LEN || q[0] >> 4 != 4 {
        return Err(Bad::ShortQuote);
    }
    let ihl = (q[0] & 0x0f) as usize * 4;
    if ihl < ipv4::HEADER_LEN || q.len() < ihl + 8 {
        return Err(Bad::ShortQuote);
    }
    // A later fragment quotes no transport header.
    if u16::from_be_bytes([q[6], q[7]]) & 0x1fff != 0 {
        return Err(Bad::ShortQuote);
    }
    let a4 = |b: &[u8]| IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]));
    Ok(Error {
        v6: false,
        from: ip.src().into(),
        typ,
        code,
        info,
        src: a4(&q[12..16]),
        dst: a4(&q[16..20]),
        proto: q[9],
        l4: &q[ihl..],
    })
}

fn parse_v6(pkt: &[u8]) -> Result<Error<'_>, Bad> {
    let ip = ipv6::Packet::new_checked(pkt).map_err(|_| Bad::Malformed)?;
    if ip.next_header() != ipv4::protocol::ICMPV6 {
        return Err(Bad::Malformed);
    }
    let end = (ipv6::HEADER_LEN + ip.payload_len() as usize).min(pkt.len());
    let msg = &pkt[ipv6::HEADER_LEN..end];
    if msg.len() < 8 {
        return Err(Bad::Malformed);
    }
    let (from, to) = (IpAddr::V6(ip.src()), IpAddr::V6(ip.dst()));
    if checksum::l4(from, to, ipv4::protocol::ICMPV6, msg) != 0 {
        return Err(Bad::Checksum);
    }
    let (typ, code) = (msg[0], msg[1]);
    // Types below 128 are errors (RFC 4443 §2.1).
    if typ >= 128 {
        return Err(Bad::NotError);
    }
    let info = u32::from_be_bytes([msg[4], msg[5], msg[6], msg[7]]);
    // `icmpv6_notify()`: the quoted header, its extension headers skipped
    // (`ipv6_skip_exthdr()`), then 8 transport bytes.
    let q = &msg[8..];
    if q.len() < ipv6::HEADER_LEN {
        return Err(Bad::ShortQuote);
    }
    let mut next = q[6];
    let mut off = ipv6::HEADER_LEN;
    loop {
        match next {
            0 | 43 | 60 => {
                let h = q.get(off..off + 2).ok_or(Bad::ShortQuote)?;
                next = h[0];
                off += (h[1] as usize + 1) * 8;
            }
            44 => {
                let h = q.get(off..off + 8).ok_or(Bad::ShortQuote)?;
                if u16::from_be_bytes([h[2], h[3]]) & 0xfff8 != 0 {
                    return Err(Bad::ShortQuote);
                }
                next = h[0];
                off += 8;
            }
            _ => break,
        }
    }
    if q.len() < off + 8 {
        return Err(Bad::ShortQuote);
    }
    let a6 = |b: &[u8]| {
        let mut o = [0u8; 16];
        o.copy_from_slice(b);
        IpAddr::V6(Ipv6Addr::from(o))
    };
    Ok(Error {
        v6: true,
        from,
        typ,
        code,
        info,
        src: a6(&q[8..24]),
        dst: a6(&q[24..40]),
        proto: next,
        l4: &q[off..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 packet carrying `icmp` (its checksum filled in).
    fn v4(mut icmp: Vec<u8>) -> Vec<u8> {
        let c = !checksum::fold(checksum::sum(&icmp));
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        let mut p = vec![0u8; 20];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&((20 + icmp.len()) as u16).to_be_bytes());
        p[8] = 64;
        p[9] = 1;
        p[12..16].copy_from_slice(&[198, 18, 0, 9]);
        p[16..20].copy_from_slice(&[198, 18, 0, 1]);
        let mut ip = ipv4::Packet::new_unchecked(&mut p[..]);
        ip.fill_checksum();
        p.extend_from_slice(&icmp);
        p
    }

    /// A quoted TCP/IPv4 header from 198.18.0.1:1000 to 198.19.2.1:80.
    fn quote() -> Vec<u8> {
        let mut q = vec![0u8; 28];
        q[0] = 0x45;
        q[2..4].copy_from_slice(&1500u16.to_be_bytes());
        q[9] = 6;
        q[12..16].copy_from_slice(&[198, 18, 0, 1]);
        q[16..20].copy_from_slice(&[198, 19, 2, 1]);
        q[20..22].copy_from_slice(&1000u16.to_be_bytes());
        q[22..24].copy_from_slice(&80u16.to_be_bytes());
        q[24..28].copy_from_slice(&7u32.to_be_bytes());
        q
    }

    #[test]
    fn frag_needed_gives_the_mtu_and_the_quoted_ends() {
        let mut m = vec![3, 4, 0, 0, 0, 0, 0x04, 0xb0];
        m.extend(quote());
        let p = v4(m);
        let e = parse_error(&p).unwrap();
        assert_eq!((e.typ, e.code, e.info, e.proto), (3, 4, 1200, 6));
        assert_eq!(e.src, "198.18.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(e.dst, "198.19.2.1".parse::<IpAddr>().unwrap());
        assert_eq!(&e.l4[..4], &[0x03, 0xe8, 0, 80]);
        assert_eq!(e.from, "198.18.0.9".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn bad_checksums_short_quotes_and_echoes_are_refused() {
        let mut m = vec![3, 1, 0, 0, 0, 0, 0, 0];
        m.extend(quote());
        let mut p = v4(m.clone());
        *p.last_mut().unwrap() ^= 1;
        assert_eq!(parse_error(&p), Err(Bad::Checksum));
        m.truncate(8 + 27);
        assert_eq!(parse_error(&v4(m)), Err(Bad::ShortQuote));
        let echo = vec![8, 0, 0, 0, 0, 1, 0, 1];
        assert_eq!(parse_error(&v4(echo)), Err(Bad::NotError));
        assert_eq!(parse_error(&[0x45, 0, 0]), Err(Bad::Malformed));
        for n in 0..40 {
            let _ = parse_error(&p[..n.min(p.len())]);
        }
    }
}
