//! Regular expressions (regex-syntax dialect) to [`Expr`], raw or inside a JSON string.

use crate::expr::{CharRanges, Expr};
use crate::json::{any_string_char, string_chars_of};
use crate::GrammarError;
use regex_syntax::hir::{Class, Hir, HirKind, Look};

/// How characters of the regex become bytes of the output.
#[derive(Clone, Copy, PartialEq)]
enum Target {
    /// The output is the matched text itself (UTF-8).
    Raw,
    /// The matched text is the value of a JSON string: characters are written with JSON's
    /// canonical escaping.
    JsonString,
}

fn parse(re: &str, pointer: &str) -> Result<Hir, GrammarError> {
    regex_syntax::ParserBuilder::new()
        .build()
        .parse(re)
        .map_err(|e| GrammarError::InvalidRegex {
            pointer: pointer.to_string(),
            reason: e.to_string(),
        })
}

/// A regex the whole output must match (implicitly anchored at both ends).
pub fn regex_to_expr(re: &str) -> Result<Expr, GrammarError> {
    let hir = parse(re, "regex")?;
    let inner = split_anchors(&hir);
    let mut alts = Vec::new();
    for (_, _, h) in inner {
        alts.push(translate(&h, Target::Raw, "regex")?);
    }
    Ok(Expr::alt(alts))
}

/// The content (between the quotes) of a JSON string whose value matches the JSON Schema
/// `pattern` (an unanchored search, ECMA-262 flavoured: `\d` and `\w` are ASCII).
pub fn pattern_to_string_content(pattern: &str, pointer: &str) -> Result<Expr, GrammarError> {
    let hir = parse(&ecma_to_rust(pattern), pointer)?;
    let branches = split_anchors(&hir);
    let any = Expr::shared(Expr::star(any_string_char()));
    let mut alts = Vec::new();
    for (start, end, h) in branches {
        let h = trim_open_ends(h, start, end);
        let body = translate(&h, Target::JsonString, pointer)?;
        alts.push(Expr::concat([
            if start { Expr::Empty } else { any.clone() },
            body,
            if end { Expr::Empty } else { any.clone() },
        ]));
    }
    Ok(Expr::alt(alts))
}

/// At an unanchored end of a search pattern, a repetition `X{m,n}` matches exactly what
/// `X{m}` does (the surrounding "anything" absorbs the rest): `[a-z]{1,255}` searched is
/// "contains a letter". Exact, and it spares the automaton hundreds of counter positions.
fn trim_open_ends(h: Hir, start: bool, end: bool) -> Hir {
    let at_least = |h: &Hir| -> Option<Hir> {
        match h.kind() {
            HirKind::Repetition(r) if r.max != Some(r.min) => {
                let mut r = r.clone();
                r.max = Some(r.min);
                Some(Hir::repetition(r))
            }
            _ => None,
        }
    };
    if let Some(single) = (!start && !end).then(|| at_least(&h)).flatten() {
        return single;
    }
    let HirKind::Concat(parts) = h.kind() else {
        return h;
    };
    let mut parts = parts.clone();
    if !start {
        if let Some(first) = parts.first().and_then(at_least) {
            parts[0] = first;
        }
    }
    if !end {
        if let Some(last) = parts.last().and_then(at_least) {
            let n = parts.len() - 1;
            parts[n] = last;
        }
    }
    Hir::concat(parts)
}

/// The fewest characters a match of `pattern` (as a JSON Schema pattern) can have, if it
/// parses.
pub fn pattern_min_chars(pattern: &str) -> Option<usize> {
    fn min_chars(h: &Hir) -> usize {
        match h.kind() {
            HirKind::Empty | HirKind::Look(_) => 0,
            HirKind::Literal(l) => String::from_utf8_lossy(&l.0).chars().count(),
            HirKind::Class(_) => 1,
            HirKind::Repetition(r) => (r.min as usize).saturating_mul(min_chars(&r.sub)),
            HirKind::Capture(c) => min_chars(&c.sub),
            HirKind::Concat(v) => v.iter().map(min_chars).fold(0, usize::saturating_add),
            HirKind::Alternation(v) => v.iter().map(min_chars).min().unwrap_or(0),
        }
    }
    let hir = regex_syntax::ParserBuilder::new()
        .build()
        .parse(&ecma_to_rust(pattern))
        .ok()?;
    Some(min_chars(&hir))
}

