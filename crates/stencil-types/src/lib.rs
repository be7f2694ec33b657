//! The engine's request and result vocabulary, shared by the runtime and every wire format.
//!
//! A wire format (`stencil-openai`, `stencil-anthropic`, `stencil-ollama`) checks a body
//! and builds a [`ChatRequest`]; the runtime runs it and answers with a [`ChatOutcome`]; the
//! wire format writes that back in its own shapes. Neither side needs the other's code, and
//! nothing here knows about models, tensors or HTTP.
//!
//! Key types:
//! - [`ChatMessage`] (with a [`Role`] and text or [`ContentPart`]s), [`Tool`], [`ToolChoice`],
//!   [`ToolCall`]: the conversation and the tools.
//! - [`SamplingParams`], [`GenerateParams`]: how to sample and when to stop.
//! - [`ChatRequest`]: all of it, plus the output constraint ([`stencil_grammar::ConstraintSpec`]).
//! - [`ChatOutcome`], [`ChatFinish`], [`Usage`], [`Timings`]: what came back; [`ToolEvent`]:
//!   the stream of it (text, tool calls starting, growing by argument fragments, ending).
//! - [`api`]: what every wire format shares at the edge ([`api::ApiError`], field readers).
//! - [`RequestError`]: a request that breaks a rule, with the [`RequestField`] it is about;
//!   [`conversation::validate_conversation`] checks tool calls and results in history.
//!
//! ```
//! use stencil_types::{ChatMessage, ChatRequest, Role};
//!
//! let mut req = ChatRequest::default();
//! req.messages.push(ChatMessage::new(Role::User, "Name a colour."));
//! req.params.max_tokens = 16;
//! assert_eq!(stencil_types::message_texts(&req.messages).unwrap(), ["Name a colour."]);
//! ```

pub mod api;
pub mod conversation;
mod error;
mod event;
mod message;
mod outcome;
mod request;
mod sampling;
mod tool;

pub use error::{json_kind, snippet, RequestError, RequestField};
pub use event::ToolEvent;
pub use message::{message_texts, ChatMessage, ContentPart, MessageContent, Role};
pub use outcome::{ChatFinish, ChatOutcome, Timings, Usage};
pub use request::{
    ChatRequest, GenerateParams, Reasoning, TruncationPolicy, DEFAULT_MAX_RECURSION,
    DEFAULT_MAX_TOOL_CALLS,
};
pub use sampling::SamplingParams;
pub use stencil_grammar::{ConstraintSpec, StructuralTags, TagSpec, Whitespace};
pub use tool::{validate_tools, FunctionDef, Tool, ToolCall, ToolChoice};
