//! The OpenAI wire format, both sides of it.
//!
//! Server side: [`request::chat_request`] and [`request::completion_request`] check a request
//! body field by field and turn it into the engine's [`stencil_types::ChatRequest`] (every
//! problem is an [`ApiError`] naming the field); [`response`] holds the response and chunk
//! types, built from a [`stencil_types::ChatOutcome`]; [`chunks::ChunkWriter`] turns the
//! engine's [`stencil_types::ToolEvent`]s into stream chunks; [`sse`] frames events;
//! [`responses`] is the Responses API (`/v1/responses`), request and output. Engine rule
//! errors map onto fields through [`ApiError::from_request`]; the server maps the runtime's
//! other errors onto statuses (`stencil_server::api_error`). This crate depends on neither
//! the runtime nor candle: a client or a stream accumulator builds without them.
//!
//! Client side: [`sse::SseDecoder`] turns network bytes (split anywhere, LF/CRLF/CR line ends)
//! into events; [`accumulate::ChatAccumulator`] joins chunk deltas into a message and refuses
//! to hand out tool calls from a stream that did not end properly; [`client`] streams a chat
//! completion from any OpenAI-compatible server.
//!
//! ```
//! use stencil_openai::accumulate::ChatAccumulator;
//! use stencil_openai::sse::SseDecoder;
//!
//! // Network bytes, split anywhere: a tool call streamed in two fragments.
//! let wire = concat!(
//!     "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",",
//!     "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\r\n\r\n",
//!     "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\": 1}\"}}]},",
//!     "\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n",
//! );
//! let (mut sse, mut acc) = (SseDecoder::new(), ChatAccumulator::new());
//! for piece in wire.as_bytes().chunks(7) {
//!     for event in sse.push(piece) {
//!         acc.push_event(&event).unwrap();
//!     }
//! }
//! let calls = acc.tool_calls().unwrap(); // an error if the stream had not ended properly
//! assert_eq!((calls[0].name.as_str(), calls[0].arguments.as_str()), ("f", r#"{"a": 1}"#));
//! ```

pub mod accumulate;
pub mod chunks;
pub mod client;
pub mod error;
pub mod request;
pub mod response;
pub mod responses;
pub mod sse;

pub use error::ApiError;
