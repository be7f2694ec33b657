//! [`Constraint`]: a grammar compiled against one vocabulary, shared by all its matchers.

use crate::budget::BudgetCache;
use crate::completion::Completions;
use crate::dfa::{LazyDfa, DEAD};
use crate::nfa::Nfa;
use crate::trie::{Trie, FULL, MAX_EXACT_DEPTH, PLAIN_LEVELS};
use crate::{BuildError, MaskError, Matcher, TokenSet, TokenTrie};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::ThreadId;
use stencil_grammar::Grammar;

/// Limits that turn pathological constraints into errors instead of hangs or OOMs; apart
/// from the language (which [`stencil_grammar::Options`] states).
#[derive(Debug, Clone)]
pub struct Limits {
    /// NFA states (grows with schema size and bounded repetitions). Default 4,000,000.
    pub max_nfa_states: usize,
    /// DFA states built lazily over the constraint's life (each costs 1 KiB). Default 500,000.
    pub max_dfa_states: usize,
    /// States of an eagerly built intersection/complement (`not`, `oneOf`, bounds with
    /// `multipleOf`, patterns with lengths). Default 50,000.
    pub max_intersection_states: usize,
    /// Parses alive at once (grammar ambiguity). Default 64.
    pub max_parses: usize,
    /// Rule calls nested within one byte step. Default 128.
    pub max_call_depth: usize,
    /// Per-state masks kept in the cache (each is vocab/8 bytes). Default 4,096.
    pub max_cached_masks: usize,
    /// Automaton work (NFA states visited while building new transitions) allowed for one
    /// mask or one commit: the guarantee that no step hangs. Default 200,000,000.
    pub max_work_per_step: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_nfa_states: 4_000_000,
            max_dfa_states: 500_000,
            max_intersection_states: 50_000,
            max_parses: 64,
            max_call_depth: 128,
            max_cached_masks: 4096,
            max_work_per_step: 200_000_000,
        }
    }
}

/// Tokens allowed from a DFA state without leaving its rule, and the trie nodes where a rule
/// call or return may continue the walk.
pub(crate) struct LocalMask {
    pub tokens: TokenSet,
    /// `(trie node, DFA state after the node's bytes)` where the state can call or return.
    pub exits: Vec<(u32, u32)>,
    /// Trie nodes whose tokens end in a state that can only end its rule but for the forced
    /// bytes given (where a distinct item is complete: see `crate::distinct`); only for
    /// grammars with distinct items.
    pub ends: Vec<(u32, Box<[u8]>)>,
    /// The trie walked (an index into `TokenTrie::tries`): the exits are its nodes.
    pub trie: usize,
}

/// One cache: the automaton built lazily from the compiled one, and its per-state masks.
pub(crate) struct Inner {
    pub dfa: LazyDfa,
    /// Shortest completions of DFA states (for token budgets).
    pub completions: Completions,
    /// Per-state data of token budgets.
    pub budget: BudgetCache,
    /// Plain-text depth per DFA state (see `plain_depth`).
    pub depth: Vec<u32>,
    /// States whose depth is exact: past it, every plain character dies.
    pub exact: Vec<bool>,
    /// States from which no control byte is allowed within the plain depth (inside a JSON
    /// string): tokens that reach a control byte by then die without a walk.
    pub ctl_dead: Vec<bool>,
    /// Plain-character successors per DFA state (see `plain_moves`).
    pub moves: Vec<Option<Option<Box<[u32]>>>>,
    pub local: Vec<Option<Arc<LocalMask>>>,
    pub cached: usize,
}

