//! `stencil batch`: many chat requests from a JSONL file, one result line each, in order.
//!
//! Each input line is an OpenAI chat request body, or an OpenAI Batch API line
//! (`{"custom_id", "method", "url", "body"}`). Each output line is
//! `{"line", "custom_id"?, "response"}` with a `chat.completion` body, or
//! `{"line", "custom_id"?, "error"}` with the OpenAI error object: a bad line never stops the
//! batch. Compiled constraints are cached across lines by the engine.

use std::io::{BufRead, BufWriter, Write};
use std::ops::ControlFlow;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use stencil_openai::request::chat_request;
use stencil_openai::response::{now, ChatCompletion};
use stencil_openai::ApiError;
use stencil_runtime::engine::ChatEngine;

use crate::ModelArgs;

#[derive(Args, Debug)]
pub struct BatchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// JSONL file of chat completion request bodies (or Batch API lines with `body`).
    #[arg(long)]
    pub input: std::path::PathBuf,
    /// Where to write one JSON result per input line, in input order.
    #[arg(long)]
    pub output: std::path::PathBuf,
}

pub fn run(args: BatchArgs) -> anyhow::Result<()> {
    let input = std::fs::File::open(&args.input)
        .with_context(|| format!("opening --input {}", args.input.display()))?;
    let lines: Vec<String> = std::io::BufReader::new(input)
        .lines()
        .collect::<Result<_, _>>()
        .with_context(|| format!("reading {}", args.input.display()))?;
    let out = std::fs::File::create(&args.output)
        .with_context(|| format!("creating --output {}", args.output.display()))?;
    let mut out = BufWriter::new(out);
    let engine = ChatEngine::new(args.model.load()?);
    let model_name = model_name(&engine);
    let bar = ProgressBar::new(lines.len() as u64).with_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} requests {msg} [{elapsed} < {eta}]")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let (mut ok, mut failed) = (0usize, 0usize);
    for (i, line) in lines.iter().enumerate() {
        let number = i + 1;
        if line.trim().is_empty() {
            bar.inc(1);
            continue;
        }
        let (custom_id, result) = run_line(&engine, &model_name, line, number);
        let mut record = json!({"line": number});
        if let Some(id) = custom_id {
            record["custom_id"] = id;
        }
        match result {
            Ok(response) => {
                ok += 1;
                record["response"] = serde_json::to_value(response)?;
            }
            Err(e) => {
                failed += 1;
                record["error"] = serde_json::to_value(e.body().error)?;
            }
        }
        writeln!(out, "{record}")?;
        bar.inc(1);
        bar.set_message(format!("({failed} failed)"));
    }
    out.flush()?;
    bar.finish_and_clear();
    eprintln!(
        "{ok} succeeded, {failed} failed; results in {}",
        args.output.display()
    );
    Ok(())
}

/// The served model's name: the file stem of its weights.
pub fn model_name(engine: &ChatEngine) -> String {
    match &engine.loaded.files {
        stencil_runtime::hub::ModelFiles::Gguf(p)
        | stencil_runtime::hub::ModelFiles::Safetensors(p) => p
            .file_stem()
            .map_or("stencil".into(), |s| s.to_string_lossy().into_owned()),
    }
}

fn run_line(
    engine: &ChatEngine,
    model: &str,
    line: &str,
    number: usize,
) -> (Option<Value>, Result<ChatCompletion, ApiError>) {
    let value: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => {
            return (
                None,
                Err(ApiError::invalid(
                    "body",
                    format!("line {number} is not JSON: {e}"),
                )),
            )
        }
    };
    let custom_id = value.get("custom_id").cloned();
    let body = value.get("body").unwrap_or(&value);
    let result = chat_request(body).and_then(|valid| {
        let outcome = engine
            .chat(&valid.request, |_| ControlFlow::Continue(()))
            .map_err(|e| ApiError::from_runtime(&e, valid.constraint_param))?;
        let id = format!("chatcmpl-batch-{number}");
        Ok(ChatCompletion::from_outcome(&id, model, now(), &outcome))
    });
    (custom_id, result)
}
