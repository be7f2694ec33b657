//! Token sampling: greedy, temperature, top-k, top-p, min-p, repetition penalty; seeded.
//!
//! The sampler works on a logits slice the caller owns, so a constraint layer can set forbidden
//! tokens to `-inf` first: a token with `-inf` logit is never returned.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
pub use stencil_types::SamplingParams;

use crate::error::Result;

/// A seeded sampler. One per generation.
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
    scratch: Vec<(u32, f32)>,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Result<Self> {
        params.validate()?;
        let rng = match params.seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_os_rng(),
        };
        Ok(Self {
            params,
            rng,
            scratch: Vec::new(),
        })
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Applies the repetition penalty to `logits` for every token in `history`.
    pub fn penalize(&self, logits: &mut [f32], history: &[u32]) {
        let Some(p) = self.params.repetition_penalty.filter(|&p| p != 1.0) else {
            return;
        };
        let mut seen = std::collections::HashSet::new();
        for &t in history {
            if seen.insert(t) {
                if let Some(l) = logits.get_mut(t as usize) {
                    *l = if *l > 0.0 { *l / p } else { *l * p };
                }
            }
        }
    }

    /// Picks a token. Returns `None` only when every logit is `-inf` or NaN (nothing allowed).
    pub fn sample(&mut self, logits: &[f32]) -> Option<u32> {
        if self.params.temperature == 0.0 {
            return argmax(logits);
        }
        let t = self.params.temperature;
        let c = &mut self.scratch;
        c.clear();
        c.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, l)| l.is_finite())
                .map(|(i, &l)| (i as u32, l / t)),
        );
        if c.is_empty() {
            return None;
        }
        let desc = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        // Only the head of the distribution matters for top-k/top-p: order a prefix, and widen
        // it only when the nucleus is not inside it.
        let want = self.params.top_k.unwrap_or(usize::MAX).min(c.len());
        let mut sorted = want.min(64);
        if sorted < c.len() {
            c.select_nth_unstable_by(sorted, desc);
        }
        c[..sorted].sort_unstable_by(desc);
        let max = c[0].1;
        let total: f32 = c.iter().map(|x| (x.1 - max).exp()).sum();
        let mut keep = want;
        if let Some(top_p) = self.params.top_p {
            loop {
                let mut acc = 0.0;
                let mut found = None;
                for (i, x) in c[..sorted].iter().enumerate() {
                    acc += (x.1 - max).exp() / total;
                    if acc >= top_p {
                        found = Some(i + 1);
                        break;
                    }
                }
                match found {
                    Some(n) => {
                        keep = keep.min(n);
                        break;
                    }
                    None if sorted >= want => break,
                    None => {
                        c.sort_unstable_by(desc);
                        sorted = c.len();
                    }
                }
            }
        }
        if keep > sorted {
            // Only top-k (beyond the sorted prefix) or nothing: the kept set is unordered.
            if keep < c.len() {
                c.select_nth_unstable_by(keep, desc);
            }
        }
        let kept = &c[..keep];
        let min_w = self.params.min_p.map_or(0.0, |p| p); // relative to the max probability
        let weights: Vec<f32> = kept
            .iter()
            .map(|x| {
                let w = (x.1 - max).exp();
                if w < min_w {
                    0.0
                } else {
                    w
                }
            })
            .collect();
        let sum: f32 = weights.iter().sum();
        let mut r = self.rng.random::<f32>() * sum;
        for (x, w) in kept.iter().zip(&weights) {
            if *w > 0.0 {
                if r < *w {
                    return Some(x.0);
                }
                r -= w;
            }
        }
        // Rounding left r just above the last weight: take the last positive one.
        kept.iter()
            .zip(&weights)
            .rev()
            .find(|(_, w)| **w > 0.0)
            .map(|(x, _)| x.0)
    }
}

