//! Multicast membership options as a program passes them: `ip_mreq`,
//! `ip_mreqn`, `ip_mreq_source`, `ipv6_mreq`, `group_req` and
//! `group_source_req`, read from their bytes (the kernel took them
//! first), and the interface each names.

use rxpath_core::ip::mcast::Change;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `IP_MULTICAST_ALL`, `IPV6_MULTICAST_ALL` (linux/in.h, linux/in6.h).
pub(crate) const IP_MULTICAST_ALL: i32 = 49;
pub(crate) const IPV6_MULTICAST_ALL: i32 = 29;
/// The protocol-independent API (RFC 3678), at either IP level.
const MCAST_JOIN_GROUP: i32 = 42;
const MCAST_BLOCK_SOURCE: i32 = 43;
const MCAST_UNBLOCK_SOURCE: i32 = 44;
const MCAST_LEAVE_GROUP: i32 = 45;
const MCAST_JOIN_SOURCE_GROUP: i32 = 46;
const MCAST_LEAVE_SOURCE_GROUP: i32 = 47;
/// Where `gr_group` starts in a `group_req` (after the interface index,
/// aligned as `sockaddr_storage` is), and its size.
const STORAGE_AT: usize = 8;
const STORAGE: usize = 128;

/// The interface a membership names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Iface {
    /// By index.
    Index(u32),
    /// By one of its IPv4 addresses (`ip_mreq`).
    Addr(IpAddr),
    /// Not named: the kernel picks the one its route to the group uses.
    Route,
}

/// One membership change a program asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Request {
    pub(crate) group: IpAddr,
    pub(crate) change: Change,
    pub(crate) iface: Iface,
}

/// Does option `name` at `level` change memberships (its value then
/// comes as bytes)?
pub(crate) fn is_membership(level: i32, name: i32) -> bool {
    let ip = level == libc::IPPROTO_IP
        && matches!(
            name,
            libc::IP_ADD_MEMBERSHIP
                | libc::IP_DROP_MEMBERSHIP
                | libc::IP_ADD_SOURCE_MEMBERSHIP
                | libc::IP_DROP_SOURCE_MEMBERSHIP
                | libc::IP_BLOCK_SOURCE
                | libc::IP_UNBLOCK_SOURCE
        );
    let v6 = level == libc::IPPROTO_IPV6
        && matches!(name, libc::IPV6_ADD_MEMBERSHIP | libc::IPV6_DROP_MEMBERSHIP);
    let any = (level == libc::IPPROTO_IP || level == libc::IPPROTO_IPV6)
        && (MCAST_JOIN_GROUP..=MCAST_LEAVE_SOURCE_GROUP).contains(&name);
    ip || v6 || any
}

fn v4(b: &[u8], at: usize) -> Option<IpAddr> {
    let o: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(IpAddr::V4(Ipv4Addr::from(o)))
}

fn v6(b: &[u8], at: usize) -> Option<IpAddr> {
    let o: [u8; 16] = b.get(at..at + 16)?.try_into().ok()?;
    Some(IpAddr::V6(Ipv6Addr::from(o)))
}

