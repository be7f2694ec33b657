//! Upper bounds on the bytes that finish a rule from anywhere a parse can go next.
//!
//! A token budget must know, before a step, whether every token the constraint allows leaves
//! an output that can still finish in the tokens left. Far from the end of the budget one
//! number settles it: the most bytes any position reachable from the current item needs to
//! finish (positions later in its rule and inside rules called on the way; a call's rest
//! counts the caller's continuation too). Bytes bound tokens where every byte is a token.
//!
//! The bound is built from the node arena without building the automaton: `ach` is the length
//! of some string a node matches (so an upper bound on its shortest), `reach` the most any
//! position inside a node needs to finish it. Anything not known cheaply (an unbuilt machine,
//! a counted string, a recursive rule, object size and presence rules) is [`INF`], which sends
//! the caller to the exact, per-token check.

use super::{Built, Cont, ContId, Item, ItemId, MachineDef, Nfa, Node, NodeId, NOTHING};
use crate::machine::DEAD as MDEAD;

/// No bound known.
pub(crate) const INF: u32 = u32::MAX - 2;
/// Not computed yet (in the memos).
const UNKNOWN: u32 = u32::MAX;
/// Being computed: a recursive rule reached again through its own calls.
const IN_PROGRESS: u32 = u32::MAX - 1;

fn add(a: u32, b: u32) -> u32 {
    a.saturating_add(b).min(INF)
}

fn mul(a: u32, n: u32) -> u32 {
    match n {
        0 => 0,
        _ => a.saturating_mul(n).min(INF),
    }
}

/// Memos of the bounds (indexed by node, continuation, item and machine ids).
#[derive(Clone, Default)]
pub(crate) struct UpperMemo {
    node_ach: Vec<u32>,
    node_reach: Vec<u32>,
    cont_ach: Vec<u32>,
    cont_reach: Vec<u32>,
    item: Vec<u32>,
    machine: Vec<u32>,
    /// Counts bounds left unknown because a machine is not built yet.
    unbuilt: u32,
    /// Memo entries that met an unbuilt machine (by table and index): forgotten when a machine
    /// is built, so they are computed again with it.
    provisional: Vec<(Table, u32)>,
}

