//! RMS normalization on the CPU with candle's arithmetic, several rows at a time.
//!
//! candle's `rms_norm` sums a row's squares one after the other: a chain of dependent adds,
//! which for a batch of rows costs more than the rest of the norm. The sums here run in the
//! same order, each row its own chain, but eight rows' chains side by side (the adds of
//! different rows overlap in the pipeline), so every output has candle's bits. A batch's rows
//! are shared between the pool's threads.

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};

/// Rows whose sums of squares run side by side.
const ROWS: usize = 8;

/// `x / sqrt(mean(x²) + eps) * alpha` per row of `[.., n]` f32 input.
pub struct RmsNorm {
    alpha: Vec<f32>,
    eps: f32,
}

impl RmsNorm {
    pub fn new(alpha: Vec<f32>, eps: f32) -> Self {
        Self { alpha, eps }
    }

    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.apply_op1_no_bwd(self)
    }

    /// Normalizes the rows of `x` (each `alpha.len()` wide) into `out`.
    fn rows(&self, x: &[f32], out: &mut [f32]) {
        let n = self.alpha.len();
        for (xs, outs) in x.chunks(ROWS * n).zip(out.chunks_mut(ROWS * n)) {
            let rows = xs.len() / n;
            // Candle's sum, `Σ v * v` in order (`Iterator::sum`), one chain per row. (Its start,
            // -0.0, and this one, 0.0, give the same sum: a square is never -0.0.)
            let mut sums = [0f32; ROWS];
            for i in 0..n {
                for r in 0..rows {
                    let v = xs[r * n + i];
                    sums[r] += v * v;
                }
            }
            for r in 0..rows {
                let m = (sums[r] / n as f32 + self.eps).sqrt();
                let (src, dst) = (&xs[r * n..(r + 1) * n], &mut outs[r * n..(r + 1) * n]);
                for ((d, &s), &a) in dst.iter_mut().zip(src).zip(&self.alpha) {
                    *d = s / m * a;
                }
            }
        }
    }
}

impl CustomOp1 for RmsNorm {
    fn name(&self) -> &'static str {
        "stencil-rms-norm"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (data, outer, width) = super::row_input("rms norm", storage, layout)?;
        if width != self.alpha.len() {
            candle_core::bail!(
                "rms norm of rows of {width} with {} weights",
                self.alpha.len()
            );
        }
        let mut out = vec![0f32; data.len()];
        let m = data.len() / width;
        if m <= ROWS {
            self.rows(data, &mut out);
        } else {
            // A contiguous share of the rows per thread (each runs them eight at a time).
            let shared = super::pool::Disjoint::new(&mut out);
            let share = |r: std::ops::Range<usize>| {
                // SAFETY: chunks of rows are disjoint parts of `out`, which outlives the call.
                let out = unsafe { shared.part(r.start * width..r.end * width) };
                self.rows(&data[r.start * width..r.end * width], out)
            };
            super::pool::in_chunks(super::pool::Phase {
                items: m,
                chunk: m.div_ceil(super::pool::threads()),
                run: &share,
            });
        }
        Ok(super::row_output(out, outer, width))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn rows_side_by_side_give_candles_bits() {
        let n = 96;
        let alpha = super::super::test_values(n, 3, 2.0);
        let weight = Tensor::new(alpha.as_slice(), &Device::Cpu).unwrap();
        let norm = RmsNorm::new(alpha, 1e-5);
        for rows in [1, 2, 7, 8, 9, 19, 40] {
            let mut x = super::super::test_values(rows * n, rows as u64, 50.0);
            x[..n].iter_mut().for_each(|v| *v *= 1e-3);
            let x = Tensor::from_vec(x, (1, rows, n), &Device::Cpu).unwrap();
            let ours = norm.forward(&x).unwrap().flatten_all().unwrap();
            let candle = candle_nn::ops::rms_norm(&x, &weight, 1e-5)
                .unwrap()
                .flatten_all()
                .unwrap();
            let bits = |t: Tensor| {
                t.to_vec1::<f32>()
                    .unwrap()
                    .into_iter()
                    .map(f32::to_bits)
                    .collect::<Vec<_>>()
            };
            assert_eq!(bits(ours), bits(candle), "{rows} rows");
        }
    }
}
