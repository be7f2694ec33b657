//! The real server on loopback with the real default model, driven over HTTP: plain and
//! streamed chat (the reassembled stream equals the non-streamed answer for the same seed),
//! constraints validated by `jsonschema`, tools, completions, and every error path.

mod support;

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use stencil_openai::client::Client;
use stencil_openai::sse::SseDecoder;
use stencil_server::ServerConfig;
use support::{engine, main_server, post, raw, repo, start, start_with, user};

#[test]
fn plain_chat_and_its_stream_agree() {
    let c = Client::new(main_server(), None);
    for (temperature, seed) in [(0.0, 1), (0.9, 11)] {
        let body = json!({"messages": user("Name three colors."), "max_tokens": 30, "temperature": temperature, "seed": seed, "stream_options": {"include_usage": true}});
        let whole = c.chat(&body).unwrap();
        let mut pieces = Vec::new();
        let acc = c
            .chat_stream(&body, |t| pieces.push(t.to_string()))
            .unwrap();
        acc.check_complete().unwrap();
        let message = &whole.choices[0].message;
        assert_eq!(message.role, "assistant");
        assert_eq!(acc.role.as_deref(), Some("assistant"));
        assert_eq!(
            Some(acc.content()),
            message.content.as_deref(),
            "seed {seed}"
        );
        assert_eq!(acc.finish_reason, whole.choices[0].finish_reason);
        assert!(pieces.len() > 3, "streamed in pieces");
        assert_eq!(acc.usage, whole.usage, "usage chunk");
        assert!(whole.id.starts_with("chatcmpl-"));
    }
}

