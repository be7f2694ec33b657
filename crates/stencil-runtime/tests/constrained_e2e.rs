//! Constrained generation end to end with the real default model (SmolLM2-135M): every output
//! over the `schemas/corpus` schemas and a sample of BFCL tool schemas is checked by the
//! independent `jsonschema` crate (formats asserted), greedy and sampled at temperature 1.0.

mod common;

use std::ops::ControlFlow;
use std::sync::OnceLock;

use serde_json::{json, Value};
use stencil_runtime::engine::ChatEngine;
use stencil_runtime::error::RuntimeError;
use stencil_runtime::hub::ModelFiles;
use stencil_runtime::loader::{load, LoadOptions};
use stencil_runtime::tools::ToolEvent;
use stencil_types::{
    ChatFinish, ChatMessage, ChatOutcome, ChatRequest, ConstraintSpec, GenerateParams, Reasoning,
    SamplingParams, Tool, ToolChoice,
};

fn engine() -> &'static ChatEngine {
    static E: OnceLock<ChatEngine> = OnceLock::new();
    E.get_or_init(|| {
        let files = ModelFiles::Gguf(common::default_model().to_path_buf());
        ChatEngine::new(load(&files, &LoadOptions::default(), |_, _| {}).unwrap())
    })
}

/// Greedy (`None`) or temperature 1.0 with a seed.
fn params(seed: Option<u64>, max_tokens: usize) -> GenerateParams {
    GenerateParams {
        max_tokens,
        sampling: SamplingParams {
            temperature: if seed.is_some() { 1.0 } else { 0.0 },
            seed,
            ..SamplingParams::default()
        },
        ..GenerateParams::default()
    }
}

fn chat(req: &ChatRequest) -> ChatOutcome {
    engine()
        .chat(req, |_| ControlFlow::Continue(()))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn validator(schema: &Value) -> jsonschema::Validator {
    jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .unwrap_or_else(|e| panic!("jsonschema cannot build {schema}: {e}"))
}

fn assert_valid(v: &jsonschema::Validator, text: &str, what: &str) {
    let value: Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {text}"));
    let errors: Vec<String> = v.iter_errors(&value).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{what}: invalid {errors:?}: {text}");
}

const RUNS: [Option<u64>; 3] = [None, Some(1), Some(2)];

#[test]
fn schema_corpus_outputs_are_valid_greedy_and_sampled() {
    let dir = common::repo_root().join("schemas/corpus");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 8,
        "schemas/corpus has {} schemas",
        files.len()
    );
    let mut outputs = 0;
    for path in files {
        let schema: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let v = validator(&schema);
        let prompt = format!(
            "Respond with JSON. {}",
            schema["description"].as_str().unwrap()
        );
        for seed in RUNS {
            let req = ChatRequest {
                messages: vec![ChatMessage::user(&prompt)],
                constraint: Some(ConstraintSpec::JsonSchema(schema.clone())),
                params: params(seed, 600),
                ..ChatRequest::default()
            };
            let out = chat(&req);
            let what = format!("{} seed {seed:?}", path.display());
            assert_eq!(
                out.finish_reason,
                ChatFinish::Stop,
                "{what}: {:?}",
                out.content
            );
            assert_valid(&v, out.content.as_deref().unwrap(), &what);
            outputs += 1;
        }
    }
    eprintln!("{outputs} outputs valid");
}

/// Every 35th BFCL_simple schema (10 tools): each `{"<function>": <parameters>}`.
fn bfcl_sample() -> Option<Vec<(String, Value)>> {
    let dir = common::shared_data("maskbench/BFCL_simple")?;
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    Some(
        files
            .iter()
            .step_by(35)
            .map(|p| {
                let doc: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
                let props = doc["schema"]["properties"].as_object().unwrap();
                let (name, params) = props.iter().next().unwrap();
                (name.clone(), params.clone())
            })
            .collect(),
    )
}

