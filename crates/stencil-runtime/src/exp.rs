//! `e^x` for softmaxes (attention scores, sampling weights), to about 2 ulp, with a portable
//! path and an AVX2 path that give the same bits: Cephes' `expf` polynomial after reducing by
//! `n ln 2`, in operations the AVX2 path repeats one for one.

/// `e^x` for `x <= 0` (a softmax weight).
pub(crate) fn exp(x: f32) -> f32 {
    let x = x.max(EXP_MIN);
    let n = (x * std::f32::consts::LOG2_E).round_ties_even();
    let r = n.mul_add(-LN2_HI, x);
    let r = n.mul_add(-LN2_LO, r);
    let mut p = EXP_POLY[0];
    for c in &EXP_POLY[1..] {
        p = p.mul_add(r, *c);
    }
    let y = p.mul_add(r * r, r) + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// Below this `exp` would need a subnormal scale; `e^-87` is 0 for a softmax weight anyway.
const EXP_MIN: f32 = -87.0;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
const EXP_POLY: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];

/// Sampling weights: `out[i] = e^(logits[i] / t - max)` for each finite logit and 0 for the
/// rest (`max` is the largest `logits[i] / t`); returns their sum, taken in eight lanes
/// (element `i` in lane `i % 8`, then the lanes in a fixed order). The AVX2 path gives the
/// same bits.
pub(crate) fn softmax_weights(logits: &[f32], t: f32, max: f32, out: &mut Vec<f32>) -> f32 {
    // Every element is written below: sized once, never zeroed again.
    if out.len() != logits.len() {
        out.clear();
        out.resize(logits.len(), 0.0);
    }
    let mut lanes = [0f32; 8];
    let mut from = 0;
    #[cfg(target_arch = "x86_64")]
    if crate::models::simd() {
        // SAFETY: the CPU has AVX2 and FMA (checked at run time).
        from = unsafe { avx2::softmax_weights(logits, t, max, out, &mut lanes) };
    }
    for i in from..logits.len() {
        let l = logits[i];
        let w = if l.is_finite() { exp(l / t - max) } else { 0.0 };
        out[i] = w;
        lanes[i % 8] += w;
    }
    let r: [f32; 4] = std::array::from_fn(|i| lanes[i] + lanes[i + 4]);
    (r[0] + r[1]) + (r[2] + r[3])
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use super::{EXP_MIN, EXP_POLY, LN2_HI, LN2_LO};
    use std::arch::x86_64::*;

    /// [`super::softmax_weights`] for the whole eights of `logits`: fills `out` and the lane
    /// sums; returns how many elements it did.
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn softmax_weights(
        logits: &[f32],
        t: f32,
        max: f32,
        out: &mut [f32],
        lanes: &mut [f32; 8],
    ) -> usize {
        let whole = logits.len() / 8 * 8;
        let (vt, vmax) = (_mm256_set1_ps(t), _mm256_set1_ps(max));
        let inf = _mm256_set1_ps(f32::INFINITY);
        // SAFETY (loads and stores): eight floats from `i < whole` in `logits`, `out`, `lanes`.
        let mut sum = unsafe { _mm256_loadu_ps(lanes.as_ptr()) };
        for i in (0..whole).step_by(8) {
            let l = unsafe { _mm256_loadu_ps(logits.as_ptr().add(i)) };
            // Finite: |l| < inf (false for NaN).
            let finite =
                _mm256_cmp_ps::<_CMP_LT_OQ>(_mm256_andnot_ps(_mm256_set1_ps(-0.0), l), inf);
            let w = _mm256_and_ps(exp(_mm256_sub_ps(_mm256_div_ps(l, vt), vmax)), finite);
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(i), w) };
            sum = _mm256_add_ps(sum, w);
        }
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
        whole
    }

    /// [`super::exp`] on eight lanes.
    #[target_feature(enable = "avx2,fma")]
    pub(crate) fn exp(x: __m256) -> __m256 {
        let x = _mm256_max_ps(x, _mm256_set1_ps(EXP_MIN));
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
        );
        let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), x);
        let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_LO), r);
        let mut p = _mm256_set1_ps(EXP_POLY[0]);
        for &c in &EXP_POLY[1..] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let y = _mm256_add_ps(
            _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r),
            _mm256_set1_ps(1.0),
        );
        let bits = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        _mm256_mul_ps(y, _mm256_castsi256_ps(bits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_weights_match_the_portable_path_and_the_library() {
        let mut logits: Vec<f32> = (0..1003)
            .map(|i| ((i * 7919) % 2000) as f32 / 50.0 - 20.0)
            .collect();
        logits[3] = f32::NEG_INFINITY;
        logits[17] = f32::NAN;
        logits[1000] = f32::NEG_INFINITY;
        let t = 0.7;
        let max = logits
            .iter()
            .filter(|l| l.is_finite())
            .map(|l| l / t)
            .fold(f32::MIN, f32::max);
        let mut fast = Vec::new();
        let sum = softmax_weights(&logits, t, max, &mut fast);
        let mut lanes = [0f32; 8];
        for (i, &l) in logits.iter().enumerate() {
            let w = if l.is_finite() { exp(l / t - max) } else { 0.0 };
            assert_eq!(w.to_bits(), fast[i].to_bits(), "element {i}");
            lanes[i % 8] += w;
            let exact = if l.is_finite() {
                ((l / t - max) as f64).exp()
            } else {
                0.0
            };
            assert!(
                (w as f64 - exact).abs() <= 1e-6 * exact.max(1e-30),
                "element {i}"
            );
        }
        let r: [f32; 4] = std::array::from_fn(|i| lanes[i] + lanes[i + 4]);
        assert_eq!(sum.to_bits(), ((r[0] + r[1]) + (r[2] + r[3])).to_bits());
    }

    #[test]
    fn exp_is_within_two_ulp_of_the_library_exp() {
        let mut worst = 0f64;
        for i in 0..=200_000 {
            let x = -87.0 * i as f32 / 200_000.0;
            let (got, want) = (exp(x) as f64, (x as f64).exp());
            worst = worst.max((got - want).abs() / want);
        }
        assert!(worst < 2.5e-7, "relative error {worst}");
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(-1000.0) < 1e-37);
    }
}
