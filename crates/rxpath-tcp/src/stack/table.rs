//! The socket table and its timer index. The kernel arms one timer per
//! socket in its timer wheel; here the earliest deadline of the machine is
//! asked after every segment and call, and walking every connection for it
//! cost a third of a busy server's CPU. The table notes each slot handed
//! out for writing, and the index ([`Socks::next_deadline`]) looks again
//! at those slots only: a connection's timers change only through a
//! mutable borrow of its slot, so none is missed.

use super::Sock;
use crate::time::Nanos;
use std::collections::BTreeSet;

/// The socket slots of a [`super::Stack`], with the deadline each armed.
#[derive(Debug, Default)]
pub(super) struct Socks {
    slots: Vec<Option<Sock>>,
    /// Per slot: borrowed for writing since the index last looked.
    marked: Vec<bool>,
    /// The slots marked, each once.
    dirty: Vec<usize>,
    /// Per slot: the deadline the index holds for it.
    armed: Vec<Option<Nanos>>,
    /// Every armed deadline with its slot, earliest first.
    index: BTreeSet<(Nanos, usize)>,
}

impl Socks {
    fn mark(&mut self, i: usize) {
        if let Some(m) = self.marked.get_mut(i) {
            if !*m {
                *m = true;
                self.dirty.push(i);
            }
        }
    }

    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(super) fn get(&self, i: usize) -> Option<&Option<Sock>> {
        self.slots.get(i)
    }

    pub(super) fn get_mut(&mut self, i: usize) -> Option<&mut Option<Sock>> {
        self.mark(i);
        self.slots.get_mut(i)
    }

    pub(super) fn iter(&self) -> std::slice::Iter<'_, Option<Sock>> {
        self.slots.iter()
    }

    /// Every slot, each marked.
    pub(super) fn iter_mut(&mut self) -> std::slice::IterMut<'_, Option<Sock>> {
        for i in 0..self.slots.len() {
            self.mark(i);
        }
        self.slots.iter_mut()
    }

    pub(super) fn push(&mut self, s: Option<Sock>) {
        self.slots.push(s);
        self.marked.push(false);
        self.armed.push(None);
        self.mark(self.slots.len() - 1);
    }

    /// Bring the index up to date with the slots written since.
    fn sync(&mut self) {
        for i in std::mem::take(&mut self.dirty) {
            self.marked[i] = false;
            let now = self.slots[i]
                .as_ref()
                .and_then(|s| s.conn.as_ref())
                .and_then(|c| c.next_deadline());
            let was = std::mem::replace(&mut self.armed[i], now);
            if was != now {
                if let Some(t) = was {
                    self.index.remove(&(t, i));
                }
                if let Some(t) = now {
                    self.index.insert((t, i));
                }
            }
        }
    }

    /// The earliest deadline of any connection.
    pub(super) fn next_deadline(&mut self) -> Option<Nanos> {
        self.sync();
        self.index.first().map(|&(t, _)| t)
    }

    /// The slots whose deadline is `now` or earlier, in slot order.
    pub(super) fn due(&mut self, now: Nanos) -> Vec<usize> {
        self.sync();
        let mut v: Vec<usize> = self
            .index
            .iter()
            .take_while(|&&(t, _)| t <= now)
            .map(|&(_, i)| i)
            .collect();
        v.sort_unstable();
        v
    }
}

impl std::ops::Index<usize> for Socks {
    type Output = Option<Sock>;

    fn index(&self, i: usize) -> &Option<Sock> {
        &self.slots[i]
    }
}

impl std::ops::IndexMut<usize> for Socks {
    fn index_mut(&mut self, i: usize) -> &mut Option<Sock> {
        self.mark(i);
        &mut self.slots[i]
    }
}
