//! The kernel's route to a destination (`NETLINK_ROUTE`, `RTM_GETROUTE`,
//! as `ip route get ADDR`): the interface it leaves by and the gateway it
//! goes through, if any. A connection rxpath opens to a routed peer takes
//! the kernel's next hop, as the kernel's connect would.

use super::neigh::{ip_bytes, netlink, send, NLMSG_HDRLEN};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;

const RTMSG_LEN: usize = 12;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;

/// The kernel's next hop to `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextHop {
    /// The interface the route leaves by.
    pub ifindex: u32,
    /// The gateway, or `None` when `dst` is on the link.
    pub gateway: Option<IpAddr>,
}

/// The route the kernel would take to `dst` now (`None`: no route).
pub fn get(dst: IpAddr) -> io::Result<Option<NextHop>> {
    let fd = netlink()?;
    let addr = ip_bytes(dst);
    let len = NLMSG_HDRLEN + RTMSG_LEN + 4 + addr.len();
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&libc::RTM_GETROUTE.to_ne_bytes());
    m.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    let (family, bits) = match dst {
        IpAddr::V4(_) => (libc::AF_INET, 32u8),
        IpAddr::V6(_) => (libc::AF_INET6, 128u8),
    };
    // rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type,
    // flags.
    m.extend_from_slice(&[family as u8, bits, 0, 0, 0, 0, 0, 0]);
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&((4 + addr.len()) as u16).to_ne_bytes());
    m.extend_from_slice(&RTA_DST.to_ne_bytes());
    m.extend_from_slice(&addr);
    send(&fd, &m)?;
    let mut buf = vec![0u8; 8 * 1024];
    // `buf` is a live buffer of its length.
    let n = rxpath_os::syscall!(recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0))?;
    parse(&buf[..n as usize])
}

/// The answer to an `RTM_GETROUTE`: an `RTM_NEWROUTE` (its `RTA_OIF` and
/// `RTA_GATEWAY`), or an error (`ENETUNREACH` and its kin: no route).
fn parse(b: &[u8]) -> io::Result<Option<NextHop>> {
    if b.len() < NLMSG_HDRLEN {
        return Ok(None);
    }
    let len = (u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize).min(b.len());
    let ty = u16::from_ne_bytes([b[4], b[5]]);
    if ty as i32 == libc::NLMSG_ERROR && b.len() >= NLMSG_HDRLEN + 4 {
        let e = -i32::from_ne_bytes([b[16], b[17], b[18], b[19]]);
        return match e {
            0 => Ok(None),
            libc::ENETUNREACH | libc::EHOSTUNREACH | libc::EACCES | libc::EINVAL => Ok(None),
            e => Err(io::Error::from_raw_os_error(e)),
        };
    }
    if ty != libc::RTM_NEWROUTE || len < NLMSG_HDRLEN + RTMSG_LEN {
        return Ok(None);
    }
    let (mut ifindex, mut gateway) = (None, None);
    let mut off = NLMSG_HDRLEN + RTMSG_LEN;
    while off + 4 <= len {
        let alen = u16::from_ne_bytes([b[off], b[off + 1]]) as usize;
        let aty = u16::from_ne_bytes([b[off + 2], b[off + 3]]);
        if alen < 4 || off + alen > len {
            break;
        }
        let data = &b[off + 4..off + alen];
        match (aty, data.len()) {
            (RTA_OIF, 4) => {
                ifindex = Some(u32::from_ne_bytes([data[0], data[1], data[2], data[3]]))
            }
            (RTA_GATEWAY, 4) => {
                gateway = Some(IpAddr::V4(Ipv4Addr::new(
                    data[0], data[1], data[2], data[3],
                )))
            }
            (RTA_GATEWAY, 16) => {
                let o: [u8; 16] = data.try_into().expect("16 bytes");
                gateway = Some(IpAddr::V6(Ipv6Addr::from(o)));
            }
            _ => {}
        }
        off += (alen + 3) & !3;
    }
    Ok(ifindex.map(|ifindex| NextHop { ifindex, gateway }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `RTM_NEWROUTE` as the kernel writes it for `ip route get`.
    fn answer(attrs: &[(u16, &[u8])]) -> Vec<u8> {
        let mut body = vec![libc::AF_INET as u8, 32, 0, 0, 254, 0, 0, 1, 0, 0, 0, 0];
        for (ty, d) in attrs {
            body.extend_from_slice(&((4 + d.len()) as u16).to_ne_bytes());
            body.extend_from_slice(&ty.to_ne_bytes());
            body.extend_from_slice(d);
            while body.len() % 4 != 0 {
                body.push(0);
            }
        }
        let mut m = ((NLMSG_HDRLEN + body.len()) as u32).to_ne_bytes().to_vec();
        m.extend_from_slice(&libc::RTM_NEWROUTE.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(&body);
        m
    }

    #[test]
    fn a_route_answer_gives_its_interface_and_gateway() {
        let via = answer(&[
            (RTA_DST, &[198, 18, 99, 5]),
            (RTA_OIF, &7u32.to_ne_bytes()),
            (RTA_GATEWAY, &[198, 18, 9, 5]),
        ]);
        assert_eq!(
            parse(&via).unwrap(),
            Some(NextHop {
                ifindex: 7,
                gateway: Some("198.18.9.5".parse().unwrap())
            })
        );
        let on_link = answer(&[(RTA_OIF, &3u32.to_ne_bytes())]);
        assert_eq!(
            parse(&on_link).unwrap(),
            Some(NextHop {
                ifindex: 3,
                gateway: None
            })
        );
        let mut unreachable = vec![0u8; 36];
        unreachable[4..6].copy_from_slice(&(libc::NLMSG_ERROR as u16).to_ne_bytes());
        unreachable[16..20].copy_from_slice(&(-libc::ENETUNREACH).to_ne_bytes());
        assert_eq!(parse(&unreachable).unwrap(), None);
        assert_eq!(parse(&[1, 2]).unwrap(), None, "short: no route, no panic");
    }

    #[test]
    fn the_kernel_routes_loopback_by_lo() {
        let h = get("127.0.0.1".parse().unwrap())
            .unwrap()
            .expect("a route to 127.0.0.1");
        assert_eq!(h.gateway, None);
        assert_eq!(h.ifindex, 1, "lo");
    }
}
