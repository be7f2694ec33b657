//! Grammar IR to a byte-level NFA with rule calls (Thompson construction in
//! continuation-passing style, so shared subexpressions are built once per continuation).
//!
//! `And`, `Not` and explicit DFAs cannot be expressed with plain NFA states; their operands
//! (which never call rules) are determinized eagerly, combined, and embedded as explicit states.

use crate::MaskError;
use regex_syntax::utf8::Utf8Sequences;
use std::collections::HashMap;
use stencil_grammar::{ByteDfa, Expr, Grammar};

pub(crate) type StateId = u32;

#[derive(Debug, Clone)]
pub(crate) enum NState {
    /// Consume one byte in `lo..=hi`, go to `next`.
    Byte { lo: u8, hi: u8, next: StateId },
    /// Epsilon moves.
    Split(Vec<StateId>),
    /// Run `rule`, then continue at `ret`.
    Call { rule: u32, ret: StateId },
    /// The current rule may end here.
    Accept,
}

#[derive(Debug, Clone)]
pub(crate) struct Nfa {
    pub states: Vec<NState>,
    /// Entry state of each rule.
    pub rule_entry: Vec<StateId>,
    pub start_rule: u32,
}

pub(crate) struct Builder<'g> {
    states: Vec<NState>,
    limit: usize,
    memo: HashMap<(usize, StateId), StateId>,
    grammar: Option<&'g Grammar>,
    dfa_limit: usize,
    dfa_memo: HashMap<String, ExplicitDfa>,
}

/// An explicit complete-or-partial DFA: `trans[s][b]` (`DEAD` if none).
#[derive(Debug, Clone)]
pub(crate) struct ExplicitDfa {
    pub trans: Vec<[u32; 256]>,
    pub accept: Vec<bool>,
}

pub(crate) const DEAD: u32 = u32::MAX;

impl Nfa {
    pub fn build(g: &Grammar, limit: usize, dfa_limit: usize) -> Result<Nfa, MaskError> {
        let mut b = Builder {
            states: Vec::new(),
            limit,
            memo: HashMap::new(),
            grammar: Some(g),
            dfa_limit,
            dfa_memo: HashMap::new(),
        };
        let accept = b.push(NState::Accept)?;
        let mut rule_entry = Vec::with_capacity(g.rules.len());
        let trace = *crate::constraint::TRACE;
        for r in &g.rules {
            let before = b.states.len();
            let entry = b.compile(&r.expr, accept)?;
            if trace {
                eprintln!(
                    "rule {:?}: {} NFA states, expression size {}",
                    r.name,
                    b.states.len() - before,
                    r.expr.size()
                );
            }
            rule_entry.push(entry);
        }
        Ok(Nfa {
            states: b.states,
            rule_entry,
            start_rule: g.start.0,
        })
    }
}

