//! An ICMP or ICMPv6 error quoting one of this host's segments, as
//! `tcp_v4_err()` / `tcp_v6_err()` take it: the connection found by the
//! quoted ends (`__inet_lookup_established`), a half-open child dropped
//! (`tcp_req_err`), the quoted sequence number checked against what is in
//! flight, then by type: a smaller path MTU (learnt for the destination,
//! as the route's exception, for ten minutes), a connection still opening
//! ended, an open one given a soft error.
//!
//! Differences from the kernel: no socket is ever "owned by the user"
//! here (the calls and the input run under one lock), so nothing is
//! deferred or counted as `LockDroppedIcmps`; `IP_RECVERR` is not
//! offered, so an open connection only keeps the soft error; redirects
//! are ignored (the next hop is the driver's); a learnt path MTU does not
//! grow back on a connection that already used it when it expires (new
//! connections see the interface's MTU again).

use rxpath_wire::icmp::{self, Error as IcmpError};

use super::*;

/// `ip_rt_mtu_expires`: how long a learnt path MTU holds.
const PMTU_EXPIRES: Nanos = 600 * 1_000_000_000;
/// `ip_rt_min_pmtu`: the least IPv4 path MTU taken from a message.
const IPV4_MIN_PMTU: u32 = 552;
/// `IPV6_MIN_MTU`.
const IPV6_MIN_MTU: u32 = 1280;

/// Does the IP packet carry ICMP (IPv4) or ICMPv6 (no extension header
/// before it)?
pub(super) fn is_icmp(pkt: &[u8]) -> bool {
    match pkt.first().map(|b| b >> 4) {
        Some(4) => pkt.get(9) == Some(&1),
        Some(6) => pkt.get(6) == Some(&58),
        _ => false,
    }
}

/// What an error message means to TCP: the errno it reports, and whether
/// it ends a half-open child (`tcp_req_err`'s `abort`).
struct Meaning {
    err: i32,
    abort: bool,
    /// "Net or host unreachable" (ICMPv6: "no route"): may undo an RTO
    /// backoff.
    revert: bool,
}

/// `icmp_err_convert[]` and the types `tcp_v4_err` acts on; `None` for
/// what it ignores (redirects, source quench, unknown codes).
fn meaning_v4(typ: u8, code: u8) -> Option<Meaning> {
    use libc::*;
    let m = |err, abort, revert| Some(Meaning { err, abort, revert });
    match typ {
        icmp::ICMP_PARAMETERPROB => m(EPROTO, true, false),
        icmp::ICMP_TIME_EXCEEDED => m(EHOSTUNREACH, true, false),
        icmp::ICMP_DEST_UNREACH => match code {
            0 => m(ENETUNREACH, true, true),
            1 => m(EHOSTUNREACH, true, true),
            2 => m(ENOPROTOOPT, false, false),
            3 => m(ECONNREFUSED, false, false),
            4 => m(EMSGSIZE, false, false),
            5 => m(EOPNOTSUPP, false, false),
            6 | 9 | 11 => m(ENETUNREACH, false, false),
            7 => m(EHOSTDOWN, false, false),
            8 => m(ENONET, false, false),
            10 | 12..=15 => m(EHOSTUNREACH, false, false),
            _ => None,
        },
        _ => None,
    }
}

/// `icmpv6_err_convert`: the errno, and whether the error is fatal (which
/// ends a half-open child).
fn meaning_v6(typ: u8, code: u8) -> Option<Meaning> {
    use libc::*;
    let m = |err, abort, revert| Some(Meaning { err, abort, revert });
    match typ {
        // A redirect (NDISC_REDIRECT) is not an error message.
        icmp::ICMPV6_DEST_UNREACH => match code {
            0 => m(ENETUNREACH, false, true),
            1 | 5 | 6 => m(EACCES, true, false),
            2 | 3 => m(EHOSTUNREACH, false, false),
            4 => m(ECONNREFUSED, true, false),
            _ => m(EPROTO, true, false),
        },
        icmp::ICMPV6_PKT_TOOBIG => m(EMSGSIZE, false, false),
        icmp::ICMPV6_PARAMPROB => m(EPROTO, true, false),
        icmp::ICMPV6_TIME_EXCEED => m(EHOSTUNREACH, false, false),
        _ => m(EPROTO, false, false),
    }
}

impl Stack {
    /// An ICMP packet from the device (see the module's comment); what is
    /// not an error about a TCP segment is ignored (IP input counts ICMP
    /// under its own names).
    pub(super) fn icmp_input(&mut self, pkt: &[u8], now: Nanos) {
        let Ok(e) = icmp::parse_error(pkt) else {
            return;
        };
        if e.proto == 6 {
            self.icmp_err(&e, now);
        }
    }

