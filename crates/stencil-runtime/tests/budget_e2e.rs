//! Constrained outputs always finish: the real default model generates under the 51 real-world
//! schemas of `schemas/maskbench-e2e.json` (three per MaskBench subset), greedy and sampled at
//! temperature 1.0 with two seeds, with `max_tokens` 300. Every output must end complete
//! (`stop`) within the budget and be valid under the independent `jsonschema` crate, on any
//! machine: this asserts properties of budgeted generation, not a particular sampled path.

mod common;

use std::ops::ControlFlow;

use serde_json::Value;
use stencil_runtime::engine::ChatEngine;
use stencil_runtime::error::RuntimeError;
use stencil_runtime::hub::ModelFiles;
use stencil_runtime::loader::{load, LoadOptions};
use stencil_types::{
    ChatFinish, ChatMessage, ChatRequest, ConstraintSpec, GenerateParams, SamplingParams,
};

const MAX_TOKENS: usize = 300;

#[test]
fn maskbench_corpus_outputs_finish_complete_and_valid() {
    let Some(data) = common::shared_data("maskbench") else {
        return;
    };
    let corpus: Value = serde_json::from_slice(
        &std::fs::read(common::repo_root().join("schemas/maskbench-e2e.json")).unwrap(),
    )
    .unwrap();
    let schemas: Vec<&str> = corpus["schemas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(schemas.len() >= 40, "{} schemas", schemas.len());
    let files = ModelFiles::Gguf(common::default_model().to_path_buf());
    let engine = ChatEngine::new(load(&files, &LoadOptions::default(), |_, _| {}).unwrap());
    let (mut outputs, mut closed, mut guarded, mut lengths) = (0, 0, 0, Vec::new());
    for rel in schemas {
        let doc: Value = serde_json::from_slice(&std::fs::read(data.join(rel)).unwrap()).unwrap();
        let schema = &doc["schema"];
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(schema)
            .unwrap_or_else(|e| panic!("{rel}: jsonschema cannot build the schema: {e}"));
        for seed in [None, Some(1), Some(2)] {
            let req = ChatRequest {
                messages: vec![ChatMessage::user("Produce a realistic example instance.")],
                constraint: Some(ConstraintSpec::JsonSchema(schema.clone())),
                params: GenerateParams {
                    max_tokens: MAX_TOKENS,
                    sampling: SamplingParams {
                        temperature: if seed.is_some() { 1.0 } else { 0.0 },
                        seed,
                        ..SamplingParams::default()
                    },
                    ..GenerateParams::default()
                },
                ..ChatRequest::default()
            };
            let what = format!("{rel} seed {seed:?}");
            let out = match engine.chat(&req, |_| ControlFlow::Continue(())) {
                Ok(out) => out,
                // A schema whose shortest instance cannot fit is refused before generating.
                Err(RuntimeError::BudgetTooSmall {
                    needed: Some(n), ..
                }) => {
                    assert!(n > MAX_TOKENS, "{what}: refused although {n} tokens fit");
                    eprintln!("{what}: shortest instance needs {n} tokens; refused");
                    continue;
                }
                Err(e) => panic!("{what}: {e}"),
            };
            assert_eq!(
                out.finish_reason,
                ChatFinish::Stop,
                "{what}: {:?}",
                out.content
            );
            assert!(out.usage.completion_tokens <= MAX_TOKENS, "{what}");
            let text = out.content.as_deref().unwrap_or_default();
            let value: Value = serde_json::from_str(text)
                .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {text}"));
            let errors: Vec<String> = validator
                .iter_errors(&value)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{what}: invalid {errors:?}: {text}");
            outputs += 1;
            closed += out.closed_by_budget as usize;
            guarded += (out.loop_guard_hits > 0) as usize;
            lengths.push(out.usage.completion_tokens);
        }
    }
    lengths.sort_unstable();
    eprintln!(
        "{outputs} outputs complete and valid; closed by the budget {closed}, loop guard touched {guarded}; median {} tokens",
        lengths.get(lengths.len() / 2).copied().unwrap_or(0)
    );
}
