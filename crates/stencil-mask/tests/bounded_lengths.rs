//! Bounded strings and arrays, and patterns with lengths, against an oracle of the exact output
//! language (a regex-automata DFA, or a brute-force product): random walks where every mask
//! must equal the oracle's verdict on every token.

mod common;

use std::sync::Arc;

use common::{constraint, tiny_vocab_with};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use regex_automata::dfa::{dense, Automaton};
use regex_automata::{Anchored, Input};
use serde_json::json;
use stencil_grammar::{ConstraintSpec, Whitespace};
use stencil_mask::{Constraint, TokenSet};
use stencil_vocab::Vocab;

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
