//! The sockets' TX ports on each device: the AF_XDP TX ring of queue 0,
//! the simulated NIC's TX ring, an AF_PACKET socket.

use rxpath_core::sock::TxPort;
use rxpath_dev::sys::af_packet::RawSocket;

/// Queue 0's AF_XDP socket's TX side, as the sockets' TX port, and an
/// AF_PACKET socket for UDP GSO packets (an AF_XDP frame cannot be one).
#[derive(Debug)]
pub(super) struct XskTxPort {
    pub(super) tx: Option<rxpath_dev::sys::xdp::XskTx>,
    /// The TX side's counters once it has finished.
    pub(super) last: rxpath_dev::sys::xdp::XskTxCounters,
    /// Sends `PACKET_VNET_HDR` GSO packets, if it could be opened.
    pub(super) gso: Option<RawSocket>,
    /// GSO packets sent, and the datagrams' bytes in them.
    pub(super) gso_sent: (u64, u64),
    /// TCP GSO packets sent, and the segments' payload bytes in them.
    pub(super) tcp_gso_sent: (u64, u64),
}

impl XskTxPort {
    /// The port over `tx`, with a GSO socket on `iface` if one opens.
    pub(super) fn new(tx: rxpath_dev::sys::xdp::XskTx, iface: &str) -> XskTxPort {
        XskTxPort {
            tx: Some(tx),
            last: Default::default(),
            gso: RawSocket::bind_gso_tx(iface).ok(),
            gso_sent: (0, 0),
            tcp_gso_sent: (0, 0),
        }
    }
}

impl TxPort for XskTxPort {
    fn send(&mut self, frames: &[&[u8]]) -> std::io::Result<usize> {
        match &mut self.tx {
            Some(tx) => Ok(tx.send(frames)),
            None => Err(std::io::Error::other("the TX ring is closed")),
        }
    }

    /// Frames written straight into the UMEM frames the TX ring posts.
    fn send_with(
        &mut self,
        n: usize,
        write: &mut dyn FnMut(usize, &mut [u8]) -> Option<usize>,
    ) -> std::io::Result<usize> {
        let Some(tx) = &mut self.tx else {
            return Err(std::io::Error::other("the TX ring is closed"));
        };
        let mut i = 0;
        let put = tx.send_with(n, |buf| {
            let r = write(i, buf);
            i += 1;
            r
        });
        tx.counters.busy += (n - put) as u64;
        Ok(put)
    }

    fn udp_gso(&self) -> bool {
        self.gso.is_some()
    }

    /// Through the AF_PACKET socket: the kernel copies the payload into
    /// its buffer and cuts it (or the device does).
    fn send_udp_gso(
        &mut self,
        headers: &[u8],
        payload: &[u8],
        segment: u16,
    ) -> std::io::Result<bool> {
        let Some(s) = &self.gso else {
            return Err(std::io::Error::from(std::io::ErrorKind::Unsupported));
        };
        let all = match s.send_udp_gso(headers, payload, segment) {
            Ok(all) => all,
            Err(e) => {
                if RawSocket::gso_refused(&e) {
                    // This kernel takes none: not again.
                    self.gso = None;
                }
                return Err(e);
            }
        };
        self.gso_sent.0 += 1;
        self.gso_sent.1 += payload.len() as u64;
        Ok(all)
    }

    fn tcp_gso(&self) -> bool {
        self.gso.is_some()
    }

    /// Through the AF_PACKET socket, as [`Self::send_udp_gso`].
    fn send_tcp_gso(
        &mut self,
        eth: &[u8],
        packet: &[u8],
        hdr_len_mss: (usize, u16),
        v6_ecn: (bool, bool),
    ) -> std::io::Result<bool> {
        let Some(s) = &self.gso else {
            return Err(std::io::Error::from(std::io::ErrorKind::Unsupported));
        };
        let all = s.send_tcp_gso(eth, packet, hdr_len_mss, v6_ecn)?;
        self.tcp_gso_sent.0 += 1;
        self.tcp_gso_sent.1 += (packet.len() + 14 - hdr_len_mss.0) as u64;
        Ok(all)
    }

    fn flush(&mut self) {
        if let Some(tx) = &mut self.tx {
            tx.flush();
        }
    }

    fn finish(&mut self) -> (usize, usize) {
        if let Some(tx) = self.tx.take() {
            self.last = tx.finish(std::time::Duration::from_millis(100));
        }
        // Its frames are queue 0's: they count there.
        (0, 0)
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = match &self.tx {
            Some(tx) => tx.counters,
            None => self.last,
        };
        vec![
            ("xsk_tx_sent", c.sent),
            ("xsk_tx_completed", c.completed),
            ("xsk_tx_busy", c.busy),
            ("xsk_tx_kicks", c.kicks),
            ("gso_tx_packets", self.gso_sent.0),
            ("gso_tx_payload_bytes", self.gso_sent.1),
            ("tcp_gso_tx_packets", self.tcp_gso_sent.0),
            ("tcp_gso_tx_payload_bytes", self.tcp_gso_sent.1),
        ]
    }

    /// Frames posted that never came back through the completion ring
    /// (the interface went with them in flight).
    fn unfinished(&self) -> u64 {
        let c = match &self.tx {
            Some(tx) => tx.counters,
            None => self.last,
        };
        c.sent.saturating_sub(c.completed)
    }
}

/// The simulated NIC's TX ring, as the sockets' TX port.
#[derive(Debug)]
pub(super) struct SimTxPort(pub(super) rxpath_dev::sim::SimTx);

impl TxPort for SimTxPort {
    fn send(&mut self, frames: &[&[u8]]) -> std::io::Result<usize> {
        Ok(self.0.send(frames))
    }

    fn finish(&mut self) -> (usize, usize) {
        self.0.finish()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = self.0.counters;
        vec![
            ("sim_tx_sent", c.sent),
            ("sim_tx_completed", c.completed),
            ("sim_tx_busy", c.busy),
            ("sim_tx_wire_bytes", c.wire_bytes),
        ]
    }
}

/// The AF_PACKET socket sockets send through on an interface.
#[derive(Debug)]
pub(super) struct PacketTx(pub(super) RawSocket);

impl TxPort for PacketTx {
    fn send(&mut self, frames: &[&[u8]]) -> std::io::Result<usize> {
        self.0.send_batch(frames)
    }
}
