//! [`Matcher`]: the per-request parse state and the mask computation.

use crate::budget::Budget;
use crate::constraint::{Constraint, Inner, Lease, Limits};
use crate::dfa::{LazyDfa, DEAD};
use crate::distinct::{repeated_items, Distinct, FrameInfo};
use crate::nfa::RuleRole;
use crate::trie::Trie;
use crate::{MaskError, TokenSet};
use smallvec::SmallVec;
use std::sync::Arc;

pub(crate) const NONE: u32 = u32::MAX;

/// One live parse: the current DFA state and the stack of return states below it (an index
/// into the matcher's stack arena, `NONE` at top level).
pub(crate) type Config = (u32, u32);
pub(crate) type Configs = SmallVec<[Config; 2]>;

/// Per-request matcher: where the output is in the grammar, and which tokens may come next.
///
/// Cheap to clone (the compiled [`Constraint`] is shared). Every method that can fail returns a
/// [`MaskError`]; a refused token leaves the matcher unchanged.
#[derive(Clone)]
pub struct Matcher {
    /// The constraint, and the cache of it this matcher (and its clones) steps in.
    lease: Arc<Lease>,
    pub(crate) configs: Configs,
    /// Stack nodes: (state to resume in, parent node).
    pub(crate) arena: Vec<(u32, u32)>,
    history: Vec<Configs>,
    /// Set once an end-of-sequence token was committed.
    finished: bool,
    /// Scratch mask for parses whose tokens are filtered (see `LazyDfa::mask_key`).
    scratch: Option<TokenSet>,
    /// The token budget, if one was set (see [`Matcher::set_token_budget`]).
    pub(crate) budget: Option<Budget>,
    /// The text and per-frame records that keep array items distinct, when the grammar has
    /// such arrays (see [`crate::distinct`]).
    pub(crate) distinct: Option<Box<Distinct>>,
}

impl std::fmt::Debug for Matcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Matcher")
            .field("parses", &self.configs.len())
            .field("tokens", &self.history.len())
            .field("finished", &self.finished)
            .finish()
    }
}

/// Stepping context: the automaton, the stack arena and the limits, and where the grammar
/// has distinct items, their state (whose `text` holds the bytes before the one stepped).
pub(crate) struct Stepper<'a> {
    pub dfa: &'a mut LazyDfa,
    pub arena: &'a mut Vec<(u32, u32)>,
    pub limits: &'a Limits,
    pub distinct: Option<&'a mut Distinct>,
}

