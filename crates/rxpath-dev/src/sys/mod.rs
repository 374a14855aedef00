//! The device crate's `unsafe`, all of it: the frame region, the
//! descriptor rings that move frame ownership between threads, and the
//! system calls of the real-interface backends (the preload's
//! interposition layer has its own, in `rxpath-preload`'s `interpose` and
//! `sys`). Every `unsafe` block carries a `// SAFETY:` line; system calls
//! go through `syscall!`.

/// Call a libc function and turn `-1` into the thread's `io::Error`, as mio
/// does.
macro_rules! syscall {
    ($fn: ident ( $($arg: expr),* $(,)* ) ) => {{
        #[allow(unused_unsafe)]
        // SAFETY: each call site passes arguments that satisfy the libc
        // function's contract (valid fds, pointers to live, sized buffers);
        // see the comment at the call.
        let res = unsafe { libc::$fn($($arg, )*) };
        if res == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(res)
        }
    }};
}

pub mod af_packet;
pub use rxpath_frames::sys::{clock, ring, umem};
mod bpf;
pub mod iface;
#[cfg(feature = "tokio")]
pub mod reactor;
pub mod sched;
pub mod tap;
pub mod udp;
pub mod uring;
pub mod xdp;
pub mod xsk;