/// Index of the largest finite logit (lowest index on ties).
pub fn argmax(logits: &[f32]) -> Option<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &l) in logits.iter().enumerate() {
        if l.is_nan() || l == f32::NEG_INFINITY {
            continue;
        }
        if best.is_none_or(|(_, b)| l > b) {
            best = Some((i, l));
        }
    }
    best.map(|(i, _)| i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(t: f32) -> SamplingParams {
        SamplingParams {
            temperature: t,
            seed: Some(7),
            ..Default::default()
        }
    }

    #[test]
    fn greedy_takes_argmax_and_skips_masked() {
        let mut s = Sampler::new(params(0.0)).unwrap();
        assert_eq!(s.sample(&[0.1, 3.0, 2.0]), Some(1));
        assert_eq!(s.sample(&[0.1, f32::NEG_INFINITY, 2.0]), Some(2));
        assert_eq!(s.sample(&[f32::NEG_INFINITY; 3]), None);
    }

    #[test]
    fn masked_tokens_are_never_sampled() {
        let mut s = Sampler::new(params(1.5)).unwrap();
        let mut logits = vec![0.0f32; 1000];
        for (i, l) in logits.iter_mut().enumerate() {
            if i % 3 != 0 {
                *l = f32::NEG_INFINITY;
            }
        }
        for _ in 0..2000 {
            assert_eq!(s.sample(&logits).unwrap() % 3, 0);
        }
    }

    #[test]
    fn seeded_runs_repeat() {
        let logits: Vec<f32> = (0..500).map(|i| ((i * 37 % 101) as f32) / 20.0).collect();
        let draw = || {
            let mut s = Sampler::new(params(1.0)).unwrap();
            (0..50)
                .map(|_| s.sample(&logits).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(), draw());
    }

    #[test]
    fn top_k_and_top_p_restrict_the_support() {
        let logits: Vec<f32> = (0..200).map(|i| -(i as f32) * 0.01).collect();
        let mut s = Sampler::new(SamplingParams {
            top_k: Some(3),
            ..params(1.0)
        })
        .unwrap();
        for _ in 0..500 {
            assert!(s.sample(&logits).unwrap() < 3);
        }
        // Token 0 has ~90% of the mass: top_p 0.5 keeps only it.
        let mut peaked = vec![0.0f32; 200];
        peaked[5] = 10.0;
        let mut s = Sampler::new(SamplingParams {
            top_p: Some(0.5),
            ..params(1.0)
        })
        .unwrap();
        for _ in 0..200 {
            assert_eq!(s.sample(&peaked), Some(5));
        }
        // top_p needing more than the 64-token prefix still works (flat distribution).
        let flat = vec![0.0f32; 200];
        let mut s = Sampler::new(SamplingParams {
            top_p: Some(0.9),
            ..params(1.0)
        })
        .unwrap();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..3000 {
            seen.insert(s.sample(&flat).unwrap());
        }
        assert!(seen.len() > 150, "{}", seen.len());
        // ~180 of 200 equal tokens (float rounding may admit one more).
        assert!(seen.iter().all(|&t| t < 182), "top 90% of 200 equal tokens");
    }

    #[test]
    fn min_p_drops_unlikely_tokens() {
        let mut logits = vec![0.0f32; 100];
        logits[0] = 5.0; // p(0)/p(other) = e^5 ≈ 148
        let mut s = Sampler::new(SamplingParams {
            min_p: Some(0.05),
            ..params(1.0)
        })
        .unwrap();
        for _ in 0..500 {
            assert_eq!(s.sample(&logits), Some(0));
        }
    }

    #[test]
    fn repetition_penalty_and_validation() {
        let s = Sampler::new(SamplingParams {
            repetition_penalty: Some(2.0),
            ..params(0.0)
        })
        .unwrap();
        let mut l = vec![4.0, -1.0, 3.0];
        s.penalize(&mut l, &[0, 1, 0]);
        assert_eq!(l, vec![2.0, -2.0, 3.0]);
        for bad in [
            SamplingParams {
                temperature: -1.0,
                ..Default::default()
            },
            SamplingParams {
                top_p: Some(0.0),
                ..Default::default()
            },
            SamplingParams {
                top_k: Some(0),
                ..Default::default()
            },
            SamplingParams {
                min_p: Some(1.5),
                ..Default::default()
            },
        ] {
            assert!(Sampler::new(bad).is_err());
        }
    }
}
