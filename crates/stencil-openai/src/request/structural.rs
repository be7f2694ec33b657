//! `response_format: {"type": "structural_tag", ...}`: free text with triggered, constrained
//! tags, in both shapes peers accept.
//!
//! - vLLM's and SGLang's: `{"structures": [{"begin", "schema", "end"}], "triggers": [...]}`.
//! - XGrammar's `format` object: `{"format": {"type": "triggered_tags", "triggers": [...],
//!   "tags": [{"begin", "content": {...}, "end"}], "at_least_one", "stop_after_first"}}`, a
//!   tag's content being `{"type": "json_schema", "json_schema": {...}}`, `regex` (`pattern`),
//!   `grammar` (`grammar`, GBNF or Lark), `const_string` (`value`) or `any_text`.

use serde_json::Value;
use stencil_types::{json_kind as kind, ConstraintSpec, StructuralTags, TagSpec};

use super::constraints::{grammar, schema_value};
use crate::error::ApiError;
use stencil_types::api::fields::{boolean, field, string, Obj};

const PARAM: &str = "response_format";

fn bad(message: String) -> ApiError {
    ApiError::invalid(PARAM, message)
}

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Obj, ApiError> {
    v.as_object()
        .ok_or_else(|| bad(format!("`{what}` must be an object, not {}", kind(v))))
}

fn array<'a>(o: &'a Obj, key: &str, what: &str) -> Result<&'a Vec<Value>, ApiError> {
    match field(o, key) {
        Some(Value::Array(a)) => Ok(a),
        Some(v) => Err(bad(format!(
            "`{what}.{key}` must be an array, not {}",
            kind(v)
        ))),
        None => Err(bad(format!("`{what}.{key}` is missing"))),
    }
}

fn text(o: &Obj, key: &str, what: &str) -> Result<String, ApiError> {
    string(o, key)
        .map_err(|_| bad(format!("`{what}.{key}` must be a string")))?
        .map(str::to_string)
        .ok_or_else(|| bad(format!("`{what}.{key}` is missing")))
}

fn triggers(o: &Obj, what: &str) -> Result<Vec<String>, ApiError> {
    array(o, "triggers", what)?
        .iter()
        .enumerate()
        .map(|(i, t)| {
            t.as_str()
                .map(str::to_string)
                .ok_or_else(|| bad(format!("`{what}.triggers[{i}]` must be a string")))
        })
        .collect()
}

/// The structural tags of a `response_format` object of type `structural_tag`.
pub(super) fn structural_tag(rf: &Obj) -> Result<ConstraintSpec, ApiError> {
    let what = "response_format";
    let spec = match field(rf, "format") {
        Some(f) => triggered_tags(object(f, "response_format.format")?)?,
        None => StructuralTags {
            tags: array(rf, "structures", what)?
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let at = format!("{what}.structures[{i}]");
                    let s = object(s, &at)?;
                    let schema = field(s, "schema")
                        .ok_or_else(|| bad(format!("`{at}.schema` is missing")))?;
                    Ok(TagSpec {
                        begin: text(s, "begin", &at)?,
                        content: Some(ConstraintSpec::JsonSchema(schema_value(PARAM, schema)?)),
                        end: text(s, "end", &at)?,
                    })
                })
                .collect::<Result<_, ApiError>>()?,
            triggers: triggers(rf, what)?,
            at_least_one: false,
            stop_after_first: false,
        },
    };
    Ok(ConstraintSpec::StructuralTags(spec))
}

fn triggered_tags(f: &Obj) -> Result<StructuralTags, ApiError> {
    let what = "response_format.format";
    match string(f, "type").ok().flatten() {
        Some("triggered_tags") => {}
        other => {
            return Err(bad(format!(
                "`{what}.type` is {}; stencil takes `triggered_tags`",
                other.map_or("missing".to_string(), |t| format!("`{t}`"))
            )))
        }
    }
    let tags = array(f, "tags", what)?
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let at = format!("{what}.tags[{i}]");
            let t = object(t, &at)?;
            let content = match field(t, "content") {
                Some(c) => content(
                    object(c, &format!("{at}.content"))?,
                    &format!("{at}.content"),
                )?,
                None => return Err(bad(format!("`{at}.content` is missing"))),
            };
            Ok(TagSpec {
                begin: text(t, "begin", &at)?,
                content,
                end: text(t, "end", &at)?,
            })
        })
        .collect::<Result<_, ApiError>>()?;
    Ok(StructuralTags {
        tags,
        triggers: triggers(f, what)?,
        at_least_one: boolean(f, "at_least_one")
            .map_err(|_| bad(format!("`{what}.at_least_one` must be true or false")))?
            .unwrap_or(false),
        stop_after_first: boolean(f, "stop_after_first")
            .map_err(|_| bad(format!("`{what}.stop_after_first` must be true or false")))?
            .unwrap_or(false),
    })
}

