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

use crate::stats::{DropReason, LatencyHist, NapiStats};
use rxpath_frames::sync::lock;
use rxpath_frames::{Frame, Umem};
use rxpath_wire::Headers;
use serde::Serialize;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

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
    /// The device verified the L4 checksum (`CHECKSUM_UNNECESSARY`).
    pub csum_ok: bool,
    /// A local sender left the L4 checksum partial (`CHECKSUM_PARTIAL`).
    pub csum_partial: bool,
    /// Segments in this packet: 1, or more after GRO merged a chain.
    pub segs: u16,
    /// `gso_size` of a merged chain: the payload length of each segment
    /// but the last (0 for a plain packet). A UDP socket with `UDP_GRO`
    /// reports it with every read.
    pub gso_size: u16,
    /// Parsed headers.
    pub headers: Headers,
}

/// A received packet: ownership of its frame plus metadata.
///
/// After GRO a packet can be a chain: the head frame holds the headers and
/// the first segment's payload, and `frags` the payload of every further
/// segment, each still in its own frame (no copy). `frags` is empty (one
/// null pointer, nothing allocated) for a plain packet.
#[derive(Debug)]
pub struct Packet {
    /// The frame holding the packet (the head of a chain).
    pub frame: Frame,
    /// Offset of the packet in the frame.
    pub off: u16,
    /// Length of the packet in the head frame.
    pub len: u16,
    /// Metadata.
    pub meta: Meta,
    /// Further payload in other frames, in order (GRO).
    pub frags: Frags,
}

/// The fragments of a chain: one pointer wide, null for a plain packet.
///
/// A plain `Vec` here cost null mode a quarter of its cycles: the record is
/// moved from stage to stage, and the compiler wrote the empty vector's two
/// words with two stores and read them back with one wide load, which
/// store forwarding cannot serve (perf on an AMD EPYC). One word written and
/// read as one word forwards, and the record is 16 bytes slimmer.
// The box is the point: one word in the record instead of three.
#[allow(clippy::box_collection)]
#[derive(Debug, Default)]
pub struct Frags(Option<Box<Vec<Frag>>>);

/// Chain storage kept for reuse, so that steady-state GRO does not allocate.
pub type ChainPool = Vec<Box<Vec<Frag>>>;

impl Frags {
    /// No fragments, nothing allocated.
    pub const fn new() -> Self {
        Frags(None)
    }

    /// Number of fragments.
    #[inline]
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |v| v.len())
    }

    /// True for a plain packet.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The fragments, in order.
    #[inline]
    pub fn iter(&self) -> std::slice::Iter<'_, Frag> {
        self.0.as_deref().map_or(&[][..], |v| &v[..]).iter()
    }

    /// Append a fragment, taking storage from `pool` if there is none yet.
    #[inline]
    pub fn push(&mut self, f: Frag, pool: &mut ChainPool) {
        self.0
            .get_or_insert_with(|| pool.pop().unwrap_or_default())
            .push(f);
    }

    /// The fragments, owned (a socket keeps a UDP GRO packet's chain).
    pub fn into_vec(self) -> Vec<Frag> {
        self.0.map_or_else(Vec::new, |b| *b)
    }

    /// Free the fragments' frames into `recycle` and the storage into `pool`.
    #[inline]
    fn release(self, recycle: &mut Vec<Frame>, pool: &mut ChainPool) {
        if let Some(mut v) = self.0 {
            recycle.extend(v.drain(..).map(|f| f.frame));
            pool.push(v);
        }
    }
}

/// Payload bytes of a merged segment, in its own frame.
#[derive(Debug)]
pub struct Frag {
    /// The frame.
    pub frame: Frame,
    /// Offset of the payload in the frame.
    pub off: u16,
    /// Payload length.
    pub len: u16,
}

