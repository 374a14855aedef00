//! An interface's root queueing discipline (`NETLINK_ROUTE`,
//! `RTM_GETQDISC`, as `tc qdisc show dev IF`): its kind and, for the
//! FIFOs, its limit. A FIFO of limit 0 drops every packet the stack
//! hands the device (`NET_XMIT_DROP`), which TCP takes as local
//! congestion; packetdrill's scripts set one on their tun to say so.

use super::neigh::{netlink, send, NLMSG_HDRLEN};
use std::io;
use std::os::fd::AsRawFd;

const TCMSG_LEN: usize = 20;
const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
/// `TC_H_ROOT`: the root qdisc's parent.
const TC_H_ROOT: u32 = 0xffff_ffff;
const NLMSG_DONE: u16 = 3;
const NLMSG_ERROR: u16 = 2;

/// The root qdisc of an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    /// Its kind (`pfifo`, `fq_codel`, `noqueue`, ...).
    pub kind: String,
    /// A FIFO's limit (`struct tc_fifo_qopt`): packets for `pfifo`,
    /// bytes for `bfifo`.
    pub fifo_limit: Option<u32>,
}

impl Root {
    /// The device takes no packet: a FIFO of limit 0.
    pub fn drops_all(&self) -> bool {
        matches!(self.kind.as_str(), "pfifo" | "bfifo") && self.fifo_limit == Some(0)
    }
}

/// The root qdisc of interface `ifindex` now, if it has one.
pub fn root(ifindex: u32) -> io::Result<Option<Root>> {
    let fd = netlink()?;
    let len = NLMSG_HDRLEN + TCMSG_LEN;
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&libc::RTM_GETQDISC.to_ne_bytes());
    m.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16).to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    // tcmsg: family, three pads, ifindex, handle, parent, info.
    m.extend_from_slice(&[0, 0, 0, 0]);
    m.extend_from_slice(&(ifindex as i32).to_ne_bytes());
    m.extend_from_slice(&[0; 12]);
    send(&fd, &m)?;
    let mut buf = vec![0u8; 32 * 1024];
    let mut found = None;
    loop {
        // `buf` is a live buffer of its length.
        let n = rxpath_os::syscall!(recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0))?;
        let (root, done) = parse(&buf[..n as usize], ifindex);
        found = found.or(root);
        if done || n == 0 {
            return Ok(found);
        }
    }
}

/// One part of the dump: the root qdisc of `ifindex` if it is there, and
/// whether the dump ended.
fn parse(mut b: &[u8], ifindex: u32) -> (Option<Root>, bool) {
    let mut found = None;
    while b.len() >= NLMSG_HDRLEN {
        let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let ty = u16::from_ne_bytes([b[4], b[5]]);
        if len < NLMSG_HDRLEN || len > b.len() {
            return (found, true);
        }
        if ty == NLMSG_DONE || ty == NLMSG_ERROR {
            return (found, true);
        }
        let body = &b[NLMSG_HDRLEN..len];
        if ty == libc::RTM_NEWQDISC && body.len() >= TCMSG_LEN {
            let idx = i32::from_ne_bytes([body[4], body[5], body[6], body[7]]) as u32;
            let parent = u32::from_ne_bytes([body[12], body[13], body[14], body[15]]);
            if idx == ifindex && parent == TC_H_ROOT {
                found = Some(attrs(&body[TCMSG_LEN..]));
            }
        }
        b = &b[len.next_multiple_of(4).min(b.len())..];
    }
    (found, false)
}

/// A qdisc's kind and FIFO limit from its attributes.
fn attrs(mut a: &[u8]) -> Root {
    let mut r = Root {
        kind: String::new(),
        fifo_limit: None,
    };
    while a.len() >= 4 {
        let len = u16::from_ne_bytes([a[0], a[1]]) as usize;
        let ty = u16::from_ne_bytes([a[2], a[3]]);
        if len < 4 || len > a.len() {
            break;
        }
        let v = &a[4..len];
        match ty {
            TCA_KIND => {
                let s = v.split(|&c| c == 0).next().unwrap_or_default();
                r.kind = String::from_utf8_lossy(s).into_owned();
            }
            TCA_OPTIONS if v.len() >= 4 => {
                r.fifo_limit = Some(u32::from_ne_bytes([v[0], v[1], v[2], v[3]]));
            }
            _ => {}
        }
        a = &a[len.next_multiple_of(4).min(a.len())..];
    }
    if !matches!(r.kind.as_str(), "pfifo" | "bfifo") {
        r.fifo_limit = None;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ty: u16, v: &[u8]) -> Vec<u8> {
        let mut a = ((4 + v.len()) as u16).to_ne_bytes().to_vec();
        a.extend_from_slice(&ty.to_ne_bytes());
        a.extend_from_slice(v);
        a.resize(a.len().next_multiple_of(4), 0);
        a
    }

    fn qdisc(ifindex: u32, parent: u32, attrs: &[u8]) -> Vec<u8> {
        let len = NLMSG_HDRLEN + TCMSG_LEN + attrs.len();
        let mut m = (len as u32).to_ne_bytes().to_vec();
        m.extend_from_slice(&libc::RTM_NEWQDISC.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(&[0; 4]);
        m.extend_from_slice(&(ifindex as i32).to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&parent.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(attrs);
        m
    }

    #[test]
    fn a_dump_gives_the_interfaces_root_and_its_fifo_limit() {
        let pfifo0 = [
            attr(TCA_KIND, b"pfifo\0"),
            attr(TCA_OPTIONS, &0u32.to_ne_bytes()),
        ]
        .concat();
        let fq = attr(TCA_KIND, b"fq_codel\0");
        let dump = [
            qdisc(2, TC_H_ROOT, &fq),
            qdisc(7, 1, &fq),
            qdisc(7, TC_H_ROOT, &pfifo0),
        ]
        .concat();
        let (r, done) = parse(&dump, 7);
        assert!(!done);
        let r = r.expect("interface 7's root");
        assert_eq!((r.kind.as_str(), r.fifo_limit), ("pfifo", Some(0)));
        assert!(r.drops_all());
        let (r, _) = parse(&dump, 2);
        assert!(!r.expect("interface 2's root").drops_all());
        assert_eq!(parse(&dump, 9).0, None);
    }

    /// Root: the loopback device's root qdisc is there to read (what it
    /// is depends on the kernel: `noqueue` usually).
    #[test]
    fn the_kernel_answers_for_loopback() {
        let r = root(1).expect("RTM_GETQDISC");
        assert!(r.is_some_and(|r| !r.kind.is_empty() && !r.drops_all()));
    }
}
