//! TCP Fast Open, the client's half, driven without a network: a scripted
//! server answers the stack's SYNs, the clock is passed in.

use std::net::SocketAddr;

use rxpath_tcp::info::TCPI_OPT_SYN_DATA;
use rxpath_tcp::wire::{self, FoCookie, OptsOut, SegIn, SegOut};
use rxpath_tcp::{Nanos, SockId, SockOpt, Stack, State, TcpConfig};
use rxpath_wire::tcp::flags::{ACK, PSH, SYN};

const MS: Nanos = 1_000_000;

fn server() -> SocketAddr {
    "198.18.0.2:8080".parse().unwrap()
}

fn stack() -> Stack {
    Stack::new(TcpConfig::default(), 7, vec!["198.18.0.1".parse().unwrap()])
}

/// Every segment the stack sent, parsed.
fn sent(st: &mut Stack) -> Vec<(Vec<u8>, SegIn<'static>)> {
    let mut v = Vec::new();
    while let Some(t) = st.poll_transmit() {
        let pkt: &'static [u8] = Box::leak(t.packet.into_boxed_slice());
        v.push((pkt.to_vec(), wire::parse(pkt).expect("well-formed")));
    }
    v
}

/// The server's SYN-ACK to `syn`, acknowledging `ack`, with `mss` and
/// `cookie`.
fn syn_ack(syn: &SegIn<'_>, ack: u32, mss: u16, cookie: Option<&[u8]>) -> Vec<u8> {
    wire::build(&SegOut {
        src: server(),
        dst: syn.src,
        seq: 5000,
        ack,
        flags: SYN | ACK,
        wnd: 65535,
        opts: OptsOut {
            mss: Some(mss),
            fastopen: cookie.map(|c| FoCookie::new(c).unwrap()),
            ..OptsOut::default()
        },
        payload: &[],
        ip_id: 0,
        tos: 0,
    })
}

/// A socket with `TCP_FASTOPEN_CONNECT` set.
fn fastopen_socket(st: &mut Stack) -> SockId {
    let s = st.socket(false);
    st.set_option(s, SockOpt::FastopenConnect, 1, 0).unwrap();
    s
}

/// Warm the cache: a connect that asks for a cookie, answered with
/// `cookie` and an MSS of `mss`.
fn warm(st: &mut Stack, cookie: &[u8], mss: u16) {
    let s = fastopen_socket(st);
    st.connect(s, server(), 0).unwrap();
    assert!(
        !st.fastopen_deferred(s).unwrap(),
        "no cookie yet: a SYN now"
    );
    let out = sent(st);
    assert_eq!(out.len(), 1);
    let syn = &out[0].1;
    assert_eq!(syn.flags, SYN);
    assert_eq!(syn.opts.fastopen, FoCookie::new(&[]), "a cookie request");
    assert!(syn.payload.is_empty());
    st.input(
        &syn_ack(syn, syn.seq.wrapping_add(1), mss, Some(cookie)),
        MS,
    );
    assert_eq!(st.state(s).unwrap(), State::Established);
    let ack = sent(st);
    assert_eq!(ack.len(), 1);
    assert_eq!(ack[0].1.flags, ACK);
    st.close(s, MS).unwrap();
    sent(st);
}

#[test]
fn a_kept_cookie_carries_the_first_writes_data_on_the_syn() {
    let mut st = stack();
    warm(&mut st, &[0xab, 0xcd, 0x12, 0x34], 940);

    // connect() sends nothing and returns; the socket is writable.
    let s = fastopen_socket(&mut st);
    st.connect(s, server(), 10 * MS).unwrap();
    assert!(st.fastopen_deferred(s).unwrap());
    assert!(
        sent(&mut st).is_empty(),
        "the SYN waits for the first write"
    );
    assert_ne!(st.events(s).unwrap() & libc::EPOLLOUT as u32, 0);

    // The write: the SYN carries the cookie and the cached MSS less 40
    // bytes of option room (tcp_send_syn_data).
    let data = vec![7u8; 2000];
    assert_eq!(st.send(s, &data, false, false, 20 * MS), Ok(900));
    let out = sent(&mut st);
    assert_eq!(out.len(), 1);
    let syn = &out[0].1;
    assert_eq!(syn.flags, SYN);
    assert_eq!(syn.payload.len(), 900);
    assert_eq!(syn.opts.fastopen, FoCookie::new(&[0xab, 0xcd, 0x12, 0x34]));
    assert_eq!(st.state(s).unwrap(), State::SynSent);
    assert_eq!(
        st.send(s, &data[900..], false, false, 20 * MS),
        Err(libc::EAGAIN)
    );

    // The server takes the data with the SYN: one ACK, nothing again.
    let iss = syn.seq;
    st.input(&syn_ack(syn, iss.wrapping_add(901), 1460, None), 30 * MS);
    assert_eq!(st.state(s).unwrap(), State::Established);
    let out = sent(&mut st);
    assert_eq!(
        out.len(),
        1,
        "{:?}",
        out.iter().map(|o| o.1.flags).collect::<Vec<_>>()
    );
    assert_eq!((out[0].1.flags, out[0].1.seq), (ACK, iss.wrapping_add(901)));
    let info = st.tcp_info(s, 30 * MS).unwrap();
    assert_ne!(info.tcpi_options & TCPI_OPT_SYN_DATA, 0);
    assert_eq!(st.ext.TCPFastOpenActive, 1);
    assert_eq!(st.ext.TCPFastOpenActiveFail, 0);
}

