//! [`Vocab`]: every token id as the bytes it decodes to.

use crate::byte_level::char_to_byte;

/// How a tokenizer writes bytes inside its token strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VocabStyle {
    /// GPT-2 byte-level BPE: every byte is one printable code point (`Ġ` = space).
    ByteLevel,
    /// SentencePiece: `▁` is a space and `<0xAB>` tokens are raw bytes (byte fallback).
    SentencePiece,
}

/// What role a token plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// Ordinary text.
    Normal,
    /// Control/special token (`<|im_end|>`, `<s>`): never part of constrained text unless named.
    Special,
}

/// Errors building a [`Vocab`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VocabError {
    #[error("token {id} ({token:?}) contains {ch:?}, which is not a byte-level BPE character")]
    NotByteLevel { id: u32, token: String, ch: char },
    #[error("the tokenizer has no token with id {id} (vocabulary of {size} ids has a gap)")]
    MissingId { id: u32, size: usize },
    #[error("cannot tell how the tokenizer encodes bytes: {0}")]
    UnknownStyle(String),
}

/// Token id -> bytes, with token kinds and the end-of-sequence ids.
#[derive(Debug, Clone)]
pub struct Vocab {
    bytes: Vec<Vec<u8>>,
    kinds: Vec<TokenKind>,
    eos_ids: Vec<u32>,
    /// The ids of the control tokens (few, so looked up by scanning them).
    specials: Vec<u32>,
}

impl Vocab {
    fn new(bytes: Vec<Vec<u8>>, kinds: Vec<TokenKind>, eos_ids: Vec<u32>) -> Self {
        let specials = (0..kinds.len() as u32)
            .filter(|&id| kinds[id as usize] == TokenKind::Special)
            .collect();
        Self {
            bytes,
            kinds,
            eos_ids,
            specials,
        }
    }

    /// Builds a vocabulary from token strings as the tokenizer stores them.
    ///
    /// `tokens[id]` is the stored string, `special[id]` marks control tokens (whose bytes are
    /// their literal text). Gaps (`None`) are an error: every id the model can emit needs bytes.
    pub fn from_token_strings(
        tokens: &[Option<String>],
        special: &[bool],
        style: VocabStyle,
        eos_ids: Vec<u32>,
    ) -> Result<Self, VocabError> {
        let mut bytes = Vec::with_capacity(tokens.len());
        let mut kinds = Vec::with_capacity(tokens.len());
        for (id, tok) in tokens.iter().enumerate() {
            let id32 = id as u32;
            let tok = tok.as_deref().ok_or(VocabError::MissingId {
                id: id32,
                size: tokens.len(),
            })?;
            if special.get(id).copied().unwrap_or(false) {
                bytes.push(tok.as_bytes().to_vec());
                kinds.push(TokenKind::Special);
                continue;
            }
            kinds.push(TokenKind::Normal);
            bytes.push(match style {
                VocabStyle::ByteLevel => decode_byte_level(id32, tok)?,
                VocabStyle::SentencePiece => decode_sentencepiece(tok),
            });
        }
        Ok(Self::new(bytes, kinds, eos_ids))
    }

    /// Builds a vocabulary from the bytes of every token as the model's runtime spells them
    /// (llama.cpp's `token_to_piece`, say); `special[id]` marks control tokens.
    pub fn from_token_bytes(tokens: Vec<Vec<u8>>, special: &[bool], eos_ids: Vec<u32>) -> Self {
        let kinds = (0..tokens.len())
            .map(|id| {
                if special.get(id).copied().unwrap_or(false) {
                    TokenKind::Special
                } else {
                    TokenKind::Normal
                }
            })
            .collect();
        Self::new(tokens, kinds, eos_ids)
    }

    /// Builds a vocabulary from a `tokenizers` tokenizer (feature `tokenizers`), detecting the byte encoding from its
    /// decoder (byte-level) or model (byte-fallback BPE / SentencePiece metaspace).
    #[cfg(feature = "tokenizers")]
    pub fn from_tokenizer(
        tok: &tokenizers::Tokenizer,
        eos_ids: Vec<u32>,
    ) -> Result<Self, VocabError> {
        let style = detect_style(tok)?;
        let size = tok.get_vocab_size(true);
        let mut tokens = vec![None; size];
        for (s, id) in tok.get_vocab(true) {
            if let Some(slot) = tokens.get_mut(id as usize) {
                *slot = Some(s);
            }
        }
        let mut special = vec![false; size];
        for (id, added) in tok.get_added_tokens_decoder() {
            if added.special {
                if let Some(slot) = special.get_mut(id as usize) {
                    *slot = true;
                }
            }
        }
        Self::from_token_strings(&tokens, &special, style, eos_ids)
    }