impl Stepper<'_> {
    fn same_stack(&self, mut a: u32, mut b: u32) -> bool {
        loop {
            if a == b {
                return true;
            }
            if a == NONE || b == NONE {
                return false;
            }
            let (x, y) = (self.arena[a as usize], self.arena[b as usize]);
            if x.0 != y.0 {
                return false;
            }
            if let Some(d) = self.distinct.as_deref() {
                if d.info(a) != d.info(b) {
                    return false;
                }
            }
            a = x.1;
            b = y.1;
        }
    }

    fn push_unique(&self, out: &mut Configs, c: Config) -> Result<(), MaskError> {
        if out.iter().any(|&o| o.0 == c.0 && self.same_stack(o.1, c.1)) {
            return Ok(());
        }
        if out.len() >= self.limits.max_parses {
            return Err(MaskError::TooAmbiguous {
                given: out.len() + 1,
                limit: self.limits.max_parses,
            });
        }
        out.push(c);
        Ok(())
    }

    /// All configurations after byte `b` from `c`; `direct` allows the plain byte move (the
    /// local walk has already covered it when false).
    pub fn step(
        &mut self,
        c: Config,
        b: u8,
        out: &mut Configs,
        direct: bool,
        depth: usize,
    ) -> Result<(), MaskError> {
        if depth > self.limits.max_call_depth {
            return Err(MaskError::TooDeep {
                limit: self.limits.max_call_depth,
            });
        }
        let (s, parent) = c;
        if direct {
            let t = self.dfa.next(s, b)?;
            if t != DEAD && self.completes_distinct(parent, t, b)? {
                self.push_unique(out, (t, parent))?;
            }
        }
        if self.dfa.has_calls(s) {
            let calls: SmallVec<[(u32, u32, u32); 4]> =
                self.dfa.calls(s)?.iter().copied().collect();
            for (start, ret, rule) in calls {
                let role = self.dfa.role(rule);
                // A tail call (`ws ::= ([ ] ws)?`) returns straight to the caller's caller:
                // no frame, so right recursion does not deepen the stack. Distinct arrays and
                // their items always get a frame.
                let node = if role == RuleRole::Plain && self.dfa.only_ends(ret) {
                    parent
                } else {
                    let item_start = match role {
                        RuleRole::Item => self.pos(),
                        _ => crate::distinct::NONE,
                    };
                    let info = FrameInfo {
                        item_start,
                        ..FrameInfo::PLAIN
                    };
                    self.push_frame((ret, parent), info)
                };
                self.step((start, node), b, out, true, depth + 1)?;
            }
        }
        if self.dfa.accepting(s) && parent != NONE {
            let up = self.arena[parent as usize];
            if let Some(up) = self.end_item(parent, up) {
                self.step(up, b, out, true, depth + 1)?;
            }
        }
        Ok(())
    }

    pub fn step_all(&mut self, from: &Configs, b: u8, out: &mut Configs) -> Result<(), MaskError> {
        out.clear();
        for &c in from {
            self.step(c, b, out, true, 0)?;
        }
        Ok(())
    }

    /// True if `c` may end here: every open rule can reach its end without another byte.
    fn can_finish(&mut self, c: Config) -> bool {
        let (mut s, mut p) = c;
        loop {
            if !self.ends_empty(s, 0) {
                return false;
            }
            if p == NONE {
                return true;
            }
            (s, p) = self.arena[p as usize];
        }
    }

    /// True if the rule in state `s` can end without another byte: `s` accepts, or it calls a
    /// rule that can end at once and returns to a state that can (`ws ::= ([ ] ws)?`).
    fn ends_empty(&mut self, s: u32, depth: usize) -> bool {
        if self.dfa.accepting(s) {
            return true;
        }
        if depth > self.limits.max_call_depth || !self.dfa.has_calls(s) {
            return false;
        }
        let Ok(calls) = self.dfa.calls(s) else {
            return false;
        };
        let calls: SmallVec<[(u32, u32, u32); 4]> = calls.iter().copied().collect();
        calls.into_iter().any(|(start, ret, _)| {
            self.ends_empty(start, depth + 1) && self.ends_empty(ret, depth + 1)
        })
    }

    /// Walks the subtree below trie node `at`, where `c` stands after the node's bytes
    /// (`path`), taking only rule calls and returns for the first byte.
    fn context_walk(
        &mut self,
        trie: &Trie,
        at: u32,
        path: &[u8],
        c: Config,
        out: &mut TokenSet,
    ) -> Result<(), MaskError> {
        let nodes = &trie.nodes;
        let base = match self.distinct.as_deref_mut() {
            Some(d) => {
                // The local walk reached `c` by bytes alone: a distinct item it completed
                // there was not checked.
                let base = d.text.len();
                d.text.extend_from_slice(path);
                let (pos, array) = (self.pos(), self.arena.get(c.1 as usize).map(|f| f.1));
                if let (Some(start), Some(array)) = (self.item_start(c.1), array) {
                    let rest = self.dfa.forced_end(c.0);
                    let d = self.distinct.as_deref_mut().expect("checked above");
                    let repeat = match &rest {
                        Ok(Some(rest)) => !d.differs(array, start, pos, &[rest]),
                        _ => false,
                    };
                    if repeat || rest.is_err() {
                        d.text.truncate(base);
                        return rest.map(|_| ());
                    }
                }
                base
            }
            None => 0,
        };
        let at_depth = nodes[at as usize].depth as usize;
        let end = nodes[at as usize].subtree_end as usize;
        let mut levels: Vec<(u32, Configs)> = Vec::new();
        let mut i = at as usize + 1;
        let mut next = Configs::new();
        let result = (|| {
            while i < end {
                while let Some((e, _)) = levels.last() {
                    if *e as usize <= i {
                        levels.pop();
                    } else {
                        break;
                    }
                }
                let node = nodes[i];
                if let Some(d) = self.distinct.as_deref_mut() {
                    // The text before this node's byte: the path down to its parent.
                    d.text
                        .truncate(base + path.len() + (node.depth as usize - at_depth - 1));
                }
                next.clear();
                match levels.last() {
                    None => self.step(c, node.byte, &mut next, false, 0)?,
                    Some((_, parents)) => {
                        let parents = parents.clone();
                        for &p in &parents {
                            self.step(p, node.byte, &mut next, true, 0)?;
                        }
                    }
                }
                if next.is_empty() {
                    i = node.subtree_end as usize;
                    continue;
                }
                for &tok in trie.node_tokens(i) {
                    out.insert(tok);
                }
                if let Some(d) = self.distinct.as_deref_mut() {
                    d.text.push(node.byte);
                }
                levels.push((node.subtree_end, next.clone()));
                i += 1;
            }
            Ok(())
        })();
        if let Some(d) = self.distinct.as_deref_mut() {
            d.text.truncate(base);
        }
        result
    }
}

