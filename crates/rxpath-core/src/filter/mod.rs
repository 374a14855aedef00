//! The filter: the kernel's `INPUT` hook with an `iptables` rule set, the
//! expensive bottom half of seed 003 ("2000 rules in table filter").
//!
//! ```text
//!  iptables-save file ─► parse ─► Table (chains, rules, policies, counters)
//!                                   │
//!          ┌────────────────────────┴─────────────────────────┐
//!          ▼                                                  ▼
//!   linear walk (the reference: rule after rule,     compiled: per-field bit
//!   the cost the seed measured)                      vectors + ABV summaries
//!          └──────────── one answer: verdict, deciding rule, counters ─────┘
//! ```
//!
//! The walk is `ipt_do_table()`'s: first match in chain order; every rule
//! that matches counts the packet and its bytes (the IP total length), a
//! jump pushes the calling position, `RETURN` or the end of a user chain
//! pops it, `RETURN` in a built-in chain or its end applies the policy and
//! counts it. `ACCEPT`, `DROP` and `REJECT` end the walk (`REJECT` is a drop
//! with its own reason: rxpath sends no ICMP error or reset); `LOG` counts
//! and goes on. Both evaluators share this walk and differ only in how they
//! find "the next matching rule of this chain at or after position p".
//!
//! Where it runs: after GRO and IP input, before the UDP layer and sockets
//! (the kernel's `ip_local_deliver` → `NF_INET_LOCAL_IN` → `udp_rcv`): a
//! GRO super-packet is judged once, as the kernel judges one skb.
//!
//! Counters are per rule, shared by every thread that judges packets
//! (relaxed atomic adds; the kernel keeps them per CPU). A new rule set can
//! replace the running one at any time ([`FilterHandle::replace`]): a packet
//! is judged wholly by the old set or wholly by the new, and rules that did
//! not change keep their counters, as `iptables-restore --counters` allows.

mod cache;
mod compiled;
pub mod gen;
mod input_hook;
mod parse;
pub mod rule;
/// The `INPUT` hook's view of a packet, filled by IP input: what IP input knows of a packet it hands the `INPUT` hook (the skb at
/// `ip_local_deliver()`): checked headers, no fragment, for this host. A
/// hook need not find any of it again in the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalIn {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Offset of the transport header in the frame (past IPv6's
    /// extension headers).
    pub l4: usize,
    /// The packet's IP length as the kernel's rule counters count it: the
    /// IPv4 total length, the IPv6 payload length plus the fixed header
    /// (of the whole packet, for a UDP GRO packet).
    pub ip_len: usize,
    /// The transport protocol.
    pub proto: u8,
}

#[cfg(test)]
// Tests may start threads and wait (the lint keeps the core itself sans-I/O).
#[allow(clippy::disallowed_methods)]
mod input_hook_tests;
#[cfg(test)]
mod tests;
mod tree;
mod walk;

pub use cache::Judge;
pub use compiled::ChainClassifier;
pub use input_hook::{InputHook, HOLD_POLLS};
pub use parse::{parse, parse_family, ParseError, Table};
pub use rule::{Family, Key, Target, ABSENT};

