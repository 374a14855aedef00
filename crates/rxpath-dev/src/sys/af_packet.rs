//! A plain AF_PACKET socket bound to one interface: send raw Ethernet
//! frames, receive what the interface's taps see (after GRO, which is what
//! makes it a kernel oracle for our GRO).
//!
//! This is the simple `recv`/`send` form; the TPACKET_V3 ring with fanout
//! for the receive path is a separate backend.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

pub use super::tpacket::{PacketRing, RingConfig, RxSlot};

/// `PACKET_QDISC_BYPASS` (linux/if_packet.h).
const PACKET_QDISC_BYPASS: libc::c_int = 20;

/// `ETH_P_ALL` in network order, as `socket()` and `bind()` want it.
pub(super) const ETH_P_ALL_BE: u16 = (libc::ETH_P_ALL as u16).to_be();

/// An AF_PACKET raw socket bound to one interface.
#[derive(Debug)]
pub struct RawSocket {
    pub(super) fd: OwnedFd,
    pub(super) ifindex: i32,
}

/// The index of interface `name` in the calling thread's network namespace.
pub fn ifindex(name: &str) -> io::Result<i32> {
    let c = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name with NUL"))?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface named {name}"),
        ));
    }
    Ok(i as i32)
}

impl RawSocket {
    /// Open a raw socket for all protocols, bound to `iface`.
    pub fn bind(iface: &str) -> io::Result<RawSocket> {
        Self::bind_proto(iface, ETH_P_ALL_BE)
    }

    /// Open a socket that only sends on `iface`: it subscribes to no
    /// protocol (so no received frame is cloned to it) and bypasses the
    /// qdisc (`PACKET_QDISC_BYPASS`), as a NIC's own TX ring would.
    pub fn bind_tx(iface: &str) -> io::Result<RawSocket> {
        let s = Self::bind_proto(iface, 0)?;
        s.set_packet_opt(PACKET_QDISC_BYPASS, 1)?;
        Ok(s)
    }

    /// A send-only socket whose sends each start with a `virtio_net_hdr`
    /// (`PACKET_VNET_HDR`): a frame may be a GSO packet, cut into
    /// datagrams by the device or, where it cannot, by the kernel's
    /// software GSO before the driver ([`Self::send_udp_gso`]). Through
    /// the interface's qdisc, as the kernel's own sends: the qdisc bypass
    /// (`__dev_direct_xmit`) drops a packet the software GSO had to cut.
    pub fn bind_gso_tx(iface: &str) -> io::Result<RawSocket> {
        let s = Self::bind_proto(iface, 0)?;
        s.set_packet_opt(libc::PACKET_VNET_HDR, 1)?;
        Ok(s)
    }

