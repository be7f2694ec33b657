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
//! Checking every allowed token must not cost a vocabulary walk per step. Tokens that stay in
//! the current rule leave the stack as it is, so they are judged by where they end: each DFA
//! state caches its local tokens grouped by end state (almost all of them end in one state
//! inside a free string), and one judgement per group covers them all. Only tokens that call
//! or return (the rule's exits, already walked by the mask) are judged one by one. Judging
//! first tries a cheap upper bound, the sum of each stack frame's own fewest tokens (cached
//! per DFA state; tokenizations concatenate, so the sum bounds the whole), and spells the
//! whole completion only when that bound does not fit. Per set of parses the largest bound
//! after any token is cached, so far from the end of the budget a step costs one lookup.
//!
//! Before any of that, a step far from the end is settled without looking at tokens: each
//! DFA state has an upper bound on what any position one token can reach from it needs to
//! finish (`LazyDfa::reach`, built from the grammar's nodes: recursive rules are bounded by
//! how deep one token can nest them, counted strings by what one token can add), and a token
//! leaves the frames below the ones it touches as they are. A step pays for judging only
//! where that bound is unknown (object size and presence rules, intersections too large to
//! build before a step enters them) or does not fit.

mod ends;

pub(crate) use ends::BudgetCache;

use crate::completion::NEVER;
use crate::constraint::{Constraint, Inner};
use crate::dfa::DEAD;
use crate::hash::FxHashMap;
use crate::matcher::{Config, Configs, Stepper, NONE};
use crate::nfa::NO_UPPER;
use crate::trie::FULL;
use crate::{MaskError, Matcher, TokenSet, TokenTrie};
use ends::{Group, LocalEnds};
use std::sync::Arc;

/// A matcher's token budget.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    /// Text tokens allowed from `base` on.
    limit: usize,
    /// The matcher's committed-token count when the budget was set.
    base: usize,
    /// Per set of parses: an upper bound on the tokens needed after any token allowed from
    /// it. Stack nodes of committed parses are never rewritten, so a parse's `(state, stack
    /// node)` names the same stack for the matcher's life.
    widest: FxHashMap<Configs, u32>,
    /// Set once the budget removed a token the constraint itself allowed.
    restricted: bool,
}

/// Judgements of one step: exact token counts by parse signature.
#[derive(Default)]
struct Judge {
    exact: FxHashMap<Box<[u32]>, u32>,
    key: Vec<u32>,
}

impl Judge {
    /// Whether some parse of `configs` finishes in at most `room` tokens, and the smallest
    /// upper bound on the tokens they need.
    fn fits(
        &mut self,
        inner: &mut Inner,
        trie: &TokenTrie,
        arena: &[(u32, u32)],
        configs: &[Config],
        room: u32,
    ) -> Result<(bool, u32), MaskError> {
        let mut upper = NEVER;
        for &c in configs {
            upper = upper.min(inner.upper_tokens(trie, arena, c)?);
        }
        if upper <= room {
            return Ok((true, upper));
        }
        for &c in configs {
            self.key.clear();
            self.key.extend(ends::frames(c, arena));
            let n = match self.exact.get(self.key.as_slice()) {
                Some(&n) => n,
                None => {
                    let n = inner.exact_tokens(trie, arena, c)?;
                    self.exact.insert(self.key.as_slice().into(), n);
                    n
                }
            };
            if n <= room {
                return Ok((true, upper));
            }
        }
        Ok((false, upper))
    }
}

