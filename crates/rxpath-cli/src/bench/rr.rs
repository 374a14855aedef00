//! `rxpath bench rr`: UDP request/response on the lab veth with `sockperf
//! ping-pong` as the client in the peer namespace, against rxpath echo
//! (busy polling, busy polling with the interrupt deferred, sleeping) and
//! the kernel's UDP socket (`sockperf server`, plain and with
//! `net.core.busy_read`/`busy_poll`). One run, the same message size,
//! rounds interleaved; medians of each configuration are compared.

use crate::bench::median;
use crate::echo::EchoServer;
use crate::opts::{BackendArg, EchoArgs, ModeArg, RrArgs};
use anyhow::{bail, Context, Result};
use rxpath_dev::sys::sched;
use rxpath_runtime::lab::{Topology, HOST_ADDR};
use std::process::{Child, Command, ExitCode, Stdio};

pub(crate) const PORT: u16 = 11111;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Server {
    RxpathBusy,
    RxpathPrefer,
    RxpathXsk,
    RxpathSleep,
    RxpathPacket,
    Kernel,
    KernelBusy,
}

impl Server {
    const ALL: [Server; 7] = [
        Server::RxpathBusy,
        Server::RxpathPrefer,
        Server::RxpathXsk,
        Server::RxpathSleep,
        Server::RxpathPacket,
        Server::Kernel,
        Server::KernelBusy,
    ];

    fn key(self) -> &'static str {
        match self {
            Server::RxpathBusy => "busy",
            Server::RxpathPrefer => "prefer",
            Server::RxpathXsk => "xsk",
            Server::RxpathSleep => "sleep",
            Server::RxpathPacket => "packet",
            Server::Kernel => "kernel",
            Server::KernelBusy => "kernel-busy",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Server::RxpathBusy => "rxpath echo, busy poll",
            Server::RxpathPrefer => "rxpath echo, busy poll + prefer",
            Server::RxpathXsk => "rxpath echo, busy poll + XSK busy poll",
            Server::RxpathSleep => "rxpath echo, sleeping",
            Server::RxpathPacket => "rxpath echo --mode packet, busy poll",
            Server::Kernel => "kernel UDP (sockperf server)",
            Server::KernelBusy => "kernel UDP, busy_read/busy_poll",
        }
    }
}

/// One client run as sockperf reports it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Measure {
    pub(crate) rt_per_s: f64,
    pub(crate) avg_us: f64,
    pub(crate) p99_us: f64,
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\x1b' {
            for d in it.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn field(text: &str, key: &str) -> Option<f64> {
    let i = text.find(key)? + key.len();
    let rest = text[i..].trim_start_matches([' ', '=']);
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// Parse `sockperf ping-pong --full-rtt` output.
fn parse_sockperf(out: &str) -> Option<Measure> {
    let t = strip_ansi(out);
    let valid = &t[t.find("[Valid Duration]")?..];
    let secs = field(valid, "RunTime")?;
    let recv = field(valid, "ReceivedMessages")?;
    Some(Measure {
        rt_per_s: recv / secs.max(1e-9),
        avg_us: field(&t, "avg-rtt")?,
        p99_us: field(&t, "percentile 99.000")?,
    })
}

pub(crate) fn client(
    t: &Topology,
    secs: u64,
    size: usize,
    cpu: Option<usize>,
) -> Result<Option<Measure>> {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &t.ns]);
    if let Some(c) = cpu {
        cmd.args(["taskset", "-c", &c.to_string()]);
    }
    let out = cmd
        .args([
            "sockperf",
            "ping-pong",
            "-i",
            HOST_ADDR,
            "-p",
            &PORT.to_string(),
        ])
        .args([
            "-t",
            &secs.to_string(),
            "-m",
            &size.to_string(),
            "--full-rtt",
        ])
        .output()
        .context("running the sockperf client")?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(parse_sockperf(&text))
}

