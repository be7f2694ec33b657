//! Conformance and mask benchmarks: `stencil test-suite` (the official JSON Schema Test Suite)
//! and `stencil bench maskbench` (MaskBench files, measured like `maskbench-llg`).
//!
//! Both replay instances token by token: each instance is serialized compactly (key order
//! kept), tokenized with a real tokenizer, and before every token a mask is computed; the token
//! must be in it. An instance is accepted iff every token was allowed and the matcher accepts
//! at the end.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::{json, Value};
use stencil_grammar::{compile_schema, FormatMode, Options};
use stencil_mask::{Constraint, Limits, MaskError, Matcher, TokenSet, TokenTrie};
use stencil_runtime::tokenizer::Tokenizer;

/// `STENCIL_TRACE=1`: print each schema's name and its compile time split (read once, so the
/// timed path does no environment lookups).
pub static TRACE: std::sync::LazyLock<bool> =
    std::sync::LazyLock::new(|| std::env::var_os("STENCIL_TRACE").is_some());

/// A tokenizer and its trie.
pub struct Engine {
    pub tokenizer: Tokenizer,
    pub trie: Arc<TokenTrie>,
    pub name: String,
}

impl Engine {
    /// Loads a `tokenizer.json`, or the tokenizer inside a GGUF; default: the default model's.
    pub fn load(path: Option<&Path>) -> Result<Self> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None => stencil_runtime::loader::default_model_path()?,
        };
        let tokenizer = if path.extension().is_some_and(|e| e == "gguf") {
            let gguf = stencil_runtime::gguf::GgufFile::open(&path)?;
            stencil_runtime::tokenizer::gguf::from_gguf_metadata(gguf.meta())?
        } else {
            Tokenizer::from_hf_files(&path)?
        };
        let trie = Arc::new(TokenTrie::new(tokenizer.vocab()));
        let file = path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = if file == "tokenizer.json" {
            path.parent()
                .and_then(|p| p.file_name())
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or(file)
        } else {
            file
        };
        Ok(Self {
            tokenizer,
            trie,
            name,
        })
    }

    pub fn compile(&self, schema: &Value, options: &Options) -> Result<Arc<Constraint>, String> {
        let t0 = Instant::now();
        let compiled = compile_schema(schema, options).map_err(|e| e.to_string())?;
        let t1 = t0.elapsed();
        let c = Constraint::new(&compiled.grammar, self.trie.clone(), Limits::default())
            .map_err(|e| e.to_string());
        if *TRACE {
            eprintln!(
                "compile: schema -> grammar {t1:?}, grammar -> automaton {:?}",
                t0.elapsed() - t1
            );
        }
        c
    }

    pub fn tokenize(&self, v: &Value) -> Result<Vec<u32>> {
        let text = serde_json::to_string(v)?;
        Ok(self.tokenizer.encode(&text, false)?)
    }
}

pub enum Outcome {
    Accepted,
    Rejected(String),
    /// The engine failed (a limit, an internal error): wrong whatever the instance.
    Failed(String),
}

/// Replays `tokens` on `m`, timing each mask.
pub fn replay(
    mut m: Matcher,
    tokens: &[u32],
    mask: &mut TokenSet,
    mask_us: &mut Vec<f64>,
) -> Outcome {
    for (i, &tok) in tokens.iter().enumerate() {
        let t0 = Instant::now();
        let r = m.compute_mask(mask);
        let us = t0.elapsed().as_secs_f64() * 1e6;
        if let Err(e) = r {
            return Outcome::Failed(format!("token #{i}: {e}"));
        }
        mask_us.push(us);
        if !mask.contains(tok) {
            return Outcome::Rejected(format!("token #{i} ({tok}) not allowed"));
        }
        match m.commit(tok) {
            Ok(()) => {}
            Err(MaskError::TokenNotAllowed { .. }) => {
                return Outcome::Failed(format!(
                    "token #{i} ({tok}) in the mask but refused by commit"
                ))
            }
            Err(e) => return Outcome::Failed(format!("token #{i}: {e}")),
        }
    }
    if m.is_accepting() {
        Outcome::Accepted
    } else {
        Outcome::Rejected("not accepting at end".into())
    }
}

/// Compiles and computes the first mask (time to first mask).
pub fn compile_to_first_mask(
    engine: &Engine,
    schema: &Value,
    options: &Options,
) -> (Result<Arc<Constraint>, String>, f64) {
    let t0 = Instant::now();
    let r = engine.compile(schema, options).and_then(|c| {
        let mut m = c.matcher().map_err(|e| e.to_string())?;
        let mut mask = TokenSet::new(engine.trie.vocab_size());
        m.compute_mask(&mut mask).map_err(|e| e.to_string())?;
        Ok(c)
    });
    (r, t0.elapsed().as_secs_f64() * 1e6)
}

/// `*.json` files under `dir` (recursively if asked), sorted.
pub fn json_files(dir: &Path, recursive: bool) -> Result<Vec<PathBuf>> {
    if dir.is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let p = e?.path();
            if p.is_dir() {
                if recursive {
                    todo.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "json") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Nearest-rank percentile of a sorted slice.
pub fn pct(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn r3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

pub fn summary(mut v: Vec<f64>, with_count: bool) -> Value {
    v.sort_by(f64::total_cmp);
    let mut o = serde_json::Map::new();
    if with_count {
        o.insert("count".into(), json!(v.len()));
    }
    for (k, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)] {
        o.insert(k.into(), json!(r3(pct(&v, q))));
    }
    o.insert(
        "mean".into(),
        json!(r3(v.iter().sum::<f64>() / v.len().max(1) as f64)),
    );
    Value::Object(o)
}

/// The `--property-order` values.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderArg {
    /// Schema order (what generation uses).
    Schema,
    /// Any order, each property at most once (exact validation).
    Any,
}

impl From<OrderArg> for stencil_grammar::PropertyOrder {
    fn from(o: OrderArg) -> Self {
        match o {
            OrderArg::Schema => Self::Schema,
            OrderArg::Any => Self::Any,
        }
    }
}

/// Options for a test-suite file: formats are assertions only in the suite's
/// `optional/format` tests (elsewhere the suite treats them as annotations).
pub fn suite_options(path: &Path, order: OrderArg) -> Options {
    let assert = path.components().any(|c| c.as_os_str() == "format")
        && path.to_string_lossy().contains("optional");
    Options {
        format: if assert {
            // The suite's assertion tests: a format that cannot be checked is refused.
            FormatMode::Strict
        } else {
            FormatMode::Annotate
        },
        property_order: order.into(),
        ..Options::default()
    }
}