/// What one step's budget check found.
#[derive(Default)]
struct Verdicts {
    /// Per parse: whether each local end state fits.
    ends: Vec<(Arc<LocalEnds>, FxHashMap<u32, bool>)>,
    /// Per token reached through a call or return: whether some such path fits.
    exits: FxHashMap<u32, bool>,
    /// Largest upper bound after any token.
    widest: u32,
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
        let lease = self.lease().clone();
        let constraint = &lease.constraint;
        let mut guard = lease.lock()?;
        let inner: &mut Inner = &mut guard;
        inner.dfa.refuel(constraint.limits.max_work_per_step);
        let mut best = NEVER;
        for &c in &self.configs {
            best = best.min(inner.exact_tokens(&constraint.trie, &self.arena, c)?);
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
        let lease = self.lease().clone();
        let trie = &lease.constraint.trie;
        Ok(Judge::default()
            .fits(inner, trie, &self.arena, next, room)?
            .0)
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
        let lease = self.lease().clone();
        let constraint = &lease.constraint;
        let trie = &constraint.trie;
        if left == 0 {
            let text = mask.count() > trie.eos_ids().iter().filter(|&&e| mask.contains(e)).count();
            keep_only(mask, trie, &[]);
            if let (true, Some(b)) = (text, self.budget.as_mut()) {
                b.restricted = true;
            }
            return Ok(());
        }
        let room = (left - 1).min(NEVER as usize - 1) as u32;
        if let Some(b) = &self.budget {
            if b.widest.get(&self.configs).is_some_and(|&w| w <= room) {
                return Ok(());
            }
        }
        // Far from the end: whatever the token, the parse stays where every position fits.
        if let Some(reach) = self.reach_bound(inner, trie)? {
            if reach <= room {
                if let Some(b) = self.budget.as_mut() {
                    b.widest.insert(self.configs.clone(), reach);
                }
                return Ok(());
            }
        }
        // One parse whose tokens all stay in its rule (inside a string, say): the state's own
        // bound plus the stack's settles it without judging a group.
        if let [(s, p)] = self.configs[..] {
            let ends = inner.local_ends(s, trie, &constraint.limits)?;
            if ends.exits.is_empty() {
                let stack = match p {
                    NONE => 0,
                    p => inner.upper_tokens(trie, &self.arena, self.arena[p as usize])?,
                };
                if ends.widest.saturating_add(stack) <= room {
                    return Ok(());
                }
            }
        }
        let arena_len = self.arena.len();
        let judged = self.judge_step(inner, constraint, mask, room);
        self.arena.truncate(arena_len);
        let v = judged?;
        let removed = self.apply_verdicts(inner, constraint, mask, &v)?;
        if let Some(b) = self.budget.as_mut() {
            b.restricted |= removed;
            b.widest.insert(self.configs.clone(), v.widest);
        }
        Ok(())
    }

    /// An upper bound on the tokens needed after any token, without looking at tokens: per
    /// parse, the most over its stack frames of the frame's reach (bytes any position
    /// reachable from it needs to finish its rule; every byte a token) plus the fewest tokens
    /// of the frames below it, which a token leaves as they are. `None` if unknown.
    fn reach_bound(&self, inner: &mut Inner, trie: &TokenTrie) -> Result<Option<u32>, MaskError> {
        if !trie.bytes_are_tokens() {
            return Ok(None);
        }
        let mut most = 0u32;
        let mut frames: Vec<u32> = Vec::new();
        for &c in &self.configs {
            frames.clear();
            frames.extend(ends::frames(c, &self.arena));
            let mut below = 0u32;
            for (i, &s) in frames.iter().enumerate().rev() {
                let reach = inner.dfa.reach(s);
                if reach >= NO_UPPER {
                    return Ok(None);
                }
                most = most.max(reach.saturating_add(below));
                if i > 0 {
                    match inner.rule_tokens(trie, s)? {
                        NEVER => return Ok(None),
                        n => below = below.saturating_add(n),
                    }
                }
            }
        }
        Ok(Some(most.min(NEVER - 1)))
    }

    /// Judges every local end state and every exit token of the current parses.
    fn judge_step(
        &mut self,
        inner: &mut Inner,
        constraint: &Constraint,
        mask: &TokenSet,
        room: u32,
    ) -> Result<Verdicts, MaskError> {
        let trie = &constraint.trie;
        let mut judge = Judge::default();
        let mut v = Verdicts::default();
        for c in self.configs.clone() {
            let ends = inner.local_ends(c.0, trie, &constraint.limits)?;
            let mut by_end = FxHashMap::default();
            let main = (ends.main != NONE).then_some(ends.main);
            for end in main.into_iter().chain(ends.others.iter().map(|g| g.0)) {
                if by_end.contains_key(&end) {
                    continue;
                }
                let (ok, upper) = judge.fits(inner, trie, &self.arena, &[(end, c.1)], room)?;
                v.widest = v.widest.max(upper);
                by_end.insert(end, ok);
            }
            for &(node, s) in &ends.exits {
                let exit = (ends.trie, node);
                self.judge_exit(
                    inner,
                    constraint,
                    &mut judge,
                    exit,
                    (s, c.1),
                    mask,
                    room,
                    &mut v,
                )?;
            }
            v.ends.push((ends, by_end));
        }
        Ok(v)
    }

