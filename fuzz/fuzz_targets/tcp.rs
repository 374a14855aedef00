//! rxpath's TCP machine against arbitrary peers: a listener and an
//! accepted connection, then frames of arbitrary bytes and segments with
//! arbitrary flags, options, SACK blocks, sequence and ACK numbers near
//! (or far from) what the connection expects, mixed with the program's
//! calls (send, recv, shutdown, close, options) and the clock moving.
//! Never a panic; everything the stack sends parses as TCP; no call
//! returns more bytes than asked.

#![no_main]

use std::net::SocketAddr;

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use rxpath_tcp::wire::{self, FoCookie, OptsOut, SegOut};
use rxpath_tcp::{SockOpt, Stack, TcpConfig};

#[derive(Arbitrary, Debug)]
enum Op {
    /// Arbitrary bytes as an IP packet.
    Raw(Vec<u8>),
    /// A segment from the peer, its numbers relative to what the stack
    /// expects (small offsets reach the interesting states).
    Seg {
        flags: u16,
        seq_off: i16,
        ack_off: i16,
        wnd: u16,
        len: u16,
        mss: Option<u16>,
        wscale: Option<u8>,
        ts: Option<(u32, u32)>,
        sacks: Vec<(i16, i16)>,
    },
    Send {
        n: u16,
        more: bool,
        eor: bool,
    },
    Recv {
        n: u16,
        peek: bool,
    },
    Shutdown {
        rd: bool,
        wr: bool,
    },
    Close,
    Opt {
        which: u8,
        val: i32,
    },
    Tick {
        ms: u16,
    },
}

fn local() -> SocketAddr {
    "198.18.0.1:8080".parse().unwrap()
}
fn peer() -> SocketAddr {
    "198.18.0.2:40000".parse().unwrap()
}

fn seg(seq: u32, ack: u32, flags: u16, wnd: u16, payload: &[u8], opts: OptsOut) -> Vec<u8> {
    wire::build(&SegOut {
        src: peer(),
        dst: local(),
        seq,
        ack,
        flags,
        wnd,
        opts,
        payload,
        ip_id: 0,
        tos: 0,
    })
}

fuzz_target!(|ops: Vec<Op>| {
    let mut st = Stack::new(TcpConfig::default(), 1, vec![]);
    let l = st.socket(false);
    st.bind(l, local()).unwrap();
    st.listen(l, 4).unwrap();
    let mut now = 0u64;
    let mut peer_seq = 1000u32;
    st.input(
        &seg(
            peer_seq,
            0,
            0x02,
            65535,
            b"",
            OptsOut {
                mss: Some(1000),
                sack_ok: true,
                wscale: Some(7),
                ..OptsOut::default()
            },
        ),
        now,
    );
    let synack = st.poll_transmit().expect("a SYN-ACK");
    let our_seq = wire::parse(&synack.packet)
        .expect("a segment")
        .seq
        .wrapping_add(1);
    peer_seq = peer_seq.wrapping_add(1);
    st.input(
        &seg(peer_seq, our_seq, 0x10, 512, b"", OptsOut::default()),
        now,
    );
    let Ok((c, _)) = st.accept(l) else { return };
    let data = [0x5au8; 4096];
    let mut buf = vec![0u8; 65536];
    for op in ops.into_iter().take(200) {
        match op {
            Op::Raw(b) => st.input(&b, now),
            Op::Seg {
                flags,
                seq_off,
                ack_off,
                wnd,
                len,
                mss,
                wscale,
                ts,
                sacks,
            } => {
                let seq = peer_seq.wrapping_add(seq_off as i32 as u32);
                let ack = our_seq.wrapping_add(ack_off as i32 as u32);
                let sacks = sacks
                    .into_iter()
                    .take(4)
                    .map(|(a, b)| {
                        (
                            ack.wrapping_add(a as i32 as u32),
                            ack.wrapping_add(b as i32 as u32),
                        )
                    })
                    .collect();
                let opts = OptsOut {
                    mss,
                    sack_ok: false,
                    ts,
                    wscale: wscale.map(|w| w % 16),
                    sacks,
                    // A Fast Open option (a listener ignores it) of the
                    // payload's first bytes, any length.
                    fastopen: (flags & 0x200 != 0)
                        .then(|| FoCookie::new(&data[..data.len().min(16) & !1]))
                        .flatten(),
                };
                let payload = &data[..(len as usize).min(data.len())];
                st.input(&seg(seq, ack, flags & 0x1ff, wnd, payload, opts), now);
                if seq_off == 0 {
                    peer_seq = peer_seq.wrapping_add(payload.len() as u32);
                }
            }
            Op::Send { n, more, eor } => {
                let n = (n as usize).min(data.len());
                if let Ok(k) = st.send(c, &data[..n], more, eor, now) {
                    assert!(k <= n);
                }
            }
            Op::Recv { n, peek } => {
                let n = (n as usize).min(buf.len());
                if let Ok(k) = st.recv(c, &mut buf[..n], peek, now) {
                    assert!(k <= n);
                }
            }
            Op::Shutdown { rd, wr } => {
                let _ = st.shutdown(c, rd, wr, now);
            }
            Op::Close => {
                let _ = st.close(c, now);
            }
            Op::Opt { which, val } => {
                let opt = [
                    SockOpt::NoDelay,
                    SockOpt::Cork,
                    SockOpt::SndBuf,
                    SockOpt::RcvBuf,
                    SockOpt::Linger,
                    SockOpt::MaxSeg,
                    SockOpt::NotsentLowat,
                    SockOpt::KeepAlive,
                    SockOpt::KeepIdle,
                    SockOpt::KeepIntvl,
                    SockOpt::KeepCnt,
                ][which as usize % 11];
                let _ = st.set_option(c, opt, val, now);
            }
            Op::Tick { ms } => {
                now += ms as u64 * 1_000_000;
                while let Some(d) = st.next_deadline().filter(|&d| d <= now) {
                    st.on_timeout(d);
                }
            }
        }
        while let Some(t) = st.poll_transmit() {
            for p in wire::segment(&t.packet, t.gso_size as usize) {
                wire::parse(&p).expect("the stack sends well-formed segments");
            }
        }
        let _ = st.events(c);
        let _ = st.tcp_info(c, now);
    }
});
