//! The Ollama wire format (`/api/chat`, `/api/generate`, `/api/tags`, `/api/show`), both sides.
//!
//! Server side: [`request::chat_request`] and [`request::generate_request`] check a body field
//! by field (every problem an [`ApiError`] naming the field) and map it onto the engine's
//! [`stencil_types::ChatRequest`]: `options.num_predict` is the token limit, `format` (`"json"`
//! or a JSON Schema) the output constraint, `tools` and assistant `tool_calls` (arguments as
//! objects) the tool conversation. [`response`] builds the response objects (a final one with
//! `done`, `done_reason`, token counts and durations in nanoseconds), the model listings and the
//! error body `{"error": message}`; [`stream::LineWriter`] turns engine events into the
//! newline-delimited JSON stream, handing out a tool call only once it is complete.
//!
//! Client side: [`ndjson::NdjsonDecoder`] splits network bytes into lines (UTF-8 kept across
//! reads) and [`accumulate::ChatAccumulator`] joins the lines into one message, refusing a
//! stream that ended without `"done": true`.
//!
//! ```
//! use serde_json::json;
//! use stencil_ollama::request::chat_request;
//!
//! let v = chat_request(&json!({
//!     "model": "smollm2", "messages": [{"role": "user", "content": "Hi"}],
//!     "format": {"type": "object"}, "options": {"num_predict": 64, "temperature": 0},
//! }))
//! .unwrap();
//! assert!(v.stream); // Ollama streams unless told not to
//! assert_eq!(v.request.params.max_tokens, 64);
//! ```

pub mod accumulate;
pub mod ndjson;
pub mod request;
pub mod response;
pub mod stream;

pub use stencil_types::api::ApiError;
