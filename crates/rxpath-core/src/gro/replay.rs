//! Offline GRO: a list of frames through one poll, for the kernel oracle
//! and tests.

use super::{Gro, GroConfig, UdpGroPolicy};
use crate::packet::{Packet, PollEnd, RxCtx, Stack};
use rxpath_wire::L4;
use std::sync::Arc;

/// A packet as GRO passed it up, described by its TCP sequence range (UDP:
/// by its payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Boundary {
    /// Source port of the flow.
    pub src_port: u16,
    /// Sequence number of the first payload byte (0 for UDP).
    pub seq: u32,
    /// Payload bytes (all segments).
    pub payload: u32,
    /// Segments merged.
    pub segs: u16,
}

/// Offline GRO: run `frames` (Ethernet frames, in arrival order) through a
/// fresh GRO within one NAPI poll that then completes, and describe what is
/// passed up. Non-TCP frames and frames that do not parse are skipped.
/// Checksums are verified in software, as for a device without offload.
pub fn replay(frames: &[&[u8]]) -> Vec<Boundary> {
    replay_with(frames, false)
}

/// [`replay`] for UDP datagrams, every one of them for a socket with
/// `UDP_GRO`; TCP frames are skipped.
pub fn replay_udp_gro(frames: &[&[u8]]) -> Vec<Boundary> {
    replay_with(frames, true)
}

#[derive(Debug)]
struct AllUdp;

impl UdpGroPolicy for AllUdp {
    fn wants(&self, _: &rxpath_wire::FlowKey) -> bool {
        true
    }
}

fn replay_with(frames: &[&[u8]], udp: bool) -> Vec<Boundary> {
    #[derive(Default)]
    struct Record(Vec<Boundary>, bool);
    impl Stack for Record {
        fn receive(&mut self, p: Packet, ctx: &mut RxCtx<'_>) {
            let h = p.meta.headers;
            let b = ctx.data(&p);
            let t = h.l4_offset as usize;
            let seq = match h.l4 {
                L4::Tcp { .. } if !self.1 => {
                    Some(u32::from_be_bytes([b[t + 4], b[t + 5], b[t + 6], b[t + 7]]))
                }
                L4::Udp if self.1 => Some(0),
                _ => None,
            };
            if let Some(seq) = seq {
                let payload: usize = ctx.payload_parts(&p).map(|x| x.len()).sum();
                self.0.push(Boundary {
                    src_port: h.flow.src_port,
                    seq,
                    payload: payload as u32,
                    segs: p.frames() as u16,
                });
            }
            ctx.deliver(p);
        }
    }
    let Ok(mut pool) = rxpath_frames::FramePool::new(frames.len().max(1), 65536) else {
        return Vec::new();
    };
    let umem = pool.umem().clone();
    let policy: Arc<dyn UdpGroPolicy> = Arc::new(AllUdp);
    let mut gro = Gro::new(GroConfig {
        enabled: true,
        udp: udp.then_some(policy),
        ..GroConfig::default()
    });
    let (mut recycle, mut chains, mut stats) =
        (Vec::new(), Vec::new(), crate::stats::NapiStats::default());
    let mut out = Record(Vec::new(), udp);
    {
        let mut ctx = RxCtx::new(&umem, &mut recycle, &mut stats, &mut chains, 1);
        for f in frames {
            let Ok(headers) = rxpath_wire::parse(f) else {
                continue;
            };
            let Some(mut frame) = pool.alloc() else { break };
            let n = f.len().min(umem.frame_size());
            umem.data_mut(&mut frame)[..n].copy_from_slice(&f[..n]);
            let meta = crate::packet::Meta {
                rx_ns: 1,
                segs: 1,
                headers,
                ..Default::default()
            };
            let pkt = Packet {
                frame,
                off: 0,
                len: n as u16,
                meta,
                frags: crate::packet::Frags::new(),
            };
            let _ = gro.receive(pkt, &mut ctx, &mut out);
        }
        let _ = gro.poll_done(
            &mut ctx,
            PollEnd::Complete {
                work_done: frames.len(),
            },
            &mut out,
        );
    }
    out.0
}
