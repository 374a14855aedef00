//! What rxpath asks the kernel about an interface, and the placeholder
//! socket that keeps the kernel from answering what rxpath serves.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

/// The interface's RX queue count (`/sys/class/net/IF/queues/rx-*`, what
/// `ETHTOOL_GCHANNELS` reports as combined + rx channels).
pub fn rx_queues(name: &str) -> io::Result<usize> {
    let n = std::fs::read_dir(format!("/sys/class/net/{name}/queues"))?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
        .count();
    Ok(n.max(1))
}

/// The interface's driver (`ETHTOOL_GDRVINFO`, as `ethtool -i` prints it).
pub fn driver(name: &str) -> io::Result<String> {
    #[repr(C)]
    struct DrvInfo {
        cmd: u32,
        driver: [u8; 32],
        version: [u8; 32],
        fw_version: [u8; 32],
        bus_info: [u8; 32],
        erom_version: [u8; 32],
        reserved2: [u8; 12],
        n_priv_flags: u32,
        n_stats: u32,
        testinfo_len: u32,
        eedump_len: u32,
        regdump_len: u32,
    }
    const ETHTOOL_GDRVINFO: u32 = 3;
    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    if name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "name too long"));
    }
    let sock =
        std::net::UdpSocket::bind("0.0.0.0:0").or_else(|_| std::net::UdpSocket::bind("[::]:0"))?;
    // SAFETY: both are plain C structs for which all-zero bytes are valid.
    let mut info: DrvInfo = unsafe { std::mem::zeroed() };
    info.cmd = ETHTOOL_GDRVINFO;
    // SAFETY: as above.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = &mut info as *mut DrvInfo as *mut libc::c_char;
    // `info` outlives the call; the kernel writes at most sizeof(DrvInfo).
    syscall!(ioctl(
        sock.as_raw_fd(),
        SIOCETHTOOL as _,
        &mut ifr as *mut libc::ifreq
    ))?;
    let end = info.driver.iter().position(|&b| b == 0).unwrap_or(32);
    Ok(String::from_utf8_lossy(&info.driver[..end]).into_owned())
}

/// Drivers whose devices carry traffic from senders on this host, which
/// leave UDP/TCP checksums partial (`CHECKSUM_PARTIAL`) for hardware that
/// never computes them.
pub const LOCAL_TRAFFIC_DRIVERS: [&str; 7] = [
    "veth", "tun", "bridge", "netkit", "macvlan", "ipvlan", "dummy",
];

/// True if `name`'s driver carries local traffic (see
/// [`LOCAL_TRAFFIC_DRIVERS`]).
pub fn carries_local_traffic(name: &str) -> bool {
    driver(name).is_ok_and(|d| LOCAL_TRAFFIC_DRIVERS.contains(&d.as_str()))
}

/// A kernel UDP socket bound to the address rxpath serves, with a socket
/// filter that drops everything: the kernel finds a socket for the port,
/// so it neither answers with ICMP port unreachable nor queues anything
/// (each datagram it sees is counted in its own `Udp: InErrors`). Held
/// while rxpath serves the port.
#[derive(Debug)]
pub struct KernelPortGuard {
    sock: std::os::fd::OwnedFd,
}

impl KernelPortGuard {
    /// Bind `addr` in the kernel (an IPv6 wildcard is dual-stack, as
    /// rxpath's) and attach the drop-all filter.
    pub fn bind(addr: SocketAddr) -> io::Result<KernelPortGuard> {
        let sock = std::net::UdpSocket::bind(addr)?;
        // One classic BPF instruction: `ret #0` (keep no bytes).
        let mut insn = [libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: 0,
        }];
        let prog = libc::sock_fprog {
            len: 1,
            filter: insn.as_mut_ptr(),
        };
        // `prog` and the instruction it points to live across the call.
        syscall!(setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            &prog as *const libc::sock_fprog as *const libc::c_void,
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t
        ))?;
        Ok(KernelPortGuard { sock: sock.into() })
    }

    /// Hold TCP port `addr` in the kernel: a TCP socket bound there (an
    /// IPv6 wildcard dual-stack) that never listens, so no other kernel
    /// socket takes the port, and a port 0 is given one. The kernel must
    /// not see the port's segments (it would answer a SYN with a reset):
    /// the XDP program or AF_PACKET's steering takes them all.
    pub fn bind_tcp(addr: SocketAddr) -> io::Result<KernelPortGuard> {
        use socket2::{Domain, Protocol, Socket, Type};
        let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        if addr.is_ipv6() {
            sock.set_only_v6(false)?;
            sock.set_freebind_ipv6(true)?;
        } else {
            // An address the interface has but the kernel's routing does
            // not call local (a lab that routes it out) is held too.
            sock.set_freebind(true)?;
        }
        sock.bind(&addr.into())?;
        Ok(KernelPortGuard { sock: sock.into() })
    }

    /// The address the kernel bound (its port, if 0 was asked for).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        let s = socket2::SockRef::from(&self.sock);
        s.local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))
    }
}

