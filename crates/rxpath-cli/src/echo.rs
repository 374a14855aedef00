//! `rxpath echo`: a UDP echo server on rxpath sockets.
//!
//! Application threads read one socket with `recv_batch` (busy-polling the
//! socket's NAPI first with `--busy-poll`) and answer with `send_batch`. In
//! `--sockperf` mode the answer is what the sockperf client expects: the
//! message back with its header's client bit cleared.

use crate::opts::*;
use crate::sockperf::sockperf_reply;
use anyhow::Context;
use clap::{Args, ValueEnum};
use rxpath_core::sock::SockError;
use rxpath_dev::sys::xdp::XdpFilter;
use rxpath_runtime::UdpSocket;
use rxpath_runtime::{Host, HostConfig, HostDevice};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// How `rxpath echo`'s replies leave on AF_XDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EchoTx {
    /// The AF_XDP TX ring of queue 0's socket.
    Ring,
    /// An AF_PACKET socket on the interface.
    Packet,
}

/// What the XDP program of `rxpath echo` takes from the interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EchoTake {
    /// UDP to the echo port (IPv4 with or without options, IPv6 after
    /// its extension headers, untagged or priority-tagged) and UDP
    /// fragments, which echo reassembles; everything else goes to the
    /// kernel.
    Port,
    /// Every frame: the kernel sees nothing on the interface (no ARP, no
    /// ND: use static neighbour entries on the peer).
    All,
}

