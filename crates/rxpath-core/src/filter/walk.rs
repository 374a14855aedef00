//! The walk through a rule set: the compiled tree's first match in
//! `INPUT` where it decides (most packets), then the kernel's general walk
//! (`ipt_do_table()`: jumps, `RETURN`, `LOG`, policies), one packet or a
//! burst at a time.

use super::rule::{self, Family, Target};
use super::{tree, Action, FilterMode, Key, Ruleset, Verdict};

impl Ruleset {
    /// The walk, calling `hit` with each counter slot a matching rule or
    /// policy adds to.
    #[inline]
    pub(super) fn walk(&self, k: &Key, hit: &mut impl FnMut(u32)) -> Verdict {
        let Some(input) = self.input else {
            return Verdict {
                action: Action::Accept,
                chain: 0,
                rule: None,
            };
        };
        match self.tree(input) {
            Some(t) => {
                let found = t.first(k, &self.table.chains[input].rules, &self.iface);
                self.decide(input, found, k, hit)
            }
            None => self.walk_from(input, None, k, hit),
        }
    }

    /// The tree of chain `input` if the mode uses one.
    #[inline]
    fn tree(&self, input: usize) -> Option<&tree::FirstMatch> {
        match self.mode {
            FilterMode::Compiled => self.compiled[input].tree(),
            FilterMode::Linear => None,
        }
    }

    /// The verdict given the tree's first match in `INPUT`: what most
    /// packets ask ends here (a rule that decides, or none and the
    /// policy); a jump, `RETURN` or `LOG` goes on in the general walk.
    #[inline]
    fn decide(
        &self,
        input: usize,
        found: Option<usize>,
        k: &Key,
        hit: &mut impl FnMut(u32),
    ) -> Verdict {
        let c = &self.table.chains[input];
        match found {
            Some(i) => {
                if let Some(action) = c.rules[i].target.action() {
                    hit((self.base[input] + i) as u32);
                    return Verdict {
                        action,
                        chain: input,
                        rule: Some(i),
                    };
                }
            }
            None => return self.policy(input, hit),
        }
        self.walk_from(input, Some(found), k, hit)
    }

    /// [`Self::walk`] for each of `ks` into `out` (pairs past the shorter
    /// are left alone); `hit` is given the packet with each slot. The
    /// tree walks [`tree::BURST`] packets side by side.
    pub(super) fn walk_burst(
        &self,
        ks: &[Key],
        out: &mut [Verdict],
        hit: &mut impl FnMut(&Key, u32),
    ) {
        let tree = self.input.and_then(|i| Some((i, self.tree(i)?)));
        let Some((input, t)) = tree else {
            for (k, o) in ks.iter().zip(out) {
                *o = self.walk(k, &mut |s| hit(k, s));
            }
            return;
        };
        let rules = &self.table.chains[input].rules;
        let mut found = [None; tree::BURST];
        for (ks, out) in ks.chunks(tree::BURST).zip(out.chunks_mut(tree::BURST)) {
            let found = &mut found[..ks.len()];
            t.first_burst(ks, rules, &self.iface, found);
            for ((k, o), &f) in ks.iter().zip(out).zip(found.iter()) {
                *o = self.decide(input, f, k, &mut |s| hit(k, s));
            }
        }
    }

    /// The general walk from the start of chain `input`: jumps, returns,
    /// `LOG`, and the linear mode. `first`: the tree's answer for `input`
    /// from rule 0, if already asked.
    fn walk_from(
        &self,
        input: usize,
        mut first: Option<Option<usize>>,
        k: &Key,
        hit: &mut impl FnMut(u32),
    ) -> Verdict {
        let bits = if self.table.family == Family::V4 {
            32
        } else {
            128
        };
        // Return positions; not zeroed per packet (most packets never jump).
        let mut stack: arrayvec::ArrayVec<(usize, usize), { rule::MAX_DEPTH }> =
            arrayvec::ArrayVec::new();
        let (mut chain, mut pos) = (input, 0usize);
        // The packet's field ids in the chain last looked up (filled in
        // place: a copy of the array stalls on store forwarding).
        let mut ids = [0u32; 9];
        let mut ids_chain = usize::MAX;
        loop {
            let found = match self.mode {
                FilterMode::Linear => self.table.chains[chain].rules
                    [pos.min(self.table.chains[chain].rules.len())..]
                    .iter()
                    .position(|r| r.m.matches(k, &self.iface, bits))
                    .map(|i| pos + i),
                FilterMode::Compiled => {
                    let c = &self.compiled[chain];
                    let rules = &self.table.chains[chain].rules;
                    // From rule 0 the tree; past a jump's return or a LOG,
                    // the bit vectors.
                    let tree = first.take().or_else(|| {
                        let t = c.tree().filter(|_| pos == 0)?;
                        Some(t.first(k, rules, &self.iface))
                    });
                    match tree {
                        Some(found) => found,
                        None => {
                            if ids_chain != chain {
                                c.lookup(k, &mut ids);
                                ids_chain = chain;
                            }
                            c.next_match(&ids, pos)
                        }
                    }
                }
            };
            let c = &self.table.chains[chain];
            let Some(i) = found else {
                if c.policy.is_none() {
                    // End of a user chain: back to the caller.
                    if let Some(top) = stack.pop() {
                        (chain, pos) = top;
                        continue;
                    }
                }
                return self.policy(chain, hit);
            };
            hit((self.base[chain] + i) as u32);
            let decided = |action| Verdict {
                action,
                chain,
                rule: Some(i),
            };
            let target = &c.rules[i].target;
            if let Some(action) = target.action() {
                return decided(action);
            }
            match *target {
                Target::Return => match stack.pop() {
                    Some(top) => (chain, pos) = top,
                    None => return self.policy(chain, hit),
                },
                Target::Jump(to) => {
                    if stack.try_push((chain, i + 1)).is_err() {
                        // Refused at load; a bound all the same.
                        return decided(Action::Drop);
                    }
                    (chain, pos) = (to, 0);
                }
                // LOG and no target go on; the terminal ones never get
                // here (`action()` decided them above).
                Target::Log | Target::None | Target::Accept | Target::Drop | Target::Reject => {
                    pos = i + 1
                }
            }
        }
    }

    pub(super) fn policy(&self, chain: usize, hit: &mut impl FnMut(u32)) -> Verdict {
        // RETURN in a built-in chain, or its end: the policy.
        let c = &self.table.chains[chain];
        hit((self.counters.rules.len() + chain) as u32);
        Verdict {
            action: match c.policy {
                Some(Target::Drop) => Action::Drop,
                _ => Action::Accept,
            },
            chain,
            rule: None,
        }
    }
}
