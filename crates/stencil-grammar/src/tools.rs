//! Tool calls in the Hermes/Qwen `<tool_call>` convention, as a grammar.
//!
//! A call is exactly
//! `<tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>`, where `NAME` is one of the
//! tools (as a JSON string) and `ARGS` is an object valid under that tool's parameter schema.
//! Several calls (parallel calls) are separated by one newline. [`ToolChoice`] says where calls
//! may appear: `Required`/`Named` make the whole output calls; `Auto` allows free text (or the
//! content constraint) *or* text followed by calls, the tag opening the constrained region;
//! `None` forbids the tag. Each call is a structural tag (`crate::StructuralTags`) opened by
//! `<tool_call>`: free text cannot contain the tag, so writing it starts a call.

use serde_json::Value;

use crate::expr::{Expr, Grammar};
use crate::schema::compile_schema;
use crate::structural::tag_expr;
use crate::{Compiled, GrammarError, Options};

/// Opens a call.
pub const CALL_OPEN: &str = "<tool_call>\n";
/// Closes a call.
pub const CALL_CLOSE: &str = "\n</tool_call>";
/// What comes between the name and the arguments.
pub const NAME_PREFIX: &str = "{\"name\": ";
pub const ARGUMENTS_PREFIX: &str = ", \"arguments\": ";

/// One tool: its name and JSON Schema for `arguments` (`None`: any object).
#[derive(Debug, Clone, Copy)]
pub struct ToolSchema<'a> {
    pub name: &'a str,
    pub parameters: Option<&'a Value>,
}

/// Where tool calls may appear (OpenAI's `tool_choice`); the one definition, re-exported by
/// `stencil-types` for requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// Text only; the call tag never appears.
    None,
    /// Text, or text followed by calls.
    Auto,
    /// One or more calls, nothing else.
    Required,
    /// Calls of this tool only (`{"type": "function", "function": {"name": ...}}`).
    Named(String),
}

/// The most characters a tool name may have.
pub const MAX_TOOL_NAME_LEN: usize = 64;

/// The rule for tool names, the one place it is written: 1-64 characters of a-z, A-Z, 0-9,
/// `_`, `-` and `.`, each name used once. The error names the offending tool (`tools[i]`).
pub fn check_tool_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for (i, n) in names.into_iter().enumerate() {
        if n.is_empty()
            || n.len() > MAX_TOOL_NAME_LEN
            || !n
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
        {
            return Err(format!("tools[{i}].function.name `{n}` must be 1-{MAX_TOOL_NAME_LEN} characters of a-z, A-Z, 0-9, _, -, ."));
        }
        if !seen.insert(n) {
            return Err(format!(
                "tools[{i}].function.name `{n}` is used by an earlier tool too"
            ));
        }
    }
    Ok(())
}

/// Compiles the output grammar for `tools` under `mode`, with at most `max_calls` calls in
/// one response (1: no parallel calls; at least 1). A named tool choice asks for exactly one
/// call of that tool, whatever `max_calls` says. `content` constrains the text part (a JSON
/// Schema response format, say); without it the text is free (minus the call tag).
pub fn tool_grammar(
    tools: &[ToolSchema],
    mode: &ToolChoice,
    max_calls: u32,
    content: Option<Grammar>,
    options: &Options,
) -> Result<Compiled, GrammarError> {
    check_tool_names(tools.iter().map(|t| t.name)).map_err(GrammarError::Tool)?;
    let callable: Vec<&ToolSchema> = match mode {
        ToolChoice::None => vec![],
        ToolChoice::Auto | ToolChoice::Required => tools.iter().collect(),
        ToolChoice::Named(name) => {
            let t = tools.iter().find(|t| t.name == name).ok_or_else(|| {
                GrammarError::Tool(format!(
                    "tool_choice names `{name}`, which is not among the tools ({})",
                    tools.iter().map(|t| t.name).collect::<Vec<_>>().join(", ")
                ))
            })?;
            vec![t]
        }
    };
    if callable.is_empty() && matches!(mode, ToolChoice::Auto | ToolChoice::Required) {
        return Err(GrammarError::Tool(format!(
            "tool_choice `{}` needs at least one tool",
            if *mode == ToolChoice::Auto {
                "auto"
            } else {
                "required"
            }
        )));
    }
    let mut grammar = Grammar::single(Expr::Nothing);
    let mut warnings = Vec::new();
    let mut alternatives = Vec::new();
    for t in &callable {
        let schema = object_schema(t)?;
        let compiled = compile_schema(&schema, options)
            .map_err(|e| GrammarError::Tool(format!("the parameters of tool `{}`: {e}", t.name)))?;
        warnings.extend(compiled.warnings);
        // A call is a structural tag: the tag, the name and the key open it, the arguments
        // are its content.
        let name = serde_json::to_string(t.name).expect("strings serialize");
        let begin = format!("{CALL_OPEN}{NAME_PREFIX}{name}{ARGUMENTS_PREFIX}");
        let end = format!("}}{CALL_CLOSE}");
        alternatives.push(tag_expr(&mut grammar, &begin, compiled.grammar, &end));
    }
    let call = Expr::shared(Expr::alt(alternatives));
    let max_calls = match mode {
        ToolChoice::Named(_) => 1,
        _ => max_calls.max(1),
    };
    let calls = Expr::concat([
        call.clone(),
        Expr::repeat(
            Expr::concat([Expr::literal("\n"), call]),
            0,
            Some(max_calls - 1),
        ),
    ]);
    let text = match content {
        Some(g) => Expr::Call(grammar.embed(g)),
        None => free_text(),
    };
    grammar.rules[0].expr = match mode {
        ToolChoice::None => text,
        ToolChoice::Required | ToolChoice::Named(_) => calls,
        ToolChoice::Auto => {
            if matches!(text, Expr::Call(_)) {
                Expr::alt([text, calls])
            } else {
                Expr::concat([text, Expr::opt(calls)])
            }
        }
    };
    Ok(Compiled { grammar, warnings })
}

/// Any text (valid UTF-8) that does not contain the call tag.
pub fn free_text() -> Expr {
    Expr::text_without_any(&[CALL_OPEN.trim_end()])
}

/// The tool's parameter schema, made to describe an object (arguments are always one).
fn object_schema(t: &ToolSchema) -> Result<Value, GrammarError> {
    let Some(p) = t.parameters else {
        return Ok(serde_json::json!({"type": "object"}));
    };
    let mut schema = p.clone();
    match &mut schema {
        Value::Bool(true) => Ok(serde_json::json!({"type": "object"})),
        Value::Object(map) => {
            match map.get("type") {
                None => {
                    map.insert("type".into(), "object".into());
                }
                Some(Value::String(s)) if s == "object" => {}
                Some(Value::Array(a)) if a.iter().any(|v| v == "object") => {
                    map.insert("type".into(), "object".into());
                }
                Some(other) => {
                    return Err(GrammarError::Tool(format!(
                    "the parameters of tool `{}` have type {other}; arguments are always an object",
                    t.name
                )))
                }
            }
            Ok(schema)
        }
        _ => Err(GrammarError::Tool(format!(
            "the parameters of tool `{}` must be a JSON Schema object",
            t.name
        ))),
    }
}