fn int(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The address in a `sockaddr_storage` at `at` (`sockaddr_in` or
/// `sockaddr_in6`).
fn storage(b: &[u8], at: usize) -> Option<IpAddr> {
    let family = u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?) as i32;
    match family {
        libc::AF_INET => v4(b, at + 4),
        libc::AF_INET6 => v6(b, at + 8),
        _ => None,
    }
}

/// An index, 0 meaning none.
fn index(i: u32) -> Iface {
    if i == 0 {
        Iface::Route
    } else {
        Iface::Index(i)
    }
}

/// An `ip_mreq`'s interface address, 0.0.0.0 meaning none.
fn by_addr(a: IpAddr) -> Iface {
    if a.is_unspecified() {
        Iface::Route
    } else {
        Iface::Addr(a)
    }
}

/// Read a membership option's value, as the kernel reads it
/// (`do_ip_setsockopt()`, `do_ipv6_setsockopt()`); `None` if it is not
/// one or is too short.
pub(crate) fn parse(level: i32, name: i32, b: &[u8]) -> Option<Request> {
    let req = |group, change, iface| {
        Some(Request {
            group,
            change,
            iface,
        })
    };
    match (level, name) {
        (libc::IPPROTO_IP, libc::IP_ADD_MEMBERSHIP | libc::IP_DROP_MEMBERSHIP) => {
            let change = if name == libc::IP_ADD_MEMBERSHIP {
                Change::Join
            } else {
                Change::Leave
            };
            // An `ip_mreqn` if long enough (its index wins), else an
            // `ip_mreq`.
            let iface = match int(b, 8) {
                Some(i) if i != 0 => Iface::Index(i),
                _ => by_addr(v4(b, 4)?),
            };
            req(v4(b, 0)?, change, iface)
        }
        (libc::IPPROTO_IP, _) if (37..=40).contains(&name) => {
            // `ip_mreq_source`: group, interface address, source.
            let s = v4(b, 8)?;
            let change = match name {
                libc::IP_ADD_SOURCE_MEMBERSHIP => Change::AddSource(s),
                libc::IP_DROP_SOURCE_MEMBERSHIP => Change::DropSource(s),
                libc::IP_BLOCK_SOURCE => Change::Block(s),
                _ => Change::Unblock(s),
            };
            req(v4(b, 0)?, change, by_addr(v4(b, 4)?))
        }
        (libc::IPPROTO_IPV6, libc::IPV6_ADD_MEMBERSHIP | libc::IPV6_DROP_MEMBERSHIP) => {
            let change = if name == libc::IPV6_ADD_MEMBERSHIP {
                Change::Join
            } else {
                Change::Leave
            };
            req(v6(b, 0)?, change, index(int(b, 16)?))
        }
        (_, MCAST_JOIN_GROUP | MCAST_LEAVE_GROUP) => {
            let change = if name == MCAST_JOIN_GROUP {
                Change::Join
            } else {
                Change::Leave
            };
            req(storage(b, STORAGE_AT)?, change, index(int(b, 0)?))
        }
        (_, MCAST_BLOCK_SOURCE..=MCAST_LEAVE_SOURCE_GROUP) => {
            let s = storage(b, STORAGE_AT + STORAGE)?;
            let change = match name {
                MCAST_JOIN_SOURCE_GROUP => Change::AddSource(s),
                MCAST_LEAVE_SOURCE_GROUP => Change::DropSource(s),
                MCAST_BLOCK_SOURCE => Change::Block(s),
                MCAST_UNBLOCK_SOURCE => Change::Unblock(s),
                _ => return None,
            };
            req(storage(b, STORAGE_AT)?, change, index(int(b, 0)?))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_structs_read_as_the_kernel_reads_them() {
        let mut mreq = vec![239, 1, 2, 3, 198, 18, 0, 1];
        let r = parse(libc::IPPROTO_IP, libc::IP_ADD_MEMBERSHIP, &mreq).unwrap();
        assert_eq!(r.group, ip("239.1.2.3"));
        assert_eq!(r.change, Change::Join);
        assert_eq!(r.iface, Iface::Addr(ip("198.18.0.1")));
        mreq.extend(7u32.to_ne_bytes());
        let r = parse(libc::IPPROTO_IP, libc::IP_DROP_MEMBERSHIP, &mreq).unwrap();
        assert_eq!((r.change, r.iface), (Change::Leave, Iface::Index(7)));
        let src = [232, 0, 0, 9, 0, 0, 0, 0, 198, 18, 0, 2];
        let r = parse(libc::IPPROTO_IP, libc::IP_ADD_SOURCE_MEMBERSHIP, &src).unwrap();
        assert_eq!(r.change, Change::AddSource(ip("198.18.0.2")));
        assert_eq!(r.iface, Iface::Route);
        let r = parse(libc::IPPROTO_IP, libc::IP_UNBLOCK_SOURCE, &src).unwrap();
        assert_eq!(r.change, Change::Unblock(ip("198.18.0.2")));
        let mut m6 = ip6("ff05::1:3");
        m6.extend(3u32.to_ne_bytes());
        let r = parse(libc::IPPROTO_IPV6, libc::IPV6_ADD_MEMBERSHIP, &m6).unwrap();
        assert_eq!((r.group, r.iface), (ip("ff05::1:3"), Iface::Index(3)));
        assert!(parse(libc::IPPROTO_IP, libc::IP_ADD_MEMBERSHIP, &[239, 1]).is_none());
    }

    fn ip6(s: &str) -> Vec<u8> {
        s.parse::<Ipv6Addr>().unwrap().octets().to_vec()
    }

    #[test]
    fn group_source_req_holds_two_storages() {
        let mut b = vec![0u8; STORAGE_AT + 2 * STORAGE];
        b[..4].copy_from_slice(&5u32.to_ne_bytes());
        let fam = (libc::AF_INET6 as u16).to_ne_bytes();
        b[STORAGE_AT..STORAGE_AT + 2].copy_from_slice(&fam);
        b[STORAGE_AT + 8..STORAGE_AT + 24].copy_from_slice(&ip6("ff3e::8000:1"));
        let s = STORAGE_AT + STORAGE;
        b[s..s + 2].copy_from_slice(&fam);
        b[s + 8..s + 24].copy_from_slice(&ip6("2001:2::2"));
        assert!(is_membership(libc::IPPROTO_IPV6, MCAST_JOIN_SOURCE_GROUP));
        let r = parse(libc::IPPROTO_IPV6, MCAST_JOIN_SOURCE_GROUP, &b).unwrap();
        assert_eq!(r.group, ip("ff3e::8000:1"));
        assert_eq!(r.change, Change::AddSource(ip("2001:2::2")));
        assert_eq!(r.iface, Iface::Index(5));
        let r = parse(
            libc::IPPROTO_IP,
            MCAST_LEAVE_GROUP,
            &b[..STORAGE_AT + STORAGE],
        )
        .unwrap();
        assert_eq!(r.change, Change::Leave);
    }
}
