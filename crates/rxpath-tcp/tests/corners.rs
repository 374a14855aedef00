//! The state machine's corners, driven without a network: a scripted
//! peer answers the stack's segments, the clock is passed in.

use std::net::SocketAddr;

use rxpath_tcp::wire::{self, OptsOut, SegOut};
use rxpath_tcp::{Nanos, SockId, SockOpt, Stack, State, TcpConfig};
use rxpath_wire::tcp::flags::{ACK, FIN, PSH, RST, SYN};

const MS: Nanos = 1_000_000;

fn local() -> SocketAddr {
    "198.18.0.1:8080".parse().unwrap()
}
fn peer() -> SocketAddr {
    "198.18.0.2:40000".parse().unwrap()
}

/// The peer's side of one connection: what it sends, what it saw.
struct Peer {
    seq: u32,
    ack: u32,
}

impl Peer {
    fn seg(&mut self, flags: u16, payload: &[u8], wnd: u16) -> Vec<u8> {
        let s = SegOut {
            src: peer(),
            dst: local(),
            seq: self.seq,
            ack: self.ack,
            flags,
            wnd,
            opts: OptsOut::default(),
            payload,
            ip_id: 0,
            tos: 0,
        };
        self.seq = self
            .seq
            .wrapping_add(payload.len() as u32 + (flags & (SYN | FIN) != 0) as u32);
        wire::build(&s)
    }
}

fn out(st: &mut Stack) -> Vec<(u16, u32, u32, usize)> {
    let mut v = Vec::new();
    while let Some(t) = st.poll_transmit() {
        let s = wire::parse(&t.packet).expect("the stack sends well-formed segments");
        v.push((s.flags, s.seq, s.ack, s.payload.len()));
    }
    v
}

/// A listener and an established connection accepted from it.
fn established(st: &mut Stack) -> (SockId, SockId, Peer) {
    established_with(st, |_, _| {})
}

/// [`established`], the listener given `opts` before its `bind`.
fn established_with(
    st: &mut Stack,
    opts: impl FnOnce(&mut Stack, SockId),
) -> (SockId, SockId, Peer) {
    let l = st.socket(false);
    opts(st, l);
    st.bind(l, local()).unwrap();
    st.listen(l, 8).unwrap();
    let mut p = Peer { seq: 1000, ack: 0 };
    let syn = p.seg(SYN, b"", 65535);
    st.input(&syn, 0);
    let o = out(st);
    assert_eq!(o.len(), 1);
    assert_eq!(o[0].0, SYN | ACK);
    p.ack = o[0].1.wrapping_add(1);
    let ack = p.seg(ACK, b"", 65535);
    st.input(&ack, MS);
    let (c, from) = st.accept(l).unwrap();
    assert_eq!(from, peer());
    assert_eq!(st.state(c).unwrap(), State::Established);
    (l, c, p)
}

#[test]
fn a_lost_syn_ack_is_sent_again_on_the_peers_retransmitted_syn_and_on_timeout() {
    let mut st = Stack::new(TcpConfig::default(), 7, vec![]);
    let l = st.socket(false);
    st.bind(l, local()).unwrap();
    st.listen(l, 8).unwrap();
    let mut p = Peer { seq: 1000, ack: 0 };
    let syn = p.seg(SYN, b"", 65535);
    st.input(&syn, 0);
    let first = out(&mut st);
    assert_eq!(first[0].0, SYN | ACK);
    // The SYN again (the peer never heard us): the same SYN-ACK at once.
    st.input(&syn, 100 * MS);
    let again = out(&mut st);
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].0, again[0].1), (SYN | ACK, first[0].1));
    // Silence: the SYN-ACK's own timer (1 s) sends it once more.
    let t = st.next_deadline().expect("a SYN-ACK timer");
    assert!(t >= 1000 * MS);
    st.on_timeout(t);
    assert_eq!(out(&mut st)[0].0, SYN | ACK);
    assert!(
        st.accept(l).is_err(),
        "nothing to accept before the handshake ends"
    );
}

