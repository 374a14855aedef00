//! A fast software flow hash for steering.
//!
//! The kernel computes `skb->hash` in software with siphash over the flow
//! dissector's keys when the NIC gave none. For steering inside one process
//! we need no keyed secrecy, only speed and good low bits (the steering
//! stages take `hash % workers` and `hash & mask`), so this is a
//! multiply-xorshift mix of the key words, in the style of rustc's FxHash
//! finished with a murmur3 avalanche. It is symmetric in nothing and stable
//! within a build.

use crate::flow::{FlowKey, IpAddrs};

const K: u64 = 0x9e37_79b9_7f4a_7c15;

#[inline]
fn mix(h: u64, w: u64) -> u64 {
    (h.rotate_left(5) ^ w).wrapping_mul(K)
}

#[inline]
fn avalanche(mut h: u64) -> u32 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h as u32
}

/// Software flow hash of a 5-tuple; never 0 (0 means "no hash", as in the
/// kernel's `skb->hash`).
#[inline]
pub fn flow_hash(key: &FlowKey) -> u32 {
    let ports = ((key.src_port as u64) << 16 | key.dst_port as u64) << 8 | key.protocol as u64;
    let h = match key.addrs {
        IpAddrs::V4 { src, dst } => {
            let a = (u32::from_ne_bytes(src) as u64) << 32 | u32::from_ne_bytes(dst) as u64;
            mix(mix(0, a), ports)
        }
        IpAddrs::V6 { src, dst } => {
            let w = |b: &[u8; 16], i: usize| {
                u64::from_ne_bytes([
                    b[i],
                    b[i + 1],
                    b[i + 2],
                    b[i + 3],
                    b[i + 4],
                    b[i + 5],
                    b[i + 6],
                    b[i + 7],
                ])
            };
            let h = mix(mix(0, w(&src, 0)), w(&src, 8));
            mix(mix(mix(h, w(&dst, 0)), w(&dst, 8)), ports)
        }
    };
    avalanche(h).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::net::Ipv4Addr;

    #[test]
    fn spreads_ports_and_is_never_zero() {
        let mut buckets = [0u32; 16];
        let mut seen = HashSet::new();
        for p in 0..4096u16 {
            let k = FlowKey::new(
                Ipv4Addr::new(198, 18, 0, 1).into(),
                Ipv4Addr::new(198, 18, 0, 2).into(),
                1024 + p,
                9,
                17,
            );
            let h = flow_hash(&k);
            assert_ne!(h, 0);
            seen.insert(h);
            buckets[(h & 15) as usize] += 1;
        }
        assert_eq!(seen.len(), 4096, "collisions among 4096 ports");
        // 256 expected per bucket; a good mix stays well inside ±30%.
        assert!(
            buckets.iter().all(|&b| (180..=330).contains(&b)),
            "{buckets:?}"
        );
    }
}
