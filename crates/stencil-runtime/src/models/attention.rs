//! Self-attention on the CPU for a whole batch in one call per layer: RoPE, the KV cache
//! append and causal attention of every new row of every sequence.
//!
//! Done with candle ops, attention costs about a dozen small ops per sequence and layer, which
//! for a batch of decoding sequences costs more than the weight matmuls. Here one call covers
//! every row, in one pool call of two phases (`models/pool.rs`): row by row, RoPE and the new
//! keys and values into each sequence's cache; then (row, head) units of attention, each
//! reading only its own sequence's cache, so a sequence's result does not depend on what else
//! is in the batch.

use std::cell::RefCell;

use half::f16;
use half::slice::HalfFloatSliceExt;

use super::pool::{Disjoint, Phase};

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
        // Second phase, (row, head) by (row, head): attention over the sequence's cache.
        let unit = |u: usize| {
            let (r, h) = (u / nh, u % nh);
            let g = h / group;
            let (ck, cv, len) = &caches[row_seq[r]];
            // SAFETY (parts): after the first phase the caches and queries are only read,
            // and unit (r, h) alone writes its `hd` elements of `out`.
            let (keys, values) = unsafe { (ck.read(0..*len), cv.read(0..*len)) };
            let qh = unsafe { q_rows.read(r * qw + h * hd..r * qw + (h + 1) * hd) };
            let y = unsafe { out_rows.part(r * qw + h * hd..r * qw + (h + 1) * hd) };
            SCORES.with(|s| {
                let head = Head {
                    q: qh,
                    keys,
                    values,
                    stride: kw,
                    offset: g * hd,
                    len: row_pos[r] + 1,
                    scale,
                };
                head.attend(&mut s.borrow_mut(), y);
            });
        };
        let units = |range: std::ops::Range<usize>| range.for_each(unit);
        super::pool::in_phases(Phase::new(total, &append), Phase::new(total * nh, &units));
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

/// One (row, head) unit: a query against `len` cached positions of one KV head.
struct Head<'a> {
    q: &'a [f32],
    keys: &'a [f16],
    values: &'a [f16],
    /// Values per cached position, and where this KV head starts in one.
    stride: usize,
    offset: usize,
    len: usize,
    scale: f32,
}

/// Lanes of the fixed-order sums (one AVX2 register of f32).
const LANES: usize = 8;

impl Head<'_> {
    /// Writes softmax(q k^T * scale) v into `y` (zeroed), with `scores` as scratch.
    ///
    /// Every sum runs in eight lanes of FMAs in a fixed order and `exp` is [`crate::exp::exp`], so the
    /// AVX2 path and the portable one give the same bits.
    fn attend(&self, scores: &mut Vec<f32>, y: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if self.q.len().is_multiple_of(LANES) && super::simd() {
            // SAFETY: the CPU has AVX2, FMA and F16C (checked at run time); rows are whole
            // registers.
            return unsafe { avx2::attend(self, scores, y) };
        }
        self.attend_portable(scores, y)
    }

    fn attend_portable(&self, scores: &mut Vec<f32>, y: &mut [f32]) {
        let hd = y.len();
        scores.clear();
        let mut max = f32::NEG_INFINITY;
        for j in 0..self.len {
            let at = j * self.stride + self.offset;
            let mut acc = [0f32; LANES];
            for (i, (&q, &k)) in self.q.iter().zip(&self.keys[at..at + hd]).enumerate() {
                acc[i % LANES] = q.mul_add(k.to_f32(), acc[i % LANES]);
            }
            let x = hsum(acc) * self.scale;
            max = max.max(x);
            scores.push(x);
        }
        let mut lanes = [0f32; LANES];
        for (j, x) in scores.iter_mut().enumerate() {
            *x = crate::exp::exp(*x - max);
            lanes[j % LANES] += *x;
        }
        let sum = hsum(lanes);
        for (j, &w) in scores.iter().enumerate() {
            let at = j * self.stride + self.offset;
            for (o, &v) in y.iter_mut().zip(&self.values[at..at + hd]) {
                *o = w.mul_add(v.to_f32(), *o);
            }
        }
        let inv = 1.0 / sum;
        y.iter_mut().for_each(|o| *o *= inv);
    }
}

