//! Self-attention on the CPU for a whole batch in one call per layer: RoPE, the KV cache
//! append and causal attention of every new row of every sequence.
//!
//! Done with candle ops, attention costs about a dozen small ops per sequence and layer, which
//! for a batch of decoding sequences costs more than the weight matmuls. Here one call covers
//! every row: the work is split into (row, head) units over candle's thread pool, and each
//! unit reads only its own sequence's cache, so a sequence's result does not depend on what
//! else is in the batch.

use std::cell::RefCell;

/// One layer's keys and values of one sequence, `[position][n_kv_head * head_dim]`.
#[derive(Default)]
pub struct HostKv {
    k: Vec<f32>,
    v: Vec<f32>,
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
    /// `q`: `[rows][n_head * head_dim]`, `k` and `v`: `[rows][n_kv_head * head_dim]` for all
    /// rows of the batch; returns the attention output `[rows][n_head * head_dim]`. Rotates
    /// `q` and `k` in place and appends `k`/`v` to each sequence's cache.
    pub fn attend(
        &self,
        q: &mut [f32],
        k: &mut [f32],
        v: &[f32],
        seqs: &mut [Rows<'_>],
    ) -> Vec<f32> {
        let (hd, nh, nkv) = (self.head_dim, self.n_head, self.n_kv_head);
        let (qw, kw) = (nh * hd, nkv * hd);
        let total: usize = seqs.iter().map(|s| s.rows).sum();
        assert_eq!(q.len(), total * qw);
        assert_eq!(k.len(), total * kw);
        assert_eq!(v.len(), total * kw);
        // Positions of the rows, and which sequence each belongs to.
        let mut row_pos = vec![0usize; total];
        let mut row_seq = vec![0usize; total];
        for (i, s) in seqs.iter().enumerate() {
            for r in 0..s.rows {
                row_pos[s.first + r] = s.pos + r;
                row_seq[s.first + r] = i;
            }
        }
        for (r, &p) in row_pos.iter().enumerate() {
            for h in q[r * qw..(r + 1) * qw].chunks_exact_mut(hd) {
                self.rotate(h, p);
            }
            for h in k[r * kw..(r + 1) * kw].chunks_exact_mut(hd) {
                self.rotate(h, p);
            }
        }
        for s in seqs.iter_mut() {
            let c = &mut *s.cache;
            c.k.truncate(s.pos * kw);
            c.v.truncate(s.pos * kw);
            if c.k.capacity() == 0 && s.reserve > 0 {
                c.k.reserve_exact(s.reserve * kw);
                c.v.reserve_exact(s.reserve * kw);
            }
            c.k.extend_from_slice(&k[s.first * kw..(s.first + s.rows) * kw]);
            c.v.extend_from_slice(&v[s.first * kw..(s.first + s.rows) * kw]);
        }
        let mut out = vec![0f32; total * qw];
        let out_ptr = OutPtr(out.as_mut_ptr());
        let caches: Vec<&HostKv> = seqs.iter().map(|s| &*s.cache).collect();
        let group = nh / nkv;
        let scale = 1.0 / (hd as f32).sqrt();
        let unit = |u: usize| {
            let out_ptr = &out_ptr;
            let (r, h) = (u / nh, u % nh);
            let g = h / group;
            let cache = caches[row_seq[r]];
            let len = row_pos[r] + 1;
            let qh = &q[r * qw + h * hd..r * qw + (h + 1) * hd];
            // SAFETY: unit (r, h) alone writes these `hd` elements of `out`.
            let y = unsafe { std::slice::from_raw_parts_mut(out_ptr.0.add(r * qw + h * hd), hd) };
            SCORES.with(|s| {
                let head = Head {
                    q: qh,
                    keys: &cache.k,
                    values: &cache.v,
                    stride: kw,
                    offset: g * hd,
                    len,
                    scale,
                };
                head.attend(&mut s.borrow_mut(), y);
            });
        };
        let units = total * nh;
        candle_core::utils::barrier_pool().execute_chunked(units, |range| range.for_each(unit));
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

struct OutPtr(*mut f32);
// SAFETY: units write disjoint slices of the output.
unsafe impl Sync for OutPtr {}

/// One (row, head) unit: a query against `len` cached positions of one KV head.
struct Head<'a> {
    q: &'a [f32],
    keys: &'a [f32],
    values: &'a [f32],
    /// Floats per cached position, and where this KV head starts in one.
    stride: usize,
    offset: usize,
    len: usize,
    scale: f32,
}

impl Head<'_> {
    /// Writes softmax(q k^T * scale) v into `y` (zeroed), with `scores` as scratch.
    fn attend(&self, scores: &mut Vec<f32>, y: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if super::q8_0::avx2_fma() {
            // SAFETY: the CPU has AVX2 and FMA (checked at run time).
            return unsafe { self.attend_avx2(scores, y) };
        }
        self.attend_portable(scores, y)
    }

    /// The same code compiled for AVX2: the same operations in the same order, on wider
    /// vectors (no contraction into FMA), so results are bit-identical to the portable path.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn attend_avx2(&self, scores: &mut Vec<f32>, y: &mut [f32]) {
        self.attend_portable(scores, y)
    }

