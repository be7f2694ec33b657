//! Continuous batching with the real default model: sequences in one batch produce exactly
//! what they produce alone (greedy, seeded sampling, constraints, tools, chunked prompts), a
//! cancelled sequence frees its slot and KV reservation at once, and the KV cache cap makes
//! requests wait or, when one can never fit, fail with a clear error.

mod common;

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use stencil_grammar::ConstraintSpec;
use stencil_runtime::batch::BatchConfig;
use stencil_runtime::engine::ChatEngine;
use stencil_runtime::hub::ModelFiles;
use stencil_runtime::loader::{load, LoadOptions, LoadedModel};
use stencil_runtime::RuntimeError;
use stencil_types::{ChatMessage, ChatRequest, Tool, ToolChoice};

fn loaded() -> LoadedModel {
    let files = ModelFiles::Gguf(common::default_model().to_path_buf());
    load(&files, &LoadOptions::default(), |_, _| {}).unwrap()
}

/// A batching engine whose prompts run in chunks of 16 tokens, so that prompts span several
/// steps and interleave with other sequences' decoding.
fn engine(max_batch: usize, kv_tokens: usize) -> ChatEngine {
    let loaded = loaded();
    let mut config = BatchConfig::new(loaded.model.as_ref(), max_batch, 1 << 30);
    config.prefill_chunk = 16;
    if kv_tokens > 0 {
        config.kv_cache_tokens = kv_tokens;
    }
    ChatEngine::new(loaded).with_batching(config).unwrap()
}

fn request(text: &str, max_tokens: usize, temperature: f32, seed: u64) -> ChatRequest {
    let mut r = ChatRequest {
        messages: vec![ChatMessage::user(text)],
        ..ChatRequest::default()
    };
    r.params.max_tokens = max_tokens;
    r.params.sampling.temperature = temperature;
    r.params.sampling.seed = Some(seed);
    r
}

