//! What the weight-matmul kernels ([`super::q4`], [`super::q8_0`]) share: the choice of code
//! path ([`Kernel`]), the activations quantized per block ([`Activations`]), the row tiles
//! ([`row_tiles`]) and the next group's weights prefetched meanwhile ([`Prefetch`]).
//!
//! Both kernels keep output columns in groups of [`GROUP`], one per float lane of an AVX-512
//! register (two AVX2 registers), with a group's blocks side by side: one pass over a block
//! yields the sixteen columns' integer sums at once, and each row then needs a handful of float
//! operations per block for all sixteen columns.

use super::huge_pages::WeightBytes;
use super::read_ahead::ReadAhead;

/// Values per block (of weights and of activations).
pub(crate) const QK: usize = 32;
/// Columns per group: the float lanes of an AVX-512 register.
pub(crate) const GROUP: usize = 16;

/// Whether the CPU has AVX-512 (F, BW, VL) with VNNI, besides AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
fn avx512_vnni() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

/// The code paths of the weight matmuls; all give the same bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kernel {
    Scalar,
    /// AVX2 with FMA and F16C.
    Avx2,
    /// AVX-512 (F, BW, VL) with VNNI, besides AVX2's features.
    Avx512Vnni,
}

impl Kernel {
    /// The kernels this CPU runs, slowest first (detected once).
    pub(crate) fn available() -> &'static [Kernel] {
        use std::sync::OnceLock;
        static ALL: OnceLock<Vec<Kernel>> = OnceLock::new();
        ALL.get_or_init(|| {
            let mut out = vec![Kernel::Scalar];
            #[cfg(target_arch = "x86_64")]
            if super::simd() {
                out.push(Kernel::Avx2);
                if avx512_vnni() {
                    out.push(Kernel::Avx512Vnni);
                }
            }
            out
        })
    }

    /// The fastest of them.
    pub(crate) fn best() -> Kernel {
        *Kernel::available().last().unwrap_or(&Kernel::Scalar)
    }
}

/// A weight format kept in column groups: the bytes of one block of a group and the kernels
/// that read them (all giving [`Format::dot_scalar`]'s bits).
pub(crate) trait Format {
    /// Bytes of one block of a group.
    const GROUP_BLOCK: usize;
    /// The format's name in errors ("Q4") and its candle op's name.
    const NAME: &'static str;
    const OP: &'static str;

    /// The reference arithmetic: the column in `lane` of a group (`blocks`) and one row.
    fn dot_scalar(blocks: &[u8], lane: usize, a: Row<'_>) -> f32;

    /// All `m` rows of one group, with AVX2, prefetching the next meanwhile ([`Prefetch`]).
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `act` has `m` rows of the group's `k`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2(group: Group<'_>, act: &Activations, m: usize, out: &mut GroupOut);

    /// The same with AVX-512 VNNI.
    ///
    /// # Safety
    /// As [`Format::avx2`]'s, and the CPU has AVX-512 (F, BW, VL) with VNNI.
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512(group: Group<'_>, act: &Activations, m: usize, out: &mut GroupOut);
}

/// A column group's blocks, and the group its job reads next (prefetched meanwhile; empty for
/// none).
#[derive(Clone, Copy)]
pub(crate) struct Group<'a> {
    pub blocks: &'a [u8],
    pub next: &'a [u8],
}

/// A weight matrix of `n` output columns over `k` inputs in format `F`: `n.div_ceil(16)`
/// column groups of `k / 32` blocks of `F::GROUP_BLOCK` bytes. Columns past `n` in the last
/// group are zeros.
pub(crate) struct Groups<F> {
    n: usize,
    k: usize,
    bytes: WeightBytes,
    format: std::marker::PhantomData<fn() -> F>,
}

