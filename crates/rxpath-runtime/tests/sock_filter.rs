//! The `INPUT` filter in front of the sockets (`rxpath echo --filter`, the
//! `Host` API): the socket stage judges through the same per-thread hook
//! as `rxpath run`'s filter stage (flow cache, counts per bundle), so a
//! datagram the rules drop never reaches its socket, is the counted drop
//! `filter`, and every rule's counters are exact; a new rule set swapped
//! in while datagrams arrive takes over from the next bundle.

use rxpath_core::filter::{Filter, FilterHandle, FilterMode};
use rxpath_core::stats::DropReason;
use rxpath_dev::sim::{Coalesce, SimConfig};
use rxpath_runtime::{Host, HostConfig, HostDevice};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

mod common;

use common::{inject_on as inject, sa};

const RULES: &str =
    "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:peers - [0:0]\n\
-A INPUT -s 198.18.0.66/32 -j DROP\n\
-A INPUT -p udp -m udp --dport 7001 -j REJECT --reject-with icmp-port-unreachable\n\
-A INPUT -m length --length 0:40 -j DROP\n\
-A INPUT -s 198.18.0.0/24 -j peers\n\
-A peers -p udp -m udp --sport 5000:5009 -j ACCEPT\n\
-A peers -j LOG\n\
COMMIT\n";

const RULES6: &str = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -s 2001:2::66/128 -j DROP\nCOMMIT\n";

fn load(texts: &[&str]) -> Filter {
    let t: Vec<(String, String)> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| (format!("rules{i}"), t.to_string()))
        .collect();
    Filter::load(&t, "sim0", FilterMode::Compiled).unwrap()
}

fn host(filter: Arc<FilterHandle>) -> Host {
    let mut cfg = HostConfig {
        queues: 1,
        napi_threads: 1,
        ..Default::default()
    };
    cfg.sock.local_addrs = vec!["198.18.0.1".parse().unwrap(), "2001:2::1".parse().unwrap()];
    cfg.sock.filter = Some(filter);
    let sim = SimConfig {
        coalesce: Coalesce::EVERY_FRAME,
        ..Default::default()
    };
    Host::start(cfg, HostDevice::Sim(sim)).expect("sim host")
}

fn counts(h: &FilterHandle, v6: bool) -> Vec<(String, Option<usize>, u64, u64)> {
    let f = h.current().unwrap();
    let rs = if v6 { f.v6.as_ref() } else { f.v4.as_ref() }.unwrap();
    rs.stats()
        .into_iter()
        .map(|r| (r.chain, r.rule, r.packets, r.bytes))
        .collect()
}

fn count(c: &[(String, Option<usize>, u64, u64)], chain: &str, rule: Option<usize>) -> (u64, u64) {
    c.iter()
        .find(|r| r.0 == chain && r.1 == rule)
        .map(|r| (r.2, r.3))
        .unwrap()
}

