//! Request bodies from bytes, for the validation property test and the fuzz target
//! (`fuzz/fuzz_targets/request_validate.rs`): mostly fields the API knows, arbitrary values,
//! so that random input reaches deep validation rather than stopping at "not an object".

use serde_json::{json, Map, Value};
use stencil_openai::request::{chat_request, completion_request};

const FIELDS: &[&str] = &[
    "model",
    "messages",
    "prompt",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "include_usage",
    "n",
    "response_format",
    "type",
    "json_schema",
    "schema",
    "name",
    "strict",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "tools",
    "tool_choice",
    "function",
    "parameters",
    "description",
    "parallel_tool_calls",
    "role",
    "content",
    "text",
    "tool_calls",
    "tool_call_id",
    "arguments",
    "id",
    "logprobs",
    "echo",
    "suffix",
    "best_of",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "stencil_loop_guard",
    "stencil_max_tool_calls",
    "stencil_special_tokens",
    "properties",
    "required",
    "enum",
];
const STRINGS: &[&str] = &[
    "",
    "user",
    "assistant",
    "system",
    "tool",
    "developer",
    "json_object",
    "json_schema",
    "text",
    "function",
    "auto",
    "none",
    "required",
    "object",
    "string",
    "[a-z]+",
    "<|im_end|>",
    "{}",
    "\u{FDD0}0\u{FDD1}",
    "é中",
];

pub struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn next(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
}

fn value(b: &mut Bytes, depth: u32) -> Value {
    let pick = b.next();
    match if depth > 4 { pick % 6 } else { pick % 9 } {
        0 => Value::Null,
        1 => Value::Bool(pick & 0x10 != 0),
        2 => json!(i64::from(b.next() as i8) * i64::from(b.next())),
        3 => json!(f64::from(b.next()) / 7.0 - 3.0),
        4 => json!(STRINGS[b.next() as usize % STRINGS.len()]),
        5 => json!(u64::MAX - u64::from(b.next())),
        6 | 7 => {
            let n = b.next() % 5;
            let mut m = Map::new();
            for _ in 0..n {
                let key = FIELDS[b.next() as usize % FIELDS.len()];
                m.insert(key.to_string(), value(b, depth + 1));
            }
            Value::Object(m)
        }
        _ => {
            let n = b.next() % 4;
            Value::Array((0..n).map(|_| value(b, depth + 1)).collect())
        }
    }
}

/// No panic, and every rejection is a 4xx naming the offending field.
pub fn check(body: &Value) {
    for result in [chat_request(body), completion_request(body)] {
        if let Err(e) = result {
            assert!((400..500).contains(&e.status), "{} for {body}", e.status);
            assert!(e.param.is_some(), "no param: {} for {body}", e.message);
        }
    }
}

/// A body driven by `data` (the raw bytes are also tried as JSON by the fuzz target).
pub fn body(data: &[u8]) -> Value {
    let mut b = Bytes(data);
    let mut body = Map::new();
    let n = b.next() % 8;
    for _ in 0..n {
        let key = FIELDS[b.next() as usize % FIELDS.len()];
        body.insert(key.to_string(), value(&mut b, 0));
    }
    Value::Object(body)
}
