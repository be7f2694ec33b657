//! `stencil bench`: prompt throughput and decode latency, median of several runs.

use std::time::Instant;

use clap::Args;
use stencil_runtime::sampler::argmax;

use crate::ModelArgs;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt length in tokens.
    #[arg(long, default_value_t = 256)]
    pub prompt_tokens: usize,
    /// Tokens to decode per run.
    #[arg(long, default_value_t = 128)]
    pub decode_tokens: usize,
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let loaded = args.model.load()?;
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(args.prompt_tokens);
    let mut prompt = loaded.tokenizer.encode(&text, true)?;
    prompt.truncate(args.prompt_tokens.max(1));
    let mut prompt_tps = Vec::new();
    let mut decode_ms = Vec::new();
    for _ in 0..args.runs.max(1) {
        let mut session = loaded.model.new_session()?;
        let t = Instant::now();
        let logits = session.forward(&prompt)?;
        prompt_tps.push(prompt.len() as f64 / t.elapsed().as_secs_f64());
        let mut next = argmax(&logits.to_vec1::<f32>()?).unwrap_or(0);
        let t = Instant::now();
        for _ in 0..args.decode_tokens {
            let logits = session.forward(&[next])?;
            next = argmax(&logits.to_vec1::<f32>()?).unwrap_or(0);
        }
        decode_ms.push(t.elapsed().as_secs_f64() * 1e3 / args.decode_tokens.max(1) as f64);
    }
    let summary = serde_json::json!({
        "model": loaded.model.describe(),
        "threads": candle_core_threads(),
        "prompt_tokens": prompt.len(),
        "prompt_tok_per_s": (median(prompt_tps) * 10.0).round() / 10.0,
        "decode_tokens": args.decode_tokens,
        "decode_ms_per_token": (median(decode_ms) * 100.0).round() / 100.0,
        "load_s": (loaded.load_time.as_secs_f64() * 100.0).round() / 100.0,
    });
    println!("{summary}");
    Ok(())
}

fn candle_core_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
