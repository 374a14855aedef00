//! Multicast group memberships: which groups the interface takes, and
//! with which source filters each socket joined them.
//!
//! The kernel keeps two views of one set of joins. The interface's
//! (`ip_check_mc_rcu()`, `ipv6_chk_mcast_addr()`) decides whether IP input
//! takes a datagram sent to a group at all: some socket joined it, and
//! its source passes the union of the members' filters (RFC 3376's merge:
//! a source passes if one member includes it or one excluding member does
//! not name it). The socket's (`ip_mc_sf_allow()`, `inet6_mc_check()`)
//! decides, for each socket on the port, whether it gets a copy: its own
//! filter if it joined the group, else `IP_MULTICAST_ALL` (on by default:
//! any group some socket joined).
//!
//! Here the interface's view is the union of this host's sockets' joins
//! (the all-hosts groups always in it); joins by other processes on the
//! same interface are the kernel's and unknown to rxpath. A join here is
//! one on the interface rxpath serves.

use rxpath_frames::sync::{read_lock, write_lock};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::RwLock;

/// `net.ipv4.igmp_max_memberships`: groups one socket may join (IPv4).
pub const MAX_MEMBERSHIPS: usize = 20;
/// `net.ipv4.igmp_max_msf` / `net.ipv6.mld_max_msf`: sources in one
/// socket's filter for one group.
pub const MAX_SOURCES: usize = 10;

/// A filter's mode (`MCAST_INCLUDE` / `MCAST_EXCLUDE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Only the sources listed (source-specific joins).
    Include,
    /// Every source but those listed (a plain join: nothing listed).
    Exclude,
}

/// One socket's filter for one group.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Filter {
    sock: u64,
    mode: Mode,
    sources: Vec<IpAddr>,
}

impl Filter {
    fn allows(&self, src: IpAddr) -> bool {
        self.sources.contains(&src) == (self.mode == Mode::Include)
    }
}

/// Why a membership change was refused, as the kernel refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum McastError {
    /// Not a multicast address, or a source change in the other mode
    /// (`EINVAL`).
    #[error("not a multicast group, or a filter of the other mode")]
    Invalid,
    /// Joined already (`EADDRINUSE`).
    #[error("already a member of the group")]
    Joined,
    /// Not a member, or the source is not in the filter
    /// (`EADDRNOTAVAIL`).
    #[error("not a member of the group, or the source is not listed")]
    NotJoined,
    /// Past [`MAX_MEMBERSHIPS`] or [`MAX_SOURCES`] (`ENOBUFS`).
    #[error("too many groups or sources on one socket")]
    TooMany,
}

/// A change to one socket's memberships (the socket options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// `IP_ADD_MEMBERSHIP`, `IPV6_JOIN_GROUP`, `MCAST_JOIN_GROUP`.
    Join,
    /// `IP_DROP_MEMBERSHIP`, `IPV6_LEAVE_GROUP`, `MCAST_LEAVE_GROUP`.
    Leave,
    /// `IP_ADD_SOURCE_MEMBERSHIP`, `MCAST_JOIN_SOURCE_GROUP`.
    AddSource(IpAddr),
    /// `IP_DROP_SOURCE_MEMBERSHIP`, `MCAST_LEAVE_SOURCE_GROUP` (the last
    /// source leaves the group).
    DropSource(IpAddr),
    /// `IP_BLOCK_SOURCE`, `MCAST_BLOCK_SOURCE`.
    Block(IpAddr),
    /// `IP_UNBLOCK_SOURCE`, `MCAST_UNBLOCK_SOURCE`.
    Unblock(IpAddr),
}

/// The groups joined on the interface, per group the members' filters.
#[derive(Debug, Default)]
pub struct Memberships {
    groups: RwLock<HashMap<IpAddr, Vec<Filter>>>,
}

/// The groups every host is in (224.0.0.1, ff02::1).
fn all_hosts(group: IpAddr) -> bool {
    match group {
        IpAddr::V4(a) => a == Ipv4Addr::new(224, 0, 0, 1),
        IpAddr::V6(a) => a == Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1),
    }
}

impl Memberships {
    /// Does the interface take a datagram from `src` to `group`
    /// (`ip_check_mc_rcu()` for UDP, `ipv6_chk_mcast_addr()`)?
    pub fn host_allows(&self, group: IpAddr, src: IpAddr) -> bool {
        if all_hosts(group) {
            return true;
        }
        let g = read_lock(&self.groups);
        g.get(&group)
            .is_some_and(|fs| src.is_unspecified() || fs.iter().any(|f| f.allows(src)))
    }

