//! Token budgets: masks that only allow tokens after which the output can still be finished
//! in the tokens left.
//!
//! A parse's completion is the concatenation of the shortest completions (see
//! [`crate::completion`]) of its DFA state and of every return state on its stack; the tokens
//! it needs is the fewest vocabulary tokens that spell that text. The bound is achievable (the
//! matcher allows every tokenization of a valid continuation) and consistent (writing the first
//! token of that tokenization leaves its rest), so a walk that follows a budgeted mask can
//! always finish, and a step never dead-ends.
//!
//! Checking every allowed token is a walk over the vocabulary trie; it is skipped when a
//! cached bound (the longest completion, in bytes, after any token allowed from the same
//! parses) already fits, which is every step except those near the end of the budget, as long
//! as every byte is a token of its own (then `n` bytes never take more than `n` tokens).

use crate::completion::NEVER;
use crate::constraint::{Constraint, Inner};
use crate::hash::FxHashMap;
use crate::matcher::{Config, Configs, Stepper, NONE};
use crate::trie::FULL;
use crate::{MaskError, Matcher, TokenSet};

/// A matcher's token budget.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    /// Text tokens allowed from `base` on.
    limit: usize,
    /// The matcher's committed-token count when the budget was set.
    base: usize,
    /// Per set of parses (DFA states of every stack frame): the longest completion, in bytes,
    /// after any token allowed from it (`u32::MAX`: always walk).
    widest: FxHashMap<Box<[u32]>, u32>,
    /// Set once the budget removed a token the constraint itself allowed.
    restricted: bool,
}

/// Memos of one budget computation, keyed by `(state, stack node)`.
#[derive(Default)]
struct Memo {
    bytes: FxHashMap<Config, u32>,
    tokens: FxHashMap<Config, u32>,
}

/// Completion length in bytes of parse `c` ([`NEVER`] if it cannot finish).
fn parse_bytes(inner: &mut Inner, arena: &[(u32, u32)], c: Config) -> Result<u32, MaskError> {
    let (mut s, mut p) = c;
    let mut total = 0u32;
    loop {
        let n = inner.completions.len(&mut inner.dfa, s)?;
        if n == NEVER {
            return Ok(NEVER);
        }
        total = total.saturating_add(n).min(NEVER - 1);
        if p == NONE {
            return Ok(total);
        }
        (s, p) = arena[p as usize];
    }
}

/// Fewest tokens that finish parse `c` along its shortest completion ([`NEVER`] if none).
fn parse_tokens(
    inner: &mut Inner,
    constraint: &Constraint,
    arena: &[(u32, u32)],
    c: Config,
) -> Result<u32, MaskError> {
    let bytes = parse_bytes(inner, arena, c)?;
    if bytes == 0 || bytes == NEVER {
        return Ok(bytes);
    }
    let mut text = Vec::with_capacity(bytes as usize);
    let (mut s, mut p) = c;
    loop {
        inner.completions.write(s, &mut text, bytes as usize)?;
        if p == NONE {
            break;
        }
        (s, p) = arena[p as usize];
    }
    Ok(constraint.trie.min_tokens(&text).unwrap_or(NEVER))
}

impl Memo {
    fn bytes(
        &mut self,
        inner: &mut Inner,
        arena: &[(u32, u32)],
        c: Config,
    ) -> Result<u32, MaskError> {
        if let Some(&n) = self.bytes.get(&c) {
            return Ok(n);
        }
        let n = parse_bytes(inner, arena, c)?;
        self.bytes.insert(c, n);
        Ok(n)
    }

    fn tokens(
        &mut self,
        inner: &mut Inner,
        constraint: &Constraint,
        arena: &[(u32, u32)],
        c: Config,
    ) -> Result<u32, MaskError> {
        if let Some(&n) = self.tokens.get(&c) {
            return Ok(n);
        }
        let n = parse_tokens(inner, constraint, arena, c)?;
        self.tokens.insert(c, n);
        Ok(n)
    }