/// The interface's connected prefixes: each address with its prefix length
/// (`getifaddrs` netmasks), in the calling thread's network namespace.
pub fn prefixes(name: &str) -> io::Result<Vec<(std::net::IpAddr, u8)>> {
    let mut out = Vec::new();
    each_address(|n, a, len| {
        if n == name.as_bytes() {
            out.push((a, len));
        }
    })?;
    Ok(out)
}

/// Every address of every interface in the calling thread's network
/// namespace, with its interface's name: what the kernel takes as the
/// host's own (`RTN_LOCAL`), whichever interface a datagram for it comes
/// in on.
pub fn host_addresses() -> io::Result<Vec<(String, std::net::IpAddr)>> {
    let mut out = Vec::new();
    each_address(|n, a, _| out.push((String::from_utf8_lossy(n).into_owned(), a)))?;
    Ok(out)
}

/// Call `f` with each interface address `getifaddrs` lists: the
/// interface's name, the address, its prefix length.
fn each_address(mut f: impl FnMut(&[u8], std::net::IpAddr, u8)) -> io::Result<()> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    syscall!(getifaddrs(&mut head as *mut *mut libc::ifaddrs))?;
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` walks the list getifaddrs returned, valid until
        // freeifaddrs below; its pointers are valid or null.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_netmask.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string (checked non-null).
        let n = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }.to_bytes();
        // SAFETY: both pointers are non-null; sa_family says which sockaddr
        // the address is, and the netmask has the same family.
        unsafe {
            match (*ifa.ifa_addr).sa_family as i32 {
                libc::AF_INET => {
                    let a = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    let m = &*(ifa.ifa_netmask as *const libc::sockaddr_in);
                    f(
                        n,
                        std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)).into(),
                        u32::from_be(m.sin_addr.s_addr).count_ones() as u8,
                    );
                }
                libc::AF_INET6 => {
                    let a = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    let m = &*(ifa.ifa_netmask as *const libc::sockaddr_in6);
                    f(
                        n,
                        std::net::Ipv6Addr::from(a.sin6_addr.s6_addr).into(),
                        u128::from_be_bytes(m.sin6_addr.s6_addr).count_ones() as u8,
                    );
                }
                _ => {}
            }
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(())
}

/// Whether the kernel has an IPv4 / IPv6 default route through `name`
/// (`/proc/net/route`, `/proc/net/ipv6_route`).
pub fn default_routes(name: &str) -> [bool; 2] {
    let v4 = std::fs::read_to_string("/proc/net/route")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .any(|l| {
            let f: Vec<_> = l.split_whitespace().collect();
            f.len() > 7 && f[0] == name && f[1] == "00000000" && f[7] == "00000000"
        });
    let v6 = std::fs::read_to_string("/proc/net/ipv6_route")
        .unwrap_or_default()
        .lines()
        .any(|l| {
            let f: Vec<_> = l.split_whitespace().collect();
            f.len() > 9 && f[9] == name && f[1] == "00" && f[0].bytes().all(|b| b == b'0')
        });
    [v4, v6]
}

/// An interface's state as the kernel has it now: its index, whether it
/// is up, its MTU (`/sys/class/net/IF`); `None` if there is no such
/// interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkState {
    /// Its index (a new one if it was deleted and made again).
    pub ifindex: u32,
    /// `IFF_UP`.
    pub up: bool,
    /// Its MTU.
    pub mtu: u32,
}

impl LinkState {
    /// `name`'s state now, or `None` if it does not exist.
    pub fn of(name: &str) -> Option<LinkState> {
        let read = |f: &str| std::fs::read_to_string(format!("/sys/class/net/{name}/{f}")).ok();
        let num = |f: &str| read(f)?.trim().parse::<u32>().ok();
        let flags = read("flags")?;
        let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).ok()?;
        Some(LinkState {
            ifindex: num("ifindex")?,
            up: flags & libc::IFF_UP as u32 != 0,
            mtu: num("mtu")?,
        })
    }
}

/// The kernel's link and address notifications (`RTMGRP_LINK`,
/// `RTMGRP_IPV4_IFADDR` and `RTMGRP_IPV6_IFADDR` on a `NETLINK_ROUTE`
/// socket): an interface made, deleted, set up or down, its MTU changed,
/// an address added or removed, in this network namespace.
#[derive(Debug)]
pub struct LinkEvents {
    fd: std::os::fd::OwnedFd,
}

impl LinkEvents {
    /// Subscribe.
    pub fn open() -> io::Result<LinkEvents> {
        use std::os::fd::FromRawFd;
        let fd = syscall!(socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            libc::NETLINK_ROUTE
        ))?;
        // SAFETY: socket() returned a new descriptor nothing else owns.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        // SAFETY: all-zero bytes are a valid sockaddr_nl.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as u16;
        sa.nl_groups =
            (libc::RTMGRP_LINK | libc::RTMGRP_IPV4_IFADDR | libc::RTMGRP_IPV6_IFADDR) as u32;
        // `sa` lives across the call, its size given.
        syscall!(bind(
            fd.as_raw_fd(),
            &sa as *const libc::sockaddr_nl as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t
        ))?;
        Ok(LinkEvents { fd })
    }

    /// `name`'s state now, asked of the kernel through this socket
    /// (`SIOCGIFINDEX`, `SIOCGIFFLAGS`, `SIOCGIFMTU`: no file is read, so a
    /// process that chrooted, or a `/sys` of another namespace, still
    /// sees its interface). `Ok(None)`: there is no such interface.
    pub fn state(&self, name: &str) -> io::Result<Option<LinkState>> {
        if name.len() >= libc::IFNAMSIZ {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "name too long"));
        }
        let ask = |req: libc::c_ulong| -> io::Result<Option<libc::ifreq>> {
            // SAFETY: all-zero bytes are a valid ifreq.
            let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
            for (d, s) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
                *d = s as libc::c_char;
            }
            // `ifr` is a live ifreq the kernel fills.
            match syscall!(ioctl(
                self.fd.as_raw_fd(),
                req as _,
                &mut ifr as *mut libc::ifreq
            )) {
                Ok(_) => Ok(Some(ifr)),
                Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Ok(None),
                Err(e) => Err(e),
            }
        };
        let Some(i) = ask(libc::SIOCGIFINDEX)? else {
            return Ok(None);
        };
        let Some(f) = ask(libc::SIOCGIFFLAGS)? else {
            return Ok(None);
        };
        let Some(m) = ask(libc::SIOCGIFMTU)? else {
            return Ok(None);
        };
        // SAFETY: each ioctl filled the union member it names.
        let (ifindex, flags, mtu) = unsafe {
            (
                i.ifr_ifru.ifru_ifindex,
                f.ifr_ifru.ifru_flags,
                m.ifr_ifru.ifru_mtu,
            )
        };
        Ok(Some(LinkState {
            ifindex: ifindex as u32,
            up: flags as i32 & libc::IFF_UP != 0,
            mtu: mtu as u32,
        }))
    }

    /// Wait up to `timeout` for notifications; true if any came (all read).
    pub fn wait(&self, timeout: std::time::Duration) -> io::Result<bool> {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // `p` is one live pollfd.
        let n = match syscall!(poll(&mut p, 1, ms)) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(false),
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(false);
        }
        let mut buf = [0u8; 8192];
        // Each read takes one message batch; a full buffer (ENOBUFS) still
        // means something changed.
        loop {
            let r = syscall!(recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                0
            ));
            match r {
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}
