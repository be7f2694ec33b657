//! Per-DFA-state data of token budgets, shared by every matcher of a constraint: the local
//! tokens of a state grouped by the state they end in (a trie walk that takes whole subtrees
//! and counted-string runs wholesale), and the fewest tokens that spell each state's shortest
//! completion of its own rule.

use crate::completion::NEVER;
use crate::constraint::{Inner, Limits};
use crate::dfa::DEAD;
use crate::hash::FxHashMap;
use crate::matcher::{Config, NONE};
use crate::trie::{FULL, PLAIN_LEVELS};
use crate::{MaskError, TokenTrie};
use std::ops::RangeInclusive;
use std::sync::Arc;

/// Not computed yet (in [`BudgetCache::rule_tokens`]).
const UNKNOWN: u32 = u32::MAX;

/// Budget data shared by every matcher of a constraint, per DFA state.
#[derive(Default)]
pub(crate) struct BudgetCache {
    /// Fewest tokens spelling each state's shortest completion of its own rule.
    rule_tokens: Vec<u32>,
    /// Local tokens by end state, per state (at most `Limits::max_cached_masks` states).
    ends: FxHashMap<u32, Arc<LocalEnds>>,
    /// Per state: 0 unknown, 1 no, 2 every plain character loops back (see
    /// `Inner::loops_on_plain`).
    loops: Vec<u8>,
}

/// The tokens of one DFA state that stay in its rule, grouped by the state they end in.
pub(super) struct LocalEnds {
    /// The end state most local tokens reach (`NONE` if no token stays in the rule); its
    /// tokens are not listed.
    pub main: u32,
    /// Every other end state with its tokens (an end state may have several entries).
    pub others: Vec<(u32, Group)>,
    /// `(trie node, state after the node's bytes)` where a call or return may continue a
    /// token; node 0 stands for the state itself.
    pub exits: Vec<(u32, u32)>,
    /// The trie walked (an index into `TokenTrie::tries`): the exits are its nodes.
    pub trie: usize,
    /// The most tokens any end state needs to finish the rule (`rule_tokens`, an upper bound):
    /// with the stack's own bound it bounds the need after any local token.
    pub widest: u32,
}

/// The tokens of one group.
pub(super) enum Group {
    /// Ranges of the walked trie's token list (`Trie::tokens`).
    Walked(Vec<(u32, u32)>),
    /// The tokens of whole plain characters whose count is in the range (buckets of
    /// `TokenTrie::whole_plain`), shared by every state.
    Plain(RangeInclusive<usize>),
}

impl Group {
    /// The group's tokens; `walked` is the token list of the trie the group was walked in.
    pub fn tokens<'a>(
        &'a self,
        trie: &'a TokenTrie,
        walked: &'a [u32],
    ) -> impl Iterator<Item = u32> + 'a {
        let (ranges, plain): (&[(u32, u32)], &[Vec<u32>]) = match self {
            Group::Walked(r) => (r, &[]),
            Group::Plain(r) => (&[], &trie.whole_plain[r.clone()]),
        };
        let listed = ranges
            .iter()
            .flat_map(move |&(a, b)| walked[a as usize..b as usize].iter());
        listed.chain(plain.iter().flatten()).copied()
    }

    fn len(&self, trie: &TokenTrie) -> usize {
        match self {
            Group::Walked(r) => r.iter().map(|&(a, b)| (b - a) as usize).sum(),
            Group::Plain(r) => trie.whole_plain[r.clone()].iter().map(Vec::len).sum(),
        }
    }
}

/// An end state and the character counts of the whole-plain tokens that end there.
type PlainGroup = (u32, RangeInclusive<usize>);

/// Local tokens by end state, as ranges of the walked trie's token list, and the exits.
pub(super) type Walk = (Vec<(u32, Vec<(u32, u32)>)>, Vec<(u32, u32)>);

