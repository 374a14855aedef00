//! Where an offered rate's queries were lost, from the server's own
//! counters read before and after the rate: rxpath's (an `exec --metrics`
//! endpoint) or the kernel's (`/proc/net/snmp`'s UDP counters and the
//! receiving interface's drops, read in the server's namespace). A server
//! that keeps its counters to itself (Knot's own AF_XDP mode) has only the
//! generator's total, and says so.
//!
//! Every query lost is placed once: before the device, in it, in the path,
//! not answered by the server, lost after the answer left, or still queued
//! when the generator stopped waiting (what no counter placed); none is
//! left out.

use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Counters by name at one moment.
pub(crate) type Counts = BTreeMap<String, u64>;

/// Where a server's counters are read.
#[derive(Debug, Clone)]
pub(crate) enum Probe {
    /// rxpath's Prometheus endpoint (`rxpath exec --metrics ADDR`).
    Rxpath(SocketAddr),
    /// The kernel's: UDP input and output, and `iface`'s receive drops.
    Kernel { iface: String },
    /// Nothing the bench can read.
    Opaque,
}

impl Probe {
    /// The counters now; `None` for [`Probe::Opaque`].
    pub(crate) fn read(&self) -> Result<Option<Counts>> {
        match self {
            Probe::Rxpath(addr) => scrape(*addr).map(|t| Some(rxpath_counts(&t))),
            Probe::Kernel { iface } => {
                let snmp =
                    std::fs::read_to_string("/proc/net/snmp").context("reading /proc/net/snmp")?;
                let mut c = kernel_counts(&snmp);
                let p = format!("/sys/class/net/{iface}/statistics/rx_dropped");
                let d = std::fs::read_to_string(&p).with_context(|| format!("reading {p}"))?;
                c.insert("if_rx_dropped".into(), d.trim().parse().unwrap_or(0));
                Ok(Some(c))
            }
            Probe::Opaque => Ok(None),
        }
    }
}

/// A free port on the loopback for a metrics endpoint.
pub(crate) fn free_loopback() -> Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr()?)
}

/// `GET /metrics` (the endpoint closes the connection after the body).
fn scrape(addr: SocketAddr) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("connecting to the metrics at {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)
        .with_context(|| format!("reading the metrics at {addr}"))?;
    Ok(text
        .split_once("\r\n\r\n")
        .map_or(text.clone(), |(_, b)| b.to_string()))
}

/// The counters of a Prometheus text page that place a query, summed over
/// queues: the device's (`offered`, `rx_ring_full`, `rx_no_buffer`,
/// `rx_too_long`), the path's drops by reason (`path:REASON`) and the
/// sockets' datagrams in and out.
fn rxpath_counts(page: &str) -> Counts {
    let mut c = Counts::new();
    for line in page.lines().filter(|l| !l.starts_with('#')) {
        let Some((key, v)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(v) = v.parse::<f64>() else { continue };
        let (name, labels) = key.split_once('{').unwrap_or((key, ""));
        let place = match name {
            "rxpath_device_offered_packets_total" => "offered".to_string(),
            "rxpath_device_missed_packets_total" => "rx_ring_full".to_string(),
            "rxpath_device_no_buffer_packets_total" => "rx_no_buffer".to_string(),
            "rxpath_device_too_long_packets_total" => "rx_too_long".to_string(),
            "rxpath_socket_in_datagrams_total" => "socket_in".to_string(),
            "rxpath_socket_out_datagrams_total" => "socket_out".to_string(),
            "rxpath_dropped_packets_total" => match label(labels, "reason") {
                Some(r) => format!("path:{r}"),
                None => continue,
            },
            _ => continue,
        };
        *c.entry(place).or_default() += v as u64;
    }
    c
}

/// `NAME="VALUE"` out of a label set.
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    labels
        .trim_end_matches('}')
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim_matches('"'))
}

/// The `Udp:` counters of `/proc/net/snmp` (a header line, then values).
fn kernel_counts(snmp: &str) -> Counts {
    let mut rows = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(names), Some(values)) = (rows.next(), rows.next()) else {
        return Counts::new();
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .skip(1)
        .filter_map(|(n, v)| Some((format!("udp:{n}"), v.parse().ok()?)))
        .collect()
}