/// Greedy and sampled, free text, a schema, a regex and a tool call.
fn requests() -> Vec<ChatRequest> {
    let mut out = vec![
        request("Name three colors.", 24, 0.0, 0),
        request("Tell me about cats.", 24, 0.9, 7),
        request("Write a haiku about the sea.", 20, 1.0, 11),
    ];
    let mut schema = request("A person as JSON.", 48, 0.8, 3);
    schema.constraint = Some(ConstraintSpec::JsonSchema(json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": false
    })));
    out.push(schema);
    let mut regex = request("Three lowercase words.", 16, 0.0, 0);
    regex.constraint = Some(ConstraintSpec::Regex("[a-z]+( [a-z]+){2}".into()));
    out.push(regex);
    let mut tools = request("What is the weather in Paris?", 40, 1.0, 5);
    tools.tools = vec![serde_json::from_value::<Tool>(json!({"type": "function", "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    }}))
    .unwrap()];
    tools.tool_choice = Some(ToolChoice::Required);
    out.push(tools);
    out
}

/// What must be equal between runs: everything but timings and (random) tool call ids.
fn run(engine: &ChatEngine, req: &ChatRequest) -> String {
    let o = engine.chat(req, |_| ControlFlow::Continue(())).unwrap();
    let calls: Vec<(&str, &str)> = o
        .tool_calls
        .iter()
        .map(|c| (c.name.as_str(), c.arguments.as_str()))
        .collect();
    format!(
        "{:?} {calls:?} {:?} {:?} forced {}",
        o.content, o.finish_reason, o.usage, o.forced_tokens
    )
}

#[test]
fn batched_sequences_produce_exactly_what_they_produce_alone() {
    // An engine of its own: its counters see only this test's sequences.
    let engine = &engine(8, 0);
    let reqs = requests();
    let alone: Vec<String> = reqs.iter().map(|r| run(engine, r)).collect();
    let before = engine.batch_stats().unwrap();
    let together: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = reqs.iter().map(|r| s.spawn(|| run(engine, r))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let after = engine.batch_stats().unwrap();
    for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(a, t, "request {i} differs in a batch");
    }
    // They really shared steps.
    let steps = after.steps - before.steps;
    let sequences = after.sequence_steps - before.sequence_steps;
    assert!(
        sequences as f64 / steps as f64 > 2.0,
        "{sequences} sequence-steps in {steps} steps: the sequences were hardly batched"
    );
    assert_eq!((after.running, after.kv_reserved), (0, 0));
    // The chat template's shared start was copied from the prefix cache, not recomputed, and
    // changed nothing.
    assert!(after.prefix_hits > before.prefix_hits, "{after:?}");
}

#[test]
fn a_prompt_prefix_copied_from_the_cache_changes_nothing() {
    // Without a prefix cache, then with one: the same outputs; the second engine reuses.
    let loaded = loaded();
    let mut config = BatchConfig::new(loaded.model.as_ref(), 4, 1 << 30);
    config.prefix_cache_tokens = 0;
    let plain = ChatEngine::new(loaded).with_batching(config).unwrap();
    let cached = &engine(4, 0);
    let mut long = request("Summarize the following text in one sentence.", 16, 0.0, 0);
    long.messages.insert(
        0,
        ChatMessage::system(&"You are a careful assistant. ".repeat(20)),
    );
    let mut other = long.clone();
    other.messages[1] = ChatMessage::user("List two fruits.");
    for r in [&long, &other, &long] {
        assert_eq!(run(&plain, r), run(cached, r));
    }
    assert_eq!(plain.batch_stats().unwrap().prefix_hits, 0);
    assert!(cached.batch_stats().unwrap().prefix_tokens >= 100);
}

#[test]
fn a_cancelled_sequence_frees_its_slot_and_reservation() {
    // An engine of its own: no other test's sequences in its counters.
    let engine = &engine(2, 0);
    let req = request("Write a very long story about a dragon.", 400, 0.9, 1);
    let mut events = 0;
    let err = engine
        .chat(&req, |_| {
            events += 1;
            if events == 3 {
                // The sequence holds a slot while it runs.
                let s = engine.batch_stats().unwrap();
                assert!(s.running >= 1 && s.kv_reserved > 0, "{s:?}");
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap_err();
    assert!(matches!(err, RuntimeError::Cancelled), "{err}");
    let s = engine.batch_stats().unwrap();
    assert_eq!((s.running, s.kv_reserved), (0, 0), "{s:?}");
}

#[test]
fn the_kv_cache_cap_makes_requests_wait_or_fail_clearly() {
    let req = request("Count to ten.", 32, 0.0, 0);
    // Room for one such request (prompt + 32) but not two.
    let probe = engine(1, 0).prepare(&req).unwrap();
    let one = probe.prompt.tokens.len() + 32;
    let engine = engine(8, one + one / 2);
    let running_max = AtomicUsize::new(0);
    let done = AtomicBool::new(false);
    let results: Vec<String> = std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                let r = engine.batch_stats().unwrap().running;
                running_max.fetch_max(r, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        let handles: Vec<_> = (0..2).map(|_| s.spawn(|| run(&engine, &req))).collect();
        let r = handles.into_iter().map(|h| h.join().unwrap()).collect();
        done.store(true, Ordering::Relaxed);
        r
    });
    assert_eq!(results[0], results[1]);
    assert_eq!(running_max.load(Ordering::Relaxed), 1, "both ran at once");
    // A request that can never fit is refused with the numbers.
    let mut big = req.clone();
    big.params.max_tokens = 4 * one;
    let err = engine
        .chat(&big, |_| ControlFlow::Continue(()))
        .unwrap_err();
    assert!(
        matches!(err, RuntimeError::KvCacheTooSmall { capacity, .. } if capacity == one + one / 2),
        "{err}"
    );
    assert!(err.to_string().contains("KV cache"), "{err}");
}

#[test]
fn many_threads_share_one_engine() {
    // More callers than slots: the extra ones wait for a slot, every one completes.
    let engine = Arc::new(engine(2, 0));
    let reqs: Vec<ChatRequest> = (0..5)
        .map(|i| request(&format!("Say hello number {i}."), 8, 0.7, i))
        .collect();
    let alone: Vec<String> = reqs.iter().map(|r| run(&engine, r)).collect();
    let together: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = reqs.iter().map(|r| s.spawn(|| run(&engine, r))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(alone, together);
}
