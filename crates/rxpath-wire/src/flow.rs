//! Flow keys: the 5-tuple, for IPv4 and IPv6.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Source and destination addresses of one family, stored as raw octets so
/// that hashing and comparing never branch on `IpAddr`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum IpAddrs {
    /// IPv4 addresses.
    V4 {
        /// Source.
        src: [u8; 4],
        /// Destination.
        dst: [u8; 4],
    },
    /// IPv6 addresses.
    V6 {
        /// Source.
        src: [u8; 16],
        /// Destination.
        dst: [u8; 16],
    },
}

impl Default for IpAddrs {
    fn default() -> Self {
        IpAddrs::V4 {
            src: [0; 4],
            dst: [0; 4],
        }
    }
}

/// A flow's 5-tuple. Ports are zero for protocols without ports and for
/// non-first fragments (which then hash to the 3-tuple, as in the kernel).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct FlowKey {
    /// Addresses.
    pub addrs: IpAddrs,
    /// Source port (host order).
    pub src_port: u16,
    /// Destination port (host order).
    pub dst_port: u16,
    /// IP protocol number.
    pub protocol: u8,
}

impl FlowKey {
    /// Build a key from addresses of one family. Mixed families map the IPv4
    /// address into IPv6 (`::ffff:a.b.c.d`).
    pub fn new(src: IpAddr, dst: IpAddr, src_port: u16, dst_port: u16, protocol: u8) -> Self {
        let addrs = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => IpAddrs::V4 {
                src: s.octets(),
                dst: d.octets(),
            },
            (s, d) => IpAddrs::V6 {
                src: v6(s).octets(),
                dst: v6(d).octets(),
            },
        };
        FlowKey {
            addrs,
            src_port,
            dst_port,
            protocol,
        }
    }

    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self.addrs {
            IpAddrs::V4 { src, .. } => Ipv4Addr::from(src).into(),
            IpAddrs::V6 { src, .. } => Ipv6Addr::from(src).into(),
        }
    }

    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self.addrs {
            IpAddrs::V4 { dst, .. } => Ipv4Addr::from(dst).into(),
            IpAddrs::V6 { dst, .. } => Ipv6Addr::from(dst).into(),
        }
    }

    /// The key of the reply direction.
    pub fn reversed(&self) -> Self {
        let addrs = match self.addrs {
            IpAddrs::V4 { src, dst } => IpAddrs::V4 { src: dst, dst: src },
            IpAddrs::V6 { src, dst } => IpAddrs::V6 { src: dst, dst: src },
        };
        FlowKey {
            addrs,
            src_port: self.dst_port,
            dst_port: self.src_port,
            protocol: self.protocol,
        }
    }

    /// True for IPv6 keys.
    pub fn is_v6(&self) -> bool {
        matches!(self.addrs, IpAddrs::V6 { .. })
    }
}

fn v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

impl fmt::Display for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let proto = match self.protocol {
            6 => "tcp",
            17 => "udp",
            _ => "ip",
        };
        match self.addrs {
            IpAddrs::V4 { .. } => write!(
                f,
                "{proto} {}:{} -> {}:{}",
                self.src(),
                self.src_port,
                self.dst(),
                self.dst_port
            ),
            IpAddrs::V6 { .. } => write!(
                f,
                "{proto} [{}]:{} -> [{}]:{}",
                self.src(),
                self.src_port,
                self.dst(),
                self.dst_port
            ),
        }
    }
}
