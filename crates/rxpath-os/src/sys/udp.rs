//! Options of the kernel's own UDP sockets that the oracles, benches and
//! `rxpath quic --socket kernel` set.

use std::io;
use std::os::fd::AsRawFd;

fn set_int(sock: &std::net::UdpSocket, level: i32, opt: i32, v: i32) -> io::Result<()> {
    let v = v as libc::c_int;
    // Points to a live c_int of the size passed; the fd is the live socket.
    syscall!(setsockopt(
        sock.as_raw_fd(),
        level,
        opt,
        &v as *const libc::c_int as *const libc::c_void,
        std::mem::size_of::<libc::c_int>() as libc::socklen_t
    ))
    .map(drop)
}

/// `setsockopt(SOL_UDP, UDP_GRO)`: the kernel merges datagrams for this
/// socket (and, from the first such socket on, looks sockets up in GRO).
pub fn set_udp_gro(sock: &std::net::UdpSocket, on: bool) -> io::Result<()> {
    set_int(sock, libc::SOL_UDP, libc::UDP_GRO, on as i32)
}

/// `setsockopt(SOL_SOCKET, SO_BUSY_POLL)`: the kernel busy-polls the
/// socket's NAPI for `us` µs when a read finds nothing.
pub fn set_busy_poll(sock: &std::net::UdpSocket, us: u32) -> io::Result<()> {
    set_int(
        sock,
        libc::SOL_SOCKET,
        libc::SO_BUSY_POLL,
        us.min(i32::MAX as u32) as i32,
    )
}

/// `setsockopt(SOL_UDP, UDP_SEGMENT)`: every send of this socket is cut by
/// the kernel into datagrams of `size` bytes (GSO); 0 turns it off.
pub fn set_udp_segment(sock: &std::net::UdpSocket, size: u16) -> io::Result<()> {
    set_int(sock, libc::SOL_UDP, libc::UDP_SEGMENT, size as i32)
}
