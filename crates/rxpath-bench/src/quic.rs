//! `rxpath bench quic` (root): quinn's perf protocol on the lab veth, the
//! server (`rxpath quic`) on the kernel's socket vs on an rxpath socket,
//! sleeping, busy polling and with interrupts deferred
//! (`napi_defer_hard_irqs`); the kernel also with the veth's GRO on as a
//! NIC's and with the same deferral on the veth's NAPI; the client (`rxpath quic --connect`, quinn on
//! the kernel's socket) in the peer namespace, with UDP GSO on and off on
//! both ends of the veth (`ethtool -K IF tx-udp-segmentation`: off, a
//! wire's single datagrams both ways).
//!
//! Per configuration: an upload and a download of `--bytes` (Gbit/s, and
//! the server's CPU per GB: the whole machine's busy time from
//! `/proc/stat` less the client process's own CPU; with tick-based CPU
//! accounting that misses the server's receive softirq, which a veth runs
//! in the sender's context and so charges to the client: see
//! BENCHMARKS.md), then `--requests`
//! 32-byte request/response streams on one connection (p50, p99), and
//! from the server's report every byte and frame accounted for and the
//! datagrams per read (UDP GRO).

use crate::figure::{cell, finite, ratio, ratio_cell};
use crate::harness::median;
use crate::iface::machine_busy;
use crate::plot::ReportDir;
use anyhow::{bail, Context, Result};
use clap::Args;
use rxpath_os::sched;
use rxpath_runtime::lab::{Topology, HOST_ADDR};
use serde_json::Value;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Duration;

/// Arguments of this bench.
#[derive(Debug, Clone, Args)]
pub struct QuicBenchArgs {
    /// Bytes per upload and per download.
    #[arg(long, default_value_t = 300_000_000)]
    pub bytes: u64,
    /// 32-byte request/response streams timed per configuration and
    /// round. 10 000: a round's p99 is then its 100th slowest request, not
    /// (at 2000) its 20th, which one scheduler hiccup on this 2-vCPU VM
    /// moved by a third (per-round p99 ratios 0.35x-1.13x at 2000).
    #[arg(long, default_value_t = 10_000)]
    pub requests: u64,
    /// Busy-poll µs for the busy-polling servers (rxpath and kernel): a
    /// window longer than the client's turnaround between requests (60-100
    /// µs on the lab veth), so that a busy-polling server is still polling
    /// when the next request comes; at 50 µs it has gone to sleep.
    #[arg(long, default_value_t = 1000)]
    pub busy_poll: u32,
    /// Interrupt deferral of the "prefer" and "woken by the device" rxpath
    /// servers after a busy poll, ns (the reading task is then woken by the
    /// device and polls).
    #[arg(long, default_value_t = 500_000)]
    pub prefer_ns: u64,
    /// gro_flush_timeout of the rxpath servers, ns (the deferring rows
    /// use --defer-flush-ns).
    #[arg(long, default_value_t = 0)]
    pub gro_flush_timeout: u64,
    /// napi_defer_hard_irqs of the "interrupts deferred" rows (rxpath's
    /// NAPI; the kernel's: the host veth's, with its GRO on so that it has
    /// a NAPI).
    #[arg(long, default_value_t = 2)]
    pub defer_hard_irqs: u32,
    /// gro_flush_timeout of the "interrupts deferred" rows, ns: the NAPI
    /// timer's period while the interrupt is masked.
    #[arg(long, default_value_t = 200_000)]
    pub defer_flush_ns: u64,
    /// Rounds per configuration, taken in turns across the servers (one
    /// round: every server's upload, download and requests once; every
    /// other round in the reverse order); the tables give the medians of
    /// the uploads, the downloads and the request p50/p99, and the ratios
    /// per round.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: u32,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Server {
    Kernel,
    KernelBusy,
    Rxpath,
    RxpathBusy,
    RxpathPrefer,
    /// Prefer busy polling with a 1 µs window: the task sleeps on the
    /// device at once, the interrupt deferred (woken by the device only).
    RxpathDevice,
    /// Interrupt mitigation (`napi_defer_hard_irqs` with
    /// `gro_flush_timeout`), no busy polling.
    RxpathDefer,
    /// The kernel's socket with the host veth's GRO on as a NIC's is
    /// (`gro` and `rx-udp-gro-forwarding`: a veth passes a socket's UDP
    /// through its NAPI, and so through GRO, only with the latter), so
    /// that quinn-udp's `UDP_GRO` socket gets merged datagrams, as
    /// rxpath's does.
    KernelGro,
    /// That, with the same interrupt mitigation as [`Server::RxpathDefer`]
    /// on the veth's NAPI (sysfs `napi_defer_hard_irqs`,
    /// `gro_flush_timeout`).
    KernelDefer,
}