#[test]
fn constraints_hold_over_http() {
    let url = main_server();
    let schema: Value =
        serde_json::from_slice(&std::fs::read(repo().join("schemas/corpus/person.json")).unwrap())
            .unwrap();
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .unwrap();
    let c = Client::new(url, None);
    for seed in [1, 2] {
        let body = json!({"messages": user("A person as JSON."), "max_tokens": 400, "temperature": 1.0, "seed": seed,
            "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": true}}});
        let r = c.chat(&body).unwrap();
        assert_eq!(r.choices[0].finish_reason.as_deref(), Some("stop"));
        let v: Value =
            serde_json::from_str(r.choices[0].message.content.as_deref().unwrap()).unwrap();
        assert!(validator.is_valid(&v), "{v}");
        let streamed = c.chat_stream(&body, |_| {}).unwrap();
        assert_eq!(
            Some(streamed.content()),
            r.choices[0].message.content.as_deref()
        );
    }
    let r = c
        .chat(&json!({"messages": user("A date"), "guided_regex": "20[0-9]{2}-(0[1-9]|1[0-2])", "max_tokens": 20}))
        .unwrap();
    let text = r.choices[0].message.content.clone().unwrap();
    assert!(
        text.len() == 7 && text.starts_with("20") && &text[4..5] == "-",
        "{text}"
    );
    // A recursive GBNF grammar through llama.cpp's `grammar` field and vLLM's
    // `structured_outputs.grammar`, and the same language in Lark (left-recursive, as Lark
    // users write it) through `guided_grammar`, sampled: every output is a complete expression.
    let arith = "root ::= expr\nexpr ::= term ((\"+\" | \"-\") term)*\nterm ::= [0-9]{1,3} | \"(\" expr \")\"\n";
    let arith_lark = "start: expr\nexpr: expr \"+\" term | expr \"-\" term | term\nterm: /[0-9]{1,3}/ | \"(\" expr \")\"\n";
    for (seed, body) in [
        (1, json!({"grammar": arith})),
        (2, json!({"structured_outputs": {"grammar": arith}})),
        (3, json!({"guided_grammar": arith_lark})),
    ] {
        let mut body = body;
        body["messages"] = user("Write a sum.");
        body["max_tokens"] = json!(24);
        body["temperature"] = json!(1.0);
        body["seed"] = json!(seed);
        let r = c.chat(&body).unwrap();
        let text = r.choices[0].message.content.clone().unwrap();
        assert!(is_arith(text.as_bytes()), "{text:?}");
        assert_eq!(r.choices[0].finish_reason.as_deref(), Some("stop"));
    }
    let r = c
        .chat(&json!({"messages": user("Pick one"), "guided_choice": ["red", "green", "blue"], "max_tokens": 5}))
        .unwrap();
    assert!(["red", "green", "blue"].contains(&r.choices[0].message.content.as_deref().unwrap()));
    // Under a budget any JSON object ends complete: `stop`, and `stencil.closed_by_budget`
    // says when the budget made it close (a 12-token budget always does here); the stream's
    // last chunk carries the same report.
    for max_tokens in [12, 100] {
        let body = json!({"messages": user("JSON please, a long one"), "response_format": {"type": "json_object"}, "max_tokens": max_tokens, "temperature": 0});
        let r = c.chat(&body).unwrap();
        assert_eq!(r.choices[0].finish_reason.as_deref(), Some("stop"));
        let v: Value =
            serde_json::from_str(r.choices[0].message.content.as_deref().unwrap()).unwrap();
        assert!(v.is_object());
        let info = r.stencil.clone().expect("stencil report");
        assert!(info["closed_by_budget"].is_boolean(), "{info}");
        if max_tokens == 12 {
            assert_eq!(info["closed_by_budget"], true, "{v}");
        }
        let (s, raw) = post(url, "/v1/chat/completions", &body.to_string(), None);
        assert_eq!(s, 200);
        assert_eq!(raw["stencil"], info);
    }
    // An unknown `format` is an annotation: the schema compiles and the response names what
    // was ignored; `stencil_strict_formats` refuses it instead.
    let schema = json!({"type": "object", "properties": {"color": {"type": "string", "format": "color", "maxLength": 12}}, "required": ["color"]});
    let body = json!({"messages": user("A color as JSON."), "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": schema}}, "max_tokens": 30});
    let r = c.chat(&body).unwrap();
    let v: Value = serde_json::from_str(r.choices[0].message.content.as_deref().unwrap()).unwrap();
    assert!(
        jsonschema::validator_for(&schema).unwrap().is_valid(&v),
        "{v}"
    );
    let warnings = r.stencil.expect("stencil report")["warnings"].clone();
    assert!(
        warnings
            .to_string()
            .contains("unknown format \\\"color\\\"")
            && warnings.to_string().contains("#/properties/color"),
        "{warnings}"
    );
    let mut strict = body.clone();
    strict["stencil_strict_formats"] = json!(true);
    let (s, raw) = post(url, "/v1/chat/completions", &strict.to_string(), None);
    assert_eq!(s, 400, "{raw}");
    assert!(
        raw["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown format"),
        "{raw}"
    );
}

