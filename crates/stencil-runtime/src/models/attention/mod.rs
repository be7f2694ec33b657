//! Self-attention on the CPU for a whole batch in one call per layer: RoPE, the KV cache
//! append and causal attention of every new row of every sequence.
//!
//! Done with candle ops, attention costs about a dozen small ops per sequence and layer, which
//! for a batch of decoding sequences costs more than the weight matmuls. Here one call covers
//! every row, in one pool call of two phases (`models/pool.rs`): row by row, RoPE and the new
//! keys and values into each sequence's cache; then (row, KV head) units of attention
//! (`kernel.rs`), each reading only its own sequence's cache, so a sequence's result does not
//! depend on what else is in the batch.

use std::cell::RefCell;

use half::f16;
use half::slice::HalfFloatSliceExt;

use super::pool::{Disjoint, Phase};
use kernel::{attend_shared, Kv};

mod kernel;

/// One layer's keys and values of one sequence, `[position][n_kv_head * head_dim]`, in f16
/// (as llama.cpp's default cache): at long contexts decoding is bound by reading the cache.
#[derive(Default)]
pub struct HostKv {
    k: Vec<f16>,
    v: Vec<f16>,
}

/// Head layout and RoPE tables.
pub struct Attention {
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    /// NeoX-style RoPE (rotate halves) instead of interleaved pairs.
    pub neox: bool,
    /// `[position][head_dim / 2]`.
    pub cos: Vec<f32>,
    pub sin: Vec<f32>,
}

/// One sequence's part of [`Attention::attend`].
pub struct Rows<'a> {
    pub cache: &'a mut HostKv,
    /// Positions already cached (the first new row's position).
    pub pos: usize,
    /// The sequence's first row in the batch, and its number of rows.
    pub first: usize,
    pub rows: usize,
    /// Positions to allocate at the first append (0: grow as needed).
    pub reserve: usize,
}

impl HostKv {
    /// The keys and the values of the first `positions` positions (`width` values each).
    pub(crate) fn cached(&self, positions: usize, width: usize) -> [&[f16]; 2] {
        let n = (positions * width).min(self.k.len());
        [&self.k[..n], &self.v[..n]]
    }

    /// A copy of the first `positions` positions (`width` floats each).
    pub fn prefix(&self, positions: usize, width: usize) -> Self {
        Self {
            k: self.k[..positions * width].to_vec(),
            v: self.v[..positions * width].to_vec(),
        }
    }
}

