//! NAPI: budgeted polling of one device queue, with RX bulking.
//!
//! One [`Napi`] per device queue, like a driver's `struct napi_struct`
//! embedded in its RX ring. It has a [`NapiId`] (seed 000: `napi_hash_add`
//! gives every NAPI a unique id, stamped on every packet so a socket can
//! find the queue its data came from) and a [`NapiState`] whose bits say who
//! may poll it.
//!
//! ## `poll(budget)` with RX bulking (seed 001)
//!
//! [`Napi::poll`] is the driver's poll function (`mlx5e_poll_rx_cq` in the
//! seed) in its two-loop form:
//!
//! 1. **loop 1** pulls up to a bundle of descriptors off the RX ring and
//!    issues a prefetch for each packet's first cache line, touching no
//!    packet data;
//! 2. **loop 2** parses each packet (`eth_type_trans` and the flow dissector)
//!    and hands it to the [`Stack`] (`napi_gro_receive`), then tells the stack
//!    the bundle is done.
//!
//! Bundle size 1 is the classic per-packet loop. The bundle can also be cut
//! where the RX hash changes ([`BundleMode::split_on_hash`]), the variant
//! Jesper Brouer proposes in the seed's thread: the stack then gets one
//! flow per bundle, while loop 1 keeps a bundle's worth of descriptors
//! pulled and prefetched ahead (a cut does not stop the prefetching, or
//! interleaved flows would make every bundle one packet and every miss
//! serial). A poll never takes more than
//! `budget` packets; the RX ring's consumer index and the fill ring are
//! published once per poll (the driver's doorbell).
//!
//! ## Completion and interrupts
//!
//! If a poll did less than its budget the queue is drained and the poll calls
//! [`napi_complete_done`](Napi::poll) — clearing `SCHED` and re-arming the
//! queue's interrupt. If packets raced in between the last pull and the
//! re-arm, the interrupt fires at once (as hardware does when a CQ is armed
//! with completions pending). A poll that used its whole budget stays
//! scheduled and is polled again (the kernel's `repoll` list).
//!
//! ## Ownership
//!
//! Exactly one party polls a NAPI at a time: whoever set `SCHED` in its
//! [`NapiState`]. The NAPI thread sets it through
//! [`NapiState::schedule_prep`] when an interrupt arrives (or on every loop
//! in polling mode); a busy-polling socket sets `SCHED | IN_BUSY_POLL`
//! through [`NapiState::try_busy_poll`], which fails while the NAPI is
//! scheduled. While a socket owns it, `schedule_prep` fails and records
//! `MISSED`, so the NAPI thread does not poll it; releasing the ownership
//! hands the NAPI back. These mirror `napi_schedule_prep()`,
//! `napi_complete_done()` and `napi_busy_loop()`/`busy_poll_stop()` in
//! net/core/dev.c.

mod state;
mod table;

pub use state::{bits, NapiId, NapiState};
pub use table::NapiTable;

use crate::gro::{FlushReason, Gro, GroConfig};
use crate::ip::CsumPolicy;
use crate::packet::{Meta, Packet, PollEnd, RxCtx, Stack};
use crate::stats::NapiStats;
use rxpath_frames::{desc_flags, Desc, Frame, RxQueue};
use serde::Serialize;
use std::fmt;

/// The default NAPI weight (`NAPI_POLL_WEIGHT`).
pub const NAPI_POLL_WEIGHT: usize = 64;

/// The first id `napi_hash_add` hands out: ids up to `NR_CPUS` are reserved
/// for `sender_cpu` in the kernel (`MIN_NAPI_ID = NR_CPUS + 1`, with the
/// common `NR_CPUS = 8192`).
pub const MIN_NAPI_ID: u32 = 8193;

/// How NAPI's first loop groups descriptors (seed 001).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BundleMode {
    /// Descriptors pulled and prefetched before the stack runs (1 = the
    /// classic per-packet loop; at most the budget).
    pub size: usize,
    /// Also cut a bundle where the RX hash changes.
    pub split_on_hash: bool,
}

