//! The stencil model runtime: everything between a model file and streamed text.
//!
//! - [`loader`]: resolve a model spec (path, `org/name` through the hub cache, or the default
//!   model) and load it: [`loader::LoadedModel`] = weights + [`Tokenizer`] + [`chat::ChatTemplate`].
//! - [`models`]: [`models::LanguageModel`] (shared weights) and [`models::Session`] (one sequence's
//!   KV cache, truncatable); GGUF llama/qwen2 in [`models::quantized_llama`] (with the CPU
//!   kernels [`models::q8_0`] and [`models::attention`]), safetensors llama in
//!   [`models::llama_safetensors`].
//! - [`batch`]: continuous batching: a scheduler that runs one batched forward per step for
//!   every running sequence, with KV cache admission and a prompt-prefix cache.
//! - [`tokenizer`]: tokenizers built from GGUF metadata or `tokenizer.json`, with byte-exact
//!   token forms ([`stencil_vocab::Vocab`]) and every EOS id.
//! - [`chat`]: the model's Jinja chat template and prompts built with it (messages and the
//!   other request types are [`stencil_types`]'s).
//! - [`sampler`], [`stream`], [`generate`]: seeded sampling, UTF-8-safe streaming with stop
//!   strings, and the [`generate::Generator`] loop.
//! - [`tools`]: Hermes `<tool_call>` prompting and an incremental call parser; [`engine`]: [`engine::ChatEngine`], chat requests end to end
//!   (prompt, cached constraint, generation, tool calls).
//! - [`reasoning`]: a reasoning prefix's output split into reasoning and content.
//! - [`extract`]: the lenient JSON extractor for output that could not be constrained.
//! - [`convert`]: GGUF -> Hugging Face safetensors directory.
//!
//! Errors are one enum, [`RuntimeError`], whose messages name what was wrong and where.
//!
//! ```no_run
//! use std::ops::ControlFlow;
//! use stencil_runtime::engine::ChatEngine;
//! use stencil_runtime::loader::{load, resolve, LoadOptions};
//! use stencil_runtime::tools::ToolEvent;
//! use stencil_types::{ChatMessage, ChatRequest, ConstraintSpec};
//!
//! // `None`: the default model; or a GGUF path, a safetensors directory, `org/name`.
//! let engine = ChatEngine::new(load(&resolve(None)?, &LoadOptions::default(), |_, _| {})?);
//! let request = ChatRequest {
//!     messages: vec![ChatMessage::user("The largest city in France, as JSON.")],
//!     constraint: Some(ConstraintSpec::JsonSchema(serde_json::json!({
//!         "type": "object",
//!         "properties": {"city": {"type": "string"}},
//!         "required": ["city"]
//!     }))),
//!     ..ChatRequest::default()
//! };
//! let outcome = engine.chat(&request, |event| {
//!     if let ToolEvent::Content(text) = event {
//!         print!("{text}"); // final text, as it streams
//!     }
//!     ControlFlow::Continue(()) // `Break` cancels
//! })?;
//! assert_eq!(outcome.finish_reason, stencil_types::ChatFinish::Stop);
//! # Ok::<(), stencil_runtime::RuntimeError>(())
//! ```

pub mod batch;
pub mod chat;
pub mod convert;
pub mod device;
pub mod engine;
pub mod error;
mod exp;
pub mod extract;
pub mod generate;
pub mod gguf;
pub mod hub;
pub mod loader;
pub mod models;
pub mod reasoning;
pub mod sampler;
pub mod stream;
pub mod tokenizer;
pub mod tools;

pub use error::{Result, RuntimeError};
pub use tokenizer::Tokenizer;
