//! `not` (and `oneOf`'s exclusions) over values that may hold *any* JSON value: an object
//! open to additional members, an array of anything. Those parts call the recursive "any
//! value" rule, and a complement cannot be taken over a call. Within a nesting bound it can:
//! for the texts nested at most [`NOT_DEPTH`] deep, `p - n` equals
//! `p[any := any≤K] ∧ nesting≤K ∧ ¬ n[any := any≤K]` exactly (a slot of such a text holds a
//! value nested at most K deep), and that expression has no calls. Deeper values are refused:
//! the language shrinks to a subset, never grows. On the negated side a cheaper stand-in for
//! `any≤K` does as well ([`value_within_by_count`]): the text is valid JSON (the positive
//! side says so), and on valid JSON a slot that starts at a value and counts brackets to their
//! close covers exactly that value.

use std::collections::HashMap;
use std::sync::Arc;

use crate::expr::{Expr, ObjectExpr, RuleId, SharedExpr};
use crate::json::Json;

/// Bracket nesting (of the value itself, its own brackets counted) kept exact under `not`.
/// Measured: 4 pushes the JSON Schema Test Suite's `not` over an open object past the
/// 50,000-state limit of an eagerly built complement (flexible whitespace and digit counters
/// multiply every level); 3 does not.
pub(super) const NOT_DEPTH: u32 = 3;

/// True if every rule call in `e` calls `rule`.
pub(super) fn calls_only(e: &Expr, rule: RuleId) -> bool {
    match e {
        Expr::Call(r) => *r == rule,
        Expr::Concat(v) | Expr::Alt(v) | Expr::And(v) => v.iter().all(|k| calls_only(k, rule)),
        Expr::Repeat { expr, .. } | Expr::Not(expr) => calls_only(expr, rule),
        Expr::Shared(s) => !s.has_call() || calls_only(&s.expr, rule),
        Expr::Object(o) => {
            calls_only(&o.extra, rule)
                && calls_only(&o.sep, rule)
                && o.members.iter().all(|(m, _)| calls_only(m, rule))
        }
        _ => true,
    }
}

/// `e` with every call of `rule` replaced by `with` (shared nodes stay shared).
pub(super) fn substitute(e: &Expr, rule: RuleId, with: &Expr) -> Expr {
    Substitute {
        rule,
        with,
        memo: HashMap::new(),
    }
    .expr(e)
}

struct Substitute<'a> {
    rule: RuleId,
    with: &'a Expr,
    memo: HashMap<*const SharedExpr, Expr>,
}

impl Substitute<'_> {
    fn expr(&mut self, e: &Expr) -> Expr {
        let all = |me: &mut Self, v: &[Expr]| v.iter().map(|k| me.expr(k)).collect::<Vec<_>>();
        match e {
            Expr::Call(r) if *r == self.rule => self.with.clone(),
            Expr::Concat(v) => Expr::Concat(all(self, v)),
            Expr::Alt(v) => Expr::Alt(all(self, v)),
            Expr::And(v) => Expr::And(all(self, v)),
            Expr::Repeat { expr, min, max } => Expr::Repeat {
                expr: Box::new(self.expr(expr)),
                min: *min,
                max: *max,
            },
            Expr::Not(k) => Expr::Not(Box::new(self.expr(k))),
            Expr::Shared(s) if s.has_call() => {
                let key = Arc::as_ptr(s);
                if let Some(done) = self.memo.get(&key) {
                    return done.clone();
                }
                let done = Expr::shared(self.expr(&s.expr));
                self.memo.insert(key, done.clone());
                done
            }
            Expr::Object(o) => Expr::Object(Arc::new(ObjectExpr {
                members: o.members.iter().map(|(m, r)| (self.expr(m), *r)).collect(),
                extra: self.expr(&o.extra),
                sep: self.expr(&o.sep),
                min: o.min,
                max: o.max,
                presence: o.presence.clone(),
            })),
            other => other.clone(),
        }
    }
}

/// Any JSON value whose brackets nest at most `depth` deep.
pub(super) fn any_value_within(json: &Json, depth: u32) -> Expr {
    let scalars = Expr::alt([
        json.any_string(),
        json.number(),
        Expr::literal("true"),
        Expr::literal("false"),
        Expr::literal("null"),
    ]);
    let mut value = Expr::shared(scalars.clone());
    for _ in 0..depth {
        value = Expr::shared(Expr::alt([
            json.object_of_values(value.clone()),
            json.array_of_values(value),
            scalars.clone(),
        ]));
    }
    value
}

