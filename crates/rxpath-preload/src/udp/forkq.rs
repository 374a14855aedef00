//! What a served socket held when the process forked, shared with the
//! child: the datagrams queued in rxpath at `fork` move into memory both
//! processes map, and either may read each of them once.
//!
//! `socat UDP-RECVFROM:P,fork` peeks at a datagram, forks, and the child
//! reads it; a pre-forking server's children read what arrived before they
//! were made. The parent keeps serving the port (new datagrams are its);
//! the child's copies of its sockets are the kernel's once what they
//! inherited is read. A child that reads or waits on a socket that held
//! nothing at the fork is one of its readers (a pre-forking server's
//! worker): the port goes back to the kernel for every process
//! ([`child_uses`]), so nothing the child should read stays in a queue
//! of the parent's that nobody reads.
//!
//! A region is written whole in the parent's `fork` prepare handler before
//! the child exists; after that only its per-datagram state words change,
//! taken with a compare-and-swap, so a datagram is read by one process.

use crate::sys::Shared;
use rxpath_runtime::sock::RecvMeta;
use rxpath_runtime::UdpSocket;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A record's state word: queued.
const QUEUED: u32 = 0;
/// A record's state word: read by some process.
const TAKEN: u32 = 1;
/// The region's header: datagrams left (a word), then their count.
const HEAD: usize = 8;
/// A record's header before the payload.
const REC: usize = 64;

use rxpath_dev::sync::lock;

fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// Datagrams moved out of one socket's queue at one `fork`.
#[derive(Debug)]
pub(crate) struct Region {
    map: Shared,
    /// Each record's offset.
    at: Vec<usize>,
}

impl Region {
    /// Move every datagram queued on `sock` into a new shared region
    /// (`None` if none was queued, or the memory could not be had: then
    /// they stay the parent's, said).
    pub(crate) fn from_queue(sock: &UdpSocket) -> Option<Region> {
        if sock.queued() == 0 {
            return None;
        }
        let mut got: Vec<(RecvMeta, Vec<u8>)> = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let mut m = None;
            match sock
                .socket()
                .try_recv_batch(&mut [&mut buf], &mut |_, x| m = Some(x))
            {
                Ok(1) => {}
                _ => break,
            }
            let Some(m) = m else { break };
            got.push((m, buf[..m.len].to_vec()));
        }
        Region::from_datagrams(&got)
    }

    /// A shared region holding `got`, in order.
    fn from_datagrams(got: &[(RecvMeta, Vec<u8>)]) -> Option<Region> {
        if got.is_empty() {
            return None;
        }
        let len = HEAD + got.iter().map(|(_, b)| pad8(REC + b.len())).sum::<usize>();
        let mut map = match Shared::new(len) {
            Ok(m) => m,
            Err(e) => {
                crate::config::say(&format!(
                    "fork: no shared memory for {} queued datagram(s) ({e}): \
                     the child cannot read them",
                    got.len()
                ));
                return None;
            }
        };
        let mut at = Vec::with_capacity(got.len());
        let bytes = map.bytes_mut();
        bytes[0..4].copy_from_slice(&(got.len() as u32).to_ne_bytes());
        bytes[4..8].copy_from_slice(&(got.len() as u32).to_ne_bytes());
        let mut off = HEAD;
        for (m, payload) in got {
            at.push(off);
            write_record(&mut bytes[off..off + REC + payload.len()], m, payload);
            off += pad8(REC + payload.len());
        }
        Some(Region { map, at })
    }

    /// Datagrams no process has read yet.
    fn left(&self) -> u32 {
        self.map.word(0).load(Ordering::Acquire)
    }

    /// The first datagram not read yet: copied into `buf`, and taken
    /// unless `peek`. Its whole length and what a read reports.
    fn take(&self, buf: &mut [u8], peek: bool) -> Option<(usize, RecvMeta)> {
        for &off in &self.at {
            let state = self.map.word(off);
            if state.load(Ordering::Acquire) != QUEUED {
                continue;
            }
            if !peek
                && state
                    .compare_exchange(QUEUED, TAKEN, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
            {
                continue;
            }
            let (whole, mut m) = self.read_record(off);
            let n = whole.min(buf.len());
            self.map.read(off + REC, &mut buf[..n]);
            m.len = n;
            m.truncated = n < whole;
            if !peek {
                self.map.word(0).fetch_sub(1, Ordering::AcqRel);
            }
            return Some((whole, m));
        }
        None
    }

    fn read_record(&self, off: usize) -> (usize, RecvMeta) {
        let mut h = [0u8; REC];
        self.map.read(off, &mut h);
        let u32_at = |i: usize| u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let ip = |v6: u8, b: &[u8]| -> IpAddr {
            let a = Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap_or_default());
            match (v6, a.to_ipv4_mapped()) {
                (0, Some(v4)) => IpAddr::V4(v4),
                _ => IpAddr::V6(a),
            }
        };
        let src = SocketAddr::new(ip(h[13], &h[20..36]), u16::from_ne_bytes([h[16], h[17]]));
        let m = RecvMeta {
            len: 0,
            truncated: false,
            src,
            dst: ip(h[14], &h[36..52]),
            stride: u32_at(8) as usize,
            ecn: h[12] & 3,
            tos: h[12],
            stamp_ns: u64::from_ne_bytes(h[52..60].try_into().unwrap_or_default()),
            drops: u32_at(60),
        };
        (u32_at(4) as usize, m)
    }
}

