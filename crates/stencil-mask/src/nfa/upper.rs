//! Upper bounds on the bytes that finish a rule from anywhere one token can take a parse.
//!
//! A token budget must know, before a step, whether every token the constraint allows leaves
//! an output that can still finish in the tokens left. Far from the end of the budget one
//! number settles it: the most bytes any position one token can reach from the current item
//! needs to finish (positions later in its rule and inside rules called on the way; a call's
//! rest counts the caller's continuation too). Bytes bound tokens where every byte is a token.
//! Most bounds hold for every position, however far; two use the one token: nesting and
//! string lengths.
//!
//! The bound is built from the node arena without building the automaton: `ach` is the length
//! of some string a node matches (so an upper bound on its shortest), `reach` the most any
//! position inside a node needs to finish it. Anything not known cheaply (an unbuilt `And` or
//! `Not` machine, object size and presence rules) is [`INF`], which sends the caller to the
//! exact, per-token check.
//!
//! A recursive rule can nest without limit, but one token cannot: it opens at most so many
//! nested calls into a component (see [`super::recursion`]). Positions inside a component's
//! rules are bounded for that depth: with calls into the component valued `x`, the most any
//! position of its rules needs is `max(a, x + c)` (bounds only add and take maxima), so
//! evaluating the rules at two values of `x` gives `a` and `c`, and `depth` levels need at
//! most `max(a, ach + depth * c)`. The lengths of recursive rules are iterated to a fixpoint
//! the same way. A counted string (`minLength`/`maxLength`) is bounded where one token cannot
//! take it near its maximum (see `Counted::reach`).

use super::recursion::Recursion;
use super::{Built, Cont, ContId, Item, ItemId, MachineDef, Nfa, Node, NodeId, NOTHING};
use crate::hash::{FxHashMap, FxHashSet};
use crate::machine::DEAD as MDEAD;
use std::sync::Arc;

/// No bound known.
pub(crate) const INF: u32 = u32::MAX - 2;
/// Not computed yet (in the memos).
const UNKNOWN: u32 = u32::MAX;
/// Being computed: a recursive rule reached again through its own calls.
const IN_PROGRESS: u32 = u32::MAX - 1;

/// Most states of an intersection or complement built for a bound before any step enters it.
const BOUND_BUILD_STATES: usize = 2_000;
/// The large value calls into a component take to read off how the bound grows per level.
const PROBE: u32 = 1 << 24;
/// Bytes that finish any JSON string character once started (an escaped surrogate pair).
const CHAR_TAIL: u32 = 12;

fn add(a: u32, b: u32) -> u32 {
    a.saturating_add(b).min(INF)
}

fn mul(a: u32, n: u32) -> u32 {
    match n {
        0 => 0,
        _ => a.saturating_mul(n).min(INF),
    }
}

/// Memos of the bounds (indexed by node, continuation and item ids; a machine's reach is kept
/// by the machine, see `Machine::derived`).
#[derive(Clone, Default)]
pub(crate) struct UpperMemo {
    node_ach: Vec<u32>,
    node_reach: Vec<u32>,
    cont_ach: Vec<u32>,
    cont_reach: Vec<u32>,
    item: Vec<u32>,
    /// Per rule: the length of some string it matches.
    rule_ach: Vec<u32>,
    /// Per recursive component: the bound on any position inside its rules.
    scc: Vec<u32>,
    /// The recursive components, found on first use.
    recursion: Option<Arc<Recursion>>,
    /// While a component's bounds are computed: what its calls are worth, and the memos of
    /// the bounds that depend on it.
    probe: Option<Probe>,
    /// Counts bounds left unknown because a machine is not built yet.
    unbuilt: u32,
    /// Memo entries that met an unbuilt machine (by table and index): forgotten when a machine
    /// is built, so they are computed again with it.
    provisional: FxHashSet<(Table, u32)>,
    /// Intersections and complements that a bound tried to build and found too large.
    too_large: FxHashSet<u32>,
}