#[test]
fn a_reset_in_each_synchronized_state_closes_with_the_kernels_error() {
    // ESTABLISHED: ECONNRESET on the next read.
    let mut st = Stack::new(TcpConfig::default(), 7, vec![]);
    let (_l, c, mut p) = established(&mut st);
    let rst = p.seg(RST | ACK, b"", 0);
    st.input(&rst, 2 * MS);
    assert_eq!(st.state(c).unwrap(), State::Closed);
    assert_eq!(
        st.recv(c, &mut [0; 10], false, 3 * MS),
        Err(libc::ECONNRESET)
    );
    assert_eq!(st.mib.EstabResets, 1);

    // CLOSE_WAIT: EPIPE.
    let mut st = Stack::new(TcpConfig::default(), 7, vec![]);
    let (_l, c, mut p) = established(&mut st);
    let fin = p.seg(FIN | ACK, b"", 65535);
    st.input(&fin, 2 * MS);
    assert_eq!(st.state(c).unwrap(), State::CloseWait);
    out(&mut st);
    let rst = p.seg(RST | ACK, b"", 0);
    st.input(&rst, 3 * MS);
    assert_eq!(st.state(c).unwrap(), State::Closed);
    assert_eq!(st.take_error(c).unwrap(), Some(libc::EPIPE));

    // A reset out of window draws a challenge ACK and changes nothing.
    let mut st = Stack::new(TcpConfig::default(), 7, vec![]);
    let (_l, c, mut p) = established(&mut st);
    p.seq = p.seq.wrapping_add(10);
    let rst = p.seg(RST | ACK, b"", 0);
    st.input(&rst, 2 * MS);
    assert_eq!(st.state(c).unwrap(), State::Established);
    assert_eq!(out(&mut st)[0].0, ACK);
    assert_eq!(st.ext.TCPChallengeACK, 1);
}

#[test]
fn time_wait_lasts_sixty_seconds_then_the_pair_is_free() {
    let mut st = Stack::new(TcpConfig::default(), 7, vec![]);
    let (_l, c, mut p) = established(&mut st);
    st.close(c, 2 * MS).unwrap();
    let fin = out(&mut st);
    assert_eq!(fin[0].0, FIN | ACK);
    p.ack = fin[0].1.wrapping_add(1);
    let ack = p.seg(ACK, b"", 65535);
    st.input(&ack, 3 * MS);
    let their_fin = p.seg(FIN | ACK, b"", 65535);
    st.input(&their_fin, 4 * MS);
    assert_eq!(out(&mut st)[0].0, ACK);
    // A retransmitted FIN in TIME_WAIT is ACKed again.
    p.seq = p.seq.wrapping_sub(1);
    let again = p.seg(FIN | ACK, b"", 65535);
    st.input(&again, 10 * MS);
    assert_eq!(out(&mut st)[0].0, ACK);
    let end = st.next_deadline().expect("TIME_WAIT's timer");
    assert!(end >= 60_000 * MS);
    st.on_timeout(end);
    // Gone: a segment for the pair now draws a reset.
    let late = p.seg(ACK, b"x", 65535);
    st.input(&late, end + MS);
    assert_eq!(out(&mut st)[0].0 & RST, RST);
}

#[test]
fn a_zero_window_is_probed_and_data_flows_when_it_opens() {
    let mut st = Stack::new(TcpConfig::default(), 7, vec![]);
    let (_l, c, mut p) = established(&mut st);
    let closed = p.seg(ACK, b"", 0);
    st.input(&closed, 2 * MS);
    assert_eq!(st.send(c, b"hello", false, false, 3 * MS), Ok(5));
    assert!(out(&mut st).is_empty(), "nothing goes into a zero window");
    let t = st.next_deadline().expect("the persist timer");
    st.on_timeout(t);
    let probe = out(&mut st);
    assert_eq!(probe.len(), 1);
    assert_eq!(
        (probe[0].0, probe[0].3),
        (ACK, 0),
        "a window probe: a bare ACK below snd_una"
    );
    let open = p.seg(ACK, b"", 65535);
    st.input(&open, t + MS);
    let data = out(&mut st);
    assert_eq!((data[0].0 & PSH, data[0].3), (PSH, 5));
}

