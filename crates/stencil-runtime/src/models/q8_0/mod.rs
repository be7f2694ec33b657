//! Q8_0 matrix multiplication on the CPU for many activation rows at once.
//!
//! candle's CPU kernel computes a batch row by row, at the cost of one f16 conversion call per
//! block and row, so a batch of 16 decoding sequences costs almost 16 single steps. This kernel
//! keeps the weights' quants and scales as stored, regrouped in groups of sixteen columns
//! (`models/quant.rs`), and turns a batch into one pass over the weights.
//!
//! Activations are quantized per block to `i8` with an f32 scale `s` (as for [`super::q4`]);
//! a block's dot product is `d * s * Σ w p` with the integer sum exact (AVX-512 VNNI: `dpbusd`
//! of `w + 128` minus `128 Σ p`; AVX2: `sign`/`maddubs`/`madd`). The float part of an output
//! is one fixed chain per column, `acc = (Σ w p · s) · d + acc` block by block, which the
//! scalar, AVX2 and AVX-512 VNNI paths all reproduce step for step: every path gives the same
//! bits on any CPU, and a row's result does not depend on which other rows run with it.

use super::quant::{Activations, Format, Group, GroupOut, Groups, Kernel, Row, GROUP, QK};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Tensor;

/// Bytes of one GGUF Q8_0 block: an f16 scale, then 32 `i8` quants.
const BLOCK_BYTES: usize = 2 + QK;
/// Bytes of one block of a group: sixteen `d` (f16), then the quants as eight runs of 64
/// bytes; run `u` holds quants `4u..4u + 4` of each column's block.
const GROUP_BLOCK: usize = GROUP * 2 + GROUP * QK;
/// Where a group block's quants start.
const QUANTS: usize = GROUP * 2;

/// A Q8_0 weight matrix of `n` output columns over `k` inputs, for [`Q8Matrix::matmul`].
pub struct Q8Matrix {
    groups: Groups<Q8>,
}

/// The Q8_0 group layout and kernels.
pub(crate) struct Q8;

impl Q8Matrix {
    /// Takes a 2-D Q8_0 tensor (`[n, k]`); `None` for any other tensor.
    pub fn from_qtensor(t: &QTensor) -> candle_core::Result<Option<Self>> {
        if t.dtype() != GgmlDType::Q8_0 {
            return Ok(None);
        }
        let groups = Groups::regroup(t, BLOCK_BYTES, |dst, lane, block| {
            dst[2 * lane..2 * lane + 2].copy_from_slice(&block[..2]);
            for u in 0..QK / 4 {
                let to = QUANTS + u * 4 * GROUP + 4 * lane;
                dst[to..to + 4].copy_from_slice(&block[2 + 4 * u..2 + 4 * u + 4]);
            }
            true
        })?;
        Ok(groups.map(|groups| Self { groups }))
    }

    /// The matrices' columns side by side (one matmul instead of several over the same
    /// input); `None` unless all have the same `k` and all but the last whole groups.
    pub fn concat(parts: &[&Self]) -> Option<Self> {
        let parts: Vec<&Groups<Q8>> = parts.iter().map(|p| &p.groups).collect();
        Some(Self {
            groups: Groups::concat(&parts)?,
        })
    }

    /// Output columns.
    pub fn n(&self) -> usize {
        self.groups.n()
    }

    /// `x @ W^T` for `x` of shape `[.., k]` (f32): `[.., n]`.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.groups.forward(x, None)
    }

    pub(crate) fn groups(&self) -> &Groups<Q8> {
        &self.groups
    }

    pub(crate) fn groups_mut(&mut self) -> &mut Groups<Q8> {
        &mut self.groups
    }

    /// `out[r * n + c] = dot(lhs row r, weight column c)` for the `m` rows of `lhs`.
    pub fn matmul(&self, lhs: &[f32], m: usize, out: &mut [f32]) {
        self.groups.matmul_with(Kernel::best(), lhs, m, out)
    }
}

impl Format for Q8 {
    const GROUP_BLOCK: usize = GROUP_BLOCK;
    const NAME: &'static str = "Q8_0";
    const OP: &'static str = "stencil-q8_0-matmul";