    /// Does socket `sock` get a copy of a datagram from `src` to `group`
    /// (`ip_mc_sf_allow()`, `inet6_mc_check()`)? `all`: its
    /// `IP_MULTICAST_ALL`, which decides for a group it did not join.
    pub fn sock_allows(&self, sock: u64, group: IpAddr, src: IpAddr, all: bool) -> bool {
        let g = read_lock(&self.groups);
        match g
            .get(&group)
            .and_then(|fs| fs.iter().find(|f| f.sock == sock))
        {
            Some(f) => f.allows(src),
            None => all,
        }
    }

    /// Groups the interface is in (the all-hosts groups aside).
    pub fn groups(&self) -> Vec<IpAddr> {
        let g = read_lock(&self.groups);
        let mut v: Vec<IpAddr> = g.keys().copied().collect();
        v.sort();
        v
    }

    /// Apply `change` to socket `sock`'s membership of `group`, as
    /// `ip_mc_join_group()`, `ip_mc_leave_group()` and `ip_mc_source()`
    /// do (their IPv6 twins alike).
    pub fn change(&self, sock: u64, group: IpAddr, change: Change) -> Result<(), McastError> {
        if !group.is_multicast() {
            return Err(McastError::Invalid);
        }
        let mut g = write_lock(&self.groups);
        let joined = g.values().filter(|fs| fs.iter().any(|f| f.sock == sock));
        let full = group.is_ipv4() && joined.count() >= MAX_MEMBERSHIPS;
        let fs = g.entry(group).or_default();
        let at = fs.iter().position(|f| f.sock == sock);
        let r = apply(fs, at, sock, change, full);
        if fs.is_empty() {
            g.remove(&group);
        }
        r
    }

    /// Socket `sock` closed: it leaves every group.
    pub fn leave_all(&self, sock: u64) {
        let mut g = write_lock(&self.groups);
        g.retain(|_, fs| {
            fs.retain(|f| f.sock != sock);
            !fs.is_empty()
        });
    }
}

/// One change to the filters of a group; `at`: the socket's, if it has
/// one; `full`: the socket may join no more groups.
fn apply(
    fs: &mut Vec<Filter>,
    at: Option<usize>,
    sock: u64,
    change: Change,
    full: bool,
) -> Result<(), McastError> {
    let new = |mode, sources| Filter {
        sock,
        mode,
        sources,
    };
    match (change, at) {
        (Change::Join, Some(_)) => Err(McastError::Joined),
        (Change::Join | Change::AddSource(_), None) if full => Err(McastError::TooMany),
        (Change::Join, None) => {
            fs.push(new(Mode::Exclude, Vec::new()));
            Ok(())
        }
        (Change::Leave, Some(i)) => {
            fs.remove(i);
            Ok(())
        }
        (Change::AddSource(s), None) => {
            fs.push(new(Mode::Include, vec![s]));
            Ok(())
        }
        // A filter of the other mode: an empty one switches
        // (`ip_mc_source()`: "allow mode switches for empty-set filters"),
        // one with sources refuses.
        (Change::AddSource(_) | Change::Block(_), Some(i)) if fs[i].mode != mode_of(change) => {
            if !fs[i].sources.is_empty() {
                return Err(McastError::Invalid);
            }
            fs[i].mode = mode_of(change);
            apply(fs, at, sock, change, full)
        }
        (Change::DropSource(_) | Change::Unblock(_), Some(i)) if fs[i].mode != mode_of(change) => {
            Err(if fs[i].sources.is_empty() {
                McastError::NotJoined
            } else {
                McastError::Invalid
            })
        }
        (Change::AddSource(s) | Change::Block(s), Some(i)) => {
            let f = &mut fs[i];
            if f.sources.contains(&s) {
                // Listed already: nothing changes (`ip_mc_source()`).
                return Ok(());
            }
            if f.sources.len() >= MAX_SOURCES {
                return Err(McastError::TooMany);
            }
            f.sources.push(s);
            Ok(())
        }
        (Change::DropSource(s) | Change::Unblock(s), Some(i)) => {
            let f = &mut fs[i];
            let j = f
                .sources
                .iter()
                .position(|&x| x == s)
                .ok_or(McastError::NotJoined)?;
            f.sources.remove(j);
            // The last source of an include filter leaves the group.
            if f.mode == Mode::Include && f.sources.is_empty() {
                fs.remove(i);
            }
            Ok(())
        }
        (Change::Leave, None) => Err(McastError::NotJoined),
        // A source change needs a prior join.
        (Change::DropSource(_) | Change::Block(_) | Change::Unblock(_), None) => {
            Err(McastError::Invalid)
        }
    }
}

