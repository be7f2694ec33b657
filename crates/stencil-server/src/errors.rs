//! The one mapping from runtime errors to API errors (status, type, field, code).

use stencil_openai::error::ErrorFields;
use stencil_openai::ApiError;
use stencil_runtime::RuntimeError;

/// A runtime error in API terms. `fields` names the request's own fields: where its constraint
/// came from (`response_format`, `guided_json`, `tools`...) and where its prompt did
/// (`messages` on chat, `prompt` on completions).
pub fn api_error(e: &RuntimeError, fields: ErrorFields) -> ApiError {
    let msg = e.to_string();
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
            ApiError::invalid("max_tokens", msg).with_code("max_tokens_too_small")
        }
        RuntimeError::KvCacheTooSmall { .. } => {
            ApiError::invalid("max_tokens", msg).with_code("kv_cache_too_small")
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
