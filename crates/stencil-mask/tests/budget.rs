//! Token budgets: every walk that follows a budgeted mask ends complete within the budget
//! (random schemas, budgets and walks with the default model's tokenizer), a budgeted mask
//! never allows a token after which no completion fits (exhaustive search on a tiny
//! vocabulary), and the shortest known completion is never forbidden.

mod common;

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use stencil_grammar::{compile, ConstraintSpec, Options};
use stencil_mask::{Constraint, Limits, MaskError, Matcher, TokenSet, TokenTrie};
use stencil_vocab::{Vocab, VocabStyle};

/// The default model's vocabulary trie (EOS `<|im_end|>`, id 2), or `None` without
/// ../shared/data.
fn smollm2_trie() -> Option<Arc<TokenTrie>> {
    let tok = common::smollm2_tokenizer()?;
    let vocab = Vocab::from_tokenizer(&tok, vec![2]).expect("vocab");
    Some(Arc::new(TokenTrie::new(&vocab)))
}

fn compiled(spec: ConstraintSpec, trie: &Arc<TokenTrie>) -> Arc<Constraint> {
    let g = compile(&spec, &Options::default())
        .expect("compiles")
        .grammar;
    Constraint::new(&g, trie.clone(), Limits::default()).expect("constraint")
}

/// Tokens of the shortest completion from the start of `c`.
fn shortest(c: &Arc<Constraint>) -> usize {
    c.matcher()
        .unwrap()
        .min_tokens_to_finish()
        .unwrap()
        .expect("the constraint can be completed in this vocabulary")
}

/// A tiny SentencePiece-style vocabulary (`▁` is a space): each character of `chars`, the
/// `longer` tokens, then the end-of-sequence token, whose id is returned with the trie.
fn tiny_trie(chars: &str, longer: &[&str]) -> (Arc<TokenTrie>, u32) {
    let mut tokens: Vec<Option<String>> = chars.chars().map(|c| Some(c.into())).collect();
    tokens.extend(longer.iter().map(|t| Some(t.to_string())));
    let eos = tokens.len() as u32;
    tokens.push(Some("</s>".into()));
    let mut special = vec![false; tokens.len()];
    special[eos as usize] = true;
    let vocab =
        Vocab::from_token_strings(&tokens, &special, VocabStyle::SentencePiece, vec![eos]).unwrap();
    (Arc::new(TokenTrie::new(&vocab)), eos)
}

