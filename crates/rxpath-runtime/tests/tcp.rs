//! rxpath's TCP on a real interface (root only; CI runs it as root): the
//! kernel on the veth's other end is the peer, its sockets the judge.
//! Segments come in through AF_XDP (the XDP program's port map takes the
//! TCP port, so the kernel on this end never sees one), go through GRO and
//! IP input to the host's TCP machine, and leave through the TX ring.

use rxpath_os::sched;
use rxpath_runtime::lab::{mac_in, LabGuard, Topology, HOST_ADDR, PEER_ADDR};
use rxpath_runtime::{Host, HostConfig, HostDevice, HostReport};
use rxpath_testkit::{can_run, Need};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// A veth lab named after `tag` and an AF_XDP host with TCP on its host
/// end (rxpath's GRO as `gro` says) that knows the peer's MAC.
fn tcp_host(tag: &str, gro: bool) -> (LabGuard, Host) {
    let guard = Topology::named(tag)
        .up_scoped()
        .expect("netns + veth (iproute2)");
    let t = &guard.0;
    let dev = HostDevice::xdp_ports(&t.host_if, 6);
    let cfg = HostConfig {
        tcp: true,
        gro,
        ..HostConfig::default()
    };
    let h = Host::start(cfg, dev).expect("AF_XDP host");
    h.sockets().add_neighbor(
        PEER_ADDR.parse().unwrap(),
        mac_in(&t.ns, &t.peer_if).expect("the peer's MAC"),
    );
    (guard, h)
}

/// Run `f` on a thread inside the lab's peer namespace.
fn in_peer<R: Send + 'static>(
    guard: &LabGuard,
    f: impl FnOnce() -> R + Send + 'static,
) -> std::thread::JoinHandle<R> {
    let path = format!("/run/netns/{}", guard.0.ns);
    std::thread::spawn(move || {
        sched::enter_netns(&path).expect("setns");
        f()
    })
}

/// `n` bytes nobody would write by accident (a xorshift stream from `seed`).
fn pattern(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A kernel client: connect to `to`, write `data`, shut the write side,
/// read until the end of the stream; what came back.
fn kernel_echo_client(to: SocketAddr, data: Vec<u8>) -> Vec<u8> {
    let c = TcpStream::connect_timeout(&to, Duration::from_secs(5)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut w = c.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        w.write_all(&data).expect("write");
        w.shutdown(Shutdown::Write).expect("shutdown");
    });
    let mut back = Vec::new();
    (&c).read_to_end(&mut back).expect("read to the end");
    writer.join().unwrap();
    back
}

/// Echo one rxpath connection until its peer's FIN, then close.
fn rxpath_echo(s: rxpath_runtime::TcpStream) -> usize {
    let mut buf = vec![0u8; 65536];
    let mut total = 0;
    loop {
        let n = s.read(&mut buf).expect("read");
        if n == 0 {
            return total;
        }
        s.write_all(&buf[..n]).expect("write");
        total += n;
    }
}

/// The counter `name` (`Tcp:...`, `TcpExt:...`) of the host's TCP.
fn counter(h: &Host, name: &str) -> u64 {
    let (c, _) = h.tcp_counters().expect("a host with TCP");
    c.into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no counter {name}"))
}

fn assert_clean(h: Host) -> HostReport {
    let (_, tx) = h.tcp_counters().expect("a host with TCP");
    assert_eq!(tx.no_neighbour, 0, "segments without a neighbour");
    assert_eq!(counter(&h, "Tcp:InErrs"), 0);
    assert_eq!(counter(&h, "Tcp:InCsumErrors"), 0);
    let report = h.shutdown();
    assert_eq!(
        report.frames_home, report.frames_total,
        "every frame back in the pool"
    );
    report
}

/// A kernel client sends 4 MB through an rxpath listener's connection and
/// reads it all back, byte for byte: the handshake, the receive window,
/// delayed ACKs, the send side's segmentation and the FINs both ways.
#[test]
fn a_kernel_client_is_echoed_byte_for_byte() {
    if !can_run(&[Need::Root]) {
        return;
    }
    for gro in [false, true] {
        let (guard, h) = tcp_host(if gro { "tcg" } else { "tce" }, gro);
        let addr: SocketAddr = format!("{HOST_ADDR}:7100").parse().unwrap();
        let l = h.tcp_listen(addr, 16).expect("listen");
        let data = pattern(4 << 20, 7);
        let sent = data.clone();
        let client = in_peer(&guard, move || kernel_echo_client(addr, data));
        let (s, peer) = l.accept().expect("accept");
        assert_eq!(peer.ip().to_string(), PEER_ADDR);
        assert_eq!(rxpath_echo(s), sent.len());
        let back = client.join().expect("client");
        assert_eq!(back.len(), sent.len(), "gro {gro}: bytes echoed");
        assert!(
            back == sent,
            "gro {gro}: the echo differs from what was sent"
        );
        assert_eq!(counter(&h, "Tcp:PassiveOpens"), 1);
        drop(l);
        assert_clean(h);
    }
}

