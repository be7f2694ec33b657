//! Building a tokenizer from GGUF `tokenizer.ggml.*` metadata.
//!
//! Two vocabulary families exist in GGUF files:
//! - `gpt2`: byte-level BPE with explicit merges. The pre-tokenizer (how text is split before
//!   merging) is named by `tokenizer.ggml.pre` and must match the model's training, or ids are
//!   wrong — e.g. SmolLM2 (`smollm`) splits every digit on its own.
//! - `llama`: SentencePiece BPE with scores and byte-fallback tokens (`<0x0A>`); merges are
//!   derived from the scores the way Hugging Face's converter does.
//!
//! We build this ourselves rather than using candle's GGUF tokenizer helper, which falls back
//! to a default for unknown `pre` values and produces wrong ids for SmolLM2.

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{Vocab as BpeVocab, BPE};
use tokenizers::normalizers::{Prepend, Replace};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{
    AddedToken, DecoderWrapper, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior,
};

use super::Tokenizer;
use crate::error::{Result, RuntimeError};
use crate::gguf::{value_as_f32, value_as_i64, Meta};

/// llama.cpp token types (`tokenizer.ggml.token_type`).
const TYPE_CONTROL: i64 = 3;
const TYPE_USER_DEFINED: i64 = 4;

/// Llama-3 (`llama-bpe`) split regex: letters, 1-3 digit groups, punctuation runs, newlines.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2 split regex: as Llama-3 but every digit on its own.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Names of end-of-turn control tokens that chat models emit in addition to their EOS.
const END_OF_TURN_NAMES: &[&str] = &[
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "<|eom_id|>",
    "<end_of_turn>",
    "<|end|>",
];

/// Builds the tokenizer described by a GGUF file's metadata.
pub fn from_gguf_metadata(meta: Meta<'_>) -> Result<Tokenizer> {
    let model = meta.str("tokenizer.ggml.model")?;
    let tokens = meta.str_array("tokenizer.ggml.tokens")?;
    let types: Vec<i64> = match meta.get("tokenizer.ggml.token_type") {
        Some(_) => meta
            .array("tokenizer.ggml.token_type")?
            .iter()
            .map(|v| value_as_i64(v).unwrap_or(1))
            .collect(),
        None => vec![1; tokens.len()],
    };
    let vocab: BpeVocab = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.to_string(), i as u32))
        .collect();

    let mut tok = match model {
        "gpt2" => byte_level_bpe(meta, &vocab)?,
        "llama" => sentencepiece_bpe(meta, &tokens, &types, vocab.clone())?,
        other => {
            return Err(RuntimeError::Tokenizer(format!(
                "unsupported tokenizer.ggml.model `{other}` (supported: gpt2, llama)"
            )))
        }
    };

    let mut specials = Vec::new();
    let mut user_defined = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        match types.get(i).copied() {
            Some(TYPE_CONTROL) => specials.push(AddedToken::from(t.to_string(), true)),
            Some(TYPE_USER_DEFINED) => user_defined.push(AddedToken::from(t.to_string(), false)),
            _ => {}
        }
    }
    tok.add_special_tokens(&specials);
    tok.add_tokens(&user_defined);

    let id = |key: &str| meta.opt_usize(key).map(|n| n as u32);
    let bos = id("tokenizer.ggml.bos_token_id");
    let eos = id("tokenizer.ggml.eos_token_id");
    let mut eos_ids: Vec<u32> = [
        eos,
        id("tokenizer.ggml.eot_token_id"),
        id("tokenizer.ggml.eom_token_id"),
    ]
    .into_iter()
    .flatten()
    .collect();
    for name in END_OF_TURN_NAMES {
        if let Some(&i) = vocab.get(*name) {
            if types.get(i as usize) == Some(&TYPE_CONTROL) && !eos_ids.contains(&i) {
                eos_ids.push(i);
            }
        }
    }
    let add_bos = meta
        .opt_bool("tokenizer.ggml.add_bos_token")
        .unwrap_or(model == "llama");
    Tokenizer::from_parts(tok, bos, eos, eos_ids, add_bos)
}

fn tok_err(e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Tokenizer(e.to_string())
}

