//! `stencil chat`: a streaming chat client for a server speaking the OpenAI, Anthropic or
//! Ollama API (stencil's own, or any other). The stream care lives in the wire crates: bytes
//! split anywhere are framed into events or lines (UTF-8 kept whole across reads), events are
//! joined into one message (tool arguments by index), and a stream that ends early is an
//! error, never a shorter answer.

use std::io::{BufRead, Read, Write};

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use serde_json::{json, Value};
use stencil_anthropic::accumulate::MessageAccumulator;
use stencil_ollama::accumulate::ChatAccumulator as OllamaAccumulator;
use stencil_ollama::ndjson::NdjsonDecoder;
use stencil_openai::client::Client;
use stencil_openai::sse::SseDecoder;

/// The wire format `stencil chat` speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApiKind {
    /// OpenAI Chat Completions (`/v1/chat/completions`).
    Openai,
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
    /// Ollama (`/api/chat`).
    Ollama,
}

#[derive(Args, Debug)]
pub struct ChatArgs {
    /// Server address, e.g. http://127.0.0.1:8080
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// The API to speak.
    #[arg(long, value_enum, default_value_t = ApiKind::Openai)]
    pub api: ApiKind,
    #[arg(long, env = "STENCIL_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Model name to send (default: the first one the server lists).
    #[arg(long)]
    pub model: Option<String>,
    /// One message; without it, a conversation is read line by line from stdin.
    #[arg(long, short = 'p')]
    pub prompt: Option<String>,
    #[arg(long)]
    pub system: Option<String>,
    #[arg(long, default_value_t = 512)]
    pub max_tokens: usize,
    #[arg(long, default_value_t = 0.7)]
    pub temperature: f32,
    /// Constrain answers to this JSON Schema (file or inline JSON).
    #[arg(long)]
    pub json_schema: Option<String>,
}

/// What one turn produced.
struct Turn {
    text: String,
    /// The answer was cut by the token limit.
    cut: bool,
}

pub fn chat_cmd(args: ChatArgs) -> anyhow::Result<()> {
    let schema = match &args.json_schema {
        Some(s) => Some(crate::generate::read_schema(s)?),
        None => None,
    };
    let base = args
        .url
        .trim_end_matches('/')
        .trim_end_matches("/v1")
        .to_string();
    let model = match (&args.model, args.api) {
        (Some(m), _) => Some(m.clone()),
        (None, ApiKind::Openai) => None,
        (None, api) => Some(first_model(&base, api, args.api_key.as_deref())?),
    };
    let mut messages: Vec<Value> = Vec::new();
    if let (Some(s), ApiKind::Openai | ApiKind::Ollama) = (&args.system, args.api) {
        messages.push(json!({"role": "system", "content": s}));
    }
    let turn = |messages: &mut Vec<Value>, text: &str| -> anyhow::Result<()> {
        messages.push(json!({"role": "user", "content": text}));
        let mut out = std::io::stdout().lock();
        let mut print = |t: &str| {
            let _ = out.write_all(t.as_bytes());
            let _ = out.flush();
        };
        let t = match args.api {
            ApiKind::Openai => openai_turn(
                &args,
                &base,
                model.as_deref(),
                schema.as_ref(),
                messages,
                &mut print,
            )?,
            ApiKind::Anthropic => anthropic_turn(
                &args,
                &base,
                model.as_deref().unwrap_or_default(),
                schema.as_ref(),
                messages,
                &mut print,
            )?,
            ApiKind::Ollama => ollama_turn(
                &args,
                &base,
                model.as_deref().unwrap_or_default(),
                schema.as_ref(),
                messages,
                &mut print,
            )?,
        };
        println!();
        if t.cut {
            eprintln!("(cut by max_tokens)");
        }
        messages.push(json!({"role": "assistant", "content": t.text}));
        Ok(())
    };
    match &args.prompt {
        Some(p) => turn(&mut messages, p),
        None => {
            eprint!("> ");
            for line in std::io::stdin().lock().lines() {
                let line = line?;
                if !line.trim().is_empty() {
                    turn(&mut messages, &line)?;
                }
                eprint!("> ");
            }
            Ok(())
        }
    }
}

fn openai_turn(
    args: &ChatArgs,
    base: &str,
    model: Option<&str>,
    schema: Option<&Value>,
    messages: &[Value],
    print: &mut dyn FnMut(&str),
) -> anyhow::Result<Turn> {
    let client = Client::new(base, args.api_key.clone());
    let mut body = json!({"messages": messages, "max_tokens": args.max_tokens, "temperature": args.temperature});
    if let Some(m) = model {
        body["model"] = m.into();
    }
    if let Some(s) = schema {
        body["response_format"] =
            json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": s}});
    }
    let acc = client.chat_stream(&body, |t| print(t))?;
    acc.check_complete()?;
    Ok(Turn {
        text: acc.content().to_string(),
        cut: acc.finish_reason.as_deref() == Some("length"),
    })
}

