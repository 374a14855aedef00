//! The stage at the end of the path: UDP demux into socket receive queues,
//! behind IP input ([`crate::ip::IpStage`], which checked each datagram).

use super::dgram::{Body, Dgram, Shared};
use super::socket::SockInner;
use super::{read_lock, Sockets};
use crate::filter::InputHook;
use crate::ip::IpStage;
use crate::packet::{Datagram, Packet, PollEnd, RxCtx, Stack};
use crate::stats::DropReason;
use rxpath_wire::ethernet::{self, Mac};
use rxpath_wire::{ipv4, ipv6};
use rxpath_wire::{Headers, L3};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The socket stage of one NAPI (`__udp4_lib_lookup` →
/// `udp_queue_rcv_skb`), behind IP and UDP input ([`SockPath`]).
///
/// Calling context: the NAPI's owner (its thread or a busy poller), inside
/// a poll. Does not sleep: a socket's queue lock is held only to link a
/// datagram.
#[derive(Debug)]
pub struct SockStack {
    host: Arc<Sockets>,
    queue: u16,
    learned: Option<(IpAddr, Mac)>,
    /// The sockets a multicast datagram goes to (kept to reuse).
    multi: Vec<Arc<SockInner>>,
    /// A TCP segment made whole for the machine (kept to reuse).
    tcp_buf: Vec<u8>,
}

/// The path after GRO (and steering) on a `Host`: IP and UDP input, the
/// `INPUT` hook if the host has a filter, then the socket stage — the
/// stages `rxpath run` runs, with sockets at the end.
pub type SockPath = IpStage<SockStack, Option<InputHook>>;

impl SockStack {
    /// The path of queue `queue`: [`SockPath`].
    pub(crate) fn path(host: Arc<Sockets>, queue: u16) -> SockPath {
        let ip = host.ip_config();
        let hook = host.config().filter.clone().map(InputHook::new);
        IpStage::with_hook(Some(ip), hook, SockStack::new(host, queue))
    }

    fn new(host: Arc<Sockets>, queue: u16) -> Self {
        SockStack {
            host,
            queue,
            learned: None,
            multi: Vec::new(),
            tcp_buf: Vec::new(),
        }
    }

    /// Frames waiting to come home to this queue.
    pub fn returning(&self) -> usize {
        self.host.port(self.queue).map_or(0, |p| p.ret.pending())
    }

    fn count(&self, f: impl FnOnce(&super::Counters) -> &std::sync::atomic::AtomicU64) {
        f(&self.host.counters).fetch_add(1, Ordering::Relaxed);
    }

    /// Queue a datagram on `sock`, counted (`InDatagrams`, or
    /// `RcvbufErrors` with the datagram back if its queue is full).
    fn enqueue(
        &self,
        sock: &SockInner,
        dg: Dgram,
        v6: bool,
        ctx: &mut RxCtx<'_>,
    ) -> Result<(), Dgram> {
        let r = sock.enqueue(dg);
        if r.is_ok() {
            self.count(|c| &c.in_datagrams);
            ctx.snmp().udp_mut(v6).in_datagrams += 1;
        } else {
            self.count(|c| &c.rcvbuf_errors);
            let m = ctx.snmp().udp_mut(v6);
            m.rcvbuf_errors += 1;
            m.in_errors += 1;
        }
        r
    }

    /// Queue one datagram (or GRO packet) on `sock`, or count it dropped.
    fn queue_dgram(&self, sock: &SockInner, dg: Dgram, v6: bool, ctx: &mut RxCtx<'_>) {
        if let Err(dg) = self.enqueue(sock, dg, v6, ctx) {
            // Counted delivered by `keep`; move it to the drop column.
            for frame in dg.into_frames() {
                ctx.undeliver(frame, DropReason::SocketQueueFull);
            }
        }
    }

    /// `sk_mark_napi_id()` and the RFS hash: the socket polls this NAPI
    /// next time, and its flow is steered by this packet's hash.
    fn mark(sock: &SockInner, pkt: &Packet) {
        let id = pkt.meta.napi_id.0;
        if sock.napi_id.load(Ordering::Relaxed) != id {
            sock.napi_id.store(id, Ordering::Relaxed);
        }
        let hash = if pkt.meta.rxhash != 0 {
            pkt.meta.rxhash
        } else {
            rxpath_wire::hash::flow_hash(&pkt.meta.headers.flow)
        };
        if sock.rxhash.load(Ordering::Relaxed) != hash {
            sock.rxhash.store(hash, Ordering::Relaxed);
        }
    }

    /// The datagram as `sock` reads it, its bytes in `body` (the head's
    /// `len` bytes from `off`).
    fn dgram(
        &self,
        sock: &SockInner,
        body: Body,
        d: &Datagram,
        head: (u16, u16),
        tos: u8,
        now: u64,
    ) -> Dgram {
        // A dual-stack socket sees an IPv4 sender as ::ffff:a.b.c.d.
        let src = match d.src {
            SocketAddr::V4(a) if sock.v6 => {
                SocketAddr::new(IpAddr::V6(a.ip().to_ipv6_mapped()), a.port())
            }
            a => a,
        };
        Dgram {
            body,
            off: head.0,
            len: head.1,
            src,
            dst: d.dst.ip(),
            queue: self.queue,
            tos,
            gso: 0,
            frags: Vec::new(),
            stamp_ns: now,
            drops: 0,
        }
    }

    /// Queue a datagram (`more` of its bytes in a chain) on `sock` alone.
    fn queue_on(
        &self,
        sock: &SockInner,
        pkt: Packet,
        d: &Datagram,
        more: usize,
        ctx: &mut RxCtx<'_>,
    ) {
        Self::mark(sock, &pkt);
        let v6 = d.src.is_ipv6();
        let gso = pkt.meta.gso_size;
        // A chain without `gso_size` is one reassembled datagram; one with
        // it a UDP GRO packet, whole only for a socket with `UDP_GRO`.
        let gro = more > 0 && (gso == 0 || sock.gro.load(Ordering::Relaxed));
        let (head, tos, frame, frags) = keep(pkt, d, more, ctx);
        let first = self.dgram(sock, Body::Own(frame), d, head, tos, ctx.now_ns);
        if gro {
            // The socket takes the chain whole.
            let dg = Dgram {
                gso,
                frags,
                ..first
            };
            self.queue_dgram(sock, dg, v6, ctx);
        } else {
            // `udp_unexpected_gso()`: a socket without UDP_GRO reads the
            // datagrams one by one, as they were sent.
            let (src, stamp) = (first.src, first.stamp_ns);
            self.queue_dgram(sock, first, v6, ctx);
            for f in frags {
                let dg = self.dgram(sock, Body::Own(f.frame), d, (f.off, f.len), tos, stamp);
                self.queue_dgram(sock, Dgram { src, ..dg }, v6, ctx);
            }
        }
    }

    /// A datagram to a multicast group or a broadcast address
    /// (`__udp4_lib_mcast_deliver()`, `__udp6_lib_mcast_deliver()`):
    /// every socket on the port that wants it gets it, its own filter or
    /// `IP_MULTICAST_ALL` deciding; several share its frames (no copy),
    /// each counting its own queue's drops. None: `IgnoredMulti`.
    fn receive_multi(&mut self, pkt: Packet, d: &Datagram, ctx: &mut RxCtx<'_>) {
        let mut socks = std::mem::take(&mut self.multi);
        read_lock(&self.host.demux).multi_candidates(d.dst, d.src, &mut socks);
        let (group, src) = (d.dst.ip(), d.src.ip());
        if group.is_multicast() {
            let g = &self.host.groups;
            let all = |s: &SockInner| s.mc_all[group.is_ipv6() as usize].load(Ordering::Relaxed);
            socks.retain(|s| g.sock_allows(s.id, group, src, all(s)));
        }
        // GRO merges no multicast or broadcast (`Sockets::wants`): a chain
        // here is one reassembled datagram.
        let more: usize = pkt.frags.iter().map(|f| f.len as usize).sum();
        match socks.as_slice() {
            [] => {
                self.count(|c| &c.ignored_multi);
                ctx.snmp().udp_mut(d.src.is_ipv6()).ignored_multi += 1;
                ctx.drop(pkt, DropReason::NoSocket);
            }
            [one] => {
                self.learn(src, ctx.data(&pkt));
                self.queue_on(one, pkt, d, more, ctx);
            }
            all => {
                self.learn(src, ctx.data(&pkt));
                self.queue_shared(all, pkt, d, more, ctx);
            }
        }
        socks.clear();
        self.multi = socks;
    }

    /// Queue one datagram on every socket of `socks`, its frames shared.
    fn queue_shared(
        &self,
        socks: &[Arc<SockInner>],
        pkt: Packet,
        d: &Datagram,
        more: usize,
        ctx: &mut RxCtx<'_>,
    ) {
        let v6 = d.src.is_ipv6();
        for s in socks {
            Self::mark(s, &pkt);
        }
        let (head, tos, frame, frags) = keep(pkt, d, more, ctx);
        let shared = Arc::new(Shared { frame, frags });
        let mut queued = 0;
        for s in socks {
            let dg = self.dgram(s, Body::Shared(shared.clone()), d, head, tos, ctx.now_ns);
            // A refused copy is one reference less; `shared` keeps the
            // frames alive here.
            queued += self.enqueue(s, dg, v6, ctx).is_ok() as usize;
        }
        if let Some(sh) = Arc::into_inner(shared) {
            // Every reader let go already, or no queue took it.
            let frames = std::iter::once(sh.frame).chain(sh.frags.into_iter().map(|f| f.frame));
            if queued == 0 {
                for f in frames {
                    ctx.undeliver(f, DropReason::SocketQueueFull);
                }
            } else if let Some(p) = self.host.port(self.queue) {
                p.ret.put_all(frames);
            }
        }
    }

    /// Remember the sender's MAC so replies can be addressed (the
    /// neighbour table; rxpath does not run ARP/ND itself).
    fn learn(&mut self, ip: IpAddr, frame: &[u8]) {
        let mac = ethernet::Frame::new_unchecked(frame).src();
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
        // Only what IP and UDP input passed reaches a socket
        // (`receive_udp`); anything else is the kernel's.
        ctx.drop(pkt, DropReason::UnhandledProto)
    }

    fn receive_udp(&mut self, pkt: Packet, d: &Datagram, ctx: &mut RxCtx<'_>) {
        if d.multi {
            return self.receive_multi(pkt, d, ctx);
        }
        // A chain is a UDP GRO packet or a reassembled datagram: IP input
        // checked it whole.
        let more: usize = pkt.frags.iter().map(|f| f.len as usize).sum();
        let cpu = self.host.cfg.current_cpu;
        let run = |p: &super::cbpf::Cbpf| p.run(&bpf_ctx(&pkt, d, more, cpu(), ctx));
        let sock = match read_lock(&self.host.demux).lookup_with(d.dst, d.src, run) {
            Some(s) => s.clone(),
            None => {
                self.count(|c| &c.no_ports);
                ctx.snmp().udp_mut(d.src.is_ipv6()).no_ports += 1;
                return ctx.drop(pkt, DropReason::NoSocket);
            }
        };
        self.learn(d.src.ip(), ctx.data(&pkt));
        self.queue_on(&sock, pkt, d, more, ctx);
    }

    fn receive_tcp(&mut self, pkt: Packet, seg: &crate::ip::TcpSeg, ctx: &mut RxCtx<'_>) {
        if !self.host.has_tcp() {
            return ctx.drop(pkt, DropReason::UnhandledProto);
        }
        self.learn(seg.src, ctx.data(&pkt));
        // The machine takes the IP packet whole (a GRO packet's chain
        // after its head, whose IP length GRO made cover it all); it
        // copies the payload into the socket's queue, so the frames go
        // home now.
        let mut buf = std::mem::take(&mut self.tcp_buf);
        buf.clear();
        buf.extend_from_slice(ctx.data(&pkt).get(seg.l3..).unwrap_or_default());
        for f in pkt.frags.iter() {
            buf.extend_from_slice(ctx.frag_data(f));
        }
        let hash = match pkt.meta.rxhash {
            0 => rxpath_wire::hash::flow_hash(&pkt.meta.headers.flow),
            h => h,
        };
        let from = (pkt.meta.napi_id.0, hash);
        self.host.tcp_input(&buf, seg.verified, ctx.now_ns, from);
        self.tcp_buf = buf;
        ctx.deliver(pkt);
    }

    fn refused(&mut self, reason: DropReason) {
        if reason == DropReason::BadChecksum {
            self.count(|c| &c.csum_errors);
        }
    }

    fn poll_done(&mut self, ctx: &mut RxCtx<'_>, _end: PollEnd) -> Option<u64> {
        if let Some(p) = self.host.port(self.queue) {
            ctx.recycle_from(&p.ret);
        }
        // A copy-mode TX ring is driven only by kicks: frames a kick left
        // (the device queue stopped) leave here if no send comes.
        self.host.flush_tx();
        None
    }
}

/// Hand the datagram's frames to the socket layer (counted delivered):
/// where its payload starts in the head frame and how much of it is there,
/// its TOS byte, the head frame and the chain's other frames (`more`
/// payload bytes).
fn keep(
    pkt: Packet,
    d: &Datagram,
    more: usize,
    ctx: &mut RxCtx<'_>,
) -> (
    (u16, u16),
    u8,
    rxpath_frames::Frame,
    Vec<crate::packet::Frag>,
) {
    let head = (
        pkt.off + d.payload_off as u16,
        (d.payload_len - more) as u16,
    );
    let tos = tos_of(ctx.data(&pkt), &pkt.meta.headers);
    let (frame, frags) = if more > 0 {
        ctx.keep_chain(pkt)
    } else {
        (ctx.keep(pkt), Vec::new())
    };
    (head, tos, frame, frags)
}

/// What a reuseport group's classic BPF program sees of a datagram: its
/// payload (the head frame's part), its headers, the queue, the hash and
/// the CPU this runs on.
fn bpf_ctx<'a>(
    pkt: &'a Packet,
    d: &Datagram,
    more: usize,
    cpu: u32,
    ctx: &'a RxCtx<'_>,
) -> super::cbpf::Ctx<'a> {
    let f = ctx.data(pkt);
    let h = &pkt.meta.headers;
    let end = (d.payload_off + d.payload_len - more).min(f.len());
    let l3 = (h.l3_offset as usize).min(f.len());
    super::cbpf::Ctx {
        payload: f.get(d.payload_off..end).unwrap_or(&[]),
        net: &f[l3..],
        link: f,
        protocol: if d.src.is_ipv6() { 0x86dd } else { 0x0800 },
        queue: pkt.meta.queue,
        rxhash: pkt.meta.rxhash,
        cpu,
    }
}

/// The TOS byte (IPv4) or traffic class (IPv6) of a frame's IP header: DSCP
/// and the ECN codepoint (IP input checked its length).
#[inline]
fn tos_of(frame: &[u8], h: &Headers) -> u8 {
    let Some(ip) = frame.get(h.l3_offset as usize..) else {
        return 0;
    };
    match h.l3 {
        L3::Ipv4 => ipv4::Packet::new_unchecked(ip).tos(),
        L3::Ipv6 => ipv6::Packet::new_unchecked(ip).traffic_class(),
        _ => 0,
    }
}