impl<F: Format> Groups<F> {
    /// Regroups a 2-D GGUF tensor `[n, k]` stored as `block_bytes` per block of 32 values,
    /// column after column: `place(group block, lane, file block)` copies one block into its
    /// column's lane, or returns false when the format cannot hold it (then `None`, as for a
    /// tensor that is not 2-D over whole blocks). A byte count that does not match the shape
    /// is an error naming the tensor's type.
    pub(crate) fn regroup(
        t: &candle_core::quantized::QTensor,
        block_bytes: usize,
        mut place: impl FnMut(&mut [u8], usize, &[u8]) -> bool,
    ) -> candle_core::Result<Option<Self>> {
        let dims = t.shape().dims();
        if dims.len() != 2 || !dims[1].is_multiple_of(QK) {
            return Ok(None);
        }
        let (n, k) = (dims[0], dims[1]);
        let kb = k / QK;
        let data = t.data()?;
        if data.len() != n * kb * block_bytes {
            candle_core::bail!(
                "{:?} tensor of shape {dims:?} has {} bytes, expected {}",
                t.dtype(),
                data.len(),
                n * kb * block_bytes
            );
        }
        let mut bytes = vec![0; n.div_ceil(GROUP) * kb * F::GROUP_BLOCK];
        for (c, column) in data.chunks_exact(kb * block_bytes).enumerate() {
            for (b, block) in column.chunks_exact(block_bytes).enumerate() {
                let at = ((c / GROUP) * kb + b) * F::GROUP_BLOCK;
                if !place(&mut bytes[at..at + F::GROUP_BLOCK], c % GROUP, block) {
                    return Ok(None);
                }
            }
        }
        Ok(Some(Self {
            n,
            k,
            bytes: WeightBytes::Own(bytes),
            format: std::marker::PhantomData,
        }))
    }

    /// The matrices' columns side by side; `None` unless all have the same `k` and all but the
    /// last whole groups.
    pub(crate) fn concat(parts: &[&Self]) -> Option<Self> {
        let (last, rest) = parts.split_last()?;
        if parts.iter().any(|p| p.k != last.k) || rest.iter().any(|p| p.n % GROUP != 0) {
            return None;
        }
        Some(Self {
            n: parts.iter().map(|p| p.n).sum(),
            k: last.k,
            bytes: WeightBytes::Own(parts.iter().flat_map(|p| p.bytes.iter().copied()).collect()),
            format: std::marker::PhantomData,
        })
    }

    pub(crate) fn n(&self) -> usize {
        self.n
    }

    /// The matrix's bytes, for [`super::huge_pages::move_into_huge_pages`].
    pub(crate) fn bytes_mut(&mut self) -> &mut WeightBytes {
        &mut self.bytes
    }

    /// `x @ W^T` for `x` of shape `[.., k]` (f32): `[.., n]`, prefetching `ahead` meanwhile.
    pub(crate) fn forward(
        &self,
        x: &candle_core::Tensor,
        ahead: Option<&ReadAhead>,
    ) -> candle_core::Result<candle_core::Tensor> {
        x.apply_op1_no_bwd(&Product {
            groups: self,
            ahead,
        })
    }

    /// Group `g`'s blocks.
    pub(crate) fn blocks(&self, g: usize) -> &[u8] {
        let bytes = self.k / QK * F::GROUP_BLOCK;
        &self.bytes[g * bytes..(g + 1) * bytes]
    }

