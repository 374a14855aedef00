//! The compiled classifier: per-field bit vectors (Lakshman and Stiliadis,
//! SIGCOMM 1998; the classifier of bpf-iptables) with an aggregated summary
//! level (Baboescu and Varghese's ABV, SIGCOMM 2001).
//!
//! Each field (source, destination, protocol, ports, TCP flags, ICMP type,
//! length, fragment) splits its value space into elementary intervals at
//! every rule's range boundaries; each interval carries the bit vector of
//! the rules whose condition on that field holds there. A packet's first
//! matching rule is the lowest bit set in the AND of its fields' vectors.
//! The summary level keeps one bit per 64-bit word ("this word is not
//! zero"), so the AND first runs over summaries (one word per 4096 rules)
//! and touches only the words every field has a rule in.
//!
//! Why this design: every match iptables has here is a range or a small
//! set per field, negations included (a negated range is the complement,
//! two ranges at most), so one lookup per field and a few ANDs decide a
//! packet in time that grows with the number of 64-rule words a packet
//! could match, not with the rules. Decision trees (HyperCuts, CutSplit)
//! are faster on some rule sets but their build time and memory explode on
//! wildcard-heavy firewall sets; tuple space search (TupleMerge) probes one
//! hash table per prefix-length tuple and degrades with many distinct
//! tuples, as ClassBench sets have; DPDK's `rte_acl` trie is fast but is
//! a large piece of careful SIMD code. First-match order, which chains with
//! jumps and RETURN need ("the next matching rule after position p"), is a
//! masked find-first-set on a bit vector.
//!
//! A rule whose `-m multiport --ports` means "source or destination port"
//! (a disjunction) becomes two bits next to each other (one per port
//! field); the bit-to-rule map folds them back.
//!
//! What a packet asks of `INPUT` first, the first match from rule 0, an
//! IPv4 chain answers with a decision tree instead ([`FirstMatch`], in
//! `tree.rs`): on ClassBench rule sets every field's vector has bits in
//! almost every word before the one holding the packet's rule (11.6
//! candidate words and 29 word loads a packet at 2000 rules; even in
//! groups of 4 rules, 17 groups hold a candidate in every field before the
//! match), so the AND costs a cache miss per word; the tree costs its
//! depth (6 at 2000 rules) and one leaf. The vectors answer the rest (the
//! next match after a jump's return or a `LOG`) and every IPv6 chain.

use super::rule::{iface_matches, Family, Key, Matches, Range, Rule, ABSENT};
use super::tree::FirstMatch;

/// The fields, in lookup order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum F {
    Proto,
    Src,
    Dst,
    Sport,
    Dport,
    Flags,
    Icmp,
    Len,
    Frag,
}

const FIELDS: [F; 9] = [
    F::Proto,
    F::Src,
    F::Dst,
    F::Sport,
    F::Dport,
    F::Flags,
    F::Icmp,
    F::Len,
    F::Frag,
];

/// Value space of a field: 0..=max; for ports, flags and ICMP the last
/// value stands for "absent".
fn dom_max(f: F, fam: Family) -> u128 {
    match f {
        F::Proto => 255,
        F::Src | F::Dst => match fam {
            Family::V4 => u32::MAX as u128,
            Family::V6 => u128::MAX,
        },
        F::Sport | F::Dport | F::Icmp => 65536,
        F::Flags => 256,
        F::Len => 65535,
        F::Frag => 1,
    }
}

fn value(f: F, k: &Key) -> u128 {
    let absent = |v: u32, max: u32| if v == ABSENT { max } else { v.min(max) };
    match f {
        F::Proto => k.proto as u128,
        F::Src => k.src,
        F::Dst => k.dst,
        F::Sport => absent(k.sport, 65536) as u128,
        F::Dport => absent(k.dport, 65536) as u128,
        F::Flags => absent(k.tcp_flags, 256) as u128,
        F::Icmp => absent(k.icmp, 65536) as u128,
        F::Len => k.len.min(65535) as u128,
        F::Frag => k.frag as u128,
    }
}

type Set = Vec<(u128, u128)>;

