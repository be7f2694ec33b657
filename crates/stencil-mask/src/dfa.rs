//! [`LazyDfa`]: subset construction over the lazy NFA, one transition at a time, on demand.
//!
//! State ids are stable for the life of the automaton (no cache flushes), so they can key the
//! per-state mask cache. A DFA state is a set of NFA items of possibly several rules; its rule
//! calls are kept aside and followed by the matcher, which owns the stack.

use crate::hash::FxHashMap;
use crate::nfa::{Item, ItemId, Nfa, ACCEPT};
use crate::MaskError;
use smallvec::SmallVec;

/// The empty set: no continuation.
pub(crate) const DEAD: u32 = 0;
/// "No filter" in a [`LazyDfa::mask_key`].
pub(crate) const NO_FILTER: u32 = u32::MAX;
const UNKNOWN: u32 = u32::MAX;
/// States per chunk of the transition table (1 MiB).
const CHUNK: usize = 1024;

pub(crate) struct StateInfo {
    pub accepting: bool,
    /// `(callee start state, return state, callee rule)`, computed on first use.
    pub calls: Option<Box<[(u32, u32, u32)]>>,
    pub has_calls: bool,
    /// The state's mask key (see [`LazyDfa::mask_key`]), once known.
    canon: Option<(u32, u32)>,
}

pub(crate) struct LazyDfa {
    nfa: Nfa,
    sets: Vec<Box<[ItemId]>>,
    map: FxHashMap<Box<[ItemId]>, u32>,
    /// Transitions, `CHUNK` states per chunk (fixed chunks, so growing never copies the
    /// table in the middle of a mask): see [`LazyDfa::row`].
    trans: Vec<Vec<u32>>,
    pub info: Vec<StateInfo>,
    /// Per state: a rule may call or end here (a trie walk records an exit).
    exit: Vec<bool>,
    rule_start: Vec<u32>,
    scratch: Vec<ItemId>,
    limit: usize,
    /// Per state: a lower bound on the bytes that finish its rule and a byte to start with
    /// (see [`LazyDfa::lower`]); `UNKNOWN` until computed.
    lower: Vec<(u32, Option<u8>)>,
    /// Per state: [`LazyDfa::reach`], `UNKNOWN` until computed.
    reach: Vec<u32>,
    /// Memo of [`LazyDfa::forced_end`].
    forced_end: FxHashMap<u32, Option<Box<[u8]>>>,
}

impl LazyDfa {
    pub fn new(nfa: Nfa, limit: usize) -> Self {
        let rules = nfa.num_rules();
        let mut d = Self {
            nfa,
            sets: Vec::new(),
            map: FxHashMap::default(),
            trans: Vec::new(),
            info: Vec::new(),
            exit: Vec::new(),
            rule_start: vec![UNKNOWN; rules],
            scratch: Vec::new(),
            limit,
            lower: Vec::new(),
            reach: Vec::new(),
            forced_end: FxHashMap::default(),
        };
        // State 0: the dead state.
        d.sets.push(Box::new([]));
        d.map.insert(Box::new([]), DEAD);
        d.push_row(DEAD);
        d.exit.push(false);
        d.info.push(StateInfo {
            accepting: false,
            calls: Some(Box::new([])),
            has_calls: false,
            canon: None,
        });
        d
    }

    /// Tells the automaton the vocabulary's shape: the longest token, and per byte the most
    /// times one token holds it.
    pub fn set_token_shape(&mut self, max_len: usize, most_per_token: &[u32; 256]) {
        self.nfa.max_token_len = max_len.min(u32::MAX as usize / 4) as u32;
        self.nfa.most_per_token = Some(*most_per_token);
    }

    /// The state whose mask `s`'s is derived from, and a filter: `(key, chars)` means the
    /// tokens allowed from `s` are those allowed from `key` that write at most `chars`
    /// characters before closing the current string (`u32::MAX`: no filter). The key replaces
    /// a length-bounded plain string by an unbounded one, and every repetition count and
    /// string length that no token can tell apart by a canonical one, so the thousands of
    /// positions inside long bounded arrays and strings share a few mask computations.
    pub fn mask_key(&mut self, s: u32) -> Result<(u32, u32), MaskError> {
        if let Some(k) = self.info[s as usize].canon {
            return Ok(k);
        }
        let mut set: Vec<ItemId> = self.sets[s as usize].to_vec();
        let mut chars = NO_FILTER;
        if let Some((far, left)) = self.nfa.string_counter_key(&set)? {
            set = far;
            chars = left;
        }
        let mut out = Vec::with_capacity(set.len());
        for &i in &set {
            out.push(self.nfa.canonical_item(i)?);
        }
        out.sort_unstable();
        out.dedup();
        let k = (self.intern(&out)?, chars);
        self.info[s as usize].canon = Some(k);
        Ok(k)
    }

