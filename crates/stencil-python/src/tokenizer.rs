//! `stencil.Tokenizer`: a vocabulary as bytes (what masks are computed over), the model's
//! vocabulary size, and, when built from a `tokenizer.json`, a text encoder (for fast-forward
//! and the MaskBench runner).

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use stencil_mask::TokenTrie;
use stencil_vocab::{SpecialIds, Vocab};

/// What constraints and matchers share of a tokenizer.
pub struct TokenizerData {
    pub trie: Arc<TokenTrie>,
    /// Every token's bytes, control tokens included.
    pub vocab: Vocab,
    /// Text -> ids with special-token text spelled as text (`<|im_end|>` in a string never
    /// becomes the control token); None for a vocabulary given as bytes.
    pub encoder: Option<tokenizers::Tokenizer>,
    /// The model's vocabulary size (rows of its logits), at least the tokenizer's.
    pub vocab_size: usize,
}

impl TokenizerData {
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        let enc = self.encoder.as_ref().ok_or(
            "this Tokenizer was built from token bytes and has no text encoder; pass encode=",
        )?;
        enc.encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| format!("tokenizing {text:?}: {e}"))
    }
}

/// A tokenizer's vocabulary, ready for constraints. Build it once per model and share it.
#[pyclass(name = "Tokenizer", module = "stencil", frozen)]
pub struct PyTokenizer {
    pub data: Arc<TokenizerData>,
}

fn with_vocab_size(
    vocab: Vocab,
    encoder: Option<tokenizers::Tokenizer>,
    vocab_size: Option<usize>,
) -> PyResult<PyTokenizer> {
    let n = vocab.len();
    let vocab_size = vocab_size.unwrap_or(n);
    if vocab_size < n {
        return Err(PyValueError::new_err(format!(
            "vocab_size={vocab_size} is smaller than the tokenizer's {n} tokens"
        )));
    }
    if let Some(&bad) = vocab.eos_ids().iter().find(|&&id| id as usize >= n) {
        return Err(PyValueError::new_err(format!(
            "eos id {bad} is outside the tokenizer's {n} tokens"
        )));
    }
    Ok(PyTokenizer {
        data: Arc::new(TokenizerData {
            trie: Arc::new(TokenTrie::new(&vocab)),
            vocab,
            encoder,
            vocab_size,
        }),
    })
}

fn from_hf(
    mut tok: tokenizers::Tokenizer,
    eos_ids: Vec<u32>,
    vocab_size: Option<usize>,
) -> PyResult<PyTokenizer> {
    let vocab = Vocab::from_tokenizer(&tok, eos_ids)
        .map_err(|e| PyValueError::new_err(format!("tokenizer: {e}")))?;
    tok.set_encode_special_tokens(true);
    with_vocab_size(vocab, Some(tok), vocab_size)
}

#[pymethods]
impl PyTokenizer {
    /// Loads a `tokenizer.json`. End-of-sequence ids: `eos_ids` if given, else the
    /// `eos_token` of `tokenizer_config.json` and the `eos_token_id`s of
    /// `generation_config.json` beside it. `vocab_size`: the model's (logits width), when it
    /// pads the tokenizer's.
    #[staticmethod]
    #[pyo3(signature = (path, *, eos_ids=None, vocab_size=None))]
    fn from_file(
        py: Python<'_>,
        path: PathBuf,
        eos_ids: Option<Vec<u32>>,
        vocab_size: Option<usize>,
    ) -> PyResult<Self> {
        let tok = py
            .detach(|| tokenizers::Tokenizer::from_file(&path))
            .map_err(|e| PyOSError::new_err(format!("{}: {e}", path.display())))?;
        let eos_ids = match eos_ids {
            Some(ids) => ids,
            None => {
                let ids = SpecialIds::read(&path, &tok)
                    .map_err(PyOSError::new_err)?
                    .eos_ids;
                if ids.is_empty() {
                    return Err(PyValueError::new_err(format!(
                        "{}: no tokenizer_config.json or generation_config.json beside it names an end-of-sequence token; pass eos_ids=[...] (an empty list: no token ends the output)",
                        path.display()
                    )));
                }
                ids
            }
        };
        py.detach(|| from_hf(tok, eos_ids, vocab_size))
    }