impl Packet {
    /// Frames (segments) this packet holds: 1 + the chain.
    #[inline]
    pub fn frames(&self) -> u64 {
        1 + self.frags.len() as u64
    }
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
    pub(crate) chains: &'a mut ChainPool,
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
        chains: &'a mut ChainPool,
        now_ns: u64,
    ) -> Self {
        RxCtx {
            umem,
            recycle,
            stats,
            chains,
            now_ns,
        }
    }

    /// Append `f` to `p`'s chain (GRO), with storage reused from packets
    /// already consumed.
    #[inline]
    pub fn push_frag(&mut self, p: &mut Packet, f: Frag) {
        p.frags.push(f, self.chains);
    }

    /// The payload of every frame of a packet, in order: the head frame's
    /// L4 payload, then each fragment.
    pub fn payload_parts<'p>(&'p self, p: &'p Packet) -> impl Iterator<Item = &'p [u8]> + 'p {
        let h = &p.meta.headers;
        let off = p.off as usize + h.payload_offset as usize;
        let head = &self.umem.data(&p.frame)[off..off + h.payload_len as usize];
        std::iter::once(head).chain(p.frags.iter().map(move |f| {
            let o = f.off as usize;
            &self.umem.data(&f.frame)[o..o + f.len as usize]
        }))
    }

    /// The packet's bytes.
    #[inline]
    pub fn data<'p>(&'p self, p: &'p Packet) -> &'p [u8] {
        let off = p.off as usize;
        &self.umem.data(&p.frame)[off..off + p.len as usize]
    }

    /// The bytes of one fragment of a chain.
    #[inline]
    pub fn frag_data<'p>(&'p self, f: &'p Frag) -> &'p [u8] {
        let o = f.off as usize;
        &self.umem.data(&f.frame)[o..o + f.len as usize]
    }

    /// The frame region.
    pub fn umem(&self) -> &Umem {
        self.umem
    }

    /// The SNMP counters of this NAPI (IP and UDP input count here).
    #[inline]
    pub fn snmp(&mut self) -> &mut crate::snmp::Snmp {
        &mut self.stats.snmp
    }

    /// The packet reached the end of the path: count its frames (segments),
    /// free them.
    #[inline(always)]
    pub fn deliver(&mut self, p: Packet) {
        // Only the frame and the chain are taken out: moving the whole
        // record costs more than the rest of the drop.
        let Packet { frame, frags, .. } = p;
        self.stats.delivered += 1 + frags.len() as u64;
        self.release(frame, frags);
    }

    #[inline(always)]
    fn release(&mut self, frame: Frame, frags: Frags) {
        self.recycle.push(frame);
        frags.release(self.recycle, self.chains);
    }

    /// The packet reached a socket, which keeps its frame until the
    /// application reads it: count it delivered and hand the frame over.
    /// The frame comes back to the device through the queue's
    /// [`FrameReturn`]. A chain's fragments are
    /// freed here (see [`keep_chain`](Self::keep_chain)).
    #[inline]
    pub fn keep(&mut self, p: Packet) -> Frame {
        let Packet { frame, frags, .. } = p;
        self.stats.delivered += 1 + frags.len() as u64;
        frags.release(self.recycle, self.chains);
        frame
    }

    /// [`keep`](Self::keep) for a chain a socket takes whole (UDP GRO):
    /// every frame counted delivered, the fragments handed over too.
    #[inline]
    pub fn keep_chain(&mut self, p: Packet) -> (Frame, Vec<Frag>) {
        let Packet { frame, frags, .. } = p;
        self.stats.delivered += 1 + frags.len() as u64;
        (frame, frags.into_vec())
    }

    /// A frame [`keep`](Self::keep) handed over could not be queued after
    /// all: count it dropped instead of delivered and free it.
    pub fn undeliver(&mut self, frame: Frame, reason: DropReason) {
        self.stats.delivered -= 1;
        self.stats.dropped.add(reason, 1);
        self.recycle.push(frame);
    }

    /// Give back frames that come home from elsewhere (sockets, workers).
    pub fn recycle_from(&mut self, ret: &FrameReturn) {
        ret.drain_into(self.recycle);
    }

    /// The packet is dropped for `reason`: count its frames, free them.
    #[inline(always)]
    pub fn drop(&mut self, p: Packet, reason: DropReason) {
        let Packet { frame, frags, .. } = p;
        self.stats.dropped.add(reason, 1 + frags.len() as u64);
        self.release(frame, frags);
    }
}