    /// The chunk and offset of state `s`'s row of 256 transitions.
    #[inline]
    fn row(s: u32) -> (usize, usize) {
        let s = s as usize;
        (s / CHUNK, (s % CHUNK) * 256)
    }

    /// Appends a row for the next state, every entry `fill`.
    fn push_row(&mut self, fill: u32) {
        let (c, i) = Self::row(self.sets.len() as u32 - 1);
        if c == self.trans.len() {
            // Reserved, not filled: pages are touched only as rows are added.
            self.trans.push(Vec::with_capacity(CHUNK * 256));
        }
        debug_assert_eq!(self.trans[c].len(), i);
        self.trans[c].extend_from_slice(&[fill; 256]);
    }

    /// The last byte of the byte class `b` belongs to (classes are contiguous ranges).
    #[inline]
    pub fn class_end(&self, b: u8) -> u8 {
        self.nfa.class_end[self.nfa.class_of[b as usize] as usize]
    }

    /// Grants `limit` units of work to the next operation (a mask, a commit).
    pub fn refuel(&mut self, limit: u64) {
        self.nfa.refuel(limit);
    }

    pub fn num_states(&self) -> usize {
        self.sets.len()
    }

    pub fn start_rule(&self) -> u32 {
        self.nfa.start_rule
    }

    /// The role of `rule` for distinct items.
    pub fn role(&self, rule: u32) -> crate::nfa::RuleRole {
        self.nfa.role(rule)
    }

    /// True if the grammar has arrays whose items must differ.
    pub fn has_distinct(&self) -> bool {
        self.nfa.has_distinct()
    }

    fn intern(&mut self, set: &[ItemId]) -> Result<u32, MaskError> {
        if let Some(&id) = self.map.get(set) {
            return Ok(id);
        }
        if self.sets.len() >= self.limit {
            return Err(MaskError::TooManyStates {
                what: "DFA",
                given: self.sets.len() + 1,
                limit: self.limit,
            });
        }
        let id = self.sets.len() as u32;
        let boxed: Box<[ItemId]> = set.into();
        let accepting = set.first() == Some(&ACCEPT);
        let has_calls = set
            .iter()
            .any(|&i| matches!(self.nfa.item(i), Item::Call { .. }));
        self.map.insert(boxed.clone(), id);
        self.sets.push(boxed);
        self.push_row(UNKNOWN);
        self.exit.push(accepting || has_calls);
        self.info.push(StateInfo {
            accepting,
            calls: if has_calls { None } else { Some(Box::new([])) },
            has_calls,
            canon: None,
        });
        Ok(id)
    }

    /// The DFA state at the entry of `rule`.
    pub fn rule_start(&mut self, rule: u32) -> Result<u32, MaskError> {
        let r = self.rule_start[rule as usize];
        if r != UNKNOWN {
            return Ok(r);
        }
        let set: Box<[ItemId]> = self.nfa.rule_start(rule)?.into();
        let id = self.intern(&set)?;
        self.rule_start[rule as usize] = id;
        Ok(id)
    }

    /// The state after byte `b` from `s` (`DEAD` if none).
    #[inline]
    pub fn next(&mut self, s: u32, b: u8) -> Result<u32, MaskError> {
        let (c, i) = Self::row(s);
        let t = self.trans[c][i + b as usize];
        if t != UNKNOWN {
            return Ok(t);
        }
        self.compute_next(s, b)
    }

    fn compute_next(&mut self, s: u32, b: u8) -> Result<u32, MaskError> {
        self.nfa.charge(self.sets[s as usize].len() as u64 + 1)?;
        let mut out = std::mem::take(&mut self.scratch);
        let r = self.nfa.step(&self.sets[s as usize], b, &mut out);
        let t = match r {
            Ok(()) if out.is_empty() => Ok(DEAD),
            Ok(()) => self.intern(&out),
            Err(e) => Err(e),
        };
        self.scratch = out;
        let t = t?;
        // Every byte of b's class moves alike (classes only get finer over time, and a state's
        // items were all known when it was created).
        let class = self.nfa.class_of[b as usize];
        let end = self.nfa.class_end[class as usize];
        let mut x = b as usize;
        while x > 0 && self.nfa.class_of[x - 1] == class {
            x -= 1;
        }
        let (c, row) = Self::row(s);
        self.trans[c][row + x..=row + end as usize].fill(t);
        Ok(t)
    }

