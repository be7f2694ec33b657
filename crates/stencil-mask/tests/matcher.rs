//! Matcher semantics: masks against an independent regex DFA (regex-automata), random
//! generation under JSON Schemas validated by the `jsonschema` crate, and the API contract
//! (EOS, special tokens, rollback, forced bytes and tokens, errors, limits). Schema keywords
//! against the validator are in `schema_keywords.rs`, bounded lengths against an exact DFA in
//! `bounded_lengths.rs`.

mod common;

use std::sync::Arc;

use common::{
    constraint, smollm2_tokenizer, tiny_vocab, tiny_vocab_with, validator_and_constraint,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use regex_automata::dfa::{dense, Automaton};
use regex_automata::{Anchored, Input};
use serde_json::json;
use stencil_grammar::{compile, ConstraintSpec, Options, Whitespace};
use stencil_mask::{BuildError, Constraint, Limits, MaskError, TokenSet, TokenTrie};
use stencil_vocab::Vocab;

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
        let c = constraint(
            ConstraintSpec::Regex(pat.into()),
            &vocab,
            Whitespace::Compact,
        );
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
        ConstraintSpec::Choice(vec!["ab".into(), "abba".into()]),
        &vocab,
        Whitespace::Compact,
    );
    let mut m = c.matcher().expect("matcher");
    let mut mask = TokenSet::new(vocab.len());
    let id = |s: &str| token_id(&vocab, s);
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
    let c = constraint(
        ConstraintSpec::JsonSchema(schema),
        &vocab,
        Whitespace::Compact,
    );
    let mut m = c.matcher().unwrap();
    assert_eq!(
        String::from_utf8(m.forced_bytes().unwrap()).unwrap(),
        "{\"name\":\""
    );
}

