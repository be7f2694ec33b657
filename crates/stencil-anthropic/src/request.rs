//! `POST /v1/messages` bodies -> validated engine requests.
//!
//! Content blocks map onto the engine's chat messages: `text` blocks join into a message's
//! text, an assistant's `tool_use` blocks become its tool calls (arguments: the `input` object
//! as JSON text), a user's `tool_result` blocks become `tool` messages answering those calls,
//! `thinking` blocks of earlier turns are dropped (as Anthropic does). Anything the model
//! cannot take (images, documents, server tools, extended thinking, an assistant prefill) is a
//! 400 naming the field; unknown fields are ignored.

use std::collections::HashSet;

use serde_json::{json, Value};
use stencil_types::api::fields::{
    array, body_object, boolean, field, integer, number, object, string, string_list, Obj,
};
use stencil_types::api::{ApiError, ErrorFields};
use stencil_types::{
    json_kind as kind, ChatMessage, ChatRequest, ConstraintSpec, FunctionDef, GenerateParams, Role,
    SamplingParams, Tool, ToolChoice,
};

/// A checked Messages request.
#[derive(Debug, Clone)]
pub struct ValidMessages {
    pub model: String,
    pub stream: bool,
    pub request: ChatRequest,
    /// The field the output constraint came from (`output_config.format`, `tools`).
    pub constraint_param: &'static str,
}

impl ValidMessages {
    /// The fields errors about this request's constraint, prompt and length are reported against.
    pub fn error_fields(&self) -> ErrorFields {
        ErrorFields {
            constraint: self.constraint_param,
            prompt: "messages",
            max_tokens: "max_tokens",
        }
    }
}

fn bad(param: &str, message: String) -> ApiError {
    ApiError::invalid(param, message)
}

