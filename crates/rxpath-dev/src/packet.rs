//! The AF_PACKET backend: one TPACKET_V3 ring per queue, the rings of an
//! interface joined in a PACKET_FANOUT hash group so that each flow lands
//! on one queue (software RSS). Used when XDP cannot be.
//!
//! The kernel has already copied each packet into its ring; we copy it once
//! more into a frame of our pool so that the rest of the path sees the same
//! frames as with every other device (AF_XDP will not need that copy). A
//! packet that finds no free frame is dropped and counted `rx_no_buffer`;
//! packets the kernel dropped because the ring was full are `rx_missed`; a
//! packet longer than a ring slot or a frame of ours (on a veth, a local
//! sender's 64 KiB GSO datagram, which no wire carries) arrives cut short
//! and is dropped here, counted `rx_too_long`, rather than passed up
//! truncated.
//!
//! Interrupts: a small thread per queue waits for the socket to become
//! readable while the queue's [`IrqLine`] is armed and raises it, which is
//! level-triggered interrupt semantics over `poll(2)`.

use crate::sys::af_packet::{PacketRing, RingConfig};
use crate::sys::ring::Desc;
use crate::sys::umem::{Frame, FramePool, Umem};
use crate::{DeviceQueueStats, IrqLine, RxQueue};
use std::cell::Cell;
use std::io;
use std::sync::Arc;

/// One AF_PACKET receive queue.
#[derive(Debug)]
pub struct PacketQueue {
    index: u16,
    ring: PacketRing,
    umem: Arc<Umem>,
    free: Vec<Frame>,
    irq: Arc<IrqLine>,
    level: Option<crate::irq::LevelIrq>,
    seen: u64,
    no_buffer: u64,
    too_long: u64,
    kernel_drops: Cell<u64>,
}

impl PacketQueue {
    /// Open queue `index` of `iface`: a ring in fanout group `group` (all
    /// queues of one interface share it), with `frames` frames of our own.
    /// With `interrupts`, a thread raises the queue's IRQ line when packets
    /// wait. `per_frame`: a TPACKET_V2 ring that hands each frame over at
    /// once (sockets waiting for one request), else TPACKET_V3 blocks
    /// (handed over when full or after 1 ms: bulk receive).
    pub fn open(
        iface: &str,
        index: u16,
        group: Option<u16>,
        frames: usize,
        interrupts: bool,
        per_frame: bool,
    ) -> io::Result<Self> {
        let ring = PacketRing::open(
            iface,
            RingConfig {
                fanout_group: group,
                per_frame,
                ..RingConfig::default()
            },
        )
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => io::Error::new(
                e.kind(),
                format!("{e} (an AF_PACKET socket needs CAP_NET_RAW: run as root)"),
            ),
            Some(libc::ENOBUFS) | Some(libc::ENOMEM) => io::Error::new(
                e.kind(),
                format!("{e} (no memory for the packet ring: RLIMIT_MEMLOCK or free memory)"),
            ),
            _ => e,
        })?;
        // Frames this host sends are not received ones.
        ring.socket().ignore_outgoing()?;
        let pool = FramePool::new(frames, crate::DEFAULT_FRAME_SIZE)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let umem = pool.umem().clone();
        let mut free = Vec::with_capacity(frames);
        let mut pool = pool;
        while let Some(f) = pool.alloc() {
            free.push(f);
        }
        let irq = Arc::new(IrqLine::default());
        let level = if interrupts {
            Some(crate::irq::LevelIrq::spawn(
                format!("rxpath-irq/{index}"),
                ring.waiter()?,
                irq.clone(),
            )?)
        } else {
            None
        };
        Ok(PacketQueue {
            index,
            ring,
            umem,
            free,
            irq,
            level,
            seen: 0,
            no_buffer: 0,
            too_long: 0,
            kernel_drops: Cell::new(0),
        })
    }

    /// Run the BPF socket filter `prog` on the ring's socket
    /// ([`crate::sys::tap::TapProgram::filter_fd`]).
    pub fn attach_filter(&self, prog: std::os::fd::RawFd) -> io::Result<()> {
        self.ring.socket().attach_bpf(prog)
    }

    /// Stop the interrupt thread and give back the pool (all frames must have
    /// been recycled).
    pub fn into_pool(mut self) -> FramePool {
        self.stop_irq();
        let free = std::mem::take(&mut self.free);
        FramePool::from_frames(self.umem.clone(), free)
    }

    fn stop_irq(&mut self) {
        // Dropping it stops its thread.
        self.level = None;
    }
}

