//! Opening a host's device: the simulated NIC, AF_XDP (with the AF_PACKET
//! fallback), AF_PACKET (steered by a port map, or tapping every frame),
//! and the TX port each sends through.

use super::threads::with_queues;
use super::tx::{PacketTx, SimTxPort, XskTxPort};
use super::{Finish, Host, HostConfig, HostDevice};
use crate::run::{check_iface, RunError};
use rxpath_dev::packet::PacketQueue;
use rxpath_dev::sim::{self, SimConfig, SimRxQueue};
use rxpath_dev::sys::af_packet::RawSocket;
use rxpath_dev::sys::tap::TapProgram;
use rxpath_dev::sys::xdp::{XdpFilter, XdpProgram, XdpQueue};
use rxpath_dev::{FramePool, RxQueue};
use std::any::Any;
use std::sync::{Arc, Mutex};

impl Host {
    /// On the simulated NIC (its TX ring for sends).
    pub(super) fn start_sim(cfg: HostConfig, mut sc: SimConfig) -> Result<Host, RunError> {
        sc.queues = cfg.queues;
        let (port, qs) = sim::build(&sc)?;
        let finish: Finish = Box::new(|cells, port| {
            let mut qs: Vec<SimRxQueue> = Vec::new();
            for c in cells {
                if let Ok(q) = c.downcast::<SimRxQueue>() {
                    qs.push(*q);
                }
            }
            match port {
                Some(p) => {
                    let pool = p.reclaim(qs);
                    (pool.umem().frames(), pool.available())
                }
                None => (0, 0),
            }
        });
        // The sim's interrupts are raised by whoever drives the port
        // (tests, the producer): NAPI stays on NAPI threads.
        let mut h = with_queues(&cfg, qs, finish, "simulated NIC".into(), false)?;
        h.port = Some(Mutex::new(port));
        // Sockets send through the NIC's TX ring (256 frames of its
        // own); `set_tx` replaces it.
        let tx = rxpath_dev::sim::SimTx::new(256, 256)
            .map_err(|e| RunError::Device(format!("the simulated NIC's TX ring: {e}")))?;
        h.tx_fault = Some(tx.stop_completing.clone());
        h.sockets.set_tx(Box::new(SimTxPort(tx)));
        Ok(h)
    }

    /// On an interface through AF_XDP (`fallback`: AF_PACKET if XDP fails);
    /// replies through queue 0's TX ring when it has one.
    pub(super) fn start_xdp(
        mut cfg: HostConfig,
        iface: String,
        filter: XdpFilter,
        fallback: bool,
        xsk_busy_poll_us: u32,
    ) -> Result<Host, RunError> {
        check_iface(&iface)?;
        fill_from_iface(&mut cfg, &iface)?;
        let nq = cfg.queues;
        let opened = XdpProgram::attach(&iface, nq as u32, filter).and_then(|prog| {
            let prog = Arc::new(prog);
            // Several queues draw from one UMEM (XDP_SHARED_UMEM).
            let mut qs = XdpQueue::open_all(
                &iface,
                nq as u16,
                cfg.frames_per_queue,
                prog.clone(),
                cfg.interrupts,
                cfg.xdp_tx_frames,
            )?;
            if xsk_busy_poll_us > 0 {
                for xq in &mut qs {
                    xq.set_busy_poll(xsk_busy_poll_us, 8)?;
                }
            }
            Ok((prog, qs))
        });
        let (prog, qs) = match opened {
            Ok(x) => x,
            Err(e) if fallback => {
                log::warn!("AF_XDP on {iface} failed ({e}); using AF_PACKET instead");
                let filter = filter.port_map.then_some(filter);
                let mut h = Self::start(cfg, HostDevice::Packet { iface, filter })?;
                // The backend says why, wherever it is printed.
                h.backend.push_str(&format!(" (AF_XDP failed: {e})"));
                return Ok(h);
            }
            Err(e) => return Err(RunError::Device(format!("AF_XDP on {iface}: {e}"))),
        };
        let mut qs = qs;
        let tx = qs.first_mut().and_then(XdpQueue::take_tx);
        let mut backend = crate::run::xdp_backend(&iface, prog.mode, &qs);
        if tx.is_some() {
            backend.push_str("; replies through queue 0's TX ring");
        }
        let finish: Finish =
            Box::new(|cells, _| into_pools::<XdpQueue>(cells, XdpQueue::into_pool));
        let mut h = with_queues(&cfg, qs, finish, backend, cfg.napi_in_irq)?.on_iface();
        h.xdp = Some(prog);
        match tx {
            Some(tx) => {
                h.tx_fault = Some(tx.stop_completing.clone());
                h.sockets.set_tx(Box::new(XskTxPort::new(tx, &iface)));
            }
            None => h.open_tx(&iface)?,
        }
        Ok(h)
    }