/// How a poll ended, as the stages see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollEnd {
    /// The poll used its whole budget; the NAPI stays scheduled (the kernel
    /// then flushes only GRO packets older than a tick: `napi_gro_flush(n,
    /// HZ >= 1000)` in `napi_poll`).
    Full,
    /// The queue ran dry: `napi_complete_done(work_done)`.
    Complete {
        /// Packets this poll took.
        work_done: usize,
    },
}

/// `skb->truesize` of a received frame of `frame_len` bytes, as the kernel
/// charges it to `SO_RCVBUF`: the frame in an skb of its own size
/// (`SKB_TRUESIZE(SKB_DATA_ALIGN(NET_SKB_PAD + len))` on x86-64: 576
/// bytes of `sk_buff` and `skb_shared_info`). A 64-byte UDP payload over
/// IPv4 is charged 768 bytes (the kernel charges 832 for one sent over a
/// veth); a default receive buffer holds about 277 such datagrams, as the
/// kernel's holds 257. The UMEM frame itself is not what is counted: the
/// pool bounds that, as the page allocator bounds the kernel's.
pub fn truesize(frame_len: usize) -> usize {
    const NET_SKB_PAD: usize = 64;
    const SKB_OVERHEAD: usize = 576;
    (NET_SKB_PAD + frame_len).next_multiple_of(64) + SKB_OVERHEAD
}

/// A TCP segment IP input passed: where its IP header starts in the frame
/// and whether its checksum is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSeg {
    /// Offset of the IP header in the frame.
    pub l3: usize,
    /// The sender's address.
    pub src: std::net::IpAddr,
    /// The checksum was verified here, by the device or by GRO, or is a
    /// local sender's partial one (`CHECKSUM_UNNECESSARY` /
    /// `CHECKSUM_PARTIAL`); `false`: the TCP machine sums it and counts
    /// `InCsumErrors` if it fails.
    pub verified: bool,
}

/// A UDP datagram that passed IP and UDP input: what they learnt of it,
/// handed with the packet to the stage behind IP input
/// ([`Stack::receive_udp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    /// Sender.
    pub src: SocketAddr,
    /// Destination.
    pub dst: SocketAddr,
    /// Offset of the payload from the start of the frame.
    pub payload_off: usize,
    /// Payload length (as the UDP length field says).
    pub payload_len: usize,
    /// Sent to a multicast group or a broadcast address (the kernel's
    /// `RTCF_MULTICAST | RTCF_BROADCAST`): every socket that wants it gets
    /// it.
    pub multi: bool,
}

/// A stage of the receive path: what NAPI's second loop hands packets to
/// (`napi_gro_receive()` / `netif_receive_skb()` in the kernel).
pub trait Stack {
    /// Take one parsed packet. Every packet must leave through
    /// [`RxCtx::deliver`] or [`RxCtx::drop`], now or in a later call (a
    /// stage that holds packets, like GRO, reports them in [`held`](Self::held)).
    fn receive(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>);

    /// A frame the flow dissector could not parse (its headers are
    /// default). Dropped as `malformed` unless the stage reads the frame
    /// itself (IP input counts why, under the kernel's SNMP names). GRO
    /// hands these straight through.
    fn malformed(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        ctx.drop(pkt, DropReason::Malformed);
    }

    /// A UDP datagram that IP and UDP input passed, with what they learnt
    /// of it (`ip_protocol_deliver_rcu()` → `udp_rcv()` → the socket
    /// lookup). IP input calls this in front of a socket layer
    /// (`IpConfig::deliver_all` off); an end that is not one takes the
    /// datagram as any packet.
    #[inline]
    fn receive_udp(&mut self, pkt: Packet, _d: &Datagram, ctx: &mut RxCtx<'_>) {
        self.receive(pkt, ctx)
    }

