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
    /// Candidate token ids.
    scratch: Vec<u32>,
    /// Every token's weight.
    weights: Vec<f32>,
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
            weights: Vec::new(),
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
        // The largest l / t is the largest l over t (division by t > 0 rounds monotonically).
        let max = max_finite(logits) / t;
        if max == f32::NEG_INFINITY {
            return None;
        }
        // Every token's weight e^(l/t - max) (0 where forbidden), and their sum.
        let total = crate::exp::softmax_weights(logits, t, max, &mut self.weights);
        let weights = &self.weights;
        // A nucleus of all the mass keeps every token: no ordering needed.
        let top_p = self.params.top_p.filter(|&p| p < 1.0);
        let c = &mut self.scratch;
        c.clear();
        let min_w = self.params.min_p.unwrap_or(0.0);
        if self.params.top_k.is_none() && top_p.is_none() {
            // Every token is a candidate, in id order.
            let sum = if min_w > 0.0 {
                weights.iter().filter(|&&w| w >= min_w).sum()
            } else {
                total
            };
            let r = self.rng.random::<f32>() * sum;
            return draw_dense(r, weights, min_w);
        } else {
            c.extend((0..logits.len() as u32).filter(|&i| logits[i as usize].is_finite()));
            let desc = |a: &u32, b: &u32| {
                let (x, y) = (logits[*a as usize] / t, logits[*b as usize] / t);
                y.total_cmp(&x).then(a.cmp(b))
            };
            // Only the head of the distribution matters for top-k/top-p: order a prefix, and
            // widen it only when the nucleus is not inside it.
            let want = self.params.top_k.unwrap_or(usize::MAX).min(c.len());
            let mut sorted = want.min(64);
            if sorted < c.len() {
                c.select_nth_unstable_by(sorted, desc);
            }
            c[..sorted].sort_unstable_by(desc);
            let mut keep = want;
            if let Some(top_p) = top_p {
                loop {
                    let mut acc = 0.0;
                    let mut found = None;
                    for (i, &x) in c[..sorted].iter().enumerate() {
                        acc += weights[x as usize] / total;
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
            if keep > sorted && keep < c.len() {
                // Only top-k (beyond the sorted prefix): the kept set is unordered.
                c.select_nth_unstable_by(keep, desc);
            }
            c.truncate(keep);
        }
        let candidates = c.iter().map(|&x| (x, weights[x as usize]));
        let sum = candidates
            .clone()
            .filter(|&(_, w)| w >= min_w)
            .map(|(_, w)| w)
            .sum::<f32>();
        let r = self.rng.random::<f32>() * sum;
        draw(r, candidates, min_w)
    }
}

/// The largest finite value (`-inf` if none), in a form the compiler vectorizes.
fn max_finite(xs: &[f32]) -> f32 {
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = xs.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (m, &x) in lanes.iter_mut().zip(chunk) {
            let x = if x.abs() < f32::INFINITY {
                x
            } else {
                f32::NEG_INFINITY
            };
            *m = if x > *m { x } else { *m };
        }
    }
    rest.iter().chain(&lanes).fold(f32::NEG_INFINITY, |m, &x| {
        if x.abs() < f32::INFINITY && x > m {
            x
        } else {
            m
        }
    })
}

