//! The stage at the end of the path: UDP demux into socket receive queues.

use super::socket::Dgram;
use super::{read, Sockets};
use crate::packet::{Packet, PollEnd, RxCtx, Stack};
use crate::stats::DropReason;
use rxpath_wire::ethernet::Mac;
use rxpath_wire::{checksum, L4};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The socket stage of one NAPI (`udp_rcv` → `__udp4_lib_lookup` →
/// `udp_queue_rcv_skb`).
///
/// Calling context: the NAPI's owner (its thread or a busy poller), inside
/// a poll. Does not sleep: a socket's queue lock is held only to link a
/// datagram.
#[derive(Debug)]
pub struct SockStack {
    host: Arc<Sockets>,
    queue: u16,
    truesize: usize,
    learned: Option<(IpAddr, Mac)>,
}

impl SockStack {
    pub(crate) fn new(host: Arc<Sockets>, queue: u16) -> Self {
        let truesize = host
            .port(queue)
            .map_or(rxpath_dev::DEFAULT_FRAME_SIZE, |p| p.umem.frame_size());
        SockStack {
            host,
            queue,
            truesize,
            learned: None,
        }
    }

    /// Frames waiting to come home to this queue.
    pub fn returning(&self) -> usize {
        self.host.port(self.queue).map_or(0, |p| p.ret.pending())
    }

    fn count(&self, f: impl FnOnce(&super::Counters) -> &std::sync::atomic::AtomicU64) {
        f(&self.host.counters).fetch_add(1, Ordering::Relaxed);
    }

    /// Remember the sender's MAC so replies can be addressed (the
    /// neighbour table; rxpath does not run ARP/ND itself).
    fn learn(&mut self, ip: IpAddr, frame: &[u8]) {
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&frame[6..12]);
        if self.learned != Some((ip, mac)) {
            self.learned = Some((ip, mac));
            if self.host.neighbor(ip) != Some(mac) {
                self.host.add_neighbor(ip, mac);
            }
        }
    }
}

impl Stack for SockStack {
    fn receive(&mut self, pkt: Packet, ctx: &mut RxCtx<'_>) {
        let h = pkt.meta.headers;
        if h.l4 != L4::Udp {
            return ctx.drop(pkt, DropReason::UnhandledProto);
        }
        if h.fragment || !pkt.frags.is_empty() {
            // Reassembly is not built; GRO never merges UDP here.
            return ctx.drop(pkt, DropReason::UnhandledProto);
        }
        let (src, dst) = (h.flow.src(), h.flow.dst());
        let data = ctx.data(&pkt);
        let l4 = h.l4_offset as usize;
        let seg_end = h.payload_offset as usize + h.payload_len as usize;
        if self.host.cfg.verify_checksum && !pkt.meta.csum_ok {
            let seg = &data[l4..seg_end];
            let field = u16::from_be_bytes([seg[6], seg[7]]);
            // IPv4 may send no checksum (0); IPv6 must.
            let none = field == 0 && src.is_ipv4();
            if !none && checksum::l4(src, dst, 17, seg) != 0 {
                self.count(|c| &c.csum_errors);
                return ctx.drop(pkt, DropReason::BadChecksum);
            }
        }
        let src_sa = SocketAddr::new(src, h.flow.src_port);
        let dst_sa = SocketAddr::new(dst, h.flow.dst_port);
        let sock = match read(&self.host.demux).lookup(dst_sa, src_sa) {
            Some(s) => s.clone(),
            None => {
                self.count(|c| &c.no_ports);
                return ctx.drop(pkt, DropReason::NoSocket);
            }
        };
        self.learn(src, data);
        // `sk_mark_napi_id()`: the socket polls this NAPI next time.
        let id = pkt.meta.napi_id.0;
        if sock.napi_id.load(Ordering::Relaxed) != id {
            sock.napi_id.store(id, Ordering::Relaxed);
        }
        let hash = if pkt.meta.rxhash != 0 {
            pkt.meta.rxhash
        } else {
            rxpath_wire::hash::flow_hash(&h.flow)
        };
        if sock.rxhash.load(Ordering::Relaxed) != hash {
            sock.rxhash.store(hash, Ordering::Relaxed);
        }
        let off = pkt.off + h.payload_offset;
        let len = h.payload_len;
        let frame = ctx.keep(pkt);
        let d = Dgram {
            frame,
            off,
            len,
            src: src_sa,
            queue: self.queue,
        };
        match sock.enqueue(d, self.truesize) {
            Ok(()) => self.count(|c| &c.in_datagrams),
            Err(d) => {
                // Counted delivered by `keep`; move it to the drop column.
                ctx.undeliver(d.frame, DropReason::SocketQueueFull);
                self.count(|c| &c.rcvbuf_errors);
            }
        }
    }

    fn poll_done(&mut self, ctx: &mut RxCtx<'_>, _end: PollEnd) -> Option<u64> {
        if let Some(p) = self.host.port(self.queue) {
            ctx.recycle_from(&p.ret);
        }
        None
    }
}
