//! The first match of an IPv4 chain from its first rule: a decision tree
//! with multi-way cuts (the HiCuts/HyperSplit family; each node cuts one
//! field at up to seven points, as HyperCuts cuts a dimension into several
//! intervals), leaves of at most [`BINTH`] rules checked in order.
//!
//! ```text
//!  node: field f, points p1 < ... < p7 ──► child = how many points ≤ value
//!  leaf: blocks of 8 rules, chain order ──► the first whose fields hold
//! ```
//!
//! Both are vector work without a branch: a node compares the value with
//! its seven points at once (one cache line), a leaf block holds its eight
//! rules field by field (a structure of arrays) and checks all of them in
//! one compare a field. [`FirstMatch::first_burst`] walks eight packets
//! down side by side, so their cache misses overlap: over 100 000 random
//! packets and 2000 rules (3 MB of tree), a walk is a chain of misses, and
//! eight at once cost about half as much a packet as one at a time.
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
use wide::i32x8;

/// Keys [`FirstMatch::first_burst`] walks side by side.
pub const BURST: usize = 8;

/// The packet's values, each across the lanes of a block.
#[inline(always)]
fn splat(v: &[i32; 8]) -> [i32x8; NF] {
    std::array::from_fn(|f| i32x8::splat(v[f]))
}

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

/// Flips an unsigned value's top bit so that a signed compare orders it
/// as unsigned (SSE2, the baseline, has only signed vector compares).
const BIAS: u32 = 1 << 31;

#[inline(always)]
fn biased(x: u32) -> i32 {
    (x ^ BIAS) as i32
}

/// Where a child is: a cut node (`index << 3 | field`) or a leaf (`LEAF |
/// first block << 4 | blocks`; 0 blocks: the leaf is empty or too long
/// for four bits, and the first field indexes `FirstMatch::big`). The field
/// of the next node travels in its reference, so the value it cuts is
/// read before the node; a leaf's blocks are found without a load.
type Ref = u32;
const LEAF: Ref = 1 << 31;
const FIELD: Ref = 7;

/// A cut node in one cache line: child `c` holds the values above `c` of
/// its points. A point is stored as `p - 1`, biased (`x >= p` is `x > p -
/// 1`, one signed compare per lane), unused ones as `i32::MAX`, which no
/// value exceeds: the count is at most 7, and no lane needs a mask.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Node {
    below: i32x8,
    child: [Ref; CUTS + 1],
}

/// How many lanes of a compare's mask are set (each all ones or zero).
#[inline(always)]
fn lanes_set(m: i32x8) -> u32 {
    // A bit mask and a popcount where the CPU has one; the lanes' sum
    // (each -1) on baseline x86-64, where a popcount is a dozen steps.
    #[cfg(target_feature = "popcnt")]
    {
        m.to_bitmask().count_ones()
    }
    #[cfg(not(target_feature = "popcnt"))]
    {
        m.reduce_add().wrapping_neg() as u32
    }
}

/// Rules a leaf block checks at once: one `i32x8` a field (two SSE2
/// vectors, one AVX2).
const LANES: usize = 8;

/// Set in [`FirstMatch::lanes`] when the rule must also be checked whole
/// ([`Rule`]'s matches) after its ranges held.
const WHOLE: u32 = 1 << 31;

/// Up to eight rules of a leaf, field by field (a structure of arrays, so
/// a field is one vector compare for all eight): a rule holds where `x -
/// lo`, biased, is at most its biased `span` (`x` and `lo` are both kept
/// biased, which leaves their difference as it is). An unused lane has a
/// protocol range no packet has. Five cache lines; the lanes' rule
/// indices are kept apart ([`FirstMatch::lanes`]), read only on a hit.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Block {
    lo: [i32x8; NF],
    span: [i32x8; NF],
}

