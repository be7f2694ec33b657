//! The OpenAI wire format, both sides of it.
//!
//! Server side: [`request::chat_request`] and [`request::completion_request`] check a request
//! body field by field and turn it into the runtime's [`stencil_runtime::engine::ChatRequest`]
//! (every problem is an [`ApiError`] naming the field); [`response`] holds the response and
//! chunk types; [`sse`] frames events. [`ApiError::from_runtime`] is the one place runtime
//! errors get their HTTP status.
//!
//! Client side: [`sse::SseDecoder`] turns network bytes (split anywhere, LF/CRLF/CR line ends)
//! into events; [`accumulate::ChatAccumulator`] joins chunk deltas into a message and refuses
//! to hand out tool calls from a stream that did not end properly; [`client`] streams a chat
//! completion from any OpenAI-compatible server.

pub mod accumulate;
pub mod client;
pub mod error;
pub mod request;
pub mod response;
pub mod sse;

pub use error::ApiError;
