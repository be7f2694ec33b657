//! The tokenizer built from GGUF metadata gives the model's real ids.

mod common;

use stencil_runtime::gguf::GgufFile;
use stencil_runtime::tokenizer::gguf::from_gguf_metadata;
use stencil_runtime::Tokenizer;

fn smollm() -> Tokenizer {
    let gguf = GgufFile::open(common::default_model()).unwrap();
    from_gguf_metadata(gguf.meta()).unwrap()
}

const SAMPLES: &[&str] = &[
    "Hello world!",
    "The year 2024 had 366 days; π ≈ 3.14159.",
    "你好，世界！这是一个测试。",
    "emoji: 🎉🚀 👩‍👩‍👧 ok",
    r#"{"name": "Zoë", "tags": ["a", "b"], "n": -12.5e3, "nested": {"x": null}}"#,
    "  leading spaces\n\n\tand tabs   \r\n trailing  ",
    "<|im_start|>user\nhi<|im_end|>\n",
    "don't won't I'll we've",
];

#[test]
fn pins_known_ids() {
    let tok = smollm();
    assert_eq!(
        tok.encode("Hello world!", true).unwrap(),
        vec![19556, 905, 17]
    );
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.bos_token(), Some("<|im_start|>"));
    assert_eq!(tok.eos_token(), Some("<|im_end|>"));
    assert!(tok.eos_ids().contains(&2));
    // Special-token text is a single id in markup, and spelled as text otherwise.
    let ids = tok.encode_markup("<|im_start|>user", false).unwrap();
    assert_eq!(ids[0], 1);
    let ids = tok.encode("<|im_start|>user", false).unwrap();
    assert!(ids.len() > 2 && !ids.contains(&1), "{ids:?}");
    // Digits are split one by one (smollm pre-tokenizer).
    let ids = tok.encode("12345", false).unwrap();
    assert_eq!(ids.len(), 5, "{ids:?}");
}

#[test]
fn round_trips_unicode_and_json() {
    let tok = smollm();
    for s in SAMPLES {
        let ids = tok.encode(s, false).unwrap();
        assert_eq!(&tok.decode(&ids, true), s, "ids {ids:?}");
    }
}

#[test]
fn matches_reference_tokenizer_json() {
    let Some(path) = common::shared_data("tokenizers/smollm2-135m-instruct/tokenizer.json") else {
        return;
    };
    let reference = tokenizers::Tokenizer::from_file(path).unwrap();
    let tok = smollm();
    for s in SAMPLES {
        let want = reference.encode(*s, false).unwrap().get_ids().to_vec();
        assert_eq!(tok.encode_markup(s, false).unwrap(), want, "text {s:?}");
    }
}
