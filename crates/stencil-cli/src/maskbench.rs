//! `stencil bench maskbench`: compile and mask times and correctness on MaskBench files,
//! measured the way `../shared/tools/maskbench-llg` measures llguidance (same fields).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use rayon::prelude::*;
use serde_json::{json, Value};
use stencil_grammar::Options;
use stencil_mask::TokenSet;

use crate::conformance::{
    compile_to_first_mask, json_files, pct, r3, replay, summary, Engine, OrderArg, Outcome,
};

#[derive(Args, Debug)]
pub struct MaskBenchArgs {
    /// tokenizer.json or GGUF file.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// MaskBench folder(s), searched recursively.
    #[arg(long, required = true)]
    pub data: Vec<PathBuf>,
    /// Schemas measured at once (each schema always on one thread).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Only the first N files (sorted) of each --data folder.
    #[arg(long)]
    pub limit: Option<usize>,
    /// One JSON line per schema.
    #[arg(long)]
    pub per_schema: Option<PathBuf>,
    /// Object member order instances may use: `schema` (the default, as generation and
    /// maskbench-llg) or `any` (exact for instances in any key order).
    #[arg(long, value_enum, default_value = "schema")]
    pub property_order: OrderArg,
    /// Replay every instance under a token budget of its own length plus this many tokens,
    /// so the last steps run the budget check (`Matcher::set_token_budget`).
    #[arg(long)]
    pub budget_slack: Option<usize>,
    /// Instead of timing: write every mask of the replay to FILE (little-endian u32; per
    /// schema its instance count, or u32::MAX if it does not compile; per instance its step
    /// count, then per step the token and the mask as 32-id words), the reference the Python
    /// package's masks are checked against (`python -m stencil.maskbench --dump-check`).
    #[arg(long)]
    pub dump_masks: Option<PathBuf>,
}

#[derive(Default, serde::Serialize)]
pub struct SchemaResult {
    pub id: String,
    #[serde(skip)]
    pub subset: String,
    pub compiled: bool,
    pub error: Option<String>,
    pub compile_us: Option<f64>,
    pub tests_passed: usize,
    pub tests_failed: usize,
    pub valid: usize,
    pub valid_accepted: usize,
    pub invalid: usize,
    pub invalid_rejected: usize,
    pub test_errors: usize,
    pub first_failure: Option<String>,
    pub masks: Value,
    pub wall_ms: f64,
    #[serde(skip)]
    pub mask_us: Vec<f64>,
}

impl SchemaResult {
    pub fn passing(&self) -> bool {
        self.compiled && self.tests_failed == 0
    }
}