/// A grammar compiled for one vocabulary. Build once per (constraint, tokenizer) and share
/// behind an `Arc`; [`Constraint::matcher`] gives a cheap per-request [`Matcher`].
///
/// The compiled object is immutable; what grows while masks are computed (the lazily built
/// automaton and its per-state masks) lives in caches, the way regex-automata pairs a lazy DFA
/// with caller-owned caches. A matcher leases one cache from the constraint's pool for its whole
/// life (its states are numbered in that cache) and gives it back, warm, when it and its clones
/// are dropped; a new cache starts from a copy of the compiled automaton. So matchers of one
/// constraint on different threads never wait for each other, and the masks of many sequences
/// are computed in parallel.
pub struct Constraint {
    pub(crate) trie: Arc<TokenTrie>,
    pub(crate) limits: Limits,
    /// The automaton as compiled, before any step: each new cache starts from a copy.
    template: Nfa,
    /// Caches no matcher holds, ready for the next one, with the thread that last used each
    /// (a thread gets its own back when it can: that one is warm in its core's caches).
    idle: Mutex<Vec<(ThreadId, Box<Inner>)>>,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Constraint {
    pub fn new(
        grammar: &Grammar,
        trie: Arc<TokenTrie>,
        limits: Limits,
    ) -> Result<Arc<Self>, BuildError> {
        let resolved = grammar.resolve_token_names(|name| trie.spell_named_token(name))?;
        let grammar = resolved.as_ref().unwrap_or(grammar);
        let nfa = Nfa::build(
            grammar,
            limits.max_nfa_states,
            limits.max_intersection_states,
        )?;
        tracing::debug!(
            "grammar: {} rules, {} arena nodes",
            grammar.rules.len(),
            nfa.num_nodes()
        );
        Ok(Arc::new(Self {
            trie,
            limits,
            template: nfa,
            idle: Mutex::new(Vec::new()),
        }))
    }

    /// A matcher at the start of the output.
    pub fn matcher(self: &Arc<Self>) -> Result<Matcher, MaskError> {
        Matcher::new(self.clone())
    }

    /// A matcher at the start of the output whose output must end within `max_tokens` text
    /// tokens ([`Matcher::set_token_budget`]), or [`MaskError::BudgetTooSmall`] when even the
    /// shortest output needs more: the one check before generating under a budget.
    pub fn matcher_with_budget(self: &Arc<Self>, max_tokens: usize) -> Result<Matcher, MaskError> {
        let mut m = self.matcher()?;
        match m.min_tokens_to_finish()? {
            Some(n) if n <= max_tokens => {
                m.set_token_budget(Some(max_tokens));
                Ok(m)
            }
            needed => Err(MaskError::BudgetTooSmall { needed, max_tokens }),
        }
    }

    pub fn trie(&self) -> &Arc<TokenTrie> {
        &self.trie
    }

    /// DFA states built so far by the most explored cache (a measure of how much of the
    /// automaton was explored); caches held by matchers are not counted.
    pub fn dfa_states(&self) -> usize {
        self.lock_idle()
            .iter()
            .map(|(_, c)| c.dfa.num_states())
            .max()
            .unwrap_or(0)
    }

    fn lock_idle(&self) -> MutexGuard<'_, Vec<(ThreadId, Box<Inner>)>> {
        // Only whole caches are pushed and popped under this lock: it cannot be left half
        // updated, so a poisoned lock is safe to use.
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn new_cache(&self) -> Box<Inner> {
        let mut dfa = LazyDfa::new(self.template.clone(), self.limits.max_dfa_states);
        dfa.set_token_shape(self.trie.max_token_len(), self.trie.most_per_token());
        Box::new(Inner {
            dfa,
            completions: Completions::default(),
            budget: BudgetCache::default(),
            depth: Vec::new(),
            exact: Vec::new(),
            ctl_dead: Vec::new(),
            moves: Vec::new(),
            local: Vec::new(),
            cached: 0,
        })
    }

    /// Takes an idle cache (or a new one) for a matcher.
    pub(crate) fn lease(self: &Arc<Self>) -> Arc<Lease> {
        let me = std::thread::current().id();
        let cache = {
            let mut idle = self.lock_idle();
            let mine = idle.iter().rposition(|(t, _)| *t == me);
            match mine {
                Some(i) => Some(idle.swap_remove(i).1),
                None => idle.pop().map(|(_, c)| c),
            }
        };
        let cache = cache.unwrap_or_else(|| self.new_cache());
        Arc::new(Lease {
            constraint: self.clone(),
            cache: Mutex::new(Some(cache)),
        })
    }
}

/// One cache, held by a matcher and its clones; back to the pool when the last one drops.
pub(crate) struct Lease {
    pub(crate) constraint: Arc<Constraint>,
    cache: Mutex<Option<Box<Inner>>>,
}

impl Lease {
    /// The cache, or [`MaskError::Poisoned`] when a step panicked while holding it.
    pub(crate) fn lock(&self) -> Result<CacheGuard<'_>, MaskError> {
        match self.cache.lock() {
            Ok(g) if g.is_some() => Ok(CacheGuard(g)),
            _ => Err(MaskError::Poisoned),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // A poisoned cache may be half updated: it is dropped, not given back.
        if let Ok(slot) = self.cache.get_mut() {
            if let Some(cache) = slot.take() {
                let me = std::thread::current().id();
                self.constraint.lock_idle().push((me, cache));
            }
        }
    }
}

/// Exclusive access to a leased cache.
pub(crate) struct CacheGuard<'a>(MutexGuard<'a, Option<Box<Inner>>>);

