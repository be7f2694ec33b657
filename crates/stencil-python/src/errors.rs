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
    let opt = |v: Option<&str>| v.map(|v| s(py, v)).unwrap_or_else(|| none(py));
    raise(
        py,
        "SchemaError",
        e.to_string(),
        &[
            ("keyword", opt(keyword)),
            ("pointer", opt(pointer)),
            ("reason", s(py, &reason)),
        ],
    )
}

/// A grammar the automaton builder refuses (a limit): `SchemaError` without a pointer.
pub fn build_error(py: Python<'_>, e: &BuildError) -> PyErr {
    raise(
        py,
        "SchemaError",
        e.to_string(),
        &[
            ("keyword", none(py)),
            ("pointer", none(py)),
            ("reason", s(py, &e.to_string())),
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

/// A token budget the constraint cannot be completed within: `BudgetError` with
/// `min_tokens` (None when the output cannot be completed at all) and `max_tokens`.
pub fn budget_error(py: Python<'_>, min_tokens: Option<usize>, max_tokens: usize) -> PyErr {
    let message = match min_tokens {
        Some(min) => format!(
            "max_tokens={max_tokens} is too small: the shortest output this constraint accepts needs {min} tokens"
        ),
        None => "the constraint cannot be completed from here".to_string(),
    };
    let min = match min_tokens {
        Some(m) => m.into_pyobject(py).expect("int").into_any().unbind(),
        None => none(py),
    };
    let max = max_tokens
        .into_pyobject(py)
        .expect("int")
        .into_any()
        .unbind();
    raise(
        py,
        "BudgetError",
        message,
        &[("min_tokens", min), ("max_tokens", max)],
    )
}
