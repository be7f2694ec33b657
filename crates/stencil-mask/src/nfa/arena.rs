//! The arena builder: grammar expressions to hash-consed nodes, one per distinct
//! subexpression.

use super::*;

/// Expr trees to the hash-consed node arena.
pub(super) struct ArenaBuilder {
    pub(super) nodes: Vec<Node>,
    pub(super) kids: Vec<NodeId>,
    pub(super) leaves: FxHashMap<Node, NodeId>,
    /// Sequences and alternations by `[tag, kids...]` (tag 0: sequence, 1: alternation).
    pub(super) lists: FxHashMap<Vec<u32>, NodeId>,
    pub(super) key: Vec<u32>,
    /// `Byte(b, b)` leaves by byte (the most common leaf: every literal byte).
    pub(super) single: [NodeId; 256],
    pub(super) shared: FxHashMap<*const SharedExpr, NodeId>,
    pub(super) chars: FxHashMap<CharRanges, NodeId>,
    pub(super) machines: FxHashMap<String, u32>,
    pub(super) machine_defs: Vec<MachineDef>,
    pub(super) boundary: [bool; 256],
    /// The node of one JSON string character (the unit of `minLength`/`maxLength`).
    pub(super) unit: NodeId,
    /// Fewest bytes each node matches (calls count 0, machines what their definition shows,
    /// `Nothing` u32::MAX).
    pub(super) min_len: Vec<u32>,
    /// Nodes every string of which is exactly one JSON string character (see `one_char`).
    pub(super) one_char: FxHashSet<NodeId>,
    pub(super) objects: Vec<ObjectNode>,
    pub(super) object_ids: FxHashMap<*const stencil_grammar::ir::ObjectExpr, NodeId>,
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
    pub(super) fn push(&mut self, n: Node) -> NodeId {
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

    pub(super) fn byte(&mut self, b: u8) -> NodeId {
        let id = self.single[b as usize];
        if id != u32::MAX {
            return id;
        }
        let id = self.leaf(Node::Byte(b, b));
        self.single[b as usize] = id;
        id
    }

    pub(super) fn leaf(&mut self, n: Node) -> NodeId {
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
    pub(super) fn list(&mut self, alt: bool, mut kids: Vec<NodeId>) -> NodeId {
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

    pub(super) fn machine(&mut self, key: String, def: MachineDef) -> NodeId {
        if let Some(&m) = self.machines.get(&key) {
            return self.leaf(Node::Machine(m));
        }
        // Fewest bytes: a counter's minimum (every character is a byte at least) and what
        // each operand of an intersection needs; a complement or a DFA may match little.
        let shortest = match &def {
            MachineDef::Counted { min, rest, .. } => rest
                .iter()
                .map(|&k| self.min_len[k as usize])
                .fold(*min, u32::max),
            MachineDef::And(kids) => kids
                .iter()
                .map(|&k| self.min_len[k as usize])
                .fold(0, u32::max),
            MachineDef::Dfa(d) => shortest_accepted(d),
            MachineDef::Not(_) => 0,
        };
        self.machine_defs.push(def);
        let m = self.machine_defs.len() as u32 - 1;
        self.machines.insert(key, m);
        let id = self.leaf(Node::Machine(m));
        self.min_len[id as usize] = shortest;
        id
    }

    pub(super) fn node(&mut self, e: &Expr) -> Result<NodeId, BuildError> {
        let id = self.node_inner(e)?;
        if one_char(e, &self.one_char, &self.shared) {
            self.one_char.insert(id);
        }
        Ok(id)
    }

    pub(super) fn node_inner(&mut self, e: &Expr) -> Result<NodeId, BuildError> {
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
                let kid = self.node(inner)?;
                self.not_node(kid)
            }
            Expr::Object(o) => {
                let key = Arc::as_ptr(o);
                if let Some(&id) = self.object_ids.get(&key) {
                    return Ok(id);
                }
                let sep = self.node(&o.sep)?;
                let pair = |b: &mut Self, e: &Expr| -> Result<(NodeId, NodeId), BuildError> {
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

    /// The complement of `kid`.
    fn not_node(&mut self, mut kid: NodeId) -> NodeId {
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

    /// `kid` as `(a, middle, b)` if every string of it starts with the single byte `a` and
    /// ends with the single byte `b` by its structure (a JSON string: its quotes).
    fn framed(&mut self, kid: NodeId) -> Option<(u8, NodeId, u8)> {
        let (a, rest) = self.split_end(kid, true)?;
        let (b, middle) = self.split_end(rest, false)?;
        Some((a, middle, b))
    }

    /// `node` as its first (`first`) or last single byte and the rest, where its structure
    /// shows one: a byte, a sequence whose first (last) kid has one, an alternation whose
    /// branches all share one.
    fn split_end(&mut self, node: NodeId, first: bool) -> Option<(u8, NodeId)> {
        match self.nodes[node as usize] {
            Node::Byte(lo, hi) if lo == hi => Some((lo, EMPTY)),
            Node::Seq { start, len } => {
                let mut kids = self.kids[start as usize..(start + len) as usize].to_vec();
                let end = if first { 0 } else { kids.len() - 1 };
                let (b, rest) = self.split_end(kids[end], first)?;
                kids[end] = rest;
                Some((b, self.list(false, kids)))
            }
            Node::Alt { start, len } => {
                let branches = self.kids[start as usize..(start + len) as usize].to_vec();
                let mut byte = None;
                let mut rests = Vec::with_capacity(branches.len());
                for k in branches {
                    let (b, rest) = self.split_end(k, first)?;
                    if *byte.get_or_insert(b) != b {
                        return None;
                    }
                    rests.push(rest);
                }
                Some((byte?, self.list(true, rests)))
            }
            _ => None,
        }
    }

    /// `and(a X b, not(a Y b), ...)` as `a and(X, not(Y), ...) b` when every kid is framed by
    /// the same single bytes (`oneOf` over strings: the quotes), so that the intersection
    /// works on the contents, where counted machines fold and stay lazy. Exact: `a s b` is
    /// in `a X b` iff `s` is in `X`, and outside `a Y b` iff `s` is outside `Y`.
    fn peel_frames(&mut self, kids: &[NodeId]) -> Result<Option<NodeId>, BuildError> {
        let mut frame = None;
        let mut middles = Vec::with_capacity(kids.len());
        for &k in kids {
            let (negated, seq) = match self.nodes[k as usize] {
                Node::Machine(m) => match self.machine_defs[m as usize] {
                    MachineDef::Not(x) => (true, x),
                    _ => return Ok(None),
                },
                _ => (false, k),
            };
            let Some((a, middle, b)) = self.framed(seq) else {
                return Ok(None);
            };
            if *frame.get_or_insert((a, b)) != (a, b) {
                return Ok(None);
            }
            middles.push((negated, middle));
        }
        let (Some((a, b)), true) = (frame, middles.iter().any(|&(negated, _)| !negated)) else {
            return Ok(None);
        };
        // Complements are made only once the whole intersection peels.
        let inner = middles
            .into_iter()
            .map(|(negated, m)| if negated { self.not_node(m) } else { m })
            .collect();
        let middle = self.and_node(inner)?;
        let (a, b) = (self.byte(a), self.byte(b));
        Ok(Some(self.list(false, vec![a, middle, b])))
    }

    /// The intersection of `kids`: length bounds in characters become one counter (the
    /// tightest bounds), counted machines among the kids fold into it, and a bound over a
    /// small alternation is distributed over its branches, so that every branch gets its own
    /// lazily stepped counter instead of one eager product of everything.
    pub(super) fn and_node(&mut self, kids: Vec<NodeId>) -> Result<NodeId, BuildError> {
        if let Some(peeled) = self.peel_frames(&kids)? {
            return Ok(peeled);
        }
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
    pub(super) fn nullable(&self, n: NodeId) -> bool {
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
pub(super) fn one_char(
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

pub(super) fn call_free(e: &Expr) -> Result<(), BuildError> {
    if e.has_call() {
        return Err(BuildError::Grammar(
            stencil_grammar::GrammarError::InvalidSchema {
                pointer: "#".into(),
                reason: "intersection or complement of a recursive subexpression".into(),
            },
        ));
    }
    Ok(())
}

/// The length of a shortest string `d` accepts (`u32::MAX` if none): a breadth-first search
/// that stops at the first accepting state, so it visits only the states that close to the
/// start (a few hundred of the leap-second DFA's 11,000).
fn shortest_accepted(d: &ByteDfa) -> u32 {
    if d.states.is_empty() {
        return u32::MAX;
    }
    let mut seen = vec![false; d.states.len()];
    seen[0] = true;
    let mut frontier = vec![0u32];
    let mut next = Vec::new();
    let mut depth = 0u32;
    while !frontier.is_empty() {
        for &s in &frontier {
            let state = &d.states[s as usize];
            if state.accepting {
                return depth;
            }
            for &(_, _, t) in &state.transitions {
                if !std::mem::replace(&mut seen[t as usize], true) {
                    next.push(t);
                }
            }
        }
        std::mem::swap(&mut frontier, &mut next);
        next.clear();
        depth += 1;
    }
    u32::MAX
}
