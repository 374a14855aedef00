//! A plain AF_PACKET socket bound to one interface: send raw Ethernet
//! frames, receive what the interface's taps see (after GRO, which is what
//! makes it a kernel oracle for our GRO).
//!
//! This is the simple `recv`/`send` form; the TPACKET_V3 ring with fanout
//! for the receive path is a separate backend.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// `ETH_P_ALL` in network order, as `socket()` and `bind()` want it.
const ETH_P_ALL_BE: u16 = (libc::ETH_P_ALL as u16).to_be();

/// An AF_PACKET raw socket bound to one interface.
#[derive(Debug)]
pub struct RawSocket {
    fd: OwnedFd,
    ifindex: i32,
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
        let ifindex = ifindex(iface)?;
        let fd = syscall!(socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            ETH_P_ALL_BE as i32
        ))?;
        // SAFETY: `socket` returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_ALL_BE;
        sll.sll_ifindex = ifindex;
        syscall!(bind(
            fd.as_raw_fd(),
            // The pointer is to a live sockaddr_ll of the size passed.
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t
        ))?;
        Ok(RawSocket { fd, ifindex })
    }

    /// The interface index.
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// Do not see frames this host sends on the interface
    /// (`PACKET_IGNORE_OUTGOING`).
    pub fn ignore_outgoing(&self) -> io::Result<()> {
        let one: libc::c_int = 1;
        syscall!(setsockopt(
            self.fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            // Points to a live c_int of the size passed.
            &one as *const libc::c_int as *const libc::c_void,
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
