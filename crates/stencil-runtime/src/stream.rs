//! Streaming detokenization with stop strings.
//!
//! Tokens arrive as byte fragments that may split a UTF-8 character (byte-fallback and
//! byte-level BPE both do this) and may contain the start of a stop string. [`TextStream`]
//! buffers exactly what is undecided and releases only text that can no longer change:
//! whole characters that cannot be the beginning of a stop string. A stop string is never
//! emitted, even when it spans several tokens.

/// What a push into [`TextStream`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// Text that is final (possibly empty).
    Text(String),
    /// A stop string matched: the text before it is final, the stop string and anything after
    /// it are dropped. No further input is accepted.
    Stopped { text: String, stop: String },
}

/// Incremental UTF-8 decoder with stop-string hold-back.
#[derive(Debug, Clone)]
pub struct TextStream {
    stops: Vec<String>,
    pending: Vec<u8>,
    /// Bytes released (or dropped) before `pending[0]`.
    released: usize,
    stopped: bool,
}

impl TextStream {
    /// Empty stop strings are ignored (they would match before any text).
    pub fn new(stops: &[String]) -> Self {
        Self {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            pending: Vec::new(),
            released: 0,
            stopped: false,
        }
    }

    /// True once a stop string has matched.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Feeds the bytes of one token.
    pub fn push(&mut self, bytes: &[u8]) -> StreamEvent {
        self.push_checked(bytes, |_| true)
    }

    /// Feeds the bytes of one token; a stop string starting at byte offset `at` of the whole
    /// output ends it only if `may_stop(at)` (a constrained output may end only where it is
    /// complete). A refused occurrence is plain text.
    pub fn push_checked(
        &mut self,
        bytes: &[u8],
        mut may_stop: impl FnMut(usize) -> bool,
    ) -> StreamEvent {
        if self.stopped {
            return StreamEvent::Text(String::new());
        }
        let search_from = self.pending.len();
        self.pending.extend_from_slice(bytes);
        let released = self.released;
        if let Some((at, stop)) = self.find_stop(search_from, |at| may_stop(released + at)) {
            self.stopped = true;
            let text = lossy(&self.pending[..at]);
            self.released += self.pending.len();
            self.pending.clear();
            return StreamEvent::Stopped { text, stop };
        }
        let hold = self.held_suffix_len();
        let ready = self.pending.len() - hold;
        let (text, used) = decode_complete(&self.pending[..ready]);
        self.pending.drain(..used);
        self.released += used;
        StreamEvent::Text(text)
    }

    /// Flushes what is left at the end of generation (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let text = lossy(&self.pending);
        self.released += self.pending.len();
        self.pending.clear();
        text
    }

    /// Earliest stop string that ends inside the new bytes and that `allowed` accepts.
    fn find_stop(
        &self,
        new_from: usize,
        mut allowed: impl FnMut(usize) -> bool,
    ) -> Option<(usize, String)> {
        let mut found: Vec<(usize, &String)> = Vec::new();
        for stop in &self.stops {
            let s = stop.as_bytes();
            // A match must end after `new_from`, so it starts at or after new_from - len + 1.
            let start = (new_from + 1).saturating_sub(s.len());
            let mut from = start;
            while let Some(i) = find(&self.pending[from..], s) {
                found.push((from + i, stop));
                from += i + 1;
            }
        }
        found.sort_by_key(|&(at, s)| (at, std::cmp::Reverse(s.len())));
        found
            .into_iter()
            .find(|&(at, _)| allowed(at))
            .map(|(at, s)| (at, s.clone()))
    }

    /// Longest suffix of `pending` that is a proper prefix of some stop string.
    fn held_suffix_len(&self) -> usize {
        let p = &self.pending;
        let mut hold = 0;
        for stop in &self.stops {
            let s = stop.as_bytes();
            for len in (hold + 1..s.len().min(p.len() + 1)).rev() {
                if p.ends_with(&s[..len]) {
                    hold = len;
                    break;
                }
            }
        }
        hold
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Decodes the longest prefix of `bytes` that is final: complete characters, with invalid
/// sequences replaced by U+FFFD; an incomplete character at the end is left for later.
/// Returns the text and how many bytes it consumed.
fn decode_complete(bytes: &[u8]) -> (String, usize) {
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        match std::str::from_utf8(&bytes[i..]) {
            Ok(s) => {
                out.push_str(s);
                i = bytes.len();
            }
            Err(e) => {
                let valid = e.valid_up_to();
                out.push_str(std::str::from_utf8(&bytes[i..i + valid]).expect("validated"));
                i += valid;
                match e.error_len() {
                    Some(n) => {
                        out.push('\u{FFFD}');
                        i += n;
                    }
                    None => break, // incomplete character: wait for more bytes
                }
            }
        }
    }
    (out, i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], chunks: &[&[u8]]) -> (Vec<String>, Option<String>, String) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut s = TextStream::new(&stops);
        let mut out = Vec::new();
        let mut stopped = None;
        for c in chunks {
            match s.push(c) {
                StreamEvent::Text(t) => out.push(t),
                StreamEvent::Stopped { text, stop } => {
                    out.push(text);
                    stopped = Some(stop);
                    break;
                }
            }
        }
        let tail = s.finish();
        (out, stopped, tail)
    }

    #[test]
    fn never_emits_half_a_character() {
        let bytes = "a你🎉".as_bytes();
        let chunks: Vec<&[u8]> = bytes.chunks(1).collect();
        let (out, _, tail) = run(&[], &chunks);
        for piece in &out {
            assert!(!piece.contains('\u{FFFD}'));
        }
        assert_eq!(out.concat() + &tail, "a你🎉");
        assert_eq!(out[1], "", "first byte of 你 is held back");
    }

    #[test]
    fn stop_string_across_tokens_is_not_emitted() {
        let (out, stop, tail) = run(&["END"], &[b"hello E", b"N", b"D more"]);
        assert_eq!(out.concat(), "hello ");
        assert_eq!(stop.as_deref(), Some("END"));
        assert_eq!(tail, "");
    }

    #[test]
    fn partial_stop_prefix_is_released_when_it_diverges() {
        let (out, stop, tail) = run(&["END"], &[b"hello E", b"N", b"x"]);
        assert_eq!(out, vec!["hello ", "", "ENx"]);
        assert_eq!(stop, None);
        assert_eq!(tail, "");
        // Held prefix at the end of generation is flushed.
        let (out, _, tail) = run(&["END"], &[b"ok EN"]);
        assert_eq!(out.concat() + &tail, "ok EN");
    }

    #[test]
    fn refused_stop_occurrences_are_text() {
        let stops = vec!["}".to_string()];
        let mut s = TextStream::new(&stops);
        // Only a stop at absolute offset 8 may end the output.
        let ok = |at: usize| at == 8;
        assert_eq!(
            s.push_checked(b"{\"a\": {}", ok),
            StreamEvent::Text("{\"a\": {}".into())
        );
        assert_eq!(
            s.push_checked(b"}} more", ok),
            StreamEvent::Stopped {
                text: "".into(),
                stop: "}".into()
            }
        );
    }

    #[test]
    fn earliest_of_several_stops_wins_and_invalid_bytes_become_replacement() {
        let (out, stop, _) = run(&["\n\n", "User:"], &[b"a User:\n\n"]);
        assert_eq!(out.concat(), "a ");
        assert_eq!(stop.as_deref(), Some("User:"));
        let (out, _, _) = run(&[], &[&[b'a', 0xFF, b'b']]);
        assert_eq!(out.concat(), "a\u{FFFD}b");
    }
}
