//! `stencil.Constraint`: a JSON Schema, regex, choice list, any-JSON or tool set compiled for
//! one tokenizer. Immutable; every `matcher()` of it shares its lazily built automaton.

use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::Value;
use stencil_grammar::tools::{tool_grammar, ToolChoice, ToolSchema};
use stencil_grammar::{
    compile, Compiled, ConstraintSpec, FormatMode, GrammarError, Options, PropertyOrder, Whitespace,
};
use stencil_mask::{Constraint, Limits};

use crate::errors::{build_error, schema_error};
use crate::matcher::PyMatcher;
use crate::tokenizer::{PyTokenizer, TokenizerData};

/// A compiled constraint: build once, then `matcher()` per sequence.
#[pyclass(name = "Constraint", module = "stencil", frozen)]
pub struct PyConstraint {
    pub inner: Arc<Constraint>,
    pub tokenizer: Arc<TokenizerData>,
    warnings: Vec<String>,
}

/// A Python `str` as JSON text; dicts, lists and scalars converted directly (no JSON text in
/// between). The error names where in `what` a value is not JSON.
fn json_value(what: &str, v: &Bound<'_, PyAny>) -> PyResult<Value> {
    if let Ok(s) = v.cast::<PyString>() {
        return serde_json::from_str(&s.to_cow()?)
            .map_err(|e| PyValueError::new_err(format!("{what}: invalid JSON: {e}")));
    }
    to_json(what, v, 0)
}

/// Deepest nesting converted (a self-referencing dict would otherwise recurse forever).
const MAX_DEPTH: usize = 512;

fn to_json(at: &str, v: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    let not_json =
        |why: &str| PyTypeError::new_err(format!("{at} is not JSON-serializable: {why}"));
    if depth > MAX_DEPTH {
        return Err(not_json("nested too deeply (a cycle?)"));
    }
    if v.is_none() {
        Ok(Value::Null)
    } else if let Ok(b) = v.cast::<PyBool>() {
        Ok(Value::Bool(b.is_true()))
    } else if let Ok(i) = v.cast::<PyInt>() {
        if let Ok(x) = i.extract::<i64>() {
            Ok(x.into())
        } else {
            i.extract::<u64>()
                .map(Value::from)
                .map_err(|_| not_json("an integer outside 64 bits"))
        }
    } else if let Ok(f) = v.cast::<PyFloat>() {
        serde_json::Number::from_f64(f.value())
            .map(Value::Number)
            .ok_or_else(|| not_json("NaN or infinity"))
    } else if let Ok(s) = v.cast::<PyString>() {
        Ok(Value::String(s.to_cow()?.into_owned()))
    } else if let Ok(d) = v.cast::<PyDict>() {
        let mut map = serde_json::Map::with_capacity(d.len());
        for (k, x) in d.iter() {
            let k = k
                .cast::<PyString>()
                .map_err(|_| not_json("a key that is not a string"))?
                .to_cow()?
                .into_owned();
            let value = to_json(&format!("{at}/{k}"), &x, depth + 1)?;
            map.insert(k, value);
        }
        Ok(Value::Object(map))
    } else if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let mut out = Vec::new();
        for (i, x) in v.try_iter()?.enumerate() {
            out.push(to_json(&format!("{at}/{i}"), &x?, depth + 1)?);
        }
        Ok(Value::Array(out))
    } else {
        let name = v
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        Err(not_json(&format!("a {name}")))
    }
}

/// The `whitespace` keyword: "flexible" (the default), "compact", an int maximum of blanks
/// between tokens, or a regex.
fn whitespace(w: Option<&Bound<'_, PyAny>>) -> PyResult<Whitespace> {
    let Some(w) = w else {
        return Ok(Whitespace::default());
    };
    if let Ok(max) = w.extract::<u32>() {
        return Ok(Whitespace::Flexible { max });
    }
    Ok(match w.extract::<String>()?.as_str() {
        "flexible" => Whitespace::default(),
        "compact" => Whitespace::Compact,
        pattern => Whitespace::Pattern(pattern.to_owned()),
    })
}