impl Default for BundleMode {
    fn default() -> Self {
        BundleMode {
            size: 16,
            split_on_hash: false,
        }
    }
}

/// What one poll did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct PollResult {
    /// Packets taken from the queue (never more than the budget).
    pub work: usize,
    /// True if the NAPI completed (`napi_complete_done` succeeded: the queue
    /// looked empty and ownership was given up). False means it stays
    /// scheduled and must be polled again.
    pub completed: bool,
}

/// One NAPI instance over one device queue.
pub struct Napi<Q: RxQueue> {
    id: NapiId,
    queue: Q,
    weight: usize,
    bundle: BundleMode,
    interrupts: bool,
    state: std::sync::Arc<NapiState>,
    scratch: Vec<Desc>,
    /// Split on hash: descriptors pulled and prefetched ahead of loop 2
    /// (empty between polls).
    window: std::collections::VecDeque<Desc>,
    recycle: Vec<Frame>,
    chains: crate::packet::ChainPool,
    stats: NapiStats,
    timer: Option<u64>,
    // Boxed: `finish` takes it out of the NAPI every poll, and moving the
    // flow table inline cost a memcpy of its whole size each time.
    gro: Option<Box<Gro>>,
    rx_tap: Option<RxTap>,
    csum: CsumMode,
    /// `napi_defer_hard_irqs` and the `gro_flush_timeout` it waits on.
    defer: IrqDeferral,
}

/// Interrupt mitigation (`napi_defer_hard_irqs` with `gro_flush_timeout`,
/// net/core/dev.c `napi_complete_done`): a poll that did work leaves the
/// interrupt masked and arms the NAPI timer `gro_flush_timeout` ahead
/// instead, up to `defer_hard_irqs` empty polls in a row; what arrives
/// meanwhile waits for the timer and is taken in one poll.
#[derive(Debug, Default)]
struct IrqDeferral {
    /// `napi_defer_hard_irqs` (0 or none = off; a live knob).
    hard_irqs: Option<crate::gro::GroKnob>,
    /// `defer_hard_irqs_count`: deferrals left before the interrupt is
    /// re-armed.
    left: u32,
    /// `gro_flush_timeout` (the timer's period; deferral needs it).
    timeout: Option<crate::gro::GroKnob>,
}

/// An observer of every frame a NAPI takes from its queue, before GRO
/// (bytes, receive time): a capture point (the runtime writes pcap with it).
pub type RxTap = Box<dyn FnMut(&[u8], u64) + Send>;

impl<Q: RxQueue> fmt::Debug for Napi<Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Napi")
            .field("id", &self.id)
            .field("queue", &self.queue.queue_index())
            .field("weight", &self.weight)
            .field("bundle", &self.bundle)
            .field("state", &self.state.bits())
            .finish()
    }
}

impl<Q: RxQueue> Napi<Q> {
    /// A NAPI over `queue` with `weight` (usually [`NAPI_POLL_WEIGHT`]).
    /// With `interrupts`, completion re-arms the queue's IRQ line (interrupt
    /// mode); without, the owner polls it continuously (polling mode).
    pub fn new(queue: Q, weight: usize, bundle: BundleMode, interrupts: bool) -> Self {
        let weight = weight.max(1);
        let bundle = BundleMode {
            size: bundle.size.clamp(1, weight),
            ..bundle
        };
        if let Some(irq) = queue.irq() {
            if interrupts {
                irq.arm();
            } else {
                irq.disarm();
            }
        }
        Napi {
            id: NapiId::default(),
            queue,
            weight,
            bundle,
            interrupts,
            state: Default::default(),
            scratch: Vec::with_capacity(weight),
            window: std::collections::VecDeque::with_capacity(bundle.size),
            recycle: Vec::with_capacity(weight * 2),
            chains: Vec::new(),
            stats: NapiStats::default(),
            timer: None,
            csum: CsumMode::default(),
            gro: None,
            rx_tap: None,
            defer: IrqDeferral::default(),
        }
    }

