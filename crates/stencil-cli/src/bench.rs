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
    /// Also decode this many sequences at once (one batched forward per step) and report
    /// the aggregate tokens per second.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Also report decode ms/token after this many tokens of context (repeatable):
    /// `decode_ms_at_context` maps each to the median over the runs.
    #[arg(long)]
    pub context: Vec<usize>,
    /// Also report the perplexity of this text file (its first `--perplexity-tokens` tokens,
    /// one decode step each, so the decode path is what is measured).
    #[arg(long, value_name = "FILE")]
    pub perplexity: Option<std::path::PathBuf>,
    #[arg(long, default_value_t = 512)]
    pub perplexity_tokens: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let loaded = args.model.load()?;
    let longest = args
        .context
        .iter()
        .copied()
        .fold(args.prompt_tokens, usize::max);
    let text = BENCH_TEXT.repeat(longest / 8 + 2);
    let mut tokens = loaded.tokenizer.encode(&text, true)?;
    tokens.truncate(longest.max(1));
    let prompt = &tokens[..args.prompt_tokens.clamp(1, tokens.len())];
    let mut prompt_tps = Vec::new();
    let mut decode_ms = Vec::new();
    for _ in 0..args.runs.max(1) {
        let mut session = loaded.model.new_session()?;
        let t = Instant::now();
        let logits = session.forward(prompt)?;
        prompt_tps.push(prompt.len() as f64 / t.elapsed().as_secs_f64());
        let next = argmax(&logits.to_vec1::<f32>()?).unwrap_or(0);
        decode_ms.push(greedy_decode_ms(
            session.as_mut(),
            next,
            args.decode_tokens,
        )?);
    }
    let decode_ms = median(decode_ms);
    let mut at_context = serde_json::Map::new();
    for &n in &args.context {
        let mut runs = Vec::new();
        for _ in 0..args.runs.max(1) {
            let mut session = loaded.model.new_session()?;
            let logits = session.forward(&tokens[..n.clamp(1, tokens.len())])?;
            let next = argmax(&logits.to_vec1::<f32>()?).unwrap_or(0);
            runs.push(greedy_decode_ms(
                session.as_mut(),
                next,
                args.decode_tokens,
            )?);
        }
        at_context.insert(
            n.to_string(),
            ((median(runs) * 100.0).round() / 100.0).into(),
        );
    }
    let mut summary = serde_json::json!({
        "model": loaded.model.describe(),
        "threads": candle_core_threads(),
        "prompt_tokens": prompt.len(),
        "prompt_tok_per_s": (median(prompt_tps) * 10.0).round() / 10.0,
        "decode_tokens": args.decode_tokens,
        "decode_ms_per_token": (decode_ms * 100.0).round() / 100.0,
        "load_s": (loaded.load_time.as_secs_f64() * 100.0).round() / 100.0,
    });
    if !at_context.is_empty() {
        summary["decode_ms_at_context"] = at_context.into();
    }
    if let Some(path) = &args.perplexity {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        let mut ids = loaded.tokenizer.encode(&text, true)?;
        ids.truncate(args.perplexity_tokens.min(loaded.model.context_length()));
        if ids.len() < 2 {
            anyhow::bail!("{}: fewer than 2 tokens of text", path.display());
        }
        summary["perplexity_tokens"] = ids.len().into();
        summary["perplexity"] =
            ((perplexity(loaded.model.as_ref(), &ids)? * 1e4).round() / 1e4).into();
    }
    if args.batch > 1 {
        let (step_ms, fastest_ms) =
            batch_decode(&loaded, prompt, args.batch, args.decode_tokens, args.runs)?;
        let tps = args.batch as f64 * 1e3 / step_ms;
        summary["batch"] = args.batch.into();
        summary["batch_decode_ms_per_step"] = ((step_ms * 100.0).round() / 100.0).into();
        // The fastest single step moves least when other work shares the machine: compare
        // builds by it.
        summary["batch_decode_min_ms_per_step"] = ((fastest_ms * 100.0).round() / 100.0).into();
        summary["batch_tokens_per_s"] = ((tps * 10.0).round() / 10.0).into();
        summary["batch_speedup"] = ((tps * decode_ms / 1e3 * 100.0).round() / 100.0).into();
    }
    println!("{summary}");
    Ok(())
}

