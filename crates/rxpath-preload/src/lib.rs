//! # rxpath-preload: unmodified programs on rxpath
//!
//! `librxpath_preload.so`, loaded with `LD_PRELOAD` (or by `rxpath exec`),
//! puts a program's UDP sockets (and, with `RXPATH_PROTOCOLS=udp,tcp`, its
//! TCP listeners and the connections they accept) on rxpath's receive path, as Onload and VMA
//! do for their vendors' NICs, on any interface AF_XDP (or AF_PACKET) can
//! open. The program is not changed or rebuilt: its calls to the C library's
//! socket API reach this library first.
//!
//! ```text
//!  program ── socket() bind() recvfrom() sendto() poll() epoll_wait() ...
//!     │
//!  interpose        the exported symbols: raw pointers to slices, errno
//!     │             (unsafe: here and in sys only)
//!  ops              what each call means for an fd rxpath may serve, by
//!     │             job: lifecycle, epoll_calls; UDP's udp_recv,
//!     │             udp_send, udp_options; TCP's tcp_listen, tcp_stream
//!  readiness        poll/select and blocking reads over rxpath sockets
//!     │             and kernel fds
//!  table, kside     fd → candidate | rxpath socket | epoll set | inherited;
//!     │             the kernel socket behind each served fd (loopback,
//!     │             another interface, a port lent at a fork)
//!  epoll, host      epoll sets of rxpath sockets and kernel fds; one rxpath
//!     │             Host per process on RXPATH_IFACE, started at the
//!     │             first bind it serves, shut down at exit
//!  device           the host's device fds a sleeping thread waits on
//!     │
//!  served           a served socket of either protocol as poll and
//!     │             epoll see it
//!  udp, tcp         UDP's room: a served socket and who sleeps on it
//!     │             (sock), what its queue held at a fork (forkq), its
//!     │             multicast memberships (mcast); TCP's: a served
//!     │             listener or connection (sock)
//!  watchers         who sleeps on a served socket
//!  linkwatch        the interface deleted, made again, down, up, its MTU
//!     │
//!  sys, config      the C library's real calls and eventfds; RXPATH_*
//! ```
//!
//! Every accelerated socket keeps its kernel UDP socket behind the same fd
//! number, bound to the same address: the port stays reserved in the kernel,
//! `close` and `getsockname` keep working, and a datagram to a destination
//! the interface does not reach leaves through the kernel socket. A served
//! TCP listener's kernel socket listens too (loopback connections are the
//! kernel's, accepted through the same fd); a connection rxpath accepted
//! goes by a kernel socket that never connects. A socket this library
//! does not accelerate (TCP unless asked, AF_UNIX, netlink, another
//! interface, an ephemeral client port, an option rxpath cannot honour set
//! before `bind`) is the kernel's, untouched.
//!
//! After `fork` the child's copies of rxpath sockets are the kernel's (the
//! parent keeps serving; the child lets go of the parent's XDP program),
//! and what the parent's queues held at the fork either may read (the
//! `udp::forkq` module); the port is lent to the kernel until the parent
//! reads the socket again, and a child that reads a socket which held
//! nothing (a pre-forking server's worker) keeps it the kernel's for every
//! process. After `exec` the new image starts fresh.
//!
//! A datagram that reaches the kernel socket behind a served fd (loopback,
//! another interface) is read too (the `kside` module).
//!
//! Not built yet (said in the README and the guide): a forked child
//! serving a port on rxpath itself.

#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(missing_docs, missing_debug_implementations)]

pub mod config;
mod device;
mod epoll;
pub mod host;
#[allow(unsafe_code)]
mod interpose;
mod kside;
mod linkwatch;
mod ops;
mod readiness;
mod served;
#[allow(unsafe_code)]
mod sys;
mod table;
mod tcp;
mod udp;
mod watchers;

pub use config::Config;
pub use host::{Accounting, Fallback, PreloadReport, SocketPath};
