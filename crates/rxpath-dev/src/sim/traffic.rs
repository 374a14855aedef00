//! Seeded traffic sources for the simulated NIC.
//!
//! A [`Traffic`] holds a set of flows and writes one packet of one of them
//! per call, straight into a frame. Flow kinds:
//!
//! - **UDP**: datagrams of a fixed frame size.
//! - **TCP bulk**: MSS-sized segments of a stream of messages, PSH on the
//!   last segment of each message (what a sender's TSO/GSO emits).
//! - **TCP request/response**: short PSH segments, one per request.
//!
//! Packets of different flows interleave in a seeded random order, as they
//! would on a NIC fed by many senders. Addresses come from 198.18.0.0/15
//! (IPv4) and 2001:2::/48 (IPv6), both set aside for benchmarking.

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use rxpath_wire::build::{self, Spec};
use rxpath_wire::ipv4::protocol;
use rxpath_wire::tcp::flags;
use rxpath_wire::toeplitz::Toeplitz;
use rxpath_wire::FlowKey;
use serde::Serialize;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// Which flows to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Mix {
    /// UDP only.
    Udp,
    /// TCP bulk only.
    TcpBulk,
    /// TCP request/response only.
    TcpRr,
    /// Half UDP, a quarter each TCP bulk and TCP request/response; one flow
    /// in eight is IPv6 and one in eight VLAN-tagged.
    Mixed,
}

impl FromStr for Mix {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "udp" => Ok(Mix::Udp),
            "tcp-bulk" | "bulk" => Ok(Mix::TcpBulk),
            "tcp-rr" | "rr" => Ok(Mix::TcpRr),
            "mixed" => Ok(Mix::Mixed),
            _ => Err(format!(
                "unknown mix '{s}' (expected udp, tcp-bulk, tcp-rr or mixed)"
            )),
        }
    }
}

/// Addresses for traffic that goes out of a real interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WireAddrs {
    /// Source IPv4 address (flows use distinct source ports).
    pub src: Ipv4Addr,
    /// Destination IPv4 address.
    pub dst: Ipv4Addr,
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
}

/// Traffic parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TrafficConfig {
    /// Number of flows.
    pub flows: usize,
    /// Flow kinds.
    pub mix: Mix,
    /// UDP frame size in bytes (60..=1514).
    pub udp_frame: usize,
    /// TCP MSS (payload bytes per bulk segment).
    pub mss: usize,
    /// TCP bulk message size (a PSH ends each).
    pub message: usize,
    /// TCP request size.
    pub request: usize,
    /// Segments a bulk flow sends back to back once it sends (a TSO/GSO
    /// chunk leaving the sender at line rate); 1 interleaves every segment.
    pub burst: usize,
    /// Addressing for real wires: IPv4 source and destination and MACs
    /// (None: the simulated defaults, 198.18.x.y → 198.19.0.1).
    pub wire: Option<WireAddrs>,
    /// Stamp request/response payloads with the send time ([`crate::mono_ns`],
    /// 8 bytes little endian at the start of the payload), for latency.
    pub stamp: bool,
    /// Seed of the random generator.
    pub seed: u64,
}

impl Default for TrafficConfig {
    fn default() -> Self {
        TrafficConfig {
            flows: 64,
            mix: Mix::Mixed,
            udp_frame: 60,
            mss: 1448,
            message: 64 * 1024,
            request: 64,
            stamp: false,
            burst: 1,
            wire: None,
            seed: 1,
        }
    }
}

