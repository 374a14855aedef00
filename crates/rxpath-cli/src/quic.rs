//! `rxpath quic`: a quinn server speaking quinn's perf protocol, on an
//! rxpath socket ([`rxpath_quinn::RxpathSocket`]) or, for comparison, on
//! the kernel's UDP socket through quinn-udp. Anyone can point quinn's
//! `perf_client` (or any QUIC client with ALPN `perf`) at it.

use crate::opts::*;
use anyhow::Context;
use clap::{Parser, ValueEnum};
use rxpath_dev::sys::xdp::XdpFilter;
use rxpath_quinn::{perf, RxpathSocket};
use rxpath_runtime::{Host, HostConfig};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What `rxpath quic` serves on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QuicSocket {
    /// An rxpath socket (AF_XDP or AF_PACKET, GRO, busy polling).
    Rxpath,
    /// The kernel's UDP socket through quinn-udp (GSO, GRO, ECN).
    Kernel,
}

/// `rxpath quic`.
#[derive(Debug, Parser)]
pub struct QuicArgs {
    /// Interface to serve on (rxpath sockets; the kernel socket binds
    /// --bind).
    #[arg(long, required_unless_present_any = ["connect"])]
    pub iface: Option<String>,
    /// Be a perf client instead (on the kernel's socket): connect to ADDR,
    /// upload --upload bytes and download --download bytes on one stream
    /// each, then time --requests small request/response streams.
    #[arg(long, value_name = "ADDR")]
    pub connect: Option<SocketAddr>,
    /// Client: bytes to upload.
    #[arg(long, default_value_t = 0)]
    pub upload: u64,
    /// Client: bytes to download.
    #[arg(long, default_value_t = 0)]
    pub download: u64,
    /// Client: small request/response streams to time (32 bytes each way).
    #[arg(long, default_value_t = 0)]
    pub requests: u64,
    /// Backend: auto (AF_XDP, else AF_PACKET), xdp or packet.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub mode: BackendArg,
    /// Address to bind.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind: std::net::IpAddr,
    /// UDP port.
    #[arg(long, default_value_t = 4433)]
    pub port: u16,
    /// rxpath's socket or the kernel's.
    #[arg(long, value_enum, default_value_t = QuicSocket::Rxpath)]
    pub socket: QuicSocket,
    /// Busy-poll for US µs when a read finds nothing (SO_BUSY_POLL; 0 =
    /// off). rxpath: one busy-poll round per empty read, as the kernel's
    /// non-blocking recvmsg; kernel socket: set on it.
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub busy_poll: u32,
    /// NAPI threads (rxpath).
    #[arg(long, default_value_t = 1)]
    pub napi_threads: usize,
    /// rxpath: prefer busy polling: after a busy poll keep the queue's
    /// interrupt masked for NS ns (SO_PREFER_BUSY_POLL with
    /// napi_defer_hard_irqs): with --busy-poll the reading task is woken by
    /// the device and polls the queue itself; 0 = off.
    #[arg(long, value_name = "NS", default_value_t = 0)]
    pub prefer_busy_poll: u64,
    /// rxpath: gro_flush_timeout in ns (0: GRO flushes at every
    /// completion; more keeps a flow's datagrams across polls, the NAPI
    /// timer passes them up).
    #[arg(long, value_name = "NS", default_value_t = 0)]
    pub gro_flush_timeout: u64,
    /// rxpath: napi_defer_hard_irqs (interrupt mitigation): after a poll
    /// that found packets the interrupt stays masked and the NAPI timer
    /// polls every --gro-flush-timeout ns, until N polls in a row find
    /// nothing; what arrives meanwhile is taken, and read, in one go.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub defer_hard_irqs: u32,
    /// Stop after this long: 5, 5s, 500ms, 1m (default: run until Ctrl-C).
    #[arg(long, value_name = "DURATION", value_parser = crate::parse::parse_duration)]
    pub duration: Option<Duration>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The server socket's receive buffer, either kind: a QUIC server's bursts
/// (64-segment GRO packets) overflow the 208 KiB default at once, and
/// QUIC servers set theirs large.
const RCVBUF: usize = 8 << 20;

/// The rxpath host the server's socket lives on (`--socket rxpath`), or
/// none (`--socket kernel`).
fn start_host(a: &QuicArgs, iface: &str) -> anyhow::Result<Option<Host>> {
    Ok(match a.socket {
        QuicSocket::Kernel => None,
        QuicSocket::Rxpath => {
            rxpath_runtime::run::check_caps(iface, a.mode == BackendArg::Xdp)
                .map_err(|e| anyhow::anyhow!("{e} (or use --socket kernel)"))?;
            let cfg = HostConfig {
                queues: 0,
                napi_threads: a.napi_threads,
                gro_flush_timeout_ns: a.gro_flush_timeout,
                prefer_busy_poll_ns: a.prefer_busy_poll,
                defer_hard_irqs: a.defer_hard_irqs,
                ..HostConfig::default()
            };
            let filter = XdpFilter {
                protocol: Some(17),
                dst_port: Some(a.port),
                ..XdpFilter::default()
            };
            crate::echo::warn_deferral_off(a.defer_hard_irqs, a.gro_flush_timeout);
            let dev = crate::echo::device(iface, a.mode, filter, 0);
            Some(Host::start(cfg, dev)?)
        }
    })
}

/// What the server did: JSON (`--json`) or a summary, the path's
/// counters for an rxpath socket.
fn print_report(
    a: &QuicArgs,
    elapsed: Duration,
    stats: &perf::ServerStats,
    perf_json: serde_json::Value,
    socket: Option<&rxpath_core::sock::SockCounters>,
    rep: Option<&rxpath_runtime::HostReport>,
) {
    let ld = |x: &std::sync::atomic::AtomicU64| x.load(Ordering::Relaxed);
    if a.json {
        let path = rep.map(|r| {
            let napi = r.napi_total();
            serde_json::json!({
                "socket": socket,
                "sock": r.sock,
                "napi": crate::report::napi_json(&napi),
                "dropped": napi.dropped,
                "frames_total": r.frames_total,
                "frames_home": r.frames_home,
                "snmp": r.snmp.to_json(),
                "tx": r.tx,
            })
        });
        println!(
            "{}",
            serde_json::json!({
                "elapsed_s": elapsed.as_secs_f64(),
                "socket_kind": format!("{:?}", a.socket).to_lowercase(),
                "perf": perf_json,
                "path": path,
            })
        );
    } else {
        println!(
            "quic: {:.1}s, {} connection(s), {} stream(s) answered ({} failed), {} bytes in, {} bytes out",
            elapsed.as_secs_f64(),
            ld(&stats.connections),
            ld(&stats.streams),
            ld(&stats.failed),
            ld(&stats.bytes_in),
            ld(&stats.bytes_out),
        );
        if let (Some(r), Some(s)) = (rep, socket) {
            let napi = r.napi_total();
            println!(
                "path: {} reads ({} busy polls, {} sleeps); NAPI received {} frames, delivered {}, dropped {}; frames home {}/{}",
                s.read,
                s.busy_polls,
                s.sleeps,
                napi.received,
                napi.delivered,
                napi.dropped.total(),
                r.frames_home,
                r.frames_total
            );
            print!("{}", r.snmp.table());
        }
    }
}

/// `rxpath quic`: run the QUIC server.
pub fn quic(a: QuicArgs) -> anyhow::Result<ExitCode> {
    if let Some(server) = a.connect {
        return client(&a, server);
    }
    let iface = a.iface.clone().unwrap_or_default();
    let addr = SocketAddr::new(a.bind, a.port);
    let host = start_host(&a, &iface)?;
    // Ctrl-C ends the wait below at once (no polling of a flag: an idle
    // server's main thread sleeps).
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    ctrlc::set_handler(move || {
        let _ = stop.send(());
    })
    .context("installing the Ctrl-C handler")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let stats = Arc::new(perf::ServerStats::default());
    let (scfg, _cert) = perf::self_signed_server()?;
    let (endpoint, sock) = {
        let _g = rt.enter();
        match &host {
            Some(h) => {
                let sock = h.udp_bind(addr).context("binding the QUIC socket")?;
                sock.set_busy_poll(a.busy_poll);
                sock.set_rcvbuf(RCVBUF);
                let ep = quinn::Endpoint::new_with_abstract_socket(
                    quinn::EndpointConfig::default(),
                    Some(scfg),
                    Arc::new(RxpathSocket::new(sock.clone())),
                    Arc::new(quinn::TokioRuntime),
                )?;
                (ep, Some(sock))
            }
            None => {
                let s = std::net::UdpSocket::bind(addr).context("binding the kernel socket")?;
                rxpath_os::sched::set_rcvbuf(&s, RCVBUF)?;
                if a.busy_poll > 0 {
                    rxpath_os::udp::set_busy_poll(&s, a.busy_poll)?;
                }
                let ep = quinn::Endpoint::new(
                    quinn::EndpointConfig::default(),
                    Some(scfg),
                    s,
                    Arc::new(quinn::TokioRuntime),
                )?;
                (ep, None)
            }
        }
    };
    eprintln!(
        "rxpath quic: perf server (ALPN perf, self-signed certificate for localhost) on {} {addr}",
        match &host {
            Some(h) => format!("rxpath {}", h.backend()),
            None => "the kernel's socket".to_string(),
        }
    );
    let start = Instant::now();
    let end = a.duration.map(|d| start + d);
    rt.spawn(perf::serve(endpoint.clone(), stats.clone()));
    let _ = match end {
        Some(e) => stopped.recv_timeout(e.saturating_duration_since(Instant::now())),
        None => stopped
            .recv()
            .map_err(|_| std::sync::mpsc::RecvTimeoutError::Disconnected),
    };
    endpoint.close(0u32.into(), b"server stops");
    rt.block_on(async {
        let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
    });
    drop(endpoint);
    rt.shutdown_timeout(Duration::from_secs(1));
    let elapsed = start.elapsed();
    let ld = |x: &std::sync::atomic::AtomicU64| x.load(Ordering::Relaxed);
    let perf_json = serde_json::json!({
        "connections": ld(&stats.connections),
        "streams": ld(&stats.streams),
        "bytes_in": ld(&stats.bytes_in),
        "bytes_out": ld(&stats.bytes_out),
        "failed_streams": ld(&stats.failed),
    });
    let socket = sock.as_ref().map(|s| s.counters());
    drop(sock);
    let rep = host.map(Host::shutdown);
    let lost = rep
        .as_ref()
        .is_some_and(|r| r.frames_home != r.frames_total);
    print_report(
        &a,
        elapsed,
        &stats,
        perf_json,
        socket.as_ref(),
        rep.as_ref(),
    );
    if lost {
        eprintln!("rxpath quic: frames lost");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// The perf client: one upload stream, one download stream, then timed
/// small requests, on the kernel's socket; a JSON line (or text) with the
/// rates and the latencies.
fn client(a: &QuicArgs, server: SocketAddr) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let r = rt.block_on(async {
        let bind: SocketAddr = match server {
            SocketAddr::V4(_) => "0.0.0.0:0".parse()?,
            SocketAddr::V6(_) => "[::]:0".parse()?,
        };
        let mut ep = quinn::Endpoint::client(bind)?;
        ep.set_default_client_config(perf::client_insecure()?);
        let conn = tokio::time::timeout(
            Duration::from_secs(5),
            ep.connect(server, "localhost")?,
        )
        .await
        .context("handshake timed out")??;
        let mut out = serde_json::Map::new();
        for (name, up, down) in [("upload", a.upload, 0), ("download", 0, a.download)] {
            let bytes = up + down;
            if bytes == 0 {
                continue;
            }
            let t = Instant::now();
            perf::request(&conn, up, down).await?;
            let s = t.elapsed().as_secs_f64();
            out.insert(
                name.into(),
                serde_json::json!({"bytes": bytes, "seconds": s, "gbit_s": bytes as f64 * 8.0 / s / 1e9}),
            );
        }
        if a.requests > 0 {
            let mut lat = Vec::with_capacity(a.requests as usize);
            for _ in 0..a.requests {
                let t = Instant::now();
                perf::request(&conn, 32, 32).await?;
                lat.push(t.elapsed().as_nanos() as u64);
            }
            lat.sort_unstable();
            let q = |f: f64| lat[((lat.len() as f64 * f) as usize).min(lat.len() - 1)] as f64 / 1e3;
            out.insert(
                "requests".into(),
                serde_json::json!({"n": a.requests, "p50_us": q(0.5), "p90_us": q(0.9), "p99_us": q(0.99), "p999_us": q(0.999)}),
            );
        }
        let stats = conn.stats();
        out.insert(
            "lost_packets".into(),
            serde_json::json!(stats.path.lost_packets),
        );
        conn.close(0u32.into(), b"done");
        ep.wait_idle().await;
        anyhow::Ok(serde_json::Value::Object(out))
    })?;
    if a.json {
        println!("{r}");
    } else {
        println!("quic client: {r}");
    }
    Ok(ExitCode::SUCCESS)
}