/// Sorted, merged.
fn norm(mut v: Set) -> Set {
    v.sort_unstable();
    let mut out: Set = Vec::with_capacity(v.len());
    for (a, b) in v {
        match out.last_mut() {
            Some(l) if a <= l.1.saturating_add(1) => l.1 = l.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// The complement of a normalised `v` within `0..=max`.
fn complement(v: &Set, max: u128) -> Set {
    let mut out = Vec::new();
    let mut next = 0u128;
    let mut done = false;
    for &(a, b) in v {
        if a > next {
            out.push((next, a - 1));
        }
        if b == u128::MAX || b >= max {
            done = true;
            break;
        }
        next = b + 1;
    }
    if !done && next <= max {
        out.push((next, max));
    }
    out
}

fn ranges(rs: &[Range]) -> Set {
    norm(rs.iter().map(|&(a, b)| (a as u128, b as u128)).collect())
}

/// Where field `f` of a rule with matches `m` holds. `port_alt` selects
/// which half of a `--ports` disjunction this bit stands for.
fn field_set(f: F, m: &Matches, fam: Family, iface_ok: bool, port_alt: Option<F>) -> Set {
    let max = dom_max(f, fam);
    let full = vec![(0, max)];
    // Present values only: "absent" never matches a port/flags/type test.
    let present = |s: Set, invert: bool, pmax: u128| {
        let s = norm(s);
        if invert {
            complement(&s, pmax)
        } else {
            s
        }
    };
    match f {
        F::Proto => {
            if !iface_ok {
                return Vec::new();
            }
            match &m.proto {
                None => full,
                Some(p) => present(vec![(p.v as u128, p.v as u128)], p.invert, max),
            }
        }
        F::Src | F::Dst => {
            let p = if f == F::Src { &m.src } else { &m.dst };
            match p {
                None => full,
                Some(p) => {
                    let bits = if fam == Family::V4 { 32 } else { 128 };
                    let mask = super::rule::Prefix::mask(p.v.len, bits);
                    let hi = p.v.addr | (!mask & max);
                    present(vec![(p.v.addr, hi)], p.invert, max)
                }
            }
        }
        F::Sport | F::Dport => {
            let own = if f == F::Sport { &m.sport } else { &m.dport };
            let mut set = match own {
                None => full.clone(),
                Some(r) => present(ranges(&r.v), r.invert, 65535),
            };
            if let Some(p) = &m.ports {
                // --ports: ! (sport in L or dport in L) is sport not in L
                // and dport not in L; the positive form is two bits.
                let part = if p.invert {
                    Some(present(ranges(&p.v), true, 65535))
                } else if port_alt == Some(f) {
                    Some(ranges(&p.v))
                } else {
                    // The other half of the disjunction: any present port.
                    Some(vec![(0, 65535)])
                };
                if let Some(part) = part {
                    set = intersect(&set, &part);
                }
            }
            set
        }
        F::Flags => match &m.tcp_flags {
            None => full,
            Some(t) => {
                let (mask, comp) = t.v;
                let vals: Set = (0u128..256)
                    .filter(|&v| ((v as u8 & mask) == comp) != t.invert)
                    .map(|v| (v, v))
                    .collect();
                norm(vals)
            }
        },
        F::Icmp => match &m.icmp {
            None => full,
            Some(i) => {
                let (t, lo, hi) = i.v;
                let s = if t == 0xff {
                    vec![(0, 65535)]
                } else {
                    let base = (t as u128) << 8;
                    vec![(base | lo as u128, base | hi as u128)]
                };
                present(s, i.invert, 65535)
            }
        },
        F::Len => match &m.length {
            None => full,
            Some(l) => present(vec![(l.v.0 as u128, l.v.1 as u128)], l.invert, max),
        },
        F::Frag => match m.frag {
            None => full,
            Some(true) => vec![(1, 1)],
            Some(false) => vec![(0, 0)],
        },
    }
}

fn intersect(a: &Set, b: &Set) -> Set {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let lo = a[i].0.max(b[j].0);
        let hi = a[i].1.min(b[j].1);
        if lo <= hi {
            out.push((lo, hi));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// How a field finds its interval.
#[derive(Debug)]
enum Lookup {
    /// One vector id per value (small value spaces).
    Direct(Vec<u32>),
    /// Interval starts, sorted, and the vector id of each interval.
    Search(Vec<u128>, Vec<u32>),
    /// IPv4 addresses: interval starts, their vector ids, and an index
    /// of buckets: see [`Buckets`].
    Indexed(Vec<u32>, Vec<u32>, Buckets),
}

/// The index of an IPv4 field's interval starts: 2^16 buckets of equal
/// width laid over the span the rule set's boundaries cover (from the
/// lowest start above 0 to the highest), one bucket below it and one
/// above, each holding the first interval that starts in it or later, so a
/// lookup searches one small bucket. Rule sets live in a few prefixes
/// (ClassBench's, or one site's /15): buckets over the whole address space
/// (the top 16 bits) would put every boundary in one or two buckets and a
/// lookup would binary-search thousands of starts, a cache miss a step.
#[derive(Debug)]
struct Buckets {
    /// Where the span starts.
    base: u32,
    /// log2 of a bucket's width.
    shift: u32,
    /// Per bucket, the index of the first interval starting in it or
    /// later; one more entry (the number of intervals) at the end.
    first: Vec<u32>,
}

impl Buckets {
    const SPAN: u64 = 1 << 16;

    fn new(starts: &[u32]) -> Buckets {
        let base = starts.iter().copied().find(|&s| s > 0).unwrap_or(0);
        let top = starts.last().copied().unwrap_or(0).max(base);
        let span = (top - base) as u64;
        let mut shift = 0;
        while span >> shift >= Self::SPAN {
            shift += 1;
        }
        let mut b = Buckets {
            base,
            shift,
            first: Vec::new(),
        };
        // Bucket 0 (below the span), SPAN buckets over it, one above.
        let n = Self::SPAN as usize + 2;
        b.first = (0..n)
            .map(|h| {
                let lo = b.low(h);
                starts.partition_point(|&s| (s as u64) < lo) as u32
            })
            .chain(std::iter::once(starts.len() as u32))
            .collect();
        b
    }

    /// The lowest value of bucket `h`.
    fn low(&self, h: usize) -> u64 {
        match h {
            0 => 0,
            h => (self.base as u64 + (((h - 1) as u64) << self.shift)).min(1 << 32),
        }
    }

    /// The bucket of `v`.
    #[inline]
    fn bucket(&self, v: u32) -> usize {
        match v.checked_sub(self.base) {
            None => 0,
            Some(d) => ((d >> self.shift) as usize + 1).min(Self::SPAN as usize + 1),
        }
    }
}

/// One field's intervals and its distinct bit vectors.
#[derive(Debug)]
struct Field {
    f: F,
    lookup: Lookup,
    /// Distinct vectors, `words` u64 each, back to back.
    vecs: Vec<u64>,
    /// Their summaries, `swords` u64 each.
    summ: Vec<u64>,
}

impl Field {
    #[inline]
    fn id(&self, v: u128) -> usize {
        match &self.lookup {
            Lookup::Direct(t) => t[v as usize] as usize,
            Lookup::Search(starts, ids) => {
                // The last interval starting at or below v (starts[0] == 0).
                let i = starts.partition_point(|&s| s <= v);
                ids[i - 1] as usize
            }
            Lookup::Indexed(starts, ids, b) => {
                let v = v as u32;
                let h = b.bucket(v);
                let (lo, hi) = (b.first[h] as usize, b.first[h + 1] as usize);
                // Intervals starting in this bucket at or below v; if none,
                // the one that started before the bucket (starts[0] == 0).
                let i = lo + starts[lo..hi].partition_point(|&s| s <= v);
                ids[i - 1] as usize
            }
        }
    }
}

/// The classifier of one chain.
#[derive(Debug)]
pub struct ChainClassifier {
    /// IPv4: the first match from rule 0 by a decision tree (see
    /// [`FirstMatch`]); the vectors answer the rest.
    first: Option<FirstMatch>,
    fields: Vec<Field>,
    words: usize,
    swords: usize,
    /// Bit position → rule index in the chain.
    bit_rule: Vec<u32>,
    /// Rule index → its first bit.
    rule_bit: Vec<u32>,
}

impl ChainClassifier {
    /// Compile `rules` for packets received on `iface`.
    pub fn build(rules: &[Rule], fam: Family, iface: &str) -> ChainClassifier {
        // Bits: one per rule, two for a positive --ports.
        let mut bit_rule = Vec::new();
        let mut rule_bit = Vec::with_capacity(rules.len());
        let mut alts: Vec<Option<F>> = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            rule_bit.push(bit_rule.len() as u32);
            if r.m.ports.as_ref().is_some_and(|p| !p.invert) {
                for alt in [F::Sport, F::Dport] {
                    bit_rule.push(i as u32);
                    alts.push(Some(alt));
                }
            } else {
                bit_rule.push(i as u32);
                alts.push(None);
            }
        }
        let nbits = bit_rule.len();
        let words = nbits.div_ceil(64).max(1);
        let swords = words.div_ceil(64);
        let iface_ok: Vec<bool> = rules
            .iter()
            .map(|r| {
                r.m.iface
                    .as_ref()
                    .is_none_or(|i| iface_matches(&i.v, iface) != i.invert)
            })
            .collect();
        let mut fields = Vec::new();
        for f in FIELDS {
            let max = dom_max(f, fam);
            let sets: Vec<Set> = (0..nbits)
                .map(|b| {
                    let r = bit_rule[b] as usize;
                    field_set(f, &rules[r].m, fam, iface_ok[r], alts[b])
                })
                .collect();
            // A field no rule restricts costs nothing at lookup time; the
            // protocol field is always kept (it carries the interface test).
            if f != F::Proto && sets.iter().all(|s| s.as_slice() == [(0, max)]) {
                continue;
            }
            fields.push(Self::build_field(f, max, &sets, words, swords));
        }
        // Most selective field first: the AND of a word usually reaches
        // zero after one or two fields, and the loop stops there.
        let density = |fl: &Field| {
            let ones: u64 = fl.vecs.iter().map(|w| w.count_ones() as u64).sum();
            ones as f64 / (fl.vecs.len().max(1) as f64)
        };
        fields.sort_by(|a, b| density(a).total_cmp(&density(b)));
        ChainClassifier {
            first: (fam == Family::V4).then(|| FirstMatch::build(rules, iface)),
            fields,
            words,
            swords,
            bit_rule,
            rule_bit,
        }
    }

    fn build_field(f: F, max: u128, sets: &[Set], words: usize, swords: usize) -> Field {
        // Sweep: at each boundary, bits switch on (a range starts) or off
        // (one ended just before).
        let mut ev: Vec<(u128, bool, usize)> = Vec::new();
        for (b, s) in sets.iter().enumerate() {
            for &(a, e) in s {
                ev.push((a, true, b));
                if e < max {
                    ev.push((e + 1, false, b));
                }
            }
        }
        ev.sort_unstable_by_key(|x| x.0);
        let mut cur = vec![0u64; words];
        let mut starts: Vec<u128> = Vec::new();
        let mut ids: Vec<u32> = Vec::new();
        let mut intern: std::collections::HashMap<Vec<u64>, u32> = Default::default();
        let mut vecs: Vec<u64> = Vec::new();
        let mut snap = |cur: &Vec<u64>, vecs: &mut Vec<u64>| -> u32 {
            if let Some(&id) = intern.get(cur) {
                return id;
            }
            let id = (vecs.len() / words) as u32;
            vecs.extend_from_slice(cur);
            intern.insert(cur.clone(), id);
            id
        };
        let mut i = 0;
        let mut at = 0u128;
        loop {
            while i < ev.len() && ev[i].0 == at {
                let (_, on, b) = ev[i];
                if on {
                    cur[b / 64] |= 1 << (b % 64);
                } else {
                    cur[b / 64] &= !(1 << (b % 64));
                }
                i += 1;
            }
            let id = snap(&cur, &mut vecs);
            if ids.last() != Some(&id) {
                starts.push(at);
                ids.push(id);
            }
            if i >= ev.len() {
                break;
            }
            at = ev[i].0;
        }
        let n = vecs.len() / words;
        let mut summ = vec![0u64; n * swords];
        for v in 0..n {
            for w in 0..words {
                if vecs[v * words + w] != 0 {
                    summ[v * swords + w / 64] |= 1 << (w % 64);
                }
            }
        }
        let lookup = if max == u32::MAX as u128 {
            let starts: Vec<u32> = starts.iter().map(|&s| s as u32).collect();
            let index = Buckets::new(&starts);
            Lookup::Indexed(starts, ids, index)
        } else if max <= 65536 {
            let mut t = vec![0u32; max as usize + 1];
            for (k, &s) in starts.iter().enumerate() {
                let e = starts.get(k + 1).map_or(max + 1, |&x| x);
                for slot in &mut t[s as usize..e as usize] {
                    *slot = ids[k];
                }
            }
            Lookup::Direct(t)
        } else {
            Lookup::Search(starts, ids)
        };
        Field {
            f,
            lookup,
            vecs,
            summ,
        }
    }

    /// The packet's vector ids, one per field (call once per packet and
    /// chain, then [`Self::next_match`] as often as the walk needs).
    #[inline]
    pub fn lookup(&self, k: &Key, ids: &mut [u32; 9]) {
        for (slot, fl) in ids.iter_mut().zip(&self.fields) {
            *slot = fl.id(value(fl.f, k)) as u32;
        }
    }

    /// The chain's tree, if it has one.
    #[inline]
    pub fn tree(&self) -> Option<&FirstMatch> {
        self.first.as_ref()
    }

    /// The tree's nodes and depth, if this chain has one.
    pub fn tree_shape(&self) -> Option<(usize, usize)> {
        self.first.as_ref().map(|t| (t.nodes(), t.depth()))
    }

    /// The first rule at or after `from` (a rule index) that matches.
    #[inline]
    pub fn next_match(&self, ids: &[u32; 9], from: usize) -> Option<usize> {
        let &first_bit = self.rule_bit.get(from)?;
        let first_bit = first_bit as usize;
        let (w0, s0) = (first_bit / 64, first_bit / 4096);
        let nf = self.fields.len();
        for sw in s0..self.swords {
            let mut s = !0u64;
            for (fl, &id) in self.fields.iter().zip(&ids[..nf]) {
                s &= fl.summ[id as usize * self.swords + sw];
                if s == 0 {
                    break;
                }
            }
            if sw == s0 {
                s &= !0u64 << (w0 % 64);
            }
            while s != 0 {
                let w = sw * 64 + s.trailing_zeros() as usize;
                s &= s - 1;
                let mut x = if w == w0 {
                    !0u64 << (first_bit % 64)
                } else {
                    !0u64
                };
                for (fl, &id) in self.fields.iter().zip(&ids[..nf]) {
                    x &= fl.vecs[id as usize * self.words + w];
                    if x == 0 {
                        break;
                    }
                }
                if x != 0 {
                    let bit = w * 64 + x.trailing_zeros() as usize;
                    return Some(self.bit_rule[bit] as usize);
                }
            }
        }
        None
    }

    /// Bytes held (vectors, summaries, lookup tables, the tree).
    pub fn memory(&self) -> usize {
        self.first.as_ref().map_or(0, FirstMatch::memory)
            + self
                .fields
                .iter()
                .map(|f| {
                    8 * (f.vecs.len() + f.summ.len())
                        + match &f.lookup {
                            Lookup::Direct(t) => 4 * t.len(),
                            Lookup::Search(s, i) => 16 * s.len() + 4 * i.len(),
                            Lookup::Indexed(s, i, x) => 4 * (s.len() + i.len() + x.first.len()),
                        }
                })
                .sum::<usize>()
            + 4 * (self.bit_rule.len() + self.rule_bit.len())
    }

    /// Fields that any rule restricts.
    pub fn fields(&self) -> usize {
        self.fields.len()
    }
}
