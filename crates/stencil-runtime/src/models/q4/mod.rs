//! Q4_0 / Q4_1 matrix multiplication on the CPU, weights kept in their stored 4-bit form.
//!
//! candle has no SIMD kernel for Q4_1 (its scalar loop made the default model decode ~4x
//! slower than llama.cpp), so the loader used to re-quantize such files to Q8_0: twice the
//! memory read per token and a lossy second rounding. This kernel reads the file's own nibbles.
//!
//! Both formats are affine per block of 32: `w = d * q + m` with `q` in `0..16` (Q4_0 is the
//! case `m = -8 d`, converted exactly at load). Activations are quantized per block to `i8`
//! with a scale `a = s * p` (llama.cpp's Q8_1), and a block's dot product is
//! `d * s * Σ q p + m * (s * Σ p)`. The integer sums are exact (AVX2 `maddubs` of unsigned
//! nibbles by signed bytes cannot saturate: 4 · 15 · 128 < 2^15; AVX-512 VNNI's `dpbusd` sums
//! the same products into the same lanes without saturating at all); the float part runs in a
//! fixed order (sixteen lanes, four per block, pairs of blocks taking turns between the low and
//! the high eight, each lane a chain of FMAs, then a fixed pairwise sum), which every path
//! (scalar, AVX2, AVX-512 VNNI) reproduces step for step: all give bit-identical results on
//! any CPU, and a row's result does not depend on which other rows run with it.

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};
use half::f16;

/// Values per block.
const QK: usize = 32;
/// Bytes per block: `d` and `m` (f16) and 16 bytes of nibbles, as in a GGUF Q4_1 block.
const BLOCK: usize = 4 + QK / 2;
/// Activation rows computed together against one weight column.
const ROW_TILE: usize = 4;
/// FMA lanes of the float accumulation (one AVX2 register of f32).
const LANES: usize = 8;

/// The code paths of the matmul; all give the same bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kernel {
    Scalar,
    /// AVX2 with FMA and F16C.
    Avx2,
    /// AVX-512 (F, BW, VL) with VNNI, besides AVX2's features.
    Avx512Vnni,
}

impl Kernel {
    /// The kernels this CPU runs, slowest first (detected once).
    fn available() -> &'static [Kernel] {
        use std::sync::OnceLock;
        static ALL: OnceLock<Vec<Kernel>> = OnceLock::new();
        ALL.get_or_init(|| {
            let mut out = vec![Kernel::Scalar];
            #[cfg(target_arch = "x86_64")]
            if super::simd() {
                out.push(Kernel::Avx2);
                if avx512::supported() {
                    out.push(Kernel::Avx512Vnni);
                }
            }
            out
        })
    }

    /// The fastest of them.
    fn best() -> Kernel {
        *Kernel::available().last().unwrap_or(&Kernel::Scalar)
    }
}

/// A Q4_0 or Q4_1 weight matrix of `n` output columns over `k` inputs (GGUF layout: one row
/// of blocks per output), for [`Q4Matrix::matmul`].
pub struct Q4Matrix {
    n: usize,
    k: usize,
    /// One panel of `k / 32 * BLOCK` bytes per column: the column's `d` (f16, one per
    /// block), then its `m` (f16), then its nibbles (16 bytes per block: byte `j` holds value
    /// `j` in its low nibble and value `j + 16` in its high one). The bytes of the file, only
    /// regrouped: decoding reads every weight once per token, so nothing is widened, and
    /// grouping the scales lets the kernel convert and multiply eight at a time.
    panels: Vec<u8>,
}

