//! The TCP machine's own cost, with no I/O: a server [`Stack`] and a
//! client [`Stack`] wired back to back, the clock passed in. Prints the
//! server machine's nanoseconds (its `input`, calls, `poll_transmit`, and
//! the `next_deadline` and `take_touched` the runtime asks after each) per
//! request/response and per accepted connection, with a few or many other
//! connections in its table, and per MB of a bulk send: what rxpath's TCP
//! costs a server before any device or system call, and whether that
//! grows with the table or with what is in flight.
//!
//! `cargo bench -p rxpath-tcp --bench machine` (release build). For a
//! before/after, run the same file on both trees.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rxpath_tcp::{Nanos, SockId, Stack, TcpConfig};

const US: Nanos = 1_000;

fn server_addr() -> SocketAddr {
    "198.18.0.1:6379".parse().unwrap()
}

/// Both machines and the server's time spent.
struct Pair {
    s: Stack,
    c: Stack,
    now: Nanos,
    spent: Duration,
    touched: Vec<SockId>,
}

impl Pair {
    fn new() -> Self {
        let s = Stack::new(TcpConfig::default(), 1, vec!["198.18.0.1".parse().unwrap()]);
        let c = Stack::new(TcpConfig::default(), 2, vec!["198.18.0.2".parse().unwrap()]);
        Pair {
            s,
            c,
            now: 0,
            spent: Duration::ZERO,
            touched: Vec::new(),
        }
    }

    /// A server call, timed.
    fn on_server<T>(&mut self, f: impl FnOnce(&mut Stack, Nanos) -> T) -> T {
        let t = Instant::now();
        let r = f(&mut self.s, self.now);
        self.s.take_touched(&mut self.touched);
        std::hint::black_box(self.s.next_deadline());
        self.spent += t.elapsed();
        r
    }

    /// Deliver every segment either side has, until both are quiet.
    fn pump(&mut self) {
        loop {
            let mut moved = false;
            while let Some(t) = self.c.poll_transmit() {
                self.on_server(|s, now| s.input(&t.packet, now));
                moved = true;
            }
            let t0 = Instant::now();
            let mut from_server = Vec::new();
            while let Some(t) = self.s.poll_transmit() {
                from_server.push(t);
            }
            self.spent += t0.elapsed();
            for t in from_server {
                self.c.input(&t.packet, self.now);
                moved = true;
            }
            if !moved {
                return;
            }
        }
    }

    fn tick(&mut self, by: Nanos) {
        self.now += by;
        if self.c.next_deadline().is_some_and(|d| d <= self.now) {
            self.c.on_timeout(self.now);
        }
        let now = self.now;
        if self.s.next_deadline().is_some_and(|d| d <= now) {
            self.on_server(|s, now| s.on_timeout(now));
        }
        self.pump();
    }

    /// One connection from the client, accepted: (server's, client's).
    fn connect(&mut self, l: SockId) -> (SockId, SockId) {
        let c = self.c.socket(false);
        self.c.connect(c, server_addr(), self.now).expect("connect");
        self.pump();
        let (a, _) = self.on_server(|s, _| s.accept(l)).expect("accepted");
        (a, c)
    }
}

/// One request/response on (server's, client's) connection.
fn transaction(p: &mut Pair, (a, c): (SockId, SockId), buf: &mut [u8]) {
    p.c.send(c, &[b'q'; 40], false, false, p.now)
        .expect("request");
    p.pump();
    let n = p
        .on_server(|s, now| s.recv(a, buf, false, now))
        .expect("read");
    assert_eq!(n, 40);
    p.on_server(|s, now| s.send(a, &[b'a'; 9], false, false, now))
        .expect("answer");
    p.pump();
    assert_eq!(p.c.recv(c, buf, false, p.now), Ok(9));
    p.tick(10 * US);
}

fn listener(p: &mut Pair) -> SockId {
    let l = p.s.socket(false);
    p.s.bind(l, server_addr()).unwrap();
    p.s.listen(l, 4096).unwrap();
    l
}

