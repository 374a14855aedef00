//! rxpath's TCP: a sans-I/O protocol machine with Linux's behaviour.
//!
//! In the manner of `quinn-proto`: segments (IP packets) and the time go
//! in ([`Stack::input`], [`Stack::on_timeout`]); segments, the next timer
//! deadline and socket readiness come out ([`Stack::poll_transmit`],
//! [`Stack::next_deadline`], [`Stack::events`]). Nothing here reads a
//! clock, opens a file or parks a thread.
//!
//! The kernel's TCP is the specification and its names the vocabulary
//! (`tcp_input.c`: `tcp_rcv_state_process`, `tcp_data_queue`,
//! `__tcp_ack_snd_check`; `tcp_output.c`: `tcp_write_xmit`; `tcp_timer.c`).
//! packetdrill's scripts judge it (`docs/RELIABILITY.md`).
//!
//! ICMP errors quoting its segments go in by the same door
//! ([`Stack::input`]): path MTU, unreachable peers (`tcp_v4_err`).
//!
//! Not yet here (said in the README and the guide's TCP page): urgent
//! data, the experimental Fast Open option, Accurate ECN, pacing. On the path `rxpath-core`'s socket
//! layer drives it (a host with TCP); `rxpath-drill` drives it for
//! packetdrill.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod conn;
mod ctx;
pub mod cubic;
pub mod ecn;
mod err;
pub mod fastopen;
pub mod info;
mod input;
pub mod mib;
mod output;
pub mod rcvbuf;
pub mod recovery;
mod retransmit;
pub mod seq;
mod stack;
pub mod state;
pub mod time;
mod timer;
pub mod wire;

pub use config::TcpConfig;
pub use conn::State;
pub use ctx::Transmit;
pub use info::TcpInfo;
pub use stack::{Errno, SockId, SockOpt, Stack, TCP_FASTOPEN_CONNECT};
pub use time::Nanos;