    fn icmp_err(&mut self, e: &IcmpError<'_>, now: Nanos) {
        let port = |i: usize| u16::from_be_bytes([e.l4[i], e.l4[i + 1]]);
        let local = SocketAddr::new(e.src, port(0));
        let remote = SocketAddr::new(e.dst, port(2));
        let seq = u32::from_be_bytes([e.l4[4], e.l4[5], e.l4[6], e.l4[7]]);
        let Some(&id) = self.conns.get(&key(local, remote)) else {
            return;
        };
        let too_big = if e.v6 {
            e.typ == icmp::ICMPV6_PKT_TOOBIG
        } else {
            e.typ == icmp::ICMP_DEST_UNREACH && e.code == icmp::ICMP_FRAG_NEEDED
        };
        let meaning = if e.v6 {
            meaning_v6(e.typ, e.code)
        } else {
            meaning_v4(e.typ, e.code)
        };
        let Some(s) = self.socks[id.0].as_ref() else {
            return;
        };
        let Some(c) = s.conn.as_deref() else {
            return;
        };
        if c.state == State::TimeWait {
            return;
        }
        // A request socket: only its SYN-ACK can be quoted.
        if s.in_syn_q {
            if seq != c.iss {
                self.ext.OutOfWindowIcmps += 1;
            } else if meaning.is_some_and(|m| m.abort) {
                self.ext.ListenDrops += 1;
                self.remove(id);
            }
            return;
        }
        if c.state == State::Closed {
            return;
        }
        if !between(seq, c.snd_una, c.snd_nxt) {
            self.ext.OutOfWindowIcmps += 1;
            return;
        }
        if too_big {
            if e.v6 && e.info < IPV6_MIN_MTU {
                return;
            }
            return self.mtu_reduced(id, remote.ip(), e.v6, e.info, now);
        }
        let Some(m) = meaning else {
            return;
        };
        self.touch(id);
        let mut ctx = ctx!(self, now);
        let Some(c) = self.socks[id.0]
            .as_mut()
            .and_then(|s| s.conn.as_deref_mut())
        else {
            return;
        };
        let verdict = match c.state {
            State::SynSent | State::SynRecv => c.done_with_error(&mut ctx, m.err),
            _ => {
                c.err_soft = Some(m.err);
                if m.revert {
                    c.ld_rto_revert(&mut ctx, seq)
                } else {
                    Verdict::Keep
                }
            }
        };
        if verdict == Verdict::Closed {
            self.conn_closed(id);
        }
    }

    /// "Fragmentation needed" or "packet too big" for connection `id` to
    /// `dst`, reporting `mtu`: the route's MTU lowered, then the
    /// connection's segments (`tcp_v4_mtu_reduced`, `tcp_v6_mtu_reduced`).
    /// Other connections to `dst` take the new MTU at their next
    /// segment, as `tcp_current_mss` notices the route's change.
    fn mtu_reduced(&mut self, id: SockId, dst: IpAddr, v6: bool, mtu: u32, now: Nanos) {
        if v6 {
            let skip = self.socks[id.0]
                .as_ref()
                .and_then(|s| s.conn.as_deref())
                .is_none_or(|c| c.mtu_to_mss(mtu) >= c.mss_cache);
            if skip {
                return;
            }
        }
        let route = self.update_pmtu(dst, v6, mtu, now);
        self.touch(id);
        let mut ctx = ctx!(self, now);
        if let Some(c) = self.socks[id.0]
            .as_mut()
            .and_then(|s| s.conn.as_deref_mut())
        {
            c.mtu_reduced(&mut ctx, route);
        }
        for s in self.socks.iter_mut().flatten() {
            if let Some(c) = s.conn.as_deref_mut() {
                if c.remote.ip().to_canonical() == dst.to_canonical() && c.pmtu_cookie > route {
                    c.sync_pmtu(route);
                }
            }
        }
    }

    /// `__ip_rt_update_pmtu` / `__ip6_rt_update_pmtu`: the route to `dst`
    /// takes a smaller MTU (an IPv4 report under 552 bytes is taken as
    /// 552), for ten minutes. Returns the route's MTU after it.
    fn update_pmtu(&mut self, dst: IpAddr, v6: bool, mtu: u32, now: Nanos) -> u32 {
        let old = self.path_mtu(dst, now);
        let mtu = match v6 {
            false if mtu < IPV4_MIN_PMTU => old.min(IPV4_MIN_PMTU),
            _ => mtu.max(if v6 { IPV6_MIN_MTU } else { 68 }),
        };
        if mtu >= old {
            return old;
        }
        self.pmtu
            .insert(dst.to_canonical(), (mtu, now + PMTU_EXPIRES));
        mtu
    }

    /// The route's MTU to `dst` (`dst_mtu`): a path MTU learnt and not
    /// expired, else the interface's.
    pub(super) fn path_mtu(&self, dst: IpAddr, now: Nanos) -> u32 {
        match self.pmtu.get(&dst.to_canonical()) {
            Some(&(mtu, until)) if until > now => mtu.min(self.cfg.mtu),
            _ => self.cfg.mtu,
        }
    }
}

/// `between(seq, low, high)`: `low <= seq <= high` in sequence space.
fn between(seq: u32, low: u32, high: u32) -> bool {
    high.wrapping_sub(low) >= seq.wrapping_sub(low)
}
