//! The feed-forward gate on the CPU: `silu(gate) * up` from the fused gate/up projection's
//! output in one pass (candle would take a strided `silu`, a multiply and a copy).
//!
//! `silu(g) = g / (1 + e^-g)` is computed with `e = e^-|g|` (an argument never above 0, where
//! [`crate::exp::exp`] is exact to about 2 ulp and cannot overflow): `g / (1 + e)` for
//! `g >= 0`, `g e / (1 + e)` below. The AVX2 path repeats the portable operations one for one
//! (same bits).

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};

/// `silu(x[.., ..n]) * x[.., n..]` for `x` of shape `[.., 2n]`: `[.., n]`.
pub struct SwiGlu;

impl SwiGlu {
    pub fn forward(x: &Tensor) -> candle_core::Result<Tensor> {
        x.apply_op1_no_bwd(&SwiGlu)
    }
}

/// One output: `silu(g) * u`.
#[inline(always)]
fn gated(g: f32, u: f32) -> f32 {
    let e = crate::exp::exp(-g.abs());
    let silu = if g >= 0.0 {
        g / (1.0 + e)
    } else {
        g * e / (1.0 + e)
    };
    silu * u
}

fn rows(x: &[f32], width: usize, out: &mut [f32]) {
    let n = width / 2;
    for (row, o) in x.chunks_exact(width).zip(out.chunks_exact_mut(n)) {
        let (gate, up) = row.split_at(n);
        let mut from = 0;
        #[cfg(target_arch = "x86_64")]
        if super::simd() {
            // SAFETY: the CPU has AVX2 and FMA (checked at run time).
            from = unsafe { avx2::gated(gate, up, o) };
        }
        for i in from..n {
            o[i] = gated(gate[i], up[i]);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// [`super::gated`] for the whole eights of a row; returns how many it did.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn gated(gate: &[f32], up: &[f32], out: &mut [f32]) -> usize {
        let whole = gate.len() / 8 * 8;
        let (sign, one, zero) = (
            _mm256_set1_ps(-0.0),
            _mm256_set1_ps(1.0),
            _mm256_setzero_ps(),
        );
        for i in (0..whole).step_by(8) {
            // SAFETY: eight floats from `i < whole` in each slice.
            let (g, u) = unsafe {
                (
                    _mm256_loadu_ps(gate.as_ptr().add(i)),
                    _mm256_loadu_ps(up.as_ptr().add(i)),
                )
            };
            let e = crate::exp::avx2::exp(_mm256_or_ps(g, sign)); // -|g|
            let denominator = _mm256_add_ps(one, e);
            let positive = _mm256_div_ps(g, denominator);
            let negative = _mm256_div_ps(_mm256_mul_ps(g, e), denominator);
            let silu = _mm256_blendv_ps(negative, positive, _mm256_cmp_ps::<_CMP_GE_OQ>(g, zero));
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_mul_ps(silu, u)) };
        }
        whole
    }
}

impl CustomOp1 for SwiGlu {
    fn name(&self) -> &'static str {
        "stencil-swiglu"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (data, outer, width) = super::row_input("swiglu", storage, layout)?;
        if width % 2 != 0 {
            candle_core::bail!("swiglu of an odd width {width}");
        }
        let (m, n): (usize, usize) = (outer.iter().product(), width / 2);
        let mut out = vec![0f32; m * n];
        if m == 1 {
            rows(data, width, &mut out);
        } else {
            let shared = super::pool::Disjoint::new(&mut out);
            candle_core::utils::barrier_pool().execute_chunked(m, |r| {
                // SAFETY: chunks of rows are disjoint parts of `out`, which outlives the call.
                let out = unsafe { shared.part(r.start * n..r.end * n) };
                rows(&data[r.start * width..r.end * width], width, out)
            });
        }
        Ok(super::row_output(out, outer, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_silu_times_up_and_the_portable_path() {
        let n = 37; // a tail past the whole eights
        let mut x = crate::models::test_values(2 * 2 * n, 3, 12.0);
        x[0] = 0.0;
        x[1] = -0.0;
        x[2] = 95.0; // e^-95 is below the exp's range
        x[3] = -95.0;
        let mut fast = vec![0f32; 2 * n];
        rows(&x, 2 * n, &mut fast);
        for (r, row) in x.chunks_exact(2 * n).enumerate() {
            for i in 0..n {
                let (g, u) = (row[i], row[n + i]);
                let got = fast[r * n + i];
                assert_eq!(got.to_bits(), gated(g, u).to_bits(), "({r}, {i})");
                let want = (g as f64 / (1.0 + (-(g as f64)).exp())) * u as f64;
                // Relative to the value; absolute near 0 (the exp stops at e^-87).
                assert!(
                    (got as f64 - want).abs() <= 1e-6 * want.abs() + 1e-30,
                    "({r}, {i}): silu({g}) * {u} = {got}, want {want}"
                );
            }
        }
    }
}
