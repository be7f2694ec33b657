//! `stencil generate`.

use std::io::Write;

use clap::Args;
use stencil_runtime::chat::{build_prompt, ChatMessage, TruncationPolicy};
use stencil_runtime::generate::{generate, GenerateParams};
use stencil_runtime::sampler::SamplingParams;

use crate::ModelArgs;

#[derive(Args, Debug)]
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
    let loaded = args.model.load()?;
    let params = GenerateParams {
        max_tokens: args.max_tokens,
        sampling,
        stop: args.stop.clone(),
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
    let _ = writeln!(stdout);
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
