//! The Internet checksum (RFC 1071), with pseudo-headers for TCP and UDP.

use std::net::IpAddr;

/// One's-complement sum of `data` as big-endian 16-bit words, folded to
/// 16 bits (not complemented).
///
/// Sums the data as native-endian 32-bit words into a 64-bit accumulator,
/// which cannot overflow below 16 GiB, with no carry chain between the
/// additions (the compiler turns the loop into vector adds), then folds:
/// `a·2¹⁶ + b ≡ a + b (mod 2¹⁶ − 1)`, so the folded result is the sum of
/// the 16-bit words in the machine's byte order, and the one's-complement
/// sum of byte-swapped words is the byte-swapped sum (RFC 1071 §2(B)): one
/// swap at the end makes it the big-endian sum. The last 1-3 bytes are
/// zero-padded on the right, as RFC 1071 pads an odd byte. Inlined: IP
/// input sums every IPv4 header.
#[inline]
pub fn sum(data: &[u8]) -> u32 {
    let mut words = data.chunks_exact(4);
    let mut acc: u64 = 0;
    for w in &mut words {
        acc += u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) as u64;
    }
    let r = words.remainder();
    let mut tail = [0u8; 4];
    tail[..r.len()].copy_from_slice(r);
    acc += u32::from_ne_bytes(tail) as u64;
    let mut s = (acc & 0xffff_ffff) + (acc >> 32);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    u16::from_be(s as u16) as u32
}

/// Fold a 32-bit sum to 16 bits (not complemented).
pub fn fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// Sum of the TCP/UDP pseudo-header for `src → dst`, protocol and L4 length.
pub fn pseudo_header(src: IpAddr, dst: IpAddr, protocol: u8, l4_len: u32) -> u32 {
    let mut s: u64 = protocol as u64 + (l4_len >> 16) as u64 + (l4_len & 0xffff) as u64;
    let mut add = |b: &[u8]| s += sum(b) as u64;
    match (src, dst) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            add(&a.octets());
            add(&b.octets());
        }
        (a, b) => {
            add(&to_v6(a));
            add(&to_v6(b));
        }
    }
    fold((s & 0xffff_ffff) as u32 + (s >> 32) as u32) as u32
}

fn to_v6(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// Checksum of an L4 segment (header + payload) with its pseudo-header:
/// the value to store in the checksum field when the field is zero, or `0`
/// when verifying a segment whose field is filled in and correct.
pub fn l4(src: IpAddr, dst: IpAddr, protocol: u8, segment: &[u8]) -> u16 {
    let s = pseudo_header(src, dst, protocol, segment.len() as u32) as u64 + sum(segment) as u64;
    !fold((s & 0xffff_ffff) as u32 + (s >> 32) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 16-bit-word sum of RFC 1071, folded: what `sum` must equal.
    fn reference(data: &[u8]) -> u16 {
        let mut acc: u64 = 0;
        for c in data.chunks(2) {
            acc += ((c[0] as u64) << 8) | c.get(1).map_or(0, |&b| b as u64);
        }
        while acc >> 16 != 0 {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    #[test]
    fn word_sums_fold_to_the_16_bit_sum_at_every_length() {
        let mut x: u32 = 0x2545_f491;
        for len in 0..300 {
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    // Runs of 0xff bytes exercise the carries.
                    if x.is_multiple_of(5) {
                        0xff
                    } else {
                        x as u8
                    }
                })
                .collect();
            assert_eq!(fold(sum(&data)), reference(&data), "length {len}");
        }
        assert_eq!(fold(sum(&[0xff; 64])), reference(&[0xff; 64]));
        let big: Vec<u8> = (0..70_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in [1472, 9000, 65_535, 70_000] {
            assert_eq!(
                fold(sum(&big[..len])),
                reference(&big[..len]),
                "length {len}"
            );
        }
        assert_eq!(fold(sum(&[0; 7])), 0);
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&d)), 0xddf2);
        assert_eq!(fold(sum(&[0xab])), 0xab00);
    }
}