/// `rxpath echo`: a UDP echo server on rxpath sockets.
///
/// In packet mode (AF_PACKET) the kernel still receives every frame: it
/// answers ARP, ND, ping and TCP as usual; a kernel UDP socket with a
/// drop-all filter holds the echo port so that it neither answers the
/// datagrams rxpath serves nor sends ICMP port unreachable for them (it
/// counts them in its own `Udp: InErrors`). Frames the host itself sends
/// are not received (PACKET_IGNORE_OUTGOING).
#[derive(Debug, Clone, Args)]
pub struct EchoArgs {
    /// Interface to serve on.
    #[arg(long)]
    pub iface: String,
    /// Backend: auto (AF_XDP, else AF_PACKET), xdp or packet.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub mode: BackendArg,
    /// Address to bind (0.0.0.0 or :: for any; :: is dual-stack: IPv4
    /// peers are answered too, unless --only-v6).
    #[arg(long, default_value = "0.0.0.0")]
    pub bind: std::net::IpAddr,
    /// IPV6_V6ONLY on a socket bound to ::.
    #[arg(long)]
    pub only_v6: bool,
    /// UDP port (sockperf's default is 11111); with --tcp, the TCP port.
    #[arg(long, default_value_t = 11111)]
    pub port: u16,
    /// Serve TCP on --port instead of UDP, on rxpath's TCP: each
    /// connection echoed by a thread of its own (with --sockperf, each
    /// sockperf message that asks for an answer). AF_XDP, or AF_PACKET
    /// steered by a port map: the kernel never sees the port's segments.
    #[arg(long)]
    pub tcp: bool,
    /// Device queues (one NAPI each); default: the interface's RX queues.
    #[arg(long)]
    pub queues: Option<usize>,
    /// Application threads reading the socket.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Pin reader thread t (with --tcp, the t-th connection's thread) to
    /// CPU LIST[t % len] (e.g. 1 or 0,1): with --steer rfs its packets then
    /// go to that CPU's worker.
    #[arg(long, value_name = "LIST")]
    pub reader_cpus: Option<String>,
    /// NAPI threads (0 = none: only busy-polling readers move packets).
    #[arg(long, default_value_t = 1)]
    pub napi_threads: usize,
    /// Busy-poll for US µs in recv before sleeping (SO_BUSY_POLL; 0 = off).
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub busy_poll: u32,
    /// NAPI threads sleep until an interrupt, or poll continuously.
    #[arg(long, value_enum, default_value_t = ModeArg::Interrupt)]
    pub napi: ModeArg,
    /// Prefer busy polling: after a busy poll keep the queue's interrupt
    /// masked for NS ns (the kernel's SO_PREFER_BUSY_POLL with
    /// napi_defer_hard_irqs and gro_flush_timeout); 0 = off.
    #[arg(long, value_name = "NS", default_value_t = 0)]
    pub prefer_busy_poll: u64,
    /// gro_flush_timeout in ns (0: GRO flushes at every completion; the
    /// NAPI timer's period with --defer-hard-irqs).
    #[arg(long, value_name = "NS", default_value_t = 0)]
    pub gro_flush_timeout: u64,
    /// napi_defer_hard_irqs (interrupt mitigation): after a poll that
    /// found packets the interrupt stays masked and the NAPI timer polls
    /// every --gro-flush-timeout ns, until N polls in a row find nothing.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub defer_hard_irqs: u32,
    /// AF_XDP: also let the kernel busy-poll the queue for US µs
    /// (SO_PREFER_BUSY_POLL, SO_BUSY_POLL on the XSK).
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub xdp_busy_poll: u32,
    /// Answer the sockperf client: clear the client bit (0x1) of its
    /// header's flags, and answer only messages that ask for a reply.
    #[arg(long)]
    pub sockperf: bool,
    /// UDP checksums: auto trusts what the device verified or marked
    /// partial (a local sender's offload: AF_PACKET says so; on AF_XDP a
    /// veth/tun/bridge's partial checksum is known by its value) and
    /// verifies the rest; verify checks every one; trust none.
    #[arg(long, value_parser = clap::value_parser!(rxpath_core::ip::CsumPolicy), default_value = "auto")]
    pub csum: rxpath_core::ip::CsumPolicy,
    /// Same as --csum trust.
    #[arg(long, hide = true)]
    pub no_verify_csum: bool,
    /// AF_XDP: what the XDP program takes (port: UDP to --port; all: every
    /// frame).
    #[arg(long, value_enum, default_value_t = EchoTake::Port)]
    pub xdp_take: EchoTake,
    /// Stop after this long: 5, 5s, 500ms, 1m (default: run until Ctrl-C).
    #[arg(long, value_name = "DURATION", value_parser = crate::parse::parse_duration)]
    pub duration: Option<Duration>,
    /// How replies leave on AF_XDP: `ring`, an AF_XDP TX ring on queue 0,
    /// on queue 0's UMEM (no trip through the kernel's stack), or `packet`, an
    /// AF_PACKET socket on the interface (what AF_PACKET mode always uses).
    #[arg(long, value_enum, default_value_t = EchoTx::Ring)]
    pub tx: EchoTx,
    /// Fault injection: the TX ring stops completing for MS milliseconds at
    /// a time (every --tx-stall-every); replies then find no free frame and
    /// are counted (SndbufErrors, xsk_tx_busy), nothing is lost.
    #[arg(long, value_name = "MS")]
    pub tx_stall: Option<u64>,
    /// How often a --tx-stall begins, in ms.
    #[arg(long, value_name = "MS", default_value_t = 200)]
    pub tx_stall_every: u64,
    /// The INPUT filter.
    #[command(flatten)]
    pub filt: crate::filter::FilterArgs,
    /// Steering to workers (RPS/RFS, spread).
    #[command(flatten)]
    pub steer: crate::steer::SteerArgs,
    /// Serve Prometheus metrics at http://ADDR/metrics (see rxpath run).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:9464")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Keep serving the final metrics this long after echo stops.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub metrics_hold: Option<Duration>,
    /// Print the final report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// A running echo server.
pub struct EchoServer {
    host: Host,
    filter: Option<crate::filter::Loaded>,
    /// The UDP socket (`None` with `--tcp`).
    sock: Option<UdpSocket>,
    /// The TCP echo (`--tcp`).
    tcp: Option<crate::echo_tcp::TcpEcho>,
    stop: Arc<AtomicBool>,
    /// The `--tx-stall` schedule's thread.
    fault: Option<thread::JoinHandle<u64>>,
    readers: Vec<thread::JoinHandle<anyhow::Result<()>>>,
    echoed: Arc<AtomicU64>,
    start: Instant,
}

/// What an echo server did.
pub struct EchoReport {
    /// How long it ran.
    pub elapsed: Duration,
    /// Datagrams echoed.
    pub echoed: u64,
    /// The socket's counters.
    pub socket: rxpath_core::sock::SockCounters,
    /// The host's report.
    pub host: rxpath_runtime::HostReport,
    /// Per-rule filter counters, if a filter ran.
    pub filter: Option<serde_json::Value>,
    /// TX stalls injected (`--tx-stall`).
    pub tx_stalls: u64,
}

/// `rxpath echo`'s live knobs (`rxpath ctl`): the echo socket's
/// `SO_BUSY_POLL`, the host's `net.core.busy_read` (sockets that set no
/// busy-poll time), the prefer-busy-poll deferral of every NAPI
/// (`napi_defer_hard_irqs` with `gro_flush_timeout` in the kernel), and
/// the device's `gro_flush_timeout` and `napi_defer_hard_irqs`
/// (interrupt mitigation).
pub struct EchoKnobs {
    sock: Option<UdpSocket>,
    host: rxpath_runtime::ctl::HostKnobs,
}

impl crate::ctl::Knobs for EchoKnobs {
    fn values(&self) -> Vec<(&'static str, u64)> {
        let mut v: Vec<_> = self
            .sock
            .iter()
            .map(|s| ("busy_poll", s.busy_poll() as u64))
            .collect();
        v.extend(self.host.values());
        v
    }

