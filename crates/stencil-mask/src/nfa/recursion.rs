//! Which rules are recursive, and how deep one token can nest them.
//!
//! Rules call each other; the rules that can reach themselves form strongly connected
//! components of the call graph ([`Recursion`]). A parse inside such a component can nest
//! without limit, so no finite bound holds for every position it can reach. One token can only
//! nest so far, though: where every way from a component rule's start to a call back into the
//! component reads one of a few bytes (`"` or `[` for JSON values), a token opens at most one
//! level per such byte it holds, and the vocabulary says how many that is
//! ([`Nfa::nesting_per_token`]). Left recursion (a cycle of calls that reads nothing) has no
//! such bound.

use super::{Cont, MachineDef, Nfa, Node, NodeId, NOTHING};
use crate::hash::FxHashSet;

/// No component (the rule is not recursive).
const NONE: u32 = u32::MAX;

/// The recursive components of the rule call graph.
#[derive(Debug, Default)]
pub(super) struct Recursion {
    /// Per rule: its component, or [`NONE`] if it cannot call itself.
    scc_of: Vec<u32>,
    /// Per component: its rules.
    pub members: Vec<Vec<u32>>,
}

impl Recursion {
    /// The component of `rule`, if it is recursive.
    pub fn scc_of(&self, rule: u32) -> Option<u32> {
        Some(self.scc_of[rule as usize]).filter(|&k| k != NONE)
    }
}

impl Nfa {
    /// The recursive components of the grammar's rules (Tarjan's algorithm over the calls
    /// each rule's body makes).
    pub(super) fn find_recursion(&self) -> Recursion {
        let n = self.rule_entry.len();
        let calls: Vec<Vec<u32>> = (0..n as u32).map(|r| self.calls_of(r)).collect();
        let mut t = Tarjan {
            calls: &calls,
            index: vec![NONE; n],
            low: vec![0; n],
            on_stack: vec![false; n],
            stack: Vec::new(),
            next: 0,
            out: Recursion {
                scc_of: vec![NONE; n],
                members: Vec::new(),
            },
        };
        for r in 0..n as u32 {
            if t.index[r as usize] == NONE {
                t.visit(r);
            }
        }
        t.out
    }

    /// The body of `rule` (the one kid of its entry sequence).
    fn rule_body(&self, rule: u32) -> NodeId {
        match self.conts[self.rule_entry[rule as usize] as usize] {
            Cont::Seq { node, kid, .. } => self.kids[self.seq_rest(node, kid).start as usize],
            _ => unreachable!("a rule's entry is a sequence continuation"),
        }
    }

