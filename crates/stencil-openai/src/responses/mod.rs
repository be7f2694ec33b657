//! OpenAI's Responses API (`POST /v1/responses`), stateless: a request carries its whole
//! conversation as input items (`store` is accepted but nothing is kept, so
//! `previous_response_id` is refused).
//!
//! [`request::responses_request`] maps input items onto chat messages (`function_call` items
//! become an assistant's tool calls, `function_call_output` items tool messages), `instructions`
//! onto a system message, `text.format` onto the output constraint, flat function tools onto
//! tools. [`output::ResponseWriter`] builds the `response` object, whole or as the typed stream
//! (`response.created`, `response.output_item.added`, `response.output_text.delta`,
//! `response.function_call_arguments.delta`, … `response.completed`), from the same items so
//! the stream and the final object agree.

pub mod output;
pub mod request;
