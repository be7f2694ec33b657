//! A reasoning prefix ("think, then answer"): free text up to an end marker, then the
//! constraint.

use crate::error::GrammarError;
use crate::expr::{special_token_bytes, CharRanges, Expr, Grammar};

/// Blank characters allowed between the end marker and the constrained output (models write
/// `</think>\n\n` before their answer).
const GAP: u32 = 8;

/// `then` preceded by reasoning: optionally `start`, then any text in which `end` does not
/// occur, then `end` and up to eight blanks. `then` is unchanged behind it (its rules are
/// called from the new start rule). `end` must not be empty. A marker for which `control`
/// is true is the model's control token of that text (resolved against the vocabulary when
/// the automaton is built); its text is kept out of the reasoning all the same.
///
/// ```
/// use stencil_grammar::{compile, reasoning_then, ConstraintSpec, Options};
///
/// let answer = compile(&ConstraintSpec::Choice(vec!["yes".into(), "no".into()]), &Options::generation()).unwrap();
/// let g = reasoning_then(answer.grammar, "<think>", "</think>", |_| false).unwrap();
/// let accepts = |s: &str| stencil_grammar::ir::matches(&g.rule(g.start).expr, &g.rules, s.as_bytes());
/// assert!(accepts("<think>It rains.</think>\n\nyes"));
/// assert!(accepts("It rains.</think>no")); // the prompt opened the reasoning
/// assert!(!accepts("<think>It rains.</think>maybe"));
/// assert!(!accepts("yes"));
/// ```
pub fn reasoning_then(
    then: Grammar,
    start: &str,
    end: &str,
    control: impl Fn(&str) -> bool,
) -> Result<Grammar, GrammarError> {
    if end.is_empty() {
        return Err(GrammarError::Reasoning(
            "the end marker of the reasoning is empty".into(),
        ));
    }
    let mut g = Grammar::single(Expr::Nothing);
    let rest = g.embed(then);
    let blank = Expr::chars(CharRanges::new(vec![
        (' ', ' '),
        ('\t', '\t'),
        ('\n', '\n'),
        ('\r', '\r'),
    ]));
    let marker = |m: &str| match control(m) {
        true => Expr::Literal(special_token_bytes(m)),
        false => Expr::literal(m),
    };
    g.rules[0].name = "reasoning".into();
    g.rules[0].expr = Expr::concat([
        Expr::opt(if start.is_empty() {
            Expr::Empty
        } else {
            marker(start)
        }),
        Expr::text_without_any(&[end]),
        marker(end),
        Expr::repeat(blank, 0, Some(GAP)),
        Expr::Call(rest),
    ]);
    Ok(g)
}