    /// `out[r * n + c] = dot(lhs row r, weight column c)` for the `m` rows of `lhs`, with a
    /// given kernel (one of [`Kernel::available`]).
    pub(crate) fn matmul_with(&self, kernel: Kernel, lhs: &[f32], m: usize, out: &mut [f32]) {
        // SAFETY: the same memory seen as possibly uninitialized floats; only floats are written.
        let out = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast(), out.len()) };
        self.fill(kernel, lhs, m, out, None)
    }

    /// The `m x n` product of `lhs` with the fastest kernel, in a new vector (never zeroed
    /// first: every element is written once); the jobs also prefetch `ahead`, if given.
    pub(crate) fn product(&self, lhs: &[f32], m: usize, ahead: Option<&ReadAhead>) -> Vec<f32> {
        let mut out = Vec::with_capacity(m * self.n);
        self.fill(
            Kernel::best(),
            lhs,
            m,
            &mut out.spare_capacity_mut()[..m * self.n],
            ahead,
        );
        // SAFETY: `fill` wrote all `m * n` elements: every group's columns of every row.
        unsafe { out.set_len(m * self.n) };
        out
    }

    /// [`Groups::matmul_with`] into a possibly uninitialized output; writes every element.
    /// Each group's job then prefetches its share of `ahead`.
    fn fill(
        &self,
        kernel: Kernel,
        lhs: &[f32],
        m: usize,
        out: &mut [std::mem::MaybeUninit<f32>],
        ahead: Option<&ReadAhead>,
    ) {
        let (n, k) = (self.n, self.k);
        assert_eq!(lhs.len(), m * k, "lhs is not {m} x {k}");
        assert!(
            Kernel::available().contains(&kernel),
            "{kernel:?} does not run here"
        );
        // Filled by the first phase of the pool call, row by row.
        let mut quantized = Activations::recycled(m, k);
        let writer = quantized.writer();
        // SAFETY: chunks of rows are disjoint, and `quantized` is read only after the phase.
        let quantize = |rows: std::ops::Range<usize>| unsafe { writer.fill(lhs, rows) };
        let before = super::pool::Phase::new(m, &quantize);
        let act = &quantized;
        super::column_jobs((m, n, k), GROUP, out, before, |cols, out| {
            let groups = cols.start / GROUP..cols.end.div_ceil(GROUP);
            for g in groups.clone() {
                let blocks = self.blocks(g);
                // The job's next group; the next job's first is likely the other thread's.
                let next = if g + 1 < groups.end {
                    self.blocks(g + 1)
                } else {
                    &[]
                };
                let group = Group { blocks, next };
                // A job writes its own columns of the `m x n` output only.
                let mut out = GroupOut {
                    out,
                    n,
                    first: g * GROUP,
                    width: (n - g * GROUP).min(GROUP),
                };
                match kernel {
                    // SAFETY (both): the CPU has the kernel's features; `act` has `m` rows.
                    #[cfg(target_arch = "x86_64")]
                    Kernel::Avx512Vnni => unsafe { F::avx512(group, act, m, &mut out) },
                    #[cfg(target_arch = "x86_64")]
                    Kernel::Avx2 => unsafe { F::avx2(group, act, m, &mut out) },
                    _ => {
                        for r in 0..m {
                            let row = act.row(r);
                            out.write(r, &std::array::from_fn(|l| F::dot_scalar(blocks, l, row)));
                        }
                    }
                }
                if let Some(ahead) = ahead {
                    ahead.share(n.div_ceil(GROUP));
                }
            }
        });
        quantized.recycle();
    }
}

/// The product with a weight matrix as a candle op, with memory to read ahead meanwhile.
struct Product<'a, F> {
    groups: &'a Groups<F>,
    ahead: Option<&'a ReadAhead>,
}

impl<F: Format> candle_core::CustomOp1 for Product<'_, F> {
    fn name(&self) -> &'static str {
        F::OP
    }

    fn cpu_fwd(
        &self,
        storage: &candle_core::CpuStorage,
        layout: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        let g = self.groups;
        super::weight_matmul_fwd(F::NAME, (g.k, g.n), storage, layout, |lhs, m| {
            g.product(lhs, m, self.ahead)
        })
    }
}