impl Server {
    const ALL: [Server; 9] = [
        Server::Kernel,
        Server::KernelBusy,
        Server::Rxpath,
        Server::RxpathBusy,
        Server::RxpathPrefer,
        Server::RxpathDevice,
        Server::RxpathDefer,
        Server::KernelGro,
        Server::KernelDefer,
    ];
    fn name(self) -> &'static str {
        match self {
            Server::Kernel => "kernel socket",
            Server::KernelBusy => "kernel socket, busy poll",
            Server::Rxpath => "rxpath AF_XDP, sleeping",
            Server::RxpathBusy => "rxpath AF_XDP, busy poll",
            Server::RxpathPrefer => "rxpath AF_XDP, busy poll, prefer",
            Server::RxpathDevice => "rxpath AF_XDP, woken by the device (prefer, 1 µs window)",
            Server::RxpathDefer => "rxpath AF_XDP, interrupts deferred",
            Server::KernelGro => "kernel socket, veth GRO (UDP GRO as on a NIC)",
            Server::KernelDefer => "kernel socket, veth GRO, interrupts deferred",
        }
    }
    /// The short name of the summary lines.
    fn short(self) -> &'static str {
        match self {
            Server::Kernel => "kernel",
            Server::KernelBusy => "kernel busy poll",
            Server::Rxpath => "rxpath sleeping",
            Server::RxpathBusy => "busy poll",
            Server::RxpathPrefer => "busy poll with prefer",
            Server::RxpathDevice => "woken by the device",
            Server::RxpathDefer => "interrupts deferred",
            Server::KernelGro => "kernel with GRO",
            Server::KernelDefer => "kernel with GRO, interrupts deferred",
        }
    }
    fn rxpath(self) -> bool {
        !matches!(
            self,
            Server::Kernel | Server::KernelBusy | Server::KernelGro | Server::KernelDefer
        )
    }
    /// Rows whose request latency is held to the target (busy polling).
    fn busy(self) -> bool {
        matches!(
            self,
            Server::RxpathBusy | Server::RxpathPrefer | Server::RxpathDevice
        )
    }
}

/// One configuration's figures.
#[derive(Debug, Default, Clone)]
struct Row {
    /// Each round's upload: Gbit/s, server CPU s/GB, client CPU s/GB;
    /// `None` for a round that failed.
    up: Vec<Option<(f64, f64, f64)>>,
    up_gbit: f64,
    up_cpu_s_per_gb: f64,
    /// The client process's CPU per GB (on a veth it includes the
    /// receive-side softirq work the kernel runs in the sender's context).
    up_client_s_per_gb: f64,
    /// Each round's download: Gbit/s, server CPU s/GB; `None` for a
    /// round that failed.
    down: Vec<Option<(f64, f64)>>,
    down_gbit: Option<f64>,
    down_cpu_s_per_gb: Option<f64>,
    /// Each round's request p50 and p99, µs; `None` for a round that failed.
    req: Vec<Option<(f64, f64)>>,
    p50_us: f64,
    p99_us: f64,
    /// Datagrams per socket read on the server (rxpath: UDP GRO).
    per_read: Option<f64>,
    /// Every byte arrived and (rxpath) every frame came home.
    whole: bool,
    /// Why rounds failed (each also reported as not measured).
    failed: Vec<String>,
}

/// The number at `path` in the client's JSON, or an error that shows it.
fn num(v: &Value, path: &[&str]) -> Result<f64> {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_f64)
        .with_context(|| format!("the client's JSON has no {}: {v}", path.join(".")))
}

