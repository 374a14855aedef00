//! What sockets send through: a [`TxPort`] (the runtime gives an AF_PACKET
//! socket on the interface; tests a [`CaptureTx`]), and frame building.

use super::{lock, SockConfig, SockError, Sockets};
use rxpath_wire::build::{
    udp_fragments, write_udp, write_udp_fragment, write_udp_gso_headers, Spec, UdpFragment,
};
use rxpath_wire::ethernet::Mac;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// Datagrams built and handed to the port at once by `send_batch`: as many
/// as one `UDP_SEGMENT` send may carry (`UDP_MAX_SEGMENTS`), so a GSO send
/// is one hand-over (one wakeup of the device).
pub(crate) const TX_BATCH: usize = 64;
/// The scratch frame of [`TxPort::send_with`]'s default.
pub(crate) const FRAME_MAX: usize = 2048;

/// A device's transmit side. Calling context: any thread, serialized by
/// the host (the kernel's TX queue lock).
pub trait TxPort: Send + std::fmt::Debug {
    /// Send whole Ethernet frames; returns how many were taken.
    fn send(&mut self, frames: &[&[u8]]) -> std::io::Result<usize>;
    /// Send up to `n` frames written in place: `write(i, buf)` writes frame
    /// `i` into `buf` and returns its length (`None`: stop). Returns how
    /// many were taken. The default writes into a scratch buffer and calls
    /// [`send`](Self::send); a port with frames of its own (an AF_XDP TX
    /// ring) hands them to `write` directly.
    fn send_with(
        &mut self,
        n: usize,
        write: &mut dyn FnMut(usize, &mut [u8]) -> Option<usize>,
    ) -> std::io::Result<usize> {
        send_via_scratch(self, n, write)
    }
    /// Whether the port sends UDP GSO packets ([`Self::send_udp_gso`]).
    fn udp_gso(&self) -> bool {
        false
    }
    /// One UDP GSO packet: `headers` ([`rxpath_wire::build::write_udp_gso_headers`])
    /// and `payload`, cut into datagrams of `segment` payload bytes by the
    /// device or the kernel's software GSO, as the kernel's `UDP_SEGMENT`
    /// send leaves. `Ok(true)`: every datagram left; `Ok(false)`: the
    /// packet was sent but the device dropped some of its datagrams after
    /// others left (`ENOBUFS`), a send that happened (the kernel's
    /// `udp_send_skb` counts it once in `SndbufErrors`), never to be sent
    /// again; an error: nothing left.
    fn send_udp_gso(
        &mut self,
        _headers: &[u8],
        _payload: &[u8],
        _segment: u16,
    ) -> std::io::Result<bool> {
        Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
    }
    /// Whether the port sends TCP GSO packets ([`Self::send_tcp_gso`]).
    fn tcp_gso(&self) -> bool {
        false
    }
    /// One TCP GSO packet (the machine's TSO packet): `eth`, then
    /// `packet` whose TCP checksum holds the pseudo-header sum
    /// ([`rxpath_tcp::wire::gso_prepare`]), cut into segments of `mss`
    /// payload bytes by the device's TSO or the kernel's software GSO, as
    /// the kernel's own TCP leaves; `hdr_len` is the Ethernet, IP and TCP
    /// headers' length, `ecn` that CWR is set. What
    /// [`Self::send_udp_gso`] returns.
    fn send_tcp_gso(
        &mut self,
        _eth: &[u8],
        _packet: &[u8],
        _hdr_len_mss: (usize, u16),
        _v6_ecn: (bool, bool),
    ) -> std::io::Result<bool> {
        Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
    }
    /// Hand the device what an earlier send left waiting (a TX ring whose
    /// kick found the device queue stopped), if anything: called after
    /// NAPI polls, when no send may come to do it.
    fn flush(&mut self) {}
    /// The host stops: give back what the port holds of the device (its
    /// frames), after what is in flight has completed or a short wait.
    /// Returns the frames of its own region, if it has one: (total, home).
    fn finish(&mut self) -> (usize, usize) {
        (0, 0)
    }
    /// Counters worth reporting, by name.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// After [`finish`](Self::finish): the frames it took that the device
    /// never completed (the newest ones: a TX ring completes in order).
    /// A port whose sends are done when taken has none.
    fn unfinished(&self) -> u64 {
        0
    }
}

/// The last datagrams handed to the TX port: how many frames each took
/// and whether it was IPv6, newest last. As long as a TX ring holds
/// frames in flight, so that what it never completed can be told apart
/// by datagram.
#[derive(Debug, Default)]
pub(crate) struct SentLog {
    /// Frames, IPv6, counted sent (a datagram the port took only some
    /// frames of failed, but those frames are in the ring).
    ring: std::collections::VecDeque<(u16, bool, bool)>,
}

