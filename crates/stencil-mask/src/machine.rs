//! [`Machine`]: an explicit DFA over bytes with class-compressed rows, and the algebra the
//! grammar's `And`/`Not`/`Dfa` nodes need (product, complement, trimming).
//!
//! Rows are indexed by byte class (bytes no transition tells apart), so a 10,000-state product
//! of a pattern with a length bound costs a few transitions per state, not 256.

use crate::hash::FxHashMap;
use crate::MaskError;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use stencil_grammar::ir::ByteDfa;

/// No transition.
pub(crate) const DEAD: u32 = u32::MAX;

/// An explicit DFA: state 0 is the start; `trans[s * nclasses + class]` (`DEAD` if none).
#[derive(Debug, Clone)]
pub(crate) struct Machine {
    pub class_of: [u8; 256],
    pub nclasses: usize,
    pub trans: Vec<u32>,
    pub accept: Vec<bool>,
    /// States with at least one transition (an item there can still consume bytes).
    pub live: Vec<bool>,
    /// Distances to acceptance and the start's reach, computed on first use: a machine shared
    /// between grammars (see [`from_shared_dfa`]) computes them once.
    derived: OnceLock<(Arc<Distances>, Option<u32>)>,
}

/// Per state of a [`Machine`]: bytes to the nearest accepting state (`u32::MAX`: none) and
/// the first byte of such a shortest path.
#[derive(Debug, Clone)]
pub(crate) struct Distances {
    dist: Vec<u32>,
    byte: Vec<u8>,
}

impl Distances {
    /// `(distance, first byte)` of state `s` (no byte at distance 0 or where none).
    pub fn get(&self, s: u32) -> (u32, Option<u8>) {
        match self.dist[s as usize] {
            n @ (0 | u32::MAX) => (n, None),
            n => (n, Some(self.byte[s as usize])),
        }
    }
}

impl Machine {
    /// Breadth-first distances to an accepting state over the reversed transitions.
    pub fn distances(&self) -> Distances {
        let n = self.num_states();
        let k = self.nclasses;
        let mut first_byte = vec![0u8; k];
        for b in (0..256usize).rev() {
            first_byte[self.class_of[b] as usize] = b as u8;
        }
        // Predecessors in one table, grouped by target (`at[t]..at[t + 1]`).
        let mut at = vec![0u32; n + 1];
        for &t in self.trans.iter().filter(|&&t| t != DEAD) {
            at[t as usize + 1] += 1;
        }
        for i in 0..n {
            at[i + 1] += at[i];
        }
        let mut fill = at.clone();
        let mut preds = vec![(0u32, 0u8); at[n] as usize];
        for (i, &t) in self.trans.iter().enumerate().filter(|e| *e.1 != DEAD) {
            let slot = &mut fill[t as usize];
            preds[*slot as usize] = ((i / k) as u32, first_byte[i % k]);
            *slot += 1;
        }
        let mut dist = vec![u32::MAX; n];
        let mut byte = vec![0u8; n];
        let mut queue: Vec<u32> = Vec::with_capacity(n);
        for (s, _) in self.accept.iter().enumerate().filter(|a| *a.1) {
            dist[s] = 0;
            queue.push(s as u32);
        }
        let mut head = 0;
        while let Some(&t) = queue.get(head) {
            head += 1;
            for &(s, b) in &preds[at[t as usize] as usize..at[t as usize + 1] as usize] {
                if dist[s as usize] == u32::MAX {
                    dist[s as usize] = dist[t as usize] + 1;
                    byte[s as usize] = b;
                    queue.push(s);
                }
            }
        }
        Distances { dist, byte }
    }

    /// [`Machine::distances`], and [`Machine::reach`] from the start with them, computed once
    /// per machine.
    pub fn derived(&self) -> &(Arc<Distances>, Option<u32>) {
        self.derived.get_or_init(|| {
            let dist = self.distances();
            let reach = self.reach(&dist);
            (Arc::new(dist), reach)
        })
    }

    #[inline]
    pub fn next(&self, s: u32, b: u8) -> u32 {
        self.trans[s as usize * self.nclasses + self.class_of[b as usize] as usize]
    }

    pub fn num_states(&self) -> usize {
        self.accept.len()
    }

