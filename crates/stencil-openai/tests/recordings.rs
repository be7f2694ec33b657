//! The stream client against real SSE recordings from another OpenAI-compatible server
//! (../shared/data/sse-recordings), each fed whole and split every 1, 2 and 7 bytes, plus a
//! re-framed stream with CRLF line ends and raw UTF-8 (the recordings are LF-only ASCII).

#[path = "../../stencil-runtime/tests/common/mod.rs"]
mod common;

use std::path::PathBuf;

use serde_json::Value;
use stencil_openai::accumulate::{ChatAccumulator, StreamError};
use stencil_openai::response::ChatChunk;
use stencil_openai::sse::{SseDecoder, SseEvent};

fn recordings() -> Option<PathBuf> {
    common::shared_data("sse-recordings")
}

const SPLITS: [usize; 4] = [1, 2, 7, usize::MAX];

/// Decodes `bytes` split every `size` bytes; returns the accumulator, the last stream error,
/// and the number of comments.
fn run(bytes: &[u8], size: usize) -> (ChatAccumulator, Option<StreamError>, usize, Vec<SseEvent>) {
    let mut d = SseDecoder::new();
    let mut acc = ChatAccumulator::new();
    let mut err = None;
    let mut events = Vec::new();
    for piece in bytes.chunks(size.min(bytes.len().max(1))) {
        for e in d.push(piece) {
            if let Err(e) = acc.push_event(&e) {
                err = Some(e);
            }
            events.push(e);
        }
    }
    d.finish();
    (acc, err, d.comments(), events)
}

fn read(dir: &std::path::Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn nostream_message(dir: &std::path::Path, name: &str) -> Value {
    let v: Value = serde_json::from_slice(&read(dir, name)).unwrap();
    v["choices"][0]["message"].clone()
}

#[test]
fn every_split_gives_the_same_events() {
    let Some(dir) = recordings() else { return };
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "sse") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let (_, _, _, whole) = run(&bytes, usize::MAX);
        for size in SPLITS {
            let (_, _, _, events) = run(&bytes, size);
            assert_eq!(events, whole, "{} split every {size}", path.display());
        }
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} recordings found");
}

#[test]
fn plain_and_emoji_streams_match_their_non_streamed_bodies() {
    let Some(dir) = recordings() else { return };
    for (sse, body) in [
        ("01_plain_en.sse", "01_plain_en_nostream.response.json"),
        (
            "09_emoji_astral.sse",
            "09_emoji_astral_nostream.response.json",
        ),
    ] {
        let expected = nostream_message(&dir, body)["content"]
            .as_str()
            .unwrap()
            .to_string();
        for size in SPLITS {
            let (acc, err, _, _) = run(&read(&dir, sse), size);
            assert!(err.is_none(), "{sse}: {err:?}");
            acc.check_complete().unwrap();
            assert_eq!(acc.content(), expected, "{sse} split every {size}");
            assert_eq!(acc.role.as_deref(), Some("assistant"));
            assert_eq!(acc.finish_reason.as_deref(), Some("stop"));
            assert!(acc.tool_calls().unwrap().is_empty());
        }
    }
}

#[test]
fn chinese_length_cut_and_pings() {
    let Some(dir) = recordings() else { return };
    let (acc, _, _, _) = run(&read(&dir, "02_chinese.sse"), 1);
    assert!(
        acc.content().starts_with("中文介绍北京"),
        "{}",
        acc.content()
    );
    assert_eq!(acc.finish_reason.as_deref(), Some("length"));
    let (acc, _, _, _) = run(&read(&dir, "07_max_tokens_5.sse"), 2);
    assert_eq!(acc.finish_reason.as_deref(), Some("length"));
    acc.check_complete().unwrap();
    let (acc, err, comments, events) = run(&read(&dir, "08_long_stream_ping.sse"), 7);
    assert!(err.is_none());
    assert_eq!(comments, 1, "one `: ping` comment");
    assert_eq!(events.len(), 1903, "1,902 chunks and [DONE]");
    acc.check_complete().unwrap();
}