fn write_record(r: &mut [u8], m: &RecvMeta, payload: &[u8]) {
    let v6 = |a: IpAddr| match a {
        IpAddr::V4(v4) => (0u8, v4.to_ipv6_mapped().octets()),
        IpAddr::V6(v6) => (1u8, v6.octets()),
    };
    let (s6, s) = v6(m.src.ip());
    let (d6, d) = v6(m.dst);
    r[0..4].copy_from_slice(&QUEUED.to_ne_bytes());
    r[4..8].copy_from_slice(&(payload.len() as u32).to_ne_bytes());
    r[8..12].copy_from_slice(&(m.stride as u32).to_ne_bytes());
    r[12] = m.tos;
    r[13] = s6;
    r[14] = d6;
    r[16..18].copy_from_slice(&m.src.port().to_ne_bytes());
    r[20..36].copy_from_slice(&s);
    r[36..52].copy_from_slice(&d);
    r[52..60].copy_from_slice(&m.stamp_ns.to_ne_bytes());
    r[60..64].copy_from_slice(&m.drops.to_ne_bytes());
    r[REC..].copy_from_slice(payload);
}

/// The regions one socket holds, oldest first, read before its queue.
#[derive(Debug, Default)]
pub(crate) struct Held {
    regions: Mutex<Vec<Arc<Region>>>,
    /// Some region may hold a datagram: the one load a read pays.
    any: AtomicBool,
}

impl Held {
    /// Some datagram is held here that no process has read (one load
    /// when none was ever held).
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.any.load(Ordering::Acquire) && self.still()
    }

    fn still(&self) -> bool {
        let mut rs = lock(&self.regions);
        rs.retain(|r| r.left() > 0);
        if rs.is_empty() {
            self.any.store(false, Ordering::Release);
        }
        !rs.is_empty()
    }

    pub(crate) fn push(&self, r: Region) {
        lock(&self.regions).push(Arc::new(r));
        self.any.store(true, Ordering::Release);
    }

    /// The oldest datagram held, taken unless `peek`: its whole length and
    /// what a read reports. Regions read to the end are let go.
    pub(crate) fn take(&self, buf: &mut [u8], peek: bool) -> Option<(usize, RecvMeta)> {
        let mut rs = lock(&self.regions);
        let mut out = None;
        for r in rs.iter() {
            if let Some(x) = r.take(buf, peek) {
                out = Some(x);
                break;
            }
        }
        rs.retain(|r| r.left() > 0);
        if rs.is_empty() {
            self.any.store(false, Ordering::Release);
        }
        out
    }

    /// The whole length of the next datagram held, if any.
    pub(crate) fn next_len(&self) -> Option<usize> {
        self.take(&mut [], true).map(|x| x.0)
    }

    /// Another view of the same regions (the child's).
    pub(crate) fn share(&self) -> Held {
        let rs = lock(&self.regions).clone();
        let any = !rs.is_empty();
        Held {
            regions: Mutex::new(rs),
            any: any.into(),
        }
    }
}