    /// A TCP segment IP input passed, in front of a socket layer with TCP
    /// (`IpConfig::tcp`): `ip_protocol_deliver_rcu()` → `tcp_v4_rcv()`.
    /// An end without TCP drops it, as it was dropped before: the
    /// kernel's.
    #[inline]
    fn receive_tcp(&mut self, pkt: Packet, _seg: &TcpSeg, ctx: &mut RxCtx<'_>) {
        ctx.drop(pkt, DropReason::UnhandledProto)
    }

    /// IP or UDP input refused a packet for `reason` (counted under its
    /// SNMP name; the packet is dropped by the caller). An end that keeps
    /// counters of its own hears of it here.
    #[inline]
    fn refused(&mut self, _reason: DropReason) {}

    /// The end of a bundle (RX bulking): stages that batch work flush here.
    fn bundle_done(&mut self, _ctx: &mut RxCtx<'_>) {}

    /// The end of a poll (GRO flushes here). `end` says whether NAPI stays
    /// scheduled or completes. Returns a timer deadline (ns) if the stage
    /// needs the NAPI polled again then (`gro_flush_timeout`).
    fn poll_done(&mut self, _ctx: &mut RxCtx<'_>, _end: PollEnd) -> Option<u64> {
        None
    }

    /// The path stops: let go of what the stage holds across polls (IP
    /// reassembly queues), counting it dropped. Stages in front pass it on.
    fn stop(&mut self, _ctx: &mut RxCtx<'_>) {}

    /// Packets held inside the stage, not yet delivered or dropped.
    fn held(&self) -> u64 {
        0
    }

    /// The latency this stage measured, if it measures any.
    fn latency(&self) -> Option<&LatencyHist> {
        None
    }

    /// True if this stage (or one behind it) reads the time: `ctx.now_ns`
    /// or a packet's `rx_ns`. When neither the stack nor the NAPI (GRO, a
    /// capture tap) does, `net_rx_action` stamps packets with the coarse
    /// clock (the kernel stamps nothing unless timestamping is asked for,
    /// and measures its budget window in jiffies) and reads no fine clock
    /// per poll. A stage that does not say is assumed to read it.
    fn wants_time(&self) -> bool {
        true
    }
}

/// The end of the path for latency experiments: delivers like [`Sink`], and
/// for TCP packets whose payload starts with a send time stamped by the
/// simulated NIC ([`rxpath_frames::mono_ns`], 8 bytes little endian) records
/// the time until this stage saw it (the poll's `now`).
#[derive(Debug, Default, Clone)]
pub struct LatencySink {
    /// Send-to-delivery latency of stamped packets.
    pub hist: LatencyHist,
}

impl Stack for LatencySink {
    fn receive(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        let h = &pkt.meta.headers;
        if matches!(h.l4, rxpath_wire::L4::Tcp { .. }) && h.payload_len >= 8 {
            let off = pkt.off as usize + h.payload_offset as usize;
            let b = &ctx.umem.data(&pkt.frame)[off..off + 8];
            let sent = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
            self.hist.record(ctx.now_ns.saturating_sub(sent));
        }
        Sink.receive(pkt, ctx);
    }

    fn latency(&self) -> Option<&LatencyHist> {
        Some(&self.hist)
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
    fn wants_time(&self) -> bool {
        false
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
    fn wants_time(&self) -> bool {
        false
    }
}

/// A boxed stage is a stage (paths chosen at run time, e.g. on workers).
impl<S: Stack + ?Sized> Stack for Box<S> {
    #[inline]
    fn receive(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        (**self).receive(pkt, ctx)
    }
    fn malformed(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        (**self).malformed(pkt, ctx)
    }
    #[inline]
    fn receive_udp(&mut self, pkt: Packet, d: &Datagram, ctx: &mut RxCtx<'_>) {
        (**self).receive_udp(pkt, d, ctx)
    }
    fn refused(&mut self, reason: DropReason) {
        (**self).refused(reason)
    }
    fn bundle_done(&mut self, ctx: &mut RxCtx<'_>) {
        (**self).bundle_done(ctx)
    }
    fn poll_done(&mut self, ctx: &mut RxCtx<'_>, end: PollEnd) -> Option<u64> {
        (**self).poll_done(ctx, end)
    }
    fn stop(&mut self, ctx: &mut RxCtx<'_>) {
        (**self).stop(ctx)
    }
    fn held(&self) -> u64 {
        (**self).held()
    }
    fn latency(&self) -> Option<&LatencyHist> {
        (**self).latency()
    }
    fn wants_time(&self) -> bool {
        (**self).wants_time()
    }
}

/// A NAPI instance's unique id; `0` means "none".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct NapiId(pub u32);

impl fmt::Display for NapiId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Frames freed away from their NAPI (a socket's `recv` on an application
/// thread) on their way back to the queue's fill ring. The owner of the
/// NAPI takes them at the end of each poll.
///
/// Calling context: any thread may [`put`](Self::put); the NAPI owner
/// drains.
#[derive(Debug, Default)]
pub struct FrameReturn {
    frames: Mutex<Vec<Frame>>,
    len: AtomicUsize,
    /// An idle NAPI thread asleep without a deadline, to wake at the next
    /// return ([`Self::wake_on_return`]).
    waiter: Mutex<Option<std::task::Waker>>,
    wake: std::sync::atomic::AtomicBool,
    /// How many frames must wait before the sleeper is woken.
    wake_at: AtomicUsize,
}

impl FrameReturn {
    /// Return one frame.
    pub fn put(&self, f: Frame) {
        let mut v = lock(&self.frames);
        v.push(f);
        // Release pairs with the Acquire in `pending`.
        self.len.store(v.len(), Ordering::Release);
        drop(v);
        self.notify();
    }

    /// Return many frames under one lock.
    pub fn put_all(&self, it: impl IntoIterator<Item = Frame>) {
        let mut v = lock(&self.frames);
        v.extend(it);
        self.len.store(v.len(), Ordering::Release);
        drop(v);
        self.notify();
    }

    /// An idle NAPI thread is going to sleep with no deadline: wake `w`
    /// once `at` frames wait here (frames coming home need the owner, and
    /// a device that ran out of buffers raises no interrupt). Fewer wait
    /// for the next poll, which takes them home anyway: a reader that
    /// gives back a frame or two does not wake the thread (a context
    /// switch per read on the reader's CPU), and the device keeps all but
    /// `at` of the frames the sockets do not hold. The caller looks at
    /// [`Self::pending`] after this and before it parks.
    pub fn wake_on_return(&self, w: std::task::Waker, at: usize) {
        *lock(&self.waiter) = Some(w);
        self.wake_at.store(at.max(1), Ordering::Relaxed);
        self.wake.store(true, Ordering::SeqCst);
    }

    /// The idle NAPI thread is awake again: returns need not wake it.
    pub fn stop_waking(&self) {
        self.wake.store(false, Ordering::Relaxed);
    }

    fn notify(&self) {
        // SeqCst pairs with `wake_on_return`: either the sleeper sees the
        // frames in `pending`, or this sees its flag.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.wake.load(Ordering::Relaxed)
            && self.len.load(Ordering::Relaxed) >= self.wake_at.load(Ordering::Relaxed)
            && self.wake.swap(false, Ordering::AcqRel)
        {
            if let Some(w) = lock(&self.waiter).as_ref() {
                w.wake_by_ref();
            }
        }
    }

    /// Frames waiting to go home.
    pub fn pending(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Move the returned frames to `out` (the NAPI's recycle list).
    pub fn drain_into(&self, out: &mut Vec<Frame>) -> usize {
        if self.pending() == 0 {
            return 0;
        }
        let mut v = lock(&self.frames);
        let n = v.len();
        out.append(&mut v);
        self.len.store(0, Ordering::Release);
        n
    }
}
