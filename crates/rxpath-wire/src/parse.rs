//! One pass over a received frame: the kernel's flow dissector.
//!
//! [`parse`] walks Ethernet (and VLAN tags), IPv4 or IPv6 (with extension
//! headers), and TCP or UDP, and returns the [`Headers`] the receive path
//! needs: layer offsets, the [`FlowKey`], fragment status and where the L4
//! payload lies. A frame that is not IP (ARP, LLDP, ...) is not an error: it
//! parses with [`L3::Other`]. A header that is truncated or inconsistent is an
//! [`Error`](crate::Error), which the caller counts as a `malformed` drop.
//!
//! `parse` never panics on any input; the property test at the end of this
//! file feeds it random and mutated frames to hold it to that.

use crate::ethernet::{self, ethertype};
use crate::ipv4::{self, protocol};
use crate::{ipv6, tcp, udp, FlowKey, IpAddrs, Result};

/// The network layer found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum L3 {
    /// IPv4.
    Ipv4,
    /// IPv6.
    Ipv6,
    /// Anything else, with its ethertype.
    Other(u16),
    /// Not parsed yet.
    #[default]
    None,
}

/// The transport layer found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum L4 {
    /// TCP, with its flag bits.
    Tcp {
        /// Flags (see [`tcp::flags`]).
        flags: u16,
    },
    /// UDP.
    Udp,
    /// Another protocol (ICMP, ESP, ...), or a later fragment.
    Other(u8),
    /// No L4 (non-IP frame).
    #[default]
    None,
}

/// What [`parse`] learned about a frame. Offsets are from the start of the
/// frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Headers {
    /// VLAN ids, outermost first (0 = none).
    pub vlan: [u16; ethernet::MAX_TAGS],
    /// Network layer.
    pub l3: L3,
    /// Offset of the network header.
    pub l3_offset: u16,
    /// Transport layer.
    pub l4: L4,
    /// Offset of the transport header (equal to `payload_offset` if none).
    pub l4_offset: u16,
    /// Offset of the L4 payload.
    pub payload_offset: u16,
    /// Length of the L4 payload (IP padding excluded).
    pub payload_len: u16,
    /// True for any IP fragment.
    pub fragment: bool,
    /// True when IPv4 options or IPv6 extension headers are present.
    pub ip_options: bool,
    /// The 5-tuple (ports zero without a port-carrying L4 header).
    pub flow: FlowKey,
}

impl Headers {
    /// True when the frame is TCP or UDP with its header present.
    pub fn has_ports(&self) -> bool {
        matches!(self.l4, L4::Tcp { .. } | L4::Udp)
    }
}

/// Parse a frame from its Ethernet header.
///
/// The common case (untagged IPv4 without options or fragmentation, TCP or
/// UDP) takes a straight-line fast path; anything else, including every
/// malformed frame, goes through the general walk, which reports the error.
/// Both give the same [`Headers`] (a property test checks it).
#[inline(always)]
pub fn parse(frame: &[u8]) -> Result<Headers> {
    match parse_fast(frame) {
        Some(h) => Ok(h),
        None => parse_general(frame),
    }
}

/// [`parse`] into a caller's record, which is overwritten. NAPI's loop 2
/// does not use it: it calls [`parse_fast`] and builds its record from the
/// returned values, which keeps the record out of memory when the stage is
/// inlined (a record written in place has its address taken, and was read
/// back through failed store forwards).
#[inline]
pub fn parse_into(frame: &[u8], h: &mut Headers) -> Result<()> {
    *h = parse(frame)?;
    Ok(())
}

/// The fast path alone: untagged IPv4 without options or fragments, TCP or
/// UDP. `None` means "not the common case, or not valid": ask
/// [`parse_general`]. The record is returned by value, built from values
/// in registers, so that a caller that inlines it can keep the fields it
/// reads in registers and never store the ones it does not.
#[inline(always)]
pub fn parse_fast(f: &[u8]) -> Option<Headers> {
    const L3: usize = ethernet::HEADER_LEN;
    const L4: usize = L3 + ipv4::HEADER_LEN;
    // Bounds are checked once here; the fixed-size view lets the compiler
    // drop every later check.
    let hdr = f.get(..L4 + udp::HEADER_LEN)?;
    let Ok(b): core::result::Result<&[u8; L4 + udp::HEADER_LEN], _> = hdr.try_into() else {
        return None;
    };
    let be = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
    if be(12) != ethertype::IPV4 || b[L3] != 0x45 {
        return None;
    }
    let total = be(L3 + 2) as usize;
    if total < ipv4::HEADER_LEN + udp::HEADER_LEN
        || L3 + total > f.len()
        || be(L3 + 6) & 0x3fff != 0
    {
        return None;
    }
    let proto = b[L3 + 9];
    let l4_len = total - ipv4::HEADER_LEN;
    let (l4, payload_off, payload_len) = match proto {
        protocol::UDP => {
            let ulen = be(L4 + 4) as usize;
            if ulen < udp::HEADER_LEN || ulen > l4_len {
                return None;
            }
            (L4::Udp, L4 + udp::HEADER_LEN, ulen - udp::HEADER_LEN)
        }
        protocol::TCP => {
            if l4_len < tcp::HEADER_LEN {
                return None;
            }
            // Within `f`: L4 + 13 < L3 + total since l4_len >= 20.
            let off_flags = u16::from_be_bytes([f[L4 + 12], f[L4 + 13]]);
            let hl = ((off_flags >> 12) as usize) * 4;
            if hl < tcp::HEADER_LEN || hl > l4_len {
                return None;
            }
            (
                L4::Tcp {
                    flags: off_flags & 0x01ff,
                },
                L4 + hl,
                l4_len - hl,
            )
        }
        _ => return None,
    };
    let sport = be(L4);
    let dport = be(L4 + 2);
    let src = [b[L3 + 12], b[L3 + 13], b[L3 + 14], b[L3 + 15]];
    let dst = [b[L3 + 16], b[L3 + 17], b[L3 + 18], b[L3 + 19]];
    Some(Headers {
        vlan: [0; ethernet::MAX_TAGS],
        l3: L3::Ipv4,
        l3_offset: L3 as u16,
        l4,
        l4_offset: L4 as u16,
        payload_offset: payload_off as u16,
        payload_len: payload_len as u16,
        fragment: false,
        ip_options: false,
        flow: FlowKey {
            addrs: IpAddrs::V4 { src, dst },
            src_port: sport,
            dst_port: dport,
            protocol: proto,
        },
    })
}