    #[inline(always)]
    fn attend_portable(&self, scores: &mut Vec<f32>, y: &mut [f32]) {
        let hd = y.len();
        scores.clear();
        let mut max = f32::NEG_INFINITY;
        for j in 0..self.len {
            let at = j * self.stride + self.offset;
            let x = dot(self.q, &self.keys[at..at + hd]) * self.scale;
            max = max.max(x);
            scores.push(x);
        }
        let mut sum = 0f32;
        for x in scores.iter_mut() {
            *x = (*x - max).exp();
            sum += *x;
        }
        for (j, &w) in scores.iter().enumerate() {
            let at = j * self.stride + self.offset;
            for (o, &x) in y.iter_mut().zip(&self.values[at..at + hd]) {
                *o += w * x;
            }
        }
        let inv = 1.0 / sum;
        y.iter_mut().for_each(|o| *o *= inv);
    }
}

/// Dot product with eight independent sums (vectorizes; the order is fixed).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
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

    fn values(n: usize, seed: u32) -> Vec<f32> {
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

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx2_build_is_bit_identical_to_the_portable_one() {
        if !crate::models::q8_0::avx2_fma() {
            eprintln!("NOTICE: no AVX2/FMA on this CPU; nothing to compare");
            return;
        }
        let (hd, len, stride) = (64, 300, 3 * 64);
        let q = values(hd, 7);
        let keys = values(len * stride, 8);
        let vals = values(len * stride, 9);
        let head = Head {
            q: &q,
            keys: &keys,
            values: &vals,
            stride,
            offset: 64,
            len,
            scale: 0.125,
        };
        let (mut a, mut b) = (vec![0f32; hd], vec![0f32; hd]);
        head.attend_portable(&mut Vec::new(), &mut a);
        // SAFETY: checked above.
        unsafe { head.attend_avx2(&mut Vec::new(), &mut b) };
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
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
                        &mut q.to_vec(),
                        &mut k.to_vec(),
                        v,
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
            let mut q = [&qb[..3 * qw], &qa[5 * qw..]].concat();
            let mut k = [&kb[..3 * kw], &ka[5 * kw..]].concat();
            let v = [&vb[..3 * kw], &va[5 * kw..]].concat();
            let both = a.attend(
                &mut q,
                &mut k,
                &v,
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
            // Against the reference: rotated keys as stored, values as given.
            let keys: Vec<Vec<f32>> = (0..6)
                .map(|j| ca.k[j * kw..(j + 1) * kw].to_vec())
                .collect();
            let vals: Vec<Vec<f32>> = (0..6).map(|j| va[j * kw..(j + 1) * kw].to_vec()).collect();
            let want = reference(&a, &qa[5 * qw..], &keys, &vals, 5);
            for (x, y) in alone.iter().zip(&want) {
                assert!((x - y).abs() < 1e-5, "{x} vs {y}");
            }
        }
    }
}
