//! [`Constraint`]: a grammar compiled against one vocabulary, shared by all its matchers.

use crate::dfa::{LazyDfa, DEAD};
use crate::nfa::Nfa;
use crate::trie::{Trie, PLAIN_LEVELS};
use crate::{MaskError, Matcher, TokenSet, TokenTrie};
use std::sync::{Arc, Mutex};
use stencil_grammar::Grammar;

/// Limits that turn pathological constraints into errors instead of hangs or OOMs.
#[derive(Debug, Clone)]
pub struct Limits {
    /// NFA states (grows with schema size and bounded repetitions).
    pub max_nfa_states: usize,
    /// DFA states built lazily over the constraint's life (each costs 1 KiB).
    pub max_dfa_states: usize,
    /// States of an eagerly built intersection/complement (`not`, `oneOf`, bounds with
    /// `multipleOf`, patterns with lengths).
    pub max_intersection_states: usize,
    /// Parses alive at once (grammar ambiguity).
    pub max_parses: usize,
    /// Rule calls nested within one byte step.
    pub max_call_depth: usize,
    /// Per-state masks kept in the cache (each is vocab/8 bytes).
    pub max_cached_masks: usize,
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
        }
    }
}

/// Tokens allowed from a DFA state without leaving its rule, and the trie nodes where a rule
/// call or return may continue the walk.
pub(crate) struct LocalMask {
    pub tokens: TokenSet,
    /// `(trie node, DFA state after the node's bytes)` where the state can call or return.
    pub exits: Vec<(u32, u32)>,
    /// Plain tokens were taken whole at this level of [`TokenTrie`]'s precomputed sets; the
    /// exits are nodes of that level's trie of other tokens (`None`: the full trie).
    pub level: Option<usize>,
}

pub(crate) struct Inner {
    pub dfa: LazyDfa,
    /// Plain-text depth per DFA state (see `plain_depth`).
    pub depth: Vec<u32>,
    pub local: Vec<Option<Arc<LocalMask>>>,
    pub cached: usize,
}