    /// `napi_defer_hard_irqs`: after a poll that did work, keep the
    /// interrupt masked for up to `n` polls in a row that find nothing,
    /// the NAPI timer polling every `gro_flush_timeout` (`timeout`, ns;
    /// 0 turns deferral off, as in the kernel). Interrupt mode only. Both
    /// are knobs shared with whoever may change them while it runs (the
    /// kernel's sysfs files); a change takes effect at the next
    /// completion.
    pub fn set_defer_hard_irqs(&mut self, n: crate::gro::GroKnob, timeout: crate::gro::GroKnob) {
        self.defer = IrqDeferral {
            hard_irqs: Some(n),
            left: 0,
            timeout: Some(timeout),
        };
    }

    /// The id (0 until registered in a [`NapiTable`]).
    pub fn id(&self) -> NapiId {
        self.id
    }

    /// The NAPI's weight: the budget of one poll.
    pub fn weight(&self) -> usize {
        self.weight
    }

    /// True in interrupt mode (completion re-arms the queue's interrupt).
    pub fn interrupts(&self) -> bool {
        self.interrupts
    }

    /// The shared state word (ownership).
    pub fn state(&self) -> &std::sync::Arc<NapiState> {
        &self.state
    }

    /// The device queue.
    pub fn queue(&self) -> &Q {
        &self.queue
    }

    /// The device queue, mutably.
    pub fn queue_mut(&mut self) -> &mut Q {
        &mut self.queue
    }

    /// Give the queue back (after the NAPI is stopped).
    pub fn into_queue(self) -> Q {
        self.queue
    }

    /// Counters.
    pub fn stats(&self) -> &NapiStats {
        &self.stats
    }

    /// Turn GRO on for this NAPI (`ethtool -K dev gro on`); each NAPI has
    /// its own flow table, as in the kernel. `None` turns it off (packets
    /// held are given back by [`Napi::flush_gro`] first).
    pub fn set_gro(&mut self, cfg: Option<GroConfig>) {
        self.gro = cfg.map(|c| Box::new(Gro::new(c)));
    }

    /// The checksum policy (`--csum`) and whether the device's driver
    /// carries local senders' traffic (veth, tun/tap, bridge): what GRO and
    /// the socket stage may trust, decided once per packet before both.
    pub fn set_csum(&mut self, policy: CsumPolicy, local_traffic: bool) {
        self.csum = CsumMode {
            policy,
            local_traffic,
        };
    }

    /// Watch every frame this NAPI takes, before GRO (capture at "rx").
    pub fn set_rx_tap(&mut self, tap: Option<RxTap>) {
        self.rx_tap = tap;
    }

    /// True if this NAPI reads the time itself: GRO (packet age, the flush
    /// timer) or a capture tap (each frame's time).
    pub fn wants_time(&self) -> bool {
        self.gro.is_some() || self.rx_tap.is_some()
    }

    /// This NAPI's GRO, if on.
    pub fn gro(&self) -> Option<&Gro> {
        self.gro.as_deref()
    }

    /// Segments held in GRO (`received = delivered + dropped + held`).
    pub fn held(&self) -> u64 {
        self.gro.as_ref().map_or(0, |g| g.held())
    }

    /// Pass up everything GRO holds (stopping, or turning GRO off).
    /// Calling context: the owner, as for `poll`.
    pub fn flush_gro<S: Stack>(&mut self, stack: &mut S, now_ns: u64) {
        if let Some(mut g) = self.gro.take() {
            self.with_ctx(now_ns, |ctx| g.flush_all(FlushReason::PollEnd, ctx, stack));
            self.gro = Some(g);
        }
    }

    /// The path stops: GRO passes up what it holds, and the stack lets go
    /// of what it keeps across polls (reassembly queues) of this queue's
    /// frames. Calling context: the owner, as for `poll`.
    pub fn stop<S: Stack>(&mut self, stack: &mut S, now_ns: u64) {
        self.flush_gro(stack, now_ns);
        self.with_ctx(now_ns, |ctx| stack.stop(ctx));
    }

