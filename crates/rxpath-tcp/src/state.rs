//! The small state records a connection carries beside its sequence
//! numbers: the congestion-avoidance state, RACK's, the chronographs,
//! Fast Open's (and the stack's cache of cookies). A leaf: `conn` holds
//! them, the modules that act on them take them from here.

use foldhash::HashMap;
use std::net::IpAddr;

use crate::time::Nanos;
use crate::wire::FoCookie;

/// `TCPF_CA_*`: the congestion-avoidance state (`icsk_ca_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CaState {
    /// Nothing to recover.
    #[default]
    Open = 0,
    /// Duplicate ACKs or SACKs seen.
    Disorder = 1,
    /// Reducing the window (ECN, local congestion).
    Cwr = 2,
    /// Fast recovery.
    Recovery = 3,
    /// After a retransmission timeout.
    Loss = 4,
}

/// `tcp_chrono`: how long the sender was busy, held by the receive window,
/// or by its send buffer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Chrono {
    /// The current type and since when.
    pub current: Option<(ChronoType, Nanos)>,
    /// Accumulated busy time.
    pub busy: Nanos,
    /// Accumulated time limited by the peer's window.
    pub rwnd: Nanos,
    /// Accumulated time limited by the send buffer.
    pub sndbuf: Nanos,
}

/// `enum tcp_chrono`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChronoType {
    /// `TCP_CHRONO_BUSY`.
    Busy,
    /// `TCP_CHRONO_RWND_LIMITED`.
    RwndLimited,
    /// `TCP_CHRONO_SNDBUF_LIMITED`.
    SndbufLimited,
}

impl Chrono {
    fn total(&self, t: ChronoType, now: Nanos) -> Nanos {
        let base = match t {
            ChronoType::Busy => self.busy,
            ChronoType::RwndLimited => self.rwnd,
            ChronoType::SndbufLimited => self.sndbuf,
        };
        match self.current {
            Some((c, since)) if c == t => base + now.saturating_sub(since),
            _ => base,
        }
    }

    /// Busy time, ns (`tcpi_busy_time` counts every type).
    pub fn busy(&self, now: Nanos) -> Nanos {
        self.total(ChronoType::Busy, now) + self.rwnd_limited(now) + self.sndbuf_limited(now)
    }

    /// Time held by the peer's window, ns.
    pub fn rwnd_limited(&self, now: Nanos) -> Nanos {
        self.total(ChronoType::RwndLimited, now)
    }

    /// Time held by the send buffer, ns.
    pub fn sndbuf_limited(&self, now: Nanos) -> Nanos {
        self.total(ChronoType::SndbufLimited, now)
    }

    fn stop_current(&mut self, now: Nanos) {
        if let Some((c, since)) = self.current.take() {
            let d = now.saturating_sub(since);
            match c {
                ChronoType::Busy => self.busy += d,
                ChronoType::RwndLimited => self.rwnd += d,
                ChronoType::SndbufLimited => self.sndbuf += d,
            }
        }
    }

    /// `tcp_chrono_start`: a type of higher rank replaces a lower one.
    pub fn start(&mut self, t: ChronoType, now: Nanos) {
        match self.current {
            Some((c, _)) if c >= t => {}
            _ => {
                self.stop_current(now);
                self.current = Some((t, now));
            }
        }
    }

    /// `tcp_chrono_stop`: with nothing queued every chrono stops; else
    /// the type, if current, gives way to busy.
    pub fn stop(&mut self, t: ChronoType, now: Nanos, queues_empty: bool) {
        if queues_empty {
            self.stop_current(now);
        } else if self.current.is_some_and(|(c, _)| c == t) {
            self.stop_current(now);
            self.current = Some((ChronoType::Busy, now));
        }
    }
}

