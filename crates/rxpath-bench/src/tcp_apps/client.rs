//! The clients of `bench tcp-apps` in the peer namespace, and what they
//! print read back.

use super::{App, TcpAppsArgs};
use crate::harness::Peer;
use anyhow::{bail, Context, Result};
use rxpath_os::sched;
use rxpath_runtime::lab::{Topology, HOST_ADDR};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

/// The peer namespace's TCP as a client that opens many connections needs
/// it: ports reused from `TIME_WAIT` (as redis-benchmark's `-k 0` asks) and
/// the wide ephemeral range.
pub(super) fn prepare_peer(t: &Topology) -> Result<()> {
    let script = "echo 1 > /proc/sys/net/ipv4/tcp_tw_reuse && \
                  echo '1024 65000' > /proc/sys/net/ipv4/ip_local_port_range";
    let st = Command::new("ip")
        .args(["netns", "exec", &t.ns, "sh", "-c", script])
        .status()
        .context("setting the peer namespace's TCP sysctls")?;
    anyhow::ensure!(
        st.success(),
        "setting the peer's tcp_tw_reuse failed ({st})"
    );
    Ok(())
}

/// One TCP connection from the peer namespace to the server's port, made
/// and closed.
fn connects(t: &Topology, port: u16) -> Result<bool> {
    let path = format!("/run/netns/{}", t.ns);
    let to: SocketAddr = format!("{HOST_ADDR}:{port}").parse()?;
    std::thread::spawn(move || -> Result<bool> {
        sched::enter_netns(&path).context("entering the peer namespace")?;
        Ok(TcpStream::connect_timeout(&to, Duration::from_secs(1)).is_ok())
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the probe panicked"))?
}

/// Wait until the server of `app` takes connections (20 s at most). iperf3
/// serves one test (`-1`): its client is tried again instead.
pub(super) fn ready(app: App, t: &Topology, p: &mut Peer) -> Result<()> {
    if app.is_iperf3() {
        return Ok(());
    }
    let give_up = Instant::now() + Duration::from_secs(20);
    loop {
        p.check_alive()?;
        if connects(t, app.port())? {
            return Ok(());
        }
        if Instant::now() > give_up {
            bail!("the {} server never took a connection", app.key());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The client command of `app` in the peer namespace, pinned to `cpu`.
fn command(app: App, t: &Topology, a: &TcpAppsArgs, cpu: Option<usize>) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &t.ns]);
    if let Some(c) = cpu {
        cmd.args(["taskset", "-c", &c.to_string()]);
    }
    let conns = a.connections.to_string();
    let secs = format!("{}s", a.duration.as_secs().max(1));
    match app {
        App::Redis | App::Accepts => {
            let n = if app == App::Redis {
                a.requests
            } else {
                a.accepts
            };
            cmd.args([
                "redis-benchmark",
                "-h",
                HOST_ADDR,
                "-p",
                "6390",
                "-t",
                "get",
            ])
            .args(["-n", &n.to_string(), "-c", &conns, "--csv"]);
            if app == App::Accepts {
                cmd.args(["-k", "0"]);
            }
        }
        App::Nginx => {
            let url = format!("http://{HOST_ADDR}/");
            cmd.args(["wrk", "-t1", "-c", &conns, "-d", &secs, "--latency", &url]);
        }
        App::Iperf3 | App::Iperf3Send => {
            cmd.args(["iperf3", "-c", HOST_ADDR, "-p", "5201", "-J"])
                .args(["-t", &a.duration.as_secs().max(1).to_string()]);
            if app == App::Iperf3Send {
                cmd.arg("-R");
            }
        }
    }
    cmd
}

/// Run the client of `app`: its rate (the app's unit) and p99 in ms.
pub(super) fn run_client(
    app: App,
    t: &Topology,
    a: &TcpAppsArgs,
    cpu: Option<usize>,
) -> Result<(f64, Option<f64>)> {
    let give_up = Instant::now() + Duration::from_secs(20);
    loop {
        let out = command(app, t, a, cpu)
            .output()
            .with_context(|| format!("running the {} client", app.key()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let got = match app {
            App::Redis | App::Accepts => redis_csv(&text),
            App::Nginx => wrk(&text),
            App::Iperf3 | App::Iperf3Send => iperf3_received(&text).map(|g| (g, None)),
        };
        match got {
            Some(g) if out.status.success() => return Ok(g),
            // iperf3 -c before the server listens: tried again.
            _ if app.is_iperf3()
                && text.contains("unable to connect")
                && Instant::now() < give_up =>
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            _ => bail!(
                "the {} client failed ({}): {}{}",
                app.key(),
                out.status,
                text.chars().take(600).collect::<String>(),
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }
}

/// `redis-benchmark --csv`'s `GET` line: requests/s and p99 (ms).
fn redis_csv(text: &str) -> Option<(f64, Option<f64>)> {
    let line = text.lines().find(|l| l.starts_with("\"GET\""))?;
    let f: Vec<&str> = line.split(',').map(|x| x.trim_matches('"')).collect();
    let rps = f.get(1)?.parse().ok()?;
    Some((rps, f.get(6).and_then(|x| x.parse().ok())))
}

/// wrk's `Requests/sec:` and the 99 % line of `--latency`, in ms.
fn wrk(text: &str) -> Option<(f64, Option<f64>)> {
    let rps = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))?
        .trim()
        .parse()
        .ok()?;
    let p99 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("99%"))
        .and_then(|v| duration_ms(v.trim()));
    Some((rps, p99))
}

/// A wrk duration (`812.00us`, `1.23ms`, `2.00s`) in ms.
fn duration_ms(v: &str) -> Option<f64> {
    let (num, scale) = if let Some(n) = v.strip_suffix("us") {
        (n, 1e-3)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1e3)
    } else {
        return None;
    };
    num.parse::<f64>().ok().map(|x| x * scale)
}

/// iperf3 `-J`: what the receiver (the server, or with `-R` the client)
/// received, Gbit/s.
fn iperf3_received(text: &str) -> Option<f64> {
    let j: serde_json::Value = serde_json::from_str(text).ok()?;
    if j.get("error").is_some_and(|e| !e.is_null()) {
        return None;
    }
    j["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .map(|b| b / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_benchmark_csv_is_read() {
        let t = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
                 \"GET\",\"61349.69\",\"0.442\",\"0.120\",\"0.431\",\"0.703\",\"0.783\",\"4.215\"\n";
        assert_eq!(redis_csv(t), Some((61349.69, Some(0.783))));
        assert_eq!(redis_csv("\"test\",\"rps\"\n"), None);
        assert_eq!(redis_csv("\"GET\",\"x\"\n"), None);
    }

    #[test]
    fn wrk_output_is_read() {
        let t = "Running 3s test @ http://198.18.0.1/\n  1 threads and 50 connections\n\
                 \x20 Latency Distribution\n     50%  630.00us\n     75%  700.00us\n     90%    1.10ms\n     99%    2.50ms\n\
                 \x20 75000 requests in 3.00s, 60.00MB read\nRequests/sec:  24999.50\nTransfer/sec:     20.00MB\n";
        assert_eq!(wrk(t), Some((24999.50, Some(2.5))));
        assert_eq!(duration_ms("812.00us"), Some(0.812));
        assert_eq!(duration_ms("2.00s"), Some(2000.0));
        assert_eq!(duration_ms("12"), None);
        assert_eq!(wrk("no summary"), None);
    }

    #[test]
    fn iperf3_json_is_read_and_its_error_refused() {
        let ok = r#"{"end": {"sum_received": {"bits_per_second": 4.5e9}}}"#;
        assert_eq!(iperf3_received(ok), Some(4.5));
        let bad = r#"{"error": "unable to connect to server", "end": {}}"#;
        assert_eq!(iperf3_received(bad), None);
        assert_eq!(iperf3_received("not json"), None);
    }
}
