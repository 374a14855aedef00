//! Prometheus metrics over HTTP (`GET /metrics`, OpenMetrics text from
//! `prometheus-client`): `rxpath run --metrics ADDR`, `rxpath echo
//! --metrics ADDR`, and [`Metrics::for_host`] for applications.
//!
//! While the run goes, what the per-second line sees: per queue NAPI and
//! device counters, drops by reason, softnet, SNMP. When it ends, the final
//! report (what `--json` prints) replaces it and adds the workers, GRO and
//! order at delivery; `--metrics-hold` keeps serving it for a while.
//! Counters are named `rxpath_..._total` with `queue=`, `reason=`,
//! `worker=`, `section=`/`counter=` labels.

use crate::run::{Report, Tick};
use crate::steer::WorkerReport;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use rxpath_core::gro::GroStats;
use rxpath_core::sock::SockStats;
use rxpath_core::stats::{DropReason, NapiStats, SoftnetStats};
use rxpath_dev::sync::lock;
use rxpath_dev::DeviceQueueStats;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// What a scrape sees.
#[derive(Debug, Default, Clone)]
struct Snapshot {
    queues: Vec<(u16, NapiStats, DeviceQueueStats)>,
    softnet: SoftnetStats,
    /// Live per-worker counters (the shared ones: backlog, wakeups).
    workers: Vec<crate::steer::WorkerReport>,
    report: Option<Report>,
    /// `rxpath echo`: the socket layer's counters (live), and the host's
    /// report at the end.
    sock: Option<rxpath_core::sock::SockStats>,
    host: Option<crate::host::HostReport>,
    /// A host's socket layer, read at every scrape while it runs.
    live_sock: Option<Arc<rxpath_core::sock::Sockets>>,
    /// A host's NAPIs, their counters read at every scrape while it runs
    /// (each cell's lock taken briefly, as a busy poller takes it).
    live_napis: Vec<Arc<rxpath_core::sock::SharedNapi>>,
}

#[derive(Debug)]
struct Collect(Arc<Mutex<Snapshot>>);

