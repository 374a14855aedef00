//! TCP at the end of the path: one host's TCP machine
//! ([`rxpath_tcp::Stack`], sans-I/O) behind a lock, fed by the NAPIs'
//! socket stage ([`Sockets::tcp_input`]: `tcp_v4_rcv`), by the program's
//! calls ([`Sockets::tcp_call`]) and by its timers
//! ([`Sockets::tcp_timeout`]); what it sends leaves through the host's TX
//! port, addressed to the neighbour the IP destination has.
//!
//! ```text
//!  SockStack::receive_tcp ─┐                         ┌─▶ TxPort (frames)
//!  program's call ─────────┼─▶ lock ─▶ Stack ─▶ out ─┤
//!  timer owner (runtime) ──┘                         └─▶ TcpWake: sockets touched,
//!                                                        the next deadline
//! ```
//!
//! The waiting half (threads asleep in `accept` or `read`, the timer's
//! thread) is the runtime's: it hears of every socket whose readiness a
//! segment or a timer may have changed, and of the next timer deadline,
//! through the [`TcpWake`] it sets.

use super::tx::FRAME_MAX;
use super::{lock, Sockets};
use rxpath_tcp::{SockId, Stack, TcpConfig};
use rxpath_wire::ethernet::Mac;
use serde::Serialize;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};

/// Who hears what the TCP machine did: the runtime's waiters and timer.
/// Called with the machine's lock held: it must not call back into the
/// layer, nor block.
pub trait TcpWake: Send + Sync + std::fmt::Debug {
    /// Sockets whose readiness a segment or a timer may have changed (the
    /// kernel's `sk_data_ready`, `sk_write_space`, `sk_state_change`);
    /// `napi`: the NAPI the segment came from (0 for a timer or a call),
    /// the one a busy-polling reader of these sockets polls; `rxhash`: its
    /// flow hash (`sk_rxhash`, which a reader records in the RFS table;
    /// 0 for a timer or a call).
    fn changed(&self, ids: &[SockId], napi: u32, rxhash: u32);
    /// The machine's earliest timer deadline changed to `at` (ns on the
    /// clock the layer is given; `None`: no timer).
    fn rearm(&self, at: Option<u64>);
}

/// What the layer did with the machine's packets, beside its MIB.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct TcpTxCounters {
    /// Frames handed to the TX port.
    pub frames_sent: u64,
    /// Packets not sent: no neighbour entry for the destination (TCP
    /// sends them again when its timers say).
    pub no_neighbour: u64,
    /// Frames the TX port did not take (its ring full, or no port).
    pub tx_busy: u64,
    /// TSO packets handed to the TX port whole, for the device or the
    /// kernel's software GSO to cut (their segments are in `frames_sent`).
    pub gso_packets: u64,
}

/// One host's TCP: the machine and what drives it.
pub(crate) struct TcpLayer {
    st: Mutex<TcpState>,
    wake: OnceLock<Arc<dyn TcpWake>>,
}

struct TcpState {
    stack: Stack,
    /// The latest time the machine was given: its clock never runs back.
    now: u64,
    touched: Vec<SockId>,
    armed: Option<u64>,
    tx: TcpTxCounters,
}

impl std::fmt::Debug for TcpLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpLayer").finish_non_exhaustive()
    }
}

/// Frames handed to the TX port at once.
const TX_BATCH: usize = 32;

impl TcpLayer {
    pub(crate) fn new(cfg: TcpConfig, secret: u64, local_addrs: Vec<IpAddr>) -> Self {
        TcpLayer {
            st: Mutex::new(TcpState {
                stack: Stack::new(cfg, secret, local_addrs),
                now: 0,
                touched: Vec::new(),
                armed: None,
                tx: TcpTxCounters::default(),
            }),
            wake: OnceLock::new(),
        }
    }
}

impl TcpState {
    /// The time for the machine: `now` from the caller's clock reading,
    /// or the latest time it was given if that is later. A NAPI's time
    /// is its poll's, older than a program's call made since: the
    /// machine's timestamps (`tsval`) and timers must not run back, or
    /// the peer's PAWS drops what it sends.
    fn clock(&mut self, now: u64) -> u64 {
        self.now = self.now.max(now);
        self.now
    }
}

impl Sockets {
    fn tcp_layer(&self) -> Option<&TcpLayer> {
        self.tcp.as_ref()
    }

    /// The host runs rxpath's TCP ([`SockConfig::tcp`](super::SockConfig::tcp)).
    pub fn has_tcp(&self) -> bool {
        self.tcp.is_some()
    }

    /// Set who hears of touched sockets and timer deadlines (once; later
    /// calls are ignored). Without one nobody is woken and no timer runs.
    pub fn set_tcp_wake(&self, w: Arc<dyn TcpWake>) {
        if let Some(t) = self.tcp_layer() {
            let _ = t.wake.set(w);
        }
    }

