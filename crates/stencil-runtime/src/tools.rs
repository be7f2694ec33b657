//! Tool calling: OpenAI-style tool definitions and calls, conversation checks, the Hermes
//! `<tool_call>` prompt convention, and an incremental parser for calls in generated text.
//!
//! - [`Tool`], [`ToolChoice`], [`ToolCall`]: the request and result types (OpenAI's shapes).
//! - [`validate_conversation`]: tool results must answer earlier calls, every call needs a
//!   result before the next user turn, and arguments in history must be JSON objects.
//! - [`hermes_messages`]: for chat templates that know nothing of tools, the tools go into the
//!   system turn as `<tools>...</tools>`, calls in history become `<tool_call>` blocks and
//!   results `<tool_response>` blocks.
//! - [`ToolCallParser`]: splits generated text into content and calls as it streams, so a
//!   server can send `delta.tool_calls` fragments.
//!
//! The grammar that makes calls valid is [`stencil_grammar::tools`].

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use stencil_grammar::tools::{ToolMode, ARGUMENTS_PREFIX, CALL_CLOSE, CALL_OPEN, NAME_PREFIX};

use crate::chat::{message_texts, ChatMessage, MessageContent};
use crate::error::{Result, RuntimeError};

/// One tool (`{"type": "function", "function": {...}}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionDef,
}

fn function_type() -> String {
    "function".into()
}

/// A function the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionDef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments object (absent: no parameters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// OpenAI's `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    None,
    Auto,
    Required,
    /// `{"type": "function", "function": {"name": ...}}`, or the bare name on the CLI.
    Named(String),
}

impl ToolChoice {
    /// Parses the JSON forms: `"none" | "auto" | "required"` or the named-function object.
    pub fn from_json(v: &Value) -> std::result::Result<Self, String> {
        match v {
            Value::String(s) => match s.as_str() {
                "none" => Ok(Self::None),
                "auto" => Ok(Self::Auto),
                "required" => Ok(Self::Required),
                other => Err(format!(
                    "tool_choice `{other}` is not one of none, auto, required (or a function object)"
                )),
            },
            Value::Object(o) => {
                let name = o
                    .get("function")
                    .and_then(|f| f.get("name"))
                    .and_then(Value::as_str)
                    .ok_or("tool_choice object needs `function.name` (a string)")?;
                if let Some(t) = o.get("type") {
                    if t != "function" {
                        return Err(format!("tool_choice.type is {t}; expected \"function\""));
                    }
                }
                Ok(Self::Named(name.to_string()))
            }
            other => Err(format!(
                "tool_choice must be a string or an object, not {other}"
            )),
        }
    }

    /// The CLI form: `none`, `auto`, `required`, or a tool name.
    pub fn from_cli(s: &str) -> Self {
        match s {
            "none" => Self::None,
            "auto" => Self::Auto,
            "required" => Self::Required,
            name => Self::Named(name.to_string()),
        }
    }

    pub fn mode(&self) -> ToolMode {
        match self {
            Self::None => ToolMode::None,
            Self::Auto => ToolMode::Auto,
            Self::Required => ToolMode::Required,
            Self::Named(n) => ToolMode::Named(n.clone()),
        }
    }
}

/// A call the model made. `arguments` is the JSON text of an object, as generated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

