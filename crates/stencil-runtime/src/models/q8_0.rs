//! Q8_0 matrix multiplication on the CPU for many activation rows at once.
//!
//! candle's CPU kernel computes a batch row by row, at the cost of one f16 conversion call per
//! block and row, so a batch of 16 decoding sequences costs almost 16 single steps. This kernel
//! keeps the weights as `i8` quants with `f32` scales (converted once, at load) and computes
//! four activation rows per pass over a weight column, which turns a batch into one pass over
//! the weights.
//!
//! Every output element is computed with exactly the arithmetic of candle's `vec_dot` for Q8_0
//! (AVX2: the same instructions in the same order; otherwise its scalar loop), on activations
//! quantized exactly as candle's `BlockQ8_0::from_float` does. So results are bit-identical to
//! candle's `QMatMul` and independent of how many rows run together: a sequence decodes the same
//! tokens alone or in a batch (`tests` below check both properties).

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};
use half::f16;

/// Values per block.
const QK: usize = 32;
/// Bytes of one GGUF Q8_0 block: an f16 scale, then 32 `i8` quants.
const BLOCK_BYTES: usize = 2 + QK;
/// Activation rows computed together against one weight column.
const ROW_TILE: usize = 4;

/// A Q8_0 weight matrix of `n` output columns over `k` inputs (GGUF layout: one row of
/// blocks per output), unpacked for [`Q8Matrix::matmul`].
pub struct Q8Matrix {
    n: usize,
    k: usize,
    /// Scales, `n * k / 32`.
    scales: Vec<f32>,
    /// Quants, `n * k`.
    quants: Vec<i8>,
}

impl Q8Matrix {
    /// Unpacks a 2-D Q8_0 tensor (`[n, k]`); `None` for any other tensor.
    pub fn from_qtensor(t: &QTensor) -> candle_core::Result<Option<Self>> {
        let dims = t.shape().dims();
        if t.dtype() != GgmlDType::Q8_0 || dims.len() != 2 || !dims[1].is_multiple_of(QK) {
            return Ok(None);
        }
        let (n, k) = (dims[0], dims[1]);
        let data = t.data()?;
        let blocks = n * k / QK;
        if data.len() != blocks * BLOCK_BYTES {
            candle_core::bail!(
                "Q8_0 tensor of shape {dims:?} has {} bytes, expected {}",
                data.len(),
                blocks * BLOCK_BYTES
            );
        }
        let mut scales = Vec::with_capacity(blocks);
        let mut quants = Vec::with_capacity(n * k);
        for b in data.chunks_exact(BLOCK_BYTES) {
            scales.push(f16::from_le_bytes([b[0], b[1]]).to_f32());
            quants.extend(b[2..].iter().map(|&q| q as i8));
        }
        Ok(Some(Self {
            n,
            k,
            scales,
            quants,
        }))
    }

    /// The matrices' columns side by side (one matmul instead of several over the same
    /// input); `None` unless all have the same `k`.
    pub fn concat(parts: &[&Self]) -> Option<Self> {
        let k = parts.first()?.k;
        if parts.iter().any(|p| p.k != k) {
            return None;
        }
        Some(Self {
            n: parts.iter().map(|p| p.n).sum(),
            k,
            scales: parts
                .iter()
                .flat_map(|p| p.scales.iter().copied())
                .collect(),
            quants: parts
                .iter()
                .flat_map(|p| p.quants.iter().copied())
                .collect(),
        })
    }

    /// Output columns.
    pub fn n(&self) -> usize {
        self.n
    }

    /// `x @ W^T` for `x` of shape `[.., k]` (f32): `[.., n]`.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.apply_op1_no_bwd(self)
    }

    /// `out[r * n + c] = dot(lhs row r, weight column c)` for the `m` rows of `lhs`.
    pub fn matmul(&self, lhs: &[f32], m: usize, out: &mut [f32]) {
        let (n, k) = (self.n, self.k);
        assert_eq!(lhs.len(), m * k, "lhs is not {m} x {k}");
        let act = Activations::quantize(lhs, m, k);
        super::column_jobs((m, n, k), out, |cols, out| {
            for c in cols {
                let mut col = [0f32; ROW_TILE];
                let w = self.column(c);
                let mut r = 0;
                while r < m {
                    let rows = (m - r).min(ROW_TILE);
                    dot_rows(w, &act, r, rows, &mut col);
                    for (i, v) in col[..rows].iter().enumerate() {
                        // SAFETY: element (r + i, c) is in this job's column, inside the
                        // `m x n` output.
                        unsafe { *out.add((r + i) * n + c) = *v };
                    }
                    r += rows;
                }
            }
        });
    }

    fn column(&self, c: usize) -> Column<'_> {
        let kb = self.k / QK;
        Column {
            scales: &self.scales[c * kb..(c + 1) * kb],
            quants: &self.quants[c * self.k..(c + 1) * self.k],
        }
    }
}

