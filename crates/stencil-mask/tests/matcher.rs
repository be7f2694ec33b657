//! Matcher semantics: masks against an independent regex DFA (regex-automata), random
//! generation under JSON Schemas validated by the `jsonschema` crate, and the API contract
//! (EOS, special tokens, rollback, forced bytes and tokens, errors, limits).

mod common;

use std::sync::Arc;

use common::smollm2_tokenizer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use regex_automata::dfa::{dense, Automaton};
use regex_automata::{Anchored, Input};
use serde_json::json;
use stencil_grammar::{compile, ConstraintSpec, Options, PropertyOrder, Whitespace};
use stencil_mask::{BuildError, Constraint, Limits, MaskError, TokenSet, TokenTrie};
use stencil_vocab::{Vocab, VocabStyle};

/// A vocabulary of every 1-3 character string over `alphabet`, plus `</s>` (EOS) and
/// `<tool>` (special, not EOS).
fn tiny_vocab(alphabet: &str) -> Vocab {
    tiny_vocab_with(alphabet, &[])
}

/// [`tiny_vocab`] plus `extra` tokens (`<0xAB>` is a raw byte, to split UTF-8 characters).
fn tiny_vocab_with(alphabet: &str, extra: &[&str]) -> Vocab {
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

fn constraint(spec: ConstraintSpec, vocab: &Vocab, ws: Whitespace) -> Arc<Constraint> {
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

/// A regex-automata DFA as an oracle of a whole output language: a prefix is allowed iff a
/// match is still reachable from its state (searched over all bytes, memoized).
struct Oracle {
    dfa: dense::DFA<Vec<u32>>,
    viable: std::collections::HashMap<regex_automata::util::primitives::StateID, bool>,
}

impl Oracle {
    fn new(re: &str) -> Self {
        Self {
            dfa: dense::Builder::new()
                .syntax(
                    regex_automata::util::syntax::Config::new()
                        .utf8(false)
                        .unicode(false),
                )
                .build(&format!("^(?:{re})$"))
                .expect("oracle"),
            viable: Default::default(),
        }
    }

    fn state(&self, bytes: &[u8]) -> regex_automata::util::primitives::StateID {
        let mut s = self
            .dfa
            .start_state_forward(&Input::new("").anchored(Anchored::Yes))
            .expect("start");
        for &b in bytes {
            s = self.dfa.next_state(s, b);
        }
        s
    }

    fn complete(&self, bytes: &[u8]) -> bool {
        let s = self.state(bytes);
        self.dfa.is_match_state(self.dfa.next_eoi_state(s))
    }

    fn allows(&mut self, bytes: &[u8]) -> bool {
        let s = self.state(bytes);
        if let Some(&v) = self.viable.get(&s) {
            return v;
        }
        let mut seen = std::collections::HashSet::from([s]);
        let mut todo = vec![s];
        let mut found = false;
        while let Some(x) = todo.pop() {
            if self.dfa.is_match_state(self.dfa.next_eoi_state(x)) {
                found = true;
                break;
            }
            for b in 0..=255u8 {
                let y = self.dfa.next_state(x, b);
                if !self.dfa.is_dead_state(y) && seen.insert(y) {
                    todo.push(y);
                }
            }
        }
        self.viable.insert(s, found);
        found
    }
}

/// Random walks where every mask must equal the oracle's verdict on every token.
fn check_walks(
    name: &str,
    c: &Arc<Constraint>,
    vocab: &Vocab,
    oracle: &mut dyn FnMut(&[u8], bool) -> bool,
    walks: usize,
    steps: usize,
    seed: u64,
) {
    let trie = c.trie().clone();
    let eos = vocab.eos_ids()[0];
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..walks {
        let mut m = c.matcher().expect("matcher");
        let mut text: Vec<u8> = Vec::new();
        let mut mask = TokenSet::new(vocab.len());
        for _ in 0..steps {
            m.compute_mask(&mut mask).expect("mask");
            let complete = oracle(&text, true);
            assert_eq!(
                mask.contains(eos),
                complete,
                "{name}: EOS after {:?}",
                String::from_utf8_lossy(&text)
            );
            for id in 0..vocab.len() as u32 {
                let bytes = trie.token_bytes(id);
                if id == eos || bytes.is_empty() {
                    continue;
                }
                let mut next = text.clone();
                next.extend_from_slice(bytes);
                assert_eq!(
                    mask.contains(id),
                    oracle(&next, false),
                    "{name}: token {:?} after {:?}",
                    String::from_utf8_lossy(bytes),
                    String::from_utf8_lossy(&text)
                );
            }
            // Prefer long tokens and rarely stop, so walks reach the far ends of the bounds.
            let allowed: Vec<u32> = mask.iter().filter(|&t| t != eos).collect();
            if allowed.is_empty() || (complete && rng.random_bool(0.1)) {
                break;
            }
            let long: Vec<u32> = allowed
                .iter()
                .copied()
                .filter(|&t| trie.token_bytes(t).len() >= 2)
                .collect();
            let pool = if !long.is_empty() && rng.random_bool(0.7) {
                long
            } else {
                allowed
            };
            let tok = pool[rng.random_range(0..pool.len())];
            m.commit(tok).expect("allowed token commits");
            text.extend_from_slice(trie.token_bytes(tok));
        }
    }
}

/// One JSON string character as a byte regex (raw, or an escape that is not a lone surrogate).
const JSON_CHAR: &str = r#"(?:[\x20\x21\x23-\x5B\x5D-\x7F]|[\xC2-\xDF][\x80-\xBF]|\xE0[\xA0-\xBF][\x80-\xBF]|[\xE1-\xEC\xEE\xEF][\x80-\xBF]{2}|\xED[\x80-\x9F][\x80-\xBF]|\xF0[\x90-\xBF][\x80-\xBF]{2}|[\xF1-\xF3][\x80-\xBF]{3}|\xF4[\x80-\x8F][\x80-\xBF]{2}|\\["\\/bfnrt]|\\u(?:[0-9a-cA-CefEF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))"#;

/// Bounded strings and arrays, whose masks share computations across positions (canonical
/// counts, and the characters-left filter of plain `maxLength` strings), against a DFA of the
/// exact output language.
#[test]
fn bounded_strings_and_arrays_match_an_independent_dfa() {
    let vocab = tiny_vocab_with("ab\"[],:{}x", &["é", "aé", "<0xC3>", "<0xA9>"]);
    let s = |max: u32| format!(r#""{JSON_CHAR}{{0,{max}}}""#);
    let cases = [
        (json!({"type": "string", "maxLength": 7}), s(7)),
        (
            json!({"type": "string", "minLength": 2, "maxLength": 9}),
            format!(r#""{JSON_CHAR}{{2,9}}""#),
        ),
        (
            json!({"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 12}),
            format!(r#"\[(?:{a}(?:,{a}){{0,11}})?\]"#, a = s(4)),
        ),
        (
            json!({"type": "object", "properties": {"x": {"type": "string", "maxLength": 10},
                   "a": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "maxItems": 15}},
                   "required": ["x", "a"], "additionalProperties": false}),
            format!(
                r#"\{{"x":{},"a":\[(?:"a"|"b")(?:,(?:"a"|"b")){{0,14}}\]\}}"#,
                s(10)
            ),
        ),
    ];
    for (i, (schema, re)) in cases.into_iter().enumerate() {
        let c = constraint(
            ConstraintSpec::JsonSchema(schema.clone()),
            &vocab,
            Whitespace::Compact,
        );
        let mut o = Oracle::new(&re);
        let mut oracle = |text: &[u8], end: bool| {
            if end {
                o.complete(text)
            } else {
                o.allows(text)
            }
        };
        check_walks(
            &format!("{schema}"),
            &c,
            &vocab,
            &mut oracle,
            10,
            60,
            40 + i as u64,
        );
    }
}

/// `pattern` with `minLength`/`maxLength` (lazily stepped, length-pruned machines) against a
/// brute-force product: a prefix is allowed iff some completion over representative
/// characters matches the pattern with a total length within the bounds.
#[test]
fn patterns_with_lengths_match_a_brute_force_product() {
    let vocab = tiny_vocab_with("ab \"", &["é", "aé", "<0xC3>", "<0xA9>"]);
    // (pattern, minLength, maxLength); representative characters: a, b, space, z.
    let cases = [
        ("^[ab]+$", 0, 5),
        ("^(ab)+$", 3, 7),
        ("a", 2, 6),
        ("^a", 0, 4),
        (r"^(\S+\s+){0,2}\S+$", 1, 8),
        ("b$", 4, 4),
        ("^(aa|bbb)*$", 5, 9),
    ];
    for (i, (pat, min, max)) in cases.into_iter().enumerate() {
        let schema = json!({"type": "string", "pattern": pat, "minLength": min, "maxLength": max});
        let c = constraint(
            ConstraintSpec::JsonSchema(schema.clone()),
            &vocab,
            Whitespace::Compact,
        );
        let content = regex_automata::meta::Regex::new(pat).expect("pattern");
        let reps = ["a", "b", " ", "z"];
        // Is there a completion `rest` (0..=max-len characters) with `content + rest` valid?
        let completes = |content_so_far: &str| -> bool {
            let n = content_so_far.chars().count();
            if n > max as usize {
                return false;
            }
            let mut frontier = vec![content_so_far.to_string()];
            for extra in 0..=(max as usize).saturating_sub(n) {
                for w in &frontier {
                    if n + extra >= min as usize && content.is_match(w) {
                        return true;
                    }
                }
                frontier = frontier
                    .iter()
                    .flat_map(|w| reps.iter().map(move |r| format!("{w}{r}")))
                    .collect();
            }
            false
        };
        let mut oracle = |text: &[u8], end: bool| -> bool {
            // A character cut at the end stands for `é` (every C3-led character is like `z`
            // to these patterns).
            let t = match std::str::from_utf8(text) {
                Ok(t) => t.to_string(),
                Err(e) if e.error_len().is_none() && !end && text[e.valid_up_to()..] == [0xC3] => {
                    format!(
                        "{}é",
                        std::str::from_utf8(&text[..e.valid_up_to()]).unwrap_or("")
                    )
                }
                Err(_) => return false,
            };
            let t = t.as_str();
            let Some(rest) = t.strip_prefix('"') else {
                return t.is_empty() && !end;
            };
            match rest.find('"') {
                None => !end && completes(rest),
                Some(q) if q + 1 == rest.len() => {
                    let n = rest[..q].chars().count();
                    n >= min as usize && n <= max as usize && content.is_match(&rest[..q])
                }
                Some(_) => false,
            }
        };
        check_walks(
            &format!("{schema}"),
            &c,
            &vocab,
            &mut oracle,
            12,
            20,
            70 + i as u64,
        );
    }
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

/// `oneOf`/`not` over string formats and counted strings (intersections worked on string
/// contents, complements of length counters subtracted lazily) accept exactly what the
/// `jsonschema` crate validates, on strings chosen to sit on every branch and boundary.
#[test]
fn combined_formats_and_lengths_match_the_validator() {
    let vocab = tiny_vocab("a");
    let label = "a".repeat(63);
    let long_host = [label.as_str(); 4].join(".");
    let candidates: Vec<String> = [
        "a",
        "example.com",
        "1.2.3.4",
        "01.2.3.4",
        "256.1.1.1",
        "1.2.3",
        "::1",
        "fe80::1",
        "1::2::3",
        "a..b",
        "-a",
        "a-",
        "ab--c",
        "xn--abc",
        "",
        "aaaa",
        "aaaaa",
        "aaaaaa",
        "b",
        "ba",
        "abab",
        "a b",
        "2001:db8::8a2e:370:7334",
    ]
    .into_iter()
    .map(String::from)
    .chain([
        label.clone(),
        format!("{label}a"),
        long_host[..253].to_string(),
        format!("{}.b", &long_host[..251]),
        long_host.clone(),
    ])
    .collect();
    let schemas = [
        json!({"type": "string", "oneOf": [{"format": "hostname"}, {"format": "ipv4"}, {"format": "ipv6"}]}),
        json!({"type": "string", "allOf": [{"format": "ipv4"}, {"not": {"format": "hostname"}}]}),
        json!({"type": "string", "oneOf": [{"maxLength": 4}, {"pattern": "^a"}]}),
        json!({"type": "string", "pattern": "^[ab]*$", "not": {"minLength": 2, "maxLength": 5}}),
        json!({"type": "string", "anyOf": [{"format": "ipv4"}, {"minLength": 5, "pattern": "b"}], "not": {"maxLength": 6}}),
    ];
    for schema in schemas {
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(&schema)
            .expect("valid schema");
        let c = constraint(
            ConstraintSpec::JsonSchema(schema.clone()),
            &vocab,
            Whitespace::Compact,
        );
        for s in &candidates {
            let value = json!(s);
            let text = value.to_string();
            let mut m = c.matcher().unwrap_or_else(|e| panic!("{schema}: {e}"));
            assert_eq!(
                m.accepts_after(text.as_bytes())
                    .unwrap_or_else(|e| panic!("{schema}: {text}: {e}")),
                validator.is_valid(&value),
                "{schema}: {text}"
            );
        }
    }
}

/// JSON Schema `pattern`s with anchors inside alternatives (`^a$|^b$`, `^$|^...$`,
/// `^(x|$)`) accept exactly the strings the `regex` engine finds a match in, for every string
/// of up to four characters over the patterns' alphabet.
#[test]
fn anchored_alternatives_in_patterns_match_a_regex_search() {
    let vocab = tiny_vocab("a");
    let patterns = [
        "^([0-9]{3})$|^(default)$",
        r"^$|^\+?([0-9]|-){2,3}$",
        "^([^,]|$)",
        "(^a|b)$",
        "^(0(-0)?$)|(^0x$)",
        "^[ab]+$|^0-[ab]$",
    ];
    let alphabet = ['a', 'b', '0', ',', '-', 'x', '+'];
    let mut candidates = vec![String::new()];
    for len in 1..=4 {
        let mut next = Vec::new();
        for s in candidates.iter().filter(|s| s.chars().count() == len - 1) {
            next.extend(alphabet.iter().map(|c| format!("{s}{c}")));
        }
        candidates.extend(next);
    }
    candidates.extend(["default", "123", "1234", "-0-", "+0-0"].map(String::from));
    for pat in patterns {
        let oracle = regex_automata::meta::Regex::new(pat).expect("pattern");
        let schema = json!({"type": "string", "pattern": pat});
        let c = constraint(
            ConstraintSpec::JsonSchema(schema),
            &vocab,
            Whitespace::Compact,
        );
        for s in &candidates {
            let text = json!(s).to_string();
            let mut m = c.matcher().unwrap();
            assert_eq!(
                m.accepts_after(text.as_bytes()).unwrap(),
                oracle.is_match(s.as_str()),
                "{pat}: {text}"
            );
        }
    }
}

/// `propertyNames` with `$ref`, `not`, `allOf` and `anyOf` over string keywords accepts
/// exactly the objects the `jsonschema` crate validates.
#[test]
fn property_names_with_applicators_match_the_validator() {
    let vocab = tiny_vocab("a");
    let schemas = [
        json!({"type": "object", "propertyNames": {"not": {"const": "0"}}}),
        json!({"type": "object", "propertyNames": {"pattern": "^[a-z0-9]+$", "not": {"enum": ["ab", "0"]}}}),
        json!({"$defs": {"dir": {"enum": ["n", "s", "ab"]}}, "type": "object", "propertyNames": {"$ref": "#/$defs/dir"}}),
        json!({"type": "object", "propertyNames": {"anyOf": [{"maxLength": 1}, {"pattern": "^a"}], "not": {"pattern": "0"}}}),
        json!({"type": "object", "propertyNames": {"allOf": [{"minLength": 2}, {"not": {"pattern": "b$"}}]}}),
    ];
    let keys = ["0", "a", "b", "n", "s", "ab", "ba", "a0", "abb", "", "A"];
    let mut objects: Vec<serde_json::Value> = vec![json!({})];
    for k in keys {
        objects.push(json!({ k: 1 }));
        objects.push(json!({ "n": true, k: null }));
    }
    for schema in schemas {
        let validator = jsonschema::validator_for(&schema).expect("valid schema");
        let c = constraint(
            ConstraintSpec::JsonSchema(schema.clone()),
            &vocab,
            Whitespace::Compact,
        );
        for o in &objects {
            let text = o.to_string();
            let mut m = c.matcher().unwrap();
            assert_eq!(
                m.accepts_after(text.as_bytes()).unwrap(),
                validator.is_valid(o),
                "{schema}: {text}"
            );
        }
    }
}

/// Negations of object schemas (`not`, `if`/`else`, `oneOf` of `required` with
/// `not: {required}`, `oneOf` of overlapping object branches), compiled as positive schemas, accept exactly the objects the
/// `jsonschema` crate validates (members in any order), and in schema order never an invalid
/// one.
#[test]
fn object_negations_match_the_validator() {
    let vocab = tiny_vocab("a");
    let typed =
        json!({"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"enum": ["s", "t"]}});
    let schemas = [
        json!({"type": "object", "properties": typed, "if": {"properties": {"c": {"const": "t"}}},
               "then": {"required": ["a", "b", "c"]}, "else": {"required": ["a", "c"]}}),
        json!({"type": "object", "properties": typed,
               "if": {"properties": {"c": {"const": "t"}}, "required": ["c"]},
               "then": {"required": ["b"]}, "else": {"properties": {"b": false}}}),
        json!({"properties": typed, "not": {"type": "object", "properties": {"b": {"minimum": 1}}, "required": ["a"]}}),
        // Names declared nowhere else: rewritten in any order only (in schema order the
        // rewrite would declare them), so checked in that order only.
        json!({"not": {"properties": {"a": {"type": "integer"}, "x": {"properties": {"a": {"const": 1}}}}}}),
        json!({"not": {"not": {"properties": {"a": {"type": "integer"}}, "required": ["b"]}}}),
        json!({"type": "object", "properties": typed, "oneOf": [
            {"required": ["a", "b"], "not": {"required": ["c"]}},
            {"required": ["c"], "not": {"required": ["a", "b"]}}]}),
        json!({"anyOf": [{"not": {"required": ["a"]}}, {"required": ["b"]}]}),
        json!({"allOf": [{"not": {"required": ["a", "b"]}}, {"properties": typed}]}),
        // `oneOf` over object branches open to any other member, told apart by `not` of
        // the others (no complement), with and without `$ref`.
        json!({"type": "object", "oneOf": [
            {"properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"properties": {"b": {"type": "integer"}}, "required": ["b"]},
            {"properties": {"c": {"enum": ["s", "t"]}}, "required": ["c"]}]}),
        json!({"oneOf": [{"$ref": "#/$defs/p"}, {"$ref": "#/$defs/q"}],
               "$defs": {"p": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                         "q": {"properties": {"b": {"const": 1}}}}}),
    ];
    let values = [
        json!(1),
        json!("s"),
        json!("t"),
        json!({"a": 1}),
        json!(null),
    ];
    let mut instances = vec![json!(0), json!("a"), json!(null), json!([]), json!({})];
    for mask in 1..(1u32 << 4) {
        for (i, v) in values.iter().enumerate() {
            let mut o = serde_json::Map::new();
            for (k, key) in ["a", "b", "c", "x"].iter().enumerate() {
                if mask & (1 << k) != 0 {
                    o.insert(key.to_string(), values[(i + k) % values.len()].clone());
                }
            }
            instances.push(serde_json::Value::Object(o));
            let _ = v;
        }
    }
    for (i, schema) in schemas.into_iter().enumerate() {
        let orders = match i {
            3 => &[PropertyOrder::Any][..],
            _ => &[PropertyOrder::Any, PropertyOrder::Schema],
        };
        check_against_validator(&vocab, &schema, &instances, orders);
    }
}

/// Runs every instance through `schema` compiled in each of `orders`: in any member order the
/// verdict must be the `jsonschema` crate's, in schema order never an acceptance it rejects.
/// Returns how many instances the crate finds valid and invalid.
fn check_against_validator(
    vocab: &Vocab,
    schema: &serde_json::Value,
    instances: &[serde_json::Value],
    orders: &[PropertyOrder],
) -> (usize, usize) {
    let validator = jsonschema::validator_for(schema).expect("valid schema");
    let (mut valid, mut invalid) = (0, 0);
    for &order in orders {
        let opts = Options {
            property_order: order,
            ..Options::default()
        };
        let spec = ConstraintSpec::JsonSchema(schema.clone());
        let g = compile(&spec, &opts)
            .unwrap_or_else(|e| panic!("{schema} ({order:?}): {e}"))
            .grammar;
        let trie = Arc::new(TokenTrie::new(vocab));
        let c = Constraint::new(&g, trie, Limits::default()).expect("constraint");
        for o in instances {
            let text = o.to_string();
            let accepted = c
                .matcher()
                .and_then(|mut m| m.accepts_after(text.as_bytes()))
                .unwrap_or_else(|e| panic!("{schema} ({order:?}): {text}: {e}"));
            let expected = validator.is_valid(o);
            match order {
                PropertyOrder::Any => {
                    assert_eq!(accepted, expected, "{schema}: {text}");
                    *(if expected { &mut valid } else { &mut invalid }) += 1;
                }
                _ => assert!(!accepted || expected, "{schema} (schema order): {text}"),
            }
        }
    }
    (valid, invalid)
}

/// Negations pushed down to where no complement of objects or arrays is needed (arrays by
/// `contains` of the items' negation, counts, `if`/`then`/`else`, dependencies, `anyOf`
/// mixing scalars, objects and `$ref`s, scalar keywords beside object ones, `oneOf` branches
/// told apart by nested objects whose names are declared nowhere else) accept exactly what the
/// `jsonschema` crate validates in any member order, and never an invalid value in schema
/// order.
#[test]
fn negations_pushed_down_match_the_validator() {
    let vocab = tiny_vocab("a");
    let shape = |forbidden: &[&str], required: &[&str], kind: &str| {
        let never: serde_json::Map<String, serde_json::Value> = forbidden
            .iter()
            .map(|n| (n.to_string(), json!({"not": {}})))
            .collect();
        json!({"properties": {"d": {"properties": never, "required": required}, "k": {"const": kind}}})
    };
    let schemas = [
        json!({"not": {"type": "array", "items": {"type": "integer"}, "minItems": 1}}),
        json!({"not": {"contains": {"type": "string"}, "maxItems": 2}}),
        json!({"not": {"minLength": 2, "required": ["a"], "minimum": 1}}),
        json!({"not": {"minProperties": 2, "maxProperties": 2}}),
        json!({"not": {"if": {"required": ["a"]}, "then": {"required": ["b"]}, "else": {"maxProperties": 0}}}),
        json!({"not": {"dependentRequired": {"a": ["b"]}}}),
        json!({"not": {"dependentSchemas": {"a": {"properties": {"b": {"type": "string"}}}}}}),
        json!({"not": {"anyOf": [{"type": "string"}, {"required": ["a"]}, {"$ref": "#/$defs/p"}]},
               "$defs": {"p": {"type": "array", "maxItems": 1}}}),
        json!({"not": {"allOf": [{"$ref": "#/$defs/o"}, {"properties": {"b": {"type": "array", "items": {"const": 1}}}}]},
               "$defs": {"o": {"type": "object", "required": ["a"]}}}),
        json!({"type": "object", "properties": {"d": {"type": "object"}}, "oneOf": [
            shape(&["b"], &["a"], "x"), shape(&["a"], &["b"], "y"), shape(&["c"], &["a", "b"], "z")]}),
    ];
    let leaves = [json!(1), json!("s"), json!([1]), json!({"a": 1})];
    let mut instances = vec![
        json!(0),
        json!(2.5),
        json!("a"),
        json!("abc"),
        json!(null),
        json!(true),
        json!([]),
        json!([1, 2]),
        json!(["x"]),
        json!([1, "x", 3]),
        json!([[1], {}]),
        json!({}),
    ];
    for mask in 1..(1u32 << 4) {
        for shift in 0..leaves.len() {
            let mut o = serde_json::Map::new();
            for (k, key) in ["a", "b", "d", "k"].iter().enumerate() {
                if mask & (1 << k) != 0 {
                    let v = match *key {
                        "k" => json!(["x", "y", "z", "w"][shift]),
                        "d" => {
                            let mut d = serde_json::Map::new();
                            for (j, n) in ["a", "b", "c"].iter().enumerate() {
                                if (shift + j) % 3 != 0 || shift == 3 {
                                    d.insert(n.to_string(), json!(j));
                                }
                            }
                            serde_json::Value::Object(d)
                        }
                        _ => leaves[(shift + k) % leaves.len()].clone(),
                    };
                    o.insert(key.to_string(), v);
                }
            }
            instances.push(serde_json::Value::Object(o));
        }
    }
    for schema in schemas {
        let orders = [PropertyOrder::Any, PropertyOrder::Schema];
        let (valid, invalid) = check_against_validator(&vocab, &schema, &instances, &orders);
        assert!(
            valid > 0 && invalid > 0,
            "{schema}: {valid} valid, {invalid} invalid"
        );
    }
}

/// Arrays of one, two and three of `values` (the third from every `step`-th value).
fn arrays_of(values: &[serde_json::Value], step: usize) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for a in values {
        out.push(json!([a]));
        for b in values {
            out.push(json!([a, b]));
            for c in values.iter().step_by(step) {
                out.push(json!([a, b, c]));
            }
        }
    }
    out
}

/// Compiles `schema` under `opts` and checks that the matcher accepts each text exactly when
/// the `jsonschema` crate validates its value; returns how many it accepted and rejected.
fn agree_with_validator(
    schema: &serde_json::Value,
    opts: &Options,
    vocab: &Vocab,
    texts: impl IntoIterator<Item = (String, serde_json::Value)>,
) -> (usize, usize) {
    let validator = jsonschema::validator_for(schema).expect("valid schema");
    let g = compile(&ConstraintSpec::JsonSchema(schema.clone()), opts)
        .unwrap_or_else(|e| panic!("{schema}: {e}"))
        .grammar;
    let c = Constraint::new(&g, Arc::new(TokenTrie::new(vocab)), Limits::default())
        .expect("constraint");
    let (mut valid, mut invalid) = (0, 0);
    for (text, value) in texts {
        let accepted = c
            .matcher()
            .and_then(|mut m| m.accepts_after(text.as_bytes()))
            .unwrap_or_else(|e| panic!("{schema}: {text}: {e}"));
        assert_eq!(
            accepted,
            validator.is_valid(&value),
            "{schema} {opts:?}: {text}"
        );
        valid += accepted as usize;
        invalid += !accepted as usize;
    }
    (valid, invalid)
}

/// `uniqueItems` over items drawn from a finite set (enums, booleans, integer ranges), compiled
/// as a set of written members: exactly the arrays the `jsonschema` crate validates, numbers
/// equal by value (`1` and `1.0` are duplicates), in both property orders and with whitespace.
#[test]
fn unique_items_over_finite_sets_match_the_validator() {
    let vocab = tiny_vocab("a");
    let schemas = [
        json!({"type": "array", "uniqueItems": true, "items": {"enum": ["red", "green", "blue"]}}),
        json!({"type": "array", "uniqueItems": true, "items": {"type": "boolean"}, "minItems": 2}),
        json!({"type": "array", "uniqueItems": true, "items": {"type": "integer", "minimum": 1, "exclusiveMaximum": 7, "multipleOf": 2}}),
        json!({"type": "array", "uniqueItems": true, "maxItems": 2, "items": {"enum": [1, "1", null, 2.5, true], "not": {"const": true}}}),
        json!({"uniqueItems": true, "items": {"$ref": "#/$defs/c"}, "$defs": {"c": {"enum": ["x", "y"]}}}),
    ];
    let values = [
        json!("red"),
        json!("blue"),
        json!("green"),
        json!(true),
        json!(false),
        json!(1),
        json!(1.0),
        json!(2),
        json!(4),
        json!(6),
        json!("1"),
        json!(null),
        json!(2.5),
        json!("x"),
        json!("y"),
    ];
    let mut instances = vec![json!([]), json!({}), json!("x")];
    instances.extend(arrays_of(&values, 2));
    for schema in schemas {
        for order in [PropertyOrder::Any, PropertyOrder::Schema] {
            let opts = Options {
                property_order: order,
                ..Options::default()
            };
            // `1.0` written as such (serde_json writes it so), and with spaces.
            let texts = instances.iter().flat_map(|o| {
                [o.to_string(), o.to_string().replace(',', " , ")].map(|t| (t, o.clone()))
            });
            let (valid, _) = agree_with_validator(&schema, &opts, &vocab, texts);
            assert!(valid >= 4, "{schema}: only {valid} valid instances tried");
        }
    }
}

/// `uniqueItems` over items that are not a finite set, kept by the matcher on the text:
/// exactly the arrays the `jsonschema` crate validates (numbers equal by value, strings after
/// escapes, objects whatever their member order; nested and positional items; both property
/// orders, with whitespace).
#[test]
fn distinct_items_match_the_validator() {
    let vocab = tiny_vocab("a");
    let schemas = [
        json!({"type": "array", "uniqueItems": true, "items": {"type": "string"}}),
        json!({"type": "array", "uniqueItems": true, "items": {"type": "number"}, "maxItems": 3}),
        json!({"type": "array", "uniqueItems": true}),
        json!({"type": "array", "uniqueItems": true, "items": {"type": "object", "properties": {"k": {"type": "string"}, "v": {"type": "integer"}}, "required": ["k"]}}),
        json!({"type": "array", "uniqueItems": true, "items": {"type": "array", "uniqueItems": true, "items": {"type": "integer"}}}),
        json!({"type": "array", "uniqueItems": true, "prefixItems": [{"type": "string"}], "items": {"type": ["string", "integer"]}}),
        json!({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": true, "items": {"$ref": "#/$defs/s"}}, "b": {"type": "array", "uniqueItems": true, "items": {"$ref": "#/$defs/s"}}}, "$defs": {"s": {"type": "string"}}}),
        json!({"anyOf": [{"type": "array", "uniqueItems": true, "items": {"type": "string"}}, {"type": "integer"}]}),
    ];
    let values = [
        json!("a"),
        json!("b"),
        json!("\\u0061"),
        json!(1),
        json!(1.0),
        json!(10),
        json!({"k": "a", "v": 1}),
        json!({"v": 1, "k": "a"}),
        json!({"k": "a"}),
        json!([1, 2]),
        json!([2, 1]),
        json!([1, 1]),
        json!(null),
    ];
    let mut instances = vec![
        json!([]),
        json!(3),
        json!({"a": ["x", "y"], "b": ["x", "y"]}),
        json!({"a": ["x", "x"], "b": ["y"]}),
        json!({"a": ["x"], "b": ["y", "y"]}),
        // The same item in two different arrays is no repeat.
        json!({"a": ["x"], "b": ["x"]}),
        json!({"a": [], "b": ["x", "y", "z"]}),
    ];
    instances.extend(arrays_of(&values, 3));
    for schema in schemas {
        for order in [PropertyOrder::Any, PropertyOrder::Schema] {
            let opts = Options {
                property_order: order,
                ..Options::default()
            };
            // The escape written as such (`"\u0061"` is `"a"`), and with spaces; under schema
            // order, only objects in it.
            let texts = instances.iter().flat_map(|o| {
                let text = o.to_string().replace("\\\\u0061", "\\u0061");
                [text.clone(), text.replace(',', " , ")]
                    .map(|t| (serde_json::from_str(&t).unwrap(), t))
                    .into_iter()
                    .filter(|(v, _)| order == PropertyOrder::Any || in_schema_order(v))
                    .map(|(v, t)| (t, v))
            });
            let (valid, invalid) = agree_with_validator(&schema, &opts, &vocab, texts);
            assert!(
                valid >= 4 && invalid >= 4,
                "{schema}: {valid} valid, {invalid} invalid"
            );
        }
    }
}

/// True if every object in `v` writes `k` before `v` (the schema order of the test schemas).
fn in_schema_order(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Object(m) => {
            let keys: Vec<&String> = m.keys().collect();
            let k = keys.iter().position(|x| *x == "k");
            let v2 = keys.iter().position(|x| *x == "v");
            !matches!((k, v2), (Some(a), Some(b)) if a > b) && m.values().all(in_schema_order)
        }
        serde_json::Value::Array(a) => a.iter().all(in_schema_order),
        _ => true,
    }
}

/// Masks under distinct items never let a repeat through: random walks over a vocabulary of
/// JSON pieces (tokens that close an item, close it and open the next, or close the array)
/// end valid, and no walk meets a dead end where an item can always be made longer.
#[test]
fn distinct_item_masks_never_allow_a_repeat() {
    let vocab = tiny_vocab("ab\"[],{}:k ");
    let eos = vocab.eos_ids()[0];
    let schemas = [
        json!({"type": "array", "uniqueItems": true, "maxItems": 5, "items": {"type": "string", "pattern": "^[ab]+$"}}),
        json!({"type": "array", "uniqueItems": true, "maxItems": 4, "items": {"type": "object", "properties": {"k": {"type": "string", "pattern": "^[ab]+$"}}, "required": ["k"], "additionalProperties": false}}),
    ];
    for (schema, ws) in schemas
        .iter()
        .flat_map(|s| [(s, Whitespace::Compact), (s, Whitespace::default())])
    {
        let validator = jsonschema::validator_for(schema).expect("valid schema");
        let c = constraint(ConstraintSpec::JsonSchema(schema.clone()), &vocab, ws);
        let mut rng = StdRng::seed_from_u64(11);
        let mut mask = TokenSet::new(vocab.len());
        let mut finished = 0;
        for walk in 0..300 {
            let mut m = c.matcher().unwrap();
            let mut text = String::new();
            for _ in 0..120 {
                m.compute_mask(&mut mask).unwrap();
                let allowed: Vec<u32> = mask.iter().collect();
                assert!(
                    !allowed.is_empty(),
                    "{schema}: walk {walk} stuck after {text}"
                );
                if mask.contains(eos) {
                    finished += 1;
                    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                    assert!(validator.is_valid(&v), "{schema}: {text}");
                    break;
                }
                // Half the time a token that closes something, to make repeats likely.
                let closing: Vec<u32> = allowed
                    .iter()
                    .copied()
                    .filter(|&t| vocab.token_bytes(t).iter().any(|b| b"\"]},".contains(b)))
                    .collect();
                let pool = if !closing.is_empty() && rng.random_bool(0.5) {
                    &closing
                } else {
                    &allowed
                };
                let t = pool[rng.random_range(0..pool.len())];
                m.commit(t).unwrap();
                text.push_str(std::str::from_utf8(vocab.token_bytes(t)).unwrap());
            }
        }
        assert!(finished >= 100, "{schema}: {finished} walks finished");
    }
}

/// `allOf` over object schemas whose patterns and `additionalProperties` differ: each keeps its
/// own rule for each key (declared, matched by its patterns, or left to its
/// `additionalProperties`), exactly as the `jsonschema` crate validates.
#[test]
fn object_schemas_with_patterns_in_all_of_match_the_validator() {
    let vocab = tiny_vocab("a");
    let schemas = [
        json!({"allOf": [
            {"patternProperties": {"^a": {"type": "integer"}}, "additionalProperties": false},
            {"properties": {"ab": {"minimum": 5}, "c": {"type": "string"}}, "patternProperties": {"b$": {"maximum": 10}}}
        ]}),
        json!({"type": "object", "minProperties": 2, "allOf": [
            {"patternProperties": {"^.{1,2}$": false}},
            {"patternProperties": {"a": true}, "additionalProperties": false},
            {"patternProperties": {"b": true}, "additionalProperties": false}
        ]}),
        json!({"allOf": [
            {"properties": {"x": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
            {"patternProperties": {"^x": {"minimum": 3}, "^y": {"maxLength": 2}}},
            {"patternProperties": {"^x": {"maximum": 9}}, "required": ["x"]}
        ]}),
    ];
    let keys = [
        "a", "ab", "abc", "b", "ba", "bab", "c", "x", "xy", "y", "yy", "abcd",
    ];
    let values = [
        json!(1),
        json!(7),
        json!(12),
        json!("s"),
        json!("long"),
        json!(null),
    ];
    let mut instances = vec![json!({}), json!([]), json!(1)];
    for (i, k) in keys.iter().enumerate() {
        for v in &values {
            instances.push(json!({ *k: v }));
            instances.push(json!({"x": 5, *k: v}));
            for k2 in keys.iter().skip(i + 1).step_by(2) {
                for v2 in values.iter().step_by(2) {
                    instances.push(json!({ *k: v, *k2: v2 }));
                }
            }
        }
    }
    let opts = Options {
        property_order: PropertyOrder::Any,
        ..Options::default()
    };
    for schema in schemas {
        let texts = instances.iter().map(|o| (o.to_string(), o.clone()));
        let (valid, invalid) = agree_with_validator(&schema, &opts, &vocab, texts);
        assert!(
            valid >= 5 && invalid >= 5,
            "{schema}: {valid} valid, {invalid} invalid"
        );
    }
}

/// A recursive `$ref` inside `allOf` (a tree whose nested nodes must also satisfy another
/// schema): the merge is unfolded once and becomes a rule where it recurs, exactly as the
/// `jsonschema` crate validates, at every depth tried.
#[test]
fn recursive_refs_inside_all_of_match_the_validator() {
    let vocab = tiny_vocab("a");
    let schemas = [
        json!({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {
            "v": {"type": "integer"},
            "kids": {"type": "array", "items": {"allOf": [{"$ref": "#/$defs/node"}, {"required": ["v"]}]}}
        }}}}),
        json!({"$defs": {"foo": {"type": "object", "properties": {
            "kid": {"allOf": [{"$ref": "#/$defs/foo"}, {"$ref": "#/$defs/small"}]},
            "v": {"type": "integer"}
        }}, "small": {"maxProperties": 1}}, "anyOf": [{"$ref": "#/$defs/foo"}, {"type": "null"}]}),
    ];
    let mut instances = vec![json!(null), json!({}), json!(1)];
    let leaves = [
        json!({}),
        json!({"v": 1}),
        json!({"v": "x"}),
        json!({"kid": null}),
    ];
    let mut level: Vec<serde_json::Value> = leaves.to_vec();
    for _ in 0..3 {
        let mut next = Vec::new();
        for (i, a) in level.iter().enumerate() {
            next.push(json!({"kids": [a]}));
            next.push(json!({"v": 2, "kids": [a, {"v": 3}]}));
            next.push(json!({"kid": a}));
            if i % 2 == 0 {
                next.push(json!({"kid": a, "v": 1}));
            }
        }
        instances.extend(next.iter().cloned());
        level = next.into_iter().step_by(3).collect();
    }
    // Unbounded, and unrolled to a depth (as generation does) deeper than any instance.
    for (schema, max_recursion) in schemas.iter().flat_map(|s| [(s, None), (s, Some(6))]) {
        let opts = Options {
            property_order: PropertyOrder::Any,
            max_recursion,
            ..Options::default()
        };
        let texts = instances.iter().map(|o| (o.to_string(), o.clone()));
        let (valid, invalid) = agree_with_validator(schema, &opts, &vocab, texts);
        assert!(
            valid >= 5 && invalid >= 5,
            "{schema}: {valid} valid, {invalid} invalid"
        );
    }
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
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .expect("valid schema");
    let c = constraint(
        ConstraintSpec::JsonSchema(schema.clone()),
        &vocab,
        Whitespace::Compact,
    );
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
