//! Loading a model by spec: resolve files ([`crate::hub`]), open the device, load weights,
//! tokenizer and chat template.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use candle_core::Device;

use crate::chat::ChatTemplate;
use crate::error::{io_err, Result, RuntimeError};
use crate::gguf::GgufFile;
use crate::hub::{self, ModelFiles};
use crate::models::quantized_llama::{self, WeightFormat};
use crate::models::{llama_safetensors, GgufModel, LanguageModel};
use crate::tokenizer::{gguf::from_gguf_metadata, Tokenizer};

/// File name of the default model (fetched by `scripts/fetch-model.sh`).
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Where the default model is looked for: `$STENCIL_MODEL`, `./models/`, then the source
/// checkout's `models/`.
pub fn default_model_path() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("STENCIL_MODEL") {
        return Ok(PathBuf::from(p));
    }
    let candidates = [
        PathBuf::from("models").join(DEFAULT_MODEL_FILE),
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../models")
            .join(DEFAULT_MODEL_FILE),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| RuntimeError::ModelNotFound {
            spec: DEFAULT_MODEL_FILE.into(),
            reason: "the default model is not downloaded; run scripts/fetch-model.sh (or pass --model PATH|org/name)".into(),
        })
}

/// Resolves `spec` (None = default model) to model files.
pub fn resolve(spec: Option<&str>) -> Result<ModelFiles> {
    match spec {
        None => Ok(ModelFiles::Gguf(default_model_path()?)),
        Some(s) if hub::is_repo_id(s) => hub::resolve_repo(s),
        Some(s) => hub::classify_local(Path::new(s)),
    }
}

/// Options for [`load`].
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// `cpu`, `cuda[:N]` or `metal`; empty = cpu.
    pub device: String,
    pub weight_format: WeightFormat,
}

/// A model ready to generate: weights, tokenizer and chat template.
pub struct LoadedModel {
    pub model: Arc<dyn LanguageModel>,
    pub tokenizer: Tokenizer,
    pub template: ChatTemplate,
    /// Raw template source (None when the model has none and ChatML is used).
    pub template_source: Option<String>,
    pub files: ModelFiles,
    pub device: Device,
    pub load_time: Duration,
}

/// Loads model files. `progress(done, total)` is called as layers load.
pub fn load(
    files: &ModelFiles,
    options: &LoadOptions,
    progress: impl FnMut(usize, usize),
) -> Result<LoadedModel> {
    let start = Instant::now();
    let device = crate::device::open_device(if options.device.is_empty() {
        "cpu"
    } else {
        &options.device
    })?;
    let (model, tokenizer, template_source): (Arc<dyn LanguageModel>, _, _) = match files {
        ModelFiles::Gguf(path) => {
            let mut gguf = GgufFile::open(path)?;
            // Check the architecture before the tokenizer, so an unsupported model says so.
            quantized_llama::Config::from_gguf(&gguf)?;
            let tokenizer = from_gguf_metadata(gguf.meta())?;
            let template = gguf
                .meta()
                .opt_str("tokenizer.chat_template")
                .map(str::to_string);
            let dtypes = weight_summary(&gguf, options.weight_format, &device);
            let model =
                quantized_llama::Model::load(&mut gguf, &device, options.weight_format, progress)?;
            (
                Arc::new(GgufModel {
                    model,
                    weights: dtypes,
                }) as Arc<dyn LanguageModel>,
                tokenizer,
                template,
            )
        }
        ModelFiles::Safetensors(dir) => {
            let tokenizer = Tokenizer::from_hf_files(&dir.join("tokenizer.json"))?;
            let template = read_hf_template(dir)?;
            let model = llama_safetensors::Model::load(dir, &device, None)?;
            (
                Arc::new(model) as Arc<dyn LanguageModel>,
                tokenizer,
                template,
            )
        }
    };
    if tokenizer.vocab_size() > model.vocab_size() {
        return Err(RuntimeError::Tokenizer(format!(
            "tokenizer has {} ids but the model's output has {}",
            tokenizer.vocab_size(),
            model.vocab_size()
        )));
    }
    let template = ChatTemplate::for_tokenizer(template_source.as_deref(), &tokenizer)?;
    Ok(LoadedModel {
        model,
        tokenizer,
        template,
        template_source,
        files: files.clone(),
        device,
        load_time: start.elapsed(),
    })
}

/// "Q4_1 re-quantized to Q8_0 at load" style summary of the weight formats.
fn weight_summary(gguf: &GgufFile, format: WeightFormat, device: &Device) -> String {
    let mut counts: Vec<(candle_core::quantized::GgmlDType, usize)> = Vec::new();
    for info in gguf.content.tensor_infos.values() {
        if info.shape.rank() >= 2 {
            match counts.iter_mut().find(|(d, _)| *d == info.ggml_dtype) {
                Some((_, n)) => *n += 1,
                None => counts.push((info.ggml_dtype, 1)),
            }
        }
    }
    let Some(&(main, _)) = counts.iter().max_by_key(|(_, n)| *n) else {
        return String::new();
    };
    if format.requantizes(main, device) {
        format!("{main:?} re-quantized to Q8_0 at load")
    } else {
        format!("{main:?}")
    }
}

fn read_hf_template(dir: &Path) -> Result<Option<String>> {
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        return std::fs::read_to_string(&jinja)
            .map(Some)
            .map_err(io_err(&jinja));
    }
    let cfg = dir.join("tokenizer_config.json");
    if !cfg.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&cfg).map_err(io_err(&cfg))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| RuntimeError::Template(format!("{}: {e}", cfg.display())))?;
    Ok(match v.get("chat_template") {
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        // A list of named templates: use "default".
        Some(serde_json::Value::Array(list)) => list
            .iter()
            .find(|t| t["name"] == "default")
            .and_then(|t| t["template"].as_str())
            .map(str::to_string),
        _ => None,
    })
}
