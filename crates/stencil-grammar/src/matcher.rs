//! A small reference matcher for [`Expr`]: decides whether a (short) byte string matches.
//!
//! Used at compile time to filter `enum`/`const` values and property names against the rest of
//! a schema, so that those checks use exactly the language the automaton will enforce.

use crate::expr::{Expr, Rule};
use std::collections::{BTreeSet, HashMap};

/// True if `expr` matches all of `input`. `rules` resolves calls; calls deeper than a fixed
/// limit count as no match.
pub fn matches(expr: &Expr, rules: &[Rule], input: &[u8]) -> bool {
    let mut cx = Cx {
        rules,
        input,
        memo: HashMap::new(),
    };
    cx.ends(expr, 0, 0).contains(&input.len())
}

/// Evaluation context; shared subexpressions are memoized per start position (the IR is a DAG
/// whose unfolding can be exponential).
struct Cx<'a> {
    rules: &'a [Rule],
    input: &'a [u8],
    memo: HashMap<(usize, usize), BTreeSet<usize>>,
}

fn decode_char(input: &[u8], at: usize) -> Option<(char, usize)> {
    let rest = input.get(at..)?;
    let len = match *rest.first()? {
        b if b < 0x80 => 1,
        b if b >= 0xF0 => 4,
        b if b >= 0xE0 => 3,
        b if b >= 0xC0 => 2,
        _ => return None,
    };
    let s = std::str::from_utf8(rest.get(..len)?).ok()?;
    s.chars().next().map(|c| (c, len))
}

impl Cx<'_> {
    fn ends(&mut self, e: &Expr, start: usize, depth: u32) -> BTreeSet<usize> {
        let (rules, input) = (self.rules, self.input);
        let mut out = BTreeSet::new();
        if depth > 200 {
            return out;
        }
        match e {
            Expr::Empty => {
                out.insert(start);
            }
            Expr::Nothing => {}
            Expr::Literal(b) => {
                if input[start..].starts_with(b) {
                    out.insert(start + b.len());
                }
            }
            Expr::Bytes(ranges) => {
                if let Some(&b) = input.get(start) {
                    if ranges.iter().any(|&(lo, hi)| lo <= b && b <= hi) {
                        out.insert(start + 1);
                    }
                }
            }
            Expr::Chars(set) => {
                if let Some((c, len)) = decode_char(input, start) {
                    if set.contains(c) {
                        out.insert(start + len);
                    }
                }
            }
            Expr::Concat(parts) => {
                let mut cur = BTreeSet::from([start]);
                for p in parts {
                    let mut next = BTreeSet::new();
                    for &s in &cur {
                        next.extend(self.ends(p, s, depth + 1));
                    }
                    cur = next;
                    if cur.is_empty() {
                        break;
                    }
                }
                out = cur;
            }
            Expr::Alt(parts) => {
                for p in parts {
                    out.extend(self.ends(p, start, depth + 1));
                }
            }
            Expr::Repeat { expr, min, max } => {
                let mut cur = BTreeSet::from([start]);
                let mut seen = BTreeSet::new();
                if *min == 0 {
                    out.insert(start);
                }
                let mut k = 0u32;
                while !cur.is_empty() && max.is_none_or(|m| k < m) {
                    k += 1;
                    let mut next = BTreeSet::new();
                    for &s in &cur {
                        next.extend(self.ends(expr, s, depth + 1));
                    }
                    if k >= *min {
                        // Past the minimum, only new positions can lead anywhere new.
                        next.retain(|p| seen.insert(*p));
                        out.extend(next.iter().copied());
                    }
                    if k > *min + input.len() as u32 + 1 && next.is_empty() {
                        break;
                    }
                    cur = next;
                    if k >= *min + input.len() as u32 + 2 {
                        break;
                    }
                }
            }
            Expr::And(parts) => {
                let mut it = parts.iter();
                if let Some(first) = it.next() {
                    out = self.ends(first, start, depth + 1);
                    for p in it {
                        let o = self.ends(p, start, depth + 1);
                        out.retain(|x| o.contains(x));
                    }
                }
            }
            Expr::Not(inner) => {
                let inside = self.ends(inner, start, depth + 1);
                out = (start..=input.len())
                    .filter(|p| !inside.contains(p))
                    .collect();
            }
            Expr::Call(r) => {
                if let Some(rule) = rules.get(r.0 as usize) {
                    out = self.ends(&rule.expr, start, depth + 1);
                }
            }
            Expr::Shared(inner) => {
                let key = (std::sync::Arc::as_ptr(inner) as usize, start);
                if let Some(r) = self.memo.get(&key) {
                    return r.clone();
                }
                out = self.ends(&inner.expr, start, depth + 1);
                self.memo.insert(key, out.clone());
            }
            Expr::Object(o) => {
                // States (position, members written, count, first): breadth-first.
                let counted = o.min > 0 || o.max.is_some();
                let mut seen = std::collections::HashSet::new();
                let mut todo = vec![(start, 0u64, 0u32, true)];
                while let Some((pos, written, count, first)) = todo.pop() {
                    if !seen.insert((pos, written, count, first)) {
                        continue;
                    }
                    if o.may_end(written, count) {
                        out.insert(pos);
                    }
                    if o.max.is_some_and(|m| count >= m) {
                        continue;
                    }
                    let next_count = if counted { count + 1 } else { 0 };
                    let starts: Vec<usize> = if first {
                        vec![pos]
                    } else {
                        self.ends(&o.sep, pos, depth + 1).into_iter().collect()
                    };
                    for s0 in starts {
                        for (i, (m, _)) in o.members.iter().enumerate() {
                            if written & (1 << i) == 0 {
                                for p in self.ends(m, s0, depth + 1) {
                                    todo.push((p, written | 1 << i, next_count, false));
                                }
                            }
                        }
                        for p in self.ends(&o.extra, s0, depth + 1) {
                            todo.push((p, written, next_count, false));
                        }
                    }
                }
            }
            Expr::Dfa(dfa) => {
                let mut s = 0u32;
                if dfa.states.first().is_some_and(|st| st.accepting) {
                    out.insert(start);
                }
                for (i, &b) in input[start..].iter().enumerate() {
                    let Some(st) = dfa.states.get(s as usize) else {
                        break;
                    };
                    match st
                        .transitions
                        .iter()
                        .find(|&&(lo, hi, _)| lo <= b && b <= hi)
                    {
                        Some(&(_, _, t)) => s = t,
                        None => break,
                    }
                    if dfa.states.get(s as usize).is_some_and(|st| st.accepting) {
                        out.insert(start + i + 1);
                    }
                }
            }
        }
        out
    }
}