impl Block {
    /// The block of `lanes` (ranges and rule), and the lanes' rules.
    fn new(lanes: &[([u32; NF], [u32; NF], u32)]) -> (Block, [u32; LANES]) {
        let mut lo = [[0i32; LANES]; NF];
        let mut span = [[i32::MAX; LANES]; NF];
        let mut rule = [u32::MAX; LANES];
        for l in lanes.len()..LANES {
            // Protocol 256 only.
            (lo[2][l], span[2][l]) = (biased(256), i32::MIN);
        }
        for (l, (lo_l, span_l, r)) in lanes.iter().enumerate() {
            for f in 0..NF {
                lo[f][l] = biased(lo_l[f]);
                span[f][l] = biased(span_l[f]);
            }
            rule[l] = *r;
        }
        let b = Block {
            lo: lo.map(i32x8::from),
            span: span.map(i32x8::from),
        };
        (b, rule)
    }

    /// The lanes whose ranges all hold the packet's values `v` (each
    /// splat across the lanes): bit `l` for lane `l`. No branch: which
    /// rule of a leaf holds is what a predictor cannot guess.
    #[inline(always)]
    fn hits(&self, v: &[i32x8; NF]) -> u32 {
        let bias = i32x8::splat(i32::MIN);
        let mut out = i32x8::ZERO;
        for ((&x, &lo), &span) in v.iter().zip(&self.lo).zip(&self.span) {
            out |= ((x - lo) ^ bias).simd_gt(span);
        }
        !out.to_bitmask() & 0xff
    }
}

