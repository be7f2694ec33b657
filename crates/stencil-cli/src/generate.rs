//! `stencil generate`.

use std::io::Write;
use std::sync::Arc;

use anyhow::Context;
use clap::{ArgGroup, Args};
use stencil_grammar::{compile, Constraint as Spec, Options, Whitespace};
use stencil_mask::{Constraint, Limits, TokenTrie};
use stencil_runtime::chat::{build_prompt, ChatMessage, TruncationPolicy};
use stencil_runtime::generate::{generate, GenerateParams};
use stencil_runtime::sampler::SamplingParams;

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
    /// Treat unsupported JSON Schema keywords as warnings (output may not satisfy them).
    #[arg(long)]
    pub lenient: bool,
    /// Whitespace between JSON tokens: `flexible` (up to 20 characters), `compact` (none), or
    /// a regex for it.
    #[arg(long, default_value = "flexible")]
    pub whitespace: String,
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
    let loaded = args.model.load()?;
    let constraint = match &spec {
        Some(spec) => Some(build_constraint(spec, &loaded.tokenizer, &args)?),
        None => None,
    };
    let params = GenerateParams {
        max_tokens: args.max_tokens,
        sampling,
        stop: args.stop.clone(),
        constraint,
    };
    let prompt = if args.raw {
        loaded.tokenizer.encode(&args.prompt, true)?
    } else {
        let mut messages = Vec::new();
        if let Some(s) = &args.system {
            messages.push(ChatMessage::new("system", s));
        }
        messages.push(ChatMessage::new("user", &args.prompt));
        let policy = if args.truncation == "error" {
            TruncationPolicy::Error
        } else {
            TruncationPolicy::DropOldestTurns
        };
        build_prompt(
            &loaded.template,
            &loaded.tokenizer,
            &messages,
            None,
            loaded.model.context_length(),
            1,
            policy,
        )?
        .tokens
    };
    let mut stdout = std::io::stdout().lock();
    let result = generate(
        loaded.model.as_ref(),
        &loaded.tokenizer,
        &prompt,
        &params,
        |text| {
            let _ = stdout.write_all(text.as_bytes());
            let _ = stdout.flush();
        },
    )?;
    // A constrained output is printed exactly as generated.
    if spec.is_none() {
        let _ = writeln!(stdout);
    }
    let decode_ms = result.timings.decode_ms_per_token(&result.usage);
    eprintln!(
        "finish_reason={} prompt_tokens={} completion_tokens={} load={:.2}s prompt={:.1} tok/s decode={:.2} ms/token ({:.1} tok/s)",
        serde_json::to_value(result.finish_reason)?.as_str().unwrap_or("?"),
        result.usage.prompt_tokens,
        result.usage.completion_tokens,
        loaded.load_time.as_secs_f64(),
        result.timings.prompt_tokens_per_s(&result.usage),
        decode_ms,
        1e3 / decode_ms,
    );
    Ok(())
}

/// The constraint asked for on the command line, if any.
fn constraint_spec(args: &GenerateArgs) -> anyhow::Result<Option<Spec>> {
    Ok(if let Some(s) = &args.json_schema {
        let path = std::path::Path::new(s);
        let text = if path.is_file() {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
        } else {
            s.clone()
        };
        let schema = serde_json::from_str(&text).with_context(|| {
            format!("--json-schema {s:?} is neither a readable file nor valid JSON")
        })?;
        Some(Spec::JsonSchema(schema))
    } else if let Some(re) = &args.regex {
        Some(Spec::Regex(re.clone()))
    } else if !args.choice.is_empty() {
        Some(Spec::Choice(args.choice.clone()))
    } else if args.json {
        Some(Spec::AnyJson)
    } else {
        None
    })
}

/// Compiles a constraint for the model's vocabulary.
fn build_constraint(
    spec: &Spec,
    tokenizer: &stencil_runtime::tokenizer::Tokenizer,
    args: &GenerateArgs,
) -> anyhow::Result<Arc<Constraint>> {
    let whitespace = match args.whitespace.as_str() {
        "flexible" => Whitespace::default(),
        "compact" => Whitespace::Compact,
        pattern => Whitespace::Pattern(pattern.to_string()),
    };
    let options = Options {
        lenient: args.lenient,
        whitespace,
        ..Options::default()
    };
    let compiled = compile(spec, &options)?;
    for w in &compiled.warnings {
        eprintln!("warning: {w}");
    }
    let trie = Arc::new(TokenTrie::new(tokenizer.vocab()));
    Ok(Constraint::new(&compiled.grammar, trie, Limits::default())?)
}