/// The benchmark prompt, repeated to length (`scripts/bench-llama-cpp.py` uses the same text,
/// so both engines see the same tokens).
const BENCH_TEXT: &str = "The quick brown fox jumps over the lazy dog. ";

/// Greedy decoding of `steps` tokens after a prompt whose next token is `next`: ms per token.
fn greedy_decode_ms(
    session: &mut dyn stencil_runtime::models::Session,
    mut next: u32,
    steps: usize,
) -> anyhow::Result<f64> {
    let t = Instant::now();
    for _ in 0..steps {
        let logits = session.forward(&[next])?;
        next = argmax(&logits.to_vec1::<f32>()?).unwrap_or(0);
    }
    Ok(t.elapsed().as_secs_f64() * 1e3 / steps.max(1) as f64)
}

/// exp of the mean negative log-likelihood of `ids[1..]`, each predicted from the ones before
/// it, feeding one token per forward (the decode path).
fn perplexity(
    model: &dyn stencil_runtime::models::LanguageModel,
    ids: &[u32],
) -> anyhow::Result<f64> {
    let mut session = model.new_session()?;
    let mut nll = 0f64;
    for w in ids.windows(2) {
        let logits = session.forward(&w[..1])?.to_vec1::<f32>()?;
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let log_z = max
            + logits
                .iter()
                .map(|&l| (l as f64 - max).exp())
                .sum::<f64>()
                .ln();
        nll += log_z - logits[w[1] as usize] as f64;
    }
    Ok((nll / (ids.len() - 1) as f64).exp())
}

/// Median ms per decode step of `batch` sequences (after the same prompt), one batched
/// forward per step, over the runs; and the fastest single step.
fn batch_decode(
    loaded: &stencil_runtime::loader::LoadedModel,
    prompt: &[u32],
    batch: usize,
    steps: usize,
    runs: usize,
) -> anyhow::Result<(f64, f64)> {
    use stencil_runtime::models::BatchStep;
    let mut per_step = Vec::new();
    let mut fastest = f64::INFINITY;
    for _ in 0..runs.max(1) {
        let mut sessions = (0..batch)
            .map(|_| loaded.model.new_session())
            .collect::<Result<Vec<_>, _>>()?;
        let mut next = Vec::new();
        for s in sessions.iter_mut() {
            next.push(vec![
                argmax(&s.forward(prompt)?.to_vec1::<f32>()?).unwrap_or(0)
            ]);
        }
        let t = Instant::now();
        for _ in 0..steps {
            let mut batch: Vec<BatchStep<'_, '_>> = sessions
                .iter_mut()
                .zip(&next)
                .map(|(s, t)| BatchStep {
                    session: s.as_mut(),
                    tokens: t,
                })
                .collect();
            let step = Instant::now();
            let logits = loaded.model.forward_batch(&mut batch)?;
            for (n, l) in next.iter_mut().zip(logits) {
                n[0] = argmax(&l.to_vec1::<f32>()?).unwrap_or(0);
            }
            fastest = fastest.min(step.elapsed().as_secs_f64() * 1e3);
        }
        per_step.push(t.elapsed().as_secs_f64() * 1e3 / steps.max(1) as f64);
    }
    Ok((median(per_step), fastest))
}

fn candle_core_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `stencil bench overhead`: what a constraint costs per decoded token.
#[derive(Args, Debug)]
pub struct OverheadArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The JSON Schema to generate under.
    #[arg(long, default_value = "schemas/corpus/order.json")]
    pub json_schema: std::path::PathBuf,
    /// The user message.
    #[arg(
        long,
        default_value = "Respond with JSON. A shop order with one to three line items."
    )]
    pub prompt: String,
    #[arg(long, default_value_t = 300)]
    pub max_tokens: usize,
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
}

