//! Language models behind one interface.
//!
//! [`LanguageModel`] is shared, immutable weights; [`Session`] is one sequence's state (its KV
//! cache and the tokens in it). Generation code only sees these two traits.
//! [`LanguageModel::forward_batch`] runs one step of several sessions in one pass (the batching
//! scheduler, [`crate::batch`], builds on it).

pub mod attention;
mod huge_pages;
mod layer;
pub mod llama_safetensors;
mod norm;
mod pool;
pub mod q4;
pub mod q8_0;
mod quant;
pub mod quantized_llama;
mod read_ahead;
mod swiglu;

use std::any::Any;

/// Whether the CPU has AVX2, FMA and F16C (checked once): the CPU kernels' SIMD paths.
#[cfg(target_arch = "x86_64")]
pub(crate) fn simd() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    })
}

/// The output of a weight matmul, shared by its column-parallel jobs.
struct ColumnsOut(*mut f32);
// SAFETY: each job writes the elements of its own columns only.
unsafe impl Sync for ColumnsOut {}

/// Runs `job(columns, out)` over the `n` output columns of an `m x n` product over `k`
/// inputs, on candle's thread pool unless the product is small; each job's columns start at a
/// multiple of `width` (a kernel's column group). `out` must hold `m * n` values (it may start
/// uninitialized), and a job may write only the elements of its own columns. `before` (the
/// activations' quantization) runs first, in the same pool call ([`pool::in_phases`]).
pub(crate) fn column_jobs(
    (m, n, k): (usize, usize, usize),
    width: usize,
    out: &mut [std::mem::MaybeUninit<f32>],
    before: pool::Phase<'_>,
    job: impl Fn(std::ops::Range<usize>, *mut f32) + Sync,
) {
    assert_eq!(out.len(), m * n, "out is not {m} x {n}");
    let out = ColumnsOut(out.as_mut_ptr().cast());
    let run = |groups: std::ops::Range<usize>| {
        let out = &out;
        job(groups.start * width..(groups.end * width).min(n), out.0)
    };
    let groups = n.div_ceil(width);
    if m * n * k < 1 << 16 {
        (before.run)(0..before.items);
        run(0..groups);
    } else {
        pool::in_phases(before, pool::Phase::new(groups, &run));
    }
}

/// The CPU forward of a weight matmul op ([`q4::Q4Matrix`], [`q8_0::Q8Matrix`]): checks that
/// the activations are contiguous f32 `[.., k]`, then `matmul(lhs, rows)` gives `[.., n]`.
pub(crate) fn weight_matmul_fwd(
    what: &str,
    (k, n): (usize, usize),
    storage: &candle_core::CpuStorage,
    layout: &candle_core::Layout,
    matmul: impl FnOnce(&[f32], usize) -> Vec<f32>,
) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
    let (lhs, outer, cols) = row_input(&format!("{what} matmul"), storage, layout)?;
    if cols != k {
        candle_core::bail!("{what} matmul: activations have {cols} columns, weights {k}");
    }
    Ok(row_output(matmul(lhs, outer.iter().product()), outer, n))
}

/// The input of a CPU op over rows (the last dimension): contiguous f32 values, the outer
/// dimensions and the row width; an error naming `what` otherwise.
pub(crate) fn row_input<'a>(
    what: &str,
    storage: &'a candle_core::CpuStorage,
    layout: &'a candle_core::Layout,
) -> candle_core::Result<(&'a [f32], &'a [usize], usize)> {
    let candle_core::CpuStorage::F32(data) = storage else {
        candle_core::bail!("{what} takes f32");
    };
    let Some((&width, outer)) = layout.dims().split_last() else {
        candle_core::bail!("{what} of a scalar");
    };
    let Some((from, to)) = layout.contiguous_offsets() else {
        candle_core::bail!("{what} needs a contiguous input");
    };
    Ok((&data[from..to], outer, width))
}

/// The output of a CPU op over rows: `values` shaped `[outer.., width]`.
pub(crate) fn row_output(
    values: Vec<f32>,
    outer: &[usize],
    width: usize,
) -> (candle_core::CpuStorage, candle_core::Shape) {
    let mut shape = outer.to_vec();
    shape.push(width);
    (
        candle_core::CpuStorage::F32(values),
        candle_core::Shape::from(shape),
    )
}

/// Deterministic pseudo-random values in `[-scale, scale)` for the kernels' tests.
#[cfg(test)]
pub(crate) fn test_values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

use candle_core::Tensor;

use crate::error::{CandleContext, Result, RuntimeError};

/// Loaded weights, shareable across threads and requests.
pub trait LanguageModel: Send + Sync {
    /// A short description (`llama (GGUF, Q8_0 at load)`).
    fn describe(&self) -> String;
    fn vocab_size(&self) -> usize;
    fn context_length(&self) -> usize;
    /// Starts an empty sequence.
    fn new_session(&self) -> Result<Box<dyn Session + '_>>;
    /// Bytes of KV cache one position of a session takes (0 if unknown).
    fn kv_bytes_per_token(&self) -> usize {
        0
    }
    /// A new session holding the first `len` tokens of `from` (one of this model's sessions),
    /// copied rather than recomputed and exactly what recomputing them would give; `None`
    /// where the model cannot guarantee that (the scheduler's prompt-prefix cache uses it).
    fn fork_session(&self, _from: &dyn Session, _len: usize) -> Option<Box<dyn Session + '_>> {
        None
    }
    /// Runs one step of several of this model's sessions (each `(session, new tokens)`) in one
    /// pass and returns each one's next-token logits, exactly what `Session::forward` would
    /// return for it alone. The default runs them one after the other.
    fn forward_batch(&self, steps: &mut [BatchStep<'_, '_>]) -> Result<Vec<Tensor>> {
        steps
            .iter_mut()
            .map(|s| s.session.forward(s.tokens))
            .collect()
    }
}

