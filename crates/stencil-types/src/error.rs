//! A request that breaks a rule, and the field it is about.

use serde_json::Value;

/// The part of a request a [`RequestError`] is about; wire formats map it onto their own
/// field names (`messages` or `prompt`, `tools`, `tool_choice`, `temperature`...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestField {
    /// The conversation (or the raw prompt, which replaces it).
    Messages,
    Tools,
    ToolChoice,
    /// A sampling or length setting, by its name (`temperature`, `max_tokens`...).
    Sampling(&'static str),
}

/// A request that breaks a rule; the message names what is wrong and where
/// (`messages[2].tool_call_id ...`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", self.prefix())]
#[non_exhaustive]
pub struct RequestError {
    pub field: RequestField,
    pub message: String,
}

impl RequestError {
    pub fn new(field: RequestField, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }

    pub fn messages(message: impl Into<String>) -> Self {
        Self::new(RequestField::Messages, message)
    }

    pub fn tools(message: impl Into<String>) -> Self {
        Self::new(RequestField::Tools, message)
    }

    pub fn tool_choice(message: impl Into<String>) -> Self {
        Self::new(RequestField::ToolChoice, message)
    }

    pub fn sampling(param: &'static str, message: impl Into<String>) -> Self {
        Self::new(RequestField::Sampling(param), message)
    }

    fn prefix(&self) -> &'static str {
        match self.field {
            RequestField::Sampling(_) => "invalid sampling parameters",
            _ => "invalid chat request",
        }
    }
}

/// "a string", "an object"...: a JSON value's kind, for error messages.
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// At most 80 characters of `s`, quoted, for error messages.
pub fn snippet(s: &str) -> String {
    let mut out: String = s.chars().take(80).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    format!("{out:?}")
}
