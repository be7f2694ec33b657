//! The [`Engine`] the server drives: anything that can check and run a chat request.

use std::ops::ControlFlow;

use stencil_runtime::batch::BatchStats;
use stencil_runtime::engine::{ChatEngine, Prepared};
use stencil_runtime::tools::ToolEvent;
use stencil_runtime::RuntimeError;
use stencil_types::{ChatOutcome, ChatRequest};

/// What the HTTP layer needs from a model.
pub trait Engine: Send + Sync + 'static {
    /// The id `/v1/models` lists and requests may name.
    fn model_id(&self) -> String;
    /// Every check that can fail before generation (answered with 400).
    fn prepare(&self, req: &ChatRequest) -> Result<Prepared, RuntimeError>;
    /// Generates; `sink` returning `Break` cancels.
    fn run(
        &self,
        prepared: &Prepared,
        sink: &mut dyn FnMut(ToolEvent) -> ControlFlow<()>,
    ) -> Result<ChatOutcome, RuntimeError>;
    /// How many `run`s may go at once (a batching engine shares their forward passes).
    fn slots(&self) -> usize {
        1
    }
    /// The batch scheduler's counters, if the engine batches.
    fn batch_stats(&self) -> Option<BatchStats> {
        None
    }
    /// What model listings (`/api/tags`, `/api/show`) say about the model.
    fn model_facts(&self) -> ModelFacts {
        ModelFacts::default()
    }
}

/// Facts about the served model, for model listings.
#[derive(Debug, Clone, Default)]
pub struct ModelFacts {
    /// `gguf` or `safetensors`.
    pub format: String,
    /// The architecture (`llama`).
    pub family: String,
    /// How the weights are held (`Q8_0 (from Q4_1)`).
    pub weights: String,
    /// Size of the weights file in bytes.
    pub size: u64,
    pub modified_at: Option<std::time::SystemTime>,
    /// The chat template source.
    pub template: Option<String>,
    pub context_length: usize,
}

impl Engine for ChatEngine {
    fn model_id(&self) -> String {
        match &self.loaded.files {
            stencil_runtime::hub::ModelFiles::Gguf(p)
            | stencil_runtime::hub::ModelFiles::Safetensors(p) => p
                .file_stem()
                .map_or("stencil".into(), |s| s.to_string_lossy().into_owned()),
        }
    }

    fn prepare(&self, req: &ChatRequest) -> Result<Prepared, RuntimeError> {
        ChatEngine::prepare(self, req)
    }

    fn run(
        &self,
        prepared: &Prepared,
        sink: &mut dyn FnMut(ToolEvent) -> ControlFlow<()>,
    ) -> Result<ChatOutcome, RuntimeError> {
        ChatEngine::run(self, prepared, sink)
    }

    fn slots(&self) -> usize {
        ChatEngine::max_batch(self)
    }

    fn batch_stats(&self) -> Option<BatchStats> {
        ChatEngine::batch_stats(self)
    }

    fn model_facts(&self) -> ModelFacts {
        let (format, path) = match &self.loaded.files {
            stencil_runtime::hub::ModelFiles::Gguf(p) => ("gguf", p),
            stencil_runtime::hub::ModelFiles::Safetensors(p) => ("safetensors", p),
        };
        let meta = std::fs::metadata(path).ok();
        // `describe` reads "llama (GGUF, Q8_0 ...)".
        let described = self.loaded.model.describe();
        let (family, rest) = described.split_once(' ').unwrap_or((&described, ""));
        let weights = rest
            .trim_start_matches('(')
            .trim_end_matches(')')
            .split_once(", ")
            .map_or("", |(_, w)| w);
        ModelFacts {
            format: format.into(),
            family: family.into(),
            weights: weights.into(),
            size: meta.as_ref().map_or(0, |m| m.len()),
            modified_at: meta.and_then(|m| m.modified().ok()),
            template: self.loaded.template_source.clone(),
            context_length: self.loaded.model.context_length(),
        }
    }
}