/// A forked child's copy of a socket its parent served, while it holds
/// datagrams the parent held at the fork.
#[derive(Debug)]
pub(crate) struct Inherited {
    pub(crate) held: Held,
    /// The control messages a read hands back (as the parent's socket).
    pub(crate) cmsgs: u16,
    /// The socket is IPv6 (`IPV6_PKTINFO` for IPv4 senders too).
    pub(crate) v6: bool,
    /// The UDP port the parent serves it on.
    pub(crate) port: u16,
    /// The destinations the XDP program takes for it.
    pub(crate) keys: Vec<rxpath_dev::sys::xdp::PortKey>,
    /// Nothing was there to read at the fork (rxpath's queue and the
    /// kernel socket empty): a child that reads is one of its readers.
    pub(crate) fresh: bool,
    /// [`child_uses`] gave its port back.
    pub(crate) released: AtomicBool,
    /// Shared with the parent ([`crate::udp::sock::Accel::fork_word`]): set
    /// when a child took the socket's reading.
    pub(crate) parent_word: Option<Arc<crate::sys::Shared>>,
}

/// The descriptor of the host's XDP port map (-1: none), which a forked
/// child keeps open to give a port back.
static PORT_MAP: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// The host started with this port map (or none).
pub(crate) fn set_port_map(fd: Option<RawFd>) {
    PORT_MAP.store(fd.unwrap_or(-1), Ordering::Relaxed);
}

/// The port map's descriptor, if the host has one.
pub(crate) fn port_map() -> Option<RawFd> {
    Some(PORT_MAP.load(Ordering::Relaxed)).filter(|&fd| fd >= 0)
}

/// In a forked child, the program reads or waits on `fd`: if it is an
/// inherited socket that held nothing at the fork, the child is one of
/// its readers, and its port goes back to the kernel for every process
/// (the port map, the XDP program's or AF_PACKET's tap filter's, stops
/// taking it; the parent, told through the word they share, stops taking
/// the port and reads and sends through the kernel socket behind its fd). Done and said once per port, by the first child to read.
pub(crate) fn child_uses(fd: RawFd) {
    let Some(inh) = inherited(fd) else { return };
    if !inh.fresh || inh.released.swap(true, Ordering::AcqRel) {
        return;
    }
    let port = inh.port;
    // The word shared with the parent and every child of the fork: the
    // first child to read gives the port back, and the parent stops
    // taking it; the others find it done.
    if let Some(w) = &inh.parent_word {
        if w.word(0).swap(1, Ordering::AcqRel) != 0 {
            return;
        }
    }
    let Some(map) = port_map() else {
        return;
    };
    let released = inh
        .keys
        .iter()
        .try_for_each(|k| rxpath_dev::sys::xdp::release_port(map, *k));
    match released {
        Ok(()) => crate::config::say(&format!(
            "a forked child reads port {port}: it goes back to the kernel, for the parent too"
        )),
        Err(e) => crate::config::say(&format!(
            "a forked child reads port {port}, which stays rxpath's: {e}"
        )),
    }
}

/// Staged by the parent just before a fork: each served socket (with the
/// datagrams it holds, if any) and its fds.
static AT_FORK: Mutex<Vec<(Vec<RawFd>, Arc<Inherited>)>> = Mutex::new(Vec::new());

/// In the parent's `fork` prepare handler: what the child inherits, each
/// served socket with its fds.
pub(crate) fn stage(staged: Vec<(Vec<RawFd>, Arc<Inherited>)>) {
    *lock(&AT_FORK) = staged;
}

