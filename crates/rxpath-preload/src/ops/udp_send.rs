//! The send side of a served socket: `sendto`/`sendmsg` of one datagram
//! (with `UDP_SEGMENT`) and `sendmmsg`'s batches, through rxpath's TX port
//! or, where rxpath has no way there, the kernel socket behind the fd.

use crate::ops::{sock_errno, Route};
use crate::udp::sock::Accel;
use rxpath_runtime::sock::SockError;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

/// `sendto()`/`send()`/`write()` of one datagram: through rxpath's TX
/// port, or through the kernel socket behind the fd when the interface
/// has no way there (no route, no neighbour yet: the kernel routes and
/// resolves it).
pub(crate) fn send(a: &Accel, payload: &[u8], dst: Option<SocketAddr>) -> Route<usize> {
    send_seg(a, payload, dst, None)
}

/// [`send`] with `UDP_SEGMENT` (from the send's control message, else the
/// socket's option): a buffer longer than the segment size leaves as
/// datagrams of that size, as the kernel's GSO cuts it.
pub(crate) fn send_seg(
    a: &Accel,
    payload: &[u8],
    dst: Option<SocketAddr>,
    segment: Option<u16>,
) -> Route<usize> {
    if a.kernel_only.load(Ordering::Relaxed) {
        return Route::Kernel;
    }
    if shut(a) {
        return Route::Done(Err(libc::EPIPE));
    }
    let seg = segment.unwrap_or_else(|| a.segment.load(Ordering::Relaxed)) as usize;
    let gso = seg > 0 && payload.len() > seg;
    let r = if gso {
        match dst.or_else(|| a.sock.peer_addr()) {
            Some(d) => a
                .sock
                .send_segments(payload, Some(seg), d, 0)
                .map(|_| payload.len()),
            None => Err(SockError::NotConnected),
        }
    } else {
        match dst {
            Some(d) => a.sock.send_to(payload, d),
            None => a.sock.send(payload),
        }
    };
    match r {
        Ok(n) => Route::Done(Ok(n)),
        Err(e) => failed(e, gso),
    }
}

/// Datagrams of one `sendmmsg` (`run`: no segmentation, a source the
/// socket may use, each with its destination) handed to the TX port at
/// once, so the batch costs one kick of the TX ring. Returns how many left
/// (one the full TX ring dropped counts as sent, as [`send`] counts it)
/// and, if the one after them failed, where it goes, as [`send`] says.
pub(crate) fn send_run(a: &Accel, run: &[(&[u8], SocketAddr)]) -> (usize, Option<Route<usize>>) {
    if a.kernel_only.load(Ordering::Relaxed) {
        return (0, Some(Route::Kernel));
    }
    if shut(a) {
        return (0, Some(Route::Done(Err(libc::EPIPE))));
    }
    match a.sock.send_batch_until(run) {
        // Fewer without an error: the ring was full for datagram `n`
        // (dropped, counted); those after it were not tried.
        (n, None) => ((n + 1).min(run.len()), None),
        (n, Some(e)) => (n, Some(failed(e, false))),
    }
}

/// Where a datagram rxpath could not send goes: the kernel socket behind
/// the fd when rxpath has no way there (no route, neighbour or source
/// here) or it is over the MTU with `IP_PMTUDISC_DO` or past 64 KiB (the
/// kernel answers as the kernel would; a segmented send is refused as
/// such); else the error's errno.
fn failed(e: SockError, gso: bool) -> Route<usize> {
    match e {
        SockError::NoRoute(_) | SockError::NoNeighbor(_) | SockError::NoSource(_) => Route::Kernel,
        SockError::MessageTooLong { .. } if !gso => Route::Kernel,
        e => Route::Done(Err(sock_errno(e))),
    }
}

/// The socket was shut down for writing.
fn shut(a: &Accel) -> bool {
    a.shut.load(Ordering::Relaxed) & crate::udp::sock::SHUT_WRITE != 0
}

/// The source address a send's `IP_PKTINFO`/`IPV6_PKTINFO` asks for:
/// honoured (`true`) when it is what rxpath sends from anyway (none, the
/// socket's own address, or for a wildcard socket the interface's address
/// of that family); else the send is refused.
pub(crate) fn pktinfo_source_ok(a: &Accel, src: std::net::IpAddr) -> bool {
    if src.is_unspecified() {
        return true;
    }
    let local = a.sock.local_addr().ip();
    if local == src {
        return true;
    }
    let first = a
        .sock
        .host()
        .config()
        .local_addrs
        .iter()
        .find(|x| x.is_ipv4() == src.is_ipv4())
        .copied();
    local.is_unspecified() && first == Some(src)
}