impl Builder<'_> {
    fn push(&mut self, s: NState) -> Result<StateId, MaskError> {
        if self.states.len() >= self.limit {
            return Err(MaskError::TooManyStates {
                what: "NFA",
                given: self.states.len() + 1,
                limit: self.limit,
            });
        }
        self.states.push(s);
        Ok(self.states.len() as StateId - 1)
    }

    fn compile(&mut self, e: &Expr, cont: StateId) -> Result<StateId, MaskError> {
        Ok(match e {
            Expr::Empty => cont,
            Expr::Nothing => self.push(NState::Split(vec![]))?,
            Expr::Literal(bytes) => {
                let mut next = cont;
                for &b in bytes.iter().rev() {
                    next = self.push(NState::Byte { lo: b, hi: b, next })?;
                }
                next
            }
            Expr::Bytes(ranges) => {
                if let [(lo, hi)] = ranges.as_slice() {
                    self.push(NState::Byte {
                        lo: *lo,
                        hi: *hi,
                        next: cont,
                    })?
                } else {
                    let mut alts = Vec::with_capacity(ranges.len());
                    for &(lo, hi) in ranges {
                        alts.push(self.push(NState::Byte { lo, hi, next: cont })?);
                    }
                    self.push(NState::Split(alts))?
                }
            }
            Expr::Chars(set) => {
                let mut alts = Vec::new();
                for &(a, b) in set.ranges() {
                    for seq in Utf8Sequences::new(a, b) {
                        let mut next = cont;
                        for r in seq.as_slice().iter().rev() {
                            next = self.push(NState::Byte {
                                lo: r.start,
                                hi: r.end,
                                next,
                            })?;
                        }
                        alts.push(next);
                    }
                }
                if alts.len() == 1 {
                    alts[0]
                } else {
                    self.push(NState::Split(alts))?
                }
            }
            Expr::Concat(parts) => {
                let mut next = cont;
                for p in parts.iter().rev() {
                    next = self.compile(p, next)?;
                }
                next
            }
            Expr::Alt(parts) => {
                let mut alts = Vec::with_capacity(parts.len());
                for p in parts {
                    alts.push(self.compile(p, cont)?);
                }
                self.push(NState::Split(alts))?
            }
            Expr::Repeat { expr, min, max } => {
                let mut next = match max {
                    None => {
                        let lp = self.push(NState::Split(vec![]))?;
                        let body = self.compile(expr, lp)?;
                        self.states[lp as usize] = NState::Split(vec![body, cont]);
                        lp
                    }
                    Some(max) => {
                        let mut next = cont;
                        for _ in 0..max.saturating_sub(*min) {
                            let body = self.compile(expr, next)?;
                            next = self.push(NState::Split(vec![body, cont]))?;
                        }
                        next
                    }
                };
                for _ in 0..*min {
                    next = self.compile(expr, next)?;
                }
                next
            }
            Expr::Call(r) => self.push(NState::Call {
                rule: r.0,
                ret: cont,
            })?,
            Expr::Shared(inner) => {
                let key = (std::sync::Arc::as_ptr(inner) as usize, cont);
                if let Some(&s) = self.memo.get(&key) {
                    return Ok(s);
                }
                let s = self.compile(&inner.expr, cont)?;
                self.memo.insert(key, s);
                s
            }
            Expr::And(_) | Expr::Not(_) | Expr::Dfa(_) => {
                let dfa = self.materialize(e)?;
                self.embed(&dfa, cont)?
            }
        })
    }

    /// Embeds an explicit DFA whose accepting states continue at `cont`.
    fn embed(&mut self, dfa: &ExplicitDfa, cont: StateId) -> Result<StateId, MaskError> {
        let base = self.states.len() as StateId;
        for _ in 0..dfa.trans.len() {
            self.push(NState::Split(vec![]))?;
        }
        for (s, row) in dfa.trans.iter().enumerate() {
            let mut alts = Vec::new();
            let mut b = 0usize;
            while b < 256 {
                let t = row[b];
                let mut e = b;
                while e + 1 < 256 && row[e + 1] == t {
                    e += 1;
                }
                if t != DEAD {
                    alts.push(self.push(NState::Byte {
                        lo: b as u8,
                        hi: e as u8,
                        next: base + t,
                    })?);
                }
                b = e + 1;
            }
            if dfa.accept[s] {
                alts.push(cont);
            }
            self.states[(base + s as StateId) as usize] = NState::Split(alts);
        }
        Ok(base)
    }

    /// Determinizes a call-free expression into an explicit DFA, once per distinct expression
    /// (schemas repeat the same key and string languages many times).
    fn materialize(&mut self, e: &Expr) -> Result<ExplicitDfa, MaskError> {
        let key = format!("{e:?}");
        if let Some(d) = self.dfa_memo.get(&key) {
            return Ok(d.clone());
        }
        let d = self.materialize_uncached(e)?;
        self.dfa_memo.insert(key, d.clone());
        Ok(d)
    }

    fn materialize_uncached(&mut self, e: &Expr) -> Result<ExplicitDfa, MaskError> {
        if e.has_call() {
            return Err(MaskError::Grammar(
                stencil_grammar::GrammarError::InvalidSchema {
                    pointer: "#".into(),
                    reason: "intersection or complement of a recursive subexpression".into(),
                },
            ));
        }
        match e {
            Expr::And(parts) => {
                let mut acc = self.materialize(&parts[0])?;
                for p in &parts[1..] {
                    let d = self.materialize(p)?;
                    acc = product(&acc, &d, self.dfa_limit)?;
                }
                Ok(acc)
            }
            Expr::Not(inner) => Ok(complement(&self.materialize(inner)?)),
            Expr::Dfa(d) => Ok(from_byte_dfa(d)),
            Expr::Shared(inner) => self.materialize(&inner.expr),
            other => {
                let mut sub = Builder {
                    states: Vec::new(),
                    limit: self.limit,
                    memo: HashMap::new(),
                    grammar: self.grammar,
                    dfa_limit: self.dfa_limit,
                    dfa_memo: std::mem::take(&mut self.dfa_memo),
                };
                let accept = sub.push(NState::Accept)?;
                let entry = sub.compile(other, accept);
                self.dfa_memo = std::mem::take(&mut sub.dfa_memo);
                determinize(&sub.states, entry?, self.dfa_limit)
            }
        }
    }
}