    /// A segment from IP input (`tcp_v4_rcv`): the IP packet, its checksum
    /// settled or not, the time and the NAPI it came from.
    /// `from`: the segment's NAPI and flow hash.
    pub(crate) fn tcp_input(&self, pkt: &[u8], verified: bool, now: u64, from: (u32, u32)) {
        if let Some(t) = self.tcp_layer() {
            let mut st = lock(&t.st);
            let now = st.clock(now);
            st.stack.input_checked(pkt, verified, now);
            self.tcp_after(t, &mut st, from);
        }
    }

    /// Run a call of the program on the machine at `now` (a socket call:
    /// `listen`, `accept`, `send`, `recv`, ...), then send what it made
    /// and tell who waits. `None` on a host without TCP.
    pub fn tcp_call<R>(&self, now: u64, f: impl FnOnce(&mut Stack, u64) -> R) -> Option<R> {
        let t = self.tcp_layer()?;
        let mut st = lock(&t.st);
        let now = st.clock(now);
        let r = f(&mut st.stack, now);
        self.tcp_after(t, &mut st, (0, 0));
        Some(r)
    }

    /// Run a query of the program on the machine that sends nothing and
    /// moves no timer (`poll`'s readiness, [`rxpath_tcp::Stack::events`]):
    /// no clock is read and nothing is sent or woken after it. `None` on
    /// a host without TCP.
    pub fn tcp_query<R>(&self, f: impl FnOnce(&mut Stack) -> R) -> Option<R> {
        let t = self.tcp_layer()?;
        let mut st = lock(&t.st);
        Some(f(&mut st.stack))
    }

    /// Run the machine's timers due at `now` (the timer owner calls this
    /// at the deadline [`TcpWake::rearm`] gave).
    pub fn tcp_timeout(&self, now: u64) {
        if let Some(t) = self.tcp_layer() {
            let mut st = lock(&t.st);
            let now = st.clock(now);
            if st.stack.next_deadline().is_some_and(|d| d <= now) {
                st.stack.on_timeout(now);
            }
            self.tcp_after(t, &mut st, (0, 0));
        }
    }

    /// The machine's `Tcp:` and `TcpExt:` counters as `(name, value)`,
    /// and what the layer sent.
    pub fn tcp_counters(&self) -> Option<(Vec<(String, u64)>, TcpTxCounters)> {
        let t = self.tcp_layer()?;
        let st = lock(&t.st);
        let v = (st
            .stack
            .mib
            .iter()
            .map(|(k, x)| (rxpath_tcp::mib::Tcp::GROUP, k, x)))
        .chain(
            st.stack
                .ext
                .iter()
                .map(|(k, x)| (rxpath_tcp::mib::TcpExt::GROUP, k, x)),
        )
        .map(|(g, k, x)| (format!("{g}:{k}"), x))
        .collect();
        Some((v, st.tx))
    }

    /// After the machine ran: send what it queued, tell who waits which
    /// sockets it touched, and move the timer if its deadline moved.
    fn tcp_after(&self, t: &TcpLayer, st: &mut TcpState, (napi, rxhash): (u32, u32)) {
        self.tcp_transmit(st);
        let st = &mut *st;
        st.stack.take_touched(&mut st.touched);
        let next = st.stack.next_deadline();
        let Some(w) = t.wake.get() else {
            return;
        };
        if !st.touched.is_empty() {
            w.changed(&st.touched, napi, rxhash);
        }
        if next != st.armed {
            st.armed = next;
            w.rearm(next);
        }
    }

    /// The machine's packets out as Ethernet frames through the TX port,
    /// each written once, in place (into its AF_XDP TX frame): a TSO
    /// packet cut there as GSO cuts it, each to its neighbour's MAC.
    fn tcp_transmit(&self, st: &mut TcpState) {
        let mut out = Outgoing::default();
        while let Some(t) = st.stack.poll_transmit() {
            let Some((dst, etype)) = ip_dst(&t.packet) else {
                continue;
            };
            let Some(mac) = self.neighbor(dst) else {
                st.tx.no_neighbour += 1;
                continue;
            };
            let mss = t.gso_size as usize;
            let n = rxpath_tcp::wire::segment_count(&t.packet, mss);
            let mut packet = t.packet;
            if n > 1 && self.tcp_gso(st, &mut out, &mut packet, mss, (mac, etype)) {
                continue;
            }
            if !out.frames.is_empty() && out.frames.len() + n > TX_BATCH {
                self.tcp_send_frames(st, &mut out);
            }
            for piece in 0..n {
                out.frames.push((out.packets.len(), piece));
            }
            out.packets.push((packet, mss, mac, etype));
        }
        if !out.frames.is_empty() {
            self.tcp_send_frames(st, &mut out);
        }
    }

