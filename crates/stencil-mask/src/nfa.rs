//! The grammar IR as a lazily expanded NFA.
//!
//! Nothing is unrolled up front. The grammar becomes a compact, hash-consed arena of nodes (one
//! per distinct subexpression), and NFA states ("items") are created only when the lazy DFA
//! reaches them. An item is a byte range, a rule call, a rule end or a position inside a
//! machine, paired with a continuation: an interned chain of what comes next (the rest of a
//! sequence, the remaining iterations of a repetition). Bounded repetitions are counters in
//! continuations, so `maxItems: 1000` or twenty characters of whitespace cost nothing until the
//! output gets there, and compile time grows with the schema, not with its bounds.
//!
//! `And`, `Not` and explicit DFAs ("machines", [`Machine`]) are determinized, combined and
//! trimmed when first reached, then stepped as a single item carrying the machine's state.

mod lower;

use crate::counted::Counted;
use crate::hash::{FxHashMap, FxHashSet};
use crate::machine::{classes_from_boundaries, Machine, DEAD as MDEAD};
use crate::MaskError;
use regex_syntax::utf8::Utf8Sequences;
use std::sync::Arc;
use stencil_grammar::{ByteDfa, CharRanges, Expr, Grammar, SharedExpr};

/// An NFA state: an index into the item table.
pub(crate) type ItemId = u32;
type NodeId = u32;
pub(crate) type ContId = u32;

/// The item "the current rule may end here".
pub(crate) const ACCEPT: ItemId = 0;
/// The continuation "end of the rule".
const DONE: ContId = 0;
const UNBOUNDED: u32 = u32::MAX;
const EMPTY: NodeId = 0;
const NOTHING: NodeId = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Node {
    Empty,
    Nothing,
    Byte(u8, u8),
    Seq {
        start: u32,
        len: u32,
    },
    Alt {
        start: u32,
        len: u32,
    },
    /// `max == UNBOUNDED` for no upper bound.
    Repeat {
        body: NodeId,
        min: u32,
        max: u32,
    },
    Call(u32),
    Machine(u32),
    /// Members in any order: index into the object table.
    Object(u32),
}

/// An object body with members in any order (see `stencil_grammar::ObjectExpr`).
#[derive(Debug, Clone)]
struct ObjectNode {
    /// Per member: the member, and the separator then the member.
    members: Vec<(NodeId, NodeId)>,
    extra: (NodeId, NodeId),
    spec: Arc<stencil_grammar::ObjectExpr>,
    counted: bool,
}