/// A tag's content; `None` is any text up to the tag's end.
fn content(c: &Obj, at: &str) -> Result<Option<ConstraintSpec>, ApiError> {
    Ok(Some(match string(c, "type").ok().flatten() {
        Some("json_schema") => {
            let s = field(c, "json_schema")
                .ok_or_else(|| bad(format!("`{at}.json_schema` is missing")))?;
            ConstraintSpec::JsonSchema(schema_value(PARAM, s)?)
        }
        Some("regex") => ConstraintSpec::Regex(text(c, "pattern", at)?),
        Some("grammar") => {
            let g = field(c, "grammar").ok_or_else(|| bad(format!("`{at}.grammar` is missing")))?;
            grammar(PARAM, g)?
        }
        Some("const_string") => ConstraintSpec::Choice(vec![text(c, "value", at)?]),
        Some("any_text") => return Ok(None),
        other => {
            return Err(bad(format!(
                "`{at}.type` is {}; expected json_schema, regex, grammar, const_string or any_text",
                other.map_or("missing".to_string(), |t| format!("`{t}`"))
            )))
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(rf: Value) -> Result<StructuralTags, ApiError> {
        match structural_tag(rf.as_object().unwrap())? {
            ConstraintSpec::StructuralTags(t) => Ok(t),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn both_shapes() {
        let t = parse(json!({"type": "structural_tag", "structures": [{"begin": "<function=f>", "schema": {"type": "object"}, "end": "</function>"}], "triggers": ["<function="]})).unwrap();
        assert_eq!(t.triggers, ["<function="]);
        assert_eq!(
            (t.tags[0].begin.as_str(), t.tags[0].end.as_str()),
            ("<function=f>", "</function>")
        );
        assert!(
            matches!(&t.tags[0].content, Some(ConstraintSpec::JsonSchema(s)) if s == &json!({"type": "object"}))
        );
        assert!(!t.at_least_one && !t.stop_after_first);
        let t = parse(json!({"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<"], "at_least_one": true, "stop_after_first": true, "tags": [
            {"begin": "<a>", "content": {"type": "json_schema", "json_schema": {"type": "integer"}}, "end": "</a>"},
            {"begin": "<b>", "content": {"type": "regex", "pattern": "[0-9]+"}, "end": "</b>"},
            {"begin": "<c>", "content": {"type": "grammar", "grammar": "start: \"x\""}, "end": "</c>"},
            {"begin": "<d>", "content": {"type": "const_string", "value": "yes"}, "end": "</d>"},
            {"begin": "<e>", "content": {"type": "any_text"}, "end": "</e>"}
        ]}})).unwrap();
        assert!(t.at_least_one && t.stop_after_first);
        let kinds: Vec<String> = t
            .tags
            .iter()
            .map(|t| match &t.content {
                Some(ConstraintSpec::JsonSchema(_)) => "schema".to_string(),
                Some(ConstraintSpec::Regex(r)) => format!("regex {r}"),
                Some(ConstraintSpec::Lark(_)) => "lark".to_string(),
                Some(ConstraintSpec::Choice(c)) => format!("const {}", c[0]),
                None => "any".to_string(),
                Some(other) => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            kinds,
            ["schema", "regex [0-9]+", "lark", "const yes", "any"]
        );
    }

    #[test]
    fn bad_shapes_are_named() {
        let cases = [
            (
                json!({"type": "structural_tag"}),
                "`response_format.structures` is missing",
            ),
            (
                json!({"type": "structural_tag", "structures": [{"begin": "<a>", "end": "</a>"}], "triggers": ["<"]}),
                "`response_format.structures[0].schema` is missing",
            ),
            (
                json!({"type": "structural_tag", "structures": [], "triggers": "<"}),
                "`response_format.triggers` must be an array",
            ),
            (
                json!({"type": "structural_tag", "format": {"type": "tags"}}),
                "stencil takes `triggered_tags`",
            ),
            (
                json!({"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<"], "tags": [{"begin": "<a>", "content": {"type": "json"}, "end": "</a>"}]}}),
                "`response_format.format.tags[0].content.type` is `json`",
            ),
            (
                json!({"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<"], "tags": [{"begin": "<a>", "content": {"type": "any_text"}}]}}),
                "`response_format.format.tags[0].end` is missing",
            ),
        ];
        for (rf, message) in cases {
            let e = parse(rf).unwrap_err();
            assert!(e.to_string().contains(message), "{e}");
            assert!(format!("{e:?}").contains("response_format"), "{e:?}");
        }
    }
}
