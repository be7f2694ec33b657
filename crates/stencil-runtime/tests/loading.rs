//! Loading paths: safetensors conversion round trip, hub cache resolution, and bad inputs.

mod common;

use std::fs;
use std::path::Path;

use candle_core::quantized::gguf_file;
use candle_core::DType;
use stencil_runtime::convert::convert_gguf_to_safetensors;
use stencil_runtime::generate::generate;
use stencil_runtime::hub::ModelFiles;
use stencil_runtime::loader::{load, resolve, LoadOptions};
use stencil_runtime::models::quantized_llama::WeightFormat;
use stencil_runtime::RuntimeError;
use stencil_types::GenerateParams;

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
    // The prompt is chat markup written by the test: its control tokens are meant.
    let ids = m.tokenizer.encode_markup(prompt, true).unwrap();
    let params = GenerateParams {
        max_tokens: n,
        ..Default::default()
    };
    generate(m.model.as_ref(), &m.tokenizer, &ids, &params, None, |_| {})
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

#[test]
fn tiny_qwen2_gguf_loads_and_caches_exactly() {
    tiny_model_loads_and_caches_exactly("qwen2");
}

#[test]
fn tiny_llama_gguf_loads_and_caches_exactly() {
    tiny_model_loads_and_caches_exactly("llama");
}

/// A tiny random-weight GGUF (f32; Q/K/V biases, GQA) loads and decodes; a prompt run in one
/// batch and in chunks against the KV cache gives the same logits.
fn tiny_model_loads_and_caches_exactly(arch: &str) {
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};
    let dev = Device::Cpu;
    let (hidden, heads, kv, ffn, vocab, layers) =
        (64usize, 4usize, 2usize, 128usize, 260usize, 2usize);
    let hd = hidden / heads;
    // Seeded weights (uniform in +-0.35, standard deviation 0.2): the same model on every run.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut rand = |shape: &[usize]| {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.7
            })
            .collect();
        let t = Tensor::from_vec(values, shape, &dev).unwrap();
        QTensor::quantize(&t, GgmlDType::F32).unwrap()
    };
    let ones = |n: usize| {
        QTensor::quantize(&Tensor::ones(n, DType::F32, &dev).unwrap(), GgmlDType::F32).unwrap()
    };
    let mut tensors: Vec<(String, QTensor)> = vec![
        ("token_embd.weight".into(), rand(&[vocab, hidden])),
        ("output_norm.weight".into(), ones(hidden)),
    ];
    for i in 0..layers {
        let p = format!("blk.{i}");
        tensors.push((format!("{p}.attn_norm.weight"), ones(hidden)));
        tensors.push((format!("{p}.ffn_norm.weight"), ones(hidden)));
        tensors.push((format!("{p}.attn_q.weight"), rand(&[heads * hd, hidden])));
        tensors.push((format!("{p}.attn_q.bias"), rand(&[heads * hd])));
        tensors.push((format!("{p}.attn_k.weight"), rand(&[kv * hd, hidden])));
        tensors.push((format!("{p}.attn_k.bias"), rand(&[kv * hd])));
        tensors.push((format!("{p}.attn_v.weight"), rand(&[kv * hd, hidden])));
        tensors.push((format!("{p}.attn_v.bias"), rand(&[kv * hd])));
        tensors.push((
            format!("{p}.attn_output.weight"),
            rand(&[hidden, heads * hd]),
        ));
        tensors.push((format!("{p}.ffn_gate.weight"), rand(&[ffn, hidden])));
        tensors.push((format!("{p}.ffn_up.weight"), rand(&[ffn, hidden])));
        tensors.push((format!("{p}.ffn_down.weight"), rand(&[hidden, ffn])));
    }
    // Byte-level vocabulary: the 256 byte symbols, then specials.
    let mut tokens: Vec<String> = (0..=255u8)
        .map(|b| stencil_vocab::byte_to_char(b).to_string())
        .collect();
    tokens.extend(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "ab"].map(String::from));
    let mut types = vec![1i32; 256];
    types.extend([3, 3, 3, 1]);
    use gguf_file::Value as V;
    let s = |x: &str| V::String(x.into());
    let u = V::U32;
    let md: Vec<(String, V)> = vec![
        ("general.architecture".to_string(), s(arch)),
        (format!("{arch}.block_count"), u(layers as u32)),
        (format!("{arch}.embedding_length"), u(hidden as u32)),
        (format!("{arch}.feed_forward_length"), u(ffn as u32)),
        (format!("{arch}.attention.head_count"), u(heads as u32)),
        (format!("{arch}.attention.head_count_kv"), u(kv as u32)),
        (format!("{arch}.context_length"), u(512)),
        (format!("{arch}.rope.freq_base"), V::F32(1_000_000.0)),
        (
            format!("{arch}.attention.layer_norm_rms_epsilon"),
            V::F32(1e-6),
        ),
        ("tokenizer.ggml.model".to_string(), s("gpt2")),
        ("tokenizer.ggml.pre".to_string(), s("qwen2")),
        (
            "tokenizer.ggml.tokens".to_string(),
            V::Array(tokens.iter().map(|t| s(t)).collect()),
        ),
        (
            "tokenizer.ggml.token_type".to_string(),
            V::Array(types.into_iter().map(V::I32).collect()),
        ),
        (
            "tokenizer.ggml.merges".to_string(),
            V::Array(vec![s("a b")]),
        ),
        ("tokenizer.ggml.eos_token_id".to_string(), u(258)),
        ("tokenizer.ggml.bos_token_id".to_string(), u(257)),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny-qwen2.gguf");
    let mut f = fs::File::create(&path).unwrap();
    let md_refs: Vec<(&str, &V)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    gguf_file::write(&mut f, &md_refs, &t_refs).unwrap();
    drop(f);

    let m = load(&ModelFiles::Gguf(path), &LoadOptions::default(), |_, _| {}).unwrap();
    assert!(
        m.model.describe().starts_with(arch),
        "{}",
        m.model.describe()
    );
    assert_eq!(
        m.tokenizer.encode("ab c", false).unwrap(),
        vec![259, 32, 99]
    );
    assert!(m.tokenizer.eos_ids().contains(&258));
    let mut s1 = m.model.new_session().unwrap();
    let a = s1
        .forward(&[97, 98, 99, 100])
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    assert_eq!(a.len(), vocab);
    assert!(a.iter().all(|x| x.is_finite()));
    let mut s2 = m.model.new_session().unwrap();
    s2.forward(&[97, 98]).unwrap();
    s2.forward(&[99]).unwrap();
    let b = s2.forward(&[100]).unwrap().to_vec1::<f32>().unwrap();
    // Keys and values are cached in f16. The matmuls sum in an order that depends on how many
    // rows they get, so a last-bit difference can round a cached key or value to the
    // neighbouring f16, which moves the logits by up to ~2^-11 of their size; a caching bug
    // (a row lost, misplaced or attended twice) moves them by their whole size.
    let scale = a.iter().fold(0f32, |m, x| m.max(x.abs()));
    let diff = common::max_abs_diff(&a, &b);
    assert!(
        diff <= scale / 1024.0,
        "cached vs batched diff {diff} (logits up to {scale})"
    );
}
