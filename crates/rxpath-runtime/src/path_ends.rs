//! The ends of the path a run can use (`--stack`), and the capture tap in
//! front of them.

use rxpath_core::packet::{LatencySink, RxDrop, Sink, Stack};
use rxpath_core::stats::LatencyHist;
use rxpath_dev::sync::lock;
use serde::Serialize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the end of the path does with packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StackKind {
    /// Deliver TCP/UDP packets (the path's current end), drop the rest.
    Sink,
    /// Parse and drop everything (seed 001's lowest RX level).
    Rxdrop,
    /// Deliver like `Sink`, and measure send-to-delivery latency of
    /// stamped request/response packets.
    Latency,
}

/// The ends of the path a run can use.
pub(crate) enum Sinks {
    Sink(Sink),
    Rxdrop(RxDrop),
    Latency(LatencySink),
}

impl Sinks {
    /// The end `kind` names.
    pub(crate) fn of(kind: StackKind) -> Sinks {
        match kind {
            StackKind::Sink => Sinks::Sink(Sink),
            StackKind::Rxdrop => Sinks::Rxdrop(RxDrop),
            StackKind::Latency => Sinks::Latency(LatencySink::default()),
        }
    }
}

impl Stack for Sinks {
    #[inline(always)]
    fn receive(&mut self, pkt: rxpath_core::Packet, ctx: &mut rxpath_core::RxCtx<'_>) {
        match self {
            Sinks::Sink(s) => s.receive(pkt, ctx),
            Sinks::Rxdrop(s) => s.receive(pkt, ctx),
            Sinks::Latency(s) => s.receive(pkt, ctx),
        }
    }
    fn latency(&self) -> Option<&LatencyHist> {
        match self {
            Sinks::Latency(s) => s.latency(),
            _ => None,
        }
    }
    fn wants_time(&self) -> bool {
        match self {
            Sinks::Sink(s) => s.wants_time(),
            Sinks::Rxdrop(s) => s.wants_time(),
            Sinks::Latency(s) => s.wants_time(),
        }
    }
}

/// A capture point: writes every packet it sees (a GRO chain as one
/// packet: the head frame, then each fragment's payload) to a pcap file,
/// then hands it on.
pub(crate) struct Tap<S> {
    pub(crate) inner: S,
    pub(crate) w: Option<Arc<Mutex<rxpath_dev::pcap::Writer>>>,
}

impl<S: Stack> Tap<S> {
    #[cold]
    #[inline(never)]
    fn write(
        w: &Mutex<rxpath_dev::pcap::Writer>,
        pkt: &rxpath_core::Packet,
        ctx: &rxpath_core::RxCtx<'_>,
    ) {
        let mut parts: Vec<&[u8]> = Vec::with_capacity(1 + pkt.frags.len());
        parts.push(ctx.data(pkt));
        parts.extend(pkt.frags.iter().map(|f| ctx.frag_data(f)));
        let ts = Duration::from_nanos(ctx.now_ns);
        // A write error loses the capture, not the packet.
        let _ = lock(w).write(ts, &parts);
    }
}

impl<S: Stack> Stack for Tap<S> {
    #[inline(always)]
    fn receive(&mut self, pkt: rxpath_core::Packet, ctx: &mut rxpath_core::RxCtx<'_>) {
        if let Some(w) = &self.w {
            Self::write(w, &pkt, ctx);
        }
        self.inner.receive(pkt, ctx);
    }
    fn bundle_done(&mut self, ctx: &mut rxpath_core::RxCtx<'_>) {
        self.inner.bundle_done(ctx)
    }
    fn poll_done(
        &mut self,
        ctx: &mut rxpath_core::RxCtx<'_>,
        end: rxpath_core::PollEnd,
    ) -> Option<u64> {
        self.inner.poll_done(ctx, end)
    }
    fn stop(&mut self, ctx: &mut rxpath_core::RxCtx<'_>) {
        self.inner.stop(ctx)
    }
    fn held(&self) -> u64 {
        self.inner.held()
    }
    fn latency(&self) -> Option<&LatencyHist> {
        self.inner.latency()
    }
    fn wants_time(&self) -> bool {
        // A capture writes each packet's time.
        self.w.is_some() || self.inner.wants_time()
    }
}

/// The rest of the path after GRO, as steering's workers run it: IP input,
/// the filter if any, the order check, the end (with its capture tap).
#[derive(Clone)]
pub(crate) struct PathRest {
    pub(crate) kind: StackKind,
    pub(crate) cap: Option<Arc<Mutex<rxpath_dev::pcap::Writer>>>,
    pub(crate) filter: Option<Arc<rxpath_core::filter::FilterHandle>>,
    pub(crate) ip: Option<rxpath_core::ip::IpConfig>,
}

impl PathRest {
    fn with_ip_filter(&self, end: Box<dyn Stack>) -> Box<dyn Stack> {
        use rxpath_core::ip::IpStage;
        match &self.filter {
            Some(f) => Box::new(IpStage::with_filter(self.ip.clone(), f.clone(), end)),
            None => Box::new(IpStage::new(self.ip.clone(), end)),
        }
    }

    /// The end, behind the order check.
    pub(crate) fn end(&self, w: &Arc<crate::steer::Workers>) -> Box<dyn Stack> {
        Box::new(crate::steer::Ordered {
            inner: Tap {
                inner: Sinks::of(self.kind),
                w: self.cap.clone(),
            },
            w: w.clone(),
        })
    }

    /// All of it (`none`, `rps`, `rfs`, `spread-unordered`).
    pub(crate) fn full(&self, w: &Arc<crate::steer::Workers>) -> Box<dyn Stack> {
        self.with_ip_filter(self.end(w))
    }

    /// Worker `id`'s bottom half running this path (split around the
    /// reorder buffer for `spread`).
    pub(crate) fn bottom_half(
        &self,
        w: &Arc<crate::steer::Workers>,
        id: rxpath_core::steer::Worker,
        netdev_budget: usize,
    ) -> crate::steer::BottomHalf {
        use crate::steer::BottomHalf;
        if w.reorder.is_some() {
            let survivors = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
            let parallel = self.parallel(survivors.clone());
            let serial = Some((self.end(w), survivors));
            BottomHalf::new(w.clone(), id, parallel, serial, netdev_budget)
        } else {
            BottomHalf::new(w.clone(), id, self.full(w), None, netdev_budget)
        }
    }

    /// `spread`'s parallel part: IP input and the filter, whose survivors
    /// are left in `survivors`.
    pub(crate) fn parallel(
        &self,
        survivors: std::rc::Rc<std::cell::RefCell<Vec<rxpath_core::Packet>>>,
    ) -> Box<dyn Stack> {
        self.with_ip_filter(Box::new(crate::steer::Collect(survivors)))
    }
}