/// Schemas whose shortest instances need forced keys, nesting, recursion, bounded strings and
/// arrays, so budgets bite in many places.
fn schemas() -> Vec<serde_json::Value> {
    vec![
        json!({"type": "object", "properties": {"title": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}, "meta": {"type": "object", "properties": {"author_name": {"type": "string", "minLength": 3}, "year_of_publication": {"type": "integer"}}, "required": ["author_name", "year_of_publication"]}}, "required": ["title"], "additionalProperties": false}),
        json!({"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["value"], "additionalProperties": false}}, "$ref": "#/$defs/node"}),
        json!({"type": "array", "items": {"type": "object", "properties": {"x": {"type": "number"}, "label": {"type": "string", "maxLength": 12}}, "required": ["x", "label"]}, "minItems": 2}),
        json!({"anyOf": [{"type": "null"}, {"type": "array", "items": {"enum": ["alpha", "beta"]}, "minItems": 5}]}),
        json!({"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$", "minLength": 4}),
        json!({"type": "object", "properties": {"email": {"type": "string", "format": "email"}, "when": {"type": "string", "format": "date-time"}}, "required": ["email", "when"], "additionalProperties": {"type": "boolean"}}),
        json!({"type": "object", "properties": {"question": {"type": "string", "minLength": 1, "maxLength": 160, "pattern": "^$|(^(?:\\S+\\s+){0,30}\\S+$)"}, "answer": {"type": "string", "minLength": 1, "maxLength": 100, "pattern": "^(?:\\S+\\s+){0,9}\\S+$"}, "code": {"type": "string", "minLength": 5, "maxLength": 9, "pattern": "^[0-9A-Z]*$"}}, "required": ["question", "answer", "code"], "additionalProperties": false}),
    ]
}

/// Follows the mask with random text tokens (end-of-sequence only once nothing else is
/// allowed); returns the output, or panics on a dead end.
fn walk(m: &mut Matcher, trie: &TokenTrie, rng: &mut StdRng, eos: u32, label: &str) -> Vec<u8> {
    let mut mask = TokenSet::new(trie.vocab_size());
    let mut out = Vec::new();
    loop {
        m.compute_mask(&mut mask).unwrap();
        let text: Vec<u32> = mask.iter().filter(|&t| t != eos).collect();
        if text.is_empty() {
            assert!(
                mask.contains(eos),
                "{label}: dead end after {:?} ({:?} tokens left)",
                String::from_utf8_lossy(&out),
                m.token_budget()
            );
            return out;
        }
        // Stop early at random where the output is complete.
        if mask.contains(eos) && rng.random_bool(0.1) {
            return out;
        }
        let t = text[rng.random_range(0..text.len())];
        m.commit(t).unwrap();
        out.extend_from_slice(trie.token_bytes(t));
    }
}

/// Random budgets from the shortest known completion up, random walks over the whole
/// vocabulary (long tokens included): every output ends complete, valid and within budget.
#[test]
fn every_budgeted_walk_ends_complete_and_valid() {
    let Some(trie) = smollm2_trie() else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(5);
    for schema in schemas() {
        let validator = jsonschema::validator_for(&schema).expect("valid schema");
        let c = compiled(ConstraintSpec::JsonSchema(schema.clone()), &trie);
        let min = c.matcher().unwrap().min_tokens_to_finish().unwrap();
        let min = min.unwrap_or_else(|| panic!("{schema}: no completion"));
        assert!(min > 0);
        for round in 0..12 {
            let budget = min + rng.random_range(0..40);
            let mut m = c.matcher().unwrap();
            m.set_token_budget(Some(budget));
            let out = walk(
                &mut m,
                &trie,
                &mut rng,
                2,
                &format!("{schema} budget {budget}"),
            );
            assert!(m.is_accepting(), "{schema}: walk {round} ended incomplete");
            assert!(
                m.num_tokens() <= budget,
                "{schema}: {} > {budget} tokens",
                m.num_tokens()
            );
            let text = String::from_utf8(out).expect("UTF-8");
            let value: serde_json::Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{schema}: {text:?}: {e}"));
            assert!(validator.is_valid(&value), "{schema}: invalid {text}");
        }
        // A budget below the shortest known completion can still be met only by the exact
        // shortest tokenizations, which a walk may miss: it is the caller's error to set one.
        // At exactly the minimum, every walk finishes.
        for _ in 0..4 {
            let mut m = c.matcher().unwrap();
            m.set_token_budget(Some(min));
            walk(
                &mut m,
                &trie,
                &mut rng,
                2,
                &format!("{schema} at minimum {min}"),
            );
            assert!(m.is_accepting());
            assert!(m.num_tokens() <= min);
        }
    }
}

/// At every point of random walks, a budget of exactly the shortest known completion leaves
/// a non-empty mask, and `min_tokens_to_finish` drops by exactly one along its own
/// completion's first token... which the budgeted mask must therefore allow.
#[test]
fn a_budget_never_forbids_the_shortest_completion() {
    let Some(trie) = smollm2_trie() else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(9);
    let mut mask = TokenSet::new(trie.vocab_size());
    for schema in schemas() {
        let c = compiled(ConstraintSpec::JsonSchema(schema.clone()), &trie);
        for _ in 0..4 {
            let mut m = c.matcher().unwrap();
            for _step in 0..60 {
                let need = m.min_tokens_to_finish().unwrap().expect("completable");
                let mut tight = m.clone();
                tight.set_token_budget(Some(need));
                tight.compute_mask(&mut mask).unwrap();
                if need == 0 {
                    assert!(m.is_accepting());
                    assert!(mask.contains(2));
                } else {
                    let text: Vec<u32> = mask.iter().filter(|&t| t != 2).collect();
                    assert!(
                        !text.is_empty(),
                        "{schema}: a budget of {need} forbids everything"
                    );
                    // Some allowed token brings the need down by one.
                    let dropped = text.iter().any(|&t| {
                        let mut n = m.clone();
                        n.commit(t).is_ok() && n.min_tokens_to_finish().unwrap() == Some(need - 1)
                    });
                    assert!(
                        dropped,
                        "{schema}: no allowed token shortens the completion"
                    );
                }
                m.compute_mask(&mut mask).unwrap();
                let text: Vec<u32> = mask.iter().filter(|&t| t != 2).collect();
                if text.is_empty() {
                    break;
                }
                m.commit(text[rng.random_range(0..text.len())]).unwrap();
            }
        }
    }
}

/// Exhaustive check on a tiny vocabulary: every token a budgeted mask allows can be followed
/// by a completion within the budget (searched over all token sequences), and commit refuses
/// the tokens the mask leaves out with a typed error.
#[test]
fn budgeted_masks_allow_only_completable_tokens() {
    let (trie, eos) = tiny_trie("ab{}\":,0", &["ab", "{\"", "\":", "\"}", "aaa", "0,", "}}"]);
    let specs = [
        ConstraintSpec::Regex("(ab)+a{2,4}b".into()),
        ConstraintSpec::Regex("\\{(\"a\":0,)*\"b\":0\\}|a".into()),
        ConstraintSpec::JsonSchema(
            json!({"type": "object", "properties": {"ab": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}}, "required": ["ab"], "additionalProperties": false}),
        ),
    ];
    /// True if some token sequence of at most `n` text tokens completes `m`.
    fn completable(m: &Matcher, n: usize, text: &[u32]) -> bool {
        if m.is_accepting() {
            return true;
        }
        n > 0
            && text.iter().any(|&t| {
                let mut next = m.clone();
                next.commit(t).is_ok() && completable(&next, n - 1, text)
            })
    }
    let text: Vec<u32> = (0..eos).collect();
    budgeted_walks(&trie, eos, &specs, 4, false, |spec, m, plain, mask| {
        let left = m.token_budget().unwrap();
        for &t in &text {
            let mut next = plain.clone();
            if next.commit(t).is_err() {
                continue;
            }
            if mask.contains(t) {
                assert!(
                    completable(&next, left - 1, &text),
                    "{spec:?}: token {t} allowed with {left} left but cannot finish"
                );
            } else {
                let mut probe = m.clone();
                assert!(
                    matches!(probe.commit(t), Err(MaskError::OverBudget { .. })),
                    "{spec:?}: commit of a token the budget forbids"
                );
            }
        }
    });
}