#[test]
fn the_host_judges_every_datagram_and_counts_every_rule() {
    let handle = Arc::new(FilterHandle::new(Some(load(&[RULES, RULES6]))));
    let h = host(handle.clone());
    let s7000 = h.udp_bind(sa("0.0.0.0", 7000)).unwrap();
    let s7001 = h.udp_bind(sa("0.0.0.0", 7001)).unwrap();
    let s6 = h.udp_bind(sa("::", 7600)).unwrap();
    for s in [&s7000, &s7001, &s6] {
        s.set_read_timeout(Some(Duration::from_secs(5)));
    }
    let payload = [7u8; 20]; // IPv4 length 48: past the length rule
    let mut want = 0;
    // Each kind several times, with a flow hash (the hook's quick key) and
    // without (the full key), so cached flows and walks both count.
    for round in 0..6u32 {
        let hash = if round % 2 == 0 {
            0
        } else {
            0x1234_5678 ^ round
        };
        inject(
            &h,
            sa("198.18.0.2", 5003),
            sa("198.18.0.1", 7000),
            &payload,
            hash,
        ); // peers ACCEPT
        inject(
            &h,
            sa("198.18.0.2", 6000),
            sa("198.18.0.1", 7000),
            &payload,
            hash,
        ); // LOG, policy
        inject(
            &h,
            sa("198.18.0.66", 5003),
            sa("198.18.0.1", 7000),
            &payload,
            hash,
        ); // DROP
        inject(
            &h,
            sa("198.18.0.2", 5003),
            sa("198.18.0.1", 7001),
            &payload,
            hash,
        ); // REJECT
        inject(
            &h,
            sa("198.18.0.2", 5003),
            sa("198.18.0.1", 7000),
            &[1u8; 4],
            hash,
        ); // length DROP
        inject(
            &h,
            sa("2001:2::2", 5),
            sa("2001:2::1", 7600),
            &payload,
            hash,
        ); // v6 policy
        inject(
            &h,
            sa("2001:2::66", 5),
            sa("2001:2::1", 7600),
            &payload,
            hash,
        ); // v6 DROP
        want += 2;
    }
    let mut b = [0u8; 2048];
    for _ in 0..want {
        let (n, src) = s7000.recv_from(&mut b).expect("an accepted datagram");
        assert_eq!(n, 20);
        assert!(src.ip() == "198.18.0.2".parse::<IpAddr>().unwrap(), "{src}");
    }
    for _ in 0..6 {
        s6.recv_from(&mut b).expect("an accepted v6 datagram");
    }
    s7000.set_read_timeout(Some(Duration::from_millis(200)));
    s7001.set_read_timeout(Some(Duration::from_millis(200)));
    assert!(s7000.recv_from(&mut b).is_err(), "nothing more for 7000");
    assert!(s7001.recv_from(&mut b).is_err(), "REJECT reaches no socket");
    let r = h.shutdown();
    let t = r.napi_total();
    assert_eq!(t.dropped.get(DropReason::Filter), 6 * 3);
    assert_eq!(t.dropped.get(DropReason::FilterReject), 6);
    assert_eq!(r.frames_home, r.frames_total, "every frame home");
    let c = counts(&handle, false);
    let (len48, len32) = (48u64, 32u64);
    assert_eq!(count(&c, "INPUT", Some(0)), (6, 6 * len48), "-s .66 DROP");
    assert_eq!(count(&c, "INPUT", Some(1)), (6, 6 * len48), "REJECT");
    assert_eq!(count(&c, "INPUT", Some(2)), (6, 6 * len32), "length");
    assert_eq!(count(&c, "INPUT", Some(3)), (12, 12 * len48), "jump");
    assert_eq!(count(&c, "peers", Some(0)), (6, 6 * len48), "peers ACCEPT");
    assert_eq!(count(&c, "peers", Some(1)), (6, 6 * len48), "LOG");
    assert_eq!(count(&c, "INPUT", None), (6, 6 * len48), "policy");
    let c6 = counts(&handle, true);
    let len6 = 40 + 8 + 20;
    assert_eq!(count(&c6, "INPUT", Some(0)), (6, 6 * len6));
    assert_eq!(count(&c6, "INPUT", None), (6, 6 * len6));
}

/// A 20-byte datagram (IPv4 length 48) from 198.18.0.2:5003 to port 7000.
fn peer_to_7000(h: &Host, hash: u32) {
    let (src, dst) = (sa("198.18.0.2", 5003), sa("198.18.0.1", 7000));
    inject(h, src, dst, &[7u8; 20], hash);
}

#[test]
fn a_rule_set_swapped_in_takes_over_and_keeps_the_counters_of_unchanged_rules() {
    let handle = Arc::new(FilterHandle::new(Some(load(&[RULES]))));
    let h = host(handle.clone());
    let s = h.udp_bind(sa("0.0.0.0", 7000)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut b = [0u8; 2048];
    for i in 0..10u32 {
        peer_to_7000(&h, i + 1);
        s.recv_from(&mut b).expect("accepted before the swap");
    }
    // Same rules, and one in front that drops the flow.
    let drop_all = RULES.replacen(
        ":peers - [0:0]\n",
        ":peers - [0:0]\n-A INPUT -p udp -m udp --dport 7000 -j DROP\n",
        1,
    );
    handle.replace(load(&[&drop_all]), || {
        std::thread::yield_now();
        true
    });
    for i in 0..10u32 {
        peer_to_7000(&h, i + 1);
    }
    s.set_read_timeout(Some(Duration::from_millis(300)));
    assert!(s.recv_from(&mut b).is_err(), "the new set drops the flow");
    let r = h.shutdown();
    assert_eq!(r.napi_total().dropped.get(DropReason::Filter), 10);
    let c = counts(&handle, false);
    assert_eq!(count(&c, "INPUT", Some(0)), (10, 480), "the new rule");
    // The old set's jump and ACCEPT kept their counts in the new set.
    assert_eq!(count(&c, "INPUT", Some(4)), (10, 480), "jump carried over");
    assert_eq!(
        count(&c, "peers", Some(0)),
        (10, 480),
        "ACCEPT carried over"
    );
}