/// The general walk: every encapsulation we know, every check. Never
/// inlined: the hot loop keeps only the fast path.
#[inline(never)]
pub fn parse_general(frame: &[u8]) -> Result<Headers> {
    let eth = ethernet::Frame::new_checked(frame)?;
    let tags = eth.walk_tags()?;
    let mut h = Headers {
        vlan: tags.vlan,
        l3_offset: tags.l3_offset as u16,
        ..Headers::default()
    };
    let l3 = &frame[tags.l3_offset..];
    let (proto, l4_rel, l3_end) = match tags.ethertype {
        ethertype::IPV4 => {
            let ip = ipv4::Packet::new_checked(l3)?;
            h.l3 = L3::Ipv4;
            h.fragment = ip.is_fragment();
            h.ip_options = ip.has_options();
            h.flow.addrs = IpAddrs::V4 {
                src: ip.src().octets(),
                dst: ip.dst().octets(),
            };
            let proto = if ip.is_later_fragment() {
                None
            } else {
                Some(ip.protocol())
            };
            h.flow.protocol = ip.protocol();
            (proto, ip.header_len(), ip.total_len() as usize)
        }
        ethertype::IPV6 => {
            let ip = ipv6::Packet::new_checked(l3)?;
            let chain = ip.walk()?;
            h.l3 = L3::Ipv6;
            h.fragment = chain.fragment.is_some();
            h.ip_options = chain.ext_headers > 0;
            h.flow.addrs = IpAddrs::V6 {
                src: ip.src().octets(),
                dst: ip.dst().octets(),
            };
            h.flow.protocol = chain.protocol;
            let proto = if chain.has_l4() {
                Some(chain.protocol)
            } else {
                None
            };
            (
                proto,
                chain.offset,
                ipv6::HEADER_LEN + ip.payload_len() as usize,
            )
        }
        other => {
            h.l3 = L3::Other(other);
            h.l4_offset = tags.l3_offset as u16;
            h.payload_offset = h.l4_offset;
            h.payload_len = (frame.len() - tags.l3_offset) as u16;
            return Ok(h);
        }
    };
    let l4 = &l3[l4_rel..l3_end];
    h.l4_offset = (tags.l3_offset + l4_rel) as u16;
    let payload_rel = match proto {
        Some(protocol::TCP) => {
            let t = tcp::Packet::new_checked(l4)?;
            h.l4 = L4::Tcp { flags: t.flags() };
            h.flow.src_port = t.src_port();
            h.flow.dst_port = t.dst_port();
            t.header_len()
        }
        Some(protocol::UDP) if !h.fragment => {
            let u = udp::Packet::new_checked(l4)?;
            h.l4 = L4::Udp;
            h.flow.src_port = u.src_port();
            h.flow.dst_port = u.dst_port();
            // The UDP length bounds the payload within the IP payload.
            h.payload_offset = h.l4_offset + udp::HEADER_LEN as u16;
            h.payload_len = u.len() - udp::HEADER_LEN as u16;
            return Ok(h);
        }
        Some(p) => {
            h.l4 = L4::Other(p);
            0
        }
        None => {
            h.l4 = L4::Other(h.flow.protocol);
            0
        }
    };
    h.payload_offset = h.l4_offset + payload_rel as u16;
    h.payload_len = (l4.len() - payload_rel) as u16;
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{self, Spec};
    use crate::Error;
    use proptest::prelude::*;
    use std::net::IpAddr;

    fn v4() -> (IpAddr, IpAddr) {
        ("198.18.0.1".parse().unwrap(), "198.18.1.1".parse().unwrap())
    }

    #[test]
    fn udp_v4_frame() {
        let (s, d) = v4();
        let f = build::udp(&Spec::new(s, d, 5000, 53), b"hello");
        let h = parse(&f).unwrap();
        assert_eq!(h.l3, L3::Ipv4);
        assert_eq!(h.l4, L4::Udp);
        assert_eq!(
            (h.l3_offset, h.l4_offset, h.payload_offset, h.payload_len),
            (14, 34, 42, 5)
        );
        assert_eq!(h.flow, FlowKey::new(s, d, 5000, 53, 17));
        assert_eq!(&f[42..47], b"hello");
    }

    #[test]
    fn tcp_v6_vlan_frame() {
        let s: IpAddr = "2001:2::1".parse().unwrap();
        let d: IpAddr = "2001:2::2".parse().unwrap();
        let mut spec = Spec::new(s, d, 40000, 443);
        spec.vlan = Some(7);
        let f = build::tcp(
            &spec,
            1000,
            1,
            tcp::flags::ACK | tcp::flags::PSH,
            &[],
            &[9; 100],
        );
        let h = parse(&f).unwrap();
        assert_eq!(h.vlan, [7, 0]);
        assert_eq!(h.l3_offset, 18);
        assert_eq!(
            h.l4,
            L4::Tcp {
                flags: tcp::flags::ACK | tcp::flags::PSH
            }
        );
        assert_eq!(h.payload_len, 100);
        assert_eq!(h.flow.protocol, 6);
        assert_eq!(h.flow.dst_port, 443);
    }

    #[test]
    fn arp_is_not_an_error() {
        let mut f = vec![0xffu8; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
        f.extend_from_slice(&[0; 28]);
        let h = parse(&f).unwrap();
        assert_eq!(h.l3, L3::Other(ethertype::ARP));
        assert_eq!(h.l4, L4::None);
    }

    #[test]
    fn later_fragment_has_no_ports() {
        let (s, d) = v4();
        let mut f = build::udp(&Spec::new(s, d, 5000, 53), b"hello world");
        // fragment offset 1 (8 bytes)
        f[14 + 6] = 0x00;
        f[14 + 7] = 0x01;
        let h = parse(&f).unwrap();
        assert!(h.fragment);
        assert_eq!(h.l4, L4::Other(17));
        assert_eq!((h.flow.src_port, h.flow.dst_port), (0, 0));
    }

    #[test]
    fn malformed_reported() {
        let (s, d) = v4();
        let f = build::udp(&Spec::new(s, d, 5000, 53), b"hello");
        assert_eq!(parse(&f[..20]), Err(Error::Truncated("ipv4")));
        let mut g = f.clone();
        g[14] = 0x43;
        assert_eq!(parse(&g), Err(Error::BadIhl));
        let mut g = f.clone();
        g[14 + 20 + 5] = 200; // UDP length past the IP payload
        assert_eq!(parse(&g), Err(Error::BadLength("udp")));
        let f = build::tcp(&Spec::new(s, d, 1, 2), 0, 0, tcp::flags::ACK, &[], &[]);
        let mut g = f.clone();
        g[14 + 20 + 12] = 0x30;
        assert_eq!(parse(&g), Err(Error::BadTcpOffset));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// No input makes the parser panic, and offsets stay within the frame.
        #[test]
        fn never_panics_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(h) = parse(&bytes) {
                prop_assert!(h.payload_offset as usize + h.payload_len as usize <= bytes.len());
            }
        }

        /// The fast path and the general walk agree on every input.
        #[test]
        fn fast_path_agrees_with_general_walk(
            pos in 0usize..80, val in any::<u8>(), cut in 30usize..130, tcp in any::<bool>()
        ) {
            let (s, d) = v4();
            let spec = Spec::new(s, d, 1, 2);
            let mut f = if tcp {
                build::tcp(&spec, 1, 1, tcp::flags::ACK, &[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2], &[7; 40])
            } else {
                build::udp(&spec, &[7; 40])
            };
            if pos < f.len() { f[pos] = val; }
            f.truncate(cut);
            if let Some(h) = parse_fast(&f) {
                prop_assert_eq!(Ok(h), parse_general(&f));
            }
        }

        /// Mutating any byte of a valid frame (or cutting it) never panics.
        #[test]
        fn never_panics_on_mutated_frames(
            pos in 0usize..120, val in any::<u8>(), cut in 0usize..130, v6 in any::<bool>(), tcp in any::<bool>()
        ) {
            let (s, d): (IpAddr, IpAddr) = if v6 {
                ("2001:2::1".parse().unwrap(), "2001:2::2".parse().unwrap())
            } else { v4() };
            let spec = Spec::new(s, d, 1, 2);
            let mut f = if tcp {
                build::tcp(&spec, 1, 1, tcp::flags::ACK, &[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2], &[7; 40])
            } else {
                build::udp(&spec, &[7; 40])
            };
            if pos < f.len() { f[pos] = val; }
            f.truncate(cut);
            if let Ok(h) = parse(&f) {
                prop_assert!(h.payload_offset as usize + h.payload_len as usize <= f.len());
            }
        }
    }
}