#[derive(Clone)]
struct Probe {
    scc: u32,
    calls: Calls,
    memo: FxHashMap<(Table, u32), u32>,
}

/// What a call into the probed component is worth.
#[derive(Clone)]
enum Calls {
    /// Per rule of the component, the length of some string it matches (an estimate while
    /// the lengths are iterated to a fixpoint).
    Ach(FxHashMap<u32, u32>),
    /// The same reach for every position inside the component's rules.
    Reach(u32),
}

/// The memo tables of [`UpperMemo`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Table {
    Item,
    NodeAch,
    NodeReach,
    ContAch,
    ContReach,
    RuleAch,
    Scc,
}

impl UpperMemo {
    /// Forgets the bounds that a machine's absence left unknown.
    pub(super) fn machine_built(&mut self) {
        for (table, i) in std::mem::take(&mut self.provisional) {
            self.table(table)[i as usize] = UNKNOWN;
        }
    }

    fn table(&mut self, t: Table) -> &mut Vec<u32> {
        match t {
            Table::Item => &mut self.item,
            Table::NodeAch => &mut self.node_ach,
            Table::NodeReach => &mut self.node_reach,
            Table::ContAch => &mut self.cont_ach,
            Table::ContReach => &mut self.cont_reach,
            Table::RuleAch => &mut self.rule_ach,
            Table::Scc => &mut self.scc,
        }
    }

    /// True if table `t` depends on what the probed component's calls are worth.
    fn probed(&self, t: Table) -> bool {
        match (&self.probe, t) {
            (Some(p), Table::NodeAch | Table::ContAch) => matches!(p.calls, Calls::Ach(_)),
            (Some(p), Table::NodeReach | Table::ContReach) => matches!(p.calls, Calls::Reach(_)),
            _ => false,
        }
    }

    /// The memo entry for `i` in `t` (the probe's own where it depends on the probe).
    fn slot(&mut self, t: Table, i: u32) -> &mut u32 {
        debug_assert!(
            !matches!(
                (&self.probe, t),
                (
                    Some(Probe {
                        calls: Calls::Ach(_),
                        ..
                    }),
                    Table::Item | Table::NodeReach | Table::ContReach | Table::Scc
                )
            ),
            "a reach bound while a component's lengths are iterated"
        );
        if self.probed(t) {
            let p = self.probe.as_mut().expect("probing");
            return p.memo.entry((t, i)).or_insert(UNKNOWN);
        }
        let memo = self.table(t);
        let at = i as usize;
        if memo.len() <= at {
            memo.resize(at + 1, UNKNOWN);
        }
        &mut memo[at]
    }
}

impl Nfa {
    /// An upper bound on the bytes that finish the rule (and the rules it calls) from any
    /// position reachable from item `id`, the item included ([`INF`] if unknown).
    pub fn item_reach(&mut self, id: ItemId) -> u32 {
        self.memoized(Table::Item, id, |nfa| match nfa.items[id as usize] {
            Item::Accept => 0,
            Item::Byte { cont, .. } => add(1, nfa.cont_ach(cont)).max(nfa.cont_reach(cont)),
            Item::Call { rule, cont } => {
                add(nfa.rule_reach(rule), nfa.cont_ach(cont)).max(nfa.cont_reach(cont))
            }
            Item::Machine { m, state, cont } => {
                let inside = match nfa.counted_bounds(m, Some(state)) {
                    Some((_, reach)) => reach,
                    None if nfa.explicit(m) && nfa.machine_dist_of(m).get(state).0 != MDEAD => {
                        nfa.machine_reach(m)
                    }
                    None => INF,
                };
                add(inside, nfa.cont_ach(cont)).max(nfa.cont_reach(cont))
            }
        })
    }

