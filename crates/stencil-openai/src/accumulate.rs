//! Joins a chat completion stream back into one message.
//!
//! Content deltas are concatenated, and so are reasoning deltas (`reasoning_content`); tool-call fragments are joined by their `index` (the id,
//! type and name are taken from the first fragment that has them: some servers repeat them in
//! every fragment). Tool calls are handed out only from a stream that ended with `[DONE]`, did
//! not stop for `length`, carried no error, and whose arguments parse as JSON objects.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::ErrorObject;
use crate::response::{ChatChunk, Usage};
use crate::sse::SseEvent;

/// A completed tool call from a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamedToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// Why a stream's result cannot be trusted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StreamError {
    #[error("the server reported an error in the stream: {}", .0.message)]
    Server(Box<ErrorObject>),
    #[error("the stream ended without `data: [DONE]`: the response is incomplete")]
    NoDone,
    #[error("the output was cut by max_tokens (finish_reason \"length\"); tool calls in it are incomplete")]
    Truncated,
    #[error("tool call {index} has arguments that are not a JSON object: {reason}")]
    BadArguments { index: usize, reason: String },
    #[error("an event's data is not a chat chunk: {0}")]
    BadChunk(String),
}

#[derive(Debug, Clone, Default)]
struct CallParts {
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

/// Stream state: feed it events, then ask for the content and tool calls.
#[derive(Debug, Clone, Default)]
pub struct ChatAccumulator {
    pub id: Option<String>,
    pub model: Option<String>,
    pub role: Option<String>,
    content: String,
    reasoning: String,
    calls: BTreeMap<usize, CallParts>,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    done: bool,
    error: Option<ErrorObject>,
}

impl ChatAccumulator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one SSE event. Returns the content text it added (for live display).
    pub fn push_event(&mut self, e: &SseEvent) -> Result<String, StreamError> {
        if e.is_done() {
            self.done = true;
            return Ok(String::new());
        }
        let v: Value =
            serde_json::from_str(&e.data).map_err(|err| StreamError::BadChunk(err.to_string()))?;
        if let Some(err) = v.get("error") {
            let obj = serde_json::from_value::<ErrorObject>(err.clone()).unwrap_or(ErrorObject {
                message: err.to_string(),
                kind: None,
                param: None,
                code: None,
            });
            self.error = Some(obj.clone());
            return Err(StreamError::Server(Box::new(obj)));
        }
        let chunk: ChatChunk =
            serde_json::from_value(v).map_err(|err| StreamError::BadChunk(err.to_string()))?;
        Ok(self.push_chunk(&chunk))
    }

    /// Feeds one parsed chunk; returns the content it added.
    pub fn push_chunk(&mut self, c: &ChatChunk) -> String {
        self.id.get_or_insert_with(|| c.id.clone());
        self.model.get_or_insert_with(|| c.model.clone());
        if c.usage.is_some() {
            self.usage = c.usage;
        }
        let mut added = String::new();
        for choice in c.choices.iter().filter(|ch| ch.index == 0) {
            let d = &choice.delta;
            if let Some(r) = &d.role {
                self.role.get_or_insert_with(|| r.clone());
            }
            if let Some(t) = &d.content {
                self.content.push_str(t);
                added.push_str(t);
            }
            if let Some(t) = &d.reasoning_content {
                self.reasoning.push_str(t);
            }
            for (pos, part) in d.tool_calls.iter().flatten().enumerate() {
                let entry = self.calls.entry(part.index.unwrap_or(pos)).or_default();
                if let Some(id) = part.id.as_ref().filter(|s| !s.is_empty()) {
                    entry.id.get_or_insert_with(|| id.clone());
                }
                if let Some(n) = part.function.name.as_ref().filter(|s| !s.is_empty()) {
                    entry.name.get_or_insert_with(|| n.clone());
                }
                if let Some(a) = &part.function.arguments {
                    entry.arguments.push_str(a);
                }
            }
            if choice.finish_reason.is_some() {
                self.finish_reason = choice.finish_reason.clone();
            }
        }
        added
    }

    /// The content so far.
    pub fn content(&self) -> &str {
        &self.content
    }

    /// The reasoning so far (`reasoning_content` deltas).
    pub fn reasoning(&self) -> &str {
        &self.reasoning
    }

    /// True once `[DONE]` arrived.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Checks that the stream ended properly.
    pub fn check_complete(&self) -> Result<(), StreamError> {
        if let Some(e) = &self.error {
            return Err(StreamError::Server(Box::new(e.clone())));
        }
        if !self.done {
            return Err(StreamError::NoDone);
        }
        Ok(())
    }

    /// The tool calls, only from a complete, untruncated stream with valid arguments.
    pub fn tool_calls(&self) -> Result<Vec<StreamedToolCall>, StreamError> {
        self.check_complete()?;
        if self.finish_reason.as_deref() == Some("length") && !self.calls.is_empty() {
            return Err(StreamError::Truncated);
        }
        self.calls
            .iter()
            .map(|(&index, c)| {
                match serde_json::from_str::<Value>(&c.arguments) {
                    Ok(Value::Object(_)) => {}
                    Ok(other) => {
                        return Err(StreamError::BadArguments {
                            index,
                            reason: format!("it is {other}"),
                        })
                    }
                    Err(e) => {
                        return Err(StreamError::BadArguments {
                            index,
                            reason: e.to_string(),
                        })
                    }
                }
                Ok(StreamedToolCall {
                    id: c.id.clone().unwrap_or_default(),
                    name: c.name.clone().unwrap_or_default(),
                    arguments: c.arguments.clone(),
                })
            })
            .collect()
    }
}
