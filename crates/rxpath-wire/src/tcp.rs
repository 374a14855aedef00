//! TCP segments and their options.
//!
//! [`Packet::new_checked`] validates the data offset (at least 5 words, within
//! the segment). [`Packet::options`] iterates the options area and reports an
//! option that runs past it as [`Error::BadTcpOption`]. After `new_checked`
//! returned `Ok`, no accessor panics.

use crate::{be16, be32, put16, put32, Error, Result};

mod field {
    use crate::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const SEQ: Field = 4..8;
    pub const ACK: Field = 8..12;
    pub const OFF_FLAGS: Field = 12..14;
    pub const WINDOW: Field = 14..16;
    pub const CHECKSUM: Field = 16..18;
    pub const URGENT: Field = 18..20;
}

/// Header length without options.
pub const HEADER_LEN: usize = field::URGENT.end;

/// TCP flag bits (low 9 bits of the offset/flags word).
pub mod flags {
    /// FIN.
    pub const FIN: u16 = 0x001;
    /// SYN.
    pub const SYN: u16 = 0x002;
    /// RST.
    pub const RST: u16 = 0x004;
    /// PSH.
    pub const PSH: u16 = 0x008;
    /// ACK.
    pub const ACK: u16 = 0x010;
    /// URG.
    pub const URG: u16 = 0x020;
    /// ECE.
    pub const ECE: u16 = 0x040;
    /// CWR.
    pub const CWR: u16 = 0x080;
}

/// A TCP option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpOption<'a> {
    /// End of option list.
    End,
    /// No-operation padding.
    Nop,
    /// Maximum segment size.
    Mss(u16),
    /// Window scale shift.
    WindowScale(u8),
    /// SACK permitted.
    SackPermitted,
    /// Timestamps (value, echo reply).
    Timestamps(u32, u32),
    /// Any other option: kind and data.
    Other(u8, &'a [u8]),
}

/// A view of a TCP segment.
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
    /// Validate the data offset against the segment.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated("tcp"));
        }
        let hl = self.header_len();
        if hl < HEADER_LEN || hl > b.len() {
            return Err(Error::BadTcpOffset);
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
    /// Sequence number.
    pub fn seq(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SEQ.start)
    }
    /// Acknowledgment number.
    pub fn ack(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ACK.start)
    }
    /// Header length in bytes (data offset × 4).
    pub fn header_len(&self) -> usize {
        ((self.buffer.as_ref()[field::OFF_FLAGS.start] >> 4) as usize) * 4
    }
    /// Flag bits (see [`flags`]).
    pub fn flags(&self) -> u16 {
        be16(self.buffer.as_ref(), field::OFF_FLAGS.start).unwrap_or(0) & 0x01ff
    }
    /// Window.
    pub fn window(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WINDOW.start).unwrap_or(0)
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start).unwrap_or(0)
    }
    /// Urgent pointer.
    pub fn urgent(&self) -> u16 {
        be16(self.buffer.as_ref(), field::URGENT.start).unwrap_or(0)
    }
    /// The raw options bytes.
    pub fn options_raw(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }
    /// Iterate the options.
    pub fn options(&self) -> Options<'_> {
        Options {
            rest: self.options_raw(),
        }
    }
    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// Iterator over TCP options; yields `Err(BadTcpOption)` once and stops on a
/// malformed option.
#[derive(Debug, Clone)]
pub struct Options<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Options<'a> {
    type Item = Result<TcpOption<'a>>;
    fn next(&mut self) -> Option<Self::Item> {
        let (&kind, after) = self.rest.split_first()?;
        match kind {
            0 => {
                self.rest = &[];
                return Some(Ok(TcpOption::End));
            }
            1 => {
                self.rest = after;
                return Some(Ok(TcpOption::Nop));
            }
            _ => {}
        }
        let len = match after.first() {
            Some(&l) if l >= 2 && l as usize <= self.rest.len() => l as usize,
            _ => {
                self.rest = &[];
                return Some(Err(Error::BadTcpOption));
            }
        };
        let data = &self.rest[2..len];
        self.rest = &self.rest[len..];
        Some(Ok(match (kind, data.len()) {
            (2, 2) => TcpOption::Mss(be16(data, 0).unwrap_or(0)),
            (3, 1) => TcpOption::WindowScale(data[0]),
            (4, 0) => TcpOption::SackPermitted,
            (8, 8) => TcpOption::Timestamps(be32(data, 0), be32(data, 4)),
            _ => TcpOption::Other(kind, data),
        }))
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
    /// Set sequence number.
    pub fn set_seq(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::SEQ.start, v);
    }
    /// Set acknowledgment number.
    pub fn set_ack(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::ACK.start, v);
    }
    /// Set header length (bytes, multiple of 4) and flags.
    pub fn set_header_len_flags(&mut self, header_len: usize, flags: u16) {
        let v = (((header_len / 4) as u16) << 12) | (flags & 0x01ff);
        put16(self.buffer.as_mut(), field::OFF_FLAGS.start, v);
    }
    /// Set window.
    pub fn set_window(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::WINDOW.start, v);
    }
    /// Set checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM.start, v);
    }
    /// Set urgent pointer.
    pub fn set_urgent(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::URGENT.start, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // SYN with MSS 1460, SACK-permitted, timestamps, NOP, window scale 7.
    const SYN: [u8; 40] = [
        0x9c, 0x40, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0xa0, 0x02, 0xfa, 0xf0, 0, 0, 0, 0, 2, 4,
        0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 9, 0, 0, 0, 0, 1, 3, 3, 7,
    ];

    #[test]
    fn syn_options() {
        let p = Packet::new_checked(&SYN[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.seq()), (40000, 80, 1));
        assert_eq!(p.flags(), flags::SYN);
        let opts: Vec<_> = p.options().collect::<Result<_>>().unwrap();
        assert_eq!(
            opts,
            vec![
                TcpOption::Mss(1460),
                TcpOption::SackPermitted,
                TcpOption::Timestamps(9, 0),
                TcpOption::Nop,
                TcpOption::WindowScale(7)
            ]
        );
        assert!(p.payload().is_empty());
    }

    #[test]
    fn malformed() {
        let mut s = SYN;
        s[12] = 0x40; // data offset 4
        assert_eq!(Packet::new_checked(&s[..]).err(), Some(Error::BadTcpOffset));
        s[12] = 0xf0; // 60 bytes in a 40-byte segment
        assert_eq!(Packet::new_checked(&s[..]).err(), Some(Error::BadTcpOffset));
        assert_eq!(
            Packet::new_checked(&SYN[..19]).err(),
            Some(Error::Truncated("tcp"))
        );
        let mut s = SYN;
        s[21] = 30; // MSS option claims 30 bytes
        let p = Packet::new_checked(&s[..]).unwrap();
        assert_eq!(p.options().next(), Some(Err(Error::BadTcpOption)));
        s[21] = 1; // length below 2
        let p = Packet::new_checked(&s[..]).unwrap();
        assert_eq!(p.options().next(), Some(Err(Error::BadTcpOption)));
    }
}