#[derive(Clone, Copy)]
struct Column<'a> {
    scales: &'a [f32],
    quants: &'a [i8],
}

/// Activation rows quantized to Q8_0 exactly as candle's `BlockQ8_0::from_float`.
struct Activations {
    k: usize,
    scales: Vec<f32>,
    quants: Vec<i8>,
}

impl Activations {
    fn quantize(lhs: &[f32], m: usize, k: usize) -> Self {
        let mut scales = Vec::with_capacity(m * k / QK);
        let mut quants = Vec::with_capacity(m * k);
        for xs in lhs.chunks_exact(QK) {
            let amax = xs.iter().fold(0f32, |a, x| a.max(x.abs()));
            let d = amax / ((1 << 7) - 1) as f32;
            let id = if d != 0f32 { 1. / d } else { 0. };
            scales.push(f16::from_f32(d).to_f32());
            quants.extend(xs.iter().map(|&x| f32::round(x * id) as i8));
        }
        Self { k, scales, quants }
    }

    fn row(&self, r: usize) -> (&[f32], &[i8]) {
        let kb = self.k / QK;
        (
            &self.scales[r * kb..(r + 1) * kb],
            &self.quants[r * self.k..(r + 1) * self.k],
        )
    }
}

/// Dots of `rows` (at most [`ROW_TILE`]) activation rows from `first` with one weight column.
fn dot_rows(w: Column<'_>, act: &Activations, first: usize, rows: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::simd() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked at run time).
        unsafe { avx2::dot_rows(w, act, first, rows, out) };
        return;
    }
    for (i, o) in out[..rows].iter_mut().enumerate() {
        *o = dot_scalar(&w, act.row(first + i));
    }
}