#[test]
fn a_peer_that_vanishes_is_given_up_with_etimedout() {
    let cfg = TcpConfig {
        tcp_retries2: 3,
        ..TcpConfig::default()
    };
    let mut st = Stack::new(cfg, 7, vec![]);
    let (_l, c, _p) = established(&mut st);
    st.send(c, b"are you there", false, false, 2 * MS).unwrap();
    out(&mut st);
    let mut retransmits = 0;
    let mut now = 2 * MS;
    while st.state(c).unwrap() == State::Established {
        now = st.next_deadline().expect("a timer while data is out");
        st.on_timeout(now);
        retransmits += out(&mut st).len();
        assert!(retransmits < 20, "the connection must be given up");
    }
    assert!(retransmits >= 3);
    assert_eq!(st.state(c).unwrap(), State::Closed);
    assert_eq!(st.take_error(c).unwrap(), Some(libc::ETIMEDOUT));
    assert!(now > 1000 * MS, "backed off, not given up at once");
}

#[test]
fn a_full_accept_queue_drops_the_syn_and_counts_it() {
    let mut st = Stack::new(TcpConfig::default(), 7, vec![]);
    let l = st.socket(false);
    st.bind(l, local()).unwrap();
    st.listen(l, 0).unwrap();
    let mut dropped = 0;
    for port in 0..3u16 {
        let src: SocketAddr = format!("198.18.0.2:{}", 41000 + port).parse().unwrap();
        let s = SegOut {
            src,
            dst: local(),
            seq: 5,
            ack: 0,
            flags: SYN,
            wnd: 65535,
            opts: OptsOut::default(),
            payload: b"",
            ip_id: 0,
            tos: 0,
        };
        st.input(&wire::build(&s), 0);
        let o = out(&mut st);
        if o.is_empty() {
            dropped += 1;
            continue;
        }
        let ack = SegOut {
            seq: 6,
            ack: o[0].1.wrapping_add(1),
            flags: ACK,
            ..s
        };
        st.input(&wire::build(&ack), MS);
        out(&mut st);
    }
    // Backlog 0 holds one connection (`sk_acceptq_is_full` tests `>`);
    // the SYNs after it are dropped and counted, not answered.
    assert!(st.accept(l).is_ok());
    assert!(st.accept(l).is_err());
    assert_eq!(dropped, 2);
    assert_eq!(st.ext.ListenOverflows, 2);
}

#[test]
fn a_new_syn_reopens_a_time_wait_pair() {
    let mut st = Stack::new(TcpConfig::default(), 7, vec![]);
    let (l, c, mut p) = established(&mut st);
    // We close first; the peer acknowledges and closes: TIME_WAIT.
    st.close(c, 2 * MS).unwrap();
    let fin = out(&mut st);
    p.ack = fin[0].1.wrapping_add(1);
    let ack = p.seg(ACK, b"", 65535);
    st.input(&ack, 3 * MS);
    let their_fin = p.seg(FIN | ACK, b"", 65535);
    st.input(&their_fin, 4 * MS);
    out(&mut st);
    // A SYN from the same port, above what TIME_WAIT expects next
    // (`tcp_timewait_state_process`'s TCP_TW_SYN): a new connection.
    p.seq = p.seq.wrapping_add(100_000);
    let syn = p.seg(SYN, b"", 65535);
    st.input(&syn, 5 * MS);
    let o = out(&mut st);
    assert_eq!(o.len(), 1);
    assert_eq!(o[0].0, SYN | ACK, "the listener answers the new SYN");
    p.ack = o[0].1.wrapping_add(1);
    let ack = p.seg(ACK, b"", 65535);
    st.input(&ack, 6 * MS);
    let (c2, from) = st.accept(l).unwrap();
    assert_eq!(from, peer());
    assert_eq!(st.state(c2).unwrap(), State::Established);
}

/// Binds across families as `inet_bind_conflict` has them: an IPv6
/// wildcard with `IPV6_V6ONLY` shares a port with the IPv4 wildcard (a
/// server listening on both, as nginx's `listen [::]:80` does), one
/// without it does not.
#[test]
fn an_ipv6_only_wildcard_shares_its_port_with_the_ipv4_wildcard() {
    let mut st = Stack::new(TcpConfig::default(), 7, vec![]);
    let v4 = st.socket(false);
    st.bind(v4, "0.0.0.0:80".parse().unwrap()).unwrap();
    st.listen(v4, 16).unwrap();
    let dual = st.socket(true);
    assert_eq!(
        st.bind(dual, "[::]:80".parse().unwrap()),
        Err(libc::EADDRINUSE)
    );
    let only = st.socket(true);
    st.set_option(only, rxpath_tcp::SockOpt::V6Only, 1, 0)
        .unwrap();
    assert_eq!(st.option(only, rxpath_tcp::SockOpt::V6Only), Ok(1));
    st.bind(only, "[::]:80".parse().unwrap()).unwrap();
    assert_eq!(
        st.set_option(only, rxpath_tcp::SockOpt::V6Only, 0, 0),
        Err(libc::EINVAL),
        "set before bind only"
    );
    // The other order: a dual-stack IPv6 wildcard first takes IPv4's too.
    let mut st = Stack::new(TcpConfig::default(), 7, vec![]);
    let dual = st.socket(true);
    st.bind(dual, "[::]:81".parse().unwrap()).unwrap();
    let v4 = st.socket(false);
    assert_eq!(
        st.bind(v4, "0.0.0.0:81".parse().unwrap()),
        Err(libc::EADDRINUSE)
    );
}

