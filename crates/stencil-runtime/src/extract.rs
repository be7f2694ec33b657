//! A lenient JSON extractor for *unconstrained* output, from systems you cannot constrain.
//!
//! This is the fallback it looks like: it finds JSON in text that may have prose around it,
//! and nothing guarantees the JSON is what you asked for. With stencil generating, constrain
//! instead. Tried in order: the whole text, each fenced code block (```json or bare ```), the
//! span from the first `{` to the last `}`. When all fail, the error quotes the text.

use serde_json::Value;

/// Which attempt found the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtractMethod {
    Direct,
    FencedBlock,
    Braces,
}

/// No JSON found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no JSON value in the text (tried a direct parse, fenced code blocks, and the first `{{` to the last `}}`): {snippet}")]
pub struct ExtractError {
    /// The start of the text, quoted.
    pub snippet: String,
}

/// Finds a JSON value in `text`.
pub fn extract_json(text: &str) -> Result<(Value, ExtractMethod), ExtractError> {
    if let Ok(v) = serde_json::from_str(text.trim()) {
        return Ok((v, ExtractMethod::Direct));
    }
    for block in fenced_blocks(text) {
        if let Ok(v) = serde_json::from_str(block.trim()) {
            return Ok((v, ExtractMethod::FencedBlock));
        }
    }
    if let (Some(a), Some(b)) = (text.find('{'), text.rfind('}')) {
        if a < b {
            if let Ok(v) = serde_json::from_str(&text[a..=b]) {
                return Ok((v, ExtractMethod::Braces));
            }
        }
    }
    Err(ExtractError {
        snippet: stencil_types::snippet(text),
    })
}

/// Contents of ``` fenced blocks (the info string, e.g. `json`, is dropped).
fn fenced_blocks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        let body_start = after.find('\n').map_or(after.len(), |n| n + 1);
        let body = &after[body_start..];
        match body.find("```") {
            Some(close) => {
                out.push(&body[..close]);
                rest = &body[close + 3..];
            }
            None => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_fallback_in_turn() {
        assert_eq!(
            extract_json(" {\"a\": 1} ").unwrap(),
            (json!({"a": 1}), ExtractMethod::Direct)
        );
        assert_eq!(
            extract_json("Sure!\n```json\n{\"a\": [1, \"中\"]}\n```\nDone.").unwrap(),
            (json!({"a": [1, "中"]}), ExtractMethod::FencedBlock)
        );
        assert_eq!(
            extract_json("```\nnot json\n```\n```\n[2]\n```").unwrap(),
            (json!([2]), ExtractMethod::FencedBlock)
        );
        assert_eq!(
            extract_json("The answer is {\"b\": {\"c\": true}} as requested.").unwrap(),
            (json!({"b": {"c": true}}), ExtractMethod::Braces)
        );
        let err = extract_json("I cannot help with {that request.").unwrap_err();
        assert!(
            err.to_string().contains("I cannot help with {that"),
            "{err}"
        );
    }
}
