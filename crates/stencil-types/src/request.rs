//! A chat or completion request, validated and typed: what wire formats build and the runtime
//! runs.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use stencil_grammar::{ConstraintSpec, Whitespace};

use crate::message::ChatMessage;
use crate::sampling::SamplingParams;
use crate::tool::{Tool, ToolChoice};

/// Default nesting bound for recursive schemas in generation.
pub const DEFAULT_MAX_RECURSION: u32 = 12;
/// Default [`ChatRequest::max_tool_calls`]: enough for real parallel calls, few enough that a
/// small model cannot fill its budget with near-copies.
pub const DEFAULT_MAX_TOOL_CALLS: u32 = 4;

/// How much to generate, how to sample, when to stop.
#[derive(Debug, Clone)]
pub struct GenerateParams {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Generation ends *before* the first occurrence of any of these (not emitted). With a
    /// constraint, only an occurrence where the output before it is complete ends it, so a stop
    /// string can never cut a value short.
    pub stop: Vec<String>,
    /// Feed the tokens a constraint forces (`{"name": "` after `{` in a fixed-order object)
    /// to the model in one forward pass instead of sampling them one by one.
    pub fast_forward: bool,
    /// Under a constraint, forbid the token that would continue a degenerate repetition
    /// wherever another token is allowed.
    pub loop_guard: bool,
    /// Free text before the output proper ("think, then answer"); `None`: none.
    pub reasoning: Option<Reasoning>,
}

/// A reasoning prefix: the model writes free text, optionally opened by `start`, until `end`;
/// the constraint (if any) applies after it, and the reasoning is reported apart from the
/// content (`reasoning_content`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reasoning {
    /// The marker that opens the reasoning. Optional in the output: a chat template may have
    /// written it into the prompt already.
    pub start: String,
    /// The marker that ends the reasoning (not empty).
    pub end: String,
    /// Reasoning tokens at most: at this many the end marker is written for the model.
    /// `None`: as many as the output's budget leaves (a constrained output still ends
    /// complete within `max_tokens`).
    pub max_tokens: Option<usize>,
}

impl Default for Reasoning {
    /// The markers of DeepSeek-R1, Qwen3 and their kin: `<think>` ... `</think>`.
    fn default() -> Self {
        Self {
            start: "<think>".into(),
            end: "</think>".into(),
            max_tokens: None,
        }
    }
}

impl Default for GenerateParams {
    fn default() -> Self {
        Self {
            max_tokens: 256,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            fast_forward: true,
            loop_guard: true,
            reasoning: None,
        }
    }
}

/// What to do when the rendered prompt is longer than the context allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TruncationPolicy {
    /// Fail (the prompt is too long for the context).
    #[default]
    Error,
    /// Keep system messages and the most recent turns: drop whole turns (a user message and
    /// every assistant/tool message after it) from the oldest on, so a user/assistant pair is
    /// never split and two user messages never become adjacent. Fails if even the last turn
    /// does not fit.
    DropOldestTurns,
}

/// A chat request, validated and typed (wire formats map onto this).
#[derive(Debug, Clone)]
pub struct ChatRequest {
    pub messages: Vec<ChatMessage>,
    /// A raw completion prompt (`/v1/completions`): used as is, without the chat template;
    /// `messages` and `tools` must then be empty.
    pub prompt: Option<String>,
    /// Control tokens written as text in `prompt` (`<|im_start|>`) are parsed as control
    /// tokens. Off by default: text is tokenized as text, so it cannot forge turns.
    pub special_tokens: bool,
    /// `max_tokens` was given by the caller: the prompt must leave room for all of it (else
    /// the prompt is too long, as OpenAI answers). Otherwise `max_tokens` is a default that is
    /// capped to the room the prompt leaves.
    pub reserve_max_tokens: bool,
    pub tools: Vec<Tool>,
    /// Default: `auto` when there are tools, else `none`.
    pub tool_choice: Option<ToolChoice>,
    pub parallel_tool_calls: bool,
    /// The most tool calls one response may make when parallel calls are allowed (small
    /// models tend to add calls until the budget runs out).
    pub max_tool_calls: u32,
    /// The output constraint (`response_format`, `guided_*`).
    pub constraint: Option<ConstraintSpec>,
    pub whitespace: Whitespace,
    /// Unsupported schema keywords become warnings instead of errors.
    pub lenient: bool,
    /// Refuse schemas with a `format` the compiler does not know (by default an unknown format
    /// is an annotation: it constrains nothing and is reported as a warning).
    pub strict_formats: bool,
    /// Compile a `oneOf` whose overlap cannot be excluded as `anyOf` (a warning names it)
    /// instead of refusing the schema.
    pub oneof_as_anyof: bool,
    /// Recursive schemas are unrolled to this many nested levels (`None`: unbounded), so a
    /// small model that keeps nesting is made to close its values.
    pub max_recursion: Option<u32>,
    /// Sampling, `max_tokens`, stop strings.
    pub params: GenerateParams,
    pub truncation: TruncationPolicy,
    /// Wall-clock limit for generation.
    pub timeout: Option<Duration>,
}

impl Default for ChatRequest {
    fn default() -> Self {
        Self {
            messages: Vec::new(),
            prompt: None,
            special_tokens: false,
            reserve_max_tokens: false,
            tools: Vec::new(),
            tool_choice: None,
            parallel_tool_calls: true,
            max_tool_calls: DEFAULT_MAX_TOOL_CALLS,
            constraint: None,
            whitespace: Whitespace::default(),
            lenient: false,
            strict_formats: false,
            oneof_as_anyof: false,
            max_recursion: Some(DEFAULT_MAX_RECURSION),
            params: GenerateParams::default(),
            truncation: TruncationPolicy::Error,
            timeout: None,
        }
    }
}
