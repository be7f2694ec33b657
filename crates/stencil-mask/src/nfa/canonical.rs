//! Canonical items: the key under which NFA states that accept the same futures share one
//! DFA state (counted strings keyed by what is left of them, continuations rewritten).

use super::*;

impl Nfa {
    /// The innermost repetition continuation above `k`, if it repeats a JSON string character.
    pub(super) fn char_counter_of(&self, mut k: ContId) -> Option<ContId> {
        loop {
            match self.conts[k as usize] {
                Cont::Done | Cont::Obj { .. } => return None,
                Cont::Seq { then, .. } => k = then,
                Cont::Rep { node, .. } => {
                    let Node::Repeat { body, .. } = self.nodes[node as usize] else {
                        return None;
                    };
                    return (body == self.unit).then_some(k);
                }
            }
        }
    }

    /// `k` with continuation `from` (somewhere above it) replaced by `to`.
    pub(super) fn rewrite_cont(
        &mut self,
        k: ContId,
        from: ContId,
        to: ContId,
    ) -> Result<ContId, MaskError> {
        if k == from {
            return Ok(to);
        }
        match self.conts[k as usize] {
            Cont::Seq { node, kid, then } => {
                let then = self.rewrite_cont(then, from, to)?;
                self.cont(Cont::Seq { node, kid, then })
            }
            _ => Ok(k),
        }
    }

    /// For a state inside a plain JSON string with a length bound (`maxLength` without a
    /// pattern): the same position in a string of unbounded length, and the characters left.
    /// Past `minLength`, the two allow the same tokens except those that write more than the
    /// characters left before closing the string, a count that depends on the token alone
    /// (`TokenTrie::chars_before_quote`). Applies between characters and inside UTF-8
    /// sequences, not inside escapes (whose characters a token's bytes would miscount).
    pub fn string_counter_key(
        &mut self,
        set: &[ItemId],
    ) -> Result<Option<(Vec<ItemId>, u32)>, MaskError> {
        let mut counter: Option<ContId> = None;
        let mut inside: Vec<ItemId> = Vec::new();
        let mut outside: Vec<ItemId> = Vec::new();
        for &id in set {
            match self.item_cont(id).and_then(|k| self.char_counter_of(k)) {
                Some(k) => {
                    if counter.is_some_and(|c| c != k) {
                        return Ok(None);
                    }
                    counter = Some(k);
                    inside.push(id);
                }
                None => outside.push(id),
            }
        }
        let Some(kr) = counter else {
            return Ok(None);
        };
        let Cont::Rep { node, done, then } = self.conts[kr as usize] else {
            return Ok(None);
        };
        let Node::Repeat { min, max, .. } = self.nodes[node as usize] else {
            return Ok(None);
        };
        // `done` counts the character being written; the string may end before it.
        if max == UNBOUNDED || done == 0 || done - 1 < min || done > max {
            return Ok(None);
        }
        let star = self.cont(Cont::Rep {
            node: self.star_unit,
            done: 0,
            then,
        })?;
        let after: Vec<ItemId> = self.closure(then)?.to_vec();
        let far = if !outside.is_empty() {
            // Between characters: exactly a character's start items and the string's end.
            let starts = self.char_starts(kr)?;
            let mut expect: Vec<ItemId> = starts.iter().chain(&after).copied().collect();
            expect.sort_unstable();
            expect.dedup();
            if expect != set {
                return Ok(None);
            }
            self.closure(star)?.to_vec()
        } else {
            // Inside a UTF-8 sequence: continuation bytes only.
            let mut far = Vec::with_capacity(inside.len());
            for &id in &inside {
                match self.items[id as usize] {
                    Item::Byte { lo, hi, cont } if lo >= 0x80 && hi <= 0xBF => {
                        let cont = self.rewrite_cont(cont, kr, star)?;
                        far.push(self.intern_item(Item::Byte { lo, hi, cont })?);
                    }
                    _ => return Ok(None),
                }
            }
            far.sort_unstable();
            far.dedup();
            far
        };
        Ok(Some((far, max - done + 1)))
    }

    /// The items that start one string character and continue at `k` (memoized).
    pub(super) fn char_starts(&mut self, k: ContId) -> Result<Box<[ItemId]>, MaskError> {
        if let Some(s) = self.char_starts.get(&k) {
            return Ok(s.clone());
        }
        let s = self.run(Work::Expand(self.unit, k), None)?;
        self.char_starts.insert(k, s.clone());
        Ok(s)
    }

    /// An item that allows exactly the same tokens as `id`, with every repetition count and
    /// string length that no single token can tell apart replaced by a canonical one (see
    /// [`Nfa::canonical_cont`] and [`Counted::canonical`]): the key under which masks are
    /// shared between the many positions of a long bounded array or string.
    pub fn canonical_item(&mut self, id: ItemId) -> Result<ItemId, MaskError> {
        if let Some(&c) = self.canon_items.get(id as usize) {
            if c != u32::MAX {
                return Ok(c);
            }
        }
        let canon = match self.items[id as usize] {
            Item::Accept => Item::Accept,
            Item::Byte { lo, hi, cont } => Item::Byte {
                lo,
                hi,
                cont: self.canonical_cont(cont)?,
            },
            Item::Call { rule, cont } => Item::Call {
                rule,
                cont: self.canonical_cont(cont)?,
            },
            Item::Machine { m, state, cont } => {
                let state = match &mut self.machines[m as usize] {
                    Some(Built::Counted(c)) => c.canonical(state)?,
                    _ => state,
                };
                Item::Machine {
                    m,
                    state,
                    cont: self.canonical_cont(cont)?,
                }
            }
        };
        let c = self.intern_item(canon)?;
        if self.canon_items.len() <= id as usize {
            self.canon_items.resize(self.items.len(), u32::MAX);
        }
        self.canon_items[id as usize] = c;
        Ok(c)
    }

    /// `k` with the count of every repetition that one token cannot drive to a bound
    /// replaced by the repetition's minimum. A token of `L` bytes completes at most
    /// `L / shortest iteration` iterations, so counts `min <= done` with `done` + that
    /// `< max` are indistinguishable within one token.
    pub(super) fn canonical_cont(&mut self, k: ContId) -> Result<ContId, MaskError> {
        if let Some(&c) = self.canon_conts.get(k as usize) {
            if c != u32::MAX {
                return Ok(c);
            }
        }
        let canon = match self.conts[k as usize] {
            Cont::Done => Cont::Done,
            Cont::Obj {
                node,
                written,
                count,
                first,
                then,
            } => Cont::Obj {
                node,
                written,
                count,
                first,
                then: self.canonical_cont(then)?,
            },
            Cont::Seq { node, kid, then } => Cont::Seq {
                node,
                kid,
                then: self.canonical_cont(then)?,
            },
            Cont::Rep { node, done, then } => {
                let Node::Repeat { body, min, max } = self.nodes[node as usize] else {
                    unreachable!("repeat continuation on a non-repeat")
                };
                let step = self.min_len[body as usize];
                let far = max != UNBOUNDED
                    && step > 0
                    && done >= min
                    && (done as u64) + (self.max_token_len / step) as u64 + 1 < max as u64;
                Cont::Rep {
                    node,
                    done: if far { min } else { done },
                    then: self.canonical_cont(then)?,
                }
            }
        };
        let c = self.cont(canon)?;
        if self.canon_conts.len() <= k as usize {
            self.canon_conts.resize(self.conts.len(), u32::MAX);
        }
        self.canon_conts[k as usize] = c;
        Ok(c)
    }
}
