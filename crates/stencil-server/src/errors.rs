//! The one mapping from runtime errors to API errors (status, type, field, code).

use stencil_openai::error::ErrorFields;
use stencil_openai::ApiError;
use stencil_runtime::RuntimeError;

/// A runtime error in API terms. `fields` names the request's own fields: where its constraint
/// came from (`response_format`, `guided_json`, `tools`...) and where its prompt did
/// (`messages` on chat, `prompt` on completions) and what the token limit is called
/// (`max_tokens`, `max_output_tokens`, `options.num_predict`).
pub fn api_error(e: &RuntimeError, fields: ErrorFields) -> ApiError {
    // The engine says `max_tokens`; each API has its own name for the limit.
    let msg = e.to_string().replace("max_tokens", fields.max_tokens);
    match e {
        RuntimeError::Request(r) => ApiError::from_request(r, fields.prompt),
        RuntimeError::Template(_) | RuntimeError::EmptyPrompt => {
            ApiError::invalid(fields.prompt, msg)
        }
        RuntimeError::PromptTooLong { .. } => {
            ApiError::invalid(fields.prompt, msg).with_code("context_length_exceeded")
        }
        RuntimeError::Grammar(_)
        | RuntimeError::ConstraintBuild(stencil_mask::BuildError::Grammar(_)) => {
            ApiError::invalid(fields.constraint, msg).with_code("invalid_constraint")
        }
        RuntimeError::Constraint(_) | RuntimeError::ConstraintBuild(_) => {
            ApiError::invalid(fields.constraint, msg).with_code("constraint_too_complex")
        }
        RuntimeError::BudgetTooSmall { .. } => {
            ApiError::invalid(fields.max_tokens, msg).with_code("max_tokens_too_small")
        }
        RuntimeError::KvCacheTooSmall { .. } => {
            ApiError::invalid(fields.max_tokens, msg).with_code("kv_cache_too_small")
        }
        RuntimeError::Timeout(_) => ApiError {
            status: 504,
            message: msg,
            kind: "timeout",
            param: None,
            code: Some("timeout".into()),
        },
        RuntimeError::Cancelled => ApiError {
            status: 499,
            message: msg,
            kind: "cancelled",
            param: None,
            code: None,
        },
        _ => ApiError::internal(msg),
    }
}

/// Which API's shapes a route speaks: its error bodies follow them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    /// `{"error": {"message", "type", "param", "code"}}` (Chat Completions, Responses, models).
    OpenAi,
    /// `{"type": "error", "error": {"type", "message"}}` (`/v1/messages`).
    Anthropic,
    /// `{"error": "message"}` (`/api/…`).
    Ollama,
}

impl Api {
    /// The API a path belongs to.
    pub(crate) fn for_path(path: &str) -> Api {
        if path == "/v1/messages" || path.starts_with("/v1/messages/") {
            Api::Anthropic
        } else if path == "/api" || path.starts_with("/api/") {
            Api::Ollama
        } else {
            Api::OpenAi
        }
    }

    /// An error's body in this API's shape.
    pub(crate) fn error_body(self, e: &ApiError) -> serde_json::Value {
        match self {
            Api::OpenAi => serde_json::to_value(stencil_openai::error::ErrorBody::from(e))
                .expect("errors serialize"),
            Api::Anthropic => stencil_anthropic::response::error_body(e),
            Api::Ollama => stencil_ollama::response::error_body(e),
        }
    }
}
