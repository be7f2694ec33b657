//! Splits a streamed output with a reasoning prefix into reasoning and content.
//!
//! The output is `[start] reasoning end [blanks] content` (the grammar of
//! `stencil_grammar::reasoning_then`); chunks arrive cut anywhere, so a piece that may be the
//! beginning of a marker is held back until the next chunk decides it.

use stencil_types::Reasoning;

/// Where the splitter is in the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before the (optional) start marker is known to be there or not.
    Opening,
    Reasoning,
    /// After the end marker, before the content's first non-blank character.
    Gap,
    Content,
}

/// Splits chunks of an output into (reasoning, content) pieces.
#[derive(Debug, Clone)]
pub struct ReasoningSplitter {
    start: String,
    end: String,
    phase: Phase,
    held: String,
    /// Blanks at the end of the reasoning streamed so far, held back until more reasoning
    /// follows them (the reasoning is trimmed, streamed or whole).
    blanks: String,
    reasoning: String,
}

impl ReasoningSplitter {
    pub fn new(r: &Reasoning) -> Self {
        Self {
            start: r.start.clone(),
            end: r.end.clone(),
            phase: Phase::Opening,
            held: String::new(),
            blanks: String::new(),
            reasoning: String::new(),
        }
    }

    /// The reasoning and content text `chunk` makes final.
    pub fn push(&mut self, chunk: &str) -> (String, String) {
        self.held.push_str(chunk);
        let (mut thought, mut content) = (String::new(), String::new());
        loop {
            match self.phase {
                Phase::Opening => {
                    if !self.start.is_empty() && self.held.starts_with(&self.start) {
                        self.held.drain(..self.start.len());
                    } else if !self.start.is_empty() && self.start.starts_with(self.held.as_str()) {
                        break; // nothing yet, or what may still become the start marker
                    }
                    self.phase = Phase::Reasoning;
                }
                Phase::Reasoning => {
                    if let Some(i) = self.held.find(&self.end) {
                        thought.push_str(&self.held[..i]);
                        self.held.drain(..i + self.end.len());
                        self.phase = Phase::Gap;
                        continue;
                    }
                    // Keep the longest tail that may begin the end marker.
                    let keep = (1..self.end.len())
                        .rev()
                        .find(|&k| {
                            self.held.len() >= k
                                && self.held.is_char_boundary(self.held.len() - k)
                                && self.end.starts_with(&self.held[self.held.len() - k..])
                        })
                        .unwrap_or(0);
                    let cut = self.held.len() - keep;
                    thought.push_str(&self.held[..cut]);
                    self.held.drain(..cut);
                    break;
                }
                Phase::Gap => {
                    let blanks = self.held.len()
                        - self.held.trim_start_matches([' ', '\t', '\n', '\r']).len();
                    self.held.drain(..blanks);
                    if self.held.is_empty() {
                        break;
                    }
                    self.phase = Phase::Content;
                }
                Phase::Content => {
                    content.push_str(&self.held);
                    self.held.clear();
                    break;
                }
            }
        }
        let ended = matches!(self.phase, Phase::Gap | Phase::Content);
        (self.trimmed(thought, ended), content)
    }

    /// The part of a piece of reasoning to stream now: without leading blanks at the start of
    /// the reasoning, and with trailing blanks held back (dropped once the reasoning `ended`).
    fn trimmed(&mut self, piece: String, ended: bool) -> String {
        let mut text = std::mem::take(&mut self.blanks);
        text.push_str(&piece);
        if self.reasoning.is_empty() {
            text = text.trim_start().to_string();
        }
        let body = text.trim_end().len();
        if !ended {
            self.blanks = text[body..].to_string();
        }
        text.truncate(body);
        self.reasoning.push_str(&text);
        text
    }

    /// At the end of the output: what was held back (reasoning if the end marker never
    /// came).
    pub fn finish(&mut self) -> (String, String) {
        let rest = std::mem::take(&mut self.held);
        match self.phase {
            Phase::Opening | Phase::Reasoning => {
                self.phase = Phase::Reasoning;
                (self.trimmed(rest, true), String::new())
            }
            Phase::Gap | Phase::Content => (String::new(), rest),
        }
    }

    /// All the reasoning streamed so far (trimmed: it is what [`ReasoningSplitter::push`]
    /// and [`ReasoningSplitter::finish`] returned as reasoning, put together).
    pub fn reasoning(&self) -> &str {
        &self.reasoning
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&str], start: &str) -> (String, String, String) {
        let mut s = ReasoningSplitter::new(&Reasoning {
            start: start.into(),
            end: "</think>".into(),
            max_tokens: None,
        });
        let (mut t, mut c) = (String::new(), String::new());
        for chunk in chunks {
            let (a, b) = s.push(chunk);
            t.push_str(&a);
            c.push_str(&b);
        }
        let (a, b) = s.finish();
        t.push_str(&a);
        c.push_str(&b);
        (t, c, s.reasoning().to_string())
    }

    #[test]
    fn markers_cut_anywhere() {
        let text = "<think>Rain, so é.</think>\n\n{\"a\": 1}";
        // Every way of cutting the text in two (at character boundaries), and byte by byte.
        for i in 0..=text.len() {
            if !text.is_char_boundary(i) {
                continue;
            }
            let (t, c, r) = split(&[&text[..i], &text[i..]], "<think>");
            assert_eq!(
                (t.as_str(), c.as_str()),
                ("Rain, so é.", "{\"a\": 1}"),
                "cut at {i}"
            );
            assert_eq!(r, "Rain, so é.");
        }
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(split(&pieces, "<think>").1, "{\"a\": 1}");
    }

    #[test]
    fn start_marker_optional_and_end_missing() {
        // The prompt opened the reasoning: no start marker in the output.
        assert_eq!(
            split(&["Hmm </thi", "nk>yes"], "<think>"),
            ("Hmm".into(), "yes".into(), "Hmm".into())
        );
        // `<th` that turns out not to be the start marker is reasoning.
        assert_eq!(split(&["<th", "is</think>x"], "<think>").0, "<this");
        // Never ended (cut by max_tokens): everything is reasoning, no content.
        assert_eq!(
            split(&["<think>a long </th"], "<think>"),
            ("a long </th".into(), String::new(), "a long </th".into())
        );
        // An empty start marker.
        assert_eq!(split(&["a</think> b"], "").1, "b");
    }

    #[test]
    fn streamed_reasoning_is_the_trimmed_whole() {
        // Blanks at either end never stream; blanks inside do, once more reasoning follows.
        let chunks = ["<think>\n Hmm", " ", "\n", "ok  ", "\n</think>x"];
        assert_eq!(
            split(&chunks, "<think>"),
            ("Hmm \nok".into(), "x".into(), "Hmm \nok".into())
        );
        // Cut by max_tokens after blanks.
        assert_eq!(split(&["<think>a ", "b \n"], "<think>").0, "a b");
    }
}
