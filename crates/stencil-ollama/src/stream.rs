//! Engine events -> newline-delimited JSON lines.
//!
//! Text goes out as it comes (`{"message": {"role": "assistant", "content": "…"}, "done":
//! false}`); a tool call goes out in one line once its arguments are complete, since Ollama's
//! calls carry their arguments as an object, never as fragments; the last line has `"done":
//! true`, `done_reason`, counts and durations. An error after the stream began is one
//! `{"error": "…"}` line.

use serde_json::Value;
use stencil_types::api::ApiError;
use stencil_types::{ChatOutcome, ToolCall, ToolEvent};

use crate::response::{add_stats, body, error_body, Endpoint};

/// Builds the lines of one stream.
#[derive(Debug)]
pub struct LineWriter {
    endpoint: Endpoint,
    model: String,
    /// Calls whose arguments are still arriving, by index.
    open: Vec<(usize, ToolCall)>,
}

impl LineWriter {
    pub fn new(endpoint: Endpoint, model: &str) -> Self {
        Self {
            endpoint,
            model: model.to_string(),
            open: Vec::new(),
        }
    }

    /// The line for one engine event, if it makes one.
    pub fn event(&mut self, e: ToolEvent) -> Option<Value> {
        match e {
            // Its requests take no reasoning prefix.
            ToolEvent::Content(t) if t.is_empty() => None,
            ToolEvent::Reasoning(_) => None,
            ToolEvent::Content(t) => Some(body(self.endpoint, &self.model, &t, &[], false)),
            ToolEvent::CallStart { index, id, name } => {
                self.open.push((
                    index,
                    ToolCall {
                        id,
                        name,
                        arguments: String::new(),
                    },
                ));
                None
            }
            ToolEvent::Arguments { index, fragment } => {
                if let Some((_, c)) = self.open.iter_mut().find(|(i, _)| *i == index) {
                    c.arguments.push_str(&fragment);
                }
                None
            }
            ToolEvent::CallEnd { index } => {
                let pos = self.open.iter().position(|(i, _)| *i == index)?;
                let (_, call) = self.open.remove(pos);
                Some(body(self.endpoint, &self.model, "", &[call], false))
            }
        }
    }

    /// The last line. A call that never ended is not handed out.
    pub fn finish(&mut self, o: &ChatOutcome) -> Value {
        let mut v = body(self.endpoint, &self.model, "", &[], true);
        add_stats(&mut v, o);
        v
    }

    /// An error line (the stream ends after it).
    pub fn error(e: &ApiError) -> Value {
        error_body(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accumulate::ChatAccumulator;
    use serde_json::json;
    use stencil_types::ChatFinish;

    #[test]
    fn calls_go_out_whole_and_accumulate_back() {
        let mut w = LineWriter::new(Endpoint::Chat, "m");
        let mut lines = Vec::new();
        for e in [
            ToolEvent::Content("Sure.".into()),
            ToolEvent::CallStart {
                index: 0,
                id: "call_1".into(),
                name: "f".into(),
            },
            ToolEvent::Arguments {
                index: 0,
                fragment: "{\"a\"".into(),
            },
        ] {
            lines.extend(w.event(e));
        }
        assert_eq!(
            lines.len(),
            1,
            "no line for a call whose arguments are incomplete"
        );
        lines.extend(w.event(ToolEvent::Arguments {
            index: 0,
            fragment: ": 1}".into(),
        }));
        lines.extend(w.event(ToolEvent::CallEnd { index: 0 }));
        let o = ChatOutcome {
            content: Some("Sure.".into()),
            reasoning: None,
            tool_calls: Vec::new(),
            finish_reason: ChatFinish::ToolCalls,
            stop_sequence: None,
            usage: stencil_types::Usage {
                prompt_tokens: 3,
                completion_tokens: 8,
            },
            timings: Default::default(),
            forced_tokens: 0,
            closed_by_budget: false,
            loop_guard_hits: 0,
            warnings: Vec::new(),
        };
        lines.push(w.finish(&o));
        assert_eq!(
            lines[1]["message"]["tool_calls"][0]["function"]["arguments"],
            json!({"a": 1})
        );
        let mut acc = ChatAccumulator::new();
        for l in &lines {
            acc.push(l).unwrap();
        }
        let m = acc.result().unwrap();
        assert_eq!(
            (
                m.content.as_str(),
                m.tool_calls.len(),
                m.done_reason.as_str()
            ),
            ("Sure.", 1, "stop")
        );
        assert_eq!(m.eval_count, 8);
    }
}