impl ToolCall {
    /// OpenAI's shape: `{"id", "type": "function", "function": {"name", "arguments"}}`.
    pub fn to_openai(&self) -> Value {
        json!({"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}})
    }
}

/// A fresh `call_...` id (24 random letters and digits).
pub fn new_call_id() -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut rng = rand::rng();
    let id: String = (0..24)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect();
    format!("call_{id}")
}

/// Checks tool names and definitions.
pub fn validate_tools(tools: &[Tool]) -> Result<()> {
    for (i, t) in tools.iter().enumerate() {
        if t.kind != "function" {
            return Err(RuntimeError::InvalidChat(format!(
                "tools[{i}].type is `{}`; only `function` tools exist",
                t.kind
            )));
        }
        let n = &t.function.name;
        if n.is_empty()
            || n.len() > 64
            || !n
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
        {
            return Err(RuntimeError::InvalidChat(format!(
                "tools[{i}].function.name `{n}` must be 1-64 characters of a-z, A-Z, 0-9, _, -, ."
            )));
        }
        if tools[..i].iter().any(|o| &o.function.name == n) {
            return Err(RuntimeError::InvalidChat(format!(
                "tools[{i}].function.name `{n}` is used by an earlier tool too"
            )));
        }
    }
    Ok(())
}

/// A call in an assistant message of the history.
struct HistoryCall {
    id: String,
    name: String,
    arguments: Value,
}

fn history_calls(i: usize, m: &ChatMessage) -> Result<Vec<HistoryCall>> {
    let Some(calls) = &m.tool_calls else {
        return Ok(Vec::new());
    };
    if m.role != "assistant" {
        return Err(RuntimeError::InvalidChat(format!(
            "messages[{i}] has tool_calls but role `{}`; only assistant messages make calls",
            m.role
        )));
    }
    calls
        .iter()
        .enumerate()
        .map(|(j, c)| {
            let at = format!("messages[{i}].tool_calls[{j}]");
            let id = c.get("id").and_then(Value::as_str).ok_or_else(|| {
                RuntimeError::InvalidChat(format!("{at}.id is missing or not a string"))
            })?;
            let f = c
                .get("function")
                .ok_or_else(|| RuntimeError::InvalidChat(format!("{at}.function is missing")))?;
            let name = f.get("name").and_then(Value::as_str).ok_or_else(|| {
                RuntimeError::InvalidChat(format!("{at}.function.name is missing or not a string"))
            })?;
            let arguments = match f.get("arguments") {
                Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                    Ok(v @ Value::Object(_)) => v,
                    Ok(other) => {
                        return Err(RuntimeError::InvalidChat(format!(
                            "{at}.function.arguments must encode a JSON object, not {}",
                            json_kind(&other)
                        )))
                    }
                    Err(e) => {
                        return Err(RuntimeError::InvalidChat(format!(
                            "{at}.function.arguments is not valid JSON ({e}): {}",
                            snippet(s)
                        )))
                    }
                },
                // Some clients send the object itself; accept it as what it means.
                Some(v @ Value::Object(_)) => v.clone(),
                Some(other) => {
                    return Err(RuntimeError::InvalidChat(format!(
                        "{at}.function.arguments must be a JSON string, not {}",
                        json_kind(other)
                    )))
                }
                None => {
                    return Err(RuntimeError::InvalidChat(format!(
                        "{at}.function.arguments is missing"
                    )))
                }
            };
            Ok(HistoryCall {
                id: id.to_string(),
                name: name.to_string(),
                arguments,
            })
        })
        .collect()
}

/// "a string", "an object"...: a JSON value's kind, for error messages.
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// At most 80 characters of `s`, for error messages.
pub fn snippet(s: &str) -> String {
    let mut out: String = s.chars().take(80).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    format!("{out:?}")
}

/// Checks that tool results answer earlier calls and that no call is left without a result
/// when the next user turn starts; arguments in history must be JSON objects.
pub fn validate_conversation(messages: &[ChatMessage]) -> Result<()> {
    let mut pending: Vec<(String, usize)> = Vec::new();
    let mut answered: HashMap<String, usize> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        match m.role.as_str() {
            "assistant" => {
                for c in history_calls(i, m)? {
                    if pending.iter().any(|(id, _)| *id == c.id) || answered.contains_key(&c.id) {
                        return Err(RuntimeError::InvalidChat(format!(
                            "messages[{i}] reuses tool call id `{}`",
                            c.id
                        )));
                    }
                    pending.push((c.id, i));
                }
            }
            "tool" => {
                let id = m.tool_call_id.as_deref().ok_or_else(|| {
                    RuntimeError::InvalidChat(format!(
                        "messages[{i}] has role `tool` but no `tool_call_id`"
                    ))
                })?;
                match pending.iter().position(|(p, _)| p == id) {
                    Some(k) => {
                        pending.remove(k);
                        answered.insert(id.to_string(), i);
                    }
                    None if answered.contains_key(id) => {
                        return Err(RuntimeError::InvalidChat(format!(
                            "messages[{i}] answers tool call `{id}` a second time (first in messages[{}])",
                            answered[id]
                        )))
                    }
                    None => {
                        return Err(RuntimeError::InvalidChat(format!(
                            "messages[{i}].tool_call_id `{id}` matches no earlier assistant tool call"
                        )))
                    }
                }
            }
            "user" => {
                if let Some((id, at)) = pending.first() {
                    return Err(RuntimeError::InvalidChat(format!(
                        "messages[{i}] (user) comes before the result of tool call `{id}` made in messages[{at}]; add a `tool` message with that tool_call_id"
                    )));
                }
            }
            _ => {}
        }
        if m.role != "tool" && m.tool_call_id.is_some() {
            return Err(RuntimeError::InvalidChat(format!(
                "messages[{i}] has a tool_call_id but role `{}`",
                m.role
            )));
        }
    }
    Ok(())
}

