//! Hugging Face-layout llama checkpoints (`config.json` + `*.safetensors`) through candle's
//! `llama` model.
//!
//! candle's KV cache for this model can only be rebuilt, not truncated, so rollback here
//! re-runs the kept prefix; the GGUF path ([`super::quantized_llama`]) truncates in place.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::llama::{Cache, Config, Llama, LlamaConfig};

use crate::error::{io_err, CandleContext, Result, RuntimeError};

/// A loaded safetensors llama.
pub struct Model {
    model: Llama,
    config: Config,
    llama_config: LlamaConfig,
    dtype: DType,
    device: Device,
}

impl Model {
    /// Loads `dir/config.json` and every `dir/*.safetensors`.
    pub fn load(dir: &Path, device: &Device, dtype: Option<DType>) -> Result<Self> {
        let bad = |reason: String| RuntimeError::Safetensors {
            path: dir.to_path_buf(),
            reason,
        };
        let config_path = dir.join("config.json");
        let text = std::fs::read_to_string(&config_path).map_err(io_err(&config_path))?;
        let raw: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(format!("config.json: {e}")))?;
        if let Some(mt) = raw.get("model_type").and_then(|v| v.as_str()) {
            if mt != "llama" {
                return Err(RuntimeError::UnsupportedArchitecture {
                    arch: mt.to_string(),
                    supported: "llama (safetensors)".into(),
                });
            }
        }
        let llama_config: LlamaConfig =
            serde_json::from_value(raw.clone()).map_err(|e| bad(format!("config.json: {e}")))?;
        let config = llama_config.clone().into_config(false);
        let dtype = dtype.unwrap_or(match raw.get("torch_dtype").and_then(|v| v.as_str()) {
            // CPU matmuls are fastest in f32; keep half precision on accelerators.
            Some("bfloat16") if !device.is_cpu() => DType::BF16,
            Some("float16") if !device.is_cpu() => DType::F16,
            _ => DType::F32,
        });
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(io_err(dir))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(bad("no *.safetensors files".into()));
        }
        // SAFETY: the files are memory-mapped read-only; we do not modify them while mapped.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&files, dtype, device) }
            .ctx("mapping safetensors")?;
        let model = Llama::load(vb, &config).ctx("loading llama weights")?;
        Ok(Self {
            model,
            config,
            llama_config,
            dtype,
            device: device.clone(),
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    pub fn context_length(&self) -> usize {
        self.config.max_position_embeddings
    }

    pub fn hf_config(&self) -> &LlamaConfig {
        &self.llama_config
    }

    pub fn new_cache(&self) -> Result<Cache> {
        Cache::new(true, self.dtype, &self.config, &self.device).ctx("allocating llama cache")
    }

    /// Runs `tokens` at position `pos` and returns last-position logits (`[vocab]`, f32).
    pub fn forward(&self, tokens: &[u32], pos: usize, cache: &mut Cache) -> Result<Tensor> {
        let input = Tensor::new(tokens, &self.device)
            .and_then(|t| t.unsqueeze(0))
            .ctx("building input")?;
        self.model
            .forward(&input, pos, cache)
            .and_then(|l| l.flatten_all())
            .and_then(|l| l.to_dtype(DType::F32))
            .ctx("model forward pass")
    }
}
