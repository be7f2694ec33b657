//! Q4_0 / Q4_1 matrix multiplication on the CPU, weights kept in their stored 4-bit form.
//!
//! candle has no SIMD kernel for Q4_1 (its scalar loop made the default model decode ~4x
//! slower than llama.cpp), so the loader used to re-quantize such files to Q8_0: twice the
//! memory read per token and a lossy second rounding. This kernel reads the file's own nibbles.
//!
//! Both formats are affine per block of 32: `w = d * q + m` with `q` in `0..16` (Q4_0 is the
//! case `m = -8 d`, converted exactly at load). Activations are quantized per block to `i8`
//! with a scale `a = s * p` (llama.cpp's Q8_1), and a block's dot product is
//! `d * s * Σ q p + m * (s * Σ p)`.
//!
//! Columns go in groups of sixteen (`models/quant.rs`): per block, `dpbusd` (AVX2: `maddubs`)
//! of each column's nibbles by four activation bytes broadcast to every lane gives the sixteen
//! columns' integer sums, and each row then needs one conversion, one multiply and two FMAs
//! per block for all sixteen columns. The integer sums are exact; the
//! float part of an output is one fixed chain per column (`acc = (Σ q p · s) · d + acc` and
//! `macc = m · (s Σ p) + macc` block by block, then `acc + macc`), which the scalar, AVX2 and
//! AVX-512 VNNI paths all reproduce step for step: every path gives the same bits on any CPU,
//! and a row's result does not depend on which other rows run with it.

use super::quant::{Activations, Format, Group, GroupOut, Groups, Kernel, Row, GROUP, QK};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Tensor;
use half::f16;
/// Bytes of one block of a group: sixteen `d` (f16), sixteen `m` (f16), then the nibbles as
/// four runs of 64 bytes; run `u` holds bytes `4u..4u + 4` of each column's block (GGUF order:
/// byte `j` has value `j` in its low nibble and value `j + 16` in its high one).
const GROUP_BLOCK: usize = GROUP * 4 + GROUP * QK / 2;
/// Where a group block's nibbles start.
const NIBBLES: usize = GROUP * 4;

/// A Q4_0 or Q4_1 weight matrix of `n` output columns over `k` inputs, for
/// [`Q4Matrix::matmul`].
pub struct Q4Matrix {
    groups: Groups<Q4>,
}

/// The Q4_0/Q4_1 group layout and kernels.
pub(crate) struct Q4;

impl Q4Matrix {
    /// Takes a 2-D Q4_0 or Q4_1 tensor (`[n, k]`); `None` for any other tensor.
    pub fn from_qtensor(t: &QTensor) -> candle_core::Result<Option<Self>> {
        let header = match t.dtype() {
            GgmlDType::Q4_0 => 2,
            GgmlDType::Q4_1 => 4,
            _ => return Ok(None),
        };
        let groups = Groups::regroup(t, header + QK / 2, |dst, lane, block| {
            dst[2 * lane..2 * lane + 2].copy_from_slice(&block[..2]);
            let m = if header == 4 {
                [block[2], block[3]]
            } else {
                // Q4_0 stores `d * (q - 8)`: m = -8 d, exact in f16 unless it overflows
                // (then candle's kernel takes the tensor).
                let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
                let m = f16::from_f32(-8.0 * d);
                if m.to_f32() != -8.0 * d {
                    return false;
                }
                m.to_le_bytes()
            };
            dst[2 * GROUP + 2 * lane..2 * GROUP + 2 * lane + 2].copy_from_slice(&m);
            for u in 0..4 {
                let to = NIBBLES + u * 4 * GROUP + 4 * lane;
                dst[to..to + 4].copy_from_slice(&block[header + 4 * u..header + 4 * u + 4]);
            }
            true
        })?;
        Ok(groups.map(|groups| Self { groups }))
    }

    /// The matrices' columns side by side (one matmul instead of several over the same
    /// input); `None` unless all have the same `k` and all but the last whole groups.
    pub fn concat(parts: &[&Self]) -> Option<Self> {
        let parts: Vec<&Groups<Q4>> = parts.iter().map(|p| &p.groups).collect();
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

    pub(crate) fn groups(&self) -> &Groups<Q4> {
        &self.groups
    }

    pub(crate) fn groups_mut(&mut self) -> &mut Groups<Q4> {
        &mut self.groups
    }

    /// `out[r * n + c] = dot(lhs row r, weight column c)` for the `m` rows of `lhs`.
    pub fn matmul(&self, lhs: &[f32], m: usize, out: &mut [f32]) {
        self.groups.matmul_with(Kernel::best(), lhs, m, out)
    }
}

impl Format for Q4 {
    const GROUP_BLOCK: usize = GROUP_BLOCK;
    const NAME: &'static str = "Q4";
    const OP: &'static str = "stencil-q4-matmul";

