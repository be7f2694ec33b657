//! Where compile time goes: schema -> grammar, grammar -> automaton, first mask, for each
//! schema file given (JSON Schema, or a MaskBench file with a `schema` field), repeated so a
//! profiler gets enough samples.
//!
//! ```text
//! cargo run --profile profiling -p stencil-mask --example compile_profile -- \
//!     --tokenizer tokenizer.json --repeat 20 [--grammar-only] [--max-recursion N] schema.json...
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use stencil_grammar::{compile_schema, Options};
use stencil_mask::{Constraint, Limits, TokenSet, TokenTrie};
use stencil_vocab::Vocab;

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut tokenizer = String::from("../shared/data/tokenizers/llama3/tokenizer.json");
    let mut repeat = 1usize;
    let mut grammar_only = false;
    let mut options = Options::default();
    let mut files = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--tokenizer" => tokenizer = args.next().ok_or("--tokenizer needs a path")?,
            "--repeat" => repeat = args.next().ok_or("--repeat needs N")?.parse()?,
            "--grammar-only" => grammar_only = true,
            "--max-recursion" => {
                options.max_recursion = Some(args.next().ok_or("--max-recursion needs N")?.parse()?)
            }
            _ => files.push(a),
        }
    }
    let tok = tokenizers::Tokenizer::from_file(&tokenizer)?;
    let vocab = Vocab::from_tokenizer(&tok, vec![])?;
    let trie = Arc::new(TokenTrie::new(&vocab));
    for f in files {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&f)?)?;
        let schema = v.get("schema").cloned().unwrap_or(v);
        let mut t = [Duration::ZERO; 3];
        for _ in 0..repeat {
            let t0 = Instant::now();
            let g = match compile_schema(&schema, &options) {
                Ok(g) => g.grammar,
                Err(e) => {
                    eprintln!("{f}: {e}");
                    break;
                }
            };
            let t1 = Instant::now();
            if grammar_only {
                t[0] += t1 - t0;
                continue;
            }
            let c = Constraint::new(&g, trie.clone(), Limits::default())?;
            let t2 = Instant::now();
            let mut m = c.matcher()?;
            let mut mask = TokenSet::new(trie.vocab_size());
            m.compute_mask(&mut mask)?;
            let t3 = Instant::now();
            t[0] += t1 - t0;
            t[1] += t2 - t1;
            t[2] += t3 - t2;
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3 / repeat as f64;
        println!(
            "{f}: grammar {:.3} ms, automaton {:.3} ms, first mask {:.3} ms",
            ms(t[0]),
            ms(t[1]),
            ms(t[2])
        );
    }
    Ok(())
}
