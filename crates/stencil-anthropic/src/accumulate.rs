//! Client side: stream events -> one message, refusing streams that did not end properly.

use serde_json::Value;

/// What is wrong with a stream.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    #[error("the stream ended before `message_stop`: the message is incomplete")]
    Incomplete,
    #[error("malformed stream event: {0}")]
    BadEvent(String),
    #[error("the server reported an error ({kind}): {message}")]
    Server { kind: String, message: String },
    #[error("tool_use block {index}: its input is not a JSON object: {error}")]
    BadToolInput { index: usize, error: String },
}

/// A `tool_use` block with its joined input.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolUse {
    pub id: String,
    pub name: String,
    pub input: Value,
}

/// A finished streamed message.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StreamedMessage {
    pub id: Option<String>,
    pub text_blocks: Vec<String>,
    pub tool_uses: Vec<ToolUse>,
    pub stop_reason: Option<String>,
    pub stop_sequence: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl StreamedMessage {
    /// All text blocks joined.
    pub fn text(&self) -> String {
        self.text_blocks.concat()
    }
}

#[derive(Debug, Clone)]
enum Block {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        json: String,
        stopped: bool,
    },
    Other,
}

/// Joins `message_start` … `message_stop` events (each event's JSON data, in order).
#[derive(Debug, Default)]
pub struct MessageAccumulator {
    message: StreamedMessage,
    blocks: Vec<Block>,
    started: bool,
    done: bool,
}

fn index_of(e: &Value) -> Result<usize, StreamError> {
    e.get("index")
        .and_then(Value::as_u64)
        .map(|i| i as usize)
        .ok_or_else(|| StreamError::BadEvent(format!("no `index` in {e}")))
}

impl MessageAccumulator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one event's data; returns the text it adds (for printing as it arrives).
    pub fn push(&mut self, e: &Value) -> Result<String, StreamError> {
        let ty = e
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| StreamError::BadEvent(format!("no `type` in {e}")))?;
        if self.done && ty != "ping" {
            return Err(StreamError::BadEvent(format!("`{ty}` after message_stop")));
        }
        if !self.started && !matches!(ty, "message_start" | "ping" | "error") {
            return Err(StreamError::BadEvent(format!(
                "`{ty}` before message_start"
            )));
        }
        match ty {
            "message_start" => {
                let m = &e["message"];
                self.message.id = m.get("id").and_then(Value::as_str).map(str::to_string);
                self.message.input_tokens = m["usage"]["input_tokens"].as_u64().unwrap_or(0);
                self.started = true;
            }
            "content_block_start" => {
                let index = index_of(e)?;
                if index != self.blocks.len() {
                    return Err(StreamError::BadEvent(format!(
                        "content block {index} started out of order"
                    )));
                }
                let b = &e["content_block"];
                self.blocks
                    .push(match b.get("type").and_then(Value::as_str) {
                        Some("text") => Block::Text(b["text"].as_str().unwrap_or("").to_string()),
                        Some("tool_use") => Block::ToolUse {
                            id: b["id"].as_str().unwrap_or_default().to_string(),
                            name: b["name"].as_str().unwrap_or_default().to_string(),
                            json: String::new(),
                            stopped: false,
                        },
                        _ => Block::Other,
                    });
            }
            "content_block_delta" => {
                let index = index_of(e)?;
                let block = self.blocks.get_mut(index).ok_or_else(|| {
                    StreamError::BadEvent(format!("delta for unknown content block {index}"))
                })?;
                let d = &e["delta"];
                match (block, d.get("type").and_then(Value::as_str)) {
                    (Block::Text(t), Some("text_delta")) => {
                        let piece = d["text"].as_str().unwrap_or_default();
                        t.push_str(piece);
                        return Ok(piece.to_string());
                    }
                    (
                        Block::ToolUse {
                            json,
                            stopped: false,
                            ..
                        },
                        Some("input_json_delta"),
                    ) => {
                        json.push_str(d["partial_json"].as_str().unwrap_or_default());
                    }
                    (_, other) => {
                        return Err(StreamError::BadEvent(format!(
                            "delta {other:?} does not fit content block {index}"
                        )))
                    }
                }
            }
            "content_block_stop" => {
                let index = index_of(e)?;
                if let Some(Block::ToolUse { stopped, .. }) = self.blocks.get_mut(index) {
                    *stopped = true;
                }
            }
            "message_delta" => {
                let d = &e["delta"];
                self.message.stop_reason = d["stop_reason"].as_str().map(str::to_string);
                self.message.stop_sequence = d["stop_sequence"].as_str().map(str::to_string);
                if let Some(n) = e["usage"]["output_tokens"].as_u64() {
                    self.message.output_tokens = n;
                }
            }
            "message_stop" => self.done = true,
            "ping" => {}
            "error" => {
                return Err(StreamError::Server {
                    kind: e["error"]["type"].as_str().unwrap_or("error").to_string(),
                    message: e["error"]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                })
            }
            // New event types are skipped, as Anthropic asks of clients.
            _ => {}
        }
        Ok(String::new())
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The message, if the stream ended with `message_stop` and every `tool_use` block was
    /// stopped with a complete JSON object.
    pub fn message(&self) -> Result<StreamedMessage, StreamError> {
        if !self.done {
            return Err(StreamError::Incomplete);
        }
        let mut m = self.message.clone();
        for (index, b) in self.blocks.iter().enumerate() {
            match b {
                Block::Text(t) => m.text_blocks.push(t.clone()),
                Block::ToolUse {
                    id,
                    name,
                    json,
                    stopped,
                } => {
                    if !stopped {
                        return Err(StreamError::Incomplete);
                    }
                    let text = if json.trim().is_empty() { "{}" } else { json };
                    let input = match serde_json::from_str::<Value>(text) {
                        Ok(v @ Value::Object(_)) => v,
                        Ok(v) => {
                            return Err(StreamError::BadToolInput {
                                index,
                                error: format!("got {v}"),
                            })
                        }
                        Err(e) => {
                            return Err(StreamError::BadToolInput {
                                index,
                                error: e.to_string(),
                            })
                        }
                    };
                    m.tool_uses.push(ToolUse {
                        id: id.clone(),
                        name: name.clone(),
                        input,
                    });
                }
                Block::Other => {}
            }
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn start() -> Value {
        json!({"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 3}}})
    }

    #[test]
    fn truncated_and_broken_streams_are_refused() {
        let mut acc = MessageAccumulator::new();
        acc.push(&start()).unwrap();
        acc.push(&json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}}})).unwrap();
        acc.push(&json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"a\": "}})).unwrap();
        assert_eq!(acc.message().unwrap_err(), StreamError::Incomplete);
        acc.push(&json!({"type": "content_block_stop", "index": 0}))
            .unwrap();
        acc.push(&json!({"type": "message_stop"})).unwrap();
        assert!(matches!(
            acc.message().unwrap_err(),
            StreamError::BadToolInput { index: 0, .. }
        ));

        let mut acc = MessageAccumulator::new();
        assert!(acc
            .push(&json!({"type": "content_block_delta", "index": 0}))
            .is_err());
        let err = acc.push(
            &json!({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}),
        );
        assert!(matches!(err, Err(StreamError::Server { .. })));
    }
}