type Labels = Vec<(&'static str, String)>;

fn counter(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: &[(Labels, u64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, ConstCounter::new(0u64).metric_type())?;
    if let [(l, v)] = rows {
        if l.is_empty() {
            // One sample without labels: `name_total 3`, not `name_total{} 3`.
            return ConstCounter::new(*v).encode(m);
        }
    }
    for (l, v) in rows {
        ConstCounter::new(*v).encode(m.encode_family(l)?)?;
    }
    Ok(())
}

fn q(i: u16) -> Labels {
    vec![("queue", i.to_string())]
}

/// A counter of a table: its name, its help text, where its value is.
type Row<T> = (&'static str, &'static str, fn(&T) -> u64);

/// The socket layer's counters (`Udp:` and busy polling).
#[rustfmt::skip]
const SOCK: &[Row<SockStats>] = &[
    ("rxpath_socket_in_datagrams", "Datagrams queued to sockets (Udp: InDatagrams)", |k| k.in_datagrams),
    ("rxpath_socket_no_ports", "Datagrams for no socket (Udp: NoPorts)", |k| k.no_ports),
    ("rxpath_socket_rcvbuf_errors", "Datagrams dropped on a full receive queue (Udp: RcvbufErrors)", |k| k.rcvbuf_errors),
    ("rxpath_socket_csum_errors", "Datagrams with a bad checksum (Udp: InCsumErrors)", |k| k.csum_errors),
    ("rxpath_socket_out_datagrams", "Datagrams sent (Udp: OutDatagrams)", |k| k.out_datagrams),
    ("rxpath_busy_polls", "Busy-poll sessions (napi_busy_loop)", |k| k.busy_polls),
    ("rxpath_busy_poll_loops", "NAPI polls made by busy pollers", |k| k.busy_poll_loops),
    ("rxpath_busy_poll_packets", "Packets busy pollers took", |k| k.busy_poll_packets),
    ("rxpath_busy_poll_contended", "Busy polls that found the NAPI owned elsewhere", |k| k.busy_poll_contended),
];

/// Per queue: the NAPI's and the device's counters.
#[rustfmt::skip]
const QUEUE: &[Row<(NapiStats, DeviceQueueStats)>] = &[
    ("rxpath_rx_packets", "Packets NAPI took from the queue", |(n, _)| n.received),
    ("rxpath_rx_bytes", "Bytes NAPI took from the queue", |(n, _)| n.bytes),
    ("rxpath_delivered_packets", "Packets (segments) that reached the end of the path, counted on the NAPI", |(n, _)| n.delivered),
    ("rxpath_napi_polls", "NAPI polls", |(n, _)| n.polls),
    ("rxpath_napi_wakeups", "Interrupts (wakeups) taken", |(n, _)| n.wakeups),
    ("rxpath_device_offered_packets", "Packets the device saw", |(_, d)| d.offered),
    ("rxpath_device_missed_packets", "Dropped by the device: RX ring full (rx_missed)", |(_, d)| d.rx_missed),
    ("rxpath_device_no_buffer_packets", "Dropped by the device: no free frame (rx_no_buffer)", |(_, d)| d.rx_no_buffer),
    ("rxpath_device_too_long_packets", "Dropped by the device: longer than a frame", |(_, d)| d.rx_too_long),
];

/// Per worker, what the workers share (known live).
#[rustfmt::skip]
const WORKER: &[Row<WorkerReport>] = &[
    ("rxpath_worker_processed_packets", "Packets a worker took from its backlog", |x| x.backlog.processed),
    ("rxpath_worker_backlog_dropped_packets", "Packets dropped at a worker's backlog (netdev_max_backlog, flow limit)", |x| x.backlog.dropped),
    ("rxpath_worker_flow_limit_packets", "Of those, dropped by the flow limit", |x| x.backlog.flow_limit_count),
    ("rxpath_worker_received_rps_packets", "Packets steered to a worker from another", |x| x.backlog.received_rps),
    ("rxpath_worker_wakeups", "Wakeups a worker received", |x| x.wakeups),
];

/// Per worker, each thread's own counters (they come with the report).
#[rustfmt::skip]
const WORKER_FINAL: &[Row<WorkerReport>] = &[
    ("rxpath_worker_time_squeeze", "Backlog turns that ran out of budget with work left", |x| x.time_squeeze),
    ("rxpath_worker_delivered_packets", "Packets (segments) delivered on a worker", |x| x.path.delivered),
];

/// GRO over all queues.
#[rustfmt::skip]
const GRO: &[Row<GroStats>] = &[
    ("rxpath_gro_segments", "Segments into GRO", |g| g.packets_in),
    ("rxpath_gro_packets", "Packets out of GRO", |g| g.packets_out),
    ("rxpath_gro_merged_segments", "Segments merged into a held packet", |g| g.merged),
];

/// Encode every row of `table` with one sample per item of `items`,
/// labelled as `label` says.
fn encode_table<T>(
    enc: &mut DescriptorEncoder<'_>,
    table: &[Row<T>],
    items: &[(Labels, T)],
) -> Result<(), std::fmt::Error> {
    for (name, help, get) in table {
        let rows: Vec<(Labels, u64)> = items.iter().map(|(l, x)| (l.clone(), get(x))).collect();
        counter(enc, name, help, &rows)?;
    }
    Ok(())
}

/// Drops by reason, per queue or worker.
fn drops<'a>(per: impl Iterator<Item = (Labels, &'a NapiStats)>) -> Vec<(Labels, u64)> {
    per.flat_map(|(l, n)| {
        DropReason::ALL.iter().map(move |r| {
            let mut l = l.clone();
            l.push(("reason", r.name().to_string()));
            (l, n.dropped.get(*r))
        })
    })
    .collect()
}

/// What a scrape shows, taken from the snapshot: the final report's
/// figures if there is one, else the host's, else the live ones.
struct View {
    queues: Vec<(u16, NapiStats, DeviceQueueStats)>,
    workers: Vec<WorkerReport>,
    sock: Option<SockStats>,
    finished: bool,
}

