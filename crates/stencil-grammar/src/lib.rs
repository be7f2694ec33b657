//! Constraint front end: JSON Schema, regex, choice, "any JSON", GBNF and Lark grammars to a
//! grammar IR.
//!
//! Everything a user can ask stencil to enforce is turned here into one [`Grammar`]: a set of
//! rules whose bodies are regular expressions over bytes ([`Expr`]) that may call other rules
//! (recursion: `$ref` cycles, nested "any JSON" values). The IR is pure data; the automaton
//! layer (`stencil-mask`) compiles it into lazily built DFAs and token masks.
//!
//! Key types:
//! - [`ConstraintSpec`]: what the user asked for; [`compile`] turns it into a [`Grammar`]
//!   ([`Compiled`] adds the warnings of lenient mode).
//! - [`Options`]: the language (whitespace policy, format assertion, lenient mode, property
//!   order...); [`CompileLimits`]: resource limits, apart from it.
//! - [`GrammarError`]: every refusal names the keyword and its JSON pointer.
//! - [`tools`]: the `<tool_call>` grammar for OpenAI-style tools under each `tool_choice`;
//!   [`StructuralTags`]: free text with triggered, constrained tags, of which tool calls are
//!   one use.
//! - [`ir`]: the IR itself ([`ir::Expr`], [`ir::Rule`], [`ir::RuleId`]...), for the automaton
//!   layer and for tests; [`ir::matches`] is a slow reference matcher.
//!
//! ```
//! use stencil_grammar::{compile, ConstraintSpec, Options};
//! use serde_json::json;
//!
//! let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
//! let compiled = compile(&ConstraintSpec::JsonSchema(schema), &Options::generation()).unwrap();
//! let g = &compiled.grammar;
//! let accepts = |s: &str| stencil_grammar::ir::matches(&g.rule(g.start).expr, &g.rules, s.as_bytes());
//! assert!(accepts(r#"{"n": 42}"#));
//! assert!(!accepts(r#"{"n": 4.5}"#));
//! assert!(!accepts(r#"{}"#));
//!
//! // Refusals name the keyword and where it is.
//! let err = compile(&ConstraintSpec::JsonSchema(json!({"properties": {"a": {"type": "colour"}}})), &Options::default())
//!     .unwrap_err();
//! assert!(err.to_string().contains("#/properties/a"), "{err}");
//! ```
//!
//! Design rules: an unsupported JSON Schema keyword is an error (or, with `lenient`, a warning
//! that names it) — never silently ignored; output strings use one canonical escaping so that
//! string lengths, patterns and enumerations are exact.

mod cfg;
mod error;
mod expr;
mod formats;
mod json;
mod matcher;
mod numeric;
mod reasoning;
mod regex;
mod schema;
mod structural;
mod tokens;
pub mod tools;

pub use cfg::gbnf::compile_gbnf;
pub use cfg::lark::compile_lark;
pub use error::{GrammarError, Warning};
pub use expr::Grammar;
pub use json::Whitespace;
pub use reasoning::reasoning_then;
pub use schema::compile_schema;
pub use structural::{compile_structural_tags, StructuralTags, TagSpec};

/// The grammar IR: what [`compile`] produces and the automaton layer consumes. Public for that
/// layer and for tests; a user of the engine does not need it.
pub mod ir {
    pub use crate::expr::{
        special_token_bytes, ByteDfa, ByteDfaState, CharRanges, DistinctItems, Expr, Grammar,
        ObjectExpr, Rule, RuleId, SharedExpr, SPECIAL_TOKEN_MARK,
    };
    pub use crate::json::{any_string_char, key_except, Json};
    pub use crate::matcher::matches;
    pub use crate::regex::regex_to_expr;
}

use expr::Expr;
use json::Json;
use regex::regex_to_expr;

/// A constraint as the user states it.
#[derive(Debug, Clone)]
pub enum ConstraintSpec {
    /// A JSON Schema (any draft's keywords, evaluated as 2020-12).
    JsonSchema(serde_json::Value),
    /// A regular expression (Rust `regex` syntax) the whole output must match.
    Regex(String),
    /// The output is exactly one of these strings.
    Choice(Vec<String>),
    /// Any JSON value.
    AnyJson,
    /// Any JSON object (OpenAI `json_object` mode).
    AnyJsonObject,
    /// A llama.cpp GBNF grammar (start rule `root`).
    Gbnf(String),
    /// A Lark grammar (start rule `start`; `%json { schema }` embeds a schema-constrained
    /// value; see [`compile_lark`] for the subset).
    Lark(String),
    /// Free text in which triggers open constrained tags (see [`compile_structural_tags`]).
    StructuralTags(StructuralTags),
}

/// How `format` keywords are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FormatMode {
    /// Enforce the known formats (what a generator wants); a format the specification does
    /// not define (`path`, `url`, `color`...) constrains nothing, as validators treat it, and
    /// is reported as a [`Warning`]; the specification's formats stencil cannot check
    /// (`regex`, `iri`, `idn-*`) are refused.
    #[default]
    Assert,
    /// Enforce the known formats and refuse unknown ones (an error naming the format).
    Strict,
    /// Treat `format` as an annotation (the 2020-12 default vocabulary for validators).
    Annotate,
}

