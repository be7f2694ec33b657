//! Structural tags: free text in which trigger strings open constrained regions, the way
//! XGrammar's structural tags and llama.cpp's lazy grammars work.
//!
//! The output is free text that contains no trigger, except where a tag begins: a tag is its
//! `begin` string (which starts with one of the triggers), a value under the tag's own
//! constraint, and its `end` string; then free text again. Several tags and triggers at once
//! (`<function=get_weather>` and `<function=get_time>` under the trigger `<function=`, say).
//! Tool calling (`crate::tools`) is one use of the same shape: the `<tool_call>` tag around a
//! name and its arguments.

use crate::expr::{Expr, Grammar};
use crate::{compile, Compiled, ConstraintSpec, GrammarError, Options};

/// One tag: `begin`, then what `content` accepts, then `end`.
#[derive(Debug, Clone)]
pub struct TagSpec {
    /// Opens the tag; must start with one of the triggers.
    pub begin: String,
    /// The tag's value; `None`: any text without `end`.
    pub content: Option<ConstraintSpec>,
    /// Closes the tag.
    pub end: String,
}

/// Free text with tags opened by triggers (see the module doc).
#[derive(Debug, Clone)]
pub struct StructuralTags {
    pub tags: Vec<TagSpec>,
    /// Strings that may appear in the free text only as the start of a tag.
    pub triggers: Vec<String>,
    /// At least one tag must appear (the output cannot be free text alone).
    pub at_least_one: bool,
    /// The output ends with the first tag.
    pub stop_after_first: bool,
}

/// `begin`, a call of `content` (embedded into `grammar`), `end`.
pub(crate) fn tag_expr(grammar: &mut Grammar, begin: &str, content: Grammar, end: &str) -> Expr {
    let value = grammar.embed(content);
    Expr::concat([Expr::literal(begin), Expr::Call(value), Expr::literal(end)])
}

