//! Engine events -> the typed Messages stream.
//!
//! `message_start` (the message with empty content), then per content block
//! `content_block_start`, `content_block_delta` (`text_delta` or `input_json_delta`) and
//! `content_block_stop`, then `message_delta` (stop reason, usage) and `message_stop`. A
//! `tool_use` block starts when the call's name is complete and stops when its arguments are.
//! Every event is `(event name, data)`; the data's `type` repeats the name, as Anthropic sends.

use serde_json::{json, Value};
use stencil_types::api::ApiError;
use stencil_types::{ChatFinish, ChatOutcome, ToolEvent};

use crate::response::{error_body, stop_reason, tool_use_id};

/// One server-sent event: its name and its JSON data.
pub type Event = (&'static str, Value);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Text,
    ToolUse,
}

/// Builds the events of one streamed message.
#[derive(Debug)]
pub struct EventWriter {
    id: String,
    model: String,
    input_tokens: usize,
    /// The open block and its index.
    open: Option<(usize, Open)>,
    next_index: usize,
}

impl EventWriter {
    pub fn new(id: &str, model: &str, input_tokens: usize) -> Self {
        Self {
            id: id.to_string(),
            model: model.to_string(),
            input_tokens,
            open: None,
            next_index: 0,
        }
    }

    /// `message_start` and a `ping`.
    pub fn start(&self) -> Vec<Event> {
        vec![
            (
                "message_start",
                json!({"type": "message_start", "message": {
                    "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                    "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": self.input_tokens, "output_tokens": 0},
                }}),
            ),
            ("ping", json!({"type": "ping"})),
        ]
    }

    fn close(&mut self, out: &mut Vec<Event>) {
        if let Some((index, _)) = self.open.take() {
            out.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
        }
    }

    fn open(&mut self, kind: Open, block: Value, out: &mut Vec<Event>) -> usize {
        self.close(out);
        let index = self.next_index;
        self.next_index += 1;
        self.open = Some((index, kind));
        out.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
        index
    }

    /// The events for one engine event.
    pub fn event(&mut self, e: ToolEvent) -> Vec<Event> {
        let mut out = Vec::new();
        match e {
            // Its requests take no reasoning prefix.
            ToolEvent::Content(t) if t.is_empty() => {}
            ToolEvent::Reasoning(_) => {}
            ToolEvent::Content(t) => {
                let index = match self.open {
                    Some((i, Open::Text)) => i,
                    _ => self.open(Open::Text, json!({"type": "text", "text": ""}), &mut out),
                };
                out.push((
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": t}}),
                ));
            }
            ToolEvent::CallStart { id, name, .. } => {
                self.open(
                    Open::ToolUse,
                    json!({"type": "tool_use", "id": tool_use_id(&id), "name": name, "input": {}}),
                    &mut out,
                );
            }
            ToolEvent::Arguments { fragment, .. } => {
                if let Some((index, Open::ToolUse)) = self.open {
                    out.push((
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": fragment}}),
                    ));
                }
            }
            ToolEvent::CallEnd { .. } => {
                if matches!(self.open, Some((_, Open::ToolUse))) {
                    self.close(&mut out);
                }
            }
        }
        out
    }

    /// The closing events: the open block's stop, `message_delta`, `message_stop`.
    pub fn finish(&mut self, o: &ChatOutcome) -> Vec<Event> {
        let mut out = Vec::new();
        self.close(&mut out);
        let stop_sequence = match o.finish_reason {
            ChatFinish::Stop => o.stop_sequence.clone(),
            _ => None,
        };
        out.push((
            "message_delta",
            json!({"type": "message_delta",
                "delta": {"stop_reason": stop_reason(o), "stop_sequence": stop_sequence},
                "usage": {"input_tokens": o.usage.prompt_tokens, "output_tokens": o.usage.completion_tokens}}),
        ));
        out.push(("message_stop", json!({"type": "message_stop"})));
        out
    }

    /// An `error` event (the stream ends after it).
    pub fn error(e: &ApiError) -> Event {
        ("error", error_body(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accumulate::MessageAccumulator;
    use stencil_types::{ToolCall, Usage};

    #[test]
    fn blocks_open_and_close_in_order_and_accumulate_back() {
        let mut w = EventWriter::new("msg_1", "m", 7);
        let mut events = w.start();
        for e in [
            ToolEvent::Content("Let me ".into()),
            ToolEvent::Content("check.".into()),
            ToolEvent::CallStart {
                index: 0,
                id: "call_9".into(),
                name: "weather".into(),
            },
            ToolEvent::Arguments {
                index: 0,
                fragment: "{\"city\": ".into(),
            },
            ToolEvent::Arguments {
                index: 0,
                fragment: "\"Paris\"}".into(),
            },
            ToolEvent::CallEnd { index: 0 },
        ] {
            events.extend(w.event(e));
        }
        let o = ChatOutcome {
            content: Some("Let me check.".into()),
            reasoning: None,
            tool_calls: vec![ToolCall {
                id: "call_9".into(),
                name: "weather".into(),
                arguments: "{\"city\": \"Paris\"}".into(),
            }],
            finish_reason: ChatFinish::ToolCalls,
            stop_sequence: None,
            usage: Usage {
                prompt_tokens: 7,
                completion_tokens: 12,
            },
            timings: Default::default(),
            forced_tokens: 0,
            closed_by_budget: false,
            loop_guard_hits: 0,
            warnings: Vec::new(),
        };
        events.extend(w.finish(&o));
        let names: Vec<&str> = events.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        for (name, data) in &events {
            assert_eq!(data["type"], *name);
        }
        assert_eq!(events[6].1["index"], 1);
        assert_eq!(events[6].1["content_block"]["id"], "toolu_9");
        let mut acc = MessageAccumulator::new();
        for (_, data) in &events {
            acc.push(data).unwrap();
        }
        let m = acc.message().unwrap();
        assert_eq!(m.text(), "Let me check.");
        assert_eq!(m.tool_uses[0].input, json!({"city": "Paris"}));
        assert_eq!(m.stop_reason.as_deref(), Some("tool_use"));
        assert_eq!(m.output_tokens, 12);
    }
}