/// A reasoning prefix through SmolLM2's chat template: the model reasons in free text, the
/// reasoning ends at `</think>` (written for it after `max_tokens` of reasoning, or when the
/// budget needs it), and the content is the constrained JSON; the response carries the
/// reasoning apart (`reasoning_content`), streamed as its own deltas.
#[test]
fn reasoning_then_constrained_content() {
    let c = Client::new(main_server(), None);
    let schema = json!({"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"], "additionalProperties": false});
    let validator = jsonschema::validator_for(&schema).unwrap();
    for (seed, reasoning, max_tokens) in [
        (1, json!({"max_tokens": 24}), 80),
        (2, json!(true), 30),
        (
            3,
            json!({"start": "[think]", "end": "[/think]", "max_tokens": 8}),
            60,
        ),
    ] {
        let body = json!({"messages": user("What is 12 times 3? Think first."), "reasoning": reasoning, "guided_json": schema, "max_tokens": max_tokens, "temperature": 1.0, "seed": seed});
        let whole = c.chat(&body).unwrap();
        let message = &whole.choices[0].message;
        let thought = message
            .reasoning_content
            .clone()
            .expect("reasoning_content");
        let content = message.content.clone().unwrap();
        assert!(!thought.is_empty(), "seed {seed}");
        assert!(
            !thought.contains("think]") && !thought.contains("think>"),
            "{thought:?}"
        );
        let v: Value =
            serde_json::from_str(&content).unwrap_or_else(|e| panic!("{content:?}: {e}"));
        assert!(validator.is_valid(&v), "{v}");
        assert_eq!(whole.choices[0].finish_reason.as_deref(), Some("stop"));
        let usage = whole.usage.unwrap();
        assert!(usage.completion_tokens <= max_tokens, "{usage:?}");
        let acc = c.chat_stream(&body, |_| {}).unwrap();
        acc.check_complete().unwrap();
        assert_eq!(acc.reasoning().trim(), thought, "seed {seed}");
        assert_eq!(acc.content(), content, "seed {seed}");
    }
    let r = c.chat(&json!({"messages": user("x"), "reasoning": {"effort": "high"}}));
    assert!(
        format!("{:?}", r.unwrap_err()).contains("reasoning.effort"),
        "reasoning.effort is named"
    );
}

/// Structural tags (XGrammar's `triggered_tags` shape, through `response_format`): free text in
/// which every `<function=` opens a tag whose JSON satisfies its schema, at least one tag;
/// sampled. Checked by scanning every occurrence of the trigger.
#[test]
fn structural_tags_over_http() {
    let c = Client::new(main_server(), None);
    let schema = json!({"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"], "additionalProperties": false});
    let validator = jsonschema::validator_for(&schema).unwrap();
    let format = json!({"type": "triggered_tags", "triggers": ["<function="], "at_least_one": true, "tags": [
        {"begin": "<function=get_weather>", "content": {"type": "json_schema", "json_schema": schema}, "end": "</function>"}
    ]});
    for seed in [1, 2, 3] {
        let body = json!({"messages": user("What is the weather in Paris? Use get_weather."), "response_format": {"type": "structural_tag", "format": format}, "max_tokens": 60, "temperature": 1.0, "seed": seed});
        let r = c.chat(&body).unwrap();
        let text = r.choices[0].message.content.clone().unwrap();
        assert_eq!(
            r.choices[0].finish_reason.as_deref(),
            Some("stop"),
            "{text:?}"
        );
        let mut tags = 0;
        for (at, _) in text.match_indices("<function=") {
            let rest = text[at..]
                .strip_prefix("<function=get_weather>")
                .unwrap_or_else(|| panic!("a trigger that opens no tag: {text:?}"));
            let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
            let v = values
                .next()
                .unwrap()
                .unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert!(validator.is_valid(&v), "{v}");
            assert!(
                rest[values.byte_offset()..].starts_with("</function>"),
                "{text:?}"
            );
            tags += 1;
        }
        assert!(tags >= 1, "at least one tag: {text:?}");
    }
}

fn weather_tools() -> Value {
    serde_json::from_slice(&std::fs::read(repo().join("schemas/tools/weather.json")).unwrap())
        .unwrap()
}

