//! `stencil test-suite`: the official JSON Schema Test Suite, token by token.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use serde_json::{json, Value};
use stencil_mask::TokenSet;

use crate::conformance::{json_files, replay, suite_options, Engine, OrderArg, Outcome};

#[derive(Args, Debug)]
pub struct TestSuiteArgs {
    /// A suite folder (e.g. ../shared/data/json-schema-test-suite/tests/draft2020-12) or file.
    #[arg(long)]
    pub suite: PathBuf,
    /// tokenizer.json or GGUF file (default: the default model's tokenizer).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Also run subfolders (`optional/`).
    #[arg(long)]
    pub recursive: bool,
    /// Write one JSON line per test: id, outcome, detail.
    #[arg(long)]
    pub per_test: Option<PathBuf>,
    /// Object member order the instances may use. The suite tests validation, where JSON
    /// objects are unordered: `any` by default.
    #[arg(long, value_enum, default_value = "any")]
    pub property_order: OrderArg,
    /// The metaschema (`$schema`) of root schemas that declare none. Default: the draft the
    /// suite folder is named for (`draft7` -> draft-07), as the suite intends.
    #[arg(long)]
    pub default_schema: Option<String>,
}

/// The metaschema a suite folder stands for (`.../tests/draft7/...` -> draft-07).
fn suite_metaschema(path: &std::path::Path) -> Option<&'static str> {
    path.components().rev().find_map(|c| {
        Some(match c.as_os_str().to_str()? {
            "draft3" => "http://json-schema.org/draft-03/schema#",
            "draft4" => "http://json-schema.org/draft-04/schema#",
            "draft6" => "http://json-schema.org/draft-06/schema#",
            "draft7" => "http://json-schema.org/draft-07/schema#",
            "draft2019-09" => "https://json-schema.org/draft/2019-09/schema",
            "draft2020-12" => "https://json-schema.org/draft/2020-12/schema",
            _ => return None,
        })
    })
}

pub fn run(args: TestSuiteArgs) -> Result<()> {
    let engine = Engine::load(args.tokenizer.as_deref())?;
    let files = if args.suite.is_dir() {
        json_files(&args.suite, args.recursive)?
    } else {
        vec![args.suite.clone()]
    };
    let mut per_test = match &args.per_test {
        Some(p) => Some(std::io::BufWriter::new(std::fs::File::create(p)?)),
        None => None,
    };
    let default_schema = args
        .default_schema
        .clone()
        .or_else(|| suite_metaschema(&args.suite).map(str::to_string));
    let (mut groups, mut tests, mut pass, mut refused, mut fp, mut fneg) = (0, 0, 0, 0, 0, 0);
    let mut mask = TokenSet::new(engine.trie.vocab_size());
    for file in &files {
        let rel = file
            .strip_prefix(&args.suite)
            .unwrap_or(file)
            .to_string_lossy()
            .into_owned();
        let data: Value = serde_json::from_slice(&std::fs::read(file)?)
            .with_context(|| format!("parsing {}", file.display()))?;
        let options = suite_options(file, args.property_order);
        for (gi, group) in data.as_array().into_iter().flatten().enumerate() {
            groups += 1;
            let cases = group["tests"].as_array().cloned().unwrap_or_default();
            let mut schema = group["schema"].clone();
            if let (Value::Object(m), Some(uri)) = (&mut schema, &default_schema) {
                if !m.contains_key("$schema") {
                    m.insert("$schema".into(), Value::String(uri.clone()));
                }
            }
            let compiled = engine.compile(&schema, &options);
            for (ti, case) in cases.iter().enumerate() {
                tests += 1;
                let valid = case["valid"].as_bool().unwrap_or(false);
                let id = format!("{rel}#{gi}/{ti}");
                let (outcome, detail) = match &compiled {
                    Err(e) => {
                        refused += 1;
                        ("compile_refused", e.clone())
                    }
                    Ok(c) => {
                        let tokens = engine.tokenize(&case["data"])?;
                        let mut times = Vec::new();
                        // A limit reached before the first byte is an engine failure of this
                        // test, like one reached later.
                        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            match c.matcher() {
                                Ok(m) => replay(m, &tokens, &mut mask, &mut times),
                                Err(e) => Outcome::Failed(format!("matcher: {e}")),
                            }
                        }));
                        // An engine error or a panic is a wrong answer whatever the instance.
                        let (accepted, detail) = match result {
                            Ok(Outcome::Accepted) => (true, String::new()),
                            Ok(Outcome::Rejected(why)) => (false, why),
                            Ok(Outcome::Failed(why)) => (!valid, format!("engine error: {why}")),
                            Err(_) => (!valid, "panic".to_string()),
                        };
                        match (valid, accepted) {
                            (true, true) | (false, false) => {
                                pass += 1;
                                ("pass", String::new())
                            }
                            (false, true) => {
                                fp += 1;
                                ("false_positive", detail)
                            }
                            (true, false) => {
                                fneg += 1;
                                ("false_negative", detail)
                            }
                        }
                    }
                };
                if let Some(w) = per_test.as_mut() {
                    writeln!(
                        w,
                        "{}",
                        json!({"id": id, "outcome": outcome, "valid": valid, "detail": detail})
                    )?;
                }
            }
        }
    }
    if let Some(mut w) = per_test {
        w.flush()?;
    }
    eprintln!("tokenizer {} ({} files)", engine.name, files.len());
    println!(
        "{}",
        json!({"groups": groups, "tests": tests, "pass": pass, "compile_refused": refused,
               "false_positive": fp, "false_negative": fneg})
    );
    Ok(())
}