impl TrafficConfig {
    /// Check the parameters; the message names the offending value.
    pub fn validate(&self) -> Result<(), String> {
        if self.flows == 0 || self.flows > 1 << 20 {
            return Err(format!("flows must be in 1..=1048576, got {}", self.flows));
        }
        if !(60..=1514).contains(&self.udp_frame) {
            return Err(format!(
                "UDP frame size must be in 60..=1514, got {}",
                self.udp_frame
            ));
        }
        if !(1..=1448).contains(&self.mss) {
            return Err(format!("MSS must be in 1..=1448, got {}", self.mss));
        }
        if self.message == 0 || !(1..=1448).contains(&self.request) {
            return Err("message must be > 0 and request in 1..=1448".into());
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Udp,
    Bulk,
    Rr,
}

#[derive(Debug, Clone)]
struct Flow {
    spec: Spec,
    kind: Kind,
    key: FlowKey,
    rxhash: u32,
    seq: u32,
    ack: u32,
    msg_left: usize,
    tsval: u32,
    /// A UDP flow's frame, built once: the NIC side only copies it.
    template: Option<Box<[u8]>>,
    /// Where the datagram's sequence number goes in the template.
    stamp: Option<SeqStamp>,
    /// The next datagram's sequence number.
    udp_seq: u32,
}

/// Where a UDP flow's datagrams carry their sequence number: the first 4
/// bytes of the payload, big endian, with the UDP checksum updated
/// incrementally (RFC 1624), so that order can be measured at delivery
/// (`rxpath_core::steer::OrderCheck`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqStamp {
    payload: usize,
    csum: usize,
    /// `~HC + ~m` of the template's checksum and first two payload words
    /// (not folded); `None` for an IPv4 datagram without a checksum.
    base: Option<u32>,
}

impl SeqStamp {
    fn of(template: &[u8], l4: usize) -> Option<SeqStamp> {
        let payload = l4 + 8;
        if template.len() < payload + 4 {
            return None;
        }
        let w = |i: usize| u16::from_be_bytes([template[i], template[i + 1]]) as u32;
        let hc = w(l4 + 6);
        let base =
            (hc != 0).then(|| (!hc & 0xffff) + (!w(payload) & 0xffff) + (!w(payload + 2) & 0xffff));
        Some(SeqStamp {
            payload,
            csum: l4 + 6,
            base,
        })
    }

    /// Write `seq` into `frame` (a copy of the template).
    #[inline]
    pub fn write(&self, frame: &mut [u8], seq: u32) {
        frame[self.payload..self.payload + 4].copy_from_slice(&seq.to_be_bytes());
        if let Some(b) = self.base {
            let c = !rxpath_wire::checksum::fold(b + (seq >> 16) + (seq & 0xffff));
            let c = if c == 0 { 0xffff } else { c };
            frame[self.csum..self.csum + 2].copy_from_slice(&c.to_be_bytes());
        }
    }
}

/// What [`Traffic::write_next`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Frame length.
    pub len: usize,
    /// The NIC's RSS hash of the packet's flow.
    pub rxhash: u32,
    /// Index of the flow.
    pub flow: usize,
}

/// A seeded packet source.
#[derive(Debug)]
pub struct Traffic {
    cfg: TrafficConfig,
    flows: Vec<Flow>,
    /// The seeded order in which flows send, drawn once: picking the next
    /// flow is then a table lookup, which keeps the NIC side cheap.
    order: Box<[u32]>,
    pos: usize,
    burst_flow: usize,
    burst_left: usize,
    payload: Box<[u8]>,
    /// The last payload length written and its checksum sum (bulk segments
    /// repeat the same length: the sum is computed once).
    payload_sum: (usize, u32),
}

/// Length of the precomputed flow order (a power of two).
const ORDER_LEN: usize = 1 << 16;

