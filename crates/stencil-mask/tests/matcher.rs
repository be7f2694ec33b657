//! Matcher semantics: masks against an independent regex DFA (regex-automata), random
//! generation under JSON Schemas validated by the `jsonschema` crate, and the API contract
//! (EOS, special tokens, rollback, forced bytes, errors, limits).

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use regex_automata::dfa::{dense, Automaton};
use regex_automata::{Anchored, Input};
use serde_json::json;
use stencil_grammar::{compile, Constraint as Spec, Options, Whitespace};
use stencil_mask::{Constraint, Limits, MaskError, TokenSet, TokenTrie};
use stencil_vocab::{Vocab, VocabStyle};

/// A vocabulary of every 1-3 character string over `alphabet`, plus `</s>` (EOS) and
/// `<tool>` (special, not EOS).
fn tiny_vocab(alphabet: &str) -> Vocab {
    let chars: Vec<char> = alphabet.chars().collect();
    let mut tokens: Vec<Option<String>> = Vec::new();
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

fn constraint(spec: Spec, vocab: &Vocab, ws: Whitespace) -> Arc<Constraint> {
    let opts = Options {
        whitespace: ws,
        ..Options::default()
    };
    let g = compile(&spec, &opts).expect("compiles").grammar;
    Constraint::new(&g, Arc::new(TokenTrie::new(vocab)), Limits::default()).expect("constraint")
}

#[test]
fn regex_masks_equal_an_independent_dfa() {
    let vocab = tiny_vocab("ab1-.");
    let trie = TokenTrie::new(&vocab);
    let eos = vocab.eos_ids()[0];
    let patterns = [
        "a+b?",
        "(ab|ba)*1",
        "[ab]{2,4}-[0-9]+",
        "a.b",
        "(a|b)*a(a|b){3}",
        "1?|a-b|\\.{2,}",
    ];
    let mut rng = StdRng::seed_from_u64(7);
    for pat in patterns {
        let oracle = dense::DFA::new(&format!("^(?:{pat})$")).expect("oracle");
        let c = constraint(Spec::Regex(pat.into()), &vocab, Whitespace::Compact);
        for _walk in 0..8 {
            let mut m = c.matcher().expect("matcher");
            let mut text: Vec<u8> = Vec::new();
            let mut mask = TokenSet::new(vocab.len());
            for _step in 0..12 {
                m.compute_mask(&mut mask).expect("mask");
                let start = oracle
                    .start_state_forward(&Input::new("").anchored(Anchored::Yes))
                    .expect("start");
                let mut s = start;
                for &b in &text {
                    s = oracle.next_state(s, b);
                }
                let complete = oracle.is_match_state(oracle.next_eoi_state(s));
                assert_eq!(
                    mask.contains(eos),
                    complete,
                    "{pat}: EOS after {:?}",
                    String::from_utf8_lossy(&text)
                );
                for id in 0..vocab.len() as u32 {
                    if id == eos {
                        continue;
                    }
                    let bytes = trie.token_bytes(id);
                    let mut t = s;
                    let mut alive = !bytes.is_empty();
                    for &b in bytes {
                        t = oracle.next_state(t, b);
                        if oracle.is_dead_state(t) {
                            alive = false;
                            break;
                        }
                    }
                    assert_eq!(
                        mask.contains(id),
                        alive,
                        "{pat}: token {:?} after {:?}",
                        String::from_utf8_lossy(bytes),
                        String::from_utf8_lossy(&text)
                    );
                }
                let allowed: Vec<u32> = mask.iter().filter(|&t| t != eos).collect();
                if allowed.is_empty() || (complete && rng.random_bool(0.3)) {
                    break;
                }
                let tok = allowed[rng.random_range(0..allowed.len())];
                m.commit(tok).expect("allowed token commits");
                text.extend_from_slice(trie.token_bytes(tok));
            }
        }
    }
}

#[test]
fn eos_special_tokens_rollback_and_errors() {
    let vocab = tiny_vocab("ab");
    let eos = vocab.eos_ids()[0];
    let tool = eos + 1;
    let c = constraint(
        Spec::Choice(vec!["ab".into(), "abba".into()]),
        &vocab,
        Whitespace::Compact,
    );
    let mut m = c.matcher().expect("matcher");
    let mut mask = TokenSet::new(vocab.len());
    let id = |s: &str| {
        (0..vocab.len() as u32)
            .find(|&i| vocab.token_bytes(i) == s.as_bytes())
            .expect("token")
    };
    m.compute_mask(&mut mask).unwrap();
    assert!(
        !mask.contains(eos) && !mask.contains(tool),
        "nothing complete yet; special tokens never text"
    );
    assert!(mask.contains(id("ab")) && mask.contains(id("abb")) && !mask.contains(id("b")));
    assert_eq!(m.forced_bytes().unwrap(), b"ab");
    // A refused token is an error and changes nothing.
    assert!(matches!(
        m.commit(id("b")),
        Err(MaskError::TokenNotAllowed { .. })
    ));
    assert!(matches!(
        m.commit(eos),
        Err(MaskError::TokenNotAllowed { .. })
    ));
    m.commit(id("ab")).unwrap();
    assert!(m.is_accepting());
    m.compute_mask(&mut mask).unwrap();
    assert!(mask.contains(eos) && mask.contains(id("ba")) && !mask.contains(id("a")));
    let before = mask.clone();
    m.commit(id("b")).unwrap();
    assert!(!m.is_accepting());
    assert_eq!(m.forced_bytes().unwrap(), b"a");
    m.rollback(1).unwrap();
    m.compute_mask(&mut mask).unwrap();
    assert_eq!(mask, before, "rollback restores the mask");
    let mut clone = m.clone();
    clone.commit(id("ba")).unwrap();
    assert!(clone.is_accepting());
    clone.commit(eos).unwrap();
    assert!(clone.is_finished());
    clone.compute_mask(&mut mask).unwrap();
    assert!(mask.is_empty(), "nothing after EOS");
    assert!(matches!(
        m.rollback(5),
        Err(MaskError::RollbackTooFar {
            requested: 5,
            available: 1
        })
    ));
    assert!(matches!(
        m.commit(9999),
        Err(MaskError::UnknownToken { .. })
    ));
}

#[test]
fn forced_bytes_follow_the_schema() {
    let vocab = tiny_vocab("ab");
    let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"], "additionalProperties": false});
    let c = constraint(Spec::JsonSchema(schema), &vocab, Whitespace::Compact);
    let mut m = c.matcher().unwrap();
    assert_eq!(
        String::from_utf8(m.forced_bytes().unwrap()).unwrap(),
        "{\"name\":\""
    );
}

/// Masks and commits random 3-letter tokens for up to `steps` steps; the first error.
fn random_walk_error(
    c: &Arc<Constraint>,
    vocab: &Vocab,
    seed: u64,
    steps: usize,
) -> Option<MaskError> {
    let mut m = c.matcher().unwrap();
    let mut mask = TokenSet::new(vocab.len());
    let mut rng = StdRng::seed_from_u64(seed);
    let three: Vec<u32> = (0..vocab.len() as u32)
        .filter(|&i| vocab.token_bytes(i).len() == 3)
        .collect();
    for _ in 0..steps {
        let t = three[rng.random_range(0..three.len())];
        if let Err(e) = m.compute_mask(&mut mask).and_then(|_| m.commit(t)) {
            return Some(e);
        }
    }
    None
}

#[test]
fn automaton_limits_are_typed_errors() {
    let vocab = tiny_vocab("ab");
    let g = compile(&Spec::Regex("(a|b)*a(a|b){14}".into()), &Options::default())
        .unwrap()
        .grammar;
    let limits = Limits {
        max_dfa_states: 200,
        ..Limits::default()
    };
    let c = Constraint::new(&g, Arc::new(TokenTrie::new(&vocab)), limits).unwrap();
    // Random text keeps reaching new states (the DFA remembers the last 15 letters).
    let err = random_walk_error(&c, &vocab, 3, 100);
    assert!(
        matches!(
            err,
            Some(MaskError::TooManyStates {
                what: "DFA",
                limit: 200,
                ..
            })
        ),
        "{err:?}"
    );
}

/// Random walks under real schemas with the default model's tokenizer: every finished output
/// is valid under the independent `jsonschema` validator.
#[test]
fn random_generation_is_valid_json_schema_output() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/tokenizers/smollm2-135m-instruct/tokenizer.json");
    if !path.exists() {
        eprintln!(
            "NOTICE: {} not found; skipping (needs ../shared/data)",
            path.display()
        );
        return;
    }
    let tok = tokenizers::Tokenizer::from_file(&path).expect("tokenizer");
    let vocab = Vocab::from_tokenizer(&tok, vec![2]).expect("vocab");
    let schemas = [
        json!({"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 999}, "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 3}}, "required": ["id", "tags"], "additionalProperties": false}),
        json!({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["v"], "additionalProperties": false}}, "$ref": "#/$defs/node"}),
        json!({"anyOf": [{"type": "string", "pattern": "^[a-z]{2,5}@x\\.io$"}, {"type": "number", "exclusiveMinimum": 0, "maximum": 1}, {"type": "null"}]}),
        json!({"type": "object", "properties": {"name": {"type": "string", "minLength": 2, "maxLength": 6}, "when": {"type": "string", "format": "date"}}, "required": ["name"], "additionalProperties": {"type": "boolean"}, "maxProperties": 3}),
        json!({"type": "array", "prefixItems": [{"const": "x"}, {"type": "boolean"}], "items": {"type": "integer", "multipleOf": 5}, "maxItems": 4}),
        json!({"oneOf": [{"type": "integer", "multipleOf": 2}, {"type": "integer", "multipleOf": 3}]}),
    ];
    let trie = Arc::new(TokenTrie::new(&vocab));
    let mut rng = StdRng::seed_from_u64(11);
    for schema in schemas {
        let validator = jsonschema::validator_for(&schema).expect("valid schema");
        let g = compile(&Spec::JsonSchema(schema.clone()), &Options::default())
            .expect("compiles")
            .grammar;
        let c = Constraint::new(&g, trie.clone(), Limits::default()).expect("constraint");
        let mut finished = 0;
        for _ in 0..12 {
            let mut m = c.matcher().unwrap();
            let mut mask = TokenSet::new(vocab.len());
            let mut out = Vec::new();
            let mut done = false;
            for _ in 0..300 {
                m.compute_mask(&mut mask).unwrap();
                if mask.contains(2) && rng.random_bool(0.5) {
                    done = true;
                    break;
                }
                // Short tokens, so structure closes often enough to finish.
                let allowed: Vec<u32> = mask
                    .iter()
                    .filter(|&t| t != 2 && trie.token_bytes(t).len() <= 2)
                    .collect();
                let allowed = if allowed.is_empty() {
                    mask.iter().filter(|&t| t != 2).collect()
                } else {
                    allowed
                };
                if allowed.is_empty() {
                    assert!(
                        mask.contains(2),
                        "{schema}: dead end after {:?}",
                        String::from_utf8_lossy(&out)
                    );
                    done = true;
                    break;
                }
                let t = allowed[rng.random_range(0..allowed.len())];
                m.commit(t).unwrap();
                out.extend_from_slice(trie.token_bytes(t));
            }
            if done {
                finished += 1;
                let text = String::from_utf8(out).expect("constrained output is UTF-8");
                let value: serde_json::Value = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("{schema}: {text:?}: {e}"));
                assert!(
                    validator.is_valid(&value),
                    "{schema}: invalid output {text}"
                );
            }
        }
        assert!(
            finished >= 4,
            "{schema}: only {finished} of 12 walks finished"
        );
    }
}

#[test]
fn work_per_step_is_bounded() {
    let vocab = tiny_vocab("ab");
    let g = compile(&Spec::Regex("(a|b)*a(a|b){12}".into()), &Options::default())
        .unwrap()
        .grammar;
    let limits = Limits {
        max_work_per_step: 40,
        ..Limits::default()
    };
    let c = Constraint::new(&g, Arc::new(TokenTrie::new(&vocab)), limits).unwrap();
    // Each step builds new states for the letters seen; some step runs out of work.
    let err = random_walk_error(&c, &vocab, 5, 50);
    assert!(
        matches!(err, Some(MaskError::TooMuchWork { limit: 40 })),
        "{err:?}"
    );
}
