//! # rxpath-os: the process and the OS
//!
//! What rxpath asks of the OS that is not a device: the CPU a thread runs
//! on and its scheduling class, network namespaces, capabilities and the
//! root check, signals, resource usage and the memlock limit ([`sched`]),
//! and the options of the kernel's own UDP sockets that the oracles,
//! benches and `rxpath quic --socket kernel` set ([`udp`]). Below the
//! devices (`rxpath-dev` takes its memlock hints from here) and beside
//! the frames; `unsafe` is confined to [`sys`], each block with a
//! `// SAFETY:` line.
#![deny(missing_docs, missing_debug_implementations)]
#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]
// `syscall!` passes its caller's arguments to the libc call it wraps, in
// its unsafe block: that is what it is for, and each call site documents
// them.
#![allow(clippy::macro_metavars_in_unsafe)]

/// Call a libc function and turn `-1` into the thread's `io::Error`, as mio
/// does (the device crate's system calls use it too). The call is the
/// unsafe part and the arguments are its own: each call site says, in a
/// comment, why they meet the function's contract.
#[macro_export]
macro_rules! syscall {
    ($fn: ident ( $($arg: expr),* $(,)* ) ) => {{
        #[allow(unused_unsafe)]
        // SAFETY: each call site passes arguments that satisfy the libc
        // function's contract (valid fds, pointers to live, sized buffers);
        // see the comment at the call.
        let res = unsafe { ::libc::$fn($($arg, )*) };
        if res == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(res)
        }
    }};
}

#[allow(unsafe_code)]
pub mod sys;

pub use sys::{sched, udp};
