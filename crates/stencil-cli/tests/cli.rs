//! The `stencil` binary end to end, on the real default model.

#[path = "../../stencil-runtime/tests/common/mod.rs"]
mod common;

use std::process::{Command, Output};

fn stencil(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stencil"))
        .args(args)
        .env("STENCIL_MODEL", common::default_model())
        .output()
        .unwrap()
}

#[test]
fn generate_streams_text_and_reports_speed() {
    let out = stencil(&[
        "generate",
        "--prompt",
        "What is the capital of France? Answer in one sentence.",
        "--max-tokens",
        "30",
    ]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("Paris"), "{stdout}");
    assert!(stderr.contains("finish_reason=stop"), "{stderr}");
    assert!(
        stderr.contains("decode=") && stderr.contains("ms/token") && stderr.contains("tok/s"),
        "{stderr}"
    );
}

#[test]
fn generate_with_stop_and_seed() {
    let args = [
        "generate",
        "--prompt",
        "List five fruits, one per line.",
        "--max-tokens",
        "40",
        "--temperature",
        "0.8",
        "--seed",
        "3",
        "--stop",
        "\n",
    ];
    let a = stencil(&args);
    let b = stencil(&args);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert_eq!(a.stdout, b.stdout, "same seed, same output");
    let text = String::from_utf8(a.stdout).unwrap();
    // The stop string is not printed: only the final newline the CLI adds.
    assert_eq!(text.matches('\n').count(), 1, "{text:?}");
}

#[test]
fn bad_inputs_exit_nonzero_with_a_message() {
    let out = stencil(&[
        "generate",
        "--model",
        "/no/such/model.gguf",
        "--prompt",
        "hi",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/no/such/model.gguf") && err.contains("no such file"),
        "{err}"
    );

    let out = stencil(&["generate", "--device", "cuda", "--prompt", "hi"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    #[cfg(not(feature = "cuda"))]
    assert!(err.contains("--features cuda"), "{err}");

    let out = stencil(&["generate", "--temperature=-1", "--prompt", "hi"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("temperature"));
}

/// Constrained generation end to end on the real model: greedy and sampled outputs parse and
/// validate under the independent `jsonschema` validator.
#[test]
fn generate_with_json_schema_is_valid() {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}
        },
        "required": ["name", "age"],
        "additionalProperties": false
    });
    let validator = jsonschema::validator_for(&schema).unwrap();
    let schema_text = schema.to_string();
    for (temperature, seed) in [("0", "1"), ("1.0", "7"), ("1.0", "8")] {
        let out = stencil(&[
            "generate",
            "--json-schema",
            &schema_text,
            "--prompt",
            "Describe a person.",
            "--max-tokens",
            "120",
            "--temperature",
            temperature,
            "--seed",
            seed,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        let text = String::from_utf8(out.stdout).unwrap();
        if stderr.contains("finish_reason=length") {
            continue; // cut short: reported as such, never as a complete value
        }
        assert!(stderr.contains("finish_reason=stop"), "{stderr}");
        let value: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert!(validator.is_valid(&value), "invalid output {text}");
    }
}

#[test]
fn generate_with_regex_and_choice() {
    let out = stencil(&[
        "generate",
        "--regex",
        "[A-Z][a-z]{2,8} [0-9]{1,3}",
        "--prompt",
        "A name and a number.",
        "--max-tokens",
        "20",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let re = regex_automata::meta::Regex::new("^[A-Z][a-z]{2,8} [0-9]{1,3}$").unwrap();
    assert!(re.is_match(&text), "{text:?}");
    let out = stencil(&[
        "generate",
        "--choice",
        "yes",
        "--choice",
        "no",
        "--prompt",
        "Is water wet?",
        "--temperature",
        "1.0",
        "--seed",
        "3",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text == "yes" || text == "no", "{text:?}");
}

#[test]
fn refused_schema_exits_with_the_compiler_message() {
    let out = stencil(&[
        "generate",
        "--json-schema",
        r#"{"type":"array","uniqueItems":true}"#,
        "--prompt",
        "x",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("uniqueItems") && err.contains("at #"), "{err}");
    let out = stencil(&["generate", "--json-schema", "{not json", "--prompt", "x"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("neither a readable file nor valid JSON"));
}

#[test]
fn compact_whitespace_has_no_blanks_between_tokens() {
    let schema = r#"{"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":99},"ok":{"type":"boolean"}},"required":["n","ok"],"additionalProperties":false}"#;
    let out = stencil(&[
        "generate",
        "--json-schema",
        schema,
        "--whitespace",
        "compact",
        "--prompt",
        "Give n and ok.",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let re = regex_automata::meta::Regex::new(r#"^\{"n":[0-9]{1,2},"ok":(true|false)\}$"#).unwrap();
    assert!(re.is_match(&text), "{text:?}");
    let out = stencil(&["generate", "--json", "--whitespace", "a(", "--prompt", "x"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("whitespace"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
