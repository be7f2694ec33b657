//! [`Counted`]: a string language intersected with a length bound in characters
//! (`pattern`/`format` with `minLength`/`maxLength`), stepped lazily and pruned exactly.
//!
//! The eager product of a pattern's DFA with a length counter has |pattern| x maxLength states
//! (millions for `maxLength: 5000`). Here a state is `(p, c, n)`: the pattern's DFA state, the
//! state of a decoder of JSON string characters (UTF-8 and escapes; state 0 is "between
//! characters") and the characters seen. States are made only when reached, and a state is
//! kept only if some completion is accepted by the pattern with a total length within the
//! bounds: for every pattern state the lengths (in characters) of its accepted completions
//! form an eventually periodic set, computed once, so the check is a table lookup.

use crate::hash::{FxHashMap, FxHashSet};
use crate::machine::{classes_with_reps, joint_classes, Discovered, Machine, DEAD};
use crate::MaskError;
use std::sync::Arc;

/// No upper bound on the length.
pub(crate) const UNBOUNDED: u32 = u32::MAX;

/// Most steps spent looking for the period of a completion-length table.
const MAX_LENGTH_STEPS: usize = 100_000;

#[derive(Clone)]
pub(crate) struct Counted {
    pattern: Arc<Machine>,
    chars: Arc<Machine>,
    min: u32,
    max: u32,
    /// Joint byte classes of the two machines, one representative byte each.
    reps: Vec<u8>,
    states: Vec<(u32, u32, u32)>,
    ids: FxHashMap<(u32, u32, u32), u32>,
    /// Per state: 0 unknown, 1 viable, 2 dead.
    viable: Vec<u8>,
    lengths: Lengths,
    limit: usize,
    /// Pattern states where the current character can end, per mid-character `(p, c)`.
    completions: FxHashMap<(u32, u32), Box<[u32]>>,
    /// Characters one token can add, plus the longest shortest completion of a pattern state,
    /// plus one: from a state past the minimum and at least this far from the maximum, every
    /// token goes the same way (see [`Counted::canonical`]).
    margin: u64,
    /// The most bytes from any pattern-and-character state reachable from the start to an
    /// accepting one, ignoring the count, and the most bytes of one character, computed on
    /// first use (`Some(None)`: too many states to find out).
    joint_reach: Option<Option<(u32, u32)>>,
}

/// Most pattern-and-character states searched for [`Counted::reach`].
const MAX_JOINT_STATES: usize = 200_000;

/// For each pattern state, the numbers of characters of its accepted completions.
#[derive(Clone)]
struct Lengths {
    /// Per pattern state: sorted, disjoint intervals of lengths `k < known` that complete it.
    intervals: Vec<Vec<(u32, u32)>>,
    /// Lengths below this are listed exactly.
    known: u32,
    /// `(start, period)`: from `start` on, membership repeats with `period` (the sets for
    /// `known` and for `start` are equal). `None` when the table was cut at the maximum.
    periodic: Option<(u32, u32)>,
}

impl Lengths {
    fn any_in(&self, p: u32, lo: u32, hi: u32) -> bool {
        if lo > hi {
            return false;
        }
        let iv = &self.intervals[p as usize];
        // First interval ending at or after `lo`.
        let i = iv.partition_point(|&(_, b)| b < lo);
        iv.get(i).is_some_and(|&(a, _)| a <= hi)
    }

    /// True if some completion of pattern state `p` has a length in `lo..=hi`.
    fn contains(&self, p: u32, lo: u32, hi: u32) -> bool {
        if lo > hi {
            return false;
        }
        let k = self.known;
        if lo < k && self.any_in(p, lo, hi.min(k - 1)) {
            return true;
        }
        let Some((start, period)) = self.periodic else {
            return false;
        };
        if hi < k {
            return false;
        }
        let a = lo.max(k);
        if (hi - a) as u64 + 1 >= period as u64 {
            return self.any_in(p, start, k - 1);
        }
        let ra = start + (a - start) % period;
        let rb = start + (hi - start) % period;
        if ra <= rb {
            self.any_in(p, ra, rb)
        } else {
            self.any_in(p, ra, k - 1) || self.any_in(p, start, rb)
        }
    }
}

