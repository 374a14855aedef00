//! What the preload writes at exit (to [`crate::Config::report`], made
//! when its host starts) and `rxpath exec` reads, sums over the program's
//! processes and prints: one struct for both sides.

use crate::options::Config;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Why a socket stays the kernel's (each counted, and said once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fallback {
    /// No `RXPATH_IFACE`, or its value did not parse.
    NoIface,
    /// Bound to port 0 (a client's ephemeral port).
    EphemeralPort,
    /// Bound to an address that is not the interface's.
    OtherAddress,
    /// The port map is full.
    PortMapFull,
    /// The host could not start on the interface.
    HostFailed,
    /// rxpath refused the bind (address in use in rxpath).
    BindRefused,
    /// An option set before `bind` that rxpath cannot honour.
    Option,
    /// An option set after `bind` that rxpath cannot honour: the socket
    /// was handed back to the kernel.
    OptionAfterBind,
    /// Duplicated (`dup`) before `bind`.
    Dup,
    /// `RXPATH_PORTS`, `RXPATH_KERNEL_PORTS` or `RXPATH_RULES` leave the
    /// port to the kernel.
    Rule,
    /// A TCP socket rxpath does not serve: on a device whose frames the
    /// kernel sees too (AF_PACKET), or a use of TCP not served yet.
    Protocol,
    /// The interface was deleted or made again while the program ran: the
    /// socket went back to the kernel, or was bound after and stayed
    /// there.
    IfaceGone,
}

/// Which path served a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Path {
    /// rxpath's, to the end.
    Rxpath,
    /// The kernel's, from some point on ([`SocketPath::why`]).
    Kernel,
}

/// Which path served one socket ([`PreloadReport::sockets`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketPath {
    /// The address it was bound to.
    pub addr: SocketAddr,
    /// Its path.
    pub path: Path,
    /// Why it went back to the kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// `received = delivered + dropped` over every NAPI, and the frames.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accounting {
    /// Frames the NAPIs took from the device.
    pub received: u64,
    /// Delivered to sockets.
    pub delivered: u64,
    /// Dropped, each for a counted reason.
    pub dropped: u64,
    /// Drops by reason.
    pub drops: BTreeMap<String, u64>,
    /// Frames of the device.
    pub frames_total: usize,
    /// Frames back in the pool at the end.
    pub frames_home: usize,
}

impl Accounting {
    /// Every frame received was delivered or dropped for a reason.
    pub fn adds_up(&self) -> bool {
        self.received == self.delivered + self.dropped
    }

    /// Every frame went back to the pool.
    pub fn frames_home(&self) -> bool {
        self.frames_home == self.frames_total
    }
}

/// What the device did with the frames offered to the host's queues,
/// summed over them (`rxpath run`'s device counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceCounts {
    /// Frames the interface offered.
    pub offered: u64,
    /// Put on the RX ring.
    pub rx_ring: u64,
    /// Dropped: the RX ring was full.
    pub rx_missed: u64,
    /// Dropped: no free frame.
    pub rx_no_buffer: u64,
    /// Dropped: longer than a frame.
    pub rx_too_long: u64,
}

/// The AF_XDP TX ring's frames: posted, completed, and the replies among
/// them that never completed (not in `OutDatagrams`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxRing {
    /// Frames posted to the ring.
    pub posted: u64,
    /// Frames the device completed.
    pub completed: u64,
    /// Datagrams with a frame never completed (`tx_unfinished`).
    pub unfinished: u64,
}

/// What the preloaded process's path did, written at exit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PreloadReport {
    /// The configuration it ran with.
    pub config: Config,
    /// The backend, as the host says it (`AF_XDP on IF: ...`); `None` if
    /// no host started.
    pub backend: Option<String>,
    /// Sockets accelerated.
    pub accelerated: u64,
    /// Sockets left to the kernel, by reason.
    pub fallbacks: BTreeMap<Fallback, u64>,
    /// Calls refused with `EOPNOTSUPP` on accelerated sockets, by what.
    pub unsupported: BTreeMap<String, u64>,
    /// The path's accounting; `None` if no host ran.
    pub accounting: Option<Accounting>,
    /// Datagrams read from the kernel socket behind a served fd (sent over
    /// loopback or another interface, or before the port map took the
    /// port): the kernel's path, not counted in `accounting`.
    pub kernel_reads: u64,
    /// What happened to the interface while the program ran (deleted,
    /// made again, down, up, its MTU, an address added), in order.
    pub link_events: Vec<String>,
    /// Which path served each socket rxpath took, in the order they were
    /// bound; sockets still open at exit and those closed.
    pub sockets: Vec<SocketPath>,
    /// The device's counters; `None` if no host ran.
    pub device: Option<DeviceCounts>,
    /// The AF_XDP TX ring's; `None` without one.
    pub tx: Option<TxRing>,
    /// The processes whose reports this sums (1 for one process's).
    #[serde(default = "one")]
    pub processes: u64,
    /// The host's whole report (every counter of the runtime's
    /// `HostReport`), for `rxpath exec --json`: the first process's, with
    /// every process's queues.
    pub host: Option<serde_json::Value>,
}

