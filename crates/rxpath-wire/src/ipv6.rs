//! IPv6 headers and the extension-header chain.
//!
//! [`Packet::new_checked`] validates the version and that the payload length
//! fits in the buffer (bytes past it are padding). [`Packet::walk`] follows
//! hop-by-hop (first only), routing, fragment and destination-options headers
//! to the upper-layer protocol, like the kernel's `ipv6_skip_exthdr()`, and
//! reports a malformed chain as [`Error::BadIpv6Chain`]. After both returned
//! `Ok`, no accessor panics.

use crate::ipv4::protocol;
use crate::{be16, be32, put16, Error, Result};
use std::net::Ipv6Addr;

mod field {
    use crate::Field;
    pub const VER_TC_FLOW: Field = 0..4;
    pub const PAYLOAD_LEN: Field = 4..6;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Field = 8..24;
    pub const DST: Field = 24..40;
}

/// Fixed header length.
pub const HEADER_LEN: usize = field::DST.end;
/// The most extension headers we walk before calling the chain malformed.
pub const MAX_EXT_HEADERS: usize = 8;

/// A view of an IPv6 header and its payload.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

/// Fragment header contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment {
    /// Fragment offset in 8-byte units.
    pub offset: u16,
    /// More-fragments flag.
    pub more: bool,
    /// Identification.
    pub ident: u32,
}

/// Where the extension-header chain leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chain {
    /// Upper-layer protocol (or the first header we do not walk: ESP, AH, ...).
    pub protocol: u8,
    /// Offset of that header from the start of the IPv6 header.
    pub offset: usize,
    /// Number of extension headers walked.
    pub ext_headers: u8,
    /// The fragment header, if one was present.
    pub fragment: Option<Fragment>,
}

impl Chain {
    /// True when an upper-layer header is present (not a later fragment).
    pub fn has_l4(&self) -> bool {
        !matches!(self.fragment, Some(f) if f.offset != 0)
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap without checking.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wrap and validate.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Validate the version and payload length.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated("ipv6"));
        }
        if b[0] >> 4 != 6 {
            return Err(Error::BadVersion);
        }
        if HEADER_LEN + self.payload_len() as usize > b.len() {
            return Err(Error::BadLength("ipv6 payload"));
        }
        Ok(())
    }

    /// Version nibble.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        (be16(self.buffer.as_ref(), 0).unwrap_or(0) >> 4) as u8
    }
    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VER_TC_FLOW.start) & 0x000f_ffff
    }
    /// Payload length (everything after the fixed header).
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PAYLOAD_LEN.start).unwrap_or(0)
    }
    /// First next-header value.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    /// Source address.
    pub fn src(&self) -> Ipv6Addr {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        a.into()
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv6Addr {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        a.into()
    }
    /// The bytes after the fixed header, up to the payload length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + self.payload_len() as usize]
    }

    /// Walk the extension-header chain to the upper-layer header.
    pub fn walk(&self) -> Result<Chain> {
        let end = HEADER_LEN + self.payload_len() as usize;
        let b = &self.buffer.as_ref()[..end];
        let mut chain = Chain {
            protocol: self.next_header(),
            offset: HEADER_LEN,
            ext_headers: 0,
            fragment: None,
        };
        loop {
            let len = match chain.protocol {
                protocol::HOPOPTS if chain.ext_headers == 0 => ext_len(b, chain.offset)?,
                protocol::HOPOPTS => return Err(Error::BadIpv6Chain),
                protocol::ROUTING | protocol::DSTOPTS => ext_len(b, chain.offset)?,
                protocol::FRAGMENT => {
                    if b.len() < chain.offset + 8 {
                        return Err(Error::BadIpv6Chain);
                    }
                    let off = be16(b, chain.offset + 2).unwrap_or(0);
                    chain.fragment = Some(Fragment {
                        offset: off >> 3,
                        more: off & 1 != 0,
                        ident: be32(b, chain.offset + 4),
                    });
                    8
                }
                _ => return Ok(chain),
            };
            if chain.ext_headers as usize == MAX_EXT_HEADERS {
                return Err(Error::BadIpv6Chain);
            }
            chain.protocol = b[chain.offset];
            chain.offset += len;
            chain.ext_headers += 1;
            if !chain.has_l4() {
                return Ok(chain);
            }
        }
    }
}

