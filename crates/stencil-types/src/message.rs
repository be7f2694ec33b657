//! Chat messages: a role and text, or typed content parts.

use serde::{Deserialize, Serialize};

use crate::error::RequestError;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    /// OpenAI's newer name for a system message.
    Developer,
    User,
    Assistant,
    /// A tool's result (`tool_call_id` names the call it answers).
    Tool,
}

impl Role {
    /// Every role, in the order error messages list them.
    pub const ALL: [Role; 5] = [
        Role::System,
        Role::Developer,
        Role::User,
        Role::Assistant,
        Role::Tool,
    ];

    /// The role as the wire and chat templates spell it (`"user"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    /// Parses a wire spelling; `None` for anything else.
    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// System or developer: instructions rather than conversation.
    pub fn is_system(self) -> bool {
        matches!(self, Role::System | Role::Developer)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One chat message, OpenAI-shaped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    #[serde(default)]
    pub content: Option<MessageContent>,
    /// Calls an assistant message made, as sent (`{"id", "type", "function": {"name",
    /// "arguments"}}`); checked with the rest of the conversation by the runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ChatMessage {
    /// A message of plain text.
    pub fn new(role: Role, text: &str) -> Self {
        Self {
            role,
            content: Some(MessageContent::Text(text.into())),
            tool_calls: None,
            tool_call_id: None,
            name: None,
        }
    }

    pub fn system(text: &str) -> Self {
        Self::new(Role::System, text)
    }

    pub fn user(text: &str) -> Self {
        Self::new(Role::User, text)
    }

    pub fn assistant(text: &str) -> Self {
        Self::new(Role::Assistant, text)
    }
}

/// `content` as a string or as an array of typed parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// One part of an array `content`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// Checks the content of every message and returns each message's text (parts joined).
pub fn message_texts(messages: &[ChatMessage]) -> Result<Vec<String>, RequestError> {
    if messages.is_empty() {
        return Err(RequestError::messages("`messages` is empty"));
    }
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| match &m.content {
            None => Ok(String::new()),
            Some(MessageContent::Text(t)) => Ok(t.clone()),
            Some(MessageContent::Parts(parts)) => {
                let mut text = String::new();
                for (j, p) in parts.iter().enumerate() {
                    match (p.kind.as_str(), &p.text) {
                        ("text", Some(t)) => text.push_str(t),
                        ("text", None) => {
                            return Err(RequestError::messages(format!(
                                "messages[{i}].content[{j}] has type `text` but no `text` field"
                            )))
                        }
                        (other, _) => {
                            return Err(RequestError::messages(format!(
                                "messages[{i}].content[{j}] has type `{other}`, but this model accepts text only"
                            )))
                        }
                    }
                }
                Ok(text)
            }
        })
        .collect()
}
