//! Llama-family decoder over GGUF weights (architectures `llama` and `qwen2`).
//!
//! One implementation covers both because they differ only in details that the GGUF metadata
//! tells us: Qwen2 has biases on the Q/K/V projections and rotates query/key halves
//! (NeoX-style RoPE), while llama.cpp stores Llama's Q/K rows permuted for interleaved RoPE.
//!
//! Unlike candle's `quantized_llama`, the KV cache is a separate, caller-owned [`KvCache`] that
//! can be truncated to any earlier length — the basis for rollback and cheap prompt reuse — and
//! it is preallocated and written in place instead of re-concatenated at every step.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Tensor};

use super::attention::{Attention, HostKv, Rows};
use super::layer::{add_bias, Layer, MatMul, Projections, RmsNorm};
use super::q4::Q4Matrix;
use super::q8_0::Q8Matrix;
use super::read_ahead::ReadAhead;
use super::swiglu::SwiGlu;
use crate::error::{CandleContext, Result, RuntimeError};
use crate::gguf::GgufFile;

/// Architectures this file implements.
pub const SUPPORTED_ARCHS: &[&str] = &["llama", "qwen2"];

/// Hyper-parameters read from GGUF metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub arch: String,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    pub hidden: usize,
    pub vocab_size: usize,
    pub context_length: usize,
    pub rms_eps: f64,
    pub rope_theta: f32,
    /// NeoX-style RoPE (rotate halves) instead of interleaved pairs.
    pub rope_neox: bool,
}

impl Config {
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self> {
        let m = gguf.meta();
        let arch = m.str("general.architecture")?.to_string();
        if !SUPPORTED_ARCHS.contains(&arch.as_str()) {
            return Err(RuntimeError::UnsupportedArchitecture {
                arch,
                supported: SUPPORTED_ARCHS.join(", "),
            });
        }
        let key = |k: &str| format!("{arch}.{k}");
        let n_head = m.usize(&key("attention.head_count"))?;
        let hidden = m.usize(&key("embedding_length"))?;
        let head_dim = m
            .opt_usize(&key("attention.key_length"))
            .unwrap_or(hidden / n_head.max(1));
        let vocab_size = match m.opt_usize(&key("vocab_size")) {
            Some(v) => v,
            None => m.array("tokenizer.ggml.tokens")?.len(),
        };
        Ok(Self {
            n_layer: m.usize(&key("block_count"))?,
            n_head,
            n_kv_head: m
                .opt_usize(&key("attention.head_count_kv"))
                .unwrap_or(n_head),
            head_dim,
            hidden,
            vocab_size,
            context_length: m.opt_usize(&key("context_length")).unwrap_or(2048),
            rms_eps: m
                .opt_f32(&key("attention.layer_norm_rms_epsilon"))
                .unwrap_or(1e-5) as f64,
            rope_theta: m.opt_f32(&key("rope.freq_base")).unwrap_or(10_000.0),
            rope_neox: arch == "qwen2",
            arch,
        })
    }
}

/// How quantized weights are stored in memory after loading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightFormat {
    /// Keep every format that has a fast kernel as stored (on the CPU: Q4_0, Q4_1 and Q8_0
    /// through our own kernels, K-quants through candle's); re-quantize the rest (Q5_0, Q5_1,
    /// and Q4_1 on other devices) to Q8_0.
    #[default]
    Auto,
    /// Keep every tensor exactly as stored in the file.
    AsStored,
    /// Re-quantize Q4_0/Q4_1/Q5_0/Q5_1 to Q8_0 (the default before the Q4 kernel; kept for
    /// comparisons).
    Q8_0,
}

impl WeightFormat {
    /// Whether a tensor of `dtype` is re-quantized to Q8_0 at load on `device`.
    pub fn requantizes(self, dtype: GgmlDType, device: &Device) -> bool {
        let q4 = matches!(dtype, GgmlDType::Q4_0 | GgmlDType::Q4_1);
        let q5 = matches!(dtype, GgmlDType::Q5_0 | GgmlDType::Q5_1);
        match self {
            WeightFormat::AsStored => false,
            WeightFormat::Q8_0 => q4 || q5,
            WeightFormat::Auto => q5 || (dtype == GgmlDType::Q4_1 && !device.is_cpu()),
        }
    }
}