/// Checks a `/v1/messages` body.
pub fn messages_request(body: &Value) -> Result<ValidMessages, ApiError> {
    let o = body_object(body)?;
    let model = match string(o, "model")? {
        Some(m) => m.to_string(),
        None => return Err(bad("model", "`model` is missing".into())),
    };
    let max_tokens = integer(o, "max_tokens", 1, u32::MAX as i64)?.ok_or_else(|| {
        bad(
            "max_tokens",
            "`max_tokens` is missing (it is required)".into(),
        )
    })?;
    let sampling = SamplingParams {
        temperature: number(o, "temperature", 0.0, 1.0)?.map_or(1.0, |x| x as f32),
        top_p: number(o, "top_p", 0.0, 1.0)?.map(|x| x as f32),
        top_k: integer(o, "top_k", 0, 1 << 20)?
            .filter(|&k| k > 0)
            .map(|k| k as usize),
        seed: stencil_types::api::fields::seed(o, "seed")?,
        ..SamplingParams::default()
    };
    sampling
        .validate()
        .map_err(|e| ApiError::from_request(&e, "messages"))?;
    let params = GenerateParams {
        max_tokens: max_tokens as usize,
        sampling,
        stop: string_list(o, "stop_sequences", 16)?,
        ..GenerateParams::default()
    };
    if let Some(t) = object(o, "thinking")? {
        if t.get("type").and_then(Value::as_str) != Some("disabled") {
            return Err(bad(
                "thinking",
                "extended thinking is not supported by this server; leave `thinking` out or send {\"type\": \"disabled\"}".into(),
            ));
        }
    }
    if array(o, "mcp_servers")?.is_some_and(|a| !a.is_empty()) {
        return Err(bad("mcp_servers", "`mcp_servers` is not supported".into()));
    }
    let mut messages = system(o)?;
    let list =
        array(o, "messages")?.ok_or_else(|| bad("messages", "`messages` is missing".into()))?;
    if list.is_empty() {
        return Err(bad("messages", "`messages` is empty".into()));
    }
    let mut call_ids = HashSet::new();
    for (i, m) in list.iter().enumerate() {
        message(i, m, &mut call_ids, &mut messages)?;
    }
    if list.last().and_then(|m| m.get("role")) == Some(&json!("assistant")) {
        return Err(bad(
            "messages",
            format!(
                "messages[{}] is an assistant message: continuing a prefilled assistant turn is not supported; end with a user message (use `output_config.format` to constrain the answer)",
                list.len() - 1
            ),
        ));
    }
    let tools = tools(o)?;
    let tool_choice = match field(o, "tool_choice") {
        None => None,
        Some(tc) => Some(tool_choice(tc)?),
    };
    let constraint = output_format(o)?;
    let constraint_param = match &constraint {
        Some((p, _)) => *p,
        None => "tools",
    };
    let parallel = !field(o, "tool_choice")
        .and_then(|tc| tc.get("disable_parallel_tool_use"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(ValidMessages {
        model,
        stream: boolean(o, "stream")?.unwrap_or(false),
        constraint_param,
        request: ChatRequest {
            messages,
            tools,
            tool_choice,
            parallel_tool_calls: parallel,
            constraint: constraint.map(|(_, c)| c),
            params,
            reserve_max_tokens: true,
            ..ChatRequest::default()
        },
    })
}

/// `system`: a string or a list of text blocks.
fn system(o: &Obj) -> Result<Vec<ChatMessage>, ApiError> {
    match field(o, "system") {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![ChatMessage::system(s)]),
        Some(Value::Array(blocks)) => {
            let mut text = String::new();
            for (j, b) in blocks.iter().enumerate() {
                match (b.get("type").and_then(Value::as_str), b.get("text")) {
                    (Some("text"), Some(Value::String(t))) => text.push_str(t),
                    _ => {
                        return Err(bad(
                            "system",
                            format!("system[{j}] must be a text block ({{\"type\": \"text\", \"text\": ...}}), not {b}"),
                        ))
                    }
                }
            }
            Ok(vec![ChatMessage::system(&text)])
        }
        Some(v) => Err(bad(
            "system",
            format!(
                "`system` must be a string or an array of text blocks, not {}",
                kind(v)
            ),
        )),
    }
}

/// One message, appended to `out` as one or more chat messages.
fn message(
    i: usize,
    m: &Value,
    call_ids: &mut HashSet<String>,
    out: &mut Vec<ChatMessage>,
) -> Result<(), ApiError> {
    let at = |s: String| bad("messages", s);
    let o = m
        .as_object()
        .ok_or_else(|| at(format!("messages[{i}] must be an object, not {}", kind(m))))?;
    let role = match o.get("role").and_then(Value::as_str) {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some(other) => {
            return Err(at(format!(
                "messages[{i}].role is `{other}`; expected user or assistant (the system prompt goes in `system`)"
            )))
        }
        None => return Err(at(format!("messages[{i}].role is missing or not a string"))),
    };
    let blocks = match o.get("content") {
        Some(Value::String(s)) => {
            out.push(ChatMessage::new(role, s));
            return Ok(());
        }
        Some(Value::Array(b)) => b,
        Some(v) => {
            return Err(at(format!(
                "messages[{i}].content must be a string or an array of content blocks, not {}",
                kind(v)
            )))
        }
        None => return Err(at(format!("messages[{i}].content is missing"))),
    };
    let mut text = String::new();
    let mut has_text = false;
    let mut calls = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let here = format!("messages[{i}].content[{j}]");
        let ty = b.get("type").and_then(Value::as_str).ok_or_else(|| {
            at(format!(
                "{here} must be an object with a string `type`, not {b}"
            ))
        })?;
        match (ty, role) {
            ("text", _) => {
                let t = b
                    .get("text")
                    .and_then(Value::as_str)
                    .ok_or_else(|| at(format!("{here} is a text block without a string `text`")))?;
                text.push_str(t);
                has_text = true;
            }
            ("thinking" | "redacted_thinking", Role::Assistant) => {}
            ("tool_use", Role::Assistant) => {
                let id = b.get("id").and_then(Value::as_str).ok_or_else(|| {
                    at(format!("{here} is a tool_use block without a string `id`"))
                })?;
                let name = b.get("name").and_then(Value::as_str).ok_or_else(|| {
                    at(format!(
                        "{here} is a tool_use block without a string `name`"
                    ))
                })?;
                let input = match b.get("input") {
                    Some(v @ Value::Object(_)) => v,
                    _ => {
                        return Err(at(format!(
                            "{here}.input must be an object (the tool's arguments)"
                        )))
                    }
                };
                call_ids.insert(id.to_string());
                calls.push(json!({"id": id, "type": "function", "function": {"name": name, "arguments": input.to_string()}}));
            }
            ("tool_result", Role::User) => {
                let id = b
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        at(format!(
                            "{here} is a tool_result block without a string `tool_use_id`"
                        ))
                    })?;
                if !call_ids.contains(id) {
                    return Err(at(format!(
                        "{here}.tool_use_id `{id}` matches no tool_use block of an earlier assistant message"
                    )));
                }
                let mut result = tool_result_text(&here, b.get("content")).map_err(at)?;
                if b.get("is_error") == Some(&Value::Bool(true)) {
                    result = format!("Error: {result}");
                }
                let mut msg = ChatMessage::new(Role::Tool, &result);
                msg.tool_call_id = Some(id.to_string());
                out.push(msg);
            }
            ("image" | "document" | "search_result", _) => {
                return Err(at(format!(
                    "{here} is a `{ty}` block, but this model accepts text only"
                )))
            }
            (other, role) => {
                return Err(at(format!(
                    "{here} has type `{other}`, which a `{role}` message cannot hold here (text{})",
                    if role == Role::User {
                        " and tool_result"
                    } else {
                        ", tool_use and thinking"
                    }
                )))
            }
        }
    }
    if has_text || !calls.is_empty() || blocks.is_empty() {
        let mut msg = ChatMessage::new(role, &text);
        if !calls.is_empty() {
            msg.tool_calls = Some(calls);
            if !has_text {
                msg.content = None;
            }
        }
        out.push(msg);
    }
    Ok(())
}