    /// Starts of byte classes: `true` at `b` if `b` and `b - 1` are told apart.
    pub fn boundaries(&self) -> impl Iterator<Item = u8> + '_ {
        (1..256usize)
            .filter(|&b| self.class_of[b] != self.class_of[b - 1])
            .map(|b| b as u8)
    }

    /// Builds from rows over the classes of `class_of`, merging classes no row tells apart,
    /// then recomputing `live`.
    pub fn from_rows(
        class_of: [u8; 256],
        nclasses: usize,
        trans: Vec<u32>,
        accept: Vec<bool>,
    ) -> Self {
        let n = accept.len();
        // Column signature per class: classes with equal columns merge.
        let mut remap: Vec<u8> = vec![0; nclasses];
        let mut kept: Vec<usize> = Vec::new();
        let mut by_column: FxHashMap<Vec<u32>, u8> = FxHashMap::default();
        for c in 0..nclasses {
            let column: Vec<u32> = (0..n).map(|s| trans[s * nclasses + c]).collect();
            let id = *by_column.entry(column).or_insert_with(|| {
                kept.push(c);
                (kept.len() - 1) as u8
            });
            remap[c] = id;
        }
        let k = kept.len().max(1);
        let mut rows = vec![DEAD; n * k];
        for s in 0..n {
            for (j, &c) in kept.iter().enumerate() {
                rows[s * k + j] = trans[s * nclasses + c];
            }
        }
        let mut new_class_of = [0u8; 256];
        for b in 0..256 {
            new_class_of[b] = remap[class_of[b] as usize];
        }
        let live = (0..n)
            .map(|s| rows[s * k..(s + 1) * k].iter().any(|&t| t != DEAD))
            .collect();
        Self {
            class_of: new_class_of,
            nclasses: k,
            trans: rows,
            accept,
            live,
            derived: OnceLock::new(),
        }
    }

    /// The DFA of the grammar's explicit [`ByteDfa`] (multipleOf and the like).
    pub fn from_byte_dfa(d: &ByteDfa) -> Self {
        let mut boundary = [false; 256];
        boundary[0] = true;
        for s in &d.states {
            for &(lo, hi, _) in &s.transitions {
                boundary[lo as usize] = true;
                if hi < 255 {
                    boundary[hi as usize + 1] = true;
                }
            }
        }
        let (class_of, nclasses) = classes_from_boundaries(&boundary);
        let n = d.states.len().max(1);
        let mut trans = vec![DEAD; n * nclasses];
        let mut accept = vec![false; n];
        for (i, s) in d.states.iter().enumerate() {
            for &(lo, hi, t) in &s.transitions {
                for b in lo..=hi {
                    trans[i * nclasses + class_of[b as usize] as usize] = t;
                }
            }
            accept[i] = s.accepting;
        }
        Self::from_rows(class_of, nclasses, trans, accept)
    }

    /// The complement over all byte strings: complete with a sink, flip acceptance.
    pub fn complement(&self) -> Self {
        let n = self.num_states();
        let sink = n as u32;
        let k = self.nclasses;
        let mut trans: Vec<u32> = self
            .trans
            .iter()
            .map(|&t| if t == DEAD { sink } else { t })
            .collect();
        trans.extend(std::iter::repeat_n(sink, k));
        let mut accept: Vec<bool> = self.accept.iter().map(|a| !a).collect();
        accept.push(true);
        Self::from_rows(self.class_of, k, trans, accept)
    }

    /// Strings accepted by both, with only states that can still reach acceptance.
    pub fn product(a: &Machine, b: &Machine, limit: usize) -> Result<Self, MaskError> {
        Ok(Self::product_with_pairs(a, b, limit)?.0)
    }

    /// [`Machine::product`], and per state the pair of states of `a` and `b` it stands for.
    pub fn product_with_pairs(
        a: &Machine,
        b: &Machine,
        limit: usize,
    ) -> Result<(Self, Vec<(u32, u32)>), MaskError> {
        let (class_of, reps) = joint_classes(a, b);
        let k = reps.len();
        let mut pairs = Discovered::new((0u32, 0u32), limit);
        let mut trans = Vec::new();
        let mut accept = Vec::new();
        let mut i = 0;
        while i < pairs.order.len() {
            let (x, y) = pairs.order[i];
            for &r in &reps {
                let (tx, ty) = (a.next(x, r), b.next(y, r));
                if tx == DEAD || ty == DEAD {
                    trans.push(DEAD);
                    continue;
                }
                trans.push(pairs.id((tx, ty))?);
            }
            accept.push(a.accept[x as usize] && b.accept[y as usize]);
            i += 1;
        }
        Ok((
            Self::from_rows(class_of, k, trans, accept).trim(),
            pairs.order,
        ))
    }

    /// The most bytes any state reachable from the start needs to reach acceptance, given
    /// this machine's `dist`; `None` if one of them cannot.
    pub fn reach(&self, dist: &Distances) -> Option<u32> {
        let k = self.nclasses;
        let mut seen = vec![false; self.num_states()];
        let mut stack = vec![0u32];
        seen[0] = true;
        let mut most = 0u32;
        while let Some(s) = stack.pop() {
            match dist.get(s).0 {
                u32::MAX => return None,
                n => most = most.max(n),
            }
            for &t in &self.trans[s as usize * k..(s as usize + 1) * k] {
                if t != DEAD && !seen[t as usize] {
                    seen[t as usize] = true;
                    stack.push(t);
                }
            }
        }
        Some(most)
    }

    /// Removes transitions into states that cannot reach acceptance (state 0 is kept), so a
    /// prefix that cannot be completed dies at once.
    pub fn trim(self) -> Self {
        let n = self.num_states();
        let k = self.nclasses;
        let mut preds: Vec<Vec<u32>> = vec![Vec::new(); n];
        for s in 0..n {
            for &t in &self.trans[s * k..(s + 1) * k] {
                if t != DEAD && preds[t as usize].last() != Some(&(s as u32)) {
                    preds[t as usize].push(s as u32);
                }
            }
        }
        let mut useful = self.accept.clone();
        let mut stack: Vec<u32> = (0..n as u32).filter(|&s| useful[s as usize]).collect();
        while let Some(t) = stack.pop() {
            for &p in &preds[t as usize] {
                if !useful[p as usize] {
                    useful[p as usize] = true;
                    stack.push(p);
                }
            }
        }
        if useful.iter().all(|&u| u) {
            return self;
        }
        let trans = self
            .trans
            .iter()
            .map(|&t| {
                if t != DEAD && !useful[t as usize] {
                    DEAD
                } else {
                    t
                }
            })
            .collect();
        Self::from_rows(self.class_of, k, trans, self.accept)
    }
}

