//! GRO's settings: `gro_flush_timeout` as a knob shared by a device's
//! NAPIs and changeable while they run, and the adaptive timeout.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// `/sys/class/net/<dev>/gro_flush_timeout`, in ns: shared by every NAPI of
/// a device, read at every poll, changeable while running.
#[derive(Debug, Clone, Default)]
pub struct GroKnob(Arc<AtomicU64>);

impl GroKnob {
    /// A knob set to `ns`.
    pub fn new(ns: u64) -> Self {
        GroKnob(Arc::new(AtomicU64::new(ns)))
    }
    /// Current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    /// Change it (takes effect at the next poll end).
    pub fn set(&self, ns: u64) {
        self.0.store(ns, Ordering::Relaxed)
    }
}

/// Adaptive flush timeout: beyond the kernel. Keeps an average of how many
/// segments are bulk (full-MSS segments without PSH, which merge) versus
/// request/response (segments that end a packet at once); uses `max_ns` while
/// bulk dominates and 0 otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Adaptive {
    /// Timeout used for bulk traffic.
    pub max_ns: u64,
    /// Bulk share above which the timer is used.
    pub threshold: f64,
}

impl Default for Adaptive {
    fn default() -> Self {
        Adaptive {
            max_ns: 20_000,
            threshold: 0.5,
        }
    }
}

/// Which datagrams UDP GRO may merge: the kernel asks the socket a
/// datagram is for (`udp_sk(sk)->gro_enabled`, set by `UDP_GRO`).
pub trait UdpGroPolicy: Send + Sync + std::fmt::Debug {
    /// True if the socket that `flow` (a UDP datagram's addresses and
    /// ports) reaches asked for `UDP_GRO`. Called for every UDP datagram
    /// GRO sees: a host with no such socket should answer without a lookup,
    /// as the kernel's `udp_encap_needed_key` static branch does.
    fn wants(&self, flow: &rxpath_wire::FlowKey) -> bool;

    /// A number that changes whenever an answer of [`Self::wants`] may
    /// change (a socket bound, connected, closed, or its `UDP_GRO`
    /// turned), read with Acquire after the change is made: GRO then keeps
    /// the last flow's answer until it changes, one lookup per flow and
    /// table change instead of one per datagram. `None` (the default):
    /// ask every time.
    fn generation(&self) -> Option<u64> {
        None
    }
}

/// GRO configuration of one NAPI.
#[derive(Debug, Clone, Default)]
pub struct GroConfig {
    /// GRO on (`ethtool -K dev gro on`).
    pub enabled: bool,
    /// Who wants UDP datagrams merged (`None`: nobody; UDP goes up alone).
    pub udp: Option<std::sync::Arc<dyn UdpGroPolicy>>,
    /// `gro_flush_timeout`.
    pub flush_timeout: GroKnob,
    /// Choose the timeout from the traffic instead of the knob.
    pub adaptive: Option<Adaptive>,
}
