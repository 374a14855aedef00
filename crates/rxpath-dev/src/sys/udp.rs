//! Options of the kernel's own UDP sockets that the oracles and benches
//! set on their peers.

use std::io;
use std::os::fd::AsRawFd;

/// `setsockopt(SOL_UDP, UDP_GRO)`: the kernel merges datagrams for this
/// socket (and, from the first such socket on, looks sockets up in GRO).
pub fn set_udp_gro(sock: &std::net::UdpSocket, on: bool) -> io::Result<()> {
    let v = on as libc::c_int;
    // Points to a live c_int of the size passed; the fd is the live socket.
    syscall!(setsockopt(
        sock.as_raw_fd(),
        libc::SOL_UDP,
        libc::UDP_GRO,
        &v as *const libc::c_int as *const libc::c_void,
        std::mem::size_of::<libc::c_int>() as libc::socklen_t
    ))
    .map(drop)
}

/// `setsockopt(SOL_SOCKET, SO_BUSY_POLL)`: the kernel busy-polls the
/// socket's NAPI for `us` µs when a read finds nothing.
pub fn set_busy_poll(sock: &std::net::UdpSocket, us: u32) -> io::Result<()> {
    let v = us.min(i32::MAX as u32) as libc::c_int;
    // Points to a live c_int of the size passed; the fd is the live socket.
    syscall!(setsockopt(
        sock.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_BUSY_POLL,
        &v as *const libc::c_int as *const libc::c_void,
        std::mem::size_of::<libc::c_int>() as libc::socklen_t
    ))
    .map(drop)
}
