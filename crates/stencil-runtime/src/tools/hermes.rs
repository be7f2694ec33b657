//! The Hermes/Qwen `<tool_call>` prompt convention, for chat templates that know nothing of
//! tools, and the history shape templates that do know them expect.

use serde_json::{json, Value};
use stencil_grammar::tools::{ARGUMENTS_PREFIX, CALL_CLOSE, CALL_OPEN, NAME_PREFIX};
use stencil_types::conversation::history_calls;
use stencil_types::{message_texts, ChatMessage, MessageContent, RequestError, Role, Tool};

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
pub fn hermes_messages(
    messages: &[ChatMessage],
    tools: &[Tool],
) -> Result<Vec<ChatMessage>, RequestError> {
    let texts = message_texts(messages)?;
    let mut out: Vec<ChatMessage> = Vec::new();
    let block = (!tools.is_empty()).then(|| hermes_tools_prompt(tools));
    let has_system = messages.first().is_some_and(|m| m.role.is_system());
    if let (Some(b), false) = (&block, has_system) {
        out.push(ChatMessage::system(b));
    }
    let mut last_was_tool = false;
    for (i, (m, text)) in messages.iter().zip(&texts).enumerate() {
        match m.role {
            Role::System | Role::Developer if i == 0 => {
                let t = match &block {
                    Some(b) if text.is_empty() => b.clone(),
                    Some(b) => format!("{text}\n\n{b}"),
                    None => text.clone(),
                };
                out.push(ChatMessage::system(&t));
            }
            Role::Assistant => {
                let mut t = text.clone();
                for c in history_calls(i, m)? {
                    if !t.is_empty() {
                        t.push('\n');
                    }
                    t.push_str(&hermes_call_text(&c.name, &c.arguments));
                }
                out.push(ChatMessage::assistant(&t));
            }
            Role::Tool => {
                let response = format!("<tool_response>\n{text}\n</tool_response>");
                match out.last_mut() {
                    Some(prev) if last_was_tool => {
                        if let Some(MessageContent::Text(t)) = &mut prev.content {
                            t.push('\n');
                            t.push_str(&response);
                        }
                    }
                    _ => out.push(ChatMessage::user(&response)),
                }
            }
            role => out.push(ChatMessage::new(role, text)),
        }
        last_was_tool = m.role == Role::Tool;
    }
    Ok(out)
}

/// The conversation for a template that renders tools itself: arguments as objects (what
/// Hub templates expect), everything else unchanged.
pub fn template_messages(messages: &[ChatMessage]) -> Result<Vec<ChatMessage>, RequestError> {
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
                        // Templates take arguments as an object, not as JSON text.
                        .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                        .collect(),
                );
            }
            Ok(m)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hermes_rendering_of_history() {
        let tools: Vec<Tool> = serde_json::from_value(json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object"}}}])).unwrap();
        let conv: Vec<ChatMessage> = serde_json::from_value(json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": r#"{"city":"北京"}"#}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
        ]))
        .unwrap();
        let out = hermes_messages(&conv, &tools).unwrap();
        let texts = message_texts(&out).unwrap();
        assert_eq!(out.len(), 4);
        assert!(texts[0].starts_with("Be brief.\n\n# Tools"));
        assert!(texts[0].contains(r#"{"type":"function","function":{"name":"get_weather""#));
        assert_eq!(
            texts[2],
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"北京\"}}\n</tool_call>"
        );
        assert_eq!(out[3].role, Role::User);
        assert_eq!(texts[3], "<tool_response>\nsunny\n</tool_response>");
    }
}