/// What to do once the current subexpression is matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Cont {
    Done,
    /// Match kid `kid` of sequence `node` (and the ones after it), then `then`.
    Seq {
        node: NodeId,
        kid: u32,
        then: ContId,
    },
    /// `done` iterations of repetition `node` are complete (capped at `min` when unbounded).
    Rep {
        node: NodeId,
        done: u32,
        then: ContId,
    },
    /// Between members of object `node`: the members `written` so far (bits by index),
    /// `count` members in all (0 when uncounted), `first` if none yet.
    Obj {
        node: NodeId,
        written: u64,
        count: u32,
        first: bool,
        then: ContId,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Item {
    Accept,
    Byte { lo: u8, hi: u8, cont: ContId },
    Call { rule: u32, cont: ContId },
    Machine { m: u32, state: u32, cont: ContId },
}

#[derive(Debug, Clone)]
enum MachineDef {
    And(Vec<NodeId>),
    Not(NodeId),
    Dfa(Arc<ByteDfa>),
    /// `min..=max` JSON string characters (`max` may be unbounded) that also match `rest`.
    Counted {
        min: u32,
        max: u32,
        rest: Vec<NodeId>,
    },
}

/// A machine once built: an explicit DFA, or a lazily stepped length-bounded language.
enum Built {
    Explicit(Arc<Machine>),
    Counted(Box<Counted>),
}

#[derive(Clone, Copy)]
enum Work {
    Expand(NodeId, ContId),
    Resume(ContId),
}

pub(crate) struct Nfa {
    nodes: Vec<Node>,
    kids: Vec<NodeId>,
    objects: Vec<ObjectNode>,
    /// Fewest bytes each node matches (see [`Nfa::canonical_cont`]).
    min_len: Vec<u32>,
    /// Memos of [`Nfa::canonical_cont`] and [`Nfa::canonical_item`] (`u32::MAX`: unknown).
    canon_conts: Vec<u32>,
    canon_items: Vec<u32>,
    /// The continuation that starts each rule.
    rule_entry: Vec<ContId>,
    pub start_rule: u32,
    conts: Vec<Cont>,
    cont_ids: FxHashMap<Cont, ContId>,
    items: Vec<Item>,
    item_ids: FxHashMap<Item, ItemId>,
    /// Epsilon closure of each continuation, computed on first use.
    closures: Vec<Option<Box<[ItemId]>>>,
    machine_defs: Vec<MachineDef>,
    machines: Vec<Option<Built>>,
    /// `(any JSON string character)*`: the node, and its DFA once built.
    star_unit: NodeId,
    /// One JSON string character (the node `minLength`/`maxLength` count).
    unit: NodeId,
    chars: Option<Arc<Machine>>,
    /// The items that start one JSON string character, per continuation.
    char_starts: FxHashMap<ContId, Box<[ItemId]>>,
    /// Bytes of the longest token (for [`Counted`]'s shared masks).
    pub max_token_len: u32,
    /// Deduplication marks over item ids for [`Nfa::step`].
    marks: Vec<u32>,
    generation: u32,
    /// Items plus continuations allowed.
    limit: usize,
    /// States allowed in one machine.
    machine_limit: usize,
    /// Byte classes: bytes no item tells apart (refined when a machine is built).
    boundary: [bool; 256],
    pub class_of: [u8; 256],
    /// Last byte of each class.
    pub class_end: Vec<u8>,
    fuel: u64,
    fuel_limit: u64,
    /// Memo of lower bounds per continuation (see `lower`).
    lower_conts: Vec<u32>,
    /// Distances to acceptance per explicit machine, computed on first use (see `lower`).
    machine_dist: Vec<Option<Arc<crate::machine::Distances>>>,
}

impl Nfa {
    pub fn build(g: &Grammar, limit: usize, machine_limit: usize) -> Result<Nfa, MaskError> {
        let mut b = ArenaBuilder::default();
        b.push(Node::Empty);
        b.push(Node::Nothing);
        b.unit = b.node(&stencil_grammar::any_string_char())?;
        let star_unit = b.leaf(Node::Repeat {
            body: b.unit,
            min: 0,
            max: UNBOUNDED,
        });
        let mut bodies = Vec::with_capacity(g.rules.len());
        for r in &g.rules {
            bodies.push(b.node(&r.expr)?);
        }
        let mut nfa = Nfa {
            nodes: Vec::new(),
            kids: Vec::new(),
            objects: std::mem::take(&mut b.objects),
            min_len: Vec::new(),
            canon_conts: Vec::new(),
            canon_items: Vec::new(),
            rule_entry: Vec::new(),
            start_rule: g.start.0,
            conts: vec![Cont::Done],
            cont_ids: FxHashMap::default(),
            items: vec![Item::Accept],
            item_ids: FxHashMap::default(),
            closures: Vec::new(),
            machine_defs: std::mem::take(&mut b.machine_defs),
            machines: Vec::new(),
            star_unit,
            unit: b.unit,
            chars: None,
            char_starts: FxHashMap::default(),
            max_token_len: u32::MAX / 4,
            marks: Vec::new(),
            generation: 0,
            limit,
            machine_limit,
            boundary: b.boundary,
            class_of: [0; 256],
            class_end: Vec::new(),
            fuel: u64::MAX,
            fuel_limit: u64::MAX,
            lower_conts: Vec::new(),
            machine_dist: Vec::new(),
        };
        nfa.cont_ids.insert(Cont::Done, DONE);
        nfa.item_ids.insert(Item::Accept, ACCEPT);
        nfa.machines = (0..nfa.machine_defs.len()).map(|_| None).collect();
        // A one-kid sequence per rule: resuming "kid 0 of it, then done" starts the rule.
        nfa.nodes = b.nodes;
        nfa.kids = b.kids;
        nfa.min_len = b.min_len;
        for body in bodies {
            let start = nfa.kids.len() as u32;
            nfa.kids.push(body);
            nfa.nodes.push(Node::Seq { start, len: 1 });
            nfa.min_len.push(0);
            let node = nfa.nodes.len() as u32 - 1;
            let entry = nfa.cont(Cont::Seq {
                node,
                kid: 0,
                then: DONE,
            })?;
            nfa.rule_entry.push(entry);
        }
        nfa.boundary[0] = true;
        nfa.recompute_classes();
        Ok(nfa)
    }

    pub fn num_rules(&self) -> usize {
        self.rule_entry.len()
    }

    /// Arena nodes (a measure of the grammar's size).
    pub fn num_nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Items and continuations created so far.
    pub fn num_states(&self) -> usize {
        self.items.len() + self.conts.len()
    }

    pub fn item(&self, id: ItemId) -> Item {
        self.items[id as usize]
    }

    /// Grants `limit` units of work to the next operation.
    pub fn refuel(&mut self, limit: u64) {
        self.fuel = limit;
        self.fuel_limit = limit;
    }

    #[inline]
    pub fn charge(&mut self, cost: u64) -> Result<(), MaskError> {
        if cost > self.fuel {
            return Err(MaskError::TooMuchWork {
                limit: self.fuel_limit,
            });
        }
        self.fuel -= cost;
        Ok(())
    }

    fn recompute_classes(&mut self) {
        let (class_of, n) = classes_from_boundaries(&self.boundary);
        self.class_of = class_of;
        self.class_end = vec![0; n];
        for (b, &c) in class_of.iter().enumerate() {
            self.class_end[c as usize] = b as u8;
        }
    }

    fn check_size(&self) -> Result<(), MaskError> {
        let n = self.num_states();
        if n >= self.limit {
            return Err(MaskError::TooManyStates {
                what: "NFA",
                given: n + 1,
                limit: self.limit,
            });
        }
        Ok(())
    }

    fn cont(&mut self, c: Cont) -> Result<ContId, MaskError> {
        if let Some(&id) = self.cont_ids.get(&c) {
            return Ok(id);
        }
        self.check_size()?;
        let id = self.conts.len() as ContId;
        self.conts.push(c);
        self.cont_ids.insert(c, id);
        Ok(id)
    }

    fn intern_item(&mut self, it: Item) -> Result<ItemId, MaskError> {
        if let Some(&id) = self.item_ids.get(&it) {
            return Ok(id);
        }
        self.check_size()?;
        let id = self.items.len() as ItemId;
        self.items.push(it);
        self.item_ids.insert(it, id);
        Ok(id)
    }

    /// The items at the start of `rule`.
    pub fn rule_start(&mut self, rule: u32) -> Result<&[ItemId], MaskError> {
        let k = self.rule_entry[rule as usize];
        self.closure(k)
    }

    /// The items reachable by epsilon moves when continuation `k` resumes, sorted.
    pub fn closure(&mut self, k: ContId) -> Result<&[ItemId], MaskError> {
        let known = self.closures.get(k as usize).is_some_and(|c| c.is_some());
        if !known {
            // Sorted and without repeats, so a set that is one closure is already canonical.
            let mut list = self.run(Work::Resume(k), Some(k))?.into_vec();
            list.sort_unstable();
            list.dedup();
            let list = list.into_boxed_slice();
            if self.closures.len() <= k as usize {
                self.closures.resize(k as usize + 1, None);
            }
            self.closures[k as usize] = Some(list);
        }
        Ok(self.closures[k as usize].as_deref().unwrap_or(&[]))
    }

    /// Epsilon closure from `start`; `top` is the continuation being memoized (whose own memo
    /// is not there yet).
    fn run(&mut self, start: Work, top: Option<ContId>) -> Result<Box<[ItemId]>, MaskError> {
        let mut out: Vec<ItemId> = Vec::new();
        let mut seen: FxHashSet<(u32, u32)> = FxHashSet::default();
        let mut stack = vec![start];
        while let Some(w) = stack.pop() {
            self.charge(1)?;
            match w {
                Work::Resume(k) => {
                    if !seen.insert((u32::MAX, k)) {
                        continue;
                    }
                    if Some(k) != top {
                        if let Some(Some(c)) = self.closures.get(k as usize) {
                            out.extend_from_slice(c);
                            continue;
                        }
                    }
                    match self.conts[k as usize] {
                        Cont::Done => out.push(ACCEPT),
                        Cont::Seq { node, kid, then } => {
                            let Node::Seq { start, len } = self.nodes[node as usize] else {
                                unreachable!("sequence continuation on a non-sequence")
                            };
                            let child = self.kids[(start + kid) as usize];
                            let next = if kid + 1 < len {
                                self.cont(Cont::Seq {
                                    node,
                                    kid: kid + 1,
                                    then,
                                })?
                            } else {
                                then
                            };
                            stack.push(Work::Expand(child, next));
                        }
                        Cont::Rep { node, done, then } => {
                            self.repeat_resume(node, done, then, &mut stack)?
                        }
                        Cont::Obj {
                            node,
                            written,
                            count,
                            first,
                            then,
                        } => self.object_resume(node, written, count, first, then, &mut stack)?,
                    }
                }
                Work::Expand(n, k) => {
                    if !seen.insert((n, k)) {
                        continue;
                    }
                    match self.nodes[n as usize] {
                        Node::Empty => stack.push(Work::Resume(k)),
                        Node::Nothing => {}
                        Node::Byte(lo, hi) => {
                            out.push(self.intern_item(Item::Byte { lo, hi, cont: k })?)
                        }
                        Node::Seq { start, len } => {
                            let next = if len > 1 {
                                self.cont(Cont::Seq {
                                    node: n,
                                    kid: 1,
                                    then: k,
                                })?
                            } else {
                                k
                            };
                            stack.push(Work::Expand(self.kids[start as usize], next));
                        }
                        Node::Alt { start, len } => {
                            for i in (0..len).rev() {
                                stack.push(Work::Expand(self.kids[(start + i) as usize], k));
                            }
                        }
                        Node::Repeat { .. } => self.repeat_resume(n, 0, k, &mut stack)?,
                        Node::Object(_) => self.object_resume(n, 0, 0, true, k, &mut stack)?,
                        Node::Call(rule) => {
                            out.push(self.intern_item(Item::Call { rule, cont: k })?)
                        }
                        Node::Machine(m) => {
                            self.build_machine(m)?;
                            if let Some((state, live, accept)) = self.machine_start(m)? {
                                if live {
                                    out.push(self.intern_item(Item::Machine {
                                        m,
                                        state,
                                        cont: k,
                                    })?);
                                }
                                if accept {
                                    stack.push(Work::Resume(k));
                                }
                            }
                        }
                    }
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out.into_boxed_slice())
    }

    /// Between members of object `node`: another declared member not yet written, an
    /// additional member, and/or the end of the object where it may end.
    fn object_resume(
        &mut self,
        node: NodeId,
        written: u64,
        count: u32,
        first: bool,
        then: ContId,
        stack: &mut Vec<Work>,
    ) -> Result<(), MaskError> {
        let Node::Object(o) = self.nodes[node as usize] else {
            unreachable!("object continuation on a non-object")
        };
        let obj = self.objects[o as usize].clone();
        if obj.spec.may_end(written, count) {
            stack.push(Work::Resume(then));
        }
        if obj.spec.max.is_some_and(|m| count >= m) {
            return Ok(());
        }
        let count = if obj.counted { count + 1 } else { 0 };
        let pick = |(alone, with_sep): (NodeId, NodeId)| if first { alone } else { with_sep };
        for (i, &m) in obj.members.iter().enumerate() {
            if written & (1 << i) == 0 {
                let k = self.cont(Cont::Obj {
                    node,
                    written: written | 1 << i,
                    count,
                    first: false,
                    then,
                })?;
                stack.push(Work::Expand(pick(m), k));
            }
        }
        if obj.extra.0 != NOTHING {
            let k = self.cont(Cont::Obj {
                node,
                written,
                count,
                first: false,
                then,
            })?;
            stack.push(Work::Expand(pick(obj.extra), k));
        }
        Ok(())
    }

    /// After `done` complete iterations of repetition `node`: another one, and/or what follows.
    fn repeat_resume(
        &mut self,
        node: NodeId,
        done: u32,
        then: ContId,
        stack: &mut Vec<Work>,
    ) -> Result<(), MaskError> {
        let Node::Repeat { body, min, max } = self.nodes[node as usize] else {
            unreachable!("repeat continuation on a non-repeat")
        };
        if done < max {
            let next = if max == UNBOUNDED {
                (done + 1).min(min)
            } else {
                done + 1
            };
            let k = self.cont(Cont::Rep {
                node,
                done: next,
                then,
            })?;
            stack.push(Work::Expand(body, k));
        }
        if done >= min {
            stack.push(Work::Resume(then));
        }
        Ok(())
    }

    /// The items after byte `b` from the item set `set`, into `out` (sorted, deduplicated).
    pub fn step(&mut self, set: &[ItemId], b: u8, out: &mut Vec<ItemId>) -> Result<(), MaskError> {
        out.clear();
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.marks.fill(0);
            self.generation = 1;
        }
        for &id in set {
            match self.items[id as usize] {
                Item::Byte { lo, hi, cont } if lo <= b && b <= hi => self.add_closure(cont, out)?,
                Item::Machine { m, state, cont } => {
                    let Some((t, live, accept)) = self.machine_next(m, state, b)? else {
                        continue;
                    };
                    if live {
                        let it = self.intern_item(Item::Machine { m, state: t, cont })?;
                        self.add(it, out);
                    }
                    if accept {
                        self.add_closure(cont, out)?;
                    }
                }
                _ => {}
            }
        }
        out.sort_unstable();
        Ok(())
    }

    /// [`Nfa::step`] on every byte class at once: `out[c]` is the set after `reps[c]`.
    /// One pass over the items, each adding its successors to only the classes its range
    /// covers, instead of a pass per class (classes are contiguous byte ranges, so a range
    /// covers `class_of[lo]..=class_of[hi]`). `source[c]` is the continuation whose closure
    /// `out[c]` is, when it is exactly one closure (already sorted: see [`Nfa::closure`]);
    /// `NO_SOURCE` when it is empty, `MIXED` otherwise.
    fn step_classes(
        &mut self,
        set: &[ItemId],
        class_of: &[u8; 256],
        reps: &[u8],
        out: &mut [Vec<ItemId>],
        source: &mut [ContId],
    ) -> Result<(), MaskError> {
        for o in out.iter_mut() {
            o.clear();
        }
        source.fill(NO_SOURCE);
        for &id in set {
            match self.items[id as usize] {
                Item::Byte { lo, hi, cont } => {
                    self.closure(cont)?;
                    let list = self.closures[cont as usize].as_deref().unwrap_or(&[]);
                    let range = class_of[lo as usize] as usize..=class_of[hi as usize] as usize;
                    for (o, src) in out[range.clone()].iter_mut().zip(&mut source[range]) {
                        if *src != cont {
                            *src = if *src == NO_SOURCE { cont } else { MIXED };
                            o.extend_from_slice(list);
                        }
                    }
                }
                Item::Machine { m, state, cont } => {
                    for (c, &r) in reps.iter().enumerate() {
                        let Some((t, live, accept)) = self.machine_next(m, state, r)? else {
                            continue;
                        };
                        source[c] = MIXED;
                        if live {
                            let it = self.intern_item(Item::Machine { m, state: t, cont })?;
                            out[c].push(it);
                        }
                        if accept {
                            self.closure(cont)?;
                            let list = self.closures[cont as usize].as_deref().unwrap_or(&[]);
                            out[c].extend_from_slice(list);
                        }
                    }
                }
                _ => {}
            }
        }
        for (o, &src) in out.iter_mut().zip(source.iter()) {
            if src == MIXED {
                o.sort_unstable();
                o.dedup();
            }
        }
        Ok(())
    }

    #[inline]
    fn add(&mut self, id: ItemId, out: &mut Vec<ItemId>) {
        let i = id as usize;
        if i >= self.marks.len() {
            self.marks.resize((i + 1).max(self.items.len()), 0);
        }
        if self.marks[i] != self.generation {
            self.marks[i] = self.generation;
            out.push(id);
        }
    }

    fn add_closure(&mut self, k: ContId, out: &mut Vec<ItemId>) -> Result<(), MaskError> {
        self.closure(k)?;
        if self.marks.len() < self.items.len() {
            self.marks.resize(self.items.len(), 0);
        }
        let list = self.closures[k as usize].as_deref().unwrap_or(&[]);
        let marks = &mut self.marks;
        for &id in list {
            let m = &mut marks[id as usize];
            if *m != self.generation {
                *m = self.generation;
                out.push(id);
            }
        }
        Ok(())
    }

    /// The start of machine `m` (built): `(state, live, accepting)`, or `None` if it matches
    /// nothing.
    fn machine_start(&mut self, m: u32) -> Result<Option<(u32, bool, bool)>, MaskError> {
        Ok(match &mut self.machines[m as usize] {
            Some(Built::Explicit(d)) => Some((0, d.live[0], d.accept[0])),
            Some(Built::Counted(c)) => c.start()?.map(|s| (s, c.live(s), c.accept(s))),
            None => None,
        })
    }

    /// Machine `m` after byte `b` from `state`: `(state, live, accepting)`.
    fn machine_next(
        &mut self,
        m: u32,
        state: u32,
        b: u8,
    ) -> Result<Option<(u32, bool, bool)>, MaskError> {
        Ok(match &mut self.machines[m as usize] {
            Some(Built::Explicit(d)) => {
                let t = d.next(state, b);
                (t != MDEAD).then(|| (t, d.live[t as usize], d.accept[t as usize]))
            }
            Some(Built::Counted(c)) => c.next(state, b)?.map(|t| (t, c.live(t), c.accept(t))),
            None => None,
        })
    }

    /// The continuation of item `id` (none for the rule end).
    fn item_cont(&self, id: ItemId) -> Option<ContId> {
        match self.items[id as usize] {
            Item::Accept => None,
            Item::Byte { cont, .. } | Item::Call { cont, .. } | Item::Machine { cont, .. } => {
                Some(cont)
            }
        }
    }

    /// The innermost repetition continuation above `k`, if it repeats a JSON string character.
    fn char_counter_of(&self, mut k: ContId) -> Option<ContId> {
        loop {
            match self.conts[k as usize] {
                Cont::Done | Cont::Obj { .. } => return None,
                Cont::Seq { then, .. } => k = then,
                Cont::Rep { node, .. } => {
                    let Node::Repeat { body, .. } = self.nodes[node as usize] else {
                        return None;
                    };
                    return (body == self.unit).then_some(k);
                }
            }
        }
    }

    /// `k` with continuation `from` (somewhere above it) replaced by `to`.
    fn rewrite_cont(&mut self, k: ContId, from: ContId, to: ContId) -> Result<ContId, MaskError> {
        if k == from {
            return Ok(to);
        }
        match self.conts[k as usize] {
            Cont::Seq { node, kid, then } => {
                let then = self.rewrite_cont(then, from, to)?;
                self.cont(Cont::Seq { node, kid, then })
            }
            _ => Ok(k),
        }
    }

    /// For a state inside a plain JSON string with a length bound (`maxLength` without a
    /// pattern): the same position in a string of unbounded length, and the characters left.
    /// Past `minLength`, the two allow the same tokens except those that write more than the
    /// characters left before closing the string, a count that depends on the token alone
    /// (`TokenTrie::chars_before_quote`). Applies between characters and inside UTF-8
    /// sequences, not inside escapes (whose characters a token's bytes would miscount).
    pub fn string_counter_key(
        &mut self,
        set: &[ItemId],
    ) -> Result<Option<(Vec<ItemId>, u32)>, MaskError> {
        let mut counter: Option<ContId> = None;
        let mut inside: Vec<ItemId> = Vec::new();
        let mut outside: Vec<ItemId> = Vec::new();
        for &id in set {
            match self.item_cont(id).and_then(|k| self.char_counter_of(k)) {
                Some(k) => {
                    if counter.is_some_and(|c| c != k) {
                        return Ok(None);
                    }
                    counter = Some(k);
                    inside.push(id);
                }
                None => outside.push(id),
            }
        }
        let Some(kr) = counter else {
            return Ok(None);
        };
        let Cont::Rep { node, done, then } = self.conts[kr as usize] else {
            return Ok(None);
        };
        let Node::Repeat { min, max, .. } = self.nodes[node as usize] else {
            return Ok(None);
        };
        // `done` counts the character being written; the string may end before it.
        if max == UNBOUNDED || done == 0 || done - 1 < min || done > max {
            return Ok(None);
        }
        let star = self.cont(Cont::Rep {
            node: self.star_unit,
            done: 0,
            then,
        })?;
        let after: Vec<ItemId> = self.closure(then)?.to_vec();
        let far = if !outside.is_empty() {
            // Between characters: exactly a character's start items and the string's end.
            let starts = self.char_starts(kr)?;
            let mut expect: Vec<ItemId> = starts.iter().chain(&after).copied().collect();
            expect.sort_unstable();
            expect.dedup();
            if expect != set {
                return Ok(None);
            }
            self.closure(star)?.to_vec()
        } else {
            // Inside a UTF-8 sequence: continuation bytes only.
            let mut far = Vec::with_capacity(inside.len());
            for &id in &inside {
                match self.items[id as usize] {
                    Item::Byte { lo, hi, cont } if lo >= 0x80 && hi <= 0xBF => {
                        let cont = self.rewrite_cont(cont, kr, star)?;
                        far.push(self.intern_item(Item::Byte { lo, hi, cont })?);
                    }
                    _ => return Ok(None),
                }
            }
            far.sort_unstable();
            far.dedup();
            far
        };
        Ok(Some((far, max - done + 1)))
    }

    /// The items that start one string character and continue at `k` (memoized).
    fn char_starts(&mut self, k: ContId) -> Result<Box<[ItemId]>, MaskError> {
        if let Some(s) = self.char_starts.get(&k) {
            return Ok(s.clone());
        }
        let s = self.run(Work::Expand(self.unit, k), None)?;
        self.char_starts.insert(k, s.clone());
        Ok(s)
    }

    /// An item that allows exactly the same tokens as `id`, with every repetition count and
    /// string length that no single token can tell apart replaced by a canonical one (see
    /// [`Nfa::canonical_cont`] and [`Counted::canonical`]): the key under which masks are
    /// shared between the many positions of a long bounded array or string.
    pub fn canonical_item(&mut self, id: ItemId) -> Result<ItemId, MaskError> {
        if let Some(&c) = self.canon_items.get(id as usize) {
            if c != u32::MAX {
                return Ok(c);
            }
        }
        let canon = match self.items[id as usize] {
            Item::Accept => Item::Accept,
            Item::Byte { lo, hi, cont } => Item::Byte {
                lo,
                hi,
                cont: self.canonical_cont(cont)?,
            },
            Item::Call { rule, cont } => Item::Call {
                rule,
                cont: self.canonical_cont(cont)?,
            },
            Item::Machine { m, state, cont } => {
                let state = match &mut self.machines[m as usize] {
                    Some(Built::Counted(c)) => c.canonical(state)?,
                    _ => state,
                };
                Item::Machine {
                    m,
                    state,
                    cont: self.canonical_cont(cont)?,
                }
            }
        };
        let c = self.intern_item(canon)?;
        if self.canon_items.len() <= id as usize {
            self.canon_items.resize(self.items.len(), u32::MAX);
        }
        self.canon_items[id as usize] = c;
        Ok(c)
    }

    /// `k` with the count of every repetition that one token cannot drive to a bound
    /// replaced by the repetition's minimum. A token of `L` bytes completes at most
    /// `L / shortest iteration` iterations, so counts `min <= done` with `done` + that
    /// `< max` are indistinguishable within one token.
    fn canonical_cont(&mut self, k: ContId) -> Result<ContId, MaskError> {
        if let Some(&c) = self.canon_conts.get(k as usize) {
            if c != u32::MAX {
                return Ok(c);
            }
        }
        let canon = match self.conts[k as usize] {
            Cont::Done => Cont::Done,
            Cont::Obj {
                node,
                written,
                count,
                first,
                then,
            } => Cont::Obj {
                node,
                written,
                count,
                first,
                then: self.canonical_cont(then)?,
            },
            Cont::Seq { node, kid, then } => Cont::Seq {
                node,
                kid,
                then: self.canonical_cont(then)?,
            },
            Cont::Rep { node, done, then } => {
                let Node::Repeat { body, min, max } = self.nodes[node as usize] else {
                    unreachable!("repeat continuation on a non-repeat")
                };
                let step = self.min_len[body as usize];
                let far = max != UNBOUNDED
                    && step > 0
                    && done >= min
                    && (done as u64) + (self.max_token_len / step) as u64 + 1 < max as u64;
                Cont::Rep {
                    node,
                    done: if far { min } else { done },
                    then: self.canonical_cont(then)?,
                }
            }
        };
        let c = self.cont(canon)?;
        if self.canon_conts.len() <= k as usize {
            self.canon_conts.resize(self.conts.len(), u32::MAX);
        }
        self.canon_conts[k as usize] = c;
        Ok(c)
    }

    /// Builds machine `m` on first use (and refines the byte classes with its own).
    fn build_machine(&mut self, m: u32) -> Result<(), MaskError> {
        if self.machines[m as usize].is_some() {
            return Ok(());
        }
        let t0 = std::time::Instant::now();
        let def = self.machine_defs[m as usize].clone();
        let built = match def.clone() {
            MachineDef::And(parts) => Built::Explicit(Arc::new(self.intersect(&parts)?)),
            MachineDef::Not(inner) => {
                Built::Explicit(Arc::new(self.determinize(inner)?.complement().trim()))
            }
            MachineDef::Dfa(bd) => Built::Explicit(crate::machine::from_shared_dfa(&bd)),
            MachineDef::Counted { min, max, rest } => {
                let chars = self.chars_machine()?;
                let pattern = if rest.is_empty() {
                    chars.clone()
                } else {
                    Arc::new(self.intersect(&rest)?)
                };
                if *crate::constraint::TRACE {
                    eprintln!(
                        "counted {min}..{max}: pattern {} states x {} classes in {:?}",
                        pattern.num_states(),
                        pattern.nclasses,
                        t0.elapsed()
                    );
                }
                Built::Counted(Box::new(Counted::new(
                    pattern,
                    chars,
                    min,
                    max,
                    self.limit,
                    self.max_token_len,
                )?))
            }
        };
        let boundaries: Vec<u8> = match &built {
            Built::Explicit(d) => d.boundaries().collect(),
            Built::Counted(c) => c.boundaries().collect(),
        };
        if *crate::constraint::TRACE {
            let (kind, states) = match (&def, &built) {
                (MachineDef::And(p), Built::Explicit(d)) => {
                    (format!("and/{}", p.len()), d.num_states())
                }
                (MachineDef::Counted { min, max, .. }, _) => (format!("counted {min}..{max}"), 0),
                (MachineDef::Not(_), Built::Explicit(d)) => ("not".into(), d.num_states()),
                (_, Built::Explicit(d)) => ("dfa".into(), d.num_states()),
                _ => (String::new(), 0),
            };
            eprintln!("machine {m} {kind}: {states} states, {:?}", t0.elapsed());
        }
        let mut changed = false;
        for b in boundaries {
            changed |= !std::mem::replace(&mut self.boundary[b as usize], true);
        }
        if changed {
            self.recompute_classes();
        }
        self.machines[m as usize] = Some(built);
        Ok(())
    }

    /// The explicit DFA of the strings every node matches.
    fn intersect(&mut self, parts: &[NodeId]) -> Result<Machine, MaskError> {
        let mut acc = self.determinize(parts[0])?;
        for &p in &parts[1..] {
            let d = self.determinize(p)?;
            acc = Machine::product(&acc, &d, self.machine_limit)?;
        }
        Ok(acc)
    }

    /// The DFA of any sequence of JSON string characters (start = between characters).
    fn chars_machine(&mut self) -> Result<Arc<Machine>, MaskError> {
        if let Some(c) = &self.chars {
            return Ok(c.clone());
        }
        let d = Arc::new(self.determinize(self.star_unit)?);
        self.chars = Some(d.clone());
        Ok(d)
    }

    /// The explicit DFA of a call-free node, by subset construction over its items.
    fn determinize(&mut self, node: NodeId) -> Result<Machine, MaskError> {
        if let Node::Machine(m) = self.nodes[node as usize] {
            self.build_machine(m)?;
            match &mut self.machines[m as usize] {
                Some(Built::Explicit(d)) => return Ok((**d).clone()),
                Some(Built::Counted(c)) => return c.enumerate(self.machine_limit),
                None => {}
            }
        }
        // Nested machines first; the operand's own byte classes (from the leaves and machines
        // it contains) are usually far fewer than the whole grammar's.
        let mut todo = vec![node];
        let mut visited: FxHashSet<NodeId> = FxHashSet::default();
        let mut boundary = [false; 256];
        boundary[0] = true;
        while let Some(n) = todo.pop() {
            if !visited.insert(n) {
                continue;
            }
            match self.nodes[n as usize] {
                Node::Seq { start, len } | Node::Alt { start, len } => {
                    todo.extend_from_slice(&self.kids[start as usize..(start + len) as usize])
                }
                Node::Repeat { body, .. } => todo.push(body),
                Node::Object(o) => {
                    let obj = &self.objects[o as usize];
                    for &(a, b) in obj.members.iter().chain([&obj.extra]) {
                        todo.extend([a, b]);
                    }
                }
                Node::Byte(lo, hi) => {
                    boundary[lo as usize] = true;
                    if hi < 255 {
                        boundary[hi as usize + 1] = true;
                    }
                }
                Node::Machine(m) => {
                    self.build_machine(m)?;
                    let bs: Vec<u8> = match &self.machines[m as usize] {
                        Some(Built::Explicit(d)) => d.boundaries().collect(),
                        Some(Built::Counted(c)) => c.boundaries().collect(),
                        None => Vec::new(),
                    };
                    for b in bs {
                        boundary[b as usize] = true;
                    }
                }
                _ => {}
            }
        }
        let (class_of, k) = classes_from_boundaries(&boundary);
        let mut reps = vec![0u8; k];
        for b in (0..256usize).rev() {
            reps[class_of[b] as usize] = b as u8;
        }
        let start = self.run(Work::Expand(node, DONE), None)?;
        let mut map: FxHashMap<Box<[ItemId]>, u32> = FxHashMap::default();
        let mut sets: Vec<Box<[ItemId]>> = vec![start.clone()];
        map.insert(start, 0);
        let mut trans = Vec::new();
        let mut accept = Vec::new();
        let mut buckets: Vec<Vec<ItemId>> = vec![Vec::new(); k];
        let mut source: Vec<ContId> = vec![NO_SOURCE; k];
        // The state of a set that is exactly one continuation's closure, by continuation: most
        // sets are, and a `u32` key is cheaper than hashing the set.
        let mut by_source: FxHashMap<ContId, u32> = FxHashMap::default();
        let mut i = 0;
        while i < sets.len() {
            let set = sets[i].clone();
            self.step_classes(&set, &class_of, &reps, &mut buckets, &mut source)?;
            for (next, &src) in buckets.iter().zip(&source) {
                if next.is_empty() {
                    trans.push(MDEAD);
                    continue;
                }
                if let Some(&id) = by_source.get(&src) {
                    trans.push(id);
                    continue;
                }
                let id = match map.get(next.as_slice()) {
                    Some(&id) => id,
                    None => {
                        if sets.len() >= self.machine_limit {
                            return Err(MaskError::TooManyStates {
                                what: "intersection DFA",
                                given: sets.len() + 1,
                                limit: self.machine_limit,
                            });
                        }
                        let id = sets.len() as u32;
                        let boxed: Box<[ItemId]> = next.as_slice().into();
                        map.insert(boxed.clone(), id);
                        sets.push(boxed);
                        id
                    }
                };
                if src != MIXED {
                    by_source.insert(src, id);
                }
                trans.push(id);
            }
            accept.push(set.contains(&ACCEPT));
            i += 1;
        }
        Ok(Machine::from_rows(class_of, k, trans, accept).trim())
    }
}

/// `source` of an empty class in [`Nfa::step_classes`].
const NO_SOURCE: ContId = ContId::MAX;
/// `source` of a class whose set is not one closure.
const MIXED: ContId = ContId::MAX - 1;

/// Expr trees to the hash-consed node arena.
struct ArenaBuilder {
    nodes: Vec<Node>,
    kids: Vec<NodeId>,
    leaves: FxHashMap<Node, NodeId>,
    /// Sequences and alternations by `[tag, kids...]` (tag 0: sequence, 1: alternation).
    lists: FxHashMap<Vec<u32>, NodeId>,
    key: Vec<u32>,
    /// `Byte(b, b)` leaves by byte (the most common leaf: every literal byte).
    single: [NodeId; 256],
    shared: FxHashMap<*const SharedExpr, NodeId>,
    chars: FxHashMap<CharRanges, NodeId>,
    machines: FxHashMap<String, u32>,
    machine_defs: Vec<MachineDef>,
    boundary: [bool; 256],
    /// The node of one JSON string character (the unit of `minLength`/`maxLength`).
    unit: NodeId,
    /// Fewest bytes each node matches (calls and machines count 0, `Nothing` u32::MAX).
    min_len: Vec<u32>,
    /// Nodes every string of which is exactly one JSON string character (see `one_char`).
    one_char: FxHashSet<NodeId>,
    objects: Vec<ObjectNode>,
    object_ids: FxHashMap<*const stencil_grammar::ObjectExpr, NodeId>,
}

impl Default for ArenaBuilder {
    fn default() -> Self {
        Self {
            nodes: Vec::new(),
            kids: Vec::new(),
            leaves: FxHashMap::default(),
            lists: FxHashMap::default(),
            key: Vec::new(),
            single: [u32::MAX; 256],
            shared: FxHashMap::default(),
            chars: FxHashMap::default(),
            machines: FxHashMap::default(),
            machine_defs: Vec::new(),
            boundary: [false; 256],
            unit: NOTHING,
            min_len: Vec::new(),
            one_char: FxHashSet::default(),
            objects: Vec::new(),
            object_ids: FxHashMap::default(),
        }
    }
}

impl ArenaBuilder {
    /// Appends a node (its kids already exist) with its shortest match length.
    fn push(&mut self, n: Node) -> NodeId {
        let kids = |start: u32, len: u32| &self.kids[start as usize..(start + len) as usize];
        let len = match n {
            Node::Empty | Node::Call(_) | Node::Machine(_) | Node::Object(_) => 0,
            Node::Nothing => u32::MAX,
            Node::Byte(..) => 1,
            Node::Seq { start, len } => kids(start, len)
                .iter()
                .fold(0u32, |a, &k| a.saturating_add(self.min_len[k as usize])),
            Node::Alt { start, len } => kids(start, len)
                .iter()
                .map(|&k| self.min_len[k as usize])
                .min()
                .unwrap_or(u32::MAX),
            Node::Repeat { body, min, .. } => self.min_len[body as usize].saturating_mul(min),
        };
        self.nodes.push(n);
        self.min_len.push(len);
        self.nodes.len() as NodeId - 1
    }

    fn byte(&mut self, b: u8) -> NodeId {
        let id = self.single[b as usize];
        if id != u32::MAX {
            return id;
        }
        let id = self.leaf(Node::Byte(b, b));
        self.single[b as usize] = id;
        id
    }

    fn leaf(&mut self, n: Node) -> NodeId {
        if let Node::Byte(lo, hi) = n {
            self.boundary[lo as usize] = true;
            if hi < 255 {
                self.boundary[hi as usize + 1] = true;
            }
        }
        if let Some(&id) = self.leaves.get(&n) {
            return id;
        }
        let id = self.push(n);
        self.leaves.insert(n, id);
        id
    }

    /// A sequence (`alt == false`) or alternation of `kids`, simplified.
    fn list(&mut self, alt: bool, mut kids: Vec<NodeId>) -> NodeId {
        if alt {
            kids.retain(|&k| k != NOTHING);
            let mut seen = FxHashSet::default();
            kids.retain(|k| seen.insert(*k));
            if kids.is_empty() {
                return NOTHING;
            }
        } else {
            if kids.contains(&NOTHING) {
                return NOTHING;
            }
            kids.retain(|&k| k != EMPTY);
            if kids.is_empty() {
                return EMPTY;
            }
        }
        if kids.len() == 1 {
            return kids[0];
        }
        self.key.clear();
        self.key.push(alt as u32);
        self.key.extend_from_slice(&kids);
        if let Some(&id) = self.lists.get(self.key.as_slice()) {
            return id;
        }
        let start = self.kids.len() as u32;
        let len = kids.len() as u32;
        self.kids.extend_from_slice(&kids);
        let id = self.push(if alt {
            Node::Alt { start, len }
        } else {
            Node::Seq { start, len }
        });
        self.lists.insert(self.key.clone(), id);
        id
    }

    fn machine(&mut self, key: String, def: MachineDef) -> NodeId {
        let m = match self.machines.get(&key) {
            Some(&m) => m,
            None => {
                self.machine_defs.push(def);
                let m = self.machine_defs.len() as u32 - 1;
                self.machines.insert(key, m);
                m
            }
        };
        self.leaf(Node::Machine(m))
    }

    fn node(&mut self, e: &Expr) -> Result<NodeId, MaskError> {
        let id = self.node_inner(e)?;
        if one_char(e, &self.one_char, &self.shared) {
            self.one_char.insert(id);
        }
        Ok(id)
    }

    fn node_inner(&mut self, e: &Expr) -> Result<NodeId, MaskError> {
        Ok(match e {
            Expr::Empty => EMPTY,
            Expr::Nothing => NOTHING,
            Expr::Literal(bytes) => {
                let kids = bytes.iter().map(|&b| self.byte(b)).collect();
                self.list(false, kids)
            }
            Expr::Bytes(ranges) => {
                let kids = ranges
                    .iter()
                    .map(|&(lo, hi)| self.leaf(Node::Byte(lo, hi)))
                    .collect();
                self.list(true, kids)
            }
            Expr::Chars(set) => {
                if let Some(&id) = self.chars.get(set) {
                    return Ok(id);
                }
                let mut alts = Vec::new();
                for &(a, b) in set.ranges() {
                    for seq in Utf8Sequences::new(a, b) {
                        let kids = seq
                            .as_slice()
                            .iter()
                            .map(|r| self.leaf(Node::Byte(r.start, r.end)))
                            .collect();
                        alts.push(self.list(false, kids));
                    }
                }
                let id = self.list(true, alts);
                self.chars.insert(set.clone(), id);
                id
            }
            Expr::Concat(parts) => {
                let kids = parts
                    .iter()
                    .map(|p| self.node(p))
                    .collect::<Result<_, _>>()?;
                self.list(false, kids)
            }
            Expr::Alt(parts) => {
                let kids = parts
                    .iter()
                    .map(|p| self.node(p))
                    .collect::<Result<_, _>>()?;
                self.list(true, kids)
            }
            Expr::Repeat { expr, min, max } => {
                let body = self.node(expr)?;
                let max = max.unwrap_or(UNBOUNDED);
                match body {
                    _ if max == 0 => EMPTY,
                    _ if max < *min => NOTHING,
                    EMPTY => EMPTY,
                    NOTHING if *min == 0 => EMPTY,
                    NOTHING => NOTHING,
                    _ if *min == 1 && max == 1 => body,
                    _ => {
                        // A nullable body fills the minimum with empty iterations.
                        let min = if self.nullable(body) { 0 } else { *min };
                        self.leaf(Node::Repeat { body, min, max })
                    }
                }
            }
            Expr::Call(r) => self.leaf(Node::Call(r.0)),
            Expr::Shared(inner) => {
                let key = Arc::as_ptr(inner);
                if let Some(&id) = self.shared.get(&key) {
                    return Ok(id);
                }
                let id = self.node(&inner.expr)?;
                self.shared.insert(key, id);
                id
            }
            Expr::And(parts) => {
                call_free(e)?;
                let kids: Vec<NodeId> = parts
                    .iter()
                    .map(|p| self.node(p))
                    .collect::<Result<_, _>>()?;
                if kids.contains(&NOTHING) {
                    return Ok(NOTHING);
                }
                self.and_node(kids)?
            }
            Expr::Not(inner) => {
                call_free(e)?;
                let mut kid = self.node(inner)?;
                // A long bounded run of one-character strings is complemented through its
                // counted machine (a direct enumeration, not a subset construction).
                if let Node::Repeat { body, min, max } = self.nodes[kid as usize] {
                    if self.one_char.contains(&body) && max != UNBOUNDED && max - min > 16 {
                        let star = self.leaf(Node::Repeat {
                            body,
                            min: 0,
                            max: UNBOUNDED,
                        });
                        let rest = if body == self.unit {
                            vec![]
                        } else {
                            vec![star]
                        };
                        let key = format!("counted{min},{max},{rest:?}");
                        kid = self.machine(key, MachineDef::Counted { min, max, rest });
                    }
                }
                self.machine(format!("not{kid}"), MachineDef::Not(kid))
            }
            Expr::Object(o) => {
                let key = Arc::as_ptr(o);
                if let Some(&id) = self.object_ids.get(&key) {
                    return Ok(id);
                }
                let sep = self.node(&o.sep)?;
                let pair = |b: &mut Self, e: &Expr| -> Result<(NodeId, NodeId), MaskError> {
                    let alone = b.node(e)?;
                    Ok((alone, b.list(false, vec![sep, alone])))
                };
                let mut members = Vec::with_capacity(o.members.len());
                for (m, _) in &o.members {
                    members.push(pair(self, m)?);
                }
                let extra = pair(self, &o.extra)?;
                self.objects.push(ObjectNode {
                    members,
                    extra,
                    spec: o.clone(),
                    counted: o.min > 0 || o.max.is_some(),
                });
                let id = self.push(Node::Object(self.objects.len() as u32 - 1));
                self.object_ids.insert(key, id);
                id
            }
            Expr::Dfa(d) => self.machine(
                format!("dfa{:p}", Arc::as_ptr(d)),
                MachineDef::Dfa(d.clone()),
            ),
        })
    }

    /// The intersection of `kids`: length bounds in characters become one counter (the
    /// tightest bounds), counted machines among the kids fold into it, and a bound over a
    /// small alternation is distributed over its branches, so that every branch gets its own
    /// lazily stepped counter instead of one eager product of everything.
    fn and_node(&mut self, kids: Vec<NodeId>) -> Result<NodeId, MaskError> {
        let is_bound = |b: &Self, k: NodeId| match b.nodes[k as usize] {
            Node::Repeat { body, min, max } => {
                (body == b.unit || b.one_char.contains(&body)) && !(min == 0 && max == UNBOUNDED)
            }
            Node::Machine(m) => matches!(b.machine_defs[m as usize], MachineDef::Counted { .. }),
            _ => k == b.unit,
        };
        let bounds = kids.iter().filter(|&&k| is_bound(self, k)).count();
        let alts: Vec<NodeId> = kids
            .iter()
            .copied()
            .filter(|&k| matches!(self.nodes[k as usize], Node::Alt { len, .. } if len <= 8))
            .collect();
        if bounds > 0 && bounds + 1 == kids.len() && alts.len() == 1 {
            let Node::Alt { start, len } = self.nodes[alts[0] as usize] else {
                unreachable!("checked above")
            };
            let branches: Vec<NodeId> = self.kids[start as usize..(start + len) as usize].to_vec();
            let mut out = Vec::with_capacity(branches.len());
            for b in branches {
                let mut ks: Vec<NodeId> = kids.iter().copied().filter(|&k| k != alts[0]).collect();
                ks.push(b);
                out.push(self.and_node(ks)?);
            }
            return Ok(self.list(true, out));
        }
        // Counted machines among the kids: their bounds and patterns join this one.
        let mut flat = Vec::with_capacity(kids.len());
        let (mut fold_min, mut fold_max, mut folded) = (0u32, UNBOUNDED, false);
        for &k in &kids {
            match self.nodes[k as usize] {
                Node::Machine(m) => match &self.machine_defs[m as usize] {
                    MachineDef::Counted { min, max, rest } => {
                        fold_min = fold_min.max(*min);
                        fold_max = fold_max.min(*max);
                        folded = true;
                        flat.extend(rest.iter().copied());
                    }
                    _ => flat.push(k),
                },
                _ => flat.push(k),
            }
        }
        let kids = flat;
        // Length bounds in characters become one counter (the tightest bounds).
        let (mut min, mut max, mut counted) = (fold_min, fold_max, folded);
        let mut rest = Vec::new();
        for &k in &kids {
            match self.nodes[k as usize] {
                // An unbounded run from zero bounds nothing: an ordinary operand.
                Node::Repeat {
                    min: 0,
                    max: UNBOUNDED,
                    ..
                } => rest.push(k),
                Node::Repeat {
                    body,
                    min: a,
                    max: b,
                } if body == self.unit => {
                    (min, max, counted) = (min.max(a), max.min(b), true);
                }
                // `X{a,b}` with X one character: `X*` within a count of a..b.
                Node::Repeat {
                    body,
                    min: a,
                    max: b,
                } if self.one_char.contains(&body) => {
                    (min, max, counted) = (min.max(a), max.min(b), true);
                    rest.push(self.leaf(Node::Repeat {
                        body,
                        min: 0,
                        max: UNBOUNDED,
                    }));
                }
                _ if k == self.unit => {
                    (min, max, counted) = (min.max(1), max.min(1), true);
                }
                _ => rest.push(k),
            }
        }
        if counted {
            if min > max {
                return Ok(NOTHING);
            }
            let key = format!("counted{min},{max},{rest:?}");
            return Ok(self.machine(key, MachineDef::Counted { min, max, rest }));
        }
        let key = format!("and{kids:?}");
        Ok(self.machine(key, MachineDef::And(kids)))
    }

    /// True if `n` matches the empty string (rules and machines are assumed not to).
    fn nullable(&self, n: NodeId) -> bool {
        match self.nodes[n as usize] {
            Node::Empty => true,
            Node::Nothing | Node::Byte(..) | Node::Call(_) | Node::Machine(_) => false,
            Node::Object(o) => self.objects[o as usize].spec.min == 0,
            Node::Seq { start, len } => self.kids[start as usize..(start + len) as usize]
                .iter()
                .all(|&k| self.nullable(k)),
            Node::Alt { start, len } => self.kids[start as usize..(start + len) as usize]
                .iter()
                .any(|&k| self.nullable(k)),
            Node::Repeat { body, min, .. } => min == 0 || self.nullable(body),
        }
    }
}

/// True if every string of `e` is exactly one JSON string character (a raw content
/// character or one escape), judged structurally. `known` holds the arena nodes already
/// known to be so, `shared` maps shared subexpressions to their nodes.
fn one_char(
    e: &Expr,
    known: &FxHashSet<NodeId>,
    shared: &FxHashMap<*const SharedExpr, NodeId>,
) -> bool {
    // Raw content characters: anything but `"`, `\` and C0 controls.
    let plain = |a: u32, b: u32| a >= 0x20 && !(a..=b).contains(&0x22) && !(a..=b).contains(&0x5C);
    match e {
        Expr::Chars(set) => set.ranges().iter().all(|&(a, b)| plain(a as u32, b as u32)),
        Expr::Bytes(r) => r
            .iter()
            .all(|&(lo, hi)| hi < 0x80 && plain(lo as u32, hi as u32)),
        Expr::Literal(b) => {
            let escape = matches!(b.as_slice(), [b'\\', x] if b"\"\\/bfnrt".contains(x))
                || (b.len() == 6
                    && b.starts_with(b"\\u")
                    && b[2..].iter().all(u8::is_ascii_hexdigit));
            let raw = std::str::from_utf8(b).is_ok_and(|t| {
                let mut cs = t.chars();
                matches!((cs.next(), cs.next()), (Some(c), None) if plain(c as u32, c as u32))
            });
            escape || raw
        }
        Expr::Alt(parts) => !parts.is_empty() && parts.iter().all(|p| one_char(p, known, shared)),
        Expr::Shared(inner) => shared
            .get(&Arc::as_ptr(inner))
            .is_some_and(|id| known.contains(id)),
        _ => false,
    }
}

fn call_free(e: &Expr) -> Result<(), MaskError> {
    if e.has_call() {
        return Err(MaskError::Grammar(
            stencil_grammar::GrammarError::InvalidSchema {
                pointer: "#".into(),
                reason: "intersection or complement of a recursive subexpression".into(),
            },
        ));
    }
    Ok(())
}
