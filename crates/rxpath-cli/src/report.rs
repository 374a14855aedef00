//! `rxpath run`: a line per second and a final summary (table or JSON).

use rxpath_core::stats::DropReason;
use rxpath_runtime::{Producer, Report, Tick};

/// One line a second: the rates since the last tick.
pub(crate) fn tick_line(t: &Tick, last: &Tick) -> String {
    let dt = (t.elapsed - last.elapsed).as_secs_f64().max(1e-9);
    let pkts = (t.napi.received - last.napi.received) as f64;
    let bytes = (t.napi.bytes - last.napi.bytes) as f64;
    let dropped = t.napi.dropped.total() - last.napi.dropped.total();
    format!(
        "{:6.1}s  rx {:8.3} Mpps {:7.3} Gbit/s  missed {:>9}  no_buf {:>7}  dropped {:>7}  wakeups/s {:>8.0}",
        t.elapsed.as_secs_f64(),
        pkts / dt / 1e6,
        bytes * 8.0 / dt / 1e9,
        t.device.rx_missed - last.device.rx_missed,
        t.device.rx_no_buffer - last.device.rx_no_buffer,
        dropped,
        (t.napi.wakeups - last.napi.wakeups) as f64 / dt,
    )
}

/// Whether a signal or the interface ended the run early, and the faults
/// injected (on stderr: the report itself is on stdout).
pub(crate) fn say_how_it_ended(report: &Report, by_signal: bool) {
    if by_signal {
        eprintln!(
            "rxpath: stopped by a signal after {:.2}s; the report covers what ran",
            report.elapsed.as_secs_f64()
        );
    }
    if let Some(why) = &report.stopped_early {
        eprintln!("rxpath: stopped early: {why}; the report covers what ran");
    }
    let f = report.config.sim.faults;
    if f.on() {
        let d = report.device_total();
        eprintln!(
            "rxpath: faults injected: {} starvation window(s) ({} rx_no_buffer), {} NAPI stall(s) of {:.1} ms in all ({} rx_missed), {} worker stall(s) of {:.1} ms ({} backlog_full); garbage {:.2} %, lying {:.2} % of frames (malformed, unhandled_proto)",
            report.faults.starve_windows,
            d.rx_no_buffer,
            report.faults.stalls,
            report.faults.stalled_ms,
            d.rx_missed,
            report.faults.worker_stalls,
            report.faults.worker_stalled_ms,
            report.napi_total().dropped.get(rxpath_core::stats::DropReason::BacklogFull),
            f.garbage * 100.0,
            f.lying * 100.0
        );
    }
}

pub(crate) fn describe(cfg: &rxpath_runtime::RunConfig) -> String {
    let pause = if cfg.sim.pause {
        ", the link paused while the ring is full"
    } else {
        ""
    };
    let src = match &cfg.producer {
        Producer::Thread { pps: Some(p) } => format!("sim NIC, producer thread at {p} pps{pause}"),
        Producer::Thread { pps: None } => {
            format!("sim NIC, producer thread as fast as possible{pause}")
        }
        Producer::Null if cfg.null_cold => {
            "cold null queues (engine alone, every packet's data a cache miss)".into()
        }
        Producer::Null => "null queues (engine alone)".into(),
        Producer::Packet { iface } => format!("{} via AF_PACKET", iface.as_str()),
        Producer::Xdp { iface, .. } => format!("{} via AF_XDP", iface.as_str()),
        Producer::Pcap {
            path,
            loops,
            paced,
            pps,
        } => format!(
            "{} replayed through the sim NIC {}, {}",
            path.display(),
            if *loops == 0 {
                "in a loop until the run ends".to_string()
            } else {
                format!("{loops} time(s), ending when the file does")
            },
            match (paced, pps) {
                (true, _) =>
                    "at the recorded timing (a wire: the NIC drops what the host cannot take)"
                        .to_string(),
                (false, Some(r)) =>
                    format!("at {r} pps (a wire: the NIC drops what the host cannot take)"),
                (false, None) =>
                    "lossless (waits for ring space: a file is not a wire)".to_string(),
            }
        ),
    };
    let gro = match cfg.gro {
        None => "gro off".to_string(),
        Some(g) => match g.adaptive {
            Some(a) => format!("gro on, adaptive flush timeout up to {} ns", a.max_ns),
            None => format!("gro on, gro_flush_timeout {} ns", g.flush_timeout_ns),
        },
    };
    format!(
        "rxpath run: {src}; {} queues, {} flows ({:?}), {:.1}s; weight {}, bundle {}{}, netdev_budget {}/{}us, {} mode, {} NAPI thread(s), {gro}",
        cfg.sim.queues,
        cfg.traffic.flows,
        cfg.traffic.mix,
        cfg.duration.as_secs_f64(),
        cfg.weight,
        cfg.bundle.size,
        if cfg.bundle.split_on_hash { " (split on hash)" } else { "" },
        cfg.softnet.netdev_budget,
        cfg.softnet.netdev_budget_usecs,
        if cfg.interrupts && cfg.producer != Producer::Null { "interrupt" } else { "polling" },
        cfg.threads,
    )
}