/// A SYN from `port` to the test's listener, with `opts`.
fn syn_from(port: u16, seq: u32, opts: OptsOut) -> (SocketAddr, SegOut<'static>) {
    let src: SocketAddr = format!("198.18.0.2:{port}").parse().unwrap();
    let s = SegOut {
        src,
        dst: local(),
        seq,
        ack: 0,
        flags: SYN,
        wnd: 65535,
        opts,
        payload: b"",
        ip_id: 0,
        tos: 0,
    };
    (src, s)
}

/// The SYN-ACK the stack sent: its sequence number and echo-able tsval.
fn syn_ack(st: &mut Stack) -> (u32, Option<u32>) {
    let t = st.poll_transmit().expect("a SYN-ACK");
    let s = wire::parse(&t.packet).unwrap();
    assert_eq!(s.flags, SYN | ACK);
    assert!(st.poll_transmit().is_none());
    (s.seq, s.opts.ts.map(|(v, _)| v))
}

#[test]
fn a_full_syn_queue_answers_with_cookies_and_their_acks_make_connections() {
    let cfg = TcpConfig {
        tcp_max_syn_backlog: 1,
        ..TcpConfig::default()
    };
    let mut st = Stack::new(cfg, 7, vec![]);
    let l = st.socket(false);
    st.bind(l, local()).unwrap();
    st.listen(l, 1).unwrap();
    // The first SYN fills the SYN queue (its peer never answers).
    let (_, first) = syn_from(42000, 100, OptsOut::default());
    st.input(&wire::build(&first), 0);
    syn_ack(&mut st);
    assert_eq!(st.ext.SyncookiesSent, 0);
    // The next is answered with a cookie, with timestamps, window scaling
    // and SACK as the SYN offered them, and nothing kept.
    let opts = OptsOut {
        mss: Some(1460),
        sack_ok: true,
        ts: Some((5000, 0)),
        wscale: Some(7),
        sacks: vec![],
        fastopen: None,
    };
    let (src, syn) = syn_from(42001, 900, opts);
    st.input(&wire::build(&syn), MS);
    let (isn, tsval) = syn_ack(&mut st);
    assert_eq!(st.ext.SyncookiesSent, 1);
    assert!(st.accept(l).is_err(), "nothing accepted yet");
    // The peer's ACK brings it back: an established connection to accept.
    let ack = SegOut {
        src,
        seq: 901,
        ack: isn.wrapping_add(1),
        flags: ACK,
        wnd: 512,
        opts: OptsOut {
            ts: Some((5001, tsval.expect("timestamps"))),
            ..OptsOut::default()
        },
        ..syn.clone()
    };
    st.input(&wire::build(&ack), 2 * MS);
    let (c, from) = st.accept(l).expect("the cookie's connection");
    assert_eq!(from, src);
    assert_eq!(st.state(c).unwrap(), State::Established);
    assert_eq!(st.ext.SyncookiesRecv, 1);
    let info = st.tcp_info(c, 2 * MS).unwrap();
    assert_eq!(
        info.tcpi_options & 7,
        7,
        "timestamps, SACK, window scaling kept"
    );
    assert_eq!(
        info.tcpi_wscale & 0xf,
        7,
        "the peer's shift, from the timestamp"
    );
    assert_eq!(info.tcpi_snd_mss, 1460 - 12);
    // Its data reaches the program.
    let data = SegOut {
        flags: ACK | PSH,
        payload: b"hello",
        ..ack.clone()
    };
    st.input(&wire::build(&data), 3 * MS);
    let mut buf = [0u8; 16];
    assert_eq!(st.recv(c, &mut buf, false, 3 * MS), Ok(5));
    assert_eq!(&buf[..5], b"hello");
    // An ACK with a cookie that does not check out is reset, counted.
    let (bad_src, bad) = syn_from(42002, 77, OptsOut::default());
    let forged = SegOut {
        src: bad_src,
        seq: 78,
        ack: isn.wrapping_add(12345),
        flags: ACK,
        ..bad
    };
    st.input(&wire::build(&forged), 4 * MS);
    let o = out(&mut st);
    assert!(o.iter().any(|s| s.0 & RST != 0), "{o:?}");
    assert_eq!(st.ext.SyncookiesFailed, 1);
    assert!(st.accept(l).is_err());
    // The half-open child's peer resets it: the SYN queue has room again,
    // and the next SYN makes a child, not a cookie.
    let rst = SegOut {
        seq: 101,
        ack: 0,
        flags: RST,
        ..first
    };
    st.input(&wire::build(&rst), 5 * MS);
    let (_, next) = syn_from(42003, 300, OptsOut::default());
    st.input(&wire::build(&next), 6 * MS);
    syn_ack(&mut st);
    assert_eq!(st.ext.SyncookiesSent, 1, "a child, not a cookie");
}

