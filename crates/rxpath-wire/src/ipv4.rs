//! IPv4 headers: options and fragments recognised.
//!
//! [`Packet::new_checked`] validates version, IHL (at least 5, header within
//! the buffer) and total length (at least the header, at most the buffer;
//! bytes past it are Ethernet padding). After it returned `Ok`, no accessor
//! panics, and [`Packet::payload`] is the L4 bytes without padding.

use crate::{be16, be32, put16, put32, Error, Result};
use std::net::Ipv4Addr;

mod field {
    use crate::Field;
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC: Field = 12..16;
    pub const DST: Field = 16..20;
}

/// Minimum (option-less) header length.
pub const HEADER_LEN: usize = field::DST.end;

/// IP protocol numbers the receive path knows.
pub mod protocol {
    /// Hop-by-hop options (IPv6 extension header).
    pub const HOPOPTS: u8 = 0;
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 routing header.
    pub const ROUTING: u8 = 43;
    /// IPv6 fragment header.
    pub const FRAGMENT: u8 = 44;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6 "no next header".
    pub const NONE: u8 = 59;
    /// IPv6 destination options.
    pub const DSTOPTS: u8 = 60;
}

/// Flag bit: don't fragment.
pub const FLAG_DF: u16 = 0x4000;
/// Flag bit: more fragments.
pub const FLAG_MF: u16 = 0x2000;

