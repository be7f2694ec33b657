//! The grammar IR: regular expressions over bytes that may call rules.

use std::sync::Arc;

/// Index of a rule in a [`Grammar`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(pub u32);

/// A set of Unicode scalar values as sorted, disjoint, non-adjacent inclusive ranges.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct CharRanges(Vec<(char, char)>);

impl CharRanges {
    pub fn new(mut ranges: Vec<(char, char)>) -> Self {
        ranges.retain(|(a, b)| a <= b);
        ranges.sort();
        let mut out: Vec<(char, char)> = Vec::with_capacity(ranges.len());
        for (a, b) in ranges {
            if let Some(last) = out.last_mut() {
                if (a as u32) <= (last.1 as u32).saturating_add(1) {
                    last.1 = last.1.max(b);
                    continue;
                }
            }
            out.push((a, b));
        }
        Self(out)
    }

    pub fn single(c: char) -> Self {
        Self(vec![(c, c)])
    }

    /// Every Unicode scalar value.
    pub fn all() -> Self {
        Self(vec![('\0', char::MAX)])
    }

    pub fn ranges(&self) -> &[(char, char)] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, c: char) -> bool {
        self.0.iter().any(|&(a, b)| a <= c && c <= b)
    }

    pub fn union(&self, other: &Self) -> Self {
        let mut v = self.0.clone();
        v.extend_from_slice(&other.0);
        Self::new(v)
    }

    /// The scalar values not in `self`.
    pub fn complement(&self) -> Self {
        let mut out = Vec::new();
        let mut next: u32 = 0;
        for &(a, b) in &self.0 {
            if (a as u32) > next {
                push_scalar_range(&mut out, next, a as u32 - 1);
            }
            next = b as u32 + 1;
        }
        if next <= char::MAX as u32 {
            push_scalar_range(&mut out, next, char::MAX as u32);
        }
        Self::new(out)
    }

    pub fn intersect(&self, other: &Self) -> Self {
        self.complement().union(&other.complement()).complement()
    }

    pub fn subtract(&self, other: &Self) -> Self {
        self.intersect(&other.complement())
    }
}

/// Pushes `[lo, hi]` minus the surrogate gap, which `char` cannot represent.
fn push_scalar_range(out: &mut Vec<(char, char)>, lo: u32, hi: u32) {
    for (a, b) in [(lo, hi.min(0xD7FF)), (lo.max(0xE000), hi)] {
        if a <= b {
            if let (Some(a), Some(b)) = (char::from_u32(a), char::from_u32(b)) {
                out.push((a, b));
            }
        }
    }
}

/// A regular expression over bytes, extended with calls to other rules.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// The empty string.
    Empty,
    /// No string at all.
    Nothing,
    /// These exact bytes.
    Literal(Vec<u8>),
    /// One byte in one of these inclusive ranges.
    Bytes(Vec<(u8, u8)>),
    /// One character (UTF-8 encoded) from this set.
    Chars(CharRanges),
    Concat(Vec<Expr>),
    Alt(Vec<Expr>),
    /// `min` to `max` (unbounded if `None`) repetitions.
    Repeat {
        expr: Box<Expr>,
        min: u32,
        max: Option<u32>,
    },
    /// Strings matched by every operand (operands may not call rules).
    And(Vec<Expr>),
    /// Byte strings *not* matched by the operand (which may not call rules).
    Not(Box<Expr>),
    /// A call to another rule (the only source of recursion).
    Call(RuleId),
    /// A subexpression referenced from several places; compiled once per continuation.
    Shared(Arc<SharedExpr>),
    /// An explicit deterministic automaton (for languages awkward as regexes: `multipleOf`).
    Dfa(Arc<ByteDfa>),
    /// The members of a JSON object in any order (see [`ObjectExpr`]): between `{` and `}`.
    Object(Arc<ObjectExpr>),
}

