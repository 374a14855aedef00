//! A datagram in a socket's receive queue: its frames, not copied, and
//! what a read reports of it.
//!
//! A datagram one socket takes owns its frames. One that several sockets
//! take (multicast, broadcast: `__udp4_lib_mcast_deliver()` clones the skb
//! for each) shares them: each socket's queue holds a reference, the bytes
//! are read in place by every reader, and the frames go home when the last
//! reference goes ([`Dgram::into_frames`]), as the kernel frees a cloned
//! skb's data with its last clone.

use crate::packet::Frag;
use rxpath_frames::Frame;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// Where a datagram's bytes are.
#[derive(Debug)]
pub(crate) enum Body {
    /// In a frame this socket alone holds (further segments or fragments
    /// in [`Dgram::frags`]).
    Own(Frame),
    /// In frames several sockets hold.
    Shared(Arc<Shared>),
}

/// The frames of a datagram several sockets hold.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) frame: Frame,
    /// The other fragments of a reassembled datagram.
    pub(crate) frags: Vec<Frag>,
}

/// A queued datagram: the frame it arrived in (not copied) and where its
/// payload lies; for a socket with `UDP_GRO`, possibly a GRO packet: the
/// first segment here and the others in `frags`, each in its own frame.
#[derive(Debug)]
pub(crate) struct Dgram {
    pub(crate) body: Body,
    pub(crate) off: u16,
    /// Payload bytes in the head frame.
    pub(crate) len: u16,
    pub(crate) src: SocketAddr,
    /// The address it was sent to (`IP_PKTINFO`).
    pub(crate) dst: IpAddr,
    pub(crate) queue: u16,
    /// The IP header's TOS byte or traffic class (`IP_RECVTOS`).
    pub(crate) tos: u8,
    /// `gso_size` of a GRO packet (0: one datagram).
    pub(crate) gso: u16,
    /// Further segments of a GRO packet or fragments of a reassembled
    /// datagram this socket owns (empty: not allocated).
    pub(crate) frags: Vec<Frag>,
    /// When the NAPI took it (`mono_ns` of the poll; `skb->tstamp`).
    pub(crate) stamp_ns: u64,
    /// The socket's drops when it was queued, if `SO_RXQ_OVFL` was on
    /// (`sock_skb_set_dropcount`); else 0. Set by `enqueue`.
    pub(crate) drops: u32,
}

impl Dgram {
    /// The frame holding the head of the payload.
    pub(crate) fn head(&self) -> &Frame {
        match &self.body {
            Body::Own(f) => f,
            Body::Shared(s) => &s.frame,
        }
    }

    /// The payload's other frames (segments or fragments).
    pub(crate) fn frags(&self) -> &[Frag] {
        match &self.body {
            Body::Own(_) => &self.frags,
            Body::Shared(s) => &s.frags,
        }
    }

    /// Payload bytes in all its frames.
    pub(crate) fn payload_len(&self) -> usize {
        self.len as usize + self.frags().iter().map(|f| f.len as usize).sum::<usize>()
    }

    /// What it is charged against `SO_RCVBUF`: the kernel's `skb->truesize`
    /// of each of its frames ([`super::truesize`]: Ethernet, the IP header
    /// without options, UDP, the payload), so that a receive buffer holds
    /// as many datagrams as the kernel's would. A shared datagram is
    /// charged to every socket holding it, as each holds a clone.
    pub(crate) fn truesize(&self) -> usize {
        let hdrs = if self.dst.is_ipv4() {
            14 + 20 + 8
        } else {
            14 + 40 + 8
        };
        std::iter::once(self.len)
            .chain(self.frags().iter().map(|f| f.len))
            .map(|len| super::truesize(hdrs + len as usize))
            .sum()
    }

    /// Its frames, to go home: all of them for an owned datagram; for a
    /// shared one, all of them if this was the last reference, else none.
    pub(crate) fn into_frames(self) -> impl Iterator<Item = Frame> {
        let (head, frags) = match self.body {
            Body::Own(f) => (Some(f), self.frags),
            Body::Shared(s) => match Arc::into_inner(s) {
                Some(s) => (Some(s.frame), s.frags),
                None => (None, Vec::new()),
            },
        };
        head.into_iter().chain(frags.into_iter().map(|f| f.frame))
    }

    /// The one frame of a datagram this socket owns alone, or the
    /// datagram back.
    pub(crate) fn into_single(self) -> Result<Frame, Dgram> {
        match self.body {
            Body::Own(f) if self.frags.is_empty() => Ok(f),
            body => Err(Dgram { body, ..self }),
        }
    }

    /// What a read that copied `len` bytes of it says.
    pub(crate) fn meta(&self, len: usize) -> RecvMeta {
        let whole = self.payload_len();
        RecvMeta {
            len,
            truncated: len < whole,
            src: self.src,
            dst: self.dst,
            stride: if self.gso > 0 {
                self.gso as usize
            } else {
                whole
            },
            ecn: self.tos & 3,
            tos: self.tos,
            stamp_ns: self.stamp_ns,
            drops: self.drops,
        }
    }

    /// Copy the payload into `buf` (as much as fits); returns the bytes
    /// copied.
    pub(crate) fn copy_to(&self, umem: &rxpath_frames::Umem, buf: &mut [u8]) -> usize {
        let mut at = 0;
        let parts = std::iter::once((self.head(), self.off, self.len))
            .chain(self.frags().iter().map(|f| (&f.frame, f.off, f.len)));
        for (frame, off, len) in parts {
            let o = off as usize;
            let data = &umem.data(frame)[o..o + len as usize];
            let n = data.len().min(buf.len() - at);
            buf[at..at + n].copy_from_slice(&data[..n]);
            at += n;
            if at == buf.len() {
                break;
            }
        }
        at
    }
}

/// What `recv_batch` reports per datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvMeta {
    /// Bytes copied into the buffer.
    pub len: usize,
    /// The datagram was longer than the buffer (`MSG_TRUNC`).
    pub truncated: bool,
    /// Sender.
    pub src: SocketAddr,
    /// The address it was sent to (`IP_PKTINFO` / `IPV6_RECVPKTINFO`).
    pub dst: IpAddr,
    /// Segment size: each `stride` bytes of the buffer are one datagram
    /// as sent, the last one possibly shorter (the `UDP_GRO` control
    /// message; equal to the whole length for a single datagram).
    pub stride: usize,
    /// ECN codepoint of the IP header (0 Not-ECT, 1 ECT(1), 2 ECT(0), 3
    /// CE): the low two bits of `tos`.
    pub ecn: u8,
    /// The IP header's TOS byte (IPv4) or traffic class (IPv6): what
    /// `IP_RECVTOS` / `IPV6_RECVTCLASS` hand back.
    pub tos: u8,
    /// When the NAPI took it, ns on `rxpath_frames::mono_ns`'s clock (0: not
    /// known): what `SO_TIMESTAMP`/`SO_TIMESTAMPNS` hand back.
    pub stamp_ns: u64,
    /// The socket's drops when it was queued, with `SO_RXQ_OVFL` on (else
    /// 0): what `SO_RXQ_OVFL` hands back.
    pub drops: u32,
}
