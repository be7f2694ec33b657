//! `/api/chat` and `/api/generate` bodies -> validated engine requests.
//!
//! Ollama's tool calls carry no ids: an assistant's calls get ids here (`call_<message>_<n>`)
//! and each later `tool` message answers the first unanswered call with its `tool_name` (or the
//! first unanswered call). Images, extended thinking, `suffix`, `template` and `context` are a
//! 400 naming the field; unknown fields and options are ignored, as Ollama does.

use serde_json::{json, Value};
use stencil_types::api::fields::{
    array, body_object, boolean, field, integer, number, object, seed, string, string_list,
    tool_choice, Obj,
};
use stencil_types::api::{ApiError, ErrorFields};
use stencil_types::{
    json_kind as kind, ChatMessage, ChatRequest, ConstraintSpec, GenerateParams, Role,
    SamplingParams, Tool,
};

/// The limit when `num_predict` is absent or -1 ("until the context is full"): capped to the
/// room the prompt leaves.
pub const DEFAULT_NUM_PREDICT: usize = 4096;

/// A checked `/api/chat` or `/api/generate` request.
#[derive(Debug, Clone)]
pub struct ValidOllama {
    pub model: String,
    pub stream: bool,
    pub request: ChatRequest,
    /// `format` or `tools`.
    pub constraint_param: &'static str,
    /// `messages` (`/api/chat`) or `prompt` (`/api/generate`).
    pub prompt_param: &'static str,
}

impl ValidOllama {
    /// The fields errors about this request's constraint, prompt and length are reported against.
    pub fn error_fields(&self) -> ErrorFields {
        ErrorFields {
            constraint: self.constraint_param,
            prompt: self.prompt_param,
            max_tokens: "options.num_predict",
        }
    }
}

fn bad(param: &str, message: String) -> ApiError {
    ApiError::invalid(param, message)
}

/// `options` (sampling and length) plus the top-level fields both endpoints share.
fn common(o: &Obj) -> Result<ValidOllama, ApiError> {
    let model = match string(o, "model")? {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => return Err(bad("model", "`model` is required".into())),
    };
    let empty = Obj::new();
    let opts = object(o, "options")?.unwrap_or(&empty);
    let named = |e: ApiError| ApiError {
        param: e.param.map(|p| format!("options.{p}")),
        message: e.message.replacen('`', "`options.", 1),
        ..e
    };
    let max_tokens = match integer(opts, "num_predict", -2, u32::MAX as i64).map_err(named)? {
        None | Some(-1) | Some(-2) => DEFAULT_NUM_PREDICT,
        Some(0) => return Err(bad(
            "options.num_predict",
            "`options.num_predict` is 0: nothing would be generated; send a positive number or -1"
                .into(),
        )),
        Some(n) if n < 0 => unreachable!("range checked"),
        Some(n) => n as usize,
    };
    let explicit = matches!(
        integer(opts, "num_predict", 1, u32::MAX as i64),
        Ok(Some(_))
    );
    for name in ["presence_penalty", "frequency_penalty"] {
        if number(opts, name, -2.0, 2.0)
            .map_err(named)?
            .is_some_and(|x| x != 0.0)
        {
            return Err(bad(
                &format!("options.{name}"),
                format!("`options.{name}` is not supported (use `repeat_penalty`); send 0 or leave it out"),
            ));
        }
    }
    let sampling = SamplingParams {
        temperature: number(opts, "temperature", 0.0, 2.0)
            .map_err(named)?
            .map_or(0.8, |x| x as f32),
        top_p: number(opts, "top_p", 0.0, 1.0)
            .map_err(named)?
            .map(|x| x as f32),
        top_k: integer(opts, "top_k", 0, 1 << 20)
            .map_err(named)?
            .filter(|&k| k > 0)
            .map(|k| k as usize),
        min_p: number(opts, "min_p", 0.0, 1.0)
            .map_err(named)?
            .filter(|&p| p > 0.0)
            .map(|x| x as f32),
        repetition_penalty: number(opts, "repeat_penalty", 0.01, 10.0)
            .map_err(named)?
            .map(|x| x as f32),
        seed: seed(opts, "seed").map_err(named)?,
    };
    sampling.validate().map_err(|e| {
        let mut e = ApiError::from_request(&e, "messages");
        e.param = e.param.map(|p| format!("options.{p}"));
        e
    })?;
    let params = GenerateParams {
        max_tokens,
        sampling,
        stop: string_list(opts, "stop", 16).map_err(named)?,
        ..GenerateParams::default()
    };
    if boolean(o, "logprobs")? == Some(true) || field(o, "top_logprobs").is_some() {
        return Err(bad(
            "logprobs",
            "log probabilities are not supported".into(),
        ));
    }
    match field(o, "think") {
        None | Some(Value::Bool(false)) => {}
        Some(v) => {
            return Err(bad(
                "think",
                format!("`think` is {v}, but thinking is not supported by this server; leave it out or send false"),
            ))
        }
    }
    let constraint = match field(o, "format") {
        None => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) if s == "json" => Some(ConstraintSpec::AnyJsonObject),
        Some(s @ (Value::Object(_) | Value::Bool(_))) => {
            Some(ConstraintSpec::JsonSchema(s.clone()))
        }
        Some(v) => {
            return Err(bad(
                "format",
                format!("`format` must be \"json\" or a JSON Schema object, not {v}"),
            ))
        }
    };
    Ok(ValidOllama {
        model,
        stream: boolean(o, "stream")?.unwrap_or(true),
        constraint_param: if constraint.is_some() {
            "format"
        } else {
            "tools"
        },
        prompt_param: "messages",
        request: ChatRequest {
            constraint,
            params,
            reserve_max_tokens: explicit,
            ..ChatRequest::default()
        },
    })
}