    /// Rule calls possible from `s`: `(callee start, state to return to, callee rule)`.
    pub fn calls(&mut self, s: u32) -> Result<&[(u32, u32, u32)], MaskError> {
        if self.info[s as usize].calls.is_none() {
            let mut by_rule: SmallVec<[(u32, Vec<ItemId>); 4]> = SmallVec::new();
            let set = self.sets[s as usize].clone();
            for &i in set.iter() {
                if let Item::Call { rule, cont } = self.nfa.item(i) {
                    let rets = self.nfa.closure(cont)?.to_vec();
                    match by_rule.iter_mut().find(|(r, _)| *r == rule) {
                        Some((_, acc)) => acc.extend(rets),
                        None => by_rule.push((rule, rets)),
                    }
                }
            }
            let mut calls = Vec::with_capacity(by_rule.len());
            for (rule, mut rets) in by_rule {
                rets.sort_unstable();
                rets.dedup();
                let start = self.rule_start(rule)?;
                let ret = self.intern(&rets)?;
                calls.push((start, ret, rule));
            }
            self.info[s as usize].calls = Some(calls.into_boxed_slice());
        }
        Ok(self.info[s as usize].calls.as_deref().unwrap_or(&[]))
    }

    /// A lower bound on the bytes that finish the rule from `s`, and the first byte of a
    /// completion that meets it where the bound is exact: the smallest of its items' bounds.
    pub fn lower(&mut self, s: u32) -> (u32, Option<u8>) {
        if let Some(&l) = self.lower.get(s as usize).filter(|l| l.0 != UNKNOWN) {
            return l;
        }
        let mut best = (UNKNOWN, None);
        for &i in self.sets[s as usize].iter() {
            let l = self.nfa.item_lower(i);
            if l.0 < best.0 || (l.0 == best.0 && best.1.is_none()) {
                best = l;
            }
        }
        if self.lower.len() <= s as usize {
            self.lower.resize(self.sets.len(), (UNKNOWN, None));
        }
        self.lower[s as usize] = best;
        best
    }

    /// An upper bound on the bytes that finish the rule (with the rules it calls on the way)
    /// from any state reachable from `s`: the largest of its items' bounds
    /// ([`crate::nfa::NO_UPPER`] if unknown).
    pub fn reach(&mut self, s: u32) -> u32 {
        if let Some(&n) = self.reach.get(s as usize).filter(|&&n| n != UNKNOWN) {
            return n;
        }
        let mut most = 0;
        for &i in self.sets[s as usize].iter() {
            most = most.max(self.nfa.item_reach(i));
        }
        if self.reach.len() <= s as usize {
            self.reach.resize(self.sets.len(), UNKNOWN);
        }
        // An unknown bound may become known once a machine is built: not memoized.
        if most < crate::nfa::NO_UPPER {
            self.reach[s as usize] = most;
        }
        most
    }

    /// The bytes that must finish the rule from `s`, whitespace aside: `Some` when, but for
    /// JSON whitespace, one byte after another is the only way on until the rule can only end
    /// (empty if `s` can only end already). Whitespace changes no JSON value, so a distinct
    /// item is as good as complete here (see `crate::distinct`).
    pub fn forced_end(&mut self, s: u32) -> Result<Option<Box<[u8]>>, MaskError> {
        if let Some(f) = self.forced_end.get(&s) {
            return Ok(f.clone());
        }
        let mut out = Vec::new();
        let mut t = s;
        let found = loop {
            if self.only_ends(t) {
                break Some(out.into_boxed_slice());
            }
            if out.len() >= 64 || self.accepting(t) || self.has_calls(t) {
                break None;
            }
            let mut only = None;
            let mut b = 0u16;
            let mut many = false;
            while b <= 255 {
                let end = self.class_end(b as u8);
                let in_class = (b..=end as u16).filter(|&x| !b" \t\n\r".contains(&(x as u8)));
                let n = in_class.clone().count();
                if n > 0 && self.next(t, b as u8)? != DEAD {
                    if n > 1 || only.is_some() {
                        many = true;
                        break;
                    }
                    only = in_class.map(|x| x as u8).next();
                }
                b = end as u16 + 1;
            }
            match (many, only) {
                (false, Some(x)) => {
                    out.push(x);
                    t = self.next(t, x)?;
                }
                _ => break None,
            }
        };
        self.forced_end.insert(s, found.clone());
        Ok(found)
    }

    #[inline]
    pub fn accepting(&self, s: u32) -> bool {
        self.info[s as usize].accepting
    }

    /// True if a rule may call or end in `s`.
    #[inline]
    pub fn is_exit(&self, s: u32) -> bool {
        self.exit[s as usize]
    }

    /// True if `s` can only end its rule: no byte and no call leaves it. A call returning
    /// here is a tail call (the matcher then pushes no frame for it).
    #[inline]
    pub fn only_ends(&self, s: u32) -> bool {
        *self.sets[s as usize] == [ACCEPT]
    }

    #[inline]
    pub fn has_calls(&self, s: u32) -> bool {
        self.info[s as usize].has_calls
    }
}
