//! Receive UDP datagrams on an rxpath socket.
//!
//! ```text
//! cargo run --release -p rxpath-runtime --example recv
//!     # simulated NIC: a sender thread plays a peer at 198.18.0.2
//! sudo target/release/examples/recv --iface rxp0 --port 9000 --busy-poll 50
//!     # a real interface (AF_XDP, AF_PACKET if that fails)
//! ```
//!
//! It binds `0.0.0.0:PORT`, reads for a few seconds with `recv_from`
//! (busy-polling the socket's NAPI first when `--busy-poll US` is given),
//! and prints what it read, the busy-poll counters, and that every frame
//! came home.

use rxpath_dev::sim::{Coalesce, SimConfig};
use rxpath_dev::sys::xdp::XdpFilter;
use rxpath_runtime::{Host, HostConfig, HostDevice};
use rxpath_wire::build::{self, Spec};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut iface = None;
    let (mut port, mut busy_poll, mut secs) = (9000u16, 0u32, 3u64);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--iface" => iface = Some(val()?),
            "--port" => port = val()?.parse()?,
            "--busy-poll" => busy_poll = val()?.parse()?,
            "--duration" => secs = val()?.parse()?,
            _ => {
                return Err(format!(
                    "unknown option {a} (--iface, --port, --busy-poll, --duration)"
                )
                .into())
            }
        }
    }
    let mut cfg = HostConfig::default();
    cfg.sock.busy_read_us = busy_poll;
    let sim = iface.is_none();
    let dev = match &iface {
        Some(i) => HostDevice::Xdp {
            iface: i.clone(),
            filter: XdpFilter {
                protocol: Some(17),
                dst_port: Some(port),
                ..XdpFilter::default()
            },
            fallback: true,
            xsk_busy_poll_us: 0,
        },
        None => {
            cfg.sock.local_addrs = vec!["198.18.0.1".parse()?];
            HostDevice::Sim(SimConfig {
                coalesce: Coalesce {
                    rx_usecs: 20,
                    rx_frames: 16,
                },
                ..SimConfig::default()
            })
        }
    };
    let host = Arc::new(Host::start(cfg, dev)?);
    let sock = host.udp_bind(SocketAddr::from(([0, 0, 0, 0], port)))?;
    sock.set_read_timeout(Some(Duration::from_millis(200)));
    println!(
        "recv: {} on 0.0.0.0:{port}, busy poll {busy_poll} µs",
        host.backend()
    );

    // On the simulated NIC, a thread plays the peer.
    let stop = Arc::new(AtomicBool::new(false));
    let sender = sim.then(|| {
        let (host, stop) = (host.clone(), stop.clone());
        std::thread::spawn(move || {
            let spec = Spec::new(
                "198.18.0.2".parse().unwrap(),
                "198.18.0.1".parse().unwrap(),
                40000,
                port,
            );
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let f = build::udp(&spec, format!("datagram {i}").as_bytes());
                if let Some(mut p) = host.sim_port() {
                    if p.inject(&f, 0).is_ok() {
                        i += 1;
                    }
                    p.flush(rxpath_dev::mono_ns());
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        })
    });

    let mut buf = [0u8; 2048];
    let (mut n, mut bytes) = (0u64, 0u64);
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        match sock.recv_from(&mut buf) {
            Ok((len, src)) => {
                if n == 0 {
                    println!(
                        "first: {len} bytes from {src}: {:?}",
                        String::from_utf8_lossy(&buf[..len])
                    );
                }
                n += 1;
                bytes += len as u64;
            }
            Err(rxpath_core::sock::SockError::TimedOut) => {}
            Err(e) => return Err(e.into()),
        }
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(s) = sender {
        let _ = s.join();
    }
    let c = sock.counters();
    drop(sock);
    let report = Arc::into_inner(host).ok_or("host still shared")?.shutdown();
    println!(
        "read {n} datagrams ({bytes} bytes) in {secs}s; slept {} times, busy-polled {} times ({} packets found by busy polling); dropped on a full queue {}",
        c.sleeps, c.busy_polls, report.sock.busy_poll_packets, c.drops
    );
    println!(
        "frames home: {}/{}",
        report.frames_home, report.frames_total
    );
    Ok(())
}
