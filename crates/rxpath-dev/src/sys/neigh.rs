//! The kernel's neighbour table (`NETLINK_ROUTE`, `RTM_GETNEIGH`): the
//! link-layer address it has for an IP address on an interface, and a
//! request that it resolve one (`NTF_USE`, as `ip neigh replace ADDR dev
//! IF use` asks: the kernel sends its ARP request or neighbour
//! solicitation, and the answer, which reaches the kernel, fills its
//! table). A connection rxpath opens before it received anything from the
//! peer finds its neighbour as the kernel's connect would.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

pub(super) const NLMSG_HDRLEN: usize = 16;
const NDMSG_LEN: usize = 12;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const NTF_USE: u8 = 0x01;
/// `NUD_VALID`: an entry whose address may be used.
const NUD_VALID: u16 = 0x80 | 0x40 | 0x02 | 0x10 | 0x04 | 0x08;

pub(super) fn netlink() -> io::Result<OwnedFd> {
    let fd = rxpath_os::syscall!(socket(
        libc::AF_NETLINK,
        libc::SOCK_RAW | libc::SOCK_CLOEXEC,
        libc::NETLINK_ROUTE
    ))?;
    // SAFETY: socket() returned a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A request: the header, an `ndmsg` for `ip`'s family on `ifindex`, and
/// `attrs` after it.
fn request(ty: u16, flags: u16, ip: IpAddr, ifindex: u32, ndm_flags: u8, attrs: &[u8]) -> Vec<u8> {
    let len = NLMSG_HDRLEN + NDMSG_LEN + attrs.len();
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&ty.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    let family = if ip.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    m.push(family as u8);
    m.extend_from_slice(&[0, 0, 0]);
    m.extend_from_slice(&(ifindex as i32).to_ne_bytes());
    m.extend_from_slice(&0u16.to_ne_bytes()); // state
    m.push(ndm_flags);
    m.push(0); // type
    m.extend_from_slice(attrs);
    m
}

pub(super) fn ip_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

pub(super) fn send(fd: &OwnedFd, msg: &[u8]) -> io::Result<()> {
    // `msg` is a live buffer of its length.
    rxpath_os::syscall!(send(fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0))?;
    Ok(())
}

/// The link-layer address the kernel's table has for `ip` on `ifindex`
/// (an entry in a usable state), if any.
pub fn lookup(ifindex: u32, ip: IpAddr) -> io::Result<Option<[u8; 6]>> {
    let fd = netlink()?;
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    send(&fd, &request(libc::RTM_GETNEIGH, flags, ip, 0, 0, &[]))?;
    let want = ip_bytes(ip);
    let mut found = None;
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        // `buf` is a live buffer of its length.
        let n = rxpath_os::syscall!(recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0))?;
        let mut off = 0usize;
        while off + NLMSG_HDRLEN <= n as usize {
            let h = &buf[off..];
            let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
            let ty = u16::from_ne_bytes([h[4], h[5]]);
            if len < NLMSG_HDRLEN || off + len > n as usize {
                return Ok(found);
            }
            match ty as i32 {
                libc::NLMSG_DONE => return Ok(found),
                libc::NLMSG_ERROR => {
                    let e = i32::from_ne_bytes([h[16], h[17], h[18], h[19]]);
                    return Err(io::Error::from_raw_os_error(-e));
                }
                _ if ty == libc::RTM_NEWNEIGH && found.is_none() => {
                    found = entry(&h[NLMSG_HDRLEN..len], ifindex, &want);
                }
                _ => {}
            }
            off += (len + 3) & !3;
        }
    }
}

/// The address in one `RTM_NEWNEIGH` body, if it is `want` on `ifindex`
/// in a usable state.
fn entry(b: &[u8], ifindex: u32, want: &[u8]) -> Option<[u8; 6]> {
    if b.len() < NDMSG_LEN {
        return None;
    }
    let idx = i32::from_ne_bytes([b[4], b[5], b[6], b[7]]) as u32;
    let state = u16::from_ne_bytes([b[8], b[9]]);
    if idx != ifindex || state & NUD_VALID == 0 {
        return None;
    }
    let (mut dst, mut ll) = (None, None);
    let mut off = NDMSG_LEN;
    while off + 4 <= b.len() {
        let len = u16::from_ne_bytes([b[off], b[off + 1]]) as usize;
        let ty = u16::from_ne_bytes([b[off + 2], b[off + 3]]);
        if len < 4 || off + len > b.len() {
            break;
        }
        let data = &b[off + 4..off + len];
        match ty {
            NDA_DST => dst = Some(data),
            NDA_LLADDR if data.len() == 6 => ll = data.try_into().ok(),
            _ => {}
        }
        off += (len + 3) & !3;
    }
    (dst == Some(want)).then_some(ll).flatten()
}

/// Ask the kernel to resolve `ip` on `ifindex` (`NTF_USE`), then wait up
/// to `patience` for its table to have it.
pub fn resolve(ifindex: u32, ip: IpAddr, patience: Duration) -> io::Result<Option<[u8; 6]>> {
    if let Some(mac) = lookup(ifindex, ip)? {
        return Ok(Some(mac));
    }
    let fd = netlink()?;
    let dst = ip_bytes(ip);
    let mut attr = Vec::with_capacity(4 + dst.len());
    attr.extend_from_slice(&((4 + dst.len()) as u16).to_ne_bytes());
    attr.extend_from_slice(&NDA_DST.to_ne_bytes());
    attr.extend_from_slice(&dst);
    let flags =
        (libc::NLM_F_REQUEST | libc::NLM_F_ACK | libc::NLM_F_CREATE | libc::NLM_F_REPLACE) as u16;
    send(
        &fd,
        &request(libc::RTM_NEWNEIGH, flags, ip, ifindex, NTF_USE, &attr),
    )?;
    let mut ack = [0u8; 256];
    // `ack` is a live buffer of its length.
    let n = rxpath_os::syscall!(recv(fd.as_raw_fd(), ack.as_mut_ptr().cast(), ack.len(), 0))?;
    if n as usize >= NLMSG_HDRLEN + 4
        && u16::from_ne_bytes([ack[4], ack[5]]) as i32 == libc::NLMSG_ERROR
    {
        let e = i32::from_ne_bytes([ack[16], ack[17], ack[18], ack[19]]);
        if e != 0 {
            return Err(io::Error::from_raw_os_error(-e));
        }
    }
    let until = Instant::now() + patience;
    while Instant::now() < until {
        if let Some(mac) = lookup(ifindex, ip)? {
            return Ok(Some(mac));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(None)
}