    /// The kernels' arithmetic for the column in lane `lane` of a group (`blocks`) and one row:
    /// per block the exact integer sum `Σ q p`, then `acc = (sum · s) · d + acc` (a multiply,
    /// then an FMA) and `macc = m · (s Σ p) + macc` (an FMA); the result is `acc + macc`.
    fn dot_scalar(blocks: &[u8], lane: usize, a: Row<'_>) -> f32 {
        let (mut acc, mut macc) = (0f32, 0f32);
        for (b, block) in blocks.chunks_exact(GROUP_BLOCK).enumerate() {
            let half = |at: usize| f16::from_le_bytes([block[at], block[at + 1]]).to_f32();
            let (d, m) = (half(2 * lane), half(2 * GROUP + 2 * lane));
            let p = &a.quants[b * QK..(b + 1) * QK];
            let mut sum = 0i32;
            for u in 0..4 {
                for j in 0..4 {
                    let byte = block[NIBBLES + u * 4 * GROUP + 4 * lane + j];
                    sum += (byte & 0x0F) as i32 * p[4 * u + j] as i32;
                    sum += (byte >> 4) as i32 * p[QK / 2 + 4 * u + j] as i32;
                }
            }
            acc = (sum as f32 * a.scales[b]).mul_add(d, acc);
            macc = m.mul_add(a.sums[b], macc);
        }
        acc + macc
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

    fn quantized(n: usize, k: usize, seed: u64, dtype: GgmlDType) -> QTensor {
        let w = Tensor::from_vec(values(n * k, seed, 0.5), (n, k), &Device::Cpu).unwrap();
        QTensor::quantize(&w, dtype).unwrap()
    }

    /// The exact value of every weight, as f64.
    fn dequantized(q: &QTensor) -> Vec<f64> {
        let t = q.dequantize(&Device::Cpu).unwrap();
        let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        v.into_iter().map(f64::from).collect()
    }

    /// Every kernel this CPU runs (AVX-512 VNNI, AVX2, scalar) against the scalar reference.
    #[test]
    fn simd_and_scalar_paths_are_bit_identical_for_any_row_count() {
        eprintln!("kernels checked: {:?}", Kernel::available());
        for dtype in [GgmlDType::Q4_0, GgmlDType::Q4_1] {
            // Column counts that are no multiple of a group; one block, many blocks.
            for (n, k, seed) in [
                (37, 64, 1),
                (576, 576, 2),
                (5, 1536, 3),
                (11, 416, 4),
                (3, 32, 5),
            ] {
                let ours = Q4Matrix::from_qtensor(&quantized(n, k, seed, dtype))
                    .unwrap()
                    .expect("a Q4 matrix");
                assert_kernels_match_the_reference(&ours.groups, seed, &format!("{dtype:?}"));
            }
        }
    }

    #[test]
    fn close_to_the_exact_product_and_to_candle() {
        for dtype in [GgmlDType::Q4_0, GgmlDType::Q4_1] {
            let (n, k, m) = (24, 576, 3);
            let q = quantized(n, k, 7, dtype);
            let exact_w = dequantized(&q);
            let ours = Q4Matrix::from_qtensor(&q).unwrap().expect("a Q4 matrix");
            let theirs = QMatMul::from_arc(Arc::new(q)).unwrap();
            let x = values(m * k, 11, 2.0);
            let mut got = vec![0f32; m * n];
            ours.matmul(&x, m, &mut got);
            // The forward path writes a fresh, never zeroed output, prefetching other memory
            // meanwhile or not: the same values.
            assert_eq!(ours.groups.product(&x, m, None), got);
            let ahead = ReadAhead::new([&x[..], &got[..]]);
            assert_eq!(ours.groups.product(&x, m, Some(&ahead)), got);
            let xt = Tensor::from_vec(x.clone(), (m, k), &Device::Cpu).unwrap();
            let candle = theirs.forward(&xt).unwrap().to_vec2::<f32>().unwrap();
            for r in 0..m {
                for c in 0..n {
                    let xs = &x[r * k..(r + 1) * k];
                    let ws = &exact_w[c * k..(c + 1) * k];
                    let exact: f64 = xs.iter().zip(ws).map(|(&a, &b)| a as f64 * b).sum();
                    let norm: f64 = xs.iter().zip(ws).map(|(&a, &b)| (a as f64 * b).abs()).sum();
                    let ours = got[r * n + c] as f64;
                    // Activation quantization error: at most half a step (amax / 254) per value.
                    assert!(
                        (ours - exact).abs() <= 0.01 * norm,
                        "{dtype:?} ({r}, {c}): {ours} vs exact {exact}"
                    );
                    // candle quantizes activations the same way (Q8_1, but with f16 scales).
                    let c_val = candle[r][c] as f64;
                    assert!(
                        (ours - c_val).abs() <= 2e-3 * norm.max(1.0),
                        "{dtype:?} ({r}, {c}): {ours} vs candle {c_val}"
                    );
                }
            }
        }
    }

    #[test]
    fn other_tensors_are_left_to_others() {
        let w = Tensor::zeros((4, 64), candle_core::DType::F32, &Device::Cpu).unwrap();
        let q = QTensor::quantize(&w, GgmlDType::Q8_0).unwrap();
        assert!(Q4Matrix::from_qtensor(&q).unwrap().is_none());
    }
}