/// The body of a JSON object whose members may come in any order: each declared member at
/// most once (required ones exactly once), additional members anywhere, separators between.
/// Not a regular expression of any useful size (the members seen are a set), so the automaton
/// layer tracks the set of written members itself. Equality is identity.
#[derive(Debug)]
pub struct ObjectExpr {
    /// Declared members (`"key" ws : ws value`) and whether each is required.
    pub members: Vec<(Expr, bool)>,
    /// One additional member (`Nothing` when none is allowed).
    pub extra: Expr,
    /// Between two members (`ws , ws`).
    pub sep: Expr,
    pub min: u32,
    pub max: Option<u32>,
    /// A presence constraint: per member its bit (if tracked), and which masks of tracked
    /// bits may end the object.
    pub presence: Option<(Vec<Option<u32>>, Vec<bool>)>,
}

impl PartialEq for ObjectExpr {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl ObjectExpr {
    /// True if the members in `written` (indices) may end the object with `count` members.
    pub fn may_end(&self, written: u64, count: u32) -> bool {
        let required = self
            .members
            .iter()
            .enumerate()
            .all(|(i, (_, r))| !r || written & (1 << i) != 0);
        let presence = self.presence.as_ref().is_none_or(|(bits, accept)| {
            let mask = bits
                .iter()
                .enumerate()
                .filter(|(i, _)| written & (1 << i) != 0)
                .fold(0u32, |m, (_, b)| m | b.map_or(0, |b| 1 << b));
            accept[mask as usize]
        });
        required && presence && count >= self.min
    }
}

/// A shared subexpression. Equality is identity (comparing contents of a DAG of shared nodes
/// would take exponential time), and whether it calls a rule is computed once.
#[derive(Debug)]
pub struct SharedExpr {
    pub expr: Expr,
    has_call: bool,
}

impl SharedExpr {
    /// True if the expression (not following calls) contains a rule call.
    pub fn has_call(&self) -> bool {
        self.has_call
    }
}

impl PartialEq for SharedExpr {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl std::ops::Deref for SharedExpr {
    type Target = Expr;
    fn deref(&self) -> &Expr {
        &self.expr
    }
}

/// An explicit DFA over bytes. State 0 is the start; missing transitions are dead.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ByteDfa {
    pub states: Vec<ByteDfaState>,
}

/// One state of a [`ByteDfa`]: transitions as inclusive byte ranges.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ByteDfaState {
    pub transitions: Vec<(u8, u8, u32)>,
    pub accepting: bool,
}

impl Expr {
    pub fn literal(bytes: impl AsRef<[u8]>) -> Self {
        let b = bytes.as_ref();
        if b.is_empty() {
            Expr::Empty
        } else {
            Expr::Literal(b.to_vec())
        }
    }

    pub fn chars(ranges: CharRanges) -> Self {
        if ranges.is_empty() {
            Expr::Nothing
        } else {
            Expr::Chars(ranges)
        }
    }

    /// Concatenation, flattening nested concatenations and simplifying `Empty`/`Nothing`.
    pub fn concat(parts: impl IntoIterator<Item = Expr>) -> Self {
        let mut out: Vec<Expr> = Vec::new();
        for p in parts {
            match p {
                Expr::Empty => {}
                Expr::Nothing => return Expr::Nothing,
                Expr::Concat(v) => out.extend(v),
                Expr::Literal(b) => match out.last_mut() {
                    Some(Expr::Literal(prev)) => prev.extend_from_slice(&b),
                    _ => out.push(Expr::Literal(b)),
                },
                p => out.push(p),
            }
        }
        match out.len() {
            0 => Expr::Empty,
            1 => out.pop().unwrap_or(Expr::Empty),
            _ => Expr::Concat(out),
        }
    }