impl Matcher {
    pub(crate) fn new(constraint: Arc<Constraint>) -> Result<Self, MaskError> {
        let lease = constraint.lease();
        let (start, distinct) = {
            let mut inner = lease.lock()?;
            inner.dfa.refuel(lease.constraint.limits.max_work_per_step);
            let r = inner.dfa.start_rule();
            (inner.dfa.rule_start(r)?, inner.dfa.has_distinct())
        };
        let mut configs = Configs::new();
        configs.push((start, NONE));
        Ok(Self {
            lease,
            configs,
            arena: Vec::new(),
            history: Vec::new(),
            finished: false,
            scratch: None,
            budget: None,
            distinct: distinct.then(Box::default),
        })
    }

    pub fn constraint(&self) -> &Arc<Constraint> {
        &self.lease.constraint
    }

    pub(crate) fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// Number of tokens committed.
    pub fn num_tokens(&self) -> usize {
        self.history.len()
    }

    /// True once an end-of-sequence token has been committed.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Fills `mask` with the tokens allowed next (end-of-sequence ids iff the output is
    /// complete). `mask` must have the vocabulary's size.
    pub fn compute_mask(&mut self, mask: &mut TokenSet) -> Result<(), MaskError> {
        let lease = self.lease.clone();
        let constraint = &lease.constraint;
        let trie = &constraint.trie;
        let mut guard = lease.lock()?;
        let inner: &mut Inner = &mut guard;
        inner.dfa.refuel(constraint.limits.max_work_per_step);
        if self.finished {
            mask.clear();
            return Ok(());
        }
        let arena_len = self.arena.len();
        let trace = tracing::enabled!(tracing::Level::TRACE);
        let t_start = trace.then(std::time::Instant::now);
        let mut t_local = std::time::Duration::ZERO;
        let mut n_exits = 0usize;
        let mut fresh = 0usize;
        let scratch = &mut self.scratch;
        let result = (|| {
            let mut accept = false;
            let mut first = true;
            for &c in &self.configs {
                let t0 = trace.then(std::time::Instant::now);
                let before = inner.cached;
                let (mut key, chars) = inner.dfa.mask_key(c.0)?;
                let filter = match trie.quote_chars(chars) {
                    Ok(f) => f,
                    Err(()) => {
                        key = c.0;
                        None
                    }
                };
                let local = inner.local(key, trie, &constraint.limits)?;
                fresh += (inner.cached != before) as usize;
                t_local += t0.map(|t| t.elapsed()).unwrap_or_default();
                n_exits += local.exits.len();
                let repeats = match self.distinct.as_deref_mut() {
                    Some(d) => repeated_items(d, &self.arena, c, &local, trie),
                    None => Vec::new(),
                };
                // With a filter (or repeated items to remove), this parse's tokens are
                // gathered apart, then filtered.
                let apart = filter.is_some() || !repeats.is_empty();
                let out: &mut TokenSet = match apart {
                    true => {
                        let s = scratch.get_or_insert_with(|| TokenSet::new(mask.len()));
                        s.copy_from(&local.tokens);
                        for &t in &repeats {
                            s.remove(t);
                        }
                        s
                    }
                    false => {
                        if first {
                            mask.copy_from(&local.tokens);
                        } else {
                            mask.union_with(&local.tokens);
                        }
                        mask
                    }
                };
                let mut st = Stepper {
                    dfa: &mut inner.dfa,
                    arena: &mut self.arena,
                    limits: &constraint.limits,
                    distinct: self.distinct.as_deref_mut(),
                };
                let exits_trie = &trie.tries[local.trie];
                let with_path = st.distinct.is_some();
                for &(node, s) in &local.exits {
                    let path = match with_path {
                        true => exits_trie.path(node as usize, |t| trie.token_bytes(t)),
                        false => &[],
                    };
                    st.context_walk(exits_trie, node, path, (s, c.1), out)?;
                }
                if apart {
                    if let Some(f) = filter {
                        out.intersect_with(f);
                    }
                    let part = std::mem::replace(out, TokenSet::new(0));
                    if first {
                        mask.copy_from(&part);
                    } else {
                        mask.union_with(&part);
                    }
                    *scratch = Some(part);
                }
                first = false;
                accept |= st.can_finish(c);
            }
            if first {
                mask.clear();
            }
            if accept {
                for &e in trie.eos_ids() {
                    mask.insert(e);
                }
            }
            Ok(())
        })();
        self.arena.truncate(arena_len);
        let result = result.and_then(|()| self.apply_budget(inner, mask));
        if let Some(t_start) = t_start {
            let total = t_start.elapsed();
            if total.as_micros() > 250 {
                tracing::trace!(
                    "slow mask: total {:?} local {:?} fresh {} configs {} exits {} exit-walks {:?}",
                    total,
                    t_local,
                    fresh,
                    self.configs.len(),
                    n_exits,
                    total - t_local
                );
            }
        }
        result
    }

