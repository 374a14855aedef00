//! Explicit Congestion Notification as Linux's classic (RFC 3168) mode,
//! `include/net/tcp_ecn.h`: agreed in the handshake (a SYN with ECE and
//! CWR, a SYN-ACK with ECE), new data sent ECT(0), a CE mark echoed in
//! ECE until the sender's CWR says it reduced its window, an ECE taken
//! as congestion (`tcp_enter_cwr`).

use rxpath_wire::tcp::flags::{ACK, CWR, ECE, SYN};

use crate::config::TcpConfig;
use crate::wire::SegIn;

/// The IP header's ECN field (`INET_ECN_*`).
pub const INET_ECN_NOT_ECT: u8 = 0;
/// ECT(0), what an ECN sender marks its data with.
pub const INET_ECN_ECT_0: u8 = 2;
/// Congestion experienced.
pub const INET_ECN_CE: u8 = 3;

/// The AE flag (RFC 3540's NS bit, Accurate ECN's AE).
const AE: u16 = 0x100;

/// `tp->ecn_flags`.
const OK: u8 = 1;
const QUEUE_CWR: u8 = 2;
const DEMAND_CWR: u8 = 4;
const SEEN: u8 = 8;

/// A connection's ECN state.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ecn {
    flags: u8,
    /// This host's SYN asks for ECN (ECE and CWR), until `tcp_ecn_fallback`
    /// takes the flags off a SYN sent again.
    syn_asks: bool,
    /// Segments delivered whose ACK echoed congestion (`delivered_ce`).
    pub delivered_ce: u32,
}

impl Ecn {
    /// ECN was agreed (`TCPI_OPT_ECN`).
    pub fn ok(&self) -> bool {
        self.flags & OK != 0
    }

    /// An ECT or CE segment arrived (`TCPI_OPT_ECN_SEEN`).
    pub fn seen(&self) -> bool {
        self.flags & SEEN != 0
    }

    /// `tcp_ecn_send_syn`: an active open asks for ECN with `tcp_ecn` 1
    /// (or 4, Accurate ECN's "classic out").
    pub(crate) fn send_syn(&mut self, cfg: &TcpConfig) {
        *self = Ecn::default();
        if matches!(cfg.tcp_ecn, 1 | 4) {
            self.flags = OK;
            self.syn_asks = true;
        }
    }

    /// The flags this host's SYN (`with_ack`: SYN-ACK) carries: ECE and
    /// CWR to ask, ECE to agree (`tcp_ecn_make_synack`).
    pub(crate) fn syn_flags(&self, with_ack: bool) -> u16 {
        match (with_ack, self.ok()) {
            (true, true) => ECE,
            (false, true) if self.syn_asks => ECE | CWR,
            _ => 0,
        }
    }

    /// `tcp_ecn_clear_syn`: a SYN sent again asks no more (a middlebox may
    /// drop SYNs with the flags); the answer decides.
    pub(crate) fn clear_syn(&mut self, cfg: &TcpConfig) {
        if cfg.tcp_ecn_fallback {
            self.syn_asks = false;
        }
    }

    /// `tcp_ecn_create_request`: a peer's SYN asks (ECE and CWR, and is
    /// itself Not-ECT unless it carries AE) and `tcp_ecn` is not 0.
    pub(crate) fn create_request(&mut self, cfg: &TcpConfig, seg: &SegIn<'_>) {
        *self = Ecn::default();
        let asks = seg.has(ECE) && seg.has(CWR);
        let not_ect = seg.ecn == INET_ECN_NOT_ECT;
        if asks && cfg.tcp_ecn != 0 && (not_ect || seg.has(AE)) {
            self.flags = OK;
        }
    }

    /// The SYN-ACK to this host's SYN (`tcp_ecn_rcv_synack`): agreed only
    /// by ECE without CWR; or a crossing SYN (`tcp_ecn_rcv_syn`): only if
    /// it asked too.
    pub(crate) fn rcv_syn(&mut self, seg: &SegIn<'_>) {
        let agreed = if seg.has(ACK) {
            seg.has(ECE) && !seg.has(CWR)
        } else {
            seg.has(ECE) && seg.has(CWR)
        };
        if !agreed {
            self.flags &= !OK;
        }
    }

    /// `tcp_ecn_send` for a segment other than a SYN: the flags it gains
    /// and the ECN field of its IP header. New data goes ECT(0) and carries
    /// the CWR owed; retransmissions and ACKs go Not-ECT; every segment
    /// echoes ECE while the peer's CWR is owed.
    pub(crate) fn send(&mut self, new_data: bool) -> (u16, u8) {
        if !self.ok() {
            return (0, INET_ECN_NOT_ECT);
        }
        let (mut fl, mut field) = (0, INET_ECN_NOT_ECT);
        if new_data {
            field = INET_ECN_ECT_0;
            if self.flags & QUEUE_CWR != 0 {
                self.flags &= !QUEUE_CWR;
                fl |= CWR;
            }
        }
        if self.flags & DEMAND_CWR != 0 {
            fl |= ECE;
        }
        (fl, field)
    }

    /// `tcp_ecn_check_ce` on arriving data: true when the receiver should
    /// enter quick-ACK mode (a first CE mark, or a Not-ECT segment after
    /// ECT ones: probably a retransmission).
    pub(crate) fn check_ce(&mut self, field: u8) -> bool {
        if !self.ok() {
            return false;
        }
        match field {
            INET_ECN_NOT_ECT => self.seen(),
            INET_ECN_CE => {
                let first = self.flags & DEMAND_CWR == 0;
                self.flags |= DEMAND_CWR | SEEN;
                first
            }
            _ => {
                self.flags |= SEEN;
                false
            }
        }
    }

    /// `tcp_ecn_accept_cwr` on an ACK: the peer's CWR ends the echo; true
    /// when the segment carried data and so is ACKed at once (the sender's
    /// window may be one segment).
    pub(crate) fn accept_cwr(&mut self, seg: &SegIn<'_>) -> bool {
        if !self.ok() || !seg.has(CWR) {
            return false;
        }
        self.flags &= !DEMAND_CWR;
        seg.seq_len() > 0
    }

    /// `tcp_ecn_rcv_ecn_echo`: the ACK reports congestion.
    pub(crate) fn echo(&self, seg: &SegIn<'_>) -> bool {
        self.ok() && seg.has(ECE) && !seg.has(SYN)
    }

    /// `tcp_ecn_queue_cwr`: the window was reduced; the next new data
    /// says so.
    pub(crate) fn queue_cwr(&mut self) {
        if self.ok() {
            self.flags |= QUEUE_CWR;
        }
    }

    /// `tcp_ecn_withdraw_cwr`: the reduction was undone.
    pub(crate) fn withdraw_cwr(&mut self) {
        self.flags &= !QUEUE_CWR;
    }

    /// A SYN cookie's memory of the agreement (`TS_OPT_ECN` in the
    /// timestamp), taken back when its ACK comes.
    pub(crate) fn set_ok(&mut self, ok: bool) {
        *self = Ecn::default();
        if ok {
            self.flags = OK;
        }
    }
}