impl Inner {
    /// [`LocalEnds`] of DFA state `s`, computed on first use.
    pub(super) fn local_ends(
        &mut self,
        s: u32,
        trie: &TokenTrie,
        limits: &Limits,
    ) -> Result<Arc<LocalEnds>, MaskError> {
        if let Some(e) = self.budget.ends.get(&s) {
            return Ok(e.clone());
        }
        let t0 = std::time::Instant::now();
        let (walked, plain) = self.plain_chain(s, trie)?;
        let (groups, exits) = self.walk_ends(s, trie, walked)?;
        if tracing::enabled!(tracing::Level::TRACE) {
            tracing::trace!(
                "budget ends: state {s} trie {walked} groups {} + {} by characters, exits {} in {:?}",
                groups.len(),
                plain.len(),
                exits.len(),
                t0.elapsed()
            );
        }
        let mut others: Vec<(u32, Group)> = groups
            .into_iter()
            .map(|(end, ranges)| (end, Group::Walked(ranges)))
            .chain(plain.into_iter().map(|(end, r)| (end, Group::Plain(r))))
            .collect();
        others.sort_unstable_by_key(|g| g.0);
        let mut sizes: FxHashMap<u32, usize> = FxHashMap::default();
        for (end, g) in &others {
            *sizes.entry(*end).or_default() += g.len(trie);
        }
        let main = sizes
            .iter()
            .max_by_key(|(&end, &n)| (n, end))
            .map_or(NONE, |(&end, _)| end);
        others.retain(|g| g.0 != main);
        let mut widest = 0u32;
        for end in (main != NONE)
            .then_some(main)
            .into_iter()
            .chain(others.iter().map(|g| g.0))
        {
            widest = widest.max(self.rule_tokens(trie, end)?);
        }
        let e = Arc::new(LocalEnds {
            main,
            others,
            exits,
            trie: walked,
            widest,
        });
        if self.budget.ends.len() < limits.max_cached_masks {
            self.budget.ends.insert(s, e.clone());
        }
        Ok(e)
    }

    /// Walks `trie.tries[walked]` from `s` with byte moves only: the tokens that stay in the
    /// rule by end state, and the exits. In the full trie, a subtree whose tokens continue
    /// with whole plain characters only is taken wholesale where its node's state loops on
    /// plain characters (a free string, after a property name's prefix ruled out the
    /// declared names).
    pub(super) fn walk_ends(
        &mut self,
        s: u32,
        trie: &TokenTrie,
        walked: usize,
    ) -> Result<Walk, MaskError> {
        let t = &trie.tries[walked];
        let below = (walked == FULL).then_some(&trie.full_below);
        let mut groups: Vec<(u32, Vec<(u32, u32)>)> = Vec::new();
        let mut last = 0usize;
        let mut add = |end: u32, (a, b): (u32, u32)| {
            if groups.get(last).is_none_or(|g| g.0 != end) {
                last = match groups.iter().position(|g| g.0 == end) {
                    Some(i) => i,
                    None => {
                        groups.push((end, Vec::new()));
                        groups.len() - 1
                    }
                };
            }
            let ranges = &mut groups[last].1;
            match ranges.last_mut() {
                Some(r) if r.1 == a => r.1 = b,
                _ => ranges.push((a, b)),
            }
        };
        let mut exits = Vec::new();
        if self.dfa.has_calls(s) || self.dfa.accepting(s) {
            exits.push((0, s));
        }
        let nodes = &t.nodes;
        let mut states = vec![s; t.max_depth + 1];
        let mut i = 1usize;
        while i < nodes.len() {
            let node = nodes[i];
            let depth = node.depth as usize;
            let x = self.dfa.next(states[depth - 1], node.byte)?;
            if x == DEAD {
                i = node.subtree_end as usize;
                continue;
            }
            if let Some(below) = below.filter(|b| b.flag[i]) {
                if self.loops_on_plain(x)? {
                    let end = node.subtree_end as usize;
                    add(x, (below.first_tok[i], below.first_tok[end]));
                    i = end;
                    continue;
                }
            }
            if node.tok_end > node.tok_start {
                add(x, (node.tok_start, node.tok_end));
            }
            if self.dfa.is_exit(x) && node.subtree_end as usize > i + 1 {
                exits.push((i as u32, x));
            }
            states[depth] = x;
            i += 1;
        }
        Ok((groups, exits))
    }

    /// True if every plain character leads `s` back to itself without a call or return
    /// (cached per state).
    fn loops_on_plain(&mut self, s: u32) -> Result<bool, MaskError> {
        const YES: u8 = 2;
        const NO: u8 = 1;
        if let Some(&v) = self.budget.loops.get(s as usize).filter(|&&v| v != 0) {
            return Ok(v == YES);
        }
        let yes = !self.dfa.is_exit(s) && self.plain_step(s)? == Some(s);
        if self.budget.loops.len() <= s as usize {
            self.budget.loops.resize(s as usize + 1, 0);
        }
        self.budget.loops[s as usize] = if yes { YES } else { NO };
        Ok(yes)
    }