/// The Hermes/Qwen system-prompt block describing `tools`.
pub fn hermes_tools_prompt(tools: &[Tool]) -> String {
    let mut s = String::from("# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>");
    for t in tools {
        s.push('\n');
        s.push_str(&serde_json::to_string(t).expect("tools serialize"));
    }
    s.push_str("\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
    s
}

/// A call as the model writes it.
pub fn hermes_call_text(name: &str, arguments: &Value) -> String {
    format!(
        "{CALL_OPEN}{NAME_PREFIX}{}{ARGUMENTS_PREFIX}{}}}{CALL_CLOSE}",
        serde_json::to_string(name).expect("strings serialize"),
        serde_json::to_string(arguments).expect("values serialize")
    )
}

/// Rewrites a (validated) conversation for a template without tool support: tools in the
/// system turn, calls as `<tool_call>` text, results as `<tool_response>` blocks in a user
/// turn (consecutive results share one turn).
pub fn hermes_messages(messages: &[ChatMessage], tools: &[Tool]) -> Result<Vec<ChatMessage>> {
    let texts = message_texts(messages)?;
    let mut out: Vec<ChatMessage> = Vec::new();
    let block = (!tools.is_empty()).then(|| hermes_tools_prompt(tools));
    let has_system = messages
        .first()
        .is_some_and(|m| matches!(m.role.as_str(), "system" | "developer"));
    if let (Some(b), false) = (&block, has_system) {
        out.push(ChatMessage::new("system", b));
    }
    let mut last_was_tool = false;
    for (i, (m, text)) in messages.iter().zip(&texts).enumerate() {
        match m.role.as_str() {
            "system" | "developer" if i == 0 => {
                let t = match &block {
                    Some(b) if text.is_empty() => b.clone(),
                    Some(b) => format!("{text}\n\n{b}"),
                    None => text.clone(),
                };
                out.push(ChatMessage::new("system", &t));
            }
            "assistant" => {
                let mut t = text.clone();
                for c in history_calls(i, m)? {
                    if !t.is_empty() {
                        t.push('\n');
                    }
                    t.push_str(&hermes_call_text(&c.name, &c.arguments));
                }
                out.push(ChatMessage::new("assistant", &t));
            }
            "tool" => {
                let response = format!("<tool_response>\n{text}\n</tool_response>");
                match out.last_mut() {
                    Some(prev) if last_was_tool => {
                        if let Some(MessageContent::Text(t)) = &mut prev.content {
                            t.push('\n');
                            t.push_str(&response);
                        }
                    }
                    _ => out.push(ChatMessage::new("user", &response)),
                }
            }
            role => out.push(ChatMessage::new(role, text)),
        }
        last_was_tool = m.role == "tool";
    }
    Ok(out)
}

/// The conversation for a template that renders tools itself: arguments as objects (what
/// Hub templates expect), everything else unchanged.
pub fn template_messages(messages: &[ChatMessage]) -> Result<Vec<ChatMessage>> {
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut m = m.clone();
            if m.tool_calls.is_some() {
                let calls = history_calls(i, &m)?;
                m.tool_calls = Some(
                    calls
                        .into_iter()
                        .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                        .collect(),
                );
            }
            Ok(m)
        })
        .collect()
}

/// What [`ToolCallParser`] found in a piece of text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolEvent {
    /// Plain content.
    Content(String),
    /// A call starts (its name is complete).
    CallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// More of the call's arguments text.
    Arguments { index: usize, fragment: String },
    /// The call is complete.
    CallEnd { index: usize },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ParseState {
    Content,
    Header,
    Arguments,
    /// Between calls: the newline that separates them is not content.
    AfterCall,
}

/// Splits streamed text in the `<tool_call>` format into content and call fragments. Text
/// that may be the start of a tag is held back until it is decided.
#[derive(Debug, Clone)]
pub struct ToolCallParser {
    state: ParseState,
    buf: String,
    calls: Vec<ToolCall>,
    complete: usize,
    content: String,
}

impl Default for ToolCallParser {
    fn default() -> Self {
        Self::new()
    }
}

