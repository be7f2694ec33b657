//! Sampling settings.

use serde::{Deserialize, Serialize};

use crate::error::RequestError;

/// Sampling settings. `temperature == 0` means greedy (argmax).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    pub temperature: f32,
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
    pub min_p: Option<f32>,
    /// Values above 1 discourage tokens already in the context (HF semantics: divide
    /// positive logits, multiply negative ones).
    pub repetition_penalty: Option<f32>,
    /// Same seed + same input = same output. `None` seeds from the OS.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: None,
            top_p: None,
            min_p: None,
            repetition_penalty: None,
            seed: None,
        }
    }
}

impl SamplingParams {
    /// Checks ranges; every violation names the parameter and the allowed range.
    pub fn validate(&self) -> Result<(), RequestError> {
        let bad = |param, m: String| Err(RequestError::sampling(param, m));
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return bad(
                "temperature",
                format!("temperature must be >= 0, got {}", self.temperature),
            );
        }
        if self.top_k == Some(0) {
            return bad("top_k", "top_k must be >= 1".into());
        }
        if let Some(p) = self.top_p {
            if !(p > 0.0 && p <= 1.0) {
                return bad("top_p", format!("top_p must be in (0, 1], got {p}"));
            }
        }
        if let Some(p) = self.min_p {
            if !(0.0..=1.0).contains(&p) {
                return bad("min_p", format!("min_p must be in [0, 1], got {p}"));
            }
        }
        if let Some(r) = self.repetition_penalty {
            if !(r.is_finite() && r > 0.0) {
                return bad(
                    "repetition_penalty",
                    format!("repetition_penalty must be > 0, got {r}"),
                );
            }
        }
        Ok(())
    }
}
