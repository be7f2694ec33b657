//! The Anthropic Messages, Ollama and OpenAI Responses APIs on the real server with the real
//! default model: each stream, decoded from network bytes read a few at a time by the wire
//! crates' own client-side decoders, joins to what the non-streamed request answers; tool
//! arguments and schema-constrained output validate with `jsonschema`; and every error comes in
//! its API's own shape and status.

mod support;

use std::io::Read;

use serde_json::{json, Value};
use stencil_anthropic::accumulate::MessageAccumulator;
use stencil_ollama::accumulate::ChatAccumulator;
use stencil_ollama::ndjson::NdjsonDecoder;
use stencil_openai::sse::SseDecoder;
use stencil_server::ServerConfig;
use support::{main_server, post, raw, start, user};

fn weather() -> Value {
    json!({"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"], "additionalProperties": false})
}

fn person() -> Value {
    json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 30}, "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"], "additionalProperties": false})
}

fn valid(schema: &Value, instance: &Value) -> bool {
    jsonschema::validator_for(schema)
        .unwrap()
        .is_valid(instance)
}

/// POSTs `body` and hands the response body to `feed` 7 bytes at a time.
fn stream(url: &str, path: &str, body: &Value, mut feed: impl FnMut(&[u8])) {
    let r = ureq::post(&format!("{url}{path}"))
        .set("Content-Type", "application/json")
        .send_string(&body.to_string())
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut reader = r.into_reader();
    let mut buf = [0u8; 7];
    loop {
        let n = reader.read(&mut buf).unwrap();
        if n == 0 {
            return;
        }
        feed(&buf[..n]);
    }
}

/// SSE events as (event name, JSON data).
fn sse_events(url: &str, path: &str, body: &Value) -> Vec<(String, Value)> {
    let mut decoder = SseDecoder::new();
    let mut out = Vec::new();
    stream(url, path, body, |bytes| {
        for e in decoder.push(bytes) {
            let data: Value = serde_json::from_str(&e.data).unwrap();
            out.push((e.event.unwrap_or_default(), data));
        }
    });
    out
}

#[test]
fn anthropic_streams_join_to_the_message_and_tools_validate() {
    let url = main_server();
    let body = json!({"model": model(url), "max_tokens": 24, "temperature": 0, "messages": user("Name three colors.")});
    let (status, whole) = post(url, "/v1/messages", &body.to_string(), None);
    assert_eq!(status, 200, "{whole}");
    assert_eq!(
        (whole["type"].as_str(), whole["role"].as_str()),
        (Some("message"), Some("assistant"))
    );
    let mut streamed = body.clone();
    streamed["stream"] = true.into();
    let events = sse_events(url, "/v1/messages", &streamed);
    let mut acc = MessageAccumulator::new();
    for (name, data) in &events {
        assert_eq!(
            data["type"],
            name.as_str(),
            "the event name repeats the data's type"
        );
        acc.push(data).unwrap();
    }
    let m = acc.message().unwrap();
    assert_eq!(m.text(), whole["content"][0]["text"].as_str().unwrap());
    assert_eq!(m.stop_reason.as_deref(), whole["stop_reason"].as_str());
    assert_eq!(
        m.output_tokens,
        whole["usage"]["output_tokens"].as_u64().unwrap()
    );
    assert!(m.input_tokens > 0);
    let (status, counted) = post(
        url,
        "/v1/messages/count_tokens",
        &json!({"model": model(url), "messages": user("Name three colors.")}).to_string(),
        None,
    );
    assert_eq!(status, 200, "{counted}");
    assert_eq!(counted["input_tokens"], whole["usage"]["input_tokens"]);

    // A forced tool, streamed: fragments join into an input valid against the schema.
    let tool = json!({"model": model(url), "max_tokens": 80, "stream": true, "messages": user("Weather in Paris?"),
        "tools": [{"name": "get_weather", "description": "Current weather", "input_schema": weather()}],
        "tool_choice": {"type": "tool", "name": "get_weather"}});
    let events = sse_events(url, "/v1/messages", &tool);
    let fragments = events
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "input_json_delta")
        .count();
    assert!(fragments > 1, "arguments stream in fragments");
    let mut acc = MessageAccumulator::new();
    for (_, data) in &events {
        acc.push(data).unwrap();
    }
    let m = acc.message().unwrap();
    assert_eq!(m.stop_reason.as_deref(), Some("tool_use"));
    assert_eq!(m.tool_uses[0].name, "get_weather");
    assert!(
        valid(&weather(), &m.tool_uses[0].input),
        "{:?}",
        m.tool_uses[0].input
    );

    // output_config.format: the text is valid JSON for the schema.
    let body = json!({"model": model(url), "max_tokens": 60, "messages": user("Invent a person."),
        "output_config": {"format": {"type": "json_schema", "schema": person()}}});
    let (status, v) = post(url, "/v1/messages", &body.to_string(), None);
    assert_eq!(status, 200, "{v}");
    let text: Value = serde_json::from_str(v["content"][0]["text"].as_str().unwrap()).unwrap();
    assert!(valid(&person(), &text), "{text}");
}

