//! Ethernet II frames with 802.1Q / 802.1ad VLAN tags.
//!
//! The receive path needs three things from layer 2: where layer 3 starts,
//! which ethertype it carries, and the VLAN ids (for the flow key, so that the
//! same 5-tuple on two VLANs is two flows). [`Frame::new_checked`] validates the
//! fixed header; [`Frame::walk_tags`] validates the tags and yields the inner
//! ethertype. After both returned `Ok`, no accessor panics.

use crate::{be16, put16, Error, Result};

/// Ethertypes the receive path knows.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// 802.1Q customer VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service VLAN tag (QinQ outer).
    pub const QINQ: u16 = 0x88a8;
}

mod field {
    use crate::Field;
    pub const DST: Field = 0..6;
    pub const SRC: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
}

/// Length of the untagged Ethernet header.
pub const HEADER_LEN: usize = field::ETHERTYPE.end;
/// Length of one VLAN tag (TPID is the previous ethertype; TCI + inner type).
pub const TAG_LEN: usize = 4;
/// The most tags we walk: an 802.1ad outer tag and an 802.1Q inner tag.
pub const MAX_TAGS: usize = 2;

/// A 48-bit MAC address.
pub type Mac = [u8; 6];

/// A read/write view of an Ethernet frame.
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

/// What [`Frame::walk_tags`] found between the MAC addresses and layer 3.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tags {
    /// VLAN ids, outermost first; `0` where absent.
    pub vlan: [u16; MAX_TAGS],
    /// Number of tags present.
    pub count: u8,
    /// The ethertype after the last tag.
    pub ethertype: u16,
    /// Offset of the layer-3 header from the start of the frame.
    pub l3_offset: usize,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wrap a buffer without checking it. Accessors may panic until
    /// [`check_len`](Self::check_len) returned `Ok`.
    pub const fn new_unchecked(buffer: T) -> Self {
        Frame { buffer }
    }

    /// Wrap and check a buffer.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Ensure the fixed header is present.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated("ethernet"))
        } else {
            Ok(())
        }
    }

    /// Destination MAC.
    pub fn dst(&self) -> Mac {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        m
    }

    /// Source MAC.
    pub fn src(&self) -> Mac {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        m
    }

    /// The outer ethertype (a TPID when the frame is tagged).
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ETHERTYPE.start).unwrap_or(0)
    }

    /// Walk up to [`MAX_TAGS`] VLAN tags and return the inner ethertype and
    /// the layer-3 offset. Like the kernel's `__vlan_get_protocol()`.
    pub fn walk_tags(&self) -> Result<Tags> {
        let b = self.buffer.as_ref();
        let mut tags = Tags {
            ethertype: self.ethertype(),
            l3_offset: HEADER_LEN,
            ..Tags::default()
        };
        while tags.ethertype == ethertype::VLAN || tags.ethertype == ethertype::QINQ {
            if tags.count as usize == MAX_TAGS {
                return Err(Error::TooManyTags);
            }
            let at = tags.l3_offset;
            if b.len() < at + TAG_LEN {
                return Err(Error::Truncated("vlan"));
            }
            tags.vlan[tags.count as usize] = be16(b, at).unwrap_or(0) & 0x0fff;
            tags.count += 1;
            tags.ethertype = be16(b, at + 2).unwrap_or(0);
            tags.l3_offset = at + TAG_LEN;
        }
        Ok(tags)
    }

    /// The whole buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Set the destination MAC.
    pub fn set_dst(&mut self, m: Mac) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&m);
    }
    /// Set the source MAC.
    pub fn set_src(&mut self, m: Mac) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&m);
    }
    /// Set the outer ethertype.
    pub fn set_ethertype(&mut self, t: u16) {
        put16(self.buffer.as_mut(), field::ETHERTYPE.start, t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNTAGGED: [u8; 14] = [0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];

    #[test]
    fn untagged() {
        let f = Frame::new_checked(&UNTAGGED[..]).unwrap();
        assert_eq!(f.dst(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(f.src(), [2, 0, 0, 0, 0, 2]);
        let t = f.walk_tags().unwrap();
        assert_eq!(
            (t.ethertype, t.l3_offset, t.count),
            (ethertype::IPV4, 14, 0)
        );
    }

    #[test]
    fn qinq_tags() {
        let mut b = UNTAGGED[..12].to_vec();
        b.extend_from_slice(&[0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0x20, 0x0a, 0x86, 0xdd]);
        let t = Frame::new_checked(&b[..]).unwrap().walk_tags().unwrap();
        assert_eq!(t.vlan, [100, 10]);
        assert_eq!(t.count, 2);
        assert_eq!(t.ethertype, ethertype::IPV6);
        assert_eq!(t.l3_offset, 22);
    }

    #[test]
    fn three_tags_rejected_and_truncated_tag_reported() {
        let mut b = UNTAGGED[..12].to_vec();
        for _ in 0..3 {
            b.extend_from_slice(&[0x81, 0x00, 0x00, 0x01]);
        }
        b.extend_from_slice(&[0x08, 0x00]);
        let f = Frame::new_checked(&b[..]).unwrap();
        assert_eq!(f.walk_tags(), Err(Error::TooManyTags));
        let short = [&UNTAGGED[..12], &[0x81, 0x00, 0x00][..]].concat();
        let f = Frame::new_checked(&short[..]).unwrap();
        assert_eq!(f.walk_tags(), Err(Error::Truncated("vlan")));
        assert_eq!(
            Frame::new_checked(&UNTAGGED[..13]).err(),
            Some(Error::Truncated("ethernet"))
        );
    }
}
