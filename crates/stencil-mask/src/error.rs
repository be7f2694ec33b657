//! [`BuildError`] (compiling a constraint) and [`MaskError`] (one step of a matcher).

/// Why a grammar could not be compiled for a vocabulary ([`crate::Constraint::new`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The grammar uses something the automaton cannot build (a rule call inside `not`).
    #[error(transparent)]
    Grammar(#[from] stencil_grammar::GrammarError),
    #[error("the automaton needs more than {limit} {what} states (reached {given}); simplify the constraint or raise the limit")]
    TooManyStates {
        what: &'static str,
        given: usize,
        limit: usize,
    },
    /// The grammar names a token (`<|im_end|>`, `<[42]>`) this vocabulary cannot give.
    #[error("the grammar names the token `{name}`, but {reason}")]
    NamedToken { name: String, reason: String },
    /// Another limit of [`crate::Limits`] was hit while building the start state.
    #[error(transparent)]
    Limit(MaskError),
}

impl From<MaskError> for BuildError {
    fn from(e: MaskError) -> Self {
        match e {
            MaskError::TooManyStates { what, given, limit } => {
                Self::TooManyStates { what, given, limit }
            }
            other => Self::Limit(other),
        }
    }
}

/// Why one step of a [`crate::Matcher`] (a mask, a commit, a rollback) failed. The automaton is
/// built lazily, so a limit can be hit at any step; the matcher is unchanged by a failed step.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum MaskError {
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
    #[error("token {token} is not allowed here")]
    TokenNotAllowed { token: u32 },
    #[error("token {token} would leave more to write than the {left} tokens left in the budget")]
    OverBudget { token: u32, left: usize },
    #[error("cannot roll back {requested} tokens: only {available} committed")]
    RollbackTooFar { requested: usize, available: usize },
    #[error("token id {token} is outside the vocabulary of {vocab} tokens")]
    UnknownToken { token: u32, vocab: usize },
    /// A budgeted matcher cannot start (`Constraint::matcher_with_budget`): the shortest
    /// output the constraint accepts needs more tokens than the budget (`needed`: `None` when
    /// this vocabulary cannot write any complete output).
    #[error("{}", budget_message(*needed, *max_tokens))]
    BudgetTooSmall {
        needed: Option<usize>,
        max_tokens: usize,
    },
    /// A thread panicked while it held this matcher's cache: the cache may be half updated,
    /// so the matcher (and its clones) refuse to go on. Other matchers are unaffected.
    #[error("a previous step of this matcher panicked; start a new matcher")]
    Poisoned,
}

fn budget_message(needed: Option<usize>, max_tokens: usize) -> String {
    match needed {
        Some(n) => format!(
            "max_tokens is {max_tokens}, but the shortest output the constraint allows takes {n} tokens; raise max_tokens to at least {n}"
        ),
        None => "the constraint has no output this model's vocabulary can write".into(),
    }
}