impl Counted {
    /// `pattern` and `chars` (the DFA of any sequence of JSON string characters, whose only
    /// accepting state is its start, 0) with `min..=max` characters (`max` may be
    /// [`UNBOUNDED`]); `max_token_chars` bounds the bytes of one token.
    pub fn new(
        pattern: Arc<Machine>,
        chars: Arc<Machine>,
        min: u32,
        max: u32,
        limit: usize,
        max_token_chars: u32,
    ) -> Result<Self, MaskError> {
        let (_, reps) = joint_classes(&pattern, &chars);
        let mut c = Self {
            pattern,
            chars,
            min,
            max,
            reps,
            states: Vec::new(),
            ids: FxHashMap::default(),
            viable: Vec::new(),
            lengths: Lengths {
                intervals: Vec::new(),
                known: 0,
                periodic: None,
            },
            limit,
            completions: FxHashMap::default(),
            margin: u64::MAX,
            joint_reach: None,
        };
        c.lengths = c.completion_lengths()?;
        let longest_shortest = c
            .lengths
            .intervals
            .iter()
            .filter_map(|iv| iv.first().map(|&(a, _)| a))
            .max()
            .unwrap_or(0);
        c.margin = max_token_chars as u64 + longest_shortest as u64 + 1;
        Ok(c)
    }

    /// A state that allows exactly the same tokens as `s` (for sharing mask computations):
    /// past the minimum and far enough from the maximum, the count no longer matters within
    /// one token, so every such count maps to the minimum.
    pub fn canonical(&mut self, s: u32) -> Result<u32, MaskError> {
        let (p, c, n) = self.states[s as usize];
        if self.max == UNBOUNDED
            || n == self.min
            || n < self.min
            || n as u64 + self.margin > self.max as u64
        {
            return Ok(s);
        }
        let id = self.intern((p, c, self.min))?;
        Ok(if self.is_viable(id) { id } else { s })
    }

    /// Pattern states reachable from `(p, c)` by bytes that complete the current character.
    fn char_successors(&self, p: u32, c: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut seen: FxHashSet<(u32, u32)> = FxHashSet::default();
        let mut stack = vec![(p, c)];
        while let Some((p, c)) = stack.pop() {
            for &r in &self.reps {
                let (p2, c2) = (self.pattern.next(p, r), self.chars.next(c, r));
                if p2 == DEAD || c2 == DEAD {
                    continue;
                }
                if c2 == 0 {
                    if !out.contains(&p2) {
                        out.push(p2);
                    }
                } else if seen.insert((p2, c2)) {
                    stack.push((p2, c2));
                }
            }
        }
        out
    }

    /// The table of completion lengths: `R[0]` = accepting states, `R[k+1]` = states with a
    /// one-character move into `R[k]`, until the sequence repeats or passes the maximum.
    fn completion_lengths(&self) -> Result<Lengths, MaskError> {
        let n = self.pattern.num_states();
        let words = n.div_ceil(64);
        let succ: Vec<Vec<u32>> = (0..n as u32).map(|p| self.char_successors(p, 0)).collect();
        let mut cur = vec![0u64; words];
        for p in 0..n {
            if self.pattern.accept[p] {
                cur[p / 64] |= 1 << (p % 64);
            }
        }
        let cap = if self.max == UNBOUNDED {
            MAX_LENGTH_STEPS
        } else {
            (self.max as usize).min(MAX_LENGTH_STEPS)
        };
        let mut intervals: Vec<Vec<(u32, u32)>> = vec![Vec::new(); n];
        let mut first_seen: FxHashMap<Vec<u64>, u32> = FxHashMap::default();
        let mut k: u32 = 0;
        let periodic = loop {
            if let Some(&j) = first_seen.get(&cur) {
                break Some((j, k - j));
            }
            first_seen.insert(cur.clone(), k);
            for (p, iv) in intervals.iter_mut().enumerate() {
                if cur[p / 64] >> (p % 64) & 1 == 1 {
                    match iv.last_mut() {
                        Some((_, b)) if *b + 1 == k => *b = k,
                        _ => iv.push((k, k)),
                    }
                }
            }
            if k as usize >= cap {
                // Past the cap without a period, longer completions are unknown: refuse
                // rather than prune a state that might still be completed.
                if self.max == UNBOUNDED || self.max as usize > cap {
                    return Err(MaskError::TooMuchWork {
                        limit: MAX_LENGTH_STEPS as u64,
                    });
                }
                k += 1;
                break None;
            }
            let mut next = vec![0u64; words];
            for (p, s) in succ.iter().enumerate() {
                if s.iter().any(|&q| cur[q as usize / 64] >> (q % 64) & 1 == 1) {
                    next[p / 64] |= 1 << (p % 64);
                }
            }
            cur = next;
            k += 1;
        };
        Ok(Lengths {
            intervals,
            known: k,
            periodic,
        })
    }

