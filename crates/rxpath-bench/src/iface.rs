//! `rxpath bench rx-iface`: receivers side by side on the lab topology,
//! one run, the same generator (rxpath gen over AF_XDP TX in the peer
//! namespace) for each.

use crate::figure::{ratio, ratio_cell};
use crate::plot::{Bar, ReportDir};
use anyhow::{bail, Context, Result};
use rxpath_dev::sys::xdp::XdpProgram;
use rxpath_os::sched;
use rxpath_runtime::lab::{Topology, HOST_ADDR, PEER_ADDR};
use rxpath_runtime::{run, GroSettings, IfName, Producer, RunConfig};
use std::io::{BufRead, BufReader};
use std::process::Command;
use std::time::{Duration, Instant};

/// Arguments of this bench.
#[derive(Debug, Clone, clap::Args)]
pub struct RxIfaceArgs {
    /// Generator run per receiver.
    #[arg(long, default_value = "3s", value_parser = rxpath_cli::parse::parse_duration)]
    pub duration: Duration,
    /// The fixed offered rate (packets/s) at which whole-machine CPU per
    /// received packet is compared (one every receiver can take).
    #[arg(long, default_value_t = 100_000)]
    pub cpu_rate: u64,
    /// Generator run per step of the RFC 2544 search.
    #[arg(long, default_value = "1s", value_parser = rxpath_cli::parse::parse_duration)]
    pub step: Duration,
    /// Steps of the RFC 2544 search (a binary search of the offered rate;
    /// 0 skips it).
    #[arg(long, default_value_t = 5)]
    pub steps: u32,
}

/// The receivers, each measured the same way: a generator run against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Receiver {
    XdpSpin,
    XdpSleep,
    Packet,
    KernelUdp,
    KernelUring,
    Dpdk,
    XdpDrop,
}

impl Receiver {
    const ALL: [Receiver; 7] = [
        Receiver::XdpSpin,
        Receiver::XdpSleep,
        Receiver::Packet,
        Receiver::KernelUdp,
        Receiver::KernelUring,
        Receiver::Dpdk,
        Receiver::XdpDrop,
    ];

    fn name(self) -> &'static str {
        match self {
            Receiver::XdpSpin => "rxpath AF_XDP, spinning (--napi poll)",
            Receiver::XdpSleep => "rxpath AF_XDP, sleeping (--napi interrupt)",
            Receiver::Packet => "rxpath AF_PACKET (TPACKET_V3)",
            Receiver::KernelUdp => "kernel UDP socket, recvmmsg",
            Receiver::KernelUring => "kernel UDP socket, io_uring multishot recv",
            Receiver::Dpdk => "DPDK testpmd net_af_xdp rxonly",
            Receiver::XdpDrop => "kernel XDP_DROP (ceiling)",
        }
    }
}

/// One generator run, and what the machine did meanwhile.
#[derive(Debug, Clone, Copy, Default)]
struct GenRun {
    sent: u64,
    secs: f64,
    /// Busy time of every CPU (user, system, irq, softirq, steal) during
    /// the run, the generator included.
    machine: Duration,
    /// The generator's own CPU as the kernel billed it. On a veth the
    /// receiving side's softirq work runs in the sender's system calls and
    /// is billed to the sender too, so `machine - gen` undercounts a
    /// receiver; the XDP_DROP row's `machine` is the fairer baseline.
    gen: Duration,
    /// The receiver's own CPU during the run, when it has its own.
    own: Option<Duration>,
}

/// One receiver against one generator run.
#[derive(Debug, Clone, Copy, Default)]
struct Trial {
    received: u64,
    gen: GenRun,
}

impl Trial {
    fn pps(&self) -> f64 {
        self.received as f64 / self.gen.secs.max(1e-9)
    }
    fn loss(&self) -> f64 {
        1.0 - self.received.min(self.gen.sent) as f64 / self.gen.sent.max(1) as f64
    }
    fn per_pkt(&self, d: Duration) -> Option<f64> {
        (self.received > 0).then(|| d.as_nanos() as f64 / self.received as f64)
    }
    /// Whole-machine CPU per received packet, the generator included.
    fn machine_ns(&self) -> Option<f64> {
        self.per_pkt(self.gen.machine)
    }
    /// The same with the generator's billed CPU taken out.
    fn machine_less_gen_ns(&self) -> Option<f64> {
        self.per_pkt(self.gen.machine.saturating_sub(self.gen.gen))
    }
    fn own_ns(&self) -> Option<f64> {
        self.per_pkt(self.gen.own?)
    }
}