    /// True if machine `m` is an explicit DFA. A grammar DFA not built yet is built here
    /// (cheap, shared between grammars), and so are intersections and complements that stay
    /// within [`BOUND_BUILD_STATES`] (a `format` with a `pattern`: a few dozen states; a larger
    /// one is left to the step that enters it, and a bound that needed it stays unknown).
    fn explicit(&mut self, m: u32) -> bool {
        if self.machines[m as usize].is_none() {
            match self.machine_defs[m as usize] {
                MachineDef::Dfa(_) => {
                    let _ = self.build_machine(m);
                }
                MachineDef::And(_) | MachineDef::Not(_) if !self.upper.too_large.contains(&m) => {
                    let limit = self.machine_limit;
                    self.machine_limit = limit.min(BOUND_BUILD_STATES);
                    let built = self.build_machine(m);
                    self.machine_limit = limit;
                    if built.is_err() {
                        self.upper.too_large.insert(m);
                    }
                }
                _ => {}
            }
        }
        match &self.machines[m as usize] {
            Some(Built::Explicit(_)) => true,
            Some(Built::Counted(_)) => false,
            None => {
                self.upper.unbuilt += 1;
                false
            }
        }
    }

    /// `f`'s value for entry `i` of memo `table`, computed once (a cycle reads as [`INF`]);
    /// provisional if a machine was missing while it was computed.
    fn memoized(&mut self, table: Table, i: u32, f: impl FnOnce(&mut Nfa) -> u32) -> u32 {
        let slot = self.upper.slot(table, i);
        match *slot {
            UNKNOWN => *slot = IN_PROGRESS,
            IN_PROGRESS => return INF,
            n => {
                // A provisional bound makes the ones built on it provisional too.
                if !self.upper.provisional.is_empty()
                    && self.upper.provisional.contains(&(table, i))
                {
                    self.upper.unbuilt += 1;
                }
                return n;
            }
        }
        let mark = self.upper.unbuilt;
        let v = f(self);
        if self.upper.unbuilt != mark && !self.upper.probed(table) {
            self.upper.provisional.insert((table, i));
        }
        *self.upper.slot(table, i) = v;
        v
    }

    /// The most bytes any position inside `rule` reachable within one token needs to finish
    /// it (bounded per nesting level for a recursive rule).
    fn rule_reach(&mut self, rule: u32) -> u32 {
        let rec = self.recursion();
        match rec.scc_of(rule) {
            None => self.cont_reach(self.rule_entry[rule as usize]),
            Some(k) => match &self.upper.probe {
                Some(Probe {
                    scc,
                    calls: Calls::Reach(x),
                    ..
                }) if *scc == k => *x,
                _ => self.scc_reach(k),
            },
        }
    }

    /// The length of some string `rule` matches ([`INF`] if none is known).
    fn rule_ach(&mut self, rule: u32) -> u32 {
        let rec = self.recursion();
        let Some(k) = rec.scc_of(rule) else {
            return self.cont_ach(self.rule_entry[rule as usize]);
        };
        if let Some(Probe {
            scc,
            calls: Calls::Ach(est),
            ..
        }) = &self.upper.probe
        {
            if *scc == k {
                return est[&rule];
            }
        }
        self.memoized(Table::RuleAch, rule, |nfa| {
            let rules = &rec.members[k as usize];
            let mark = nfa.upper.unbuilt;
            let est = nfa.scc_ach(k, rules);
            // The others are known now too (the memo marks this rule's own entry).
            let provisional = nfa.upper.unbuilt != mark;
            for (&r, &n) in rules.iter().zip(&est) {
                if r != rule {
                    *nfa.upper.slot(Table::RuleAch, r) = n;
                    if provisional {
                        nfa.upper.provisional.insert((Table::RuleAch, r));
                    }
                }
            }
            est[rules.iter().position(|&r| r == rule).expect("a member")]
        })
    }