/// The machine of a grammar DFA, built once per process for DFAs shared between grammars
/// (the leap-second times of every `date-time`: 11,000 states, ~4 ms to build). Entries hold
/// the DFA weakly, so a DFA's entry lives only as long as some grammar holds the DFA, and an
/// address is never mistaken for a freed DFA's.
pub(crate) fn from_shared_dfa(d: &Arc<ByteDfa>) -> Arc<Machine> {
    /// Smaller DFAs are built per grammar: cheaper than a lookup under a lock.
    const CACHED_FROM_STATES: usize = 1024;
    type Cache = Vec<(Weak<ByteDfa>, Arc<Machine>)>;
    static CACHE: Mutex<Cache> = Mutex::new(Vec::new());
    let build = || Arc::new(Machine::from_byte_dfa(d).trim());
    if d.states.len() < CACHED_FROM_STATES {
        return build();
    }
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    cache.retain(|(w, _)| w.strong_count() > 0);
    if let Some((_, m)) = cache
        .iter()
        .find(|(w, _)| w.upgrade().is_some_and(|x| Arc::ptr_eq(&x, d)))
    {
        return m.clone();
    }
    let m = build();
    cache.push((Arc::downgrade(d), m.clone()));
    m
}

/// The states of an automaton built by exploration (products, enumerations), numbered in the
/// order they are found; more than `limit` is a typed error.
pub(crate) struct Discovered<K> {
    ids: FxHashMap<K, u32>,
    pub order: Vec<K>,
    limit: usize,
}

impl<K: Copy + Eq + std::hash::Hash> Discovered<K> {
    /// Numbering that starts with `start` (id 0).
    pub fn new(start: K, limit: usize) -> Self {
        let mut ids = FxHashMap::default();
        ids.insert(start, 0);
        Self {
            ids,
            order: vec![start],
            limit,
        }
    }

    /// The id of `k`, numbered now if it is new.
    pub fn id(&mut self, k: K) -> Result<u32, MaskError> {
        if let Some(&id) = self.ids.get(&k) {
            return Ok(id);
        }
        if self.order.len() >= self.limit {
            return Err(MaskError::TooManyStates {
                what: "intersection DFA",
                given: self.order.len() + 1,
                limit: self.limit,
            });
        }
        let id = self.order.len() as u32;
        self.ids.insert(k, id);
        self.order.push(k);
        Ok(id)
    }
}

/// The byte classes neither machine tells apart, and one representative byte per class.
pub(crate) fn joint_classes(a: &Machine, b: &Machine) -> ([u8; 256], Vec<u8>) {
    let mut boundary = [false; 256];
    boundary[0] = true;
    for (x, bound) in boundary.iter_mut().enumerate().skip(1) {
        *bound = a.class_of[x] != a.class_of[x - 1] || b.class_of[x] != b.class_of[x - 1];
    }
    classes_with_reps(&boundary)
}

/// [`classes_from_boundaries`], and the first byte of each class (its representative).
pub(crate) fn classes_with_reps(boundary: &[bool; 256]) -> ([u8; 256], Vec<u8>) {
    let (class_of, k) = classes_from_boundaries(boundary);
    let mut reps = vec![0u8; k];
    for (x, &c) in class_of.iter().enumerate().rev() {
        reps[c as usize] = x as u8;
    }
    (class_of, reps)
}

/// Class ids from class starts (`boundary[0]` must be set).
pub(crate) fn classes_from_boundaries(boundary: &[bool; 256]) -> ([u8; 256], usize) {
    let mut class_of = [0u8; 256];
    let mut c: usize = 0;
    for b in 0..256 {
        if b > 0 && boundary[b] {
            c += 1;
        }
        class_of[b] = c as u8;
    }
    (class_of, c + 1)
}