/// Compiles structural tags: each tag's content under `options`, the free text around them.
pub fn compile_structural_tags(
    spec: &StructuralTags,
    options: &Options,
) -> Result<Compiled, GrammarError> {
    let bad = |m: String| GrammarError::StructuralTag(m);
    if spec.triggers.is_empty() {
        return Err(bad(
            "`triggers` is empty: at least one trigger opens the tags".into(),
        ));
    }
    if let Some(i) = spec.triggers.iter().position(String::is_empty) {
        return Err(bad(format!("triggers[{i}] is empty")));
    }
    if spec.tags.is_empty() {
        return Err(bad(
            "no tags: give at least one {begin, content, end}".into()
        ));
    }
    let mut grammar = Grammar::single(Expr::Nothing);
    let mut warnings = Vec::new();
    let mut tags = Vec::new();
    for (i, t) in spec.tags.iter().enumerate() {
        if !spec
            .triggers
            .iter()
            .any(|tr| t.begin.starts_with(tr.as_str()))
        {
            return Err(bad(format!(
                "tags[{i}].begin {:?} starts with none of the triggers ({}): the tag could never open",
                t.begin,
                spec.triggers
                    .iter()
                    .map(|t| format!("{t:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let content = match &t.content {
            Some(c) => {
                let compiled =
                    compile(c, options).map_err(|e| bad(format!("tags[{i}].content: {e}")))?;
                warnings.extend(compiled.warnings);
                compiled.grammar
            }
            None if t.end.is_empty() => {
                return Err(bad(format!(
                    "tags[{i}] has any-text content and an empty end: the tag could never close"
                )))
            }
            None => Grammar::single(Expr::text_without_any(&[t.end.as_str()])),
        };
        tags.push(tag_expr(&mut grammar, &t.begin, content, &t.end));
    }
    let triggers: Vec<&str> = spec.triggers.iter().map(String::as_str).collect();
    let text = Expr::shared(Expr::text_without_any(&triggers));
    let tag = Expr::shared(Expr::alt(tags));
    let tagged = Expr::concat([text.clone(), tag.clone()]);
    grammar.rules[0].name = "structural_tags".into();
    grammar.rules[0].expr = match (spec.stop_after_first, spec.at_least_one) {
        (true, true) => tagged,
        (true, false) => Expr::concat([text, Expr::opt(tag)]),
        (false, true) => Expr::concat([tagged.clone(), Expr::star(tagged), text]),
        (false, false) => Expr::concat([Expr::star(tagged), text]),
    };
    Ok(Compiled { grammar, warnings })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::matches;
    use serde_json::json;

    fn weather(at_least_one: bool, stop_after_first: bool) -> Grammar {
        let spec = StructuralTags {
            tags: vec![
                TagSpec {
                    begin: "<function=get_weather>".into(),
                    content: Some(ConstraintSpec::JsonSchema(
                        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}),
                    )),
                    end: "</function>".into(),
                },
                TagSpec {
                    begin: "<function=note>".into(),
                    content: None,
                    end: "</function>".into(),
                },
            ],
            triggers: vec!["<function=".into()],
            at_least_one,
            stop_after_first,
        };
        compile_structural_tags(&spec, &Options::generation())
            .unwrap()
            .grammar
    }

    fn accepts(g: &Grammar, s: &str) -> bool {
        matches(&g.rule(g.start).expr, &g.rules, s.as_bytes())
    }

    #[test]
    fn triggers_open_tags_in_free_text() {
        let g = weather(false, false);
        for ok in [
            "",
            "Just text, <function but no trigger.",
            "Let me look.<function=get_weather>{\"city\": \"Oslo\"}</function> Done.",
            "<function=note>any <text> here</function><function=get_weather>{\"city\":\"X\"}</function>",
        ] {
            assert!(accepts(&g, ok), "{ok:?}");
        }
        for bad in [
            // A trigger that opens no tag, a value outside the schema, an unclosed tag.
            "text <function=get_time>{}</function>",
            "<function=get_weather>{\"town\": \"Oslo\"}</function>",
            "<function=get_weather>{\"city\": \"Oslo\"}",
            "<function=get_weather>{\"city\": 1}</function>",
        ] {
            assert!(!accepts(&g, bad), "{bad:?}");
        }
        let once = weather(true, true);
        assert!(accepts(&once, "Sure. <function=note>x</function>"));
        assert!(!accepts(&once, "Sure."));
        assert!(!accepts(&once, "<function=note>x</function> and more"));
        let some = weather(true, false);
        assert!(!accepts(&some, "no tag"));
        assert!(accepts(
            &some,
            "<function=note>x</function> more <function=note>y</function>!"
        ));
    }

    #[test]
    fn bad_specs_are_named() {
        let tag = |begin: &str, end: &str| TagSpec {
            begin: begin.into(),
            content: None,
            end: end.into(),
        };
        let cases = [
            (vec![tag("<f>", "</f>")], vec![], "triggers` is empty"),
            (
                vec![tag("<f>", "</f>")],
                vec!["".to_string()],
                "triggers[0] is empty",
            ),
            (vec![], vec!["<".to_string()], "no tags"),
            (
                vec![tag("[f]", "[/f]")],
                vec!["<".to_string()],
                "tags[0].begin \"[f]\" starts with none",
            ),
            (
                vec![tag("<f>", "")],
                vec!["<".to_string()],
                "could never close",
            ),
        ];
        for (tags, triggers, message) in cases {
            let spec = StructuralTags {
                tags,
                triggers,
                at_least_one: false,
                stop_after_first: false,
            };
            let e = compile_structural_tags(&spec, &Options::generation()).unwrap_err();
            assert!(e.to_string().contains(message), "{e}");
        }
        let spec = StructuralTags {
            tags: vec![TagSpec {
                begin: "<f>".into(),
                content: Some(ConstraintSpec::JsonSchema(json!({"type": "strung"}))),
                end: "</f>".into(),
            }],
            triggers: vec!["<f".into()],
            at_least_one: false,
            stop_after_first: false,
        };
        let e = compile_structural_tags(&spec, &Options::generation()).unwrap_err();
        assert!(
            e.to_string()
                .contains("tags[0].content: invalid JSON Schema"),
            "{e}"
        );
    }
}
