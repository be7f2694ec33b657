//! Loading paths: safetensors conversion round trip, hub cache resolution, and bad inputs.

mod common;

use std::fs;
use std::path::Path;

use candle_core::quantized::gguf_file;
use candle_core::DType;
use stencil_runtime::convert::convert_gguf_to_safetensors;
use stencil_runtime::generate::{generate, GenerateParams};
use stencil_runtime::hub::ModelFiles;
use stencil_runtime::loader::{load, resolve, LoadOptions};
use stencil_runtime::models::quantized_llama::WeightFormat;
use stencil_runtime::RuntimeError;

fn greedy(files: &ModelFiles, format: WeightFormat, prompt: &str, n: usize) -> Vec<u32> {
    let m = load(
        files,
        &LoadOptions {
            weight_format: format,
            ..Default::default()
        },
        |_, _| {},
    )
    .unwrap();
    let ids = m.tokenizer.encode(prompt, true).unwrap();
    let params = GenerateParams {
        max_tokens: n,
        ..Default::default()
    };
    generate(m.model.as_ref(), &m.tokenizer, &ids, &params, |_| {})
        .unwrap()
        .tokens
}

#[test]
fn safetensors_conversion_round_trip_matches_gguf_greedy_tokens() {
    let gguf = ModelFiles::Gguf(common::default_model().to_path_buf());
    let dir = tempfile::tempdir().unwrap();
    convert_gguf_to_safetensors(common::default_model(), dir.path(), DType::F32).unwrap();
    for f in [
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "model.safetensors",
    ] {
        assert!(dir.path().join(f).is_file(), "{f} missing");
    }
    let files = resolve(Some(dir.path().to_str().unwrap())).unwrap();
    assert_eq!(files, ModelFiles::Safetensors(dir.path().to_path_buf()));
    let st = load(&files, &LoadOptions::default(), |_, _| {}).unwrap();
    // Same tokenizer, template and EOS ids as the GGUF.
    assert_eq!(
        st.tokenizer.encode("Hello world!", true).unwrap(),
        vec![19556, 905, 17]
    );
    assert!(st.template_source.as_deref().unwrap().contains("im_start"));
    assert!(st.tokenizer.eos_ids().contains(&2));
    drop(st);

    let prompt =
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
    let n = 8;
    // Exact weights as stored (dequantized to f32 in the safetensors copy).
    let want = greedy(&gguf, WeightFormat::AsStored, prompt, n);
    let got = greedy(&files, WeightFormat::Auto, prompt, n);
    assert_eq!(got, want, "safetensors vs GGUF greedy tokens");
}

#[test]
fn hub_cache_resolution_offline() {
    let hub = tempfile::tempdir().unwrap();
    let repo = hub.path().join("models--stencil-test--smollm2");
    let snap = repo.join("snapshots/0123abcd");
    fs::create_dir_all(&snap).unwrap();
    fs::create_dir_all(repo.join("refs")).unwrap();
    fs::write(repo.join("refs/main"), "0123abcd").unwrap();
    let model_file = snap.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    std::os::unix::fs::symlink(common::default_model(), &model_file).unwrap();

    // Safe: this test binary sets these variables in this one test only.
    std::env::set_var("HF_HUB_CACHE", hub.path());
    std::env::set_var("HF_HUB_OFFLINE", "1");

    let files = resolve(Some("stencil-test/smollm2")).unwrap();
    assert_eq!(files, ModelFiles::Gguf(model_file.clone()));
    let named = resolve(Some("stencil-test/smollm2:SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    assert_eq!(named, ModelFiles::Gguf(model_file));
    let m = load(&files, &LoadOptions::default(), |_, _| {}).unwrap();
    assert_eq!(m.tokenizer.vocab_size(), 49152);

    let err = resolve(Some("stencil-test/absent"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("HF_HUB_OFFLINE") && err.contains("stencil-test/absent"),
        "{err}"
    );
    let err = resolve(Some("stencil-test/smollm2:other.gguf"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("HF_HUB_OFFLINE"), "{err}");
}

fn load_err(path: &Path) -> RuntimeError {
    let files = resolve(Some(path.to_str().unwrap()))
        .and_then(|f| load(&f, &LoadOptions::default(), |_, _| {}));
    match files {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e,
    }
}

#[test]
fn bad_model_files_give_clear_errors() {
    let dir = tempfile::tempdir().unwrap();

    let err = load_err(&dir.path().join("nope.gguf"));
    assert!(err.to_string().contains("no such file"), "{err}");

    let garbage = dir.path().join("garbage.gguf");
    fs::write(&garbage, b"this is not a gguf file at all").unwrap();
    let err = load_err(&garbage);
    assert!(matches!(err, RuntimeError::InvalidGguf { .. }), "{err}");

    let truncated = dir.path().join("truncated.gguf");
    let bytes = fs::read(common::default_model()).unwrap();
    fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let err = load_err(&truncated);
    assert!(err.to_string().contains("truncated"), "{err}");

    // A well-formed GGUF of an architecture we do not implement.
    let other = dir.path().join("mamba.gguf");
    let t = candle_core::Tensor::zeros((4, 4), DType::F32, &candle_core::Device::Cpu).unwrap();
    let q = candle_core::quantized::QTensor::quantize(&t, candle_core::quantized::GgmlDType::F32)
        .unwrap();
    let arch = gguf_file::Value::String("mamba".into());
    let mut f = fs::File::create(&other).unwrap();
    gguf_file::write(&mut f, &[("general.architecture", &arch)], &[("w", &q)]).unwrap();
    drop(f);
    let err = load_err(&other);
    assert!(
        matches!(&err, RuntimeError::UnsupportedArchitecture { arch, .. } if arch == "mamba"),
        "{err}"
    );

    let empty = dir.path().join("empty-dir");
    fs::create_dir(&empty).unwrap();
    let err = load_err(&empty);
    assert!(err.to_string().contains("no .gguf file"), "{err}");
}

#[test]
fn bad_chat_template_in_a_checkpoint_is_a_template_error() {
    let dir = tempfile::tempdir().unwrap();
    convert_gguf_to_safetensors(common::default_model(), dir.path(), DType::F16).unwrap();
    let cfg = dir.path().join("tokenizer_config.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&cfg).unwrap()).unwrap();
    v["chat_template"] = "{% for m in messages %}{{ m.content }".into();
    fs::write(&cfg, v.to_string()).unwrap();
    let err = load_err(dir.path());
    assert!(matches!(err, RuntimeError::Template(_)), "{err}");
    assert!(err.to_string().contains("does not compile"), "{err}");
}