impl View {
    fn of(s: &Snapshot) -> View {
        let queues = match (&s.report, &s.host) {
            (Some(r), _) => r
                .queues
                .iter()
                .map(|q| (q.queue, q.napi, q.device))
                .collect(),
            (None, Some(h)) => h
                .queues
                .iter()
                .map(|q| (q.queue, q.napi, q.device))
                .collect(),
            (None, None) if !s.live_napis.is_empty() => s
                .live_napis
                .iter()
                .filter_map(|n| {
                    let c = n.cell();
                    c.as_ref()
                        .map(|c| (n.queue, c.napi_stats(), c.device_stats()))
                })
                .collect(),
            (None, None) => s.queues.clone(),
        };
        let workers = match (&s.report, &s.host) {
            (Some(r), _) => r.workers.clone(),
            (None, Some(h)) => h.workers.clone(),
            (None, None) => s.workers.clone(),
        };
        let sock = s
            .host
            .as_ref()
            .map(|h| h.sock)
            .or(s.sock)
            .or_else(|| s.live_sock.as_ref().map(|k| k.stats()));
        View {
            queues,
            workers,
            sock,
            finished: s.report.is_some() || s.host.is_some(),
        }
    }

    fn worker_items(&self) -> Vec<(Labels, WorkerReport)> {
        self.workers
            .iter()
            .map(|x| (vec![("worker", x.worker.to_string())], *x))
            .collect()
    }
}

fn encode_sock(enc: &mut DescriptorEncoder<'_>, k: &SockStats) -> Result<(), std::fmt::Error> {
    encode_table(enc, SOCK, &[(Labels::new(), *k)])?;
    let m = enc.encode_descriptor(
        "rxpath_busy_poll_seconds",
        "Time spent busy polling",
        None,
        ConstCounter::new(0f64).metric_type(),
    )?;
    ConstCounter::new(k.busy_poll_ns as f64 / 1e9).encode(m)
}

fn encode_path(
    enc: &mut DescriptorEncoder<'_>,
    s: &Snapshot,
    v: &View,
) -> Result<(), std::fmt::Error> {
    let items: Vec<(Labels, (NapiStats, DeviceQueueStats))> =
        v.queues.iter().map(|(i, n, d)| (q(*i), (*n, *d))).collect();
    encode_table(enc, QUEUE, &items)?;
    counter(
        enc,
        "rxpath_dropped_packets",
        "Packets dropped on the NAPI's side of the path, by reason",
        &drops(v.queues.iter().map(|(i, n, _)| (q(*i), n))),
    )?;
    let softnet = match &s.report {
        Some(r) => r.softnet.iter().fold(SoftnetStats::default(), |mut a, b| {
            a.rx_actions += b.rx_actions;
            a.time_squeeze += b.time_squeeze;
            a
        }),
        None => s.softnet,
    };
    counter(
        enc,
        "rxpath_softnet_net_rx_actions",
        "net_rx_action rounds",
        &[(vec![], softnet.rx_actions)],
    )?;
    counter(
        enc,
        "rxpath_softnet_time_squeeze",
        "net_rx_action rounds that ran out of budget with work left",
        &[(vec![], softnet.time_squeeze)],
    )?;
    let mut total = NapiStats::default();
    for (_, n, _) in &v.queues {
        total.merge(n);
    }
    for w in &v.workers {
        total.merge(&w.path);
    }
    let rows: Vec<(Labels, u64)> = total
        .snmp
        .sections()
        .into_iter()
        .flat_map(|(sec, rows)| {
            rows.into_iter().map(move |(k, v)| {
                (
                    vec![("section", sec.to_string()), ("counter", k.to_string())],
                    v,
                )
            })
        })
        .collect();
    counter(
        enc,
        "rxpath_snmp",
        "IP/UDP input counters under the kernel's /proc/net/snmp names",
        &rows,
    )
}

fn encode_workers(enc: &mut DescriptorEncoder<'_>, v: &View) -> Result<(), std::fmt::Error> {
    if v.workers.is_empty() {
        return Ok(());
    }
    let items = v.worker_items();
    encode_table(enc, WORKER, &items)?;
    // Each worker thread's own counters come with the report at the end;
    // live, only what the workers share is known.
    if v.finished {
        encode_table(enc, WORKER_FINAL, &items)?;
        counter(
            enc,
            "rxpath_worker_dropped_packets",
            "Packets dropped on a worker's part of the path, by reason",
            &drops(items.iter().map(|(l, x)| (l.clone(), &x.path))),
        )?;
    }
    Ok(())
}

