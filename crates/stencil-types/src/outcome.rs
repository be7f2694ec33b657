//! What a request produced.

use std::time::Duration;

use serde::Serialize;

use crate::tool::ToolCall;

/// Why a chat completion ended (OpenAI's `finish_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatFinish {
    /// An end-of-sequence token, a stop string, or a complete constrained output.
    Stop,
    /// `max_tokens` or the end of the context window cut the output.
    Length,
    /// The model called tools.
    ToolCalls,
}

impl ChatFinish {
    /// The wire spelling (`"tool_calls"`).
    pub fn as_str(self) -> &'static str {
        match self {
            ChatFinish::Stop => "stop",
            ChatFinish::Length => "length",
            ChatFinish::ToolCalls => "tool_calls",
        }
    }
}

/// Token counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
}

/// Wall-clock time spent in the prompt pass and in decoding.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timings {
    pub prompt: Duration,
    pub decode: Duration,
}

impl Timings {
    pub fn prompt_tokens_per_s(&self, usage: &Usage) -> f64 {
        usage.prompt_tokens as f64 / self.prompt.as_secs_f64().max(1e-9)
    }
    pub fn decode_ms_per_token(&self, usage: &Usage) -> f64 {
        self.decode.as_secs_f64() * 1e3 / usage.completion_tokens.max(1) as f64
    }
}

/// The result of a chat request.
#[derive(Debug, Clone)]
pub struct ChatOutcome {
    /// Text outside tool calls (`None` when the model only called tools). When `max_tokens` cut
    /// the output, this is the whole raw output and there are no tool calls.
    pub content: Option<String>,
    /// The reasoning before the content, under a reasoning prefix (markers removed).
    pub reasoning: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: ChatFinish,
    /// The stop string that ended the output, when one did.
    pub stop_sequence: Option<String>,
    pub usage: Usage,
    pub timings: Timings,
    /// Tokens the constraint forced and that were fed without sampling.
    pub forced_tokens: usize,
    /// The token budget removed tokens the constraint allowed, steering the output to close
    /// before `max_tokens` (the output is complete).
    pub closed_by_budget: bool,
    /// Steps at which the loop guard forbade continuing a repetition.
    pub loop_guard_hits: usize,
    /// What the constraint compiler ignored (unknown formats; unsupported keywords under
    /// `lenient`), one sentence each naming the keyword and its JSON pointer.
    pub warnings: Vec<String>,
}