/// Wait until the server answers (an XDP attach or a fresh ARP entry takes
/// a moment), with short client runs: any answer counts (a 1-second run
/// can end with no observations sockperf calls valid).
pub(crate) fn ready(t: &Topology, size: usize) -> Result<bool> {
    for _ in 0..8 {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &t.ns,
                "sockperf",
                "ping-pong",
                "-i",
                HOST_ADDR,
            ])
            .args(["-p", &PORT.to_string(), "-t", "1", "-m", &size.to_string()])
            .output()
            .context("running the sockperf client")?;
        let text = strip_ansi(&String::from_utf8_lossy(&out.stdout));
        if field(&text, "ReceivedMessages").is_some_and(|n| n > 0.0) {
            return Ok(true);
        }
    }
    Ok(false)
}

pub(crate) fn write_sysctl(name: &str, v: &str) -> Result<()> {
    std::fs::write(format!("/proc/sys/net/core/{name}"), v)
        .with_context(|| format!("setting net.core.{name}"))
}

pub(crate) fn read_sysctl(name: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "0".into())
}

/// Restores what a configuration changed on every way out.
struct Restore {
    busy: (String, String),
    iface: String,
}

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = write_sysctl("busy_read", &self.busy.0);
        let _ = write_sysctl("busy_poll", &self.busy.1);
        let _ = Command::new("ethtool")
            .args(["-K", &self.iface, "gro", "off"])
            .stderr(Stdio::null())
            .status();
    }
}

enum Running {
    Rxpath(Box<EchoServer>),
    Kernel(Child),
}

