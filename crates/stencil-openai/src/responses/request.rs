//! `POST /v1/responses` bodies -> validated engine requests.

use serde_json::{json, Map, Value};
use stencil_types::api::fields::{
    array, body_object, boolean, field, object, string, tool_choice, Obj,
};
use stencil_types::api::{ApiError, ErrorFields};
use stencil_types::{
    json_kind as kind, ChatMessage, ChatRequest, ConstraintSpec, FunctionDef, Role, Tool,
    TruncationPolicy,
};

use crate::request::{generation, schema_value};

/// A checked Responses request.
#[derive(Debug, Clone)]
pub struct ValidResponses {
    pub model: Option<String>,
    pub stream: bool,
    pub request: ChatRequest,
    /// `text.format` or `tools`.
    pub constraint_param: &'static str,
    /// Request fields the response object repeats (`instructions`, `tools`, `text`...).
    pub echo: Map<String, Value>,
}

impl ValidResponses {
    /// The fields errors about this request's constraint, prompt and length are reported against.
    pub fn error_fields(&self) -> ErrorFields {
        ErrorFields {
            constraint: self.constraint_param,
            prompt: "input",
            max_tokens: "max_output_tokens",
        }
    }
}

fn bad(param: &str, message: String) -> ApiError {
    ApiError::invalid(param, message)
}

/// Checks a `/v1/responses` body.
pub fn responses_request(body: &Value) -> Result<ValidResponses, ApiError> {
    let o = body_object(body)?;
    for (name, why) in [
        ("previous_response_id", "this server keeps no responses (stateless); send the whole conversation as `input` items"),
        ("conversation", "this server keeps no conversations (stateless); send the whole conversation as `input` items"),
    ] {
        if field(o, name).is_some() {
            return Err(bad(name, format!("`{name}` is not supported: {why}")));
        }
    }
    if boolean(o, "background")? == Some(true) {
        return Err(bad(
            "background",
            "background responses are not supported".into(),
        ));
    }
    if let Some(r) = object(o, "reasoning")? {
        if r.get("effort").is_some_and(|e| !e.is_null() && e != "none") {
            return Err(bad(
                "reasoning",
                "reasoning effort is not supported by this server; leave `reasoning` out".into(),
            ));
        }
    }
    let params = generation(o, 1024, &["max_output_tokens"])?;
    let mut messages = Vec::new();
    if let Some(i) = string(o, "instructions")? {
        messages.push(ChatMessage::system(i));
    }
    match field(o, "input") {
        Some(Value::String(s)) => messages.push(ChatMessage::user(s)),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                input_item(i, item, &mut messages)?;
            }
        }
        Some(v) => {
            return Err(bad(
                "input",
                format!(
                    "`input` must be a string or an array of items, not {}",
                    kind(v)
                ),
            ))
        }
        None => return Err(bad("input", "`input` is missing".into())),
    }
    let tools = tools(o)?;
    let tool_choice = match field(o, "tool_choice") {
        None => None,
        Some(tc) => Some(tool_choice("tool_choice", tc)?),
    };
    let constraint = text_format(o)?;
    let truncation = match string(o, "truncation")? {
        None | Some("disabled") => TruncationPolicy::Error,
        Some("auto") => TruncationPolicy::DropOldestTurns,
        Some(other) => {
            return Err(bad(
                "truncation",
                format!("`truncation` is `{other}`; expected auto or disabled"),
            ))
        }
    };
    let mut echo = Map::new();
    for k in [
        "instructions",
        "max_output_tokens",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "text",
        "parallel_tool_calls",
        "metadata",
        "truncation",
    ] {
        if let Some(v) = o.get(k) {
            echo.insert(k.to_string(), v.clone());
        }
    }
    Ok(ValidResponses {
        model: string(o, "model")?.map(str::to_string),
        stream: boolean(o, "stream")?.unwrap_or(false),
        constraint_param: if constraint.is_some() {
            "text.format"
        } else {
            "tools"
        },
        echo,
        request: ChatRequest {
            messages,
            tools,
            tool_choice,
            parallel_tool_calls: boolean(o, "parallel_tool_calls")?.unwrap_or(true),
            constraint,
            params,
            reserve_max_tokens: field(o, "max_output_tokens").is_some(),
            truncation,
            ..ChatRequest::default()
        },
    })
}

