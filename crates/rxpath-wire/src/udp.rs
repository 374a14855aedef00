//! UDP datagrams.
//!
//! [`Packet::new_checked`] validates that the UDP length is at least 8 and
//! within the buffer (the buffer is the IP payload; bytes past the UDP length
//! are ignored). After it returned `Ok`, no accessor panics.

use crate::{be16, put16, Error, Result};

mod field {
    use crate::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
}

/// Header length.
pub const HEADER_LEN: usize = field::CHECKSUM.end;

/// A view of a UDP datagram.
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
    /// Validate the length field against the buffer.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated("udp"));
        }
        let l = self.len() as usize;
        if l < HEADER_LEN || l > b.len() {
            return Err(Error::BadLength("udp"));
        }
        Ok(())
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT.start).unwrap_or(0)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT.start).unwrap_or(0)
    }
    /// Length field (header + payload).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start).unwrap_or(0)
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start).unwrap_or(0)
    }
    /// Payload, up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.len() as usize]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set source port.
    pub fn set_src_port(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::SRC_PORT.start, v);
    }
    /// Set destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::DST_PORT.start, v);
    }
    /// Set length.
    pub fn set_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::LENGTH.start, v);
    }
    /// Set checksum.
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM.start, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_rejects() {
        let d = [
            0x30, 0x39, 0x00, 0x35, 0x00, 0x0b, 0, 0, b'a', b'b', b'c', 0xee,
        ];
        let p = Packet::new_checked(&d[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (12345, 53, 11));
        assert_eq!(p.payload(), b"abc");
        let mut bad = d;
        bad[5] = 7;
        assert_eq!(
            Packet::new_checked(&bad[..]).err(),
            Some(Error::BadLength("udp"))
        );
        bad[5] = 13;
        assert_eq!(
            Packet::new_checked(&bad[..]).err(),
            Some(Error::BadLength("udp"))
        );
        assert_eq!(
            Packet::new_checked(&d[..7]).err(),
            Some(Error::Truncated("udp"))
        );
    }
}
