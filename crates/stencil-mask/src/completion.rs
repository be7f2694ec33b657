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
//! Lengths come from a search over the lazily built automaton guided by the NFA's lower bounds
//! (`LazyDfa::lower`): first a dive that follows bytes lowering the bound by one, which ends
//! along a shortest completion wherever the bound is exact (JSON literals, strings, explicit
//! machines) and builds one state per byte; else A* (byte edges cost one, a call edge costs
//! the callee's length), stopping at accepting states and at states whose length is already
//! known. Every state on the path found is memoized.

use crate::dfa::{LazyDfa, DEAD};
use crate::hash::{FxHashMap, FxHashSet};
use crate::MaskError;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Not computed yet.
const UNKNOWN: u32 = u32::MAX;
/// No completion: the rule cannot end from this state.
pub(crate) const NEVER: u32 = u32::MAX - 1;
/// Being computed (a recursive rule's start, reached again through its own calls).
const IN_PROGRESS: u32 = u32::MAX - 2;

/// Heap entry kinds of the search (see `Completions::astar`).
const FINISH: u8 = 0;
const EXPAND: u8 = 1;

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

    /// The shortest completion of `root`: a dive, else A* to the nearest accepting (or already
    /// solved) state.
    fn search(&mut self, dfa: &mut LazyDfa, root: u32) -> Result<u32, MaskError> {
        if dfa.accepting(root) {
            self.set(root, 0, Move::Accept);
            return Ok(0);
        }
        if let Some(n) = self.dive(dfa, root)? {
            return Ok(n);
        }
        self.len[root as usize] = IN_PROGRESS;
        let result = self.astar(dfa, root);
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

    /// Follows the lower bounds of [`LazyDfa::lower`] down from `root`: a byte whose
    /// successor's bound is one less at every step. Reaching the end of the rule that way
    /// matches the root's bound, so the path is a shortest completion (its states are
    /// memoized); where a bound is not exact the dive gives up (`None`) for the full search.
    fn dive(&mut self, dfa: &mut LazyDfa, root: u32) -> Result<Option<u32>, MaskError> {
        let (total, _) = dfa.lower(root);
        if total >= IN_PROGRESS {
            return Ok(None);
        }
        let mut path: Vec<(u32, u8, u32)> = Vec::new();
        let (mut x, mut h) = (root, total);
        while !dfa.accepting(x) {
            self.grow(dfa.num_states());
            if x != root {
                match self.len[x as usize] {
                    UNKNOWN => {}
                    n if n == h => break,
                    _ => return Ok(None),
                }
            }
            if h == 0 {
                return Ok(None);
            }
            let Some((b, t)) = Self::step_down(dfa, x, h)? else {
                return Ok(None);
            };
            path.push((x, b, t));
            (x, h) = (t, h - 1);
        }
        if h != 0 && dfa.accepting(x) {
            return Ok(None);
        }
        self.grow(dfa.num_states());
        if dfa.accepting(x) && self.len[x as usize] == UNKNOWN {
            self.set(x, 0, Move::Accept);
        }
        for (i, &(s, b, t)) in path.iter().enumerate() {
            self.set(s, total - i as u32, Move::Byte(b, t));
        }
        Ok(Some(total))
    }

    /// A byte from `x` (bound `h`) to a state whose bound is `h - 1`: the bound's own byte
    /// first, then every byte class.
    fn step_down(dfa: &mut LazyDfa, x: u32, h: u32) -> Result<Option<(u8, u32)>, MaskError> {
        if let (_, Some(b)) = dfa.lower(x) {
            let t = dfa.next(x, b)?;
            if t != DEAD && dfa.lower(t).0 == h - 1 {
                return Ok(Some((b, t)));
            }
        }
        let mut b = 0u16;
        while b <= 255 {
            let t = dfa.next(x, b as u8)?;
            if t != DEAD && dfa.lower(t).0 == h - 1 {
                return Ok(Some((b as u8, t)));
            }
            b = dfa.class_end(b as u8) as u16 + 1;
        }
        Ok(None)
    }

    /// The root's length, and whether a recursive call was left out on the way.
    fn astar(&mut self, dfa: &mut LazyDfa, root: u32) -> Result<(u32, bool), MaskError> {
        // Best known distance and the edge that reached each state; states expanded.
        let mut dist: FxHashMap<u32, u32> = FxHashMap::default();
        let mut from: FxHashMap<u32, (u32, Move)> = FxHashMap::default();
        let mut closed: FxHashSet<u32> = FxHashSet::default();
        // (distance + lower bound, kind, state): A* with the consistent bounds of
        // `LazyDfa::lower`. A FINISH entry (exact total) ends the search through an accepting
        // or already solved state; at equal priority it comes first, so nothing at the
        // answer's priority is expanded (expanding builds every successor).
        let mut heap: BinaryHeap<Reverse<(u32, u8, u32)>> = BinaryHeap::new();
        dist.insert(root, 0);
        heap.push(Reverse((dfa.lower(root).0, EXPAND, root)));
        let mut cut = false;
        let mut found: Option<(u32, u32)> = None;
        let mut edges: Vec<(u32, u32, Move)> = Vec::new();
        while let Some(Reverse((f, kind, u))) = heap.pop() {
            if kind == FINISH {
                found = Some((f, u));
                break;
            }
            if !closed.insert(u) {
                continue;
            }
            let d = dist[&u];
            edges.clear();
            let mut b = 0u16;
            while b <= 255 {
                let end = dfa.class_end(b as u8);
                let t = dfa.next(u, b as u8)?;
                if t != DEAD {
                    edges.push((t, d + 1, Move::Byte(b as u8, t)));
                }
                b = end as u16 + 1;
            }
            if dfa.has_calls(u) {
                let calls: Vec<(u32, u32, u32)> = dfa.calls(u)?.to_vec();
                for (start, ret, _) in calls {
                    self.grow(dfa.num_states());
                    let callee = match self.len[start as usize] {
                        IN_PROGRESS => {
                            cut = true;
                            continue;
                        }
                        UNKNOWN => self.search(dfa, start)?,
                        n => n,
                    };
                    if callee != NEVER {
                        edges.push((ret, d.saturating_add(callee), Move::Call(start, ret)));
                    }
                }
            }
            for &(t, nd, mv) in &edges {
                if closed.contains(&t) || dist.get(&t).is_some_and(|&x| x <= nd) {
                    continue;
                }
                let known = self.len.get(t as usize).copied().unwrap_or(UNKNOWN);
                let entry = if dfa.accepting(t) {
                    (nd, FINISH)
                } else if known == NEVER {
                    continue;
                } else if known != UNKNOWN && known != IN_PROGRESS {
                    (nd.saturating_add(known), FINISH)
                } else {
                    match dfa.lower(t).0 {
                        // No item of `t` can finish its rule.
                        UNKNOWN => continue,
                        h => (nd.saturating_add(h), EXPAND),
                    }
                };
                dist.insert(t, nd);
                from.insert(t, (u, mv));
                heap.push(Reverse((entry.0, entry.1, t)));
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
