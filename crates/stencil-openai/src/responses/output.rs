//! The `response` object and its typed stream, built from one list of output items.

use serde_json::{json, Map, Value};
use stencil_types::api::ApiError;
use stencil_types::{ChatFinish, ChatOutcome, ToolEvent};

/// One output item: assistant text or a function call.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Item {
    Message {
        id: String,
        text: String,
    },
    Call {
        id: String,
        call_id: String,
        name: String,
        arguments: String,
        done: bool,
    },
}

/// One server-sent event: its name and its JSON data (whose `type` repeats the name).
pub type Event = (String, Value);

/// Builds one response, whole ([`ResponseWriter::whole`]) or streamed
/// ([`start`](ResponseWriter::start), [`event`](ResponseWriter::event),
/// [`finish`](ResponseWriter::finish)).
#[derive(Debug)]
pub struct ResponseWriter {
    id: String,
    model: String,
    created_at: u64,
    echo: Map<String, Value>,
    items: Vec<Item>,
    /// Whether the last item is a message still receiving text.
    text_open: bool,
    sequence: u64,
}

impl ResponseWriter {
    /// `id` is the response id (`resp_…`); item ids derive from it.
    pub fn new(id: &str, model: &str, created_at: u64, echo: Map<String, Value>) -> Self {
        Self {
            id: id.to_string(),
            model: model.to_string(),
            created_at,
            echo,
            items: Vec::new(),
            text_open: false,
            sequence: 0,
        }
    }

    fn item_json(item: &Item, status: &str) -> Value {
        match item {
            Item::Message { id, text } => json!({
                "type": "message", "id": id, "status": status, "role": "assistant",
                "content": if status == "in_progress" && text.is_empty() { json!([]) } else {
                    json!([{"type": "output_text", "text": text, "annotations": [], "logprobs": []}])
                },
            }),
            Item::Call {
                id,
                call_id,
                name,
                arguments,
                ..
            } => json!({
                "type": "function_call", "id": id, "call_id": call_id, "name": name,
                "arguments": arguments, "status": status,
            }),
        }
    }

    /// The `response` object; `outcome` absent while it is in progress.
    fn object(&self, outcome: Option<&ChatOutcome>) -> Value {
        let (status, incomplete) = match outcome.map(|o| o.finish_reason) {
            None => ("in_progress", Value::Null),
            Some(ChatFinish::Length) => ("incomplete", json!({"reason": "max_output_tokens"})),
            Some(_) => ("completed", Value::Null),
        };
        let item_status = if outcome.is_some() {
            "completed"
        } else {
            "in_progress"
        };
        let output: Vec<Value> = match outcome {
            Some(_) => self
                .items
                .iter()
                .map(|i| Self::item_json(i, item_status))
                .collect(),
            None => Vec::new(),
        };
        let mut v = json!({
            "id": self.id, "object": "response", "created_at": self.created_at,
            "status": status, "error": null, "incomplete_details": incomplete,
            "model": self.model, "output": output,
            "instructions": null, "max_output_tokens": null, "metadata": {},
            "parallel_tool_calls": true, "previous_response_id": null,
            "reasoning": {"effort": null, "summary": null}, "store": false,
            "temperature": 1.0, "text": {"format": {"type": "text"}}, "tool_choice": "auto",
            "tools": [], "top_p": 1.0, "truncation": "disabled", "usage": null,
        });
        for (k, e) in &self.echo {
            v[k] = e.clone();
        }
        if let Some(o) = outcome {
            let (i, out) = (o.usage.prompt_tokens, o.usage.completion_tokens);
            v["usage"] = json!({
                "input_tokens": i, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": out, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": i + out,
            });
        }
        v
    }

    /// The whole response of a non-streamed request.
    pub fn whole(mut self, o: &ChatOutcome) -> Value {
        if let Some(t) = o.content.as_deref().filter(|t| !t.is_empty()) {
            self.items.push(Item::Message {
                id: format!("msg_{}", self.suffix()),
                text: t.to_string(),
            });
        }
        for c in &o.tool_calls {
            self.items.push(Item::Call {
                id: format!("fc_{}", c.id.trim_start_matches("call_")),
                call_id: c.id.clone(),
                name: c.name.clone(),
                arguments: c.arguments.clone(),
                done: true,
            });
        }
        self.object(Some(o))
    }

    fn suffix(&self) -> String {
        format!(
            "{}_{}",
            self.id.trim_start_matches("resp_"),
            self.items.len()
        )
    }

    fn push(&mut self, out: &mut Vec<Event>, ty: &str, mut data: Value) {
        data["type"] = ty.into();
        data["sequence_number"] = self.sequence.into();
        self.sequence += 1;
        out.push((ty.to_string(), data));
    }

    /// `response.created` and `response.in_progress`.
    pub fn start(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        let r = self.object(None);
        self.push(&mut out, "response.created", json!({"response": r}));
        self.push(&mut out, "response.in_progress", json!({"response": r}));
        out
    }

