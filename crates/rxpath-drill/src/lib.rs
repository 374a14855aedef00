//! rxpath's TCP behind packetdrill's shared-object interface.
//!
//! `packetdrill --so_filename=librxpath_drill.so script.pkt` loads this
//! library, calls [`abi::packetdrill_interface_init`], and from then on
//! makes every socket call of the script through it and exchanges the
//! script's packets with it (`netdev_send`, `netdev_receive`): the same
//! scripts that judge the kernel judge rxpath's TCP, in virtual time
//! ([`world`]). packetdrill itself (GPL-2.0) stays a separate program: this
//! crate implements its documented interface and never links it.
//!
//! `so_flags` (packetdrill's `--so_flags`) is a comma-separated list of
//! `local_ip=ADDR` (the addresses `connect` may leave from: the run's
//! `--local_ip`) and `mtu=N` (the run's `--mtu`); what they leave out is
//! taken from `PACKETDRILL_LOCAL_IP` and `PACKETDRILL_MTU`, which
//! `scripts/packetdrill-suites.sh` sets for each run.

#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

#[allow(unsafe_code)]
pub mod abi;
pub mod metrics;
pub mod world;

use std::net::IpAddr;

/// `so_flags` completed from the environment
/// `scripts/packetdrill-suites.sh` gives a run (`PACKETDRILL_LOCAL_IP`,
/// `PACKETDRILL_MTU`) where the flags do not say.
pub fn with_env_defaults(flags: &str) -> String {
    let mut out = flags.to_string();
    let mut add = |key: &str, var: &str| {
        if !flags.split(',').any(|p| p.trim().starts_with(key)) {
            if let Ok(v) = std::env::var(var) {
                if !out.is_empty() {
                    out.push(',');
                }
                out.push_str(&format!("{key}={v}"));
            }
        }
    };
    add("local_ip", "PACKETDRILL_LOCAL_IP");
    add("mtu", "PACKETDRILL_MTU");
    out
}

/// What `so_flags` sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flags {
    /// The addresses `connect` may leave from.
    pub local_addrs: Vec<IpAddr>,
    /// The device MTU (packetdrill's `--mtu`; 1500 by default).
    pub mtu: u32,
}

/// Parse `so_flags`: `local_ip=ADDR` (repeatable) and `mtu=N`, comma
/// separated. Without a `local_ip`, packetdrill's IPv4 and IPv6 defaults.
pub fn parse_flags(flags: &str) -> Result<Flags, String> {
    let mut f = Flags {
        local_addrs: Vec::new(),
        mtu: 1500,
    };
    for part in flags.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('=') {
            Some(("local_ip", v)) => f.local_addrs.push(
                v.parse()
                    .map_err(|_| format!("so_flags: bad address {v:?}"))?,
            ),
            Some(("mtu", v)) => {
                f.mtu = v
                    .parse()
                    .ok()
                    .filter(|m| (576..=65535).contains(m))
                    .ok_or_else(|| format!("so_flags: bad mtu {v:?}"))?
            }
            _ => {
                return Err(format!(
                    "so_flags: unknown flag {part:?} (known: local_ip=ADDR, mtu=N)"
                ))
            }
        }
    }
    if f.local_addrs.is_empty() {
        f.local_addrs = vec![
            "198.18.0.1".parse().expect("literal"),
            "fd3d:fa7b:d17d::1".parse().expect("literal"),
        ];
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_name_the_local_addresses_and_mtu_or_say_what_is_wrong() {
        let f = parse_flags("local_ip=198.18.7.9,mtu=1520").unwrap();
        assert_eq!(f.local_addrs, vec!["198.18.7.9".parse::<IpAddr>().unwrap()]);
        assert_eq!(f.mtu, 1520);
        assert_eq!(parse_flags("").unwrap().local_addrs.len(), 2);
        assert_eq!(parse_flags("").unwrap().mtu, 1500);
        assert!(parse_flags("local_ip=nope").unwrap_err().contains("nope"));
        assert!(parse_flags("mtu=9").unwrap_err().contains("mtu"));
        assert!(parse_flags("speed=9").unwrap_err().contains("speed"));
    }
}