impl Drop for PacketQueue {
    fn drop(&mut self) {
        self.stop_irq();
    }
}

impl RxQueue for PacketQueue {
    fn umem(&self) -> &Arc<Umem> {
        &self.umem
    }
    fn queue_index(&self) -> u16 {
        self.index
    }
    fn pull(&mut self) -> Option<Desc> {
        loop {
            let slot = self.ring.next_packet()?;
            self.seen += 1;
            let vlan = if slot.vlan_tci.is_some() { 4 } else { 0 };
            if (slot.wire_len as usize) > slot.data.len()
                || slot.data.len() + vlan > self.umem.frame_size()
            {
                self.too_long += 1;
                continue;
            }
            let Some(mut frame) = self.free.pop() else {
                self.no_buffer += 1;
                continue;
            };
            let buf = self.umem.data_mut(&mut frame);
            let d = slot.data;
            // The kernel took the VLAN tag out of the frame; put it back so
            // the path sees the frame as it was on the wire.
            let len = match slot.vlan_tci {
                Some(tci) if d.len() >= 12 && d.len() + 4 <= buf.len() => {
                    buf[..12].copy_from_slice(&d[..12]);
                    buf[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
                    buf[14..16].copy_from_slice(&tci.to_be_bytes());
                    buf[16..16 + d.len() - 12].copy_from_slice(&d[12..]);
                    d.len() + 4
                }
                _ => {
                    let n = d.len().min(buf.len());
                    buf[..n].copy_from_slice(&d[..n]);
                    n
                }
            };
            return Some(Desc {
                frame,
                off: 0,
                len: len as u16,
                rxhash: slot.rxhash,
                flags: slot.csum_flags,
            });
        }
    }
    fn pull_done(&mut self) {}
    fn recycle(&mut self, frame: Frame) {
        self.free.push(frame);
    }
    fn recycle_bulk(&mut self, frames: &mut Vec<Frame>) {
        self.free.append(frames);
    }
    fn recycle_done(&mut self) {}
    fn irq(&self) -> Option<&IrqLine> {
        self.level.as_ref().map(|_| &*self.irq)
    }
    fn irq_handle(&self) -> Option<Arc<IrqLine>> {
        self.level.as_ref().map(|_| self.irq.clone())
    }
    fn irq_inline(&mut self) -> bool {
        self.level.as_mut().map(|l| l.make_inline()).is_some()
    }
    fn inline_irq(&self) -> Option<&dyn rxpath_frames::InlineIrq> {
        self.level
            .as_ref()
            .filter(|l| l.is_inline())
            .map(|l| l as &dyn rxpath_frames::InlineIrq)
    }
    fn has_pending(&mut self) -> bool {
        self.ring.has_pending()
    }
    fn readiness_fd(&self) -> Option<std::io::Result<std::os::fd::OwnedFd>> {
        self.level.as_ref().map(|l| l.readiness_fd())
    }
    fn device_stats(&self) -> DeviceQueueStats {
        if let Ok((_, drops)) = self.ring.kernel_stats() {
            self.kernel_drops
                .set(self.kernel_drops.get() + drops as u64);
        }
        let missed = self.kernel_drops.get();
        DeviceQueueStats {
            offered: self.seen + missed,
            rx_ring: self.seen - self.no_buffer - self.too_long,
            rx_missed: missed,
            rx_no_buffer: self.no_buffer,
            rx_too_long: self.too_long,
            wakeups: self.irq.wakeups(),
        }
    }
}