/// The memo tables of [`UpperMemo`].
#[derive(Clone, Copy)]
enum Table {
    Item,
    Machine,
    NodeAch,
    NodeReach,
    ContAch,
    ContReach,
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
            Table::Machine => &mut self.machine,
            Table::NodeAch => &mut self.node_ach,
            Table::NodeReach => &mut self.node_reach,
            Table::ContAch => &mut self.cont_ach,
            Table::ContReach => &mut self.cont_reach,
        }
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
                let entry = nfa.rule_entry[rule as usize];
                add(nfa.cont_reach(entry), nfa.cont_ach(cont)).max(nfa.cont_reach(cont))
            }
            Item::Machine { m, state, cont } => {
                let inside = match nfa.explicit(m) && nfa.machine_dist_of(m).get(state).0 != MDEAD {
                    true => nfa.machine_reach(m),
                    false => INF,
                };
                add(inside, nfa.cont_ach(cont)).max(nfa.cont_reach(cont))
            }
        })
    }

    /// True if machine `m` is an explicit DFA. A grammar DFA not built yet is built here
    /// (cheap, shared between grammars); other kinds are not built for a bound, and a bound
    /// that needed one stays unknown for now.
    fn explicit(&mut self, m: u32) -> bool {
        if self.machines[m as usize].is_none()
            && matches!(self.machine_defs[m as usize], MachineDef::Dfa(_))
        {
            let _ = self.build_machine(m);
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
        let memo = self.upper.table(table);
        let at = i as usize;
        if memo.len() <= at {
            memo.resize(at + 1, UNKNOWN);
        }
        match memo[at] {
            UNKNOWN => memo[at] = IN_PROGRESS,
            IN_PROGRESS => return INF,
            n => return n,
        }
        let mark = self.upper.unbuilt;
        let v = f(self);
        if self.upper.unbuilt != mark {
            self.upper.provisional.push((table, i));
        }
        self.upper.table(table)[at] = v;
        v
    }

    /// The most bytes any state of explicit machine `m` reachable from its start needs to
    /// accept ([`INF`] if one cannot).
    fn machine_reach(&mut self, m: u32) -> u32 {
        self.memoized(Table::Machine, m, |nfa| {
            match nfa.machines[m as usize].clone() {
                Some(Built::Explicit(d)) => {
                    let dist = nfa.machine_dist_of(m);
                    let mut seen = vec![false; d.num_states()];
                    let mut stack = vec![0u32];
                    seen[0] = true;
                    let mut most = 0u32;
                    while let Some(s) = stack.pop() {
                        let (n, _) = dist.get(s);
                        most = most.max(if n == MDEAD { INF } else { n.min(INF) });
                        let row = &d.trans[s as usize * d.nclasses..(s as usize + 1) * d.nclasses];
                        for &t in row {
                            if t != MDEAD && !seen[t as usize] {
                                seen[t as usize] = true;
                                stack.push(t);
                            }
                        }
                    }
                    most
                }
                _ => INF,
            }
        })
    }

    /// The length of some string node `n` matches ([`INF`] if none is known).
    fn node_ach(&mut self, n: NodeId) -> u32 {
        self.memoized(Table::NodeAch, n, |nfa| match nfa.nodes[n as usize] {
            Node::Empty => 0,
            Node::Nothing => INF,
            Node::Byte(..) => 1,
            Node::Seq { start, len } => nfa
                .kids_of(start, len)
                .into_iter()
                .fold(0, |a, k| add(a, nfa.node_ach(k))),
            Node::Alt { start, len } => nfa
                .kids_of(start, len)
                .into_iter()
                .fold(INF, |a, k| a.min(nfa.node_ach(k))),
            Node::Repeat { body, min, max } => match min <= max {
                true => mul(nfa.node_ach(body), min),
                false => INF,
            },
            Node::Call(rule) => nfa.cont_ach(nfa.rule_entry[rule as usize]),
            Node::Machine(m) => match nfa.explicit(m) {
                true => match nfa.machine_dist_of(m).get(0).0 {
                    MDEAD => INF,
                    d => d.min(INF),
                },
                false => INF,
            },
            Node::Object(o) => nfa.object_bounds(o, 0).0,
        })
    }

    /// The most bytes any position inside node `n` needs to finish the node ([`INF`] if
    /// unknown; 0 for a node without positions).
    fn node_reach(&mut self, n: NodeId) -> u32 {
        self.memoized(Table::NodeReach, n, |nfa| match nfa.nodes[n as usize] {
            Node::Empty | Node::Nothing => 0,
            Node::Byte(..) => 1,
            Node::Seq { start, len } => {
                let kids = nfa.kids_of(start, len);
                nfa.seq_reach(&kids, 0)
            }
            Node::Alt { start, len } => nfa
                .kids_of(start, len)
                .into_iter()
                .fold(0, |a, k| a.max(nfa.node_reach(k))),
            Node::Repeat { body, min, max } => match (max, min <= max) {
                (0, _) => 0,
                (_, true) => add(
                    nfa.node_reach(body),
                    mul(nfa.node_ach(body), min.saturating_sub(1)),
                ),
                (_, false) => INF,
            },
            Node::Call(rule) => nfa.cont_reach(nfa.rule_entry[rule as usize]),
            Node::Machine(m) => match nfa.explicit(m) {
                true => nfa.machine_reach(m),
                false => INF,
            },
            Node::Object(o) => nfa.object_bounds(o, 0).1,
        })
    }

    /// The most any position inside `kids` needs to finish the sequence of them, plus `tail`.
    fn seq_reach(&mut self, kids: &[NodeId], tail: u32) -> u32 {
        let mut after = tail;
        let mut most = 0u32;
        for &k in kids.iter().rev() {
            most = most.max(add(self.node_reach(k), after));
            after = add(after, self.node_ach(k));
        }
        most
    }

    /// Kids `start..start + len` of the kid table (a sequence's or alternation's), copied so
    /// the bounds can recurse while iterating.
    fn kids_of(&self, start: u32, len: u32) -> Vec<NodeId> {
        self.kids[start as usize..(start + len) as usize].to_vec()
    }

    /// The kids of sequence `node` from `kid` on (a sequence continuation's rest).
    pub(super) fn seq_rest(&self, node: NodeId, kid: u32) -> Vec<NodeId> {
        let Node::Seq { start, len } = self.nodes[node as usize] else {
            unreachable!("sequence continuation on a non-sequence")
        };
        self.kids_of(start + kid, len - kid)
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
                let rest = nfa.seq_rest(node, kid);
                let then = nfa.cont_ach(then);
                rest.into_iter().fold(then, |a, n| add(a, nfa.node_ach(n)))
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
                add(nfa.object_bounds(o, written).0, nfa.cont_ach(then))
            }
        })
    }

    /// The most bytes any position reachable once continuation `k` resumes needs to finish
    /// the rule.
    fn cont_reach(&mut self, k: ContId) -> u32 {
        self.memoized(Table::ContReach, k, |nfa| match nfa.conts[k as usize] {
            Cont::Done => 0,
            Cont::Seq { node, kid, then } => {
                let rest = nfa.seq_rest(node, kid);
                let tail = nfa.cont_ach(then);
                nfa.seq_reach(&rest, tail).max(nfa.cont_reach(then))
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
                let inside = nfa.object_bounds(o, written).1;
                add(inside, nfa.cont_ach(then)).max(nfa.cont_reach(then))
            }
        })
    }

    /// For object `o` with members `written`: bytes of some way to finish it, and the most any
    /// position inside a member still to come needs to finish it. Only objects whose end
    /// depends on required members alone are bounded.
    fn object_bounds(&mut self, o: u32, written: u64) -> (u32, u32) {
        let obj = self.objects[o as usize].clone();
        if obj.spec.presence.is_some() || obj.spec.min > 0 || obj.spec.max.is_some() {
            return (INF, INF);
        }
        let member = |nfa: &mut Nfa, (alone, with_sep): (NodeId, NodeId)| {
            let ach = nfa.node_ach(alone).max(nfa.node_ach(with_sep));
            let reach = nfa.node_reach(alone).max(nfa.node_reach(with_sep));
            (ach, reach)
        };
        // The required members still missing: the sum of their finite lengths and how many
        // have none known.
        let (mut finite, mut unknown) = (0u32, 0u32);
        let mut open: Vec<(u32, u32, bool)> = Vec::new();
        for (i, (&m, (_, required))) in obj.members.iter().zip(&obj.spec.members).enumerate() {
            if written & (1 << i) == 0 {
                let (ach, reach) = member(self, m);
                if *required {
                    match ach {
                        INF => unknown += 1,
                        n => finite = add(finite, n),
                    }
                }
                open.push((ach, reach, *required));
            }
        }
        if obj.extra.0 != NOTHING {
            let (_, reach) = member(self, obj.extra);
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
