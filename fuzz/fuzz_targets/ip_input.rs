//! IP and UDP input (`ip_rcv_core`, `ipv6_rcv`, `udp_rcv`) on arbitrary
//! frames under every checksum status and a few host shapes: never a panic;
//! a datagram handed up lies inside the frame and counts one `InDelivers`;
//! every drop is counted: its reason's SNMP counter (or rxpath's own, for
//! what the kernel counts nowhere) grows.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rxpath_core::ip::Snmp;
use rxpath_core::ip::{self, CsumPolicy, CsumStatus, IpConfig};
use rxpath_core::stats::DropReason;

/// The counters (section, name) that a drop for `r` counts in: at least
/// one of them grows.
fn counters_of(r: DropReason) -> &'static [(&'static str, &'static str)] {
    match r {
        DropReason::Malformed => &[
            ("Ip", "InHdrErrors"),
            ("Ip6", "InHdrErrors"),
            ("IpExt", "InTruncatedPkts"),
            ("Ip6", "InTruncatedPkts"),
            ("Udp", "InErrors"),
            ("Udp6", "InErrors"),
            ("Rxpath", "NotIp"),
        ],
        DropReason::IpHeader => &[
            ("Ip", "InHdrErrors"),
            ("Ip6", "InHdrErrors"),
            ("Rxpath", "SourceRoute"),
        ],
        DropReason::NotForUs => &[
            ("Ip", "InAddrErrors"),
            ("Ip6", "InAddrErrors"),
            ("Ip6", "InNoRoutes"),
            ("Rxpath", "Otherhost"),
            ("Rxpath", "VlanOtherhost"),
            ("Rxpath", "MartianSource"),
            ("Rxpath", "SourceRoute"),
        ],
        DropReason::Fragment => &[("Ip", "ReasmFails"), ("Ip6", "ReasmFails")],
        // IPv6's "no next header" is delivered to a handler that discards
        // (InDelivers), as the kernel does; so is, under `deliver_all`, a
        // protocol other than UDP that `ip::input` (UDP's entry) was given.
        DropReason::UnhandledProto => &[
            ("Ip", "InDelivers"),
            ("Ip6", "InDelivers"),
            ("Ip", "InUnknownProtos"),
            ("Ip6", "InUnknownProtos"),
            ("Rxpath", "LeftToKernel"),
            ("Rxpath", "NotIp"),
        ],
        DropReason::BadChecksum => &[("Udp", "InCsumErrors"), ("Udp6", "InCsumErrors")],
        // Not IP input's to give.
        _ => &[],
    }
}

/// The frame ends inside its Ethernet header or VLAN tags: it never reaches
/// IP (the kernel's drivers count such runts as `rx_length_errors`, in no
/// SNMP counter); rxpath counts it as the NAPI's `malformed` drop.
fn l2_truncated(frame: &[u8]) -> bool {
    let mut off = 12;
    loop {
        let Some(t) = frame.get(off..off + 2) else {
            return true;
        };
        if !matches!(u16::from_be_bytes([t[0], t[1]]), 0x8100 | 0x88a8) {
            return false;
        }
        if frame.len() < off + 6 {
            return true;
        }
        off += 4;
    }
}

fn counter(s: &Snmp, sec: &str, name: &str) -> u64 {
    s.sections()
        .into_iter()
        .find(|(x, _)| *x == sec)
        .and_then(|(_, rows)| rows.into_iter().find(|(n, _)| *n == name))
        .map_or(0, |(_, v)| v)
}

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
            let sec = if d.dst.is_ipv4() { "Ip" } else { "Ip6" };
            assert_eq!(
                counter(&snmp, sec, "InDelivers"),
                1,
                "{sec} InDelivers: {snmp:?}"
            );
            assert!(
                d.payload_off + d.payload_len <= frame.len(),
                "datagram past the frame: {d:?}, {} bytes",
                frame.len()
            );
            assert_eq!(d.src.is_ipv4(), d.dst.is_ipv4());
        }
        Err(reason) => {
            let grown: Vec<_> = counters_of(reason)
                .iter()
                .filter(|(sec, name)| counter(&snmp, sec, name) > 0)
                .collect();
            let runt = reason == DropReason::Malformed && l2_truncated(frame);
            assert!(
                !grown.is_empty() || runt,
                "drop {} counted in none of {:?}: {snmp:?}",
                reason.name(),
                counters_of(reason)
            );
        }
    }
    let mut snmp = Snmp::default();
    let _ = ip::input_any(frame, csum, &cfg, &mut snmp);
});