    /// True if the output so far is a complete match (end-of-sequence allowed).
    pub fn is_accepting(&self) -> bool {
        if self.finished {
            return true;
        }
        let Ok(mut guard) = self.lease.lock() else {
            return false;
        };
        let inner: &mut Inner = &mut guard;
        let mut arena = self.arena.clone();
        let mut st = Stepper {
            dfa: &mut inner.dfa,
            arena: &mut arena,
            limits: &self.lease.constraint.limits,
            distinct: None,
        };
        self.configs.iter().any(|&c| st.can_finish(c))
    }

    /// Advances over `token`. A token the constraint forbids is an error and changes nothing.
    pub fn commit(&mut self, token: u32) -> Result<(), MaskError> {
        let lease = self.lease.clone();
        let trie = &lease.constraint.trie;
        if token as usize >= trie.vocab_size() {
            return Err(MaskError::UnknownToken {
                token,
                vocab: trie.vocab_size(),
            });
        }
        if self.finished {
            return Err(MaskError::TokenNotAllowed { token });
        }
        if trie.eos_ids().contains(&token) {
            if !self.is_accepting() {
                return Err(MaskError::TokenNotAllowed { token });
            }
            self.note_committed();
            self.history.push(self.configs.clone());
            self.finished = true;
            return Ok(());
        }
        let bytes = trie.token_bytes(token);
        if bytes.is_empty() {
            return Err(MaskError::TokenNotAllowed { token });
        }
        let next = self.advance(bytes);
        let next = match next {
            Ok(next) if !next.is_empty() => next,
            other => {
                self.forget_uncommitted();
                other?;
                return Err(MaskError::TokenNotAllowed { token });
            }
        };
        if self.budget.is_some() {
            let lease = self.lease.clone();
            let mut guard = lease.lock()?;
            let allowed = self.budget_allows(&mut guard, &next);
            if !allowed.as_ref().is_ok_and(|&a| a) {
                self.forget_uncommitted();
                allowed?;
                return Err(MaskError::OverBudget {
                    token,
                    left: self.token_budget().unwrap_or(0),
                });
            }
        }
        self.note_committed();
        self.history
            .push(std::mem::replace(&mut self.configs, next));
        Ok(())
    }

    /// The configurations after `bytes` (empty if the bytes are not allowed). Stack nodes
    /// created on the way stay in the arena (a refused token leaves harmless garbage).
    fn advance(&mut self, bytes: &[u8]) -> Result<Configs, MaskError> {
        let lease = self.lease.clone();
        let constraint = &lease.constraint;
        let mut guard = lease.lock()?;
        let inner: &mut Inner = &mut guard;
        inner.dfa.refuel(constraint.limits.max_work_per_step);
        let mut st = Stepper {
            dfa: &mut inner.dfa,
            arena: &mut self.arena,
            limits: &constraint.limits,
            distinct: self.distinct.as_deref_mut(),
        };
        let mut cur = self.configs.clone();
        let mut next = Configs::new();
        for &b in bytes {
            st.step_all(&cur, b, &mut next)?;
            if next.is_empty() {
                return Ok(next);
            }
            if let Some(d) = st.distinct.as_deref_mut() {
                d.text.push(b);
            }
            std::mem::swap(&mut cur, &mut next);
        }
        Ok(cur)
    }

    /// Marks the text `advance` appended as committed (one more token).
    fn note_committed(&mut self) {
        if let Some(d) = self.distinct.as_deref_mut() {
            d.committed = d.text.len();
            d.lengths.push(d.committed);
        }
    }

    /// Drops text that `advance` appended but was not committed.
    fn forget_uncommitted(&mut self) {
        if let Some(d) = self.distinct.as_deref_mut() {
            d.text.truncate(d.committed);
        }
    }

    /// True if the bytes can be appended (without committing them).
    pub fn allows_bytes(&mut self, bytes: &[u8]) -> Result<bool, MaskError> {
        let len = self.arena.len();
        let r = self.advance(bytes).map(|c| !c.is_empty());
        self.arena.truncate(len);
        self.forget_uncommitted();
        r
    }

