//! Typed readers of request fields: each error names the field and what it must be.

use serde_json::{Map, Value};
use stencil_types::json_kind as kind;

use crate::error::ApiError;

pub(super) type Obj = Map<String, Value>;

pub(super) fn body_object(body: &Value) -> Result<&Obj, ApiError> {
    body.as_object().ok_or_else(|| {
        ApiError::invalid(
            "body",
            format!("the request body must be a JSON object, not {}", kind(body)),
        )
    })
}

/// A present, non-null field.
pub(super) fn field<'a>(o: &'a Obj, name: &str) -> Option<&'a Value> {
    o.get(name).filter(|v| !v.is_null())
}

pub(super) fn number(o: &Obj, name: &str, lo: f64, hi: f64) -> Result<Option<f64>, ApiError> {
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

pub(super) fn integer(o: &Obj, name: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
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

pub(super) fn boolean(o: &Obj, name: &str) -> Result<Option<bool>, ApiError> {
    match field(o, name) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(ApiError::invalid(
            name,
            format!("`{name}` must be true or false, not {v}"),
        )),
    }
}

pub(super) fn string<'a>(o: &'a Obj, name: &str) -> Result<Option<&'a str>, ApiError> {
    match field(o, name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(ApiError::invalid(
            name,
            format!("`{name}` must be a string, not {}", kind(v)),
        )),
    }
}
