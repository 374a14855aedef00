//! Stopping a host: its NAPI threads end, its sockets close, each NAPI is
//! disabled and drained, every frame counted home, and the report made.

use super::{Host, HostQueue, HostReport};
use rxpath_core::ip::Snmp;
use rxpath_dev::sync::lock;
use std::sync::atomic::Ordering;
use std::thread;

impl Host {
    /// Stop the NAPI threads, leaving the NAPIs to busy-polling sockets
    /// (what a kernel with `napi_defer_hard_irqs` and `prefer_busy_poll`
    /// approaches; the tests use it to show busy polling alone delivers).
    pub fn stop_napi_threads(&mut self) {
        self.stop.store(true, Ordering::Release);
        for h in self.threads.drain(..) {
            h.thread().unpark();
            let _ = h.join();
        }
    }

    /// Stop: NAPI threads end, sockets close (their frames go home), each
    /// NAPI is disabled, drained and its queue's frames counted home.
    pub fn shutdown(mut self) -> HostReport {
        self.stop_all()
    }

    fn stop_all(&mut self) -> HostReport {
        if let Some((waits, h)) = self.tcp.take() {
            waits.stop_timer();
            let _ = h.join();
        }
        self.stop_napi_threads();
        let tcp = self
            .sockets
            .tcp_counters()
            .map(|(mib, tx)| super::TcpReport {
                mib: mib.into_iter().filter(|(_, v)| *v != 0).collect(),
                tx,
            });
        self.sockets.close_all();
        // The TX port gives its frames back to the queue they came from
        // (AF_XDP), or counts its own (the simulated NIC's TX ring).
        let (tx, (tx_total, tx_home)) = self.sockets.finish_tx();
        let tx = tx.into_iter().collect();
        self.sockets.unregister_napis();
        let mut cells = Vec::new();
        let mut queues = Vec::new();
        let mut taken = Vec::new();
        for n in &self.napis {
            // `napi_disable()`: no new owner; wait for a busy poller to leave.
            n.state.disable();
            while n.state.bits() & rxpath_core::napi::bits::SCHED != 0 {
                if n.state.in_busy_poll() {
                    thread::yield_now();
                } else {
                    // Left scheduled by a NAPI thread that stopped mid-poll.
                    n.state.complete();
                }
            }
            let Some(mut cell) = n.take() else { continue };
            self.drain(&mut cell);
            taken.push((n.queue, cell));
        }
        // Steering on: the devices are drained, nothing new reaches the
        // workers; they finish their backlogs and end, and what they freed
        // comes home through the cells.
        let mut workers = Vec::new();
        if let Some(w) = self.workers.take() {
            w.napis_running.store(0, Ordering::Release);
            for (id, h) in self.worker_threads.drain(..) {
                h.thread().unpark();
                let c = h.join().unwrap_or_default();
                workers.push(w.report(id, &c));
            }
        }
        for (queue, mut cell) in taken {
            cell.stop(rxpath_dev::mono_ns());
            self.drain(&mut cell);
            queues.push(HostQueue {
                queue,
                napi: cell.napi_stats(),
                device: cell.device_stats(),
            });
            cells.push(cell.into_any());
        }
        let port = self
            .port
            .take()
            .map(|p| p.into_inner().unwrap_or_else(|e| e.into_inner()));
        let (frames_total, frames_home) = match self.finish.take() {
            Some(f) => f(cells, port),
            None => (0, 0),
        };
        let (frames_total, frames_home) = (frames_total + tx_total, frames_home + tx_home);
        let mut snmp = Snmp::default();
        for q in &queues {
            snmp.merge(&q.napi.snmp);
        }
        for w in &workers {
            snmp.merge(&w.path.snmp);
        }
        self.sockets.add_send_snmp(&mut snmp);
        if let Some(g) = &self.guards {
            lock(g).clear();
        }
        HostReport {
            snmp,
            queues,
            sock: self.sockets.stats(),
            frames_total,
            frames_home,
            workers,
            tx,
            tcp,
        }
    }

    /// Poll a disabled NAPI's cell until its device and the frames coming
    /// home are drained. A real interface keeps receiving, so this is
    /// bounded.
    fn drain(&self, cell: &mut Box<dyn rxpath_core::sock::PollCell>) {
        let mut rounds = 0;
        while rounds < 100_000 && cell.has_work() {
            rounds += 1;
            if let Some(mut p) = self.sim_port() {
                p.flush(rxpath_dev::mono_ns());
            }
            let w = cell.weight();
            let _ = cell.poll_busy(w, rxpath_dev::mono_ns());
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if self.finish.is_some() {
            self.stop_all();
        }
    }
}
