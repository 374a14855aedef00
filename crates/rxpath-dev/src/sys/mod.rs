//! The device crate's `unsafe`, all of it: the system calls of the
//! real-interface backends (the frame region and the rings have theirs in
//! `rxpath-frames`, scheduling and signals in `rxpath-os`, the preload's
//! interposition layer in `rxpath-preload`'s `interpose` and `sys`).
//! Every `unsafe` block carries a `// SAFETY:` line; system calls go
//! through `rxpath_os::syscall!`.

pub mod af_packet;
pub use rxpath_frames::sys::{clock, ring, umem};
mod bpf;
pub mod iface;
pub mod neigh;
pub mod qdisc;
#[cfg(feature = "tokio")]
pub mod reactor;
pub mod route;
pub mod tap;
mod tpacket;
pub mod uring;
pub mod xdp;
pub mod xsk;