    /// Run `f` in this NAPI's context, then give the frames it freed back to
    /// the device.
    fn with_ctx<R>(&mut self, now_ns: u64, f: impl FnOnce(&mut RxCtx<'_>) -> R) -> R {
        let Napi {
            queue,
            recycle,
            chains,
            stats,
            ..
        } = self;
        let mut ctx = RxCtx {
            umem: queue.umem(),
            recycle,
            stats,
            chains,
            now_ns,
        };
        let r = f(&mut ctx);
        queue.recycle_bulk(recycle);
        queue.recycle_done();
        r
    }

    /// Give frames that come home from elsewhere (the bottom half on other
    /// workers, sockets) back to the device's fill ring.
    /// Calling context: the owner.
    pub fn recycle_frames(&mut self, frames: &mut Vec<rxpath_frames::Frame>) {
        if frames.is_empty() {
            return;
        }
        self.queue.recycle_bulk(frames);
        self.queue.recycle_done();
    }

    /// Bundle mode.
    pub fn bundle(&self) -> BundleMode {
        self.bundle
    }

    /// The hard-IRQ handler: if the queue's interrupt was raised, count a
    /// wakeup and try to schedule the NAPI (`napi_schedule`). Returns true if
    /// the caller now owns it and must put it on its poll list.
    pub fn take_irq(&mut self) -> bool {
        self.irq_raised() && self.state.schedule_prep()
    }

    /// Take the queue's interrupt if it was raised, counting the wakeup;
    /// the caller then schedules the NAPI (or finds it owned: `MISSED`).
    pub fn irq_raised(&mut self) -> bool {
        match self.queue.irq() {
            Some(irq) if irq.take() => {
                self.stats.wakeups += 1;
                true
            }
            _ => false,
        }
    }

    /// Poll the queue for at most `budget` packets, running `stack` on them
    /// in bundles, and complete the NAPI if the queue ran dry.
    ///
    /// Calling context: the caller owns the NAPI (holds `SCHED`: it won
    /// [`NapiState::schedule_prep`] or [`NapiState::try_busy_poll`]). Does
    /// not sleep. Mirrors a driver's `napi->poll(napi, budget)`.
    pub fn poll<S: Stack>(&mut self, budget: usize, stack: &mut S, now_ns: u64) -> PollResult {
        debug_assert!(
            self.state.bits() & bits::SCHED != 0,
            "poll without owning the NAPI"
        );
        let work = self.poll_ring(budget, stack, now_ns);
        self.stats.polls += 1;
        if work >= budget {
            self.stats.polls_full += 1;
            if let Some(t) = self.finish(stack, now_ns, PollEnd::Full) {
                self.timer = Some(t);
            }
            return PollResult {
                work,
                completed: false,
            };
        }
        // `napi_complete_done(work)`: the stack flushes (all of GRO, or
        // with gro_flush_timeout only what is old, arming the timer).
        self.timer = self.finish(stack, now_ns, PollEnd::Complete { work_done: work });
        let completed = self.complete_done(work, now_ns);
        PollResult { work, completed }
    }

    /// Poll without completing: for a busy poller, which gives the NAPI back
    /// with [`NapiState::busy_poll_stop`] instead (the kernel's busy poll
    /// calls `napi->poll` and leaves completion to `busy_poll_stop`).
    pub fn poll_owned<S: Stack>(&mut self, budget: usize, stack: &mut S, now_ns: u64) -> usize {
        let work = self.poll_ring(budget, stack, now_ns);
        self.stats.polls += 1;
        if work >= budget {
            self.stats.polls_full += 1;
        }
        if let Some(t) = self.finish(stack, now_ns, PollEnd::Full) {
            self.timer = Some(t);
        }
        work
    }

    /// `napi_complete_done(work_done)`: give up ownership and re-arm the
    /// interrupt (interrupt mode). Returns false if the NAPI must be polled
    /// again (`MISSED`).
    fn complete_done(&mut self, work_done: usize, now_ns: u64) -> bool {
        // `napi_defer_hard_irqs`: work resets the count; each completion
        // with some left keeps the line masked and arms the timer.
        let d = &mut self.defer;
        if work_done > 0 {
            d.left = d
                .hard_irqs
                .as_ref()
                .map_or(0, |k| k.get().min(u32::MAX as u64) as u32);
        }
        let mut defer_until = None;
        if d.left > 0 {
            d.left -= 1;
            let timeout = d.timeout.as_ref().map_or(0, |k| k.get());
            if timeout > 0 {
                defer_until = Some(now_ns + timeout);
            }
        }
        if !self.state.complete() {
            return false;
        }
        self.stats.completions += 1;
        if let (Some(t), true) = (defer_until, self.interrupts) {
            self.stats.irq_deferrals += 1;
            self.timer = Some(self.timer.map_or(t, |x| x.min(t)));
            return true;
        }
        if self.interrupts {
            if let Some(irq) = self.queue.irq() {
                irq.arm();
            }
            // A packet that arrived after our last pull but before the re-arm
            // did not raise the line; hardware would interrupt as soon as the
            // queue is armed with work pending, so do the same.
            if self.queue.has_pending() {
                if let Some(irq) = self.queue.irq() {
                    irq.raise();
                }
            }
        }
        true
    }

    /// The two-loop poll (seed 001). Returns the packets taken.
    #[inline]
    fn poll_ring<S: Stack>(&mut self, budget: usize, stack: &mut S, now_ns: u64) -> usize {
        let Napi {
            id,
            queue,
            bundle,
            scratch,
            window,
            recycle,
            chains,
            stats,
            gro,
            rx_tap,
            csum,
            ..
        } = self;
        let qi = queue.queue_index();
        let mut done = 0;
        // Loop 2 over `$descs`: parse each packet and run the stack on it,
        // then tell the stack the bundle is done.
        macro_rules! deliver {
            ($descs:expr) => {{
                stats.bundles += 1;
                let umem = queue.umem();
                let mut ctx = RxCtx {
                    umem,
                    recycle,
                    stats,
                    chains,
                    now_ns,
                };
                // The GRO decision is taken once per bundle, not per
                // packet: each variant of loop 2 is its own monomorphic copy.
                let (pkts, bytes) = match gro {
                    Some(g) => loop2($descs, &mut ctx, qi, *id, *csum, rx_tap, ViaGro(g, stack)),
                    None => loop2($descs, &mut ctx, qi, *id, *csum, rx_tap, Direct(stack)),
                };
                ctx.stats.received += pkts;
                ctx.stats.bytes += bytes;
                stack.bundle_done(&mut ctx);
            }};
        }
        if bundle.split_on_hash {
            // Loop 1 keeps `size` descriptors pulled and prefetched ahead of
            // loop 2, which takes them one run of a flow at a time: the
            // stack sees one flow per bundle, and the misses on packet data
            // still overlap when every packet is of another flow.
            while done < budget {
                while window.len() < bundle.size && done + window.len() < budget {
                    let Some(d) = queue.pull() else { break };
                    queue.umem().prefetch(&d.frame, d.off as usize);
                    window.push_back(d);
                }
                let Some(h) = window.front().map(|d| d.rxhash) else {
                    break;
                };
                let run = window.iter().take_while(|d| d.rxhash == h).count();
                done += run;
                deliver!(window.drain(..run));
            }
            return done;
        }
        while done < budget {
            let want = bundle.size.min(budget - done);
            // Loop 1: pull descriptors, prefetch packet data, touch nothing.
            while scratch.len() < want {
                let Some(d) = queue.pull() else { break };
                queue.umem().prefetch(&d.frame, d.off as usize);
                scratch.push(d);
            }
            if scratch.is_empty() {
                break;
            }
            done += scratch.len();
            deliver!(scratch.drain(..));
        }
        done
    }

    /// The end of a poll: let the stack flush (GRO), hand the RX slots back
    /// and recycle freed frames. Returns the timer the stack asks for.
    fn finish<S: Stack>(&mut self, stack: &mut S, now_ns: u64, end: PollEnd) -> Option<u64> {
        self.queue.pull_done();
        let mut gro = self.gro.take();
        let timer = self.with_ctx(now_ns, |ctx| {
            let gro_timer = gro.as_mut().and_then(|g| g.poll_done(ctx, end, stack));
            match (gro_timer, stack.poll_done(ctx, end)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        });
        self.gro = gro;
        timer
    }

    /// The NAPI's timer (the kernel's `napi->timer`, armed by
    /// `napi_complete_done` when `gro_flush_timeout` is set): its deadline.
    pub fn timer(&self) -> Option<u64> {
        self.timer
    }

    /// `napi_watchdog()`: if the timer is due at `now_ns`, disarm it and try
    /// to schedule the NAPI. Returns true if the caller now owns it and must
    /// put it on its poll list.
    pub fn fire_timer(&mut self, now_ns: u64) -> bool {
        match self.timer {
            Some(t) if now_ns >= t => {
                self.timer = None;
                self.state.schedule_prep()
            }
            _ => false,
        }
    }

    /// True if packets wait in the ring.
    pub fn has_work(&mut self) -> bool {
        self.queue.has_pending()
    }

    /// Set the id (done by [`NapiTable::add`]).
    fn set_id(&mut self, id: NapiId) {
        self.id = id;
    }
}

/// How a NAPI treats L4 checksums (`--csum`), as the kernel's
/// `skb->ip_summed` tells GRO and UDP what is left to verify.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CsumMode {
    /// The policy.
    pub policy: CsumPolicy,
    /// The driver carries local senders' traffic (veth, tun/tap, bridge).
    pub local_traffic: bool,
}

impl CsumMode {
    /// Set `meta`'s checksum status for `frame` (already parsed into
    /// `meta.headers`): `Trust` marks every packet verified, `Verify` clears
    /// what the device said, `Auto` on a local-traffic driver marks a TCP or
    /// UDP checksum field that equals the pseudo-header sum as partial
    /// (what a local sender's `CHECKSUM_PARTIAL` leaves; the kernel's GRO and
    /// UDP skip validation for such packets). Does not read past `frame`.
    #[inline]
    pub fn classify(self, meta: &mut Meta, frame: &[u8]) {
        match self.policy {
            CsumPolicy::Trust => meta.csum_ok = true,
            CsumPolicy::Verify => {
                meta.csum_ok = false;
                meta.csum_partial = false;
            }
            CsumPolicy::Auto => {
                let h = &meta.headers;
                if meta.csum_ok || meta.csum_partial || h.fragment || !self.local_traffic {
                    return;
                }
                let t = h.l4_offset as usize;
                let (proto, field_at, l4_len) = match h.l4 {
                    rxpath_wire::L4::Tcp { .. } => (
                        6,
                        t + 16,
                        (h.payload_offset + h.payload_len) as u32 - t as u32,
                    ),
                    rxpath_wire::L4::Udp => {
                        let Some(ulen) = rxpath_wire::be16(frame, t + 4) else {
                            return;
                        };
                        (17, t + 6, ulen as u32)
                    }
                    _ => return,
                };
                let Some(field) = rxpath_wire::be16(frame, field_at) else {
                    return;
                };
                if crate::ip::is_partial(field, h.flow.src(), h.flow.dst(), proto, l4_len) {
                    meta.csum_partial = true;
                }
            }
        }
    }
}

/// Where loop 2 hands each packet it built (`ok`: parsed; else
/// malformed). Its one method is always inlined into loop 2, so the
/// record's fields stay in registers for the stage that reads them.
trait Up {
    fn up(&mut self, p: Packet, ok: bool, c: &mut RxCtx<'_>);
}

/// Straight to the stack (GRO off).
struct Direct<'s, S>(&'s mut S);

impl<S: Stack> Up for Direct<'_, S> {
    #[inline(always)]
    fn up(&mut self, p: Packet, ok: bool, c: &mut RxCtx<'_>) {
        if ok {
            self.0.receive(p, c)
        } else {
            self.0.malformed(p, c)
        }
    }
}

