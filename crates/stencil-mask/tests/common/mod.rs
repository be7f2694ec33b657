//! Helpers shared by the mask tests.

use std::sync::Arc;

use stencil_grammar::{compile, ConstraintSpec, Options, Whitespace};
use stencil_mask::{Constraint, Limits, TokenTrie};
use stencil_vocab::{Vocab, VocabStyle};

/// The default model's tokenizer from ../shared/data, or `None` (with a notice) without it.
#[allow(dead_code)]
pub fn smollm2_tokenizer() -> Option<tokenizers::Tokenizer> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/tokenizers/smollm2-135m-instruct/tokenizer.json");
    if !path.exists() {
        eprintln!(
            "NOTICE: {} not found; skipping (needs ../shared/data)",
            path.display()
        );
        return None;
    }
    Some(tokenizers::Tokenizer::from_file(&path).expect("tokenizer"))
}

/// A vocabulary of every 1-3 character string over `alphabet`, plus `</s>` (EOS) and
/// `<tool>` (special, not EOS).
#[allow(dead_code)] // Not every test binary uses every helper.
pub fn tiny_vocab(alphabet: &str) -> Vocab {
    tiny_vocab_with(alphabet, &[])
}

/// [`tiny_vocab`] plus `extra` tokens (`<0xAB>` is a raw byte, to split UTF-8 characters).
#[allow(dead_code)]
pub fn tiny_vocab_with(alphabet: &str, extra: &[&str]) -> Vocab {
    let chars: Vec<char> = alphabet.chars().collect();
    let mut tokens: Vec<Option<String>> = extra.iter().map(|t| Some(t.to_string())).collect();
    for a in &chars {
        tokens.push(Some(a.to_string()));
        for b in &chars {
            tokens.push(Some(format!("{a}{b}")));
            for c in &chars {
                tokens.push(Some(format!("{a}{b}{c}")));
            }
        }
    }
    let eos = tokens.len() as u32;
    tokens.push(Some("</s>".into()));
    tokens.push(Some("<tool>".into()));
    let mut special = vec![false; tokens.len()];
    special[eos as usize] = true;
    special[eos as usize + 1] = true;
    Vocab::from_token_strings(&tokens, &special, VocabStyle::SentencePiece, vec![eos])
        .expect("vocab")
}

/// `spec` compiled with whitespace `ws` into a constraint over `vocab`.
#[allow(dead_code)]
pub fn constraint(spec: ConstraintSpec, vocab: &Vocab, ws: Whitespace) -> Arc<Constraint> {
    let opts = Options {
        whitespace: ws,
        ..Options::default()
    };
    let g = compile(&spec, &opts).expect("compiles").grammar;
    Constraint::new(&g, Arc::new(TokenTrie::new(vocab)), Limits::default()).expect("constraint")
}

/// The reference for `schema` (the `jsonschema` crate's validator, formats asserted) and the
/// constraint under test (`schema` compiled with compact whitespace over `vocab`).
#[allow(dead_code)]
pub fn validator_and_constraint(
    schema: &serde_json::Value,
    vocab: &Vocab,
) -> (jsonschema::Validator, Arc<Constraint>) {
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .expect("valid schema");
    let c = constraint(
        ConstraintSpec::JsonSchema(schema.clone()),
        vocab,
        Whitespace::Compact,
    );
    (validator, c)
}
