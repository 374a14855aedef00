//! Rules as `iptables` keeps them: matches, targets, chains, and the
//! packet fields they look at.
//!
//! [`Matches::matches`] is written the way the kernel's `ip_packet_match()`,
//! `tcp_mt()`, `udp_mt()`, `icmp_match()`, `multiport_mt()` and
//! `length_mt()` test a packet, one match after another; the linear
//! evaluator uses it as the reference that the compiled classifier must
//! agree with.

use serde::Serialize;
use std::fmt;

/// The address family of a table (`iptables` or `ip6tables`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// IPv4 (`iptables-save`).
    #[default]
    V4,
    /// IPv6 (`ip6tables-save`).
    V6,
}

/// What a rule looks at in a packet. IPv4 addresses are stored in the low
/// 32 bits. Port, flag and ICMP fields hold [`ABSENT`] when the packet has
/// no such header or is a non-first fragment: no port/flags/type match
/// (negated or not) matches then, as `tcp_mt()` returns false for
/// `fragoff != 0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Key {
    /// Source address.
    pub src: u128,
    /// Destination address.
    pub dst: u128,
    /// Transport protocol (IPv6: the upper-layer header after extension
    /// headers).
    pub proto: u8,
    /// TCP/UDP source port, or [`ABSENT`].
    pub sport: u32,
    /// TCP/UDP destination port, or [`ABSENT`].
    pub dport: u32,
    /// TCP flags byte, or [`ABSENT`].
    pub tcp_flags: u32,
    /// ICMP type << 8 | code, or [`ABSENT`].
    pub icmp: u32,
    /// IP total length (IPv6: payload length + 40), what `-m length`
    /// tests and what the byte counters add.
    pub len: u32,
    /// A non-first IPv4 fragment (`-f`).
    pub frag: bool,
}

/// The value of a port, flags or ICMP field the packet does not have.
pub const ABSENT: u32 = 1 << 16 | 1 << 20;

/// An address with a prefix length (`-s 198.18.0.0/15`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    /// Network address (host bits zero).
    pub addr: u128,
    /// Prefix length.
    pub len: u8,
}

impl Prefix {
    /// The mask of `len` high bits within `bits` (32 or 128).
    pub fn mask(len: u8, bits: u32) -> u128 {
        if len == 0 {
            0
        } else {
            let full = if bits == 32 {
                u32::MAX as u128
            } else {
                u128::MAX
            };
            full & !full.checked_shr(len as u32).unwrap_or(0)
        }
    }
}

/// A match that may be negated with `!`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neg<T> {
    /// The value.
    pub v: T,
    /// `!`.
    pub invert: bool,
}

/// An inclusive range of values (a port range, a length range).
pub type Range = (u32, u32);

/// Everything a rule may require of a packet. `None` = not tested.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Matches {
    /// `-s`.
    pub src: Option<Neg<Prefix>>,
    /// `-d`.
    pub dst: Option<Neg<Prefix>>,
    /// `-p` (protocol number; `all` is no match at all).
    pub proto: Option<Neg<u8>>,
    /// `-i` (a trailing `+` is a prefix match).
    pub iface: Option<Neg<String>>,
    /// `-f`: non-first fragments (`! -f`: the others).
    pub frag: Option<bool>,
    /// `--sport` (a single range; `-m multiport --sports` gives several).
    pub sport: Option<Neg<Vec<Range>>>,
    /// `--dport` or `--dports`.
    pub dport: Option<Neg<Vec<Range>>>,
    /// `-m multiport --ports`: either port in the list.
    pub ports: Option<Neg<Vec<Range>>>,
    /// `--tcp-flags MASK COMP` (`--syn`: SYN,RST,ACK,FIN SYN).
    pub tcp_flags: Option<Neg<(u8, u8)>>,
    /// `--icmp-type` / `--icmpv6-type`: type and code range.
    pub icmp: Option<Neg<(u8, u8, u8)>>,
    /// `-m length --length`.
    pub length: Option<Neg<Range>>,
}

/// What a matching rule does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Accept: the packet goes on.
    Accept,
    /// Drop, counted `filter`.
    Drop,
    /// Reject: a drop counted `filter_reject` (no reply is sent).
    Reject,
    /// Return to the calling chain.
    Return,
    /// Jump to a user chain (index into the table's chains).
    Jump(usize),
    /// Count and go on (`LOG` without logging).
    Log,
    /// No target: count and go on.
    None,
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Its matches.
    pub m: Matches,
    /// Its target.
    pub target: Target,
    /// The rule as written after `-A CHAIN` (counters left out): what
    /// `show` prints and what a reload compares.
    pub text: String,
    /// The line in the file.
    pub line: usize,
}