/// Sixteen kernel clients at once, each on its own connection to one
/// rxpath listener (a thread per connection on rxpath's side): each reads
/// back exactly what it wrote.
#[test]
fn sixteen_connections_at_once_each_get_their_own_bytes() {
    if !can_run(&[Need::Root]) {
        return;
    }
    const N: usize = 16;
    let (guard, h) = tcp_host("tcm", true);
    let addr: SocketAddr = format!("{HOST_ADDR}:7101").parse().unwrap();
    let l = h.tcp_listen(addr, N as i32).expect("listen");
    let clients: Vec<_> = (0..N)
        .map(|i| {
            let data = pattern(256 << 10, i as u64 + 100);
            in_peer(&guard, move || kernel_echo_client(addr, data))
        })
        .collect();
    let servers: Vec<_> = (0..N)
        .map(|_| {
            let (s, _) = l.accept().expect("accept");
            std::thread::spawn(move || rxpath_echo(s))
        })
        .collect();
    for (i, c) in clients.into_iter().enumerate() {
        let back = c.join().expect("client");
        assert!(back == pattern(256 << 10, i as u64 + 100), "client {i}");
    }
    for s in servers {
        assert_eq!(s.join().expect("server"), 256 << 10);
    }
    assert_eq!(counter(&h, "Tcp:PassiveOpens"), N as u64);
    drop(l);
    assert_clean(h);
}

/// rxpath connects to a kernel server on the peer end (the port it sends
/// from held in the kernel and taken by the XDP program), sends 1 MB,
/// reads the kernel's echo back, and closes first: the kernel's socket
/// sees the end of the stream after every byte.
#[test]
fn rxpath_connects_to_a_kernel_server() {
    if !can_run(&[Need::Root]) {
        return;
    }
    let (guard, h) = tcp_host("tcc", true);
    let to: SocketAddr = format!("{PEER_ADDR}:7102").parse().unwrap();
    let (ltx, lrx) = std::sync::mpsc::channel();
    let server = in_peer(&guard, move || {
        let l = TcpListener::bind(to).expect("kernel listener");
        ltx.send(()).unwrap();
        let (mut c, _) = l.accept().expect("accept");
        let mut got = Vec::new();
        let mut buf = [0u8; 65536];
        loop {
            let n = c.read(&mut buf).expect("read");
            if n == 0 {
                break;
            }
            c.write_all(&buf[..n]).expect("write");
            got.extend_from_slice(&buf[..n]);
        }
        got
    });
    lrx.recv().unwrap();
    let from: SocketAddr = format!("{HOST_ADDR}:0").parse().unwrap();
    let s = h.tcp_connect(from, to).expect("connect");
    let (local, remote) = s.addrs().unwrap();
    assert_eq!(remote, Some(to));
    assert_ne!(local.map(|a| a.port()), Some(0));
    let data = pattern(1 << 20, 3);
    let back = std::thread::scope(|sc| {
        sc.spawn(|| {
            s.write_all(&data).expect("write");
            s.shutdown(false, true).expect("shutdown");
        });
        let mut back = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            let n = s.read(&mut buf).expect("read");
            if n == 0 {
                break;
            }
            back.extend_from_slice(&buf[..n]);
        }
        back
    });
    assert!(back == data, "the echo differs ({} bytes)", back.len());
    assert!(server.join().expect("server") == data);
    assert_eq!(counter(&h, "Tcp:ActiveOpens"), 1);
    drop(s);
    assert_clean(h);
}

