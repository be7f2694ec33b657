//! [`LazyDfa`]: subset construction over the grammar NFA, one state at a time, on demand.
//!
//! State ids are stable for the life of the automaton (no cache flushes), so they can key the
//! per-state mask cache. A DFA state is a set of NFA states of possibly several rules; its
//! rule calls are kept aside and followed by the matcher, which owns the stack.

use crate::nfa::{Closure, NState, Nfa, StateId};
use crate::MaskError;
use std::collections::HashMap;

/// The empty set: no continuation.
pub(crate) const DEAD: u32 = 0;
const UNKNOWN: u32 = u32::MAX;

pub(crate) struct StateInfo {
    pub accepting: bool,
    /// `(callee start state, return state)` pairs, computed on first use.
    pub calls: Option<Box<[(u32, u32)]>>,
    pub has_calls: bool,
}

pub(crate) struct LazyDfa {
    nfa: Nfa,
    sets: Vec<Box<[StateId]>>,
    map: HashMap<Box<[StateId]>, u32>,
    trans: Vec<[u32; 256]>,
    pub info: Vec<StateInfo>,
    rule_start: Vec<u32>,
    closure: Closure,
    scratch: Vec<StateId>,
    seeds: Vec<StateId>,
    limit: usize,
    /// Byte equivalence classes of the NFA: bytes no transition tells apart. A transition is
    /// computed once per class and filled in for all its bytes.
    class_of: [u8; 256],
    class_bytes: Vec<Vec<u8>>,
    /// Work left (NFA states visited by new transitions) before the current operation is
    /// refused with [`MaskError::TooMuchWork`].
    fuel: u64,
    fuel_limit: u64,
}

/// Byte classes from the boundaries of every byte range in the NFA.
fn byte_classes(nfa: &Nfa) -> ([u8; 256], Vec<Vec<u8>>) {
    let mut boundary = [false; 257];
    boundary[0] = true;
    for st in &nfa.states {
        if let NState::Byte { lo, hi, .. } = *st {
            boundary[lo as usize] = true;
            boundary[hi as usize + 1] = true;
        }
    }
    let mut class_of = [0u8; 256];
    let mut classes: Vec<Vec<u8>> = Vec::new();
    for b in 0..256usize {
        if boundary[b] {
            classes.push(Vec::new());
        }
        let c = classes.len() - 1;
        class_of[b] = c as u8;
        classes[c].push(b as u8);
    }
    (class_of, classes)
}

impl LazyDfa {
    pub fn new(nfa: Nfa, limit: usize) -> Self {
        let n = nfa.states.len();
        let rules = nfa.rule_entry.len();
        let (class_of, class_bytes) = byte_classes(&nfa);
        let mut d = Self {
            nfa,
            sets: Vec::new(),
            map: HashMap::new(),
            trans: Vec::new(),
            info: Vec::new(),
            rule_start: vec![UNKNOWN; rules],
            closure: Closure::new(n),
            scratch: Vec::new(),
            seeds: Vec::new(),
            limit,
            class_of,
            class_bytes,
            fuel: u64::MAX,
            fuel_limit: u64::MAX,
        };
        // State 0: the dead state.
        d.sets.push(Box::new([]));
        d.map.insert(Box::new([]), DEAD);
        d.trans.push([DEAD; 256]);
        d.info.push(StateInfo {
            accepting: false,
            calls: Some(Box::new([])),
            has_calls: false,
        });
        d
    }

    /// The last byte of the byte class `b` belongs to (classes are contiguous ranges).
    #[inline]
    pub fn class_end(&self, b: u8) -> u8 {
        *self.class_bytes[self.class_of[b as usize] as usize]
            .last()
            .unwrap_or(&b)
    }

    /// Grants `limit` units of work to the next operation (a mask, a commit).
    pub fn refuel(&mut self, limit: u64) {
        self.fuel = limit;
        self.fuel_limit = limit;
    }

    pub fn num_states(&self) -> usize {
        self.sets.len()
    }

    pub fn start_rule(&self) -> u32 {
        self.nfa.start_rule
    }