/// Checks every kernel this CPU runs against `F::dot_scalar`, bit for bit, for row counts
/// within and across tiles, and each row alone against the same row in a batch.
#[cfg(test)]
pub(crate) fn assert_kernels_match_the_reference<F: Format>(w: &Groups<F>, seed: u64, what: &str) {
    let (n, k) = (w.n, w.k);
    for m in [1, 2, 3, 4, 5, 9, 16, 17] {
        let mut x = super::test_values(m * k, seed + m as u64, 3.0);
        // A block of zeros and one of extremes (the largest integer sums).
        x[..QK].iter_mut().for_each(|v| *v = 0.0);
        if k > QK {
            x[QK..2 * QK].iter_mut().for_each(|v| *v = -100.0);
        }
        let act = Activations::quantize(&x, m, k);
        for &kernel in Kernel::available() {
            let mut fast = vec![0f32; m * n];
            w.matmul_with(kernel, &x, m, &mut fast);
            for r in 0..m {
                for c in 0..n {
                    let slow = F::dot_scalar(w.blocks(c / GROUP), c % GROUP, act.row(r));
                    let got = fast[r * n + c];
                    assert_eq!(
                        slow.to_bits(),
                        got.to_bits(),
                        "{kernel:?} {what} n {n} k {k} m {m} at ({r}, {c}): {slow} vs {got}"
                    );
                }
                let mut alone = vec![0f32; n];
                w.matmul_with(kernel, &x[r * k..(r + 1) * k], 1, &mut alone);
                assert!(
                    alone
                        .iter()
                        .zip(&fast[r * n..(r + 1) * n])
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{kernel:?} {what}: row {r} alone differs from the batch of {m}"
                );
            }
        }
    }
}

/// Where a kernel writes one group's columns of the `m x n` output.
pub(crate) struct GroupOut {
    out: *mut f32,
    n: usize,
    first: usize,
    width: usize,
}

impl GroupOut {
    /// Row `r`'s values of the group (those of columns below `n`).
    #[inline]
    pub(crate) fn write(&mut self, r: usize, values: &[f32; GROUP]) {
        // SAFETY: the output is `m x n` (`r < m`) and only this job writes these columns
        // ([`Groups::matmul_with`]); they may be uninitialized, so they are written, not read.
        unsafe {
            std::ptr::copy_nonoverlapping(
                values.as_ptr(),
                self.out.add(r * self.n + self.first),
                self.width,
            )
        };
    }
}

/// Runs `tile(first row, rows, values, prefetch)` over the `m` rows, at most `T` at a time,
/// and writes each tile's rows. When there are several tiles, each gets its share of the next
/// group's cache lines to prefetch over `group`'s blocks of `block_bytes` ([`Prefetch`]).
#[inline(always)]
pub(crate) fn row_tiles<const T: usize>(
    m: usize,
    (group, block_bytes): (Group<'_>, usize),
    out: &mut GroupOut,
    mut tile: impl FnMut(usize, usize, &mut [[f32; GROUP]; T], Prefetch),
) {
    let tiles = m.div_ceil(T);
    let mut r = 0;
    while r < m {
        let rows = (m - r).min(T);
        let mut values = [[0f32; GROUP]; T];
        let prefetch = if tiles > 1 {
            Prefetch::share(group.next, r / T, tiles, group.blocks.len() / block_bytes)
        } else {
            Prefetch::NONE
        };
        tile(r, rows, &mut values, prefetch);
        for (i, v) in values[..rows].iter().enumerate() {
            out.write(r + i, v);
        }
        r += rows;
    }
}

/// A row tile's share of the next group's cache lines, prefetched a few after each block.
///
/// A group's first row tile reads the weights from memory and its later tiles from the
/// caches, so without help the memory idles while the later tiles compute, and the next
/// group's first tile then waits for it. With the next group's lines spread over the tiles,
/// they arrive meanwhile. Measured on Zen 4 with `examples/q4_speed.rs` (30 layers of weights
/// streamed from memory, 16 rows): 12-19% less time with the AVX-512 kernel, about 5% with
/// the AVX2 one. A single tile (one to a few rows, bound by memory anyway) prefetches nothing:
/// one stream was slower with it.
#[derive(Clone, Copy)]
pub(crate) struct Prefetch {
    base: *const u8,
    /// The next line to prefetch and the lines per block, in 1/65536ths of a line.
    line: usize,
    step: usize,
    /// One past the share's last line.
    end: usize,
}

impl Prefetch {
    /// Prefetches nothing.
    pub(crate) const NONE: Prefetch = Prefetch {
        base: std::ptr::null(),
        line: 0,
        step: 0,
        end: 0,
    };

    /// Bytes per cache line.
    const LINE: usize = 64;

    /// Share `tile` of `tiles` of `next`'s lines, over `blocks` blocks.
    fn share(next: &[u8], tile: usize, tiles: usize, blocks: usize) -> Self {
        let lines = next.len().div_ceil(Self::LINE);
        let (from, to) = (tile * lines / tiles, (tile + 1) * lines / tiles);
        Self {
            base: next.as_ptr(),
            line: from << 16,
            step: ((to - from) << 16).div_ceil(blocks.max(1)),
            end: to,
        }
    }

    /// Prefetches the lines due after one more block.
    #[inline(always)]
    pub(crate) fn after_block(&mut self) {
        for l in self.due() {
            // SAFETY: a prefetch never faults; line `l` is within `next` (`l < end`).
            #[cfg(target_arch = "x86_64")]
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch::<_MM_HINT_T0>(self.base.add(Self::LINE * l).cast());
            }
        }
    }

    /// The lines due after one more block.
    #[inline(always)]
    fn due(&mut self) -> std::ops::Range<usize> {
        let from = (self.line >> 16).min(self.end);
        self.line += self.step;
        from..(self.line >> 16).min(self.end)
    }
}