/// Busy jiffies of all CPUs together, from the first line of /proc/stat.
pub(crate) fn machine_busy() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    let busy: u64 = [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| v.get(i)).sum();
    Duration::from_millis(busy * 10)
}

/// Run the generator against the receiver; `own` samples the receiver's
/// CPU (before and after the run).
fn generator(
    t: &Topology,
    d: Duration,
    mac: &str,
    pps: Option<u64>,
    own: &dyn Fn() -> Option<Duration>,
) -> Result<GenRun> {
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &t.ns])
        .arg(&exe)
        .args([
            "gen",
            "--iface",
            &t.peer_if,
            "--mode",
            "xdp",
            "--src-ip",
            PEER_ADDR,
            "--dst-ip",
            HOST_ADDR,
            "--dst-mac",
            mac,
        ])
        .args(["--duration", &format!("{}ms", d.as_millis()), "--json"]);
    if let Some(p) = pps {
        cmd.args(["--pps", &p.to_string()]);
    }
    let (m0, c0, o0) = (machine_busy(), sched::children_cpu_time(), own());
    let out = cmd.output().context("starting the generator")?;
    let (m1, c1, o1) = (machine_busy(), sched::children_cpu_time(), own());
    if !out.status.success() {
        bail!(
            "generator failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("the generator's JSON")?;
    let (Some(sent), Some(secs)) = (v["sent"].as_u64(), v["elapsed_s"].as_f64()) else {
        bail!("the generator's JSON has no sent/elapsed_s: {v}");
    };
    anyhow::ensure!(secs > 0.0, "the generator ran for {secs} s");
    Ok(GenRun {
        sent,
        secs,
        machine: m1.saturating_sub(m0),
        gen: c1.saturating_sub(c0),
        own: o0.zip(o1).map(|(a, b)| b.saturating_sub(a)),
    })
}

fn rxpath_receiver(
    t: &Topology,
    xdp: bool,
    interrupts: bool,
    d: Duration,
    mac: &str,
    pps: Option<u64>,
) -> Result<Trial> {
    let iface = IfName::new(&t.host_if)?;
    let cfg = RunConfig {
        producer: if xdp {
            Producer::Xdp {
                iface,
                fallback: false,
            }
        } else {
            Producer::Packet { iface }
        },
        sim: rxpath_dev::sim::SimConfig {
            queues: t.queues,
            ..Default::default()
        },
        interrupts,
        duration: d + Duration::from_millis(1500),
        gro: Some(GroSettings {
            flush_timeout_ns: 0,
            adaptive: None,
        }),
        pin: true,
        ..RunConfig::default()
    };
    let h = std::thread::spawn(move || run(&cfg, |_| {}));
    std::thread::sleep(Duration::from_millis(700));
    // The receiver's threads are this process's (the bench thread waits).
    let gen = generator(t, d, mac, pps, &|| Some(sched::cpu_time(false)))?;
    let r = h
        .join()
        .map_err(|_| anyhow::anyhow!("receiver panicked"))??;
    anyhow::ensure!(
        r.consistent(),
        "receiver accounting failed:{}",
        rxpath_cli::report::summary(&r)
    );
    Ok(Trial {
        received: r.napi_total().delivered,
        gen,
    })
}

/// The kernel's UDP socket, read with recvmmsg or io_uring, with a 16 MiB
/// receive buffer (rxpath's receivers have 4096 frames; a user chasing
/// rate raises `SO_RCVBUF`).
fn kernel_receiver(
    t: &Topology,
    uring: bool,
    d: Duration,
    mac: &str,
    pps: Option<u64>,
) -> Result<Trial> {
    let sock = std::net::UdpSocket::bind((HOST_ADDR, 9000))?;
    sched::set_rcvbuf(&sock, 16 << 20).context("SO_RCVBUF")?;
    // recvmmsg's own timeout is only checked after a datagram arrives;
    // SO_RCVTIMEO makes an idle socket return.
    sock.set_read_timeout(Some(Duration::from_millis(50)))?;
    let deadline = Instant::now() + d + Duration::from_millis(1500);
    let h = std::thread::spawn(move || {
        if uring {
            rxpath_dev::sys::uring::UringRecv::new(&sock, 4096, 2048)
                .and_then(|mut u| u.run_until(deadline))
        } else {
            sched::recvmmsg_until(&sock, deadline)
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    // The receiving thread is this process's (the bench thread waits).
    let gen = generator(t, d, mac, pps, &|| Some(sched::cpu_time(false)))?;
    let r = h
        .join()
        .map_err(|_| anyhow::anyhow!("udp receiver panicked"))?;
    let (pkts, _) = r.context(if uring {
        "io_uring receiver"
    } else {
        "recvmmsg"
    })?;
    Ok(Trial {
        received: pkts,
        gen,
    })
}

/// DPDK testpmd with the AF_XDP PMD (busy-polls: its CPU is the window).
fn dpdk_receiver(t: &Topology, d: Duration, mac: &str, pps: Option<u64>) -> Result<Trial> {
    let vdev = format!(
        "net_af_xdp0,iface={},start_queue=0,queue_count=1",
        t.host_if
    );
    let mut peer = crate::harness::testpmd_rxonly(&vdev, "dpdk dpdk-dev librte-net-af-xdp23")?;
    let pid = peer.id();
    let stdout = peer.stdout().context("testpmd stdout")?;
    // The last RX-packets counter testpmd printed; `None` if it printed none.
    let reader = std::thread::spawn(move || {
        let mut last = None;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(v) = crate::harness::testpmd_field(&line, "RX-packets:") {
                last = Some(v);
            }
        }
        last
    });
    std::thread::sleep(Duration::from_millis(2500));
    let alive = peer.check_alive();
    let gen = alive.and_then(|()| generator(t, d, mac, pps, &|| proc_cpu(pid)));
    // testpmd prints its counters once a second.
    std::thread::sleep(Duration::from_millis(1200));
    let tail = peer.stderr_tail();
    let stopped = peer.interrupt(Duration::from_secs(10));
    // The PMD attaches its XDP program without a link; a testpmd that was
    // killed leaves it behind.
    let _ = Command::new("ip")
        .args(["link", "set", "dev", &t.host_if, "xdp", "off"])
        .status();
    // The kernel releases the queue's AF_XDP socket in deferred work.
    std::thread::sleep(Duration::from_millis(300));
    let last = reader
        .join()
        .map_err(|_| anyhow::anyhow!("the thread reading testpmd's counters panicked"))?;
    let gen = gen?;
    stopped?;
    let received =
        last.with_context(|| format!("testpmd printed no RX-packets counter: {tail}"))?;
    Ok(Trial { received, gen })
}

/// The kernel's ceiling: XDP_DROP in the driver.
fn xdp_drop(t: &Topology, d: Duration, mac: &str, pps: Option<u64>) -> Result<Trial> {
    let prog = XdpProgram::attach_drop(&t.host_if)?;
    let before = xdp_drops(&t.host_if)?;
    let gen = generator(t, d, mac, pps, &|| None)?;
    std::thread::sleep(Duration::from_millis(200));
    let dropped = xdp_drops(&t.host_if)?.saturating_sub(before);
    drop(prog);
    Ok(Trial {
        received: dropped,
        gen,
    })
}

fn trial(r: Receiver, t: &Topology, d: Duration, mac: &str, pps: Option<u64>) -> Result<Trial> {
    match r {
        Receiver::XdpSpin => rxpath_receiver(t, true, false, d, mac, pps),
        Receiver::XdpSleep => rxpath_receiver(t, true, true, d, mac, pps),
        Receiver::Packet => rxpath_receiver(t, false, true, d, mac, pps),
        Receiver::KernelUdp => kernel_receiver(t, false, d, mac, pps),
        Receiver::KernelUring => kernel_receiver(t, true, d, mac, pps),
        Receiver::Dpdk => dpdk_receiver(t, d, mac, pps),
        Receiver::XdpDrop => xdp_drop(t, d, mac, pps),
    }
}

/// The interface's XDP_DROP count (`ethtool -S`: the sum of its
/// `*_xdp_drops` counters); an error, never a zero, when ethtool fails or
/// shows no such counter.
fn xdp_drops(iface: &str) -> Result<u64> {
    let o = Command::new("ethtool")
        .args(["-S", iface])
        .output()
        .context("running ethtool -S")?;
    let text = String::from_utf8_lossy(&o.stdout);
    anyhow::ensure!(
        o.status.success(),
        "ethtool -S {iface} failed ({}): {}",
        o.status,
        String::from_utf8_lossy(&o.stderr).trim()
    );
    let counts: Vec<u64> = text
        .lines()
        .filter(|l| l.contains("_xdp_drops:"))
        .filter_map(|l| l.rsplit(':').next()?.trim().parse::<u64>().ok())
        .collect();
    anyhow::ensure!(
        !counts.is_empty(),
        "ethtool -S {iface} shows no xdp_drops counter"
    );
    Ok(counts.iter().sum())
}

fn proc_cpu(pid: u32) -> Option<Duration> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

pub fn rx_iface(a: RxIfaceArgs, rep: &mut Option<ReportDir>) -> Result<std::process::ExitCode> {
    if !sched::is_root() {
        bail!(
            "bench rx-iface needs root (it builds a veth lab and attaches XDP): run it with sudo"
        );
    }
    let t = Topology {
        queues: 1,
        ..Topology::default()
    };
    let guard = t.up_scoped()?;
    bench(&guard.0, &a, rep)
}

fn bench(
    t: &Topology,
    a: &RxIfaceArgs,
    rep: &mut Option<ReportDir>,
) -> Result<std::process::ExitCode> {
    let d = a.duration;
    let mac = std::fs::read_to_string(format!("/sys/class/net/{}/address", t.host_if))?
        .trim()
        .to_string();
    println!(
        "rxpath bench rx-iface: veth {} <- {} (netns {}), 1 queue; generator: rxpath gen, AF_XDP TX, 60-byte UDP; \
         {:.1}s per receiver at full rate and at {} pkt/s; RFC 2544: {} steps of {:.1}s",
        t.host_if,
        t.peer_if,
        t.ns,
        d.as_secs_f64(),
        a.cpu_rate,
        a.steps,
        a.step.as_secs_f64()
    );
    // (receiver, at full rate, at the fixed rate, highest rate under 0.1 % loss)
    let mut rows: Vec<Row> = Vec::new();
    for r in Receiver::ALL {
        let full = trial(r, t, d, &mac, None);
        let fixed = match &full {
            Ok(_) => loud(r, "fixed rate", trial(r, t, d, &mac, Some(a.cpu_rate))),
            Err(_) => None,
        };
        let best = match &full {
            Ok(f) if a.steps > 0 => loud(
                r,
                "RFC 2544",
                rfc2544(r, t, a, &mac, f.gen.sent as f64 / f.gen.secs),
            ),
            _ => None,
        };
        if let Err(e) = &full {
            crate::harness::peer_not_measured(r.name(), &format!("{e:#}"));
        }
        eprintln!("{} measured", r.name());
        rows.push((r, full, fixed, best));
    }
    // The kernel UDP row is the base of every ratio; when it failed, no
    // ratio is printed.
    let base = rows
        .iter()
        .find(|x| x.0 == Receiver::KernelUdp)
        .and_then(|x| x.1.as_ref().ok())
        .map(Trial::pps);
    let ns = |v: Option<f64>| v.map_or("n/a".into(), |x| format!("{x:.0}"));
    println!("\n## At full rate (the generator as fast as it goes)\n");
    println!("| receiver | received | generator sent | pkt/s | vs kernel UDP | own CPU ns/pkt |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (r, full, _, _) in &rows {
        println!("{}", full_rate_row(*r, full, base));
    }
    println!(
        "\n## Whole-machine CPU per received packet at {} pkt/s offered\n",
        a.cpu_rate
    );
    println!("All CPUs' busy time (user, system, irq, softirq) during the generator's run over the packets received. On a veth the receiving side's softirq work runs inside the sender's system calls and the kernel bills it to the sender, so taking the generator's own CPU out undercounts the receiver (column 5); the XDP_DROP row (the least a receiver can cost) is the baseline of column 6. A spinning receiver burns its core whatever the rate.\n");
    let floor = rows
        .iter()
        .find(|x| x.0 == Receiver::XdpDrop)
        .and_then(|x| x.2.as_ref()?.machine_ns());
    println!("| receiver | received | loss | machine CPU ns/pkt (generator included) | minus the generator's billed CPU | over XDP_DROP | own CPU ns/pkt |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (r, _, fixed, _) in &rows {
        if let Some(x) = fixed {
            println!(
                "| {} | {} | {:.2} % | {} | {} | {} | {} |",
                r.name(),
                x.received,
                100.0 * x.loss(),
                ns(x.machine_ns()),
                ns(x.machine_less_gen_ns()),
                ns(x.machine_ns().zip(floor).map(|(m, f)| m - f)),
                ns(x.own_ns())
            );
        }
    }
    if a.steps > 0 {
        println!("\n## Highest offered rate with under 0.1 % loss (RFC 2544 style)\n");
        println!("A binary search of the generator's --pps between 0 and the rate it reached at full speed, {} steps of {:.1}s; the generator's own ceiling bounds every row.\n", a.steps, a.step.as_secs_f64());
        println!("| receiver | highest rate without loss (pkt/s) | vs kernel UDP |");
        println!("|---|---:|---:|");
        // A kernel row that found no loss-free rate (under the search's
        // 1000 pkt/s floor) or failed is no base.
        let kb = rows
            .iter()
            .find(|x| x.0 == Receiver::KernelUdp)
            .and_then(|x| x.3)
            .filter(|&k| k >= 1000.0);
        for (r, _, _, best) in &rows {
            match best {
                Some(b) => println!(
                    "| {} | {:.0} | {} |",
                    r.name(),
                    b,
                    ratio_cell(ratio(Some(*b), kb), 2)
                ),
                None => println!("| {} | not measured | not measured |", r.name()),
            }
        }
    }
    if let Some(rep) = rep {
        report(rep, a, &rows)?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// A row of the full-rate table: the receiver's figures and its ratio to
/// the kernel UDP socket's rate (`base`), or "not measured" and why.
fn full_rate_row(r: Receiver, full: &Result<Trial>, base: Option<f64>) -> String {
    match full {
        Ok(x) => format!(
            "| {} | {} | {} | {:.0} | {} | {} |",
            r.name(),
            x.received,
            x.gen.sent,
            x.pps(),
            ratio_cell(ratio(Some(x.pps()), base), 2),
            x.own_ns().map_or("n/a".into(), |v| format!("{v:.0}")),
        ),
        Err(e) => format!(
            "| {} | not measured: {} | | | not measured | |",
            r.name(),
            format!("{e:#}").replace('|', "/")
        ),
    }
}

/// A receiver's results: at full rate, at the fixed rate, and the highest
/// rate it takes under 0.1 % loss.
type Row = (Receiver, Result<Trial>, Option<Trial>, Option<f64>);

/// A measurement that failed is said, never left out quietly.
fn loud<T>(r: Receiver, what: &str, x: Result<T>) -> Option<T> {
    match x {
        Ok(v) => Some(v),
        Err(e) => {
            crate::harness::peer_not_measured(&format!("{} ({what})", r.name()), &format!("{e:#}"));
            None
        }
    }
}

/// The highest offered rate `r` takes with under 0.1 % loss: a binary
/// search between 0 and `ceiling` (what the generator reached unbounded).
fn rfc2544(r: Receiver, t: &Topology, a: &RxIfaceArgs, mac: &str, ceiling: f64) -> Result<f64> {
    let (mut lo, mut hi) = (0.0, ceiling);
    // Try the ceiling first: a receiver that keeps up with the generator
    // needs no search.
    let top = trial(r, t, a.step, mac, Some(ceiling as u64))?;
    if top.loss() < 0.001 {
        return Ok(top.gen.sent as f64 / top.gen.secs);
    }
    for _ in 1..a.steps {
        let mid = (lo + hi) / 2.0;
        let x = trial(r, t, a.step, mac, Some(mid.max(1000.0) as u64))?;
        if x.loss() < 0.001 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

fn report(rep: &mut ReportDir, a: &RxIfaceArgs, rows: &[Row]) -> Result<()> {
    let js = |x: &Trial| {
        serde_json::json!({
            "received": x.received, "sent": x.gen.sent, "secs": x.gen.secs, "pps": x.pps(),
            "loss": x.loss(), "own_cpu_ns_per_pkt": x.own_ns(), "machine_cpu_ns_per_pkt": x.machine_ns(),
            "machine_less_generator_ns_per_pkt": x.machine_less_gen_ns(),
        })
    };
    let j = serde_json::json!({
        "duration_s": a.duration.as_secs_f64(), "cpu_rate": a.cpu_rate,
        "rfc2544": { "steps": a.steps, "step_s": a.step.as_secs_f64() },
        "receivers": rows.iter().map(|(r, full, fixed, best)| serde_json::json!({
            "receiver": r.name(),
            "full_rate": match full { Ok(x) => js(x), Err(e) => serde_json::json!({ "not_measured": format!("{e:#}") }) },
            "fixed_rate": fixed.as_ref().map(js),
            "highest_rate_under_0_1_pct_loss": best,
        })).collect::<Vec<_>>(),
    });
    rep.json("rx-iface", &j)?;
    let label = |r: &Receiver, full: &Result<Trial>| match full {
        Ok(_) => r.name().to_string(),
        Err(e) => format!("{}: {e:#}", r.name()),
    };
    let pps: Vec<Bar> = rows
        .iter()
        .map(|(r, full, _, _)| {
            let v: Vec<f64> = full.as_ref().ok().map(Trial::pps).into_iter().collect();
            Bar::of(label(r, full), &v, 1e-6)
        })
        .collect();
    rep.bars(
        "rx-iface-rate",
        "Receivers on the lab veth: packets received per second at full rate",
        "Mpps",
        &pps,
    )?;
    // Above the XDP_DROP row: what each receiver costs beyond the least a
    // receiver can (the generator's share cancels out).
    let floor = rows
        .iter()
        .find(|x| x.0 == Receiver::XdpDrop)
        .and_then(|x| x.2.as_ref()?.machine_ns());
    let cpu: Vec<Bar> = rows
        .iter()
        .filter(|x| x.0 != Receiver::XdpDrop)
        .filter_map(|(r, _, fixed, _)| {
            let m = fixed.as_ref()?.machine_ns()?;
            Some(Bar::of(r.name(), &[(m - floor?).max(0.0)], 1.0))
        })
        .collect();
    if !cpu.is_empty() {
        rep.bars(
            "rx-iface-cpu",
            &format!(
                "Whole-machine CPU per received packet at {} pkt/s, over XDP_DROP",
                a.cpu_rate
            ),
            "ns of CPU per packet (all cores, softirq included) above the XDP_DROP run",
            &cpu,
        )?;
    }
    let best: Vec<Bar> = rows
        .iter()
        .filter_map(|(r, _, _, b)| Some(Bar::of(r.name(), &[(*b)?], 1e-6)))
        .collect();
    if !best.is_empty() {
        rep.bars(
            "rx-iface-rfc2544",
            "Highest offered rate with under 0.1 % loss (RFC 2544 style)",
            "Mpps",
            &best,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(received: u64, sent: u64) -> Trial {
        Trial {
            received,
            gen: GenRun {
                sent,
                secs: 1.0,
                ..GenRun::default()
            },
        }
    }

    #[test]
    fn a_failed_peer_is_not_measured_with_its_words_never_zero() {
        let dead: Result<Trial> = Err(anyhow::anyhow!(
            "dpdk-testpmd failed (exit status: 1): EAL: cannot init memory"
        ));
        let row = full_rate_row(Receiver::Dpdk, &dead, Some(1e6));
        assert!(row.contains("not measured: dpdk-testpmd failed"), "{row}");
        assert!(row.contains("EAL: cannot init memory"), "{row}");
        assert!(!row.contains("0.00x") && !row.contains("| 0 |"), "{row}");
    }

    #[test]
    fn without_the_kernel_row_no_ratio_is_printed() {
        // The old table divided by a made-up base of 1.0: raw pkt/s as a ratio.
        let row = full_rate_row(Receiver::XdpSpin, &Ok(trial(2_000_000, 2_000_000)), None);
        assert!(row.contains("| 2000000 | not measured |"), "{row}");
        let row = full_rate_row(
            Receiver::XdpSpin,
            &Ok(trial(2_000_000, 2_000_000)),
            Some(1e6),
        );
        assert!(row.contains("| 2.00x |"), "{row}");
    }
}