/// The tree of one IPv4 chain.
#[derive(Debug)]
pub struct FirstMatch {
    root: Ref,
    nodes: Vec<Node>,
    /// First block and count of the leaves whose reference cannot say
    /// (index 0: the empty leaf).
    big: Vec<(u32, u32)>,
    leaves: usize,
    blocks: Vec<Block>,
    /// Per block: its lanes' rule indices ([`WHOLE`] set where the rule
    /// needs its whole check).
    lanes: Vec<[u32; LANES]>,
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

/// The packet's five values, biased as the tree's points and ranges are
/// (three more, never read: an index masked with [`FIELD`] needs no
/// bounds check).
#[inline(always)]
fn values(k: &Key) -> [i32; 8] {
    let port = |p: u32| biased(p.min(NO_PORT));
    [
        biased(k.src as u32),
        biased(k.dst as u32),
        biased(k.proto as u32),
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

/// A rule as the leaves hold it: its ranges (`lo`, `hi - lo`, the hull of
/// each field's set) and whether it needs the whole check.
type Flat = ([u32; NF], [u32; NF], bool);

struct Builder<'a> {
    sets: &'a [[Set; NF]],
    /// Per rule, copied into the blocks of the leaves that hold it.
    flat: &'a [Flat],
    /// Leaves built so far, by their rules.
    seen: std::collections::HashMap<Vec<u32>, Ref>,
    t: FirstMatch,
}

impl Builder<'_> {
    /// A leaf of `rs` (in chain order): its reference.
    fn leaf(&mut self, rs: &[u32]) -> Ref {
        self.t.leaves += 1;
        // Cuts copy a rule into every child its range meets, so many
        // leaves hold the same rules: they share one set of blocks (a
        // smaller tree stays in cache longer).
        if let Some(&r) = self.seen.get(rs) {
            return r;
        }
        let r = self.new_leaf(rs);
        self.seen.insert(rs.to_vec(), r);
        r
    }

    fn new_leaf(&mut self, rs: &[u32]) -> Ref {
        let first = self.t.blocks.len() as u32;
        for part in rs.chunks(LANES) {
            let lanes: Vec<_> = part
                .iter()
                .map(|&r| {
                    let (lo, span, whole) = self.flat[r as usize];
                    (lo, span, r | if whole { WHOLE } else { 0 })
                })
                .collect();
            let (b, rule) = Block::new(&lanes);
            self.t.blocks.push(b);
            self.t.lanes.push(rule);
        }
        let n = self.t.blocks.len() as u32 - first;
        if rs.is_empty() {
            LEAF
        } else if n < 16 && first < 1 << 27 {
            LEAF | first << 4 | n
        } else {
            self.t.big.push((first, n));
            LEAF | ((self.t.big.len() as u32 - 1) << 4)
        }
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

    /// The subtree of `rs` in `bx`: its reference.
    fn grow(&mut self, mut rs: Vec<u32>, bx: Box5, depth: usize) -> Ref {
        self.t.depth = self.t.depth.max(depth);
        let shadows = |r: &u32| {
            let r = *r as usize;
            !self.flat[r].2
                && self.sets[r]
                    .iter()
                    .zip(&bx)
                    .all(|(s, &(lo, hi))| covers(s, lo, hi))
        };
        if let Some(p) = rs.iter().position(shadows) {
            rs.truncate(p + 1);
        }
        if rs.len() <= BINTH || depth >= MAX_DEPTH {
            return self.leaf(&rs);
        }
        let Some((f, pts)) = self.cut(&rs, &bx) else {
            return self.leaf(&rs);
        };
        let at = self.t.nodes.len();
        let mut below = [i32::MAX; 8];
        for (b, &p) in below.iter_mut().zip(&pts) {
            *b = biased(p - 1);
        }
        let mut node = Node {
            below: i32x8::from(below),
            child: [0; CUTS + 1],
        };
        self.t.nodes.push(node);
        let kids = spans(bx[f].0, bx[f].1, &pts);
        let n = kids.len();
        for (i, (a, b)) in kids.into_iter().enumerate() {
            let sub = self.meeting(&rs, f, a, b);
            let mut kb = bx;
            kb[f] = (a, b);
            node.child[i] = self.grow(sub, kb, depth + 1);
        }
        // Slots past the last child are never taken (the count stops at
        // the points there are); fill them with it all the same.
        let last = node.child[n - 1];
        node.child[n..].fill(last);
        self.t.nodes[at] = node;
        ((at as u32) << 3) | f as u32
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
        let mut flat = Vec::with_capacity(rules.len());
        let mut live = Vec::with_capacity(rules.len());
        for (i, r) in rules.iter().enumerate() {
            let (s, more) = sets(&r.m);
            let multi = s.iter().any(|s| s.len() != 1);
            let (mut lo, mut span) = ([0; NF], [0; NF]);
            for (j, s) in s.iter().enumerate() {
                // The hull (an empty set leaves the rule out of the tree).
                if let (Some(a), Some(b)) = (s.first(), s.last()) {
                    (lo[j], span[j]) = (a.0, b.1 - a.0);
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
            flat.push((lo, span, more || multi));
        }
        let mut b = Builder {
            sets: &sets_of,
            flat: &flat,
            seen: std::collections::HashMap::new(),
            t: FirstMatch {
                root: 0,
                nodes: Vec::new(),
                big: vec![(0, 0)],
                leaves: 0,
                blocks: Vec::new(),
                lanes: Vec::new(),
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
        b.t.root = b.grow(live, bx, 0);
        b.t
    }

    /// One step down from cut node `r` for values `v`: the children below
    /// the value are those whose point (less one) it exceeds.
    #[inline(always)]
    fn step(&self, r: Ref, v: &[i32; 8]) -> Ref {
        let n = &self.nodes[(r >> 3) as usize];
        let x = i32x8::splat(v[(r & FIELD) as usize]);
        n.child[lanes_set(x.simd_gt(n.below)) as usize & CUTS]
    }

    /// Leaf `at`'s first block and how many.
    #[inline(always)]
    fn blocks_of(&self, at: Ref) -> (u32, u32) {
        let (field, n) = ((at & !LEAF) >> 4, at & 15);
        if n != 0 {
            (field, n)
        } else {
            self.big[field as usize]
        }
    }

    /// The first rule of leaf `at` whose ranges hold `v` and that passes
    /// its whole check if it needs one.
    #[inline(always)]
    fn check(&self, at: Ref, v: &[i32; 8], k: &Key, rules: &[Rule], iface: &str) -> Option<usize> {
        let (start, n) = self.blocks_of(at);
        if n == 0 {
            return None;
        }
        let hit = self.blocks[start as usize].hits(&splat(v));
        self.resolve(at, hit, v, k, rules, iface)
    }

    /// [`Self::check`] given the lanes of the leaf's first block that hold.
    #[inline(always)]
    fn resolve(
        &self,
        at: Ref,
        first: u32,
        v: &[i32; 8],
        k: &Key,
        rules: &[Rule],
        iface: &str,
    ) -> Option<usize> {
        let (start, n) = self.blocks_of(at);
        let (start, end) = (start as usize, (start + n) as usize);
        let mut hit = first;
        for (j, (b, lanes)) in self.blocks[start..end]
            .iter()
            .zip(&self.lanes[start..end])
            .enumerate()
        {
            if j > 0 {
                hit = b.hits(&splat(v));
            }
            while hit != 0 {
                let r = lanes[hit.trailing_zeros() as usize];
                hit &= hit - 1;
                let i = (r & !WHOLE) as usize;
                if r & WHOLE == 0 || rules[i].m.matches(k, iface, 32) {
                    return Some(i);
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
        let mut r = self.root;
        while r & LEAF == 0 {
            r = self.step(r, &v);
        }
        self.check(r, &v, k, rules, iface)
    }

    /// [`Self::first`] for each of `ks` into `out` (as many), [`BURST`]
    /// keys at a time: their walks go down the tree level by level side
    /// by side, then every key's first leaf block is checked before any
    /// answer is read, so the loads of different keys are in flight
    /// together (a walk alone is a chain of dependent loads; `rte_acl`
    /// classifies in bursts for the same reason).
    pub fn first_burst(&self, ks: &[Key], rules: &[Rule], iface: &str, out: &mut [Option<usize>]) {
        for (ks, out) in ks.chunks(BURST).zip(out.chunks_mut(BURST)) {
            let mut v = [[0i32; 8]; BURST];
            for (v, k) in v.iter_mut().zip(ks) {
                *v = values(k);
            }
            // Lanes past the keys start at the empty leaf: no steps.
            let mut r = [LEAF; BURST];
            r[..ks.len()].fill(self.root);
            while r.iter().fold(LEAF, |all, &r| all & r) == 0 {
                for (r, v) in r.iter_mut().zip(&v) {
                    // A walk at its leaf stays there: a select, not a
                    // branch (which walk ends first is not predictable).
                    let leaf = *r & LEAF != 0;
                    let next = self.step(std::hint::select_unpredictable(leaf, 0, *r), v);
                    *r = std::hint::select_unpredictable(leaf, *r, next);
                }
            }
            let r = &r[..ks.len()];
            // Every first block, then the answers.
            let mut hit = [0u32; BURST];
            for ((h, &r), v) in hit.iter_mut().zip(r.iter()).zip(&v) {
                let (start, n) = self.blocks_of(r);
                if n != 0 {
                    *h = self.blocks[start as usize].hits(&splat(v));
                }
            }
            for (i, o) in out.iter_mut().enumerate() {
                *o = self.resolve(r[i], hit[i], &v[i], &ks[i], rules, iface);
            }
        }
    }

    /// Bytes held.
    pub fn memory(&self) -> usize {
        self.nodes.len() * std::mem::size_of::<Node>()
            + self.big.len() * 8
            + self.blocks.len() * std::mem::size_of::<Block>()
            + self.lanes.len() * std::mem::size_of::<[u32; LANES]>()
    }

    /// Levels below the root.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Nodes (cuts and leaves).
    pub fn nodes(&self) -> usize {
        self.nodes.len() + self.leaves
    }
}