impl Traffic {
    /// Create the flows. Uses `toeplitz` to give each flow the RSS hash a NIC
    /// would compute.
    pub fn new(cfg: TrafficConfig, toeplitz: &Toeplitz) -> Self {
        let mut rng = Pcg64Mcg::seed_from_u64(cfg.seed);
        let flows = (0..cfg.flows)
            .map(|i| {
                let kind = match cfg.mix {
                    Mix::Udp => Kind::Udp,
                    Mix::TcpBulk => Kind::Bulk,
                    Mix::TcpRr => Kind::Rr,
                    Mix::Mixed => match i % 4 {
                        0 | 2 => Kind::Udp,
                        1 => Kind::Bulk,
                        _ => Kind::Rr,
                    },
                };
                let v6 = cfg.mix == Mix::Mixed && i % 8 == 7 && cfg.wire.is_none();
                let (src, dst): (IpAddr, IpAddr) = if v6 {
                    (
                        Ipv6Addr::new(0x2001, 2, 0, 1, 0, 0, (i >> 16) as u16, i as u16).into(),
                        Ipv6Addr::new(0x2001, 2, 0, 2, 0, 0, 0, 1).into(),
                    )
                } else {
                    // Sources 198.18.0.0/16, destination 198.19.0.1.
                    (
                        Ipv4Addr::new(198, 18, (i >> 8) as u8, i as u8).into(),
                        Ipv4Addr::new(198, 19, 0, 1).into(),
                    )
                };
                let sport = 1024 + (i as u16 % 60000);
                let dport = match kind {
                    Kind::Udp => 9000,
                    Kind::Bulk => 5201,
                    Kind::Rr => 11111,
                };
                let (src, dst) = match cfg.wire {
                    Some(w) => (IpAddr::from(w.src), IpAddr::from(w.dst)),
                    None => (src, dst),
                };
                let mut spec = Spec::new(src, dst, sport, dport);
                if let Some(w) = cfg.wire {
                    spec.src_mac = w.src_mac;
                    spec.dst_mac = w.dst_mac;
                }
                if cfg.mix == Mix::Mixed && i % 8 == 3 && cfg.wire.is_none() {
                    spec.vlan = Some(100);
                }
                let proto = if kind == Kind::Udp {
                    protocol::UDP
                } else {
                    protocol::TCP
                };
                let key = FlowKey::new(src, dst, sport, dport, proto);
                let template = (kind == Kind::Udp).then(|| {
                    let payload_len = cfg.udp_frame.saturating_sub(spec.l3_header_end() + 8);
                    let payload: Vec<u8> =
                        (0..payload_len as u32).map(|i| (i * 7 + 3) as u8).collect();
                    build::udp(&spec, &payload).into_boxed_slice()
                });
                let stamp = template
                    .as_deref()
                    .and_then(|t| SeqStamp::of(t, spec.l3_header_end()));
                Flow {
                    spec,
                    kind,
                    key,
                    rxhash: toeplitz.hash_flow(&key, true),
                    seq: rng.gen(),
                    ack: rng.gen(),
                    msg_left: cfg.message,
                    tsval: rng.gen(),
                    template,
                    stamp,
                    udp_seq: 1,
                }
            })
            .collect();
        let payload = (0..9000u32).map(|i| (i * 7 + 3) as u8).collect();
        let n = cfg.flows.max(1);
        let order = (0..ORDER_LEN).map(|_| rng.gen_range(0..n) as u32).collect();
        Traffic {
            cfg,
            flows,
            order,
            pos: 0,
            burst_flow: 0,
            burst_left: 0,
            payload,
            payload_sum: (usize::MAX, 0),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &TrafficConfig {
        &self.cfg
    }

    /// Number of flows.
    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    /// Where flow `i`'s datagrams carry a sequence number (UDP flows with
    /// at least 4 bytes of payload).
    pub fn seq_stamp(&self, i: usize) -> Option<SeqStamp> {
        self.flows[i].stamp
    }

    /// A flow's key.
    pub fn flow_key(&self, i: usize) -> FlowKey {
        self.flows[i].key
    }

    /// Choose the flow of the next packet (seeded random order).
    #[inline]
    pub fn pick(&mut self) -> usize {
        if self.burst_left > 0 {
            self.burst_left -= 1;
            return self.burst_flow;
        }
        let i = self.order[self.pos & (ORDER_LEN - 1)] as usize;
        self.pos = self.pos.wrapping_add(1);
        if self.cfg.burst > 1 && self.flows[i].kind == Kind::Bulk {
            self.burst_flow = i;
            self.burst_left = self.cfg.burst - 1;
        }
        i
    }

    /// The flow [`pick`](Self::pick) will return next, without consuming it.
    pub fn peek_pick(&self) -> usize {
        if self.burst_left > 0 {
            return self.burst_flow;
        }
        self.order[self.pos & (ORDER_LEN - 1)] as usize
    }

    /// The RSS hash of flow `i`.
    #[inline]
    pub fn rxhash(&self, i: usize) -> u32 {
        self.flows[i].rxhash
    }

    /// Write the next packet of a randomly chosen flow into `buf`.
    /// Returns `None` if `buf` is too small for it.
    pub fn write_next(&mut self, buf: &mut [u8]) -> Option<Written> {
        let i = self.pick();
        self.write_flow(i, buf)
    }

    /// Write the next packet of flow `i` into `buf`.
    pub fn write_flow(&mut self, i: usize, buf: &mut [u8]) -> Option<Written> {
        let cfg = self.cfg;
        let f = &mut self.flows[i];
        f.spec.ip_id = f.spec.ip_id.wrapping_add(1);
        let len = match (&f.template, f.kind) {
            // UDP datagrams of a flow are identical: copy the frame built at
            // start (a NIC's DMA is a copy too), so that the producer thread
            // is cheap and the host side is what gets measured.
            (Some(t), _) => {
                let b = buf.get_mut(..t.len())?;
                b.copy_from_slice(t);
                if let Some(st) = &f.stamp {
                    st.write(b, f.udp_seq);
                    f.udp_seq = f.udp_seq.wrapping_add(1);
                }
                t.len()
            }
            (None, Kind::Udp) => {
                let payload_len = cfg.udp_frame.saturating_sub(f.spec.l3_header_end() + 8);
                build::write_udp(buf, &f.spec, &self.payload[..payload_len]).ok()?
            }
            (None, Kind::Bulk | Kind::Rr) => {
                let (n, fl) = if f.kind == Kind::Bulk {
                    let n = f.msg_left.min(cfg.mss);
                    f.msg_left -= n;
                    let psh = f.msg_left == 0;
                    if psh {
                        f.msg_left = cfg.message;
                    }
                    (n, flags::ACK | if psh { flags::PSH } else { 0 })
                } else {
                    (cfg.request, flags::ACK | flags::PSH)
                };
                // TCP's timestamp clock ticks in milliseconds, so the
                // segments of one message share a TSval; it moves on with
                // each message (or request).
                let mut opts = [1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0];
                opts[4..8].copy_from_slice(&f.tsval.to_be_bytes());
                opts[8..12].copy_from_slice(&0x1000u32.to_be_bytes());
                let len = if f.kind == Kind::Rr && cfg.stamp && n >= 8 {
                    let mut p = [0u8; 1448];
                    p[..n].copy_from_slice(&self.payload[..n]);
                    p[..8].copy_from_slice(&crate::mono_ns().to_le_bytes());
                    build::write_tcp(buf, &f.spec, f.seq, f.ack, fl, &opts, &p[..n]).ok()?
                } else {
                    if self.payload_sum.0 != n {
                        self.payload_sum = (n, rxpath_wire::checksum::sum(&self.payload[..n]));
                    }
                    build::write_tcp_summed(
                        buf,
                        &f.spec,
                        f.seq,
                        f.ack,
                        fl,
                        &opts,
                        &self.payload[..n],
                        Some(self.payload_sum.1),
                    )
                    .ok()?
                };
                f.seq = f.seq.wrapping_add(n as u32);
                if fl & flags::PSH != 0 {
                    f.tsval = f.tsval.wrapping_add(1);
                }
                len
            }
        };
        Some(Written {
            len,
            rxhash: f.rxhash,
            flow: i,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_segments_are_contiguous_with_psh_at_message_end() {
        let cfg = TrafficConfig {
            flows: 1,
            mix: Mix::TcpBulk,
            message: 4000,
            ..Default::default()
        };
        let mut t = Traffic::new(cfg, &Toeplitz::default());
        let mut buf = [0u8; 2048];
        let mut next_seq = None;
        let mut psh_at = vec![];
        let mut bytes = 0;
        for n in 0..9 {
            let w = t.write_next(&mut buf).unwrap();
            let h = rxpath_wire::parse(&buf[..w.len]).unwrap();
            let tcp =
                rxpath_wire::tcp::Packet::new_checked(&buf[h.l4_offset as usize..w.len]).unwrap();
            if let Some(s) = next_seq {
                assert_eq!(tcp.seq(), s);
            }
            next_seq = Some(tcp.seq().wrapping_add(h.payload_len as u32));
            bytes += h.payload_len as usize;
            if tcp.flags() & flags::PSH != 0 {
                psh_at.push((n, bytes));
            }
        }
        // 4000 = 1448 + 1448 + 1104: PSH every third segment.
        assert_eq!(psh_at, vec![(2, 4000), (5, 8000), (8, 12000)]);
    }

    #[test]
    fn udp_datagrams_are_numbered_per_flow_with_valid_checksums() {
        for (udp_frame, mix) in [(60, Mix::Udp), (200, Mix::Udp), (300, Mix::Mixed)] {
            let cfg = TrafficConfig {
                flows: 16,
                mix,
                udp_frame,
                ..Default::default()
            };
            let mut t = Traffic::new(cfg, &Toeplitz::default());
            let mut next = [1u32; 16];
            let mut buf = [0u8; 2048];
            for _ in 0..2000 {
                let w = t.write_next(&mut buf).unwrap();
                let f = &buf[..w.len];
                let h = rxpath_wire::parse(f).unwrap();
                if h.l4 != rxpath_wire::L4::Udp {
                    continue;
                }
                let seg =
                    &f[h.l4_offset as usize..h.payload_offset as usize + h.payload_len as usize];
                let (src, dst) = (h.flow.src(), h.flow.dst());
                assert_eq!(
                    rxpath_wire::checksum::l4(src, dst, 17, seg),
                    0,
                    "checksum of a numbered datagram ({udp_frame} bytes)"
                );
                if h.payload_len < 4 {
                    assert!(t.seq_stamp(w.flow).is_none());
                    continue;
                }
                let p = h.payload_offset as usize;
                let seq = u32::from_be_bytes([f[p], f[p + 1], f[p + 2], f[p + 3]]);
                assert_eq!(seq, next[w.flow], "flow {}", w.flow);
                next[w.flow] += 1;
            }
        }
    }

    #[test]
    fn same_seed_same_traffic() {
        let cfg = TrafficConfig {
            flows: 32,
            ..Default::default()
        };
        let tz = Toeplitz::default();
        let (mut a, mut b) = (Traffic::new(cfg, &tz), Traffic::new(cfg, &tz));
        let (mut x, mut y) = ([0u8; 2048], [0u8; 2048]);
        for _ in 0..200 {
            let (wa, wb) = (a.write_next(&mut x).unwrap(), b.write_next(&mut y).unwrap());
            assert_eq!(wa, wb);
            assert_eq!(x[..wa.len], y[..wb.len]);
        }
    }

    #[test]
    fn mixed_has_v6_vlan_udp_tcp() {
        let cfg = TrafficConfig {
            flows: 16,
            ..Default::default()
        };
        let mut t = Traffic::new(cfg, &Toeplitz::default());
        let mut buf = [0u8; 2048];
        let (mut v6, mut vlan, mut udp, mut tcp) = (0, 0, 0, 0);
        for i in 0..16 {
            let w = t.write_flow(i, &mut buf).unwrap();
            let h = rxpath_wire::parse(&buf[..w.len]).unwrap();
            v6 += h.flow.is_v6() as u32;
            vlan += (h.vlan[0] != 0) as u32;
            udp += (h.l4 == rxpath_wire::L4::Udp) as u32;
            tcp += matches!(h.l4, rxpath_wire::L4::Tcp { .. }) as u32;
            assert_eq!(h.flow, t.flow_key(i));
        }
        assert_eq!((v6, vlan, udp, tcp), (2, 2, 8, 8));
    }
}
