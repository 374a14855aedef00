//! # rxpath-runtime: threads, sleeping and the real clock
//!
//! The part of rxpath that meets the OS scheduler. It runs the deterministic
//! stages of `rxpath-core` on threads:
//!
//! - a **NAPI thread** owns one or more NAPIs and runs `net_rx_action` on
//!   them. In *interrupt mode* it sleeps until a queue's IRQ line fires,
//!   schedules that NAPI, polls until the poll list is empty (NAPIs complete
//!   and re-arm their lines), and sleeps again. In *polling mode* the lines
//!   stay masked and the thread schedules every NAPI it owns on every loop,
//!   never sleeping (like threaded busy polling).
//! - a **producer thread** plays the NIC: it runs the simulated port, writes
//!   frames on another core (cold data for the NAPI thread, as after DMA)
//!   and raises IRQ lines as the coalescing settings say.
//!
//! [`run::run`] wires these up for `rxpath run` and the benchmarks, reports
//! once per interval, and at the end stops the producer, drains the queues,
//! gathers every frame back and says whether all came home.
//!
//! ```
//! use rxpath_runtime::{run, RunConfig};
//! use std::time::Duration;
//!
//! // The receive path on the simulated NIC for 200 ms: every packet
//! // accounted for, every frame back in the pool.
//! let cfg = RunConfig { duration: Duration::from_millis(200), pin: false, ..RunConfig::default() };
//! let report = run(&cfg, |_tick| {})?;
//! assert!(report.consistent());
//! assert_eq!(report.frames_home, report.frames_total);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs, missing_debug_implementations)]

pub mod clock;
pub mod ctl;
mod engine;
pub mod gen;
pub mod host;
pub mod lab;
pub mod metrics;
mod path_ends;
pub mod run;
pub mod sock;
pub mod steer;
pub mod sysctl;

pub use clock::MonotonicClock;
pub use host::{Host, HostConfig, HostDevice, HostReport};
pub use run::{
    check_iface, run, CaptureAt, GroSettings, IfName, Producer, Report, RunConfig, RunError,
    StackKind, Tick,
};
pub use sock::{Epoll, ListenShare, Opening, TcpListener, TcpStream, UdpSocket};
