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
//! `local_ip=ADDR`: the addresses `connect` may leave from (the script's
//! `--local_ip`).

pub mod abi;
pub mod world;

use std::net::IpAddr;

/// The local addresses in `so_flags`, or packetdrill's defaults for
/// IPv4 and IPv6 when none are given.
pub fn parse_flags(flags: &str) -> Result<Vec<IpAddr>, String> {
    let mut addrs = Vec::new();
    for part in flags.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('=') {
            Some(("local_ip", v)) => addrs.push(
                v.parse()
                    .map_err(|_| format!("so_flags: bad address {v:?}"))?,
            ),
            _ => {
                return Err(format!(
                    "so_flags: unknown flag {part:?} (known: local_ip=ADDR)"
                ))
            }
        }
    }
    if addrs.is_empty() {
        addrs = vec![
            "192.168.0.1".parse().expect("literal"),
            "fd3d:fa7b:d17d::1".parse().expect("literal"),
        ];
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_name_the_local_addresses_or_say_what_is_wrong() {
        assert_eq!(
            parse_flags("local_ip=192.168.7.9").unwrap(),
            vec!["192.168.7.9".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(parse_flags("").unwrap().len(), 2);
        assert!(parse_flags("local_ip=nope").unwrap_err().contains("nope"));
        assert!(parse_flags("speed=9").unwrap_err().contains("speed"));
    }
}
