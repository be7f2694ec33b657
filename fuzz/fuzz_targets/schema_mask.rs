//! Fuzz target: schema (or regex) -> compile -> mask walk.
//!
//! The input's first line is a JSON Schema (or, if it is not JSON, a regex); the remaining
//! bytes drive a walk: each byte picks an allowed token (or a rollback); the first of them also
//! picks the object member order (schema or any) and bounded or unbounded recursion. Invariants checked:
//! no panic, every token taken from the mask commits, rollback restores the previous mask,
//! EOS is in the mask exactly when the matcher accepts.

#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use stencil_grammar::{compile, ConstraintSpec, Options, PropertyOrder, Whitespace};
use stencil_mask::{Constraint, Limits, TokenSet, TokenTrie};
use stencil_vocab::{Vocab, VocabStyle};

fn trie() -> &'static Arc<TokenTrie> {
    static TRIE: OnceLock<Arc<TokenTrie>> = OnceLock::new();
    TRIE.get_or_init(|| {
        // Single characters, JSON punctuation runs and a few words: tokens that span lexemes.
        let mut toks: Vec<Option<String>> = (0x20u8..0x7f)
            .map(|b| Some((b as char).to_string()))
            .collect();
        for t in [
            "{\"", "\":", "\",\"", "\"}", "[\"", "\"]", "true", "false", "null", "12", "0.5", "e+",
            "ab", " \"", "\\n", "é", "中文", "\n  ",
        ] {
            toks.push(Some(t.to_string()));
        }
        toks.push(Some("</s>".into()));
        let eos = toks.len() as u32 - 1;
        let mut special = vec![false; toks.len()];
        special[eos as usize] = true;
        let vocab =
            Vocab::from_token_strings(&toks, &special, VocabStyle::SentencePiece, vec![eos])
                .expect("vocab");
        Arc::new(TokenTrie::new(&vocab))
    })
}

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let (head, walk) = data.split_at(split);
    let spec = match serde_json::from_slice::<serde_json::Value>(head) {
        Ok(v) => ConstraintSpec::JsonSchema(v),
        Err(_) => match std::str::from_utf8(head) {
            Ok(re) => ConstraintSpec::Regex(re.to_string()),
            Err(_) => return,
        },
    };
    let opts = Options {
        whitespace: Whitespace::Flexible { max: 2 },
        limits: stencil_grammar::CompileLimits {
            max_schema_bytes: 1 << 16,
            max_expr_nodes: 200_000,
        },
        // The walk's first byte (unused by the walk) picks the member order and whether
        // recursion is unrolled (bounded at 2 levels) or unbounded.
        property_order: if walk.get(1).is_some_and(|b| b & 1 == 1) {
            PropertyOrder::Any
        } else {
            PropertyOrder::Schema
        },
        max_recursion: walk.get(1).is_some_and(|b| b & 2 == 2).then_some(2),
        ..Options::default()
    };
    let Ok(compiled) = compile(&spec, &opts) else {
        return;
    };
    let limits = Limits {
        max_nfa_states: 200_000,
        max_dfa_states: 20_000,
        max_intersection_states: 5_000,
        max_work_per_step: 2_000_000,
        ..Limits::default()
    };
    let trie = trie();
    let Ok(constraint) = Constraint::new(&compiled.grammar, trie.clone(), limits) else {
        return;
    };
    let Ok(mut m) = constraint.matcher() else {
        return;
    };
    let eos = trie.eos_ids()[0];
    let mut mask = TokenSet::new(trie.vocab_size());
    let mut prev: Vec<TokenSet> = Vec::new();
    for &b in walk.iter().skip(1) {
        if m.compute_mask(&mut mask).is_err() {
            return; // a typed limit error is fine
        }
        assert_eq!(mask.contains(eos), m.is_accepting(), "EOS iff accepting");
        if b == 0xFF && !prev.is_empty() {
            m.rollback(1).expect("rollback");
            let before = prev.pop().expect("saved mask");
            m.compute_mask(&mut mask).expect("mask after rollback");
            assert_eq!(mask, before, "rollback restores the mask");
            continue;
        }
        let allowed: Vec<u32> = mask.iter().filter(|&t| t != eos).collect();
        if allowed.is_empty() {
            break;
        }
        let t = allowed[b as usize % allowed.len()];
        prev.push(mask.clone());
        m.commit(t).expect("a token from the mask commits");
    }
});
