//! The sockets' TX ports on each device: the AF_XDP TX ring of queue 0,
//! the simulated NIC's TX ring, an AF_PACKET socket.

use rxpath_core::sock::TxPort;
use rxpath_dev::sys::af_packet::RawSocket;

/// Queue 0's AF_XDP socket's TX side, as the sockets' TX port.
#[derive(Debug)]
pub(super) struct XskTxPort(
    pub(super) Option<rxpath_dev::sys::xdp::XskTx>,
    pub(super) rxpath_dev::sys::xdp::XskTxCounters,
);

impl TxPort for XskTxPort {
    fn send(&mut self, frames: &[&[u8]]) -> std::io::Result<usize> {
        match &mut self.0 {
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
        let Some(tx) = &mut self.0 else {
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

    fn finish(&mut self) -> (usize, usize) {
        if let Some(tx) = self.0.take() {
            self.1 = tx.finish(std::time::Duration::from_millis(100));
        }
        // Its frames are queue 0's: they count there.
        (0, 0)
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = match &self.0 {
            Some(tx) => tx.counters,
            None => self.1,
        };
        vec![
            ("xsk_tx_sent", c.sent),
            ("xsk_tx_completed", c.completed),
            ("xsk_tx_busy", c.busy),
            ("xsk_tx_kicks", c.kicks),
        ]
    }

    /// Frames posted that never came back through the completion ring
    /// (the interface went with them in flight).
    fn unfinished(&self) -> u64 {
        let c = match &self.0 {
            Some(tx) => tx.counters,
            None => self.1,
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