/// Epsilon closure over `Split` states, with reusable scratch space.
pub(crate) struct Closure {
    mark: Vec<u32>,
    generation: u32,
    stack: Vec<StateId>,
}

impl Closure {
    pub fn new(n: usize) -> Self {
        Self {
            mark: vec![0; n],
            generation: 0,
            stack: Vec::new(),
        }
    }

    /// The byte, call and accept states reachable from `seeds` by epsilon moves, sorted.
    pub fn run(&mut self, states: &[NState], seeds: &[StateId], out: &mut Vec<StateId>) {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.mark.fill(0);
            self.generation = 1;
        }
        out.clear();
        self.stack.clear();
        self.stack.extend_from_slice(seeds);
        while let Some(s) = self.stack.pop() {
            let m = &mut self.mark[s as usize];
            if *m == self.generation {
                continue;
            }
            *m = self.generation;
            match &states[s as usize] {
                NState::Split(v) => self.stack.extend(v.iter()),
                _ => out.push(s),
            }
        }
        out.sort_unstable();
    }
}

fn determinize(states: &[NState], entry: StateId, limit: usize) -> Result<ExplicitDfa, MaskError> {
    // Bytes no transition distinguishes behave alike: step one representative per class.
    let mut boundary = [false; 257];
    boundary[0] = true;
    for s in states {
        if let NState::Byte { lo, hi, .. } = *s {
            boundary[lo as usize] = true;
            boundary[hi as usize + 1] = true;
        }
    }
    let mut classes: Vec<(u8, u8)> = Vec::new();
    let mut start_b = 0usize;
    for (b, &is_start) in boundary.iter().enumerate().skip(1) {
        if is_start {
            classes.push((start_b as u8, (b - 1) as u8));
            start_b = b;
        }
    }
    let mut cl = Closure::new(states.len());
    let mut map: HashMap<Vec<StateId>, u32> = HashMap::new();
    let mut sets: Vec<Vec<StateId>> = Vec::new();
    let mut start = Vec::new();
    cl.run(states, &[entry], &mut start);
    map.insert(start.clone(), 0);
    sets.push(start);
    let mut out = ExplicitDfa {
        trans: Vec::new(),
        accept: Vec::new(),
    };
    let mut seeds = Vec::new();
    let mut next = Vec::new();
    let mut i = 0;
    while i < sets.len() {
        let mut row = [DEAD; 256];
        let accept = sets[i]
            .iter()
            .any(|&s| matches!(states[s as usize], NState::Accept));
        for &(lo, hi) in &classes {
            seeds.clear();
            for &s in &sets[i] {
                if let NState::Byte { lo: a, hi: b, next } = states[s as usize] {
                    if a <= lo && lo <= b {
                        seeds.push(next);
                    }
                }
            }
            if seeds.is_empty() {
                continue;
            }
            cl.run(states, &seeds, &mut next);
            let id = match map.get(&next) {
                Some(&id) => id,
                None => {
                    let id = sets.len() as u32;
                    if sets.len() >= limit {
                        return Err(MaskError::TooManyStates {
                            what: "intersection DFA",
                            given: sets.len() + 1,
                            limit,
                        });
                    }
                    map.insert(next.clone(), id);
                    sets.push(next.clone());
                    id
                }
            };
            row[lo as usize..=hi as usize].fill(id);
        }
        out.trans.push(row);
        out.accept.push(accept);
        i += 1;
    }
    Ok(out)
}

