//! [`GrammarError`]: why a constraint cannot be compiled, with the JSON pointer of the culprit.

/// Why a constraint was refused. Schema errors carry the JSON pointer (`#/properties/a`) of the
/// offending subschema.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum GrammarError {
    #[error("unsupported JSON Schema keyword `{keyword}` at {pointer}: {reason}")]
    Unsupported {
        keyword: String,
        pointer: String,
        reason: String,
    },
    #[error("invalid JSON Schema at {pointer}: {reason}")]
    InvalidSchema { pointer: String, reason: String },
    #[error("cannot resolve $ref {reference:?} at {pointer}")]
    UnresolvedRef { reference: String, pointer: String },
    #[error("the schema at {pointer} accepts no value (unsatisfiable)")]
    Unsatisfiable { pointer: String },
    #[error("invalid regex at {pointer}: {reason}")]
    InvalidRegex { pointer: String, reason: String },
    #[error("a choice constraint needs at least one choice")]
    EmptyChoice,
    #[error("invalid whitespace pattern: {0}")]
    InvalidWhitespace(String),
    #[error("schema is {given} bytes, more than the limit of {limit}")]
    SchemaTooLarge { given: usize, limit: usize },
    #[error("the grammar grew past {limit} expression nodes (at {pointer}); simplify the schema or raise the limit")]
    TooLarge { pointer: String, limit: usize },
    #[error("tools: {0}")]
    Tool(String),
    #[error("GBNF grammar, line {line}: {message}")]
    Gbnf { line: usize, message: String },
    #[error("structural tags: {0}")]
    StructuralTag(String),
    #[error("reasoning: {0}")]
    Reasoning(String),
    #[error("Lark grammar, line {line}: {message}")]
    Lark { line: usize, message: String },
}

impl GrammarError {
    pub(crate) fn unsupported(keyword: &str, pointer: &str, reason: impl Into<String>) -> Self {
        Self::Unsupported {
            keyword: keyword.to_string(),
            pointer: pointer.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn invalid(pointer: &str, reason: impl Into<String>) -> Self {
        Self::InvalidSchema {
            pointer: pointer.to_string(),
            reason: reason.into(),
        }
    }
}

/// A keyword ignored in lenient mode: the output may not satisfy it.
#[derive(Debug, Clone, PartialEq)]
pub struct Warning {
    pub keyword: String,
    pub pointer: String,
    pub reason: String,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ignored keyword `{}` at {}: {}",
            self.keyword, self.pointer, self.reason
        )
    }
}