fn no_images(param: &str, v: Option<&Value>) -> Result<(), ApiError> {
    match v {
        Some(Value::Array(a)) if !a.is_empty() => Err(bad(
            param,
            format!("`{param}` holds images, but this model accepts text only"),
        )),
        _ => Ok(()),
    }
}

/// Checks an `/api/chat` body.
pub fn chat_request(body: &Value) -> Result<ValidOllama, ApiError> {
    let o = body_object(body)?;
    let mut v = common(o)?;
    let list =
        array(o, "messages")?.ok_or_else(|| bad("messages", "`messages` is missing".into()))?;
    // Calls made and not yet answered: (id, name).
    let mut pending: Vec<(String, String)> = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let at = |s: String| bad("messages", s);
        let mo = m
            .as_object()
            .ok_or_else(|| at(format!("messages[{i}] must be an object, not {}", kind(m))))?;
        let role = mo
            .get("role")
            .and_then(Value::as_str)
            .and_then(Role::parse)
            .ok_or_else(|| {
                at(format!(
                    "messages[{i}].role must be one of system, user, assistant, tool; got {}",
                    mo.get("role").map_or("nothing".into(), |r| r.to_string())
                ))
            })?;
        let content = match mo.get("content") {
            None | Some(Value::Null) => "",
            Some(Value::String(s)) => s.as_str(),
            Some(c) => {
                return Err(at(format!(
                    "messages[{i}].content must be a string, not {}",
                    kind(c)
                )))
            }
        };
        no_images(&format!("messages[{i}].images"), mo.get("images")).map_err(|e| at(e.message))?;
        let mut msg = ChatMessage::new(role, content);
        match (role, mo.get("tool_calls")) {
            (_, None | Some(Value::Null)) => {}
            (Role::Assistant, Some(Value::Array(calls))) => {
                let mut out = Vec::new();
                for (j, c) in calls.iter().enumerate() {
                    let f = &c["function"];
                    let name = f["name"].as_str().ok_or_else(|| {
                        at(format!("messages[{i}].tool_calls[{j}].function.name is missing or not a string"))
                    })?;
                    let args = match &f["arguments"] {
                        a @ Value::Object(_) => a.to_string(),
                        Value::String(s) => s.clone(),
                        Value::Null => "{}".into(),
                        other => {
                            return Err(at(format!(
                                "messages[{i}].tool_calls[{j}].function.arguments must be an object, not {}",
                                kind(other)
                            )))
                        }
                    };
                    let id = c["id"]
                        .as_str()
                        .map_or_else(|| format!("call_{i}_{j}"), str::to_string);
                    pending.push((id.clone(), name.to_string()));
                    out.push(json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}));
                }
                msg.tool_calls = Some(out);
            }
            (_, Some(_)) => {
                return Err(at(format!(
                    "messages[{i}].tool_calls must be an array on an assistant message"
                )))
            }
        }
        if role == Role::Tool {
            let name = mo
                .get("tool_name")
                .or(mo.get("name"))
                .and_then(Value::as_str);
            let by_id = mo.get("tool_call_id").and_then(Value::as_str);
            let pos = pending
                .iter()
                .position(|(id, n)| by_id.map_or(name.is_none_or(|name| n == name), |x| x == id))
                .or_else(|| (by_id.is_none() && !pending.is_empty()).then_some(0))
                .ok_or_else(|| {
                    at(format!(
                        "messages[{i}] is a tool result, but no earlier assistant tool call is waiting for one{}",
                        name.map_or(String::new(), |n| format!(" from `{n}`"))
                    ))
                })?;
            let (id, _) = pending.remove(pos);
            msg.tool_call_id = Some(id);
        }
        v.request.messages.push(msg);
    }
    // Ollama has no tool choice; stencil takes OpenAI's, at the top level or in `options`
    // (where the official clients can send it), so a small model can be made to call a tool.
    let choices = [
        ("tool_choice", field(o, "tool_choice")),
        (
            "options.tool_choice",
            object(o, "options")?.and_then(|op| field(op, "tool_choice")),
        ),
    ];
    if let [(_, Some(_)), (_, Some(_))] = choices {
        return Err(bad(
            "tool_choice",
            "send `tool_choice` once: at the top level or in `options`, not both".into(),
        ));
    }
    if let Some((param, Some(tc))) = choices.into_iter().find(|(_, v)| v.is_some()) {
        v.request.tool_choice = Some(tool_choice(param, tc)?);
    }
    if let Some(tools) = array(o, "tools")? {
        v.request.tools = tools
            .iter()
            .enumerate()
            .map(|(i, t)| {
                serde_json::from_value::<Tool>(t.clone())
                    .map_err(|e| bad("tools", format!("tools[{i}]: {e}")))
            })
            .collect::<Result<_, _>>()?;
    }
    Ok(v)
}