/// Datagrams [`SentLog`] remembers (more than any TX ring holds frames).
const SENT_LOG: usize = 16_384;

impl SentLog {
    /// `frames` frames of one datagram were taken (all of them if
    /// `counted`).
    pub(crate) fn push(&mut self, frames: usize, v6: bool, counted: bool) {
        if self.ring.len() == SENT_LOG {
            self.ring.pop_front();
        }
        let k = frames.min(u16::MAX as usize) as u16;
        self.ring.push_back((k, v6, counted));
    }

    /// The datagrams counted sent (per family: v4, v6) with a frame
    /// among the newest `frames` frames: those not all completed.
    pub(crate) fn newest(&self, mut frames: u64) -> [u64; 2] {
        let mut lost = [0; 2];
        for &(k, v6, counted) in self.ring.iter().rev() {
            if frames == 0 {
                break;
            }
            frames = frames.saturating_sub(k as u64);
            lost[v6 as usize] += counted as u64;
        }
        lost
    }
}

/// A TX port that keeps what it is given (tests, the simulated NIC).
#[derive(Debug, Clone, Default)]
pub struct CaptureTx {
    /// The frames sent so far.
    pub frames: Arc<Mutex<Vec<Vec<u8>>>>,
    /// How many frames each send handed over (one kick of a TX ring each).
    pub batches: Arc<Mutex<Vec<usize>>>,
}

impl TxPort for CaptureTx {
    fn send(&mut self, frames: &[&[u8]]) -> std::io::Result<usize> {
        lock(&self.batches).push(frames.len());
        lock(&self.frames).extend(frames.iter().map(|f| f.to_vec()));
        Ok(frames.len())
    }
}

/// What a datagram's IP header carries that the socket decides.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IpFields {
    /// IPv4 identification.
    pub(crate) id: u16,
    /// TOS / traffic class (the ECN bits).
    pub(crate) tos: u8,
    /// IPv4 don't-fragment.
    pub(crate) df: bool,
    /// A datagram past the MTU may leave in IP fragments (IPv4 without
    /// `IP_PMTUDISC_DO`, IPv6 at the source); else it is refused.
    pub(crate) frag: bool,
    /// IPv6's fragment identification.
    pub(crate) frag_id: u32,
}

/// Up to [`TX_BATCH`] datagrams checked and ready to be written: their
/// headers' fields and payloads. The port writes them where they go (in
/// place in an AF_XDP TX ring; elsewhere through a scratch buffer).
pub(crate) struct Frames<'a> {
    specs: arrayvec::ArrayVec<(Spec, &'a [u8], Option<UdpFragment>), TX_BATCH>,
}

/// The largest UDP payload a frame of `mtu` carries.
fn fits(cfg: &SockConfig, v6: bool) -> usize {
    let l3 = if v6 { 40 } else { 20 };
    cfg.mtu.min(FRAME_MAX - 14).saturating_sub(l3 + 8)
}

/// Whether a datagram of `len` bytes to an IPv6 (`v6`) or IPv4 address
/// fits one frame.
pub(crate) fn fits_one(cfg: &SockConfig, len: usize, v6: bool) -> bool {
    len <= fits(cfg, v6)
}

/// Frames a datagram of `len` bytes takes at most (fragments counted as
/// IPv6's, the smaller).
pub(crate) fn frames_for(cfg: &SockConfig, len: usize) -> usize {
    if len <= fits(cfg, true) {
        return 1;
    }
    let room = (cfg.mtu.min(FRAME_MAX - 14).saturating_sub(48) & !7).max(8);
    (len + 8).div_ceil(room)
}