/// Three random walks per spec under every budget from its shortest up to `extra` more, on a
/// tiny vocabulary (`eos` excluded from the walk): `check(spec, budgeted, plain, mask)` runs
/// at every step, then an allowed token is taken (the longest half the time if
/// `long_first`); a walk ends where the mask allows nothing else, which must be accepting.
fn budgeted_walks(
    trie: &Arc<TokenTrie>,
    eos: u32,
    specs: &[ConstraintSpec],
    extra: usize,
    long_first: bool,
    mut check: impl FnMut(&ConstraintSpec, &Matcher, &Matcher, &TokenSet),
) {
    let mut mask = TokenSet::new(trie.vocab_size());
    for spec in specs {
        let c = compiled(spec.clone(), trie);
        let mut rng = StdRng::seed_from_u64(3);
        let min = shortest(&c);
        for budget in min..=min + extra {
            for _ in 0..3 {
                let mut m = c.matcher().unwrap();
                m.set_token_budget(Some(budget));
                let mut plain = c.matcher().unwrap();
                loop {
                    m.compute_mask(&mut mask).unwrap();
                    check(spec, &m, &plain, &mask);
                    let allowed: Vec<u32> = (0..eos).filter(|&t| mask.contains(t)).collect();
                    if allowed.is_empty() {
                        assert!(m.is_accepting(), "{spec:?}: dead end under budget {budget}");
                        break;
                    }
                    let t = match long_first && rng.random_bool(0.5) {
                        true => *allowed
                            .iter()
                            .max_by_key(|&&t| trie.token_bytes(t).len())
                            .unwrap(),
                        false => allowed[rng.random_range(0..allowed.len())],
                    };
                    m.commit(t).unwrap();
                    plain.commit(t).unwrap();
                }
            }
        }
    }
}

