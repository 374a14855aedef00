//! What the stack receives from NAPI, and the [`Stack`] trait.
//!
//! A [`Packet`] is a frame token plus where the packet lies in it and a small
//! metadata record: the queue and `napi_id` it came from (seed 000 stamps
//! every skb with `napi_id`), the device's RX hash, and the headers parsed in
//! NAPI's second loop. No bytes are copied.
//!
//! A stage receives packets through [`Stack::receive`] with an [`RxCtx`] that
//! gives it the frame bytes and the two ways a packet leaves the path:
//! [`RxCtx::deliver`] or [`RxCtx::drop`]. Both count, and both return the
//! frame towards the device's fill ring.

use crate::napi::NapiId;
use crate::stats::{DropReason, NapiStats};
use rxpath_dev::{Frame, Umem};
use rxpath_wire::Headers;

/// Metadata carried with every packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Meta {
    /// Device queue the packet arrived on.
    pub queue: u16,
    /// `napi_id` of that queue's NAPI (seed 000: `skb->napi_id`).
    pub napi_id: NapiId,
    /// RX hash from the device (0 = none).
    pub rxhash: u32,
    /// Receive time, ns on the path's clock (0 if not stamped).
    pub rx_ns: u64,
    /// Parsed headers.
    pub headers: Headers,
}

/// A received packet: ownership of its frame plus metadata.
#[derive(Debug)]
pub struct Packet {
    /// The frame holding the packet.
    pub frame: Frame,
    /// Offset of the packet in the frame.
    pub off: u16,
    /// Length of the packet.
    pub len: u16,
    /// Metadata.
    pub meta: Meta,
}

/// The context a stage runs in: frame bytes, counters, and where frames go.
///
/// Calling context: the NAPI owner's thread, inside `poll` (softirq in the
/// kernel). Does not sleep.
#[derive(Debug)]
pub struct RxCtx<'a> {
    pub(crate) umem: &'a Umem,
    pub(crate) recycle: &'a mut Vec<Frame>,
    pub(crate) stats: &'a mut NapiStats,
    /// The time of this poll.
    pub now_ns: u64,
}

impl<'a> RxCtx<'a> {
    /// A context over `umem` that collects freed frames in `recycle` and
    /// counts in `stats` (for stages driven outside NAPI, e.g. tests).
    pub fn new(
        umem: &'a Umem,
        recycle: &'a mut Vec<Frame>,
        stats: &'a mut NapiStats,
        now_ns: u64,
    ) -> Self {
        RxCtx {
            umem,
            recycle,
            stats,
            now_ns,
        }
    }

    /// The packet's bytes.
    #[inline]
    pub fn data<'p>(&'p self, p: &'p Packet) -> &'p [u8] {
        let off = p.off as usize;
        &self.umem.data(&p.frame)[off..off + p.len as usize]
    }

    /// The frame region.
    pub fn umem(&self) -> &Umem {
        self.umem
    }

    /// The packet reached the end of the path: count it, free its frame.
    #[inline(always)]
    pub fn deliver(&mut self, p: Packet) {
        self.stats.delivered += 1;
        self.recycle.push(p.frame);
    }

    /// The packet is dropped for `reason`: count it, free its frame.
    #[inline(always)]
    pub fn drop(&mut self, p: Packet, reason: DropReason) {
        self.stats.dropped.add(reason, 1);
        self.recycle.push(p.frame);
    }
}

/// A stage of the receive path: what NAPI's second loop hands packets to
/// (`napi_gro_receive()` / `netif_receive_skb()` in the kernel).
pub trait Stack {
    /// Take one parsed packet. Every packet must leave through
    /// [`RxCtx::deliver`] or [`RxCtx::drop`], now or in a later call (a
    /// stage that holds packets, like GRO, reports them in [`held`](Self::held)).
    fn receive(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>);

    /// The end of a bundle (RX bulking): stages that batch work flush here.
    fn bundle_done(&mut self, _ctx: &mut RxCtx<'_>) {}

    /// The end of a poll, before `napi_complete_done` (GRO flushes here).
    fn poll_done(&mut self, _ctx: &mut RxCtx<'_>) {}

    /// Packets held inside the stage, not yet delivered or dropped.
    fn held(&self) -> u64 {
        0
    }
}

/// The end of the path as far as it is built: parsed IP packets with a
/// transport header are delivered, others dropped as `unhandled_proto`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Sink;

impl Stack for Sink {
    #[inline(always)]
    fn receive(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        use rxpath_wire::L4;
        match pkt.meta.headers.l4 {
            L4::Tcp { .. } | L4::Udp => ctx.deliver(pkt),
            _ => ctx.drop(pkt, DropReason::UnhandledProto),
        }
    }
}

/// The lowest RX level of seed 001: parse, then drop everything (reason
/// `rxdrop`), like XDP_DROP or the seed's drop point in the driver.
#[derive(Debug, Default, Clone, Copy)]
pub struct RxDrop;

impl Stack for RxDrop {
    #[inline(always)]
    fn receive(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        ctx.drop(pkt, DropReason::Rxdrop);
    }
}