#[test]
fn ollama_lines_join_to_the_answer_and_formats_validate() {
    let url = main_server();
    let body = json!({"model": model(url), "stream": false, "messages": user("Name three colors."), "options": {"temperature": 0, "num_predict": 24}});
    let (status, whole) = post(url, "/api/chat", &body.to_string(), None);
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["done"], true);
    assert!(
        whole["eval_count"].as_u64().unwrap() > 0 && whole["total_duration"].as_u64().unwrap() > 0
    );
    let mut streamed = body.clone();
    streamed["stream"] = true.into();
    let (mut decoder, mut acc, mut lines) = (NdjsonDecoder::new(), ChatAccumulator::new(), 0);
    stream(url, "/api/chat", &streamed, |bytes| {
        for line in decoder.push(bytes) {
            acc.push(&line.unwrap()).unwrap();
            lines += 1;
        }
    });
    decoder.finish().unwrap();
    let a = acc.result().unwrap();
    assert!(lines > 3, "streamed in lines");
    assert_eq!(a.content, whole["message"]["content"].as_str().unwrap());
    assert_eq!(a.done_reason, whole["done_reason"].as_str().unwrap());
    assert_eq!(a.eval_count, whole["eval_count"].as_u64().unwrap());

    let body = json!({"model": model(url), "stream": false, "messages": user("Invent a person."), "format": person(), "options": {"num_predict": 60, "seed": 5}});
    let (_, v) = post(url, "/api/chat", &body.to_string(), None);
    let instance: Value = serde_json::from_str(v["message"]["content"].as_str().unwrap()).unwrap();
    assert!(valid(&person(), &instance), "{instance}");

    // A forced tool call comes out whole, its arguments an object valid against the schema.
    let body = json!({"model": model(url), "messages": user("Weather in Paris?"), "options": {"tool_choice": "required", "num_predict": 80},
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": weather()}}]});
    let (mut decoder, mut acc) = (NdjsonDecoder::new(), ChatAccumulator::new());
    stream(url, "/api/chat", &body, |bytes| {
        for line in decoder.push(bytes) {
            acc.push(&line.unwrap()).unwrap();
        }
    });
    let a = acc.result().unwrap();
    assert_eq!(a.tool_calls[0].name, "get_weather");
    assert!(
        valid(&weather(), &a.tool_calls[0].arguments),
        "{:?}",
        a.tool_calls
    );

    let body = json!({"model": model(url), "stream": false, "prompt": "The capital of France is", "raw": true, "options": {"num_predict": 5, "temperature": 0}});
    let (status, v) = post(url, "/api/generate", &body.to_string(), None);
    assert_eq!((status, v["done"].as_bool()), (200, Some(true)), "{v}");
    assert!(!v["response"].as_str().unwrap().is_empty());

    let tags: Value = ureq::get(&format!("{url}/api/tags"))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    assert_eq!(tags["models"][0]["name"], model(url));
    assert_eq!(tags["models"][0]["details"]["format"], "gguf");
    let (status, show) = post(
        url,
        "/api/show",
        &json!({"model": model(url)}).to_string(),
        None,
    );
    assert_eq!(status, 200);
    assert!(
        show["template"].as_str().unwrap().contains("im_start"),
        "{show}"
    );
}

#[test]
fn responses_stream_matches_the_whole_response() {
    let url = main_server();
    let body = json!({"model": model(url), "input": "Name three colors.", "max_output_tokens": 24, "temperature": 0});
    let (status, whole) = post(url, "/v1/responses", &body.to_string(), None);
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["object"], "response");
    let mut streamed = body.clone();
    streamed["stream"] = true.into();
    let events = sse_events(url, "/v1/responses", &streamed);
    for (i, (name, data)) in events.iter().enumerate() {
        assert_eq!(
            (data["type"].as_str(), data["sequence_number"].as_u64()),
            (Some(name.as_str()), Some(i as u64))
        );
    }
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    let (last, end) = events.last().unwrap();
    assert_eq!(
        last,
        &format!("response.{}", whole["status"].as_str().unwrap())
    );
    assert_eq!(
        end["response"]["output"],
        whole["output"].clone().tap_ids(&end["response"]["output"])
    );
    assert_eq!(
        text,
        whole["output"][0]["content"][0]["text"].as_str().unwrap()
    );

    let call = json!({"model": model(url), "input": "Weather in Paris?", "stream": true, "max_output_tokens": 80,
        "tools": [{"type": "function", "name": "get_weather", "parameters": weather()}],
        "tool_choice": {"type": "function", "name": "get_weather"}});
    let events = sse_events(url, "/v1/responses", &call);
    let joined: String = events
        .iter()
        .filter(|(n, _)| n == "response.function_call_arguments.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    let args: Value = serde_json::from_str(&joined).unwrap();
    assert!(valid(&weather(), &args), "{args}");
    let item = &events.last().unwrap().1["response"]["output"][0];
    assert_eq!(
        (item["type"].as_str(), item["name"].as_str()),
        (Some("function_call"), Some("get_weather"))
    );
    assert_eq!(item["arguments"].as_str(), Some(joined.as_str()));
}

/// Item ids differ between two responses; compare outputs with the other's ids.
trait TapIds {
    fn tap_ids(self, like: &Value) -> Value;
}

impl TapIds for Value {
    fn tap_ids(mut self, like: &Value) -> Value {
        if let (Some(items), Some(other)) = (self.as_array_mut(), like.as_array()) {
            for (i, o) in items.iter_mut().zip(other) {
                i["id"] = o["id"].clone();
            }
        }
        self
    }
}

fn model(url: &str) -> String {
    let v: Value = ureq::get(&format!("{url}/v1/models"))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    v["data"][0]["id"].as_str().unwrap().to_string()
}

/// The error body's shape for each API.
#[derive(Debug, Clone, Copy)]
enum Shape {
    OpenAi,
    Anthropic,
    Ollama,
}

fn check_shape(shape: Shape, v: &Value, text: &str, param: &str) {
    match shape {
        Shape::OpenAi => {
            assert!(
                v["error"]["message"].as_str().unwrap().contains(text),
                "{v}"
            );
            assert!(v["error"]["type"].is_string(), "{v}");
            if !param.is_empty() {
                assert_eq!(v["error"]["param"], param, "{v}");
            }
        }
        Shape::Anthropic => {
            assert_eq!(v["type"], "error", "{v}");
            assert!(
                v["error"]["type"].as_str().unwrap().ends_with("_error"),
                "{v}"
            );
            assert!(
                v["error"]["message"].as_str().unwrap().contains(text),
                "{v}"
            );
        }
        Shape::Ollama => {
            assert!(v["error"].as_str().unwrap().contains(text), "{v}");
            assert_eq!(v.as_object().unwrap().len(), 1, "{v}");
        }
    }
}

#[test]
fn every_api_answers_errors_in_its_own_shape() {
    let url = main_server();
    let m = model(url);
    use Shape::*;
    let cases: Vec<(&str, String, u16, Shape, &str, &str)> = vec![
        ("/v1/messages", "{not json".into(), 400, Anthropic, "not valid JSON", ""),
        ("/v1/messages", json!({"model": m, "messages": user("x")}).to_string(), 400, Anthropic, "`max_tokens` is missing", ""),
        ("/v1/messages", json!({"model": "claude-x", "max_tokens": 5, "messages": user("x")}).to_string(), 404, Anthropic, "claude-x", ""),
        ("/v1/messages", json!({"model": m, "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}).to_string(), 400, Anthropic, "text only", ""),
        ("/v1/messages", json!({"model": m, "max_tokens": 2, "messages": user("x"), "output_config": {"format": {"type": "json_schema", "schema": person()}}}).to_string(), 400, Anthropic, "raise max_tokens", ""),
        ("/v1/messages", json!({"model": m, "max_tokens": 5, "messages": user("x"), "output_config": {"format": {"type": "json_schema", "schema": {"not": {}}}}}).to_string(), 400, Anthropic, "unsatisfiable", ""),
        ("/api/chat", "{not json".into(), 400, Ollama, "not valid JSON", ""),
        ("/api/chat", json!({"model": "llama3", "messages": user("x")}).to_string(), 404, Ollama, "llama3", ""),
        ("/api/chat", json!({"model": m, "messages": user("x"), "format": "yaml"}).to_string(), 400, Ollama, "`format`", ""),
        ("/api/chat", json!({"model": m, "messages": user("x"), "format": person(), "options": {"num_predict": 2}}).to_string(), 400, Ollama, "raise options.num_predict to at least", ""),
        ("/api/generate", json!({"model": m, "prompt": "x", "images": ["aGk="]}).to_string(), 400, Ollama, "text only", ""),
        ("/api/show", json!({"model": "llama3"}).to_string(), 404, Ollama, "llama3", ""),
        ("/api/pull", json!({"model": "llama3"}).to_string(), 404, Ollama, "no route", ""),
        ("/v1/responses", json!({"input": "x", "previous_response_id": "resp_1"}).to_string(), 400, OpenAi, "stateless", "previous_response_id"),
        ("/v1/responses", json!({"input": "x", "max_output_tokens": 2, "text": {"format": {"type": "json_schema", "name": "p", "schema": person()}}}).to_string(), 400, OpenAi, "raise max_output_tokens", "max_output_tokens"),
        ("/v1/responses", json!({"input": [{"type": "function_call_output", "call_id": "call_9", "output": "x"}]}).to_string(), 400, OpenAi, "call_9", "input"),
    ];
    for (path, body, status, shape, text, param) in cases {
        let (s, v) = post(url, path, &body, None);
        let what = &body[..body.len().min(100)];
        assert_eq!(s, status, "{path} {what}: {v}");
        check_shape(shape, &v, text, param);
    }
    // Refusals before a handler runs take the route's shape too.
    for (path, shape) in [
        ("/v1/messages", Anthropic),
        ("/api/chat", Ollama),
        ("/v1/responses", OpenAi),
    ] {
        let (s, _, body) = raw(url, "POST", path, &[("Content-Type", "text/plain")], "{}");
        assert_eq!(s, 415, "{path}");
        check_shape(
            shape,
            &serde_json::from_str(&body).unwrap(),
            "application/json",
            "",
        );
        let (s, _, body) = raw(url, "GET", path, &[], "");
        assert_eq!(s, 405, "{path}");
        check_shape(
            shape,
            &serde_json::from_str(&body).unwrap(),
            "not allowed",
            "",
        );
    }
    // With a key: Bearer or x-api-key, on /v1 and /api alike.
    let keyed = start(ServerConfig {
        api_key: Some("sekret".into()),
        ..ServerConfig::default()
    });
    let msg = json!({"model": m, "max_tokens": 2, "messages": user("hi")}).to_string();
    let (s, _, body) = raw(
        &keyed,
        "POST",
        "/v1/messages",
        &[("x-api-key", "wrong")],
        &msg,
    );
    assert_eq!(s, 401);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["type"], "authentication_error", "{v}");
    let (s, _, _) = raw(
        &keyed,
        "POST",
        "/v1/messages",
        &[("x-api-key", "sekret")],
        &msg,
    );
    assert_eq!(s, 200);
    let (s, _, body) = raw(&keyed, "GET", "/api/tags", &[], "");
    assert_eq!(s, 401);
    check_shape(Ollama, &serde_json::from_str(&body).unwrap(), "API key", "");
    let (s, _, _) = raw(
        &keyed,
        "GET",
        "/api/tags",
        &[("Authorization", "Bearer sekret")],
        "",
    );
    assert_eq!(s, 200);
}