    /// On a [`Self::bind_gso_tx`] socket: one UDP GSO packet, `headers`
    /// (Ethernet, IP and UDP, lengths for the whole packet, the UDP
    /// checksum holding the pseudo-header sum) then `payload`, cut into
    /// datagrams of `segment` payload bytes (`SKB_GSO_UDP_L4`, as a UDP
    /// socket's `UDP_SEGMENT` send), each one's UDP checksum left to the
    /// device or the software GSO (`VIRTIO_NET_HDR_F_NEEDS_CSUM`). The
    /// kernel copies the payload once, from here into its buffer.
    /// `Ok(true)`: sent; `Ok(false)`: sent, but the device dropped one of
    /// the datagrams the software GSO cut, after those before it left
    /// (`ENOBUFS`); an error (`EAGAIN`, `EINVAL`, `EMSGSIZE`): nothing left.
    pub fn send_udp_gso(&self, headers: &[u8], payload: &[u8], segment: u16) -> io::Result<bool> {
        const NEEDS_CSUM: u8 = 1; // VIRTIO_NET_HDR_F_NEEDS_CSUM
        const GSO_UDP_L4: u8 = 5; // VIRTIO_NET_HDR_GSO_UDP_L4
        let udp_at = headers.len().checked_sub(8).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "GSO headers without UDP's")
        })?;
        // struct virtio_net_hdr, in the host's byte order (`packet_snd`
        // reads it with `vio_le()`: the host's own).
        let mut vnet = [0u8; 10];
        vnet[0] = NEEDS_CSUM;
        vnet[1] = GSO_UDP_L4;
        vnet[2..4].copy_from_slice(&(headers.len() as u16).to_ne_bytes());
        vnet[4..6].copy_from_slice(&segment.to_ne_bytes());
        vnet[6..8].copy_from_slice(&(udp_at as u16).to_ne_bytes());
        vnet[8..10].copy_from_slice(&6u16.to_ne_bytes());
        self.send_vnet(&vnet, &[headers, payload])
    }

    /// On a [`Self::bind_gso_tx`] socket: one TCP GSO packet, `eth` (the
    /// Ethernet header) then `packet` (IPv4 or IPv6, its lengths for the
    /// whole packet, the TCP checksum holding the pseudo-header sum of
    /// the whole, as the kernel's `CHECKSUM_PARTIAL` TSO packets), cut into
    /// segments of `mss` payload bytes by the device's TSO or the kernel's
    /// software GSO (`tcp_gso_segment`: sequence numbers, IP ids, lengths
    /// and checksums per segment, PSH and FIN on the last). `hdr_len`: the
    /// Ethernet, IP and TCP headers' length; `ecn`: CWR is set, to be kept
    /// on the first segment only (`SKB_GSO_TCP_ECN`). What
    /// [`Self::send_udp_gso`] returns.
    pub fn send_tcp_gso(
        &self,
        eth: &[u8],
        packet: &[u8],
        (hdr_len, mss): (usize, u16),
        (v6, ecn): (bool, bool),
    ) -> io::Result<bool> {
        const NEEDS_CSUM: u8 = 1; // VIRTIO_NET_HDR_F_NEEDS_CSUM
        const GSO_TCPV4: u8 = 1; // VIRTIO_NET_HDR_GSO_TCPV4
        const GSO_TCPV6: u8 = 4; // VIRTIO_NET_HDR_GSO_TCPV6
        const GSO_ECN: u8 = 0x80; // VIRTIO_NET_HDR_GSO_ECN
        let tcp_at = eth.len() + if v6 { 40 } else { 20 };
        let mut vnet = [0u8; 10];
        vnet[0] = NEEDS_CSUM;
        vnet[1] = if v6 { GSO_TCPV6 } else { GSO_TCPV4 } | if ecn { GSO_ECN } else { 0 };
        vnet[2..4].copy_from_slice(&(hdr_len as u16).to_ne_bytes());
        vnet[4..6].copy_from_slice(&mss.to_ne_bytes());
        vnet[6..8].copy_from_slice(&(tcp_at as u16).to_ne_bytes());
        vnet[8..10].copy_from_slice(&16u16.to_ne_bytes());
        self.send_vnet(&vnet, &[eth, packet])
    }

    /// One `sendmsg` of `vnet` then `parts`; `Ok(false)` for `ENOBUFS` (see
    /// [`Self::send_udp_gso`]).
    fn send_vnet(&self, vnet: &[u8; 10], parts: &[&[u8]]) -> io::Result<bool> {
        let iov: Vec<libc::iovec> = std::iter::once(&vnet[..])
            .chain(parts.iter().copied())
            .map(|b| libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: msghdr is plain data; all-zero is valid before we point
        // it at the iovecs.
        let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
        m.msg_iov = iov.as_ptr() as *mut libc::iovec;
        m.msg_iovlen = iov.len();
        // `m` points at live iovecs over live buffers for the call; the
        // kernel only reads them. Never waits for socket memory (the
        // caller holds the host's TX lock): `EAGAIN` instead.
        match syscall!(sendmsg(self.fd.as_raw_fd(), &m, libc::MSG_DONTWAIT)) {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Whether an error of [`Self::send_udp_gso`] says that this kernel
    /// takes no UDP GSO packet from a packet socket
    /// (`VIRTIO_NET_HDR_GSO_UDP_L4` came with Linux 6.2): `EINVAL`.
    pub fn gso_refused(e: &io::Error) -> bool {
        e.raw_os_error() == Some(libc::EINVAL)
    }

    fn bind_proto(iface: &str, proto_be: u16) -> io::Result<RawSocket> {
        let ifindex = ifindex(iface)?;
        let fd = syscall!(socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            proto_be as i32
        ))?;
        // SAFETY: `socket` returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto_be;
        sll.sll_ifindex = ifindex;
        syscall!(bind(
            fd.as_raw_fd(),
            // The pointer is to a live sockaddr_ll of the size passed.
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t
        ))?;
        Ok(RawSocket { fd, ifindex })
    }

    /// Set a packet-socket option to the int `v`.
    fn set_packet_opt(&self, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
        // Points to a live c_int of the size passed.
        syscall!(setsockopt(
            self.fd.as_raw_fd(),
            libc::SOL_PACKET,
            opt,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t
        ))
        .map(drop)
    }

    /// The interface index.
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// Do not see frames this host sends on the interface
    /// (`PACKET_IGNORE_OUTGOING`).
    pub fn ignore_outgoing(&self) -> io::Result<()> {
        self.set_packet_opt(libc::PACKET_IGNORE_OUTGOING, 1)
    }

    /// Run the BPF socket filter program `prog` on each frame before it
    /// is queued (`SO_ATTACH_BPF`): what it keeps, and how much.
    pub fn attach_bpf(&self, prog: RawFd) -> io::Result<()> {
        const SO_ATTACH_BPF: libc::c_int = 50;
        let fd: libc::c_int = prog;
        syscall!(setsockopt(
            self.fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ATTACH_BPF,
            // Points to a live c_int of the size passed.
            &fd as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t
        ))?;
        Ok(())
    }

    /// Send one Ethernet frame out of the interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<usize> {
        // The buffer is a live slice of the length passed.
        let n = syscall!(send(
            self.fd.as_raw_fd(),
            frame.as_ptr() as *const libc::c_void,
            frame.len(),
            0
        ))?;
        Ok(n as usize)
    }

    /// Send many frames with one `sendmmsg` call; returns how many the
    /// kernel took.
    pub fn send_batch(&self, frames: &[&[u8]]) -> io::Result<usize> {
        if frames.is_empty() {
            return Ok(0);
        }
        let mut iov: Vec<libc::iovec> = frames
            .iter()
            .map(|f| libc::iovec {
                iov_base: f.as_ptr() as *mut libc::c_void,
                iov_len: f.len(),
            })
            .collect();
        // SAFETY: mmsghdr is plain data; all-zero is valid before we point
        // each at its iovec.
        let mut msgs: Vec<libc::mmsghdr> = (0..frames.len())
            .map(|_| unsafe { std::mem::zeroed() })
            .collect();
        for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
            m.msg_hdr.msg_iov = v as *mut libc::iovec;
            m.msg_hdr.msg_iovlen = 1;
        }
        // msgs points at live mmsghdrs whose iovecs point at the caller's
        // frames, all alive for the call.
        let n = syscall!(sendmmsg(
            self.fd.as_raw_fd(),
            msgs.as_mut_ptr(),
            msgs.len() as u32,
            0
        ))?;
        Ok(n as usize)
    }

    /// Receive one frame into `buf`, waiting at most `timeout`. `Ok(None)` on
    /// timeout. Frames longer than `buf` are cut (the length returned is the
    /// frame's full length, as with `MSG_TRUNC`).
    pub fn recv_timeout(&self, buf: &mut [u8], timeout: Duration) -> io::Result<Option<usize>> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // Points to one live pollfd.
        let ready = syscall!(poll(&mut pfd as *mut libc::pollfd, 1, ms))?;
        if ready == 0 {
            return Ok(None);
        }
        // The buffer is a live, writable slice of the length passed.
        let n = syscall!(recv(
            self.fd.as_raw_fd(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            libc::MSG_TRUNC
        ))?;
        Ok(Some(n as usize))
    }
}