    /// Send a TSO packet whole, as a GSO packet the device or the kernel
    /// cuts (on a veth the peer takes it whole, as from the kernel's own
    /// TCP), if the TX port sends them; the frames queued before it go
    /// first. False (the packet to be cut here) if the port sends none or
    /// this one failed.
    fn tcp_gso(
        &self,
        st: &mut TcpState,
        out: &mut Outgoing,
        packet: &mut [u8],
        mss: usize,
        (mac, etype): (Mac, u16),
    ) -> bool {
        if !lock(&self.tx).as_ref().is_some_and(|p| p.tcp_gso()) {
            return false;
        }
        let Some((hdr, v6, ecn)) = rxpath_tcp::wire::gso_prepare(packet, mss) else {
            return false;
        };
        if !out.frames.is_empty() {
            self.tcp_send_frames(st, out);
        }
        let mut eth = [0u8; 14];
        eth[..6].copy_from_slice(&mac);
        eth[6..12].copy_from_slice(&self.cfg.mac);
        eth[12..].copy_from_slice(&etype.to_be_bytes());
        let sent = lock(&self.tx)
            .as_mut()
            .map(|p| p.send_tcp_gso(&eth, packet, (14 + hdr, mss as u16), (v6, ecn)));
        match sent {
            Some(Ok(_)) => {
                st.tx.gso_packets += 1;
                st.tx.frames_sent += rxpath_tcp::wire::segment_count(packet, mss) as u64;
                true
            }
            _ => false,
        }
    }

    /// Hand `out`'s frames to the TX port, [`TX_BATCH`] at a time, until
    /// one is not taken (the ring or its frames ran out: the rest are
    /// counted busy, as a full device queue drops them).
    fn tcp_send_frames(&self, st: &mut TcpState, out: &mut Outgoing) {
        let n = out.frames.len();
        let me = self.cfg.mac;
        // A frame past what a scratch frame holds (a jumbo MTU's segment)
        // goes through the port's copying send instead.
        let in_place = out.packets.iter().all(|(p, mss, ..)| {
            let longest = if *mss > 0 { mss + MAX_HEADERS } else { p.len() };
            14 + longest <= FRAME_MAX
        });
        let mut sent = 0;
        if let Some(port) = lock(&self.tx).as_mut() {
            let write = |i: usize, buf: &mut [u8]| {
                let &(k, piece) = out.frames.get(i)?;
                let (pkt, mss, mac, etype) = out.packets.get(k)?;
                let eth = buf.get_mut(..14)?;
                eth[..6].copy_from_slice(mac);
                eth[6..12].copy_from_slice(&me);
                eth[12..].copy_from_slice(&etype.to_be_bytes());
                let len = rxpath_tcp::wire::write_segment(pkt, *mss, piece, &mut buf[14..])?;
                Some(14 + len)
            };
            while sent < n {
                let batch = (n - sent).min(TX_BATCH);
                let took = if in_place {
                    let mut at = |i: usize, buf: &mut [u8]| write(sent + i, buf);
                    port.send_with(batch, &mut at).unwrap_or(0)
                } else {
                    let frames: Vec<Vec<u8>> = (sent..sent + batch)
                        .filter_map(|i| {
                            let mut f =
                                vec![0; 14 + MAX_HEADERS + out.packets[out.frames[i].0].0.len()];
                            let len = write(i, &mut f)?;
                            f.truncate(len);
                            Some(f)
                        })
                        .collect();
                    let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
                    port.send(&refs).unwrap_or(0)
                };
                sent += took.min(batch);
                if took < batch {
                    break;
                }
            }
        }
        st.tx.frames_sent += sent as u64;
        st.tx.tx_busy += (n - sent) as u64;
        out.frames.clear();
        out.packets.clear();
    }
}

/// The most an IP and a TCP header take (IPv6's 40 bytes and a TCP header
/// with options), to size a segment's frame by its MSS.
const MAX_HEADERS: usize = 100;

/// The packets a transmit hands the TX port, and the frames they make.
#[derive(Default)]
struct Outgoing {
    /// Each packet: its bytes, the MSS a TSO packet is cut at (0: one
    /// segment), and its Ethernet destination and type.
    packets: Vec<(Vec<u8>, usize, Mac, u16)>,
    /// Each frame: its packet's index and the piece of it.
    frames: Vec<(usize, usize)>,
}

/// An IP packet's destination and the ethertype it leaves with.
fn ip_dst(pkt: &[u8]) -> Option<(IpAddr, u16)> {
    match pkt.first()? >> 4 {
        4 if pkt.len() >= 20 => {
            let a: [u8; 4] = pkt[16..20].try_into().ok()?;
            Some((IpAddr::from(a), 0x0800))
        }
        6 if pkt.len() >= 40 => {
            let a: [u8; 16] = pkt[24..40].try_into().ok()?;
            Some((IpAddr::from(a), 0x86dd))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A NAPI's older poll time after a program's call does not take the
    /// machine's clock back: its timestamps stay in order for the peer's
    /// PAWS.
    #[test]
    fn the_machines_clock_never_runs_back() {
        let layer = TcpLayer::new(TcpConfig::default(), 7, Vec::new());
        let mut st = lock(&layer.st);
        assert_eq!(st.clock(5_000_000), 5_000_000);
        assert_eq!(st.clock(17_000_000), 17_000_000);
        assert_eq!(st.clock(9_000_000), 17_000_000);
        assert_eq!(st.clock(18_000_000), 18_000_000);
    }
}
