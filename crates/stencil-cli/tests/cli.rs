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