    /// Lengths of some strings the rules of component `k` match: from "none known", each
    /// round evaluates the rules with calls into the component worth the last round's
    /// lengths. Every round's lengths are of real strings; a shortest derivation nests no rule
    /// in itself, so `rules.len() + 1` rounds reach the shortest.
    fn scc_ach(&mut self, k: u32, rules: &[u32]) -> Vec<u32> {
        let mut est: FxHashMap<u32, u32> = rules.iter().map(|&r| (r, INF)).collect();
        for _ in 0..=rules.len() {
            let next = self.probe_rules(k, Calls::Ach(est.clone()), rules, Nfa::cont_ach);
            let mut changed = false;
            for (r, n) in rules.iter().zip(next) {
                let e = est.get_mut(r).expect("a member");
                if n < *e {
                    *e = n;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        rules.iter().map(|r| est[r]).collect()
    }

    fn recursion(&mut self) -> Arc<Recursion> {
        if let Some(r) = &self.upper.recursion {
            return r.clone();
        }
        let r = Arc::new(self.find_recursion());
        self.upper.recursion = Some(r.clone());
        r
    }

    /// The bound on any position one token can reach inside the rules of recursive component
    /// `k` (see the module doc).
    fn scc_reach(&mut self, k: u32) -> u32 {
        self.memoized(Table::Scc, k, |nfa| {
            let rec = nfa.recursion();
            let Some(depth) = nfa.nesting_per_token(&rec, k) else {
                return INF;
            };
            let rules = &rec.members[k as usize];
            let mut ach = 0;
            for &r in rules {
                ach = ach.max(nfa.rule_ach(r));
            }
            let mut probe = |x| {
                let reach = nfa.probe_rules(k, Calls::Reach(x), rules, Nfa::cont_reach);
                reach.into_iter().max().unwrap_or(0)
            };
            let (low, high) = (probe(0), probe(PROBE));
            if ach >= INF || low >= INF || high >= INF {
                return INF;
            }
            // max(a, x + c) at x = 0 and x = PROBE: `low` bounds a, `high - PROBE` is c.
            let per_level = high.saturating_sub(PROBE);
            low.max(add(ach, mul(per_level, depth)))
        })
    }

    /// `bound` at the entry of each of `rules` with calls into component `k` worth `calls`,
    /// on memos of the probe's own.
    fn probe_rules(
        &mut self,
        k: u32,
        calls: Calls,
        rules: &[u32],
        bound: fn(&mut Nfa, ContId) -> u32,
    ) -> Vec<u32> {
        let outer = self.upper.probe.replace(Probe {
            scc: k,
            calls,
            memo: FxHashMap::default(),
        });
        let out = rules
            .iter()
            .map(|&r| bound(self, self.rule_entry[r as usize]))
            .collect();
        self.upper.probe = outer;
        out
    }

    /// `(ach, reach)` of machine `m` from `state` (`None`: its start) if it is counted
    /// (`None` if not): for characters of any string, `min` one-byte characters plus the rest
    /// of a character begun, wherever it is; with a pattern, what the machine (built here)
    /// knows.
    fn counted_bounds(&mut self, m: u32, state: Option<u32>) -> Option<(u32, u32)> {
        match &self.machine_defs[m as usize] {
            MachineDef::Counted { min, rest, .. } if rest.is_empty() => {
                return Some((*min, add(*min, CHAR_TAIL)))
            }
            MachineDef::Counted { .. } => {}
            _ => return None,
        }
        if self.machines[m as usize].is_none() {
            let _ = self.build_machine(m);
        }
        match &mut self.machines[m as usize] {
            Some(Built::Counted(c)) => {
                let reach = c.reach(state).unwrap_or(INF);
                Some((reach, reach))
            }
            _ => {
                self.upper.unbuilt += 1;
                Some((INF, INF))
            }
        }
    }

    /// The most bytes any state of explicit machine `m` reachable from its start needs to
    /// accept ([`INF`] if one cannot).
    fn machine_reach(&self, m: u32) -> u32 {
        match &self.machines[m as usize] {
            Some(Built::Explicit(d)) => d.derived().1.map_or(INF, |n| n.min(INF)),
            _ => INF,
        }
    }

    /// The length of some string node `n` matches ([`INF`] if none is known).
    fn node_ach(&mut self, n: NodeId) -> u32 {
        self.memoized(Table::NodeAch, n, |nfa| match nfa.nodes[n as usize] {
            Node::Empty => 0,
            Node::Nothing => INF,
            Node::Byte(..) => 1,
            Node::Seq { start, len } => {
                (start..start + len).fold(0, |a, i| add(a, nfa.node_ach(nfa.kids[i as usize])))
            }
            Node::Alt { start, len } => {
                (start..start + len).fold(INF, |a, i| a.min(nfa.node_ach(nfa.kids[i as usize])))
            }
            Node::Repeat { body, min, max } => match min <= max {
                true => mul(nfa.node_ach(body), min),
                false => INF,
            },
            Node::Call(rule) => nfa.rule_ach(rule),
            Node::Machine(m) => match nfa.counted_bounds(m, None) {
                Some((ach, _)) => ach,
                None if nfa.explicit(m) => match nfa.machine_dist_of(m).get(0).0 {
                    MDEAD => INF,
                    d => d.min(INF),
                },
                None => INF,
            },
            Node::Object(o) => nfa.object_bounds(o, 0, false).0,
        })
    }

    /// The most bytes any position inside node `n` needs to finish the node ([`INF`] if
    /// unknown; 0 for a node without positions).
    fn node_reach(&mut self, n: NodeId) -> u32 {
        self.memoized(Table::NodeReach, n, |nfa| match nfa.nodes[n as usize] {
            Node::Empty | Node::Nothing => 0,
            Node::Byte(..) => 1,
            Node::Seq { start, len } => nfa.seq_reach(start..start + len, 0),
            Node::Alt { start, len } => {
                (start..start + len).fold(0, |a, i| a.max(nfa.node_reach(nfa.kids[i as usize])))
            }
            Node::Repeat { body, min, max } => match (max, min <= max) {
                (0, _) => 0,
                (_, true) => add(
                    nfa.node_reach(body),
                    mul(nfa.node_ach(body), min.saturating_sub(1)),
                ),
                (_, false) => INF,
            },
            Node::Call(rule) => nfa.rule_reach(rule),
            Node::Machine(m) => match nfa.counted_bounds(m, None) {
                Some((_, reach)) => reach,
                None if nfa.explicit(m) => nfa.machine_reach(m),
                None => INF,
            },
            Node::Object(o) => nfa.object_bounds(o, 0, true).1,
        })
    }

    /// The most any position inside the kids at `kids` (indices into the kid table) needs to
    /// finish the sequence of them, plus `tail`.
    fn seq_reach(&mut self, kids: std::ops::Range<u32>, tail: u32) -> u32 {
        let mut after = tail;
        let mut most = 0u32;
        for i in kids.rev() {
            let k = self.kids[i as usize];
            most = most.max(add(self.node_reach(k), after));
            after = add(after, self.node_ach(k));
        }
        most
    }

    /// Where the kids of sequence `node` from `kid` on (a sequence continuation's rest) lie in
    /// the kid table.
    pub(super) fn seq_rest(&self, node: NodeId, kid: u32) -> std::ops::Range<u32> {
        let Node::Seq { start, len } = self.nodes[node as usize] else {
            unreachable!("sequence continuation on a non-sequence")
        };
        start + kid..start + len
    }

    /// `(body, min, max)` of repetition `node`.
    pub(super) fn repeat_of(&self, node: NodeId) -> (NodeId, u32, u32) {
        let Node::Repeat { body, min, max } = self.nodes[node as usize] else {
            unreachable!("repeat continuation on a non-repeat")
        };
        (body, min, max)
    }

    /// The object table index of object `node`.
    pub(super) fn object_of(&self, node: NodeId) -> u32 {
        let Node::Object(o) = self.nodes[node as usize] else {
            unreachable!("object continuation on a non-object")
        };
        o
    }

    /// Bytes of some string that finishes the rule once continuation `k` resumes.
    fn cont_ach(&mut self, k: ContId) -> u32 {
        self.memoized(Table::ContAch, k, |nfa| match nfa.conts[k as usize] {
            Cont::Done => 0,
            Cont::Seq { node, kid, then } => {
                let then = nfa.cont_ach(then);
                nfa.seq_rest(node, kid)
                    .fold(then, |a, i| add(a, nfa.node_ach(nfa.kids[i as usize])))
            }
            Cont::Rep { node, done, then } => {
                let (body, min, _) = nfa.repeat_of(node);
                add(
                    mul(nfa.node_ach(body), min.saturating_sub(done)),
                    nfa.cont_ach(then),
                )
            }
            Cont::Obj {
                node,
                written,
                then,
                ..
            } => {
                let o = nfa.object_of(node);
                add(nfa.object_bounds(o, written, false).0, nfa.cont_ach(then))
            }
        })
    }

    /// The most bytes any position reachable once continuation `k` resumes needs to finish
    /// the rule.
    fn cont_reach(&mut self, k: ContId) -> u32 {
        self.memoized(Table::ContReach, k, |nfa| match nfa.conts[k as usize] {
            Cont::Done => 0,
            Cont::Seq { node, kid, then } => {
                let tail = nfa.cont_ach(then);
                nfa.seq_reach(nfa.seq_rest(node, kid), tail)
                    .max(nfa.cont_reach(then))
            }
            Cont::Rep { node, done, then } => {
                let (body, min, max) = nfa.repeat_of(node);
                let more = match done < max {
                    true => {
                        let rest = mul(nfa.node_ach(body), min.saturating_sub(done + 1));
                        add(add(nfa.node_reach(body), rest), nfa.cont_ach(then))
                    }
                    false => 0,
                };
                more.max(nfa.cont_reach(then))
            }
            Cont::Obj {
                node,
                written,
                then,
                ..
            } => {
                let o = nfa.object_of(node);
                let inside = nfa.object_bounds(o, written, true).1;
                add(inside, nfa.cont_ach(then)).max(nfa.cont_reach(then))
            }
        })
    }

    /// For object `o` with members `written`: bytes of some way to finish it, and (if `reach`)
    /// the most any position inside a member still to come needs to finish it. Only objects
    /// whose end depends on required members alone are bounded. (Lengths never look at reach:
    /// reach bounds are not computed while the lengths of a component are iterated.)
    fn object_bounds(&mut self, o: u32, written: u64, reach: bool) -> (u32, u32) {
        let spec = self.objects[o as usize].spec.clone();
        if spec.presence.is_some() || spec.min > 0 || spec.max.is_some() {
            return (INF, INF);
        }
        let member = |nfa: &mut Nfa, (alone, with_sep): (NodeId, NodeId)| {
            let ach = nfa.node_ach(alone).max(nfa.node_ach(with_sep));
            let inside = match reach {
                true => nfa.node_reach(alone).max(nfa.node_reach(with_sep)),
                false => 0,
            };
            (ach, inside)
        };
        // The required members still missing: the sum of their finite lengths and how many
        // have none known.
        let (mut finite, mut unknown) = (0u32, 0u32);
        let mut open: Vec<(u32, u32, bool)> = Vec::new();
        for (i, (_, required)) in spec.members.iter().enumerate() {
            if written & (1 << i) == 0 {
                let (ach, reach) = member(self, self.objects[o as usize].members[i]);
                if *required {
                    match ach {
                        INF => unknown += 1,
                        n => finite = add(finite, n),
                    }
                }
                open.push((ach, reach, *required));
            }
        }
        let extra = self.objects[o as usize].extra;
        if extra.0 != NOTHING {
            let (_, reach) = member(self, extra);
            open.push((0, reach, false));
        }
        let missing = if unknown > 0 { INF } else { finite };
        // Inside one member, the other missing required members are still to write.
        let reach = open.iter().fold(0, |a, &(ach, reach, required)| {
            let others = match (required, ach) {
                (true, INF) if unknown == 1 => finite,
                (true, INF) => INF,
                (true, n) if unknown == 0 => finite - n,
                _ => missing,
            };
            a.max(add(reach, others))
        });
        (missing, reach)
    }
}