/// Activation rows quantized per block of 32: `i8` quants `p` (in order), scale `s` (the
/// value is `s * p`), `Σ p` and `s * Σ p`.
pub(crate) struct Activations {
    k: usize,
    scales: Vec<f32>,
    sums: Vec<f32>,
    totals: Vec<i32>,
    quants: Vec<i8>,
}

/// One activation row's blocks.
#[derive(Clone, Copy)]
pub(crate) struct Row<'a> {
    pub scales: &'a [f32],
    pub sums: &'a [f32],
    pub totals: &'a [i32],
    pub quants: &'a [i8],
}

thread_local! {
    /// The calling thread's last activation buffers, for its next matmul.
    static RECYCLED: std::cell::Cell<Option<Activations>> = const { std::cell::Cell::new(None) };
}

impl Activations {
    /// Buffers for at least `m` rows of `k`: this thread's last ones when it has them (they
    /// may hold older values past and within the rows: the quantization writes every value of
    /// the `m` rows before any is read), grown where too short. Clearing fresh buffers at
    /// every matmul cost 1% of a batched step, on the thread the others wait for.
    fn recycled(m: usize, k: usize) -> Self {
        let Some(mut act) = RECYCLED.take() else {
            return Self::zeroed(m, k);
        };
        let blocks = m * k / QK;
        act.k = k;
        if act.scales.len() < blocks {
            act.scales.resize(blocks, 0.0);
            act.sums.resize(blocks, 0.0);
            act.totals.resize(blocks, 0);
        }
        if act.quants.len() < m * k {
            act.quants.resize(m * k, 0);
        }
        act
    }

    /// Keeps the buffers for this thread's next [`Activations::recycled`], unless they are
    /// large (a long prompt's), which would stay allocated for the thread's life.
    fn recycle(self) {
        const MAX_KEPT: usize = 8 << 20;
        if self.quants.capacity() <= MAX_KEPT {
            RECYCLED.set(Some(self));
        }
    }

    fn zeroed(m: usize, k: usize) -> Self {
        let blocks = m * k / QK;
        Self {
            k,
            scales: vec![0.0; blocks],
            sums: vec![0.0; blocks],
            totals: vec![0; blocks],
            quants: vec![0; m * k],
        }
    }

    /// Quantizes the `m x k` rows of `lhs` on the calling thread.
    #[cfg(test)]
    pub(crate) fn quantize(lhs: &[f32], m: usize, k: usize) -> Self {
        let mut act = Self::zeroed(m, k);
        act.blocks().fill(lhs);
        act
    }

    #[cfg(test)]
    fn quantize_portable(lhs: &[f32], m: usize, k: usize) -> Self {
        let mut act = Self::zeroed(m, k);
        act.blocks().fill_portable(lhs);
        act
    }