    /// The rules `rule`'s body calls (not through other calls).
    fn calls_of(&self, rule: u32) -> Vec<u32> {
        let mut seen = FxHashSet::default();
        let mut stack = vec![self.rule_body(rule)];
        let mut out = Vec::new();
        while let Some(n) = stack.pop() {
            if !seen.insert(n) {
                continue;
            }
            match self.nodes[n as usize] {
                Node::Call(r) => out.push(r),
                _ => self.for_parts(n, |p| stack.push(p)),
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Calls `f` on each node directly inside `n` (a machine's operands included).
    fn for_parts(&self, n: NodeId, mut f: impl FnMut(NodeId)) {
        match self.nodes[n as usize] {
            Node::Seq { start, len } | Node::Alt { start, len } => self.kids
                [start as usize..(start + len) as usize]
                .iter()
                .for_each(|&k| f(k)),
            Node::Repeat { body, .. } => f(body),
            Node::Object(o) => {
                let obj = &self.objects[o as usize];
                let members = obj.members.iter().chain([&obj.extra]);
                members
                    .flat_map(|&(a, b)| [a, b])
                    .filter(|&k| k != NOTHING)
                    .for_each(f);
            }
            Node::Machine(m) => match &self.machine_defs[m as usize] {
                MachineDef::And(parts) => parts.iter().for_each(|&p| f(p)),
                MachineDef::Not(inner) => f(*inner),
                MachineDef::Counted { rest, .. } => rest.iter().for_each(|&p| f(p)),
                MachineDef::Dfa(_) => {}
            },
            Node::Empty | Node::Nothing | Node::Byte(..) | Node::Call(_) => {}
        }
    }

    /// The most calls into component `k` one token can open one inside another, or `None`
    /// if unknown.
    ///
    /// Pick a set `S` of bytes. Calls that follow each other with no byte of `S` read in
    /// between form chains along "rule -> component rule it can call before reading a byte of
    /// `S`"; if those edges have no cycle, a chain holds at most `chain(S)` calls, and a
    /// token with `m` bytes of `S` opens at most `chain(S) x (m + 1)` nested calls. `S` starts
    /// as every byte the component's rules read themselves; bytes frequent in tokens are
    /// dropped while the product does not grow (for JSON values `S` ends as `"` and `[`).
    pub(super) fn nesting_per_token(&self, rec: &Recursion, k: u32) -> Option<u32> {
        let most = self.most_per_token?;
        let rules = &rec.members[k as usize];
        let mut ranges = FxHashSet::default();
        for &r in rules {
            self.own_bytes(self.rule_body(r), &mut FxHashSet::default(), &mut ranges);
        }
        let mut set = [false; 256];
        for &(lo, hi) in &ranges {
            (lo..=hi).for_each(|b| set[b as usize] = true);
        }
        let mut passable = Stamped::new(self.nodes.len());
        let mut seen = Stamped::new(self.nodes.len());
        // The chain of the current set, and the bytes whose presence in the set its search
        // looked at: dropping other bytes leaves the chain as it is.
        let mut touched = [false; 256];
        let mut chain = self.chain(rec, k, &set, &mut passable, &mut seen, &mut touched)? as u64;
        let nesting = |chain: u64, set: &[bool; 256]| -> u64 {
            let m: u64 = (0..256).filter(|&b| set[b]).map(|b| most[b] as u64).sum();
            chain * (m.min(self.max_token_len as u64) + 1)
        };
        let mut best = nesting(chain, &set);
        // Whole ranges first (one byte of `[0-9]` alone cannot go: the others still pass),
        // then single bytes; the ones most frequent in tokens first.
        let weight = |&(lo, hi): &(u8, u8)| (lo..=hi).map(|b| most[b as usize]).sum::<u32>();
        let mut groups: Vec<(u8, u8)> = ranges.into_iter().collect();
        groups.sort_unstable_by_key(|g| (std::cmp::Reverse(weight(g)), *g));
        let mut singles: Vec<(u8, u8)> = (0..=255u8)
            .filter(|&b| set[b as usize])
            .map(|b| (b, b))
            .collect();
        singles.sort_by_key(|g| std::cmp::Reverse(weight(g)));
        for (lo, hi) in groups.into_iter().chain(singles) {
            let before = set;
            (lo..=hi).for_each(|b| set[b as usize] = false);
            if set == before {
                continue;
            }
            if !(lo..=hi).any(|b| touched[b as usize]) {
                best = best.min(nesting(chain, &set));
                continue;
            }
            let mut now = [false; 256];
            match self.chain(rec, k, &set, &mut passable, &mut seen, &mut now) {
                Some(c) if nesting(c as u64, &set) <= best => {
                    best = nesting(c as u64, &set);
                    (chain, touched) = (c as u64, now);
                }
                _ => set = before,
            }
        }
        Some(best.min(u32::MAX as u64) as u32)
    }

    /// Collects the byte ranges node `n` reads itself (not inside calls or machines).
    fn own_bytes(&self, n: NodeId, seen: &mut FxHashSet<NodeId>, out: &mut FxHashSet<(u8, u8)>) {
        if !seen.insert(n) {
            return;
        }
        match self.nodes[n as usize] {
            Node::Byte(lo, hi) => {
                out.insert((lo, hi));
            }
            Node::Call(_) | Node::Machine(_) => {}
            _ => self.for_parts(n, |part| self.own_bytes(part, seen, out)),
        }
    }

    /// The most rules along the edges "rule -> component rule it can call before reading a
    /// byte of `set`", or `None` if they have a cycle.
    fn chain(
        &self,
        rec: &Recursion,
        k: u32,
        set: &[bool; 256],
        passable: &mut Stamped,
        seen: &mut Stamped,
        touched: &mut [bool; 256],
    ) -> Option<u32> {
        let rules = &rec.members[k as usize];
        passable.reset();
        let edges: Vec<Vec<usize>> = rules
            .iter()
            .map(|&r| {
                let mut out = Vec::new();
                seen.reset();
                let mut walk = Walk {
                    nfa: self,
                    rec,
                    k,
                    set,
                    passable,
                    seen,
                    touched,
                };
                walk.leading_calls(self.rule_body(r), &mut out);
                out.iter()
                    .map(|c| rules.iter().position(|x| x == c).expect("a member"))
                    .collect()
            })
            .collect();
        // Longest path by depth-first search; `active` finds a cycle.
        fn longest(
            i: usize,
            edges: &[Vec<usize>],
            memo: &mut [Option<u32>],
            active: &mut [bool],
        ) -> Option<u32> {
            if let Some(n) = memo[i] {
                return Some(n);
            }
            if active[i] {
                return None;
            }
            active[i] = true;
            let mut most = 1;
            for &j in &edges[i] {
                most = most.max(1 + longest(j, edges, memo, active)?);
            }
            active[i] = false;
            memo[i] = Some(most);
            Some(most)
        }
        let mut memo = vec![None; rules.len()];
        let mut active = vec![false; rules.len()];
        let mut most = 0;
        for i in 0..rules.len() {
            most = most.max(longest(i, &edges, &mut memo, &mut active)?);
        }
        Some(most)
    }
}

/// A search for the component calls reachable without reading a byte of `set`.
struct Walk<'a> {
    nfa: &'a Nfa,
    rec: &'a Recursion,
    k: u32,
    set: &'a [bool; 256],
    /// Per node, valid where stamped with the current search: whether it can be matched
    /// without reading a byte of `set` (calls, machines and objects are taken to be).
    passable: &'a mut Stamped,
    /// Nodes already searched from the current rule.
    seen: &'a mut Stamped,
    /// The bytes whose presence in `set` the search looked at.
    touched: &'a mut [bool; 256],
}

/// Per-node marks that a new search forgets at once: a mark counts only where its stamp is
/// the current one.
struct Stamped {
    stamp: u32,
    marks: Vec<(u32, bool)>,
}

impl Stamped {
    fn new(nodes: usize) -> Stamped {
        Stamped {
            stamp: 1,
            marks: vec![(0, false); nodes],
        }
    }

    /// Forgets every mark.
    fn reset(&mut self) {
        self.stamp += 1;
    }

    fn get(&self, n: NodeId) -> Option<bool> {
        let (s, v) = self.marks[n as usize];
        (s == self.stamp).then_some(v)
    }

    fn set(&mut self, n: NodeId, v: bool) {
        self.marks[n as usize] = (self.stamp, v);
    }
}

impl Walk<'_> {
    /// Pushes onto `out` the component rules `n` can call before reading a byte of the set.
    fn leading_calls(&mut self, n: NodeId, out: &mut Vec<u32>) {
        if self.seen.get(n).is_some() {
            return;
        }
        self.seen.set(n, true);
        let nfa = self.nfa;
        match nfa.nodes[n as usize] {
            Node::Call(r) => {
                if self.rec.scc_of(r) == Some(self.k) {
                    out.push(r);
                }
            }
            Node::Seq { start, len } => {
                for &kid in &nfa.kids[start as usize..(start + len) as usize] {
                    self.leading_calls(kid, out);
                    if !self.passable(kid) {
                        break;
                    }
                }
            }
            _ => nfa.for_parts(n, |part| self.leading_calls(part, out)),
        }
    }

    fn passable(&mut self, n: NodeId) -> bool {
        if let Some(p) = self.passable.get(n) {
            return p;
        }
        let nfa = self.nfa;
        let p = match nfa.nodes[n as usize] {
            Node::Empty | Node::Call(_) | Node::Machine(_) | Node::Object(_) => true,
            Node::Nothing => false,
            Node::Byte(lo, hi) => {
                (lo..=hi).for_each(|b| self.touched[b as usize] = true);
                (lo..=hi).any(|b| !self.set[b as usize])
            }
            Node::Seq { start, len } => nfa.kids[start as usize..(start + len) as usize]
                .iter()
                .all(|&k| self.passable(k)),
            Node::Alt { start, len } => nfa.kids[start as usize..(start + len) as usize]
                .iter()
                .any(|&k| self.passable(k)),
            Node::Repeat { body, min, .. } => min == 0 || self.passable(body),
        };
        self.passable.set(n, p);
        p
    }
}

/// Tarjan's strongly connected components over rule calls.
struct Tarjan<'a> {
    calls: &'a [Vec<u32>],
    index: Vec<u32>,
    low: Vec<u32>,
    on_stack: Vec<bool>,
    stack: Vec<u32>,
    next: u32,
    out: Recursion,
}

impl Tarjan<'_> {
    fn visit(&mut self, r: u32) {
        let i = r as usize;
        self.index[i] = self.next;
        self.low[i] = self.next;
        self.next += 1;
        self.stack.push(r);
        self.on_stack[i] = true;
        for &c in &self.calls[i] {
            let j = c as usize;
            if self.index[j] == NONE {
                self.visit(c);
                self.low[i] = self.low[i].min(self.low[j]);
            } else if self.on_stack[j] {
                self.low[i] = self.low[i].min(self.index[j]);
            }
        }
        if self.low[i] == self.index[i] {
            let mut scc = Vec::new();
            loop {
                let x = self.stack.pop().expect("on the stack");
                self.on_stack[x as usize] = false;
                scc.push(x);
                if x == r {
                    break;
                }
            }
            // A component is recursive if it has several rules or a rule calling itself.
            if scc.len() > 1 || self.calls[i].contains(&r) {
                let k = self.out.members.len() as u32;
                for &x in &scc {
                    self.out.scc_of[x as usize] = k;
                }
                scc.sort_unstable();
                self.out.members.push(scc);
            }
        }
    }
}