impl Deref for CacheGuard<'_> {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        self.0.as_deref().expect("checked in Lease::lock")
    }
}

impl DerefMut for CacheGuard<'_> {
    fn deref_mut(&mut self) -> &mut Inner {
        self.0.as_deref_mut().expect("checked in Lease::lock")
    }
}

impl Inner {
    /// The local mask of DFA state `s` (a mask key: see `LazyDfa::mask_key`), computed on
    /// first use.
    pub fn local(
        &mut self,
        s: u32,
        trie: &TokenTrie,
        limits: &Limits,
    ) -> Result<Arc<LocalMask>, MaskError> {
        if let Some(Some(m)) = self.local.get(s as usize) {
            return Ok(m.clone());
        }
        let t0 = std::time::Instant::now();
        let states0 = self.dfa.num_states();
        let depth = self.plain_depth(s)?;
        let states1 = self.dfa.num_states();
        let exact = self.exact.get(s as usize).copied().unwrap_or(false);
        let t_depth = t0.elapsed();
        let level = PLAIN_LEVELS.iter().rposition(|&l| l <= depth).map(|i| {
            if depth == INFINITE {
                PLAIN_LEVELS.len()
            } else {
                i
            }
        });
        let ctl_dead = self.ctl_dead.get(s as usize).copied().unwrap_or(false);
        let pick = |l: &crate::trie::Level, nonplain: bool| match (nonplain, ctl_dead) {
            (true, true) => l.nonplain_nc,
            (true, false) => trie.levels[PLAIN_LEVELS.len()].others,
            (false, true) => l.others_nc,
            (false, false) => l.others,
        };
        let walk = |dfa: &mut LazyDfa, t: usize| -> Result<LocalMask, MaskError> {
            let mut m = local_walk(dfa, s, &trie.tries[t], trie.vocab_size())?;
            m.trie = t;
            Ok(m)
        };
        let m = match level {
            // Exactly the plain tokens of at most `depth` characters survive: walk only the
            // tokens that are not plain text.
            _ if exact && depth <= MAX_EXACT_DEPTH => {
                let i = PLAIN_LEVELS.iter().rposition(|&l| l <= depth).unwrap_or(0);
                let t = pick(&trie.levels[i], true);
                let mut m = walk(&mut self.dfa, t)?;
                m.tokens.union_with(&trie.plain_upto[depth as usize]);
                Arc::new(m)
            }
            Some(i) => {
                let l = &trie.levels[i];
                let mut m = walk(&mut self.dfa, pick(l, false))?;
                m.tokens.union_with(&l.plain);
                Arc::new(m)
            }
            None => Arc::new(walk(&mut self.dfa, FULL)?),
        };
        if tracing::enabled!(tracing::Level::TRACE) {
            tracing::trace!(
                "local mask: state {s} depth {depth} level {level:?} trie {} tokens {} exits {} in {:?} (depth search {:?}, new states {} + {})",
                m.trie,
                m.tokens.count(),
                m.exits.len(),
                t0.elapsed(),
                t_depth,
                states1 - states0,
                self.dfa.num_states() - states1
            );
        }
        if self.cached < limits.max_cached_masks {
            if self.local.len() <= s as usize {
                self.local.resize(s as usize + 1, None);
            }
            self.local[s as usize] = Some(m.clone());
            self.cached += 1;
        }
        Ok(m)
    }
}

/// Plain-text depth of a state that loops back on itself.
const INFINITE: u32 = u32::MAX;