    #[cfg(test)]
    fn blocks(&mut self) -> BlocksMut<'_> {
        BlocksMut {
            scales: &mut self.scales,
            sums: &mut self.sums,
            totals: &mut self.totals,
            quants: &mut self.quants,
        }
    }

    /// Writes rows from several threads at once, each its own ([`RowsWriter::fill`]).
    pub(crate) fn writer(&mut self) -> RowsWriter {
        RowsWriter {
            k: self.k,
            scales: self.scales.as_mut_ptr(),
            sums: self.sums.as_mut_ptr(),
            totals: self.totals.as_mut_ptr(),
            quants: self.quants.as_mut_ptr(),
        }
    }

    #[inline(always)]
    pub(crate) fn row(&self, r: usize) -> Row<'_> {
        let kb = self.k / QK;
        Row {
            scales: &self.scales[r * kb..(r + 1) * kb],
            sums: &self.sums[r * kb..(r + 1) * kb],
            totals: &self.totals[r * kb..(r + 1) * kb],
            quants: &self.quants[r * self.k..(r + 1) * self.k],
        }
    }
}

/// Some whole rows' blocks of [`Activations`].
struct BlocksMut<'a> {
    scales: &'a mut [f32],
    sums: &'a mut [f32],
    totals: &'a mut [i32],
    quants: &'a mut [i8],
}

