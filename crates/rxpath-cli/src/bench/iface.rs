//! `rxpath bench rx-iface`: receivers side by side on the lab topology,
//! one run, the same generator (rxpath gen over AF_XDP TX in the peer
//! namespace) for each.

use crate::bench::plot::{Bar, ReportDir};
use crate::bench::which;
use crate::opts::RxIfaceArgs;
use anyhow::{bail, Context, Result};
use rxpath_dev::sys::{sched, xdp::XdpProgram};
use rxpath_runtime::lab::{Topology, HOST_ADDR, PEER_ADDR};
use rxpath_runtime::{run, GroSettings, IfName, Producer, RunConfig};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Row {
    name: &'static str,
    received: u64,
    secs: f64,
    cpu: Option<Duration>,
    note: String,
}

fn generator(t: &Topology, d: Duration, mac: &str) -> Result<(u64, f64)> {
    let exe = std::env::current_exe()?;
    let out = Command::new("ip")
        .args(["netns", "exec", &t.ns])
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
        .args(["--duration", &format!("{}ms", d.as_millis()), "--json"])
        .output()
        .context("starting the generator")?;
    if !out.status.success() {
        bail!(
            "generator failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    Ok((
        v["sent"].as_u64().unwrap_or(0),
        v["elapsed_s"].as_f64().unwrap_or(1.0),
    ))
}

fn rxpath_receiver(
    t: &Topology,
    xdp: bool,
    interrupts: bool,
    d: Duration,
    mac: &str,
) -> Result<(u64, Duration, u64, f64)> {
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
    let cpu0 = sched::cpu_time(false);
    let h = std::thread::spawn(move || run(&cfg, |_| {}));
    std::thread::sleep(Duration::from_millis(700));
    let (sent, gsecs) = generator(t, d, mac)?;
    let r = h
        .join()
        .map_err(|_| anyhow::anyhow!("receiver panicked"))??;
    anyhow::ensure!(
        r.consistent(),
        "receiver accounting failed:{}",
        crate::report::summary(&r)
    );
    Ok((
        r.napi_total().delivered,
        sched::cpu_time(false) - cpu0,
        sent,
        gsecs,
    ))
}

