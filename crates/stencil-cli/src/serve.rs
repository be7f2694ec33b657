//! `stencil serve`: the OpenAI-compatible server, and `stencil chat`: a streaming client.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use serde_json::{json, Value};
use stencil_openai::client::Client;
use stencil_runtime::batch::BatchConfig;
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
    /// Requests that may wait for a generation slot before new ones get 429.
    #[arg(long, visible_alias = "max-queue", default_value_t = 32)]
    pub queue: usize,
    /// Requests generating at once, sharing each forward pass (continuous batching). On a CPU
    /// throughput grows up to ~16; each stream's tokens/s falls as the batch grows.
    #[arg(long, default_value_t = 16)]
    pub max_batch: usize,
    /// Memory for the KV caches of all running requests, in MiB: a request reserves room for
    /// its prompt plus max_tokens and waits while the cache is full.
    #[arg(long, default_value_t = 4096)]
    pub kv_cache_mb: usize,
    /// Prompt tokens one request runs per step (long prompts interleave with the others' decoding).
    #[arg(long, default_value_t = stencil_runtime::batch::DEFAULT_PREFILL_CHUNK)]
    pub prefill_chunk: usize,
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
    if args.max_batch == 0 || args.prefill_chunk == 0 {
        anyhow::bail!("--max-batch and --prefill-chunk must be at least 1");
    }
    let loaded = args.model.load()?;
    let mut batch = BatchConfig::new(
        loaded.model.as_ref(),
        args.max_batch,
        args.kv_cache_mb << 20,
    );
    batch.prefill_chunk = args.prefill_chunk;
    if batch.kv_cache_tokens == 0 {
        anyhow::bail!(
            "--kv-cache-mb {} holds no KV cache position of this model",
            args.kv_cache_mb
        );
    }
    let engine: Arc<dyn stencil_server::Engine> =
        Arc::new(ChatEngine::new(loaded).with_batching(batch)?);
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
            "stencil serve: model `{}` listening on http://{addr} (batches of up to {})",
            engine.model_id(),
            engine.slots()
        );
        serve(listener, engine, config, shutdown_signal()).await?;
        eprintln!("stencil serve: stopped");
        anyhow::Ok(())
    })
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
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// Constrain requests to JSON Schemas (repeatable: request `i` uses schema `i mod n`);
    /// every answer is then validated against its schema.
    #[arg(long)]
    pub json_schema: Vec<String>,
}

/// One request's measurements.
struct Sample {
    latency: f64,
    ttft: f64,
    tokens: usize,
}

/// `stencil bench load`: concurrent streaming clients against a server. Every stream must end
/// with `[DONE]` and a finish reason, and under a schema hold a valid instance. The last
/// stdout line is one JSON object: requests, ok, failed, aggregate generated tokens/s,
/// latency and time-to-first-token percentiles.
pub fn load_cmd(args: LoadArgs) -> anyhow::Result<()> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    use std::time::Instant;

    let schemas: Vec<Arc<(Value, jsonschema::Validator)>> = args
        .json_schema
        .iter()
        .map(|s| {
            let schema = crate::generate::read_schema(s)?;
            let validator = jsonschema::validator_for(&schema)
                .map_err(|e| anyhow::anyhow!("schema {s}: {e}"))?;
            Ok(Arc::new((schema, validator)))
        })
        .collect::<anyhow::Result<_>>()?;
    let next = Arc::new(AtomicUsize::new(0));
    let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let start = Instant::now();
    let threads: Vec<_> = (0..args.clients.max(1))
        .map(|_| {
            let (next, samples, failures) = (next.clone(), samples.clone(), failures.clone());
            let client = Client::new(&args.url, args.api_key.clone());
            let (total, max_tokens, schemas) = (args.requests, args.max_tokens, schemas.clone());
            std::thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let schema = (!schemas.is_empty()).then(|| &schemas[i % schemas.len()]);
                let mut body = json!({
                    "messages": [{"role": "user", "content": match schema {
                        Some(_) => format!("Request {i}: write a realistic example as JSON."),
                        None => format!("Request {i}: say something."),
                    }}],
                    "max_tokens": max_tokens,
                    "temperature": 0.7,
                    "seed": i,
                    "stream_options": {"include_usage": true},
                });
                if let Some(s) = schema {
                    body["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "load", "schema": s.0}});
                }
                let t = Instant::now();
                let mut ttft = None;
                let result = client
                    .chat_stream(&body, |_| {
                        ttft.get_or_insert_with(|| t.elapsed().as_secs_f64());
                    })
                    .map_err(|e| e.to_string())
                    .and_then(|acc| {
                        acc.check_complete().map_err(|e| e.to_string())?;
                        acc.finish_reason.clone().ok_or("no finish_reason")?;
                        if let Some(s) = schema {
                            let v: Value = serde_json::from_str(acc.content())
                                .map_err(|e| format!("not JSON ({e}): {}", acc.content()))?;
                            if let Err(e) = s.1.validate(&v) {
                                return Err(format!("invalid under its schema ({e}): {v}"));
                            }
                        }
                        Ok(acc.usage.map_or(0, |u| u.completion_tokens))
                    });
                match result {
                    Ok(tokens) => samples.lock().unwrap().push(Sample {
                        latency: t.elapsed().as_secs_f64(),
                        ttft: ttft.unwrap_or_else(|| t.elapsed().as_secs_f64()),
                        tokens,
                    }),
                    Err(e) => failures.lock().unwrap().push(format!("request {i}: {e}")),
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    let wall = start.elapsed().as_secs_f64();
    let samples = samples.lock().unwrap();
    let pct = |mut v: Vec<f64>, p: f64| {
        v.sort_by(f64::total_cmp);
        let x = v
            .get(((v.len() as f64 * p).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or(0.0);
        (x * 1000.0).round() / 1000.0
    };
    let lat: Vec<f64> = samples.iter().map(|s| s.latency).collect();
    let ttft: Vec<f64> = samples.iter().map(|s| s.ttft).collect();
    let tokens: usize = samples.iter().map(|s| s.tokens).sum();
    let failures = failures.lock().unwrap();
    println!(
        "{}",
        json!({
            "clients": args.clients,
            "requests": args.requests,
            "ok": samples.len(),
            "failed": failures.len(),
            "json_schemas": args.json_schema.len(),
            "generated_tokens": tokens,
            "tokens_per_s": (tokens as f64 / wall * 10.0).round() / 10.0,
            "requests_per_s": (samples.len() as f64 / wall * 100.0).round() / 100.0,
            "latency_p50_s": pct(lat.clone(), 0.5),
            "latency_p99_s": pct(lat, 0.99),
            "ttft_p50_s": pct(ttft.clone(), 0.5),
            "ttft_p99_s": pct(ttft, 0.99),
            "wall_s": (wall * 10.0).round() / 10.0,
        })
    );
    if !failures.is_empty() {
        anyhow::bail!("{} streams failed; first: {}", failures.len(), failures[0]);
    }
    Ok(())
}