/// The order object members may be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PropertyOrder {
    /// Declared properties in schema order, then required-but-undeclared ones, then
    /// additional ones (a documented departure from JSON's unordered objects).
    #[default]
    Schema,
    /// Any order, each property at most once: the exact language (objects of up to 64
    /// declared properties; larger ones fall back to schema order).
    Any,
}

/// Resource limits of the compiler, apart from the language it compiles; exceeding one is a
/// [`GrammarError::SchemaTooLarge`] or [`GrammarError::TooLarge`], never a silently smaller
/// language.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileLimits {
    /// Largest schema accepted, in bytes of its compact JSON text. Default 4 MiB.
    pub max_schema_bytes: usize,
    /// Largest expression tree built (a guard against exponential `allOf`/`anyOf` expansion).
    /// Default 2,000,000 nodes.
    pub max_expr_nodes: usize,
}

impl Default for CompileLimits {
    fn default() -> Self {
        Self {
            max_schema_bytes: 4 << 20,
            max_expr_nodes: 2_000_000,
        }
    }
}

/// What language a schema compiles to. Each field's default is given with it; see
/// [`Options::generation`] for what generation uses.
#[derive(Debug, Clone)]
pub struct Options {
    /// Whitespace allowed between JSON tokens. Default: [`Whitespace::Flexible`].
    pub whitespace: Whitespace,
    /// Downgrade unsupported keywords to warnings (the output may then be under-constrained).
    /// Default off.
    pub lenient: bool,
    /// `format` handling. Default [`FormatMode::Assert`].
    pub format: FormatMode,
    /// Resource limits (not part of the language).
    pub limits: CompileLimits,
    /// Write `"type": "integer"` values as plain integers only (`8`, never `8.0`). Both are
    /// valid JSON Schema integers (draft 6 on), so the default accepts both, as a validator
    /// must; generation turns this on because typed parsers (serde's `u64`) reject `8.0`.
    /// Default off.
    pub plain_integers: bool,
    /// Unroll recursive `$ref`s to at most this many nested levels (`None`: unbounded). The
    /// language shrinks (deeper values are refused) but never grows; generation uses it so a
    /// small model that keeps opening nested values is made to close them. Default `None`.
    pub max_recursion: Option<u32>,
    /// Order of object members: schema order (what generation wants: keys are forced and
    /// predictable) or any order (exact for checking JSON written by others). Default
    /// [`PropertyOrder::Schema`].
    pub property_order: PropertyOrder,
    /// Compile a `oneOf` whose branches may overlap in ways stencil cannot exclude exactly
    /// (recursive values) as `anyOf`, with a warning naming it: a value matching several
    /// branches is then accepted (a superset, so off by default; `lenient` implies it).
    pub oneof_as_anyof: bool,
    /// Enforce the RFC total lengths of `hostname` (253) and `email` (254) (default on: the
    /// counters are stepped lazily, so they cost little; off accepts longer addresses).
    pub format_total_lengths: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            whitespace: Whitespace::default(),
            lenient: false,
            format: FormatMode::Assert,
            limits: CompileLimits::default(),
            plain_integers: false,
            max_recursion: None,
            format_total_lengths: true,
            property_order: PropertyOrder::Schema,
            oneof_as_anyof: false,
        }
    }
}

impl Options {
    /// The options generation uses, the one place they are chosen: the defaults, with integers
    /// written plainly (see [`Options::plain_integers`]).
    pub fn generation() -> Self {
        Self {
            plain_integers: true,
            ..Self::default()
        }
    }
}

/// A compiled grammar plus the warnings produced in lenient mode.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub grammar: Grammar,
    pub warnings: Vec<Warning>,
}

/// Compiles any [`ConstraintSpec`] into a [`Grammar`].
pub fn compile(constraint: &ConstraintSpec, options: &Options) -> Result<Compiled, GrammarError> {
    let json = Json::new(&options.whitespace)?;
    match constraint {
        ConstraintSpec::JsonSchema(schema) => compile_schema(schema, options),
        ConstraintSpec::Regex(re) => Ok(Compiled {
            grammar: Grammar::single(regex_to_expr(re)?),
            warnings: vec![],
        }),
        ConstraintSpec::Choice(choices) => {
            if choices.is_empty() {
                return Err(GrammarError::EmptyChoice);
            }
            let alts = choices
                .iter()
                .map(|c| Expr::literal(c.as_bytes()))
                .collect();
            Ok(Compiled {
                grammar: Grammar::single(Expr::Alt(alts)),
                warnings: vec![],
            })
        }
        ConstraintSpec::AnyJson => Ok(Compiled {
            grammar: json.any_value_grammar(false),
            warnings: vec![],
        }),
        ConstraintSpec::AnyJsonObject => Ok(Compiled {
            grammar: json.any_value_grammar(true),
            warnings: vec![],
        }),
        ConstraintSpec::Gbnf(text) => Ok(Compiled {
            grammar: compile_gbnf(text)?,
            warnings: vec![],
        }),
        ConstraintSpec::Lark(text) => compile_lark(text, options),
        ConstraintSpec::StructuralTags(tags) => compile_structural_tags(tags, options),
    }
}