/// Greedy constrained decoding (with and without forced-token fast-forward) against an
/// unconstrained replay of the very same tokens, so both sides run identical forward passes;
/// medians over `runs`.
pub fn overhead(args: OverheadArgs) -> anyhow::Result<()> {
    use std::sync::Arc;

    use stencil_grammar::{compile, ConstraintSpec, Options};
    use stencil_mask::{Constraint, Limits, TokenTrie};
    use stencil_runtime::chat::build_prompt;
    use stencil_runtime::generate::Generator;
    use stencil_types::{ChatMessage, GenerateParams, TruncationPolicy};

    let loaded = args.model.load()?;
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&args.json_schema)?)?;
    let options = Options::generation();
    let grammar = compile(&ConstraintSpec::JsonSchema(schema), &options)?.grammar;
    let trie = Arc::new(TokenTrie::new(loaded.tokenizer.vocab()));
    let prompt = build_prompt(
        &loaded.template,
        &loaded.tokenizer,
        &[ChatMessage::user(&args.prompt)],
        None,
        loaded.model.context_length(),
        1,
        TruncationPolicy::Error,
    )?
    .tokens;
    let (mut free, mut masked, mut ff_total, mut noff_total) = (vec![], vec![], vec![], vec![]);
    let (mut tokens_len, mut forced) = (0, 0);
    for _ in 0..args.runs.max(1) {
        // A fresh constraint each run: its mask cache starts cold, as for a new schema.
        let constraint = Constraint::new(&grammar, trie.clone(), Limits::default())?;
        let params = |fast_forward| GenerateParams {
            max_tokens: args.max_tokens,
            fast_forward,
            ..GenerateParams::default()
        };
        let params_greedy = |fast_forward| {
            let mut p = params(fast_forward);
            p.sampling.temperature = 0.0;
            p
        };
        let g = Generator::new(
            loaded.model.as_ref(),
            &loaded.tokenizer,
            &prompt,
            &params_greedy(false),
            Some(&constraint),
        )?
        .into_generation()?;
        masked.push(g.timings.decode_ms_per_token(&g.usage));
        noff_total.push(g.timings.decode.as_secs_f64() * 1e3);
        tokens_len = g.tokens.len();
        // Unconstrained replay: same prompt, same tokens, sampling each step as well.
        let mut session = loaded.model.new_session()?;
        let mut logits = session.forward(&prompt)?.to_vec1::<f32>()?;
        let t = Instant::now();
        for (i, &tok) in g.tokens.iter().enumerate() {
            std::hint::black_box(argmax(&logits));
            if i + 1 < g.tokens.len() {
                logits = session.forward(&[tok])?.to_vec1::<f32>()?;
            }
        }
        free.push(t.elapsed().as_secs_f64() * 1e3 / g.tokens.len().max(1) as f64);
        let constraint = Constraint::new(&grammar, trie.clone(), Limits::default())?;
        let p = params_greedy(true);
        let f = Generator::new(
            loaded.model.as_ref(),
            &loaded.tokenizer,
            &prompt,
            &p,
            Some(&constraint),
        )?
        .into_generation()?;
        ff_total.push(f.timings.decode.as_secs_f64() * 1e3);
        forced = f.forced_tokens;
    }
    let (free, masked) = (median(free), median(masked));
    let summary = serde_json::json!({
        "schema": args.json_schema.display().to_string(),
        "tokens": tokens_len,
        "unconstrained_ms_per_token": (free * 100.0).round() / 100.0,
        "constrained_ms_per_token": (masked * 100.0).round() / 100.0,
        "overhead_pct": ((masked / free - 1.0) * 1000.0).round() / 10.0,
        "fast_forward": {
            "forced_tokens": forced,
            "decode_ms_without": median(noff_total).round(),
            "decode_ms_with": median(ff_total).round(),
        },
        "runs": args.runs,
    });
    println!("{summary}");
    Ok(())
}