thread_local! {
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

impl Attention {
    /// `qkv`: the projections of all rows of the batch, `[rows][q | k | v]` (`q` is
    /// `n_head * head_dim` wide, `k` and `v` `n_kv_head * head_dim` each, as the fused
    /// projection gives them); returns the attention output `[rows][n_head * head_dim]`.
    /// Appends each row's rotated key and its value to its sequence's cache.
    pub fn attend(&self, qkv: &[f32], seqs: &mut [Rows<'_>]) -> Vec<f32> {
        let (hd, nh, nkv) = (self.head_dim, self.n_head, self.n_kv_head);
        let (qw, kw) = (nh * hd, nkv * hd);
        let width = qw + 2 * kw;
        let total: usize = seqs.iter().map(|s| s.rows).sum();
        assert_eq!(
            qkv.len(),
            total * width,
            "qkv is not {total} rows of {width}"
        );
        // Positions of the rows, and which sequence each belongs to.
        let mut row_pos = vec![0usize; total];
        let mut row_seq = vec![0usize; total];
        for (i, s) in seqs.iter().enumerate() {
            for r in 0..s.rows {
                row_pos[s.first + r] = s.pos + r;
                row_seq[s.first + r] = i;
            }
        }
        // Room in each cache for its new rows (filled in the first phase below).
        let mut caches = Vec::with_capacity(seqs.len());
        for s in seqs.iter_mut() {
            let c = &mut *s.cache;
            c.k.truncate(s.pos * kw);
            c.v.truncate(s.pos * kw);
            if c.k.capacity() == 0 && s.reserve > 0 {
                c.k.reserve_exact(s.reserve * kw);
                c.v.reserve_exact(s.reserve * kw);
            }
            let len = (s.pos + s.rows) * kw;
            c.k.resize(len, f16::ZERO);
            c.v.resize(len, f16::ZERO);
            caches.push((Disjoint::new(&mut c.k), Disjoint::new(&mut c.v), len));
        }
        let mut queries = vec![0f32; total * qw];
        let q_rows = Disjoint::new(&mut queries);
        // First phase, row by row: the row's query heads rotated (RoPE) into `queries`, its key
        // heads rotated and its value into its sequence's cache (as f16).
        let append = |rows: std::ops::Range<usize>| {
            let mut key = vec![0f32; kw];
            for r in rows {
                let p = row_pos[r];
                let row = &qkv[r * width..(r + 1) * width];
                // SAFETY (parts): row `r`'s query and cache position are this row's alone.
                let qr = unsafe { q_rows.part(r * qw..(r + 1) * qw) };
                qr.copy_from_slice(&row[..qw]);
                for h in qr.chunks_exact_mut(hd) {
                    self.rotate(h, p);
                }
                key.copy_from_slice(&row[qw..qw + kw]);
                for h in key.chunks_exact_mut(hd) {
                    self.rotate(h, p);
                }
                let (ck, cv, _) = &caches[row_seq[r]];
                unsafe { ck.part(p * kw..(p + 1) * kw) }.convert_from_f32_slice(&key);
                unsafe { cv.part(p * kw..(p + 1) * kw) }.convert_from_f32_slice(&row[qw + kw..]);
            }
        };
        let mut out = vec![0f32; total * qw];
        let out_rows = Disjoint::new(&mut out);
        let group = nh / nkv;
        let scale = 1.0 / (hd as f32).sqrt();
        // Second phase, by (row, KV head): attention of the row's query heads that share the
        // KV head (grouped-query attention) over the sequence's cache.
        let unit = |u: usize| {
            let (r, g) = (u / nkv, u % nkv);
            let (ck, cv, len) = &caches[row_seq[r]];
            let first = r * qw + g * group * hd;
            // SAFETY (parts): after the first phase the caches and queries are only read,
            // and unit (r, g) alone writes its heads' elements of `out`.
            let (keys, values) = unsafe { (ck.read(0..*len), cv.read(0..*len)) };
            let queries = unsafe { q_rows.read(first..first + group * hd) };
            let y = unsafe { out_rows.part(first..first + group * hd) };
            let kv = Kv {
                keys,
                values,
                stride: kw,
                offset: g * hd,
                len: row_pos[r] + 1,
                head_dim: hd,
                scale,
            };
            SCORES.with(|s| attend_shared(&kv, queries, &mut s.borrow_mut(), y));
        };
        let units = |range: std::ops::Range<usize>| range.for_each(unit);
        super::pool::in_phases(Phase::new(total, &append), Phase::new(total * nkv, &units));
        out
    }

    /// Rotates one head's vector for position `p`.
    fn rotate(&self, x: &mut [f32], p: usize) {
        let half = self.head_dim / 2;
        let (cos, sin) = (
            &self.cos[p * half..(p + 1) * half],
            &self.sin[p * half..(p + 1) * half],
        );
        for i in 0..half {
            let (a, b) = if self.neox {
                (i, i + half)
            } else {
                (2 * i, 2 * i + 1)
            };
            let (x0, x1) = (x[a], x[b]);
            x[a] = x0 * cos[i] - x1 * sin[i];
            x[b] = x0 * sin[i] + x1 * cos[i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attention(neox: bool) -> Attention {
        let (hd, ctx) = (8, 32);
        let half = hd / 2;
        let mut cos = Vec::new();
        let mut sin = Vec::new();
        for p in 0..ctx {
            for i in 0..half {
                let f = p as f32 / 10000f32.powf(2.0 * i as f32 / hd as f32);
                cos.push(f.cos());
                sin.push(f.sin());
            }
        }
        Attention {
            n_head: 4,
            n_kv_head: 2,
            head_dim: hd,
            neox,
            cos,
            sin,
        }
    }

    /// `rows` rows of queries, keys and values side by side, as the fused projection gives them.
    fn fused(q: &[f32], k: &[f32], v: &[f32], rows: usize) -> Vec<f32> {
        let (qw, kw) = (q.len() / rows, k.len() / rows);
        (0..rows)
            .flat_map(|r| {
                let (q, k, v) = (
                    &q[r * qw..(r + 1) * qw],
                    &k[r * kw..(r + 1) * kw],
                    &v[r * kw..(r + 1) * kw],
                );
                q.iter().chain(k).chain(v).copied()
            })
            .collect()
    }

    pub(super) fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0)
            .collect()
    }

    /// Straightforward reference: rotate, then softmax(q k^T / sqrt(d)) v over positions 0..=p.
    fn reference(a: &Attention, q: &[f32], ks: &[Vec<f32>], vs: &[Vec<f32>], p: usize) -> Vec<f32> {
        let (hd, nh) = (a.head_dim, a.n_head);
        let mut q = q.to_vec();
        for h in q.chunks_exact_mut(hd) {
            a.rotate(h, p);
        }
        let mut out = vec![0f32; nh * hd];
        for h in 0..nh {
            let g = h / (nh / a.n_kv_head);
            let s: Vec<f32> = (0..=p)
                .map(|j| {
                    let k = &ks[j][g * hd..(g + 1) * hd];
                    q[h * hd..(h + 1) * hd]
                        .iter()
                        .zip(k)
                        .map(|(x, y)| x * y)
                        .sum::<f32>()
                        / (hd as f32).sqrt()
                })
                .collect();
            let m = s.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f32> = s.iter().map(|x| (x - m).exp()).collect();
            let z: f32 = e.iter().sum();
            for j in 0..=p {
                for d in 0..hd {
                    out[h * hd + d] += e[j] / z * vs[j][g * hd + d];
                }
            }
        }
        out
    }

    pub(super) fn halves(v: &[f32]) -> Vec<f16> {
        v.iter().map(|&x| f16::from_f32(x)).collect()
    }

    #[test]
    fn matches_reference_and_is_independent_of_the_batch() {
        for neox in [false, true] {
            let a = attention(neox);
            let (qw, kw) = (32, 16);
            // Sequence A: a 5-token prompt then one decode row; sequence B: 3 then 1.
            let qa = values(6 * qw, 1);
            let ka = values(6 * kw, 2);
            let va = values(6 * kw, 3);
            let qb = values(4 * qw, 4);
            let kb = values(4 * kw, 5);
            let vb = values(4 * kw, 6);
            // Alone.
            let mut ca = HostKv::default();
            let step =
                |c: &mut HostKv, q: &[f32], k: &[f32], v: &[f32], pos: usize, rows: usize| {
                    a.attend(
                        &fused(q, k, v, rows),
                        &mut [Rows {
                            cache: c,
                            pos,
                            first: 0,
                            rows,
                            reserve: 0,
                        }],
                    )
                };
            step(&mut ca, &qa[..5 * qw], &ka[..5 * kw], &va[..5 * kw], 0, 5);
            let alone = step(&mut ca, &qa[5 * qw..], &ka[5 * kw..], &va[5 * kw..], 5, 1);
            // Together with B (B's prompt in the same step as A's decode row).
            let mut ca2 = HostKv::default();
            step(&mut ca2, &qa[..5 * qw], &ka[..5 * kw], &va[..5 * kw], 0, 5);
            let mut cb = HostKv::default();
            let q = [&qb[..3 * qw], &qa[5 * qw..]].concat();
            let k = [&kb[..3 * kw], &ka[5 * kw..]].concat();
            let v = [&vb[..3 * kw], &va[5 * kw..]].concat();
            let both = a.attend(
                &fused(&q, &k, &v, 4),
                &mut [
                    Rows {
                        cache: &mut cb,
                        pos: 0,
                        first: 0,
                        rows: 3,
                        reserve: 0,
                    },
                    Rows {
                        cache: &mut ca2,
                        pos: 5,
                        first: 3,
                        rows: 1,
                        reserve: 8,
                    },
                ],
            );
            assert_eq!(
                alone,
                both[3 * qw..].to_vec(),
                "batched row differs from alone"
            );
            // Against the reference: rotated keys and values as stored (in f16).
            let stored = |c: &[f16], j: usize| -> Vec<f32> {
                c[j * kw..(j + 1) * kw].iter().map(|x| x.to_f32()).collect()
            };
            let keys: Vec<Vec<f32>> = (0..6).map(|j| stored(&ca.k, j)).collect();
            let vals: Vec<Vec<f32>> = (0..6).map(|j| stored(&ca.v, j)).collect();
            let want = reference(&a, &qa[5 * qw..], &keys, &vals, 5);
            for (x, y) in alone.iter().zip(&want) {
                assert!((x - y).abs() < 1e-5, "{x} vs {y}");
            }
        }
    }
}
