//! The report the preload writes at exit ([`PreloadReport`], the contract
//! with `rxpath exec`): its parts from the host's, and the file it goes to.

use super::{as_library, say, Accounting, DeviceCounts, Global, PreloadReport, TxRing};
use rxpath_runtime::HostReport;

/// `received = delivered + dropped` over every NAPI of `h`, and its
/// frames.
fn accounting(h: &HostReport) -> Accounting {
    let t = h.napi_total();
    Accounting {
        received: t.received,
        delivered: t.delivered,
        dropped: t.dropped.total(),
        drops: t
            .dropped
            .iter()
            .map(|(r, n)| (r.name().to_string(), n))
            .collect(),
        frames_total: h.frames_total,
        frames_home: h.frames_home,
    }
}

/// The device's counters of `h`, summed over its queues.
fn device_counts(h: &HostReport) -> DeviceCounts {
    let mut d = DeviceCounts::default();
    for q in &h.queues {
        d.offered += q.device.offered;
        d.rx_ring += q.device.rx_ring;
        d.rx_missed += q.device.rx_missed;
        d.rx_no_buffer += q.device.rx_no_buffer;
        d.rx_too_long += q.device.rx_too_long;
    }
    d
}

/// The AF_XDP TX ring's counters of `h`, if it has one.
fn tx_ring(h: &HostReport) -> Option<TxRing> {
    Some(TxRing {
        posted: *h.tx.get("xsk_tx_sent")?,
        completed: h.tx.get("xsk_tx_completed").copied().unwrap_or(0),
        unfinished: h.sock.tx_unfinished,
    })
}

/// The file this process's report goes to, made when its host starts (a
/// daemon may chroot or drop privileges before it exits): at `path`, or,
/// when another process of the program (one it started with `exec`) made
/// one there first, at `path.PID`. Each process's report is kept, and
/// `rxpath exec` sums them (an empty one: a process that never exited).
pub(super) fn report_file(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    match o.open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let mut p = path.as_os_str().to_owned();
            p.push(format!(".{}", std::process::id()));
            o.open(p)
        }
        r => r,
    }
}

impl Global {
    /// Stop the host (the process is exiting) and write the report.
    pub(crate) fn finish(&self) {
        let mut s = self.state();
        let backend = s.running.as_ref().map(|r| r.host.backend().to_string());
        let host = s.running.take().map(|r| {
            drop(r.metrics);
            drop(r.control);
            crate::device::forget();
            as_library(|| r.host.shutdown())
        });
        let rep = PreloadReport {
            config: self.cfg.clone(),
            accounting: host.as_ref().map(accounting),
            device: host.as_ref().map(device_counts),
            tx: host.as_ref().and_then(tx_ring),
            host: host.as_ref().and_then(|h| serde_json::to_value(h).ok()),
            backend,
            accelerated: s.accelerated,
            fallbacks: s.fallbacks.clone(),
            unsupported: s.unsupported.clone(),
            kernel_reads: crate::udp::sock::KERNEL_READS.load(std::sync::atomic::Ordering::Relaxed),
            link_events: s.link_events.clone(),
            sockets: s.sockets.clone(),
            processes: 1,
        };
        drop(s);
        if let Some(path) = &self.cfg.report {
            let text = serde_json::to_string_pretty(&rep).unwrap_or_default();
            let file = self
                .state()
                .report
                .take()
                .map_or_else(|| report_file(path), Ok);
            let written = file.and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()));
            if let Err(e) = written {
                say(&format!("writing the report to {}: {e}", path.display()));
            }
        }
    }
}