/// RACK's state (`tp->rack`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rack {
    /// When the most recently sent of the (S)ACKed segments left.
    pub mstamp: Nanos,
    /// Its end sequence.
    pub end_seq: u32,
    /// The RTT of the most recent (S)ACKed segment, µs.
    pub rtt_us: u64,
    /// Something new was (S)ACKed since the last detection.
    pub advanced: bool,
    /// Reordering was seen.
    pub reord: bool,
}

/// A connection's Fast Open state.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientFo {
    /// The option the next SYN carries (`tp->fastopen_req`): the cookie,
    /// or empty to ask for one. The first SYN takes it: a SYN sent again
    /// carries neither it nor data, as the kernel's after a non-blocking
    /// call.
    pub req: Option<FoCookie>,
    /// `connect` under `TCP_FASTOPEN_CONNECT` with a cookie kept: no SYN
    /// yet; the first write sends it with its data (`defer_connect`).
    pub deferred: bool,
    /// The SYN carried the option (`syn_fastopen`).
    pub syn_fastopen: bool,
    /// In its experimental form (`syn_fastopen_exp`).
    pub syn_fastopen_exp: bool,
    /// The SYN carried data (`syn_data`).
    pub syn_data: bool,
    /// The SYN-ACK acknowledged that data (`syn_data_acked`,
    /// `TCPI_OPT_SYN_DATA`); on a listener's child, its SYN's data was
    /// taken.
    pub syn_data_acked: bool,
    /// A listener's Fast Open child whose handshake has not ended
    /// (`tcp_passive_fastopen`): readable and writable already.
    pub passive: bool,
}

/// What a destination's last Fast Open SYN-ACK said (`tcp_fastopen_metrics`).
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    mss: u16,
    cookie: Option<FoCookie>,
    /// `try_exp`: 1 after a SYN-ACK ignored the RFC option (ask with the
    /// experimental one next), 2 after it ignored that too (the RFC
    /// option from then on).
    try_exp: u8,
}

/// Cookies and MSSes by destination.
#[derive(Debug, Default)]
pub struct Cache(HashMap<IpAddr, Entry>);

impl Cache {
    /// `tcp_fastopen_cache_get`: the MSS (0 when none is kept), the
    /// cookie kept for `dst`, and whether a request for one goes in the
    /// experimental option.
    pub fn get(&self, dst: IpAddr) -> (u16, Option<FoCookie>, bool) {
        self.0
            .get(&dst)
            .map(|e| (e.mss, e.cookie, e.cookie.is_none() && e.try_exp == 1))
            .unwrap_or_default()
    }

    /// `tcp_fastopen_cache_set`: a non-zero MSS replaces the kept one, a
    /// non-empty cookie the kept cookie; without one, a higher `try_exp`
    /// the kept one.
    pub fn set(&mut self, dst: IpAddr, mss: u16, cookie: Option<FoCookie>, try_exp: u8) {
        let e = self.0.entry(dst).or_default();
        if mss != 0 {
            e.mss = mss;
        }
        if let Some(c) = cookie.filter(|c| !c.is_empty()) {
            e.cookie = Some(c);
        } else if try_exp > e.try_exp && e.cookie.is_none() {
            e.try_exp = try_exp;
        }
    }

    /// Forget every destination (`ip tcp_metrics flush`).
    pub fn clear(&mut self) {
        self.0.clear();
    }
}

/// `rcvq_space`: the most the program read in one receiver RTT, and the
/// measure under way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RcvqSpace {
    /// Bytes (`rcvq_space.space`, `tcpi_rcv_space`).
    pub space: u32,
    /// `Conn::copied` when the measure began (`rcvq_space.seq`).
    pub copied: u64,
    /// When it began (`rcvq_space.time`).
    pub time: Nanos,
}

/// `rcv_rtt_est`: the receiver's RTT estimate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RcvRtt {
    /// µs, times 8 (0: no sample yet).
    pub rtt_us: u32,
    /// The window-based measure ends when `rcv_nxt` reaches this.
    pub seq: u32,
    /// When it began (0: none under way).
    pub time: Nanos,
}
