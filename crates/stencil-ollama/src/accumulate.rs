//! Client side: response lines -> one answer, refusing streams that did not end with `done`.

use serde_json::Value;

/// What is wrong with a stream.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    #[error("the stream ended before a line with \"done\": true: the answer is incomplete")]
    Incomplete,
    #[error("a line came after the final one")]
    AfterDone,
    #[error("malformed line: {0}")]
    BadLine(String),
    #[error("the server reported an error: {0}")]
    Server(String),
}

/// A tool call of the answer (arguments as an object).
#[derive(Debug, Clone, PartialEq)]
pub struct OllamaCall {
    pub name: String,
    pub arguments: Value,
}

/// A finished answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Answer {
    pub content: String,
    pub tool_calls: Vec<OllamaCall>,
    pub done_reason: String,
    pub prompt_eval_count: u64,
    pub eval_count: u64,
}

/// Joins `/api/chat` or `/api/generate` lines.
#[derive(Debug, Default)]
pub struct ChatAccumulator {
    answer: Answer,
    done: bool,
}

impl ChatAccumulator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one line; returns the text it adds.
    pub fn push(&mut self, line: &Value) -> Result<String, StreamError> {
        if let Some(e) = line.get("error") {
            return Err(StreamError::Server(
                e.as_str().map_or_else(|| e.to_string(), str::to_string),
            ));
        }
        if self.done {
            return Err(StreamError::AfterDone);
        }
        let done = line
            .get("done")
            .and_then(Value::as_bool)
            .ok_or_else(|| StreamError::BadLine(format!("no boolean `done` in {line}")))?;
        let text = match (line.get("message"), line.get("response")) {
            (Some(m), _) => {
                for c in m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let name = c["function"]["name"].as_str().ok_or_else(|| {
                        StreamError::BadLine(format!("a tool call without a name: {c}"))
                    })?;
                    let arguments = c["function"]["arguments"].clone();
                    if !arguments.is_object() {
                        return Err(StreamError::BadLine(format!(
                            "tool call `{name}` has arguments that are not an object: {arguments}"
                        )));
                    }
                    self.answer.tool_calls.push(OllamaCall {
                        name: name.to_string(),
                        arguments,
                    });
                }
                m.get("content").and_then(Value::as_str).unwrap_or_default()
            }
            (None, Some(r)) => r.as_str().unwrap_or_default(),
            (None, None) => "",
        };
        self.answer.content.push_str(text);
        if done {
            self.done = true;
            self.answer.done_reason = line["done_reason"].as_str().unwrap_or("stop").into();
            self.answer.prompt_eval_count = line["prompt_eval_count"].as_u64().unwrap_or(0);
            self.answer.eval_count = line["eval_count"].as_u64().unwrap_or(0);
        }
        Ok(text.to_string())
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The answer, if the last line said `done`.
    pub fn result(&self) -> Result<Answer, StreamError> {
        match self.done {
            true => Ok(self.answer.clone()),
            false => Err(StreamError::Incomplete),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn incomplete_and_failed_streams_are_refused() {
        let mut acc = ChatAccumulator::new();
        acc.push(&json!({"message": {"content": "a"}, "done": false}))
            .unwrap();
        assert_eq!(acc.result(), Err(StreamError::Incomplete));
        assert_eq!(
            acc.push(&json!({"error": "boom"})),
            Err(StreamError::Server("boom".into()))
        );
        assert!(acc.push(&json!({"message": {}})).is_err());
        acc.push(&json!({"response": "b", "done": true})).unwrap();
        assert_eq!(acc.result().unwrap().content, "ab");
        assert_eq!(
            acc.push(&json!({"done": false})),
            Err(StreamError::AfterDone)
        );
    }
}