thread_local! {
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// [`TxPort::send_with`]'s default: write the frames into this thread's
/// scratch buffer (reused from one send to the next), then `send` them.
fn send_via_scratch<P: TxPort + ?Sized>(
    port: &mut P,
    n: usize,
    write: &mut dyn FnMut(usize, &mut [u8]) -> Option<usize>,
) -> std::io::Result<usize> {
    let n = n.min(TX_BATCH);
    let mut buf = SCRATCH.with(|s| s.take());
    if buf.len() < n * FRAME_MAX {
        buf.resize(n * FRAME_MAX, 0);
    }
    let mut lens = arrayvec::ArrayVec::<usize, TX_BATCH>::new();
    for (i, slot) in buf.chunks_mut(FRAME_MAX).take(n).enumerate() {
        match write(i, slot) {
            Some(l) => lens.push(l),
            None => break,
        }
    }
    let refs: arrayvec::ArrayVec<&[u8], TX_BATCH> = lens
        .iter()
        .enumerate()
        .map(|(i, &l)| &buf[i * FRAME_MAX..i * FRAME_MAX + l])
        .collect();
    let r = port.send(&refs);
    drop(refs);
    SCRATCH.with(|s| s.set(buf));
    r
}

impl<'a> Frames<'a> {
    pub(crate) fn new() -> Self {
        Frames {
            specs: arrayvec::ArrayVec::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.specs.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// Check one UDP datagram and keep what its frames need, with the IP
    /// fields `ip`: one frame, or for a datagram past the MTU that may be
    /// fragmented, one per fragment as `ip_fragment` / `ip6_fragment`
    /// cut them. Returns the frames it takes.
    pub(crate) fn push(
        &mut self,
        cfg: &SockConfig,
        src: SocketAddr,
        dst: SocketAddr,
        dst_mac: Mac,
        ip: IpFields,
        payload: &'a [u8],
    ) -> Result<usize, SockError> {
        let max = fits(cfg, dst.is_ipv6());
        let mut spec = Spec::new(src.ip(), dst.ip(), src.port(), dst.port());
        spec.src_mac = cfg.mac;
        spec.dst_mac = dst_mac;
        spec.ip_id = ip.id;
        spec.tos = ip.tos;
        spec.df = ip.df;
        let too_long = SockError::MessageTooLong {
            len: payload.len(),
            max,
            mtu: cfg.mtu,
        };
        if payload.len() <= max {
            if self.specs.is_full() {
                return Err(too_long);
            }
            self.specs.push((spec, payload, None));
            return Ok(1);
        }
        // The largest datagram: IPv4's total length, IPv6's payload length.
        let limit = if dst.is_ipv6() {
            65_535 - 8
        } else {
            65_535 - 20 - 8
        };
        if !ip.frag || payload.len() > limit {
            return Err(too_long);
        }
        let mtu = cfg.mtu.min(FRAME_MAX - 14);
        let pieces = udp_fragments(&spec, payload, mtu, ip.frag_id);
        if pieces.len() > self.specs.remaining_capacity() {
            return Err(too_long);
        }
        spec.df = false;
        let n = pieces.len();
        for f in pieces {
            self.specs.push((spec, payload, Some(f)));
        }
        Ok(n)
    }
}

impl Sockets {
    /// The host stops: the TX port gives back what it holds of the device
    /// and is gone (sends after this fail with `NoTx`); its counters, and
    /// the frames of its own region (total, home).
    pub fn finish_tx(&self) -> (Vec<(&'static str, u64)>, (usize, usize)) {
        match lock(&self.tx).take() {
            Some(mut port) => {
                let frames = port.finish();
                let lost = lock(&self.sent).newest(port.unfinished());
                self.uncount_sent(lost);
                (port.counters(), frames)
            }
            None => (Vec::new(), (0, 0)),
        }
    }

    /// [`TxPort::flush`], unless a sender holds the port (it kicks the
    /// device itself).
    pub(crate) fn flush_tx(&self) {
        if let Ok(mut g) = self.tx.try_lock() {
            if let Some(p) = g.as_mut() {
                p.flush();
            }
        }
    }

    /// One UDP GSO packet of `payload` in `segment`-byte datagrams with
    /// `spec`'s headers, if the TX port sends them (`None`: it does not);
    /// what [`TxPort::send_udp_gso`] says.
    pub(crate) fn transmit_udp_gso(
        &self,
        spec: &Spec,
        payload: &[u8],
        segment: u16,
    ) -> Option<std::io::Result<bool>> {
        let mut tx = lock(&self.tx);
        let port = tx.as_mut()?;
        if !port.udp_gso() {
            return None;
        }
        let mut hdr = [0u8; 80];
        let n = write_udp_gso_headers(&mut hdr, spec, payload.len()).ok()?;
        Some(port.send_udp_gso(&hdr[..n], payload, segment))
    }

    /// Hand the datagrams to the TX port, which writes their frames where
    /// they go (in place in an AF_XDP TX ring: no copy through a buffer);
    /// `built`: each datagram's frames and family, in order. Returns the
    /// frames taken. What was taken is logged in the order the port took
    /// it ([`SentLog`]).
    pub(crate) fn transmit(
        &self,
        f: &Frames<'_>,
        built: &[(usize, bool)],
    ) -> Result<usize, SockError> {
        let mut tx = lock(&self.tx);
        let port = tx.as_mut().ok_or(SockError::NoTx)?;
        let taken = port
            .send_with(f.len(), &mut |i, buf| {
                let (spec, payload, frag) = f.specs.get(i)?;
                match frag {
                    None => write_udp(buf, spec, payload).ok(),
                    Some(fr) => write_udp_fragment(buf, spec, payload, *fr).ok(),
                }
            })
            .map_err(|e| SockError::Tx(e.to_string()))?;
        let mut log = lock(&self.sent);
        let mut at = 0;
        for &(k, v6) in built {
            if at >= taken {
                break;
            }
            log.push(k.min(taken - at), v6, at + k <= taken);
            at += k;
        }
        Ok(taken)
    }
}
