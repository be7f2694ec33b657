//! `stencil generate`.

use std::io::Write;
use std::ops::ControlFlow;

use anyhow::Context;
use clap::{ArgGroup, Args};
use stencil_runtime::engine::ChatEngine;
use stencil_runtime::tools::ToolEvent;
use stencil_types::{
    ChatFinish, ChatMessage, ChatRequest, ConstraintSpec, GenerateParams, Reasoning,
    SamplingParams, Tool, ToolChoice, TruncationPolicy, Whitespace,
};

use crate::ModelArgs;

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("constraint").multiple(false)))]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The user message.
    #[arg(long, short = 'p')]
    pub prompt: String,
    /// A system message (the template's default system turn is used when absent).
    #[arg(long)]
    pub system: Option<String>,
    /// Send the prompt as raw text, without the chat template.
    #[arg(long)]
    pub raw: bool,
    /// With --raw: control tokens written in the prompt (`<|im_start|>`) are parsed as control
    /// tokens. Without it the prompt is tokenized as text.
    #[arg(long, requires = "raw")]
    pub special_tokens: bool,
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long)]
    pub top_k: Option<usize>,
    #[arg(long)]
    pub top_p: Option<f32>,
    #[arg(long)]
    pub min_p: Option<f32>,
    #[arg(long)]
    pub repetition_penalty: Option<f32>,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop before this string (repeatable); it is not printed.
    #[arg(long)]
    pub stop: Vec<String>,
    /// Constrain the output to this JSON Schema (a file, or the schema itself as JSON).
    #[arg(long, group = "constraint")]
    pub json_schema: Option<String>,
    /// Constrain the whole output to match this regex (Rust `regex` syntax).
    #[arg(long, group = "constraint")]
    pub regex: Option<String>,
    /// Constrain the output to one of these strings (repeatable).
    #[arg(long, group = "constraint")]
    pub choice: Vec<String>,
    /// Constrain the output to any JSON value.
    #[arg(long, group = "constraint")]
    pub json: bool,
    /// Constrain the output to a grammar file: llama.cpp GBNF (`.gbnf`, start rule `root`) or
    /// Lark (`.lark`, start rule `start`, `%json { schema }` embeds).
    #[arg(long, group = "constraint")]
    pub grammar: Option<std::path::PathBuf>,
    /// The grammar's format when its extension does not say (`gbnf` or `lark`).
    #[arg(long, requires = "grammar")]
    pub grammar_format: Option<String>,
    /// Let the model reason first: free text (opened by `<think>`) up to `</think>`, then the
    /// constraint. The reasoning is written to stderr, the output proper to stdout.
    #[arg(long)]
    pub reasoning: bool,
    /// Reasoning tokens at most; at this many `</think>` is written for the model.
    #[arg(long, requires = "reasoning")]
    pub reasoning_max_tokens: Option<usize>,
    /// Treat unsupported JSON Schema keywords as warnings (output may not satisfy them).
    #[arg(long)]
    pub lenient: bool,
    /// Refuse a JSON Schema `format` the compiler does not know (by default it is an
    /// annotation: it constrains nothing, and a warning names it).
    #[arg(long)]
    pub strict_formats: bool,
    /// Compile a `oneOf` whose branches may overlap in ways stencil cannot exclude as `anyOf`
    /// (a warning names it) instead of refusing the schema.
    #[arg(long)]
    pub oneof_as_anyof: bool,
    /// Whitespace between JSON tokens: `flexible` (up to 20 characters), `compact` (none), or
    /// a regex for it.
    #[arg(long, default_value = "flexible")]
    pub whitespace: String,
    /// Tools the model may call (a JSON file: an array of OpenAI tool definitions). The
    /// assistant message with its `tool_calls` is printed as JSON.
    #[arg(long)]
    pub tools: Option<String>,
    /// `auto` (default with --tools), `none`, `required`, or the name of one tool.
    #[arg(long)]
    pub tool_choice: Option<String>,
    /// At most one tool call.
    #[arg(long)]
    pub no_parallel_tool_calls: bool,
    /// Unroll recursive schemas to this many nested levels (0: unbounded).
    #[arg(long, default_value_t = stencil_types::DEFAULT_MAX_RECURSION)]
    pub max_recursion: u32,
    /// Sample every token, even those the constraint forces (for measuring fast-forward).
    #[arg(long)]
    pub no_fast_forward: bool,
    /// Under a constraint, forbid the token that would continue a back-to-back repetition.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pub loop_guard: String,
    /// The most tool calls in one response (with parallel calls).
    #[arg(long, default_value_t = stencil_types::DEFAULT_MAX_TOOL_CALLS)]
    pub max_tool_calls: u32,
    /// When the prompt is too long: `error`, or `drop-oldest-turns`.
    #[arg(long, default_value = "error", value_parser = ["error", "drop-oldest-turns"])]
    pub truncation: String,
}

pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    let sampling = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        repetition_penalty: args.repetition_penalty,
        seed: args.seed,
    };
    sampling.validate()?;
    let spec = constraint_spec(&args)?;
    let tools = match &args.tools {
        Some(path) => read_tools(path)?,
        None => Vec::new(),
    };
    if args.tool_choice.is_some() && tools.is_empty() {
        anyhow::bail!("--tool-choice needs --tools");
    }
    let whitespace = whitespace(&args.whitespace);
    if args.raw && !tools.is_empty() {
        anyhow::bail!("--tools needs the chat template; drop --raw");
    }
    let params = GenerateParams {
        max_tokens: args.max_tokens,
        sampling,
        stop: args.stop.clone(),
        fast_forward: !args.no_fast_forward,
        loop_guard: args.loop_guard == "on",
        reasoning: args.reasoning.then(|| Reasoning {
            max_tokens: args.reasoning_max_tokens,
            ..Reasoning::default()
        }),
    };
    let (messages, prompt) = if args.raw {
        (Vec::new(), Some(args.prompt.clone()))
    } else {
        let mut messages = Vec::new();
        if let Some(s) = &args.system {
            messages.push(ChatMessage::system(s));
        }
        messages.push(ChatMessage::user(&args.prompt));
        (messages, None)
    };
    let has_tools = !tools.is_empty();
    let request = ChatRequest {
        messages,
        prompt,
        special_tokens: args.special_tokens,
        reserve_max_tokens: false,
        tools,
        tool_choice: args.tool_choice.as_deref().map(tool_choice),
        parallel_tool_calls: !args.no_parallel_tool_calls,
        max_tool_calls: args.max_tool_calls,
        constraint: spec.clone(),
        whitespace,
        lenient: args.lenient,
        strict_formats: args.strict_formats,
        oneof_as_anyof: args.oneof_as_anyof,
        max_recursion: (args.max_recursion > 0).then_some(args.max_recursion),
        params,
        truncation: if args.truncation == "error" {
            TruncationPolicy::Error
        } else {
            TruncationPolicy::DropOldestTurns
        },
        timeout: None,
    };
    let loaded = args.model.load()?;
    let load_time = loaded.load_time;
    let mut stdout = std::io::stdout().lock();
    let engine = ChatEngine::new(loaded);
    let prepared = engine.prepare(&request)?;
    for w in &prepared.warnings {
        eprintln!("warning: {w}");
    }
    let outcome = engine.run(&prepared, |event| {
        match (has_tools, &event) {
            (false, ToolEvent::Content(text)) => {
                let _ = stdout.write_all(text.as_bytes());
                let _ = stdout.flush();
            }
            (_, ToolEvent::Reasoning(text)) => eprint!("{text}"),
            _ => {}
        }
        ControlFlow::Continue(())
    })?;
    if args.reasoning {
        eprintln!();
    }
    if has_tools {
        // The assistant message, as an OpenAI client would receive it.
        let calls = &outcome.tool_calls;
        let message = serde_json::json!({
            "role": "assistant",
            "content": outcome.content,
            "tool_calls": calls,
        });
        writeln!(stdout, "{}", serde_json::to_string_pretty(&message)?)?;
    } else if spec.is_none() {
        // A constrained output is printed exactly as generated.
        let _ = writeln!(stdout);
    }
    let usage = &outcome.usage;
    let decode_ms = outcome.timings.decode_ms_per_token(usage);
    eprintln!(
        "finish_reason={} closed_by_budget={} loop_guard_hits={} prompt_tokens={} completion_tokens={} forced_tokens={} load={:.2}s prompt={:.1} tok/s decode={:.2} ms/token ({:.1} tok/s)",
        outcome.finish_reason.as_str(),
        outcome.closed_by_budget,
        outcome.loop_guard_hits,
        usage.prompt_tokens,
        usage.completion_tokens,
        outcome.forced_tokens,
        load_time.as_secs_f64(),
        outcome.timings.prompt_tokens_per_s(usage),
        decode_ms,
        1e3 / decode_ms,
    );
    if outcome.finish_reason == ChatFinish::Length && (spec.is_some() || has_tools) {
        eprintln!("warning: max_tokens cut the output short; it is incomplete");
    }
    Ok(())
}