impl ToolCallParser {
    pub fn new() -> Self {
        Self {
            state: ParseState::Content,
            buf: String::new(),
            calls: Vec::new(),
            complete: 0,
            content: String::new(),
        }
    }

    /// Feeds more generated text.
    pub fn push(&mut self, text: &str) -> Vec<ToolEvent> {
        self.buf.push_str(text);
        let mut events = Vec::new();
        loop {
            let progressed = match self.state {
                ParseState::Content | ParseState::AfterCall => {
                    if self.state == ParseState::AfterCall {
                        let trimmed = self.buf.trim_start_matches('\n').len();
                        let skip = self.buf.len() - trimmed;
                        self.buf.drain(..skip);
                        if !self.buf.is_empty() {
                            self.state = ParseState::Content;
                        }
                    }
                    match self.buf.find(CALL_OPEN) {
                        Some(at) => {
                            let before: String = self.buf.drain(..at + CALL_OPEN.len()).collect();
                            self.emit_content(&before[..at], &mut events);
                            self.state = ParseState::Header;
                            true
                        }
                        None => {
                            let keep = held_prefix(&self.buf, CALL_OPEN);
                            let ready: String = self.buf.drain(..self.buf.len() - keep).collect();
                            self.emit_content(&ready, &mut events);
                            false
                        }
                    }
                }
                ParseState::Header => match self.buf.find(ARGUMENTS_PREFIX) {
                    Some(at) => {
                        let header: String =
                            self.buf.drain(..at + ARGUMENTS_PREFIX.len()).collect();
                        let name = header[..at]
                            .strip_prefix(NAME_PREFIX)
                            .and_then(|n| serde_json::from_str::<String>(n).ok())
                            .unwrap_or_else(|| header[..at].to_string());
                        let index = self.calls.len();
                        let id = new_call_id();
                        self.calls.push(ToolCall {
                            id: id.clone(),
                            name: name.clone(),
                            arguments: String::new(),
                        });
                        events.push(ToolEvent::CallStart { index, id, name });
                        self.state = ParseState::Arguments;
                        true
                    }
                    None => false,
                },
                ParseState::Arguments => {
                    let end = format!("}}{CALL_CLOSE}");
                    let index = self.calls.len() - 1;
                    match self.buf.find(&end) {
                        Some(at) => {
                            let fragment: String = self.buf.drain(..at + end.len()).collect();
                            self.emit_arguments(index, &fragment[..at], &mut events);
                            events.push(ToolEvent::CallEnd { index });
                            self.complete += 1;
                            self.state = ParseState::AfterCall;
                            true
                        }
                        None => {
                            let keep = held_prefix(&self.buf, &end);
                            let ready: String = self.buf.drain(..self.buf.len() - keep).collect();
                            self.emit_arguments(index, &ready, &mut events);
                            false
                        }
                    }
                }
            };
            if !progressed {
                return events;
            }
        }
    }

    fn emit_content(&mut self, text: &str, events: &mut Vec<ToolEvent>) {
        if !text.is_empty() {
            self.content.push_str(text);
            events.push(ToolEvent::Content(text.to_string()));
        }
    }

    fn emit_arguments(&mut self, index: usize, text: &str, events: &mut Vec<ToolEvent>) {
        if !text.is_empty() {
            self.calls[index].arguments.push_str(text);
            events.push(ToolEvent::Arguments {
                index,
                fragment: text.to_string(),
            });
        }
    }

    /// Ends the text: held-back content is released. Returns the final events.
    pub fn finish(&mut self) -> Vec<ToolEvent> {
        let rest = std::mem::take(&mut self.buf);
        let mut events = Vec::new();
        match self.state {
            ParseState::Content | ParseState::AfterCall => self.emit_content(&rest, &mut events),
            // An unfinished call stays unfinished: it is never reported as complete.
            ParseState::Header | ParseState::Arguments => {}
        }
        events
    }

    /// The content seen so far (text outside calls).
    pub fn content(&self) -> &str {
        &self.content
    }

    /// Calls whose text is complete.
    pub fn complete_calls(&self) -> &[ToolCall] {
        &self.calls[..self.complete]
    }

    /// True if a call was started but not finished.
    pub fn in_call(&self) -> bool {
        matches!(self.state, ParseState::Header | ParseState::Arguments)
    }
}

