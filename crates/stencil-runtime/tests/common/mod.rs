//! Shared helpers for integration tests: the real default model, fetched by the user's script.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The default model, fetched with `scripts/fetch-model.sh` (the same script a user runs).
pub fn default_model() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let script = repo_root().join("scripts/fetch-model.sh");
        let out = Command::new("bash")
            .arg(&script)
            .output()
            .expect("run fetch-model.sh");
        assert!(
            out.status.success(),
            "scripts/fetch-model.sh failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

/// `../shared/data/<rel>` if this checkout has it; otherwise prints a notice (the caller skips).
pub fn shared_data(rel: &str) -> Option<PathBuf> {
    let p = repo_root().join("../shared/data").join(rel);
    if p.exists() {
        Some(p)
    } else {
        eprintln!(
            "NOTICE: {} not found (no ../shared/data in this clone); skipping this test",
            p.display()
        );
        None
    }
}

/// Largest elementwise difference between two logit vectors.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "logit vectors differ in length");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}