fn start(s: Server, t: &Topology, a: &RrArgs, cpu: Option<usize>) -> Result<Running> {
    match s {
        Server::Kernel | Server::KernelBusy => {
            let busy = if s == Server::KernelBusy {
                a.busy_poll.to_string()
            } else {
                "0".into()
            };
            write_sysctl("busy_read", &busy)?;
            write_sysctl("busy_poll", &busy)?;
            // Kernel busy polling needs a NAPI on the veth: GRO gives it one.
            let gro = if s == Server::KernelBusy { "on" } else { "off" };
            Command::new("ethtool")
                .args(["-K", &t.host_if, "gro", gro])
                .status()
                .context("ethtool")?;
            let mut cmd = match cpu {
                Some(c) => {
                    let mut t = Command::new("taskset");
                    t.args(["-c", &c.to_string(), "sockperf"]);
                    t
                }
                None => Command::new("sockperf"),
            };
            let child = cmd
                .args(["server", "-i", HOST_ADDR, "-p", &PORT.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting sockperf server")?;
            Ok(Running::Kernel(child))
        }
        _ => {
            let (busy, prefer, xsk) = match s {
                Server::RxpathBusy => (a.busy_poll, 0, 0),
                Server::RxpathPrefer => (a.busy_poll, a.prefer_ns, 0),
                Server::RxpathXsk => (a.busy_poll, 0, a.busy_poll),
                Server::RxpathPacket => (a.busy_poll, 0, 0),
                _ => (0, 0, 0),
            };
            let args = EchoArgs {
                busy_poll: busy,
                prefer_busy_poll: prefer,
                xdp_busy_poll: xsk,
                // The fallback where XDP cannot be used: AF_PACKET, with a
                // frame handed over as soon as the kernel wrote it.
                mode: if s == Server::RxpathPacket {
                    BackendArg::Packet
                } else {
                    BackendArg::Xdp
                },
                ..echo_args(&t.host_if)
            };
            // Started from a thread pinned to the server CPU: every thread
            // of the host inherits it.
            let h = std::thread::spawn(move || {
                if let Some(c) = cpu {
                    core_affinity_pin(c);
                }
                EchoServer::start(&args)
            });
            let server = h
                .join()
                .map_err(|_| anyhow::anyhow!("echo start panicked"))??;
            Ok(Running::Rxpath(Box::new(server)))
        }
    }
}

/// `rxpath echo` as the request/response benches run it: AF_XDP on
/// `iface`, one queue, one reader, one NAPI thread, sockperf mode on
/// [`PORT`], interrupts, no busy polling, no steering.
pub(crate) fn echo_args(iface: &str) -> EchoArgs {
    EchoArgs {
        iface: iface.to_string(),
        mode: BackendArg::Xdp,
        bind: std::net::Ipv4Addr::UNSPECIFIED.into(),
        port: PORT,
        queues: Some(1),
        threads: 1,
        napi_threads: 1,
        busy_poll: 0,
        napi: ModeArg::Interrupt,
        prefer_busy_poll: 0,
        xdp_busy_poll: 0,
        sockperf: true,
        no_verify_csum: false,
        csum: Default::default(),
        filt: Default::default(),
        steer: Default::default(),
        metrics: None,
        metrics_hold: None,
        reader_cpus: None,
        only_v6: false,
        xdp_take: crate::opts::EchoTake::Port,
        duration: None,
        json: false,
    }
}

fn core_affinity_pin(cpu: usize) {
    let _ = sched::pin(0, cpu);
}

fn stop(r: Running) -> Result<String> {
    match r {
        Running::Rxpath(s) => {
            let rep = s.stop()?;
            if rep.host.frames_home != rep.host.frames_total {
                bail!(
                    "rxpath echo lost frames: {}/{} home",
                    rep.host.frames_home,
                    rep.host.frames_total
                );
            }
            Ok(format!(
                "busy-poll packets {}, sleeps {}",
                rep.host.sock.busy_poll_packets, rep.socket.sleeps
            ))
        }
        Running::Kernel(mut c) => {
            let _ = c.kill();
            let _ = c.wait();
            Ok(String::new())
        }
    }
}

/// A request/response bench needs root (a veth lab, XDP) and sockperf (the
/// client and the kernel's server); say which is missing.
pub(crate) fn require_root_and_sockperf(bench: &str, why_root: &str) -> Result<()> {
    if !sched::is_root() {
        bail!("bench {bench} needs root ({why_root}): run it with sudo");
    }
    if Command::new("sockperf")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_err()
    {
        bail!("bench {bench} needs sockperf (the client and the kernel's server): apt-get install sockperf");
    }
    Ok(())
}

pub fn rr(a: RrArgs) -> Result<ExitCode> {
    require_root_and_sockperf("rr", "it builds a veth lab and attaches XDP")?;
    let t = Topology {
        ns: "rxp-rr".into(),
        host_if: "rxprr0".into(),
        peer_if: "rxprr1".into(),
        queues: 1,
        gro: false,
        threaded: false,
    };
    let guard = t.up_scoped()?;
    let t = &guard.0;
    let _restore = Restore {
        busy: (read_sysctl("busy_read"), read_sysctl("busy_poll")),
        iface: t.host_if.clone(),
    };
    // The peer keeps its checksum offload (the default): its partial
    // checksums are trusted as the kernel trusts them (`--csum auto`).
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (client_cpu, server_cpu) = if ncpu >= 2 {
        (Some(0), Some(ncpu - 1))
    } else {
        (None, None)
    };
    println!(
        "rxpath bench rr: sockperf ping-pong, {}-byte UDP, {}s per run, {} round(s); veth {} <- {} (netns {}); client on CPU {}, server on CPU {}; busy poll {} µs, prefer {} ns",
        a.size,
        a.duration.as_secs(),
        a.rounds,
        t.host_if,
        t.peer_if,
        t.ns,
        client_cpu.map_or("any".into(), |c| c.to_string()),
        server_cpu.map_or("any".into(), |c| c.to_string()),
        a.busy_poll,
        a.prefer_ns
    );
    for k in &a.servers {
        if !Server::ALL.iter().any(|s| s.key() == k) {
            bail!("unknown server {k:?}: busy, prefer, xsk, sleep, kernel, kernel-busy");
        }
    }
    let chosen = |s: Server| {
        a.servers.is_empty() || s == Server::Kernel || a.servers.iter().any(|k| k == s.key())
    };
    // results[round][config]: None when the configuration was not run or
    // got no answer that round.
    let mut results: Vec<Vec<Option<Measure>>> = Vec::new();
    for round in 0..a.rounds {
        let mut row = vec![None; Server::ALL.len()];
        for (i, &s) in Server::ALL.iter().enumerate() {
            if !chosen(s) {
                continue;
            }
            let r = start(s, t, &a, server_cpu)?;
            let m = if ready(t, a.size)? {
                client(t, a.duration.as_secs().max(1), a.size, client_cpu)?
            } else {
                None
            };
            let note = stop(r)?;
            match m {
                Some(m) => {
                    println!(
                        "  round {round}: {:40} {:9.0} round trips/s  avg {:6.2} µs  p99 {:6.2} µs  {note}",
                        s.name(),
                        m.rt_per_s,
                        m.avg_us,
                        m.p99_us
                    );
                    row[i] = Some(m);
                }
                None => println!("  round {round}: {:40} no answer", s.name()),
            }
        }
        results.push(row);
    }
    let at = |s: Server| Server::ALL.iter().position(|&x| x == s).unwrap_or(0);
    let (k, kb) = (at(Server::Kernel), at(Server::KernelBusy));
    // A ratio is taken inside each round, then the median over rounds.
    let ratio = |i: usize, base: usize, f: fn(&Measure) -> f64| {
        let v: Vec<f64> = results
            .iter()
            .filter_map(|row| match (row[i], row[base]) {
                (Some(m), Some(b)) if f(&b) > 0.0 => Some(f(&m) / f(&b)),
                _ => None,
            })
            .collect();
        if v.is_empty() {
            f64::NAN
        } else {
            median(v)
        }
    };
    println!(
        "\n{:40} {:>12} {:>9} {:>9} {:>12} {:>10} {:>13}",
        "median over rounds",
        "round trips/s",
        "avg µs",
        "p99 µs",
        "x kernel RT/s",
        "x kernel p99",
        "x k-busy RT/s"
    );
    for (i, s) in Server::ALL.iter().enumerate() {
        if !chosen(*s) {
            continue;
        }
        let col = |f: fn(&Measure) -> f64| {
            median(
                results
                    .iter()
                    .filter_map(|row| row[i])
                    .map(|m| f(&m))
                    .collect(),
            )
        };
        println!(
            "{:40} {:>12.0} {:>9.2} {:>9.2} {:>12.2}x {:>9.2}x {:>12.2}x",
            s.name(),
            col(|m| m.rt_per_s),
            col(|m| m.avg_us),
            col(|m| m.p99_us),
            ratio(i, k, |m| m.rt_per_s),
            ratio(i, k, |m| m.p99_us),
            ratio(i, kb, |m| m.rt_per_s),
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sockperf_output() {
        let out = "sockperf: \x1b[2;35m== version #3.7-no.git == \x1b[0m\n\
            sockperf: [Total Run] RunTime=1.000 sec; Warm up time=400 msec; SentMessages=70186; ReceivedMessages=70185\n\
            sockperf: [Valid Duration] RunTime=0.550 sec; SentMessages=42466; ReceivedMessages=42466\n\
            sockperf: \x1b[2;35m====> avg-rtt=12.931 (std-dev=5.836)\x1b[0m\n\
            sockperf: ---> percentile 99.000 =   19.745\n";
        let m = parse_sockperf(out).unwrap();
        assert!((m.rt_per_s - 42466.0 / 0.55).abs() < 1.0);
        assert_eq!(m.avg_us, 12.931);
        assert_eq!(m.p99_us, 19.745);
        assert!(parse_sockperf("sockperf: No messages were received").is_none());
    }
}