#[test]
fn tools_required_named_and_auto() {
    let c = Client::new(main_server(), None);
    let base = json!({"messages": user("What's the weather in Paris?"), "tools": weather_tools(), "max_tokens": 150, "temperature": 0});
    let mut named = base.clone();
    named["tool_choice"] = json!({"type": "function", "function": {"name": "get_weather"}});
    let mut required = base.clone();
    required["tool_choice"] = "required".into();
    for body in [&named, &required] {
        let r = c.chat(body).unwrap();
        assert_eq!(r.choices[0].finish_reason.as_deref(), Some("tool_calls"));
        let calls = &r.choices[0].message.tool_calls;
        assert!(!calls.is_empty());
        for call in calls {
            assert!(call.id.as_deref().unwrap().starts_with("call_"));
            let args: Value =
                serde_json::from_str(call.function.arguments.as_deref().unwrap()).unwrap();
            assert!(args.is_object());
        }
        // The stream carries the same calls (ids are fresh per response).
        let acc = c.chat_stream(body, |_| {}).unwrap();
        let streamed = acc.tool_calls().unwrap();
        assert_eq!(streamed.len(), calls.len());
        for (s, w) in streamed.iter().zip(calls) {
            assert_eq!(Some(&s.name), w.function.name.as_ref());
            assert_eq!(Some(&s.arguments), w.function.arguments.as_ref());
        }
        assert_eq!(acc.finish_reason.as_deref(), Some("tool_calls"));
    }
    let r = c.chat(&named).unwrap();
    assert_eq!(r.choices[0].message.tool_calls.len(), 1);
    assert_eq!(
        r.choices[0].message.tool_calls[0].function.name.as_deref(),
        Some("get_weather")
    );
    let mut auto = base.clone();
    auto["tool_choice"] = "auto".into();
    let r = c.chat(&auto).unwrap();
    let finish = r.choices[0].finish_reason.clone().unwrap();
    assert!(
        finish == "tool_calls"
            || !r.choices[0]
                .message
                .content
                .clone()
                .unwrap_or_default()
                .contains("<tool_call>")
    );
}

