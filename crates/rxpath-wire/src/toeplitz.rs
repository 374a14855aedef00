//! The Toeplitz hash, as NICs compute it for RSS.
//!
//! For each set bit of the input (most significant bit of the first byte
//! first), XOR in the 32 key bits starting at that bit position. The input is
//! source address, destination address, then (for the 4-tuple variant) source
//! and destination port, all in network order: the layout of Microsoft's RSS
//! specification, which every NIC and the kernel's `ethtool -X` use.
//!
//! [`Toeplitz`] precomputes one 256-entry table per input byte, so hashing a
//! 36-byte IPv6 4-tuple is 36 table lookups.

use crate::flow::{FlowKey, IpAddrs};

/// The 40-byte default key of the RSS specification (and of many drivers).
pub const MICROSOFT_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// The longest input we hash: IPv6 source + destination + two ports.
pub const MAX_INPUT: usize = 36;

/// Reference bit-by-bit Toeplitz over `input` with `key` (key must be at least
/// `input.len() + 4` bytes). Slow; the tables in [`Toeplitz`] are checked
/// against it.
pub fn hash_reference(key: &[u8], input: &[u8]) -> u32 {
    let mut result = 0u32;
    let mut window = u32::from_be_bytes([key[0], key[1], key[2], key[3]]);
    for (i, &byte) in input.iter().enumerate() {
        let next = key.get(i + 4).copied().unwrap_or(0);
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                result ^= window;
            }
            window = (window << 1) | ((next >> (7 - bit)) & 1) as u32;
        }
    }
    result
}

/// A Toeplitz hasher with per-byte lookup tables for one key.
#[derive(Clone)]
pub struct Toeplitz {
    tables: Box<[[u32; 256]; MAX_INPUT]>,
}

impl std::fmt::Debug for Toeplitz {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Toeplitz { .. }")
    }
}

impl Default for Toeplitz {
    fn default() -> Self {
        Self::new(&MICROSOFT_KEY)
    }
}

impl Toeplitz {
    /// Build the tables for a 40-byte key.
    pub fn new(key: &[u8; 40]) -> Self {
        let mut tables = Box::new([[0u32; 256]; MAX_INPUT]);
        for (pos, table) in tables.iter_mut().enumerate() {
            // The 32-bit key windows for the 8 bits of byte `pos`.
            let mut windows = [0u32; 8];
            for (bit, w) in windows.iter_mut().enumerate() {
                let start = pos * 8 + bit;
                let mut v = 0u32;
                for k in 0..32 {
                    let b = start + k;
                    let kb = (key[b / 8] >> (7 - b % 8)) & 1;
                    v = (v << 1) | kb as u32;
                }
                *w = v;
            }
            for (value, slot) in table.iter_mut().enumerate() {
                let mut h = 0;
                for (bit, w) in windows.iter().enumerate() {
                    if value & (0x80 >> bit) != 0 {
                        h ^= w;
                    }
                }
                *slot = h;
            }
        }
        Toeplitz { tables }
    }

    /// Hash up to [`MAX_INPUT`] bytes (longer input is cut).
    #[inline]
    pub fn hash(&self, input: &[u8]) -> u32 {
        input
            .iter()
            .zip(self.tables.iter())
            .fold(0, |h, (&b, t)| h ^ t[b as usize])
    }

    /// RSS hash of a flow: 4-tuple (addresses and ports) when `with_ports`,
    /// else the 2-tuple. Ports are only meaningful for TCP and UDP.
    pub fn hash_flow(&self, key: &FlowKey, with_ports: bool) -> u32 {
        let mut buf = [0u8; MAX_INPUT];
        let n = rss_input(key, with_ports, &mut buf);
        self.hash(&buf[..n])
    }
}

/// Lay out the RSS input for a flow into `buf`; returns its length.
pub fn rss_input(key: &FlowKey, with_ports: bool, buf: &mut [u8; MAX_INPUT]) -> usize {
    let mut n = match key.addrs {
        IpAddrs::V4 { src, dst } => {
            buf[..4].copy_from_slice(&src);
            buf[4..8].copy_from_slice(&dst);
            8
        }
        IpAddrs::V6 { src, dst } => {
            buf[..16].copy_from_slice(&src);
            buf[16..32].copy_from_slice(&dst);
            32
        }
    };
    if with_ports {
        buf[n..n + 2].copy_from_slice(&key.src_port.to_be_bytes());
        buf[n + 2..n + 4].copy_from_slice(&key.dst_port.to_be_bytes());
        n += 4;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv4::protocol::TCP;
    use std::net::IpAddr;

    /// Microsoft, "Verifying the RSS Hash Calculation": destination, source,
    /// 2-tuple hash, 4-tuple (TCP) hash.
    const V4: [(&str, u16, &str, u16, u32, u32); 5] = [
        (
            "161.142.100.80",
            1766,
            "66.9.149.187",
            2794,
            0x323e8fc2,
            0x51ccc178,
        ),
        (
            "65.69.140.83",
            4739,
            "199.92.111.2",
            14230,
            0xd718262a,
            0xc626b0ea,
        ),
        (
            "12.22.207.184",
            38024,
            "24.19.198.95",
            12898,
            0xd2d0a5de,
            0x5c2b394a,
        ),
        (
            "209.142.163.6",
            2217,
            "38.27.205.30",
            48228,
            0x82989176,
            0xafc7327f,
        ),
        (
            "202.188.127.2",
            1303,
            "153.39.163.191",
            44251,
            0x5d1809c5,
            0x10e828a2,
        ),
    ];
    const V6: [(&str, u16, &str, u16, u32, u32); 3] = [
        (
            "3ffe:2501:200:3::1",
            1766,
            "3ffe:2501:200:1fff::7",
            2794,
            0x2cc18cd5,
            0x40207d3d,
        ),
        (
            "ff02::1",
            4739,
            "3ffe:501:8::260:97ff:fe40:efab",
            14230,
            0x0f0c461c,
            0xdde51bbf,
        ),
        (
            "fe80::200:f8ff:fe21:67cf",
            38024,
            "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
            44251,
            0x4b61e985,
            0x02d1feef,
        ),
    ];

    fn check(vectors: &[(&str, u16, &str, u16, u32, u32)]) {
        let t = Toeplitz::default();
        for &(dst, dport, src, sport, two, four) in vectors {
            let src: IpAddr = src.parse().unwrap();
            let dst: IpAddr = dst.parse().unwrap();
            let key = FlowKey::new(src, dst, sport, dport, TCP);
            assert_eq!(t.hash_flow(&key, false), two, "2-tuple {src} -> {dst}");
            assert_eq!(t.hash_flow(&key, true), four, "4-tuple {src} -> {dst}");
            let mut buf = [0; MAX_INPUT];
            let n = rss_input(&key, true, &mut buf);
            assert_eq!(hash_reference(&MICROSOFT_KEY, &buf[..n]), four);
        }
    }

    #[test]
    fn microsoft_ipv4_vectors() {
        check(&V4);
    }

    #[test]
    fn microsoft_ipv6_vectors() {
        check(&V6);
    }
}