impl Q4Matrix {
    /// Takes a 2-D Q4_0 or Q4_1 tensor (`[n, k]`); `None` for any other tensor.
    pub fn from_qtensor(t: &QTensor) -> candle_core::Result<Option<Self>> {
        let dims = t.shape().dims();
        let header = match t.dtype() {
            GgmlDType::Q4_0 => 2,
            GgmlDType::Q4_1 => 4,
            _ => return Ok(None),
        };
        if dims.len() != 2 || !dims[1].is_multiple_of(QK) {
            return Ok(None);
        }
        let (n, k) = (dims[0], dims[1]);
        let data = t.data()?;
        let blocks = n * k / QK;
        let block_bytes = header + QK / 2;
        if data.len() != blocks * block_bytes {
            candle_core::bail!(
                "{:?} tensor of shape {dims:?} has {} bytes, expected {}",
                t.dtype(),
                data.len(),
                blocks * block_bytes
            );
        }
        let kb = k / QK;
        let mut panels = vec![0u8; blocks * BLOCK];
        for (column, panel) in data
            .chunks_exact(kb * block_bytes)
            .zip(panels.chunks_exact_mut(kb * BLOCK))
        {
            let (ds, rest) = panel.split_at_mut(2 * kb);
            let (ms, qs) = rest.split_at_mut(2 * kb);
            for (b, block) in column.chunks_exact(block_bytes).enumerate() {
                ds[2 * b..2 * b + 2].copy_from_slice(&block[..2]);
                if header == 4 {
                    ms[2 * b..2 * b + 2].copy_from_slice(&block[2..4]);
                } else {
                    // Q4_0 stores `d * (q - 8)`: m = -8 d, exact in f16 unless it overflows
                    // (then candle's kernel takes the tensor).
                    let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
                    let m = f16::from_f32(-8.0 * d);
                    if m.to_f32() != -8.0 * d {
                        return Ok(None);
                    }
                    ms[2 * b..2 * b + 2].copy_from_slice(&m.to_le_bytes());
                }
                qs[16 * b..16 * b + 16].copy_from_slice(&block[header..]);
            }
        }
        Ok(Some(Self { n, k, panels }))
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
            panels: parts
                .iter()
                .flat_map(|p| p.panels.iter().copied())
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
        self.matmul_with(Kernel::best(), lhs, m, out)
    }

    /// [`Q4Matrix::matmul`] with a given kernel (one the CPU runs: see [`Kernel::available`]).
    fn matmul_with(&self, kernel: Kernel, lhs: &[f32], m: usize, out: &mut [f32]) {
        let (n, k) = (self.n, self.k);
        assert_eq!(lhs.len(), m * k, "lhs is not {m} x {k}");
        assert!(
            Kernel::available().contains(&kernel),
            "{kernel:?} does not run here"
        );
        let act = Activations::quantize(lhs, m, k);
        super::column_jobs((m, n, k), out, |cols, out| {
            // SAFETY: the output is `m x n` and a job writes its own columns only; the kernel
            // runs on this CPU.
            unsafe { self.columns(kernel, cols, &act, m, out) }
        });
    }

    /// Writes columns `cols` of all `m` rows of the `m x n` output at `out`.
    ///
    /// # Safety
    /// `out` must point to `m * n` writable floats, and no one else may write these columns;
    /// `kernel` must be one of [`Kernel::available`].
    unsafe fn columns(
        &self,
        kernel: Kernel,
        cols: std::ops::Range<usize>,
        act: &Activations,
        m: usize,
        out: *mut f32,
    ) {
        match kernel {
            // SAFETY (both): the CPU has the kernel's features; the rest is the caller's.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Vnni => return unsafe { avx512::columns(self, cols, act, m, out) },
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => return unsafe { avx2::columns(self, cols, act, m, out) },
            _ => {}
        }
        for c in cols {
            let w = self.column(c);
            for r in 0..m {
                // SAFETY: the caller's.
                unsafe { *out.add(r * self.n + c) = dot_scalar(&w, act.row(r)) };
            }
        }
    }

    /// For each column of `cols` and each run of at most `T` of the `m` rows, calls
    /// `tile(column, first row, rows, values)` and writes the values into those rows of the
    /// column in the `m x n` output at `out`.
    ///
    /// # Safety
    /// As [`Q4Matrix::columns`]'s, for `out`.
    #[inline(always)]
    unsafe fn tiles<const T: usize>(
        &self,
        cols: std::ops::Range<usize>,
        m: usize,
        out: *mut f32,
        mut tile: impl FnMut(Column<'_>, usize, usize, &mut [f32; T]),
    ) {
        let mut values = [0f32; T];
        for c in cols {
            let col = self.column(c);
            let mut r = 0;
            while r < m {
                let rows = (m - r).min(T);
                tile(col, r, rows, &mut values);
                for (i, v) in values[..rows].iter().enumerate() {
                    // SAFETY: the caller's (element (r + i, c) of the output).
                    unsafe { *out.add((r + i) * self.n + c) = *v };
                }
                r += rows;
            }
        }
    }

    #[inline]
    fn column(&self, c: usize) -> Column<'_> {
        let kb = self.k / QK;
        let panel = &self.panels[c * kb * BLOCK..(c + 1) * kb * BLOCK];
        let (d, rest) = panel.split_at(2 * kb);
        let (m, qs) = rest.split_at(2 * kb);
        Column { d, m, qs }
    }
}