/// Model weights; immutable and shareable across requests (each request owns a [`KvCache`]).
pub struct Model {
    config: Config,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: RmsNorm,
    output: MatMul,
    cos: Tensor,
    sin: Tensor,
    device: Device,
    masks: Mutex<HashMap<(usize, usize), Tensor>>,
    /// The batched CPU attention (on the CPU; `None` on other devices).
    host_attention: Option<Attention>,
}

/// Loader that reads tensors by name and applies the [`WeightFormat`].
struct Loader<'a> {
    gguf: &'a mut GgufFile,
    device: &'a Device,
    format: WeightFormat,
}

impl Loader<'_> {
    fn qtensor(&mut self, name: &str) -> Result<QTensor> {
        let GgufFile {
            content, reader, ..
        } = &mut *self.gguf;
        let t = content
            .tensor(reader, name, self.device)
            .ctx(format!("reading tensor `{name}`"))?;
        if self.format.requantizes(t.dtype(), self.device) {
            let f = t
                .dequantize(self.device)
                .ctx(format!("dequantizing `{name}`"))?;
            return QTensor::quantize(&f, GgmlDType::Q8_0).ctx(format!("re-quantizing `{name}`"));
        }
        Ok(t)
    }

    fn has(&self, name: &str) -> bool {
        self.gguf.content.tensor_infos.contains_key(name)
    }

    fn matmul(&mut self, name: &str) -> Result<MatMul> {
        let t = self.qtensor(name)?;
        if self.device.is_cpu() {
            if let Some(m) = Q8Matrix::from_qtensor(&t).ctx(format!("unpacking `{name}`"))? {
                return Ok(MatMul::Q8(m));
            }
            if let Some(m) = Q4Matrix::from_qtensor(&t).ctx(format!("unpacking `{name}`"))? {
                return Ok(MatMul::Q4(m));
            }
        }
        QMatMul::from_arc(Arc::new(t))
            .map(MatMul::Candle)
            .ctx(format!("preparing `{name}`"))
    }

    fn dense(&mut self, name: &str) -> Result<Tensor> {
        let GgufFile {
            content, reader, ..
        } = &mut *self.gguf;
        content
            .tensor(reader, name, self.device)
            .and_then(|t| t.dequantize(self.device))
            .ctx(format!("reading tensor `{name}`"))
    }

    /// `{prefix}.bias` where the file has one.
    fn bias(&mut self, prefix: &str) -> Result<Option<Tensor>> {
        let name = format!("{prefix}.bias");
        if self.has(&name) {
            self.dense(&name).map(Some)
        } else {
            Ok(None)
        }
    }

    fn norm(&mut self, name: &str, eps: f64) -> Result<RmsNorm> {
        RmsNorm::new(self.dense(name)?, eps as f32).ctx(format!("norm `{name}`"))
    }
}

