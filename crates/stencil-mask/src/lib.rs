//! Token masks: which tokens may come next under a constraint.
//!
//! A [`stencil_grammar::Grammar`] is compiled into a byte-level NFA (one fragment per rule,
//! calls between rules for recursion), determinized lazily into a [`dfa::LazyDfa`]. The
//! vocabulary is a byte trie ([`TokenTrie`]). A [`Matcher`] tracks the parse as a small set of
//! stacks of DFA states and computes a mask by walking the trie, pruning a subtree as soon as
//! its prefix dies.
//!
//! Speed comes from caching per DFA state: the tokens a state allows without leaving its rule
//! are computed once and shared by every matcher of the same [`Constraint`]; only tokens that
//! cross a rule boundary (a call or a return) are walked per request.
//!
//! Key types:
//! - [`Constraint`]: compiled once per (grammar, vocabulary), shared (`Arc`) across requests.
//! - [`Matcher`]: per-request state: `compute_mask`, `commit`, `rollback`, `forced_bytes`,
//!   `is_accepting`; cheap to clone.
//! - [`TokenSet`]: a bitset over token ids.
//! - [`Limits`] and [`MaskError`]: typed limits (`TooManyStates { given, limit }`).

mod constraint;
mod counted;
mod dfa;
mod error;
mod hash;
mod machine;
mod matcher;
mod nfa;
mod tokenset;
mod trie;

pub use constraint::{Constraint, Limits};
pub use error::MaskError;
pub use matcher::Matcher;
pub use tokenset::TokenSet;
pub use trie::TokenTrie;
