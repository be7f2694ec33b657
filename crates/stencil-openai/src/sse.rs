//! Server-Sent Events: framing for the server, an incremental decoder for clients.
//!
//! [`SseDecoder`] accepts the body in pieces of any size: lines may end in LF, CRLF or CR
//! (a CRLF split between two pieces is one line end), multi-byte UTF-8 characters may be
//! split between pieces (lines are decoded only when complete, and a line end byte never
//! occurs inside a UTF-8 character), comment lines (`: ping`) are counted, several `data:`
//! lines of one event are joined with `\n`, and an event is dispatched on its blank line.

/// `data: <payload>\n\n`. The payload must not contain line breaks (compact JSON never does).
pub fn data(payload: &str) -> String {
    debug_assert!(!payload.contains('\n') && !payload.contains('\r'));
    format!("data: {payload}\n\n")
}

/// A comment line (keep-alive); clients ignore it.
pub fn comment(text: &str) -> String {
    format!(": {text}\n\n")
}

/// The end-of-stream marker OpenAI clients wait for.
pub const DONE: &str = "data: [DONE]\n\n";

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field (`None`: the default "message").
    pub event: Option<String>,
    pub data: String,
    pub id: Option<String>,
}

impl SseEvent {
    /// True for the `[DONE]` marker.
    pub fn is_done(&self) -> bool {
        self.data.trim() == "[DONE]"
    }
}

/// Incremental SSE parser.
#[derive(Debug, Default)]
pub struct SseDecoder {
    line: Vec<u8>,
    /// The previous piece ended with CR: a leading LF in the next piece belongs to it.
    after_cr: bool,
    started: bool,
    data: Option<String>,
    event: Option<String>,
    id: Option<String>,
    comments: usize,
}

impl SseDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Comment (heartbeat) lines seen so far.
    pub fn comments(&self) -> usize {
        self.comments
    }

    /// Feeds bytes; returns the events completed by them.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        for &b in bytes {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' => self.end_line(&mut out),
                b'\r' => {
                    self.end_line(&mut out);
                    self.after_cr = true;
                }
                _ => self.line.push(b),
            }
        }
        out
    }

    /// Ends the stream. An event without its closing blank line is incomplete and dropped,
    /// as the SSE specification says; returns whether anything was pending.
    pub fn finish(&mut self) -> bool {
        let pending = !self.line.is_empty() || self.data.is_some();
        self.line.clear();
        self.data = None;
        self.event = None;
        pending
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) {
        let raw = std::mem::take(&mut self.line);
        let mut line = String::from_utf8_lossy(&raw).into_owned();
        if !self.started {
            self.started = true;
            if let Some(rest) = line.strip_prefix('\u{FEFF}') {
                line = rest.to_string();
            }
        }
        if line.is_empty() {
            if let Some(data) = self.data.take() {
                out.push(SseEvent {
                    event: self.event.take(),
                    data,
                    id: self.id.clone(),
                });
            }
            self.event = None;
            return;
        }
        if line.starts_with(':') {
            self.comments += 1;
            return;
        }
        let (name, value) = match line.find(':') {
            Some(at) => {
                let v = &line[at + 1..];
                (&line[..at], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (line.as_str(), ""),
        };
        match name {
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            "event" => self.event = Some(value.to_string()),
            "id" if !value.contains('\0') => self.id = Some(value.to_string()),
            _ => {} // `retry` and unknown fields are ignored
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(pieces: &[&[u8]]) -> (Vec<SseEvent>, usize) {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for p in pieces {
            out.extend(d.push(p));
        }
        d.finish();
        (out, d.comments())
    }

    #[test]
    fn line_ends_split_anywhere() {
        let body = "data: a\r\n\r\n: ping\r\rdata: b\rdata: c\r\revent: error\ndata: {\"x\":\"中\"}\n\ndata: [DONE]\n\n";
        let bytes = body.as_bytes();
        for size in [1, 2, 3, 7, bytes.len()] {
            let pieces: Vec<&[u8]> = bytes.chunks(size).collect();
            let (events, comments) = decode(&pieces);
            let data: Vec<&str> = events.iter().map(|e| e.data.as_str()).collect();
            assert_eq!(
                data,
                ["a", "b\nc", "{\"x\":\"中\"}", "[DONE]"],
                "piece size {size}"
            );
            assert_eq!(events[2].event.as_deref(), Some("error"));
            assert_eq!(events[1].event, None);
            assert!(events[3].is_done());
            assert_eq!(comments, 1);
        }
    }

    #[test]
    fn unterminated_event_is_dropped() {
        let mut d = SseDecoder::new();
        assert!(d.push(b"data: partial").is_empty());
        assert!(d.finish());
    }
}
