//! Response objects, model listings and the error body, in Ollama's shapes.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};
use stencil_types::api::ApiError;
use stencil_types::{ChatFinish, ChatOutcome, ToolCall};

/// Which endpoint's shape: `/api/chat` (`message`) or `/api/generate` (`response`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Generate,
}

/// `stop` or `length`.
pub fn done_reason(o: &ChatOutcome) -> &'static str {
    match o.finish_reason {
        ChatFinish::Length => "length",
        ChatFinish::Stop | ChatFinish::ToolCalls => "stop",
    }
}

/// A call as Ollama writes it: arguments as an object.
pub fn tool_call(c: &ToolCall) -> Value {
    let arguments = match serde_json::from_str::<Value>(&c.arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({ "_raw": c.arguments }),
    };
    json!({"id": c.id, "function": {"name": c.name, "arguments": arguments}})
}

/// RFC 3339 UTC time with nanoseconds, as Ollama writes `created_at`.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_nanos()
    )
}

/// One line (or the whole answer) for `endpoint`: `text` as the message content or response.
pub fn body(endpoint: Endpoint, model: &str, text: &str, calls: &[ToolCall], done: bool) -> Value {
    let mut v = json!({"model": model, "created_at": rfc3339(SystemTime::now())});
    match endpoint {
        Endpoint::Chat => {
            let mut message = json!({"role": "assistant", "content": text});
            if !calls.is_empty() {
                message["tool_calls"] = calls.iter().map(tool_call).collect();
            }
            v["message"] = message;
        }
        Endpoint::Generate => v["response"] = text.into(),
    }
    v["done"] = done.into();
    v
}

/// Adds `done_reason`, token counts and durations (nanoseconds) to a final object.
pub fn add_stats(v: &mut Value, o: &ChatOutcome) {
    let ns = |d: std::time::Duration| d.as_nanos() as u64;
    v["done_reason"] = done_reason(o).into();
    v["total_duration"] = ns(o.timings.prompt + o.timings.decode).into();
    v["load_duration"] = 0.into();
    v["prompt_eval_count"] = o.usage.prompt_tokens.into();
    v["prompt_eval_duration"] = ns(o.timings.prompt).into();
    v["eval_count"] = o.usage.completion_tokens.into();
    v["eval_duration"] = ns(o.timings.decode).into();
}

/// The whole non-streamed answer.
pub fn whole(endpoint: Endpoint, model: &str, o: &ChatOutcome) -> Value {
    let mut v = body(
        endpoint,
        model,
        o.content.as_deref().unwrap_or_default(),
        &o.tool_calls,
        true,
    );
    add_stats(&mut v, o);
    v
}

/// `{"error": message}`.
pub fn error_body(e: &ApiError) -> Value {
    json!({ "error": e.message })
}

/// What `/api/tags` and `/api/show` say about the served model.
#[derive(Debug, Clone, Default)]
pub struct ModelEntry {
    /// The name requests use (the model id, or an alias).
    pub name: String,
    /// File size in bytes.
    pub size: u64,
    /// Last modification of the weights file.
    pub modified_at: Option<SystemTime>,
    /// `gguf` or `safetensors`.
    pub format: String,
    /// The architecture (`llama`).
    pub family: String,
    /// The quantization as stored (`Q4_1`), if known.
    pub quantization_level: String,
    /// The chat template source.
    pub template: Option<String>,
    pub context_length: usize,
}

impl ModelEntry {
    fn details(&self) -> Value {
        json!({
            "parent_model": "", "format": self.format, "family": self.family,
            "families": [self.family], "parameter_size": "", "quantization_level": self.quantization_level,
        })
    }

    fn modified(&self) -> String {
        rfc3339(self.modified_at.unwrap_or(UNIX_EPOCH))
    }
}

/// `GET /api/tags`.
pub fn tags(models: &[ModelEntry]) -> Value {
    let list: Vec<Value> = models
        .iter()
        .map(|m| {
            json!({"name": m.name, "model": m.name, "modified_at": m.modified(), "size": m.size,
                   "digest": "", "details": m.details()})
        })
        .collect();
    json!({ "models": list })
}

/// `POST /api/show`.
pub fn show(m: &ModelEntry) -> Value {
    let mut info = Map::new();
    info.insert("general.architecture".into(), m.family.clone().into());
    info.insert(
        format!("{}.context_length", m.family),
        m.context_length.into(),
    );
    json!({
        "license": "", "modelfile": "", "parameters": "",
        "template": m.template.clone().unwrap_or_default(),
        "details": m.details(), "model_info": info,
        "capabilities": ["completion", "tools"],
        "modified_at": m.modified(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn times_are_rfc3339() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000000Z");
        let t = UNIX_EPOCH + Duration::new(1_709_251_199, 5);
        assert_eq!(rfc3339(t), "2024-02-29T23:59:59.000000005Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(t), "2000-02-29T00:00:00.000000000Z");
    }

    #[test]
    fn answers_carry_stats_and_object_arguments() {
        let o = ChatOutcome {
            content: None,
            reasoning: None,
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "f".into(),
                arguments: r#"{"a": 1}"#.into(),
            }],
            finish_reason: ChatFinish::ToolCalls,
            stop_sequence: None,
            usage: stencil_types::Usage {
                prompt_tokens: 9,
                completion_tokens: 4,
            },
            timings: stencil_types::Timings {
                prompt: Duration::from_millis(2),
                decode: Duration::from_millis(3),
            },
            forced_tokens: 0,
            closed_by_budget: false,
            loop_guard_hits: 0,
            warnings: Vec::new(),
        };
        let v = whole(Endpoint::Chat, "m", &o);
        assert_eq!(
            v["message"]["tool_calls"][0]["function"]["arguments"],
            json!({"a": 1})
        );
        assert_eq!(
            (v["done"].as_bool(), v["done_reason"].as_str()),
            (Some(true), Some("stop"))
        );
        assert_eq!(
            (v["eval_count"].as_u64(), v["total_duration"].as_u64()),
            (Some(4), Some(5_000_000))
        );
        let g = whole(Endpoint::Generate, "m", &o);
        assert_eq!(g["response"], "");
        assert_eq!(
            error_body(&ApiError::invalid("x", "bad")),
            json!({"error": "bad"})
        );
    }
}