/// Rewrites ECMA-262 classes whose meaning differs from Rust's Unicode-aware defaults.
fn ecma_to_rust(p: &str) -> String {
    let mut out = String::with_capacity(p.len() + 8);
    let mut chars = p.chars().peekable();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('d' | 'D' | 'w' | 'W')) => {
                    let body = if matches!(e, 'd' | 'D') {
                        "0-9"
                    } else {
                        "0-9A-Za-z_"
                    };
                    match (in_class, e.is_uppercase()) {
                        (true, false) => out.push_str(body),
                        (true, true) => {
                            // A negated class inside a class: keep Rust's ASCII-class syntax.
                            out.push_str(if e == 'D' { "[:^digit:]" } else { "[:^word:]" })
                        }
                        (false, neg) => {
                            out.push('[');
                            if neg {
                                out.push('^');
                            }
                            out.push_str(body);
                            out.push(']');
                        }
                    }
                }
                Some(e) if e.is_ascii_punctuation() || e == ' ' => {
                    // ECMA allows escaping any punctuation (`\/`); Rust accepts only some.
                    out.push_str(&regex_syntax::escape(&e.to_string()));
                }
                Some(e) => {
                    out.push('\\');
                    out.push(e);
                }
                None => out.push('\\'),
            },
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                if chars.peek() == Some(&'^') {
                    out.push('^');
                    chars.next();
                }
                if chars.peek() == Some(&']') {
                    out.push_str("\\]");
                    chars.next();
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            '[' if in_class => out.push_str("\\["),
            c => out.push(c),
        }
    }
    out
}

type Branch = (bool, bool, Hir);

/// Splits a top-level alternation into branches, each with its leading `^` / trailing `$`
/// removed and recorded. Anchors anywhere else are refused.
fn split_anchors(hir: &Hir) -> Vec<Branch> {
    let branches: Vec<Hir> = match hir.kind() {
        HirKind::Alternation(v) => v.clone(),
        _ => vec![hir.clone()],
    };
    let mut out = Vec::new();
    for b in branches {
        out.extend(split_branch(&b));
    }
    out
}

/// One branch of [`split_anchors`]. What is left between the anchors may itself be an
/// alternation with anchored branches, alone or in a lone group: `^(a$|b$)`, and
/// `^a$|^b$`, whose common `^` the parser factors out (`^(?:a$|b$)`). Its branches take the
/// outer anchors with their own.
fn split_branch(b: &Hir) -> Vec<Branch> {
    let mut parts: Vec<Hir> = match b.kind() {
        HirKind::Concat(v) => v.clone(),
        _ => vec![b.clone()],
    };
    let mut start = false;
    let mut end = false;
    while parts.first().is_some_and(is_start) {
        parts.remove(0);
        start = true;
    }
    while parts.last().is_some_and(is_end) {
        parts.pop();
        end = true;
    }
    if let [lone] = &parts[..] {
        let inner = match lone.kind() {
            HirKind::Capture(c) => &*c.sub,
            _ => lone,
        };
        if matches!(inner.kind(), HirKind::Concat(_) | HirKind::Alternation(_)) {
            let branches = split_anchors(inner);
            if branches.iter().any(|x| x.0 || x.1) {
                return branches
                    .into_iter()
                    .map(|(s, e, h)| (start || s, end || e, h))
                    .collect();
            }
        }
    }
    vec![(start, end, Hir::concat(parts))]
}

fn is_start(h: &Hir) -> bool {
    matches!(
        h.kind(),
        HirKind::Look(Look::Start | Look::StartLF | Look::StartCRLF)
    )
}

fn is_end(h: &Hir) -> bool {
    matches!(
        h.kind(),
        HirKind::Look(Look::End | Look::EndLF | Look::EndCRLF)
    )
}

fn encode_chars(set: &CharRanges, target: Target) -> Expr {
    match target {
        Target::Raw => Expr::chars(set.clone()),
        Target::JsonString => string_chars_of(set),
    }
}

