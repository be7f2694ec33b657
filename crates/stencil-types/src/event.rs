//! The stream of a generation as every wire format sees it.

/// One piece of a streamed answer: text, or a tool call that starts, grows and ends. Each API
/// frames these its own way (OpenAI chunk deltas, Anthropic content blocks, Ollama lines);
/// arguments arrive as JSON text fragments joined by the call's `index`, and a call is complete
/// only at its [`ToolEvent::CallEnd`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolEvent {
    /// Plain content.
    Content(String),
    /// Reasoning text, before the content (under a reasoning prefix).
    Reasoning(String),
    /// A call starts (its name is complete).
    CallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// More of the call's arguments text.
    Arguments { index: usize, fragment: String },
    /// The call is complete.
    CallEnd { index: usize },
}