/// RFS for TCP (seed 002): a read records the reader's CPU for the
/// connection's flow in the sock flow table (`sock_rps_record_flow`), under
/// the hash the path gave the connection's segments (the veth gives none:
/// rxpath's software flow hash), so steering sends its next segments there.
#[test]
fn a_read_records_the_readers_cpu_for_rfs() {
    if !can_run(&[Need::Root]) {
        return;
    }
    let cpu = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    let (guard, h) = tcp_host("tcr", true);
    let addr: SocketAddr = format!("{HOST_ADDR}:7103").parse().unwrap();
    let l = h.tcp_listen(addr, 4).expect("listen");
    let client = in_peer(&guard, move || {
        kernel_echo_client(addr, pattern(256 << 10, 3))
    });
    let (s, peer) = l.accept().expect("accept");
    let key = rxpath_wire::FlowKey::new(peer.ip(), addr.ip(), peer.port(), addr.port(), 6);
    let hash = rxpath_wire::hash::flow_hash(&key);
    let flows = h.sockets().sock_flows().clone();
    assert_eq!(flows.desired_cpu(hash), None, "recorded before any read");
    let reader = std::thread::spawn(move || {
        sched::pin(0, cpu).expect("pin the reader");
        rxpath_echo(s)
    });
    assert_eq!(reader.join().expect("reader"), 256 << 10);
    assert_eq!(client.join().expect("client").len(), 256 << 10);
    assert_eq!(
        flows.desired_cpu(hash),
        Some(cpu as u32),
        "the flow is not recorded on the reader's CPU"
    );
    drop(l);
    assert_clean(h);
}

/// A child keeps the flow its segments gave it before `accept`
/// (`sk_rxhash`): a reader that finds all its data and the FIN queued,
/// and so sees no segment after `accept`, still records its CPU for the
/// flow.
#[test]
fn a_child_keeps_the_flow_its_segments_gave_it_before_accept() {
    if !can_run(&[Need::Root]) {
        return;
    }
    let cpu = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    let (guard, h) = tcp_host("tca", true);
    let addr: SocketAddr = format!("{HOST_ADDR}:7104").parse().unwrap();
    let l = h.tcp_listen(addr, 4).expect("listen");
    let (sent_tx, sent) = std::sync::mpsc::channel();
    let client = in_peer(&guard, move || {
        let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
        c.write_all(&pattern(4096, 5)).expect("write");
        c.shutdown(Shutdown::Write).expect("shutdown");
        sent_tx.send(()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).expect("read to the end");
        rest.len()
    });
    sent.recv().expect("the client wrote");
    // Let the data and the FIN land in the child's queue first.
    std::thread::sleep(Duration::from_millis(200));
    let (s, peer) = l.accept().expect("accept");
    let key = rxpath_wire::FlowKey::new(peer.ip(), addr.ip(), peer.port(), addr.port(), 6);
    let hash = rxpath_wire::hash::flow_hash(&key);
    let flows = h.sockets().sock_flows().clone();
    let reader = std::thread::spawn(move || {
        sched::pin(0, cpu).expect("pin the reader");
        let mut buf = vec![0u8; 65536];
        let mut total = 0;
        loop {
            match s.read(&mut buf).expect("read") {
                0 => return total,
                n => total += n,
            }
        }
    });
    assert_eq!(reader.join().expect("reader"), 4096);
    assert_eq!(client.join().expect("client"), 0);
    assert_eq!(
        flows.desired_cpu(hash),
        Some(cpu as u32),
        "the child's flow is not recorded on the reader's CPU"
    );
    drop(l);
    assert_clean(h);
}

/// A port whose kernel connections wait in TIME_WAIT stays the kernel's,
/// as for a kernel socket bound without `SO_REUSEADDR` (rxpath's hold on
/// it never listens, so with `SO_REUSEADDR` any server could share it):
/// the listener is refused and says why.
#[test]
fn a_port_an_earlier_kernel_server_left_in_time_wait_is_refused_with_why() {
    if !can_run(&[Need::Root]) {
        return;
    }
    let (guard, h) = tcp_host("tcw", true);
    let addr: SocketAddr = format!("{HOST_ADDR}:7105").parse().unwrap();
    let kernel = TcpListener::bind(addr).expect("the kernel's listener");
    let client = in_peer(&guard, move || {
        let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).expect("read to the end");
    });
    // The server closes first: its end of the pair waits in TIME_WAIT.
    drop(kernel.accept().expect("the kernel's accept"));
    client.join().expect("client");
    drop(kernel);
    let e = h.tcp_listen(addr, 4).expect_err("the port is in TIME_WAIT");
    assert_eq!(e.raw_os_error(), None, "a message, not a bare errno");
    assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
    assert!(e.to_string().contains("TIME_WAIT"), "{e}");
    assert_clean(h);
}
