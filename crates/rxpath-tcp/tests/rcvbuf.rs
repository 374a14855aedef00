//! The receive buffer's autotuning: a bulk sender into a reader that
//! keeps up, over a path with a 20 ms round trip, in virtual time. The
//! kernel grows `sk_rcvbuf` (`tcp_rcv_space_adjust`) so that the window
//! is never what limits such a flow; with the initial 128 KiB buffer the
//! window would stay under 64 KiB, 3.2 MB/s at this RTT.

use std::collections::VecDeque;
use std::net::SocketAddr;

use rxpath_tcp::{Nanos, SockId, SockOpt, Stack, TcpConfig};

const MS: Nanos = 1_000_000;
const ONE_WAY: Nanos = 10 * MS;

fn server_addr() -> SocketAddr {
    "198.18.0.1:5201".parse().unwrap()
}

/// A transmit as the wire carries it (a TSO packet cut at its MSS).
fn pieces(t: &rxpath_tcp::Transmit) -> Vec<Vec<u8>> {
    match t.gso_size {
        0 => vec![t.packet.clone()],
        mss => rxpath_tcp::wire::segment(&t.packet, mss as usize),
    }
}

/// Two machines and the wire between them (segments in flight, each
/// with its arrival time; one-way delay `ONE_WAY`).
struct Path {
    s: Stack,
    c: Stack,
    now: Nanos,
    to_server: VecDeque<(Nanos, Vec<u8>)>,
    to_client: VecDeque<(Nanos, Vec<u8>)>,
}

impl Path {
    fn new(cfg: TcpConfig) -> Self {
        Path {
            s: Stack::new(cfg.clone(), 1, vec!["198.18.0.1".parse().unwrap()]),
            c: Stack::new(cfg, 2, vec!["198.18.0.2".parse().unwrap()]),
            now: 0,
            to_server: VecDeque::new(),
            to_client: VecDeque::new(),
        }
    }

    /// Put what both sent on the wire.
    fn collect(&mut self) {
        while let Some(t) = self.c.poll_transmit() {
            for p in pieces(&t) {
                self.to_server.push_back((self.now + ONE_WAY, p));
            }
        }
        while let Some(t) = self.s.poll_transmit() {
            for p in pieces(&t) {
                self.to_client.push_back((self.now + ONE_WAY, p));
            }
        }
    }

    /// Advance to the next arrival or timer (at most `until`), deliver
    /// and fire what is due.
    fn step(&mut self, until: Nanos) {
        self.collect();
        let next = [
            self.to_server.front().map(|p| p.0),
            self.to_client.front().map(|p| p.0),
            self.s.next_deadline(),
            self.c.next_deadline(),
            Some(until),
        ]
        .into_iter()
        .flatten()
        .min()
        .expect("until");
        self.now = self.now.max(next);
        while self.to_server.front().is_some_and(|p| p.0 <= self.now) {
            let (_, p) = self.to_server.pop_front().unwrap();
            self.s.input(&p, self.now);
        }
        while self.to_client.front().is_some_and(|p| p.0 <= self.now) {
            let (_, p) = self.to_client.pop_front().unwrap();
            self.c.input(&p, self.now);
        }
        if self.s.next_deadline().is_some_and(|d| d <= self.now) {
            self.s.on_timeout(self.now);
        }
        if self.c.next_deadline().is_some_and(|d| d <= self.now) {
            self.c.on_timeout(self.now);
        }
    }
}

/// Bulk data for `secs` seconds into a reader that takes all there is;
/// (server's connection, client's, bytes read).
fn bulk(p: &mut Path, rcvbuf: Option<i32>, secs: u64) -> (SockId, SockId, u64) {
    let l = p.s.socket(false);
    if let Some(b) = rcvbuf {
        p.s.set_option(l, SockOpt::RcvBuf, b, 0).unwrap();
    }
    p.s.bind(l, server_addr()).unwrap();
    p.s.listen(l, 8).unwrap();
    let c = p.c.socket(false);
    p.c.connect(c, server_addr(), 0).unwrap();
    let mut a = None;
    while a.is_none() {
        p.step(p.now + MS);
        a = p.s.accept(l).ok().map(|(a, _)| a);
    }
    let a = a.unwrap();
    let chunk = vec![7u8; 64 * 1024];
    let mut buf = vec![0u8; 256 * 1024];
    let mut read = 0u64;
    let end = p.now + secs * 1000 * MS;
    while p.now < end {
        while p
            .c
            .send(c, &chunk, false, false, p.now)
            .is_ok_and(|n| n > 0)
        {}
        while let Ok(n) = p.s.recv(a, &mut buf, false, p.now) {
            if n == 0 {
                break;
            }
            read += n as u64;
        }
        p.step(end);
    }
    (a, c, read)
}