/// Fast-forward with a real tokenizer: the forced text tokenized as the tokenizer writes it,
/// the last token held back, every committed token allowed, and the matcher left where the
/// forced text ends (the held-back token is then allowed; the value after it is not forced).
#[test]
fn forced_tokens_are_the_tokenizers_own() {
    let Some(tok) = smollm2_tokenizer() else {
        return;
    };
    let vocab = Vocab::from_tokenizer(&tok, vec![2]).expect("vocab");
    let schema = json!({"type": "object", "properties": {"unit": {"const": "celsius"}, "temperature": {"type": "number"}}, "required": ["unit", "temperature"], "additionalProperties": false});
    let c = constraint(
        ConstraintSpec::JsonSchema(schema),
        &vocab,
        Whitespace::Compact,
    );
    let encode = |t: &str| -> Vec<u32> { tok.encode(t, false).expect("encode").get_ids().to_vec() };
    let mut m = c.matcher().unwrap();
    let forced_text = String::from_utf8(m.forced_bytes().unwrap()).unwrap();
    assert_eq!(forced_text, "{\"unit\":\"celsius\",\"temperature\":");
    let all = encode(&forced_text);
    let forced = m
        .forced_tokens(usize::MAX, |t| Ok::<_, MaskError>(encode(t)))
        .unwrap();
    assert_eq!(forced, all[..all.len() - 1], "all but the last token");
    let mut mask = TokenSet::new(vocab.len());
    m.compute_mask(&mut mask).unwrap();
    assert!(
        mask.contains(*all.last().unwrap()),
        "the held-back token comes next"
    );
    // A budget caps the run; nothing is forced once a value is open.
    let mut capped = c.matcher().unwrap();
    let two = capped
        .forced_tokens(2, |t| Ok::<_, MaskError>(encode(t)))
        .unwrap();
    assert_eq!(two, all[..2]);
    m.commit(*all.last().unwrap()).unwrap();
    let after = m
        .forced_tokens(usize::MAX, |t| Ok::<_, MaskError>(encode(t)))
        .unwrap();
    assert!(
        after.is_empty(),
        "a number is sampled, not forced: {after:?}"
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
    let g = compile(
        &ConstraintSpec::Regex("(a|b)*a(a|b){14}".into()),
        &Options::default(),
    )
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
    let Some(tok) = smollm2_tokenizer() else {
        return;
    };
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
        let g = compile(
            &ConstraintSpec::JsonSchema(schema.clone()),
            &Options::default(),
        )
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
    let g = compile(
        &ConstraintSpec::Regex("(a|b)*a(a|b){12}".into()),
        &Options::default(),
    )
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

/// A rule that can end without another byte through a call (`ws ::= (" " ws)?`, as in
/// llama.cpp's JSON grammars) lets the output end: end-of-sequence is allowed, the matcher
/// accepts, and a budget that leaves no room for more can still close the output.
#[test]
fn a_nullable_recursive_rule_at_the_end_lets_the_output_end() {
    let vocab = tiny_vocab("{} ");
    let eos = vocab.eos_ids()[0];
    let c = constraint(
        ConstraintSpec::Gbnf("root ::= \"{\" ws \"}\" ws\nws ::= ([ ] ws)?\n".into()),
        &vocab,
        Whitespace::Compact,
    );
    let id = |s: &str| token_id(&vocab, s);
    let mut m = c.matcher().expect("matcher");
    let mut mask = TokenSet::new(vocab.len());
    m.commit(id("{ }")).unwrap();
    assert!(m.is_accepting());
    m.compute_mask(&mut mask).unwrap();
    assert!(mask.contains(eos) && mask.contains(id(" ")) && !mask.contains(id("}")));
    m.commit(id("  ")).unwrap();
    assert!(m.is_accepting());
    // With a budget of two tokens, `{` then `}` must be the only way on.
    let mut m = c.matcher_with_budget(2).expect("fits");
    m.commit(id("{")).unwrap();
    m.compute_mask(&mut mask).unwrap();
    assert!(
        mask.contains(id("}")) && mask.contains(id("} ")),
        "a closing token"
    );
    assert!(!mask.contains(id(" ")), "no room for a space and then `}}`");
    m.commit(id("}")).unwrap();
    m.compute_mask(&mut mask).unwrap();
    assert!(mask.contains(eos));
}

/// Right recursion (`ws ::= ([ ] ws)?`, as in llama.cpp's JSON grammar) is a tail call: a run
/// of spaces far longer than the call-depth limit neither deepens the stack nor fails, and a
/// value after it still closes.
#[test]
fn right_recursion_runs_longer_than_the_call_depth_limit() {
    let vocab = tiny_vocab("{} ");
    let c = constraint(
        ConstraintSpec::Gbnf("root ::= \"{\" ws \"}\"\nws ::= ([ ] ws)?\n".into()),
        &vocab,
        Whitespace::Compact,
    );
    let id = |s: &str| token_id(&vocab, s);
    let mut m = c.matcher().expect("matcher");
    let mut mask = TokenSet::new(vocab.len());
    m.commit(id("{")).unwrap();
    for _ in 0..400 {
        m.compute_mask(&mut mask).unwrap();
        assert!(mask.contains(id(" ")) && mask.contains(id("}")));
        m.commit(id(" ")).unwrap();
    }
    m.commit(id("}")).unwrap();
    assert!(m.is_accepting());
}

/// The id of the token spelled `s`.
fn token_id(vocab: &Vocab, s: &str) -> u32 {
    (0..vocab.len() as u32)
        .find(|&i| vocab.token_bytes(i) == s.as_bytes())
        .expect("token")
}

/// A special token named in a Lark grammar (`<tool>`) is allowed exactly there, as the control
/// token itself; no text reaches it (a raw-byte token holding the mark byte included) and no
/// other constraint allows it.
#[test]
fn named_special_tokens_are_allowed_only_where_named() {
    let vocab = tiny_vocab_with("ab", &["<0xFF>"]);
    let eos = vocab.eos_ids()[0];
    let tool = eos + 1;
    let raw_ff = (0..vocab.len() as u32)
        .find(|&i| vocab.token_bytes(i) == [0xFF])
        .expect("the raw byte token");
    let id = |s: &str| token_id(&vocab, s);
    let c = constraint(
        ConstraintSpec::Lark("start: \"a\" <tool> \"b\"".into()),
        &vocab,
        Whitespace::Compact,
    );
    let mut m = c.matcher().expect("matcher");
    let mut mask = TokenSet::new(vocab.len());
    m.compute_mask(&mut mask).unwrap();
    assert!(mask.contains(id("a")) && !mask.contains(tool) && !mask.contains(raw_ff));
    m.commit(id("a")).unwrap();
    m.compute_mask(&mut mask).unwrap();
    assert_eq!(
        mask.iter().collect::<Vec<_>>(),
        vec![tool],
        "only the named token"
    );
    m.commit(tool).unwrap();
    m.compute_mask(&mut mask).unwrap();
    assert!(mask.contains(id("b")) && !mask.contains(tool) && !mask.contains(eos));
    m.commit(id("b")).unwrap();
    assert!(m.is_accepting());
    // Text constraints never reach it, nor the raw mark byte.
    for spec in [
        ConstraintSpec::Regex("(?s).*".into()),
        ConstraintSpec::AnyJson,
        ConstraintSpec::Lark("start: /(?s).+/".into()),
    ] {
        let c = constraint(spec, &vocab, Whitespace::Compact);
        let mut m = c.matcher().expect("matcher");
        m.compute_mask(&mut mask).unwrap();
        assert!(!mask.contains(tool) && !mask.contains(raw_ff));
    }
}

/// GBNF and Lark name tokens by text or by id: a control token by either is the token itself,
/// an ordinary token stands for its text; a name the vocabulary lacks, an id beyond it and the
/// end-of-sequence token are errors that say so when the constraint is built.
#[test]
fn tokens_named_by_text_or_id_resolve_against_the_vocabulary() {
    let vocab = tiny_vocab_with("ab", &["<x>"]);
    let eos = vocab.eos_ids()[0];
    let tool = eos + 1;
    let id = |s: &str| token_id(&vocab, s);
    let trie = Arc::new(TokenTrie::new(&vocab));
    let build = |spec: ConstraintSpec| {
        let g = compile(&spec, &Options::default())
            .expect("compiles")
            .grammar;
        Constraint::new(&g, trie.clone(), Limits::default())
    };
    let mut mask = TokenSet::new(vocab.len());
    for grammar in [
        format!("root ::= \"a\" <[{tool}]> <[{}]>", id("ab")),
        format!("start: \"a\" <tool> <[{}]>", id("ab")),
    ] {
        let spec = if grammar.starts_with("root") {
            ConstraintSpec::Gbnf(grammar.clone())
        } else {
            ConstraintSpec::Lark(grammar.clone())
        };
        let c = build(spec).unwrap_or_else(|e| panic!("{grammar}: {e}"));
        let mut m = c.matcher().unwrap();
        m.commit(id("a")).unwrap();
        m.compute_mask(&mut mask).unwrap();
        assert_eq!(mask.iter().collect::<Vec<_>>(), vec![tool], "{grammar}");
        m.commit(tool).unwrap();
        // The ordinary token by id is its text, whichever tokens write it.
        m.compute_mask(&mut mask).unwrap();
        assert!(
            mask.contains(id("ab")) && mask.contains(id("a")),
            "{grammar}"
        );
        assert!(m.accepts_after(b"ab").unwrap(), "{grammar}");
    }
    // An ordinary token named by its text: its text.
    let c = build(ConstraintSpec::Gbnf("root ::= <x> \"a\"".into())).unwrap();
    assert!(c.matcher().unwrap().accepts_after(b"<x>a").unwrap());
    let too_far = vocab.len() + 5;
    for (grammar, says) in [
        ("root ::= \"a\" <nope>".to_string(), "has no such token"),
        (format!("root ::= \"a\" <[{too_far}]>"), "has only"),
        (format!("root ::= \"a\" <[{eos}]>"), "end-of-sequence"),
        ("start: \"a\" </s>".to_string(), "end-of-sequence"),
    ] {
        let spec = if grammar.starts_with("root") {
            ConstraintSpec::Gbnf(grammar.clone())
        } else {
            ConstraintSpec::Lark(grammar.clone())
        };
        match build(spec) {
            Err(BuildError::NamedToken { reason, .. }) => {
                assert!(reason.contains(says), "{grammar}: {reason}")
            }
            other => panic!("{grammar}: {other:?}"),
        }
    }
}

/// `format: "regex"` is a subset of ECMA-262 regexes: everything it accepts the `jsonschema`
/// crate (asserting formats) accepts too, common valid patterns are in it, and invalid ones
/// (unclosed groups or classes, nothing to repeat, reversed ranges or counts) are not.
#[test]
fn regex_format_is_a_subset_of_valid_regexes() {
    let vocab = tiny_vocab("a");
    let schema = json!({"type": "string", "format": "regex"});
    let (validator, c) = validator_and_constraint(&schema, &vocab);
    let accepts = |s: &str| {
        let text = json!(s).to_string();
        c.matcher()
            .and_then(|mut m| m.accepts_after(text.as_bytes()))
            .unwrap_or_else(|e| panic!("{s}: {e}"))
    };
    let inside = [
        "",
        "([abc])+\\s+$",
        "^[a-z0-9_-]{3,16}$",
        "^\\d{1,3}(\\.\\d{1,3}){3}$",
        "a|b|",
        "(?:x)*?",
        "[^\\]]",
        "((a|b)c)?",
        "(?=a)b(?!c)",
        "a{2,10}",
        "a{0,}",
        "[-+]?[0-9]*\\.?[0-9]+",
        "é+\\u00e9\\x41",
        "^https?://[A-Za-z.]+/$",
        "\\bword\\B",
        "[\\w\\-.]+@",
    ];
    let invalid = [
        "^(abc]", "(", ")", "[a", "a{3,1}", "[z-a]", "*a", "a**", "a{2,1}", "\\", "(?", "?",
    ];
    for s in inside {
        assert!(accepts(s), "{s:?} should be in the subset");
    }
    for s in invalid {
        assert!(!accepts(s), "{s:?} is not a valid regex");
        assert!(!validator.is_valid(&json!(s)), "the validator takes {s:?}");
    }
    // Soundness on everything tried: accepted implies valid.
    let mut tried = 0;
    for s in inside.iter().chain(&invalid).copied().chain([
        "(?<=a)b",
        "(?<n>a)\\k<n>",
        "\\1",
        "[\\d-z]",
        "a{,3}",
        "\\cA",
        "x{1000}",
    ]) {
        if accepts(s) {
            assert!(validator.is_valid(&json!(s)), "{s:?} accepted but invalid");
            tried += 1;
        }
    }
    assert!(tried >= inside.len());
}