#[test]
fn tool_call_fragments_join_by_index() {
    let Some(dir) = recordings() else { return };
    for (sse, body) in [
        ("04_tool_call.sse", "04_tool_call_nostream.response.json"),
        (
            "04b_tool_call_chatmlfc.sse",
            "04b_tool_call_chatmlfc_nostream.response.json",
        ),
    ] {
        let expected = nostream_message(&dir, body)["tool_calls"][0]["function"].clone();
        for size in SPLITS {
            let (acc, err, _, _) = run(&read(&dir, sse), size);
            assert!(err.is_none());
            let calls = acc.tool_calls().unwrap();
            assert_eq!(calls.len(), 1, "{sse}");
            assert_eq!(
                calls[0].name, "get_weather",
                "name repeated per fragment is not doubled"
            );
            assert_eq!(
                calls[0].arguments,
                expected["arguments"].as_str().unwrap(),
                "{sse} split every {size}"
            );
            assert!(calls[0].id.starts_with("call_"));
            assert_eq!(acc.finish_reason.as_deref(), Some("tool_calls"));
        }
    }
}

#[test]
fn empty_bodies_are_incomplete_not_empty_answers() {
    let Some(dir) = recordings() else { return };
    for sse in [
        "04c_tool_auto_chatmlfc.sse",
        "06b_error_midstream_unknown_tool.sse",
        "06c_error_context_exceeded.sse",
    ] {
        let (acc, _, _, _) = run(&read(&dir, sse), 1);
        assert_eq!(acc.check_complete(), Err(StreamError::NoDone), "{sse}");
        assert_eq!(acc.tool_calls(), Err(StreamError::NoDone));
    }
}

/// The 04 tool-call stream re-framed: raw UTF-8 JSON (no `\u` escapes), CRLF line ends, a
/// comment, and then truncated variants.
#[test]
fn crlf_raw_utf8_and_truncated_tool_streams() {
    let Some(dir) = recordings() else { return };
    let (_, _, _, events) = run(&read(&dir, "04_tool_call.sse"), usize::MAX);
    let mut body = String::from(": keep-alive\r\n\r\n");
    for e in &events {
        let data = if e.is_done() {
            "[DONE]".to_string()
        } else {
            let chunk: ChatChunk = serde_json::from_str(&e.data).unwrap();
            serde_json::to_string(&chunk).unwrap()
        };
        body.push_str(&format!("data: {data}\r\n\r\n"));
    }
    assert!(body.contains("北"), "raw UTF-8 on the wire");
    let expected = r#"{ "city": "北京天气怎么样" ,"unit":"fahrenheit"}"#;
    for size in SPLITS {
        let (acc, err, comments, _) = run(body.as_bytes(), size);
        assert!(err.is_none());
        assert_eq!(comments, 1);
        assert_eq!(
            acc.tool_calls().unwrap()[0].arguments,
            expected,
            "split every {size}"
        );
    }
    // Without [DONE]: refused.
    let cut = body.rfind("data: [DONE]").unwrap();
    let (acc, _, _, _) = run(&body.as_bytes()[..cut], 3);
    assert_eq!(acc.tool_calls(), Err(StreamError::NoDone));
    // finish_reason length: refused.
    let length = body.replace(
        "\"finish_reason\":\"tool_calls\"",
        "\"finish_reason\":\"length\"",
    );
    assert_ne!(length, body);
    let (acc, _, _, _) = run(length.as_bytes(), 7);
    assert_eq!(acc.tool_calls(), Err(StreamError::Truncated));
    // An in-stream error event: reported, and the result refused.
    let with_error = body.replace(
        "data: [DONE]",
        "data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\r\n\r\ndata: [DONE]",
    );
    let (acc, err, _, _) = run(with_error.as_bytes(), 2);
    assert!(matches!(err, Some(StreamError::Server(ref e)) if e.message == "boom"));
    assert!(matches!(acc.tool_calls(), Err(StreamError::Server(_))));
}