/// One session's part of [`LanguageModel::forward_batch`].
pub struct BatchStep<'s, 'm> {
    pub session: &'s mut (dyn Session + 'm),
    pub tokens: &'s [u32],
}

/// One sequence being decoded.
pub trait Session: Send {
    /// Appends `tokens` and returns the next-token logits after the last one (`[vocab]`).
    fn forward(&mut self, tokens: &[u32]) -> Result<Tensor>;
    /// Whether [`Session::forward`] runs on another thread (a batch scheduler's) while the
    /// calling thread waits: then [`Session::forward_overlapped`] gives that wait to other work.
    fn runs_elsewhere(&self) -> bool {
        false
    }
    /// [`Session::forward`], running `meanwhile` on the calling thread while the tokens run
    /// elsewhere; a session that computes on the calling thread runs `meanwhile` first.
    fn forward_overlapped(
        &mut self,
        tokens: &[u32],
        meanwhile: &mut dyn FnMut(),
    ) -> Result<Tensor> {
        meanwhile();
        self.forward(tokens)
    }
    /// Tokens processed so far.
    fn tokens(&self) -> &[u32];
    /// Forgets every token from position `len` on (for rollback and prompt-prefix reuse).
    fn truncate(&mut self, len: usize) -> Result<()>;
    /// Sizes the KV cache for `positions` at once (a hint; the default ignores it).
    fn reserve(&mut self, _positions: usize) {}
    /// The model-specific state behind the session, for the model's own
    /// [`LanguageModel::forward_batch`] (None: the session cannot be batched).
    fn state(&mut self) -> Option<&mut dyn Any> {
        None
    }
    /// [`Session::state`], read-only (for [`LanguageModel::fork_session`]).
    fn state_ref(&self) -> Option<&dyn Any> {
        None
    }
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
            model: &self.model,
            state: GgufState {
                cache: self.model.new_cache(),
                tokens: Vec::new(),
            },
        }))
    }
    fn kv_bytes_per_token(&self) -> usize {
        self.model.kv_bytes_per_token()
    }
    fn fork_session(&self, from: &dyn Session, len: usize) -> Option<Box<dyn Session + '_>> {
        let state = from.state_ref()?.downcast_ref::<GgufState>()?;
        let cache = quantized_llama::KvCache::prefix_of(&state.cache, len, self.model.kv_width())?;
        Some(Box::new(GgufSession {
            model: &self.model,
            state: GgufState {
                cache,
                tokens: state.tokens[..len].to_vec(),
            },
        }))
    }
    fn forward_batch(&self, steps: &mut [BatchStep<'_, '_>]) -> Result<Vec<Tensor>> {
        let mut states = Vec::with_capacity(steps.len());
        let mut tokens = Vec::with_capacity(steps.len());
        for s in steps.iter_mut() {
            let state = s
                .session
                .state()
                .and_then(|a| a.downcast_mut::<GgufState>())
                .ok_or_else(|| {
                    RuntimeError::Generation("a session of another model in the batch".into())
                })?;
            states.push(state);
            tokens.push(s.tokens);
        }
        let mut items: Vec<quantized_llama::BatchItem<'_>> = states
            .iter_mut()
            .zip(&tokens)
            .map(|(st, t)| quantized_llama::BatchItem {
                tokens: t,
                cache: &mut st.cache,
            })
            .collect();
        let logits = self.model.forward_batch(&mut items)?;
        drop(items);
        let mut out = Vec::with_capacity(states.len());
        for (i, (st, t)) in states.into_iter().zip(&tokens).enumerate() {
            st.tokens.extend_from_slice(t);
            out.push(logits.get(i).ctx("model forward pass")?);
        }
        Ok(out)
    }
}

struct GgufSession<'a> {
    model: &'a quantized_llama::Model,
    state: GgufState,
}

/// A GGUF session's own state (what `forward_batch` reaches through [`Session::state`]).
struct GgufState {
    cache: quantized_llama::KvCache,
    tokens: Vec<u32>,
}

impl Session for GgufSession<'_> {
    fn forward(&mut self, tokens: &[u32]) -> Result<Tensor> {
        let logits = self.model.forward(tokens, &mut self.state.cache)?;
        self.state.tokens.extend_from_slice(tokens);
        Ok(logits)
    }
    fn tokens(&self) -> &[u32] {
        &self.state.tokens
    }
    fn truncate(&mut self, len: usize) -> Result<()> {
        self.state.cache.truncate(len);
        self.state.tokens.truncate(len);
        Ok(())
    }
    fn reserve(&mut self, positions: usize) {
        self.state.cache.reserve(positions);
    }
    fn state_ref(&self) -> Option<&dyn Any> {
        Some(&self.state)
    }
    fn state(&mut self) -> Option<&mut dyn Any> {
        Some(&mut self.state)
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
