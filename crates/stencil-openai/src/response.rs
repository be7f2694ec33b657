//! Response bodies and stream chunks, as OpenAI sends them. The types deserialize leniently
//! (missing fields default, unknown fields ignored) so the client can read other servers too.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use stencil_types::{ChatOutcome, ToolCall, Usage as EngineUsage};

/// Token counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
}

impl From<EngineUsage> for Usage {
    fn from(u: EngineUsage) -> Self {
        Self {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.prompt_tokens + u.completion_tokens,
        }
    }
}

/// `function` of a tool call (whole or a fragment).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

/// A tool call in a message, or a fragment of one in a delta (`index` set).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallPart {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub function: FunctionCall,
}

/// `choices[0].message`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: Option<String>,
    /// The reasoning before the content, under a reasoning prefix (vLLM's and DeepSeek's
    /// field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallPart>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    pub index: usize,
    pub message: Message,
    pub finish_reason: Option<String>,
    #[serde(default)]
    pub logprobs: Option<Value>,
}

/// A non-streamed chat completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletion {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<Choice>,
    #[serde(default)]
    pub usage: Option<Usage>,
    /// stencil's report on how the constraint steered the output (see [`stencil_info`]);
    /// absent from other servers' responses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stencil: Option<Value>,
}

/// `choices[i].delta` of a chunk.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallPart>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkChoice {
    #[serde(default)]
    pub index: usize,
    #[serde(default)]
    pub delta: Delta,
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(default)]
    pub logprobs: Option<Value>,
}

/// One streamed chunk (`chat.completion.chunk`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChunk {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub object: String,
    #[serde(default)]
    pub created: u64,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// `/v1/completions` choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    pub finish_reason: Option<String>,
    #[serde(default)]
    pub logprobs: Option<Value>,
}

/// `/v1/completions` body or chunk (`text_completion`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

impl ToolCallPart {
    /// A whole call, as a message lists it (`index: None`) or as the first fragment of a
    /// streamed one (`index: Some(i)`): the one place the wire shape of a call is built.
    pub fn call(index: Option<usize>, c: &ToolCall) -> Self {
        Self {
            index,
            id: Some(c.id.clone()),
            kind: Some("function".into()),
            function: FunctionCall {
                name: Some(c.name.clone()),
                arguments: Some(c.arguments.clone()),
            },
        }
    }
}

/// The `stencil` object of a response: `closed_by_budget` (the token budget made a complete
/// output close before `max_tokens`), `loop_guard_hits` (steps where the loop guard
/// forbade continuing a repetition) and, when there are any, the constraint compiler's
/// `warnings` (an unknown `format` it ignored, for one).
pub fn stencil_info(o: &ChatOutcome) -> Value {
    let mut info = serde_json::json!({
        "closed_by_budget": o.closed_by_budget,
        "loop_guard_hits": o.loop_guard_hits,
    });
    if !o.warnings.is_empty() {
        info["warnings"] = serde_json::json!(o.warnings);
    }
    info
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl ChatCompletion {
    pub fn from_outcome(id: &str, model: &str, created: u64, o: &ChatOutcome) -> Self {
        Self {
            id: id.to_string(),
            object: "chat.completion".into(),
            created,
            model: model.to_string(),
            choices: vec![Choice {
                index: 0,
                message: Message {
                    role: "assistant".into(),
                    content: o.content.clone(),
                    reasoning_content: o.reasoning.clone(),
                    tool_calls: o
                        .tool_calls
                        .iter()
                        .map(|c| ToolCallPart::call(None, c))
                        .collect(),
                },
                finish_reason: Some(o.finish_reason.as_str().into()),
                logprobs: None,
            }],
            usage: Some(o.usage.into()),
            stencil: Some(stencil_info(o)),
        }
    }
}

impl ChatChunk {
    /// A chunk with one choice.
    pub fn new(id: &str, model: &str, created: u64, delta: Delta, finish: Option<&str>) -> Self {
        Self {
            id: id.to_string(),
            object: "chat.completion.chunk".into(),
            created,
            model: model.to_string(),
            choices: vec![ChunkChoice {
                index: 0,
                delta,
                finish_reason: finish.map(str::to_string),
                logprobs: None,
            }],
            usage: None,
        }
    }
}

/// `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelList {
    pub object: String,
    pub data: Vec<ModelCard>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub owned_by: String,
}
