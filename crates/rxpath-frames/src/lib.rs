//! # rxpath-frames: frames and the rings that move them
//!
//! The ground floor every packet stands on, without a device: what the
//! core's stages and the devices share.
//!
//! 1. [`sys::umem`]: the frame pool, one region of fixed-size frames, owned
//!    frame by frame through [`Frame`] tokens (like an AF_XDP UMEM).
//! 2. [`sys::ring`]: SPSC descriptor rings that move frames between a
//!    device and the stack (fill → device → RX → stack → fill).
//! 3. [`RxQueue`]: what NAPI polls, and its [`IrqLine`] for interrupt
//!    (wakeup) mitigation; [`DeviceQueueStats`], a queue's counters.
//! 4. [`mono_ns`]: the one monotonic clock of the path; [`sync`]: the one
//!    poisoned-lock helper.
//!
//! The devices themselves (the simulated NIC, AF_XDP, AF_PACKET, pcap)
//! are `rxpath-dev`'s; this crate opens no socket and starts no thread.
//! `unsafe` is confined to [`sys`], each block with a `// SAFETY:` line.
#![deny(missing_docs, missing_debug_implementations)]
#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[allow(unsafe_code)]
pub mod sys;

pub mod irq;
pub mod sync;

pub use irq::IrqLine;
pub use sys::ring::{desc_flags, Desc};
pub use sys::umem::{Frame, FramePool, Umem, UmemError, DEFAULT_FRAME_SIZE};

use serde::Serialize;
use std::sync::{Arc, OnceLock};

/// Nanoseconds since this process first asked: the one monotonic clock the
/// device layer and the runtime share, so a time stamped by a producer
/// thread and one read by a NAPI thread compare.
#[inline]
pub fn mono_ns() -> u64 {
    let o = origin_ns();
    sys::clock::monotonic_ns().saturating_sub(o) + 1
}

/// [`mono_ns`] at the last timer tick (`CLOCK_MONOTONIC_COARSE`): the
/// kernel's `jiffies`, cheap to read because it reads no hardware counter.
/// Never later than [`mono_ns`], at most a tick earlier.
#[inline]
pub fn mono_coarse_ns() -> u64 {
    let o = origin_ns();
    sys::clock::monotonic_coarse_ns().saturating_sub(o) + 1
}

/// The process's clock origin (`CLOCK_MONOTONIC` ns at the first read).
#[inline]
fn origin_ns() -> u64 {
    static ORIGIN: OnceLock<u64> = OnceLock::new();
    *ORIGIN.get_or_init(sys::clock::monotonic_ns)
}

/// Counters kept by the device for one queue, read by the stats code.
/// Mirrors `rx_missed_errors` / `rx_no_buffer_count` of `ethtool -S`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DeviceQueueStats {
    /// Packets the device offered to this queue (sent on the wire to it).
    pub offered: u64,
    /// Packets written into the RX ring.
    pub rx_ring: u64,
    /// Dropped because the RX ring was full (`rx_missed_errors`).
    pub rx_missed: u64,
    /// Dropped because no frame was posted in the fill ring (`rx_no_buffer`).
    pub rx_no_buffer: u64,
    /// Dropped because the frame was longer than a frame buffer
    /// (`rx_length_errors`).
    pub rx_too_long: u64,
    /// Interrupts (wakeups) raised.
    pub wakeups: u64,
}

/// An interrupt a NAPI thread may wait on itself ([`RxQueue::inline_irq`]):
/// the device's, which knows how (`rxpath-dev`'s `LevelIrq` waits on the
/// queue's descriptor); the thread gets its own kind back with
/// [`InlineIrq::as_any`].
pub trait InlineIrq: std::fmt::Debug + Send + Sync {
    /// As [`std::any::Any`], to get the device's kind back.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// One receive queue of a device, as NAPI sees it.
///
/// Calling context: owner thread only (whoever holds the queue's NAPI).
/// None of these methods sleeps.
pub trait RxQueue {
    /// The frame region this queue's frames live in.
    fn umem(&self) -> &Arc<Umem>;

    /// Queue index on its device.
    fn queue_index(&self) -> u16;

    /// Take the next received descriptor. Does not touch packet bytes.
    fn pull(&mut self) -> Option<Desc>;

    /// Hand the pulled RX slots back to the device (once per poll, like a
    /// driver's CQ doorbell update).
    fn pull_done(&mut self);

    /// Give a frame back to the device to be filled again.
    fn recycle(&mut self, frame: Frame);

    /// Give back many frames at once, emptying `frames` (the end of a poll).
    /// The default recycles them one by one.
    fn recycle_bulk(&mut self, frames: &mut Vec<Frame>) {
        for f in frames.drain(..) {
            self.recycle(f);
        }
    }

    /// Publish recycled frames (once per poll).
    fn recycle_done(&mut self);

    /// The queue's interrupt line, if the device raises interrupts.
    fn irq(&self) -> Option<&IrqLine>;

    /// A shared handle to the same interrupt line, for a party that must
    /// take or raise it without owning the queue (a NAPI thread waiting
    /// while a busy-polling socket owns the NAPI).
    fn irq_handle(&self) -> Option<Arc<IrqLine>> {
        None
    }

    /// Let the thread that runs this queue's NAPI wait on the device itself
    /// ([`RxQueue::inline_irq`]) instead of being woken by a separate
    /// interrupt thread: one thread hop (two context switches) less per
    /// wakeup. Only for a NAPI thread that has nothing else to wait for.
    /// Returns false when the device cannot (the default).
    fn irq_inline(&mut self) -> bool {
        false
    }

    /// The interrupt the NAPI thread waits on itself, once
    /// [`RxQueue::irq_inline`] is on (the device's own kind: `rxpath-dev`'s
    /// `LevelIrq`, which waits on its descriptor).
    fn inline_irq(&self) -> Option<&dyn InlineIrq> {
        None
    }

    /// A descriptor that is readable when the device has packets for this
    /// queue (a duplicate, the caller's to keep), for an application's
    /// event loop that polls the queue itself. `None` when there is none
    /// (the default: the simulated NIC).
    fn readiness_fd(&self) -> Option<std::io::Result<std::os::fd::OwnedFd>> {
        None
    }

    /// True when descriptors are waiting (used when re-arming the interrupt,
    /// so that a packet that raced with `napi_complete_done` is not stranded).
    fn has_pending(&mut self) -> bool;

    /// Device counters for this queue.
    fn device_stats(&self) -> DeviceQueueStats;
}
