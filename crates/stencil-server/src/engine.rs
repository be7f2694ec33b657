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
}