    /// On an interface through AF_PACKET, steered by `filter`'s port map
    /// if it has one.
    pub(super) fn start_packet(
        mut cfg: HostConfig,
        iface: String,
        filter: Option<XdpFilter>,
    ) -> Result<Host, RunError> {
        check_iface(&iface)?;
        fill_from_iface(&mut cfg, &iface)?;
        let tap = filter
            .map(|f| TapProgram::attach(&iface, f))
            .transpose()
            .map_err(|e| RunError::Device(format!("AF_PACKET's steering on {iface}: {e}")))?;
        let nq = cfg.queues;
        let group = (std::process::id() & 0xffff) as u16;
        let mut qs = Vec::with_capacity(nq);
        for q in 0..nq {
            qs.push(
                PacketQueue::open(
                    &iface,
                    q as u16,
                    (nq > 1).then_some(group),
                    cfg.frames_per_queue,
                    cfg.interrupts,
                    cfg.packet_per_frame,
                )
                .map_err(|e| RunError::Device(format!("AF_PACKET on {iface}: {e}")))?,
            );
        }
        if let Some(t) = &tap {
            for q in &qs {
                q.attach_filter(t.filter_fd()).map_err(|e| {
                    RunError::Device(format!("AF_PACKET on {iface}: the tap filter: {e}"))
                })?;
            }
        }
        let steered = if tap.is_some() {
            ", steered by a tap filter and tcx ingress"
        } else {
            ""
        };
        let finish: Finish =
            Box::new(|cells, _| into_pools::<PacketQueue>(cells, PacketQueue::into_pool));
        let mut h = with_queues(
            &cfg,
            qs,
            finish,
            format!("AF_PACKET on {iface}, {nq} queue(s){steered}"),
            cfg.napi_in_irq,
        )?
        .on_iface();
        h.tap = tap;
        h.open_tx(&iface)?;
        Ok(h)
    }

    fn open_tx(&self, iface: &str) -> Result<(), RunError> {
        let raw = RawSocket::bind_tx(iface)
            .map_err(|e| RunError::Device(format!("AF_PACKET TX on {iface}: {e}")))?;
        self.sockets.set_tx(Box::new(PacketTx(raw)));
        Ok(())
    }

    fn on_iface(mut self) -> Self {
        self.guards = Some(Mutex::new(Vec::new()));
        self
    }
}

fn into_pools<Q: RxQueue + 'static>(
    cells: Vec<Box<dyn Any + Send>>,
    into_pool: impl Fn(Q) -> FramePool,
) -> (usize, usize) {
    let (mut total, mut home) = (0, 0);
    // Queues on a shared UMEM each hold their share of one region: count
    // each region once.
    let mut regions = std::collections::BTreeSet::new();
    for c in cells {
        if let Ok(q) = c.downcast::<Q>() {
            let pool = into_pool(*q);
            if regions.insert(pool.umem().id()) {
                total += pool.umem().frames();
            }
            home += pool.available();
        }
    }
    (total, home)
}

/// Fill in the interface's MAC and addresses where the config has none.
fn fill_from_iface(cfg: &mut HostConfig, iface: &str) -> Result<(), RunError> {
    let (mac, addrs) = rxpath_dev::sys::af_packet::iface_addrs(iface)
        .map_err(|e| RunError::Device(format!("{iface}: reading its addresses: {e}")))?;
    cfg.sock.mac = mac;
    cfg.sock.reasm = crate::sysctl::reasm(cfg.sock.reasm);
    if cfg.sock.local_addrs.is_empty() {
        cfg.sock.local_addrs = addrs;
    }
    if cfg.queues == 0 {
        cfg.queues = rxpath_dev::sys::iface::rx_queues(iface)
            .map_err(|e| RunError::Device(format!("{iface}: counting its RX queues: {e}")))?
            .min(64);
    }
    cfg.sock.local_traffic = rxpath_dev::sys::iface::carries_local_traffic(iface);
    if cfg.sock.prefixes.is_empty() {
        cfg.sock.prefixes = rxpath_dev::sys::iface::prefixes(iface).unwrap_or_default();
        cfg.sock.default_route = rxpath_dev::sys::iface::default_routes(iface);
    }
    Ok(())
}
