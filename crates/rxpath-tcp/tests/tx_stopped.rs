//! A device that refuses packets (`Stack::set_tx_stopped`: a full queue,
//! a qdisc that drops): what the machine sends fails as the kernel's TCP
//! fails on `NET_XMIT_DROP`, and goes out once the device takes packets
//! again.

use std::net::SocketAddr;

use rxpath_tcp::wire::{self, OptsOut, SegIn, SegOut};
use rxpath_tcp::{Nanos, SockId, Stack, State, TcpConfig};
use rxpath_wire::tcp::flags::{ACK, SYN};

const MS: Nanos = 1_000_000;

fn server() -> SocketAddr {
    "198.18.0.2:8080".parse().unwrap()
}

fn sent(st: &mut Stack) -> Vec<SegIn<'static>> {
    let mut v = Vec::new();
    while let Some(t) = st.poll_transmit() {
        let pkt: &'static [u8] = Box::leak(t.packet.into_boxed_slice());
        v.push(wire::parse(pkt).expect("well-formed"));
    }
    v
}

/// A client connection, established.
fn established(st: &mut Stack) -> SockId {
    let s = st.socket(false);
    st.connect(s, server(), 0).unwrap();
    let syn = sent(st).pop().expect("the SYN");
    let syn_ack = wire::build(&SegOut {
        src: server(),
        dst: syn.src,
        seq: 5000,
        ack: syn.seq.wrapping_add(1),
        flags: SYN | ACK,
        wnd: 65535,
        opts: OptsOut {
            mss: Some(1460),
            ..OptsOut::default()
        },
        payload: &[],
        ip_id: 0,
        tos: 0,
    });
    st.input(&syn_ack, 10 * MS);
    assert_eq!(st.state(s).unwrap(), State::Established);
    sent(st);
    s
}

#[test]
fn a_refused_retransmission_is_not_one_and_is_tried_again_soon() {
    let mut st = Stack::new(TcpConfig::default(), 7, vec!["198.18.0.1".parse().unwrap()]);
    let s = established(&mut st);
    assert_eq!(st.send(s, &[1u8; 1000], false, false, 20 * MS), Ok(1000));
    assert_eq!(sent(&mut st).len(), 1, "the data left");
    st.set_tx_stopped(true);
    // The RTO: its retransmission is refused.
    let rto = st.next_deadline().expect("the RTO");
    st.on_timeout(rto);
    assert!(sent(&mut st).is_empty(), "nothing leaves a stopped device");
    assert_eq!(st.ext.TCPRetransFail, 1);
    let info = st.tcp_info(s, rto).unwrap();
    assert_eq!(info.tcpi_retrans, 0, "not in flight again");
    assert_eq!(info.tcpi_total_retrans, 1, "an attempt all the same");
    // Tried again in 500 ms (`TCP_RESOURCE_PROBE_INTERVAL`), no backoff.
    let again = st.next_deadline().expect("the retry");
    assert_eq!(again - rto, 500 * MS);
    // New data waits while the device refuses it.
    assert_eq!(st.send(s, &[2u8; 500], false, false, rto), Ok(500));
    assert!(sent(&mut st).is_empty());
    // The device takes packets again: the retry leaves.
    st.set_tx_stopped(false);
    st.on_timeout(again);
    let out = sent(&mut st);
    assert!(!out.is_empty(), "the retransmission left");
    assert_eq!(out[0].payload.len(), 1000);
    assert_eq!(st.tcp_info(s, again).unwrap().tcpi_retrans, 1);
}