fn anthropic_turn(
    args: &ChatArgs,
    base: &str,
    model: &str,
    schema: Option<&Value>,
    messages: &[Value],
    print: &mut dyn FnMut(&str),
) -> anyhow::Result<Turn> {
    let mut body = json!({"model": model, "messages": messages, "max_tokens": args.max_tokens,
        "temperature": args.temperature, "stream": true});
    if let Some(s) = &args.system {
        body["system"] = s.as_str().into();
    }
    if let Some(s) = schema {
        body["output_config"] = json!({"format": {"type": "json_schema", "schema": s}});
    }
    let reader = post(
        base,
        "/v1/messages",
        ApiKind::Anthropic,
        args.api_key.as_deref(),
        &body,
    )?;
    let (mut sse, mut acc) = (SseDecoder::new(), MessageAccumulator::new());
    read_all(reader, |bytes| {
        for event in sse.push(bytes) {
            let data: Value = serde_json::from_str(&event.data)
                .with_context(|| format!("a stream event that is not JSON: {}", event.data))?;
            print(&acc.push(&data)?);
        }
        Ok(())
    })?;
    sse.finish();
    let m = acc.message()?;
    Ok(Turn {
        text: m.text(),
        cut: m.stop_reason.as_deref() == Some("max_tokens"),
    })
}

fn ollama_turn(
    args: &ChatArgs,
    base: &str,
    model: &str,
    schema: Option<&Value>,
    messages: &[Value],
    print: &mut dyn FnMut(&str),
) -> anyhow::Result<Turn> {
    let mut body = json!({"model": model, "messages": messages, "stream": true,
        "options": {"num_predict": args.max_tokens, "temperature": args.temperature}});
    if let Some(s) = schema {
        body["format"] = s.clone();
    }
    let reader = post(
        base,
        "/api/chat",
        ApiKind::Ollama,
        args.api_key.as_deref(),
        &body,
    )?;
    let (mut lines, mut acc) = (NdjsonDecoder::new(), OllamaAccumulator::new());
    read_all(reader, |bytes| {
        for line in lines.push(bytes) {
            print(&acc.push(&line?)?);
        }
        Ok(())
    })?;
    lines.finish()?;
    let a = acc.result()?;
    Ok(Turn {
        cut: a.done_reason == "length",
        text: a.content,
    })
}

/// Feeds a response body to `feed` as it arrives.
fn read_all(
    mut reader: impl Read,
    mut feed: impl FnMut(&[u8]) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut buf = [0u8; 4096];
    loop {
        let n = reader.read(&mut buf).context("reading the response")?;
        if n == 0 {
            return Ok(());
        }
        feed(&buf[..n])?;
    }
}

fn request(req: ureq::Request, api: ApiKind, key: Option<&str>) -> ureq::Request {
    let req = req.set("Content-Type", "application/json");
    match (api, key) {
        (ApiKind::Anthropic, Some(k)) => req
            .set("x-api-key", k)
            .set("anthropic-version", "2023-06-01"),
        (ApiKind::Anthropic, None) => req.set("anthropic-version", "2023-06-01"),
        (_, Some(k)) => req.set("Authorization", &format!("Bearer {k}")),
        (_, None) => req,
    }
}

/// An HTTP error with the message the server's error body gives, in any of the three shapes.
fn http_error(e: ureq::Error, path: &str) -> anyhow::Error {
    match e {
        ureq::Error::Status(status, r) => {
            let body = r.into_string().unwrap_or_default();
            let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            let message = v["error"]["message"]
                .as_str()
                .or(v["error"].as_str())
                .unwrap_or(&body);
            anyhow::anyhow!("HTTP {status} from {path}: {message}")
        }
        other => anyhow::anyhow!("cannot reach the server: {other}"),
    }
}

fn post(
    base: &str,
    path: &str,
    api: ApiKind,
    key: Option<&str>,
    body: &Value,
) -> anyhow::Result<Box<dyn Read + Send + Sync>> {
    let req = request(ureq::post(&format!("{base}{path}")), api, key);
    let r = req
        .send_string(&body.to_string())
        .map_err(|e| http_error(e, path))?;
    Ok(r.into_reader())
}

/// The first model the server lists (`/v1/models`, or `/api/tags` for Ollama).
fn first_model(base: &str, api: ApiKind, key: Option<&str>) -> anyhow::Result<String> {
    let path = if api == ApiKind::Ollama {
        "/api/tags"
    } else {
        "/v1/models"
    };
    let r = request(ureq::get(&format!("{base}{path}")), api, key)
        .call()
        .map_err(|e| http_error(e, path))?;
    let v: Value = r.into_json().context("reading the model list")?;
    let name = match api {
        ApiKind::Ollama => v["models"][0]["name"].as_str(),
        _ => v["data"][0]["id"].as_str(),
    };
    match name {
        Some(n) => Ok(n.to_string()),
        None => bail!("the server lists no models at {path}; pass --model"),
    }
}