#[test]
fn without_timestamps_a_cookie_connection_has_no_window_scaling_or_sack() {
    let cfg = TcpConfig {
        tcp_syncookies: 2,
        ..TcpConfig::default()
    };
    let mut st = Stack::new(cfg, 9, vec![]);
    let l = st.socket(false);
    st.bind(l, local()).unwrap();
    st.listen(l, 8).unwrap();
    let opts = OptsOut {
        mss: Some(1400),
        sack_ok: true,
        wscale: Some(7),
        ..OptsOut::default()
    };
    let (src, syn) = syn_from(43000, 10, opts);
    st.input(&wire::build(&syn), 0);
    let t = st.poll_transmit().expect("a SYN-ACK");
    let s = wire::parse(&t.packet).unwrap();
    assert_eq!(
        (s.opts.wscale, s.opts.sack_ok),
        (None, false),
        "tcp_clear_options"
    );
    assert_eq!(st.ext.SyncookiesSent, 1, "tcp_syncookies 2: always");
    let ack = SegOut {
        src,
        seq: 11,
        ack: s.seq.wrapping_add(1),
        flags: ACK,
        opts: OptsOut::default(),
        ..syn.clone()
    };
    st.input(&wire::build(&ack), MS);
    let (c, _) = st.accept(l).expect("the cookie's connection");
    let info = st.tcp_info(c, MS).unwrap();
    assert_eq!(info.tcpi_options & 7, 0);
    // The MSS the cookie could keep: 1300 of msstab, for the SYN's 1400.
    assert_eq!(info.tcpi_snd_mss, 1300);
}

/// `SO_REUSEPORT` listeners on one address (as a server with a listener
/// per thread): a third socket without it cannot bind there; each
/// connection is made by exactly one of the group, picked by its flow
/// (a retransmitted SYN goes where the first went), and the group as a
/// whole shares them out.
#[test]
fn reuseport_listeners_share_the_connections_of_their_address() {
    let mut st = Stack::new(TcpConfig::default(), 7, vec![]);
    let group: Vec<SockId> = (0..4)
        .map(|_| {
            let l = st.socket(false);
            st.set_option(l, rxpath_tcp::SockOpt::ReusePort, 1, 0)
                .unwrap();
            st.bind(l, local()).unwrap();
            st.listen(l, 128).unwrap();
            l
        })
        .collect();
    let lone = st.socket(false);
    assert_eq!(st.bind(lone, local()), Err(libc::EADDRINUSE));
    let mut chosen = std::collections::HashMap::new();
    for port in 0..64u16 {
        // Each SYN twice: the retransmission answers the same half-open
        // child, whichever listener holds it.
        for _ in 0..2 {
            let (_, s) = syn_from(42000 + port, 9, OptsOut::default());
            st.input(&wire::build(&s), 0);
        }
        let o = out(&mut st);
        assert!(!o.is_empty() && o.iter().all(|x| x.0 == SYN | ACK), "{o:?}");
        assert_eq!(o[0].1, o[o.len() - 1].1, "one child per flow");
        let (_, s) = syn_from(42000 + port, 10, OptsOut::default());
        let ack = SegOut {
            ack: o[0].1.wrapping_add(1),
            flags: ACK,
            ..s
        };
        st.input(&wire::build(&ack), MS);
        assert!(out(&mut st).is_empty());
        let took: Vec<usize> = group
            .iter()
            .enumerate()
            .filter_map(|(i, &l)| st.accept(l).ok().map(|_| i))
            .collect();
        assert_eq!(took.len(), 1, "port {port}: accepted by {took:?}");
        *chosen.entry(took[0]).or_insert(0) += 1;
    }
    assert!(
        chosen.len() >= 3,
        "the group shares the connections: {chosen:?}"
    );
    assert_eq!(chosen.values().sum::<i32>(), 64);
}