/// `--tool-choice`: `none`, `auto`, `required`, or a tool name.
fn tool_choice(s: &str) -> ToolChoice {
    match s {
        "none" => ToolChoice::None,
        "auto" => ToolChoice::Auto,
        "required" => ToolChoice::Required,
        name => ToolChoice::Named(name.to_string()),
    }
}

/// Reads a tools file: a JSON array of OpenAI tools (`{"type": "function", "function": ...}`)
/// or of bare function definitions (`{"name", "description", "parameters"}`).
fn read_tools(path: &str) -> anyhow::Result<Vec<Tool>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading --tools {path}"))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("--tools {path} is not valid JSON"))?;
    let items = match value {
        serde_json::Value::Array(a) => a,
        serde_json::Value::Object(mut o) if o.contains_key("tools") => match o.remove("tools") {
            Some(serde_json::Value::Array(a)) => a,
            _ => anyhow::bail!("--tools {path}: `tools` must be an array"),
        },
        _ => anyhow::bail!("--tools {path} must hold a JSON array of tools"),
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let item = if item.get("function").is_some() {
                item
            } else {
                serde_json::json!({"type": "function", "function": item})
            };
            serde_json::from_value(item)
                .with_context(|| format!("--tools {path}: tools[{i}] is not a tool definition"))
        })
        .collect()
}

fn whitespace(arg: &str) -> Whitespace {
    match arg {
        "flexible" => Whitespace::default(),
        "compact" => Whitespace::Compact,
        pattern => Whitespace::Pattern(pattern.to_string()),
    }
}

/// The constraint asked for on the command line, if any.
fn constraint_spec(args: &GenerateArgs) -> anyhow::Result<Option<ConstraintSpec>> {
    Ok(if let Some(s) = &args.json_schema {
        Some(ConstraintSpec::JsonSchema(read_schema(s)?))
    } else if let Some(re) = &args.regex {
        Some(ConstraintSpec::Regex(re.clone()))
    } else if !args.choice.is_empty() {
        Some(ConstraintSpec::Choice(args.choice.clone()))
    } else if args.json {
        Some(ConstraintSpec::AnyJson)
    } else if let Some(path) = &args.grammar {
        Some(read_grammar(path, args.grammar_format.as_deref())?)
    } else {
        None
    })
}

/// A `--grammar` file, its format from `format` or its extension.
fn read_grammar(path: &std::path::Path, format: Option<&str>) -> anyhow::Result<ConstraintSpec> {
    let ext = path.extension().and_then(|e| e.to_str());
    let format = format.or(ext).unwrap_or_default().to_ascii_lowercase();
    let make = match format.as_str() {
        "gbnf" => ConstraintSpec::Gbnf,
        "lark" => ConstraintSpec::Lark,
        _ => anyhow::bail!(
            "--grammar {}: unknown grammar format `{format}`; GBNF (`.gbnf`) and Lark (`.lark`) are supported (or say which with --grammar-format gbnf|lark)",
            path.display()
        ),
    };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("--grammar {}", path.display()))?;
    Ok(make(text))
}

/// A `--json-schema` argument: a file, or the schema itself as JSON.
pub fn read_schema(s: &str) -> anyhow::Result<serde_json::Value> {
    let path = std::path::Path::new(s);
    if path.is_file() {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        return serde_json::from_str(&text)
            .with_context(|| format!("--json-schema file {} is not valid JSON", path.display()));
    }
    let looks_like_json =
        s.trim_start().starts_with(['{', '[', '"']) || s.trim() == "true" || s.trim() == "false";
    if !looks_like_json {
        anyhow::bail!("--json-schema {s:?}: no such file (and not a JSON schema given inline)");
    }
    serde_json::from_str(s).with_context(|| format!("--json-schema {s:?} is not valid JSON"))
}