/// One column's panel: `d` and `m` (f16 bytes) and nibbles, for `qs.len() / 16` blocks.
#[derive(Clone, Copy)]
struct Column<'a> {
    d: &'a [u8],
    m: &'a [u8],
    qs: &'a [u8],
}

impl Column<'_> {
    fn blocks(&self) -> usize {
        self.qs.len() / (QK / 2)
    }

    #[inline]
    fn scales(&self, b: usize) -> (f32, f32) {
        let f = |x: &[u8]| f16::from_le_bytes([x[2 * b], x[2 * b + 1]]).to_f32();
        (f(self.d), f(self.m))
    }
}

/// Activation rows quantized per block: `i8` quants `p`, scale `s`, and `s * Σ p`.
///
/// The quants of blocks `4i .. 4i + 4` are stored in the order of a load of their nibbles (128
/// bytes per quad): values 0..16 of the four blocks, then values 16..32 of the four. One load
/// of two (AVX2) or four (AVX-512) blocks' nibbles, masked, then multiplies two loads of quants
/// without any shuffle. Blocks past the last are zeros.
struct Activations {
    k: usize,
    scales: Vec<f32>,
    sums: Vec<f32>,
    quants: Vec<i8>,
}

/// Bytes of quants per quad of blocks.
const QUAD: usize = 4 * QK;

/// Where the quants of block `b`'s values 0..16 start in a row (values 16..32 follow
/// `QUAD / 2` bytes later).
fn low_quants(b: usize) -> usize {
    b / 4 * QUAD + b % 4 * (QK / 2)
}

/// One activation row's blocks.
#[derive(Clone, Copy)]
struct Row<'a> {
    scales: &'a [f32],
    sums: &'a [f32],
    quants: &'a [i8],
}

impl Row<'_> {
    /// Value `j` of block `b`.
    fn quant(&self, b: usize, j: usize) -> i8 {
        let base = low_quants(b);
        if j < QK / 2 {
            self.quants[base + j]
        } else {
            self.quants[base + QUAD / 2 + j - QK / 2]
        }
    }
}

impl Activations {
    fn quantize(lhs: &[f32], m: usize, k: usize) -> Self {
        let blocks = m * k / QK;
        let mut act = Self {
            k,
            scales: vec![0.0; blocks],
            sums: vec![0.0; blocks],
            quants: vec![0; m * Self::row_bytes(k)],
        };
        #[cfg(target_arch = "x86_64")]
        if super::simd() {
            // SAFETY: the CPU has AVX2, FMA and F16C (checked at run time).
            unsafe { act.fill_avx2(lhs) };
            return act;
        }
        act.fill(lhs);
        act
    }

    fn row_bytes(k: usize) -> usize {
        (k / QK).div_ceil(4) * QUAD
    }

    /// [`Activations::fill`] compiled for AVX2: the same operations (no contraction), so the
    /// same bits, vectorized by the compiler.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn fill_avx2(&mut self, lhs: &[f32]) {
        self.fill(lhs)
    }

    #[inline(always)]
    fn fill(&mut self, lhs: &[f32]) {
        let row_bytes = Self::row_bytes(self.k);
        let rows = lhs
            .chunks_exact(self.k)
            .zip(self.quants.chunks_exact_mut(row_bytes));
        let mut scales = self.scales.iter_mut().zip(self.sums.iter_mut());
        for (x_row, quants) in rows {
            for (b, xs) in x_row.chunks_exact(QK).enumerate() {
                let amax = xs.iter().fold(0f32, |a, x| a.max(x.abs()));
                let d = amax / 127.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                let mut q = [0i8; QK];
                for (q, &x) in q.iter_mut().zip(xs) {
                    *q = (x * id).round_ties_even() as i8;
                }
                let total: i32 = q.iter().map(|&q| q as i32).sum();
                let base = low_quants(b);
                let high = base + QUAD / 2;
                quants[base..base + QK / 2].copy_from_slice(&q[..QK / 2]);
                quants[high..high + QK / 2].copy_from_slice(&q[QK / 2..]);
                let (scale, sum) = scales.next().expect("one scale per block");
                *scale = d;
                *sum = d * total as f32;
            }
        }
    }

    #[inline]
    fn row(&self, r: usize) -> Row<'_> {
        let kb = self.k / QK;
        let row_bytes = Self::row_bytes(self.k);
        Row {
            scales: &self.scales[r * kb..(r + 1) * kb],
            sums: &self.sums[r * kb..(r + 1) * kb],
            quants: &self.quants[r * row_bytes..(r + 1) * row_bytes],
        }
    }
}

