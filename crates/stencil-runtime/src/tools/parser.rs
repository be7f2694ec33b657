//! An incremental parser for `<tool_call>` blocks in generated text.

use stencil_grammar::tools::{ARGUMENTS_PREFIX, CALL_CLOSE, CALL_OPEN, NAME_PREFIX};
use stencil_types::ToolCall;
pub use stencil_types::ToolEvent;

use super::new_call_id;

#[derive(Debug, Clone, PartialEq, Eq)]
enum ParseState {
    Content,
    Header,
    Arguments,
    /// Between calls: the newline that separates them is not content.
    AfterCall,
}

/// Splits streamed text in the `<tool_call>` format into content and call fragments. Text
/// that may be the start of a tag is held back until it is decided.
#[derive(Debug, Clone)]
pub struct ToolCallParser {
    state: ParseState,
    buf: String,
    calls: Vec<ToolCall>,
    complete: usize,
    content: String,
}

impl Default for ToolCallParser {
    fn default() -> Self {
        Self::new()
    }
}

impl ToolCallParser {
    pub fn new() -> Self {
        Self {
            state: ParseState::Content,
            buf: String::new(),
            calls: Vec::new(),
            complete: 0,
            content: String::new(),
        }
    }

    /// Feeds more generated text.
    pub fn push(&mut self, text: &str) -> Vec<ToolEvent> {
        self.buf.push_str(text);
        let mut events = Vec::new();
        loop {
            let progressed = match self.state {
                ParseState::Content | ParseState::AfterCall => {
                    if self.state == ParseState::AfterCall {
                        let trimmed = self.buf.trim_start_matches('\n').len();
                        let skip = self.buf.len() - trimmed;
                        self.buf.drain(..skip);
                        if !self.buf.is_empty() {
                            self.state = ParseState::Content;
                        }
                    }
                    match self.buf.find(CALL_OPEN) {
                        Some(at) => {
                            let before: String = self.buf.drain(..at + CALL_OPEN.len()).collect();
                            self.emit_content(&before[..at], &mut events);
                            self.state = ParseState::Header;
                            true
                        }
                        None => {
                            let keep = held_prefix(&self.buf, CALL_OPEN);
                            let ready: String = self.buf.drain(..self.buf.len() - keep).collect();
                            self.emit_content(&ready, &mut events);
                            false
                        }
                    }
                }
                ParseState::Header => match self.buf.find(ARGUMENTS_PREFIX) {
                    Some(at) => {
                        let header: String =
                            self.buf.drain(..at + ARGUMENTS_PREFIX.len()).collect();
                        let name = header[..at]
                            .strip_prefix(NAME_PREFIX)
                            .and_then(|n| serde_json::from_str::<String>(n).ok())
                            .unwrap_or_else(|| header[..at].to_string());
                        let index = self.calls.len();
                        let id = new_call_id();
                        self.calls.push(ToolCall {
                            id: id.clone(),
                            name: name.clone(),
                            arguments: String::new(),
                        });
                        events.push(ToolEvent::CallStart { index, id, name });
                        self.state = ParseState::Arguments;
                        true
                    }
                    None => false,
                },
                ParseState::Arguments => {
                    let end = format!("}}{CALL_CLOSE}");
                    let index = self.calls.len() - 1;
                    match self.buf.find(&end) {
                        Some(at) => {
                            let fragment: String = self.buf.drain(..at + end.len()).collect();
                            self.emit_arguments(index, &fragment[..at], &mut events);
                            events.push(ToolEvent::CallEnd { index });
                            self.complete += 1;
                            self.state = ParseState::AfterCall;
                            true
                        }
                        None => {
                            let keep = held_prefix(&self.buf, &end);
                            let ready: String = self.buf.drain(..self.buf.len() - keep).collect();
                            self.emit_arguments(index, &ready, &mut events);
                            false
                        }
                    }
                }
            };
            if !progressed {
                return events;
            }
        }
    }

    fn emit_content(&mut self, text: &str, events: &mut Vec<ToolEvent>) {
        if !text.is_empty() {
            self.content.push_str(text);
            events.push(ToolEvent::Content(text.to_string()));
        }
    }

    fn emit_arguments(&mut self, index: usize, text: &str, events: &mut Vec<ToolEvent>) {
        if !text.is_empty() {
            self.calls[index].arguments.push_str(text);
            events.push(ToolEvent::Arguments {
                index,
                fragment: text.to_string(),
            });
        }
    }

    /// Ends the text: held-back content is released. Returns the final events.
    pub fn finish(&mut self) -> Vec<ToolEvent> {
        let rest = std::mem::take(&mut self.buf);
        let mut events = Vec::new();
        match self.state {
            ParseState::Content | ParseState::AfterCall => self.emit_content(&rest, &mut events),
            // An unfinished call stays unfinished: it is never reported as complete.
            ParseState::Header | ParseState::Arguments => {}
        }
        events
    }

    /// The content seen so far (text outside calls).
    pub fn content(&self) -> &str {
        &self.content
    }

    /// Calls whose text is complete.
    pub fn complete_calls(&self) -> &[ToolCall] {
        &self.calls[..self.complete]
    }

    /// True if a call was started but not finished.
    pub fn in_call(&self) -> bool {
        matches!(self.state, ParseState::Header | ParseState::Arguments)
    }
}

/// Length of the longest suffix of `s` that is a proper prefix of `tag` (on a char boundary).
fn held_prefix(s: &str, tag: &str) -> usize {
    (1..tag.len().min(s.len() + 1))
        .rev()
        .find(|&n| s.is_char_boundary(s.len() - n) && s.ends_with(&tag[..n]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_splits_content_and_calls_at_any_chunking() {
        let text = "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"北京\", \"x\": {\"y\": 1}}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>";
        for size in [1, 2, 3, 7, 1000] {
            let mut p = ToolCallParser::new();
            let mut events = Vec::new();
            let chars: Vec<char> = text.chars().collect();
            for piece in chars.chunks(size) {
                events.extend(p.push(&piece.iter().collect::<String>()));
            }
            events.extend(p.finish());
            assert_eq!(p.content(), "Checking.\n", "chunk size {size}");
            let calls = p.complete_calls();
            assert_eq!(calls.len(), 2);
            assert_eq!(calls[0].name, "get_weather");
            assert_eq!(calls[0].arguments, r#"{"city": "北京", "x": {"y": 1}}"#);
            assert_eq!(calls[1].name, "b");
            assert_eq!(calls[1].arguments, "{}");
            assert!(calls[0].id.starts_with("call_") && calls[0].id != calls[1].id);
            let args: String = events
                .iter()
                .filter_map(|e| match e {
                    ToolEvent::Arguments { index: 0, fragment } => Some(fragment.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(args, calls[0].arguments);
        }
    }

    #[test]
    fn unfinished_call_is_not_complete_and_lone_angle_bracket_is_content() {
        let mut p = ToolCallParser::new();
        p.push("a <b> <tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": ");
        p.finish();
        assert_eq!(p.content(), "a <b> ");
        assert!(p.complete_calls().is_empty());
        assert!(p.in_call());
        let mut p = ToolCallParser::new();
        p.push("x <tool_");
        assert_eq!(p.content(), "x ");
        p.finish();
        assert_eq!(p.content(), "x <tool_");
    }
}
