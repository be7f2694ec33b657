//! Tool calling in generation: the Hermes `<tool_call>` prompt convention and an incremental
//! parser for calls in generated text.
//!
//! - [`hermes_messages`]: for chat templates that know nothing of tools, the tools go into the
//!   system turn as `<tools>...</tools>`, calls in history become `<tool_call>` blocks and
//!   results `<tool_response>` blocks; [`template_messages`] for templates that do.
//! - [`ToolCallParser`]: splits generated text into content and calls as it streams, so a
//!   server can send `delta.tool_calls` fragments.
//!
//! The request types ([`stencil_types::Tool`], [`stencil_types::ToolChoice`],
//! [`stencil_types::ToolCall`]) and the conversation rules
//! ([`stencil_types::conversation::validate_conversation`]) live in `stencil-types`; the
//! grammar that makes calls valid is [`stencil_grammar::tools`].

mod hermes;
mod parser;

pub use hermes::{hermes_call_text, hermes_messages, hermes_tools_prompt, template_messages};
pub use parser::{ToolCallParser, ToolEvent};

/// A fresh `call_...` id (24 random letters and digits).
pub fn new_call_id() -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut rng = rand::rng();
    let id: String = (0..24)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect();
    format!("call_{id}")
}