    fn intern(&mut self, set: &[StateId]) -> Result<u32, MaskError> {
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
        let boxed: Box<[StateId]> = set.into();
        let mut accepting = false;
        let mut has_calls = false;
        for &s in set {
            match self.nfa.states[s as usize] {
                NState::Accept => accepting = true,
                NState::Call { .. } => has_calls = true,
                _ => {}
            }
        }
        self.map.insert(boxed.clone(), id);
        self.sets.push(boxed);
        self.trans.push([UNKNOWN; 256]);
        self.info.push(StateInfo {
            accepting,
            calls: if has_calls { None } else { Some(Box::new([])) },
            has_calls,
        });
        Ok(id)
    }

    /// The DFA state at the entry of `rule`.
    pub fn rule_start(&mut self, rule: u32) -> Result<u32, MaskError> {
        let r = self.rule_start[rule as usize];
        if r != UNKNOWN {
            return Ok(r);
        }
        let entry = self.nfa.rule_entry[rule as usize];
        let mut out = std::mem::take(&mut self.scratch);
        self.closure.run(&self.nfa.states, &[entry], &mut out);
        let id = self.intern(&out);
        self.scratch = out;
        let id = id?;
        self.rule_start[rule as usize] = id;
        Ok(id)
    }

    /// The state after byte `b` from `s` (`DEAD` if none).
    #[inline]
    pub fn next(&mut self, s: u32, b: u8) -> Result<u32, MaskError> {
        let t = self.trans[s as usize][b as usize];
        if t != UNKNOWN {
            return Ok(t);
        }
        self.compute_next(s, b)
    }

    fn compute_next(&mut self, s: u32, b: u8) -> Result<u32, MaskError> {
        let mut seeds = std::mem::take(&mut self.seeds);
        seeds.clear();
        for &n in self.sets[s as usize].iter() {
            if let NState::Byte { lo, hi, next } = self.nfa.states[n as usize] {
                if lo <= b && b <= hi {
                    seeds.push(next);
                }
            }
        }
        let cost = (self.sets[s as usize].len() + 1) as u64;
        if cost > self.fuel {
            self.seeds = seeds;
            return Err(MaskError::TooMuchWork {
                limit: self.fuel_limit,
            });
        }
        self.fuel -= cost;
        let t = if seeds.is_empty() {
            Ok(DEAD)
        } else {
            let mut out = std::mem::take(&mut self.scratch);
            self.closure.run(&self.nfa.states, &seeds, &mut out);
            let t = self.intern(&out);
            self.scratch = out;
            t
        };
        self.seeds = seeds;
        let t = t?;
        let row = &mut self.trans[s as usize];
        for &x in &self.class_bytes[self.class_of[b as usize] as usize] {
            row[x as usize] = t;
        }
        Ok(t)
    }

    /// Rule calls possible from `s`: `(callee start, state to return to)`.
    pub fn calls(&mut self, s: u32) -> Result<&[(u32, u32)], MaskError> {
        if self.info[s as usize].calls.is_none() {
            let mut by_rule: Vec<(u32, Vec<StateId>)> = Vec::new();
            for &n in self.sets[s as usize].iter() {
                if let NState::Call { rule, ret } = self.nfa.states[n as usize] {
                    match by_rule.iter_mut().find(|(r, _)| *r == rule) {
                        Some((_, rets)) => rets.push(ret),
                        None => by_rule.push((rule, vec![ret])),
                    }
                }
            }
            let mut calls = Vec::with_capacity(by_rule.len());
            for (rule, rets) in by_rule {
                let start = self.rule_start(rule)?;
                let mut out = Vec::new();
                self.closure.run(&self.nfa.states, &rets, &mut out);
                let ret = self.intern(&out)?;
                calls.push((start, ret));
            }
            self.info[s as usize].calls = Some(calls.into_boxed_slice());
        }
        Ok(self.info[s as usize].calls.as_deref().unwrap_or(&[]))
    }

    #[inline]
    pub fn accepting(&self, s: u32) -> bool {
        self.info[s as usize].accepting
    }

    #[inline]
    pub fn has_calls(&self, s: u32) -> bool {
        self.info[s as usize].has_calls
    }
}