/// Length of an options-style extension header ((hdr_ext_len + 1) × 8),
/// checked against the packet.
fn ext_len(b: &[u8], at: usize) -> Result<usize> {
    if b.len() < at + 2 {
        return Err(Error::BadIpv6Chain);
    }
    let len = (b[at + 1] as usize + 1) * 8;
    if b.len() < at + len {
        return Err(Error::BadIpv6Chain);
    }
    Ok(len)
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Write version 6, traffic class and flow label.
    pub fn set_ver_tc_flow(&mut self, tc: u8, flow: u32) {
        let v = (6u32 << 28) | ((tc as u32) << 20) | (flow & 0x000f_ffff);
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&v.to_be_bytes());
    }
    /// Set payload length.
    pub fn set_payload_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::PAYLOAD_LEN.start, v);
    }
    /// Set next header.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = v;
    }
    /// Set hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }
    /// Set source.
    pub fn set_src(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }
    /// Set destination.
    pub fn set_dst(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; HEADER_LEN];
        let mut p = Packet::new_unchecked(&mut v[..]);
        p.set_ver_tc_flow(0, 0x12345);
        p.set_payload_len(payload.len() as u16);
        p.set_next_header(next);
        p.set_hop_limit(64);
        p.set_src("2001:2::1".parse().unwrap());
        p.set_dst("2001:2::2".parse().unwrap());
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn plain_udp() {
        let v = hdr(protocol::UDP, &[0; 8]);
        let p = Packet::new_checked(&v[..]).unwrap();
        assert_eq!(p.flow_label(), 0x12345);
        let c = p.walk().unwrap();
        assert_eq!(
            (c.protocol, c.offset, c.ext_headers),
            (protocol::UDP, 40, 0)
        );
    }

    #[test]
    fn walks_hop_routing_frag_dst() {
        let mut ext = vec![protocol::ROUTING, 0, 0, 0, 0, 0, 0, 0]; // hop-by-hop, 8 bytes
        ext.extend_from_slice(&[protocol::FRAGMENT, 1]); // routing, 16 bytes
        ext.extend_from_slice(&[0; 14]);
        ext.extend_from_slice(&[protocol::DSTOPTS, 0, 0x00, 0x01, 0, 0, 0, 7]); // first frag, MF
        ext.extend_from_slice(&[protocol::TCP, 0, 0, 0, 0, 0, 0, 0]); // dst opts
        ext.extend_from_slice(&[0; 20]);
        let v = hdr(protocol::HOPOPTS, &ext);
        let c = Packet::new_checked(&v[..]).unwrap().walk().unwrap();
        assert_eq!(c.protocol, protocol::TCP);
        assert_eq!(c.offset, 40 + 8 + 16 + 8 + 8);
        assert_eq!(c.ext_headers, 4);
        assert_eq!(
            c.fragment,
            Some(Fragment {
                offset: 0,
                more: true,
                ident: 7
            })
        );
        assert!(c.has_l4());
    }

    #[test]
    fn later_fragment_has_no_l4() {
        let v = hdr(
            protocol::FRAGMENT,
            &[protocol::UDP, 0, 0x00, 0x08, 0, 0, 0, 1, 1, 2, 3],
        );
        let c = Packet::new_checked(&v[..]).unwrap().walk().unwrap();
        assert!(!c.has_l4());
        assert_eq!(c.fragment.unwrap().offset, 1);
    }

    #[test]
    fn bad_chains() {
        // hop-by-hop not first
        let v = hdr(
            protocol::DSTOPTS,
            &[
                protocol::HOPOPTS,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
            ],
        );
        assert_eq!(
            Packet::new_checked(&v[..]).unwrap().walk(),
            Err(Error::BadIpv6Chain)
        );
        // header longer than the payload
        let v = hdr(protocol::ROUTING, &[protocol::TCP, 4, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            Packet::new_checked(&v[..]).unwrap().walk(),
            Err(Error::BadIpv6Chain)
        );
        // endless destination options
        let v = hdr(
            protocol::DSTOPTS,
            &[[protocol::DSTOPTS, 0, 0, 0, 0, 0, 0, 0]; 10].concat(),
        );
        assert_eq!(
            Packet::new_checked(&v[..]).unwrap().walk(),
            Err(Error::BadIpv6Chain)
        );
        // truncated fragment header
        let v = hdr(protocol::FRAGMENT, &[protocol::TCP, 0, 0]);
        assert_eq!(
            Packet::new_checked(&v[..]).unwrap().walk(),
            Err(Error::BadIpv6Chain)
        );
        // payload length past the buffer
        let mut v = hdr(protocol::UDP, &[0; 8]);
        v.truncate(44);
        assert_eq!(
            Packet::new_checked(&v[..]).err(),
            Some(Error::BadLength("ipv6 payload"))
        );
        let mut v = hdr(protocol::UDP, &[]);
        v[0] = 0x40;
        assert_eq!(Packet::new_checked(&v[..]).err(), Some(Error::BadVersion));
    }
}