/// Through GRO (`napi_gro_receive`), unless GRO has nothing to do with
/// the packet ([`Gro::passes`]).
struct ViaGro<'s, S>(&'s mut Gro, &'s mut S);

impl<S: Stack> Up for ViaGro<'_, S> {
    #[inline(always)]
    fn up(&mut self, p: Packet, ok: bool, c: &mut RxCtx<'_>) {
        if !ok {
            self.1.malformed(p, c);
        } else if self.0.passes(&p, c.now_ns) {
            self.1.receive(p, c)
        } else {
            let _ = self.0.receive(p, c, self.1);
        }
    }
}

/// Loop 2 of the two-loop poll: parse each pulled packet and hand it to
/// `up`; malformed ones are dropped and counted. Returns (packets, bytes).
#[inline(always)]
fn loop2(
    descs: impl Iterator<Item = Desc>,
    ctx: &mut RxCtx<'_>,
    qi: u16,
    id: NapiId,
    csum: CsumMode,
    rx_tap: &mut Option<RxTap>,
    mut up: impl Up,
) -> (u64, u64) {
    let umem = ctx.umem;
    let (mut pkts, mut bytes) = (0u64, 0u64);
    for d in descs {
        pkts += 1;
        bytes += d.len as u64;
        let (lo, hi) = (d.off as usize, d.off as usize + d.len as usize);
        let data = umem.data(&d.frame);
        if let Some(tap) = rx_tap.as_mut() {
            // Every frame as the device delivered it, before GRO.
            let fs = umem.frame_size();
            tap(&data[lo.min(fs)..hi.min(fs)], ctx.now_ns);
        }
        let meta = |headers| Meta {
            queue: qi,
            napi_id: id,
            rxhash: d.rxhash,
            rx_ns: ctx.now_ns,
            csum_ok: d.flags & desc_flags::CSUM_OK != 0,
            csum_partial: d.flags & desc_flags::CSUM_PARTIAL != 0,
            segs: 1,
            gso_size: 0,
            headers,
        };
        // The common case on its own path: the headers come back by value
        // and the record is built once from them, with nothing taking its
        // address, so a stage inlined into this loop keeps the fields it
        // reads in registers and never stores the others, and a stage
        // that is called gets the record stored once, field by field.
        // (One path for both cases would merge two records into a copy.)
        if let Some(h) = data.get(lo..hi).and_then(rxpath_wire::parse_fast) {
            let mut m = meta(h);
            if csum.policy != CsumPolicy::Auto || csum.local_traffic {
                csum.classify(&mut m, &data[lo..hi]);
            }
            let pkt = Packet {
                frame: d.frame,
                off: d.off,
                len: d.len,
                meta: m,
                frags: crate::packet::Frags::new(),
            };
            up.up(pkt, true, ctx);
            continue;
        }
        let (mut off, mut len) = (d.off, d.len);
        let parsed = match data.get(lo..hi) {
            Some(b) => rxpath_wire::parse_general(b),
            None => {
                // A descriptor that claims bytes past its frame (a buggy
                // device): keep the packet inside the frame, so no stage
                // reads beyond it, and hand it up as malformed.
                let fs = umem.frame_size();
                off = lo.min(fs) as u16;
                len = (hi.min(fs) - lo.min(fs)) as u16;
                Err(rxpath_wire::Error::BadLength("descriptor"))
            }
        };
        let (ok, headers) = match parsed {
            Ok(h) => (true, h),
            Err(_) => (false, rxpath_wire::Headers::default()),
        };
        let mut m = meta(headers);
        if ok && (csum.policy != CsumPolicy::Auto || csum.local_traffic) {
            csum.classify(&mut m, &data[lo..hi]);
        }
        let pkt = Packet {
            frame: d.frame,
            off,
            len,
            meta: m,
            frags: crate::packet::Frags::new(),
        };
        up.up(pkt, ok, ctx)
    }
    (pkts, bytes)
}