#[test]
fn bfcl_tool_calls_validate_against_their_schemas() {
    let Some(sample) = bfcl_sample() else { return };
    assert_eq!(sample.len(), 10);
    for (name, parameters) in &sample {
        let v = validator(parameters);
        let tool: Tool = serde_json::from_value(json!({"type": "function", "function": {"name": name, "description": format!("The function {name}."), "parameters": parameters}})).unwrap();
        for seed in [None, Some(3)] {
            let req = ChatRequest {
                messages: vec![ChatMessage::user(&format!(
                    "Call {name} with suitable arguments."
                ))],
                tools: vec![tool.clone()],
                tool_choice: Some(ToolChoice::Required),
                params: params(seed, 400),
                ..ChatRequest::default()
            };
            let out = chat(&req);
            let what = format!("{name} seed {seed:?}");
            assert_eq!(out.finish_reason, ChatFinish::ToolCalls, "{what}: {out:?}");
            assert!(!out.tool_calls.is_empty());
            for c in &out.tool_calls {
                assert_eq!(&c.name, name);
                assert!(c.id.starts_with("call_"));
                assert_valid(&v, &c.arguments, &what);
            }
        }
    }
}

fn weather_tools() -> Vec<Tool> {
    let path = common::repo_root().join("schemas/tools/weather.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn tool_choice_modes_named_auto_none_and_streaming_events() {
    let tools = weather_tools();
    let ask = |choice: ToolChoice, seed| ChatRequest {
        messages: vec![ChatMessage::user("北京今天天气怎么样？")],
        tools: tools.clone(),
        tool_choice: Some(choice),
        params: params(seed, 200),
        ..ChatRequest::default()
    };
    // Named: exactly that tool, once; Chinese arguments stay UTF-8.
    let mut events = Vec::new();
    let out = engine()
        .chat(&ask(ToolChoice::Named("get_weather".into()), None), |e| {
            events.push(e);
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(out.finish_reason, ChatFinish::ToolCalls);
    assert_eq!(out.tool_calls.len(), 1);
    let call = &out.tool_calls[0];
    assert_eq!(call.name, "get_weather");
    assert!(!call.arguments.contains("\\u"), "{}", call.arguments);
    let args: Value = serde_json::from_str(&call.arguments).unwrap();
    assert!(["celsius", "fahrenheit"].contains(&args["unit"].as_str().unwrap()));
    assert!(
        !call.arguments.is_ascii(),
        "greedy output names the city in Chinese: {}",
        call.arguments
    );
    // Round trip: the city re-serializes as the same UTF-8 text.
    let city = args["city"].as_str().unwrap();
    assert!(call.arguments.contains(city) && serde_json::to_string(&args).unwrap().contains(city));
    // The streamed events rebuild the same call.
    let streamed: String = events
        .iter()
        .filter_map(|e| match e {
            ToolEvent::Arguments { index: 0, fragment } => Some(fragment.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, call.arguments);
    assert!(
        matches!(&events[0], ToolEvent::CallStart { index: 0, id, name } if *id == call.id && name == "get_weather")
    );

    // None: text, never a call tag.
    for seed in RUNS {
        let out = chat(&ask(ToolChoice::None, seed));
        assert!(out.tool_calls.is_empty());
        assert!(!out.content.unwrap_or_default().contains("<tool_call>"));
    }
    // Auto: either text or valid calls.
    for seed in RUNS {
        let out = chat(&ask(ToolChoice::Auto, seed));
        for c in &out.tool_calls {
            let t = tools.iter().find(|t| t.function.name == c.name).unwrap();
            assert_valid(
                &validator(t.function.parameters.as_ref().unwrap()),
                &c.arguments,
                "auto",
            );
        }
        if out.tool_calls.is_empty() {
            assert!(!out.content.unwrap_or_default().contains("<tool_call>"));
        }
    }
}

#[test]
fn tool_results_in_history_and_bad_history() {
    let tools = weather_tools();
    let messages: Vec<ChatMessage> = serde_json::from_value(json!([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}
    ]))
    .unwrap();
    let req = ChatRequest {
        messages: messages.clone(),
        tools: tools.clone(),
        tool_choice: Some(ToolChoice::None),
        params: params(None, 60),
        ..ChatRequest::default()
    };
    let prepared = engine().prepare(&req).unwrap();
    assert!(prepared
        .prompt
        .text
        .contains("<tool_response>\n{\"temperature\": 21"));
    assert!(prepared
        .prompt
        .text
        .contains("<tool_call>\n{\"name\": \"get_weather\""));
    let out = chat(&req);
    assert!(out.content.is_some() && out.tool_calls.is_empty());

    let mut orphan = messages.clone();
    orphan[2].tool_call_id = Some("call_9".into());
    let err = engine()
        .prepare(&ChatRequest {
            messages: orphan,
            ..req.clone()
        })
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("`call_9` matches no earlier"),
        "{err}"
    );
    let mut unanswered = messages[..2].to_vec();
    unanswered.push(ChatMessage::user("and?"));
    let err = engine()
        .prepare(&ChatRequest {
            messages: unanswered,
            ..req.clone()
        })
        .err()
        .unwrap();
    assert!(
        err.to_string()
            .contains("before the result of tool call `call_1`"),
        "{err}"
    );
    let err = engine()
        .prepare(&ChatRequest {
            tool_choice: Some(ToolChoice::Named("nope".into())),
            ..req
        })
        .err()
        .unwrap();
    assert!(err.to_string().contains("not among the tools"), "{err}");
}

#[test]
fn regex_choice_and_stop_strings_under_a_constraint() {
    let re = "[A-Z][a-z]{2,8} [0-9]{2}";
    let dfa = regex_automata::dfa::dense::DFA::new(&format!("^(?:{re})$")).unwrap();
    for seed in RUNS {
        let out = chat(&ChatRequest {
            messages: vec![ChatMessage::user("A name and an age.")],
            constraint: Some(ConstraintSpec::Regex(re.into())),
            params: params(seed, 40),
            ..ChatRequest::default()
        });
        let text = out.content.unwrap();
        use regex_automata::dfa::Automaton;
        let input = regex_automata::Input::new(&text).anchored(regex_automata::Anchored::Yes);
        assert!(
            dfa.try_search_fwd(&input)
                .unwrap()
                .is_some_and(|m| m.offset() == text.len()),
            "{text:?} does not match {re}"
        );
        let out = chat(&ChatRequest {
            messages: vec![ChatMessage::user("Is water wet?")],
            constraint: Some(ConstraintSpec::Choice(vec![
                "yes".into(),
                "no".into(),
                "it depends".into(),
            ])),
            params: params(seed, 10),
            ..ChatRequest::default()
        });
        assert!(["yes", "no", "it depends"].contains(&out.content.as_deref().unwrap()));
    }
    // Stop strings that occur inside the value cannot end it early.
    let schema = json!({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 3}}, "required": ["a"], "additionalProperties": false});
    for seed in RUNS {
        let mut p = params(seed, 80);
        p.stop = vec![",".into(), "]".into(), "\"".into()];
        let out = chat(&ChatRequest {
            messages: vec![ChatMessage::user("Three numbers as JSON.")],
            constraint: Some(ConstraintSpec::JsonSchema(schema.clone())),
            params: p,
            ..ChatRequest::default()
        });
        assert_valid(
            &validator(&schema),
            out.content.as_deref().unwrap(),
            "stop strings",
        );
    }
    // A stop string after a complete value does end it.
    let mut p = params(None, 80);
    p.stop = vec!["7".into()];
    let out = chat(&ChatRequest {
        messages: vec![ChatMessage::user("Write the number 77.")],
        constraint: Some(ConstraintSpec::Regex("[0-9]{1,3}".into())),
        params: p,
        ..ChatRequest::default()
    });
    assert_eq!(out.finish_reason, ChatFinish::Stop);
}

#[test]
fn budgets_close_outputs_refuse_impossible_ones_and_seeds_repeat() {
    // A budget below the shortest output is an error naming the minimum, before generating.
    // (30 integers: SmolLM2 writes every digit as a token of its own.)
    let schema = json!({"type": "object", "properties": {"codes": {"type": "array", "items": {"type": "integer"}, "minItems": 30}}, "required": ["codes"]});
    let req = |max_tokens| ChatRequest {
        messages: vec![ChatMessage::user("Write JSON.")],
        constraint: Some(ConstraintSpec::JsonSchema(schema.clone())),
        params: params(Some(5), max_tokens),
        ..ChatRequest::default()
    };
    let err = engine()
        .chat(&req(8), |_| ControlFlow::Continue(()))
        .err()
        .unwrap();
    let needed = match &err {
        RuntimeError::BudgetTooSmall {
            needed: Some(n),
            max_tokens: 8,
        } => *n,
        other => panic!("expected BudgetTooSmall, got {other:?}"),
    };
    assert!(needed > 30 && needed <= 100, "{needed}");
    assert!(
        err.to_string().contains(&format!("at least {needed}")),
        "{err}"
    );
    // At exactly that budget the output still ends complete and valid.
    let out = chat(&req(needed));
    assert_eq!(out.finish_reason, ChatFinish::Stop);
    assert!(out.usage.completion_tokens <= needed);
    assert_valid(
        &validator(&schema),
        out.content.as_deref().unwrap(),
        "minimum budget",
    );

    // A free string the model would keep writing is closed by the budget: complete, `stop`,
    // and reported as closed by the budget.
    let story = json!({"type": "object", "properties": {"story": {"type": "string"}, "moral": {"type": "string"}}, "required": ["story", "moral"], "additionalProperties": false});
    for seed in RUNS {
        let out = chat(&ChatRequest {
            messages: vec![ChatMessage::user("Tell a very long story as JSON.")],
            constraint: Some(ConstraintSpec::JsonSchema(story.clone())),
            params: params(seed, 24),
            ..ChatRequest::default()
        });
        assert_eq!(out.finish_reason, ChatFinish::Stop, "{:?}", out.content);
        assert!(out.usage.completion_tokens <= 24);
        assert_valid(&validator(&story), out.content.as_deref().unwrap(), "story");
        assert!(out.closed_by_budget, "{:?}", out.content);
    }

    // Unconstrained text is cut: `length`. The same seed gives the same output on the same
    // machine and build (what seeds promise; across machines rounding may differ).
    let text = |seed| {
        chat(&ChatRequest {
            messages: vec![ChatMessage::user("Write a long story.")],
            params: params(Some(seed), 8),
            ..ChatRequest::default()
        })
    };
    let a = text(5);
    assert_eq!(a.finish_reason, ChatFinish::Length);
    assert_eq!(a.usage.completion_tokens, 8);
    assert_eq!(a.content, text(5).content, "same seed, same output");
}

/// Reasoning markers that are control tokens of the model (SmolLM2's `<jupyter_text>` and
/// `<jupyter_code>` stand in for a `</think>` token): the model writes the end marker as that
/// token (its text is kept out of the reasoning, so the token is the only way out), it is
/// written for the model after `max_tokens` reasoning tokens, and the reasoning still comes
/// apart from the content, streamed and whole.
#[test]
fn reasoning_markers_that_are_control_tokens() {
    let schema = json!({"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"], "additionalProperties": false});
    let v = validator(&schema);
    for (seed, limit) in [(None, Some(3)), (Some(1), Some(8)), (Some(2), None)] {
        let mut p = params(seed, 60);
        p.reasoning = Some(Reasoning {
            start: "<jupyter_text>".into(),
            end: "<jupyter_code>".into(),
            max_tokens: limit,
        });
        let req = ChatRequest {
            messages: vec![ChatMessage::user("What is 6 times 7? Think, then answer.")],
            constraint: Some(ConstraintSpec::JsonSchema(schema.clone())),
            params: p,
            ..ChatRequest::default()
        };
        let mut events = Vec::new();
        let out = engine()
            .chat(&req, |e| {
                events.push(e);
                ControlFlow::Continue(())
            })
            .unwrap_or_else(|e| panic!("{e}"));
        let what = format!("seed {seed:?}, limit {limit:?}");
        assert_eq!(out.finish_reason, ChatFinish::Stop, "{what}");
        let reasoning = out.reasoning.clone().unwrap_or_default();
        assert!(!reasoning.trim().is_empty(), "{what}: no reasoning");
        assert!(!reasoning.contains("<jupyter"), "{what}: {reasoning:?}");
        let content = out.content.clone().unwrap_or_default();
        assert!(!content.contains("<jupyter"), "{what}: {content:?}");
        assert_valid(&v, content.trim(), &what);
        assert!(out.usage.completion_tokens <= 60, "{what}");
        let streamed = |reasoning: bool| -> String {
            events
                .iter()
                .filter_map(|e| match e {
                    ToolEvent::Reasoning(t) if reasoning => Some(t.as_str()),
                    ToolEvent::Content(t) if !reasoning => Some(t.as_str()),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(streamed(true), reasoning, "{what}");
        assert_eq!(streamed(false), content, "{what}");
    }
}