/// One JSON scalar, or a bracket and whatever follows up to the bracket that closes it by
/// count, nested at most `depth` deep: on valid JSON text exactly the values of that depth,
/// without the bracket-kind stack (2^depth states) a JSON grammar needs.
pub(super) fn value_within_by_count(json: &Json, depth: u32) -> Expr {
    let mut alts = vec![
        json.any_string(),
        json.number(),
        Expr::literal("true"),
        Expr::literal("false"),
        Expr::literal("null"),
    ];
    if depth > 0 {
        alts.push(Expr::concat([
            Expr::Bytes(vec![(b'[', b'['), (b'{', b'{')]),
            nesting_within(depth - 1),
            Expr::Bytes(vec![(b']', b']'), (b'}', b'}')]),
        ]));
    }
    Expr::shared(Expr::alt(alts))
}

/// Byte strings whose brackets outside JSON strings nest at most `depth` deep (a cheap
/// superset of the JSON texts nested that deep: it only counts).
pub(super) fn nesting_within(depth: u32) -> Expr {
    let other = Expr::Bytes(vec![
        (0x00, b'"' - 1),
        (b'"' + 1, b'[' - 1),
        (b'\\', b'\\'),
        (b'^', b'{' - 1),
        (b'|', b'|'),
        (b'~', 0xFF),
    ]);
    let string = Expr::shared(Expr::concat([
        Expr::literal("\""),
        Expr::star(Expr::alt([
            Expr::Bytes(vec![
                (0x00, b'"' - 1),
                (b'"' + 1, b'\\' - 1),
                (b'\\' + 1, 0xFF),
            ]),
            Expr::concat([Expr::literal("\\"), Expr::Bytes(vec![(0x00, 0xFF)])]),
        ])),
        Expr::literal("\""),
    ]));
    let open = Expr::Bytes(vec![(b'[', b'['), (b'{', b'{')]);
    let close = Expr::Bytes(vec![(b']', b']'), (b'}', b'}')]);
    let mut level = Expr::shared(Expr::star(Expr::alt([other.clone(), string.clone()])));
    for _ in 0..depth {
        level = Expr::shared(Expr::star(Expr::alt([
            other.clone(),
            string.clone(),
            Expr::concat([open.clone(), level, close.clone()]),
        ])));
    }
    level
}

/// True if `a` and `b` are the same expression, shared nodes compared by content (equality
/// of [`Expr`] compares them by identity, and two compilations of one schema build distinct
/// nodes). Gives up (false) after `budget` nodes: a missed equality only costs work.
pub(super) fn same_shape(a: &Expr, b: &Expr) -> bool {
    let mut budget = 100_000u32;
    same(a, b, &mut budget)
}

fn same(a: &Expr, b: &Expr, budget: &mut u32) -> bool {
    if *budget == 0 {
        return false;
    }
    *budget -= 1;
    let all = |x: &[Expr], y: &[Expr], budget: &mut u32| {
        x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y, budget))
    };
    match (a, b) {
        (Expr::Shared(x), Expr::Shared(y)) => Arc::ptr_eq(x, y) || same(&x.expr, &y.expr, budget),
        (Expr::Object(x), Expr::Object(y)) => {
            Arc::ptr_eq(x, y)
                || (x.min == y.min
                    && x.max == y.max
                    && x.presence == y.presence
                    && x.members.len() == y.members.len()
                    && x.members
                        .iter()
                        .zip(&y.members)
                        .all(|((m, r), (n, s))| r == s && same(m, n, budget))
                    && same(&x.extra, &y.extra, budget)
                    && same(&x.sep, &y.sep, budget))
        }
        (Expr::Concat(x), Expr::Concat(y))
        | (Expr::Alt(x), Expr::Alt(y))
        | (Expr::And(x), Expr::And(y)) => all(x, y, budget),
        (
            Expr::Repeat { expr, min, max },
            Expr::Repeat {
                expr: e2,
                min: m2,
                max: x2,
            },
        ) => min == m2 && max == x2 && same(expr, e2, budget),
        (Expr::Not(x), Expr::Not(y)) => same(x, y, budget),
        _ => a == b,
    }
}