/// The states one plain JSON-string character leads to from `s`, added to `out` (and the
/// states inside a multi-byte character to `mid`, if given); `false` if some plain character
/// (or a prefix of one) dies on the way.
fn plain_successors(
    dfa: &mut LazyDfa,
    s: u32,
    out: &mut Vec<u32>,
    mut mid: Option<&mut Vec<u32>>,
) -> Result<bool, MaskError> {
    let mut frontier: Vec<u32> = Vec::with_capacity(4);
    let mut next: Vec<u32> = Vec::with_capacity(4);
    for seq in PLAIN_SEQUENCES.iter() {
        frontier.clear();
        frontier.push(s);
        for (i, &(lo, hi)) in seq.iter().enumerate() {
            next.clear();
            for &x in &frontier {
                // One byte per byte class: the others of the class go to the same state.
                let mut b = lo;
                loop {
                    let t = dfa.next(x, b)?;
                    if t == DEAD {
                        return Ok(false);
                    }
                    if !next.contains(&t) {
                        next.push(t);
                    }
                    let end = dfa.class_end(b);
                    if end >= hi {
                        break;
                    }
                    b = end + 1;
                }
            }
            if let Some(mid) = mid.as_deref_mut().filter(|_| i + 1 < seq.len()) {
                mid.extend_from_slice(&next);
            }
            std::mem::swap(&mut frontier, &mut next);
        }
        for &t in &frontier {
            if !out.contains(&t) {
                out.push(t);
            }
        }
    }
    Ok(true)
}

/// True if no control byte (0x00-0x1F) is allowed from `s`.
fn controls_die(dfa: &mut LazyDfa, s: u32) -> Result<bool, MaskError> {
    let mut b = 0u8;
    loop {
        if dfa.next(s, b)? != DEAD {
            return Ok(false);
        }
        let end = dfa.class_end(b);
        if end >= 0x1F {
            return Ok(true);
        }
        b = end + 1;
    }
}

/// True if no plain character can even start from `s`.
pub(crate) fn all_plain_die(dfa: &mut LazyDfa, s: u32) -> Result<bool, MaskError> {
    for seq in PLAIN_SEQUENCES.iter() {
        let (lo, hi) = seq[0];
        let mut b = lo;
        loop {
            if dfa.next(s, b)? != DEAD {
                return Ok(false);
            }
            let end = dfa.class_end(b);
            if end >= hi {
                break;
            }
            b = end + 1;
        }
    }
    Ok(true)
}

static PLAIN_SEQUENCES: std::sync::LazyLock<Vec<Vec<(u8, u8)>>> =
    std::sync::LazyLock::new(crate::trie::plain_char_sequences);

/// Most states a plain-text depth search visits before settling for the level reached.
const DEPTH_SEARCH_STATES: usize = 256;

/// Most new DFA states a plain-text depth search may build.
const DEPTH_SEARCH_NEW_STATES: usize = 200;

impl Inner {
    /// The states one plain character leads to from `s` (`None` if some plain character dies
    /// on the way), computed once per state.
    fn plain_moves(&mut self, s: u32) -> Result<Option<&[u32]>, MaskError> {
        if self.moves.len() <= s as usize {
            self.moves.resize(s as usize + 1, None);
        }
        if self.moves[s as usize].is_none() {
            let mut succ = Vec::new();
            let alive = plain_successors(&mut self.dfa, s, &mut succ, None)?;
            self.moves[s as usize] = Some(if alive {
                Some(succ.into_boxed_slice())
            } else {
                None
            });
        }
        Ok(self.moves[s as usize].as_ref().and_then(|m| m.as_deref()))
    }

    /// The one state every plain character leads `s` to, if there is one and no rule can
    /// call or end there or on the way (inside a string): a token of whole plain characters
    /// then moves along these states without leaving the rule.
    pub(crate) fn plain_step(&mut self, s: u32) -> Result<Option<u32>, MaskError> {
        let (mut succ, mut mid) = (Vec::new(), Vec::new());
        if !plain_successors(&mut self.dfa, s, &mut succ, Some(&mut mid))? {
            return Ok(None);
        }
        let exit = |t: &u32| self.dfa.is_exit(*t);
        Ok(match succ[..] {
            [y] if !exit(&y) && !mid.iter().any(exit) => Some(y),
            _ => None,
        })
    }