/// Checks an `/api/generate` body: `prompt` (with `system`) through the chat template, or
/// as is with `raw: true`.
pub fn generate_request(body: &Value) -> Result<ValidOllama, ApiError> {
    let o = body_object(body)?;
    let mut v = common(o)?;
    v.prompt_param = "prompt";
    let prompt = string(o, "prompt")?.unwrap_or_default();
    if prompt.is_empty() {
        return Err(bad(
            "prompt",
            "`prompt` is empty (the model is always loaded here; nothing to generate)".into(),
        ));
    }
    no_images("images", field(o, "images"))?;
    for name in ["suffix", "template"] {
        if string(o, name)?.is_some_and(|s| !s.is_empty()) {
            return Err(bad(name, format!("`{name}` is not supported")));
        }
    }
    if array(o, "context")?.is_some_and(|c| !c.is_empty()) {
        return Err(bad(
            "context",
            "`context` (token ids of an earlier answer) is not supported; send the conversation to /api/chat".into(),
        ));
    }
    if boolean(o, "raw")? == Some(true) {
        v.request.prompt = Some(prompt.to_string());
    } else {
        if let Some(s) = string(o, "system")? {
            v.request.messages.push(ChatMessage::system(s));
        }
        v.request.messages.push(ChatMessage::user(prompt));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_fields_map_onto_the_request() {
        let v = chat_request(&json!({
            "model": "m", "stream": false, "format": "json",
            "options": {"tool_choice": {"type": "function", "function": {"name": "weather"}}, "temperature": 0, "top_k": 20, "seed": 4, "num_predict": 12, "stop": ["\n\n"], "num_ctx": 2048},
            "messages": [
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "weather", "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "tool_name": "weather", "content": "sunny"}
            ],
            "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
        }))
        .unwrap();
        assert!(!v.stream);
        let r = &v.request;
        assert_eq!(
            (
                r.params.max_tokens,
                r.params.sampling.top_k,
                r.params.sampling.seed
            ),
            (12, Some(20), Some(4))
        );
        assert!(r.reserve_max_tokens);
        assert!(matches!(r.constraint, Some(ConstraintSpec::AnyJsonObject)));
        let call = &r.messages[1].tool_calls.as_ref().unwrap()[0];
        assert_eq!(call["function"]["arguments"], r#"{"city":"Paris"}"#);
        assert_eq!(r.messages[2].tool_call_id.as_deref(), call["id"].as_str());
        stencil_types::conversation::validate_conversation(&r.messages).unwrap();
        assert_eq!(r.tools.len(), 1);
        assert_eq!(
            r.tool_choice,
            Some(stencil_types::ToolChoice::Named("weather".into()))
        );

        let v = generate_request(
            &json!({"model": "m", "prompt": "Once", "raw": true, "format": {"type": "string"}}),
        )
        .unwrap();
        assert_eq!(v.request.prompt.as_deref(), Some("Once"));
        assert_eq!(v.request.params.max_tokens, DEFAULT_NUM_PREDICT);
        assert!(!v.request.reserve_max_tokens);
        let v = generate_request(&json!({"model": "m", "prompt": "Hi", "system": "S"})).unwrap();
        assert_eq!(v.request.messages.len(), 2);
    }

    #[test]
    fn bad_fields_are_named() {
        let chat = |extra: Value| {
            let mut b = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
            for (k, v) in extra.as_object().unwrap() {
                b[k] = v.clone();
            }
            chat_request(&b).unwrap_err()
        };
        let cases = [
            (chat(json!({"model": ""})), "model", "required"),
            (
                chat(json!({"format": "xml"})),
                "format",
                "\"json\" or a JSON Schema",
            ),
            (
                chat(json!({"options": {"temperature": "hot"}})),
                "options.temperature",
                "`options.temperature` must be a number",
            ),
            (
                chat(json!({"options": {"num_predict": 0}})),
                "options.num_predict",
                "nothing would be generated",
            ),
            (
                chat(json!({"options": {"presence_penalty": 1}})),
                "options.presence_penalty",
                "not supported",
            ),
            (
                chat(json!({"options": {"top_p": 0}})),
                "options.top_p",
                "top_p",
            ),
            (chat(json!({"think": true})), "think", "not supported"),
            (chat(json!({"logprobs": true})), "logprobs", "not supported"),
            (
                chat(json!({"options": {"tool_choice": "sometimes"}})),
                "options.tool_choice",
                "`sometimes`",
            ),
            (
                chat(json!({"tool_choice": "auto", "options": {"tool_choice": "auto"}})),
                "tool_choice",
                "once",
            ),
            (
                chat(json!({"messages": [{"role": "user", "content": "x", "images": ["aGk="]}]})),
                "messages",
                "text only",
            ),
            (
                chat(json!({"messages": [{"role": "tool", "content": "x"}]})),
                "messages",
                "no earlier assistant tool call",
            ),
            (
                chat(json!({"messages": [{"role": "wizard", "content": "x"}]})),
                "messages",
                "messages[0].role",
            ),
            (
                chat(json!({"tools": [{"type": "function"}]})),
                "tools",
                "tools[0]",
            ),
            (chat(json!({"messages": 3})), "messages", "must be an array"),
            (
                generate_request(&json!({"model": "m", "prompt": ""})).unwrap_err(),
                "prompt",
                "empty",
            ),
            (
                generate_request(&json!({"model": "m", "prompt": "a", "context": [1, 2]}))
                    .unwrap_err(),
                "context",
                "/api/chat",
            ),
            (
                generate_request(&json!({"model": "m", "prompt": "a", "suffix": "b"})).unwrap_err(),
                "suffix",
                "not supported",
            ),
        ];
        for (e, param, text) in cases {
            assert_eq!(e.status, 400, "{e}");
            assert_eq!(e.param.as_deref(), Some(param), "{e}");
            assert!(e.message.contains(text), "{e}");
        }
    }
}