    /// Judges every token that continues below `exit` (a trie and its node) through a call
    /// or return, where parse `c` stands after the node's bytes.
    #[allow(clippy::too_many_arguments)]
    fn judge_exit(
        &mut self,
        inner: &mut Inner,
        constraint: &Constraint,
        judge: &mut Judge,
        (trie, node): (usize, u32),
        c: Config,
        mask: &TokenSet,
        room: u32,
        v: &mut Verdicts,
    ) -> Result<(), MaskError> {
        let trie = &constraint.trie.tries[trie];
        let end = trie.nodes[node as usize].subtree_end as usize;
        let mut levels: Vec<(u32, Configs)> = Vec::new();
        let mut next = Configs::new();
        let mut i = node as usize + 1;
        while i < end {
            while levels.last().is_some_and(|(e, _)| *e as usize <= i) {
                levels.pop();
            }
            let n = trie.nodes[i];
            next.clear();
            {
                let mut st = Stepper {
                    dfa: &mut inner.dfa,
                    arena: &mut self.arena,
                    limits: &constraint.limits,
                    // Judging the budget: the plain grammar (the mask is checked already).
                    distinct: None,
                };
                match levels.last() {
                    None => st.step(c, n.byte, &mut next, false, 0)?,
                    Some((_, parents)) => {
                        for p in parents.clone() {
                            st.step(p, n.byte, &mut next, true, 0)?;
                        }
                    }
                }
            }
            if next.is_empty() {
                i = n.subtree_end as usize;
                continue;
            }
            let tokens = trie.node_tokens(i);
            if tokens.iter().any(|&t| mask.contains(t)) {
                let (ok, upper) = judge.fits(inner, &constraint.trie, &self.arena, &next, room)?;
                v.widest = v.widest.max(upper);
                for &t in tokens {
                    *v.exits.entry(t).or_insert(false) |= ok;
                }
            }
            levels.push((n.subtree_end, next.clone()));
            i += 1;
        }
        Ok(())
    }

    /// Removes from `mask` the tokens no parse lets finish in the budget; true if any was
    /// removed.
    fn apply_verdicts(
        &self,
        inner: &mut Inner,
        constraint: &Constraint,
        mask: &mut TokenSet,
        v: &Verdicts,
    ) -> Result<bool, MaskError> {
        let trie = &constraint.trie;
        let main_fits = |(e, by_end): &(Arc<LocalEnds>, FxHashMap<u32, bool>)| {
            e.main == NONE || by_end[&e.main]
        };
        if v.ends.iter().all(main_fits) {
            // Few tokens can fail: those of the other end states and the exit tokens.
            let failing = v.ends.iter().flat_map(|(e, by_end)| {
                e.others
                    .iter()
                    .filter(|g| !by_end[&g.0])
                    .flat_map(|g| g.1.tokens(trie, &trie.tries[e.trie].tokens))
            });
            let exit_failing = v.exits.iter().filter(|e| !e.1).map(|e| *e.0);
            let mut removed = false;
            for t in failing.chain(exit_failing).collect::<Vec<_>>() {
                if mask.contains(t) && !self.keeps(inner, trie, v, t)? {
                    mask.remove(t);
                    removed = true;
                }
            }
            return Ok(removed);
        }
        // Most local tokens fail: list the ones that fit.
        let mut keep: Vec<u32> = v.exits.iter().filter(|e| *e.1).map(|e| *e.0).collect();
        for (c, (e, by_end)) in self.configs.iter().zip(&v.ends) {
            for g in e.others.iter().filter(|g| by_end[&g.0]) {
                keep.extend(g.1.tokens(trie, &trie.tries[e.trie].tokens));
            }
            if e.main != NONE && by_end[&e.main] {
                // Another parse's main group fits: list it (rare: an ambiguous grammar).
                let (groups, _) = inner.walk_ends(c.0, trie, FULL)?;
                let full = &trie.tries[FULL].tokens;
                for (_, ranges) in groups.iter().filter(|g| g.0 == e.main) {
                    keep.extend(Group::Walked(ranges.clone()).tokens(trie, full));
                }
            }
        }
        let before = mask.count();
        keep_only(mask, trie, &keep);
        Ok(mask.count() != before)
    }

    /// True if some parse lets token `t` finish within the budget.
    fn keeps(
        &self,
        inner: &mut Inner,
        trie: &TokenTrie,
        v: &Verdicts,
        t: u32,
    ) -> Result<bool, MaskError> {
        if v.exits.get(&t) == Some(&true) {
            return Ok(true);
        }
        for (c, (_, by_end)) in self.configs.iter().zip(&v.ends) {
            let mut s = c.0;
            for &b in trie.token_bytes(t) {
                s = inner.dfa.next(s, b)?;
                if s == DEAD {
                    break;
                }
            }
            if s != DEAD && by_end.get(&s) == Some(&true) {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// Keeps in `mask` only the tokens of `keep` and the end-of-sequence ids.
fn keep_only(mask: &mut TokenSet, trie: &TokenTrie, keep: &[u32]) {
    let kept: Vec<u32> = keep
        .iter()
        .chain(trie.eos_ids())
        .copied()
        .filter(|&t| mask.contains(t))
        .collect();
    mask.clear();
    for t in kept {
        mask.insert(t);
    }
}