/// Where `sent - answered` queries went between `before` and `after`: the
/// places with a count, in the order a query passes them.
pub(crate) fn place(
    sent: u64,
    answered: u64,
    before: &Counts,
    after: &Counts,
) -> Vec<(String, u64)> {
    let d = |k: &str| {
        after
            .get(k)
            .copied()
            .unwrap_or(0)
            .saturating_sub(before.get(k).copied().unwrap_or(0))
    };
    let mut out: Vec<(String, u64)> = Vec::new();
    if after.contains_key("offered") {
        out.push((
            "before the device".into(),
            sent.saturating_sub(d("offered")),
        ));
        for k in ["rx_ring_full", "rx_no_buffer", "rx_too_long"] {
            out.push((format!("device {k}"), d(k)));
        }
        for k in after.keys().filter(|k| k.starts_with("path:")) {
            out.push((format!("path {}", &k[5..]), d(k)));
        }
        out.push((
            "not answered by the server".into(),
            d("socket_in").saturating_sub(d("socket_out")),
        ));
        out.push((
            "after the answer left".into(),
            d("socket_out").saturating_sub(answered),
        ));
    } else if after.contains_key("udp:InDatagrams") {
        let seen = d("if_rx_dropped") + d("udp:InErrors") + d("udp:InDatagrams");
        out.push(("interface rx_dropped".into(), d("if_rx_dropped")));
        out.push(("socket RcvbufErrors".into(), d("udp:RcvbufErrors")));
        out.push((
            "other UDP InErrors".into(),
            d("udp:InErrors").saturating_sub(d("udp:RcvbufErrors")),
        ));
        out.push((
            "not seen by IP or UDP input".into(),
            sent.saturating_sub(seen),
        ));
        out.push((
            "not answered by the server".into(),
            d("udp:InDatagrams").saturating_sub(d("udp:OutDatagrams")),
        ));
        out.push((
            "after the answer left".into(),
            d("udp:OutDatagrams").saturating_sub(answered),
        ));
    }
    if !out.is_empty() {
        // A query the counters have not placed was still queued (in the
        // device's ring or a socket) when the generator stopped waiting.
        let placed: u64 = out.iter().map(|(_, n)| n).sum();
        let lost = sent.saturating_sub(answered);
        out.push((
            "queued when the rate ended".into(),
            lost.saturating_sub(placed),
        ));
    }
    out.retain(|(_, n)| *n > 0);
    out
}

/// `place`'s answer on one line (`nothing counted` when empty).
pub(crate) fn line(places: &[(String, u64)]) -> String {
    if places.is_empty() {
        return "no counter saw a loss".into();
    }
    places
        .iter()
        .map(|(p, n)| format!("{p} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rxpath_losses_are_placed_from_the_metrics_page() {
        let page = |offered: u64, full: u64, sq: u64, sin: u64, sout: u64| {
            format!(
                "# HELP x\n\
                 rxpath_device_offered_packets_total{{queue=\"0\"}} {offered}\n\
                 rxpath_device_missed_packets_total{{queue=\"0\"}} {full}\n\
                 rxpath_device_no_buffer_packets_total{{queue=\"0\"}} 0\n\
                 rxpath_dropped_packets_total{{queue=\"0\",reason=\"socket_queue_full\"}} {sq}\n\
                 rxpath_socket_in_datagrams_total {sin}\n\
                 rxpath_socket_out_datagrams_total {sout}\n"
            )
        };
        let before = rxpath_counts(&page(100, 0, 0, 100, 100));
        // 1000 sent: 990 reached the device, 20 found the ring full, 30
        // the socket queue full; of 940 delivered 935 were answered and
        // the generator got 930 answers; 5 more sat in the ring at the end.
        let after = rxpath_counts(&page(1090, 20, 30, 1040, 1035));
        let p = place(1000, 925, &before, &after);
        assert_eq!(
            p,
            vec![
                ("before the device".to_string(), 10),
                ("device rx_ring_full".to_string(), 20),
                ("path socket_queue_full".to_string(), 30),
                ("not answered by the server".to_string(), 5),
                ("after the answer left".to_string(), 10),
            ]
        );
        assert_eq!(p.iter().map(|(_, n)| n).sum::<u64>(), 1000 - 925);
        // Counters that place fewer than were lost: the rest was queued.
        let q = place(
            1000,
            900,
            &before,
            &rxpath_counts(&page(1100, 0, 0, 1000, 1000)),
        );
        assert_eq!(q, vec![("queued when the rate ended".to_string(), 100)]);
    }

    #[test]
    fn kernel_losses_are_placed_from_snmp() {
        let snmp = |ind: u64, inerr: u64, rcvbuf: u64, out: u64| {
            format!(
                "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                 Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
                 Udp: {ind} 0 {inerr} {out} {rcvbuf} 0\n"
            )
        };
        let mut before = kernel_counts(&snmp(10, 0, 0, 10));
        before.insert("if_rx_dropped".into(), 0);
        let mut after = kernel_counts(&snmp(810, 150, 150, 805));
        after.insert("if_rx_dropped".into(), 40);
        // 1000 sent: 40 dropped at the interface, 150 at a full socket,
        // 10 seen by nobody, 800 read and 795 answered, 790 arrived.
        let p = place(1000, 790, &before, &after);
        assert_eq!(
            line(&p),
            "interface rx_dropped 40, socket RcvbufErrors 150, \
             not seen by IP or UDP input 10, not answered by the server 5, \
             after the answer left 5"
        );
    }

    #[test]
    fn an_opaque_server_places_nothing() {
        assert!(place(1000, 900, &Counts::new(), &Counts::new()).is_empty());
        assert_eq!(line(&[]), "no counter saw a loss");
        assert!(Probe::Opaque.read().unwrap().is_none());
    }
}