/// A run report's summary lines (accounting and frames checked).
pub fn summary(r: &Report) -> String {
    let mut s = String::new();
    let n = r.napi_total();
    let d = r.device_total();
    let secs = r.elapsed.as_secs_f64();
    s += &format!(
        "\nsummary: {:.3} Mpps, {:.3} Gbit/s received over {:.2}s\n\n",
        r.rx_pps() / 1e6,
        n.bytes as f64 * 8.0 / secs / 1e9,
        secs
    );
    s += &format!(
        "{:>5} {:>7} {:>12} {:>14} {:>12} {:>10} {:>10} {:>9} {:>10} {:>9} {:>10} {:>8}\n",
        "queue",
        "napi_id",
        "received",
        "bytes",
        "delivered",
        "dropped",
        "polls",
        "full",
        "bundles",
        "wakeups",
        "missed",
        "no_buf"
    );
    for q in &r.queues {
        s += &format!(
            "{:>5} {:>7} {:>12} {:>14} {:>12} {:>10} {:>10} {:>9} {:>10} {:>9} {:>10} {:>8}\n",
            q.queue,
            q.napi_id.0,
            q.napi.received,
            q.napi.bytes,
            q.napi.delivered,
            q.napi.dropped.total(),
            q.napi.polls,
            q.napi.polls_full,
            q.napi.bundles,
            q.napi.wakeups,
            q.device.rx_missed,
            q.device.rx_no_buffer
        );
    }
    s += "\ndrops by reason:";
    let mut any = false;
    for (reason, count) in n.dropped.iter() {
        s += &format!(" {reason}={count}");
        any = true;
    }
    if !any {
        s += " none";
    }
    s += "\n";
    s += &device_line([
        d.offered,
        d.rx_ring,
        d.rx_missed,
        d.rx_no_buffer,
        d.rx_too_long,
    ]);
    if let Some(g) = r.gro_total() {
        use rxpath_core::gro::FlushReason;
        s += &format!(
            "\ngro: in={} out={} ({:.2} segments/packet) merged={} held={} normal={}; flushes:",
            g.packets_in,
            g.packets_out,
            g.segs_per_packet(),
            g.merged,
            g.held,
            g.normal
        );
        for reason in FlushReason::ALL {
            let n = g.flushes(reason);
            if n > 0 {
                s += &format!(
                    " {}={n}",
                    serde_json::to_value(reason)
                        .unwrap_or_default()
                        .as_str()
                        .unwrap_or("?")
                );
            }
        }
    }
    if let Some(g) = r.gro_total() {
        let labels = ["1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", "65+"];
        s += "\ngro segments per packet:";
        for (l, n) in labels.iter().zip(g.segs_hist.iter()) {
            if *n > 0 {
                s += &format!(" {l}:{n}");
            }
        }
    }
    if !r.workers.is_empty() {
        s += &workers_table(r);
    }
    let sq: u64 = r.softnet.iter().map(|x| x.time_squeeze).sum();
    let actions: u64 = r.softnet.iter().map(|x| x.rx_actions).sum();
    s += &format!("\nsoftnet: net_rx_action={actions} time_squeeze={sq}");
    if r.config.stack != rxpath_runtime::StackKind::Rxdrop {
        s += "\n";
        s += n.snmp.table().trim_end();
    }
    s += &format!(
        "\naccounting: received {} = delivered {} + dropped {}: {}",
        n.received,
        n.delivered,
        n.dropped.total(),
        if n.accounted() { "ok" } else { "MISMATCH" }
    );
    s += &format!(
        "\nframes: {}/{} back in the pool: {}\n",
        r.frames_home,
        r.frames_total,
        if r.frames_home == r.frames_total {
            "ok"
        } else {
            "LOST FRAMES"
        }
    );
    s
}

