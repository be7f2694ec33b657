//! Request bodies -> validated runtime requests.
//!
//! Bodies are read as JSON values and checked field by field, so every error names its field
//! (`temperature must be a number from 0 to 2, not "hot"`). Fields of the OpenAI API and of
//! other local servers' constraint extensions are understood; a field we know but cannot honour
//! (`n` > 1, `logprobs`, non-zero `presence_penalty`) is a 400, never silently dropped; fields
//! we do not know (`user`, `metadata`...) are ignored as OpenAI does.

use serde_json::Value;
use stencil_types::{
    json_kind as kind, ChatMessage, ChatRequest, GenerateParams, Reasoning, Role, SamplingParams,
    Tool,
};

mod constraints;
mod structural;

pub(crate) use constraints::schema_value;

use crate::error::{ApiError, ErrorFields};
use constraints::{constraints, whitespace};
use stencil_types::api::fields::{
    body_object, boolean, field, integer, number, seed, string, string_list, tool_choice, Obj,
};

/// A checked request: the runtime request plus what the HTTP layer needs.
#[derive(Debug, Clone)]
pub struct ValidRequest {
    /// The `model` field, if given.
    pub model: Option<String>,
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    pub request: ChatRequest,
    /// The field the constraint came from, for error messages about it.
    pub constraint_param: &'static str,
}

/// Sampling, length and stop fields shared by every endpoint; the token limit is read from the
/// first of `max_fields` present.
pub(crate) fn generation(
    o: &Obj,
    default_max_tokens: usize,
    max_fields: &[&str],
) -> Result<GenerateParams, ApiError> {
    let mut max = None;
    for name in max_fields {
        max = max.or(integer(o, name, 1, u32::MAX as i64)?);
    }
    let max = max.map_or(default_max_tokens, |n| n as usize);
    if let Some(n) = integer(o, "n", 1, 128)
        .map_err(|_| ApiError::invalid("n", "`n` must be 1: one choice per request is supported"))?
    {
        if n != 1 {
            return Err(ApiError::invalid(
                "n",
                format!("`n` is {n}, but only n = 1 is supported; send {n} requests instead"),
            ));
        }
    }
    for name in ["presence_penalty", "frequency_penalty"] {
        if let Some(x) = number(o, name, -2.0, 2.0)? {
            if x != 0.0 {
                return Err(ApiError::invalid(
                    name,
                    format!("`{name}` is not supported (use `repetition_penalty`); send 0 or leave it out"),
                ));
            }
        }
    }
    if boolean(o, "logprobs")? == Some(true) || field(o, "top_logprobs").is_some() {
        return Err(ApiError::invalid(
            "logprobs",
            "log probabilities are not supported",
        ));
    }
    if field(o, "logit_bias").is_some_and(|v| v.as_object().is_none_or(|m| !m.is_empty())) {
        return Err(ApiError::invalid(
            "logit_bias",
            "`logit_bias` is not supported",
        ));
    }
    let sampling = SamplingParams {
        temperature: number(o, "temperature", 0.0, 2.0)?.map_or(1.0, |x| x as f32),
        top_p: number(o, "top_p", 0.0, 1.0)?.map(|x| x as f32),
        top_k: match integer(o, "top_k", -1, 1 << 20)? {
            Some(k) if k > 0 => Some(k as usize),
            _ => None,
        },
        min_p: number(o, "min_p", 0.0, 1.0)?.map(|x| x as f32),
        repetition_penalty: number(o, "repetition_penalty", 0.01, 10.0)?.map(|x| x as f32),
        seed: seed(o, "seed")?,
    };
    // A sampling error names its own parameter, never the prompt field.
    sampling
        .validate()
        .map_err(|e| ApiError::from_request(&e, "messages"))?;
    let stop = string_list(o, "stop", 16)?;
    Ok(GenerateParams {
        max_tokens: max,
        sampling,
        stop,
        fast_forward: true,
        loop_guard: boolean(o, "stencil_loop_guard")?.unwrap_or(true),
        reasoning: reasoning(o)?,
    })
}