    /// True if some parse of `configs` can finish in at most `room` tokens.
    fn fits(
        &mut self,
        inner: &mut Inner,
        constraint: &Constraint,
        arena: &[(u32, u32)],
        configs: &[Config],
        room: u32,
    ) -> Result<bool, MaskError> {
        let every_byte = constraint.trie.every_byte();
        for &c in configs {
            if every_byte && self.bytes(inner, arena, c)? <= room {
                return Ok(true);
            }
        }
        for &c in configs {
            if self.tokens(inner, constraint, arena, c)? <= room {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// The DFA states of every frame of every parse, the key of [`Budget::widest`].
fn signature(configs: &[Config], arena: &[(u32, u32)]) -> Box<[u32]> {
    let mut key = Vec::new();
    for &(mut s, mut p) in configs {
        loop {
            key.push(s);
            if p == NONE {
                break;
            }
            (s, p) = arena[p as usize];
        }
        key.push(u32::MAX);
    }
    key.into()
}

impl Matcher {
    /// Limits the output to `tokens` more text tokens (end-of-sequence not counted), or lifts
    /// the limit (`None`). Under a budget every mask allows only tokens after which the output
    /// can still be completed within the tokens left, so a walk that follows the masks ends
    /// complete; `commit` refuses any other token. Check [`Matcher::min_tokens_to_finish`]
    /// first: a budget smaller than that leaves no token allowed.
    pub fn set_token_budget(&mut self, tokens: Option<usize>) {
        self.budget = tokens.map(|limit| Budget {
            limit,
            base: self.num_tokens(),
            widest: FxHashMap::default(),
            restricted: false,
        });
    }

    /// Text tokens left under the budget (`None` without one).
    pub fn token_budget(&self) -> Option<usize> {
        let b = self.budget.as_ref()?;
        Some(
            b.limit
                .saturating_sub(self.num_tokens().saturating_sub(b.base)),
        )
    }

    /// True once the budget removed from a mask a token that the constraint itself allowed:
    /// the output was steered toward closing early.
    pub fn budget_restricted(&self) -> bool {
        self.budget.as_ref().is_some_and(|b| b.restricted)
    }

    /// Tokens of the shortest completion known from here: the text that finishes the output
    /// with the fewest bytes, spelled with the fewest tokens (0 when the output is already
    /// complete, `None` if it cannot be completed). A budget of at least this many tokens
    /// always lets the output finish.
    pub fn min_tokens_to_finish(&mut self) -> Result<Option<usize>, MaskError> {
        if self.is_finished() {
            return Ok(Some(0));
        }
        let constraint = self.constraint().clone();
        let mut guard = constraint.lock();
        let inner: &mut Inner = &mut guard;
        inner.dfa.refuel(constraint.limits.max_work_per_step);
        let mut best = NEVER;
        for &c in &self.configs {
            best = best.min(parse_tokens(inner, &constraint, &self.arena, c)?);
        }
        Ok((best != NEVER).then_some(best as usize))
    }

    /// True if, after committing a token that leads to `next`, the output can still finish
    /// within the budget (always true without one).
    pub(crate) fn budget_allows(
        &mut self,
        inner: &mut Inner,
        next: &[Config],
    ) -> Result<bool, MaskError> {
        let Some(left) = self.token_budget() else {
            return Ok(true);
        };
        if left == 0 {
            return Ok(false);
        }
        let room = (left - 1).min(NEVER as usize - 1) as u32;
        let constraint = self.constraint().clone();
        Memo::default().fits(inner, &constraint, &self.arena, next, room)
    }

    /// Removes from `mask` (the constraint's mask for this step) every text token after which
    /// the output could not finish within the budget.
    pub(crate) fn apply_budget(
        &mut self,
        inner: &mut Inner,
        mask: &mut TokenSet,
    ) -> Result<(), MaskError> {
        let Some(left) = self.token_budget() else {
            return Ok(());
        };
        let constraint = self.constraint().clone();
        let trie = &constraint.trie;
        if left == 0 {
            let eos: Vec<u32> = trie
                .eos_ids()
                .iter()
                .copied()
                .filter(|&e| mask.contains(e))
                .collect();
            let text = mask.count() > eos.len();
            mask.clear();
            for e in eos {
                mask.insert(e);
            }
            if let (true, Some(b)) = (text, self.budget.as_mut()) {
                b.restricted = true;
            }
            return Ok(());
        }
        let room = (left - 1).min(NEVER as usize - 1) as u32;
        let key = signature(&self.configs, &self.arena);
        if let Some(b) = &self.budget {
            if b.widest.get(&key).is_some_and(|&w| w <= room) {
                return Ok(());
            }
        }
        let arena_len = self.arena.len();
        let walked = self.budget_walk(inner, &constraint, mask, room);
        self.arena.truncate(arena_len);
        let (widest, removed) = walked?;
        if let Some(b) = self.budget.as_mut() {
            b.restricted |= removed;
            b.widest.insert(key, widest);
        }
        Ok(())
    }

    /// Walks every token allowed from the current parses; removes those that leave more than
    /// `room` tokens to finish. Returns the longest completion in bytes after any allowed
    /// token (`u32::MAX` when bytes do not bound tokens) and whether a token was removed.
    fn budget_walk(
        &mut self,
        inner: &mut Inner,
        constraint: &Constraint,
        mask: &mut TokenSet,
        room: u32,
    ) -> Result<(u32, bool), MaskError> {
        let trie = &constraint.trie.tries[FULL];
        let every_byte = constraint.trie.every_byte();
        let mut memo = Memo::default();
        let mut widest = 0u32;
        let mut removed = false;
        let mut levels: Vec<(u32, Configs)> = Vec::new();
        let mut next = Configs::new();
        let mut i = 1usize;
        while i < trie.nodes.len() {
            while levels.last().is_some_and(|(e, _)| *e as usize <= i) {
                levels.pop();
            }
            let node = trie.nodes[i];
            let parents = match levels.last() {
                Some((_, p)) => p.clone(),
                None => self.configs.clone(),
            };
            {
                let mut st = Stepper {
                    dfa: &mut inner.dfa,
                    arena: &mut self.arena,
                    limits: &constraint.limits,
                };
                st.step_all(&parents, node.byte, &mut next)?;
            }
            if next.is_empty() {
                i = node.subtree_end as usize;
                continue;
            }
            let tokens = trie.node_tokens(i);
            if !tokens.is_empty() {
                let mut bytes = NEVER;
                for &c in &next {
                    bytes = bytes.min(memo.bytes(inner, &self.arena, c)?);
                }
                widest = widest.max(if every_byte { bytes } else { u32::MAX });
                let fits = (every_byte && bytes <= room)
                    || memo.fits(inner, constraint, &self.arena, &next, room)?;
                if !fits {
                    for &t in tokens {
                        if mask.contains(t) {
                            mask.remove(t);
                            removed = true;
                        }
                    }
                }
            }
            levels.push((node.subtree_end, next.clone()));
            i += 1;
        }
        Ok((widest, removed))
    }
}