/// The workers of the bottom half, as /proc/net/softnet_stat has them, and
/// order at delivery.
fn workers_table(r: &Report) -> String {
    let c = &r.config.steer;
    let mut s = format!(
        "\nsteer: {} over {} worker(s), netdev_max_backlog {}{}\n",
        c.mode.name(),
        c.workers,
        c.netdev_max_backlog,
        match c.flow_limit {
            Some(n) => format!(", flow_limit {n}"),
            None => String::new(),
        }
    );
    s += &format!(
        "{:>6} {:>12} {:>10} {:>10} {:>12} {:>12} {:>9} {:>9} {:>12} {:>10}\n",
        "worker",
        "processed",
        "dropped",
        "flow_limit",
        "received_rps",
        "time_squeeze",
        "wakeups",
        "sent",
        "delivered",
        "path_drop"
    );
    for w in &r.workers {
        s += &format!(
            "{:>6} {:>12} {:>10} {:>10} {:>12} {:>12} {:>9} {:>9} {:>12} {:>10}{}\n",
            w.worker,
            w.backlog.processed,
            w.backlog.dropped,
            w.backlog.flow_limit_count,
            w.backlog.received_rps,
            w.time_squeeze,
            w.wakeups,
            w.wakeups_sent,
            w.path.delivered,
            w.path.dropped.total(),
            if w.online_at_end { "" } else { "  (offline)" }
        );
    }
    let ran: Vec<u64> = r.workers.iter().map(|w| w.reader_ran).collect();
    if ran.iter().any(|&n| n > 0) {
        s += &format!(
            "readers: {ran:?} packets per worker run by a reader waiting in recv on the worker's CPU (no worker wakeup)\n"
        );
    }
    let here: u64 = r.workers.iter().map(|w| w.rfs_here).sum();
    if here > 0 {
        s += &format!(
            "rfs: {here} packets run on their NAPI thread (every entry of the flow's dev flow set had packets in flight, or no worker online)\n"
        );
    }
    if let Some(a) = &r.accel_rfs {
        s += &format!(
            "accelerated RFS: {} ntuple rules installed, {} expired, {} packets steered by a rule\n",
            a.installed, a.expired, a.steered
        );
    }
    if let Some(o) = &r.order {
        s += &format!(
            "order at delivery: reordered={} in {} flow(s) (sequence numbers: {}){}",
            o.reordered,
            o.flows_reordered,
            if o.udp_counters {
                "TCP and the sim's UDP counters"
            } else {
                "TCP"
            },
            if c.mode == rxpath_core::steer::SteerMode::Spread {
                format!("; reorder buffer held at most {}", o.reorder_max_waiting)
            } else {
                String::new()
            }
        );
    }
    s
}

/// A run report as `--json` prints it.
pub fn json_report(r: &Report) -> serde_json::Value {
    let n = r.napi_total();
    let drops: serde_json::Map<String, serde_json::Value> = DropReason::ALL
        .iter()
        .map(|d| (d.name().to_string(), n.dropped.get(*d).into()))
        .collect();
    serde_json::json!({
        "rx_pps": r.rx_pps(),
        "rx_gbps": n.bytes as f64 * 8.0 / r.elapsed.as_secs_f64() / 1e9,
        "elapsed_s": r.elapsed.as_secs_f64(),
        "total": n,
        "drops": drops,
        "device": r.device_total(),
        "queues": r.queues,
        "softnet": r.softnet,
        "frames_total": r.frames_total,
        "frames_home": r.frames_home,
        "accounted": n.accounted(),
        "gro": r.gro_total(),
        "gro_segs_per_packet": r.gro_total().map(|g| g.segs_per_packet()),
        "consistent": r.consistent(),
        "snmp": n.snmp.to_json(),
        "workers": r.workers,
        "order": r.order,
        "accel_rfs": r.accel_rfs,
        "stopped_early": r.stopped_early,
        "faults": r.faults,
        "config": r.config,
    })
}

/// `--metrics ADDR`: the endpoint, started and said on stderr.
pub(crate) fn start_metrics(
    addr: Option<std::net::SocketAddr>,
) -> anyhow::Result<Option<rxpath_runtime::metrics::Metrics>> {
    let Some(addr) = addr else { return Ok(None) };
    let m = rxpath_runtime::metrics::Metrics::start(addr).map_err(|e| anyhow::anyhow!("--{e}"))?;
    eprintln!("rxpath: metrics on http://{}/metrics", m.addr);
    Ok(Some(m))
}

/// A host's NAPI totals as `echo --json` and `quic --json` print them.
pub(crate) fn napi_json(napi: &rxpath_core::stats::NapiStats) -> serde_json::Value {
    serde_json::json!({
        "received": napi.received,
        "delivered": napi.delivered,
        "dropped": napi.dropped.total(),
        "polls": napi.polls,
        "wakeups": napi.wakeups,
        "irq_deferrals": napi.irq_deferrals,
    })
}

/// The device's line of a report (`rxpath run`'s and `rxpath exec`'s):
/// offered, rx_ring, rx_missed, rx_no_buffer, rx_too_long.
pub(crate) fn device_line([offered, ring, missed, no_buffer, too_long]: [u64; 5]) -> String {
    format!(
        "device: offered={offered} rx_ring={ring} rx_missed={missed} rx_no_buffer={no_buffer} rx_too_long={too_long}"
    )
}
