//! The `sockperf ping-pong` client as the request/response benches run
//! it (`rr`, `apps`, `rfs`): in the lab's peer namespace against
//! [`PORT`], its report parsed into a [`Measure`], every observation from
//! its full log, the server CPU's busy share around the run, and a wait
//! until the server answers.

use anyhow::{Context, Result};
use rxpath_runtime::lab::{Topology, HOST_ADDR};
use std::process::Command;

/// The port the request/response servers listen on.
pub(crate) const PORT: u16 = 11111;

/// One client run as sockperf reports it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Measure {
    pub(crate) rt_per_s: f64,
    pub(crate) avg_us: f64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    /// The whole run's (warm-up included) requests sent and answers
    /// received, as the server counts them.
    pub(crate) total: (u64, u64),
    /// How busy the server's CPU was during the client's run (0 to 1),
    /// when the server had a CPU of its own.
    pub(crate) server_busy: Option<f64>,
}

pub(crate) fn strip_ansi(s: &str) -> String {
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

pub(crate) fn field(text: &str, key: &str) -> Option<f64> {
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
    let all = &t[t.find("[Total Run]")?..];
    Some(Measure {
        rt_per_s: recv / secs.max(1e-9),
        avg_us: field(&t, "avg-rtt")?,
        p50_us: field(&t, "percentile 50.000")?,
        p99_us: field(&t, "percentile 99.000")?,
        total: (
            field(all, "SentMessages")? as u64,
            field(all, "ReceivedMessages")? as u64,
        ),
        server_busy: None,
    })
}

/// One sockperf client run; with `samples`, every round trip's time too
/// (sockperf's `--full-log`, in µs), for the latency CDFs of a report.
/// `extra`: more of sockperf's flags (`--client_port N` fixes the
/// client's source port, and so the flow's hash; `--tcp`).
pub(crate) fn client(
    t: &Topology,
    secs: u64,
    size: usize,
    cpu: Option<usize>,
    samples: bool,
    extra: &[&str],
) -> Result<Option<(Measure, Vec<f64>)>> {
    let log = std::env::temp_dir().join(format!("rxpath-rr-{}.csv", std::process::id()));
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &t.ns]);
    if let Some(c) = cpu {
        cmd.args(["taskset", "-c", &c.to_string()]);
    }
    cmd.args([
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
    ]);
    cmd.args(extra);
    if samples {
        cmd.arg("--full-log").arg(&log);
    }
    let out = cmd.output().context("running the sockperf client")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let rtts = if samples {
        let csv = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        parse_full_log(&csv)
    } else {
        Vec::new()
    };
    Ok(parse_sockperf(&text).map(|m| (m, rtts)))
}

/// The round-trip times (µs) of a sockperf `--full-log` file: the lines
/// `packet, txTime(sec), rxTime(sec), rtt(usec)` after its header.
fn parse_full_log(csv: &str) -> Vec<f64> {
    csv.lines()
        .skip_while(|l| !l.starts_with("packet,"))
        .skip(1)
        .filter_map(|l| {
            let mut f = l.split(',').map(str::trim);
            f.next()?.parse::<u64>().ok()?;
            f.nth(2)?.parse::<f64>().ok()
        })
        .collect()
}

/// Busy and total jiffies of one CPU from `/proc/stat` (busy: everything
/// but idle and iowait, so softirq work done there counts).
pub(crate) fn cpu_jiffies(cpu: usize) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&format!("cpu{cpu}")))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4)?;
    Some((total - idle, total))
}

/// One second of `sockperf ping-pong` with `size`-byte messages from the
/// peer namespace: a probe that the server answers.
pub(crate) fn probe_run(t: &Topology, size: usize) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args([
        "netns",
        "exec",
        &t.ns,
        "sockperf",
        "ping-pong",
        "-i",
        HOST_ADDR,
    ])
    .args(["-p", &PORT.to_string(), "-t", "1", "-m", &size.to_string()]);
    cmd
}

/// Wait until the server answers (an XDP attach or a fresh ARP entry takes
/// a moment), with short client runs: any answer counts (a 1-second run
/// can end with no observations sockperf calls valid).
pub(crate) fn ready(t: &Topology, size: usize, extra: &[&str]) -> Result<bool> {
    for _ in 0..8 {
        let mut cmd = probe_run(t, size);
        cmd.args(extra);
        let out = cmd.output().context("running the sockperf client")?;
        let text = strip_ansi(&String::from_utf8_lossy(&out.stdout));
        if field(&text, "ReceivedMessages").is_some_and(|n| n > 0.0) {
            return Ok(true);
        }
    }
    Ok(false)
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
            sockperf: ---> percentile 99.000 =   19.745\n\
            sockperf: ---> percentile 50.000 =   12.100\n";
        let m = parse_sockperf(out).unwrap();
        assert!((m.rt_per_s - 42466.0 / 0.55).abs() < 1.0);
        assert_eq!(m.avg_us, 12.931);
        assert_eq!(m.p99_us, 19.745);
        assert_eq!(m.p50_us, 12.1);
        assert_eq!(m.total, (70186, 70185));
        assert!(parse_sockperf("sockperf: No messages were received").is_none());
    }

    #[test]
    fn parses_sockperf_full_log() {
        let csv = "------------------------------\n\
            test was performed using the following parameters: --full-rtt\n\
            ------------------------------\n\
            packet, txTime(sec), rxTime(sec), rtt(usec)\n\
            0, 2.445247112, 2.445337506, 90.394\n\
            1, 2.445337576, 2.445428250, 90.674\n\
            ------------------------------\n";
        assert_eq!(parse_full_log(csv), vec![90.394, 90.674]);
        assert!(parse_full_log("no header\n0, 1, 2, 3\n").is_empty());
    }
}