    /// The largest `k` (capped at the last plain level; `INFINITE` when no plain text can ever
    /// die) such that every run of at most `k` plain characters from `s` stays alive: every
    /// plain token of at most `k` characters is then allowed without walking it. It is the
    /// distance to the nearest state where some plain character dies (breadth-first search).
    fn plain_depth(&mut self, s: u32) -> Result<u32, MaskError> {
        if let Some(&d) = self.depth.get(s as usize).filter(|d| **d != UNKNOWN_DEPTH) {
            return Ok(d);
        }
        let cap = *PLAIN_LEVELS.last().unwrap_or(&32);
        let states_before = self.dfa.num_states();
        let mut seen: std::collections::HashSet<u32> = std::collections::HashSet::from([s]);
        let mut level = vec![s];
        let mut next = Vec::new();
        let mut depth = 0;
        // A single state per level (a counter, as in `maxLength`) may end in a state where
        // every plain character dies: then the depth is exact, and searched further.
        let mut uniform = true;
        let mut ctl_dead = true;
        let d = 'search: loop {
            next.clear();
            for &x in &level {
                ctl_dead = ctl_dead && controls_die(&mut self.dfa, x)?;
                // Exactness also needs every state on the way to stay inside its rule (no
                // return or call could continue a longer plain token).
                uniform &= !self.dfa.accepting(x) && !self.dfa.has_calls(x);
                let Some(moves) = self.plain_moves(x)? else {
                    if uniform && level.len() == 1 && all_plain_die(&mut self.dfa, x)? {
                        self.set_exact(s);
                    }
                    break 'search depth;
                };
                uniform &= moves.len() == 1;
                for &t in moves {
                    if seen.insert(t) {
                        next.push(t);
                    }
                }
            }
            depth += 1;
            uniform &= next.len() <= 1;
            if next.is_empty() {
                break INFINITE;
            }
            // Bounded work: visiting known states is cheap, building new ones is not.
            let limit = if uniform { MAX_EXACT_DEPTH } else { cap };
            if depth >= limit
                || seen.len() > DEPTH_SEARCH_STATES
                || self.dfa.num_states() > states_before + DEPTH_SEARCH_NEW_STATES
            {
                break depth.min(cap);
            }
            std::mem::swap(&mut level, &mut next);
        };
        self.set_depth(s, d);
        if ctl_dead && d > 0 {
            if self.ctl_dead.len() <= s as usize {
                self.ctl_dead.resize(s as usize + 1, false);
            }
            self.ctl_dead[s as usize] = true;
        }
        Ok(d)
    }

    fn set_exact(&mut self, s: u32) {
        if self.exact.len() <= s as usize {
            self.exact.resize(s as usize + 1, false);
        }
        self.exact[s as usize] = true;
    }

    fn set_depth(&mut self, s: u32, d: u32) {
        if self.depth.len() <= s as usize {
            self.depth.resize(s as usize + 1, UNKNOWN_DEPTH);
        }
        self.depth[s as usize] = d;
    }
}

const UNKNOWN_DEPTH: u32 = u32::MAX - 1;

/// Walks `trie` from `s` with byte moves only.
fn local_walk(
    dfa: &mut LazyDfa,
    s: u32,
    trie: &Trie,
    vocab_size: usize,
) -> Result<LocalMask, MaskError> {
    let mut tokens = TokenSet::new(vocab_size);
    let mut exits = Vec::new();
    let mut ends = Vec::new();
    let distinct = dfa.has_distinct();
    if dfa.has_calls(s) || dfa.accepting(s) {
        exits.push((0, s));
    }
    let nodes = &trie.nodes;
    // The state after each ancestor of the current node, by depth (the root is `s`).
    let mut states = vec![s; trie.max_depth + 1];
    let mut i = 1usize;
    let n = nodes.len();
    while i < n {
        let node = nodes[i];
        let depth = node.depth as usize;
        let t = dfa.next(states[depth - 1], node.byte)?;
        if t == DEAD {
            i = node.subtree_end as usize;
            continue;
        }
        if node.tok_start != node.tok_end {
            for &tok in trie.node_tokens(i) {
                tokens.insert(tok);
            }
            if distinct {
                if let Some(rest) = dfa.forced_end(t)? {
                    ends.push((i as u32, rest));
                }
            }
        }
        if dfa.is_exit(t) && node.subtree_end as usize > i + 1 {
            exits.push((i as u32, t));
        }
        states[depth] = t;
        i += 1;
    }
    Ok(LocalMask {
        tokens,
        exits,
        ends,
        trie: FULL,
    })
}