    fn set(&self, name: &str, v: u64) -> Result<(), String> {
        match name {
            "busy_poll" if v <= 1_000_000 && self.sock.is_some() => {
                self.sock.iter().for_each(|s| s.set_busy_poll(v as u32))
            }
            "busy_poll" => return Err(format!("{v} is out of range")),
            _ => return self.host.set(name, v),
        }
        Ok(())
    }
}

/// `--defer-hard-irqs` without `--gro-flush-timeout` defers nothing (the
/// kernel's rule: the timer is what polls while the line is masked): say
/// so rather than run without what was asked.
pub(crate) fn warn_deferral_off(defer_hard_irqs: u32, gro_flush_timeout: u64) {
    if defer_hard_irqs > 0 && gro_flush_timeout == 0 {
        eprintln!(
            "rxpath: --defer-hard-irqs {defer_hard_irqs} has no effect without --gro-flush-timeout NS (the NAPI timer's period), as in the kernel; interrupts are not deferred"
        );
    }
}

impl EchoServer {
    /// The knobs a control socket changes while it runs.
    pub fn knobs(&self) -> EchoKnobs {
        EchoKnobs {
            sock: self.sock.clone(),
            host: rxpath_runtime::ctl::HostKnobs::of(&self.host),
        }
    }

    /// Start the host and the reader threads. Threads inherit the calling
    /// thread's CPU affinity (the bench pins a thread and starts it there).
    pub fn start(a: &EchoArgs) -> anyhow::Result<EchoServer> {
        if a.threads == 0 {
            anyhow::bail!("--threads must be at least 1");
        }
        let mut cfg = HostConfig {
            queues: a.queues.unwrap_or(0),
            napi_threads: a.napi_threads,
            interrupts: matches!(a.napi, ModeArg::Interrupt),
            prefer_busy_poll_ns: a.prefer_busy_poll,
            gro_flush_timeout_ns: a.gro_flush_timeout,
            defer_hard_irqs: a.defer_hard_irqs,
            ..HostConfig::default()
        };
        if a.tx == EchoTx::Packet {
            cfg.xdp_tx_frames = 0;
        }
        cfg.sock.busy_read_us = a.busy_poll;
        if a.steer.stop_worker.is_some() {
            anyhow::bail!("--stop-worker is for rxpath run; echo's workers run until it stops");
        }
        cfg.steer = a.steer.config(0)?;
        warn_deferral_off(a.defer_hard_irqs, a.gro_flush_timeout);
        cfg.sock.csum = if a.no_verify_csum {
            rxpath_core::ip::CsumPolicy::Trust
        } else {
            a.csum
        };
        cfg.tcp = a.tcp;
        let filter = match a.xdp_take {
            // TCP: the port the listener takes in the port map.
            EchoTake::Port if a.tcp => XdpFilter {
                protocol: Some(6),
                port_map: true,
                ..XdpFilter::default()
            },
            // And UDP fragments, whatever their port (a later fragment
            // carries none): echo has no kernel socket behind its own,
            // so it reassembles them itself.
            EchoTake::Port => XdpFilter {
                protocol: Some(17),
                dst_port: Some(a.port),
                fragments: true,
                ..XdpFilter::default()
            },
            EchoTake::All => XdpFilter {
                all: true,
                ..XdpFilter::default()
            },
        };
        let mut dev = device(&a.iface, a.mode, filter, a.xdp_busy_poll);
        if let (HostDevice::Packet { filter: f, .. }, true) = (&mut dev, a.tcp) {
            // The kernel must not see (and reset) rxpath's connections.
            *f = Some(filter);
        }
        let filter = crate::filter::Loaded::load(&a.filt, &a.iface)?;
        cfg.sock.filter = filter.as_ref().map(|f| f.handle.clone());
        let host = Host::start(cfg, dev)?;
        let stop = Arc::new(AtomicBool::new(false));
        let fault = match a.tx_stall {
            None => None,
            Some(ms) => {
                let Some(switch) = host.tx_stop_completing() else {
                    anyhow::bail!(
                        "--tx-stall needs replies through the AF_XDP TX ring (--tx ring on AF_XDP)"
                    );
                };
                Some(tx_stalls(switch, ms, a.tx_stall_every, stop.clone())?)
            }
        };
        let addr = SocketAddr::new(a.bind, a.port);
        let echoed = Arc::new(AtomicU64::new(0));
        let cpus = match &a.reader_cpus {
            Some(l) => crate::steer::parse_list(l).map_err(anyhow::Error::msg)?,
            None => Vec::new(),
        };
        if a.tcp {
            let (st, e) = (stop.clone(), echoed.clone());
            let how = (a.busy_poll, a.sockperf);
            let tcp = crate::echo_tcp::TcpEcho::start(&host, addr, how, cpus, st, e)
                .context("listening on the echo port")?;
            return Ok(EchoServer {
                host,
                filter,
                sock: None,
                tcp: Some(tcp),
                stop,
                fault,
                readers: Vec::new(),
                echoed,
                start: Instant::now(),
            });
        }
        let sock = host.udp_bind(addr).context("binding the echo socket")?;
        sock.set_busy_poll(a.busy_poll);
        sock.set_only_v6(a.only_v6);
        sock.set_read_timeout(Some(Duration::from_millis(100)));
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        let readers = (0..a.threads)
            .map(|t| {
                let (sock, stop, echoed) = (sock.clone(), stop.clone(), echoed.clone());
                let sockperf = a.sockperf;
                let core = (!cpus.is_empty())
                    .then(|| {
                        cores
                            .iter()
                            .find(|c| c.id == cpus[t % cpus.len()] as usize)
                            .copied()
                    })
                    .flatten();
                thread::Builder::new()
                    .name(format!("rxpath-echo/{t}"))
                    .spawn(move || {
                        if let Some(c) = core {
                            core_affinity::set_for_current(c);
                        }
                        serve(&sock, sockperf, &stop, &echoed)
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(EchoServer {
            host,
            filter,
            sock: Some(sock),
            tcp: None,
            stop,
            fault,
            readers,
            echoed,
            start: Instant::now(),
        })
    }

    /// Reload the filter if SIGHUP asked for it.
    pub fn poll_reload(&self) {
        if let Some(f) = &self.filter {
            f.poll_reload();
        }
    }

    /// The backend and address, for a banner.
    pub fn describe(&self) -> String {
        let at = match (&self.sock, &self.tcp) {
            (Some(s), _) => format!("UDP {}", s.local_addr()),
            (None, Some(t)) => format!("TCP {}", t.local_addr()),
            (None, None) => "nothing".into(),
        };
        format!("{} on {at}", self.host.backend())
    }

    /// Stop the readers and the host; every frame is counted home.
    pub fn stop(self) -> anyhow::Result<EchoReport> {
        self.stop.store(true, Ordering::Release);
        let mut err = None;
        for r in self.readers {
            match r.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => err = Some(e),
                Err(_) => err = Some(anyhow::anyhow!("a reader thread panicked")),
            }
        }
        let tx_stalls = self.fault.map_or(0, |h| h.join().unwrap_or(0));
        if let Some(t) = self.tcp {
            t.stop();
        }
        let socket = self.sock.as_ref().map(|s| s.counters()).unwrap_or_default();
        drop(self.sock);
        let elapsed = self.start.elapsed();
        let host = self.host.shutdown();
        if let Some(e) = err {
            return Err(e);
        }
        let filter = match &self.filter {
            Some(f) => {
                f.finish()?;
                Some(f.json())
            }
            None => None,
        };
        Ok(EchoReport {
            elapsed,
            echoed: self.echoed.load(Ordering::Relaxed),
            socket,
            host,
            filter,
            tx_stalls,
        })
    }
}

/// The device a server on `iface` runs on: AF_XDP taking what `filter`
/// takes (with `auto`, AF_PACKET if AF_XDP cannot be set up), or AF_PACKET.
pub(crate) fn device(iface: &str, mode: BackendArg, filter: XdpFilter, busy_us: u32) -> HostDevice {
    match mode {
        BackendArg::Packet => HostDevice::Packet {
            iface: iface.to_string(),
            filter: None,
        },
        m => HostDevice::Xdp {
            iface: iface.to_string(),
            filter,
            fallback: m == BackendArg::Auto,
            xsk_busy_poll_us: busy_us,
        },
    }
}

/// What the server did: JSON (`--json`) or a summary with the SNMP table
/// and the workers.
fn print_report(r: &EchoReport, json: bool) {
    let rep = &r.host;
    let napi = rep.napi_total();
    if json {
        println!(
            "{}",
            serde_json::json!({
                "elapsed_s": r.elapsed.as_secs_f64(),
                "echoed": r.echoed,
                "socket": r.socket,
                "sock": rep.sock,
                "napi": crate::report::napi_json(&napi),
                "frames_total": rep.frames_total,
                "frames_home": rep.frames_home,
                "dropped": napi.dropped,
                "snmp": rep.snmp.to_json(),
                "filter": r.filter,
                "workers": rep.workers,
                "tx": rep.tx,
                "tx_stalls": r.tx_stalls,
                "tcp": rep.tcp,
            })
        );
    } else {
        println!(
            "echo: {:.1}s, {} datagrams read, {} answered; sleeps {}, busy polls {} ({} NAPI polls, {} packets, {:.1} ms); \
             no socket {}, rcvbuf drops {}, bad checksum {}; NAPI received {} in {} polls; frames home {}/{}",
            r.elapsed.as_secs_f64(),
            r.socket.read,
            r.echoed,
            r.socket.sleeps,
            rep.sock.busy_polls,
            rep.sock.busy_poll_loops,
            rep.sock.busy_poll_packets,
            rep.sock.busy_poll_ns as f64 / 1e6,
            rep.sock.no_ports,
            rep.sock.rcvbuf_errors,
            rep.sock.csum_errors,
            napi.received,
            napi.polls,
            rep.frames_home,
            rep.frames_total,
        );
        if let Some(t) = &rep.tcp {
            println!(
                "TCP: passive opens {}, segments in {} out {} retransmitted {}, frames sent {}, no neighbour {}, TX busy {}",
                t.get("Tcp:PassiveOpens"),
                t.get("Tcp:InSegs"),
                t.get("Tcp:OutSegs"),
                t.get("Tcp:RetransSegs"),
                t.tx.frames_sent,
                t.tx.no_neighbour,
                t.tx.tx_busy,
            );
        }
        if !rep.tx.is_empty() {
            let c: Vec<String> = rep.tx.iter().map(|(k, v)| format!("{k} {v}")).collect();
            println!("TX ring: {}; stalls injected {}", c.join(", "), r.tx_stalls);
        }
        print!("{}", rep.snmp.table());
        for w in &rep.workers {
            println!(
                "worker {}: processed {} dropped {} received_rps {} time_squeeze {} wakeups {} delivered {} run_by_readers {}",
                w.worker,
                w.backlog.processed,
                w.backlog.dropped,
                w.backlog.received_rps,
                w.time_squeeze,
                w.wakeups,
                w.path.delivered,
                w.reader_ran
            );
        }
    }
}

/// `rxpath echo`: run an echo server until stopped or `--duration` passes.
pub fn echo(a: EchoArgs) -> anyhow::Result<ExitCode> {
    rxpath_runtime::run::check_caps(&a.iface, a.mode == BackendArg::Xdp)?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::Release))
            .context("installing the Ctrl-C handler")?;
    }
    let server = EchoServer::start(&a)?;
    let control = crate::ctl::Control::start(server.knobs())?;
    eprintln!(
        "rxpath echo: {}, busy poll {} µs, {} reader thread(s){}; live knobs: rxpath ctl (socket {})",
        server.describe(),
        a.busy_poll,
        a.threads,
        if a.sockperf { ", sockperf mode" } else { "" },
        control.path().display()
    );
    let start = Instant::now();
    let end = a.duration.map(|d| start + d);
    let metrics = crate::report::start_metrics(a.metrics)?;
    while !stop.load(Ordering::Acquire) && end.is_none_or(|e| Instant::now() < e) {
        thread::sleep(Duration::from_millis(20));
        server.poll_reload();
        if let Some(m) = &metrics {
            m.sock(server.host.sockets().stats());
        }
    }
    let r = server.stop()?;
    let rep = &r.host;
    if let Some(m) = &metrics {
        m.finish_host(rep);
    }
    print_report(&r, a.json);
    let code = Ok(if rep.frames_home == rep.frames_total {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "rxpath echo: frames lost: {}/{} home",
            rep.frames_home, rep.frames_total
        );
        ExitCode::from(1)
    });
    if let (Some(_), Some(d)) = (&metrics, a.metrics_hold) {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        thread::sleep(d);
    }
    code
}