/// [`draw`] over every token, ids in order, without visiting each weight on the way: a run of
/// 64 whose kept weights `r` passes is skipped whole (its sum taken in a fixed order).
fn draw_dense(mut r: f32, weights: &[f32], min_w: f32) -> Option<u32> {
    const RUN: usize = 64;
    let kept = |w: f32| if w > 0.0 && w >= min_w { w } else { 0.0 };
    // The last run passed with some weight: its last kept token is the answer when rounding
    // leaves `r` past every run (looked up only then).
    let mut last_run = None;
    for (c, run) in weights.chunks(RUN).enumerate() {
        let mut lanes = [0f32; 8];
        let mut eights = run.chunks_exact(8);
        for eight in &mut eights {
            for (l, &w) in lanes.iter_mut().zip(eight) {
                *l += kept(w);
            }
        }
        for (l, &w) in lanes.iter_mut().zip(eights.remainder()) {
            *l += kept(w);
        }
        let total = (lanes[0] + lanes[4] + (lanes[1] + lanes[5]))
            + (lanes[2] + lanes[6] + (lanes[3] + lanes[7]));
        if total <= 0.0 {
            continue;
        }
        last_run = Some(c);
        if r >= total {
            r -= total;
            continue;
        }
        for (x, &w) in ((c * RUN) as u32..).zip(run) {
            let w = kept(w);
            if w > 0.0 {
                if r < w {
                    return Some(x);
                }
                r -= w;
            }
        }
        // Rounding left `r` past the run's last token: the next runs take what is left.
    }
    let c = last_run?;
    let run = &weights[c * RUN..weights.len().min((c + 1) * RUN)];
    ((c * RUN) as u32..)
        .zip(run)
        .filter(|(_, &w)| kept(w) > 0.0)
        .last()
        .map(|(x, _)| x)
}

/// The candidate at `r` in the running sum of the weights at least `min_w` (min-p is
/// relative to the most likely token, whose weight is 1); the last such one when rounding left
/// `r` just beyond the total; `None` when no weight is positive.
fn draw(mut r: f32, candidates: impl Iterator<Item = (u32, f32)>, min_w: f32) -> Option<u32> {
    let mut last = None;
    for (x, w) in candidates {
        if w > 0.0 && w >= min_w {
            if r < w {
                return Some(x);
            }
            r -= w;
            last = Some(x);
        }
    }
    last
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
    fn dense_draw_agrees_with_the_token_by_token_draw() {
        let mut weights = vec![0f32; 1000];
        for (i, w) in weights.iter_mut().enumerate() {
            *w = match i % 7 {
                0 => 0.0,
                1 => 1.0,
                _ => (i % 13) as f32 / 16.0,
            };
        }
        let total: f32 = weights.iter().sum();
        let sparse = |r: f32, min_w: f32| {
            draw(
                r,
                weights.iter().enumerate().map(|(i, &w)| (i as u32, w)),
                min_w,
            )
        };
        let mut differ = 0;
        for step in 0..997 {
            let r = total * (step as f32 + 0.5) / 997.0;
            for min_w in [0.0, 0.5] {
                let (a, b) = (draw_dense(r, &weights, min_w), sparse(r, min_w));
                // Equal, or neighbours where the two sums round apart at a boundary.
                let (a, b) = (a.unwrap(), b.unwrap());
                assert!(a.abs_diff(b) <= 7, "r {r} min_w {min_w}: {a} vs {b}");
                differ += (a != b) as usize;
                assert!(weights[a as usize] >= min_w.max(f32::MIN_POSITIVE));
            }
        }
        assert!(differ <= 2, "{differ} of 1994 draws differ");
        // Past the total: the last kept token; nothing kept: none.
        let last = weights.iter().rposition(|&w| w > 0.0).map(|i| i as u32);
        assert_eq!(draw_dense(total * 2.0, &weights, 0.0), last);
        // A last run of 35 (not whole eights) under min-p: the last token min-p keeps.
        let odd = &weights[..995];
        let last_kept = odd.iter().rposition(|&w| w >= 0.5).map(|i| i as u32);
        assert!(last_kept.is_some_and(|i| i >= 960));
        assert_eq!(draw_dense(total * 2.0, odd, 0.5), last_kept);
        // The tail's weights count in the draw: a draw inside the last run lands there.
        let odd_total: f32 = odd.iter().sum();
        let tail = draw_dense(odd_total - 0.01, odd, 0.0).unwrap();
        assert!(tail >= 960, "{tail}");
        assert_eq!(draw_dense(0.5, &[0.0; 100], 0.0), None);
        assert_eq!(max_finite(&[f32::NAN, -3.0, f32::INFINITY, -1.0]), -1.0);
        assert_eq!(max_finite(&[f32::NEG_INFINITY; 40]), f32::NEG_INFINITY);
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
