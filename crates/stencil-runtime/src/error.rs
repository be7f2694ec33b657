//! The runtime's one error type.

use std::path::PathBuf;

/// Everything that can go wrong loading a model or generating with it.
///
/// Each variant names *what* was wrong and *where* (file, metadata key, message index), so the
/// CLI and the server can show it to a user as is.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a valid GGUF file: {reason}")]
    InvalidGguf { path: PathBuf, reason: String },
    #[error("GGUF metadata key `{key}` is missing or has the wrong type: {reason}")]
    Metadata { key: String, reason: String },
    #[error("unsupported model architecture `{arch}` (supported: {supported})")]
    UnsupportedArchitecture { arch: String, supported: String },
    #[error("tokenizer error: {0}")]
    Tokenizer(String),
    #[error("chat template error: {0}")]
    Template(String),
    /// The request breaks a rule (messages, tools, tool_choice, sampling settings); the error
    /// says which field.
    #[error(transparent)]
    Request(#[from] stencil_types::RequestError),
    #[error("{}", context_message(*tokens, *context, *reserved))]
    PromptTooLong {
        tokens: usize,
        context: usize,
        reserved: usize,
    },
    #[error("the prompt is empty and the model has no BOS token to start from: give it some text")]
    EmptyPrompt,
    #[error("{}", stencil_mask::MaskError::BudgetTooSmall { needed: *needed, max_tokens: *max_tokens })]
    BudgetTooSmall {
        /// Tokens of the shortest output known (`None`: the constraint cannot be completed
        /// by this vocabulary).
        needed: Option<usize>,
        max_tokens: usize,
    },
    /// The sequence can never be admitted: its reservation exceeds the whole KV cache.
    #[error("the request needs {needed} KV cache positions (prompt + max_tokens), but the KV cache holds {capacity}: lower max_tokens or give the cache more memory (`stencil serve --kv-cache-mb`)")]
    KvCacheTooSmall { needed: usize, capacity: usize },
    #[error("device `{0}`")]
    Device(String),
    #[error("model `{spec}` could not be resolved: {reason}")]
    ModelNotFound { spec: String, reason: String },
    /// The constraint could not be compiled for this vocabulary.
    #[error("constraint: {0}")]
    ConstraintBuild(#[from] stencil_mask::BuildError),
    /// A mask or commit step failed (a limit hit while the automaton grows).
    #[error("constraint: {0}")]
    Constraint(#[from] stencil_mask::MaskError),
    #[error("{0}")]
    Grammar(#[from] stencil_grammar::GrammarError),
    #[error("generation was cancelled")]
    Cancelled,
    #[error("generation took longer than the {0:?} allowed")]
    Timeout(std::time::Duration),
    /// Generation itself failed (the model produced no usable logits, a worker thread died).
    #[error("generation failed: {0}")]
    Generation(String),
    #[error("{context}: {source}")]
    Candle {
        context: String,
        source: candle_core::Error,
    },
    #[error("safetensors model at {path}: {reason}")]
    Safetensors { path: PathBuf, reason: String },
}

fn context_message(tokens: usize, context: usize, reserved: usize) -> String {
    if reserved <= 1 {
        format!("the prompt is {tokens} tokens, but the model's context is {context} tokens and at least one token must be left for the output")
    } else {
        format!("the prompt is {tokens} tokens and max_tokens asks for {reserved} more, {} in all, but the model's context is {context} tokens: shorten the prompt or lower max_tokens", tokens + reserved)
    }
}

/// Result alias for the runtime.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// Adds a human context to candle errors (`.ctx("loading layer 3")?`).
pub(crate) trait CandleContext<T> {
    fn ctx(self, context: impl Into<String>) -> Result<T>;
}

impl<T> CandleContext<T> for candle_core::Result<T> {
    fn ctx(self, context: impl Into<String>) -> Result<T> {
        self.map_err(|source| RuntimeError::Candle {
            context: context.into(),
            source,
        })
    }
}

pub(crate) fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> RuntimeError {
    let path = path.into();
    move |source| RuntimeError::Io { path, source }
}

/// The message of a caught panic (`catch_unwind`'s payload) when it carries one: a `panic!`
/// with a literal or a formatted message.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> Option<String> {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
}