/// `--tx-stall MS`: a thread that stops the TX ring's completions for MS
/// ms every EVERY ms until `stop`; returns how many stalls it made.
fn tx_stalls(
    switch: Arc<AtomicBool>,
    ms: u64,
    every: u64,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<thread::JoinHandle<u64>> {
    if ms == 0 || every <= ms {
        anyhow::bail!("--tx-stall {ms} needs 0 < MS < --tx-stall-every ({every})");
    }
    let nap = |d: u64, stop: &AtomicBool| {
        let end = Instant::now() + Duration::from_millis(d);
        while !stop.load(Ordering::Acquire) && Instant::now() < end {
            thread::sleep(Duration::from_millis(1));
        }
    };
    Ok(thread::Builder::new()
        .name("rxpath-tx-stall".into())
        .spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Acquire) {
                nap(every - ms, &stop);
                switch.store(true, Ordering::Relaxed);
                n += 1;
                nap(ms, &stop);
                switch.store(false, Ordering::Relaxed);
            }
            n
        })?)
}

/// One reader: take a batch, answer it, until stopped.
fn serve(
    sock: &UdpSocket,
    sockperf: bool,
    stop: &AtomicBool,
    echoed: &AtomicU64,
) -> anyhow::Result<()> {
    const B: usize = 16;
    // Whole datagrams, up to the largest UDP carries (reassembled from
    // fragments, or GRO'd): a buffer of a frame's size would cut them.
    let mut bufs = vec![vec![0u8; 65535]; B];
    let mut meta = [(0usize, SocketAddr::from(([0, 0, 0, 0], 0))); B];
    while !stop.load(Ordering::Acquire) {
        let n = match sock.recv_batch(&mut bufs, |i, m| meta[i] = (m.len, m.src)) {
            Ok(n) => n,
            Err(SockError::TimedOut) => continue,
            Err(SockError::Closed) => break,
            Err(e) => return Err(e.into()),
        };
        let mut keep = [false; B];
        for i in 0..n {
            keep[i] = !sockperf || sockperf_reply(&mut bufs[i][..meta[i].0]);
        }
        let mut msgs: [(&[u8], SocketAddr); B] = [(&[], meta[0].1); B];
        let mut m = 0;
        for i in (0..n).filter(|&i| keep[i]) {
            msgs[m] = (&bufs[i][..meta[i].0], meta[i].1);
            m += 1;
        }
        if m == 0 {
            continue;
        }
        // sendmmsg stops at a datagram it cannot send (no neighbour, no
        // route, a full TX ring, ...): that answer is lost and counted once
        // (SndbufErrors, OutNoRoutes), as a kernel socket's would be, and
        // the rest go on after it. No datagram ends the server.
        let mut i = 0;
        while i < m {
            match sock.send_batch(&msgs[i..m]) {
                Ok(k) => {
                    echoed.fetch_add(k as u64, Ordering::Relaxed);
                    // k < what was asked: the next one failed (counted).
                    i += k + usize::from(i + k < m);
                }
                Err(SockError::Closed) => return Ok(()),
                Err(_) => i += 1,
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockperf_answer_clears_the_client_bit() {
        // seq 7, flags client|pong request, len 14 (a ping-pong message).
        let mut m = [0, 0, 0, 0, 0, 0, 0, 7, 0, 3, 0, 0, 0, 14];
        assert!(sockperf_reply(&mut m));
        assert_eq!(m, [0, 0, 0, 0, 0, 0, 0, 7, 0, 2, 0, 0, 0, 14]);
        // No answer requested (sockperf under-load's other messages).
        let mut m = [0, 0, 0, 0, 0, 0, 0, 8, 0, 1, 0, 0, 0, 14];
        assert!(!sockperf_reply(&mut m));
        assert_eq!(m[9], 1);
        assert!(!sockperf_reply(&mut [0u8; 13]));
    }
}