fn child_map() -> &'static Mutex<HashMap<RawFd, Arc<Inherited>>> {
    static M: std::sync::OnceLock<Mutex<HashMap<RawFd, Arc<Inherited>>>> =
        std::sync::OnceLock::new();
    M.get_or_init(Default::default)
}

/// In the child, just after the fork: the fds of the sockets the parent
/// served (`try_lock`: a lock another thread of the
/// parent held at the fork is never taken). Returns those fds.
pub(crate) fn in_child() -> Vec<RawFd> {
    let Ok(mut staged) = AT_FORK.try_lock() else {
        return Vec::new();
    };
    let Ok(mut m) = child_map().try_lock() else {
        return Vec::new();
    };
    m.clear();
    let mut fds = Vec::new();
    for (fs, inh) in staged.drain(..) {
        for fd in fs {
            m.insert(fd, inh.clone());
            fds.push(fd);
        }
    }
    fds
}

/// Before a fork in a process that is itself a forked child: the sockets
/// it inherited and has not let go of are staged for its child too, so a
/// grandchild of the process that bound them (NSD's workers, forked by a
/// child that carries on as the main process) reads what they hold and
/// gives their port back when it reads them, as a child does.
/// `still_forked`: the fd is still one (the table's word for it).
pub(crate) fn restage_inherited(still_forked: impl Fn(RawFd) -> bool) {
    let Ok(m) = child_map().try_lock() else {
        return;
    };
    if m.is_empty() {
        return;
    }
    let mut staged = lock(&AT_FORK);
    for (fd, inh) in m.iter() {
        if still_forked(*fd) {
            staged.push((vec![*fd], inh.clone()));
        }
    }
}

/// In the parent after the fork: nothing stays staged.
pub(crate) fn after_fork_parent() {
    lock(&AT_FORK).clear();
}

/// The inherited socket behind `fd` in a forked child.
pub(crate) fn inherited(fd: RawFd) -> Option<Arc<Inherited>> {
    lock(child_map()).get(&fd).cloned()
}

/// `fd` is closed, or read to the end of what it inherited.
pub(crate) fn forget(fd: RawFd) {
    lock(child_map()).remove(&fd);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(src: &str, dst: &str, tos: u8) -> RecvMeta {
        RecvMeta {
            len: 0,
            truncated: false,
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            stride: 0,
            ecn: tos & 3,
            tos,
            stamp_ns: 12345,
            drops: 7,
        }
    }

    #[test]
    fn each_datagram_is_read_once_in_order_by_either_view() {
        let got = vec![
            (
                meta("198.18.0.2:4000", "198.18.0.1", 0x2a),
                b"first".to_vec(),
            ),
            (meta("[2001:2::5]:53", "2001:2::1", 0), vec![7u8; 300]),
        ];
        let parent = Held::default();
        parent.push(Region::from_datagrams(&got).unwrap());
        let child = parent.share();
        let mut buf = [0u8; 16];
        // A peek leaves it; a short buffer truncates and says how long.
        let (whole, m) = child.take(&mut buf[..3], true).unwrap();
        assert_eq!((whole, m.len, m.truncated), (5, 3, true));
        assert_eq!(m.src, got[0].0.src);
        assert_eq!((m.dst, m.tos, m.ecn), (got[0].0.dst, 0x2a, 2));
        assert_eq!((m.stamp_ns, m.drops), (12345, 7));
        let (whole, m) = child.take(&mut buf, false).unwrap();
        assert_eq!(
            (whole, &buf[..m.len], m.truncated),
            (5, &b"first"[..], false)
        );
        // The other view does not see it again.
        let mut big = [0u8; 512];
        let (whole, m) = parent.take(&mut big, false).unwrap();
        assert_eq!((whole, m.src, m.dst), (300, got[1].0.src, got[1].0.dst));
        assert_eq!(&big[..300], &got[1].1[..]);
        assert!(parent.take(&mut big, false).is_none());
        assert!(!parent.any() && !child.any());
    }

    #[test]
    fn nothing_queued_makes_no_region() {
        assert!(Region::from_datagrams(&[]).is_none());
        assert!(!Held::default().any());
    }
}