/// Length of the longest suffix of `s` that is a proper prefix of `tag` (on a char boundary).
fn held_prefix(s: &str, tag: &str) -> usize {
    (1..tag.len().min(s.len() + 1))
        .rev()
        .find(|&n| s.is_char_boundary(s.len() - n) && s.ends_with(&tag[..n]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(v: Value) -> ChatMessage {
        serde_json::from_value(v).unwrap()
    }

    fn call_msg(id: &str, args: &str) -> ChatMessage {
        msg(
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "get_weather", "arguments": args}}]}),
        )
    }

    fn tool_msg(id: &str) -> ChatMessage {
        msg(json!({"role": "tool", "tool_call_id": id, "content": "sunny"}))
    }

    #[test]
    fn conversation_checks_name_the_message() {
        let user = ChatMessage::new("user", "weather?");
        let ok = [
            user.clone(),
            call_msg("c1", r#"{"city":"Paris"}"#),
            tool_msg("c1"),
            ChatMessage::new("assistant", "It is sunny."),
            user.clone(),
        ];
        validate_conversation(&ok).unwrap();
        let err = |m: &[ChatMessage]| validate_conversation(m).unwrap_err().to_string();
        assert!(err(&[user.clone(), tool_msg("zz")])
            .contains("messages[1].tool_call_id `zz` matches no earlier"));
        assert!(
            err(&[user.clone(), call_msg("c1", "{}"), user.clone()]).contains(
                "messages[2] (user) comes before the result of tool call `c1` made in messages[1]"
            )
        );
        assert!(err(&[user.clone(), call_msg("c1", "{not json")])
            .contains("messages[1].tool_calls[0].function.arguments is not valid JSON"));
        assert!(err(&[user.clone(), call_msg("c1", "[1]")]).contains("not an array"));
        assert!(err(&[
            user.clone(),
            call_msg("c1", "{}"),
            tool_msg("c1"),
            tool_msg("c1")
        ])
        .contains("a second time"));
        let no_id = msg(json!({"role": "tool", "content": "x"}));
        assert!(err(&[user, no_id]).contains("no `tool_call_id`"));
    }

    #[test]
    fn hermes_rendering_of_history() {
        let tools: Vec<Tool> = serde_json::from_value(json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object"}}}])).unwrap();
        let conv = [
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "weather?"),
            call_msg("c1", r#"{"city":"北京"}"#),
            tool_msg("c1"),
        ];
        let out = hermes_messages(&conv, &tools).unwrap();
        let texts = message_texts(&out).unwrap();
        assert_eq!(out.len(), 4);
        assert!(texts[0].starts_with("Be brief.\n\n# Tools"));
        assert!(texts[0].contains(r#"{"type":"function","function":{"name":"get_weather""#));
        assert_eq!(
            texts[2],
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"北京\"}}\n</tool_call>"
        );
        assert_eq!(out[3].role, "user");
        assert_eq!(texts[3], "<tool_response>\nsunny\n</tool_response>");
    }

    #[test]
    fn parser_splits_content_and_calls_at_any_chunking() {
        let text = "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"北京\", \"x\": {\"y\": 1}}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>";
        for size in [1, 2, 3, 7, 1000] {
            let mut p = ToolCallParser::new();
            let mut events = Vec::new();
            let chars: Vec<char> = text.chars().collect();
            for piece in chars.chunks(size) {
                events.extend(p.push(&piece.iter().collect::<String>()));
            }
            events.extend(p.finish());
            assert_eq!(p.content(), "Checking.\n", "chunk size {size}");
            let calls = p.complete_calls();
            assert_eq!(calls.len(), 2);
            assert_eq!(calls[0].name, "get_weather");
            assert_eq!(calls[0].arguments, r#"{"city": "北京", "x": {"y": 1}}"#);
            assert_eq!(calls[1].name, "b");
            assert_eq!(calls[1].arguments, "{}");
            assert!(calls[0].id.starts_with("call_") && calls[0].id != calls[1].id);
            let args: String = events
                .iter()
                .filter_map(|e| match e {
                    ToolEvent::Arguments { index: 0, fragment } => Some(fragment.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(args, calls[0].arguments);
        }
    }

    #[test]
    fn unfinished_call_is_not_complete_and_lone_angle_bracket_is_content() {
        let mut p = ToolCallParser::new();
        p.push("a <b> <tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": ");
        p.finish();
        assert_eq!(p.content(), "a <b> ");
        assert!(p.complete_calls().is_empty());
        assert!(p.in_call());
        let mut p = ToolCallParser::new();
        p.push("x <tool_");
        assert_eq!(p.content(), "x ");
        p.finish();
        assert_eq!(p.content(), "x <tool_");
    }
}