/// What only a run's final report has: latency, order, GRO.
fn encode_report(enc: &mut DescriptorEncoder<'_>, r: &Report) -> Result<(), std::fmt::Error> {
    if let Some(h) = &r.latency {
        // Send-to-delivery latency (`--stack latency`).
        const EDGES_US: [u64; 14] = [
            1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000,
        ];
        let edges_ns: Vec<u64> = EDGES_US.iter().map(|u| u * 1000).collect();
        let counts = h.coarse(&edges_ns);
        let mut buckets: Vec<(f64, u64)> = EDGES_US
            .iter()
            .zip(&counts)
            .map(|(&u, &n)| (u as f64 / 1e6, n))
            .collect();
        buckets.push((f64::MAX, counts[EDGES_US.len()]));
        let mut m = enc.encode_descriptor(
            "rxpath_latency_seconds",
            "Send-to-delivery latency of stamped request/response packets",
            None,
            prometheus_client::metrics::MetricType::Histogram,
        )?;
        m.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            h.sum_ns() as f64 / 1e9,
            h.count(),
            &buckets,
            None,
        )?;
    }
    if let Some(o) = &r.order {
        counter(
            enc,
            "rxpath_reordered_packets",
            "Packets delivered out of their flow's order",
            &[(vec![], o.reordered)],
        )?;
    }
    if let Some(g) = r.gro_total() {
        encode_table(enc, GRO, &[(Labels::new(), g)])?;
        let rows: Vec<(Labels, u64)> = rxpath_core::gro::FlushReason::ALL
            .iter()
            .map(|&f| {
                let name = serde_json::to_value(f)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                (vec![("reason", name)], g.flushes(f))
            })
            .collect();
        counter(enc, "rxpath_gro_flushes", "GRO flushes by reason", &rows)?;
    }
    Ok(())
}

impl Collector for Collect {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let s = lock(&self.0).clone();
        let v = View::of(&s);
        if let Some(k) = &v.sock {
            encode_sock(&mut enc, k)?;
        }
        encode_path(&mut enc, &s, &v)?;
        encode_workers(&mut enc, &v)?;
        if let Some(r) = &s.report {
            encode_report(&mut enc, r)?;
        }
        let m = enc.encode_descriptor(
            "rxpath_run_finished",
            "Whether the run has ended and these counters are final (1) or not yet (0)",
            None,
            ConstGauge::new(0i64).metric_type(),
        )?;
        ConstGauge::new(v.finished as i64).encode(m)
    }
}

/// A metrics endpoint: serves what it was last given (a run's ticks and
/// report, a host's live socket counters and final report).
#[derive(Debug)]
pub struct Metrics {
    snap: Arc<Mutex<Snapshot>>,
    /// Where it listens (a port 0 request resolved).
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    server: Option<JoinHandle<()>>,
}

impl Metrics {
    /// Serve `host`'s counters for Prometheus on `addr` (port 0: any free
    /// port, see [`Metrics::addr`]): the socket layer's and every queue's
    /// NAPI and device counters, read at every scrape
    /// (`rxpath_socket_*_total`, busy polling, `rxpath_rx_*`). Give it the
    /// report at the end ([`Metrics::finish_host`]) for the per-queue,
    /// per-worker and SNMP counters; it serves until dropped.
    pub fn for_host(host: &crate::host::Host, addr: SocketAddr) -> std::io::Result<Metrics> {
        let m = Metrics::start(addr)?;
        m.watch_sockets(host.sockets().clone());
        m.watch_napis(host.napis().to_vec());
        Ok(m)
    }

