//! Helpers shared by the mask tests.

/// The default model's tokenizer from ../shared/data, or `None` (with a notice) without it.
pub fn smollm2_tokenizer() -> Option<tokenizers::Tokenizer> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/tokenizers/smollm2-135m-instruct/tokenizer.json");
    if !path.exists() {
        eprintln!(
            "NOTICE: {} not found; skipping (needs ../shared/data)",
            path.display()
        );
        return None;
    }
    Some(tokenizers::Tokenizer::from_file(&path).expect("tokenizer"))
}