/// The compile options a keyword set names (the defaults are generation's: integers written
/// plainly, recursion unrolled to `stencil_types::DEFAULT_MAX_RECURSION` levels).
#[allow(clippy::too_many_arguments)]
fn options(
    whitespace: Option<&Bound<'_, PyAny>>,
    lenient: bool,
    property_order: &str,
    plain_integers: bool,
    max_recursion: Option<u32>,
    format: &str,
) -> PyResult<Options> {
    let whitespace = self::whitespace(whitespace)?;
    let property_order = match property_order {
        "schema" => PropertyOrder::Schema,
        "any" => PropertyOrder::Any,
        other => {
            return Err(PyValueError::new_err(format!(
                "property_order={other:?}: expected \"schema\" or \"any\""
            )))
        }
    };
    let format = match format {
        "assert" => FormatMode::Assert,
        "strict" => FormatMode::Strict,
        "annotate" => FormatMode::Annotate,
        other => {
            return Err(PyValueError::new_err(format!(
                "format={other:?}: expected \"assert\", \"strict\" or \"annotate\""
            )))
        }
    };
    Ok(Options {
        whitespace,
        lenient,
        format,
        plain_integers,
        max_recursion,
        property_order,
        ..Options::default()
    })
}

fn tool_choice(v: &Bound<'_, PyAny>) -> PyResult<ToolChoice> {
    let v = match v.cast::<PyString>() {
        Ok(s) => Value::String(s.to_cow()?.into_owned()),
        Err(_) => json_value("tool_choice", v)?,
    };
    let named = |v: &Value| {
        v.pointer("/function/name")
            .or_else(|| v.get("name"))
            .and_then(Value::as_str)
            .map(|n| ToolChoice::Named(n.to_owned()))
    };
    match &v {
        Value::String(s) => match s.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "required" => Ok(ToolChoice::Required),
            "none" => Ok(ToolChoice::None),
            name => Ok(ToolChoice::Named(name.to_owned())),
        },
        other => named(other).ok_or_else(|| {
            PyValueError::new_err(format!(
                "tool_choice {other}: expected \"auto\", \"required\", \"none\", a tool name or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}"
            ))
        }),
    }
}

impl PyConstraint {
    fn build(
        py: Python<'_>,
        tokenizer: &PyTokenizer,
        compile: impl FnOnce() -> Result<Compiled, GrammarError> + Send,
    ) -> PyResult<Self> {
        let data = tokenizer.data.clone();
        let compiled = py.detach(compile).map_err(|e| schema_error(py, &e))?;
        let inner = py
            .detach(|| Constraint::new(&compiled.grammar, data.trie.clone(), Limits::default()))
            .map_err(|e| build_error(py, &e))?;
        Ok(Self {
            inner,
            tokenizer: data,
            warnings: compiled.warnings.iter().map(|w| w.to_string()).collect(),
        })
    }

    fn spec(
        py: Python<'_>,
        spec: ConstraintSpec,
        tokenizer: &PyTokenizer,
        options: Options,
    ) -> PyResult<Self> {
        Self::build(py, tokenizer, move || compile(&spec, &options))
    }
}

#[pymethods]
impl PyConstraint {
    /// Output valid under a JSON Schema (`str` or `dict`). Keywords: `whitespace`
    /// ("flexible" = up to 20 blanks between tokens, "compact", an int maximum, or a regex),
    /// `lenient` (unsupported keywords become warnings instead of errors), `property_order`
    /// ("schema" or "any"), `plain_integers`, `max_recursion`, `format` ("assert": known
    /// formats enforced, unknown ones ignored with a warning; "strict": unknown ones refused;
    /// "annotate": none enforced). Raises `SchemaError` naming the keyword and JSON pointer at
    /// fault.
    #[staticmethod]
    #[pyo3(signature = (schema, tokenizer, *, whitespace=None, lenient=false, property_order="schema", plain_integers=true, max_recursion=Some(stencil_types::DEFAULT_MAX_RECURSION), format="assert"))]
    #[allow(clippy::too_many_arguments)]
    fn json_schema(
        py: Python<'_>,
        schema: &Bound<'_, PyAny>,
        tokenizer: &PyTokenizer,
        whitespace: Option<&Bound<'_, PyAny>>,
        lenient: bool,
        property_order: &str,
        plain_integers: bool,
        max_recursion: Option<u32>,
        format: &str,
    ) -> PyResult<Self> {
        let schema = json_value("schema", schema)?;
        let options = options(
            whitespace,
            lenient,
            property_order,
            plain_integers,
            max_recursion,
            format,
        )?;
        Self::spec(py, ConstraintSpec::JsonSchema(schema), tokenizer, options)
    }

    /// Output matching a regular expression (Rust `regex` syntax, whole output).
    #[staticmethod]
    fn regex(py: Python<'_>, pattern: String, tokenizer: &PyTokenizer) -> PyResult<Self> {
        Self::spec(
            py,
            ConstraintSpec::Regex(pattern),
            tokenizer,
            Options::generation(),
        )
    }