/// Far from the end of a budget, steps inside recursive rules are settled by a bound on how
/// deep one token can nest them. With tokens that open many levels at once and none that
/// close several, a bound short by a level shows: along random walks under every budget from
/// the shortest up, each token the constraint allows is in the budgeted mask exactly when
/// committing it is not refused as over budget.
#[test]
fn deep_nesting_tokens_are_judged_under_budgets() {
    let specs = [
        ConstraintSpec::JsonSchema(json!({"type": "array"})),
        ConstraintSpec::JsonSchema(
            json!({"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}}, "$ref": "#/$defs/n"}),
        ),
        ConstraintSpec::JsonSchema(
            json!({"$defs": {"o": {"type": "object", "properties": {"a": {"anyOf": [{"$ref": "#/$defs/o"}, {"type": "array", "items": {"$ref": "#/$defs/o"}}]}}, "additionalProperties": false}}, "$ref": "#/$defs/o"}),
        ),
        ConstraintSpec::Gbnf("root ::= \"[\" (root (\",\" root)*)? \"]\" | \"0\"".into()),
    ];
    let tokens = [
        "[[[[[[[[",
        "{\"a\":[[[",
        "[{\"a\":{\"a\":[",
        "{\"a\":{\"a\":{\"a\":{",
        "\"a\"",
        "0,",
    ];
    assert!(budgets_agree_with_commits("[]{}\":,0a", &tokens, &specs) > 10_000);
}

/// The same for strings with a pattern and length bounds, settled by the bound of their
/// pattern and character automaton: below the minimum, near the maximum and in between.
#[test]
fn counted_strings_are_judged_under_budgets() {
    let specs = [
        ConstraintSpec::JsonSchema(
            json!({"type": "string", "minLength": 5, "maxLength": 9, "pattern": "^[1-3A-Z]*$"}),
        ),
        ConstraintSpec::JsonSchema(
            json!({"type": "string", "minLength": 1, "maxLength": 14, "pattern": "^(A+ )*A+$"}),
        ),
        ConstraintSpec::JsonSchema(
            json!({"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 6, "pattern": "^[A1]*$"}, "minItems": 1, "maxItems": 3}),
        ),
    ];
    // One token per character inside strings (so bytes are tokens there), several around
    // them. SentencePiece-style strings: `▁` is a space.
    let tokens = ["\"A", "A\"", "\",\"", "[\"", "\"]"];
    let judged = budgets_agree_with_commits("\"[],A1▁", &tokens, &specs);
    assert!(judged > 5_000, "{judged}");
}

/// Budgeted walks (see [`budgeted_walks`]) up to 40 over the shortest on a tiny vocabulary,
/// comparing the budgeted mask with `commit` for every token the constraint allows; returns
/// how many tokens were compared.
fn budgets_agree_with_commits(chars: &str, longer: &[&str], specs: &[ConstraintSpec]) -> usize {
    let (trie, eos) = tiny_trie(chars, longer);
    let mut judged = 0usize;
    budgeted_walks(&trie, eos, specs, 40, true, |spec, m, plain, mask| {
        for t in 0..eos {
            if plain.clone().commit(t).is_err() {
                continue;
            }
            let committed = m.clone().commit(t);
            assert_eq!(
                mask.contains(t),
                committed.is_ok(),
                "{spec:?}: token {:?} with {:?} left: mask and commit ({committed:?}) disagree",
                trie.token_bytes(t),
                m.token_budget()
            );
            judged += 1;
        }
    });
    judged
}

/// The budgeted mask judges tokens by groups (the state they end in) and caches bounds; it
/// must equal the token-by-token answer of `commit` (which checks each token's own parses):
/// along random walks under tight budgets, every token the constraint allows is in the
/// budgeted mask exactly when committing it is not refused as over budget.
#[test]
fn budgeted_masks_match_token_by_token_commits() {
    let Some(trie) = smollm2_trie() else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(21);
    let mut plain_mask = TokenSet::new(trie.vocab_size());
    let mut mask = TokenSet::new(trie.vocab_size());
    let mut checked = 0usize;
    let mut restricted = 0usize;
    for schema in schemas() {
        let c = compiled(ConstraintSpec::JsonSchema(schema.clone()), &trie);
        let min = shortest(&c);
        // Tight budgets judge tokens; looser ones are settled by the reach bound far from
        // the end and judged near it (past 100 extra also inside recursive rules, bounded by
        // how deep one token can nest them).
        for extra in [0, 3, 6, 15, 40, 100, 160, 240] {
            let budget = min + extra;
            let mut m = c.matcher().unwrap();
            m.set_token_budget(Some(budget));
            let mut plain = c.matcher().unwrap();
            loop {
                plain.compute_mask(&mut plain_mask).unwrap();
                m.compute_mask(&mut mask).unwrap();
                // Loose budgets walk far: a random sample of the tokens is judged there.
                let mut tokens: Vec<u32> = plain_mask.iter().filter(|&t| t != 2).collect();
                if extra >= 100 && tokens.len() > 200 {
                    tokens = (0..200)
                        .map(|_| tokens[rng.random_range(0..tokens.len())])
                        .collect();
                }
                for t in tokens {
                    let mut probe = m.clone();
                    let committed = probe.commit(t);
                    assert_eq!(
                        mask.contains(t),
                        committed.is_ok(),
                        "{schema} budget {budget}: token {t} {:?} with {:?} left: mask and commit ({committed:?}) disagree",
                        String::from_utf8_lossy(trie.token_bytes(t)),
                        m.token_budget()
                    );
                    checked += 1;
                    restricted += !mask.contains(t) as usize;
                }
                let text: Vec<u32> = mask.iter().filter(|&t| t != 2).collect();
                if text.is_empty() {
                    break;
                }
                let t = text[rng.random_range(0..text.len())];
                m.commit(t).unwrap();
                plain.commit(t).unwrap();
            }
        }
    }
    // The comparison covered both answers.
    assert!(
        restricted > 1000 && checked > restricted,
        "{restricted} of {checked}"
    );
}

/// With one token per character, the shortest completion in tokens is the shortest valid
/// instance in bytes, known here by hand from the formats' definitions: machines the search
/// has not entered yet (formats, counted strings, complements) must never be guessed longer
/// than they are, or a budget would forbid a completion that fits.
#[test]
fn shortest_completions_through_formats_are_exact() {
    let ascii: String = (0x21u8..0x7f).map(char::from).collect();
    let (trie, _) = tiny_trie(&ascii, &[]);
    let cases = [
        // "2000-01-01T00:00:00Z"
        (json!({"type": "string", "format": "date-time"}), 22),
        // ["2000-01-01","2000-01-01"]
        (
            json!({"type": "array", "items": {"type": "string", "format": "date"}, "minItems": 2}),
            27,
        ),
        // "a"
        (json!({"type": "string", "format": "hostname"}), 3),
        // {"a":"aaa"} (a counted string) before {"b":"bbbb"}
        (
            json!({"anyOf": [
                {"type": "object", "properties": {"a": {"type": "string", "minLength": 3, "maxLength": 3, "pattern": "^a+$"}}, "required": ["a"], "additionalProperties": false},
                {"type": "object", "properties": {"b": {"type": "string", "pattern": "^b{4}$"}}, "required": ["b"], "additionalProperties": false},
            ]}),
            11,
        ),
        // "::" (an IPv6 address; an IPv4 one needs 7 characters)
        (
            json!({"type": "string", "oneOf": [{"format": "ipv4"}, {"format": "ipv6"}]}),
            4,
        ),
        // {"to":"aaa@a.a"}
        (
            json!({"type": "object", "properties": {"to": {"type": "string", "pattern": "^[a-z]+@[a-z]+\\.[a-z]+$", "minLength": 7}}, "required": ["to"], "additionalProperties": false}),
            16,
        ),
        // {"b":"2000-01-01T00:00:00Z"}: no "a" can be valid (every IPv4 address is a hostname).
        (
            json!({"type": "object", "properties": {"a": {"type": "string", "format": "ipv4", "not": {"format": "hostname"}}, "b": {"type": "string", "format": "date-time"}}, "required": ["b"], "additionalProperties": false}),
            28,
        ),
    ];
    for (schema, bytes) in cases {
        let c = compiled(ConstraintSpec::JsonSchema(schema.clone()), &trie);
        assert_eq!(shortest(&c), bytes, "{schema}");
    }
}