fn from_byte_dfa(d: &ByteDfa) -> ExplicitDfa {
    let mut out = ExplicitDfa {
        trans: Vec::with_capacity(d.states.len()),
        accept: Vec::with_capacity(d.states.len()),
    };
    for s in &d.states {
        let mut row = [DEAD; 256];
        for &(lo, hi, t) in &s.transitions {
            for b in lo..=hi {
                row[b as usize] = t;
            }
        }
        out.trans.push(row);
        out.accept.push(s.accepting);
    }
    if out.trans.is_empty() {
        out.trans.push([DEAD; 256]);
        out.accept.push(false);
    }
    out
}

/// Complement over all byte strings: complete the DFA with a sink, flip acceptance.
fn complement(d: &ExplicitDfa) -> ExplicitDfa {
    let sink = d.trans.len() as u32;
    let mut out = ExplicitDfa {
        trans: d.trans.clone(),
        accept: d.accept.iter().map(|a| !a).collect(),
    };
    for row in &mut out.trans {
        for t in row.iter_mut() {
            if *t == DEAD {
                *t = sink;
            }
        }
    }
    out.trans.push([sink; 256]);
    out.accept.push(true);
    out
}

/// Byte ranges that no row of `dfas` tells apart.
fn joint_classes(dfas: &[&ExplicitDfa]) -> Vec<(u8, u8)> {
    let mut boundary = [false; 256];
    boundary[0] = true;
    for d in dfas {
        for row in &d.trans {
            for b in 1..256 {
                if row[b] != row[b - 1] {
                    boundary[b] = true;
                }
            }
        }
    }
    let mut classes = Vec::new();
    let mut start = 0usize;
    for (b, &is_start) in boundary.iter().enumerate().skip(1).chain([(256, &true)]) {
        if is_start {
            classes.push((start as u8, (b - 1) as u8));
            start = b;
        }
    }
    classes
}

fn product(a: &ExplicitDfa, b: &ExplicitDfa, limit: usize) -> Result<ExplicitDfa, MaskError> {
    let classes = joint_classes(&[a, b]);
    let mut map: HashMap<(u32, u32), u32> = HashMap::new();
    let mut pairs = vec![(0u32, 0u32)];
    map.insert((0, 0), 0);
    let mut out = ExplicitDfa {
        trans: Vec::new(),
        accept: Vec::new(),
    };
    let mut i = 0;
    while i < pairs.len() {
        let (x, y) = pairs[i];
        let mut row = [DEAD; 256];
        for &(lo, hi) in &classes {
            let (tx, ty) = (
                a.trans[x as usize][lo as usize],
                b.trans[y as usize][lo as usize],
            );
            if tx == DEAD || ty == DEAD {
                continue;
            }
            let id = match map.get(&(tx, ty)) {
                Some(&id) => id,
                None => {
                    if pairs.len() >= limit {
                        return Err(MaskError::TooManyStates {
                            what: "intersection DFA",
                            given: pairs.len() + 1,
                            limit,
                        });
                    }
                    let id = pairs.len() as u32;
                    map.insert((tx, ty), id);
                    pairs.push((tx, ty));
                    id
                }
            };
            row[lo as usize..=hi as usize].fill(id);
        }
        out.trans.push(row);
        out.accept
            .push(a.accept[x as usize] && b.accept[y as usize]);
        i += 1;
    }
    Ok(trim(out))
}

/// Removes transitions into states that cannot reach acceptance (keeps state 0), so dead
/// prefixes die early. Backward search from the accepting states.
fn trim(d: ExplicitDfa) -> ExplicitDfa {
    let n = d.trans.len();
    let mut preds: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (s, row) in d.trans.iter().enumerate() {
        let mut last = DEAD;
        for &t in row.iter() {
            if t != DEAD && t != last {
                preds[t as usize].push(s as u32);
                last = t;
            }
        }
    }
    let mut live = d.accept.clone();
    let mut stack: Vec<u32> = (0..n as u32).filter(|&s| live[s as usize]).collect();
    while let Some(t) = stack.pop() {
        for &p in &preds[t as usize] {
            if !live[p as usize] {
                live[p as usize] = true;
                stack.push(p);
            }
        }
    }
    let mut out = d;
    for row in &mut out.trans {
        for t in row.iter_mut() {
            if *t != DEAD && !live[*t as usize] {
                *t = DEAD;
            }
        }
    }
    out
}