/// What a waiter that found a socket not ready relies on to skip it until
/// it is touched (`Stack::take_touched`; the preload's epoll sets): the
/// calls that can make a socket ready touch it, as the kernel's wakeup
/// callbacks from them do. `shutdown(SHUT_RD)` makes an idle connection
/// readable; `TCP_NOTSENT_LOWAT`, `listen` and `connect` touch theirs.
#[test]
fn calls_that_can_make_a_socket_ready_touch_it() {
    let mut st = Stack::new(TcpConfig::default(), 7, vec![]);
    let (_, c, _) = established(&mut st);
    let mut touched = Vec::new();
    st.take_touched(&mut touched);
    let readable = libc::EPOLLIN as u32;
    assert_eq!(st.events(c).unwrap() & readable, 0, "idle");
    st.shutdown(c, true, false, 2 * MS).unwrap();
    assert_ne!(st.events(c).unwrap() & readable, 0, "readable: its end");
    st.take_touched(&mut touched);
    assert_eq!(touched, [c], "shutdown(SHUT_RD)");
    st.set_option(c, SockOpt::NotsentLowat, 1 << 20, 2 * MS)
        .unwrap();
    st.take_touched(&mut touched);
    assert_eq!(touched, [c], "TCP_NOTSENT_LOWAT");
    let l = st.socket(false);
    st.bind(l, "198.18.0.1:8081".parse().unwrap()).unwrap();
    st.take_touched(&mut touched);
    st.listen(l, 8).unwrap();
    st.take_touched(&mut touched);
    assert_eq!(touched, [l], "listen");
    let k = st.socket(false);
    st.bind(k, "198.18.0.1:0".parse().unwrap()).unwrap();
    st.take_touched(&mut touched);
    st.connect(k, "198.18.0.2:80".parse().unwrap(), 3 * MS)
        .unwrap_or_else(|e| assert_eq!(e, libc::EINPROGRESS));
    st.take_touched(&mut touched);
    assert_eq!(touched, [k], "connect");
}

/// `sk_clone_lock` copies `sk_reuseport`: once a `SO_REUSEPORT` listener
/// accepted a connection, another listener of its group still binds the
/// port (the child does not conflict), and the child says it has the
/// option, as the kernel's.
#[test]
fn a_reuseport_listeners_children_leave_the_port_to_its_group() {
    let mut st = Stack::new(TcpConfig::default(), 7, vec![]);
    let (_, c, _) = established_with(&mut st, |st, l| {
        st.set_option(l, SockOpt::ReusePort, 1, 0).unwrap();
    });
    assert_eq!(st.option(c, SockOpt::ReusePort), Ok(1));
    let second = st.socket(false);
    st.set_option(second, SockOpt::ReusePort, 1, 0).unwrap();
    assert_eq!(st.bind(second, local()), Ok(()));
    // Without the option, the port is taken, as on the kernel.
    let third = st.socket(false);
    assert_eq!(st.bind(third, local()), Err(libc::EADDRINUSE));
}

