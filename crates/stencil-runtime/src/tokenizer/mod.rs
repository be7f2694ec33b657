//! Tokenizers built from a model's own files.
//!
//! [`Tokenizer`] wraps a `tokenizers::Tokenizer` together with what generation needs beside it:
//! the byte form of every token ([`stencil_vocab::Vocab`]), BOS handling and *all* end-of-sequence
//! ids. It is built either from GGUF metadata (`tokenizer.ggml.*`, see [`gguf`]) or from a
//! `tokenizer.json` (+ optional `tokenizer_config.json`).
//!
//! Text is tokenized as text: [`Tokenizer::encode`] never turns `<|im_end|>` written in a string
//! into the control token. Control tokens come only from markup: a chat template's output
//! ([`Tokenizer::encode_rendered`], see [`special`]) or a raw prompt whose caller asked for them
//! ([`Tokenizer::encode_markup`]).

pub mod gguf;
pub mod special;

use std::path::Path;
use std::sync::Arc;

use stencil_vocab::Vocab;

use crate::error::{Result, RuntimeError};
use special::{Piece, SpecialText};

/// A model tokenizer with byte-exact token forms and special-token facts.
#[derive(Clone)]
pub struct Tokenizer {
    /// Recognizes special-token text (for markup).
    inner: Arc<tokenizers::Tokenizer>,
    /// The same tokenizer with special-token text encoded as text.
    text_only: Arc<tokenizers::Tokenizer>,
    special: Arc<SpecialText>,
    vocab: Arc<Vocab>,
    bos: Option<(u32, String)>,
    eos: Option<(u32, String)>,
    add_bos: bool,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("eos_ids", &self.vocab.eos_ids())
            .finish()
    }
}

impl Tokenizer {
    /// Assembles a tokenizer from its parts; `eos_ids` must include the primary EOS.
    pub(crate) fn from_parts(
        inner: tokenizers::Tokenizer,
        bos_id: Option<u32>,
        eos_id: Option<u32>,
        mut eos_ids: Vec<u32>,
        add_bos: bool,
    ) -> Result<Self> {
        if let Some(e) = eos_id {
            if !eos_ids.contains(&e) {
                eos_ids.insert(0, e);
            }
        }
        let vocab = Vocab::from_tokenizer(&inner, eos_ids)
            .map_err(|e| RuntimeError::Tokenizer(e.to_string()))?;
        let name = |id: u32| inner.id_to_token(id).map(|s| (id, s));
        let special = SpecialText::new(
            inner
                .get_added_tokens_decoder()
                .into_values()
                .filter(|t| t.special)
                .map(|t| t.content),
        );
        let mut text_only = inner.clone();
        text_only.set_encode_special_tokens(true);
        Ok(Self {
            bos: bos_id.and_then(name),
            eos: eos_id.and_then(name),
            inner: Arc::new(inner),
            text_only: Arc::new(text_only),
            special: Arc::new(special),
            vocab: Arc::new(vocab),
            add_bos,
        })
    }

    /// Loads `tokenizer.json`, reading BOS/EOS from `tokenizer_config.json` (and
    /// `generation_config.json` for extra EOS ids) in the same directory when present.
    pub fn from_hf_files(tokenizer_json: &Path) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_file(tokenizer_json)
            .map_err(|e| RuntimeError::Tokenizer(format!("{}: {e}", tokenizer_json.display())))?;
        let ids = stencil_vocab::SpecialIds::read(tokenizer_json, &inner)
            .map_err(RuntimeError::Tokenizer)?;
        Self::from_parts(inner, ids.bos, ids.eos, ids.eos_ids, ids.add_bos)
    }

    /// Encodes text as text: special-token strings in it (`<|im_end|>`) are spelled with
    /// ordinary tokens, never the control token. Adds BOS first when the model asks for it and
    /// `add_bos` is set.
    pub fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        let ids = Self::ids(&self.text_only, text)?;
        Ok(self.with_bos(ids, add_bos))
    }

    /// Encodes markup: special-token strings become control tokens. Only for text the caller
    /// vouches for (a raw prompt with special tokens explicitly allowed).
    pub fn encode_markup(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        let ids = Self::ids(&self.inner, text)?;
        Ok(self.with_bos(ids, add_bos))
    }

    /// Encodes a raw prompt (no chat template), BOS first when the model wants one: as text,
    /// or as markup when the caller explicitly allows control tokens in it.
    pub fn encode_raw_prompt(&self, text: &str, special_tokens: bool) -> Result<Vec<u32>> {
        if special_tokens {
            self.encode_markup(text, true)
        } else {
            self.encode(text, true)
        }
    }

    /// Encodes a chat template's output: its markup with control tokens, the caller text that
    /// [`SpecialText::defuse`] replaced with placeholders as text.
    pub fn encode_rendered(&self, rendered: &str, add_bos: bool) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        for piece in self.special.pieces(rendered) {
            match piece {
                Piece::Markup(s) => ids.extend(Self::ids(&self.inner, s)?),
                Piece::Text(s) => ids.extend(Self::ids(&self.text_only, s)?),
            }
        }
        Ok(self.with_bos(ids, add_bos))
    }

    /// The special-token strings, for defusing caller text before a template sees it.
    pub fn special_text(&self) -> &Arc<SpecialText> {
        &self.special
    }

    fn ids(tok: &tokenizers::Tokenizer, text: &str) -> Result<Vec<u32>> {
        let enc = tok
            .encode(text, false)
            .map_err(|e| RuntimeError::Tokenizer(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    fn with_bos(&self, ids: Vec<u32>, add_bos: bool) -> Vec<u32> {
        match &self.bos {
            Some((bos, _)) if add_bos && self.add_bos && ids.first() != Some(bos) => {
                let mut out = Vec::with_capacity(ids.len() + 1);
                out.push(*bos);
                out.extend(ids);
                out
            }
            _ => ids,
        }
    }

    /// Decodes ids to text by concatenating token bytes (invalid UTF-8 is replaced with U+FFFD).
    /// Special tokens are included only when `keep_special` is set.
    pub fn decode(&self, ids: &[u32], keep_special: bool) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            if keep_special || self.vocab.kind(id) == stencil_vocab::TokenKind::Normal {
                bytes.extend_from_slice(self.vocab.token_bytes(id));
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Token id -> bytes, kinds and EOS ids.
    pub fn vocab(&self) -> &Arc<Vocab> {
        &self.vocab
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// BOS token text, for chat templates (`bos_token`).
    pub fn bos_token(&self) -> Option<&str> {
        self.bos.as_ref().map(|(_, s)| s.as_str())
    }

    /// Primary EOS token text, for chat templates (`eos_token`).
    pub fn eos_token(&self) -> Option<&str> {
        self.eos.as_ref().map(|(_, s)| s.as_str())
    }

    /// All ids that end generation.
    pub fn eos_ids(&self) -> &[u32] {
        self.vocab.eos_ids()
    }

    /// Number of ids.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// Id of an exact token string, if it is a single token.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }
}
