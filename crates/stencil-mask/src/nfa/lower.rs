//! Lower bounds on the bytes that finish a rule from an NFA item, and a byte to start with.
//!
//! Shortest completions (see `crate::completion`) are searched over the lazy DFA, where an
//! uninformed search builds every state within the answer's distance. These bounds guide it:
//! a continuation's bound is the sum of its remaining parts' shortest lengths (rule calls count
//! zero, a machine not entered yet the fewest bytes its definition shows; inside a machine,
//! its own distance to an accepting state), so it never overestimates and drops by at most one
//! per byte. Where it is exact, as for JSON literals and strings, following a byte whose
//! successor's bound is one less reaches the end of the rule along a shortest completion, one
//! transition per byte.

use super::{Built, Cont, ContId, Item, ItemId, Nfa};
use std::sync::Arc;

/// Unknown (in the memos).
const UNKNOWN: u32 = u32::MAX;

impl Nfa {
    /// A lower bound on the bytes that finish the rule from item `id`, and the first byte of
    /// a completion the bound describes, if known.
    pub fn item_lower(&mut self, id: ItemId) -> (u32, Option<u8>) {
        match self.items[id as usize] {
            Item::Accept => (0, None),
            Item::Byte { lo, cont, .. } => (self.cont_lower(cont).saturating_add(1), Some(lo)),
            Item::Call { cont, .. } => (self.cont_lower(cont), None),
            Item::Machine { m, state, cont } => {
                let (d, b) = self.machine_lower(m, state);
                (d.saturating_add(self.cont_lower(cont)), b)
            }
        }
    }

    /// A lower bound on the bytes that finish the rule once continuation `k` resumes.
    fn cont_lower(&mut self, k: ContId) -> u32 {
        if let Some(&n) = self.lower_conts.get(k as usize).filter(|&&n| n != UNKNOWN) {
            return n;
        }
        let n = match self.conts[k as usize] {
            Cont::Done => 0,
            Cont::Seq { node, kid, then } => {
                let rest = self.seq_rest(node, kid).fold(0u32, |a, i| {
                    a.saturating_add(self.min_len[self.kids[i as usize] as usize])
                });
                rest.saturating_add(self.cont_lower(then))
            }
            Cont::Rep { node, done, then } => {
                let (body, min, _) = self.repeat_of(node);
                let rest = min
                    .saturating_sub(done)
                    .saturating_mul(self.min_len[body as usize]);
                rest.saturating_add(self.cont_lower(then))
            }
            Cont::Obj {
                node,
                written,
                then,
                ..
            } => {
                let obj = &self.objects[self.object_of(node) as usize];
                let mut rest = 0u32;
                for (i, ((_, required), &(alone, with_sep))) in
                    obj.spec.members.iter().zip(&obj.members).enumerate()
                {
                    if *required && written & (1 << i) == 0 {
                        let len = self.min_len[alone as usize].min(self.min_len[with_sep as usize]);
                        rest = rest.saturating_add(len);
                    }
                }
                rest.saturating_add(self.cont_lower(then))
            }
        };
        if self.lower_conts.len() <= k as usize {
            self.lower_conts
                .resize(self.conts.len().max(k as usize + 1), UNKNOWN);
        }
        self.lower_conts[k as usize] = n;
        n
    }

    /// A lower bound on the bytes from `state` of machine `m` to an accepting state (exact
    /// for explicit machines), and a byte one step closer.
    fn machine_lower(&mut self, m: u32, state: u32) -> (u32, Option<u8>) {
        match &mut self.machines[m as usize] {
            Some(Built::Explicit(_)) => {}
            Some(Built::Counted(c)) => return c.lower(state),
            None => return (0, None),
        }
        self.machine_dist_of(m).get(state)
    }

    /// Distances to acceptance of explicit machine `m` (built), computed once per machine.
    pub(super) fn machine_dist_of(&mut self, m: u32) -> Arc<crate::machine::Distances> {
        let Some(Built::Explicit(d)) = &self.machines[m as usize] else {
            unreachable!("distances of a machine that is not explicit")
        };
        d.derived().0.clone()
    }
}