/// ns of the server's machine per request/response over 50 connections,
/// with `idle` more established in its table.
fn rr(idle: usize, rounds: usize) -> f64 {
    let mut p = Pair::new();
    let l = listener(&mut p);
    for _ in 0..idle {
        p.connect(l);
    }
    let conns: Vec<_> = (0..50).map(|_| p.connect(l)).collect();
    let mut buf = [0u8; 512];
    for &c in &conns {
        transaction(&mut p, c, &mut buf);
    }
    p.spent = Duration::ZERO;
    for _ in 0..rounds {
        for &c in &conns {
            transaction(&mut p, c, &mut buf);
        }
    }
    p.spent.as_nanos() as f64 / (rounds * conns.len()) as f64
}

/// ns of the server's machine per connection (the handshake, a
/// request/response, both closes), with `idle` others established.
fn accepts(idle: usize, n: usize) -> f64 {
    let mut p = Pair::new();
    let l = listener(&mut p);
    for _ in 0..idle {
        p.connect(l);
    }
    let mut buf = [0u8; 512];
    p.spent = Duration::ZERO;
    for _ in 0..n {
        let (a, c) = p.connect(l);
        transaction(&mut p, (a, c), &mut buf);
        p.c.close(c, p.now).expect("client close");
        p.pump();
        p.on_server(|s, now| s.close(a, now)).expect("server close");
        p.pump();
        p.tick(10 * US);
    }
    p.spent.as_nanos() as f64 / n as f64
}

/// ns of the server's machine per MB it sends to a client that reads all
/// it gets, one round trip (100 µs) a round, and the congestion window
/// at the end: the sender's cost per ACK must not grow with what is in
/// flight.
fn bulk(total: usize) -> (f64, u32) {
    let mut p = Pair::new();
    let l = listener(&mut p);
    let (a, c) = p.connect(l);
    let chunk = vec![b'd'; 64 << 10];
    let mut buf = vec![0u8; 1 << 20];
    let (mut sent, mut got) = (0, 0);
    p.spent = Duration::ZERO;
    while got < total {
        while sent < total {
            match p.on_server(|s, now| {
                s.send(
                    a,
                    &chunk[..(total - sent).min(chunk.len())],
                    false,
                    false,
                    now,
                )
            }) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        // One round: what the server sent reaches the client, which reads
        // it all; its ACKs reach the server.
        let t0 = Instant::now();
        let mut from_server = Vec::new();
        while let Some(t) = p.s.poll_transmit() {
            from_server.push(t);
        }
        p.spent += t0.elapsed();
        p.now += 50 * US;
        for t in from_server {
            p.c.input(&t.packet, p.now);
        }
        while let Ok(n) = p.c.recv(c, &mut buf, false, p.now) {
            if n == 0 {
                break;
            }
            got += n;
        }
        if p.c.next_deadline().is_some_and(|d| d <= p.now) {
            p.c.on_timeout(p.now);
        }
        p.now += 50 * US;
        while let Some(t) = p.c.poll_transmit() {
            p.on_server(|s, now| s.input(&t.packet, now));
        }
        let now = p.now;
        if p.s.next_deadline().is_some_and(|d| d <= now) {
            p.on_server(|s, now| s.on_timeout(now));
        }
    }
    let cwnd = p.s.tcp_info(a, p.now).expect("info").tcpi_snd_cwnd;
    (p.spent.as_nanos() as f64 / (total as f64 / 1e6), cwnd)
}

fn main() {
    // `cargo bench` passes `--bench`; a `cargo test` run of benches
    // passes nothing: keep that one short.
    let quick = !std::env::args().any(|a| a == "--bench");
    let (rounds, n) = if quick { (2, 50) } else { (400, 10_000) };
    println!("rxpath-tcp machine, server side only, ns (median of 5)");
    for idle in [0, 10_000] {
        let med = |f: &dyn Fn() -> f64| {
            let mut v: Vec<f64> = (0..5).map(|_| f()).collect();
            v.sort_by(f64::total_cmp);
            v[2]
        };
        let r = med(&|| rr(idle, rounds));
        let a = med(&|| accepts(idle, n));
        println!(
            "  {idle:>6} other connections: {r:>8.0} per request/response, {a:>8.0} per accepted connection"
        );
    }
    for mb in [1, if quick { 4 } else { 256 }] {
        let (ns, cwnd) = bulk(mb << 20);
        println!("  bulk send of {mb:>3} MiB: {ns:>8.0} per MB, cwnd at the end {cwnd}");
    }
}
