//! The Anthropic Messages wire format (`POST /v1/messages`), both sides of it.
//!
//! Server side: [`request::messages_request`] checks a body field by field (every problem an
//! [`ApiError`] naming the field) and maps it onto the engine's [`stencil_types::ChatRequest`]:
//! `system` and content blocks become chat messages, `tool_use` blocks assistant tool calls,
//! `tool_result` blocks tool messages, `tools[].input_schema` function parameters,
//! `output_config.format` a JSON Schema constraint. [`response`] builds the `message` object
//! and the error body (`{"type": "error", "error": {"type", "message"}}`);
//! [`stream::EventWriter`] turns engine events into the typed stream (`message_start`,
//! `content_block_start`/`_delta`/`_stop`, `message_delta`, `message_stop`).
//!
//! Client side: [`accumulate::MessageAccumulator`] joins stream events (decoded by any SSE
//! decoder) into a message and refuses a stream that did not end with `message_stop`.
//!
//! ```
//! use serde_json::json;
//! use stencil_anthropic::request::messages_request;
//!
//! let v = messages_request(&json!({
//!     "model": "m", "max_tokens": 64, "system": "Be brief.",
//!     "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
//! }))
//! .unwrap();
//! assert_eq!(v.request.messages.len(), 2);
//! assert_eq!(v.request.params.max_tokens, 64);
//! ```

pub mod accumulate;
pub mod request;
pub mod response;
pub mod stream;

pub use stencil_types::api::ApiError;