/// A chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// Name.
    pub name: String,
    /// Built-in chains have a policy (`ACCEPT` or `DROP`); user chains
    /// return at their end.
    pub policy: Option<Target>,
    /// Rules in order.
    pub rules: Vec<Rule>,
    /// The policy's counters as the file gave them.
    pub policy_counters: (u64, u64),
    /// Counters of each rule as the file gave them (`[packets:bytes]`).
    pub rule_counters: Vec<(u64, u64)>,
}

/// Maximum nesting of jumps (the kernel's `XT_MAX_TABLE_SIZE` aside, a
/// loop is refused when the table is loaded; this bounds the walk).
pub const MAX_DEPTH: usize = 64;

fn in_ranges(rs: &[Range], v: u32) -> bool {
    rs.iter().any(|&(a, b)| a <= v && v <= b)
}

/// `iface_match()`: a trailing `+` matches any name with that prefix.
pub fn iface_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('+') {
        Some(p) => name.starts_with(p),
        None => pattern == name,
    }
}

impl Matches {
    /// Does the packet `k`, received on `iface`, match? In the kernel's
    /// order: `ip_packet_match()` (addresses, interface, protocol,
    /// fragment), then each match module.
    pub fn matches(&self, k: &Key, iface: &str, bits: u32) -> bool {
        let pfx = |p: &Option<Neg<Prefix>>, a: u128| {
            p.as_ref()
                .is_none_or(|p| ((a & Prefix::mask(p.v.len, bits)) == p.v.addr) != p.invert)
        };
        if !pfx(&self.src, k.src) || !pfx(&self.dst, k.dst) {
            return false;
        }
        if let Some(i) = &self.iface {
            if iface_matches(&i.v, iface) == i.invert {
                return false;
            }
        }
        if let Some(p) = &self.proto {
            if (k.proto == p.v) == p.invert {
                return false;
            }
        }
        if let Some(f) = self.frag {
            if k.frag != f {
                return false;
            }
        }
        // tcp_mt()/udp_mt()/multiport_mt()/icmp_match(): false on a
        // non-first fragment or a packet without the header, negated or not.
        let port = |m: &Option<Neg<Vec<Range>>>, v: u32| {
            m.as_ref()
                .is_none_or(|m| v != ABSENT && in_ranges(&m.v, v) != m.invert)
        };
        if !port(&self.sport, k.sport) || !port(&self.dport, k.dport) {
            return false;
        }
        if let Some(m) = &self.ports {
            if k.sport == ABSENT {
                return false;
            }
            let hit = in_ranges(&m.v, k.sport) || in_ranges(&m.v, k.dport);
            if hit == m.invert {
                return false;
            }
        }
        if let Some(m) = &self.tcp_flags {
            if k.tcp_flags == ABSENT {
                return false;
            }
            let (mask, comp) = m.v;
            if ((k.tcp_flags as u8 & mask) == comp) == m.invert {
                return false;
            }
        }
        if let Some(m) = &self.icmp {
            if k.icmp == ABSENT {
                return false;
            }
            let (t, lo, hi) = m.v;
            let (kt, kc) = ((k.icmp >> 8) as u8, k.icmp as u8);
            // icmp_type_code_match(): type 0xff is "any".
            let hit = t == 0xff || (kt == t && lo <= kc && kc <= hi);
            if hit == m.invert {
                return false;
            }
        }
        if let Some(m) = &self.length {
            let (a, b) = m.v;
            if (a <= k.len && k.len <= b) == m.invert {
                return false;
            }
        }
        true
    }
}

impl Target {
    /// The action of a terminal target (`ACCEPT`, `DROP`, `REJECT`), by
    /// table rather than a jump per target: which one decides a packet is
    /// what a branch predictor cannot guess.
    #[inline(always)]
    pub fn action(&self) -> Option<super::Action> {
        use super::Action;
        const OF: [Option<Action>; 3] = [
            Some(Action::Accept),
            Some(Action::Drop),
            Some(Action::Reject),
        ];
        let i = match self {
            Target::Accept => 0,
            Target::Drop => 1,
            Target::Reject => 2,
            _ => return None,
        };
        OF[i]
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Target::Accept => "ACCEPT",
            Target::Drop => "DROP",
            Target::Reject => "REJECT",
            Target::Return => "RETURN",
            Target::Jump(_) => "jump",
            Target::Log => "LOG",
            Target::None => "",
        })
    }
}
