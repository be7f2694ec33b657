//! Generation with the real default model: determinism, stop strings, streaming, templates,
//! truncation and error paths.

mod common;

use std::sync::OnceLock;

use stencil_runtime::chat::build_prompt;
use stencil_runtime::generate::{generate, FinishReason, Generator};
use stencil_runtime::hub::ModelFiles;
use stencil_runtime::loader::{load, LoadOptions, LoadedModel};
use stencil_runtime::RuntimeError;
use stencil_types::{ChatMessage, GenerateParams, SamplingParams, TruncationPolicy};

fn model() -> &'static LoadedModel {
    static M: OnceLock<LoadedModel> = OnceLock::new();
    M.get_or_init(|| {
        let files = ModelFiles::Gguf(common::default_model().to_path_buf());
        load(&files, &LoadOptions::default(), |_, _| {}).unwrap()
    })
}

fn chat_prompt(user: &str) -> Vec<u32> {
    let m = model();
    build_prompt(
        &m.template,
        &m.tokenizer,
        &[ChatMessage::user(user)],
        None,
        m.model.context_length(),
        1,
        TruncationPolicy::Error,
    )
    .unwrap()
    .tokens
}

/// Greedy decoding of at most `max_tokens`, no stop strings.
fn greedy(max_tokens: usize) -> GenerateParams {
    GenerateParams {
        max_tokens,
        ..Default::default()
    }
}

fn run(prompt: &[u32], params: &GenerateParams) -> stencil_runtime::generate::Generation {
    let m = model();
    generate(m.model.as_ref(), &m.tokenizer, prompt, params, None, |_| {}).unwrap()
}

