//! [`MaskError`].

/// Errors compiling a constraint or computing a mask.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MaskError {
    #[error(transparent)]
    Grammar(#[from] stencil_grammar::GrammarError),
    #[error("the automaton needs more than {limit} {what} states (reached {given}); simplify the constraint or raise the limit")]
    TooManyStates {
        what: &'static str,
        given: usize,
        limit: usize,
    },
    #[error("the grammar is too ambiguous: {given} parses alive at once (limit {limit})")]
    TooAmbiguous { given: usize, limit: usize },
    #[error("computing this mask needed more than {limit} units of automaton work; simplify the constraint or raise the limit")]
    TooMuchWork { limit: u64 },
    #[error("rule calls nested deeper than {limit}")]
    TooDeep { limit: usize },
    #[error("rule {rule:?} can call itself without consuming input (left recursion)")]
    LeftRecursion { rule: String },
    #[error("token {token} is not allowed here")]
    TokenNotAllowed { token: u32 },
    #[error("token {token} would leave more to write than the {left} tokens left in the budget")]
    OverBudget { token: u32, left: usize },
    #[error("cannot roll back {requested} tokens: only {available} committed")]
    RollbackTooFar { requested: usize, available: usize },
    #[error("token id {token} is outside the vocabulary of {vocab} tokens")]
    UnknownToken { token: u32, vocab: usize },
}