/// candle's `vec_dot_unopt` for Q8_0.
fn dot_scalar(w: &Column<'_>, (a_scales, a_quants): (&[f32], &[i8])) -> f32 {
    let mut sum = 0f32;
    for (b, (&wd, &ad)) in w.scales.iter().zip(a_scales).enumerate() {
        let wq = &w.quants[b * QK..(b + 1) * QK];
        let aq = &a_quants[b * QK..(b + 1) * QK];
        let s: i32 = wq.iter().zip(aq).map(|(&x, &y)| x as i32 * y as i32).sum();
        sum += s as f32 * wd * ad;
    }
    sum
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Activations, Column, QK, ROW_TILE};
    use std::arch::x86_64::*;

    /// candle's `avx::vec_dot_q8_0_q8_0` for up to four rows at once: per row and block the
    /// same `sign`/`maddubs`/`madd`/`cvt`/`fmadd` sequence, the same horizontal sum.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_rows(
        w: Column<'_>,
        act: &Activations,
        first: usize,
        rows: usize,
        out: &mut [f32],
    ) {
        debug_assert!(rows <= ROW_TILE);
        // SAFETY (all four): same CPU features; `rows` rows exist from `first`.
        unsafe {
            match rows {
                4 => tile::<4>(w, act, first, out),
                3 => tile::<3>(w, act, first, out),
                2 => tile::<2>(w, act, first, out),
                _ => tile::<1>(w, act, first, out),
            }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile<const R: usize>(
        w: Column<'_>,
        act: &Activations,
        first: usize,
        out: &mut [f32],
    ) {
        let mut acc = [_mm256_setzero_ps(); R];
        let rows: [(&[f32], &[i8]); R] = std::array::from_fn(|i| act.row(first + i));
        let ones = _mm256_set1_epi16(1);
        for (b, &wd) in w.scales.iter().enumerate() {
            // SAFETY: every block has QK quants in the column and in each row.
            let bx = unsafe { _mm256_loadu_si256(w.quants.as_ptr().add(b * QK) as *const __m256i) };
            let ax = _mm256_sign_epi8(bx, bx);
            for i in 0..R {
                let (a_scales, a_quants) = rows[i];
                let d = _mm256_set1_ps(wd * a_scales[b]);
                let by =
                    unsafe { _mm256_loadu_si256(a_quants.as_ptr().add(b * QK) as *const __m256i) };
                let sy = _mm256_sign_epi8(by, bx);
                let dot = _mm256_maddubs_epi16(ax, sy);
                let q = _mm256_cvtepi32_ps(_mm256_madd_epi16(ones, dot));
                acc[i] = _mm256_fmadd_ps(d, q, acc[i]);
            }
        }
        for i in 0..R {
            out[i] = hsum(acc[i]);
        }
    }

    #[target_feature(enable = "avx2,fma")]
    fn hsum(x: __m256) -> f32 {
        let res = _mm256_extractf128_ps(x, 1);
        let res = _mm_add_ps(res, _mm256_castps256_ps128(x));
        let res = _mm_add_ps(res, _mm_movehl_ps(res, res));
        let res = _mm_add_ss(res, _mm_movehdup_ps(res));
        _mm_cvtss_f32(res)
    }
}

impl CustomOp1 for Q8Matrix {
    fn name(&self) -> &'static str {
        "stencil-q8_0-matmul"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (k, n) = (self.k, self.n);
        super::weight_matmul_fwd("Q8_0", (k, n), storage, layout, |lhs, m, out| {
            self.matmul(lhs, m, out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::QMatMul;
    use candle_core::{Device, Module};
    use std::sync::Arc;

    use crate::models::test_values as values;

    fn flat(t: candle_core::Result<Tensor>) -> Vec<f32> {
        t.unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap()
    }

    fn pair(n: usize, k: usize, seed: u64) -> (Q8Matrix, QMatMul) {
        let dev = Device::Cpu;
        let w = Tensor::from_vec(values(n * k, seed, 0.5), (n, k), &dev).unwrap();
        let q = QTensor::quantize(&w, GgmlDType::Q8_0).unwrap();
        let ours = Q8Matrix::from_qtensor(&q).unwrap().expect("a Q8_0 matrix");
        (ours, QMatMul::from_arc(Arc::new(q)).unwrap())
    }

    #[test]
    fn bit_identical_to_candle_for_any_row_count() {
        // Odd sizes: a column count that is no multiple of 4 or 16, rows beyond one tile.
        for (n, k, seed) in [(37, 64, 1), (576, 576, 2), (5, 1536, 3)] {
            let (ours, theirs) = pair(n, k, seed);
            for m in [1, 2, 3, 4, 5, 9, 16] {
                let mut x = values(m * k, seed + m as u64, 3.0);
                // Blocks of zeros and of extreme values (the saturating i16 sums).
                x[..QK].iter_mut().for_each(|v| *v = 0.0);
                if k > QK {
                    x[QK..2 * QK].iter_mut().for_each(|v| *v = -100.0);
                }
                let xt = Tensor::from_vec(x.clone(), (1, m, k), &Device::Cpu).unwrap();
                let a = flat(ours.forward(&xt));
                let b = flat(theirs.forward(&xt));
                assert_eq!(a.len(), m * n);
                let differ = a
                    .iter()
                    .zip(&b)
                    .position(|(x, y)| x.to_bits() != y.to_bits());
                assert_eq!(
                    differ, None,
                    "n {n} k {k} m {m}: first difference at {differ:?}"
                );
                // Each row alone gives the same row.
                for r in 0..m {
                    let row =
                        Tensor::from_vec(x[r * k..(r + 1) * k].to_vec(), (1, 1, k), &Device::Cpu)
                            .unwrap();
                    let alone = flat(ours.forward(&row));
                    assert!(alone
                        .iter()
                        .zip(&a[r * n..(r + 1) * n])
                        .all(|(x, y)| x.to_bits() == y.to_bits()));
                }
            }
        }
    }

    #[test]
    fn scalar_path_matches_candle_within_rounding() {
        let (ours, theirs) = pair(8, 96, 9);
        let x = values(2 * 96, 4, 1.0);
        let act = Activations::quantize(&x, 2, 96);
        let xt = Tensor::from_vec(x, (2, 96), &Device::Cpu).unwrap();
        let b = theirs.forward(&xt).unwrap().to_vec2::<f32>().unwrap();
        for (r, row) in b.iter().enumerate() {
            for (c, &want) in row.iter().enumerate() {
                let s = dot_scalar(&ours.column(c), act.row(r));
                assert!(
                    (s - want).abs() <= 1e-4 * want.abs().max(1.0),
                    "{s} vs {want}"
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