fn translate(hir: &Hir, target: Target, pointer: &str) -> Result<Expr, GrammarError> {
    Ok(match hir.kind() {
        HirKind::Empty => Expr::Empty,
        HirKind::Literal(lit) => {
            let s = std::str::from_utf8(&lit.0).map_err(|_| GrammarError::InvalidRegex {
                pointer: pointer.to_string(),
                reason: "the regex matches bytes that are not UTF-8".into(),
            })?;
            match target {
                Target::Raw => Expr::literal(s.as_bytes()),
                Target::JsonString => {
                    Expr::concat(s.chars().map(|c| string_chars_of(&CharRanges::single(c))))
                }
            }
        }
        HirKind::Class(Class::Unicode(cls)) => {
            let set = CharRanges::new(cls.ranges().iter().map(|r| (r.start(), r.end())).collect());
            encode_chars(&set, target)
        }
        HirKind::Class(Class::Bytes(cls)) => {
            if cls.ranges().iter().any(|r| r.end() >= 0x80) {
                return Err(GrammarError::InvalidRegex {
                    pointer: pointer.to_string(),
                    reason: "byte classes beyond ASCII ((?-u) mode) are not supported".into(),
                });
            }
            let set = CharRanges::new(
                cls.ranges()
                    .iter()
                    .map(|r| (r.start() as char, r.end() as char))
                    .collect(),
            );
            encode_chars(&set, target)
        }
        HirKind::Look(look) => {
            return Err(GrammarError::InvalidRegex {
                pointer: pointer.to_string(),
                reason: format!(
                    "assertion {look:?} is only supported at the start or end of the pattern"
                ),
            })
        }
        HirKind::Repetition(rep) => {
            Expr::repeat(translate(&rep.sub, target, pointer)?, rep.min, rep.max)
        }
        HirKind::Capture(cap) => translate(&cap.sub, target, pointer)?,
        HirKind::Concat(v) => {
            let mut parts = Vec::with_capacity(v.len());
            for h in v {
                parts.push(translate(h, target, pointer)?);
            }
            Expr::concat(parts)
        }
        HirKind::Alternation(v) => {
            let mut parts = Vec::with_capacity(v.len());
            for h in v {
                parts.push(translate(h, target, pointer)?);
            }
            Expr::alt(parts)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecma_classes_become_ascii() {
        assert_eq!(ecma_to_rust(r"^\d+$"), "^[0-9]+$");
        assert_eq!(ecma_to_rust(r"[\d.]"), "[0-9.]");
        assert_eq!(ecma_to_rust(r"a\/b"), "a/b");
        assert_eq!(ecma_to_rust(r"\W"), "[^0-9A-Za-z_]");
    }

    #[test]
    fn open_ends_drop_extra_repetitions() {
        let t = |p: &str, s, e| trim_open_ends(parse(p, "#").unwrap(), s, e).to_string();
        assert_eq!(t("[a-z]{1,255}", false, false), t("[a-z]{1}", false, false));
        assert_eq!(t("a{2,5}b", false, true), t("a{2}b", false, true));
        assert_eq!(t("ba{2,}", true, false), t("ba{2}", true, false));
        // Anchored ends keep their bounds.
        assert_eq!(t("a{2,5}b", true, true), t("a{2,5}b", true, true));
        assert_ne!(t("ba{2,}", true, true), t("ba{2}", true, true));
    }

    #[test]
    fn anchors_inside_are_refused() {
        assert!(regex_to_expr("a^b").is_err());
        assert!(regex_to_expr(r"\bword").is_err());
        assert!(regex_to_expr("^(yes|no)$").is_ok());
        // Anchored alternatives, whose common `^` the parser factors out.
        for p in [
            "^a$|^b$",
            "^$|^a+$",
            "^(a|$)",
            "(^a|b)$",
            "^(a(-b)?$)|(^c$)",
        ] {
            assert!(pattern_to_string_content(p, "#").is_ok(), "{p}");
        }
        assert!(pattern_to_string_content("^(a$|b)c", "#").is_err());
    }
}