impl BlocksMut<'_> {
    /// Quantizes `lhs` (the rows' values) into these blocks, with SIMD where the CPU has it.
    fn fill(self, lhs: &[f32]) {
        #[cfg(target_arch = "x86_64")]
        if super::simd() {
            // SAFETY: the CPU has AVX2, FMA and F16C (checked at run time).
            return unsafe { self.fill_avx2(lhs) };
        }
        self.fill_portable(lhs)
    }

    /// [`BlocksMut::fill_portable`] eight values at a time, with the same operations: the
    /// maximum is exact in any order, the scale is computed as there, `cvtps` rounds half to
    /// even (the default rounding mode) and `packs` saturates as `as i8` does.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn fill_avx2(self, lhs: &[f32]) {
        use std::arch::x86_64::*;
        assert_eq!(lhs.len(), self.quants.len());
        let magnitude = _mm256_set1_ps(-0.0);
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for (b, xs) in lhs.chunks_exact(QK).enumerate() {
            // SAFETY: 32 values in the block.
            let v: [__m256; 4] =
                std::array::from_fn(|i| unsafe { _mm256_loadu_ps(xs.as_ptr().add(8 * i)) });
            // `max_ps(x, m)` gives `m` where `x` is NaN, as `f32::max` does.
            let m = v.iter().fold(_mm256_setzero_ps(), |m, &x| {
                _mm256_max_ps(_mm256_andnot_ps(magnitude, x), m)
            });
            let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
            let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
            let d = amax / 127.0;
            let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
            let q = v.map(|x| _mm256_cvtps_epi32(_mm256_mul_ps(x, id)));
            let bytes = _mm256_permutevar8x32_epi32(
                _mm256_packs_epi16(
                    _mm256_packs_epi32(q[0], q[1]),
                    _mm256_packs_epi32(q[2], q[3]),
                ),
                order,
            );
            // SAFETY: the block's 32 quants (the lengths match, asserted above).
            unsafe {
                _mm256_storeu_si256(self.quants.as_mut_ptr().add(b * QK) as *mut __m256i, bytes)
            };
            let t = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            let t = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
            let t = _mm_add_epi32(t, _mm_unpackhi_epi64(t, t));
            let total = _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 1)));
            self.scales[b] = d;
            self.sums[b] = d * total as f32;
            self.totals[b] = total;
        }
    }

    fn fill_portable(self, lhs: &[f32]) {
        assert_eq!(lhs.len(), self.quants.len());
        let blocks = lhs
            .chunks_exact(QK)
            .zip(self.quants.chunks_exact_mut(QK))
            .zip(self.scales.iter_mut().zip(self.sums.iter_mut()))
            .zip(self.totals.iter_mut());
        for (((xs, q), (scale, sum)), block_total) in blocks {
            let amax = xs.iter().fold(0f32, |a, x| a.max(x.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            for (q, &x) in q.iter_mut().zip(xs) {
                *q = (x * id).round_ties_even() as i8;
            }
            let total: i32 = q.iter().map(|&q| q as i32).sum();
            *scale = d;
            *sum = d * total as f32;
            *block_total = total;
        }
    }
}

/// [`Activations`] seen as raw rows, so that threads can quantize disjoint rows at once.
pub(crate) struct RowsWriter {
    k: usize,
    scales: *mut f32,
    sums: *mut f32,
    totals: *mut i32,
    quants: *mut i8,
}

// SAFETY: threads write disjoint rows only (the contract of `fill`).
unsafe impl Sync for RowsWriter {}

impl RowsWriter {
    /// Quantizes rows `rows` of `lhs` (all `m x k` input rows) into their place.
    ///
    /// # Safety
    /// The [`Activations`] this came from is alive, unmoved and not otherwise accessed until
    /// the writes are done; `rows` are within its `m` rows and no other thread writes them
    /// meanwhile.
    pub(crate) unsafe fn fill(&self, lhs: &[f32], rows: std::ops::Range<usize>) {
        let (k, kb) = (self.k, self.k / QK);
        let (blocks, first) = (rows.len() * kb, rows.start * kb);
        // SAFETY: the caller's: these rows are within the buffers and written by us alone.
        let view = unsafe {
            BlocksMut {
                scales: std::slice::from_raw_parts_mut(self.scales.add(first), blocks),
                sums: std::slice::from_raw_parts_mut(self.sums.add(first), blocks),
                totals: std::slice::from_raw_parts_mut(self.totals.add(first), blocks),
                quants: std::slice::from_raw_parts_mut(
                    self.quants.add(rows.start * k),
                    rows.len() * k,
                ),
            }
        };
        view.fill(&lhs[rows.start * k..rows.end * k]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_simd_quantization_is_the_portable_one() {
        let (m, k) = (3, 256);
        let mut x = crate::models::test_values(m * k, 5, 4.0);
        // A zero block, a block of ties (x * id exactly half-way), extremes.
        x[..QK].iter_mut().for_each(|v| *v = 0.0);
        for (i, v) in x[QK..2 * QK].iter_mut().enumerate() {
            *v = if i == 0 {
                127.0
            } else {
                (i as f32 - 16.0) + 0.5
            };
        }
        x[2 * QK..3 * QK].iter_mut().for_each(|v| *v = -1e30);
        let (fast, slow) = (
            Activations::quantize(&x, m, k),
            Activations::quantize_portable(&x, m, k),
        );
        assert_eq!(fast.quants, slow.quants);
        assert_eq!(fast.totals, slow.totals);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&fast.scales), bits(&slow.scales));
        assert_eq!(bits(&fast.sums), bits(&slow.sums));
        // Half-way values round to even.
        assert_eq!(&slow.quants[QK + 1..QK + 4], &[-14, -14, -12]);
    }

    #[test]
    fn the_tiles_prefetch_every_line_of_the_next_group_once() {
        // Lines per group as in the kernels' formats (Q4: 5 per block, Q8_0: 8.5), and a
        // group smaller than its tiles.
        for (bytes, blocks, tiles) in [(18 * 320, 18, 4), (48 * 544, 48, 5), (128, 1, 8)] {
            let next = vec![0u8; bytes];
            let mut seen = vec![0; bytes.div_ceil(Prefetch::LINE)];
            for t in 0..tiles {
                let mut share = Prefetch::share(&next, t, tiles, blocks);
                for _ in 0..blocks {
                    share.due().for_each(|l| seen[l] += 1);
                }
                // Past its blocks a share prefetches nothing more.
                assert!(share.due().is_empty());
            }
            assert!(
                seen.iter().all(|&n| n == 1),
                "{bytes} {blocks} {tiles}: {seen:?}"
            );
        }
        let mut none = Prefetch::NONE;
        assert!(none.due().is_empty());
    }
}