/// The AVX2 horizontal sum order: lane `i` plus lane `i + 4`, then neighbours (`hadd`).
fn hsum(v: [f32; LANES]) -> f32 {
    let r: [f32; 4] = std::array::from_fn(|i| v[i] + v[i + 4]);
    (r[0] + r[1]) + (r[2] + r[3])
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Head, LANES};
    use crate::exp::avx2::exp;
    use std::arch::x86_64::*;

    /// [`Head::attend_portable`] eight lanes at a time: scores for eight positions at once
    /// (eight independent FMA chains, summed by one transposing reduction), and the output
    /// held in registers across all positions.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn attend(h: &Head<'_>, scores: &mut Vec<f32>, y: &mut [f32]) {
        let hd = y.len();
        let chunks = hd / LANES;
        scores.clear();
        scores.resize(h.len, 0.0);
        let (kp, qp) = (h.keys.as_ptr(), h.q.as_ptr());
        let whole = h.len / LANES * LANES;
        let sp = scores.as_mut_ptr();
        let scale = _mm256_set1_ps(h.scale);
        let mut vmax = _mm256_set1_ps(f32::NEG_INFINITY);
        // SAFETY (loads and stores below): position j's head spans `at..at + hd` of the
        // cache, and `q`, `y` and `scores` have `hd`, `hd` and `len` elements.
        for j0 in (0..whole).step_by(LANES) {
            let mut acc = [_mm256_setzero_ps(); LANES];
            for c in 0..chunks {
                let q = unsafe { _mm256_loadu_ps(qp.add(c * LANES)) };
                for (t, a) in acc.iter_mut().enumerate() {
                    let at = (j0 + t) * h.stride + h.offset + c * LANES;
                    let k = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(kp.add(at).cast())) };
                    *a = _mm256_fmadd_ps(q, k, *a);
                }
            }
            let x = _mm256_mul_ps(hsum8(acc), scale);
            vmax = _mm256_max_ps(vmax, x);
            unsafe { _mm256_storeu_ps(sp.add(j0), x) };
        }
        let mut lanes = [0f32; LANES];
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), vmax) };
        let mut max = lanes.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        for (j, s) in scores.iter_mut().enumerate().skip(whole) {
            let at = j * h.stride + h.offset;
            let mut acc = _mm256_setzero_ps();
            for c in 0..chunks {
                let k = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(kp.add(at + c * LANES).cast())) };
                let q = unsafe { _mm256_loadu_ps(qp.add(c * LANES)) };
                acc = _mm256_fmadd_ps(q, k, acc);
            }
            let x = hsum(acc) * h.scale;
            max = max.max(x);
            *s = x;
        }
        let mut lanes = _mm256_setzero_ps();
        let vmax = _mm256_set1_ps(max);
        let sp = scores.as_mut_ptr();
        for j in (0..whole).step_by(LANES) {
            let e = exp(_mm256_sub_ps(unsafe { _mm256_loadu_ps(sp.add(j)) }, vmax));
            unsafe { _mm256_storeu_ps(sp.add(j), e) };
            lanes = _mm256_add_ps(lanes, e);
        }
        let mut rest = [0f32; LANES];
        unsafe { _mm256_storeu_ps(rest.as_mut_ptr(), lanes) };
        for (j, x) in scores.iter_mut().enumerate().skip(whole) {
            *x = crate::exp::exp(*x - max);
            rest[j % LANES] += *x;
        }
        let inv = _mm256_set1_ps(1.0 / super::hsum(rest));
        let mut c = 0;
        while c < chunks {
            // SAFETY: the caller's, and chunks `c..c + N` are within the head.
            unsafe {
                if chunks - c >= 8 {
                    weigh_values::<8>(h, scores, c, inv, y);
                    c += 8;
                } else {
                    weigh_values::<1>(h, scores, c, inv, y);
                    c += 1;
                }
            }
        }
    }

    /// `y[chunks c..c + N] = Σ_j scores[j] v_j * inv`, the sum in position order with the
    /// `N` chunks of `y` in registers.
    ///
    /// # Safety
    /// As [`attend`]'s loads, for chunks `c..c + N`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn weigh_values<const N: usize>(
        h: &Head<'_>,
        scores: &[f32],
        c: usize,
        inv: __m256,
        y: &mut [f32],
    ) {
        let vp = h.values.as_ptr();
        let mut o = [_mm256_setzero_ps(); N];
        for (j, &w) in scores.iter().enumerate() {
            let at = j * h.stride + h.offset + c * LANES;
            let w = _mm256_set1_ps(w);
            for (i, o) in o.iter_mut().enumerate() {
                let v = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(vp.add(at + i * LANES).cast())) };
                *o = _mm256_fmadd_ps(w, v, *o);
            }
        }
        for (i, o) in o.iter().enumerate() {
            unsafe {
                _mm256_storeu_ps(y.as_mut_ptr().add((c + i) * LANES), _mm256_mul_ps(*o, inv))
            };
        }
    }

    /// [`super::hsum`] of eight registers at once: lane `i` of the result is the sum of
    /// `a[i]`, in the same order.
    #[target_feature(enable = "avx2,fma")]
    fn hsum8(a: [__m256; LANES]) -> __m256 {
        // Lanes i and i + 4 of a[t] (low half) and of a[t + 4] (high half).
        let halves = |t: usize| {
            _mm256_add_ps(
                _mm256_permute2f128_ps::<0x20>(a[t], a[t + 4]),
                _mm256_permute2f128_ps::<0x31>(a[t], a[t + 4]),
            )
        };
        let (s04, s15, s26, s37) = (halves(0), halves(1), halves(2), halves(3));
        // Per half: (r0 + r1), (r2 + r3) of two registers, then their sums.
        _mm256_hadd_ps(_mm256_hadd_ps(s04, s15), _mm256_hadd_ps(s26, s37))
    }

    #[target_feature(enable = "avx2,fma")]
    fn hsum(x: __m256) -> f32 {
        let mut lanes = [0f32; LANES];
        // SAFETY: eight f32 fit in `lanes`.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), x) };
        super::hsum(lanes)
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

    fn halves(v: &[f32]) -> Vec<f16> {
        v.iter().map(|&x| f16::from_f32(x)).collect()
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx2_path_is_bit_identical_to_the_portable_one() {
        if !crate::models::simd() {
            eprintln!("NOTICE: no AVX2/FMA/F16C on this CPU; nothing to compare");
            return;
        }
        // Lengths with and without a partial last group of eight scores.
        // Head sizes with one, more than one, and a partial group of eight output chunks.
        let cases = [
            (300, 7, 64),
            (1, 8, 64),
            (13, 9, 64),
            (64, 10, 64),
            (21, 11, 128),
            (40, 12, 80),
        ];
        for (len, seed, hd) in cases {
            let stride = 3 * hd;
            let q = values(hd, seed);
            let keys = halves(&values(len * stride, seed + 1));
            let vals = halves(&values(len * stride, seed + 2));
            let head = Head {
                q: &q,
                keys: &keys,
                values: &vals,
                stride,
                offset: hd,
                len,
                scale: 2.0,
            };
            let (mut a, mut b) = (vec![0f32; hd], vec![0f32; hd]);
            head.attend_portable(&mut Vec::new(), &mut a);
            // SAFETY: checked above.
            unsafe { avx2::attend(&head, &mut Vec::new(), &mut b) };
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "len {len}, head size {hd}"
            );
        }
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