/// `reasoning`: `true` (the `<think>`/`</think>` markers), or `{start, end, max_tokens}` with
/// each part optional. The model writes free text until the end marker, then the constraint
/// applies; the response carries it as `reasoning_content`.
fn reasoning(o: &Obj) -> Result<Option<Reasoning>, ApiError> {
    let r = match field(o, "reasoning") {
        None | Some(Value::Bool(false)) => return Ok(None),
        Some(Value::Bool(true)) => return Ok(Some(Reasoning::default())),
        Some(Value::Object(r)) => r,
        Some(v) => {
            return Err(ApiError::invalid(
                "reasoning",
                format!(
                    "`reasoning` must be true or an object {{start, end, max_tokens}}, not {}",
                    kind(v)
                ),
            ))
        }
    };
    if let Some(k) = r
        .keys()
        .find(|k| !["start", "end", "max_tokens"].contains(&k.as_str()))
    {
        return Err(ApiError::invalid(
            "reasoning",
            format!("`reasoning.{k}` is not supported (start, end and max_tokens are)"),
        ));
    }
    let named = |e: ApiError| ApiError::invalid("reasoning", e.to_string());
    let default = Reasoning::default();
    let end = string(r, "end").map_err(named)?.unwrap_or(&default.end);
    if end.is_empty() {
        return Err(ApiError::invalid(
            "reasoning",
            "`reasoning.end` must not be empty",
        ));
    }
    Ok(Some(Reasoning {
        start: string(r, "start")
            .map_err(named)?
            .unwrap_or(&default.start)
            .to_string(),
        end: end.to_string(),
        max_tokens: integer(r, "max_tokens", 1, 1 << 20)
            .map_err(named)?
            .map(|n| n as usize),
    }))
}

fn common(o: &Obj, default_max_tokens: usize) -> Result<ValidRequest, ApiError> {
    let model = string(o, "model")?.map(str::to_string);
    let stream = boolean(o, "stream")?.unwrap_or(false);
    let include_usage = match field(o, "stream_options") {
        None => false,
        Some(Value::Object(so)) => boolean(so, "include_usage")?.unwrap_or(false),
        Some(v) => {
            return Err(ApiError::invalid(
                "stream_options",
                format!("`stream_options` must be an object, not {}", kind(v)),
            ))
        }
    };
    let params = generation(
        o,
        default_max_tokens,
        &["max_completion_tokens", "max_tokens"],
    )?;
    // An explicit max_tokens is a promise of room for the output (OpenAI answers 400 when the
    // prompt leaves less); the default is capped to the room left.
    let reserve_max_tokens =
        field(o, "max_tokens").is_some() || field(o, "max_completion_tokens").is_some();
    let mut found = constraints(o)?;
    if found.len() > 1 {
        let names: Vec<&str> = found.iter().map(|(n, _)| *n).collect();
        return Err(ApiError::invalid(
            names[1],
            format!(
                "more than one output constraint in one request: {}; send one",
                names.join(" and ")
            ),
        ));
    }
    let (constraint_param, constraint) = match found.pop() {
        Some((p, c)) => (p, Some(c)),
        None => ("tools", None),
    };
    Ok(ValidRequest {
        model,
        stream,
        include_usage,
        constraint_param,
        request: ChatRequest {
            constraint,
            whitespace: whitespace(o)?,
            lenient: false,
            params,
            reserve_max_tokens,
            ..ChatRequest::default()
        },
    })
}

impl ValidRequest {
    /// The fields errors about this request's constraint and prompt are reported against.
    pub fn error_fields(&self) -> ErrorFields {
        ErrorFields {
            constraint: self.constraint_param,
            prompt: if self.request.prompt.is_some() {
                "prompt"
            } else {
                "messages"
            },
            max_tokens: "max_tokens",
        }
    }
}

