//! A GRO under test: feed it frames, end polls, collect what leaves.

#![allow(dead_code)]

use rxpath_core::gro::{Gro, GroConfig, GroKnob, GroResult, UdpGroPolicy};
use rxpath_core::napi::CsumMode;
use rxpath_core::packet::{ChainPool, Frags, Meta, Packet, PollEnd, RxCtx, Stack};
use rxpath_core::stats::NapiStats;
use rxpath_dev::{Frame, FramePool};
use std::sync::Arc;

/// What left GRO.
#[derive(Debug, Clone, PartialEq)]
pub struct Out {
    pub sport: u16,
    /// TCP: the sequence number of the first byte.
    pub seq: u32,
    pub segs: u16,
    pub payload: Vec<u8>,
    pub at: u64,
    pub first_rx: u64,
    /// `gso_size` (0 for a plain packet).
    pub gso: u16,
    /// The head's bytes up to the payload (headers as GRO left them).
    pub head: Vec<u8>,
}

#[derive(Default)]
pub struct Collect(pub Vec<Out>);

impl Stack for Collect {
    fn receive(&mut self, p: Packet, ctx: &mut RxCtx<'_>) {
        let payload: Vec<u8> = ctx.payload_parts(&p).flatten().copied().collect();
        let b = ctx.data(&p);
        let t = p.meta.headers.l4_offset as usize;
        self.0.push(Out {
            sport: p.meta.headers.flow.src_port,
            seq: u32::from_be_bytes([b[t + 4], b[t + 5], b[t + 6], b[t + 7]]),
            segs: p.frames() as u16,
            payload,
            at: ctx.now_ns,
            first_rx: p.meta.rx_ns,
            gso: p.meta.gso_size,
            head: b[..p.meta.headers.payload_offset as usize].to_vec(),
        });
        ctx.deliver(p);
    }
}

/// One GRO, its frames and what left it.
pub struct Harness {
    pub pool: FramePool,
    pub recycle: Vec<Frame>,
    pub chains: ChainPool,
    pub stats: NapiStats,
    pub gro: Gro,
    pub out: Collect,
    pub fed: u64,
}

impl Harness {
    pub fn new(timeout: u64) -> Harness {
        Self::with_udp(timeout, None)
    }

    /// A GRO that asks `udp` which datagrams go to `UDP_GRO` sockets.
    pub fn with_udp(timeout: u64, udp: Option<Arc<dyn UdpGroPolicy>>) -> Harness {
        let cfg = GroConfig {
            enabled: true,
            flush_timeout: GroKnob::new(timeout),
            adaptive: None,
            udp,
        };
        Harness {
            pool: FramePool::new(4096, 2048).unwrap(),
            recycle: vec![],
            chains: vec![],
            stats: NapiStats::default(),
            gro: Gro::new(cfg),
            out: Collect::default(),
            fed: 0,
        }
    }

    pub fn feed_raw(&mut self, bytes: &[u8], now: u64, rxhash: u32, csum_ok: bool) -> GroResult {
        self.feed_with(bytes, now, |m| {
            m.rxhash = rxhash;
            m.csum_ok = csum_ok;
        })
    }

    pub fn feed_with(&mut self, bytes: &[u8], now: u64, edit: impl FnOnce(&mut Meta)) -> GroResult {
        let mut f = self.pool.alloc().expect("frame");
        let umem = self.pool.umem().clone();
        umem.data_mut(&mut f)[..bytes.len()].copy_from_slice(bytes);
        let headers = rxpath_wire::parse(bytes).expect("test segments parse");
        let mut meta = Meta {
            rx_ns: now,
            segs: 1,
            headers,
            ..Meta::default()
        };
        edit(&mut meta);
        let pkt = Packet {
            frame: f,
            off: 0,
            len: bytes.len() as u16,
            meta,
            frags: Frags::new(),
        };
        self.fed += 1;
        let mut ctx = RxCtx::new(
            &umem,
            &mut self.recycle,
            &mut self.stats,
            &mut self.chains,
            now,
        );
        let r = self.gro.receive(pkt, &mut ctx, &mut self.out);
        self.give_back();
        r
    }

    /// Feed with the checksum status a NAPI in `mode` gives the frame.
    pub fn feed_as(&mut self, bytes: &[u8], now: u64, mode: CsumMode) -> GroResult {
        self.feed_with(bytes, now, |m| mode.classify(m, bytes))
    }

    pub fn poll_end(&mut self, end: PollEnd, now: u64) -> Option<u64> {
        let umem = self.pool.umem().clone();
        let mut ctx = RxCtx::new(
            &umem,
            &mut self.recycle,
            &mut self.stats,
            &mut self.chains,
            now,
        );
        let t = self.gro.poll_done(&mut ctx, end, &mut self.out);
        self.give_back();
        t
    }

    pub fn flush(&mut self, now: u64) {
        let _ = self.poll_end(PollEnd::Complete { work_done: 0 }, now);
    }

    pub fn give_back(&mut self) {
        for f in self.recycle.drain(..) {
            self.pool.free(f);
        }
    }

    /// Segments per packet that left GRO, in order.
    pub fn shape(&self) -> Vec<u16> {
        self.out.0.iter().map(|o| o.segs).collect()
    }

    pub fn finish(mut self) {
        self.flush(u64::MAX / 2);
        assert_eq!(self.gro.held(), 0);
        assert_eq!(self.stats.delivered, self.fed, "every segment left GRO");
        assert!(self.pool.is_home(), "every frame came home");
    }
}
