//! One decoder layer's weights and the operations on them, each on our CPU kernels where they
//! hold the weights and through candle otherwise: [`MatMul`] (Q8_0 and Q4_0/Q4_1 matrices),
//! [`Projections`] (matrices over the same input, fused into one where possible), [`RmsNorm`]
//! and [`Layer`].

use candle_core::quantized::QMatMul;
use candle_core::{DType, Module, Tensor};

use super::huge_pages::WeightBytes;
use super::q4::Q4Matrix;
use super::q8_0::Q8Matrix;
use super::read_ahead::ReadAhead;

/// A weight matrix: Q8_0 and Q4_0/Q4_1 on the CPU through our batched kernels, anything else
/// through candle.
pub(super) enum MatMul {
    Q8(Q8Matrix),
    Q4(Q4Matrix),
    Candle(QMatMul),
}

impl MatMul {
    pub(super) fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.forward_reading_ahead(x, None)
    }

    /// The weights' bytes where our kernels hold them.
    pub(super) fn weight_bytes(&mut self) -> Option<&mut WeightBytes> {
        match self {
            MatMul::Q8(m) => Some(m.groups_mut().bytes_mut()),
            MatMul::Q4(m) => Some(m.groups_mut().bytes_mut()),
            MatMul::Candle(_) => None,
        }
    }

    /// [`MatMul::forward`], prefetching `ahead` meanwhile where our kernels run it.
    fn forward_reading_ahead(
        &self,
        x: &Tensor,
        ahead: Option<&ReadAhead>,
    ) -> candle_core::Result<Tensor> {
        match self {
            MatMul::Q8(m) => m.groups().forward(x, ahead),
            MatMul::Q4(m) => m.groups().forward(x, ahead),
            MatMul::Candle(m) => m.forward(x),
        }
    }
}

/// Weight matrices applied to the same input (Q, K, V; gate and up), with optional biases.
/// Where our kernels hold them all they are one matrix: one activation quantization and one
/// pass over the thread pool instead of several. Each output column is computed exactly as in
/// its own matrix, so fusing changes no result.
pub(super) enum Projections {
    Fused { weight: MatMul, widths: Vec<usize> },
    Separate(Vec<MatMul>),
}

impl Projections {
    pub(super) fn new(parts: Vec<MatMul>) -> Self {
        // Fusable when one of our kernels holds every part (then each has a column count).
        let q4: Option<Vec<&Q4Matrix>> = parts
            .iter()
            .map(|p| match p {
                MatMul::Q4(m) => Some(m),
                _ => None,
            })
            .collect();
        let q8: Option<Vec<&Q8Matrix>> = parts
            .iter()
            .map(|p| match p {
                MatMul::Q8(m) => Some(m),
                _ => None,
            })
            .collect();
        let fused =
            match (q4, q8) {
                (Some(q4), _) => Q4Matrix::concat(&q4)
                    .map(|m| (MatMul::Q4(m), q4.iter().map(|m| m.n()).collect())),
                (_, Some(q8)) => Q8Matrix::concat(&q8)
                    .map(|m| (MatMul::Q8(m), q8.iter().map(|m| m.n()).collect())),
                _ => None,
            };
        match fused {
            Some((weight, widths)) => Projections::Fused { weight, widths },
            None => Projections::Separate(parts),
        }
    }

    fn weight_bytes(&mut self) -> Vec<&mut WeightBytes> {
        match self {
            Projections::Fused { weight, .. } => weight.weight_bytes().into_iter().collect(),
            Projections::Separate(parts) => {
                parts.iter_mut().filter_map(MatMul::weight_bytes).collect()
            }
        }
    }

    /// Each matrix's product with `x` (`[.., k]`), in order.
    pub(super) fn forward(&self, x: &Tensor) -> candle_core::Result<Vec<Tensor>> {
        match self {
            Projections::Separate(parts) => parts.iter().map(|m| m.forward(x)).collect(),
            Projections::Fused { weight, widths } => {
                let y = weight.forward(x)?;
                let last = y.rank() - 1;
                let mut at = 0;
                widths
                    .iter()
                    .map(|&w| {
                        let part = y.narrow(last, at, w);
                        at += w;
                        part
                    })
                    .collect()
            }
        }
    }
}

pub(super) fn add_bias(y: Tensor, bias: &Option<Tensor>) -> candle_core::Result<Tensor> {
    match bias {
        Some(b) => y.broadcast_add(b),
        None => Ok(y),
    }
}

pub(super) struct RmsNorm {
    weight: Tensor,
    eps: f32,
    /// The CPU's several-rows-at-once version (same bits as candle's).
    host: Option<super::norm::RmsNorm>,
}

impl RmsNorm {
    pub(super) fn new(weight: Tensor, eps: f32) -> candle_core::Result<Self> {
        let host = (weight.device().is_cpu() && weight.dtype() == DType::F32 && weight.rank() == 1)
            .then(|| weight.to_vec1::<f32>())
            .transpose()?
            .map(|alpha| super::norm::RmsNorm::new(alpha, eps));
        Ok(Self { weight, eps, host })
    }

    pub(super) fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match &self.host {
            Some(norm) if x.dtype() == DType::F32 && x.is_contiguous() => norm.forward(x),
            _ => candle_nn::ops::rms_norm(x, &self.weight, self.eps),
        }
    }
}

impl Layer {
    /// The bytes of the weights our kernels hold, in the order the forward pass reads them.
    pub(super) fn weight_bytes(&mut self) -> Vec<&mut WeightBytes> {
        let mut all = self.qkv.weight_bytes();
        all.extend(self.wo.weight_bytes());
        all.extend(self.gate_up.weight_bytes());
        all.extend(self.down.weight_bytes());
        all
    }

    /// Q, K and V of `h`, biases added.
    pub(super) fn qkv(&self, h: &Tensor) -> candle_core::Result<[Tensor; 3]> {
        let parts: Vec<Tensor> = self
            .qkv
            .forward(h)?
            .into_iter()
            .zip(&self.qkv_bias)
            .map(|(y, bias)| add_bias(y, bias))
            .collect::<candle_core::Result<_>>()?;
        parts
            .try_into()
            .map_err(|_| candle_core::Error::Msg("Q, K and V expected".into()))
    }

    /// Q, K and V of `h` side by side in each row (`[.., q | k | v]`, contiguous): the fused
    /// projection's own output where there are no biases, else the parts joined.
    pub(super) fn qkv_rows(
        &self,
        h: &Tensor,
        ahead: Option<&ReadAhead>,
    ) -> candle_core::Result<Tensor> {
        match &self.qkv {
            Projections::Fused { weight, .. } if self.qkv_bias.iter().all(Option::is_none) => {
                weight.forward_reading_ahead(h, ahead)?.contiguous()
            }
            _ => Tensor::cat(&self.qkv(h)?, h.rank() - 1)?.contiguous(),
        }
    }
}

/// One decoder layer's weights: attention (norm, Q/K/V, output) and feed-forward (norm, gate/up,
/// down).
pub(super) struct Layer {
    pub(super) attn_norm: RmsNorm,
    /// Q, K and V.
    pub(super) qkv: Projections,
    /// Q, K and V biases (Qwen2).
    pub(super) qkv_bias: [Option<Tensor>; 3],
    pub(super) wo: MatMul,
    pub(super) wo_bias: Option<Tensor>,
    pub(super) ffn_norm: RmsNorm,
    /// Gate and up.
    pub(super) gate_up: Projections,
    pub(super) down: MatMul,
}
