//! Tokens named in a grammar (`<|im_end|>`, `<[128009]>`), resolved against a vocabulary.
//!
//! Grammars are compiled without a vocabulary, so a named token is kept in the IR as its name
//! between two [`SPECIAL_TOKEN_MARK`] bytes ([`special_token_bytes`]). The automaton layer,
//! which knows the vocabulary, then rewrites each name with [`Grammar::resolve_token_names`]:
//! a control token keeps that spelling (the token trie spells control tokens the same way), a
//! token named by id or an ordinary token named by its text becomes what the trie spells it as.

use std::collections::HashMap;
use std::sync::Arc;

use crate::expr::{Expr, Grammar, ObjectExpr, Rule, SharedExpr, SPECIAL_TOKEN_MARK};

/// A literal cut into its plain text and the tokens it names (`Err(name)`), in order.
fn pieces(bytes: &[u8]) -> Vec<Result<&[u8], &[u8]>> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while let Some(open) = rest.iter().position(|&b| b == SPECIAL_TOKEN_MARK) {
        let after = &rest[open + 1..];
        let Some(close) = after.iter().position(|&b| b == SPECIAL_TOKEN_MARK) else {
            break;
        };
        out.push(Ok(&rest[..open]));
        out.push(Err(&after[..close]));
        rest = &after[close + 1..];
    }
    out.push(Ok(rest));
    out
}

impl Grammar {
    /// The grammar with every named token replaced by `spell(name)` (the name without its
    /// marks, `<|im_end|>` or `<[42]>`), or the first error `spell` returns; `None` when no
    /// literal names a token (one walk over the grammar, nothing copied).
    pub fn resolve_token_names<E>(
        &self,
        mut spell: impl FnMut(&str) -> Result<Vec<u8>, E>,
    ) -> Result<Option<Grammar>, E> {
        let mut memo = HashMap::new();
        let mut f = |bytes: &[u8]| -> Result<Option<Expr>, E> {
            let pieces = pieces(bytes);
            if !pieces.iter().any(Result::is_err) {
                return Ok(None);
            }
            let mut out = Vec::with_capacity(bytes.len());
            for piece in pieces {
                match piece {
                    Ok(text) => out.extend_from_slice(text),
                    Err(name) => out.extend(spell(&String::from_utf8_lossy(name))?),
                }
            }
            Ok(Some(Expr::Literal(out)))
        };
        let mut rules: Option<Vec<Rule>> = None;
        for (i, rule) in self.rules.iter().enumerate() {
            if let Some(e) = rewrite(&rule.expr, &mut f, &mut memo)? {
                rules.get_or_insert_with(|| self.rules.clone())[i].expr = e;
            }
        }
        Ok(rules.map(|rules| Grammar {
            rules,
            start: self.start,
            distinct: self.distinct.clone(),
        }))
    }
}

type Memo = HashMap<*const SharedExpr, Option<Expr>>;

/// `e` with each literal replaced by `f(literal)` where that is `Some`; `None` when nothing
/// changed. Shared nodes are rewritten once.
fn rewrite<E>(
    e: &Expr,
    f: &mut impl FnMut(&[u8]) -> Result<Option<Expr>, E>,
    memo: &mut Memo,
) -> Result<Option<Expr>, E> {
    let list = |v: &[Expr], f: &mut _, memo: &mut Memo| -> Result<Option<Vec<Expr>>, E> {
        let mut out: Option<Vec<Expr>> = None;
        for (i, x) in v.iter().enumerate() {
            if let Some(new) = rewrite(x, f, memo)? {
                out.get_or_insert_with(|| v.to_vec())[i] = new;
            }
        }
        Ok(out)
    };
    Ok(match e {
        Expr::Literal(b) => f(b)?,
        Expr::Concat(v) => list(v, f, memo)?.map(Expr::Concat),
        Expr::Alt(v) => list(v, f, memo)?.map(Expr::Alt),
        Expr::And(v) => list(v, f, memo)?.map(Expr::And),
        Expr::Not(x) => rewrite(x, f, memo)?.map(|x| Expr::Not(Box::new(x))),
        Expr::Repeat { expr, min, max } => rewrite(expr, f, memo)?.map(|x| Expr::Repeat {
            expr: Box::new(x),
            min: *min,
            max: *max,
        }),
        Expr::Shared(s) => {
            let key = Arc::as_ptr(s);
            if let Some(done) = memo.get(&key) {
                return Ok(done.clone());
            }
            let done = rewrite(&s.expr, f, memo)?.map(Expr::shared);
            memo.insert(key, done.clone());
            done
        }
        Expr::Object(o) => {
            let mut changed = false;
            let mut members = Vec::with_capacity(o.members.len());
            for (m, required) in &o.members {
                let new = rewrite(m, f, memo)?;
                changed |= new.is_some();
                members.push((new.unwrap_or_else(|| m.clone()), *required));
            }
            let extra = rewrite(&o.extra, f, memo)?;
            changed |= extra.is_some();
            changed.then(|| {
                Expr::Object(Arc::new(ObjectExpr {
                    members,
                    extra: extra.unwrap_or_else(|| o.extra.clone()),
                    sep: o.sep.clone(),
                    min: o.min,
                    max: o.max,
                    presence: o.presence.clone(),
                }))
            })
        }
        Expr::Empty
        | Expr::Nothing
        | Expr::Bytes(_)
        | Expr::Chars(_)
        | Expr::Call(_)
        | Expr::Dfa(_) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::special_token_bytes;

    #[test]
    fn names_are_replaced_where_they_stand() {
        let mut lit = b"Hi ".to_vec();
        lit.extend(special_token_bytes("<[7]>"));
        lit.extend(b" there");
        lit.extend(special_token_bytes("<|end|>"));
        let g = Grammar::single(Expr::alt([Expr::Literal(lit), Expr::literal("plain")]));
        let plain = Grammar::single(Expr::literal("plain"));
        assert_eq!(
            plain.resolve_token_names(|_| Err::<Vec<u8>, ()>(())),
            Ok(None)
        );
        let r = g
            .resolve_token_names(|name| match name {
                "<[7]>" => Ok(b"seven".to_vec()),
                "<|end|>" => Ok(special_token_bytes(name)),
                other => Err(other.to_string()),
            })
            .unwrap()
            .expect("a token is named");
        let mut want = b"Hi seven there".to_vec();
        want.extend(special_token_bytes("<|end|>"));
        assert_eq!(
            r.rules[0].expr,
            Expr::alt([Expr::Literal(want), Expr::literal("plain")])
        );
        let bad = Grammar::single(Expr::Literal(special_token_bytes("<nope>")));
        assert_eq!(
            bad.resolve_token_names(|n| Err::<Vec<u8>, _>(n.to_string())),
            Err("<nope>".to_string())
        );
    }
}
