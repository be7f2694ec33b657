//! The constraint fields: `response_format`, vLLM's `guided_*` and `structured_outputs`, and
//! the whitespace settings that go with them.

use serde_json::Value;
use stencil_types::{json_kind as kind, ConstraintSpec, Whitespace};

use crate::error::ApiError;
use stencil_types::api::fields::{boolean, field, string, Obj};

/// Parses a JSON Schema given inline or as JSON text (vLLM accepts both for `guided_json`).
pub(crate) fn schema_value(param: &str, v: &Value) -> Result<Value, ApiError> {
    match v {
        Value::Object(_) | Value::Bool(_) => Ok(v.clone()),
        Value::String(s) => serde_json::from_str(s).map_err(|e| {
            ApiError::invalid(
                param,
                format!("`{param}` is a string that is not JSON: {e}"),
            )
        }),
        other => Err(ApiError::invalid(
            param,
            format!(
                "`{param}` must be a JSON Schema object, not {}",
                kind(other)
            ),
        )),
    }
}

pub(super) fn choices(param: &str, v: &Value) -> Result<ConstraintSpec, ApiError> {
    let list = v.as_array().ok_or_else(|| {
        ApiError::invalid(param, format!("`{param}` must be an array of strings"))
    })?;
    if list.is_empty() {
        return Err(ApiError::invalid(param, format!("`{param}` is empty")));
    }
    list.iter()
        .enumerate()
        .map(|(i, c)| {
            c.as_str().map(str::to_string).ok_or_else(|| {
                ApiError::invalid(param, format!("{param}[{i}] must be a string, not {c}"))
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(ConstraintSpec::Choice)
}

/// Every constraint field of the request, as (field, constraint).
pub(super) fn constraints(o: &Obj) -> Result<Vec<(&'static str, ConstraintSpec)>, ApiError> {
    let mut found = Vec::new();
    if let Some(rf) = field(o, "response_format") {
        let rf = rf.as_object().ok_or_else(|| {
            ApiError::invalid("response_format", "`response_format` must be an object")
        })?;
        match rf.get("type").and_then(Value::as_str) {
            Some("text") => {}
            Some("json_object") => match field(rf, "schema") {
                // Some servers take a schema here; honour it rather than drop it.
                Some(s) => found.push((
                    "response_format",
                    ConstraintSpec::JsonSchema(schema_value("response_format.schema", s)?),
                )),
                None => found.push(("response_format", ConstraintSpec::AnyJsonObject)),
            },
            Some("json_schema") => {
                let js = field(rf, "json_schema")
                    .and_then(Value::as_object)
                    .ok_or_else(|| {
                        ApiError::invalid(
                        "response_format.json_schema",
                        "`response_format.json_schema` must be an object with `name` and `schema`",
                    )
                    })?;
                if let Some(name) = string(js, "name").map_err(|_| {
                    ApiError::invalid(
                        "response_format.json_schema.name",
                        "`name` must be a string",
                    )
                })? {
                    if name.is_empty()
                        || name.len() > 64
                        || !name
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                    {
                        return Err(ApiError::invalid(
                            "response_format.json_schema.name",
                            format!("`response_format.json_schema.name` `{name}` must be 1-64 characters of a-z, A-Z, 0-9, _ and -"),
                        ));
                    }
                }
                boolean(js, "strict")?;
                let schema = match field(js, "schema") {
                    Some(s) => schema_value("response_format.json_schema.schema", s)?,
                    None => {
                        return Err(ApiError::invalid(
                            "response_format.json_schema.schema",
                            "`response_format.json_schema.schema` is missing",
                        ))
                    }
                };
                found.push(("response_format", ConstraintSpec::JsonSchema(schema)));
            }
            Some("structural_tag") => {
                found.push(("response_format", super::structural::structural_tag(rf)?));
            }
            Some("grammar") => {
                let g = field(rf, "grammar").ok_or_else(|| {
                    ApiError::invalid(
                        "response_format.grammar",
                        "`response_format.grammar` is missing (GBNF or Lark text)",
                    )
                })?;
                found.push(("response_format", grammar("response_format.grammar", g)?));
            }
            other => {
                return Err(ApiError::invalid(
                    "response_format.type",
                    format!(
                        "`response_format.type` is {}; expected text, json_object, json_schema, grammar or structural_tag",
                        other.map_or("missing".to_string(), |t| format!("`{t}`"))
                    ),
                ))
            }
        }
    }
    if let Some(v) = field(o, "guided_json") {
        found.push((
            "guided_json",
            ConstraintSpec::JsonSchema(schema_value("guided_json", v)?),
        ));
    }
    if let Some(re) = string(o, "guided_regex")? {
        found.push(("guided_regex", ConstraintSpec::Regex(re.to_string())));
    }
    if let Some(v) = field(o, "guided_choice") {
        found.push(("guided_choice", choices("guided_choice", v)?));
    }
    if let Some(v) = field(o, "guided_grammar") {
        found.push(("guided_grammar", grammar("guided_grammar", v)?));
    }
    // llama.cpp's server field.
    if let Some(v) = field(o, "grammar") {
        found.push(("grammar", grammar("grammar", v)?));
    }
    if let Some(so) = field(o, "structured_outputs") {
        let so = so.as_object().ok_or_else(|| {
            ApiError::invalid(
                "structured_outputs",
                "`structured_outputs` must be an object",
            )
        })?;
        for (k, v) in so {
            if v.is_null() {
                continue;
            }
            let param = match k.as_str() {
                "json" => "structured_outputs.json",
                "regex" => "structured_outputs.regex",
                "choice" => "structured_outputs.choice",
                "json_object" => "structured_outputs.json_object",
                "grammar" => "structured_outputs.grammar",
                "whitespace_pattern" | "disable_any_whitespace" | "disable_additional_properties" => continue,
                other => {
                    return Err(ApiError::invalid(
                        "structured_outputs",
                        format!("`structured_outputs.{other}` is not supported (json, regex, choice, grammar, json_object are)"),
                    ))
                }
            };
            let c = match k.as_str() {
                "json" => ConstraintSpec::JsonSchema(schema_value(param, v)?),
                "regex" => ConstraintSpec::Regex(
                    v.as_str()
                        .ok_or_else(|| {
                            ApiError::invalid(param, format!("`{param}` must be a string"))
                        })?
                        .to_string(),
                ),
                "choice" => choices(param, v)?,
                "grammar" => grammar(param, v)?,
                _ => match v {
                    Value::Bool(true) => ConstraintSpec::AnyJsonObject,
                    Value::Bool(false) => continue,
                    _ => {
                        return Err(ApiError::invalid(
                            param,
                            format!("`{param}` must be true or false"),
                        ))
                    }
                },
            };
            found.push((param, c));
        }
    }
    Ok(found)
}

/// A grammar field: GBNF text (a line defining a rule `name ::= ...`, start rule `root`), or
/// otherwise Lark (start rule `start`, `%json` embeds), the two languages vLLM takes here.
pub(super) fn grammar(param: &str, v: &Value) -> Result<ConstraintSpec, ApiError> {
    let text = v.as_str().ok_or_else(|| {
        ApiError::invalid(
            param,
            format!("`{param}` must be a string holding a GBNF or Lark grammar"),
        )
    })?;
    Ok(if is_gbnf(text) {
        ConstraintSpec::Gbnf(text.to_string())
    } else {
        ConstraintSpec::Lark(text.to_string())
    })
}

/// Whether some line of `text` defines a GBNF rule (`name ::= ...`), which Lark cannot.
fn is_gbnf(text: &str) -> bool {
    text.lines().any(|line| {
        line.split_once("::=").is_some_and(|(name, _)| {
            let name = name.trim();
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
    })
}

pub(super) fn whitespace(o: &Obj) -> Result<Whitespace, ApiError> {
    let so = field(o, "structured_outputs").and_then(Value::as_object);
    let pattern = match string(o, "guided_whitespace_pattern")? {
        Some(p) => Some(p),
        None => so
            .map(|so| string(so, "whitespace_pattern"))
            .transpose()?
            .flatten(),
    };
    if let Some(p) = pattern {
        return Ok(Whitespace::Pattern(p.to_string()));
    }
    if so
        .map(|so| boolean(so, "disable_any_whitespace"))
        .transpose()?
        .flatten()
        == Some(true)
    {
        return Ok(Whitespace::Compact);
    }
    Ok(Whitespace::default())
}
