//! Conversation rules: tool results answer earlier calls, every call is answered before the
//! next user turn, and arguments in history are JSON objects.

use std::collections::HashMap;

use serde_json::Value;

use crate::error::{json_kind, snippet, RequestError};
use crate::message::{ChatMessage, Role};

/// A call in an assistant message of the history.
pub struct HistoryCall {
    pub id: String,
    pub name: String,
    /// The arguments, a JSON object.
    pub arguments: Value,
}

/// The calls of message `i` (an assistant message), each checked: an id, a name and arguments
/// that encode a JSON object.
pub fn history_calls(i: usize, m: &ChatMessage) -> Result<Vec<HistoryCall>, RequestError> {
    let Some(calls) = &m.tool_calls else {
        return Ok(Vec::new());
    };
    if m.role != Role::Assistant {
        return Err(RequestError::messages(format!(
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
                RequestError::messages(format!("{at}.id is missing or not a string"))
            })?;
            let f = c
                .get("function")
                .ok_or_else(|| RequestError::messages(format!("{at}.function is missing")))?;
            let name = f.get("name").and_then(Value::as_str).ok_or_else(|| {
                RequestError::messages(format!("{at}.function.name is missing or not a string"))
            })?;
            let arguments = match f.get("arguments") {
                Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                    Ok(v @ Value::Object(_)) => v,
                    Ok(other) => {
                        return Err(RequestError::messages(format!(
                            "{at}.function.arguments must encode a JSON object, not {}",
                            json_kind(&other)
                        )))
                    }
                    Err(e) => {
                        return Err(RequestError::messages(format!(
                            "{at}.function.arguments is not valid JSON ({e}): {}",
                            snippet(s)
                        )))
                    }
                },
                // Some clients send the object itself; accept it as what it means.
                Some(v @ Value::Object(_)) => v.clone(),
                Some(other) => {
                    return Err(RequestError::messages(format!(
                        "{at}.function.arguments must be a JSON string, not {}",
                        json_kind(other)
                    )))
                }
                None => {
                    return Err(RequestError::messages(format!(
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

/// Checks that tool results answer earlier calls and that no call is left without a result
/// when the next user turn starts; arguments in history must be JSON objects.
pub fn validate_conversation(messages: &[ChatMessage]) -> Result<(), RequestError> {
    let mut pending: Vec<(String, usize)> = Vec::new();
    let mut answered: HashMap<String, usize> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        match m.role {
            Role::Assistant => {
                for c in history_calls(i, m)? {
                    if pending.iter().any(|(id, _)| *id == c.id) || answered.contains_key(&c.id) {
                        return Err(RequestError::messages(format!(
                            "messages[{i}] reuses tool call id `{}`",
                            c.id
                        )));
                    }
                    pending.push((c.id, i));
                }
            }
            Role::Tool => {
                let id = m.tool_call_id.as_deref().ok_or_else(|| {
                    RequestError::messages(format!(
                        "messages[{i}] has role `tool` but no `tool_call_id`"
                    ))
                })?;
                match pending.iter().position(|(p, _)| p == id) {
                    Some(k) => {
                        pending.remove(k);
                        answered.insert(id.to_string(), i);
                    }
                    None if answered.contains_key(id) => {
                        return Err(RequestError::messages(format!(
                            "messages[{i}] answers tool call `{id}` a second time (first in messages[{}])",
                            answered[id]
                        )))
                    }
                    None => {
                        return Err(RequestError::messages(format!(
                            "messages[{i}].tool_call_id `{id}` matches no earlier assistant tool call"
                        )))
                    }
                }
            }
            Role::User => {
                if let Some((id, at)) = pending.first() {
                    return Err(RequestError::messages(format!(
                        "messages[{i}] (user) comes before the result of tool call `{id}` made in messages[{at}]; add a `tool` message with that tool_call_id"
                    )));
                }
            }
            _ => {}
        }
        if m.role != Role::Tool && m.tool_call_id.is_some() {
            return Err(RequestError::messages(format!(
                "messages[{i}] has a tool_call_id but role `{}`",
                m.role
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let user = ChatMessage::user("weather?");
        let ok = [
            user.clone(),
            call_msg("c1", r#"{"city":"Paris"}"#),
            tool_msg("c1"),
            ChatMessage::assistant("It is sunny."),
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
}
