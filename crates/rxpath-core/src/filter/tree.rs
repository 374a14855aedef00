//! The first match of an IPv4 chain from its first rule: a decision tree
//! with multi-way cuts (the HiCuts/HyperSplit family; each node cuts one
//! field at up to seven points, as HyperCuts cuts a dimension into several
//! intervals), leaves of at most [`BINTH`] rules checked in order.
//!
//! ```text
//!  node: field f, points p1 < ... < p7 ──► child = how many points ≤ value
//!  leaf: rule indices in chain order   ──► the first whose fields hold
//! ```
//!
//! Why next to the bit vectors: a packet that hits a rule deep in a list
//! of ClassBench rules finds nonzero words in every field's vector long
//! before the word that holds its rule (source and destination prefixes
//! overlap everywhere), so the AND walks a dozen words, each a cache miss.
//! The tree asks five to seven cache lines whatever the rule's place. It
//! answers one question, the first match from rule 0, which is what every
//! packet asks of `INPUT`; a walk that goes on after a jump's return or a
//! `LOG` asks the bit vectors ("the next match after p").
//!
//! Five fields steer the tree: source, destination, protocol, source and
//! destination port (absent = 65536, which no port test matches). A rule
//! whose condition on one of them is not one range (a negation that leaves
//! two, a port list), or that tests anything else (`--ports`, TCP flags,
//! ICMP, length, fragments), goes into the tree by the hull of its ranges
//! (a superset) and is checked whole at the leaf: the answer is exact.
//! A leaf keeps no rule after one that holds on all of the leaf's box
//! without such a check: no packet there can reach it.

use super::rule::{iface_matches, Key, Matches, Neg, Prefix, Range, Rule};

/// Fields the tree cuts: source, destination, protocol, ports.
const NF: usize = 5;

/// Most rules a leaf holds unless no cut separates them.
pub const BINTH: usize = 16;

/// Cut points per node (children: one more).
const CUTS: usize = 7;

/// Depth past which a node becomes a leaf whatever it holds.
const MAX_DEPTH: usize = 24;

/// The value of "no port" (ports are 0..=65535).
const NO_PORT: u32 = 65536;

type Set = Vec<(u32, u32)>;

/// A node in one cache line: a cut of field `meta & FIELD`, or a leaf
/// (`meta & LEAF`; its rules in `FirstMatch::span`).
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Node {
    meta: u32,
    /// Cut points, ascending; unused ones `u32::MAX`.
    pts: [u32; CUTS],
    child: [u32; CUTS + 1],
}

const LEAF: u32 = 1 << 31;
const FIELD: u32 = 7;

/// A rule as the leaf checks it: a range per field (`lo` and `hi - lo`,
/// so one unsigned compare tells inside), and whether the rule must be
/// checked whole ([`Rule`]'s matches) after the ranges held.
#[derive(Debug, Clone, Copy)]
struct Flat {
    lo: [u32; NF],
    span: [u32; NF],
    whole: bool,
}

impl Flat {
    /// 1 if every value is in its range, else 0 (no branch: which rule of
    /// a leaf holds is what a predictor cannot guess).
    #[inline(always)]
    fn inside(&self, v: &[u32; 8]) -> u32 {
        let mut out = 0u32;
        for ((&x, &lo), &span) in v.iter().zip(&self.lo).zip(&self.span) {
            out |= (x.wrapping_sub(lo) > span) as u32;
        }
        out ^ 1
    }
}

/// The tree of one IPv4 chain.
#[derive(Debug)]
pub struct FirstMatch {
    nodes: Vec<Node>,
    /// Per node: a leaf's first entry in `leaf` and how many.
    span: Vec<(u32, u32)>,
    /// Rule indices of the leaves, each leaf's in chain order.
    leaf: Vec<u32>,
    flat: Vec<Flat>,
    depth: usize,
}

