//! Python bindings of stencil's mask engine: the native module `stencil._stencil`, wrapped by
//! the pure-Python package in `python/stencil` (adapters for transformers, llama-cpp-python and
//! vLLM live there).
//!
//! Key types, as Python sees them:
//! - `Tokenizer` (`tokenizer::PyTokenizer`): a vocabulary as bytes plus the model's vocabulary
//!   size (which may exceed the tokenizer's: padding ids are never allowed).
//! - `Constraint` (`constraint::PyConstraint`): compiled once per (constraint, tokenizer),
//!   immutable, shared by any number of matchers and threads.
//! - `Matcher` (`matcher::PyMatcher`): per-sequence state; fills rows of an `int32` token
//!   bitmask (bit `i % 32` of word `i // 32` set when token `i` is allowed: the layout XGrammar
//!   and llguidance use), with the GIL released while it computes.
//!
//! Errors raise the exception classes of `stencil.errors` (`SchemaError` with keyword and
//! JSON pointer, `BudgetError`, `MaskError`), built in the `errors` module.

mod bitmask;
mod constraint;
mod errors;
mod matcher;
mod tokenizer;

use pyo3::prelude::*;

#[pymodule]
fn _stencil(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<tokenizer::PyTokenizer>()?;
    m.add_class::<constraint::PyConstraint>()?;
    m.add_class::<matcher::PyMatcher>()?;
    m.add_function(wrap_pyfunction!(matcher::fill_next_token_bitmasks, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
