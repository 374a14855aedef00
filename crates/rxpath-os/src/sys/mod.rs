//! The OS crate's `unsafe`, all of it: the system calls of scheduling,
//! namespaces, capabilities, signals and resource limits, and of the
//! kernel's UDP sockets' options. Every `unsafe` block carries a
//! `// SAFETY:` line; system calls go through [`syscall!`](crate::syscall).

pub mod sched;
pub mod udp;