fn norm(mut v: Set) -> Set {
    v.sort_unstable();
    let mut out: Set = Vec::with_capacity(v.len());
    for (a, b) in v {
        match out.last_mut() {
            Some(l) if a as u64 <= l.1 as u64 + 1 => l.1 = l.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// The complement of normalised `v` within `0..=max`.
fn complement(v: &Set, max: u32) -> Set {
    let mut out = Vec::new();
    let mut next = 0u64;
    for &(a, b) in v {
        if a as u64 > next {
            out.push((next as u32, a - 1));
        }
        next = b as u64 + 1;
    }
    if next <= max as u64 {
        out.push((next as u32, max));
    }
    out
}

fn maybe_not(s: Set, invert: bool, max: u32) -> Set {
    let s = norm(s);
    if invert {
        complement(&s, max)
    } else {
        s
    }
}

/// The five fields' sets of a rule, and whether it tests more.
fn sets(m: &Matches) -> ([Set; NF], bool) {
    let addr = |p: &Option<Neg<Prefix>>| match p {
        None => vec![(0, u32::MAX)],
        Some(p) => {
            // As the bit vectors read a prefix (the parser keeps no host
            // bits in its address).
            let mask = Prefix::mask(p.v.len, 32) as u32;
            let lo = p.v.addr as u32;
            maybe_not(vec![(lo, lo | !mask)], p.invert, u32::MAX)
        }
    };
    let proto = match &m.proto {
        None => vec![(0, 255)],
        Some(p) => maybe_not(vec![(p.v as u32, p.v as u32)], p.invert, 255),
    };
    let port = |r: &Option<Neg<Vec<Range>>>| match r {
        None => vec![(0, NO_PORT)],
        Some(r) => maybe_not(r.v.clone(), r.invert, NO_PORT - 1),
    };
    let more = m.ports.is_some()
        || m.tcp_flags.is_some()
        || m.icmp.is_some()
        || m.length.is_some()
        || m.frag.is_some();
    (
        [
            addr(&m.src),
            addr(&m.dst),
            proto,
            port(&m.sport),
            port(&m.dport),
        ],
        more,
    )
}

/// The packet's five values (three more, never read: an index masked
/// with [`FIELD`] needs no bounds check).
#[inline(always)]
fn values(k: &Key) -> [u32; 8] {
    let port = |p: u32| p.min(NO_PORT);
    [
        k.src as u32,
        k.dst as u32,
        k.proto as u32,
        port(k.sport),
        port(k.dport),
        0,
        0,
        0,
    ]
}

fn meets(s: &Set, lo: u32, hi: u32) -> bool {
    s.iter().any(|&(a, b)| a <= hi && b >= lo)
}

fn covers(s: &Set, lo: u32, hi: u32) -> bool {
    s.iter().any(|&(a, b)| a <= lo && b >= hi)
}

/// A node's box: the values each field may still take.
type Box5 = [(u32, u32); NF];

struct Builder<'a> {
    sets: &'a [[Set; NF]],
    whole: &'a [bool],
    t: FirstMatch,
}

impl Builder<'_> {
    fn leaf(&mut self, at: usize, rs: &[u32]) {
        self.t.nodes[at] = Node {
            meta: LEAF,
            pts: [u32::MAX; CUTS],
            child: [at as u32; CUTS + 1],
        };
        self.t.span[at] = (self.t.leaf.len() as u32, rs.len() as u32);
        self.t.leaf.extend_from_slice(rs);
    }

    /// The rules of `rs` whose field `f` meets `lo..=hi`.
    fn meeting(&self, rs: &[u32], f: usize, lo: u32, hi: u32) -> Vec<u32> {
        rs.iter()
            .copied()
            .filter(|&r| meets(&self.sets[r as usize][f], lo, hi))
            .collect()
    }

    /// The cut of `rs` in `bx`: per field, points at quantiles of the
    /// rules' range ends inside the box; the field whose largest child
    /// is smallest (then the least copying) wins. `None`: no cut helps.
    fn cut(&self, rs: &[u32], bx: &Box5) -> Option<(usize, Vec<u32>)> {
        let mut best: Option<(usize, usize, Vec<u32>)> = None;
        for (f, &(lo, hi)) in bx.iter().enumerate() {
            let mut ends: Vec<u32> = Vec::new();
            for &r in rs {
                for &(a, b) in &self.sets[r as usize][f] {
                    if a > lo && a <= hi {
                        ends.push(a);
                    }
                    if b >= lo && b < hi {
                        ends.push(b + 1);
                    }
                }
            }
            if ends.is_empty() {
                continue;
            }
            ends.sort_unstable();
            let mut pts: Vec<u32> = (1..=CUTS)
                .map(|i| ends[(i * ends.len() / (CUTS + 1)).min(ends.len() - 1)])
                .collect();
            pts.dedup();
            let (mut worst, mut total) = (0, 0);
            for (a, b) in spans(lo, hi, &pts) {
                let n = rs
                    .iter()
                    .filter(|&&r| meets(&self.sets[r as usize][f], a, b))
                    .count();
                worst = worst.max(n);
                total += n;
            }
            let cost = worst * 4 + total;
            if worst < rs.len() && best.as_ref().is_none_or(|b| cost < b.0) {
                best = Some((cost, f, pts));
            }
        }
        best.map(|(_, f, pts)| (f, pts))
    }

    fn grow(&mut self, at: usize, mut rs: Vec<u32>, bx: Box5, depth: usize) {
        self.t.depth = self.t.depth.max(depth);
        let shadows = |r: &u32| {
            let r = *r as usize;
            !self.whole[r]
                && self.sets[r]
                    .iter()
                    .zip(&bx)
                    .all(|(s, &(lo, hi))| covers(s, lo, hi))
        };
        if let Some(p) = rs.iter().position(shadows) {
            rs.truncate(p + 1);
        }
        if rs.len() <= BINTH || depth >= MAX_DEPTH {
            return self.leaf(at, &rs);
        }
        let Some((f, pts)) = self.cut(&rs, &bx) else {
            return self.leaf(at, &rs);
        };
        let first = self.t.nodes.len();
        let kids = spans(bx[f].0, bx[f].1, &pts);
        let mut node = Node {
            meta: f as u32,
            pts: [u32::MAX; CUTS],
            child: [0; CUTS + 1],
        };
        node.pts[..pts.len()].copy_from_slice(&pts);
        for (i, c) in node.child.iter_mut().take(kids.len()).enumerate() {
            *c = (first + i) as u32;
        }
        self.t.nodes[at] = node;
        self.t.nodes.extend(std::iter::repeat_n(node, kids.len()));
        self.t.span.extend(std::iter::repeat_n((0, 0), kids.len()));
        for (i, (a, b)) in kids.into_iter().enumerate() {
            let sub = self.meeting(&rs, f, a, b);
            let mut kb = bx;
            kb[f] = (a, b);
            self.grow(first + i, sub, kb, depth + 1);
        }
    }
}

/// `lo..=hi` cut at `pts` (ascending, inside): the spans, in order.
fn spans(lo: u32, hi: u32, pts: &[u32]) -> Vec<(u32, u32)> {
    let mut out = Vec::with_capacity(pts.len() + 1);
    let mut a = lo;
    for &p in pts {
        out.push((a, p - 1));
        a = p;
    }
    out.push((a, hi));
    out
}

impl FirstMatch {
    /// The tree of an IPv4 chain's `rules` for packets received on
    /// `iface` (rules for other interfaces never match and are left out).
    pub fn build(rules: &[Rule], iface: &str) -> FirstMatch {
        let mut sets_of = Vec::with_capacity(rules.len());
        let mut whole = Vec::with_capacity(rules.len());
        let mut flat = Vec::with_capacity(rules.len());
        let mut live = Vec::with_capacity(rules.len());
        for (i, r) in rules.iter().enumerate() {
            let (s, more) = sets(&r.m);
            let multi = s.iter().any(|s| s.len() != 1);
            let mut f = Flat {
                lo: [0; NF],
                span: [0; NF],
                whole: more || multi,
            };
            for (j, s) in s.iter().enumerate() {
                // The hull (an empty set leaves the rule out of the tree).
                if let (Some(a), Some(b)) = (s.first(), s.last()) {
                    (f.lo[j], f.span[j]) = (a.0, b.1 - a.0);
                }
            }
            let on_iface =
                r.m.iface
                    .as_ref()
                    .is_none_or(|i| iface_matches(&i.v, iface) != i.invert);
            if on_iface && s.iter().all(|s| !s.is_empty()) {
                live.push(i as u32);
            }
            sets_of.push(s);
            whole.push(f.whole);
            flat.push(f);
        }
        let mut b = Builder {
            sets: &sets_of,
            whole: &whole,
            t: FirstMatch {
                nodes: vec![Node {
                    meta: LEAF,
                    pts: [u32::MAX; CUTS],
                    child: [0; CUTS + 1],
                }],
                span: vec![(0, 0)],
                leaf: Vec::new(),
                flat,
                depth: 0,
            },
        };
        let bx = [
            (0, u32::MAX),
            (0, u32::MAX),
            (0, 255),
            (0, NO_PORT),
            (0, NO_PORT),
        ];
        b.grow(0, live, bx, 0);
        b.t
    }

    /// One step down from node `i` for values `v`.
    #[inline(always)]
    fn step(&self, i: usize, v: &[u32; 8]) -> usize {
        let n = &self.nodes[i];
        let x = v[(n.meta & FIELD) as usize];
        let c: usize = n.pts.iter().map(|&p| (x >= p) as usize).sum();
        n.child[c] as usize
    }

    /// The first rule of leaf `at` whose ranges hold `v` and that passes
    /// its whole check if it needs one.
    #[inline(always)]
    fn check(
        &self,
        at: usize,
        v: &[u32; 8],
        k: &Key,
        rules: &[Rule],
        iface: &str,
    ) -> Option<usize> {
        let (start, len) = self.span[at];
        let (start, len) = (start as usize, len as usize);
        // Every rule of the leaf at once (32 at a time), then the set bits
        // in order: the first that needs no whole check, or passes it.
        for part in self.leaf[start..start + len].chunks(32) {
            let mut hit = 0u32;
            for (i, &r) in part.iter().enumerate() {
                hit |= self.flat[r as usize].inside(v) << i;
            }
            while hit != 0 {
                let r = part[hit.trailing_zeros() as usize] as usize;
                hit &= hit - 1;
                if !self.flat[r].whole || rules[r].m.matches(k, iface, 32) {
                    return Some(r);
                }
            }
        }
        None
    }

    /// The first rule of `rules` (the chain it was built from) that `k`
    /// matches.
    #[inline]
    pub fn first(&self, k: &Key, rules: &[Rule], iface: &str) -> Option<usize> {
        let v = values(k);
        let mut i = 0;
        while self.nodes[i].meta & LEAF == 0 {
            i = self.step(i, &v);
        }
        self.check(i, &v, k, rules, iface)
    }

    /// Bytes held.
    pub fn memory(&self) -> usize {
        self.nodes.len() * std::mem::size_of::<Node>()
            + 4 * self.leaf.len()
            + self.flat.len() * std::mem::size_of::<Flat>()
    }

    /// Levels below the root.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Nodes (cuts and leaves).
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }
}
