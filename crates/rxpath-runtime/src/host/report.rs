//! What a [`Host`](crate::Host) did, gathered at shutdown (the metrics
//! exporter encodes it too).

use rxpath_core::snmp::Snmp;
use rxpath_core::sock::SockStats;
use rxpath_core::stats::NapiStats;
use rxpath_dev::DeviceQueueStats;
use serde::Serialize;

/// One queue at shutdown.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct HostQueue {
    /// Queue index.
    pub queue: u16,
    /// NAPI counters.
    pub napi: NapiStats,
    /// Device counters.
    pub device: DeviceQueueStats,
}

/// What a host did, gathered at shutdown.
#[derive(Debug, Clone, Serialize)]
pub struct HostReport {
    /// Per queue.
    pub queues: Vec<HostQueue>,
    /// The socket layer's counters.
    pub sock: SockStats,
    /// Frames the device had.
    pub frames_total: usize,
    /// Frames back home after shutdown (must equal `frames_total`).
    pub frames_home: usize,
    /// SNMP counters: IP and UDP input over all NAPIs, and the sockets'
    /// send side (`/proc/net/snmp` names: [`Snmp::sections`]).
    pub snmp: Snmp,
    /// Per worker (steering on; empty otherwise).
    pub workers: Vec<crate::steer::WorkerReport>,
    /// The TX port's counters (AF_XDP TX ring: `xsk_tx_sent`,
    /// `xsk_tx_completed`, `xsk_tx_busy`, `xsk_tx_kicks`, and its GSO
    /// socket's `gso_tx_packets`, `gso_tx_payload_bytes`; the simulated
    /// NIC's: `sim_tx_sent`, `sim_tx_completed`, `sim_tx_busy`,
    /// `sim_tx_wire_bytes`).
    pub tx: std::collections::BTreeMap<&'static str, u64>,
    /// rxpath's TCP, if the host ran it: the `Tcp:` and `TcpExt:`
    /// counters by the kernel's names, and what its layer sent.
    pub tcp: Option<TcpReport>,
}

/// What a host's TCP did.
#[derive(Debug, Clone, Serialize)]
pub struct TcpReport {
    /// `Tcp:` and `TcpExt:` counters that are not 0, `Group:Name`.
    pub mib: std::collections::BTreeMap<String, u64>,
    /// Frames sent, and packets not sent (no neighbour, TX port full).
    pub tx: rxpath_core::sock::TcpTxCounters,
}

impl TcpReport {
    /// The counter `name` (`Tcp:OutSegs`), 0 if it never counted.
    pub fn get(&self, name: &str) -> u64 {
        self.mib.get(name).copied().unwrap_or(0)
    }
}

impl HostReport {
    /// NAPI counters summed over queues.
    pub fn napi_total(&self) -> NapiStats {
        crate::steer::napi_total(self.queues.iter().map(|q| &q.napi), &self.workers)
    }
}