/// An accepted connection has its listener's options (`sk_clone_lock`
/// copies the socket whole): what a program set on the listener before
/// `listen` reads back on each child and acts there (`SO_LINGER` of 0:
/// `close` resets), but not what belongs to the accept queue
/// (`TCP_FASTOPEN`'s queue length).
#[test]
fn a_child_has_its_listeners_options() {
    let mut st = Stack::new(TcpConfig::default(), 7, vec![]);
    let set = [
        (SockOpt::KeepAlive, 1),
        (SockOpt::KeepIdle, 30),
        (SockOpt::KeepIntvl, 5),
        (SockOpt::KeepCnt, 4),
        (SockOpt::Linger, 0),
        (SockOpt::Tos, 0x10),
        (SockOpt::Inq, 1),
        (SockOpt::SynCnt, 3),
        (SockOpt::NoDelay, 1),
        (SockOpt::SndBuf, 65536),
    ];
    let (l, c, _) = established_with(&mut st, |st, l| {
        for (o, v) in set {
            st.set_option(l, o, v, 0).unwrap();
        }
        st.set_option(l, SockOpt::Fastopen, 5, 0).unwrap();
    });
    for (o, _) in set {
        assert_eq!(st.option(c, o), st.option(l, o), "{o:?}");
    }
    assert_eq!(st.option(c, SockOpt::KeepAlive), Ok(1));
    assert_eq!(st.option(c, SockOpt::Linger), Ok(0));
    assert_eq!(st.option(l, SockOpt::Fastopen), Ok(5));
    assert_eq!(st.option(c, SockOpt::Fastopen), Ok(0));
    // The listener's linger of 0 is the child's: its close resets.
    st.close(c, 2 * MS).unwrap();
    let o = out(&mut st);
    assert!(o.iter().any(|s| s.0 & RST != 0), "{o:?}");
}

/// A connection past its quick ACKs (16 full segments, `read` as they
/// came or left queued): from here ACKs wait for the rules, not for the
/// count.
fn past_quickacks(st: &mut Stack, read: bool) -> (SockId, Peer, Nanos) {
    let (_l, c, mut p) = established(st);
    let mut t = 2 * MS;
    let mut buf = [0u8; 4096];
    for _ in 0..16 {
        let d = p.seg(ACK, &[7u8; 536], 65535);
        st.input(&d, t);
        assert_eq!(out(st).len(), 1, "a quick ACK for each");
        if read {
            assert_eq!(st.recv(c, &mut buf, false, t), Ok(536));
        }
        t += 10_000;
    }
    (c, p, t)
}

#[test]
fn a_read_sends_the_ack_that_unread_data_held_back() {
    // `__tcp_ack_snd_check` ACKs every second segment only when the window
    // it would offer is no smaller than the one offered; unread data makes
    // it smaller, and the reader's `tcp_cleanup_rbuf` sends the ACK.
    let mut st = Stack::new(TcpConfig::default(), 7, vec![]);
    let (c, mut p, mut t) = past_quickacks(&mut st, false);
    for _ in 0..10 {
        let d = p.seg(ACK, &[7u8; 536], 65535);
        st.input(&d, t);
        t += 10_000;
    }
    assert!(out(&mut st).is_empty(), "unread data holds the ACKs");
    let mut buf = [0u8; 100];
    assert_eq!(st.recv(c, &mut buf, false, t), Ok(100));
    let acks = out(&mut st);
    assert_eq!(acks.len(), 1, "the read sends the owed ACK: {acks:?}");
    assert_eq!((acks[0].0, acks[0].2), (ACK, p.seq), "up to all received");
    assert_eq!(st.recv(c, &mut buf, false, t), Ok(100));
    assert!(out(&mut st).is_empty(), "nothing more is owed");
}

#[test]
fn reading_a_pushed_segment_whole_acks_it() {
    // A short segment is the end of the peer's write (`ICSK_ACK_PUSHED`):
    // the read that empties the queue ACKs it, not the delayed-ACK timer.
    let mut st = Stack::new(TcpConfig::default(), 7, vec![]);
    let (c, mut p, t) = past_quickacks(&mut st, true);
    let d = p.seg(ACK | PSH, b"end of a write", 65535);
    st.input(&d, t);
    assert!(out(&mut st).is_empty(), "one short segment: the ACK waits");
    let mut buf = [0u8; 4];
    assert_eq!(st.recv(c, &mut buf, false, t), Ok(4));
    assert!(out(&mut st).is_empty(), "not while data is left to read");
    let mut rest = [0u8; 64];
    assert_eq!(st.recv(c, &mut rest, false, t), Ok(10));
    let acks = out(&mut st);
    assert_eq!(
        acks.len(),
        1,
        "the read that emptied the queue ACKs: {acks:?}"
    );
    assert_eq!(acks[0].2, p.seq);
}