use crate::stats::DropReason;
use rxpath_wire::{Headers, IpAddrs, L3, L4};
use serde::Serialize;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Which evaluator judges packets (`--filter-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FilterMode {
    /// Rule after rule: the reference, and the kernel's cost.
    Linear,
    /// The bit-vector classifier.
    #[default]
    Compiled,
}

impl std::str::FromStr for FilterMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "linear" => Ok(FilterMode::Linear),
            "compiled" => Ok(FilterMode::Compiled),
            o => Err(format!("unknown filter mode {o:?}: linear or compiled")),
        }
    }
}

/// What the filter decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The packet goes on.
    Accept,
    /// Dropped (`DROP` or a `DROP` policy).
    Drop,
    /// Rejected (`REJECT`).
    Reject,
}

/// A verdict: the action, and the rule that decided it (chain, index in
/// the chain), or `None` for a chain policy (of the chain given).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// What happens to the packet.
    pub action: Action,
    /// The chain whose rule or policy decided.
    pub chain: usize,
    /// The deciding rule (None: the policy).
    pub rule: Option<usize>,
}

impl Verdict {
    /// The drop reason, if the packet is dropped.
    pub fn drop_reason(self) -> Option<DropReason> {
        self.action.drop_reason()
    }
}

impl Action {
    /// The drop reason, if the packet is dropped.
    #[inline]
    pub fn drop_reason(self) -> Option<DropReason> {
        match self {
            Action::Accept => None,
            Action::Drop => Some(DropReason::Filter),
            Action::Reject => Some(DropReason::FilterReject),
        }
    }
}

#[inline]
fn is_v6(h: &Headers) -> Option<bool> {
    match h.l3 {
        L3::Ipv4 => Some(false),
        L3::Ipv6 => Some(true),
        _ => None,
    }
}

/// Build the key of a parsed frame: `None` if it is not IP.
#[inline]
pub fn key(frame: &[u8], h: &Headers) -> Option<Key> {
    let l3 = h.l3_offset as usize;
    let (len, fragoff) = match h.l3 {
        L3::Ipv4 => {
            let b = frame.get(l3..l3 + 20)?;
            let tot = u16::from_be_bytes([b[2], b[3]]) as u32;
            let off = u16::from_be_bytes([b[6], b[7]]) & 0x1fff;
            (tot, off)
        }
        L3::Ipv6 => {
            let b = frame.get(l3..l3 + 40)?;
            (u16::from_be_bytes([b[4], b[5]]) as u32 + 40, 0)
        }
        _ => return None,
    };
    let (src, dst) = match h.flow.addrs {
        IpAddrs::V4 { src, dst } => (
            u32::from_be_bytes(src) as u128,
            u32::from_be_bytes(dst) as u128,
        ),
        IpAddrs::V6 { src, dst } => (u128::from_be_bytes(src), u128::from_be_bytes(dst)),
    };
    let mut k = Key {
        src,
        dst,
        proto: h.flow.protocol,
        sport: ABSENT,
        dport: ABSENT,
        tcp_flags: ABSENT,
        icmp: ABSENT,
        len,
        frag: fragoff != 0,
    };
    if fragoff != 0 {
        return Some(k);
    }
    let t = h.l4_offset as usize;
    match h.l4 {
        L4::Tcp { .. } => {
            k.sport = h.flow.src_port as u32;
            k.dport = h.flow.dst_port as u32;
            k.tcp_flags = *frame.get(t + 13)? as u32;
        }
        L4::Udp => {
            k.sport = h.flow.src_port as u32;
            k.dport = h.flow.dst_port as u32;
        }
        _ if matches!(h.flow.protocol, 1 | 58) => {
            if let Some(b) = frame.get(t..t + 2) {
                k.icmp = (b[0] as u32) << 8 | b[1] as u32;
            }
        }
        _ => {}
    }
    Some(k)
}

/// Per-rule and per-policy counters of one table.
#[derive(Debug)]
struct Counters {
    /// Packets and bytes of each rule, by global rule index.
    rules: Vec<[AtomicU64; 2]>,
    /// Packets and bytes of each chain's policy.
    policies: Vec<[AtomicU64; 2]>,
}

fn pair(p: u64, b: u64) -> [AtomicU64; 2] {
    [AtomicU64::new(p), AtomicU64::new(b)]
}

/// A table ready to judge packets.
#[derive(Debug)]
pub struct Ruleset {
    table: Table,
    iface: String,
    mode: FilterMode,
    input: Option<usize>,
    base: Vec<usize>,
    compiled: Vec<ChainClassifier>,
    counters: Counters,
    /// The bits of a flow cache key the rules tell packets apart by.
    cache_mask: cache::Packed,
    /// The same for a quick key.
    quick_mask: [u64; 2],
}

/// The key fields some rule of a table looks at.
#[derive(Debug, Clone, Copy, Default)]
struct Used {
    src: bool,
    dst: bool,
    ports: bool,
    flags: bool,
    icmp: bool,
    len: bool,
    frag: bool,
}

impl Used {
    fn of(t: &Table) -> Used {
        let mut u = Used::default();
        for m in t.chains.iter().flat_map(|c| &c.rules).map(|r| &r.m) {
            u.src |= m.src.is_some();
            u.dst |= m.dst.is_some();
            u.ports |= m.sport.is_some() || m.dport.is_some() || m.ports.is_some();
            u.flags |= m.tcp_flags.is_some();
            u.icmp |= m.icmp.is_some();
            u.len |= m.length.is_some();
            u.frag |= m.frag.is_some();
        }
        u
    }
}

/// A rule's or policy's counters for `show`.
#[derive(Debug, Clone, Serialize)]
pub struct RuleStats {
    /// Chain name.
    pub chain: String,
    /// Rule index in the chain (None: the policy).
    pub rule: Option<usize>,
    /// The rule as written (or the policy).
    pub text: String,
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
}

impl Ruleset {
    /// Prepare `table` for packets received on `iface`; the counters start
    /// from the file's.
    pub fn new(table: Table, iface: &str, mode: FilterMode) -> Ruleset {
        let mut base = Vec::new();
        let mut n = 0;
        for c in &table.chains {
            base.push(n);
            n += c.rules.len();
        }
        let compiled = match mode {
            FilterMode::Compiled => table
                .chains
                .iter()
                .map(|c| ChainClassifier::build(&c.rules, table.family, iface))
                .collect(),
            FilterMode::Linear => Vec::new(),
        };
        let counters = Counters {
            rules: table
                .chains
                .iter()
                .flat_map(|c| c.rule_counters.iter().map(|&(p, b)| pair(p, b)))
                .collect(),
            policies: table
                .chains
                .iter()
                .map(|c| pair(c.policy_counters.0, c.policy_counters.1))
                .collect(),
        };
        Ruleset {
            cache_mask: cache::key_mask(&Used::of(&table), table.family == Family::V6),
            quick_mask: cache::quick_mask(&Used::of(&table)),
            input: table.chain("INPUT"),
            table,
            iface: iface.to_string(),
            mode,
            base,
            compiled,
            counters,
        }
    }

    /// The table.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The evaluator.
    pub fn mode(&self) -> FilterMode {
        self.mode
    }

    /// The `INPUT` chain's decision tree: nodes and depth (IPv4, compiled).
    pub fn tree_shape(&self) -> Option<(usize, usize)> {
        self.compiled.get(self.input?)?.tree_shape()
    }

    /// Bytes the compiled classifier holds (0 for the linear walk).
    pub fn memory(&self) -> usize {
        self.compiled.iter().map(|c| c.memory()).sum()
    }

    /// Judge a packet and count it, as `ipt_do_table()` on `INPUT`. A
    /// table without `INPUT` accepts everything uncounted.
    #[inline]
    pub fn judge(&self, k: &Key) -> Verdict {
        self.walk(k, &mut |slot| self.add(slot, 1, k.len as u64))
    }

    /// [`Self::judge`] for each of `ks` into `out` (as many; pairs past
    /// the shorter are left alone): the same verdicts and counts, the
    /// compiled tree walking several packets side by side (as
    /// `rte_acl_classify()` takes a burst).
    pub fn judge_burst(&self, ks: &[Key], out: &mut [Verdict]) {
        self.walk_burst(ks, out, &mut |k, slot| self.add(slot, 1, k.len as u64))
    }

    /// [`Self::judge_burst`] without counting.
    pub fn judge_burst_quiet(&self, ks: &[Key], out: &mut [Verdict]) {
        self.walk_burst(ks, out, &mut |_, _| {})
    }

    /// Judge without counting (tests compare evaluators with it).
    pub fn judge_quiet(&self, k: &Key) -> Verdict {
        self.walk(k, &mut |_| {})
    }

    /// Judge, recording the counters touched in `path`; those past its
    /// room are counted at once and the result says `false` (the path is
    /// not whole: such a walk is not cached).
    pub(crate) fn walk_path_checked(&self, k: &Key, path: &mut cache::Path) -> (Verdict, bool) {
        let mut whole = true;
        let v = self.walk(k, &mut |slot| {
            if path.try_push(slot).is_err() {
                whole = false;
                self.add(slot, 1, k.len as u64);
            }
        });
        (v, whole)
    }

    /// Add to a counter slot: rule `r` (global index) is slot `r`, the
    /// policy of chain `c` is slot `rules + c`.
    #[inline]
    pub(crate) fn add(&self, slot: u32, packets: u64, bytes: u64) {
        let slot = slot as usize;
        let n = self.counters.rules.len();
        let ctr = if slot < n {
            &self.counters.rules[slot]
        } else {
            &self.counters.policies[slot - n]
        };
        ctr[0].fetch_add(packets, Ordering::Relaxed);
        ctr[1].fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counter slots: one per rule, then one per chain's policy.
    pub(crate) fn slots(&self) -> usize {
        self.counters.rules.len() + self.counters.policies.len()
    }

    /// Which bits of a flow cache key ([`cache`]'s layout) the rules
    /// look at.
    #[inline]
    pub(crate) fn cache_mask(&self) -> &cache::Packed {
        &self.cache_mask
    }

    /// The same for a quick key.
    #[inline]
    pub(crate) fn quick_mask(&self) -> [u64; 2] {
        self.quick_mask
    }

    /// Every chain's policy and rules with their counters, in file order.
    pub fn stats(&self) -> Vec<RuleStats> {
        let mut out = Vec::new();
        for (ci, c) in self.table.chains.iter().enumerate() {
            let p = &self.counters.policies[ci];
            out.push(RuleStats {
                chain: c.name.clone(),
                rule: None,
                text: match &c.policy {
                    Some(t) => format!("policy {t}"),
                    None => "-".into(),
                },
                packets: p[0].load(Ordering::Relaxed),
                bytes: p[1].load(Ordering::Relaxed),
            });
            for (ri, r) in c.rules.iter().enumerate() {
                let ctr = &self.counters.rules[self.base[ci] + ri];
                out.push(RuleStats {
                    chain: c.name.clone(),
                    rule: Some(ri),
                    text: r.text.clone(),
                    packets: ctr[0].load(Ordering::Relaxed),
                    bytes: ctr[1].load(Ordering::Relaxed),
                });
            }
        }
        out
    }

    /// Add `old`'s counters to the rules of this set that are the same rule
    /// in the same chain (matched in order by their text), and to policies
    /// of the same chains.
    fn carry_counters(&self, old: &Ruleset) {
        for (ci, c) in self.table.chains.iter().enumerate() {
            let Some(oi) = old.table.chain(&c.name) else {
                continue;
            };
            let oc = &old.table.chains[oi];
            let add = |to: &[AtomicU64; 2], from: &[AtomicU64; 2]| {
                for k in 0..2 {
                    to[k].fetch_add(from[k].load(Ordering::Relaxed), Ordering::Relaxed);
                }
            };
            if c.policy == oc.policy {
                add(&self.counters.policies[ci], &old.counters.policies[oi]);
            }
            // Rules match by text, each old rule used once, in order.
            let mut used = vec![false; oc.rules.len()];
            for (ri, r) in c.rules.iter().enumerate() {
                let same = oc
                    .rules
                    .iter()
                    .enumerate()
                    .position(|(j, o)| !used[j] && o.text == r.text && o.target == r.target);
                if let Some(j) = same {
                    used[j] = true;
                    add(
                        &self.counters.rules[self.base[ci] + ri],
                        &old.counters.rules[old.base[oi] + j],
                    );
                }
            }
        }
    }

    /// The table as `iptables-save -c` prints it, with the counters now
    /// (what `iptables-restore --counters` reads back).
    pub fn save(&self) -> String {
        use std::fmt::Write;
        let tool = match self.table.family {
            Family::V4 => "iptables-save",
            Family::V6 => "ip6tables-save",
        };
        let mut s =
            format!("# Generated by {tool} format (rxpath, counters of this run)\n*filter\n");
        let stats = self.stats();
        let get = |chain: &str, rule: Option<usize>| {
            stats
                .iter()
                .find(|r| r.chain == chain && r.rule == rule)
                .map_or((0, 0), |r| (r.packets, r.bytes))
        };
        for c in &self.table.chains {
            let (p, b) = get(&c.name, None);
            let pol = c.policy.as_ref().map_or("-".to_string(), |t| t.to_string());
            let _ = writeln!(s, ":{} {pol} [{p}:{b}]", c.name);
        }
        for c in &self.table.chains {
            for (ri, r) in c.rules.iter().enumerate() {
                let (p, b) = get(&c.name, Some(ri));
                let _ = writeln!(s, "[{p}:{b}] -A {} {}", c.name, r.text);
            }
        }
        s.push_str("COMMIT\n");
        s
    }

    /// `iptables -L -v -x -n`-style listing.
    pub fn listing(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let stats = self.stats();
        for (ci, c) in self.table.chains.iter().enumerate() {
            let p = stats
                .iter()
                .find(|r| r.chain == c.name && r.rule.is_none())
                .map_or((0, 0), |r| (r.packets, r.bytes));
            match &c.policy {
                Some(t) => {
                    let _ = writeln!(
                        s,
                        "Chain {} (policy {t} {} packets, {} bytes)",
                        c.name, p.0, p.1
                    );
                }
                None => {
                    let refs = self
                        .table
                        .chains
                        .iter()
                        .flat_map(|x| &x.rules)
                        .filter(|r| r.target == Target::Jump(ci))
                        .count();
                    let _ = writeln!(s, "Chain {} ({refs} references)", c.name);
                }
            }
            let _ = writeln!(s, "{:>10} {:>12} {:<10} rule", "pkts", "bytes", "target");
            for (ri, r) in c.rules.iter().enumerate() {
                let st = &stats
                    .iter()
                    .find(|x| x.chain == c.name && x.rule == Some(ri));
                let (pk, by) = st.map_or((0, 0), |x| (x.packets, x.bytes));
                let target = match r.target {
                    Target::Jump(t) => self.table.chains[t].name.clone(),
                    ref o => o.to_string(),
                };
                let _ = writeln!(s, "{pk:>10} {by:>12} {target:<10} {}", r.text);
            }
            s.push('\n');
        }
        s
    }
}

/// The filter of a host: an IPv4 and an IPv6 rule set, either optional.
#[derive(Debug)]
pub struct Filter {
    /// `iptables` rules.
    pub v4: Option<Ruleset>,
    /// `ip6tables` rules.
    pub v6: Option<Ruleset>,
    /// Unique per filter made: what a [`Judge`]'s cached verdicts belong to.
    id: u64,
}

impl Default for Filter {
    fn default() -> Self {
        Filter::new(None, None)
    }
}

impl Filter {
    /// A filter of these rule sets.
    pub fn new(v4: Option<Ruleset>, v6: Option<Ruleset>) -> Filter {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Filter {
            v4,
            v6,
            id: NEXT.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Judge a packet by its family's rule set (accepted if none).
    #[inline]
    pub fn judge(&self, k: &Key, v6: bool) -> Option<Verdict> {
        let rs = if v6 { &self.v6 } else { &self.v4 };
        rs.as_ref().map(|r| r.judge(k))
    }

    /// Judge a parsed frame; `None` if it is not IP or its family has no
    /// rule set (the packet goes on). Counts at once.
    #[inline]
    pub fn judge_frame(&self, frame: &[u8], h: &Headers) -> Option<Verdict> {
        let v6 = is_v6(h)?;
        let rs = if v6 {
            self.v6.as_ref()
        } else {
            self.v4.as_ref()
        }?;
        Some(rs.judge(&key(frame, h)?))
    }

    /// [`Self::judge_frame`] through a thread's [`Judge`] (its flow cache;
    /// counts held until [`Judge::flush`]).
    #[inline]
    pub fn judge_frame_with(
        &self,
        j: &mut Judge,
        frame: &[u8],
        h: &Headers,
        rxhash: u32,
    ) -> Option<Verdict> {
        j.judge_frame(self, frame, h, rxhash)
    }

    /// Both rule sets, IPv4 first.
    pub fn sets(&self) -> impl Iterator<Item = &Ruleset> {
        self.v4.iter().chain(self.v6.iter())
    }

    /// Load rule files (each an `iptables-save` or `ip6tables-save` file;
    /// at most one per family) for packets received on `iface`.
    pub fn load(
        texts: &[(String, String)],
        iface: &str,
        mode: FilterMode,
    ) -> Result<Filter, String> {
        let mut f = Filter::default();
        for (name, text) in texts {
            let t = parse(text).map_err(|e| format!("{name}: {e}"))?;
            let slot = match t.family {
                Family::V4 => &mut f.v4,
                Family::V6 => &mut f.v6,
            };
            if slot.is_some() {
                return Err(format!("{name}: a second {:?} rule set", t.family));
            }
            *slot = Some(Ruleset::new(t, iface, mode));
        }
        Ok(f)
    }
}

/// The running filter, replaceable while packets flow.
#[derive(Debug)]
pub struct FilterHandle {
    cur: arc_swap::ArcSwapOption<Filter>,
    flow_cache: usize,
}

impl Default for FilterHandle {
    fn default() -> Self {
        FilterHandle::new(None)
    }
}

/// Flow cache entries per judging thread unless told otherwise.
pub const DEFAULT_FLOW_CACHE: usize = 4096;

impl FilterHandle {
    /// A handle holding `f`, judged through flow caches of
    /// [`DEFAULT_FLOW_CACHE`] entries per thread.
    pub fn new(f: Option<Filter>) -> FilterHandle {
        FilterHandle {
            cur: arc_swap::ArcSwapOption::new(f.map(Arc::new)),
            flow_cache: DEFAULT_FLOW_CACHE,
        }
    }

    /// Flow cache entries per judging thread (0: every packet walks the
    /// rules).
    pub fn with_flow_cache(mut self, entries: usize) -> FilterHandle {
        self.flow_cache = entries;
        self
    }

    /// A judge for one thread, with this handle's flow cache size.
    pub fn judge(&self) -> Judge {
        Judge::new(self.flow_cache)
    }

    /// The filter now (a packet is judged wholly by the set it loaded).
    #[inline]
    pub fn load(&self) -> arc_swap::Guard<Option<Arc<Filter>>> {
        self.cur.load()
    }

    /// The filter now, as an `Arc`.
    pub fn current(&self) -> Option<Arc<Filter>> {
        self.cur.load_full()
    }

    /// Put `new` in place of the running filter. Packets being judged by
    /// the old set finish with it; once none is, its counters are added to
    /// the same rules of the new set (`iptables-restore --counters`).
    /// While a judge still holds the old set, `wait` is called: it waits a
    /// little (the caller's clock and manner: a yield, a sleep) and returns
    /// false to stop waiting (a holder that keeps the set, a report, must
    /// not stall the swap forever).
    pub fn replace(&self, new: Filter, mut wait: impl FnMut() -> bool) {
        let new = Arc::new(new);
        let Some(old) = self.cur.swap(Some(new.clone())) else {
            return;
        };
        while Arc::strong_count(&old) > 1 && wait() {}
        for (n, o) in [(&new.v4, &old.v4), (&new.v6, &old.v6)] {
            if let (Some(n), Some(o)) = (n, o) {
                n.carry_counters(o);
            }
        }
    }
}
