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
//!
//! This file holds the node and item types and stepping; [`arena`] builds the node arena,
//! [`machines`] determinizes machines, [`canonical`] keys items for DFA-state sharing and
//! [`lower`] gives lower bounds on completion lengths.

mod arena;
mod canonical;
mod lower;
mod machines;
mod recursion;
mod upper;

use crate::counted::Counted;
use crate::hash::{FxHashMap, FxHashSet};
use crate::machine::{classes_from_boundaries, Machine, DEAD as MDEAD};
use crate::{BuildError, MaskError};
use arena::ArenaBuilder;
use regex_syntax::utf8::Utf8Sequences;
use std::sync::Arc;
use stencil_grammar::ir::{ByteDfa, CharRanges, Expr, SharedExpr};
use stencil_grammar::Grammar;
pub(crate) use upper::INF as NO_UPPER;

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
/// `source` of an empty class in [`Nfa::step_classes`].
const NO_SOURCE: ContId = ContId::MAX;
/// `source` of a class whose set is not one closure.
const MIXED: ContId = ContId::MAX - 1;

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

/// What a rule is to the distinct-items check (see [`crate::distinct`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RuleRole {
    Plain,
    /// An array whose items must differ: always gets a stack frame of its own.
    Array,
    /// An item of such an array: its frame records where the item starts.
    Item,
}

/// An object body with members in any order (see `stencil_grammar::ir::ObjectExpr`).
#[derive(Debug, Clone)]
struct ObjectNode {
    /// Per member: the member, and the separator then the member.
    members: Vec<(NodeId, NodeId)>,
    extra: (NodeId, NodeId),
    spec: Arc<stencil_grammar::ir::ObjectExpr>,
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
#[derive(Clone)]
enum Built {
    Explicit(Arc<Machine>),
    Counted(Box<Counted>),
}

#[derive(Clone, Copy)]
enum Work {
    Expand(NodeId, ContId),
    Resume(ContId),
}

#[derive(Clone)]
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
    /// Per rule its role for distinct items (empty when the grammar has none).
    roles: Vec<RuleRole>,
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
    /// Per byte: the most times one token holds it (unknown until the vocabulary is set).
    pub most_per_token: Option<[u32; 256]>,
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
    /// Memos of the upper bounds (see `upper`).
    upper: upper::UpperMemo,
}

impl Nfa {
    /// The role of `rule` for distinct items.
    pub fn role(&self, rule: u32) -> RuleRole {
        self.roles
            .get(rule as usize)
            .copied()
            .unwrap_or(RuleRole::Plain)
    }

    /// True if the grammar has arrays whose items must differ.
    pub fn has_distinct(&self) -> bool {
        !self.roles.is_empty()
    }

    pub fn build(g: &Grammar, limit: usize, machine_limit: usize) -> Result<Nfa, BuildError> {
        let mut b = ArenaBuilder::default();
        b.push(Node::Empty);
        b.push(Node::Nothing);
        b.unit = b.node(&stencil_grammar::ir::any_string_char())?;
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
            roles: Vec::new(),
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
            most_per_token: None,
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
            upper: upper::UpperMemo::default(),
        };
        if !g.distinct.is_empty() {
            nfa.roles = vec![RuleRole::Plain; g.rules.len()];
            for d in &g.distinct {
                nfa.roles[d.array.0 as usize] = RuleRole::Array;
                for i in &d.items {
                    nfa.roles[i.0 as usize] = RuleRole::Item;
                }
            }
        }
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

    /// The continuation of item `id` (none for the rule end).
    fn item_cont(&self, id: ItemId) -> Option<ContId> {
        match self.items[id as usize] {
            Item::Accept => None,
            Item::Byte { cont, .. } | Item::Call { cont, .. } | Item::Machine { cont, .. } => {
                Some(cont)
            }
        }
    }
}
