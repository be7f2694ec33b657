//! Turns engine events into OpenAI stream chunks: `delta.role` first, content deltas, tool
//! calls as `{index, id, type, function: {name}}` then `function.arguments` fragments with the
//! same index, a final empty delta with `finish_reason`, the optional usage chunk, `[DONE]`.

use crate::response::{
    stencil_info, ChatChunk, Completion, CompletionChoice, Delta, FunctionCall, ToolCallPart, Usage,
};
use serde_json::{json, Value};
use stencil_types::{ChatOutcome, ToolCall, ToolEvent};

/// Which endpoint's chunk shape to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completions,
}

/// Builds the chunks of one stream.
pub struct ChunkWriter {
    pub endpoint: Endpoint,
    pub id: String,
    pub model: String,
    pub created: u64,
    pub include_usage: bool,
}

impl ChunkWriter {
    fn chat(&self, delta: Delta, finish: Option<&str>) -> Value {
        serde_json::to_value(ChatChunk::new(
            &self.id,
            &self.model,
            self.created,
            delta,
            finish,
        ))
        .expect("chunks serialize")
    }

    /// A `text_completion` body: a stream chunk, or the whole response with its usage.
    pub fn completion(&self, text: &str, finish: Option<&str>, usage: Option<Usage>) -> Value {
        serde_json::to_value(Completion {
            id: self.id.clone(),
            object: "text_completion".into(),
            created: self.created,
            model: self.model.clone(),
            choices: vec![CompletionChoice {
                index: 0,
                text: text.to_string(),
                finish_reason: finish.map(str::to_string),
                logprobs: None,
            }],
            usage,
        })
        .expect("chunks serialize")
    }

    /// The first chunk (chat: the role).
    pub fn start(&self) -> Option<Value> {
        (self.endpoint == Endpoint::Chat).then(|| {
            self.chat(
                Delta {
                    role: Some("assistant".into()),
                    content: Some(String::new()),
                    reasoning_content: None,
                    tool_calls: None,
                },
                None,
            )
        })
    }

    /// The chunk for one engine event, if it produces one.
    pub fn event(&self, e: ToolEvent) -> Option<Value> {
        if self.endpoint == Endpoint::Completions {
            return match e {
                ToolEvent::Content(t) => Some(self.completion(&t, None, None)),
                _ => None,
            };
        }
        let delta = match e {
            ToolEvent::Content(t) => Delta {
                content: Some(t),
                ..Delta::default()
            },
            ToolEvent::Reasoning(t) => Delta {
                reasoning_content: Some(t),
                ..Delta::default()
            },
            ToolEvent::CallStart { index, id, name } => Delta {
                tool_calls: Some(vec![ToolCallPart::call(
                    Some(index),
                    &ToolCall {
                        id,
                        name,
                        arguments: String::new(),
                    },
                )]),
                ..Delta::default()
            },
            ToolEvent::Arguments { index, fragment } => Delta {
                tool_calls: Some(vec![ToolCallPart {
                    index: Some(index),
                    function: FunctionCall {
                        name: None,
                        arguments: Some(fragment),
                    },
                    ..ToolCallPart::default()
                }]),
                ..Delta::default()
            },
            ToolEvent::CallEnd { .. } => return None,
        };
        Some(self.chat(delta, None))
    }

    /// The closing chunks: `finish_reason`, then usage if asked for.
    pub fn finish(&self, o: &ChatOutcome) -> Vec<Value> {
        let finish = o.finish_reason.as_str();
        let usage: Usage = o.usage.into();
        let mut last = match self.endpoint {
            Endpoint::Chat => self.chat(Delta::default(), Some(finish)),
            Endpoint::Completions => self.completion("", Some(finish), None),
        };
        last["stencil"] = stencil_info(o);
        let mut out = vec![last];
        if self.include_usage {
            let object = match self.endpoint {
                Endpoint::Chat => "chat.completion.chunk",
                Endpoint::Completions => "text_completion",
            };
            out.push(json!({"id": self.id, "object": object, "created": self.created, "model": self.model, "choices": [], "usage": usage}));
        }
        out
    }
}