/// One chat message, its shape checked first so that every error names the field in API terms.
fn message(i: usize, m: &Value) -> Result<ChatMessage, ApiError> {
    let bad = |msg: String| ApiError::invalid("messages", msg);
    let o = m
        .as_object()
        .ok_or_else(|| bad(format!("messages[{i}] must be an object, not {}", kind(m))))?;
    let role = match o.get("role") {
        Some(Value::String(r)) => r.as_str(),
        Some(v) => {
            return Err(bad(format!(
                "messages[{i}].role must be a string, not {}",
                kind(v)
            )))
        }
        None => return Err(bad(format!("messages[{i}].role is missing"))),
    };
    if Role::parse(role).is_none() {
        let all: Vec<&str> = Role::ALL.iter().map(|r| r.as_str()).collect();
        return Err(bad(format!(
            "messages[{i}].role is `{role}`; expected one of {}",
            all.join(", ")
        )));
    }
    match o.get("content") {
        Some(Value::String(_) | Value::Array(_)) => {}
        // Only an assistant message may leave out its content (it may carry tool calls).
        None | Some(Value::Null) if role == "assistant" => {}
        None | Some(Value::Null) => {
            return Err(bad(format!(
                "messages[{i}].content is missing: a `{role}` message needs content"
            )))
        }
        Some(v) => {
            return Err(bad(format!(
                "messages[{i}].content must be a string or an array of content parts, not {}",
                kind(v)
            )))
        }
    }
    if let Some(Value::Array(parts)) = o.get("content") {
        for (j, p) in parts.iter().enumerate() {
            let text_ok = p.get("text").is_none_or(Value::is_string);
            if !p.get("type").is_some_and(Value::is_string) || !text_ok {
                return Err(bad(format!(
                    "messages[{i}].content[{j}] must be an object with a string `type` (and a string `text` for text parts), not {p}"
                )));
            }
        }
    }
    serde_json::from_value::<ChatMessage>(m.clone()).map_err(|e| bad(format!("messages[{i}]: {e}")))
}

/// Checks a `/v1/chat/completions` body.
pub fn chat_request(body: &Value) -> Result<ValidRequest, ApiError> {
    let o = body_object(body)?;
    let mut v = common(o, 1024)?;
    let messages = match field(o, "messages") {
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(ApiError::invalid(
                "messages",
                format!(
                    "`messages` must be an array of messages, not {}",
                    kind(other)
                ),
            ))
        }
        None => return Err(ApiError::invalid("messages", "`messages` is missing")),
    };
    v.request.messages = messages
        .iter()
        .enumerate()
        .map(|(i, m)| message(i, m))
        .collect::<Result<_, _>>()?;
    if let Some(tools) = field(o, "tools") {
        let list = tools.as_array().ok_or_else(|| {
            ApiError::invalid(
                "tools",
                format!("`tools` must be an array, not {}", kind(tools)),
            )
        })?;
        v.request.tools = list
            .iter()
            .enumerate()
            .map(|(i, t)| {
                serde_json::from_value::<Tool>(t.clone())
                    .map_err(|e| ApiError::invalid("tools", format!("tools[{i}]: {e}")))
            })
            .collect::<Result<_, _>>()?;
    }
    if let Some(tc) = field(o, "tool_choice") {
        v.request.tool_choice = Some(tool_choice("tool_choice", tc)?);
    }
    v.request.parallel_tool_calls = boolean(o, "parallel_tool_calls")?.unwrap_or(true);
    v.request.strict_formats = boolean(o, "stencil_strict_formats")?.unwrap_or(false);
    v.request.oneof_as_anyof = boolean(o, "stencil_oneof_as_anyof")?.unwrap_or(false);
    if let Some(n) = integer(o, "stencil_max_tool_calls", 1, 64)? {
        v.request.max_tool_calls = n as u32;
    }
    if !v.request.tools.is_empty() && v.request.constraint.is_none() {
        v.constraint_param = "tools";
    }
    Ok(v)
}