    /// Builds from the JSON text of a `tokenizer.json` (what a `transformers` fast tokenizer's
    /// `backend_tokenizer.to_str()` gives); see `stencil.Tokenizer.from_hf`.
    #[staticmethod]
    #[pyo3(signature = (json, *, eos_ids, vocab_size=None))]
    fn from_json(
        py: Python<'_>,
        json: &str,
        eos_ids: Vec<u32>,
        vocab_size: Option<usize>,
    ) -> PyResult<Self> {
        let tok: tokenizers::Tokenizer = json
            .parse()
            .map_err(|e| PyValueError::new_err(format!("tokenizer JSON: {e}")))?;
        py.detach(|| from_hf(tok, eos_ids, vocab_size))
    }

    /// Builds from a `transformers` fast tokenizer (its `backend_tokenizer`). End-of-sequence
    /// ids: `eos_ids` if given, else the tokenizer's `eos_token_id`. `vocab_size`: the
    /// model's (`model.config.vocab_size`), when it pads the tokenizer's.
    #[staticmethod]
    #[pyo3(signature = (tokenizer, *, eos_ids=None, vocab_size=None))]
    fn from_hf(
        py: Python<'_>,
        tokenizer: &Bound<'_, PyAny>,
        eos_ids: Option<Vec<u32>>,
        vocab_size: Option<usize>,
    ) -> PyResult<Self> {
        let backend = tokenizer.getattr("backend_tokenizer").map_err(|_| {
            PyTypeError::new_err(format!(
                "Tokenizer.from_hf needs a transformers fast tokenizer (with backend_tokenizer); got {}",
                tokenizer.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            ))
        })?;
        let json: String = backend.call_method0("to_str")?.extract()?;
        let eos_ids = match eos_ids {
            Some(ids) => ids,
            None => {
                let eos = tokenizer.getattr("eos_token_id")?;
                if eos.is_none() {
                    return Err(PyValueError::new_err(
                        "the tokenizer has no eos_token_id; pass eos_ids=[...]",
                    ));
                }
                vec![eos.extract()?]
            }
        };
        Self::from_json(py, &json, eos_ids, vocab_size)
    }

    /// Builds from the bytes of every token (index = id), as a runtime spells them
    /// (llama.cpp's `token_to_piece`); `special[id]` marks control tokens, which constrained
    /// text never contains. Such a tokenizer has no text encoder.
    #[staticmethod]
    #[pyo3(signature = (tokens, *, eos_ids, special=None, vocab_size=None))]
    fn from_token_bytes(
        tokens: Vec<Vec<u8>>,
        eos_ids: Vec<u32>,
        special: Option<Vec<bool>>,
        vocab_size: Option<usize>,
    ) -> PyResult<Self> {
        let special = special.unwrap_or_default();
        if !special.is_empty() && special.len() != tokens.len() {
            return Err(PyValueError::new_err(format!(
                "special has {} entries for {} tokens",
                special.len(),
                tokens.len()
            )));
        }
        with_vocab_size(
            Vocab::from_token_bytes(tokens, &special, eos_ids),
            None,
            vocab_size,
        )
    }

    /// The model's vocabulary size: the width of its logits and of a bitmask row (in bits).
    #[getter]
    fn vocab_size(&self) -> usize {
        self.data.vocab_size
    }

    /// The end-of-sequence ids (allowed exactly when the output is complete).
    #[getter]
    fn eos_ids(&self) -> Vec<u32> {
        self.data.vocab.eos_ids().to_vec()
    }

    /// Text to ids, special-token text spelled as text, no BOS.
    fn encode(&self, py: Python<'_>, text: &str) -> PyResult<Vec<u32>> {
        py.detach(|| self.data.encode(text))
            .map_err(PyValueError::new_err)
    }

    /// The bytes token `id` stands for.
    fn token_bytes(&self, id: u32) -> PyResult<Vec<u8>> {
        let vocab = &self.data.vocab;
        if id as usize >= vocab.len() {
            return Err(PyValueError::new_err(format!(
                "token id {id} is outside the tokenizer's {} tokens",
                vocab.len()
            )));
        }
        Ok(vocab.token_bytes(id).to_vec())
    }

    fn __repr__(&self) -> String {
        format!(
            "Tokenizer(tokens={}, vocab_size={}, eos_ids={:?})",
            self.data.vocab.len(),
            self.data.vocab_size,
            self.data.vocab.eos_ids()
        )
    }
}