#[test]
fn gguf_chat_template_renders_chatml_with_default_system() {
    let m = model();
    let text = m
        .template
        .render(&[ChatMessage::user("Hi")], true, None)
        .unwrap();
    assert!(m.template_source.as_deref().unwrap().contains("im_start"));
    assert!(text.starts_with("<|im_start|>system\n"), "{text}");
    assert!(
        text.ends_with("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
        "{text}"
    );
    let with_system = m
        .template
        .render(
            &[ChatMessage::system("Be terse."), ChatMessage::user("Hi")],
            true,
            None,
        )
        .unwrap();
    assert!(
        with_system.starts_with("<|im_start|>system\nBe terse.<|im_end|>\n"),
        "{with_system}"
    );
}

#[test]
fn greedy_answers_and_stops_at_eos() {
    let g = run(
        &chat_prompt("What is the capital of France? Answer in one sentence."),
        &greedy(40),
    );
    assert!(g.text.contains("Paris"), "{:?}", g.text);
    assert_eq!(g.finish_reason, FinishReason::Stop);
    assert!(!g.text.contains("<|im_end|>"));
    assert!(model()
        .tokenizer
        .eos_ids()
        .contains(g.tokens.last().unwrap()));
}

#[test]
fn seeded_sampling_is_reproducible() {
    let prompt = chat_prompt("Write a short poem about the sea.");
    let params = |seed| GenerateParams {
        max_tokens: 24,
        sampling: SamplingParams {
            temperature: 1.0,
            top_p: Some(0.95),
            seed: Some(seed),
            ..Default::default()
        },
        ..Default::default()
    };
    let a = run(&prompt, &params(42));
    let b = run(&prompt, &params(42));
    assert_eq!(a.tokens, b.tokens);
    assert_eq!(a.text, b.text);
    let others: Vec<Vec<u32>> = (1..4).map(|s| run(&prompt, &params(s)).tokens).collect();
    assert!(
        others.iter().any(|t| *t != a.tokens),
        "different seeds should differ"
    );
}

#[test]
fn max_tokens_gives_length() {
    let g = run(&chat_prompt("Count from 1 to 100."), &greedy(5));
    assert_eq!(g.finish_reason, FinishReason::Length);
    assert_eq!(g.usage.completion_tokens, 5);
}

#[test]
fn stop_string_spanning_tokens_is_not_emitted() {
    let prompt = chat_prompt("Count from 1 to 20, separated by commas.");
    let full = run(&prompt, &greedy(60));
    // Pick a stop string that starts inside one token and ends in a later one.
    let m = model();
    let pieces: Vec<String> = full
        .tokens
        .iter()
        .map(|&t| String::from_utf8_lossy(m.tokenizer.vocab().token_bytes(t)).into_owned())
        .collect();
    // The last character of one token plus the whole next token.
    let stop = pieces
        .windows(2)
        .skip(4)
        .find_map(|w| {
            let last = w[0].chars().last()?;
            (last.is_ascii_digit() && !w[1].is_empty()).then(|| format!("{last}{}", w[1]))
        })
        .expect("a two-token window ending in a digit");
    let at = full
        .text
        .find(&stop)
        .expect("stop occurs in the greedy output");
    let g = run(
        &prompt,
        &GenerateParams {
            max_tokens: 60,
            stop: vec![stop.clone()],
            ..Default::default()
        },
    );
    assert_eq!(g.finish_reason, FinishReason::Stop);
    assert_eq!(g.matched_stop.as_deref(), Some(stop.as_str()));
    assert_eq!(g.text, full.text[..at], "stop {stop:?}");
}

#[test]
fn streaming_chunks_are_whole_characters_and_join_to_the_text() {
    let prompt = chat_prompt("Translate to Chinese: I love programming and good food. 🍜");
    let m = model();
    let params = greedy(48);
    let mut gen = Generator::new(m.model.as_ref(), &m.tokenizer, &prompt, &params, None).unwrap();
    let mut chunks = Vec::new();
    for c in gen.by_ref() {
        chunks.push(c.unwrap());
    }
    let g = gen.into_generation().unwrap();
    assert_eq!(chunks.concat(), g.text);
    // No character is broken mid-stream. Only where `max_tokens` cut the output inside a
    // character does the text end with one U+FFFD (`TextStream::finish`).
    let body = match g.finish_reason {
        FinishReason::Length => g.text.strip_suffix('\u{FFFD}').unwrap_or(&g.text),
        FinishReason::Stop => &g.text,
    };
    assert!(!body.contains('\u{FFFD}'), "{:?}", g.text);
    assert!(
        g.text.chars().any(|c| c as u32 > 0x2E80),
        "expected CJK output: {:?}",
        g.text
    );
    // At least one CJK character was split across tokens: each chunk is still valid UTF-8.
    let split = g
        .tokens
        .iter()
        .any(|&t| std::str::from_utf8(m.tokenizer.vocab().token_bytes(t)).is_err());
    assert!(
        split,
        "no token split a character; the test would prove nothing"
    );
}

#[test]
fn prompt_too_long_is_an_error_or_truncated() {
    let m = model();
    let long = "word ".repeat(3000);
    let mut messages = vec![ChatMessage::system("You are helpful.")];
    for i in 0..4 {
        messages.push(ChatMessage::user(&format!("{i} {long}")));
        messages.push(ChatMessage::assistant("ok"));
    }
    messages.push(ChatMessage::user("last question"));
    let build = |policy| {
        build_prompt(
            &m.template,
            &m.tokenizer,
            &messages,
            None,
            m.model.context_length(),
            256,
            policy,
        )
    };
    match build(TruncationPolicy::Error) {
        Err(RuntimeError::PromptTooLong {
            tokens, context, ..
        }) => assert!(tokens > context),
        other => panic!("expected PromptTooLong, got {other:?}"),
    }
    let p = build(TruncationPolicy::DropOldestTurns).unwrap();
    assert!(p.tokens.len() <= m.model.context_length() - 256);
    assert!(p.text.contains("You are helpful."));
    assert!(p.text.contains("last question"));
    assert_eq!(
        p.dropped_messages % 2,
        0,
        "whole user/assistant pairs are dropped"
    );
    assert!(!p.text.contains("<|im_start|>user\n0 word"));
    // Generator also refuses a prompt longer than the context.
    let too_long: Vec<u32> = vec![100; m.model.context_length() + 1];
    let err = Generator::new(
        m.model.as_ref(),
        &m.tokenizer,
        &too_long,
        &GenerateParams::default(),
        None,
    )
    .err()
    .unwrap();
    assert!(matches!(err, RuntimeError::PromptTooLong { .. }), "{err}");
}

#[test]
fn session_truncate_rolls_back_exactly() {
    let m = model();
    let prompt = chat_prompt("Name three colors.");
    let mut s = m.model.new_session().unwrap();
    let first = s.forward(&prompt).unwrap().to_vec1::<f32>().unwrap();
    s.forward(&[100, 200, 300]).unwrap();
    s.truncate(prompt.len()).unwrap();
    assert_eq!(s.tokens(), &prompt[..]);
    let again = s.forward(&[100]).unwrap().to_vec1::<f32>().unwrap();
    let mut fresh = m.model.new_session().unwrap();
    fresh.forward(&prompt).unwrap();
    let want = fresh.forward(&[100]).unwrap().to_vec1::<f32>().unwrap();
    let diff = common::max_abs_diff(&again, &want);
    assert!(diff < 1e-3, "max diff {diff}");
    assert_eq!(first.len(), m.model.vocab_size());
}

#[test]
fn batched_prompt_agrees_with_chunked_decoding() {
    // Exact equality of the cache/mask logic is checked on f32 weights in
    // tests/loading.rs; here quantized activations (Q8 per row) make logits differ slightly
    // between batch shapes, so the real model must agree on the ranking.
    let m = model();
    let prompt = chat_prompt("Tell me about owls.");
    let mut batched = m.model.new_session().unwrap();
    let want = batched.forward(&prompt).unwrap().to_vec1::<f32>().unwrap();
    let mut stepwise = m.model.new_session().unwrap();
    let mut got = Vec::new();
    for chunk in prompt.chunks(7) {
        got = stepwise.forward(chunk).unwrap().to_vec1::<f32>().unwrap();
    }
    let top = |l: &[f32]| {
        let mut idx: Vec<usize> = (0..l.len()).collect();
        idx.sort_by(|&a, &b| l[b].total_cmp(&l[a]));
        idx.truncate(3);
        idx
    };
    assert_eq!(top(&got), top(&want));
}

fn constraint_for(schema: &serde_json::Value) -> std::sync::Arc<stencil_mask::Constraint> {
    let m = model();
    let spec = stencil_grammar::ConstraintSpec::JsonSchema(schema.clone());
    let grammar = stencil_grammar::compile(&spec, &Default::default())
        .unwrap()
        .grammar;
    let trie = std::sync::Arc::new(stencil_mask::TokenTrie::new(m.tokenizer.vocab()));
    stencil_mask::Constraint::new(&grammar, trie, Default::default()).unwrap()
}

/// The runtime loop under a schema: sampled outputs at temperature 1.0 are valid under the
/// independent validator whenever they finish, and a `max_tokens` cut says `length`.
#[test]
fn constrained_sampling_is_valid_json() {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30}, "rank": {"type": "integer", "minimum": 1, "maximum": 10}},
        "required": ["city", "rank"],
        "additionalProperties": false
    });
    let validator = jsonschema::validator_for(&schema).unwrap();
    let constraint = constraint_for(&schema);
    let prompt = chat_prompt("Name a city and rank it from 1 to 10, as JSON.");
    for seed in 0..4 {
        let params = GenerateParams {
            max_tokens: 80,
            sampling: SamplingParams {
                temperature: 1.0,
                seed: Some(seed),
                ..Default::default()
            },
            ..Default::default()
        };
        let m = model();
        let g = generate(
            m.model.as_ref(),
            &m.tokenizer,
            &prompt,
            &params,
            Some(&constraint),
            |_| {},
        )
        .unwrap();
        // Under the budget every output ends complete.
        assert_eq!(g.finish_reason, FinishReason::Stop, "{:?}", g.text);
        let v: serde_json::Value =
            serde_json::from_str(&g.text).unwrap_or_else(|e| panic!("{:?}: {e}", g.text));
        assert!(validator.is_valid(&v), "invalid: {}", g.text);
    }
    // A budget below the shortest output is refused before generating, naming the minimum.
    let m = model();
    let err = generate(
        m.model.as_ref(),
        &m.tokenizer,
        &prompt,
        &GenerateParams {
            max_tokens: 3,
            ..Default::default()
        },
        Some(&constraint),
        |_| {},
    )
    .expect_err("a 3-token budget is too small");
    assert!(
        matches!(err, RuntimeError::BudgetTooSmall { needed: Some(n), max_tokens: 3 } if n > 3),
        "{err:?}"
    );
}