    /// Alternation, flattening nested alternations and dropping `Nothing` and duplicate leaves.
    pub fn alt(parts: impl IntoIterator<Item = Expr>) -> Self {
        let mut out: Vec<Expr> = Vec::new();
        // Literals seen: a scan while few, a set once many (long enums).
        let mut literals: Option<std::collections::HashSet<Vec<u8>>> = None;
        let mut push = |out: &mut Vec<Expr>, x: Expr| match &x {
            Expr::Literal(b) => {
                let seen = match &mut literals {
                    Some(set) => !set.insert(b.clone()),
                    None => {
                        let seen = out.iter().any(|o| matches!(o, Expr::Literal(c) if c == b));
                        if out.len() >= 32 {
                            let mut set: std::collections::HashSet<Vec<u8>> = out
                                .iter()
                                .filter_map(|o| match o {
                                    Expr::Literal(c) => Some(c.clone()),
                                    _ => None,
                                })
                                .collect();
                            set.insert(b.clone());
                            literals = Some(set);
                        }
                        seen
                    }
                };
                if !seen {
                    out.push(x);
                }
            }
            Expr::Empty | Expr::Bytes(_) | Expr::Chars(_) | Expr::Call(_) | Expr::Shared(_) => {
                if !out.contains(&x) {
                    out.push(x);
                }
            }
            _ => out.push(x),
        };
        for p in parts {
            match p {
                Expr::Nothing => {}
                Expr::Alt(v) => {
                    for x in v {
                        push(&mut out, x);
                    }
                }
                p => push(&mut out, p),
            }
        }
        match out.len() {
            0 => Expr::Nothing,
            1 => out.pop().unwrap_or(Expr::Nothing),
            _ => Expr::Alt(out),
        }
    }

    pub fn repeat(expr: Expr, min: u32, max: Option<u32>) -> Self {
        if let Some(m) = max {
            if m < min {
                return Expr::Nothing;
            }
            if m == 0 {
                return Expr::Empty;
            }
        }
        match expr {
            Expr::Empty => Expr::Empty,
            Expr::Nothing if min == 0 => Expr::Empty,
            Expr::Nothing => Expr::Nothing,
            e if min == 1 && max == Some(1) => e,
            e => Expr::Repeat {
                expr: Box::new(e),
                min,
                max,
            },
        }
    }

    pub fn opt(expr: Expr) -> Self {
        Self::repeat(expr, 0, Some(1))
    }

    pub fn star(expr: Expr) -> Self {
        Self::repeat(expr, 0, None)
    }

    /// Any text (valid UTF-8) in which none of `markers` occurs.
    pub fn text_without_any(markers: &[&str]) -> Self {
        let any_byte = Expr::star(Expr::Bytes(vec![(0, 255)]));
        Expr::and(vec![
            Expr::star(Expr::chars(CharRanges::all())),
            Expr::Not(Box::new(Expr::concat([
                any_byte.clone(),
                Expr::alt(markers.iter().map(Expr::literal)),
                any_byte,
            ]))),
        ])
    }

    pub fn and(parts: Vec<Expr>) -> Self {
        if parts.contains(&Expr::Nothing) {
            return Expr::Nothing;
        }
        let mut parts = parts;
        parts.dedup();
        match parts.len() {
            0 => Expr::Empty,
            1 => parts.pop().unwrap_or(Expr::Empty),
            _ => Expr::And(parts),
        }
    }

    pub fn shared(expr: Expr) -> Self {
        match expr {
            e @ (Expr::Empty
            | Expr::Nothing
            | Expr::Literal(_)
            | Expr::Call(_)
            | Expr::Shared(_)) => e,
            e => {
                let has_call = e.has_call();
                Expr::Shared(Arc::new(SharedExpr { expr: e, has_call }))
            }
        }
    }

    /// True if this expression matches no string (structurally; `And` is not decided here).
    pub fn is_nothing(&self) -> bool {
        *self == Expr::Nothing
    }

    /// Number of nodes, counting shared subexpressions once per reference (an upper bound on
    /// automaton size before sharing).
    pub fn size(&self) -> usize {
        match self {
            Expr::Concat(v) | Expr::Alt(v) | Expr::And(v) => {
                1 + v.iter().map(Expr::size).sum::<usize>()
            }
            Expr::Repeat { expr, .. } | Expr::Not(expr) => 1 + expr.size(),
            Expr::Shared(_) => 1,
            Expr::Object(o) => {
                1 + o.extra.size() + o.members.iter().map(|(m, _)| m.size()).sum::<usize>()
            }
            _ => 1,
        }
    }

