//! Shortest completions: for each DFA state, the fewest bytes that finish its rule, and the
//! first move of one such completion.
//!
//! A token budget needs to know, for a parse, whether the output can still be finished in the
//! tokens left. Each DFA state gets, on first use, the length of a shortest byte string that
//! takes it to the end of its rule (rule calls cost the callee's own shortest completion) and
//! the first move of that string. The moves form a tree: the completion of a state is its
//! move followed by the completion of where the move leads, so the completion of every state
//! on a completion's path is a suffix of it. That is what makes a budget built on these
//! strings consistent: writing the first token of a completion's tokenization leaves exactly
//! the rest of that tokenization to write.
//!
//! Lengths come from a forward Dijkstra search over the lazily built automaton (byte edges cost
//! one, a call edge costs the callee's length), stopping at accepting states and at states
//! whose length is already known; every state on the path found is memoized.

use crate::dfa::{LazyDfa, DEAD};
use crate::hash::FxHashMap;
use crate::MaskError;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Not computed yet.
const UNKNOWN: u32 = u32::MAX;
/// No completion: the rule cannot end from this state.
pub(crate) const NEVER: u32 = u32::MAX - 1;
/// Being computed (a recursive rule's start, reached again through its own calls).
const IN_PROGRESS: u32 = u32::MAX - 2;

/// The first move of a state's shortest completion.
#[derive(Debug, Clone, Copy)]
enum Move {
    /// The state is accepting: its rule may end here.
    Accept,
    /// Write this byte, then continue from the state it leads to.
    Byte(u8, u32),
    /// Call a rule (its start state), then continue from the return state.
    Call(u32, u32),
}

/// Memoized shortest completions of a [`LazyDfa`]'s states (indexed by state id).
#[derive(Default)]
pub(crate) struct Completions {
    len: Vec<u32>,
    moves: Vec<Move>,
}

impl Completions {
    fn grow(&mut self, states: usize) {
        if self.len.len() < states {
            self.len.resize(states, UNKNOWN);
            self.moves.resize(states, Move::Accept);
        }
    }

    fn set(&mut self, s: u32, len: u32, mv: Move) {
        self.grow(s as usize + 1);
        self.len[s as usize] = len;
        self.moves[s as usize] = mv;
    }

    /// Bytes of a shortest string that takes `s` to the end of its rule ([`NEVER`] if none).
    pub fn len(&mut self, dfa: &mut LazyDfa, s: u32) -> Result<u32, MaskError> {
        self.grow(dfa.num_states());
        match self.len[s as usize] {
            UNKNOWN => self.search(dfa, s),
            IN_PROGRESS => Ok(NEVER),
            n => Ok(n),
        }
    }

    /// Dijkstra from `root` to the nearest accepting (or already solved) state.
    fn search(&mut self, dfa: &mut LazyDfa, root: u32) -> Result<u32, MaskError> {
        if dfa.accepting(root) {
            self.set(root, 0, Move::Accept);
            return Ok(0);
        }
        self.len[root as usize] = IN_PROGRESS;
        let result = self.dijkstra(dfa, root);
        if self.len[root as usize] == IN_PROGRESS {
            // No path memoized the root: it cannot complete, unless a recursive call was cut
            // (or the search failed), when nothing is known yet.
            self.len[root as usize] = match result {
                Ok((NEVER, false)) => NEVER,
                _ => UNKNOWN,
            };
        }
        result.map(|(n, _)| n)
    }

    /// The root's length, and whether a recursive call was left out on the way.
    fn dijkstra(&mut self, dfa: &mut LazyDfa, root: u32) -> Result<(u32, bool), MaskError> {
        // Settled distance and the edge that reached each state.
        let mut dist: FxHashMap<u32, u32> = FxHashMap::default();
        let mut from: FxHashMap<u32, (u32, Move)> = FxHashMap::default();
        // (distance, state, finish): a finish entry ends the search through an already
        // solved state.
        let mut heap: BinaryHeap<Reverse<(u32, u32, bool)>> = BinaryHeap::new();
        dist.insert(root, 0);
        heap.push(Reverse((0, root, false)));
        let mut cut = false;
        let mut found: Option<(u32, u32)> = None;
        while let Some(Reverse((d, u, finish))) = heap.pop() {
            if finish {
                found = Some((d, u));
                break;
            }
            if dist.get(&u).is_some_and(|&x| x < d) {
                continue;
            }
            if u != root {
                let known = self.len.get(u as usize).copied().unwrap_or(UNKNOWN);
                if dfa.accepting(u) || (known != UNKNOWN && known != IN_PROGRESS) {
                    let rest = if dfa.accepting(u) { 0 } else { known };
                    if rest != NEVER {
                        heap.push(Reverse((d.saturating_add(rest), u, true)));
                    }
                    continue;
                }
            }
            let mut relax = |t: u32, nd: u32, mv: Move, heap: &mut BinaryHeap<_>| {
                if dist.get(&t).is_none_or(|&x| nd < x) {
                    dist.insert(t, nd);
                    from.insert(t, (u, mv));
                    heap.push(Reverse((nd, t, false)));
                }
            };
            let mut b = 0u16;
            while b <= 255 {
                let end = dfa.class_end(b as u8);
                let t = dfa.next(u, b as u8)?;
                if t != DEAD {
                    relax(t, d + 1, Move::Byte(b as u8, t), &mut heap);
                }
                b = end as u16 + 1;
            }
            if dfa.has_calls(u) {
                let calls: Vec<(u32, u32)> = dfa.calls(u)?.to_vec();
                for (start, ret) in calls {
                    self.grow(dfa.num_states());
                    let callee = match self.len[start as usize] {
                        IN_PROGRESS => {
                            cut = true;
                            continue;
                        }
                        UNKNOWN => self.search(dfa, start)?,
                        n => n,
                    };
                    if callee == NEVER {
                        continue;
                    }
                    relax(
                        ret,
                        d.saturating_add(callee),
                        Move::Call(start, ret),
                        &mut heap,
                    );
                }
            }
        }
        self.grow(dfa.num_states());
        let Some((total, last)) = found else {
            return Ok((NEVER, cut));
        };
        if dfa.accepting(last) && self.len[last as usize] == UNKNOWN {
            self.set(last, 0, Move::Accept);
        }
        // Memoize every state on the path (suffixes of a shortest path are shortest).
        let mut at = last;
        while at != root {
            let (prev, mv) = from[&at];
            let here = total - dist[&prev];
            if matches!(self.len[prev as usize], UNKNOWN | IN_PROGRESS) {
                self.set(prev, here, mv);
            }
            at = prev;
        }
        Ok((total, cut))
    }

    /// Appends the shortest completion of `s` (whose length must have been computed and be
    /// finite) to `out`. Stops with an error past `limit` bytes (never expected: lengths
    /// strictly order the moves, but a corrupted tree must not loop).
    pub fn write(&self, s: u32, out: &mut Vec<u8>, limit: usize) -> Result<(), MaskError> {
        let mut pending = vec![s];
        let mut steps = 0usize;
        while let Some(mut x) = pending.pop() {
            loop {
                steps += 1;
                if steps > 4 * limit + 64 || out.len() > limit {
                    return Err(MaskError::TooMuchWork {
                        limit: limit as u64,
                    });
                }
                match self.moves.get(x as usize) {
                    None | Some(Move::Accept) => break,
                    Some(&Move::Byte(b, t)) => {
                        out.push(b);
                        x = t;
                    }
                    Some(&Move::Call(start, ret)) => {
                        pending.push(ret);
                        x = start;
                    }
                }
            }
        }
        Ok(())
    }
}