/// A view of an IPv4 header and its payload.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
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

    /// Validate version, IHL and total length against the buffer.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated("ipv4"));
        }
        if self.version() != 4 {
            return Err(Error::BadVersion);
        }
        let hl = self.header_len();
        if hl < HEADER_LEN {
            return Err(Error::BadIhl);
        }
        if b.len() < hl {
            return Err(Error::Truncated("ipv4 options"));
        }
        let total = self.total_len() as usize;
        if total < hl || total > b.len() {
            return Err(Error::BadLength("ipv4 total"));
        }
        Ok(())
    }

    /// Version nibble.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }
    /// Header length in bytes (IHL × 4), options included.
    pub fn header_len(&self) -> usize {
        ((self.buffer.as_ref()[field::VER_IHL] & 0x0f) as usize) * 4
    }
    /// True when the header carries options (IHL > 5).
    pub fn has_options(&self) -> bool {
        self.header_len() > HEADER_LEN
    }
    /// Type of service / DSCP+ECN byte.
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }
    /// Total length (header + payload).
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start).unwrap_or(0)
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT.start).unwrap_or(0)
    }
    /// Flags and fragment offset, raw.
    pub fn flags_frag(&self) -> u16 {
        be16(self.buffer.as_ref(), field::FLG_OFF.start).unwrap_or(0)
    }
    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.flags_frag() & FLAG_DF != 0
    }
    /// True for any fragment (MF set or non-zero offset).
    pub fn is_fragment(&self) -> bool {
        self.flags_frag() & (FLAG_MF | 0x1fff) != 0
    }
    /// True for a fragment that is not the first one (no L4 header inside).
    pub fn is_later_fragment(&self) -> bool {
        self.flags_frag() & 0x1fff != 0
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    /// Next protocol.
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }
    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start).unwrap_or(0)
    }
    /// Source address.
    pub fn src(&self) -> Ipv4Addr {
        Ipv4Addr::from(be32(self.buffer.as_ref(), field::SRC.start))
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv4Addr {
        Ipv4Addr::from(be32(self.buffer.as_ref(), field::DST.start))
    }
    /// True when the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        crate::checksum::fold(crate::checksum::sum(
            &self.buffer.as_ref()[..self.header_len()],
        )) == 0xffff
    }
    /// The L4 bytes: from the end of the header to total length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.total_len() as usize]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Write version 4 and the IHL for `header_len` bytes.
    pub fn set_header_len(&mut self, header_len: usize) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ((header_len / 4) as u8 & 0x0f);
    }
    /// Set TOS.
    pub fn set_tos(&mut self, v: u8) {
        self.buffer.as_mut()[field::TOS] = v;
    }
    /// Set total length.
    pub fn set_total_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::LENGTH.start, v);
    }
    /// Set identification.
    pub fn set_ident(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::IDENT.start, v);
    }
    /// Set flags and fragment offset, raw.
    pub fn set_flags_frag(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::FLG_OFF.start, v);
    }
    /// Set TTL.
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }
    /// Set protocol.
    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v;
    }
    /// Set source.
    pub fn set_src(&mut self, a: Ipv4Addr) {
        put32(self.buffer.as_mut(), field::SRC.start, a.into());
    }
    /// Set destination.
    pub fn set_dst(&mut self, a: Ipv4Addr) {
        put32(self.buffer.as_mut(), field::DST.start, a.into());
    }
    /// Recompute the header checksum.
    pub fn fill_checksum(&mut self) {
        put16(self.buffer.as_mut(), field::CHECKSUM.start, 0);
        let hl = self.header_len();
        let c = !crate::checksum::fold(crate::checksum::sum(&self.buffer.as_ref()[..hl]));
        put16(self.buffer.as_mut(), field::CHECKSUM.start, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 198.18.0.1 → 198.18.0.2, UDP, 8 bytes of payload, DF, TTL 64.
    const PKT: [u8; 28] = [
        0x45, 0x00, 0x00, 0x1c, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 198, 18, 0, 1, 198,
        18, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0,
    ];

    fn pkt() -> Vec<u8> {
        let mut v = PKT.to_vec();
        Packet::new_unchecked(&mut v[..]).fill_checksum();
        v
    }

    #[test]
    fn reads_fields() {
        let v = pkt();
        let p = Packet::new_checked(&v[..]).unwrap();
        assert_eq!(p.src(), Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(p.dst(), Ipv4Addr::new(198, 18, 0, 2));
        assert_eq!(p.protocol(), protocol::UDP);
        assert!(p.dont_frag() && !p.is_fragment() && !p.has_options());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.ident(), 0x1234);
        assert!(p.verify_checksum());
        assert_eq!(p.payload().len(), 8);
    }

    #[test]
    fn padding_is_not_payload() {
        let mut v = pkt();
        v.extend_from_slice(&[0xee; 18]);
        let p = Packet::new_checked(&v[..]).unwrap();
        assert_eq!(p.payload().len(), 8);
    }

    #[test]
    fn malformed() {
        let mut v = pkt();
        v[0] = 0x44; // IHL 4
        assert_eq!(Packet::new_checked(&v[..]).err(), Some(Error::BadIhl));
        v[0] = 0x65;
        assert_eq!(Packet::new_checked(&v[..]).err(), Some(Error::BadVersion));
        let mut v = pkt();
        v[3] = 0x40; // total length 64 > 28
        assert_eq!(
            Packet::new_checked(&v[..]).err(),
            Some(Error::BadLength("ipv4 total"))
        );
        v[3] = 0x10; // total length 16 < header
        assert_eq!(
            Packet::new_checked(&v[..]).err(),
            Some(Error::BadLength("ipv4 total"))
        );
        let mut v = pkt();
        v[0] = 0x4f; // 60-byte header in a 28-byte buffer
        assert_eq!(
            Packet::new_checked(&v[..]).err(),
            Some(Error::Truncated("ipv4 options"))
        );
        assert_eq!(
            Packet::new_checked(&v[..19]).err(),
            Some(Error::Truncated("ipv4"))
        );
    }

    #[test]
    fn options_and_fragments() {
        let mut v = vec![0x46, 0, 0, 32, 0, 1, 0x20, 0x00, 64, 17, 0, 0];
        v.extend_from_slice(&[198, 18, 0, 1, 198, 18, 0, 2, 1, 1, 1, 0]);
        v.extend_from_slice(&[0; 8]);
        let p = Packet::new_checked(&v[..]).unwrap();
        assert!(p.has_options());
        assert_eq!(p.header_len(), 24);
        assert!(p.is_fragment() && !p.is_later_fragment());
        v[6] = 0x00;
        v[7] = 0x10;
        let p = Packet::new_checked(&v[..]).unwrap();
        assert!(p.is_fragment() && p.is_later_fragment());
    }
}
