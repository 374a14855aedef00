//! Starting the process's host on its interface: the device (AF_XDP with
//! its port map, or AF_PACKET steered by one), the host's addresses, the
//! metrics endpoint, the control socket and the interface watch.

use super::{on_address, on_link_event, say, Global, Running};
use crate::config::Mode;
use rxpath_dev::sys::xdp::XdpFilter;
use rxpath_runtime::{Host, HostConfig, HostDevice};
use std::collections::BTreeMap;

/// Frames per queue of a program's host (2048 bytes each: 32 MiB a queue),
/// four times a `Host`'s default: the AF_XDP RX ring is half of them, 8192
/// deep, about 40 ms of 200 k datagrams/s. A served program is away from
/// its reads while the scheduler runs something else on its core, and its
/// generator may send what it owes in a burst; at 2048 such bursts overflowed
/// the ring well below the core's limit (`bench dns`: knotd lost at the RX
/// ring at 200 k/s with its core 80 % busy), at 8192 they did not.
const FRAMES_PER_QUEUE: usize = 16384;

impl Global {
    pub(super) fn start(&self, iface: &str) -> Result<Running, String> {
        let c = &self.cfg;
        let mut cfg = HostConfig {
            queues: 0,
            napi_threads: c.napi_threads,
            // Prefer busy polling's deferral as asked; without one, a
            // thread that polls before it sleeps defers by the IRQ
            // suspension, which also holds while a thread is being handed
            // events.
            prefer_busy_poll_ns: c.prefer_busy_poll_ns,
            irq_suspend_timeout_ns: c.irq_suspend_timeout_ns,
            gro_flush_timeout_ns: c.gro_flush_timeout_ns,
            defer_hard_irqs: c.defer_hard_irqs,
            frames_per_queue: FRAMES_PER_QUEUE,
            ..HostConfig::default()
        };
        cfg.sock.busy_read_us = c.busy_poll_us;
        // TCP as asked, where the kernel never sees the frames rxpath
        // takes: one port map for UDP and TCP, each socket by its keys.
        let tcp = c.protocols.tcp() && c.mode != Mode::Packet;
        cfg.tcp = tcp;
        let filter = XdpFilter {
            protocol: if tcp { None } else { Some(17) },
            port_map: true,
            ..XdpFilter::default()
        };
        let dev = match c.mode {
            Mode::Packet => HostDevice::Packet {
                iface: iface.to_string(),
                filter: Some(filter),
            },
            m => HostDevice::Xdp {
                iface: iface.to_string(),
                filter,
                fallback: m == Mode::Auto,
                xsk_busy_poll_us: 0,
            },
        };
        let host = Host::start(cfg, dev).map_err(|e| e.to_string())?;
        // Every interface's addresses are the host's (the watch adds
        // those that come later).
        for (_, a) in crate::linkwatch::host_addresses(iface) {
            host.sockets().add_local_addr(a);
        }
        say(&format!(
            "{} on {iface} through rxpath ({})",
            if host.runs_tcp() {
                "UDP and TCP"
            } else {
                "UDP"
            },
            host.backend()
        ));
        let metrics =
            c.metrics.and_then(
                |a| match rxpath_runtime::metrics::Metrics::for_host(&host, a) {
                    Ok(m) => {
                        say(&format!("metrics on http://{}/metrics", m.addr));
                        Some(m)
                    }
                    Err(e) => {
                        say(&format!(
                            "metrics on {a}: {e}; the program runs without them"
                        ));
                        None
                    }
                },
            );
        let control =
            match rxpath_runtime::ctl::Control::start(rxpath_runtime::ctl::HostKnobs::of(&host)) {
                Ok(c) => {
                    say(&format!(
                        "live knobs: rxpath ctl --pid {} (socket {})",
                        std::process::id(),
                        c.path().display()
                    ));
                    Some(c)
                }
                Err(e) => {
                    say(&format!("{e}; rxpath ctl cannot reach this process"));
                    None
                }
            };
        crate::udp::forkq::set_port_map(host.port_map_fd());
        crate::linkwatch::start(iface, on_link_event, on_address);
        Ok(Running {
            metrics,
            control,
            host,
            ports: BTreeMap::new(),
        })
    }
}