    fn close_text(&mut self, out: &mut Vec<Event>) {
        if !self.text_open {
            return;
        }
        self.text_open = false;
        let index = self.items.len() - 1;
        let item = self.items[index].clone();
        if let Item::Message { id, text } = &item {
            let part = json!({"type": "output_text", "text": text, "annotations": []});
            self.push(out, "response.output_text.done", json!({"item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []}));
            self.push(
                out,
                "response.content_part.done",
                json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
            );
            let done = Self::item_json(&item, "completed");
            self.push(
                out,
                "response.output_item.done",
                json!({"output_index": index, "item": done}),
            );
        }
    }

    /// The events for one engine event.
    pub fn event(&mut self, e: ToolEvent) -> Vec<Event> {
        let mut out = Vec::new();
        match e {
            // Its requests take no reasoning prefix.
            ToolEvent::Content(t) if t.is_empty() => {}
            ToolEvent::Reasoning(_) => {}
            ToolEvent::Content(t) => {
                if !self.text_open {
                    let id = format!("msg_{}", self.suffix());
                    self.items.push(Item::Message {
                        id: id.clone(),
                        text: String::new(),
                    });
                    self.text_open = true;
                    let index = self.items.len() - 1;
                    let item = Self::item_json(&self.items[index], "in_progress");
                    self.push(
                        &mut out,
                        "response.output_item.added",
                        json!({"output_index": index, "item": item}),
                    );
                    self.push(&mut out, "response.content_part.added", json!({"item_id": id, "output_index": index, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}));
                }
                let index = self.items.len() - 1;
                let Some(Item::Message { id, text }) = self.items.last_mut() else {
                    unreachable!("an open text item is a message")
                };
                text.push_str(&t);
                let id = id.clone();
                self.push(&mut out, "response.output_text.delta", json!({"item_id": id, "output_index": index, "content_index": 0, "delta": t, "logprobs": []}));
            }
            ToolEvent::CallStart { id, name, .. } => {
                self.close_text(&mut out);
                let item = Item::Call {
                    id: format!("fc_{}", id.trim_start_matches("call_")),
                    call_id: id,
                    name,
                    arguments: String::new(),
                    done: false,
                };
                self.items.push(item);
                let index = self.items.len() - 1;
                let added = Self::item_json(&self.items[index], "in_progress");
                self.push(
                    &mut out,
                    "response.output_item.added",
                    json!({"output_index": index, "item": added}),
                );
            }
            ToolEvent::Arguments { fragment, .. } => {
                if let Some((
                    index,
                    Item::Call {
                        id,
                        arguments,
                        done: false,
                        ..
                    },
                )) = self.items.iter_mut().enumerate().next_back()
                {
                    arguments.push_str(&fragment);
                    let id = id.clone();
                    self.push(
                        &mut out,
                        "response.function_call_arguments.delta",
                        json!({"item_id": id, "output_index": index, "delta": fragment}),
                    );
                }
            }
            ToolEvent::CallEnd { .. } => {
                if let Some((
                    index,
                    Item::Call {
                        id,
                        name,
                        arguments,
                        done,
                        ..
                    },
                )) = self.items.iter_mut().enumerate().next_back()
                {
                    if !*done {
                        *done = true;
                        let (id, name, arguments) = (id.clone(), name.clone(), arguments.clone());
                        let item = Self::item_json(&self.items[index], "completed");
                        self.push(&mut out, "response.function_call_arguments.done", json!({"item_id": id, "output_index": index, "name": name, "arguments": arguments}));
                        self.push(
                            &mut out,
                            "response.output_item.done",
                            json!({"output_index": index, "item": item}),
                        );
                    }
                }
            }
        }
        out
    }

    /// The closing events: open items done, then `response.completed` (or
    /// `response.incomplete` when `max_output_tokens` cut the output).
    pub fn finish(&mut self, o: &ChatOutcome) -> Vec<Event> {
        let mut out = Vec::new();
        self.close_text(&mut out);
        // A call cut by the limit is not handed out as complete.
        self.items
            .retain(|i| !matches!(i, Item::Call { done: false, .. }));
        let r = self.object(Some(o));
        let ty = if o.finish_reason == ChatFinish::Length {
            "response.incomplete"
        } else {
            "response.completed"
        };
        self.push(&mut out, ty, json!({"response": r}));
        out
    }

    /// An `error` event (the stream ends after it).
    pub fn error(&mut self, e: &ApiError) -> Event {
        let mut out = Vec::new();
        self.push(
            &mut out,
            "error",
            json!({"code": e.code, "message": e.message, "param": e.param}),
        );
        out.pop().expect("one event")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stencil_types::{ToolCall, Usage};

    #[test]
    fn the_stream_and_the_whole_response_agree() {
        let o = ChatOutcome {
            content: Some("Checking.".into()),
            reasoning: None,
            tool_calls: vec![ToolCall {
                id: "call_7".into(),
                name: "f".into(),
                arguments: "{\"a\": 1}".into(),
            }],
            finish_reason: ChatFinish::ToolCalls,
            stop_sequence: None,
            usage: Usage {
                prompt_tokens: 4,
                completion_tokens: 9,
            },
            timings: Default::default(),
            forced_tokens: 0,
            closed_by_budget: false,
            loop_guard_hits: 0,
            warnings: Vec::new(),
        };
        let mut w = ResponseWriter::new("resp_x", "m", 1, Map::new());
        let mut events = w.start();
        for e in [
            ToolEvent::Content("Checking.".into()),
            ToolEvent::CallStart {
                index: 0,
                id: "call_7".into(),
                name: "f".into(),
            },
            ToolEvent::Arguments {
                index: 0,
                fragment: "{\"a\"".into(),
            },
            ToolEvent::Arguments {
                index: 0,
                fragment: ": 1}".into(),
            },
            ToolEvent::CallEnd { index: 0 },
        ] {
            events.extend(w.event(e));
        }
        events.extend(w.finish(&o));
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        for (i, (n, d)) in events.iter().enumerate() {
            assert_eq!(
                (d["type"].as_str(), d["sequence_number"].as_u64()),
                (Some(n.as_str()), Some(i as u64))
            );
        }
        let streamed = &events.last().unwrap().1["response"];
        let whole = ResponseWriter::new("resp_x", "m", 1, Map::new()).whole(&o);
        assert_eq!(streamed, &whole);
        assert_eq!(whole["output"][1]["arguments"], "{\"a\": 1}");
        assert_eq!(whole["usage"]["total_tokens"], 13);
    }
}
