//! Data-driven conformance ratchets over third-party data in ../shared/data:
//! - the JSON Schema Test Suite (draft 2020-12 at the pinned commit and at the current one,
//!   and draft 7; with optional/format), token by token with the SmolLM2 tokenizer;
//! - a fixed MaskBench sample (first 12 files of every subset).
//!
//! Each compares per-test (per-schema) outcomes with a checked-in baseline in
//! `tests/baselines/`: anything that passed there must still pass (a regression fails). An
//! improvement passes and says so; `STENCIL_UPDATE_BASELINES=1` rewrites the baseline file so
//! the ratchet moves up (a plain test run never modifies tracked files).

#[path = "../../stencil-runtime/tests/common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};

fn stencil(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_stencil"))
        .args(args)
        .output()
        .expect("run stencil");
    assert!(
        out.status.success(),
        "stencil {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

fn last_json_line(stdout: &str) -> Value {
    serde_json::from_str(stdout.lines().last().expect("output")).expect("last line is JSON")
}

/// Compares `passing` with the baseline's list: regressions fail; improvements update the file
/// when `STENCIL_UPDATE_BASELINES` is set.
fn ratchet(name: &str, summary: Value, passing: BTreeSet<String>) {
    let path = common::repo_root().join("tests/baselines").join(name);
    let baseline: Value = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(json!({"passing": []}));
    let before: BTreeSet<String> = baseline["passing"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(String::from))
        .collect();
    let lost: Vec<&String> = before.difference(&passing).collect();
    assert!(
        lost.is_empty(),
        "{name}: {} previously passing cases now fail (first: {:?}); summary now {summary}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
    if passing.len() > before.len() {
        if std::env::var_os("STENCIL_UPDATE_BASELINES").is_none() {
            eprintln!(
                "{name}: {} cases pass beyond the baseline's {}; rerun with STENCIL_UPDATE_BASELINES=1 to move the ratchet up",
                passing.len() - before.len(),
                before.len()
            );
            return;
        }
        let body = json!({"summary": summary, "passing": passing});
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&body).expect("json") + "\n",
        )
        .expect("write baseline");
        eprintln!(
            "{name}: ratchet moved from {} to {} passing cases",
            before.len(),
            passing.len()
        );
    }
}

/// Runs one JSON Schema Test Suite folder (with `optional/`) token by token and ratchets it
/// against `baseline`; `tests` is the suite's size, so a changed data folder is noticed.
fn suite_ratchet(suite: &str, baseline: &str, tests: u64) {
    let (Some(suite), Some(tok)) = (
        common::shared_data(suite),
        common::shared_data("tokenizers/smollm2-135m-instruct/tokenizer.json"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let per_test = dir.path().join("per-test.jsonl");
    let stdout = stencil(&[
        "test-suite",
        "--recursive",
        "--suite",
        suite.to_str().expect("path"),
        "--tokenizer",
        tok.to_str().expect("path"),
        "--per-test",
        per_test.to_str().expect("path"),
    ]);
    let summary = last_json_line(&stdout);
    assert_eq!(
        summary["tests"],
        tests,
        "{} has {tests} tests: {summary}",
        suite.display()
    );
    let mut passing = BTreeSet::new();
    let mut false_positives = Vec::new();
    for line in std::fs::read_to_string(&per_test)
        .expect("per-test")
        .lines()
    {
        let r: Value = serde_json::from_str(line).expect("json line");
        match r["outcome"].as_str() {
            Some("pass") => {
                passing.insert(r["id"].as_str().unwrap_or_default().to_string());
            }
            Some("false_positive") => false_positives.push(r["id"].to_string()),
            _ => {}
        }
    }
    // Accepting an invalid instance is the failure users cannot detect: none, ever.
    assert!(
        false_positives.is_empty(),
        "{}: false positives: {false_positives:?}",
        suite.display()
    );
    ratchet(baseline, summary, passing);
}

/// The commit published engine results use (llguidance's baseline: 934 pass, 895 refused).
#[test]
fn json_schema_test_suite_ratchet() {
    suite_ratchet(
        "json-schema-test-suite/pinned-78048ea/tests/draft2020-12",
        "json-schema-test-suite.json",
        1897,
    );
}

#[test]
fn json_schema_test_suite_current_ratchet() {
    suite_ratchet(
        "json-schema-test-suite/tests/draft2020-12",
        "json-schema-test-suite-current.json",
        2063,
    );
}

/// Draft 7 semantics (`$ref` hides its siblings), which schemas declaring draft-07 get.
#[test]
fn json_schema_test_suite_draft7_ratchet() {
    suite_ratchet(
        "json-schema-test-suite/tests/draft7",
        "json-schema-test-suite-draft7.json",
        1603,
    );
}

#[test]
fn maskbench_sample_ratchet() {
    let (Some(data), Some(tok)) = (
        common::shared_data("maskbench"),
        common::shared_data("tokenizers/smollm2-135m-instruct/tokenizer.json"),
    ) else {
        return;
    };
    let mut args: Vec<String> = vec![
        "bench".into(),
        "maskbench".into(),
        "--tokenizer".into(),
        tok.display().to_string(),
    ];
    let mut subsets: Vec<PathBuf> = std::fs::read_dir(&data)
        .expect("maskbench dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    subsets.sort();
    for s in &subsets {
        args.push("--data".into());
        args.push(s.display().to_string());
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let per_schema = dir.path().join("per-schema.jsonl");
    args.extend([
        "--limit".into(),
        "12".into(),
        "--per-schema".into(),
        per_schema.display().to_string(),
    ]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let summary = last_json_line(&stencil(&argv));
    let mut passing = BTreeSet::new();
    let mut wrong_after_compile = Vec::new();
    for line in std::fs::read_to_string(&per_schema)
        .expect("per-schema")
        .lines()
    {
        let r: Value = serde_json::from_str(line).expect("json line");
        let id = r["id"].as_str().unwrap_or_default().to_string();
        if r["compiled"] == true && r["tests_failed"] == 0 {
            passing.insert(id);
        } else if r["compiled"] == true && r["invalid"].as_u64() != r["invalid_rejected"].as_u64() {
            wrong_after_compile.push(format!("{id}: {}", r["first_failure"]));
        }
    }
    assert!(
        wrong_after_compile.is_empty(),
        "compiled schemas accepting invalid instances: {wrong_after_compile:?}"
    );
    ratchet("maskbench-sample.json", summary, passing);
}
