//! # rxpath-wire: what a packet looks like
//!
//! Zero-copy views over untrusted bytes, in the style of smoltcp's `wire`
//! module: a `Packet<T: AsRef<[u8]>>` wraps a buffer, `new_checked` validates
//! it, and **after `new_checked` (or `check_len`) returned `Ok`, no accessor
//! panics**. Every view reports a malformed header as an [`Error`]; nothing in
//! this crate panics on any input (the fuzz-style property tests at the end of
//! [`mod@parse`] hold it to that).
//!
//! The layers, in the order a received frame is walked:
//!
//! 1. [`ethernet`]: Ethernet II with up to two 802.1Q / 802.1ad tags.
//! 2. [`ipv4`] (options and fragments recognised) and [`ipv6`] (hop-by-hop,
//!    routing, fragment and destination-options headers walked).
//! 3. [`tcp`] (options) and [`udp`].
//! 4. [`parse()`]: one pass over all of the above that yields the header offsets
//!    and the [`FlowKey`] the receive path needs (the kernel's flow dissector).
//! 5. [`toeplitz`]: the RSS hash as NICs compute it, and [`hash`]: a fast
//!    software hash for steering.
//!
//! [`build`] writes well-formed frames (used by the simulated NIC, the traffic
//! generator and tests).
//!
//! ```
//! use rxpath_wire::build::{self, Spec};
//! use rxpath_wire::L4;
//!
//! // A UDP datagram from 198.18.0.1:5000 to 198.18.0.2:7, as a frame...
//! let spec = Spec::new("198.18.0.1".parse()?, "198.18.0.2".parse()?, 5000, 7);
//! let frame = build::udp(&spec, b"hello");
//! // ... and what the receive path learns of it in one pass.
//! let h = rxpath_wire::parse(&frame)?;
//! assert_eq!(h.l4, L4::Udp);
//! let at = h.payload_offset as usize;
//! assert_eq!(&frame[at..at + h.payload_len as usize], b"hello");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs, missing_debug_implementations)]

pub mod build;
pub mod checksum;
pub mod corpus;
pub mod ethernet;
pub mod flow;
pub mod hash;
pub mod icmp;
pub mod ipv4;
pub mod ipv6;
pub mod parse;
pub mod tcp;
pub mod toeplitz;
pub mod udp;

pub use flow::{FlowKey, IpAddrs};
pub use parse::{parse, parse_fast, parse_general, parse_into, Headers, L3, L4};

/// Why a header could not be read. Every variant is a malformed (or
/// unsupported) input, never a bug: the receive path counts it as a drop with
/// reason `malformed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The buffer ends before the header (or the length it declares) does.
    #[error("truncated {0} header")]
    Truncated(&'static str),
    /// IPv4 version field is not 4, or IPv6 version field is not 6.
    #[error("bad IP version")]
    BadVersion,
    /// IPv4 IHL below 5 (20 bytes).
    #[error("IPv4 IHL below 5")]
    BadIhl,
    /// A length field is inconsistent (total length below header length,
    /// past the end of the frame, ...).
    #[error("inconsistent {0} length")]
    BadLength(&'static str),
    /// More VLAN tags than we walk (two: 802.1ad outer + 802.1Q inner).
    #[error("too many VLAN tags")]
    TooManyTags,
    /// An IPv6 extension-header chain that is malformed (hop-by-hop not first,
    /// too long, or ends past the packet).
    #[error("bad IPv6 extension header chain")]
    BadIpv6Chain,
    /// TCP data offset below 5 or past the segment.
    #[error("bad TCP data offset")]
    BadTcpOffset,
    /// A TCP option whose length runs past the options area.
    #[error("bad TCP option")]
    BadTcpOption,
}

/// Result of reading a header.
pub type Result<T> = core::result::Result<T, Error>;

/// A byte range inside a header, as smoltcp spells it.
pub(crate) type Field = core::ops::Range<usize>;

/// The big-endian `u16` at `at`, if `b` holds it: the one reader of a
/// 16-bit header field for every crate (the views use it on buffers they
/// checked; IP input, GRO and NAPI on raw frames).
#[inline(always)]
pub fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