#[test]
fn a_reader_that_keeps_up_gets_a_buffer_past_the_initial_window() {
    let mut p = Path::new(TcpConfig::default());
    let (a, c, read) = bulk(&mut p, None, 1);
    let info = p.s.tcp_info(a, p.now).unwrap();
    let rcvbuf = p.s.option(a, SockOpt::RcvBuf).unwrap() as u32;
    // The receiver measured the path (20 ms, from timestamps or one
    // window's arrival) and what its reader takes per RTT.
    assert!(
        (20_000..=21_000).contains(&info.tcpi_rcv_rtt),
        "rcv_rtt {} us",
        info.tcpi_rcv_rtt
    );
    assert!(info.tcpi_rcv_space > 64 * 1024, "{info:?}");
    // The buffer grew past tcp_rmem[1] and the window past what it
    // allowed; the sender saw that window.
    assert!(rcvbuf > 131_072, "sk_rcvbuf {rcvbuf}");
    assert!(rcvbuf <= TcpConfig::default().tcp_rmem[2]);
    assert!(info.tcpi_rcv_wnd > 65_536, "rcv_wnd {}", info.tcpi_rcv_wnd);
    let seen = p.c.tcp_info(c, p.now).unwrap().tcpi_snd_wnd;
    assert!(seen > 65_536, "the sender's snd_wnd {seen}");
    // Far more than a 64 KiB window lets through in 1 s at 20 ms.
    assert!(read > 4 * 65_536 * 50, "read {read} bytes in 1 s");
}

#[test]
fn so_rcvbuf_fixes_the_buffer_and_the_window() {
    let mut p = Path::new(TcpConfig::default());
    let (a, _c, read) = bulk(&mut p, Some(65_536), 1);
    let info = p.s.tcp_info(a, p.now).unwrap();
    assert_eq!(p.s.option(a, SockOpt::RcvBuf).unwrap(), 131_072);
    assert!(info.tcpi_rcv_wnd <= 65_536, "rcv_wnd {}", info.tcpi_rcv_wnd);
    // A 64 KiB window per 20 ms round trip: 3.3 MB in 1 s at most.
    assert!(read <= 65_536 * 50 + 65_536, "read {read}");
}

#[test]
fn tcp_moderate_rcvbuf_0_keeps_the_initial_buffer() {
    let mut cfg = TcpConfig::default();
    cfg.set("tcp_moderate_rcvbuf", "0").unwrap();
    let mut p = Path::new(cfg);
    let (a, _c, _) = bulk(&mut p, None, 1);
    assert_eq!(p.s.option(a, SockOpt::RcvBuf).unwrap(), 131_072);
    // The measure still runs (tcpi_rcv_space moves), the buffer not.
    assert!(p.s.tcp_info(a, p.now).unwrap().tcpi_rcv_space > 14_600);
}

#[test]
fn the_first_measure_starts_at_ten_segments_as_the_kernels() {
    let mut p = Path::new(TcpConfig::default());
    let (a, _c, _) = bulk(&mut p, None, 0);
    let info = p.s.tcp_info(a, p.now).unwrap();
    // `tcp_init_buffer_space`: min(rcv_ssthresh, rcv_wnd, 10 * advmss);
    // the clamp one segment short of the buffer's window.
    assert_eq!(info.tcpi_rcv_space, 10 * info.tcpi_advmss);
    assert_eq!(info.tcpi_rcv_ssthresh, 65_536 - info.tcpi_advmss);
}