    fn intern(&mut self, st: (u32, u32, u32)) -> Result<u32, MaskError> {
        if let Some(&id) = self.ids.get(&st) {
            return Ok(id);
        }
        if self.states.len() >= self.limit {
            return Err(MaskError::TooManyStates {
                what: "length-bounded string",
                given: self.states.len() + 1,
                limit: self.limit,
            });
        }
        let id = self.states.len() as u32;
        self.states.push(st);
        self.ids.insert(st, id);
        self.viable.push(0);
        Ok(id)
    }

    /// The length after one more character, or `None` past the maximum.
    fn bump(&self, n: u32) -> Option<u32> {
        if self.max == UNBOUNDED {
            Some((n + 1).min(self.min))
        } else if n < self.max {
            Some(n + 1)
        } else {
            None
        }
    }

    fn is_viable(&mut self, id: u32) -> bool {
        match self.viable[id as usize] {
            1 => return true,
            2 => return false,
            _ => {}
        }
        let (p, c, n) = self.states[id as usize];
        let ok = if c == 0 {
            let lo = self.min.saturating_sub(n);
            let hi = if self.max == UNBOUNDED {
                UNBOUNDED
            } else {
                self.max - n
            };
            self.lengths.contains(p, lo, hi)
        } else {
            match self.bump(n) {
                None => false,
                Some(n2) => {
                    let lo = self.min.saturating_sub(n2);
                    let hi = if self.max == UNBOUNDED {
                        UNBOUNDED
                    } else {
                        self.max - n2
                    };
                    if !self.completions.contains_key(&(p, c)) {
                        let succ = self.char_successors(p, c).into_boxed_slice();
                        self.completions.insert((p, c), succ);
                    }
                    self.completions[&(p, c)]
                        .iter()
                        .any(|&q| self.lengths.contains(q, lo, hi))
                }
            }
        };
        self.viable[id as usize] = if ok { 1 } else { 2 };
        ok
    }

    /// A lower bound on the bytes from `s` to an accepting state: the pattern's own distance,
    /// one byte per character still short of the minimum, one to finish a started character;
    /// and the pattern's next byte toward acceptance.
    pub fn lower(&mut self, s: u32) -> (u32, Option<u8>) {
        let (p, c, n) = self.states[s as usize];
        let (dist, byte) = self.pattern.derived().0.get(p);
        let short = self.min.saturating_sub(n).max((c != 0) as u32);
        (dist.max(short), byte)
    }

    /// An upper bound on the bytes that finish the string from any state reachable from `s`
    /// (`None`: the start), or `None` if unknown. With `r` the most bytes any pattern and
    /// character state needs to accept, ignoring the count, and `w` the most bytes of one
    /// character: every state is viable, so it has a completion within the maximum, at most
    /// `w * (max - n)` bytes. At or past the minimum (or before the first character of a
    /// minimum of 1) a state at least `r + 1` characters below the maximum also finishes in
    /// `r` bytes (`r + 1` from the start), and a closer one in at most `w * r`.
    pub fn reach(&mut self, s: Option<u32>) -> Option<u32> {
        let n = s.map_or(0, |s| self.states[s as usize].2);
        let (r, w) = self.joint_reach()?;
        let within_max = match self.max {
            UNBOUNDED => u64::MAX,
            max => w as u64 * max.saturating_sub(n) as u64,
        };
        let past_min = match n >= self.min || self.min == 1 {
            true => (r as u64 + 1).max(w as u64 * r as u64),
            false => u64::MAX,
        };
        let bound = within_max.min(past_min);
        (bound < u32::MAX as u64).then_some(bound as u32)
    }

    fn joint_reach(&mut self) -> Option<(u32, u32)> {
        if let Some(r) = self.joint_reach {
            return r;
        }
        let r = self.find_joint_reach();
        self.joint_reach = Some(r);
        r
    }

    /// Over the product of the pattern and character machines (accepting: a whole character
    /// the pattern accepts): the most bytes a state reachable from the start needs, and the
    /// most bytes of one character on the way to acceptance.
    fn find_joint_reach(&self) -> Option<(u32, u32)> {
        let (joint, pairs) =
            Machine::product_with_pairs(&self.pattern, &self.chars, MAX_JOINT_STATES).ok()?;
        let r = joint.derived().1?;
        // Bytes from each state to the next character boundary, at most (the character
        // decoder's mid-character states have no cycle; one would leave it unknown).
        let mut run: Vec<Option<u32>> = vec![None; pairs.len()];
        fn longest(
            i: usize,
            joint: &Machine,
            pairs: &[(u32, u32)],
            run: &mut [Option<u32>],
            depth: u32,
        ) -> Option<u32> {
            if let Some(n) = run[i] {
                return Some(n);
            }
            if depth > 64 {
                return None;
            }
            let k = joint.nclasses;
            let mut most = 0;
            for &j in joint.trans[i * k..(i + 1) * k]
                .iter()
                .filter(|&&j| j != DEAD)
            {
                let rest = match pairs[j as usize].1 {
                    0 => 0,
                    _ => longest(j as usize, joint, pairs, run, depth + 1)?,
                };
                most = most.max(1 + rest);
            }
            run[i] = Some(most);
            Some(most)
        }
        let mut w = 1;
        for i in 0..pairs.len() {
            if pairs[i].1 == 0 {
                w = w.max(longest(i, &joint, &pairs, &mut run, 0)?);
            }
        }
        Some((r, w))
    }