fn name_of(p: &Path) -> String {
    p.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn run_inner(
    engine: &Engine,
    path: &Path,
    options: &Options,
    budget_slack: Option<usize>,
    r: &mut SchemaResult,
) -> Result<()> {
    let file: Value = serde_json::from_slice(&std::fs::read(path)?)?;
    let mut tests = Vec::new();
    for t in file["tests"].as_array().into_iter().flatten() {
        tests.push((
            t["valid"].as_bool().unwrap_or(false),
            engine.tokenize(&t["data"])?,
        ));
    }
    r.valid = tests.iter().filter(|t| t.0).count();
    r.invalid = tests.len() - r.valid;
    r.tests_failed = tests.len();
    let (compiled, us) = compile_to_first_mask(engine, &file["schema"], options);
    r.compile_us = Some(r3(us));
    let constraint = compiled.map_err(|e| anyhow::anyhow!(e))?;
    r.compiled = true;
    r.tests_failed = 0;
    let mut mask = TokenSet::new(engine.trie.vocab_size());
    for (idx, (valid, tokens)) in tests.iter().enumerate() {
        let mut m = constraint.matcher().map_err(|e| anyhow::anyhow!("{e}"))?;
        if let Some(slack) = budget_slack {
            m.set_token_budget(Some(tokens.len() + slack));
        }
        match (valid, replay(m, tokens, &mut mask, &mut r.mask_us)) {
            (true, Outcome::Accepted) => r.valid_accepted += 1,
            (false, Outcome::Rejected(_)) => r.invalid_rejected += 1,
            (_, out) => {
                let why = match out {
                    Outcome::Accepted => "invalid instance accepted".to_string(),
                    Outcome::Rejected(why) => why,
                    Outcome::Failed(why) => {
                        r.test_errors += 1;
                        why
                    }
                };
                r.tests_failed += 1;
                r.first_failure
                    .get_or_insert_with(|| format!("test #{idx} (valid={valid}): {why}"));
            }
        }
    }
    r.tests_passed = r.valid_accepted + r.invalid_rejected;
    Ok(())
}

pub fn run_schema(
    engine: &Engine,
    path: &Path,
    options: &Options,
    budget_slack: Option<usize>,
) -> SchemaResult {
    let subset = path.parent().map(name_of).unwrap_or_default();
    let mut r = SchemaResult {
        id: format!("{subset}/{}", name_of(path)),
        subset,
        ..Default::default()
    };
    let t0 = Instant::now();
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_inner(engine, path, options, budget_slack, &mut r)
    }));
    match out {
        Ok(Ok(())) => {}
        Ok(Err(e)) => r.error = Some(format!("{e:#}").chars().take(500).collect()),
        Err(p) => {
            let msg = stencil_runtime::error::panic_message(p.as_ref());
            r.error = Some(format!("panic: {}", msg.unwrap_or_default()));
            (
                r.compiled,
                r.tests_passed,
                r.valid_accepted,
                r.invalid_rejected,
            ) = (false, 0, 0, 0);
            r.tests_failed = r.valid + r.invalid;
        }
    }
    r.wall_ms = r3(t0.elapsed().as_secs_f64() * 1e3);
    let mut s = r.mask_us.clone();
    s.sort_by(f64::total_cmp);
    let over = |us: f64| s.iter().filter(|&&x| x > us).count();
    r.masks = json!({"count": s.len(), "p50": r3(pct(&s, 0.5)), "max": r3(pct(&s, 1.0)),
                     "mean": r3(s.iter().sum::<f64>() / s.len().max(1) as f64),
                     "over_250us": over(250.0), "over_1ms": over(1000.0)});
    r
}

#[rustfmt::skip]
fn table_row(name: &str, rs: &[&SchemaResult]) {
    let sum = |f: fn(&SchemaResult) -> usize| rs.iter().map(|r| f(r)).sum::<usize>();
    let mut cu: Vec<f64> = rs.iter().filter(|r| r.compiled).filter_map(|r| r.compile_us).collect();
    let mut mu: Vec<f64> = rs.iter().flat_map(|r| r.mask_us.iter().copied()).collect();
    cu.sort_by(f64::total_cmp);
    mu.sort_by(f64::total_cmp);
    eprintln!(
        "{:<24}{:>6}{:>6}{:>6}{:>13}{:>13}{:>9.2}{:>9.2}{:>9}{:>8.1}{:>8.1}{:>9.0}",
        name, rs.len(), sum(|r| r.compiled as usize), sum(|r| r.passing() as usize),
        format!("{}/{}", sum(|r| r.valid_accepted), sum(|r| r.valid)),
        format!("{}/{}", sum(|r| r.invalid_rejected), sum(|r| r.invalid)),
        pct(&cu, 0.5) / 1e3, pct(&cu, 0.99) / 1e3, mu.len(), pct(&mu, 0.5), pct(&mu, 0.99), pct(&mu, 1.0),
    );
}

