//! IP and UDP input (`ip_rcv_core`, `ipv6_rcv`, `udp_rcv`) on arbitrary
//! frames under every checksum status and a few host shapes: never a panic;
//! a datagram handed up lies inside the frame; every drop is counted in an
//! SNMP counter or names a reason.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rxpath_core::ip::Snmp;
use rxpath_core::ip::{self, CsumPolicy, CsumStatus, IpConfig};

fuzz_target!(|input: (u8, &[u8])| {
    let (shape, frame) = input;
    let csum = match shape & 3 {
        0 => CsumStatus::None,
        1 => CsumStatus::Unnecessary,
        _ => CsumStatus::Partial,
    };
    let mut cfg = IpConfig {
        mac: [0x02, 0, 0, 0, 0, 2],
        any_l2: shape & 4 != 0,
        local_traffic: shape & 8 != 0,
        deliver_all: shape & 16 != 0,
        csum: match (shape >> 5) & 3 {
            0 => CsumPolicy::Auto,
            1 => CsumPolicy::Verify,
            _ => CsumPolicy::Trust,
        },
        ..IpConfig::default()
    };
    if shape & 128 != 0 {
        cfg.addrs = vec!["198.18.0.2".parse().unwrap(), "2001:2::2".parse().unwrap()];
        cfg.prefixes = vec![("198.18.0.0".parse().unwrap(), 15)];
    }
    let mut snmp = Snmp::default();
    match ip::input(frame, csum, &cfg, &mut snmp) {
        Ok(d) => {
            assert!(
                d.payload_off + d.payload_len <= frame.len(),
                "datagram past the frame: {d:?}, {} bytes",
                frame.len()
            );
            assert_eq!(d.src.is_ipv4(), d.dst.is_ipv4());
        }
        Err(reason) => {
            let _ = reason.name();
        }
    }
    let mut snmp = Snmp::default();
    let _ = ip::input_any(frame, csum, &cfg, &mut snmp);
});