impl Model {
    /// Loads weights from an opened GGUF file onto `device`.
    pub fn load(
        gguf: &mut GgufFile,
        device: &Device,
        format: WeightFormat,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Self> {
        let config = Config::from_gguf(gguf)?;
        let mut l = Loader {
            gguf,
            device,
            format,
        };
        let embed = l.dense("token_embd.weight")?;
        let mut output = if l.has("output.weight") {
            l.matmul("output.weight")?
        } else {
            // Tied embeddings: the output projection is the embedding matrix, kept quantized.
            l.matmul("token_embd.weight")?
        };
        let norm = l.norm("output_norm.weight", config.rms_eps)?;
        let mut layers = Vec::with_capacity(config.n_layer);
        for i in 0..config.n_layer {
            let p = format!("blk.{i}");
            layers.push(Layer {
                attn_norm: l.norm(&format!("{p}.attn_norm.weight"), config.rms_eps)?,
                qkv: Projections::new(vec![
                    l.matmul(&format!("{p}.attn_q.weight"))?,
                    l.matmul(&format!("{p}.attn_k.weight"))?,
                    l.matmul(&format!("{p}.attn_v.weight"))?,
                ]),
                qkv_bias: [
                    l.bias(&format!("{p}.attn_q"))?,
                    l.bias(&format!("{p}.attn_k"))?,
                    l.bias(&format!("{p}.attn_v"))?,
                ],
                wo: l.matmul(&format!("{p}.attn_output.weight"))?,
                wo_bias: l.bias(&format!("{p}.attn_output"))?,
                ffn_norm: l.norm(&format!("{p}.ffn_norm.weight"), config.rms_eps)?,
                gate_up: Projections::new(vec![
                    l.matmul(&format!("{p}.ffn_gate.weight"))?,
                    l.matmul(&format!("{p}.ffn_up.weight"))?,
                ]),
                down: l.matmul(&format!("{p}.ffn_down.weight"))?,
            });
            progress(i + 1, config.n_layer);
        }
        // The weights our kernels hold, in the order a forward pass reads them, into one
        // huge-page region (a step streams them all from memory).
        let mut weights: Vec<_> = layers.iter_mut().flat_map(Layer::weight_bytes).collect();
        weights.extend(output.weight_bytes());
        let moved = super::huge_pages::move_into_huge_pages(&mut weights);
        tracing::debug!("{moved} bytes of weights moved into a huge-page region");
        let (cos, sin) = rope_tables(&config, device).ctx("building RoPE tables")?;
        let host_attention = if device.is_cpu() {
            let table = |t: &Tensor| t.flatten_all()?.to_vec1::<f32>();
            Some(Attention {
                n_head: config.n_head,
                n_kv_head: config.n_kv_head,
                head_dim: config.head_dim,
                neox: config.rope_neox,
                cos: table(&cos).ctx("building RoPE tables")?,
                sin: table(&sin).ctx("building RoPE tables")?,
            })
        } else {
            None
        };
        Ok(Self {
            host_attention,
            config,
            embed,
            layers,
            norm,
            output,
            cos,
            sin,
            device: device.clone(),
            masks: Mutex::new(HashMap::new()),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// A fresh, empty KV cache for this model.
    pub fn new_cache(&self) -> KvCache {
        let n = self.config.n_layer;
        KvCache {
            layers: match &self.host_attention {
                Some(_) => Layers::Host((0..n).map(|_| HostKv::default()).collect()),
                None => Layers::Device((0..n).map(|_| None).collect()),
            },
            len: 0,
            reserve: 0,
        }
    }

    /// Floats of one layer's keys (or values) per position.
    pub fn kv_width(&self) -> usize {
        self.config.n_kv_head * self.config.head_dim
    }

    /// Bytes of KV cache one position takes (keys and values, every layer).
    pub fn kv_bytes_per_token(&self) -> usize {
        // The CPU cache holds f16, device caches f32.
        let value = if self.host_attention.is_some() { 2 } else { 4 };
        self.config.n_layer * self.kv_width() * 2 * value
    }

    /// Runs `tokens` after the cached prefix and returns the logits of the last position
    /// (`[vocab]`, f32). The cache grows by `tokens.len()`.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        let mut items = [BatchItem { tokens, cache }];
        let logits = self.forward_batch(&mut items)?;
        logits.get(0).ctx("model forward pass")
    }

    /// One forward pass for several sequences: each item's tokens run after its own cached
    /// prefix, and row `i` of the result (`[items, vocab]`, f32) is the next-token logits of
    /// item `i`. The weight matmuls see all items' rows at once (the weights are read once per
    /// step, not once per sequence); attention reads each item's own cache. Every operation is
    /// row-independent, so an item's logits are exactly those of the same call with that item
    /// alone.
    pub fn forward_batch(&self, items: &mut [BatchItem<'_>]) -> Result<Tensor> {
        self.forward_impl(items).ctx("model forward pass")
    }

    fn forward_impl(&self, items: &mut [BatchItem<'_>]) -> candle_core::Result<Tensor> {
        if items.is_empty() {
            candle_core::bail!("forward called with no sequences");
        }
        // (first row, rows, cached positions) per item.
        let mut spans = Vec::with_capacity(items.len());
        let mut ids = Vec::new();
        for item in items.iter() {
            let (seq, pos) = (item.tokens.len(), item.cache.len);
            if seq == 0 {
                candle_core::bail!("forward called with no tokens");
            }
            if pos + seq > self.config.context_length {
                candle_core::bail!(
                    "sequence of {} tokens exceeds the context length {}",
                    pos + seq,
                    self.config.context_length
                );
            }
            spans.push((ids.len(), seq, pos));
            ids.extend_from_slice(item.tokens);
        }
        let single = items.len() == 1;
        let ids = Tensor::new(ids.as_slice(), &self.device)?;
        let mut x = self.embed.index_select(&ids, 0)?.unsqueeze(0)?;
        // RoPE rows and causal masks per item, for the device attention.
        let mut rope = Vec::new();
        if self.host_attention.is_none() {
            for &(_, seq, pos) in &spans {
                let mask = if seq > 1 {
                    Some(self.mask(seq, pos + seq)?)
                } else {
                    None
                };
                rope.push((
                    self.cos.narrow(0, pos, seq)?,
                    self.sin.narrow(0, pos, seq)?,
                    mask,
                ));
            }
        }
        for (l, layer) in self.layers.iter().enumerate() {
            let h = layer.attn_norm.forward(&x)?;
            let y = match &self.host_attention {
                Some(att) => {
                    // The layer's cached keys and values, fetched while the projection runs.
                    let cached = items.iter().zip(&spans).flat_map(|(item, &(_, _, pos))| {
                        match &item.cache.layers {
                            Layers::Host(layers) => layers[l].cached(pos, self.kv_width()),
                            Layers::Device(_) => [&[][..], &[][..]],
                        }
                    });
                    let ahead = ReadAhead::new(cached);
                    let qkv = layer.qkv_rows(&h, Some(&ahead))?;
                    self.host_attention_step(att, l, &qkv, items, &spans)?
                }
                None => {
                    let [q, k, v] = layer.qkv(&h)?;
                    self.device_attention_step(l, (&q, &k, &v), items, &spans, &rope)?
                }
            };
            x = (x + add_bias(layer.wo.forward(&y)?, &layer.wo_bias)?)?;
            let h = layer.ffn_norm.forward(&x)?;
            let gated = match &layer.gate_up {
                // One pass over the fused output on the CPU.
                Projections::Fused { weight, widths }
                    if self.device.is_cpu() && widths[0] == widths[1] =>
                {
                    SwiGlu::forward(&weight.forward(&h)?)?
                }
                gate_up => {
                    let [gate, up]: [Tensor; 2] = gate_up
                        .forward(&h)?
                        .try_into()
                        .map_err(|_| candle_core::Error::Msg("gate and up expected".into()))?;
                    (candle_nn::ops::silu(&gate)? * up)?
                }
            };
            x = (x + layer.down.forward(&gated)?)?;
        }
        for (item, &(_, seq, pos)) in items.iter_mut().zip(&spans) {
            item.cache.len = pos + seq;
        }
        let last = if single {
            let seq = spans[0].1;
            x.narrow(1, seq - 1, 1)?
        } else {
            let rows: Vec<Tensor> = spans
                .iter()
                .map(|&(first, seq, _)| x.narrow(1, first + seq - 1, 1))
                .collect::<candle_core::Result<_>>()?;
            Tensor::cat(&rows, 1)?
        };
        let last = self.norm.forward(&last)?;
        self.output.forward(&last)?.squeeze(0)?.to_dtype(DType::F32)
    }

    /// Attention of every item's new rows in one call ([`Attention::attend`]).
    fn host_attention_step(
        &self,
        att: &Attention,
        l: usize,
        qkv: &Tensor,
        items: &mut [BatchItem<'_>],
        spans: &[(usize, usize, usize)],
    ) -> candle_core::Result<Tensor> {
        let rows = qkv.dim(1)?;
        // The projections as they are in memory (contiguous f32 on the CPU), not copied.
        let (storage, layout) = qkv.storage_and_layout();
        let (candle_core::Storage::Cpu(candle_core::CpuStorage::F32(data)), Some((from, to))) =
            (&*storage, layout.contiguous_offsets())
        else {
            candle_core::bail!("the CPU attention takes contiguous f32 projections");
        };
        let mut seqs = Vec::with_capacity(items.len());
        for (item, &(first, seq, pos)) in items.iter_mut().zip(spans) {
            let reserve = item.cache.reserve;
            let Layers::Host(layers) = &mut item.cache.layers else {
                candle_core::bail!("a device KV cache given to the CPU attention");
            };
            seqs.push(Rows {
                cache: &mut layers[l],
                pos,
                first,
                rows: seq,
                reserve,
            });
        }
        let y = att.attend(&data[from..to], &mut seqs);
        Tensor::from_vec(
            y,
            (1, rows, self.config.n_head * self.config.head_dim),
            &self.device,
        )
    }

    /// Attention with candle ops, one item at a time (devices other than the CPU).
    fn device_attention_step(
        &self,
        l: usize,
        (q, k, v): (&Tensor, &Tensor, &Tensor),
        items: &mut [BatchItem<'_>],
        spans: &[(usize, usize, usize)],
        rope: &[(Tensor, Tensor, Option<Tensor>)],
    ) -> candle_core::Result<Tensor> {
        let single = items.len() == 1;
        let mut ys = Vec::with_capacity(spans.len());
        for (i, &(first, seq, pos)) in spans.iter().enumerate() {
            let rows = |t: &Tensor| {
                if single {
                    Ok(t.clone())
                } else {
                    t.narrow(1, first, seq)
                }
            };
            let cache = &mut *items[i].cache;
            let Layers::Device(layers) = &mut cache.layers else {
                candle_core::bail!("a host KV cache given to the device attention");
            };
            ys.push(self.attention(
                (&rows(q)?, &rows(k)?, &rows(v)?),
                &rope[i],
                &mut layers[l],
                (pos, cache.reserve),
            )?);
        }
        if single {
            Ok(ys.pop().expect("one item"))
        } else {
            Tensor::cat(&ys, 1)
        }
    }

    /// Self-attention of one sequence's new rows (`q`, `k`, `v`: `[1, seq, heads * head_dim]`)
    /// against its cache, which grows by `seq` rows; returns `[1, seq, n_head * head_dim]`.
    fn attention(
        &self,
        (q, k, v): (&Tensor, &Tensor, &Tensor),
        (cos, sin, mask): &(Tensor, Tensor, Option<Tensor>),
        slot: &mut Option<(Tensor, Tensor)>,
        (pos, reserve): (usize, usize),
    ) -> candle_core::Result<Tensor> {
        let c = &self.config;
        let seq = q.dim(1)?;
        let scale = 1.0 / (c.head_dim as f64).sqrt();
        let group = c.n_head / c.n_kv_head;
        let q = q
            .reshape((1, seq, c.n_head, c.head_dim))?
            .transpose(1, 2)?
            .contiguous()?;
        let k = k
            .reshape((1, seq, c.n_kv_head, c.head_dim))?
            .transpose(1, 2)?
            .contiguous()?;
        let v = v
            .reshape((1, seq, c.n_kv_head, c.head_dim))?
            .transpose(1, 2)?
            .contiguous()?;
        let (q, k) = if c.rope_neox {
            (
                candle_nn::rotary_emb::rope(&q, cos, sin)?,
                candle_nn::rotary_emb::rope(&k, cos, sin)?,
            )
        } else {
            (
                candle_nn::rotary_emb::rope_i(&q, cos, sin)?,
                candle_nn::rotary_emb::rope_i(&k, cos, sin)?,
            )
        };
        let (k_all, v_all) = append_kv(slot, &k, &v, (pos, reserve), c.context_length)?;
        // Grouped-query attention without copying K/V: the `group` query heads that share a
        // KV head are stacked as extra rows against that head.
        // Scale the (small) queries rather than the (context-sized) scores.
        let q = (q.reshape((1, c.n_kv_head, group * seq, c.head_dim))? * scale)?;
        let att = q.matmul(&k_all.t()?)?;
        let att = match mask {
            Some(m) => att.broadcast_add(m)?,
            None => att,
        };
        let att = candle_nn::ops::softmax_last_dim(&att)?;
        let y = att.matmul(&v_all)?; // [1, n_kv, group*seq, hd]
        y.reshape((1, c.n_head, seq, c.head_dim))?
            .transpose(1, 2)?
            .reshape((1, seq, c.n_head * c.head_dim))
    }

    /// Additive causal mask for `seq` new rows against `total` keys, tiled for the GQA row
    /// stacking (`group` query heads per KV head).
    fn mask(&self, seq: usize, total: usize) -> candle_core::Result<Tensor> {
        let mut cache = self.masks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = cache.get(&(seq, total)) {
            return Ok(m.clone());
        }
        let pos = total - seq;
        let group = self.config.n_head / self.config.n_kv_head;
        let mut data = Vec::with_capacity(group * seq * total);
        for _ in 0..group {
            for i in 0..seq {
                data.extend((0..total).map(|j| if j > pos + i { f32::NEG_INFINITY } else { 0.0 }));
            }
        }
        let m = Tensor::from_vec(data, (group * seq, total), &self.device)?;
        if cache.len() > 64 {
            cache.clear();
        }
        cache.insert((seq, total), m.clone());
        Ok(m)
    }
}

fn rope_tables(c: &Config, device: &Device) -> candle_core::Result<(Tensor, Tensor)> {
    let inv: Vec<f32> = (0..c.head_dim)
        .step_by(2)
        .map(|i| 1.0 / c.rope_theta.powf(i as f32 / c.head_dim as f32))
        .collect();
    let n = c.context_length;
    let inv = Tensor::from_vec(inv, (1, c.head_dim / 2), device)?;
    let t = Tensor::arange(0u32, n as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((n, 1))?;
    let freqs = t.matmul(&inv)?;
    Ok((freqs.cos()?, freqs.sin()?))
}

/// Per-layer caches: host memory on the CPU (read by [`Attention`]), tensors elsewhere.
enum Layers {
    Host(Vec<HostKv>),
    Device(Vec<Option<(Tensor, Tensor)>>),
}

/// One sequence's part of [`Model::forward_batch`]: its new tokens and its cache.
pub struct BatchItem<'a> {
    pub tokens: &'a [u32],
    pub cache: &'a mut KvCache,
}

/// One sequence's keys and values, per layer: host vectors on the CPU (see
/// [`Attention`]), preallocated tensors of shape
/// `[1, n_kv, capacity, head_dim]` on other devices.
///
/// Deliberately not `Clone`: device buffers are written in place, so a shallow copy would
/// alias; [`KvCache::prefix_of`] makes real copies.
/// Roll back with [`KvCache::truncate`].
pub struct KvCache {
    layers: Layers,
    len: usize,
    /// Most positions to allocate (0: up to the context length).
    reserve: usize,
}

impl KvCache {
    /// Number of positions cached.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every position at or after `len` (no-op if `len >= self.len()`).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Caps the cache's geometric growth at `positions` (a scheduler that reserved
    /// `prompt + max_tokens` positions for a sequence never has it allocate more).
    pub fn reserve(&mut self, positions: usize) {
        self.reserve = positions;
    }

    /// A copy of the first `positions` positions of `other` (a cache of the same model), so a
    /// prompt that starts like an earlier one skips recomputing the shared part. `None` for
    /// device caches, or when `other` holds fewer positions. On the CPU every position's keys
    /// and values are computed row by row, independently of how the prompt was chunked or
    /// batched, so the copy equals what recomputing would give.
    pub fn prefix_of(other: &KvCache, positions: usize, width: usize) -> Option<KvCache> {
        let Layers::Host(layers) = &other.layers else {
            return None;
        };
        if positions > other.len {
            return None;
        }
        Some(KvCache {
            layers: Layers::Host(layers.iter().map(|l| l.prefix(positions, width)).collect()),
            len: positions,
            reserve: 0,
        })
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }
}

/// Writes `k`/`v` at `pos`, growing the buffer geometrically (up to `reserve` positions when
/// set), and returns views of `0..pos+seq`.
fn append_kv(
    slot: &mut Option<(Tensor, Tensor)>,
    k: &Tensor,
    v: &Tensor,
    (pos, reserve): (usize, usize),
    max: usize,
) -> candle_core::Result<(Tensor, Tensor)> {
    let (_, n_kv, seq, hd) = k.dims4()?;
    let need = pos + seq;
    let cap = slot.as_ref().map_or(0, |(kc, _)| kc.dim(2).unwrap_or(0));
    if need > cap {
        // Geometric growth, within the reservation when there is one.
        let limit = if reserve > 0 { reserve.min(max) } else { max };
        let new_cap = need.max(cap * 2).max(256).min(limit.max(need));
        let kn = Tensor::zeros((1, n_kv, new_cap, hd), k.dtype(), k.device())?;
        let vn = Tensor::zeros((1, n_kv, new_cap, hd), v.dtype(), v.device())?;
        if let Some((kc, vc)) = slot.as_ref() {
            if pos > 0 {
                kn.slice_set(&kc.narrow(2, 0, pos)?.contiguous()?, 2, 0)?;
                vn.slice_set(&vc.narrow(2, 0, pos)?.contiguous()?, 2, 0)?;
            }
        }
        *slot = Some((kn, vn));
    }
    let (kc, vc) = slot.as_ref().expect("allocated above");
    kc.slice_set(k, 2, pos)?;
    vc.slice_set(v, 2, pos)?;
    Ok((kc.narrow(2, 0, need)?, vc.narrow(2, 0, need)?))
}