/// A tool result's `content`: a string or text blocks (absent: empty).
fn tool_result_text(here: &str, content: Option<&Value>) -> Result<String, String> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(blocks)) => {
            let mut text = String::new();
            for (k, b) in blocks.iter().enumerate() {
                match (b.get("type").and_then(Value::as_str), b.get("text")) {
                    (Some("text"), Some(Value::String(t))) => text.push_str(t),
                    _ => {
                        return Err(format!(
                        "{here}.content[{k}] must be a text block (this model accepts text only)"
                    ))
                    }
                }
            }
            Ok(text)
        }
        Some(v) => Err(format!(
            "{here}.content must be a string or an array of text blocks, not {}",
            kind(v)
        )),
    }
}

/// `tools`: client tools `{name, description, input_schema}`.
fn tools(o: &Obj) -> Result<Vec<Tool>, ApiError> {
    let Some(list) = array(o, "tools")? else {
        return Ok(Vec::new());
    };
    list.iter()
        .enumerate()
        .map(|(i, t)| {
            let here = format!("tools[{i}]");
            let t = t
                .as_object()
                .ok_or_else(|| bad("tools", format!("{here} must be an object")))?;
            if let Some(ty) = t.get("type").and_then(Value::as_str) {
                if ty != "custom" {
                    return Err(bad(
                        "tools",
                        format!("{here} is the server tool `{ty}`, which this server does not have; only client tools (`name`, `input_schema`) are supported"),
                    ));
                }
            }
            let name = t
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("tools", format!("{here}.name is missing or not a string")))?;
            let schema = match t.get("input_schema") {
                Some(s @ Value::Object(_)) => s.clone(),
                Some(v) => {
                    return Err(bad(
                        "tools",
                        format!("{here}.input_schema must be a JSON Schema object, not {}", kind(v)),
                    ))
                }
                None => return Err(bad("tools", format!("{here}.input_schema is missing"))),
            };
            Ok(Tool {
                kind: "function".into(),
                function: FunctionDef {
                    name: name.to_string(),
                    description: t.get("description").and_then(Value::as_str).map(str::to_string),
                    parameters: Some(schema),
                    strict: None,
                },
            })
        })
        .collect()
}