    /// Where the tokens of whole plain characters end from `s` without a walk: when each
    /// plain character moves along a chain of states (a string, counted or not), a token of
    /// `k` characters ends in the chain's `k`-th state. Returns the trie of the tokens that
    /// still need a walk and the end state of each character count the chain covers.
    fn plain_chain(
        &mut self,
        s: u32,
        trie: &TokenTrie,
    ) -> Result<(usize, Vec<PlainGroup>), MaskError> {
        let longest = trie.whole_plain.len() - 1;
        let all_whole = trie.levels[PLAIN_LEVELS.len()].not_whole;
        if self.dfa.is_exit(s) {
            return Ok((FULL, Vec::new()));
        }
        let mut chain = vec![s];
        let covered = loop {
            let k = chain.len() - 1;
            let x = chain[k];
            if k + 1 == longest {
                break k;
            }
            match self.plain_step(x)? {
                // A loop: every longer token ends here too.
                Some(y) if y == x => {
                    let mut groups: Vec<_> = (1..k).map(|i| (chain[i], i..=i)).collect();
                    groups.push((x, k.max(1)..=longest));
                    return Ok((all_whole, groups));
                }
                Some(y) => chain.push(y),
                None => break k,
            }
        };
        let groups = |upto: usize| (1..=upto).map(|i| (chain[i], i..=i)).collect();
        // Past the chain's end no plain character lives: longer tokens die unwalked.
        if crate::constraint::all_plain_die(&mut self.dfa, chain[covered])? {
            return Ok((all_whole, groups(covered)));
        }
        match PLAIN_LEVELS.iter().rposition(|&l| l as usize <= covered) {
            Some(i) => Ok((trie.levels[i].not_whole, groups(PLAIN_LEVELS[i] as usize))),
            None => Ok((FULL, Vec::new())),
        }
    }

    /// Fewest tokens spelling the shortest completion of `s` within its rule ([`NEVER`] if
    /// it has none or the vocabulary cannot spell it).
    pub(super) fn rule_tokens(&mut self, trie: &TokenTrie, s: u32) -> Result<u32, MaskError> {
        let cache = &mut self.budget.rule_tokens;
        if let Some(&n) = cache.get(s as usize).filter(|&&n| n != UNKNOWN) {
            return Ok(n);
        }
        let bytes = self.completions.len(&mut self.dfa, s)?;
        let n = match bytes {
            0 | NEVER => bytes,
            _ => {
                let mut text = Vec::with_capacity(bytes as usize);
                self.completions.write(s, &mut text, bytes as usize)?;
                trie.min_tokens(&text).unwrap_or(NEVER)
            }
        };
        let cache = &mut self.budget.rule_tokens;
        if cache.len() <= s as usize {
            cache.resize(s as usize + 1, UNKNOWN);
        }
        cache[s as usize] = n;
        Ok(n)
    }

    /// An upper bound on the tokens that finish parse `c`: the sum over its stack frames of
    /// each frame's own fewest tokens ([`NEVER`] if it cannot finish).
    pub(super) fn upper_tokens(
        &mut self,
        trie: &TokenTrie,
        arena: &[(u32, u32)],
        c: Config,
    ) -> Result<u32, MaskError> {
        let mut total = 0u32;
        for s in frames(c, arena) {
            let n = self.rule_tokens(trie, s)?;
            if n == NEVER {
                return Ok(NEVER);
            }
            total = total.saturating_add(n).min(NEVER - 1);
        }
        Ok(total)
    }

    /// Fewest tokens that finish parse `c` along its shortest completion ([`NEVER`] if none).
    pub(super) fn exact_tokens(
        &mut self,
        trie: &TokenTrie,
        arena: &[(u32, u32)],
        c: Config,
    ) -> Result<u32, MaskError> {
        let mut text = Vec::new();
        for s in frames(c, arena) {
            let n = self.completions.len(&mut self.dfa, s)?;
            if n == NEVER {
                return Ok(NEVER);
            }
            let limit = text.len() + n as usize;
            self.completions.write(s, &mut text, limit)?;
        }
        Ok(trie.min_tokens(&text).unwrap_or(NEVER))
    }
}

/// The DFA states of every frame of parse `c`, top first.
pub(super) fn frames(c: Config, arena: &[(u32, u32)]) -> impl Iterator<Item = u32> + '_ {
    std::iter::successors(Some(c), |&(_, p)| (p != NONE).then(|| arena[p as usize])).map(|(s, _)| s)
}