#[test]
fn completions_endpoint_streams_and_agrees() {
    let url = main_server();
    let body =
        json!({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0.7, "seed": 3});
    let (status, whole) = post(url, "/v1/completions", &body.to_string(), None);
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["object"], "text_completion");
    let mut stream_body = body.clone();
    stream_body["stream"] = true.into();
    let resp = ureq::post(&format!("{url}/v1/completions"))
        .set("Content-Type", "application/json")
        .send_string(&stream_body.to_string())
        .unwrap();
    assert!(resp
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let mut bytes = Vec::new();
    resp.into_reader().read_to_end(&mut bytes).unwrap();
    let events = SseDecoder::new().push(&bytes);
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let text: String = events[..events.len() - 1]
        .iter()
        .map(|e| {
            serde_json::from_str::<Value>(&e.data).unwrap()["choices"][0]["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(text, whole["choices"][0]["text"].as_str().unwrap());
}

#[test]
fn bad_requests_get_openai_errors() {
    let url = main_server();
    let cases: Vec<(&str, String, u16, &str, &str)> = vec![
        ("/v1/chat/completions", "{not json".into(), 400, "body", "not valid JSON"),
        ("/v1/chat/completions", json!({"messages": "hello"}).to_string(), 400, "messages", "must be an array"),
        ("/v1/chat/completions", json!({"messages": [{"role": "wizard", "content": "x"}]}).to_string(), 400, "messages", "messages[0].role is `wizard`"),
        ("/v1/chat/completions", json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}).to_string(), 400, "messages", "type `image_url`"),
        ("/v1/chat/completions", json!({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "call_x", "content": "r"}]}).to_string(), 400, "messages", "matches no earlier"),
        ("/v1/chat/completions", json!({"messages": user("x"), "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object", "properties": {"a": {"$ref": "#/nope"}}}}}}).to_string(), 400, "response_format", "#/properties/a"),
        ("/v1/chat/completions", json!({"messages": user("x"), "guided_json": {"not": {"type": "array", "uniqueItems": true, "items": {"type": "string"}}}}).to_string(), 400, "guided_json", "uniqueItems"),
        ("/v1/chat/completions", json!({"messages": user("x"), "guided_regex": "(unclosed"}).to_string(), 400, "guided_regex", "regex"),
        ("/v1/chat/completions", json!({"messages": user("x"), "guided_grammar": "start: a\na: b \"x\"\nb: a"}).to_string(), 400, "guided_grammar", "Lark grammar, line 2: rule `a` is left-recursive (a -> b -> a)"),
        ("/v1/chat/completions", json!({"messages": user("x"), "n": 2}).to_string(), 400, "n", "only n = 1"),
        ("/v1/chat/completions", json!({"messages": user("x"), "guided_regex": "[a-z]{40}", "max_tokens": 2}).to_string(), 400, "max_tokens", "raise max_tokens to at least"),
        ("/v1/chat/completions", json!({"messages": user("x"), "temperature": "warm"}).to_string(), 400, "temperature", "number"),
        ("/v1/chat/completions", json!({"messages": user("x"), "guided_regex": "a", "guided_choice": ["a"]}).to_string(), 400, "guided_choice", "more than one"),
        ("/v1/chat/completions", json!({"messages": user("x"), "tools": weather_tools(), "tool_choice": {"type": "function", "function": {"name": "nope"}}}).to_string(), 400, "tools", "not among the tools"),
        ("/v1/chat/completions", json!({"messages": user(&"word ".repeat(20000))}).to_string(), 400, "messages", "context"),
        ("/v1/chat/completions", json!({"model": "gpt-9", "messages": user("x")}).to_string(), 404, "", "gpt-9"),
        ("/v1/nothing", "{}".into(), 404, "", "no route"),
        ("/v1/chat/completions", json!({"messages": [{"role": "user", "content": 5}]}).to_string(), 400, "messages", "messages[0].content must be a string or an array of content parts, not a number"),
        ("/v1/chat/completions", json!({"messages": [{"role": "user"}]}).to_string(), 400, "messages", "messages[0].content is missing"),
        ("/v1/chat/completions", json!({"messages": user("x"), "max_tokens": 9000}).to_string(), 400, "messages", "max_tokens asks for 9000 more"),
        ("/v1/chat/completions", json!({"messages": user("x"), "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {"not": {}}}}}).to_string(), 400, "response_format", "unsatisfiable"),
        ("/v1/completions", json!({"prompt": ""}).to_string(), 400, "prompt", "the prompt is empty"),
        ("/v1/completions", json!({"prompt": "x", "max_tokens": 9000}).to_string(), 400, "prompt", "max_tokens asks for 9000 more"),
    ];
    for (path, body, status, param, text) in cases {
        let (s, v) = post(url, path, &body, None);
        let what = &body[..body.len().min(120)];
        assert_eq!(s, status, "{what}: {v}");
        let e = &v["error"];
        assert!(e["message"].as_str().unwrap().contains(text), "{what}: {v}");
        assert!(e["type"].is_string());
        if !param.is_empty() {
            assert_eq!(e["param"], param, "{what}: {v}");
        }
    }
    // The server is still fine.
    let (s, _) = post(
        url,
        "/v1/chat/completions",
        &json!({"messages": user("hi"), "max_tokens": 2}).to_string(),
        None,
    );
    assert_eq!(s, 200);
}

#[test]
fn auth_body_limit_timeout_and_keepalive() {
    // The default timeout here: the small requests must succeed however slow the machine.
    let url = start(ServerConfig {
        api_key: Some("sekret".into()),
        max_body_bytes: 16 << 10,
        ..ServerConfig::default()
    });
    let small = json!({"messages": user("hi"), "max_tokens": 3}).to_string();
    let (s, v) = post(&url, "/v1/chat/completions", &small, None);
    assert_eq!(s, 401, "{v}");
    assert_eq!(v["error"]["code"], "invalid_api_key");
    let (s, _) = post(&url, "/v1/chat/completions", &small, Some("wrong"));
    assert_eq!(s, 401);
    let (s, _) = post(&url, "/v1/chat/completions", &small, Some("sekret"));
    assert_eq!(s, 200);
    // RFC 7235: the scheme is case-insensitive.
    let (status, _, _) = raw(
        &url,
        "POST",
        "/v1/chat/completions",
        &[("Authorization", "bearer sekret")],
        &small,
    );
    assert_eq!(status, 200);
    let (status, _, _) = raw(
        &url,
        "POST",
        "/v1/chat/completions",
        &[("Authorization", "Basic sekret")],
        &small,
    );
    assert_eq!(status, 401);
    let health = ureq::get(&format!("{url}/health")).call().unwrap();
    assert_eq!(health.status(), 200, "health needs no key");
    let big = json!({"messages": user(&"x".repeat(20_000))}).to_string();
    let (s, v) = post(&url, "/v1/chat/completions", &big, Some("sekret"));
    assert_eq!(s, 413, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("16384"));
    // A generation past the timeout: the stream began, so the error is an SSE event and the
    // stream ends without [DONE]; keep-alive comments flowed while nothing else did.
    // A long prompt (~2,000 tokens, seconds of prompt processing) with no output yet, then an
    // output that cannot end early (an array of at least 1,000 numbers): well past the
    // timeout on any CPU, however fast.
    let url = start(ServerConfig {
        request_timeout: Duration::from_millis(1500),
        keep_alive: Duration::from_millis(100),
        ..ServerConfig::default()
    });
    let prompt = format!("{} Now write a very long list.", "Once more. ".repeat(600));
    let long = json!({"type": "array", "items": {"type": "integer"}, "minItems": 1000});
    let body = json!({
        "messages": user(&prompt),
        "max_tokens": 5000,
        "stream": true,
        "temperature": 0.8,
        "seed": 1,
        "response_format": {"type": "json_schema", "json_schema": {"name": "long", "schema": long}},
    })
    .to_string();
    let resp = ureq::post(&format!("{url}/v1/chat/completions"))
        .set("Content-Type", "application/json")
        .send_string(&body)
        .unwrap();
    let mut bytes = Vec::new();
    resp.into_reader().read_to_end(&mut bytes).unwrap();
    let mut d = SseDecoder::new();
    let events = d.push(&bytes);
    let last: Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
    assert_eq!(last["error"]["code"], "timeout", "{last}");
    assert!(!events.iter().any(|e| e.is_done()));
    assert!(
        d.comments() >= 1,
        "keep-alive comments while the prompt was processed"
    );
    let mut acc = stencil_openai::accumulate::ChatAccumulator::new();
    for e in &events {
        let _ = acc.push_event(e);
    }
    assert!(acc.check_complete().is_err());
}

#[test]
fn disconnect_cancels_and_full_queue_is_429() {
    let url = start(ServerConfig {
        queue: 1,
        ..ServerConfig::default()
    });
    let health = |url: &str| -> Value {
        ureq::get(&format!("{url}/health"))
            .call()
            .unwrap()
            .into_json()
            .unwrap()
    };
    // Read two events of a long stream, then hang up.
    let body =
        json!({"messages": user("Write a very long story."), "max_tokens": 3000, "stream": true})
            .to_string();
    let resp = ureq::post(&format!("{url}/v1/chat/completions"))
        .set("Content-Type", "application/json")
        .send_string(&body)
        .unwrap();
    let mut reader = resp.into_reader();
    let mut d = SseDecoder::new();
    let mut got = 0;
    let mut buf = [0u8; 256];
    while got < 3 {
        let n = reader.read(&mut buf).unwrap();
        got += d.push(&buf[..n]).len();
    }
    drop(reader);
    let deadline = Instant::now() + Duration::from_secs(60);
    while health(&url)["generations"]["cancelled"] != 1 {
        assert!(
            Instant::now() < deadline,
            "generation not cancelled: {}",
            health(&url)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // One running and one queued fill a queue of 1: more concurrent requests get 429.
    let long = json!({"messages": user("Write a long story."), "max_tokens": 150}).to_string();
    let handles: Vec<_> = (0..5)
        .map(|_| {
            let (url, long) = (url.clone(), long.clone());
            std::thread::spawn(move || post(&url, "/v1/chat/completions", &long, None))
        })
        .collect();
    let results: Vec<(u16, Value)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ok = results.iter().filter(|(s, _)| *s == 200).count();
    let busy: Vec<_> = results.iter().filter(|(s, _)| *s == 429).collect();
    assert!(
        ok >= 1 && !busy.is_empty() && ok + busy.len() == 5,
        "{results:?}"
    );
    assert!(busy[0].1["error"]["message"]
        .as_str()
        .unwrap()
        .contains("queue is full"));
}

/// The real engine, except that a request for exactly 7 tokens panics inside generation.
struct PanicsOnCue(std::sync::Arc<stencil_runtime::engine::ChatEngine>);

impl stencil_server::Engine for PanicsOnCue {
    fn model_id(&self) -> String {
        stencil_server::Engine::model_id(self.0.as_ref())
    }
    fn prepare(
        &self,
        req: &stencil_types::ChatRequest,
    ) -> Result<stencil_runtime::engine::Prepared, stencil_runtime::RuntimeError> {
        self.0.prepare(req)
    }
    fn run(
        &self,
        prepared: &stencil_runtime::engine::Prepared,
        sink: &mut dyn FnMut(stencil_runtime::tools::ToolEvent) -> std::ops::ControlFlow<()>,
    ) -> Result<stencil_types::ChatOutcome, stencil_runtime::RuntimeError> {
        assert_ne!(prepared.params.max_tokens, 7, "panic on cue");
        self.0.run(prepared, sink)
    }
}

/// A panic inside one generation fails that request with a 500 and leaves the server whole:
/// its only generation thread serves the next request.
#[test]
fn a_panic_fails_its_request_only() {
    let url = start_with(
        std::sync::Arc::new(PanicsOnCue(engine())),
        ServerConfig::default(),
    );
    let ask = |max_tokens: usize| {
        let (url, (tx, rx)) = (url.clone(), std::sync::mpsc::channel());
        let body = json!({"messages": user("hi"), "max_tokens": max_tokens}).to_string();
        std::thread::spawn(move || tx.send(post(&url, "/v1/chat/completions", &body, None)));
        rx.recv_timeout(Duration::from_secs(120))
            .expect("no answer within 120 s")
    };
    let (status, body) = ask(7);
    assert_eq!(status, 500, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("panic on cue"), "{body}");
    for _ in 0..2 {
        let (status, body) = ask(3);
        assert_eq!(status, 200, "{body}");
    }
}

/// A web page cannot drive the local server: JSON only, Host checked against DNS rebinding,
/// no CORS unless configured, preflights only for allowed origins.
#[test]
fn web_pages_cannot_drive_the_server() {
    let url = main_server();
    let body = json!({"messages": user("hi"), "max_tokens": 2}).to_string();
    let chat = "/v1/chat/completions";
    // A "simple" cross-origin request (text/plain, no preflight) is refused.
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let (s, _, b) = raw(url, "POST", chat, &[("Content-Type", ct)], &body);
        assert_eq!(s, 415, "{ct}: {b}");
        assert!(
            b.contains("unsupported_media_type") && b.contains("application/json"),
            "{b}"
        );
    }
    let (s, _, _) = raw(
        url,
        "POST",
        chat,
        &[("Content-Type", "application/json; charset=utf-8")],
        &body,
    );
    assert_eq!(s, 200);
    // DNS rebinding: a foreign name in Host is refused on every route; IPs and localhost pass.
    for path in ["/health", "/v1/models"] {
        let (s, _, b) = raw(url, "GET", path, &[("Host", "evil.example:8080")], "");
        assert_eq!(s, 403, "{b}");
        assert!(
            b.contains("host_not_allowed") && b.contains("--allowed-host"),
            "{b}"
        );
    }
    for host in ["localhost:1234", "127.0.0.1", "[::1]:80"] {
        let (s, _, b) = raw(url, "GET", "/health", &[("Host", host)], "");
        assert_eq!(s, 200, "{host}: {b}");
    }
    // No CORS by default: a cross-origin request is refused, and so is its preflight.
    let (s, head, b) = raw(
        url,
        "POST",
        chat,
        &[("Origin", "http://evil.example")],
        &body,
    );
    assert_eq!(s, 403, "{b}");
    assert!(!head.contains("access-control-allow-origin"), "{head}");
    let preflight = [
        ("Origin", "http://evil.example"),
        ("Access-Control-Request-Method", "POST"),
        ("Access-Control-Request-Headers", "content-type"),
    ];
    let (s, head, _) = raw(url, "OPTIONS", chat, &preflight, "");
    assert_eq!(s, 403);
    assert!(!head.contains("access-control-allow-origin"), "{head}");
    // Same-origin pages (a UI served from this address) are fine.
    let (s, _, _) = raw(url, "GET", "/v1/models", &[("Origin", url)], "");
    assert_eq!(s, 200);

    // Configured: that origin (and only it) gets CORS and its preflight; a named host passes.
    let url = start(ServerConfig {
        cors_origins: vec!["http://app.test:3000".into()],
        allowed_hosts: vec!["box.lan".into()],
        ..ServerConfig::default()
    });
    let ok_preflight = [
        ("Origin", "http://app.test:3000"),
        ("Access-Control-Request-Method", "POST"),
        (
            "Access-Control-Request-Headers",
            "content-type, authorization",
        ),
    ];
    let (s, head, _) = raw(&url, "OPTIONS", chat, &ok_preflight, "");
    assert_eq!(s, 204, "{head}");
    assert!(
        head.contains("access-control-allow-origin: http://app.test:3000"),
        "{head}"
    );
    assert!(
        head.contains("access-control-allow-headers: authorization, content-type"),
        "{head}"
    );
    let (s, head, _) = raw(
        &url,
        "GET",
        "/v1/models",
        &[("Origin", "http://app.test:3000")],
        "",
    );
    assert_eq!(s, 200);
    assert!(
        head.contains("access-control-allow-origin: http://app.test:3000"),
        "{head}"
    );
    let (s, _, _) = raw(&url, "OPTIONS", chat, &preflight, "");
    assert_eq!(s, 403);
    let (s, _, _) = raw(&url, "GET", "/health", &[("Host", "box.lan:8080")], "");
    assert_eq!(s, 200);
}

/// `GET /v1/models/{id}` (the SDK's `models.retrieve`).
#[test]
fn models_retrieve() {
    let url = main_server();
    let list: Value = ureq::get(&format!("{url}/v1/models"))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    let id = list["data"][0]["id"].as_str().unwrap().to_string();
    let (s, _, b) = raw(url, "GET", &format!("/v1/models/{id}"), &[], "");
    assert_eq!(s, 200, "{b}");
    let card: Value = serde_json::from_str(&b).unwrap();
    assert_eq!(card["id"], id.as_str());
    assert_eq!(card["object"], "model");
    let (s, _, b) = raw(url, "GET", "/v1/models/gpt-9", &[], "");
    assert_eq!(s, 404, "{b}");
    assert!(b.contains("model_not_found"), "{b}");
}

/// `expr ::= term (("+" | "-") term)*`, `term ::= [0-9]{1,3} | "(" expr ")"`, whole input.
fn is_arith(s: &[u8]) -> bool {
    fn expr(s: &[u8], i: usize) -> Option<usize> {
        let mut i = term(s, i)?;
        while matches!(s.get(i), Some(b'+' | b'-')) {
            i = term(s, i + 1)?;
        }
        Some(i)
    }
    fn term(s: &[u8], i: usize) -> Option<usize> {
        if s.get(i) == Some(&b'(') {
            let j = expr(s, i + 1)?;
            return (s.get(j) == Some(&b')')).then_some(j + 1);
        }
        let n = s[i.min(s.len())..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        (1..=3).contains(&n).then_some(i + n)
    }
    expr(s, 0) == Some(s.len())
}
