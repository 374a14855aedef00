//! # rxpath-core: the receive path, stage by stage
//!
//! The deterministic part of rxpath: plain data structures driven by method
//! calls and a [`Clock`](time::Clock) passed in. Nothing here opens a file
//! descriptor, spawns a thread or reads the OS clock, so every rule is tested
//! with synthetic packets and simulated time. The stages, in the order a
//! packet meets them:
//!
//! 1. [`napi`]: one NAPI instance per device queue, with a `napi_id`, a
//!    `poll(budget)` that does RX bulking (seed 001: pull and prefetch a
//!    bundle, then run the stack on it), `napi_complete_done`, and the state
//!    bits that let a busy-polling socket own a NAPI for a while (seed 000).
//! 2. [`gro`]: GRO per NAPI with the kernel's merge rules,
//!    `napi_complete_done` and `gro_flush_timeout` (seed 004).
//! 3. [`softnet`]: `net_rx_action`: the poll list, `netdev_budget`,
//!    `netdev_budget_usecs`, `time_squeeze`.
//! 4. [`packet`]: what the stack receives: a frame plus metadata
//!    (`napi_id`, RX hash, parsed headers), and the [`packet::Stack`]
//!    trait each later stage implements (GRO, steering, sockets).
//! 5. [`steer`]: which worker's backlog a packet goes to (RPS, RFS with the
//!    in-order rule, `netdev_max_backlog`, `flow_limit`): the decisions and
//!    counters; the worker threads that drain the backlogs are
//!    `rxpath_runtime::steer`'s.
//! 6. [`ip`]: IP and UDP input at the edge as `ip_rcv_core()`/`ipv6_rcv()`
//!    run them, each drop under its SNMP name (`/proc/net/snmp`).
//! 7. [`filter`]: the `INPUT` hook: `iptables-save` rule sets judged by a
//!    linear walk (the reference) or a bit-vector classifier, with the
//!    kernel's verdicts and per-rule counters (seed 003's expensive stage).
//! 8. [`sock`]: UDP sockets with busy polling (seed 000).
//! 9. [`stats`]: per-NAPI and per-queue counters; every packet is accounted
//!    for: `received = delivered + Σ dropped[reason]`.
//!
//! ```
//! use rxpath_core::ip::{self, CsumStatus, IpConfig, Snmp};
//! use rxpath_wire::build::{self, Spec};
//!
//! // IP and UDP input on one frame, as `ip_rcv_core()` and `udp_rcv()`
//! // run them, with the kernel's counters.
//! let mac = [0x02, 0, 0, 0, 0, 2];
//! let mut spec = Spec::new("198.18.0.1".parse()?, "198.18.0.2".parse()?, 5000, 7);
//! spec.dst_mac = mac;
//! let frame = build::udp(&spec, b"ping");
//! let cfg = IpConfig { mac, addrs: vec!["198.18.0.2".parse()?], ..IpConfig::default() };
//! let mut snmp = Snmp::default();
//! let d = ip::input(&frame, CsumStatus::None, &cfg, &mut snmp).expect("for us");
//! assert_eq!((d.dst.port(), d.payload_len), (7, 4));
//! assert_eq!(snmp.ip.in_delivers, 1);
//! // The same frame for another host: a drop under the kernel's name.
//! let other = IpConfig { addrs: vec!["198.18.0.3".parse()?], ..cfg };
//! assert!(ip::input(&frame, CsumStatus::None, &other, &mut snmp).is_err());
//! assert_eq!(snmp.ip.in_addr_errors, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs, missing_debug_implementations)]

pub mod filter;
pub mod gro;
pub mod ip;
pub mod napi;
pub mod packet;
pub mod snmp;
pub mod sock;
pub mod softnet;
pub mod stats;
pub mod steer;
pub mod time;

pub use napi::{BundleMode, Napi, NapiId, NapiState, NapiTable};
pub use packet::{ChainPool, Frag, Frags, Meta, Packet, PollEnd, RxCtx, Stack};
pub use softnet::{Softnet, SoftnetConfig};
pub use stats::{DropReason, NapiStats};
