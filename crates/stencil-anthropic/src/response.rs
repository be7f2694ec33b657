//! The `message` object, stop reasons and the error body, in Anthropic's shapes.

use serde_json::{json, Value};
use stencil_types::api::ApiError;
use stencil_types::{ChatFinish, ChatOutcome};

/// `end_turn`, `max_tokens`, `stop_sequence` or `tool_use`.
pub fn stop_reason(o: &ChatOutcome) -> &'static str {
    match o.finish_reason {
        ChatFinish::ToolCalls => "tool_use",
        ChatFinish::Length => "max_tokens",
        ChatFinish::Stop if o.stop_sequence.is_some() => "stop_sequence",
        ChatFinish::Stop => "end_turn",
    }
}

/// The id a tool call gets on this API (`toolu_…`); the same call keeps the same id in the
/// stream and the final message.
pub fn tool_use_id(call_id: &str) -> String {
    format!("toolu_{}", call_id.strip_prefix("call_").unwrap_or(call_id))
}

/// A call's arguments as the `input` object (the constraint made them a JSON object; text that
/// is not one is kept under `_raw` rather than lost).
pub fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({ "_raw": arguments }),
    }
}

/// `usage` as Anthropic reports it.
pub fn usage(o: &ChatOutcome) -> Value {
    json!({"input_tokens": o.usage.prompt_tokens, "output_tokens": o.usage.completion_tokens})
}

/// The whole `message` object of a non-streamed answer: text first, then `tool_use` blocks.
pub fn message(id: &str, model: &str, o: &ChatOutcome) -> Value {
    let mut content = Vec::new();
    if let Some(t) = o.content.as_deref().filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": t}));
    }
    for c in &o.tool_calls {
        content.push(json!({"type": "tool_use", "id": tool_use_id(&c.id), "name": c.name, "input": tool_input(&c.arguments)}));
    }
    json!({
        "id": id, "type": "message", "role": "assistant", "model": model,
        "content": content,
        "stop_reason": stop_reason(o),
        "stop_sequence": if o.finish_reason == ChatFinish::Stop { o.stop_sequence.clone() } else { None },
        "usage": usage(o),
    })
}

/// Anthropic's error type for an HTTP status.
pub fn error_type(status: u16) -> &'static str {
    match status {
        400 | 405 | 415 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        _ => "api_error",
    }
}

/// `{"type": "error", "error": {"type", "message"}}`.
pub fn error_body(e: &ApiError) -> Value {
    json!({"type": "error", "error": {"type": error_type(e.status), "message": e.message}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use stencil_types::{ToolCall, Usage};

    pub(crate) fn outcome(finish: ChatFinish) -> ChatOutcome {
        ChatOutcome {
            content: Some("Hi".into()),
            reasoning: None,
            tool_calls: Vec::new(),
            finish_reason: finish,
            stop_sequence: None,
            usage: Usage {
                prompt_tokens: 5,
                completion_tokens: 2,
            },
            timings: Default::default(),
            forced_tokens: 0,
            closed_by_budget: false,
            loop_guard_hits: 0,
            warnings: Vec::new(),
        }
    }

    #[test]
    fn messages_and_stop_reasons() {
        let mut o = outcome(ChatFinish::Stop);
        assert_eq!(stop_reason(&o), "end_turn");
        o.stop_sequence = Some("END".into());
        let m = message("msg_1", "m", &o);
        assert_eq!(
            (m["stop_reason"].as_str(), m["stop_sequence"].as_str()),
            (Some("stop_sequence"), Some("END"))
        );
        assert_eq!(m["content"], json!([{"type": "text", "text": "Hi"}]));
        assert_eq!(m["usage"], json!({"input_tokens": 5, "output_tokens": 2}));
        let mut o = outcome(ChatFinish::ToolCalls);
        o.content = None;
        o.tool_calls = vec![ToolCall {
            id: "call_ab".into(),
            name: "f".into(),
            arguments: r#"{"x": 1}"#.into(),
        }];
        let m = message("msg_1", "m", &o);
        assert_eq!(
            m["content"],
            json!([{"type": "tool_use", "id": "toolu_ab", "name": "f", "input": {"x": 1}}])
        );
        assert_eq!(m["stop_reason"], "tool_use");
        assert_eq!(stop_reason(&outcome(ChatFinish::Length)), "max_tokens");
    }

    #[test]
    fn errors_take_anthropic_types() {
        let e = ApiError::invalid("max_tokens", "bad");
        assert_eq!(
            error_body(&e),
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}})
        );
        assert_eq!(error_type(401), "authentication_error");
        assert_eq!(error_type(429), "rate_limit_error");
        assert_eq!(error_type(500), "api_error");
    }
}