fn one() -> u64 {
    1
}

impl PreloadReport {
    /// The reports of several processes of one program as one: counts
    /// summed, maps summed key by key, lists joined, the first backend
    /// and configuration, the device's queues side by side. `None` for
    /// none.
    pub fn merge(all: Vec<PreloadReport>) -> Option<PreloadReport> {
        let mut it = all.into_iter();
        let mut m = it.next()?;
        for r in it {
            m.add(r);
        }
        Some(m)
    }

    fn add(&mut self, r: PreloadReport) {
        fn sum<K: Ord>(a: &mut BTreeMap<K, u64>, b: BTreeMap<K, u64>) {
            for (k, n) in b {
                *a.entry(k).or_default() += n;
            }
        }
        self.backend = self.backend.take().or(r.backend);
        self.accelerated += r.accelerated;
        sum(&mut self.fallbacks, r.fallbacks);
        sum(&mut self.unsupported, r.unsupported);
        self.accounting = match (self.accounting.take(), r.accounting) {
            (Some(mut a), Some(b)) => {
                a.received += b.received;
                a.delivered += b.delivered;
                a.dropped += b.dropped;
                sum(&mut a.drops, b.drops);
                a.frames_total += b.frames_total;
                a.frames_home += b.frames_home;
                Some(a)
            }
            (a, b) => a.or(b),
        };
        self.kernel_reads += r.kernel_reads;
        self.link_events.extend(r.link_events);
        self.sockets.extend(r.sockets);
        self.device = match (self.device, r.device) {
            (Some(a), Some(b)) => Some(DeviceCounts {
                offered: a.offered + b.offered,
                rx_ring: a.rx_ring + b.rx_ring,
                rx_missed: a.rx_missed + b.rx_missed,
                rx_no_buffer: a.rx_no_buffer + b.rx_no_buffer,
                rx_too_long: a.rx_too_long + b.rx_too_long,
            }),
            (a, b) => a.or(b),
        };
        self.tx = match (self.tx, r.tx) {
            (Some(a), Some(b)) => Some(TxRing {
                posted: a.posted + b.posted,
                completed: a.completed + b.completed,
                unfinished: a.unfinished + b.unfinished,
            }),
            (a, b) => a.or(b),
        };
        self.processes += r.processes;
        self.host = match (self.host.take(), r.host) {
            (Some(mut a), Some(b)) => {
                if let (Some(qa), Some(qb)) = (
                    a.get_mut("queues").and_then(|q| q.as_array_mut()),
                    b.get("queues").and_then(|q| q.as_array()),
                ) {
                    qa.extend(qb.iter().cloned());
                }
                Some(a)
            }
            (a, b) => a.or(b),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_process(received: u64, too_long: u64) -> PreloadReport {
        PreloadReport {
            backend: Some("AF_XDP on veth0".into()),
            accelerated: 1,
            fallbacks: [(Fallback::Rule, 2)].into(),
            accounting: Some(Accounting {
                received,
                delivered: received - 1,
                dropped: 1,
                drops: [("no_socket".to_string(), 1)].into(),
                frames_total: 10,
                frames_home: 10,
            }),
            kernel_reads: 3,
            link_events: vec!["interface veth0 went down".into()],
            sockets: vec![SocketPath {
                addr: "198.18.0.1:53".parse().unwrap(),
                path: Path::Rxpath,
                why: None,
            }],
            device: Some(DeviceCounts {
                offered: received,
                rx_ring: received - too_long,
                rx_too_long: too_long,
                ..DeviceCounts::default()
            }),
            tx: Some(TxRing {
                posted: 5,
                completed: 4,
                unfinished: 1,
            }),
            processes: 1,
            host: Some(serde_json::json!({"queues": [{"queue": 0}]})),
            ..PreloadReport::default()
        }
    }

    #[test]
    fn a_report_reads_back_as_written() {
        let r = one_process(100, 2);
        let text = serde_json::to_string(&r).unwrap();
        let back: PreloadReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        assert!(text.contains("\"path\":\"rxpath\""), "{text}");
    }

    #[test]
    fn processes_reports_sum() {
        let m = PreloadReport::merge(vec![one_process(100, 2), one_process(50, 0)]).unwrap();
        assert_eq!(m.processes, 2);
        assert_eq!(m.accelerated, 2);
        assert_eq!(m.fallbacks[&Fallback::Rule], 4);
        let a = m.accounting.as_ref().unwrap();
        assert_eq!((a.received, a.delivered, a.dropped), (150, 148, 2));
        assert!(a.adds_up() && a.frames_home());
        assert_eq!(a.drops["no_socket"], 2);
        assert_eq!(m.device.unwrap().rx_too_long, 2);
        assert_eq!(m.tx.unwrap().unfinished, 2);
        assert_eq!(m.sockets.len(), 2);
        assert_eq!(m.host.unwrap()["queues"].as_array().unwrap().len(), 2);
        assert_eq!(PreloadReport::merge(Vec::new()), None);
    }
}
