//! Newline-delimited JSON framing: encoding lines and decoding network bytes split anywhere.

use serde_json::Value;

/// A line that is not JSON, or a stream cut inside a line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NdjsonError {
    #[error("line {line} is not valid UTF-8")]
    Utf8 { line: usize },
    #[error("line {line} is not JSON: {error}")]
    Json { line: usize, error: String },
    #[error("the stream ended inside a line ({0} bytes without a newline)")]
    Truncated(usize),
}

/// One value as a line.
pub fn line(v: &Value) -> String {
    let mut s = v.to_string();
    s.push('\n');
    s
}

/// Splits bytes into JSON lines. Bytes are kept until their line ends, so a UTF-8 character or
/// a JSON value split across reads is whole when decoded; `\r\n` ends a line too, empty lines
/// are skipped.
#[derive(Debug, Default)]
pub struct NdjsonDecoder {
    buf: Vec<u8>,
    lines: usize,
}

impl NdjsonDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// The values of the lines `bytes` completes.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Result<Value, NdjsonError>> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
            let raw: Vec<u8> = self.buf.drain(..=nl).collect();
            let raw = raw.strip_suffix(b"\n").unwrap_or(&raw);
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            self.lines += 1;
            let line = self.lines;
            let Ok(text) = std::str::from_utf8(raw) else {
                out.push(Err(NdjsonError::Utf8 { line }));
                continue;
            };
            if text.trim().is_empty() {
                continue;
            }
            out.push(serde_json::from_str(text).map_err(|e| NdjsonError::Json {
                line,
                error: e.to_string(),
            }));
        }
        out
    }

    /// At the end of the stream: an error if a line was left unfinished.
    pub fn finish(&mut self) -> Result<(), NdjsonError> {
        let rest = std::mem::take(&mut self.buf);
        match rest.iter().all(u8::is_ascii_whitespace) {
            true => Ok(()),
            false => Err(NdjsonError::Truncated(rest.len())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_survive_any_split() {
        let values = [
            json!({"message": {"content": "héllo 世界 🎉"}, "done": false}),
            json!({"done": true}),
        ];
        let wire: String = values
            .iter()
            .map(line)
            .collect::<String>()
            .replace("}\n{", "}\r\n\n{");
        let bytes = wire.as_bytes();
        for cut in 1..bytes.len() {
            let mut d = NdjsonDecoder::new();
            let mut got: Vec<Value> = d
                .push(&bytes[..cut])
                .into_iter()
                .map(Result::unwrap)
                .collect();
            got.extend(d.push(&bytes[cut..]).into_iter().map(Result::unwrap));
            assert_eq!(got, values, "cut at {cut}");
            assert!(d.finish().is_ok());
        }
        let mut d = NdjsonDecoder::new();
        assert!(d.push(b"{\"done\": fal").is_empty());
        assert_eq!(d.finish(), Err(NdjsonError::Truncated(12)));
        assert!(matches!(
            NdjsonDecoder::new().push(b"nope\n")[0],
            Err(NdjsonError::Json { line: 1, .. })
        ));
    }
}