    /// Listen on `addr` (port 0: any free port; see [`Metrics::addr`]).
    pub fn start(addr: SocketAddr) -> std::io::Result<Metrics> {
        let l = TcpListener::bind(addr).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("metrics on {addr}: cannot listen there: {e}"),
            )
        })?;
        let addr = l.local_addr()?;
        let snap = Arc::new(Mutex::new(Snapshot::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Collect(snap.clone())));
        let st = stop.clone();
        let server = std::thread::Builder::new()
            .name("rxpath-metrics".into())
            .spawn(move || {
                for s in l.incoming() {
                    if st.load(Ordering::Acquire) {
                        break;
                    }
                    if let Ok(s) = s {
                        let _ = serve(s, &registry);
                    }
                }
            })?;
        Ok(Metrics {
            snap,
            addr,
            stop,
            server: Some(server),
        })
    }

    /// The run's counters so far.
    pub fn tick(&self, t: &Tick) {
        let mut s = lock(&self.snap);
        s.queues = t.queues.clone();
        s.softnet = t.softnet;
        s.workers = t.workers.clone();
    }

    /// Read `sockets`' counters at every scrape (a running host).
    pub fn watch_sockets(&self, sockets: Arc<rxpath_core::sock::Sockets>) {
        lock(&self.snap).live_sock = Some(sockets);
    }

    /// Read these NAPIs' per-queue counters at every scrape (a running
    /// host).
    pub fn watch_napis(&self, napis: Vec<Arc<rxpath_core::sock::SharedNapi>>) {
        lock(&self.snap).live_napis = napis;
    }

    /// The socket layer's counters so far (`rxpath echo`).
    pub fn sock(&self, k: rxpath_core::sock::SockStats) {
        lock(&self.snap).sock = Some(k);
    }

    /// A host's final report (`rxpath echo`).
    pub fn finish_host(&self, r: &crate::host::HostReport) {
        lock(&self.snap).host = Some(r.clone());
    }

    /// The final report.
    pub fn finish(&self, r: &Report) {
        lock(&self.snap).report = Some(r.clone());
    }
}

impl Drop for Metrics {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(h) = self.server.take() {
            let _ = h.join();
        }
    }
}

/// One HTTP exchange: `GET /metrics` gets the text, anything else a 404.
fn serve(mut s: TcpStream, registry: &Registry) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut buf = [0u8; 4096];
    let mut got = 0;
    while got < buf.len() {
        let n = s.read(&mut buf[got..])?;
        if n == 0 {
            break;
        }
        got += n;
        if buf[..got].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let req = String::from_utf8_lossy(&buf[..got]);
    let line = req.lines().next().unwrap_or("");
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method == "GET" && (path == "/metrics" || path.starts_with("/metrics?")) {
        let mut body = String::new();
        prometheus_client::encoding::text::encode(&mut body, registry)
            .map_err(|_| std::io::Error::other("encoding the metrics"))?;
        // OpenMetrics for a scraper that asks for it (Prometheus does),
        // the classic text format (0.0.4) for everyone else (curl, promtool).
        let om = req.lines().any(|l| {
            l.to_ascii_lowercase().starts_with("accept:")
                && l.contains("application/openmetrics-text")
        });
        let (ctype, body) = if om {
            (
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                body,
            )
        } else {
            (
                "text/plain; version=0.0.4; charset=utf-8",
                text_format(&body),
            )
        };
        write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    } else {
        let body = "only GET /metrics is served here\n";
        write!(
            s,
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    }
}

/// OpenMetrics text → the classic Prometheus text format: a counter's
/// HELP and TYPE name its samples (`_total`), no `# EOF`.
fn text_format(om: &str) -> String {
    let counters: std::collections::HashSet<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(om.len() + 64);
    for l in om.lines() {
        if l == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|p| {
            let rest = l.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            counters
                .contains(name)
                .then(|| format!("{p}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(l));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn text_format_names_counters_by_their_samples() {
        let om = "# HELP a_x Some help\n# TYPE a_x counter\na_x_total{q=\"0\"} 3\n# HELP g A gauge\n# TYPE g gauge\ng 1\n# EOF\n";
        assert_eq!(
            super::text_format(om),
            "# HELP a_x_total Some help\n# TYPE a_x_total counter\na_x_total{q=\"0\"} 3\n# HELP g A gauge\n# TYPE g gauge\ng 1\n"
        );
    }
}