/// `tool_choice`: `{"type": "auto" | "any" | "tool" | "none"}` (`name` with `tool`).
fn tool_choice(v: &Value) -> Result<ToolChoice, ApiError> {
    let ty = v.get("type").and_then(Value::as_str).ok_or_else(|| {
        bad(
            "tool_choice",
            format!("`tool_choice` must be an object with a string `type`, not {v}"),
        )
    })?;
    match ty {
        "auto" => Ok(ToolChoice::Auto),
        "any" => Ok(ToolChoice::Required),
        "none" => Ok(ToolChoice::None),
        "tool" => v
            .get("name")
            .and_then(Value::as_str)
            .map(|n| ToolChoice::Named(n.to_string()))
            .ok_or_else(|| {
                bad(
                    "tool_choice",
                    "`tool_choice` of type `tool` needs `name` (a string)".into(),
                )
            }),
        other => Err(bad(
            "tool_choice",
            format!("tool_choice.type is `{other}`; expected auto, any, tool or none"),
        )),
    }
}

/// `output_config.format` (or the earlier `output_format`): `{"type": "json_schema", "schema"}`.
fn output_format(o: &Obj) -> Result<Option<(&'static str, ConstraintSpec)>, ApiError> {
    let mut found = Vec::new();
    if let Some(oc) = object(o, "output_config")? {
        if let Some(f) = field(oc, "format") {
            found.push(("output_config.format", f));
        }
    }
    if let Some(f) = field(o, "output_format") {
        found.push(("output_format", f));
    }
    if found.len() > 1 {
        return Err(bad(
            "output_format",
            "send the output format once: `output_config.format` or `output_format`, not both"
                .into(),
        ));
    }
    let Some((param, f)) = found.pop() else {
        return Ok(None);
    };
    match (f.get("type").and_then(Value::as_str), f.get("schema")) {
        (Some("json_schema"), Some(s @ (Value::Object(_) | Value::Bool(_)))) => {
            Ok(Some((param, ConstraintSpec::JsonSchema(s.clone()))))
        }
        (Some("json_schema"), _) => Err(bad(
            param,
            format!("`{param}.schema` must be a JSON Schema object"),
        )),
        (other, _) => Err(bad(
            param,
            format!(
                "`{param}.type` is {}; expected \"json_schema\"",
                other.map_or("missing".into(), |t| format!("`{t}`"))
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stencil_types::MessageContent;

    fn message_text(m: &ChatMessage) -> &str {
        match &m.content {
            Some(MessageContent::Text(t)) => t,
            _ => "",
        }
    }

    fn ok(body: Value) -> ValidMessages {
        messages_request(&body).unwrap()
    }

    fn base() -> Value {
        json!({"model": "m", "max_tokens": 32, "messages": [{"role": "user", "content": "hi"}]})
    }

    fn with(patch: Value) -> Value {
        let mut b = base();
        for (k, v) in patch.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    }

    #[test]
    fn blocks_map_onto_chat_messages() {
        let v = ok(with(json!({
            "system": [{"type": "text", "text": "Be brief."}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "...", "signature": "x"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
                    {"type": "text", "text": "And tomorrow?"}
                ]}
            ],
            "tools": [{"name": "weather", "description": "d", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "stop_sequences": ["END"], "temperature": 0.2, "top_k": 5, "stream": true
        })));
        let m = &v.request.messages;
        assert_eq!(m.len(), 5);
        assert_eq!(
            (m[0].role, message_text(&m[0])),
            (Role::System, "Be brief.")
        );
        assert_eq!(message_text(&m[2]), "Checking.");
        let call = &m[2].tool_calls.as_ref().unwrap()[0];
        assert_eq!(call["function"]["arguments"], r#"{"city":"Paris"}"#);
        assert_eq!(
            (m[3].role, m[3].tool_call_id.as_deref()),
            (Role::Tool, Some("toolu_1"))
        );
        assert_eq!(message_text(&m[3]), "sunny");
        assert_eq!(
            (m[4].role, message_text(&m[4])),
            (Role::User, "And tomorrow?")
        );
        assert_eq!(v.request.tool_choice, Some(ToolChoice::Required));
        assert!(!v.request.parallel_tool_calls);
        assert_eq!(
            v.request.tools[0].function.parameters,
            Some(json!({"type": "object"}))
        );
        assert_eq!(v.request.params.stop, ["END"]);
        assert_eq!(v.request.params.sampling.top_k, Some(5));
        assert!(v.stream);
        stencil_types::conversation::validate_conversation(m).unwrap();

        let v = ok(with(
            json!({"output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}}),
        ));
        assert_eq!(v.constraint_param, "output_config.format");
        assert!(matches!(
            v.request.constraint,
            Some(ConstraintSpec::JsonSchema(_))
        ));
        let v = ok(with(json!({"tool_choice": {"type": "tool", "name": "f"}})));
        assert_eq!(v.request.tool_choice, Some(ToolChoice::Named("f".into())));
    }

    #[test]
    fn bad_fields_are_named() {
        let cases = [
            (
                json!({"max_tokens": 5, "messages": []}),
                "model",
                "`model` is missing",
            ),
            (
                json!({"model": "m", "messages": []}),
                "max_tokens",
                "required",
            ),
            (
                with(json!({"max_tokens": 0})),
                "max_tokens",
                "integer from 1",
            ),
            (with(json!({"messages": []})), "messages", "empty"),
            (
                with(json!({"temperature": 1.5})),
                "temperature",
                "from 0 to 1",
            ),
            (
                with(json!({"messages": [{"role": "system", "content": "x"}]})),
                "messages",
                "goes in `system`",
            ),
            (
                with(
                    json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}),
                ),
                "messages",
                "messages[0].content[0] is a `image` block, but this model accepts text only",
            ),
            (
                with(
                    json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "zz"}]}]}),
                ),
                "messages",
                "`zz` matches no tool_use",
            ),
            (
                with(
                    json!({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "{"}]}),
                ),
                "messages",
                "prefilled",
            ),
            (
                with(json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]})),
                "tools",
                "server tool",
            ),
            (
                with(json!({"tools": [{"name": "f"}]})),
                "tools",
                "tools[0].input_schema is missing",
            ),
            (
                with(json!({"tool_choice": {"type": "sometimes"}})),
                "tool_choice",
                "`sometimes`",
            ),
            (
                with(json!({"tool_choice": {"type": "tool"}})),
                "tool_choice",
                "needs `name`",
            ),
            (
                with(json!({"thinking": {"type": "enabled", "budget_tokens": 1024}})),
                "thinking",
                "not supported",
            ),
            (
                with(json!({"stop_sequences": "x\u{0}", "system": 5})),
                "system",
                "string or an array",
            ),
            (
                with(json!({"output_config": {"format": {"type": "xml"}}})),
                "output_config.format",
                "`xml`",
            ),
            (
                with(json!({"stop_sequences": [1]})),
                "stop_sequences",
                "stop_sequences[0] must be a string",
            ),
            (json!("x"), "body", "JSON object"),
        ];
        for (body, param, text) in cases {
            let e = messages_request(&body).unwrap_err();
            assert_eq!(e.status, 400, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {e}");
            assert!(e.message.contains(text), "{body}: {e}");
        }
    }
}
