//! Drive a stencil `Matcher` from your own sampling loop, with logits from anywhere.
//!
//! ```text
//! cargo run --release -p stencil-mask --example own_sampling_loop -- path/to/tokenizer.json
//! ```
//!
//! The "model" here is a seeded random number generator; replace `fake_logits` with your
//! model's output. The loop is the whole integration: mask, pick, commit, until EOS.

use std::sync::Arc;

use serde_json::json;
use stencil_grammar::{compile, ConstraintSpec, Options, Whitespace};
use stencil_mask::{Constraint, Limits, TokenSet, TokenTrie};
use stencil_vocab::Vocab;

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "../shared/data/tokenizers/smollm2-135m-instruct/tokenizer.json".into());
    // 1. The vocabulary: token bytes, special tokens, the EOS ids (here `<|im_end|>` = 2).
    let tokenizer = tokenizers::Tokenizer::from_file(&path)?;
    let vocab = Vocab::from_tokenizer(&tokenizer, vec![2])?;
    let trie = Arc::new(TokenTrie::new(&vocab)); // once per tokenizer

    // 2. The constraint: compiled once, shared by every request (it is `Send + Sync`).
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "score": {"type": "integer", "minimum": 0, "maximum": 100}
        },
        "required": ["name", "score"],
        "additionalProperties": false
    });
    let options = Options {
        whitespace: Whitespace::Compact, // random logits would otherwise love whitespace
        ..Options::default()
    };
    let grammar = compile(&ConstraintSpec::JsonSchema(schema), &options)?.grammar;
    let constraint = Constraint::new(&grammar, trie, Limits::default())?;

    // 3. Per request: a matcher and a mask buffer you own.
    let mut matcher = constraint.matcher()?;
    let mut mask = TokenSet::new(vocab.len());
    let mut output = Vec::new();
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    loop {
        matcher.compute_mask(&mut mask)?;
        let logits = fake_logits(&mut rng, vocab.len());
        // Greedy over the allowed tokens (any sampler works: set the others to -inf).
        let token = (0..vocab.len() as u32)
            .filter(|&t| mask.contains(t))
            .max_by(|&a, &b| logits[a as usize].total_cmp(&logits[b as usize]))
            .expect("a live constraint always allows a token");
        if vocab.is_eos(token) {
            break; // EOS is only ever allowed once the output is complete
        }
        matcher.commit(token)?;
        output.extend_from_slice(vocab.token_bytes(token));
        if output.len() > 4096 {
            return Err("runaway output".into());
        }
    }
    let text = String::from_utf8(output)?;
    println!("{text}");
    let value: serde_json::Value = serde_json::from_str(&text)?;
    assert!(value["score"].as_u64().is_some_and(|s| s <= 100));
    Ok(())
}

/// Stand-in for a model: pseudo-random logits (xorshift).
fn fake_logits(state: &mut u64, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            (*state >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect()
}