/// Text of a message item's `content`: a string or `input_text`/`output_text` parts.
fn item_text(here: &str, content: Option<&Value>) -> Result<String, ApiError> {
    match content {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, p) in parts.iter().enumerate() {
                match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("input_text" | "output_text" | "text"), Some(Value::String(t))) => {
                        text.push_str(t)
                    }
                    (Some(t @ ("input_image" | "input_file" | "input_audio")), _) => {
                        return Err(bad(
                            "input",
                            format!("{here}.content[{j}] is `{t}`, but this model accepts text only"),
                        ))
                    }
                    _ => {
                        return Err(bad(
                            "input",
                            format!("{here}.content[{j}] must be an input_text or output_text part with a string `text`, not {p}"),
                        ))
                    }
                }
            }
            Ok(text)
        }
        other => Err(bad(
            "input",
            format!(
                "{here}.content must be a string or an array of content parts, not {}",
                other.map_or("nothing", kind)
            ),
        )),
    }
}

fn input_item(i: usize, item: &Value, out: &mut Vec<ChatMessage>) -> Result<(), ApiError> {
    let here = format!("input[{i}]");
    let o = item.as_object().ok_or_else(|| {
        bad(
            "input",
            format!("{here} must be an object, not {}", kind(item)),
        )
    })?;
    let str_field = |name: &str| {
        o.get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| bad("input", format!("{here}.{name} is missing or not a string")))
    };
    match o.get("type").and_then(Value::as_str).unwrap_or("message") {
        "message" => {
            let role = match o.get("role").and_then(Value::as_str) {
                Some(r @ ("user" | "system" | "developer" | "assistant")) => {
                    Role::parse(r).expect("listed roles parse")
                }
                other => {
                    return Err(bad(
                        "input",
                        format!("{here}.role is {}; expected user, system, developer or assistant", other.map_or("missing".into(), |r| format!("`{r}`"))),
                    ))
                }
            };
            out.push(ChatMessage::new(role, &item_text(&here, o.get("content"))?));
        }
        "function_call" => {
            let call = json!({"id": str_field("call_id")?, "type": "function",
                "function": {"name": str_field("name")?, "arguments": str_field("arguments")?}});
            // Consecutive calls belong to one assistant turn.
            match out.last_mut() {
                Some(m) if m.role == Role::Assistant && m.tool_calls.is_some() => {
                    m.tool_calls.get_or_insert_with(Vec::new).push(call)
                }
                _ => {
                    let mut m = ChatMessage::new(Role::Assistant, "");
                    m.content = None;
                    m.tool_calls = Some(vec![call]);
                    out.push(m);
                }
            }
        }
        "function_call_output" => {
            let output = match o.get("output") {
                Some(Value::String(s)) => s.clone(),
                v @ Some(Value::Array(_)) => item_text(&format!("{here}.output"), v)?,
                _ => return Err(bad("input", format!("{here}.output must be a string"))),
            };
            let mut m = ChatMessage::new(Role::Tool, &output);
            m.tool_call_id = Some(str_field("call_id")?.to_string());
            out.push(m);
        }
        "reasoning" => {}
        other => {
            return Err(bad(
                "input",
                format!("{here} has type `{other}`; this server takes message, function_call and function_call_output items"),
            ))
        }
    }
    Ok(())
}

/// Flat function tools: `{"type": "function", "name", "description", "parameters", "strict"}`.
fn tools(o: &Obj) -> Result<Vec<Tool>, ApiError> {
    let Some(list) = array(o, "tools")? else {
        return Ok(Vec::new());
    };
    list.iter()
        .enumerate()
        .map(|(i, t)| {
            let here = format!("tools[{i}]");
            match t.get("type").and_then(Value::as_str) {
                Some("function") => {}
                other => {
                    return Err(bad(
                        "tools",
                        format!(
                            "{here} has type {}; only function tools are supported",
                            other.map_or("missing".into(), |t| format!("`{t}`"))
                        ),
                    ))
                }
            }
            let name = t
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("tools", format!("{here}.name is missing or not a string")))?;
            Ok(Tool {
                kind: "function".into(),
                function: FunctionDef {
                    name: name.to_string(),
                    description: t
                        .get("description")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    parameters: t.get("parameters").filter(|p| !p.is_null()).cloned(),
                    strict: t.get("strict").and_then(Value::as_bool),
                },
            })
        })
        .collect()
}