fn client(t: &Topology, args: &[String]) -> Result<(Value, Duration, Duration)> {
    let exe = std::env::current_exe()?;
    let (m0, c0) = (machine_busy(), sched::children_cpu_time());
    let out = Command::new("ip")
        .args(["netns", "exec", &t.ns])
        .arg(&exe)
        .args(["quic", "--connect", &format!("{HOST_ADDR}:4433"), "--json"])
        .args(args)
        .output()
        .context("running the perf client")?;
    let (m1, c1) = (machine_busy(), sched::children_cpu_time());
    if !out.status.success() {
        bail!(
            "perf client failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let v: Value = serde_json::from_slice(&out.stdout).context("client JSON")?;
    Ok((v, m1.saturating_sub(m0), c1.saturating_sub(c0)))
}

/// The server's command line after `quic --iface IF --bind ADDR --json`.
fn server_args(s: Server, a: &QuicBenchArgs) -> Vec<String> {
    let busy_poll = match s {
        Server::KernelBusy | Server::RxpathBusy | Server::RxpathPrefer => a.busy_poll,
        Server::RxpathDevice => 1,
        Server::Kernel
        | Server::Rxpath
        | Server::RxpathDefer
        | Server::KernelGro
        | Server::KernelDefer => 0,
    };
    let mut v = vec![
        "--socket".to_string(),
        if s.rxpath() { "rxpath" } else { "kernel" }.to_string(),
        "--busy-poll".to_string(),
        busy_poll.to_string(),
    ];
    if s == Server::RxpathDefer {
        v.extend([
            "--gro-flush-timeout".to_string(),
            a.defer_flush_ns.to_string(),
            "--defer-hard-irqs".to_string(),
            a.defer_hard_irqs.to_string(),
        ]);
    } else if s.rxpath() {
        v.extend([
            "--gro-flush-timeout".to_string(),
            a.gro_flush_timeout.to_string(),
        ]);
    }
    if matches!(s, Server::RxpathPrefer | Server::RxpathDevice) {
        v.extend(["--prefer-busy-poll".to_string(), a.prefer_ns.to_string()]);
    }
    v
}

fn start(s: Server, t: &Topology, a: &QuicBenchArgs) -> Result<Child> {
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.args(["quic", "--iface", &t.host_if, "--bind", HOST_ADDR, "--json"])
        .args(server_args(s, a))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let c = crate::harness::spawn_unpinned(cmd).context("starting rxpath quic")?;
    std::thread::sleep(Duration::from_millis(1200));
    Ok(c)
}

fn stop(c: Child) -> Result<Value> {
    let _ = Command::new("kill")
        .args(["-INT", &c.id().to_string()])
        .status();
    let out = c.wait_with_output()?;
    serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "server report: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })
}

/// One server run: an upload, a download and the requests; their
/// figures go to `row.up`, `row.down` and `row.req` (one per round).
fn measure(s: Server, t: &Topology, a: &QuicBenchArgs, first: bool, row: &mut Row) -> Result<()> {
    // The kernel's mitigation is the host veth's, set for its row only
    // (the rxpath rows' XDP runs in that NAPI too) and undone after it,
    // errors included.
    let _veth = match s {
        Server::KernelGro => Some(VethNapi::set(&t.host_if, 0, 0)?),
        Server::KernelDefer => Some(VethNapi::set(
            &t.host_if,
            a.defer_hard_irqs,
            a.defer_flush_ns,
        )?),
        _ => None,
    };
    // A round's figures count only when the whole round ran: a failure
    // leaves `None` for the round (never a zero).
    row.up.push(None);
    row.down.push(None);
    row.req.push(None);
    let server = start(s, t, a)?;
    let r = (|| -> Result<()> {
        let gb = a.bytes as f64 / 1e9;
        let (v, machine, own) = client(t, &["--upload".into(), a.bytes.to_string()])?;
        let up = (
            num(&v, &["upload", "gbit_s"])?,
            machine.saturating_sub(own).as_secs_f64() / gb,
            own.as_secs_f64() / gb,
        );
        let (v, machine, own) = client(t, &["--download".into(), a.bytes.to_string()])?;
        let down = (
            num(&v, &["download", "gbit_s"])?,
            machine.saturating_sub(own).as_secs_f64() / gb,
        );
        let (v, _, _) = client(t, &["--requests".into(), a.requests.to_string()])?;
        let req = (
            num(&v, &["requests", "p50_us"])?,
            num(&v, &["requests", "p99_us"])?,
        );
        *row.up.last_mut().expect("pushed") = Some(up);
        *row.down.last_mut().expect("pushed") = Some(down);
        *row.req.last_mut().expect("pushed") = Some(req);
        Ok(())
    })();
    let rep = stop(server)?;
    r?;
    let p = &rep["perf"];
    let want_in = a.bytes + 32 * a.requests;
    let want_out = a.bytes + 32 * a.requests;
    let mut whole = p["bytes_in"].as_u64() == Some(want_in)
        && p["bytes_out"].as_u64() == Some(want_out)
        && p["failed_streams"].as_u64() == Some(0);
    if let Some(path) = rep.get("path").filter(|x| !x.is_null()) {
        whole &= path["frames_home"] == path["frames_total"];
        if first {
            let reads = path["socket"]["read"].as_f64().unwrap_or(0.0);
            let dgrams = path["napi"]["delivered"].as_f64().unwrap_or(0.0);
            row.per_read = (reads > 0.0).then(|| dgrams / reads);
        }
    }
    row.whole = (first || row.whole) && whole;
    Ok(())
}

/// The host veth's GRO as a NIC's (`gro`, and `rx-udp-gro-forwarding`
/// without which a veth hands a socket's UDP to `netif_rx` and not to its
/// NAPI) with `napi_defer_hard_irqs` / `gro_flush_timeout` in sysfs; all
/// undone when dropped.
struct VethNapi(String);

impl VethNapi {
    fn set(iface: &str, irqs: u32, flush_ns: u64) -> Result<Self> {
        let d = VethNapi(iface.to_string());
        d.apply(true, irqs, flush_ns)?;
        Ok(d)
    }
    fn apply(&self, gro: bool, irqs: u32, flush_ns: u64) -> Result<()> {
        let on = if gro { "on" } else { "off" };
        let ok = Command::new("ethtool")
            .args(["-K", &self.0, "gro", on, "rx-udp-gro-forwarding", on])
            .output()?
            .status
            .success();
        if !ok {
            bail!(
                "ethtool -K {} gro {on} rx-udp-gro-forwarding {on} failed",
                self.0
            );
        }
        let sys = format!("/sys/class/net/{}", self.0);
        std::fs::write(format!("{sys}/napi_defer_hard_irqs"), irqs.to_string())
            .with_context(|| format!("{sys}/napi_defer_hard_irqs"))?;
        std::fs::write(format!("{sys}/gro_flush_timeout"), flush_ns.to_string())
            .with_context(|| format!("{sys}/gro_flush_timeout"))?;
        Ok(())
    }
}

impl Drop for VethNapi {
    fn drop(&mut self) {
        if let Err(e) = self.apply(false, 0, 0) {
            eprintln!("rxpath bench quic: undoing the veth's GRO and deferral: {e:#}");
        }
    }
}

/// Every server, every round (every other round in the other order, so
/// that a drift of the VM's speed within a round, seen here as the same
/// run 1.5x faster three seconds later, does not always favour the same
/// servers), and each server's medians.
fn measure_rounds(a: &QuicBenchArgs, t: &Topology, gso: &str) -> Vec<(Server, Row)> {
    let mut rows: Vec<(Server, Row)> = Server::ALL.iter().map(|&s| (s, Row::default())).collect();
    for round in 0..a.rounds {
        let reverse = round % 2 == 1;
        let order: Vec<usize> = if reverse {
            (0..rows.len()).rev().collect()
        } else {
            (0..rows.len()).collect()
        };
        for i in order {
            let (s, r) = &mut rows[i];
            if let Err(e) = measure(*s, t, a, round == 0, r) {
                let why = format!("{e:#}");
                crate::harness::peer_not_measured(
                    &format!("{} (GSO {gso}, round {round})", s.name()),
                    &why,
                );
                r.failed.push(why);
            }
        }
    }
    for (_, r) in rows.iter_mut() {
        let up: Vec<(f64, f64, f64)> = r.up.iter().flatten().copied().collect();
        let req: Vec<(f64, f64)> = r.req.iter().flatten().copied().collect();
        let down: Vec<(f64, f64)> = r.down.iter().flatten().copied().collect();
        if !down.is_empty() {
            r.down_gbit = Some(median(down.iter().map(|x| x.0).collect()));
            r.down_cpu_s_per_gb = Some(median(down.iter().map(|x| x.1).collect()));
        }
        r.up_gbit = median(up.iter().map(|x| x.0).collect());
        r.up_cpu_s_per_gb = median(up.iter().map(|x| x.1).collect());
        r.up_client_s_per_gb = median(up.iter().map(|x| x.2).collect());
        r.p50_us = median(req.iter().map(|x| x.0).collect());
        r.p99_us = median(req.iter().map(|x| x.1).collect());
    }
    rows
}

/// One server's line of the table and its JSON; false if it lost bytes
/// or frames (a row that failed is reported as not measured, not as loss).
fn print_row(
    a: &QuicBenchArgs,
    s: Server,
    r: &Row,
    gso: &str,
    all: &mut serde_json::Map<String, Value>,
) -> bool {
    let c = |v: f64, places: usize| cell(Some(v), 1.0, places);
    println!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        s.name(),
        c(r.up_gbit, 2),
        c(r.up_cpu_s_per_gb, 2),
        c(r.up_client_s_per_gb, 2),
        cell(r.down_gbit, 1.0, 2),
        cell(r.down_cpu_s_per_gb, 1.0, 2),
        c(r.p50_us, 0),
        c(r.p99_us, 0),
        r.per_read.map_or("n/a".into(), |x| format!("{x:.1}")),
        if r.whole {
            "yes"
        } else if !r.failed.is_empty() {
            "not measured"
        } else {
            "NO"
        }
    );
    if let Some(why) = r.failed.first() {
        println!(
            "|   {} failed in {} of {} rounds: {} | | | | | | | | | |",
            s.short(),
            r.failed.len(),
            a.rounds,
            why.replace('|', "/")
        );
    }
    all.insert(
        format!("gso_{gso}/{}", s.name()),
        serde_json::json!({
            "upload_gbit_s": r.up_gbit, "upload_cpu_s_per_gb": r.up_cpu_s_per_gb,
            "upload_client_cpu_s_per_gb": r.up_client_s_per_gb,
            "download_gbit_s": r.down_gbit, "download_cpu_s_per_gb": r.down_cpu_s_per_gb,
            "p50_us": r.p50_us, "p99_us": r.p99_us, "datagrams_per_read": r.per_read,
            "upload_rounds": r.up.iter().map(|x| x.map(|x| serde_json::json!({
                "gbit_s": x.0, "cpu_s_per_gb": x.1, "client_cpu_s_per_gb": x.2}))).collect::<Vec<_>>(),
            "download_rounds": r.down.iter().map(|x| x.map(|x| serde_json::json!({
                "gbit_s": x.0, "cpu_s_per_gb": x.1}))).collect::<Vec<_>>(),
            "request_rounds": r.req.iter().map(|x| x.map(|x| serde_json::json!({
                "p50_us": x.0, "p99_us": x.1}))).collect::<Vec<_>>(),
            "whole": r.whole,
            "failed_rounds": r.failed,
        }),
    );
    r.whole || !r.failed.is_empty()
}

pub fn quic(a: QuicBenchArgs, rep: &mut Option<ReportDir>) -> Result<ExitCode> {
    if !sched::is_root() {
        bail!("bench quic needs root (it builds a veth lab and attaches XDP): run it with sudo");
    }
    let t = Topology {
        ns: "rxp-quic".into(),
        host_if: "rxpq0".into(),
        peer_if: "rxpq1".into(),
        queues: 1,
        gro: false,
        threaded: false,
    };
    let guard = t.up_scoped()?;
    let t = &guard.0;
    println!(
        "rxpath bench quic: quinn perf protocol, {} MB up ({} rounds, servers in turn, every other round in reverse; medians) and down, {} small requests per round; veth {} <- {} (netns {}); busy poll {} µs; rxpath gro_flush_timeout {} ns",
        a.bytes / 1_000_000,
        a.rounds,
        a.requests,
        t.host_if,
        t.peer_if,
        t.ns,
        a.busy_poll,
        a.gro_flush_timeout
    );
    let mut all = serde_json::Map::new();
    let mut whole = true;
    for gso in ["off", "on"] {
        // Both ends: "off" is a wire, which carries single datagrams both
        // ways (the kernel server's downloads are segmented before the
        // veth, as before a NIC without UDP segmentation offload).
        let peer = Command::new("ip")
            .args(["netns", "exec", &t.ns, "ethtool", "-K", &t.peer_if])
            .args(["tx-udp-segmentation", gso])
            .output()?;
        let host = Command::new("ethtool")
            .args(["-K", &t.host_if, "tx-udp-segmentation", gso])
            .output()?;
        if !peer.status.success() || !host.status.success() {
            bail!(
                "ethtool -K {}/{} tx-udp-segmentation {gso} failed",
                t.peer_if,
                t.host_if
            );
        }
        println!("\npeer (and server-side) UDP GSO {gso}:");
        println!(
            "| server | upload Gbit/s | server CPU s/GB up | client CPU s/GB up | download Gbit/s | server CPU s/GB down | request p50 µs | p99 µs | datagrams/read | every byte, frames home |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
        let rows = measure_rounds(&a, t, gso);
        for (s, r) in &rows {
            whole &= print_row(&a, *s, r, gso, &mut all);
        }
        summary(&rows, gso == "off");
    }
    if let Some(r) = rep {
        r.json("quic", &Value::Object(all))?;
    }
    if !whole {
        eprintln!("rxpath bench quic: a configuration lost bytes or frames (see NO above)");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// The ratios of one GSO setting: uploads and downloads per server CPU-second and
/// request p99 against the kernel socket's (medians, and round by round
/// against the same round's kernel figure).
fn summary(rows: &[(Server, Row)], target: bool) {
    let get = |s: Server| rows.iter().find(|x| x.0 == s).map(|x| &x.1);
    let Some(k) = get(Server::Kernel) else { return };
    let list = |v: Vec<Option<f64>>| {
        v.iter()
            .map(|r| r.map_or("n/a".into(), |r| format!("{r:.2}")))
            .collect::<Vec<_>>()
            .join("/")
    };
    // Bytes per server CPU-second: the inverse of CPU seconds per GB.
    let per_cpu = |x: &Row| ratio(Some(1.0), Some(x.up_cpu_s_per_gb));
    // Bytes per server CPU-second round by round against `base`'s same
    // round: the base's CPU per GB over x's.
    let cpu_rounds = |x: &[Option<f64>], base: &[Option<f64>]| -> Vec<Option<f64>> {
        x.iter().zip(base).map(|(u, b)| ratio(*b, *u)).collect()
    };
    let up_cpu = |x: &Row| -> Vec<Option<f64>> { x.up.iter().map(|u| u.map(|u| u.1)).collect() };
    let down_cpu =
        |x: &Row| -> Vec<Option<f64>> { x.down.iter().map(|u| u.map(|u| u.1)).collect() };
    let up_rounds = |x: &Row, base: &Row| cpu_rounds(&up_cpu(x), &up_cpu(base));
    let down_rounds = |x: &Row, base: &Row| cpu_rounds(&down_cpu(x), &down_cpu(base));
    let others: Vec<(Server, &Row)> = rows
        .iter()
        .filter(|(s, _)| !matches!(s, Server::Kernel | Server::KernelBusy))
        .map(|(s, r)| (*s, r))
        .collect();
    // Each server's figure, "short figure; ...".
    let each = |f: &dyn Fn(&Row) -> String| {
        others
            .iter()
            .map(|(s, r)| format!("{} {}", s.short(), f(r)))
            .collect::<Vec<_>>()
            .join("; ")
    };
    println!(
        "upload bytes per server CPU-second vs kernel, medians{}: {}",
        if target { " (target >= 1.3x)" } else { "" },
        each(&|r| ratio_cell(ratio(per_cpu(r), per_cpu(k)), 2))
    );
    println!("  by round: {}", each(&|r| list(up_rounds(r, k))));
    let down_median = |x: &Row| median(down_rounds(x, k).into_iter().flatten().collect());
    println!(
        "download bytes per server CPU-second vs kernel, median of the rounds' ratios{}: {}",
        if target { " (target >= 1.0x)" } else { "" },
        each(&|r| ratio_cell(finite(down_median(r)), 2))
    );
    println!("  by round: {}", each(&|r| list(down_rounds(r, k))));
    if let (Some(d), Some(kd)) = (get(Server::RxpathDefer), get(Server::KernelDefer)) {
        println!(
            "  interrupts deferred, rxpath vs the kernel with GRO and the same knobs: {} (by round {})",
            ratio_cell(ratio(per_cpu(d), per_cpu(kd)), 2),
            list(up_rounds(d, kd))
        );
    }
    // On a veth the kernel runs the server's receive softirq in the
    // sender's context, the client's: the whole machine's CPU per GB
    // (server and client) is the figure that does not depend on where it
    // is charged.
    let whole = |x: &Row| finite(x.up_cpu_s_per_gb + x.up_client_s_per_gb);
    println!(
        "  whole machine (server + client CPU per GB up) vs kernel: {}",
        rows.iter()
            .filter(|(s, _)| *s != Server::Kernel)
            .map(|(s, r)| format!("{} {}", s.short(), ratio_cell(ratio(whole(k), whole(r)), 2)))
            .collect::<Vec<_>>()
            .join("; ")
    );
    // Request p99 round by round against the kernel's of the same round;
    // the target's figure is the median of those ratios (rounds where
    // either side failed left out; none left: not measured).
    let p99_rounds = |x: &Row, base: &Row| -> Vec<Option<f64>> {
        x.req
            .iter()
            .zip(&base.req)
            .map(|(q, b)| ratio(q.map(|q| q.1), b.map(|b| b.1)))
            .collect()
    };
    let busy: Vec<(Server, &Row)> = others.iter().filter(|(s, _)| s.busy()).copied().collect();
    let m = |x: &Row, base: &Row| median(p99_rounds(x, base).into_iter().flatten().collect());
    let vs = |base: &Row| {
        busy.iter()
            .map(|(s, r)| format!("{} {}", s.short(), ratio_cell(finite(m(r, base)), 2)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    print!(
        "request p99 vs kernel, median of the rounds' ratios: {}{}",
        vs(k),
        if target { " (target <= 0.8x)" } else { "" }
    );
    match get(Server::KernelBusy) {
        Some(kb) => println!("; vs kernel busy poll: {}", vs(kb)),
        None => println!(),
    }
    println!(
        "  by round: {}",
        busy.iter()
            .map(|(s, r)| format!("{} {}", s.short(), list(p99_rounds(r, k))))
            .collect::<Vec<_>>()
            .join("; ")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row's server gets the flags its name says (the prefer row once
    /// ran without `--prefer-busy-poll`: a second busy-poll row).
    #[test]
    fn each_server_row_gets_its_flags() {
        let a = QuicBenchArgs {
            bytes: 1,
            requests: 1,
            busy_poll: 1000,
            prefer_ns: 500_000,
            gro_flush_timeout: 0,
            defer_hard_irqs: 2,
            defer_flush_ns: 200_000,
            rounds: 1,
        };
        let flag = |s: Server, f: &str| {
            let v = server_args(s, &a);
            v.iter()
                .position(|x| x == f)
                .and_then(|i| v.get(i + 1).cloned())
        };
        for s in Server::ALL {
            let prefer = flag(s, "--prefer-busy-poll");
            match s {
                Server::RxpathPrefer | Server::RxpathDevice => {
                    assert_eq!(prefer.as_deref(), Some("500000"), "{}", s.name())
                }
                _ => assert_eq!(prefer, None, "{}", s.name()),
            }
            let defer = flag(s, "--defer-hard-irqs");
            match s {
                Server::RxpathDefer => {
                    assert_eq!(defer.as_deref(), Some("2"));
                    assert_eq!(flag(s, "--gro-flush-timeout").as_deref(), Some("200000"));
                }
                _ => assert_eq!(defer, None, "{}", s.name()),
            }
            let want = match s {
                Server::Kernel
                | Server::Rxpath
                | Server::RxpathDefer
                | Server::KernelGro
                | Server::KernelDefer => "0",
                Server::RxpathDevice => "1",
                _ => "1000",
            };
            assert_eq!(
                flag(s, "--busy-poll").as_deref(),
                Some(want),
                "{}",
                s.name()
            );
            assert_eq!(
                flag(s, "--socket").as_deref(),
                Some(if s.rxpath() { "rxpath" } else { "kernel" })
            );
        }
    }
}