    /// True if the output would be complete after appending `bytes` (nothing is committed).
    /// Used to decide whether a stop string may end a constrained output at a given point.
    pub fn accepts_after(&mut self, bytes: &[u8]) -> Result<bool, MaskError> {
        if self.finished {
            return Ok(bytes.is_empty());
        }
        let len = self.arena.len();
        let result = self.advance(bytes).and_then(|next| {
            let lease = self.lease.clone();
            let constraint = &lease.constraint;
            let mut guard = lease.lock()?;
            let inner: &mut Inner = &mut guard;
            let mut st = Stepper {
                dfa: &mut inner.dfa,
                arena: &mut self.arena,
                limits: &constraint.limits,
                distinct: None,
            };
            Ok(next.iter().any(|&c| st.can_finish(c)))
        });
        self.arena.truncate(len);
        self.forget_uncommitted();
        result
    }

    /// Undoes the last `n` committed tokens (for speculative decoding).
    pub fn rollback(&mut self, n: usize) -> Result<(), MaskError> {
        if n > self.history.len() {
            return Err(MaskError::RollbackTooFar {
                requested: n,
                available: self.history.len(),
            });
        }
        for _ in 0..n {
            if let Some(c) = self.history.pop() {
                self.configs = c;
            }
        }
        if let Some(d) = self.distinct.as_deref_mut() {
            d.lengths.truncate(self.history.len());
            let len = d.lengths.last().copied().unwrap_or(0);
            d.truncate(len);
        }
        if n > 0 {
            self.finished = false;
        }
        Ok(())
    }

    /// Fast-forward: the tokens the constraint forces next, committed. `tokenize` is the
    /// model's own tokenizer (text -> ids, no special tokens added), so the forced text
    /// (`", "unit": "` after a fixed property) becomes the tokens the model would see for it
    /// rather than one sampled token per step. The last token is held back (it might merge
    /// with what is sampled after it), the run stops at the first token the matcher does not
    /// take, and at most `max` tokens are committed. A forced run that ends inside a UTF-8
    /// character is cut before that character.
    pub fn forced_tokens<E: From<MaskError>>(
        &mut self,
        max: usize,
        tokenize: impl FnOnce(&str) -> Result<Vec<u32>, E>,
    ) -> Result<Vec<u32>, E> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let bytes = self.forced_bytes()?;
        let valid = match std::str::from_utf8(&bytes) {
            Ok(t) => t,
            Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default(),
        };
        if valid.is_empty() {
            return Ok(Vec::new());
        }
        let mut ids = tokenize(valid)?;
        ids.pop();
        let mut out = Vec::new();
        for id in ids.into_iter().take(max) {
            if self.commit(id).is_err() {
                break;
            }
            out.push(id);
        }
        Ok(out)
    }

    /// The bytes that must come next whatever is sampled: the longest run where exactly one
    /// byte is allowed and the output cannot end. Nothing is committed.
    pub fn forced_bytes(&mut self) -> Result<Vec<u8>, MaskError> {
        let lease = self.lease.clone();
        let constraint = &lease.constraint;
        let mut guard = lease.lock()?;
        let inner: &mut Inner = &mut guard;
        inner.dfa.refuel(constraint.limits.max_work_per_step);
        let arena_len = self.arena.len();
        let mut st = Stepper {
            dfa: &mut inner.dfa,
            arena: &mut self.arena,
            limits: &constraint.limits,
            distinct: self.distinct.as_deref_mut(),
        };
        let mut out = Vec::new();
        let mut cur = self.configs.clone();
        let mut next = Configs::new();
        let result = (|| {
            while out.len() < 4096 && !self.finished {
                if cur.iter().any(|&c| st.can_finish(c)) {
                    break;
                }
                let mut only: Option<(u8, Configs)> = None;
                let mut count = 0;
                for b in 0..=255u8 {
                    st.step_all(&cur, b, &mut next)?;
                    if !next.is_empty() {
                        count += 1;
                        if count > 1 {
                            break;
                        }
                        only = Some((b, next.clone()));
                    }
                }
                match (count, only) {
                    (1, Some((b, c))) => {
                        out.push(b);
                        if let Some(d) = st.distinct.as_deref_mut() {
                            d.text.push(b);
                        }
                        cur = c;
                    }
                    _ => break,
                }
            }
            Ok(())
        })();
        self.arena.truncate(arena_len);
        self.forget_uncommitted();
        result.map(|_| out)
    }
}