#[test]
fn a_syn_ack_of_the_syn_alone_sends_the_data_again_at_once() {
    let mut st = stack();
    warm(&mut st, &[1, 2, 3, 4, 5, 6], 1460);
    let s = st.socket(false);
    // sendto(MSG_FASTOPEN) on a fresh socket: connect and data at once.
    let data = vec![9u8; 700];
    assert_eq!(st.send_fastopen(s, Some(server()), &data, 0), Ok(700));
    let out = sent(&mut st);
    let syn = &out[0].1;
    assert_eq!((syn.flags, syn.payload.len()), (SYN, 700));
    let iss = syn.seq;
    st.input(
        &syn_ack(syn, iss.wrapping_add(1), 1040, Some(&[1, 2, 3, 4, 5, 6])),
        20 * MS,
    );
    let out = sent(&mut st);
    assert_eq!(
        out.len(),
        1,
        "the data again, carrying the ACK; no bare ACK"
    );
    let d = &out[0].1;
    assert_eq!(d.flags, ACK | PSH);
    assert_eq!((d.seq, d.payload.len()), (iss.wrapping_add(1), 700));
    assert_eq!(d.payload, &data[..]);
    let info = st.tcp_info(s, 20 * MS).unwrap();
    assert_eq!(info.tcpi_options & TCPI_OPT_SYN_DATA, 0);
    assert_eq!(st.ext.TCPFastOpenActiveFail, 1);
}

#[test]
fn fast_open_off_refuses_the_option_and_the_flag() {
    let mut cfg = TcpConfig::default();
    cfg.set("tcp_fastopen", "0").unwrap();
    let mut st = Stack::new(cfg, 7, vec!["198.18.0.1".parse().unwrap()]);
    let s = st.socket(false);
    assert_eq!(
        st.set_option(s, SockOpt::FastopenConnect, 1, 0),
        Err(libc::EOPNOTSUPP)
    );
    assert_eq!(
        st.send_fastopen(s, Some(server()), b"x", 0),
        Err(libc::EOPNOTSUPP)
    );
    // A plain connect offers no option.
    st.connect(s, server(), 0).unwrap();
    let out = sent(&mut st);
    assert_eq!(out[0].1.opts.fastopen, None);
}

#[test]
fn without_a_cookie_the_syn_asks_for_one_and_carries_no_data() {
    let mut st = stack();
    let s = st.socket(false);
    assert_eq!(st.send_fastopen(s, Some(server()), b"hello", 0), Ok(0));
    let out = sent(&mut st);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1.opts.fastopen, FoCookie::new(&[]));
    assert!(out[0].1.payload.is_empty());
    // A second MSG_FASTOPEN while the SYN is out: EALREADY.
    assert_eq!(
        st.send_fastopen(s, Some(server()), b"hello", 0),
        Err(libc::EALREADY)
    );
    // The option, written and read back: kind 34, length 2, two NOPs.
    let mut o = Vec::new();
    OptsOut {
        fastopen: FoCookie::new(&[]),
        ..OptsOut::default()
    }
    .write(&mut o);
    assert_eq!(o, [34, 2, 1, 1]);
    assert_eq!(
        FoCookie::new(&[1, 2, 3]),
        None,
        "an odd length is no cookie"
    );
}

/// `TCP_FASTOPEN` on a listener is kept as the kernel keeps it (capped at
/// `somaxconn`) and read back; a connection refuses it (`EINVAL`).
#[test]
fn a_listeners_fast_open_queue_length_is_kept() {
    let mut st = stack();
    st.cfg.somaxconn = 128;
    let l = st.socket(false);
    st.bind(l, server()).unwrap();
    st.listen(l, 8).unwrap();
    st.set_option(l, SockOpt::Fastopen, 1000, 0).unwrap();
    assert_eq!(st.option(l, SockOpt::Fastopen), Ok(128));
    st.set_option(l, SockOpt::Fastopen, 5, 0).unwrap();
    assert_eq!(st.option(l, SockOpt::Fastopen), Ok(5));
    assert_eq!(
        st.set_option(l, SockOpt::Fastopen, -1, 0),
        Err(libc::EINVAL)
    );
    let c = st.socket(false);
    let _ = st.connect(c, "198.18.0.2:80".parse().unwrap(), 0);
    assert_eq!(st.set_option(c, SockOpt::Fastopen, 5, 0), Err(libc::EINVAL));
}