/// A grammar compiled for one vocabulary: the lazily built automaton and its mask caches.
/// Build once per (constraint, tokenizer) and share behind an `Arc`; [`Constraint::matcher`]
/// gives a cheap per-request [`Matcher`].
pub struct Constraint {
    pub(crate) trie: Arc<TokenTrie>,
    pub(crate) inner: Mutex<Inner>,
    pub(crate) limits: Limits,
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
    ) -> Result<Arc<Self>, MaskError> {
        let nfa = Nfa::build(
            grammar,
            limits.max_nfa_states,
            limits.max_intersection_states,
        )?;
        let dfa = LazyDfa::new(nfa, limits.max_dfa_states);
        let c = Arc::new(Self {
            trie,
            inner: Mutex::new(Inner {
                dfa,
                depth: Vec::new(),
                local: Vec::new(),
                cached: 0,
            }),
            limits,
        });
        Ok(c)
    }

    /// A matcher at the start of the output.
    pub fn matcher(self: &Arc<Self>) -> Result<Matcher, MaskError> {
        Matcher::new(self.clone())
    }

    pub fn trie(&self) -> &Arc<TokenTrie> {
        &self.trie
    }

    /// Number of DFA states built so far (a measure of how much of the automaton was explored).
    pub fn dfa_states(&self) -> usize {
        self.lock().dfa.num_states()
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inner {
    /// The local mask of DFA state `s`, computed on first use.
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
        let depth = self.plain_depth(s)?;
        let level = PLAIN_LEVELS.iter().rposition(|&l| l <= depth).map(|i| {
            if depth == INFINITE {
                PLAIN_LEVELS.len()
            } else {
                i
            }
        });
        let m = match level {
            Some(i) => {
                let (plain, others) = &trie.levels[i];
                let mut m = local_walk(&mut self.dfa, s, others, trie.vocab_size())?;
                m.tokens.union_with(plain);
                m.level = Some(i);
                Arc::new(m)
            }
            None => Arc::new(local_walk(&mut self.dfa, s, &trie.full, trie.vocab_size())?),
        };
        if *TRACE {
            eprintln!(
                "local mask: state {s} depth {depth} level {level:?} tokens {} exits {} in {:?}",
                m.tokens.count(),
                m.exits.len(),
                t0.elapsed()
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

/// `STENCIL_TRACE_MASK=1` prints every per-state mask computed (state, plain-text depth,
/// tokens, time): the tool for finding slow masks.
static TRACE: std::sync::LazyLock<bool> =
    std::sync::LazyLock::new(|| std::env::var_os("STENCIL_TRACE_MASK").is_some());

/// Plain-text depth of a state that loops back on itself.
const INFINITE: u32 = u32::MAX;

/// The state every plain JSON-string character leads to from `s`, if they all lead to the
/// same live state (through live intermediate states).
fn uniform_successor(dfa: &mut LazyDfa, s: u32) -> Result<Option<u32>, MaskError> {
    let mut target = None;
    let mut frontier: Vec<u32> = Vec::with_capacity(4);
    let mut next: Vec<u32> = Vec::with_capacity(4);
    for seq in PLAIN_SEQUENCES.iter() {
        frontier.clear();
        frontier.push(s);
        for &(lo, hi) in seq {
            next.clear();
            for &x in &frontier {
                for b in lo..=hi {
                    let t = dfa.next(x, b)?;
                    if t == DEAD {
                        return Ok(None);
                    }
                    if !next.contains(&t) {
                        if next.len() == 8 {
                            return Ok(None);
                        }
                        next.push(t);
                    }
                }
            }
            std::mem::swap(&mut frontier, &mut next);
        }
        match (frontier.as_slice(), target) {
            ([t], None) => target = Some(*t),
            ([t], Some(u)) if *t == u => {}
            _ => return Ok(None),
        }
    }
    Ok(target)
}

static PLAIN_SEQUENCES: std::sync::LazyLock<Vec<Vec<(u8, u8)>>> =
    std::sync::LazyLock::new(crate::trie::plain_char_sequences);

impl Inner {
    /// How many plain characters in a row are all allowed from `s` (`INFINITE` if `s` loops on
    /// plain text): every plain token of at most that many characters is allowed.
    fn plain_depth(&mut self, s: u32) -> Result<u32, MaskError> {
        let mut chain = Vec::new();
        let mut cur = s;
        let depth = loop {
            if let Some(&d) = self
                .depth
                .get(cur as usize)
                .filter(|d| **d != UNKNOWN_DEPTH)
            {
                break d;
            }
            if chain.len() > *PLAIN_LEVELS.last().unwrap_or(&32) as usize {
                break 0;
            }
            match uniform_successor(&mut self.dfa, cur)? {
                None => break 0,
                Some(t) if t == cur || chain.contains(&t) => {
                    // A loop: every state on it has unbounded depth.
                    chain.push(cur);
                    for &c in &chain {
                        self.set_depth(c, INFINITE);
                    }
                    return Ok(INFINITE);
                }
                Some(t) => {
                    chain.push(cur);
                    cur = t;
                }
            }
        };
        let mut d = depth;
        for &c in chain.iter().rev() {
            d = if d == INFINITE { INFINITE } else { d + 1 };
            self.set_depth(c, d);
        }
        Ok(if chain.is_empty() { depth } else { d })
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
    if dfa.has_calls(s) || dfa.accepting(s) {
        exits.push((0, s));
    }
    let nodes = &trie.nodes;
    // (subtree end, state) of the open ancestors.
    let mut stack: Vec<(u32, u32)> = Vec::with_capacity(64);
    let mut i = 1usize;
    let n = nodes.len();
    while i < n {
        while let Some(&(end, _)) = stack.last() {
            if end as usize <= i {
                stack.pop();
            } else {
                break;
            }
        }
        let parent = stack.last().map_or(s, |&(_, st)| st);
        let node = nodes[i];
        let t = dfa.next(parent, node.byte)?;
        if t == DEAD {
            i = node.subtree_end as usize;
            continue;
        }
        for &tok in trie.node_tokens(i) {
            tokens.insert(tok);
        }
        if (dfa.has_calls(t) || dfa.accepting(t)) && node.subtree_end as usize > i + 1 {
            exits.push((i as u32, t));
        }
        stack.push((node.subtree_end, t));
        i += 1;
    }
    Ok(LocalMask {
        tokens,
        exits,
        level: None,
    })
}
