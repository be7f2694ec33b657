//! Hot paths of the mask engine on the default model's tokenizer (49k tokens):
//! time to first mask for a tool-call schema, a cached mask inside a string, a mask at a
//! structural position, and a commit.
//!
//! `cargo bench -p stencil-mask` (needs ../shared/data/tokenizers; skips with a notice).

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;
use stencil_grammar::{compile, ConstraintSpec, Options};
use stencil_mask::{Constraint, Limits, TokenSet, TokenTrie};
use stencil_vocab::Vocab;

fn setup() -> Option<(tokenizers::Tokenizer, Arc<TokenTrie>)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/tokenizers/smollm2-135m-instruct/tokenizer.json");
    let Ok(tok) = tokenizers::Tokenizer::from_file(&path) else {
        eprintln!("NOTICE: {} not found; skipping benches", path.display());
        return None;
    };
    let vocab = Vocab::from_tokenizer(&tok, vec![2]).ok()?;
    Some((tok, Arc::new(TokenTrie::new(&vocab))))
}

fn schema() -> serde_json::Value {
    json!({"type": "object", "properties": {
        "location": {"type": "string", "description": "City and country"},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "details": {"type": "object", "properties": {"hourly": {"type": "boolean"}}}
    }, "required": ["location", "unit"]})
}

fn benches(c: &mut Criterion) {
    let Some((tok, trie)) = setup() else { return };
    let grammar = compile(&ConstraintSpec::JsonSchema(schema()), &Options::default())
        .unwrap()
        .grammar;
    c.bench_function("time to first mask (compile + matcher + mask)", |b| {
        b.iter(|| {
            let g = compile(&ConstraintSpec::JsonSchema(schema()), &Options::default())
                .unwrap()
                .grammar;
            let constraint = Constraint::new(&g, trie.clone(), Limits::default()).unwrap();
            let mut m = constraint.matcher().unwrap();
            let mut mask = TokenSet::new(trie.vocab_size());
            m.compute_mask(&mut mask).unwrap();
        })
    });
    let constraint = Constraint::new(&grammar, trie.clone(), Limits::default()).unwrap();
    let prefix = tok.encode("{\"location\": \"Par", false).unwrap();
    let mut inside_string = constraint.matcher().unwrap();
    for &t in prefix.get_ids() {
        inside_string.commit(t).unwrap();
    }
    let mut mask = TokenSet::new(trie.vocab_size());
    inside_string.compute_mask(&mut mask).unwrap();
    c.bench_function("mask inside a string (cached state)", |b| {
        b.iter(|| inside_string.compute_mask(&mut mask).unwrap())
    });
    let mut structural = constraint.matcher().unwrap();
    for &t in tok
        .encode("{\"location\": \"Paris\"", false)
        .unwrap()
        .get_ids()
    {
        structural.commit(t).unwrap();
    }
    c.bench_function("mask after a value (cached state)", |b| {
        b.iter(|| structural.compute_mask(&mut mask).unwrap())
    });
    let comma = tok.encode(",", false).unwrap().get_ids()[0];
    c.bench_function("commit + rollback one token", |b| {
        b.iter(|| {
            structural.commit(comma).unwrap();
            structural.rollback(1).unwrap();
        })
    });
}

criterion_group!(masks, benches);
criterion_main!(masks);