/// `text.format`: `text`, `json_object` or `json_schema` (`name`, `schema`, `strict`).
fn text_format(o: &Obj) -> Result<Option<ConstraintSpec>, ApiError> {
    let Some(text) = object(o, "text")? else {
        return Ok(None);
    };
    let Some(f) = field(text, "format") else {
        return Ok(None);
    };
    match f.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(ConstraintSpec::AnyJsonObject)),
        Some("json_schema") => match f.get("schema") {
            Some(s) => Ok(Some(ConstraintSpec::JsonSchema(schema_value(
                "text.format.schema",
                s,
            )?))),
            None => Err(bad(
                "text.format.schema",
                "`text.format.schema` is missing".into(),
            )),
        },
        other => Err(bad(
            "text.format.type",
            format!(
                "`text.format.type` is {}; expected text, json_object or json_schema",
                other.map_or("missing".into(), |t| format!("`{t}`"))
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stencil_types::ToolChoice;

    #[test]
    fn items_map_onto_chat_messages() {
        let v = responses_request(&json!({
            "model": "m", "instructions": "Be brief.", "max_output_tokens": 40, "stream": true,
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{}"},
                {"type": "function_call", "call_id": "call_2", "name": "weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                {"type": "function_call_output", "call_id": "call_2", "output": "rain"}
            ],
            "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "weather"},
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}
        }))
        .unwrap();
        let m = &v.request.messages;
        assert_eq!(m.len(), 5);
        assert_eq!(m[2].tool_calls.as_ref().unwrap().len(), 2);
        assert_eq!(m[4].tool_call_id.as_deref(), Some("call_2"));
        stencil_types::conversation::validate_conversation(m).unwrap();
        assert_eq!(v.request.params.max_tokens, 40);
        assert_eq!(
            v.request.tool_choice,
            Some(ToolChoice::Named("weather".into()))
        );
        assert!(matches!(
            v.request.constraint,
            Some(ConstraintSpec::JsonSchema(_))
        ));
        assert_eq!(v.echo["instructions"], "Be brief.");
    }

    #[test]
    fn bad_fields_are_named() {
        let cases = [
            (json!({}), "input", "missing"),
            (json!({"input": 3}), "input", "string or an array"),
            (
                json!({"input": "x", "previous_response_id": "resp_1"}),
                "previous_response_id",
                "stateless",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}),
                "input",
                "input[0].content[0] is `input_image`",
            ),
            (
                json!({"input": [{"type": "item_reference", "id": "x"}]}),
                "input",
                "`item_reference`",
            ),
            (
                json!({"input": [{"type": "function_call", "name": "f"}]}),
                "input",
                "input[0].call_id is missing",
            ),
            (
                json!({"input": "x", "tools": [{"type": "web_search"}]}),
                "tools",
                "only function tools",
            ),
            (
                json!({"input": "x", "text": {"format": {"type": "xml"}}}),
                "text.format.type",
                "`xml`",
            ),
            (
                json!({"input": "x", "text": {"format": {"type": "json_schema", "name": "a"}}}),
                "text.format.schema",
                "missing",
            ),
            (
                json!({"input": "x", "max_output_tokens": 0}),
                "max_output_tokens",
                "integer from 1",
            ),
            (
                json!({"input": "x", "temperature": 9}),
                "temperature",
                "from 0 to 2",
            ),
            (
                json!({"input": "x", "reasoning": {"effort": "high"}}),
                "reasoning",
                "not supported",
            ),
            (
                json!({"input": "x", "tool_choice": "maybe"}),
                "tool_choice",
                "`maybe`",
            ),
        ];
        for (body, param, text) in cases {
            let e = responses_request(&body).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {e}");
            assert!(e.message.contains(text), "{body}: {e}");
        }
    }
}