    /// True if the expression (not following calls) contains a rule call.
    pub fn has_call(&self) -> bool {
        match self {
            Expr::Call(_) => true,
            Expr::Concat(v) | Expr::Alt(v) | Expr::And(v) => v.iter().any(Expr::has_call),
            Expr::Repeat { expr, .. } | Expr::Not(expr) => expr.has_call(),
            Expr::Shared(e) => e.has_call,
            Expr::Object(o) => o.extra.has_call() || o.members.iter().any(|(m, _)| m.has_call()),
            _ => false,
        }
    }
}

impl Expr {
    /// True if the expression (not following calls) contains a complement ([`Expr::Not`]) of
    /// a language with strings that start with `{` or `[`: a complement of JSON objects or
    /// arrays, which spells out every serialization of them (the costly kind; complements of
    /// scalars are small).
    pub fn has_structured_complement(&self) -> bool {
        type Seen = std::collections::HashSet<*const SharedExpr>;
        type Memo = std::collections::HashMap<*const SharedExpr, bool>;
        fn walk(e: &Expr, seen: &mut Seen) -> bool {
            match e {
                Expr::Not(inner) => {
                    may_start_with(inner, b'{', &mut Memo::new())
                        || may_start_with(inner, b'[', &mut Memo::new())
                }
                Expr::Concat(v) | Expr::Alt(v) | Expr::And(v) => v.iter().any(|x| walk(x, seen)),
                Expr::Repeat { expr, .. } => walk(expr, seen),
                Expr::Shared(s) => seen.insert(Arc::as_ptr(s)) && walk(&s.expr, seen),
                Expr::Object(o) => {
                    walk(&o.extra, seen) || o.members.iter().any(|(m, _)| walk(m, seen))
                }
                _ => false,
            }
        }
        /// Whether some string of `e` may start with byte `b` (over-approximated).
        fn may_start_with(e: &Expr, b: u8, seen: &mut Memo) -> bool {
            match e {
                Expr::Empty | Expr::Nothing => false,
                Expr::Literal(v) => v.first() == Some(&b),
                Expr::Bytes(r) => r.iter().any(|&(lo, hi)| (lo..=hi).contains(&b)),
                Expr::Chars(c) => b >= 0x80 || c.contains(b as char),
                Expr::Concat(v) => {
                    for x in v {
                        if may_start_with(x, b, seen) {
                            return true;
                        }
                        if !crate::matcher::matches(x, &[], b"") {
                            return false;
                        }
                    }
                    false
                }
                Expr::Alt(v) | Expr::And(v) => v.iter().any(|x| may_start_with(x, b, seen)),
                Expr::Repeat { expr, .. } => may_start_with(expr, b, seen),
                Expr::Shared(s) => {
                    if let Some(&known) = seen.get(&Arc::as_ptr(s)) {
                        return known;
                    }
                    let r = may_start_with(&s.expr, b, seen);
                    seen.insert(Arc::as_ptr(s), r);
                    r
                }
                Expr::Not(_) | Expr::Call(_) | Expr::Dfa(_) | Expr::Object(_) => true,
            }
        }
        walk(self, &mut Seen::new())
    }
}

/// The byte that opens and closes a special token's name in the IR (see
/// [`special_token_bytes`]). Never part of UTF-8 text, so no text reaches a special token and
/// a special token is never text.
pub const SPECIAL_TOKEN_MARK: u8 = 0xFF;

/// How the IR spells the special (control) token whose text is `name` (`<|im_end|>`): the
/// name between two [`SPECIAL_TOKEN_MARK`] bytes. The token trie gives special tokens these
/// bytes, so a grammar allows one exactly where it names it.
pub fn special_token_bytes(name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + 2);
    out.push(SPECIAL_TOKEN_MARK);
    out.extend_from_slice(name.as_bytes());
    out.push(SPECIAL_TOKEN_MARK);
    out
}

/// A named rule: its body is matched when the rule is called.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub name: String,
    pub expr: Expr,
}

