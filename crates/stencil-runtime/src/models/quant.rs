//! What the weight-matmul kernels ([`super::q4`], [`super::q8_0`]) share: the choice of code
//! path ([`Kernel`]) and the activations quantized per block ([`Activations`]).
//!
//! Both kernels keep output columns in groups of [`GROUP`], one per float lane of an AVX-512
//! register (two AVX2 registers), with a group's blocks side by side: one pass over a block
//! yields the sixteen columns' integer sums at once, and each row then needs a handful of float
//! operations per block for all sixteen columns.

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

impl Activations {
    pub(crate) fn quantize(lhs: &[f32], m: usize, k: usize) -> Self {
        let blocks = m * k / QK;
        let mut act = Self {
            k,
            scales: vec![0.0; blocks],
            sums: vec![0.0; blocks],
            totals: vec![0; blocks],
            quants: vec![0; m * k],
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

    /// [`Activations::fill`] eight values at a time, with the same operations: the maximum
    /// is exact in any order, the scale is computed as there, `cvtps` rounds half to even
    /// (the default rounding mode) and `packs` saturates as `as i8` does.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn fill_avx2(&mut self, lhs: &[f32]) {
        use std::arch::x86_64::*;
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
            // SAFETY: the block's 32 quants.
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

    #[cfg(test)]
    fn quantize_portable(lhs: &[f32], m: usize, k: usize) -> Self {
        let blocks = m * k / QK;
        let mut act = Self {
            k,
            scales: vec![0.0; blocks],
            sums: vec![0.0; blocks],
            totals: vec![0; blocks],
            quants: vec![0; m * k],
        };
        act.fill(lhs);
        act
    }

    fn fill(&mut self, lhs: &[f32]) {
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

    #[inline]
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
}
