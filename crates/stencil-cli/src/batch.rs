//! `stencil batch`: many chat requests from a JSONL file, one result line each, in order.
//! Up to `--max-batch` lines generate at once, sharing each forward pass (continuous
//! batching); results are still written in input order.
//!
//! Each input line is an OpenAI chat request body, or an OpenAI Batch API line
//! (`{"custom_id", "method", "url", "body"}`). Each output line is
//! `{"line", "custom_id"?, "response"}` with a `chat.completion` body, or
//! `{"line", "custom_id"?, "error"}` with the OpenAI error object: a bad line never stops the
//! batch. Compiled constraints are cached across lines by the engine.
//!
//! Every result is written and flushed as soon as it and the lines before it are finished, so
//! an interrupted batch keeps its finished prefix (at most `--max-batch` finished lines are
//! redone); `--resume` skips the input lines whose results are already in the
//! output (a partly written last line is dropped and redone).

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, Seek, SeekFrom, Write};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use stencil_openai::request::chat_request;
use stencil_openai::response::{now, ChatCompletion};
use stencil_openai::ApiError;
use stencil_runtime::batch::BatchConfig;
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
    /// Keep the results already in --output and run only the input lines missing there
    /// (after an interruption). Without it, --output is overwritten.
    #[arg(long)]
    pub resume: bool,
    /// Lines generating at once, sharing each forward pass.
    #[arg(long, default_value_t = 16)]
    pub max_batch: usize,
}

pub fn run(args: BatchArgs) -> anyhow::Result<()> {
    let input = std::fs::File::open(&args.input)
        .with_context(|| format!("opening --input {}", args.input.display()))?;
    let lines: Vec<String> = std::io::BufReader::new(input)
        .lines()
        .collect::<Result<_, _>>()
        .with_context(|| format!("reading {}", args.input.display()))?;
    let (done, mut out) = if args.resume {
        resume_output(&args.output, &lines)?
    } else {
        let out = std::fs::File::create(&args.output)
            .with_context(|| format!("creating --output {}", args.output.display()))?;
        (HashSet::new(), out)
    };
    let loaded = args.model.load()?;
    let config = BatchConfig::new(loaded.model.as_ref(), args.max_batch.max(1), 4 << 30);
    let engine = ChatEngine::new(loaded).with_batching(config)?;
    let model_name = model_name(&engine);
    let bar = ProgressBar::new(lines.len() as u64).with_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} requests {msg} [{elapsed} < {eta}]")
            .expect("valid template")
            .progress_chars("=> "),
    );
    // Line numbers to run, in order; the rest are counted as done at once.
    let todo: Vec<usize> = (1..=lines.len())
        .filter(|&n| !lines[n - 1].trim().is_empty() && !done.contains(&n))
        .collect();
    bar.inc((lines.len() - todo.len()) as u64);
    let (mut ok, mut failed) = (0usize, 0usize);
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<(usize, Value, bool)>();
    std::thread::scope(|s| -> anyhow::Result<()> {
        for _ in 0..args.max_batch.max(1).min(todo.len()) {
            let (tx, next, todo, engine, model_name, lines) =
                (tx.clone(), &next, &todo, &engine, &model_name, &lines);
            s.spawn(move || loop {
                let at = next.fetch_add(1, Ordering::Relaxed);
                let Some(&number) = todo.get(at) else { break };
                let (custom_id, result) = run_line(engine, model_name, &lines[number - 1], number);
                let mut record = json!({"line": number});
                if let Some(id) = custom_id {
                    record["custom_id"] = id;
                }
                let success = result.is_ok();
                match result {
                    Ok(response) => record["response"] = json!(response),
                    Err(e) => {
                        record["error"] = json!(stencil_openai::error::ErrorBody::from(&e).error)
                    }
                }
                if tx.send((at, record, success)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        // Written in input order: a finished line waits for the lines before it.
        let mut finished = BTreeMap::new();
        let mut written = 0;
        for (at, record, success) in rx {
            finished.insert(at, record);
            if success {
                ok += 1;
            } else {
                failed += 1;
            }
            while let Some(record) = finished.remove(&written) {
                // One write per line, flushed: an interruption loses no written result.
                out.write_all(format!("{record}\n").as_bytes())
                    .and_then(|()| out.flush())
                    .with_context(|| format!("writing {}", args.output.display()))?;
                written += 1;
                bar.inc(1);
                bar.set_message(format!("({failed} failed)"));
            }
        }
        Ok(())
    })?;
    bar.finish_and_clear();
    let kept = if done.is_empty() {
        String::new()
    } else {
        format!(" ({} kept from before)", done.len())
    };
    eprintln!(
        "{ok} succeeded, {failed} failed{kept}; results in {}",
        args.output.display()
    );
    Ok(())
}

/// For `--resume`: the line numbers already answered in `path`, and the file opened for
/// appending after its last complete line. A result that does not belong to this input (its
/// line number or `custom_id` differs) is an error, never silently mixed in.
fn resume_output(
    path: &std::path::Path,
    lines: &[String],
) -> anyhow::Result<(HashSet<usize>, std::fs::File)> {
    let text = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context(|| format!("reading --output {}", path.display())),
    };
    // Only newline-terminated lines are finished results; a cut-off tail is redone.
    let complete = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut done = HashSet::new();
    for (i, raw) in text[..complete].split(|&b| b == b'\n').enumerate() {
        if raw.is_empty() {
            continue;
        }
        let at = || format!("--output {} line {}", path.display(), i + 1);
        let record: Value = serde_json::from_slice(raw)
            .with_context(|| format!("{} is not a result line; cannot resume", at()))?;
        let number = record["line"]
            .as_u64()
            .filter(|&n| n >= 1 && n as usize <= lines.len())
            .with_context(|| format!("{} has no `line` of this input; cannot resume", at()))?
            as usize;
        let input_id = serde_json::from_str::<Value>(&lines[number - 1])
            .ok()
            .and_then(|v| v.get("custom_id").cloned());
        if record.get("custom_id") != input_id.as_ref() {
            anyhow::bail!(
                "{} answers input line {number} with custom_id {}, but that input line has {}: the output belongs to another input",
                at(),
                record.get("custom_id").map_or("none".into(), Value::to_string),
                input_id.map_or("none".into(), |v| v.to_string())
            );
        }
        done.insert(number);
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("opening --output {}", path.display()))?;
    file.set_len(complete as u64)
        .and_then(|()| file.seek(SeekFrom::End(0)))
        .with_context(|| {
            format!(
                "dropping the cut-off last line of --output {}",
                path.display()
            )
        })?;
    Ok((done, file))
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
            .map_err(|e| stencil_server::api_error(&e, valid.error_fields()))?;
        let id = format!("chatcmpl-batch-{number}");
        Ok(ChatCompletion::from_outcome(&id, model, now(), &outcome))
    });
    (custom_id, result)
}