pub fn run(args: MaskBenchArgs) -> Result<()> {
    let start = Instant::now();
    let mut files = Vec::new();
    for dir in &args.data {
        let mut fs = json_files(dir, true)?;
        fs.truncate(args.limit.unwrap_or(usize::MAX));
        files.extend(fs);
    }
    let engine = Engine::load(args.tokenizer.as_deref())?;
    let options = Options {
        property_order: args.property_order.into(),
        ..Options::default()
    };
    if let Some(out) = &args.dump_masks {
        return dump_masks(&engine, &files, &options, out);
    }
    eprintln!(
        "tokenizer {} (vocab {}), {} files, {} thread(s), setup {:.2}s",
        engine.name,
        engine.trie.vocab_size(),
        files.len(),
        args.threads,
        start.elapsed().as_secs_f64()
    );
    let done = AtomicUsize::new(0);
    let trace = *crate::conformance::TRACE;
    let work = |p: &PathBuf| {
        if trace {
            eprintln!("schema {}", p.display());
        }
        let r = run_schema(&engine, p, &options, args.budget_slack);
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(500) {
            eprintln!(
                "  {n}/{} schemas, {:.0}s",
                files.len(),
                start.elapsed().as_secs_f64()
            );
        }
        r
    };
    let results: Vec<SchemaResult> = if args.threads > 1 {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(args.threads)
            .build()?;
        pool.install(|| files.par_iter().map(work).collect())
    } else {
        files.iter().map(work).collect()
    };
    if let Some(out) = &args.per_schema {
        let mut w = std::io::BufWriter::new(std::fs::File::create(out)?);
        for r in &results {
            writeln!(w, "{}", serde_json::to_string(r)?)?;
        }
    }
    let mut by_subset: BTreeMap<&str, Vec<&SchemaResult>> = BTreeMap::new();
    for r in &results {
        by_subset.entry(&r.subset).or_default().push(r);
    }
    eprintln!("subset                   files  comp  pass    valid acc  invalid rej   c50 ms   c99 ms    masks  m50 us  m99 us  mmax us");
    for (name, rs) in &by_subset {
        table_row(name, rs);
    }
    let all: Vec<&SchemaResult> = results.iter().collect();
    table_row("TOTAL", &all);
    let sum = |f: fn(&SchemaResult) -> usize| results.iter().map(f).sum::<usize>();
    let compile_us: Vec<f64> = results
        .iter()
        .filter(|r| r.compiled)
        .filter_map(|r| r.compile_us)
        .collect();
    let mask_us: Vec<f64> = results
        .iter()
        .flat_map(|r| r.mask_us.iter().copied())
        .collect();
    let out = json!({
        "engine": format!("stencil {}", env!("CARGO_PKG_VERSION")),
        "tokenizer": engine.name,
        "vocab": engine.trie.vocab_size(),
        "files": results.len(),
        "compiled": sum(|r| r.compiled as usize),
        "passing": sum(|r| r.passing() as usize),
        "tests": {"valid": sum(|r| r.valid), "valid_accepted": sum(|r| r.valid_accepted),
                  "invalid": sum(|r| r.invalid), "invalid_rejected": sum(|r| r.invalid_rejected)},
        "compile_us": summary(compile_us, false),
        "masks_per_s": (mask_us.len() as f64 / start.elapsed().as_secs_f64()).round(),
        "mask_us": summary(mask_us, true),
        "wall_s": r3(start.elapsed().as_secs_f64()),
    });
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}

/// `--dump-masks`: every mask of the replay of every instance, in file order (format in
/// [`MaskBenchArgs::dump_masks`]).
fn dump_masks(engine: &Engine, files: &[PathBuf], options: &Options, out: &Path) -> Result<()> {
    let mut w = std::io::BufWriter::new(std::fs::File::create(out)?);
    let put = |w: &mut std::io::BufWriter<std::fs::File>, x: u32| w.write_all(&x.to_le_bytes());
    let mut mask = TokenSet::new(engine.trie.vocab_size());
    let words = engine.trie.vocab_size().div_ceil(32);
    let (mut schemas, mut steps) = (0usize, 0usize);
    for path in files {
        let file: Value = serde_json::from_slice(&std::fs::read(path)?)?;
        let tests = file["tests"].as_array().cloned().unwrap_or_default();
        let Ok(constraint) = compile_to_first_mask(engine, &file["schema"], options).0 else {
            put(&mut w, u32::MAX)?;
            continue;
        };
        schemas += 1;
        put(&mut w, tests.len() as u32)?;
        for t in &tests {
            let tokens = engine.tokenize(&t["data"])?;
            let mut m = constraint.matcher().map_err(|e| anyhow::anyhow!("{e}"))?;
            let mut record = Vec::new();
            for &tok in &tokens {
                m.compute_mask(&mut mask)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
                record.push(tok);
                let at = record.len();
                record.resize(at + words, 0);
                mask.write_u32_words(&mut record[at..]);
                if !mask.contains(tok) || m.commit(tok).is_err() {
                    break;
                }
            }
            let n = record.len() / (words + 1);
            steps += n;
            put(&mut w, n as u32)?;
            for x in record {
                put(&mut w, x)?;
            }
        }
    }
    w.flush()?;
    eprintln!(
        "{schemas} schemas compiled, {steps} masks written to {}",
        out.display()
    );
    Ok(())
}