/// A set of rules and the one the whole output must match.
#[derive(Debug, Clone, PartialEq)]
pub struct Grammar {
    pub rules: Vec<Rule>,
    pub start: RuleId,
    /// Arrays whose items must all differ (JSON Schema `uniqueItems` over items that are not
    /// a small finite set): a condition no automaton of useful size states, so the matcher
    /// checks it on the text (see [`DistinctItems`]).
    pub distinct: Vec<DistinctItems>,
}

/// A JSON array whose items must be pairwise different as JSON values (`1` equals `1.0`,
/// objects equal whatever their member order). `array` is the array's rule (`[` … `]`, called,
/// never inlined) and `items` the rules its items are called as, one per item; an item equal to
/// an earlier item of the same array is refused as soon as it is complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistinctItems {
    pub array: RuleId,
    pub items: Vec<RuleId>,
}

impl Grammar {
    /// A grammar of one rule.
    pub fn single(expr: Expr) -> Self {
        Self {
            rules: vec![Rule {
                name: "start".into(),
                expr,
            }],
            start: RuleId(0),
            distinct: Vec::new(),
        }
    }

    pub fn rule(&self, id: RuleId) -> &Rule {
        &self.rules[id.0 as usize]
    }
}

impl Grammar {
    /// Appends `other`'s rules (their calls renumbered) and returns the id of its start rule, so
    /// that grammars compiled separately (one schema per tool) can call each other's starts.
    pub fn embed(&mut self, other: Grammar) -> RuleId {
        let offset = self.rules.len() as u32;
        let shift = |r: RuleId| RuleId(r.0 + offset);
        self.distinct
            .extend(other.distinct.iter().map(|d| DistinctItems {
                array: shift(d.array),
                items: d.items.iter().copied().map(shift).collect(),
            }));
        let mut memo = std::collections::HashMap::new();
        for rule in other.rules {
            let expr = renumber(&rule.expr, offset, &mut memo);
            self.rules.push(Rule {
                name: rule.name,
                expr,
            });
        }
        RuleId(other.start.0 + offset)
    }

    /// Adds a rule and returns its id.
    pub fn add_rule(&mut self, name: impl Into<String>, expr: Expr) -> RuleId {
        self.rules.push(Rule {
            name: name.into(),
            expr,
        });
        RuleId(self.rules.len() as u32 - 1)
    }
}

/// `e` with every call shifted by `offset`. Shared nodes stay shared (one copy per original).
fn renumber(
    e: &Expr,
    offset: u32,
    memo: &mut std::collections::HashMap<*const SharedExpr, Expr>,
) -> Expr {
    if !e.has_call() {
        return e.clone();
    }
    let all = |v: &[Expr], memo: &mut _| v.iter().map(|x| renumber(x, offset, memo)).collect();
    match e {
        Expr::Call(r) => Expr::Call(RuleId(r.0 + offset)),
        Expr::Concat(v) => Expr::Concat(all(v, memo)),
        Expr::Alt(v) => Expr::Alt(all(v, memo)),
        Expr::And(v) => Expr::And(all(v, memo)),
        Expr::Not(x) => Expr::Not(Box::new(renumber(x, offset, memo))),
        Expr::Repeat { expr, min, max } => Expr::Repeat {
            expr: Box::new(renumber(expr, offset, memo)),
            min: *min,
            max: *max,
        },
        Expr::Shared(s) => {
            let key = Arc::as_ptr(s);
            if let Some(done) = memo.get(&key) {
                return done.clone();
            }
            let done = Expr::shared(renumber(&s.expr, offset, memo));
            memo.insert(key, done.clone());
            done
        }
        Expr::Object(o) => Expr::Object(Arc::new(ObjectExpr {
            members: o
                .members
                .iter()
                .map(|(m, r)| (renumber(m, offset, memo), *r))
                .collect(),
            extra: renumber(&o.extra, offset, memo),
            sep: o.sep.clone(),
            min: o.min,
            max: o.max,
            presence: o.presence.clone(),
        })),
        other => other.clone(),
    }
}