/// The mode a source change works on.
fn mode_of(change: Change) -> Mode {
    match change {
        Change::AddSource(_) | Change::DropSource(_) => Mode::Include,
        _ => Mode::Exclude,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_plain_join_takes_every_source_and_a_leave_drops_the_group() {
        let m = Memberships::default();
        let g = ip("239.1.2.3");
        assert!(!m.host_allows(g, ip("198.18.0.2")));
        m.change(1, g, Change::Join).unwrap();
        assert!(m.host_allows(g, ip("198.18.0.2")));
        assert_eq!(m.change(1, g, Change::Join), Err(McastError::Joined));
        assert!(m.sock_allows(1, g, ip("198.18.0.2"), false));
        // Another socket: its IP_MULTICAST_ALL decides.
        assert!(m.sock_allows(2, g, ip("198.18.0.2"), true));
        assert!(!m.sock_allows(2, g, ip("198.18.0.2"), false));
        m.change(1, g, Change::Leave).unwrap();
        assert!(!m.host_allows(g, ip("198.18.0.2")));
        assert_eq!(m.change(1, g, Change::Leave), Err(McastError::NotJoined));
        assert!(m.groups().is_empty());
    }

    #[test]
    fn the_interface_takes_a_source_one_member_lets_through() {
        let m = Memberships::default();
        let g = ip("232.1.1.1");
        let (s1, s2, s3) = (ip("198.18.0.2"), ip("198.18.0.3"), ip("198.18.0.4"));
        m.change(1, g, Change::AddSource(s1)).unwrap();
        assert!(m.host_allows(g, s1));
        assert!(!m.host_allows(g, s2));
        // An excluding member lets through what it does not block.
        m.change(2, g, Change::Join).unwrap();
        m.change(2, g, Change::Block(s2)).unwrap();
        assert!(m.host_allows(g, s3));
        assert!(!m.host_allows(g, s2));
        assert!(m.sock_allows(1, g, s1, true));
        assert!(!m.sock_allows(1, g, s3, true));
        assert!(!m.sock_allows(2, g, s2, true));
        // Source changes of the other mode are refused, unless the
        // filter is empty (a plain join becomes a source-specific one).
        assert_eq!(m.change(1, g, Change::Block(s2)), Err(McastError::Invalid));
        m.change(4, g, Change::Join).unwrap();
        m.change(4, g, Change::AddSource(s3)).unwrap();
        assert!(!m.sock_allows(4, g, s1, true));
        assert_eq!(m.change(4, g, Change::Block(s1)), Err(McastError::Invalid));
        assert_eq!(m.change(5, g, Change::Block(s1)), Err(McastError::Invalid));
        m.leave_all(4);
        assert_eq!(
            m.change(2, g, Change::AddSource(s2)),
            Err(McastError::Invalid)
        );
        m.change(2, g, Change::Unblock(s2)).unwrap();
        assert!(m.host_allows(g, s2));
        // The last included source leaves the group.
        m.change(1, g, Change::DropSource(s1)).unwrap();
        assert!(m.sock_allows(1, g, s3, true), "not a member: MULTICAST_ALL");
        m.leave_all(2);
        assert!(!m.host_allows(g, s1));
    }

    #[test]
    fn limits_and_the_all_hosts_group_are_the_kernels() {
        let m = Memberships::default();
        for i in 0..MAX_MEMBERSHIPS as u8 {
            m.change(1, IpAddr::V4(Ipv4Addr::new(239, 0, 0, i)), Change::Join)
                .unwrap();
        }
        assert_eq!(
            m.change(1, ip("239.0.1.0"), Change::Join),
            Err(McastError::TooMany)
        );
        m.change(2, ip("239.0.1.0"), Change::Join).unwrap();
        assert_eq!(
            m.change(1, ip("198.18.0.1"), Change::Join),
            Err(McastError::Invalid)
        );
        assert!(m.host_allows(ip("224.0.0.1"), ip("198.18.0.9")));
        assert!(m.host_allows(ip("ff02::1"), ip("fe80::1")));
        let g6 = ip("ff05::1:3");
        m.change(3, g6, Change::Join).unwrap();
        for i in 0..MAX_SOURCES as u16 {
            m.change(
                3,
                g6,
                Change::Block(IpAddr::V6(Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, i))),
            )
            .unwrap();
        }
        assert_eq!(
            m.change(3, g6, Change::Block(ip("2001:2::ff"))),
            Err(McastError::TooMany)
        );
        m.leave_all(1);
        assert_eq!(m.groups(), vec![ip("239.0.1.0"), g6]);
    }
}
