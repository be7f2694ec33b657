//! Typed readers of request-body fields, shared by every wire format: each error names the
//! field and what it must be (`temperature` must be a number from 0 to 2, not "hot").

use crate::json_kind as kind;
use serde_json::{Map, Value};

use super::ApiError;

/// A JSON object body.
pub type Obj = Map<String, Value>;

pub fn body_object(body: &Value) -> Result<&Obj, ApiError> {
    body.as_object().ok_or_else(|| {
        ApiError::invalid(
            "body",
            format!("the request body must be a JSON object, not {}", kind(body)),
        )
    })
}

/// A present, non-null field.
pub fn field<'a>(o: &'a Obj, name: &str) -> Option<&'a Value> {
    o.get(name).filter(|v| !v.is_null())
}

pub fn number(o: &Obj, name: &str, lo: f64, hi: f64) -> Result<Option<f64>, ApiError> {
    match field(o, name) {
        None => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if (lo..=hi).contains(&x) => Ok(Some(x)),
            _ => Err(ApiError::invalid(
                name,
                format!("`{name}` must be a number from {lo} to {hi}, not {v}"),
            )),
        },
    }
}

pub fn integer(o: &Obj, name: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
    match field(o, name) {
        None => Ok(None),
        Some(v) => match v.as_i64() {
            Some(x) if (lo..=hi).contains(&x) => Ok(Some(x)),
            _ => Err(ApiError::invalid(
                name,
                format!("`{name}` must be an integer from {lo} to {hi}, not {v}"),
            )),
        },
    }
}

pub fn boolean(o: &Obj, name: &str) -> Result<Option<bool>, ApiError> {
    match field(o, name) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(ApiError::invalid(
            name,
            format!("`{name}` must be true or false, not {v}"),
        )),
    }
}

pub fn string<'a>(o: &'a Obj, name: &str) -> Result<Option<&'a str>, ApiError> {
    match field(o, name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(ApiError::invalid(
            name,
            format!("`{name}` must be a string, not {}", kind(v)),
        )),
    }
}

/// A string or an array of at most `max` strings (stop sequences).
pub fn string_list(o: &Obj, name: &str, max: usize) -> Result<Vec<String>, ApiError> {
    match field(o, name) {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(a)) => {
            if a.len() > max {
                return Err(ApiError::invalid(
                    name,
                    format!("`{name}` takes at most {max} strings, not {}", a.len()),
                ));
            }
            a.iter()
                .enumerate()
                .map(|(i, s)| {
                    s.as_str().map(str::to_string).ok_or_else(|| {
                        ApiError::invalid(name, format!("{name}[{i}] must be a string, not {s}"))
                    })
                })
                .collect()
        }
        Some(v) => Err(ApiError::invalid(
            name,
            format!(
                "`{name}` must be a string or an array of strings, not {}",
                kind(v)
            ),
        )),
    }
}

/// An unsigned integer seed (negative values wrap, as other servers do).
pub fn seed(o: &Obj, name: &str) -> Result<Option<u64>, ApiError> {
    match field(o, name) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .or(v.as_i64().map(|x| x as u64))
            .map(Some)
            .ok_or_else(|| {
                ApiError::invalid(name, format!("`{name}` must be an integer, not {v}"))
            }),
    }
}

/// An array field (absent: `None`).
pub fn array<'a>(o: &'a Obj, name: &str) -> Result<Option<&'a Vec<Value>>, ApiError> {
    match field(o, name) {
        None => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(v) => Err(ApiError::invalid(
            name,
            format!("`{name}` must be an array, not {}", kind(v)),
        )),
    }
}

/// An object field (absent: `None`).
pub fn object<'a>(o: &'a Obj, name: &str) -> Result<Option<&'a Obj>, ApiError> {
    match field(o, name) {
        None => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(v) => Err(ApiError::invalid(
            name,
            format!("`{name}` must be an object, not {}", kind(v)),
        )),
    }
}

/// A tool choice in OpenAI's shapes, which Ollama shares: `"none" | "auto" | "required"`, or a
/// function by name (`{"type": "function", "function": {"name"}}` as in Chat Completions,
/// `{"type": "function", "name"}` as in Responses).
pub fn tool_choice(param: &str, v: &Value) -> Result<crate::ToolChoice, ApiError> {
    use crate::ToolChoice;
    let bad = |m: String| ApiError::invalid(param, m);
    match v {
        Value::String(s) => match s.as_str() {
            "none" => Ok(ToolChoice::None),
            "auto" => Ok(ToolChoice::Auto),
            "required" => Ok(ToolChoice::Required),
            other => Err(bad(format!(
                "{param} `{other}` is not one of none, auto, required (or a function object)"
            ))),
        },
        Value::Object(o) => {
            if let Some(t) = o.get("type") {
                if t != "function" {
                    return Err(bad(format!("{param}.type is {t}; expected \"function\"")));
                }
            }
            o.get("function")
                .and_then(|f| f.get("name"))
                .or(o.get("name"))
                .and_then(Value::as_str)
                .map(|name| ToolChoice::Named(name.to_string()))
                .ok_or_else(|| {
                    bad(format!(
                        "a {param} object needs the function's name (`function.name`)"
                    ))
                })
        }
        other => Err(bad(format!(
            "{param} must be a string or an object, not {}",
            kind(other)
        ))),
    }
}
