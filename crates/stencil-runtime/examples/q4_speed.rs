//! Q4 matmul speed by batch rows: `cargo run --release -p stencil-runtime --example q4_speed`.
//! Prints µs per matmul and effective GMAC/s for SmolLM2-135M's shapes at 1, 4, 8, 16 rows.

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use stencil_runtime::models::q4::Q4Matrix;

fn main() -> candle_core::Result<()> {
    for (n, k) in [(576usize, 576usize), (1536, 576), (576, 1536)] {
        let w = Tensor::randn(0f32, 1.0, (n, k), &Device::Cpu)?;
        let q = QTensor::quantize(&w, GgmlDType::Q4_1)?;
        let m4 = Q4Matrix::from_qtensor(&q)?.expect("a Q4_1 matrix");
        for m in [1usize, 4, 8, 16] {
            let x: Vec<f32> = (0..m * k)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
                .collect();
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
    Ok(())
}
