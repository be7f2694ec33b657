//! What every wire format shares at the edge: the [`ApiError`] a request check or a failed
//! generation becomes (status, kind, field, code; each format renders it in its own shape) and
//! the typed [`fields`] readers that name the field in every error.

pub mod fields;

use crate::{RequestError, RequestField};

/// An error as an API reports it: an HTTP status, a kind (`invalid_request_error`,
/// `authentication_error`...), the request field it is about and a machine-readable code.
/// OpenAI renders it as `{"error": {"message", "type", "param", "code"}}`, Anthropic as
/// `{"type": "error", "error": {"type", "message"}}`, Ollama as `{"error": message}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<String>,
}

/// The request fields an error about the constraint or the prompt is reported against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorFields {
    /// The field the constraint came from (`response_format`, `guided_json`, `tools`...).
    pub constraint: &'static str,
    /// `messages` (chat) or `prompt` (completions).
    pub prompt: &'static str,
    /// The field holding the token limit (`max_tokens`, `max_output_tokens`, `num_predict`).
    pub max_tokens: &'static str,
}

impl ApiError {
    /// 400 about one request field.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            status: 400,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param.into()),
            code: None,
        }
    }

    pub fn with_code(mut self, code: &str) -> Self {
        self.code = Some(code.to_string());
        self
    }

    pub fn unauthorized() -> Self {
        Self {
            status: 401,
            message:
                "missing or wrong API key: send `Authorization: Bearer <key>` or `x-api-key: <key>`"
                    .into(),
            kind: "authentication_error",
            param: None,
            code: Some("invalid_api_key".into()),
        }
    }

    pub fn not_found(message: impl Into<String>, code: &str) -> Self {
        Self {
            status: 404,
            message: message.into(),
            kind: "invalid_request_error",
            param: None,
            code: Some(code.into()),
        }
    }

    pub fn overloaded(status: u16, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            kind: "server_overloaded",
            param: None,
            code: None,
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self {
            status: 500,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
        }
    }

    /// A request that breaks an engine rule, reported against the request's own field;
    /// `prompt` names the field a conversation error is about (`messages` or `prompt`).
    pub fn from_request(e: &RequestError, prompt: &'static str) -> Self {
        let param = match e.field {
            RequestField::Messages => prompt,
            RequestField::Tools => "tools",
            RequestField::ToolChoice => "tool_choice",
            RequestField::Sampling(name) => name,
        };
        Self::invalid(param, e.to_string())
    }
}