    /// The start state, if any string is accepted at all.
    pub fn start(&mut self) -> Result<Option<u32>, MaskError> {
        let id = self.intern((0, 0, 0))?;
        Ok(self.is_viable(id).then_some(id))
    }

    /// The state after byte `b`, if it can still be completed.
    pub fn next(&mut self, s: u32, b: u8) -> Result<Option<u32>, MaskError> {
        let (p, c, n) = self.states[s as usize];
        let (p2, c2) = (self.pattern.next(p, b), self.chars.next(c, b));
        if p2 == DEAD || c2 == DEAD {
            return Ok(None);
        }
        let n2 = if c2 == 0 {
            match self.bump(n) {
                Some(n2) => n2,
                None => return Ok(None),
            }
        } else {
            n
        };
        let id = self.intern((p2, c2, n2))?;
        Ok(self.is_viable(id).then_some(id))
    }

    pub fn accept(&self, s: u32) -> bool {
        let (p, c, n) = self.states[s as usize];
        c == 0 && n >= self.min && self.pattern.accept[p as usize]
    }

    /// False when no byte can follow (the maximum is reached at a character boundary).
    pub fn live(&self, s: u32) -> bool {
        let (p, c, n) = self.states[s as usize];
        self.pattern.live[p as usize] && !(c == 0 && self.max != UNBOUNDED && n >= self.max)
    }

    /// The same language as an explicit DFA (for complements and products), by enumerating
    /// the reachable viable states: two table lookups per transition, no item sets.
    pub fn enumerate(&mut self, limit: usize) -> Result<Machine, MaskError> {
        let (class_of, reps) = joint_classes(&self.pattern, &self.chars);
        let k = reps.len();
        let Some(start) = self.start()? else {
            return Ok(Machine::from_rows(class_of, k, vec![DEAD; k], vec![false]));
        };
        let mut states = Discovered::new(start, limit);
        let mut trans = Vec::new();
        let mut accept = Vec::new();
        let mut i = 0;
        while i < states.order.len() {
            let s = states.order[i];
            for &r in &reps {
                match self.next(s, r)? {
                    None => trans.push(DEAD),
                    Some(t) => trans.push(states.id(t)?),
                }
            }
            accept.push(self.accept(s));
            i += 1;
        }
        Ok(Machine::from_rows(class_of, k, trans, accept))
    }

    /// The strings of `a` that this language does not contain, as an explicit DFA: the
    /// product of `a` with the complement, stepped lazily, so only the states `a`'s strings
    /// reach are made (an IPv4 address against a hostname's counter: a few dozen, where the
    /// counter's own enumeration has tens of thousands).
    pub fn subtract_from(&mut self, a: &Machine, limit: usize) -> Result<Machine, MaskError> {
        let mut boundary = [false; 256];
        boundary[0] = true;
        for b in a.boundaries().chain(self.boundaries()) {
            boundary[b as usize] = true;
        }
        let (class_of, reps) = classes_with_reps(&boundary);
        let k = reps.len();
        // `GONE`: this language cannot be completed any more; every continuation is outside.
        const GONE: u32 = u32::MAX;
        let start = (0u32, self.start()?.unwrap_or(GONE));
        let mut states = Discovered::new(start, limit);
        let (mut trans, mut accept) = (Vec::new(), Vec::new());
        let mut i = 0;
        while i < states.order.len() {
            let (x, s) = states.order[i];
            for &r in &reps {
                let tx = a.next(x, r);
                if tx == DEAD {
                    trans.push(DEAD);
                    continue;
                }
                let ts = match s {
                    GONE => GONE,
                    s => self.next(s, r)?.unwrap_or(GONE),
                };
                trans.push(states.id((tx, ts))?);
            }
            accept.push(a.accept[x as usize] && (s == GONE || !self.accept(s)));
            i += 1;
        }
        Ok(Machine::from_rows(class_of, k, trans, accept).trim())
    }

    /// Byte-class starts of the two machines (for the automaton's class table).
    pub fn boundaries(&self) -> impl Iterator<Item = u8> + '_ {
        self.pattern.boundaries().chain(self.chars.boundaries())
    }
}
