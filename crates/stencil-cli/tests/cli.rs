//! The `stencil` binary end to end, on the real default model.

#[path = "../../stencil-runtime/tests/common/mod.rs"]
mod common;

use std::path::Path;
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

/// `stencil generate --grammar PATH --prompt PROMPT` with `extra` arguments: (success, stdout,
/// stderr).
fn generate_grammar(path: &Path, prompt: &str, extra: &[&str]) -> (bool, String, String) {
    let mut args = vec![
        "generate",
        "--grammar",
        path.to_str().unwrap(),
        "--prompt",
        prompt,
    ];
    args.extend_from_slice(extra);
    let out = stencil(&args);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `--grammar FILE`: a recursive GBNF grammar (nested lists), sampled; the output is one
/// complete list.
#[test]
fn generate_with_a_gbnf_grammar() {
    let dir = std::env::temp_dir().join(format!("stencil-gbnf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("list.gbnf");
    std::fs::write(
        &path,
        "# nested lists of words\nroot ::= list\nlist ::= \"[\" (item (\", \" item)*)? \"]\"\nitem ::= [a-z]{1,8} | list\n",
    )
    .unwrap();
    for seed in ["1", "2"] {
        let sampled = ["--max-tokens", "30", "--temperature", "1.0", "--seed", seed];
        let (ok, text, err) = generate_grammar(&path, "A list of fruits.", &sampled);
        assert!(ok, "{err}");
        assert!(is_list(text.as_bytes()), "{text:?}");
    }
    let bad = dir.join("bad.gbnf");
    std::fs::write(&bad, "root ::= item\nitem ::= root \"x\"\n").unwrap();
    let (ok, _, err) = generate_grammar(&bad, "x", &[]);
    assert!(
        !ok && err.contains("left-recursive") && err.contains("line 1"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `--grammar FILE.lark`: the Lark test set's tool call (a `%json` embed between tags),
/// sampled; the framing is exact and the embedded value satisfies its schema under the
/// independent validator. A special token named in the grammar, and a Lark error naming the
/// line.
#[test]
fn generate_with_a_lark_grammar() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schemas/grammars/tool_call.lark");
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text.find("%json").unwrap() + "%json".len();
    let end = text.rfind("\"</tool_call>\"").unwrap();
    let schema: serde_json::Value = serde_json::from_str(&text[start..end]).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for seed in ["1", "2"] {
        let sampled = ["--max-tokens", "60", "--temperature", "1.0", "--seed", seed];
        let (ok, text, err) =
            generate_grammar(&path, "Call a tool for the weather in Paris.", &sampled);
        assert!(ok, "{err}");
        let inner = text
            .strip_prefix("<tool_call>")
            .and_then(|t| t.strip_suffix("</tool_call>"))
            .unwrap_or_else(|| panic!("{text:?}"));
        let v: serde_json::Value = serde_json::from_str(inner).unwrap();
        assert!(validator.is_valid(&v), "{v}");
    }
    let dir = std::env::temp_dir().join(format!("stencil-lark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A special token named by its text is the control token itself: fed to the model, not
    // printed as text (SmolLM2's `<|im_start|>`, 1 token between 2 forced words).
    let special = dir.join("special.lark");
    std::fs::write(&special, "start: \"Hi\" <|im_start|> \"there\"\n").unwrap();
    let (ok, text, err) = generate_grammar(&special, "Say hi.", &["--max-tokens", "10"]);
    assert!(ok && err.contains("finish_reason=stop"), "{err}");
    assert_eq!(text, "Hithere");
    let bad = dir.join("bad.grammar");
    std::fs::write(&bad, "start: \"a\"\n  | %json {\"type\": 3}\n").unwrap();
    let (ok, _, err) = generate_grammar(&bad, "x", &["--grammar-format", "lark"]);
    assert!(
        !ok && err.contains("Lark grammar, line 2: %json schema"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `list ::= "[" (item (", " item)*)? "]"`, `item ::= [a-z]{1,8} | list`, whole input.
fn is_list(s: &[u8]) -> bool {
    fn list(s: &[u8], i: usize) -> Option<usize> {
        if s.get(i) != Some(&b'[') {
            return None;
        }
        let mut i = i + 1;
        if s.get(i) == Some(&b']') {
            return Some(i + 1);
        }
        loop {
            i = item(s, i)?;
            match s.get(i) {
                Some(b']') => return Some(i + 1),
                Some(b',') if s.get(i + 1) == Some(&b' ') => i += 2,
                _ => return None,
            }
        }
    }
    fn item(s: &[u8], i: usize) -> Option<usize> {
        if s.get(i) == Some(&b'[') {
            return list(s, i);
        }
        let n = s[i.min(s.len())..]
            .iter()
            .take_while(|b| b.is_ascii_lowercase())
            .count();
        (1..=8).contains(&n).then_some(i + n)
    }
    list(s, 0) == Some(s.len())
}

#[test]
fn refused_schema_exits_with_the_compiler_message() {
    let out = stencil(&[
        "generate",
        "--json-schema",
        // Arrays with a repeated item (the complement of uniqueItems): still refused.
        r#"{"not":{"type":"array","uniqueItems":true}}"#,
        "--prompt",
        "x",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("uniqueItems") && err.contains("at #"), "{err}");
    let out = stencil(&["generate", "--json-schema", "{not json", "--prompt", "x"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is not valid JSON") && err.contains("line 1 column 2"),
        "{err}"
    );
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

#[test]
fn generate_with_tools_prints_the_calls() {
    let tools = common::repo_root().join("schemas/tools/weather.json");
    let out = stencil(&[
        "generate",
        "--prompt",
        "What is the weather in Paris?",
        "--tools",
        tools.to_str().unwrap(),
        "--tool-choice",
        "get_weather",
        "--max-tokens",
        "100",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let message: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let calls = message["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{message}");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    let args: serde_json::Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(
        args["city"].is_string() && args["unit"].is_string(),
        "{args}"
    );
    assert!(stderr.contains("finish_reason=tool_calls"), "{stderr}");
    let bad = stencil(&[
        "generate",
        "-p",
        "x",
        "--tools",
        tools.to_str().unwrap(),
        "--tool-choice",
        "nope",
    ]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("`nope`, which is not among the tools"));
}

#[test]
fn batch_keeps_order_and_survives_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let output = dir.path().join("out.jsonl");
    let lines = [
        r#"{"messages": [{"role": "user", "content": "Is the sky blue?"}], "guided_choice": ["yes", "no"]}"#,
        "not json",
        r##"{"custom_id": "c3", "body": {"messages": [{"role": "user", "content": "x"}], "guided_json": {"type": "object", "properties": {"a": {"$ref": "#/missing"}}}}}"##,
        "",
        r#"{"custom_id": "c5", "body": {"messages": [{"role": "user", "content": "A number"}], "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "integer", "minimum": 1, "maximum": 9}}}}}"#,
        r#"{"messages": [{"role": "user", "content": "Again"}], "guided_choice": ["yes", "no"]}"#,
    ];
    std::fs::write(&input, lines.join("\n")).unwrap();
    let out = stencil(&[
        "batch",
        "--input",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<serde_json::Value> = std::fs::read_to_string(&output)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let numbers: Vec<u64> = results
        .iter()
        .map(|r| r["line"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [1, 2, 3, 5, 6], "in order, the blank line skipped");
    let content = |r: &serde_json::Value| {
        r["response"]["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(["yes", "no"].contains(&content(&results[0]).as_str()));
    assert!(results[1]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("line 2 is not JSON"));
    assert_eq!(results[2]["custom_id"], "c3");
    assert!(results[2]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("#/missing"));
    let n: u32 = content(&results[3]).parse().unwrap();
    assert!((1..=9).contains(&n));
    assert_eq!(results[4]["response"]["object"], "chat.completion");
}

/// An interrupted batch keeps every finished line on disk, and `--resume` completes it
/// without redoing them (a cut-off last line is redone); an output from another input is
/// refused.
#[test]
fn batch_interrupted_by_sigint_keeps_results_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let output = dir.path().join("out.jsonl");
    // Line 3 is long (its schema demands 1,500 characters, some 300 tokens): results are
    // written in input order, so after the first two nothing more can be written for seconds,
    // and the interruption lands with lines still to run however late the poll below wakes.
    let lines: Vec<String> = (1..=12)
        .map(|i| {
            let mut body = serde_json::json!({"messages": [{"role": "user", "content": format!("Tell me about the number {i}.")}], "max_tokens": 40, "temperature": 0});
            if i == 3 {
                body["max_tokens"] = 800.into();
                body["response_format"] = serde_json::json!({"type": "json_schema", "json_schema": {"name": "long", "schema": {"type": "object", "properties": {"story": {"type": "string", "minLength": 1500}}, "required": ["story"], "additionalProperties": false}}});
            }
            serde_json::json!({"custom_id": format!("r{i}"), "body": body}).to_string()
        })
        .collect();
    std::fs::write(&input, lines.join("\n")).unwrap();
    // Two lines at a time, so the interruption lands with lines still to run.
    let args = |resume: bool| {
        let mut a = vec![
            "batch",
            "--max-batch",
            "2",
            "--input",
            input.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
        ];
        if resume {
            a.push("--resume");
        }
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_stencil"))
        .args(args(false))
        .env("STENCIL_MODEL", common::default_model())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let finished_lines = || {
        std::fs::read_to_string(&output)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let start = std::time::Instant::now();
    while finished_lines() < 2 {
        assert!(start.elapsed().as_secs() < 600, "no result written");
        assert!(child.try_wait().unwrap().is_none(), "batch ended early");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    assert!(!status.success(), "interrupted");
    let before = std::fs::read_to_string(&output).unwrap();
    let kept: Vec<serde_json::Value> = before
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        kept.len() >= 2 && kept.len() < 12,
        "{} lines kept",
        kept.len()
    );
    for (i, r) in kept.iter().enumerate() {
        assert_eq!(r["line"], i + 1);
        assert_eq!(r["custom_id"], format!("r{}", i + 1));
        assert!(
            r["response"]["choices"][0]["message"]["content"].is_string(),
            "{r}"
        );
    }
    // A result cut off mid-write (no newline) is dropped and redone.
    std::fs::write(
        &output,
        format!("{before}{{\"line\": {}, \"custom_id\": \"r", kept.len() + 1),
    )
    .unwrap();
    let out = stencil(&args(true).iter().map(String::as_str).collect::<Vec<_>>());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("({} kept from before)", kept.len())),
        "{stderr}"
    );
    let after = std::fs::read_to_string(&output).unwrap();
    assert!(
        after.starts_with(&before),
        "finished lines are kept as they were"
    );
    let all: Vec<serde_json::Value> = after
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let numbers: Vec<u64> = all.iter().map(|r| r["line"].as_u64().unwrap()).collect();
    assert_eq!(
        numbers,
        (1..=12).collect::<Vec<u64>>(),
        "each line once, in order"
    );
    assert!(all
        .iter()
        .all(|r| r["response"]["object"] == "chat.completion"));
    // Resuming into the output of another input is an error, before any work.
    std::fs::write(&input, lines[1..].join("\n")).unwrap();
    let out = stencil(&args(true).iter().map(String::as_str).collect::<Vec<_>>());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("belongs to another input"), "{stderr}");
}

/// User errors are one clear line: no repeated causes, no backtrace, the right reason.
#[test]
fn user_errors_are_one_clear_line() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_stencil"))
            .args(args)
            .env("STENCIL_MODEL", common::default_model())
            .env("RUST_BACKTRACE", "1")
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8(out.stderr).unwrap()
    };
    let missing = run(&[
        "generate",
        "--json-schema",
        "/no/such/schema.json",
        "--prompt",
        "hi",
    ]);
    assert!(missing.contains("no such file"), "{missing}");
    let bad_ref = run(&[
        "generate",
        "--json-schema",
        r##"{"properties": {"a": {"$ref": "#/nope"}}}"##,
        "--prompt",
        "hi",
    ]);
    for err in [&missing, &bad_ref] {
        assert!(
            !err.contains("backtrace") && !err.contains("Stack"),
            "{err}"
        );
        let line = err
            .lines()
            .find(|l| l.starts_with("error: "))
            .unwrap_or_else(|| panic!("{err}"));
        let parts: Vec<&str> = line["error: ".len()..].split(": ").collect();
        for w in parts.windows(2) {
            assert!(!w[0].ends_with(w[1]), "a cause printed twice: {line}");
        }
    }
    assert!(bad_ref.contains("#/nope"), "{bad_ref}");
}

/// `--help` never shows the API key taken from the environment.
#[test]
fn help_hides_the_api_key() {
    for cmd in ["serve", "chat"] {
        let out = Command::new(env!("CARGO_BIN_EXE_stencil"))
            .args([cmd, "--help"])
            .env("STENCIL_API_KEY", "sekret-key-123")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success());
        assert!(text.contains("STENCIL_API_KEY"), "{text}");
        assert!(!text.contains("sekret-key-123"), "{text}");
    }
}

/// `stencil chat --api openai|anthropic|ollama` against `stencil serve`: each answer, streamed
/// and joined by that API's stream decoder, is JSON valid against the schema; a wrong key is
/// one clear error line.
#[test]
fn chat_speaks_all_three_apis() {
    use std::io::{BufRead, BufReader};
    let mut server = Command::new(env!("CARGO_BIN_EXE_stencil"))
        .args(["serve", "--port", "0", "--api-key", "k1"])
        .env("STENCIL_MODEL", common::default_model())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("the server printed its address")
            .unwrap();
        if let Some(at) = line.find("http://") {
            let rest = &line[at..];
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    let schema = r#"{"type": "object", "properties": {"greeting": {"enum": ["你好", "早上好"]}}, "required": ["greeting"], "additionalProperties": false}"#;
    let validator = jsonschema::validator_for(&serde_json::from_str(schema).unwrap()).unwrap();
    let chat = |api: &str, key: &str| {
        Command::new(env!("CARGO_BIN_EXE_stencil"))
            .args([
                "chat",
                "--url",
                &url,
                "--api",
                api,
                "--api-key",
                key,
                "-p",
                "用中文说你好",
                "--max-tokens",
                "40",
                "--json-schema",
                schema,
            ])
            .output()
            .unwrap()
    };
    for api in ["openai", "anthropic", "ollama"] {
        let out = chat(api, "k1");
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(
            out.status.success(),
            "{api}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let answer: serde_json::Value =
            serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{api}: {e}: {stdout}"));
        assert!(validator.is_valid(&answer), "{api}: {answer}");
    }
    let out = chat("ollama", "wrong");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!out.status.success());
    assert!(
        stderr.starts_with("error: HTTP 401") && stderr.contains("API key"),
        "{stderr}"
    );
    server.kill().unwrap();
    server.wait().unwrap();
}