fn xdp_drops(iface: &str) -> u64 {
    let out = Command::new("ethtool")
        .args(["-S", iface])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    out.unwrap_or_default()
        .lines()
        .filter(|l| l.contains("_xdp_drops:"))
        .filter_map(|l| l.rsplit(':').next()?.trim().parse::<u64>().ok())
        .sum()
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
        "rxpath bench rx-iface: veth {} <- {} (netns {}), 1 queue; generator: rxpath gen, AF_XDP TX, 60-byte UDP, {:.1}s per receiver",
        t.host_if,
        t.peer_if,
        t.ns,
        d.as_secs_f64()
    );
    let mut rows = Vec::new();
    let mut gen_rates = Vec::new();
    for (name, xdp, irq) in [
        ("rxpath AF_XDP, spinning (--napi poll)", true, false),
        ("rxpath AF_XDP, sleeping (--napi interrupt)", true, true),
        ("rxpath AF_PACKET (TPACKET_V3)", false, true),
    ] {
        let (rx, cpu, sent, gs) = rxpath_receiver(t, xdp, irq, d, &mac)?;
        gen_rates.push(sent as f64 / gs);
        rows.push(Row {
            name,
            received: rx,
            secs: gs,
            cpu: Some(cpu),
            note: format!("generator sent {sent}"),
        });
    }
    // The kernel's UDP socket with recvmmsg.
    {
        let sock = std::net::UdpSocket::bind((HOST_ADDR, 9000))?;
        // recvmmsg's own timeout is only checked after a datagram arrives;
        // SO_RCVTIMEO makes an idle socket return.
        sock.set_read_timeout(Some(Duration::from_millis(50)))?;
        let deadline = Instant::now() + d + Duration::from_millis(1500);
        let h = std::thread::spawn(move || {
            let c0 = sched::cpu_time(true);
            let r = sched::recvmmsg_until(&sock, deadline);
            (r, sched::cpu_time(true) - c0)
        });
        std::thread::sleep(Duration::from_millis(700));
        let (sent, gs) = generator(t, d, &mac)?;
        let (r, cpu) = h
            .join()
            .map_err(|_| anyhow::anyhow!("udp receiver panicked"))?;
        let (pkts, _) = r?;
        gen_rates.push(sent as f64 / gs);
        rows.push(Row {
            name: "kernel UDP socket, recvmmsg",
            received: pkts,
            secs: gs,
            cpu: Some(cpu),
            note: format!("generator sent {sent}; softirq work not counted"),
        });
    }
    // DPDK testpmd with the AF_XDP PMD.
    match which("dpdk-testpmd") {
        None => rows.push(Row { name: "DPDK testpmd net_af_xdp rxonly", received: 0, secs: 1.0, cpu: None, note: "not measured: dpdk-testpmd not installed (apt-get install dpdk dpdk-dev librte-net-af-xdp23)".into() }),
        Some(bin) => {
            let mut cmd = Command::new(bin);
            cmd.args(["-l", "0-1", "--no-pci", "--no-huge", "-m", "1024", "--log-level=error"])
                .arg("--vdev")
                .arg(format!("net_af_xdp0,iface={},start_queue=0,queue_count=1", t.host_if))
                .args(["--", "--forward-mode=rxonly", "--total-num-mbufs=16384", "--stats-period", "1"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null());
            let mut child = crate::bench::spawn_unpinned(cmd)?;
            let pid = child.id();
            let stdout = child.stdout.take().context("testpmd stdout")?;
            let reader = std::thread::spawn(move || {
                let mut last = 0u64;
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Some(rest) = line.trim().strip_prefix("RX-packets:") {
                        if let Some(v) = rest.split_whitespace().next().and_then(|x| x.parse().ok()) {
                            last = v;
                        }
                    }
                }
                last
            });
            std::thread::sleep(Duration::from_millis(2500));
            let c0 = proc_cpu(pid);
            let (sent, gs) = generator(t, d, &mac)?;
            std::thread::sleep(Duration::from_millis(1200));
            let c1 = proc_cpu(pid);
            drop(child.stdin.take());
            let _ = child.kill();
            let _ = child.wait();
            // The PMD attaches its XDP program without a link; a killed
            // testpmd leaves it behind.
            let _ = Command::new("ip").args(["link", "set", "dev", &t.host_if, "xdp", "off"]).status();
            let rx = reader.join().unwrap_or(0);
            gen_rates.push(sent as f64 / gs);
            rows.push(Row {
                name: "DPDK testpmd net_af_xdp rxonly",
                received: rx,
                secs: gs,
                cpu: c0.zip(c1).map(|(a, b)| b.saturating_sub(a)),
                note: format!("generator sent {sent}; testpmd busy-polls, so its CPU is the whole window"),
            });
        }
    }
    // The kernel's ceiling: XDP_DROP in the driver.
    {
        let prog = XdpProgram::attach_drop(&t.host_if)?;
        let before = xdp_drops(&t.host_if);
        let (sent, gs) = generator(t, d, &mac)?;
        std::thread::sleep(Duration::from_millis(200));
        let dropped = xdp_drops(&t.host_if) - before;
        drop(prog);
        gen_rates.push(sent as f64 / gs);
        rows.push(Row {
            name: "kernel XDP_DROP (ceiling)",
            received: dropped,
            secs: gs,
            cpu: None,
            note: format!("generator sent {sent}; work done in softirq"),
        });
    }
    let base = rows
        .iter()
        .find(|r| r.name.starts_with("kernel UDP"))
        .map(|r| r.received as f64 / r.secs)
        .unwrap_or(1.0);
    println!("\n| receiver | received | pkt/s | vs kernel UDP | receiver CPU ns/pkt | note |");
    println!("|---|---:|---:|---:|---:|---|");
    for r in &rows {
        if r.received == 0 {
            crate::bench::peer_not_measured(
                r.name,
                if r.note.is_empty() {
                    "received nothing"
                } else {
                    &r.note
                },
            );
        }
        let pps = r.received as f64 / r.secs;
        let cpu = match (r.cpu, r.received) {
            (Some(c), n) if n > 0 => format!("{:.0}", c.as_nanos() as f64 / n as f64),
            _ => "n/a".into(),
        };
        println!(
            "| {} | {} | {:.0} | {:.2}x | {} | {} |",
            r.name,
            r.received,
            pps,
            pps / base.max(1.0),
            cpu,
            r.note
        );
    }
    let g = crate::bench::median(gen_rates.clone());
    println!("\ngenerator rate (median over runs): {:.3} Mpps", g / 1e6);
    if let Some(rep) = rep {
        let cpu_ns = |r: &Row| {
            r.cpu
                .filter(|_| r.received > 0)
                .map(|c| c.as_nanos() as f64 / r.received as f64)
        };
        let j = serde_json::json!({
            "duration_s": d.as_secs_f64(),
            "generator_mpps": g / 1e6,
            "receivers": rows.iter().map(|r| serde_json::json!({
                "receiver": r.name, "received": r.received, "secs": r.secs,
                "pps": r.received as f64 / r.secs, "cpu_ns_per_pkt": cpu_ns(r), "note": r.note,
            })).collect::<Vec<_>>(),
        });
        rep.json("rx-iface", &j)?;
        let label = |r: &Row| {
            if r.received == 0 {
                format!("{}: {}", r.name, r.note)
            } else {
                r.name.to_string()
            }
        };
        let pps: Vec<Bar> = rows
            .iter()
            .map(|r| Bar::of(label(r), &[r.received as f64 / r.secs], 1e-6))
            .collect();
        rep.bars(
            "rx-iface-rate",
            "Receivers on the lab veth: packets received per second (one run)",
            "Mpps",
            &pps,
        )?;
        // Receivers whose CPU is their own (threads or a process); the
        // kernel's softirq work is not attributed, so it gets no bar.
        let cpu: Vec<Bar> = rows
            .iter()
            .filter_map(|r| Some(Bar::of(r.name, &[cpu_ns(r)?], 1.0)))
            .collect();
        if !cpu.is_empty() {
            rep.bars(
                "rx-iface-cpu",
                "Receiver CPU per packet (threads of the receiver, user + system)",
                "ns of receiver CPU per packet",
                &cpu,
            )?;
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}
