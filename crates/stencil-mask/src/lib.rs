//! Token masks: which tokens may come next under a constraint.
//!
//! A [`stencil_grammar::Grammar`] is turned into a hash-consed arena of nodes and explored as
//! a lazy NFA (module `nfa`): an NFA state ("item") is a byte range, a rule call, a rule end or a
//! position inside a machine, paired with an interned continuation, and items are created only
//! when reached. Bounded repetitions are counters inside continuations, so `maxItems: 1000` or
//! `maxLength: 5000` costs nothing until the output gets there. Subset construction over items
//! gives a lazy DFA (`dfa::LazyDfa`); the vocabulary is a byte trie ([`TokenTrie`]). A
//! [`Matcher`] tracks the parse as a small set of stacks of DFA states and computes a mask by
//! walking the trie, pruning a subtree as soon as its prefix dies.
//!
//! Intersections and complements (`oneOf`, `not`, `pattern` with `format`) are "machines"
//! (`machine::Machine`): explicit DFAs with class-compressed rows, determinized, combined and
//! trimmed when first reached. A string language with a length bound (`pattern` or `format`
//! with `minLength`/`maxLength`) is a `counted::Counted` machine instead: stepped lazily as
//! (pattern state, character decoder state, length), and pruned exactly by a precomputed,
//! eventually periodic table of completion lengths, never as a |pattern| x maxLength product.
//!
//! Speed comes from sharing mask work:
//! - a DFA state's "local" mask (tokens that stay inside its rule) is computed once per
//!   cache and shared by every matcher that uses the cache (a [`Constraint`] keeps a pool of
//!   caches: one per matcher alive, reused warm by the next); only tokens that cross a rule
//!   boundary are walked per request;
//! - inside JSON strings, plain-text tokens of at most as many characters as the string may
//!   still take are added as precomputed sets; tokens certain to die at a control character
//!   are left out of the walk;
//! - states that no single token can tell apart share one mask: repetition counts and string
//!   lengths far from their bounds map to a canonical state, and a position in a plain
//!   `maxLength` string takes the mask of the same position in an unbounded string, filtered
//!   by how many characters each token writes before closing the string
//!   (`dfa::LazyDfa::mask_key`).
//!
//! Key types:
//! - [`Constraint`]: compiled once per (grammar, vocabulary), immutable, shared (`Arc`) across
//!   requests and threads; what grows lazily lives in per-matcher caches from its pool, so
//!   matchers on different threads never wait for each other.
//! - [`Matcher`]: per-request state: `compute_mask`, `commit`, `rollback`, `forced_bytes`,
//!   `forced_tokens` (fast-forward through the caller's tokenizer),
//!   `is_accepting`; cheap to clone.
//! - [`TokenSet`]: a bitset over token ids.
//! - [`Limits`]: typed limits, so a pathological constraint is an error, never a hang;
//!   [`BuildError`] when compiling a constraint, [`MaskError`] when a step fails
//!   (`TooManyStates { given, limit }`, `TooMuchWork`, `TokenNotAllowed`...).
//!
//! ```
//! use std::sync::Arc;
//! use stencil_grammar::{compile, ConstraintSpec, Options};
//! use stencil_mask::{Constraint, Limits, TokenSet, TokenTrie};
//! use stencil_vocab::{Vocab, VocabStyle};
//!
//! // A toy vocabulary; id 0 is the end-of-sequence token.
//! let tokens: Vec<Option<String>> =
//!     ["</s>", "yes", "no", "y", "es", "!"].iter().map(|t| Some(t.to_string())).collect();
//! let special = [true, false, false, false, false, false];
//! let vocab = Vocab::from_token_strings(&tokens, &special, VocabStyle::SentencePiece, vec![0])?;
//! let trie = Arc::new(TokenTrie::new(&vocab)); // once per tokenizer
//!
//! // Once per constraint, shared by every request.
//! let spec = ConstraintSpec::Choice(vec!["yes".into(), "no".into()]);
//! let grammar = compile(&spec, &Options::default())?.grammar;
//! let constraint = Constraint::new(&grammar, trie, Limits::default())?;
//!
//! // Per request: a matcher and a mask the caller owns.
//! let mut matcher = constraint.matcher()?;
//! let mut mask = TokenSet::new(vocab.len());
//! matcher.compute_mask(&mut mask)?;
//! assert_eq!(mask.iter().collect::<Vec<_>>(), [1, 2, 3]); // "yes", "no", "y"
//! matcher.commit(3)?; // "y"
//! matcher.compute_mask(&mut mask)?;
//! assert_eq!(mask.iter().collect::<Vec<_>>(), [4]); // only "es" continues it
//! matcher.commit(4)?;
//! matcher.compute_mask(&mut mask)?;
//! assert_eq!(mask.iter().collect::<Vec<_>>(), [0]); // complete: only end-of-sequence
//! assert!(matcher.commit(5).is_err()); // "!" was never allowed
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Debug output goes through `tracing` (target `stencil_mask`): the CLI's
//! `STENCIL_LOG=stencil_mask=trace` prints every per-state mask computed and its time.

mod budget;
mod completion;
mod constraint;
mod counted;
mod dfa;
mod distinct;
mod error;
mod hash;
mod machine;
mod matcher;
mod nfa;
mod tokenset;
mod trie;

pub use constraint::{Constraint, Limits};
pub use error::{BuildError, MaskError};
pub use matcher::Matcher;
pub use tokenset::TokenSet;
pub use trie::TokenTrie;
