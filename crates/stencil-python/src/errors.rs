//! Rust errors as the exception classes of `stencil.errors` (defined in Python so that they
//! can subclass both `StencilError` and the builtin each one resembles).

use pyo3::prelude::*;
use stencil_grammar::GrammarError;
use stencil_mask::{BuildError, MaskError};

/// Builds `stencil.errors.<class>(message)` with `attrs` set on it.
fn raise(py: Python<'_>, class: &str, message: String, attrs: &[(&str, PyObject)]) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let cls = py.import("stencil.errors")?.getattr(class)?;
        let exc = cls.call1((message.clone(),))?;
        for (k, v) in attrs {
            exc.setattr(*k, v)?;
        }
        Ok(PyErr::from_value(exc))
    })();
    made.unwrap_or_else(|e| e)
}

type PyObject = Py<PyAny>;

fn s(py: Python<'_>, v: &str) -> PyObject {
    v.into_pyobject(py).expect("str").into_any().unbind()
}

fn none(py: Python<'_>) -> PyObject {
    py.None()
}

/// A constraint that does not compile: `SchemaError` with `keyword` (the JSON Schema keyword
/// at fault, or None), `pointer` (JSON pointer into the schema, or None) and `reason`.
pub fn schema_error(py: Python<'_>, e: &GrammarError) -> PyErr {
    let (keyword, pointer, reason) = match e {
        GrammarError::Unsupported {
            keyword,
            pointer,
            reason,
        } => (
            Some(keyword.as_str()),
            Some(pointer.as_str()),
            reason.clone(),
        ),
        GrammarError::InvalidSchema { pointer, reason }
        | GrammarError::InvalidRegex { pointer, reason } => {
            (None, Some(pointer.as_str()), reason.clone())
        }
        GrammarError::UnresolvedRef { pointer, .. }
        | GrammarError::Unsatisfiable { pointer }
        | GrammarError::TooLarge { pointer, .. } => (None, Some(pointer.as_str()), e.to_string()),
        other => (None, None, other.to_string()),
    };
    schema_exception(py, e.to_string(), keyword, pointer, &reason)
}

/// A grammar the automaton builder refuses: its grammar error as such (keyword and pointer
/// kept), or a limit as a `SchemaError` without keyword or pointer.
pub fn build_error(py: Python<'_>, e: &BuildError) -> PyErr {
    match e {
        BuildError::Grammar(g) => schema_error(py, g),
        other => schema_exception(py, other.to_string(), None, None, &other.to_string()),
    }
}

/// `SchemaError(message)` with its `keyword`, `pointer` and `reason` attributes.
fn schema_exception(
    py: Python<'_>,
    message: String,
    keyword: Option<&str>,
    pointer: Option<&str>,
    reason: &str,
) -> PyErr {
    let opt = |v: Option<&str>| v.map(|v| s(py, v)).unwrap_or_else(|| none(py));
    raise(
        py,
        "SchemaError",
        message,
        &[
            ("keyword", opt(keyword)),
            ("pointer", opt(pointer)),
            ("reason", s(py, reason)),
        ],
    )
}

/// A failed matcher step: `MaskError`.
pub fn mask_error(py: Python<'_>, e: &MaskError) -> PyErr {
    raise(py, "MaskError", e.to_string(), &[])
}

/// A failed step of the matcher filling bitmask row `row`: `MaskError`.
pub fn mask_error_in_row(py: Python<'_>, row: usize, e: &MaskError) -> PyErr {
    raise(py, "MaskError", format!("row {row}: {e}"), &[])
}

/// A budget the constraint cannot be completed within (`e`, a `MaskError::BudgetTooSmall`):
/// `BudgetError` with `min_tokens` (None when the output cannot be completed at all) and
/// `max_tokens`.
pub fn budget_error(
    py: Python<'_>,
    e: &MaskError,
    min_tokens: Option<usize>,
    max_tokens: usize,
) -> PyErr {
    let int = |n: usize| n.into_pyobject(py).expect("int").into_any().unbind();
    let min = min_tokens.map(int).unwrap_or_else(|| none(py));
    raise(
        py,
        "BudgetError",
        e.to_string(),
        &[("min_tokens", min), ("max_tokens", int(max_tokens))],
    )
}