fn byte_level_bpe(meta: Meta<'_>, vocab: &BpeVocab) -> Result<tokenizers::Tokenizer> {
    let merges = meta
        .str_array("tokenizer.ggml.merges")?
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| tok_err(format!("tokenizer.ggml.merges[{i}] = {m:?} has no space")))
        })
        .collect::<Result<Vec<_>>>()?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab.clone(), merges)
        .build()
        .map_err(tok_err)?;
    let mut tok = tokenizers::Tokenizer::new(bpe);
    let pre = meta.opt_str("tokenizer.ggml.pre").unwrap_or("default");
    tok.with_pre_tokenizer(Some(byte_level_pre_tokenizer(pre)?));
    tok.with_decoder(Some(ByteLevelDecoder::new(false, true, false)));
    Ok(tok)
}

/// The pre-tokenizer for a `tokenizer.ggml.pre` name.
fn byte_level_pre_tokenizer(pre: &str) -> Result<PreTokenizerWrapper> {
    let split = |re: &str| -> Result<PreTokenizerWrapper> {
        let split = Split::new(
            SplitPattern::Regex(re.to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(tok_err)?;
        Ok(PreSequence::new(vec![
            split.into(),
            ByteLevel::new(false, true, false).into(),
        ])
        .into())
    };
    match pre {
        // GPT-2 regex after splitting every digit on its own.
        "smollm" | "starcoder" | "refact" => Ok(PreSequence::new(vec![
            Digits::new(true).into(),
            ByteLevel::new(false, true, true).into(),
        ])
        .into()),
        "llama-bpe" | "llama3" | "smaug-bpe" => split(LLAMA3_SPLIT),
        "qwen2" | "deepseek-r1-qwen" => split(QWEN2_SPLIT),
        "default" | "gpt2" | "gpt-2" => Ok(ByteLevel::new(false, true, true).into()),
        other => Err(tok_err(format!(
            "unsupported tokenizer.ggml.pre `{other}` (supported: smollm, starcoder, llama-bpe, qwen2, default/gpt2); \
             guessing would silently produce wrong token ids"
        ))),
    }
}

/// SentencePiece-style BPE: merges derived from piece scores, byte fallback, `▁` for spaces.
fn sentencepiece_bpe(
    meta: Meta<'_>,
    tokens: &[&str],
    types: &[i64],
    vocab: BpeVocab,
) -> Result<tokenizers::Tokenizer> {
    let scores: Vec<f32> = match meta.get("tokenizer.ggml.scores") {
        Some(_) => meta
            .array("tokenizer.ggml.scores")?
            .iter()
            .map(|v| value_as_f32(v).unwrap_or(0.0))
            .collect(),
        None => (0..tokens.len()).map(|i| -(i as f32)).collect(),
    };
    // A merge (a, b) exists when a, b and a+b are all pieces; earlier merges are those whose
    // result scores higher, as in Hugging Face's SentencePiece converter.
    let mut merges: Vec<(f32, u32, String, String)> = Vec::new();
    for (id, piece) in tokens.iter().enumerate() {
        if types.get(id).is_some_and(|&t| t != 1) {
            continue;
        }
        for (split, _) in piece.char_indices().skip(1) {
            let (a, b) = piece.split_at(split);
            if vocab.contains_key(a) && vocab.contains_key(b) {
                merges.push((
                    scores.get(id).copied().unwrap_or(0.0),
                    id as u32,
                    a.into(),
                    b.into(),
                ));
            }
        }
    }
    merges.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
    let merges = merges.into_iter().map(|(_, _, a, b)| (a, b)).collect();
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(unk) = meta.opt_usize("tokenizer.ggml.unknown_token_id") {
        if let Some(t) = tokens.get(unk) {
            builder = builder.unk_token(t.to_string());
        }
    }
    let bpe = builder.build().map_err(tok_err)?;
    let mut tok = tokenizers::Tokenizer::new(bpe);
    let normalizer: NormalizerWrapper = tokenizers::normalizers::Sequence::new(vec![
        Prepend::new("\u{2581}".into()).into(),
        Replace::new(" ", "\u{2581}").map_err(tok_err)?.into(),
    ])
    .into();
    tok.with_normalizer(Some(normalizer));
    let decoder: DecoderWrapper = DecoderSequence::new(vec![
        tokenizers::decoders::DecoderWrapper::Replace(
            Replace::new("\u{2581}", " ").map_err(tok_err)?,
        ),
        ByteFallback::new().into(),
        Fuse::new().into(),
        Strip::new(' ', 1, 0).into(),
    ])
    .into();
    tok.with_decoder(Some(decoder));
    Ok(tok)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use candle_core::quantized::gguf_file::{Content, Value, VersionedMagic};

    use super::*;

    fn content(entries: Vec<(&str, Value)>) -> Content {
        Content {
            magic: VersionedMagic::GgufV3,
            metadata: entries
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            tensor_infos: HashMap::new(),
            tensor_data_offset: 0,
        }
    }

    fn strings(v: &[&str]) -> Value {
        Value::Array(v.iter().map(|s| Value::String(s.to_string())).collect())
    }

    /// A SentencePiece vocabulary: merges come from scores, unknown bytes fall back to
    /// `<0xNN>` tokens, spaces are `▁`, BOS is added.
    #[test]
    fn sentencepiece_vocab_from_scores() {
        let mut pieces = vec!["<unk>", "<s>", "</s>"];
        let bytes: Vec<String> = (0..=255u8).map(|b| format!("<0x{b:02X}>")).collect();
        pieces.extend(bytes.iter().map(String::as_str));
        let words = [
            "▁", "h", "e", "l", "o", "▁h", "el", "ell", "▁hell", "▁hello", "lo",
        ];
        pieces.extend(words);
        let n = pieces.len();
        let mut types = vec![Value::I32(2), Value::I32(3), Value::I32(3)];
        types.extend((0..256).map(|_| Value::I32(6)));
        types.extend(words.iter().map(|_| Value::I32(1)));
        // Longer pieces score higher, so they merge first.
        let scores: Vec<Value> = pieces
            .iter()
            .map(|p| Value::F32(p.chars().count() as f32))
            .collect();
        let c = content(vec![
            ("tokenizer.ggml.model", Value::String("llama".into())),
            ("tokenizer.ggml.tokens", strings(&pieces)),
            ("tokenizer.ggml.scores", Value::Array(scores)),
            ("tokenizer.ggml.token_type", Value::Array(types)),
            ("tokenizer.ggml.bos_token_id", Value::U32(1)),
            ("tokenizer.ggml.eos_token_id", Value::U32(2)),
            ("tokenizer.ggml.unknown_token_id", Value::U32(0)),
        ]);
        let tok = from_gguf_metadata(Meta(&c)).unwrap();
        assert_eq!(tok.vocab_size(), n);
        let ids = tok.encode("hello\n", true).unwrap();
        let id = |p: &str| pieces.iter().position(|x| *x == p).unwrap() as u32;
        assert_eq!(ids, vec![1, id("▁hello"), id("<0x0A>")]);
        // Token bytes: `▁` is a space, byte tokens are raw bytes.
        assert_eq!(tok.decode(&ids, false), " hello\n");
        assert_eq!(tok.eos_ids(), &[2]);
        // Characters outside the vocabulary go through byte fallback.
        let ids = tok.encode("hé", false).unwrap();
        assert_eq!(tok.decode(&ids, false), " hé");
    }

    #[test]
    fn unknown_pre_tokenizer_is_an_error_not_a_guess() {
        let c = content(vec![
            ("tokenizer.ggml.model", Value::String("gpt2".into())),
            ("tokenizer.ggml.tokens", strings(&["a", "b", "ab"])),
            ("tokenizer.ggml.merges", strings(&["a b"])),
            ("tokenizer.ggml.pre", Value::String("mystery-bpe".into())),
        ]);
        let err = from_gguf_metadata(Meta(&c)).unwrap_err().to_string();
        assert!(err.contains("mystery-bpe"), "{err}");
        let c = content(vec![("tokenizer.ggml.model", Value::String("rwkv".into()))]);
        assert!(from_gguf_metadata(Meta(&c)).is_err());
    }
}