#[derive(Args, Debug)]
pub struct MasksArgs {
    /// tokenizer.json or GGUF file.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// MaskBench file(s) or folder(s): each schema is compiled once, its valid instances are
    /// replayed on every thread.
    #[arg(long, required = true)]
    pub data: Vec<PathBuf>,
    /// Only the first N files (sorted) of each --data folder.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Threads for the parallel run (compared with one thread).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Replays of all instances per thread and schema.
    #[arg(long, default_value_t = 10)]
    pub rounds: usize,
}

/// `stencil bench masks`: masks per second on ONE compiled constraint per schema, computed by
/// one thread and then by `--threads` threads at once (each with its own matchers), after a
/// warm-up round on each. Prints one JSON line.
pub fn masks(args: MasksArgs) -> Result<()> {
    let mut files = Vec::new();
    for dir in &args.data {
        let mut fs = if dir.is_file() {
            vec![dir.clone()]
        } else {
            json_files(dir, true)?
        };
        fs.truncate(args.limit.unwrap_or(usize::MAX));
        files.extend(fs);
    }
    let engine = Engine::load(args.tokenizer.as_deref())?;
    let options = Options::default();
    let threads = args.threads.max(1);
    let (mut schemas, mut one, mut many) = (0usize, (0u64, 0f64), (0u64, 0f64));
    for path in &files {
        let file: Value = serde_json::from_slice(&std::fs::read(path)?)?;
        let mut instances = Vec::new();
        for t in file["tests"].as_array().into_iter().flatten() {
            if t["valid"].as_bool() == Some(true) {
                instances.push(engine.tokenize(&t["data"])?);
            }
        }
        let Ok(constraint) = engine.compile(&file["schema"], &options) else {
            continue;
        };
        if instances.is_empty() {
            continue;
        }
        // Masks of `rounds` replays of every instance, on one thread.
        let replay_all = |rounds: usize| -> u64 {
            let mut mask = TokenSet::new(engine.trie.vocab_size());
            let mut n = 0u64;
            for _ in 0..rounds {
                for tokens in &instances {
                    let Ok(mut m) = constraint.matcher() else {
                        return n;
                    };
                    for &t in tokens {
                        if m.compute_mask(&mut mask).is_err() || m.commit(t).is_err() {
                            break;
                        }
                        n += 1;
                    }
                }
            }
            n
        };
        // Warm up as many caches as threads will use.
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| replay_all(1));
            }
        });
        let t = Instant::now();
        let n = replay_all(args.rounds);
        one.0 += n;
        one.1 += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let n: u64 = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|_| s.spawn(|| replay_all(args.rounds)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or(0)).sum()
        });
        many.0 += n;
        many.1 += t.elapsed().as_secs_f64();
        schemas += 1;
    }
    let rate = |(n, s): (u64, f64)| if s > 0.0 { n as f64 / s } else { 0.0 };
    let out = json!({
        "schemas": schemas,
        "threads": threads,
        "masks_per_s_1_thread": rate(one).round(),
        "masks_per_s": rate(many).round(),
        "speedup": (rate(many) / rate(one).max(1e-9) * 100.0).round() / 100.0,
    });
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}
