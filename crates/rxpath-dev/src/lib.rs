//! # rxpath-dev: where packets come from
//!
//! The device boundary of rxpath, shaped like a driver's RX queue under
//! `napi->poll(napi, budget)`:
//!
//! 1. [`sys::umem`]: the frame pool, one region of fixed-size frames, owned
//!    frame by frame through [`Frame`] tokens (like an AF_XDP UMEM).
//! 2. [`sys::ring`]: SPSC descriptor rings that move frames between the device
//!    and the stack (fill → device → RX → stack → fill).
//! 3. [`RxQueue`]: what NAPI polls: pull descriptors, publish, recycle frames,
//!    and an [`IrqLine`] for interrupt (wakeup) mitigation.
//! 4. [`sim`]: a simulated multi-queue NIC with RSS over the Toeplitz hash,
//!    descriptor rings that drop when full (`rx_missed_errors`), interrupt
//!    coalescing, and seeded traffic sources; plus a same-thread "null" queue
//!    that measures engine cost alone.
//!
//! `unsafe` is confined to [`sys`], each block with a `// SAFETY:` line.
//!
//! ```
//! use rxpath_dev::sim::{NullQueue, Traffic, TrafficConfig};
//! use rxpath_dev::RxQueue;
//! use rxpath_wire::toeplitz::Toeplitz;
//!
//! // A null queue of 8 frames of seeded traffic: pull a descriptor, look
//! // at its frame, give the frame back; every frame comes home.
//! let mut traffic = Traffic::new(TrafficConfig::default(), &Toeplitz::default());
//! let mut q = NullQueue::new(0, 8, &mut traffic)?;
//! let d = q.pull().expect("a null queue is never empty");
//! let bytes = &q.umem().data(&d.frame)[d.off as usize..][..d.len as usize];
//! assert!(rxpath_wire::parse(bytes).is_ok());
//! q.recycle(d.frame);
//! assert!(q.into_pool().is_home());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs, missing_debug_implementations)]
#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[macro_use]
extern crate rxpath_os;

#[allow(unsafe_code)]
pub mod sys;

pub mod irq;
pub mod packet;
pub mod pcap;
pub mod sim;

pub use rxpath_frames::sync;
pub use rxpath_frames::{
    desc_flags, mono_coarse_ns, mono_ns, Desc, DeviceQueueStats, Frame, FramePool, InlineIrq,
    IrqLine, RxQueue, Umem, UmemError, DEFAULT_FRAME_SIZE,
};
