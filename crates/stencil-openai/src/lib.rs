//! The OpenAI wire format, both sides of it.
//!
//! Server side: [`request::chat_request`] and [`request::completion_request`] check a request
//! body field by field and turn it into the engine's [`stencil_types::ChatRequest`] (every
//! problem is an [`ApiError`] naming the field); [`response`] holds the response and chunk
//! types, built from a [`stencil_types::ChatOutcome`]; [`sse`] frames events. Engine rule
//! errors map onto fields through [`ApiError::from_request`]; the server maps the runtime's
//! other errors onto statuses (`stencil_server::api_error`). This crate depends on neither
//! the runtime nor candle: a client or a stream accumulator builds without them.
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
