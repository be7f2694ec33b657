//! Language models behind one interface.
//!
//! [`LanguageModel`] is shared, immutable weights; [`Session`] is one sequence's state (its KV
//! cache and the tokens in it). Generation code only sees these two traits.

pub mod llama_safetensors;
pub mod quantized_llama;

use candle_core::Tensor;

use crate::error::Result;

/// Loaded weights, shareable across threads and requests.
pub trait LanguageModel: Send + Sync {
    /// A short description (`llama (GGUF, Q8_0 at load)`).
    fn describe(&self) -> String;
    fn vocab_size(&self) -> usize;
    fn context_length(&self) -> usize;
    /// Starts an empty sequence.
    fn new_session(&self) -> Result<Box<dyn Session + '_>>;
}

/// One sequence being decoded.
pub trait Session: Send {
    /// Appends `tokens` and returns the next-token logits after the last one (`[vocab]`).
    fn forward(&mut self, tokens: &[u32]) -> Result<Tensor>;
    /// Tokens processed so far.
    fn tokens(&self) -> &[u32];
    /// Forgets every token from position `len` on (for rollback and prompt-prefix reuse).
    fn truncate(&mut self, len: usize) -> Result<()>;
}

/// GGUF decoder.
pub struct GgufModel {
    pub model: quantized_llama::Model,
    pub weights: String,
}

impl LanguageModel for GgufModel {
    fn describe(&self) -> String {
        format!("{} (GGUF, {})", self.model.config().arch, self.weights)
    }
    fn vocab_size(&self) -> usize {
        self.model.config().vocab_size
    }
    fn context_length(&self) -> usize {
        self.model.config().context_length
    }
    fn new_session(&self) -> Result<Box<dyn Session + '_>> {
        Ok(Box::new(GgufSession {
            cache: self.model.new_cache(),
            model: &self.model,
            tokens: Vec::new(),
        }))
    }
}

struct GgufSession<'a> {
    model: &'a quantized_llama::Model,
    cache: quantized_llama::KvCache,
    tokens: Vec<u32>,
}

impl Session for GgufSession<'_> {
    fn forward(&mut self, tokens: &[u32]) -> Result<Tensor> {
        let logits = self.model.forward(tokens, &mut self.cache)?;
        self.tokens.extend_from_slice(tokens);
        Ok(logits)
    }
    fn tokens(&self) -> &[u32] {
        &self.tokens
    }
    fn truncate(&mut self, len: usize) -> Result<()> {
        self.cache.truncate(len);
        self.tokens.truncate(len);
        Ok(())
    }
}

impl LanguageModel for llama_safetensors::Model {
    fn describe(&self) -> String {
        "llama (safetensors)".into()
    }
    fn vocab_size(&self) -> usize {
        llama_safetensors::Model::vocab_size(self)
    }
    fn context_length(&self) -> usize {
        llama_safetensors::Model::context_length(self)
    }
    fn new_session(&self) -> Result<Box<dyn Session + '_>> {
        Ok(Box::new(SafetensorsSession {
            cache: self.new_cache()?,
            model: self,
            tokens: Vec::new(),
        }))
    }
}

struct SafetensorsSession<'a> {
    model: &'a llama_safetensors::Model,
    cache: candle_transformers::models::llama::Cache,
    tokens: Vec<u32>,
}

impl Session for SafetensorsSession<'_> {
    fn forward(&mut self, tokens: &[u32]) -> Result<Tensor> {
        let logits = self
            .model
            .forward(tokens, self.tokens.len(), &mut self.cache)?;
        self.tokens.extend_from_slice(tokens);
        Ok(logits)
    }
    fn tokens(&self) -> &[u32] {
        &self.tokens
    }
    fn truncate(&mut self, len: usize) -> Result<()> {
        if len >= self.tokens.len() {
            return Ok(());
        }
        // candle's llama cache cannot be truncated: rebuild it from the kept prefix.
        let keep: Vec<u32> = self.tokens[..len].to_vec();
        self.cache = self.model.new_cache()?;
        self.tokens.clear();
        if !keep.is_empty() {
            self.forward(&keep)?;
        }
        Ok(())
    }
}