/// A duplicate of a ring's descriptor, to wait for readability from another
/// thread (the "interrupt" of an AF_PACKET queue).
#[derive(Debug)]
pub struct FdWaiter(pub(super) OwnedFd);

impl FdWaiter {
    /// Another waiter on the same socket (a duplicate descriptor).
    pub fn try_clone(&self) -> io::Result<FdWaiter> {
        Ok(FdWaiter(self.0.try_clone()?))
    }

    /// Wait on a descriptor this waiter now owns.
    pub fn from_owned(fd: OwnedFd) -> FdWaiter {
        FdWaiter(fd)
    }

    /// A waiter on an event descriptor of its own (`eventfd`), readable
    /// once [`Self::notify`] has been called: a way to end another
    /// thread's [`Self::wait_any`] at once.
    pub fn event() -> io::Result<FdWaiter> {
        let fd = syscall!(eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK))?;
        // SAFETY: `eventfd` returned a new descriptor that nothing else owns.
        Ok(FdWaiter(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Make an [`Self::event`] waiter readable (for good: it is not reset).
    pub fn notify(&self) -> io::Result<()> {
        let one = 1u64.to_ne_bytes();
        // Points to 8 live bytes, the size an eventfd write takes.
        syscall!(write(
            self.0.as_raw_fd(),
            one.as_ptr() as *const libc::c_void,
            one.len()
        ))?;
        Ok(())
    }

    /// A duplicate of the descriptor, for an event loop to watch.
    pub fn dup_fd(&self) -> io::Result<OwnedFd> {
        self.0.try_clone()
    }

    /// Wait up to `timeout` for the socket to become readable.
    pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // Points to one live pollfd.
        Ok(syscall!(poll(&mut pfd as *mut libc::pollfd, 1, ms))? > 0)
    }

    /// Wait up to `timeout` until any of `waiters` is readable; `ready[i]`
    /// says whether `waiters[i]` is. Returns how many are.
    pub fn wait_any(
        waiters: &[&FdWaiter],
        timeout: Duration,
        ready: &mut Vec<bool>,
    ) -> io::Result<usize> {
        let mut pfds: Vec<libc::pollfd> = waiters
            .iter()
            .map(|w| libc::pollfd {
                fd: w.0.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // Points to `pfds.len()` live pollfds.
        let n = syscall!(poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms))?;
        ready.clear();
        ready.extend(pfds.iter().map(|p| p.revents != 0));
        Ok(n as usize)
    }
}

/// Whether interface `name` (in the calling thread's network namespace) is
/// administratively up: `Ok(None)` if it does not exist.
pub fn iface_up(name: &str) -> io::Result<Option<bool>> {
    Ok(iface_flags(name)?.map(|f| f & libc::IFF_UP != 0))
}

/// Whether interface `name` is a loopback device (`IFF_LOOPBACK`, as `lo`
/// is): `Ok(None)` if it does not exist.
pub fn iface_loopback(name: &str) -> io::Result<Option<bool>> {
    Ok(iface_flags(name)?.map(|f| f & libc::IFF_LOOPBACK != 0))
}

/// Interface `name`'s flags (`SIOCGIFFLAGS`): `Ok(None)` if it does not
/// exist.
fn iface_flags(name: &str) -> io::Result<Option<i32>> {
    if ifindex(name).is_err() {
        return Ok(None);
    }
    // SAFETY: ifreq is plain data; all-zero is valid.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr
        .ifr_name
        .iter_mut()
        .zip(name.as_bytes().iter().take(libc::IFNAMSIZ - 1))
    {
        *d = *s as libc::c_char;
    }
    let fd = syscall!(socket(
        libc::AF_INET,
        libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
        0
    ))?;
    // SAFETY: `socket` returned a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // Points to a live ifreq with the name set.
    syscall!(ioctl(
        fd.as_raw_fd(),
        libc::SIOCGIFFLAGS,
        &mut ifr as *mut libc::ifreq
    ))?;
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    let flags = unsafe { ifr.ifr_ifru.ifru_flags };
    Ok(Some(flags as i32))
}

/// Interface `name`'s MAC address (from sysfs) and IP addresses (from
/// `getifaddrs`), in the calling thread's network namespace.
pub fn iface_addrs(name: &str) -> io::Result<([u8; 6], Vec<std::net::IpAddr>)> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{name}/address"))?;
    let mut mac = [0u8; 6];
    let parts: Vec<_> = text.trim().split(':').collect();
    if parts.len() != 6 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{name}: no Ethernet address"),
        ));
    }
    for (m, p) in mac.iter_mut().zip(parts) {
        *m =
            u8::from_str_radix(p, 16).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    }
    let addrs = crate::sys::iface::prefixes(name)?
        .into_iter()
        .map(|(a, _)| a)
        .collect();
    Ok((mac, addrs))
}