    /// Number of token ids.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// True for an empty vocabulary.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The bytes token `id` decodes to (empty for an unknown id).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.bytes.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// The kind of token `id` (`Special` for an unknown id, so it is never treated as text).
    pub fn kind(&self, id: u32) -> TokenKind {
        self.kinds
            .get(id as usize)
            .copied()
            .unwrap_or(TokenKind::Special)
    }

    /// True if `id` is an end-of-sequence token.
    pub fn is_eos(&self, id: u32) -> bool {
        self.eos_ids.contains(&id)
    }

    /// The control token whose text is `text` (`</think>` in models that reserve one), if the
    /// vocabulary has one that does not end the sequence.
    pub fn control_token(&self, text: &str) -> Option<u32> {
        self.specials
            .iter()
            .copied()
            .find(|&id| !self.is_eos(id) && self.token_bytes(id) == text.as_bytes())
    }

    /// All end-of-sequence ids (chat models often have several).
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }
}

#[cfg(feature = "tokenizers")]
fn detect_style(tok: &tokenizers::Tokenizer) -> Result<VocabStyle, VocabError> {
    // The serialized form is the stable, public view of which components are in use.
    let json = tok
        .to_string(false)
        .map_err(|e| VocabError::UnknownStyle(e.to_string()))?;
    let v: serde_json::Value =
        serde_json::from_str(&json).map_err(|e| VocabError::UnknownStyle(e.to_string()))?;
    let mentions = |part: &str, ty: &str| v[part].to_string().contains(&format!("\"{ty}\""));
    if mentions("decoder", "ByteLevel") || mentions("pre_tokenizer", "ByteLevel") {
        Ok(VocabStyle::ByteLevel)
    } else if mentions("decoder", "Metaspace")
        || mentions("decoder", "ByteFallback")
        || mentions("pre_tokenizer", "Metaspace")
        || v["model"]["byte_fallback"] == serde_json::Value::Bool(true)
    {
        Ok(VocabStyle::SentencePiece)
    } else {
        Err(VocabError::UnknownStyle(
            "neither a ByteLevel nor a SentencePiece (Metaspace/ByteFallback) decoder".into(),
        ))
    }
}

fn decode_byte_level(id: u32, tok: &str) -> Result<Vec<u8>, VocabError> {
    tok.chars()
        .map(|ch| {
            char_to_byte(ch).ok_or_else(|| VocabError::NotByteLevel {
                id,
                token: tok.to_string(),
                ch,
            })
        })
        .collect()
}

fn decode_sentencepiece(tok: &str) -> Vec<u8> {
    if let Some(hex) = tok.strip_prefix("<0x").and_then(|t| t.strip_suffix('>')) {
        if hex.len() == 2 {
            if let Ok(b) = u8::from_str_radix(hex, 16) {
                return vec![b];
            }
        }
    }
    tok.replace('\u{2581}', " ").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_tokens_decode_to_bytes() {
        let toks = vec![
            Some("<|endoftext|>".to_string()),
            Some("Ġhello".to_string()),
            Some("Ċ".to_string()),
            Some("Ã¤".to_string()), // "ä" as two byte-level chars
        ];
        let v = Vocab::from_token_strings(
            &toks,
            &[true, false, false, false],
            VocabStyle::ByteLevel,
            vec![0],
        )
        .unwrap();
        assert_eq!(v.token_bytes(1), b" hello");
        assert_eq!(v.token_bytes(2), b"\n");
        assert_eq!(v.token_bytes(3), "ä".as_bytes());
        assert_eq!(v.kind(0), TokenKind::Special);
        assert_eq!(v.token_bytes(0), b"<|endoftext|>");
        assert!(v.is_eos(0) && !v.is_eos(1));
        assert_eq!(v.kind(99), TokenKind::Special);
    }

    #[test]
    fn sentencepiece_tokens_decode_spaces_and_bytes() {
        let toks = vec![
            Some("▁the".into()),
            Some("<0x0A>".into()),
            Some("<0xE4>".into()),
        ];
        let v = Vocab::from_token_strings(&toks, &[false; 3], VocabStyle::SentencePiece, vec![])
            .unwrap();
        assert_eq!(v.token_bytes(0), b" the");
        assert_eq!(v.token_bytes(1), b"\n");
        assert_eq!(v.token_bytes(2), &[0xE4]);
    }

    #[test]
    fn gaps_and_foreign_chars_are_errors() {
        let err = Vocab::from_token_strings(&[None], &[false], VocabStyle::ByteLevel, vec![])
            .unwrap_err();
        assert!(matches!(err, VocabError::MissingId { id: 0, .. }));
        let err =
            Vocab::from_token_strings(&[Some("€".into())], &[false], VocabStyle::ByteLevel, vec![])
                .unwrap_err();
        assert!(err.to_string().contains("not a byte-level BPE character"));
    }
}
