//! `stencil serve`: the OpenAI-compatible server, and `stencil chat`: a streaming client.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use serde_json::{json, Value};
use stencil_openai::client::Client;
use stencil_runtime::engine::ChatEngine;
use stencil_server::{serve, shutdown_signal, ServerConfig};

use crate::ModelArgs;

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Address to bind (loopback by default; use 0.0.0.0 to serve the network).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port (0 picks a free one; the address is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on /v1 requests.
    #[arg(long, env = "STENCIL_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// A host name clients may use in the `Host` header besides IP addresses and localhost
    /// (repeatable; `*` accepts any, giving up DNS-rebinding protection).
    #[arg(long)]
    pub allowed_host: Vec<String>,
    /// A web origin (`http://localhost:3000`) whose pages may call the server, with CORS
    /// (repeatable; `*` lets every web page drive it). None by default.
    #[arg(long)]
    pub cors_origin: Vec<String>,
    /// Requests that may wait for the model before new ones get 503.
    #[arg(long, default_value_t = 16)]
    pub queue: usize,
    /// Largest request body in bytes (413 beyond).
    #[arg(long, default_value_t = 4 << 20)]
    pub max_body_bytes: usize,
    /// Seconds one generation may take.
    #[arg(long, default_value_t = 600)]
    pub request_timeout: u64,
    /// Another name clients may use for the model (repeatable).
    #[arg(long)]
    pub served_model_name: Vec<String>,
}

pub fn serve_cmd(args: ServeArgs) -> anyhow::Result<()> {
    let engine: Arc<dyn stencil_server::Engine> = Arc::new(ChatEngine::new(args.model.load()?));
    let config = ServerConfig {
        api_key: args.api_key,
        queue: args.queue,
        max_body_bytes: args.max_body_bytes,
        request_timeout: Duration::from_secs(args.request_timeout),
        model_aliases: args.served_model_name,
        allowed_hosts: args.allowed_host,
        cors_origins: args.cors_origin,
        ..ServerConfig::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
            .await
            .with_context(|| format!("binding {}:{}", args.host, args.port))?;
        let addr = listener.local_addr()?;
        eprintln!(
            "stencil serve: model `{}` listening on http://{addr}",
            engine.model_id()
        );
        serve(listener, engine, config, shutdown_signal()).await?;
        eprintln!("stencil serve: stopped");
        anyhow::Ok(())
    })
}

#[derive(Args, Debug)]
pub struct ChatArgs {
    /// Server address, e.g. http://127.0.0.1:8080
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
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

pub fn chat_cmd(args: ChatArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.url, args.api_key.clone());
    let mut messages: Vec<Value> = Vec::new();
    if let Some(s) = &args.system {
        messages.push(json!({"role": "system", "content": s}));
    }
    let schema = match &args.json_schema {
        Some(s) => Some(crate::generate::read_schema(s)?),
        None => None,
    };
    let turn = |messages: &mut Vec<Value>, text: &str| -> anyhow::Result<()> {
        messages.push(json!({"role": "user", "content": text}));
        let mut body = json!({
            "messages": messages,
            "max_tokens": args.max_tokens,
            "temperature": args.temperature,
        });
        if let Some(m) = &args.model {
            body["model"] = m.clone().into();
        }
        if let Some(s) = &schema {
            body["response_format"] =
                json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": s}});
        }
        let mut out = std::io::stdout().lock();
        let acc = client.chat_stream(&body, |t| {
            let _ = out.write_all(t.as_bytes());
            let _ = out.flush();
        })?;
        writeln!(out)?;
        acc.check_complete()?;
        if acc.finish_reason.as_deref() == Some("length") {
            eprintln!("(cut by max_tokens)");
        }
        messages.push(json!({"role": "assistant", "content": acc.content()}));
        Ok(())
    };
    match &args.prompt {
        Some(p) => turn(&mut messages, p),
        None => {
            let stdin = std::io::stdin();
            eprint!("> ");
            for line in stdin.lock().lines() {
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

#[derive(Args, Debug)]
pub struct LoadArgs {
    /// A running server, e.g. http://127.0.0.1:8080
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    #[arg(long, env = "STENCIL_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Concurrent streaming clients.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Requests in all.
    #[arg(long, default_value_t = 200)]
    pub requests: usize,
    #[arg(long, default_value_t = 16)]
    pub max_tokens: usize,
}

/// `stencil bench load`: concurrent streaming clients against a server; every stream must end
/// with `[DONE]` and a finish reason. Prints requests/s and latency percentiles.
pub fn load_cmd(args: LoadArgs) -> anyhow::Result<()> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    use std::time::Instant;

    let next = Arc::new(AtomicUsize::new(0));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let start = Instant::now();
    let threads: Vec<_> = (0..args.clients.max(1))
        .map(|_| {
            let (next, latencies, failures) = (next.clone(), latencies.clone(), failures.clone());
            let client = Client::new(&args.url, args.api_key.clone());
            let (total, max_tokens) = (args.requests, args.max_tokens);
            std::thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let body = json!({"messages": [{"role": "user", "content": format!("Request {i}: say something.")}], "max_tokens": max_tokens, "temperature": 0.7, "seed": i});
                let t = Instant::now();
                let result = client.chat_stream(&body, |_| {}).map_err(|e| e.to_string()).and_then(|acc| {
                    acc.check_complete().map_err(|e| e.to_string())?;
                    acc.finish_reason.clone().ok_or("no finish_reason".to_string())?;
                    Ok(())
                });
                match result {
                    Ok(()) => latencies.lock().unwrap().push(t.elapsed().as_secs_f64()),
                    Err(e) => failures.lock().unwrap().push(format!("request {i}: {e}")),
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    let wall = start.elapsed().as_secs_f64();
    let mut lat = latencies.lock().unwrap().clone();
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or(0.0)
    };
    let failures = failures.lock().unwrap();
    println!(
        "{}",
        json!({
            "clients": args.clients,
            "requests": args.requests,
            "complete": lat.len(),
            "failed": failures.len(),
            "requests_per_s": (lat.len() as f64 / wall * 100.0).round() / 100.0,
            "latency_s": {"p50": (pct(0.5) * 1000.0).round() / 1000.0, "p99": (pct(0.99) * 1000.0).round() / 1000.0, "max": (lat.last().copied().unwrap_or(0.0) * 1000.0).round() / 1000.0},
            "wall_s": (wall * 10.0).round() / 10.0,
        })
    );
    if !failures.is_empty() {
        anyhow::bail!("{} streams failed; first: {}", failures.len(), failures[0]);
    }
    Ok(())
}
