//! Checks the outputs written by `scripts/corpus-e2e.py` with the `jsonschema` crate and prints
//! a summary: outputs complete and valid, cut at `max_tokens`, invalid, refused; how many the
//! budget closed and the loop guard touched; the median output length in tokens.
//!
//! `cargo run --release -p stencil-runtime --example validate_outputs -- OUT.jsonl [DATA_DIR]`

use serde_json::Value;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(file) = args.first() else {
        return Err("usage: validate_outputs OUT.jsonl [MASKBENCH_DIR]".into());
    };
    let data = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "../shared/data/maskbench".into());
    let (mut total, mut valid, mut cut, mut invalid, mut refused) = (0, 0, 0, 0, 0);
    let (mut by_budget, mut guarded) = (0, 0);
    let mut lengths = Vec::new();
    for line in std::fs::read_to_string(file)?.lines() {
        let row: Value = serde_json::from_str(line)?;
        total += 1;
        let rel = row["schema"].as_str().unwrap_or_default();
        let doc: Value = serde_json::from_slice(&std::fs::read(format!("{data}/{rel}"))?)?;
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(&doc["schema"])?;
        if row["exit"].as_i64() != Some(0) {
            refused += 1;
            println!("refused  {rel} {}: {}", row["run"], row["error"]);
            continue;
        }
        if let Some(n) = row["completion_tokens"].as_u64() {
            lengths.push(n);
        }
        by_budget += (row["closed_by_budget"] == Value::Bool(true)) as usize;
        guarded += (row["loop_guard_hits"].as_u64().unwrap_or(0) > 0) as usize;
        let output = row["output"].as_str().unwrap_or_default();
        if row["finish_reason"] == "length" {
            cut += 1;
            println!("cut      {rel} {}", row["run"]);
            continue;
        }
        match serde_json::from_str::<Value>(output) {
            Ok(v) if validator.is_valid(&v) => valid += 1,
            Ok(v) => {
                invalid += 1;
                let why: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
                println!("invalid  {rel} {}: {why:?}", row["run"]);
            }
            Err(e) => {
                invalid += 1;
                println!("not JSON {rel} {}: {e}", row["run"]);
            }
        }
    }
    lengths.sort_unstable();
    let median = lengths.get(lengths.len() / 2).copied().unwrap_or(0);
    println!(
        "outputs {total}: complete+valid {valid}, cut (length) {cut}, invalid {invalid}, refused {refused}; closed by budget {by_budget}, loop guard touched {guarded}; median completion tokens {median}"
    );
    Ok(())
}
