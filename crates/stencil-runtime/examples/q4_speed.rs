//! Q4 matmul speed by batch rows: `cargo run --release -p stencil-runtime --example q4_speed`.
//!
//! First µs per matmul and effective GMAC/s for SmolLM2-135M's shapes at 1, 4, 8, 16 rows, the
//! weights in the caches; then ms per pass over 30 layers of those shapes (about 60 MB, more than
//! a CPU's last-level cache, so the weights come from memory as in a decode step), the median
//! and the fastest of 40 passes.

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use stencil_runtime::models::q4::Q4Matrix;

/// The matrices of one SmolLM2-135M layer, `(n, k)`: fused Q/K/V, attention output, fused
/// gate/up, down.
const LAYER: [(usize, usize); 4] = [(960, 576), (576, 576), (3072, 576), (576, 1536)];

fn matrix(n: usize, k: usize) -> candle_core::Result<Q4Matrix> {
    let w = Tensor::randn(0f32, 1.0, (n, k), &Device::Cpu)?;
    let q = QTensor::quantize(&w, GgmlDType::Q4_1)?;
    Ok(Q4Matrix::from_qtensor(&q)?.expect("a Q4_1 matrix"))
}

fn inputs(m: usize, k: usize) -> Vec<f32> {
    (0..m * k)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect()
}

fn main() -> candle_core::Result<()> {
    for (n, k) in [(576usize, 576usize), (1536, 576), (576, 1536)] {
        let m4 = matrix(n, k)?;
        for m in [1usize, 4, 8, 16] {
            let x = inputs(m, k);
            let mut out = vec![0f32; m * n];
            let runs = 2000 / m.max(1);
            m4.matmul(&x, m, &mut out);
            let t = std::time::Instant::now();
            for _ in 0..runs {
                m4.matmul(&x, m, &mut out);
            }
            let us = t.elapsed().as_secs_f64() * 1e6 / runs as f64;
            println!(
                "n {n:5} k {k:5} rows {m:2}: {us:8.1} us  {:6.2} GMAC/s  {:6.2} us/row",
                (m * n * k) as f64 / us / 1e3,
                us / m as f64
            );
        }
    }
    let layers = (0..30)
        .map(|_| LAYER.map(|(n, k)| matrix(n, k)))
        .map(|l| l.into_iter().collect::<candle_core::Result<Vec<_>>>())
        .collect::<candle_core::Result<Vec<_>>>()?;
    for m in [1usize, 16, 32] {
        let x = inputs(m, 3072);
        let mut out = vec![0f32; m * 3072];
        let mut passes: Vec<f64> = (0..40)
            .map(|_| {
                let t = std::time::Instant::now();
                for layer in &layers {
                    for (w, (n, k)) in layer.iter().zip(LAYER) {
                        w.matmul(&x[..m * k], m, &mut out[..m * n]);
                    }
                }
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        passes.sort_by(f64::total_cmp);
        println!(
            "30 layers, rows {m:2}: median {:6.2} ms  fastest {:6.2} ms",
            passes[passes.len() / 2],
            passes[0]
        );
    }
    Ok(())
}