/// Checks a `/v1/completions` body (raw prompt, no chat template).
pub fn completion_request(body: &Value) -> Result<ValidRequest, ApiError> {
    let o = body_object(body)?;
    let mut v = common(o, 16)?;
    let prompt = match field(o, "prompt") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => {
            a[0].as_str().unwrap_or_default().to_string()
        }
        Some(Value::Array(_)) => {
            return Err(ApiError::invalid(
                "prompt",
                "`prompt` must be one string (several prompts per request are not supported)",
            ))
        }
        Some(other) => {
            return Err(ApiError::invalid(
                "prompt",
                format!("`prompt` must be a string, not {}", kind(other)),
            ))
        }
        None => return Err(ApiError::invalid("prompt", "`prompt` is missing")),
    };
    if boolean(o, "echo")? == Some(true) {
        return Err(ApiError::invalid("echo", "`echo` is not supported"));
    }
    if string(o, "suffix")?.is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::invalid("suffix", "`suffix` is not supported"));
    }
    if integer(o, "best_of", 1, 1).is_err() {
        return Err(ApiError::invalid(
            "best_of",
            "only `best_of` = 1 is supported",
        ));
    }
    v.request.prompt = Some(prompt);
    v.request.special_tokens = boolean(o, "stencil_special_tokens")?.unwrap_or(false);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use stencil_types::{ConstraintSpec, ToolChoice, Whitespace};

    fn err(body: Value) -> ApiError {
        chat_request(&body).unwrap_err()
    }

    fn msgs() -> Value {
        json!([{"role": "user", "content": "hi"}])
    }

    #[test]
    fn fields_map_onto_the_runtime_request() {
        let v = chat_request(&json!({
            "model": "m", "messages": msgs(), "max_completion_tokens": 7, "temperature": 0.5,
            "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 3, "stop": ["\n", "END"],
            "stream": true, "stream_options": {"include_usage": true},
            "guided_regex": "[a-z]+", "guided_whitespace_pattern": " ?", "user": "ignored"
        }))
        .unwrap();
        assert_eq!(v.model.as_deref(), Some("m"));
        assert!(v.stream && v.include_usage);
        let r = &v.request;
        assert_eq!(r.params.max_tokens, 7);
        assert_eq!(r.params.sampling.temperature, 0.5);
        assert_eq!(r.params.sampling.top_k, Some(40));
        assert_eq!(r.params.sampling.seed, Some(3));
        assert_eq!(r.params.stop, vec!["\n", "END"]);
        assert!(matches!(&r.constraint, Some(ConstraintSpec::Regex(re)) if re == "[a-z]+"));
        assert_eq!(r.whitespace, Whitespace::Pattern(" ?".into()));
        assert_eq!(v.constraint_param, "guided_regex");

        let v = chat_request(&json!({"messages": msgs(), "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer"}, "strict": true}}})).unwrap();
        assert!(
            matches!(&v.request.constraint, Some(ConstraintSpec::JsonSchema(s)) if s == &json!({"type": "integer"}))
        );
        for (field, value) in [
            ("guided_grammar", json!("root ::= \"a\"")),
            ("grammar", json!("root ::= \"a\"")),
            ("structured_outputs", json!({"grammar": "root ::= \"a\""})),
        ] {
            let v = chat_request(&json!({"messages": msgs(), field: value})).unwrap();
            assert!(
                matches!(&v.request.constraint, Some(ConstraintSpec::Gbnf(g)) if g == "root ::= \"a\"")
            );
        }
        // Without a `name ::=` line a grammar is Lark.
        for (field, value) in [
            ("guided_grammar", json!("start: \"::=\"")),
            ("structured_outputs", json!({"grammar": "start: \"::=\""})),
            (
                "response_format",
                json!({"type": "grammar", "grammar": "start: \"::=\""}),
            ),
        ] {
            let v = chat_request(&json!({"messages": msgs(), field: value})).unwrap();
            assert!(
                matches!(&v.request.constraint, Some(ConstraintSpec::Lark(g)) if g == "start: \"::=\""),
                "{field}"
            );
        }
        let v = chat_request(
            &json!({"messages": msgs(), "structured_outputs": {"choice": ["a", "b"]}}),
        )
        .unwrap();
        assert!(matches!(&v.request.constraint, Some(ConstraintSpec::Choice(c)) if c.len() == 2));
        let v = chat_request(&json!({"messages": msgs(), "guided_json": "{\"type\": \"null\"}"}))
            .unwrap();
        assert!(matches!(
            &v.request.constraint,
            Some(ConstraintSpec::JsonSchema(_))
        ));
        let v =
            chat_request(&json!({"messages": msgs(), "response_format": {"type": "json_object"}}))
                .unwrap();
        assert!(matches!(
            &v.request.constraint,
            Some(ConstraintSpec::AnyJsonObject)
        ));
        let v = chat_request(&json!({"messages": msgs(), "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "f"}}, "parallel_tool_calls": false})).unwrap();
        assert_eq!(v.request.tool_choice, Some(ToolChoice::Named("f".into())));
        assert!(!v.request.parallel_tool_calls);
    }

    #[test]
    fn bad_fields_are_named() {
        let cases = [
            (json!({"messages": "hello"}), "messages", "must be an array"),
            (json!({}), "messages", "is missing"),
            (
                json!({"messages": [{"content": "x"}]}),
                "messages",
                "messages[0].role is missing",
            ),
            (
                json!({"messages": [{"role": "user", "content": 5}]}),
                "messages",
                "messages[0].content must be a string or an array of content parts, not a number",
            ),
            (
                json!({"messages": [{"role": "user"}]}),
                "messages",
                "messages[0].content is missing: a `user` message needs content",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"text": "x"}]}]}),
                "messages",
                "messages[0].content[0] must be an object with a string `type`",
            ),
            (
                json!({"messages": [7]}),
                "messages",
                "messages[0] must be an object",
            ),
            (
                json!({"messages": [{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}]}),
                "messages",
                "messages[1].role is `wizard`; expected one of system, developer, user, assistant, tool",
            ),
            (
                json!({"messages": msgs(), "top_p": 0}),
                "top_p",
                "top_p must be in (0, 1]",
            ),
            (json!({"messages": msgs(), "n": 2}), "n", "only n = 1"),
            (
                json!({"messages": msgs(), "temperature": "hot"}),
                "temperature",
                "from 0 to 2",
            ),
            (
                json!({"messages": msgs(), "temperature": 3}),
                "temperature",
                "from 0 to 2",
            ),
            (
                json!({"messages": msgs(), "max_tokens": 0}),
                "max_tokens",
                "integer from 1",
            ),
            (
                json!({"messages": msgs(), "stop": 5}),
                "stop",
                "string or an array",
            ),
            (
                json!({"messages": msgs(), "stream": "yes"}),
                "stream",
                "true or false",
            ),
            (
                json!({"messages": msgs(), "presence_penalty": 1}),
                "presence_penalty",
                "not supported",
            ),
            (
                json!({"messages": msgs(), "logprobs": true}),
                "logprobs",
                "not supported",
            ),
            (
                json!({"messages": msgs(), "guided_regex": "a", "guided_choice": ["a"]}),
                "guided_choice",
                "more than one output constraint",
            ),
            (
                json!({"messages": msgs(), "response_format": {"type": "json_object"}, "guided_json": {}}),
                "guided_json",
                "response_format and guided_json",
            ),
            (
                json!({"messages": msgs(), "response_format": {"type": "xml"}}),
                "response_format.type",
                "`xml`",
            ),
            (
                json!({"messages": msgs(), "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}),
                "response_format.json_schema.schema",
                "missing",
            ),
            (
                json!({"messages": msgs(), "guided_choice": []}),
                "guided_choice",
                "empty",
            ),
            (
                json!({"messages": msgs(), "response_format": {"type": "grammar"}}),
                "response_format.grammar",
                "missing",
            ),
            (
                json!({"messages": msgs(), "grammar": 5}),
                "grammar",
                "GBNF",
            ),
            (
                json!({"messages": msgs(), "tools": {}}),
                "tools",
                "must be an array",
            ),
            (
                json!({"messages": msgs(), "tools": [{"type": "function"}]}),
                "tools",
                "tools[0]: missing field `function`",
            ),
            (
                json!({"messages": msgs(), "tool_choice": "sometimes"}),
                "tool_choice",
                "`sometimes`",
            ),
            (json!([1]), "body", "JSON object"),
        ];
        for (body, param, text) in cases {
            let e = err(body.clone());
            assert_eq!(e.status, 400, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {e}");
            assert!(e.message.contains(text), "{body}: {e}");
        }
    }

    #[test]
    fn completion_bodies() {
        let v = completion_request(&json!({"prompt": ["Once"], "max_tokens": 5})).unwrap();
        assert_eq!(v.request.prompt.as_deref(), Some("Once"));
        assert_eq!(v.request.params.max_tokens, 5);
        assert_eq!(
            completion_request(&json!({"prompt": "x"}))
                .unwrap()
                .request
                .params
                .max_tokens,
            16
        );
        for (body, param) in [
            (json!({}), "prompt"),
            (json!({"prompt": ["a", "b"]}), "prompt"),
            (json!({"prompt": 3}), "prompt"),
            (json!({"prompt": "a", "echo": true}), "echo"),
        ] {
            assert_eq!(
                completion_request(&body).unwrap_err().param.as_deref(),
                Some(param)
            );
        }
    }
}
