//! What each socket call means for an fd rxpath may serve, on safe types:
//! the interposition layer (`interpose`) turns the C arguments into these
//! and the results back. `Ok(None)` (or [`Route::Kernel`]) means "the
//! kernel's call, untouched".
//!
//! By job, protocol-neutral first: `lifecycle` (socket, bind, connect,
//! close, dup, shutdown, fork's hand-back), `epoll_calls` (the program's
//! epoll sets); then UDP's: `udp_recv` (the read family), `udp_send`
//! (the send family), `udp_options` (`setsockopt`/`getsockopt`, `ioctl`);
//! TCP's: `tcp_listen` (`listen`, `accept`), `tcp_stream` (a connection's
//! reads, sends, options and addresses), `tcp_fork` (connections a forked
//! child keeps), on `crate::tcp`'s socket.

use rxpath_runtime::sock::SockError;

mod epoll_calls;
mod lifecycle;
mod tcp_fork;
mod tcp_listen;
mod tcp_stream;
mod udp_options;
mod udp_recv;
pub(crate) mod udp_send;

pub(crate) use epoll_calls::*;
pub(crate) use lifecycle::*;
pub(crate) use tcp_fork::*;
pub(crate) use tcp_listen::*;
pub(crate) use tcp_stream::*;
pub(crate) use udp_options::*;
pub(crate) use udp_recv::*;

/// An errno.
pub(crate) type Errno = i32;

/// Why rxpath does not answer a read itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotRead {
    /// It fails with this errno, as the kernel's call would.
    Errno(Errno),
    /// rxpath's queue is empty and the kernel socket behind the fd holds a
    /// datagram: the caller reads it with the program's own call, not
    /// waiting ([`crate::kside`]).
    FromKernel,
    /// The fd is the kernel's now (handed back, or in a forked child that
    /// read all it inherited): the program's own call, as it is.
    KernelNow,
}

impl From<Errno> for NotRead {
    fn from(e: Errno) -> Self {
        NotRead::Errno(e)
    }
}

/// Where a call goes.
#[derive(Debug)]
pub(crate) enum Route<T> {
    /// To the kernel, as if the library were not there.
    Kernel,
    /// Answered by rxpath.
    Done(Result<T, Errno>),
}

/// The errno a socket error reads as.
pub(crate) fn sock_errno(e: SockError) -> Errno {
    match e {
        SockError::AddrInUse(_) => libc::EADDRINUSE,
        SockError::NoPorts => libc::EAGAIN,
        SockError::WouldBlock | SockError::TimedOut => libc::EAGAIN,
        SockError::Closed => libc::EBADF,
        SockError::NotConnected => libc::EDESTADDRREQ,
        SockError::MessageTooLong { .. } => libc::EMSGSIZE,
        SockError::TooManySegments { .. } => libc::EINVAL,
        SockError::Family(_) => libc::EAFNOSUPPORT,
        SockError::NoRoute(_) => libc::ENETUNREACH,
        SockError::NoNeighbor(_) | SockError::NoSource(_) => libc::EHOSTUNREACH,
        SockError::NoTx | SockError::Tx(_) => libc::ENOBUFS,
        SockError::Invalid(_) => libc::EINVAL,
        SockError::Mcast(e) => {
            use rxpath_core::ip::mcast::McastError;
            match e {
                McastError::Invalid => libc::EINVAL,
                McastError::Joined => libc::EADDRINUSE,
                McastError::NotJoined => libc::EADDRNOTAVAIL,
                McastError::TooMany => libc::ENOBUFS,
            }
        }
    }
}