    /// Output matching a llama.cpp GBNF grammar (start rule `root`). A grammar that does not
    /// parse is a `SchemaError` whose message names the line.
    #[staticmethod]
    fn gbnf(py: Python<'_>, grammar: String, tokenizer: &PyTokenizer) -> PyResult<Self> {
        Self::spec(
            py,
            ConstraintSpec::Gbnf(grammar),
            tokenizer,
            Options::generation(),
        )
    }

    /// Output matching a Lark grammar (start rule `start`; `%json { schema }` embeds a
    /// schema-constrained value). A grammar that does not parse is a `SchemaError` whose
    /// message names the line.
    #[staticmethod]
    fn lark(py: Python<'_>, grammar: String, tokenizer: &PyTokenizer) -> PyResult<Self> {
        Self::spec(
            py,
            ConstraintSpec::Lark(grammar),
            tokenizer,
            Options::generation(),
        )
    }

    /// Output exactly one of `choices`.
    #[staticmethod]
    fn choice(py: Python<'_>, choices: Vec<String>, tokenizer: &PyTokenizer) -> PyResult<Self> {
        Self::spec(
            py,
            ConstraintSpec::Choice(choices),
            tokenizer,
            Options::generation(),
        )
    }

    /// Any JSON value (`object_only`: any JSON object).
    #[staticmethod]
    #[pyo3(signature = (tokenizer, *, object_only=false, whitespace=None))]
    fn any_json(
        py: Python<'_>,
        tokenizer: &PyTokenizer,
        object_only: bool,
        whitespace: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let options = Options {
            whitespace: self::whitespace(whitespace)?,
            ..Options::generation()
        };
        let spec = if object_only {
            ConstraintSpec::AnyJsonObject
        } else {
            ConstraintSpec::AnyJson
        };
        Self::spec(py, spec, tokenizer, options)
    }

    /// Tool calls in the `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`
    /// convention (Hermes/Qwen/SmolLM2 chat templates). `tools`: OpenAI tool definitions
    /// (`{"type": "function", "function": {"name", "parameters"}}`) or bare functions;
    /// `tool_choice`: "auto" (text, then optionally calls), "required", "none", or a tool
    /// name (exactly one call of it); `max_calls`: parallel calls allowed in one output.
    #[staticmethod]
    #[pyo3(signature = (tools, tokenizer, *, tool_choice=None, max_calls=stencil_types::DEFAULT_MAX_TOOL_CALLS))]
    fn tools(
        py: Python<'_>,
        tools: &Bound<'_, PyList>,
        tokenizer: &PyTokenizer,
        tool_choice: Option<&Bound<'_, PyAny>>,
        max_calls: u32,
    ) -> PyResult<Self> {
        let mut defs = Vec::new();
        for (i, t) in tools.iter().enumerate() {
            let v = json_value(&format!("tools[{i}]"), &t)?;
            let f = v.get("function").unwrap_or(&v);
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| PyValueError::new_err(format!("tools[{i}] has no function name")))?;
            defs.push((name.to_owned(), f.get("parameters").cloned()));
        }
        let choice = match tool_choice {
            Some(c) => self::tool_choice(c)?,
            None => ToolChoice::Auto,
        };
        if max_calls == 0 {
            return Err(PyValueError::new_err("max_calls must be at least 1"));
        }
        Self::build(py, tokenizer, move || {
            let schemas: Vec<ToolSchema> = defs
                .iter()
                .map(|(name, parameters)| ToolSchema {
                    name,
                    parameters: parameters.as_ref(),
                })
                .collect();
            tool_grammar(&schemas, &choice, max_calls, None, &Options::generation())
        })
    }

    /// A new matcher at the start of the output. With `max_tokens`, every mask allows only
    /// tokens after which the output can still be completed within the tokens left (so it
    /// always ends complete); raises `BudgetError` when even the shortest output needs more.
    #[pyo3(signature = (max_tokens=None))]
    fn matcher(slf: &Bound<'_, Self>, max_tokens: Option<usize>) -> PyResult<PyMatcher> {
        PyMatcher::new(slf.py(), slf.get(), max_tokens)
    }

    /// The tokenizer's model vocabulary size (bitmask width in bits).
    #[getter]
    fn vocab_size(&self) -> usize {
        self.tokenizer.vocab_size
    }

    /// What the compiler did not enforce: unknown formats, and keywords under `lenient`.
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }

    fn __repr__(&self) -> String {
        format!(
            "Constraint(vocab_size={}, warnings={})",
            self.tokenizer.vocab_size,
            self.warnings.len()
        )
    }
}
