//! What sockets send through: a [`TxPort`] (the runtime gives an AF_PACKET
//! socket on the interface; tests a [`CaptureTx`]), and frame building.

use super::{lock, SockConfig, SockError, Sockets};
use rxpath_wire::build::{write_udp, Spec};
use rxpath_wire::ethernet::Mac;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// Datagrams built and handed to the port at once by `send_batch`: as many
/// as one `UDP_SEGMENT` send may carry (`UDP_MAX_SEGMENTS`), so a GSO send
/// is one hand-over (one wakeup of the device).
pub(crate) const TX_BATCH: usize = 64;
const FRAME_MAX: usize = 2048;

/// A device's transmit side. Calling context: any thread, serialized by
/// the host (the kernel's TX queue lock).
pub trait TxPort: Send + std::fmt::Debug {
    /// Send whole Ethernet frames; returns how many were taken.
    fn send(&mut self, frames: &[&[u8]]) -> std::io::Result<usize>;
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
}

/// A TX port that keeps what it is given (tests, the simulated NIC).
#[derive(Debug, Clone, Default)]
pub struct CaptureTx {
    /// The frames sent so far.
    pub frames: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl TxPort for CaptureTx {
    fn send(&mut self, frames: &[&[u8]]) -> std::io::Result<usize> {
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
}

/// Up to [`TX_BATCH`] frames, built in a per-thread buffer that is reused
/// (not zeroed again) from one send to the next.
pub(crate) struct Frames {
    buf: Vec<u8>,
    lens: [usize; TX_BATCH],
    n: usize,
}

thread_local! {
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

impl Drop for Frames {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        SCRATCH.with(|s| s.set(buf));
    }
}

impl Frames {
    pub(crate) fn new() -> Self {
        let mut buf = SCRATCH.with(|s| s.take());
        if buf.len() < TX_BATCH * FRAME_MAX {
            buf.resize(TX_BATCH * FRAME_MAX, 0);
        }
        Frames {
            buf,
            lens: [0; TX_BATCH],
            n: 0,
        }
    }

    fn slot(&self, i: usize) -> &[u8] {
        &self.buf[i * FRAME_MAX..i * FRAME_MAX + self.lens[i]]
    }

    pub(crate) fn len(&self) -> usize {
        self.n
    }

    /// Build one UDP datagram's frame with the IP fields `ip`.
    pub(crate) fn push(
        &mut self,
        cfg: &SockConfig,
        src: SocketAddr,
        dst: SocketAddr,
        dst_mac: Mac,
        ip: IpFields,
        payload: &[u8],
    ) -> Result<(), SockError> {
        let l3 = if dst.is_ipv4() { 20 } else { 40 };
        let max = cfg.mtu.min(FRAME_MAX - 14).saturating_sub(l3 + 8);
        if payload.len() > max {
            return Err(SockError::MessageTooLong {
                len: payload.len(),
                max,
                mtu: cfg.mtu,
            });
        }
        let mut spec = Spec::new(src.ip(), dst.ip(), src.port(), dst.port());
        spec.src_mac = cfg.mac;
        spec.dst_mac = dst_mac;
        spec.ip_id = ip.id;
        spec.tos = ip.tos;
        spec.df = ip.df;
        let at = self.n * FRAME_MAX;
        let len = write_udp(&mut self.buf[at..at + FRAME_MAX], &spec, payload).map_err(|_| {
            SockError::MessageTooLong {
                len: payload.len(),
                max,
                mtu: cfg.mtu,
            }
        })?;
        self.lens[self.n] = len;
        self.n += 1;
        Ok(())
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
                (port.counters(), frames)
            }
            None => (Vec::new(), (0, 0)),
        }
    }

    /// Hand built frames to the TX port.
    pub(crate) fn transmit(&self, f: &Frames) -> Result<usize, SockError> {
        let mut refs: [&[u8]; TX_BATCH] = [&[]; TX_BATCH];
        for (i, r) in refs.iter_mut().enumerate().take(f.n) {
            *r = f.slot(i);
        }
        let mut tx = lock(&self.tx);
        let port = tx.as_mut().ok_or(SockError::NoTx)?;
        port.send(&refs[..f.n])
            .map_err(|e| SockError::Tx(e.to_string()))
    }
}