    /// The kernels' arithmetic for the column in lane `lane` of a group (`blocks`) and one row:
    /// per block the exact integer sum `Σ w p`, then `acc = (sum · s) · d + acc` (a multiply, then
    /// an FMA).
    fn dot_scalar(blocks: &[u8], lane: usize, a: Row<'_>) -> f32 {
        let mut acc = 0f32;
        for (b, block) in blocks.chunks_exact(GROUP_BLOCK).enumerate() {
            let d = half::f16::from_le_bytes([block[2 * lane], block[2 * lane + 1]]).to_f32();
            let p = &a.quants[b * QK..(b + 1) * QK];
            let mut sum = 0i32;
            for (j, &p) in p.iter().enumerate() {
                let w = block[QUANTS + j / 4 * 4 * GROUP + 4 * lane + j % 4] as i8;
                sum += w as i32 * p as i32;
            }
            acc = (sum as f32 * a.scales[b]).mul_add(d, acc);
        }
        acc
    }

    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2(group: Group<'_>, act: &Activations, m: usize, out: &mut GroupOut) {
        // SAFETY: the caller's.
        unsafe { avx2::group(group, act, m, out) }
    }

    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512(group: Group<'_>, act: &Activations, m: usize, out: &mut GroupOut) {
        // SAFETY: the caller's.
        unsafe { avx512::group(group, act, m, out) }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::quant::assert_kernels_match_the_reference;
    use crate::models::read_ahead::ReadAhead;
    use candle_core::quantized::QMatMul;
    use candle_core::{Device, Module};
    use std::sync::Arc;

    use crate::models::test_values as values;

    fn pair(n: usize, k: usize, seed: u64) -> (Q8Matrix, QMatMul) {
        let dev = Device::Cpu;
        let w = Tensor::from_vec(values(n * k, seed, 0.5), (n, k), &dev).unwrap();
        let q = QTensor::quantize(&w, GgmlDType::Q8_0).unwrap();
        let ours = Q8Matrix::from_qtensor(&q).unwrap().expect("a Q8_0 matrix");
        (ours, QMatMul::from_arc(Arc::new(q)).unwrap())
    }

    /// Every kernel this CPU runs (AVX-512 VNNI, AVX2, scalar) against the scalar reference.
    #[test]
    fn simd_and_scalar_paths_are_bit_identical_for_any_row_count() {
        eprintln!("kernels checked: {:?}", Kernel::available());
        // Column counts that are no multiple of a group; one block, many blocks.
        for (n, k, seed) in [(37, 64, 1), (576, 576, 2), (5, 1536, 3), (3, 32, 4)] {
            let (ours, _) = pair(n, k, seed);
            assert_kernels_match_the_reference(&ours.groups, seed, "Q8_0");
        }
    }

    #[test]
    fn close_to_candle() {
        let (n, k, m) = (40, 576, 3);
        let (ours, theirs) = pair(n, k, 9);
        let x = values(m * k, 4, 2.0);
        let mut got = vec![0f32; m * n];
        ours.matmul(&x, m, &mut got);
        // The forward path writes a fresh, never zeroed output, prefetching other memory
        // meanwhile or not: the same values.
        assert_eq!(ours.groups.product(&x, m, None), got);
        let ahead = ReadAhead::new([&x[..], &got[..]]);
        assert_eq!(ours.groups.product(&x, m, Some(&ahead)), got);
        let xt = Tensor::from_vec(x.clone(), (m, k), &Device::Cpu).unwrap();
        let candle = theirs.forward(&xt).unwrap().to_vec2::<f32>().unwrap();
        for (r, row) in candle.iter().enumerate() {
            let xs = &x[r * k..(r + 1) * k];
            let norm: f32 = xs.iter().map(|v| v.abs()).sum::<f32>() * 0.5;
            for (c, &want) in row.iter().enumerate() {
                // candle rounds the activation scales to f16; both round the activations.
                let ours = got[r * n + c];
                assert!(
                    (ours - want).abs() <= 2e-3 * norm.max(1.0),
                    "({r}, {c}): {ours} vs candle {want}"
                );
            }
        }
    }

    #[test]
    fn other_tensors_are_left_to_candle() {
        let w = Tensor::zeros((4, 64), candle_core::DType::F32, &Device::Cpu).unwrap();
        let q = QTensor::quantize(&w, GgmlDType::Q4_0).unwrap();
        assert!(Q8Matrix::from_qtensor(&q).unwrap().is_none());
    }
}