/// The kernels' arithmetic, one step at a time. Blocks go in pairs: lanes 0..4 hold the
/// first block, lanes 4..8 the second; lane `l` of a block sums the products of its values
/// `4l..4l+4` and `16+4l..16+4l+4` (exact integers) and accumulates `d * s * sum` with an FMA
/// (a missing second block adds `0 * 0`), in the first eight lanes for even pairs and the
/// second eight for odd ones. The `m` terms accumulate in lane `b % 8` for block `b`; the
/// lanes are summed in the order of [`hsum`]: even ones, odd ones, then the `m` lanes.
fn dot_scalar(w: &Column<'_>, a: Row<'_>) -> f32 {
    let kb = w.blocks();
    let mut both = [[0f32; LANES]; 2];
    for pair in 0..kb.div_ceil(2) {
        for (l, lane) in both[pair % 2].iter_mut().enumerate() {
            let (b, part) = (2 * pair + l / 4, l % 4);
            let (sum, scale) = if b < kb {
                let qs = &w.qs[b * QK / 2..(b + 1) * QK / 2];
                let low = (4 * part..4 * part + 4).map(|j| (qs[j] & 0x0F, a.quant(b, j)));
                let high = (4 * part..4 * part + 4).map(|j| (qs[j] >> 4, a.quant(b, j + QK / 2)));
                let sum: i32 = low.chain(high).map(|(q, p)| q as i32 * p as i32).sum();
                (sum, w.scales(b).0 * a.scales[b])
            } else {
                (0, 0.0)
            };
            *lane = scale.mul_add(sum as f32, *lane);
        }
    }
    let mut msum = [0f32; LANES];
    for b in 0..kb {
        msum[b % LANES] = w.scales(b).1.mul_add(a.sums[b], msum[b % LANES]);
    }
    hsum(both[0]) + hsum(both[1]) + hsum(msum)
}

/// `_mm256` horizontal sum order: halves, then pairs, then the last two.
fn hsum(v: [f32; LANES]) -> f32 {
    let r: [f32; 4] = std::array::from_fn(|i| v[i + 4] + v[i]);
    let (a, b) = (r[0] + r[2], r[1] + r[3]);
    a + b
}

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

impl CustomOp1 for Q4Matrix {
    fn name(&self) -> &'static str {
        "stencil-q4-matmul"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (k, n) = (self.k, self.n);
        super::weight_matmul_fwd("Q4", (k, n), storage, layout, |lhs, m, out| {
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

    fn inputs(m: usize, k: usize, seed: u64) -> Vec<f32> {
        let mut x = values(m * k, seed, 3.0);
        // A block of zeros and one of extremes (the largest integer sums).
        x[..QK].iter_mut().for_each(|v| *v = 0.0);
        if k > QK {
            x[QK..2 * QK].iter_mut().for_each(|v| *v = -100.0);
        }
        x
    }

    /// Every kernel this CPU runs (AVX-512 VNNI, AVX2, scalar) against the scalar reference.
    #[test]
    fn simd_and_scalar_paths_are_bit_identical_for_any_row_count() {
        let kernels = Kernel::available();
        eprintln!("kernels checked: {kernels:?}");
        for dtype in [GgmlDType::Q4_0, GgmlDType::Q4_1] {
            // Odd sizes: a column count that is no multiple of 4, rows beyond one tile, an odd
            // number of blocks (a last block without a pair), fewer blocks than one group.
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
                for (m, &kernel) in [1, 2, 3, 4, 5, 9, 16, 17]
                    .into_iter()
                    .flat_map(|m| kernels.iter().map(move |k| (m, k)))
                {
                    let x = inputs(m, k, seed + m as u64);
                    let mut fast = vec![0f32; m * n];
                    ours.matmul_with(kernel, &x, m, &mut fast);
                    let act = Activations::quantize(&x, m, k);
                    for r in 0..m {
                        for c in 0..n {
                            let slow = dot_scalar(&ours.column(c), act.row(r));
                            assert_eq!(
                                slow.to_bits(),
                                fast[r * n + c].to_bits(),
                                "{kernel:?} {dtype:?} n {n} k {k} m {m} at ({r}, {c}): {slow} vs {}",
                                fast[r * n + c]
                            );
                        }
                        // Each row alone gives the same row.
                        let mut alone = vec![0f32; n];
                        ours.matmul_with(kernel, &x[r * k..(r + 1) * k], 1, &mut alone);
                        assert!(alone
                            .iter()
                            .zip(&fast[r * n..(r + 1) * n])
                            .all(|(a, b)| a.to_bits() == b.to_bits()));
                    }
                }
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
