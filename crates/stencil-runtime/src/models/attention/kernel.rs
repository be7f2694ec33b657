//! The attention of one row's query heads over one sequence's f16 cache: scores, softmax and
//! the weighted values, portable and AVX2 (and, where AVX-512VL gives 32 registers, two or three
//! heads sharing a KV head at once), every path with the same bits.

use half::f16;

/// `len` cached positions of one KV head of one sequence, as its query heads read them.
pub(super) struct Kv<'a> {
    pub(super) keys: &'a [f16],
    pub(super) values: &'a [f16],
    /// Values per cached position, and where this KV head starts in one.
    pub(super) stride: usize,
    pub(super) offset: usize,
    pub(super) len: usize,
    /// Values per head.
    pub(super) head_dim: usize,
    pub(super) scale: f32,
}

/// Lanes of the fixed-order sums (one AVX2 register of f32).
const LANES: usize = 8;

impl Kv<'_> {
    /// Writes softmax(q k^T * scale) v of one query head `q` into `y` (zeroed), with `scores`
    /// as scratch.
    ///
    /// Every sum runs in eight lanes of FMAs in a fixed order and `exp` is [`crate::exp::exp`], so the
    /// AVX2 path and the portable one give the same bits.
    fn attend(&self, q: &[f32], scores: &mut Vec<f32>, y: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if q.len().is_multiple_of(LANES) && crate::models::simd() {
            // SAFETY: the CPU has AVX2, FMA and F16C (checked at run time); rows are whole
            // registers.
            return unsafe { avx2::attend(self, q, scores, y) };
        }
        self.attend_portable(q, scores, y)
    }

    fn attend_portable(&self, q: &[f32], scores: &mut Vec<f32>, y: &mut [f32]) {
        let hd = y.len();
        scores.clear();
        let mut max = f32::NEG_INFINITY;
        for j in 0..self.len {
            let at = j * self.stride + self.offset;
            let mut acc = [0f32; LANES];
            for (i, (&q, &k)) in q.iter().zip(&self.keys[at..at + hd]).enumerate() {
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

/// Whether the CPU has AVX-512VL: 32 vector registers, room for several heads' accumulators.
#[cfg(target_arch = "x86_64")]
fn wide_registers() -> bool {
    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl")
}

/// [`Kv::attend`] for the query heads that share `kv` (one KV head's, `kv.head_dim` floats each
/// in `queries`), their outputs one after the other in `y` (zeroed). Where the CPU has the
/// registers, two or three heads at a time convert each cached f16 chunk once for all of them:
/// the one-head loop is bound by those conversions, not by its FMAs. Same bits either way.
pub(super) fn attend_shared(kv: &Kv<'_>, queries: &[f32], scores: &mut Vec<f32>, y: &mut [f32]) {
    let hd = kv.head_dim;
    let (mut rest, mut out) = (queries, y);
    while !rest.is_empty() {
        // Threes, and twos rather than a single head at the end (4 = 2 + 2, 7 = 3 + 2 + 2).
        let take = match rest.len() / hd {
            heads @ 1..=3 => heads,
            4 => 2,
            _ => 3,
        };
        let (q, q_later) = rest.split_at(take * hd);
        let (y, y_later) = std::mem::take(&mut out).split_at_mut(take * hd);
        #[cfg(target_arch = "x86_64")]
        let shared =
            take > 1 && hd.is_multiple_of(LANES) && crate::models::simd() && wide_registers();
        #[cfg(not(target_arch = "x86_64"))]
        let shared = false;
        if shared {
            // SAFETY: the CPU has AVX2, FMA, F16C and AVX-512VL (checked at run time); rows
            // are whole registers.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                match take {
                    2 => avx2::attend_shared::<2>(kv, q, scores, y),
                    _ => avx2::attend_shared::<3>(kv, q, scores, y),
                }
            }
        } else {
            for (q, y) in q.chunks_exact(hd).zip(y.chunks_exact_mut(hd)) {
                kv.attend(q, scores, y);
            }
        }
        (rest, out) = (q_later, y_later);
    }
}

/// The AVX2 horizontal sum order: lane `i` plus lane `i + 4`, then neighbours (`hadd`).
fn hsum(v: [f32; LANES]) -> f32 {
    let r: [f32; 4] = std::array::from_fn(|i| v[i] + v[i + 4]);
    (r[0] + r[1]) + (r[2] + r[3])
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Kv, LANES};
    use crate::exp::avx2::exp;
    use std::arch::x86_64::*;

    /// [`Kv::attend_portable`] eight lanes at a time: scores for eight positions at once
    /// (eight independent FMA chains, summed by one transposing reduction), and the output
    /// held in registers across all positions.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn attend(h: &Kv<'_>, q: &[f32], scores: &mut Vec<f32>, y: &mut [f32]) {
        let hd = y.len();
        let chunks = hd / LANES;
        scores.clear();
        scores.resize(h.len, 0.0);
        let (kp, qp) = (h.keys.as_ptr(), q.as_ptr());
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
            *s = unsafe { score(h, q, j * h.stride + h.offset) };
            max = max.max(*s);
        }
        let inv = _mm256_set1_ps(softmax(scores, max));
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

    /// `s = exp(s - max)` in place; returns `1 / Σ s`, summed in eight lanes in position order.
    #[target_feature(enable = "avx2,fma")]
    fn softmax(s: &mut [f32], max: f32) -> f32 {
        let whole = s.len() / LANES * LANES;
        let mut lanes = _mm256_setzero_ps();
        let vmax = _mm256_set1_ps(max);
        let sp = s.as_mut_ptr();
        for j in (0..whole).step_by(LANES) {
            // SAFETY: eight floats from `j < whole`.
            let e = exp(_mm256_sub_ps(unsafe { _mm256_loadu_ps(sp.add(j)) }, vmax));
            unsafe { _mm256_storeu_ps(sp.add(j), e) };
            lanes = _mm256_add_ps(lanes, e);
        }
        let mut rest = [0f32; LANES];
        // SAFETY: eight floats fit in `rest`.
        unsafe { _mm256_storeu_ps(rest.as_mut_ptr(), lanes) };
        for (j, x) in s.iter_mut().enumerate().skip(whole) {
            *x = crate::exp::exp(*x - max);
            rest[j % LANES] += *x;
        }
        1.0 / super::hsum(rest)
    }

    /// The score of one position (`at` in the cache) for the query head `q`: [`attend`]'s
    /// chain for the positions after the last whole eight.
    ///
    /// # Safety
    /// As [`attend`]'s loads.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn score(h: &Kv<'_>, q: &[f32], at: usize) -> f32 {
        let mut acc = _mm256_setzero_ps();
        for c in 0..q.len() / LANES {
            // SAFETY: the caller's.
            let k = unsafe {
                _mm256_cvtph_ps(_mm_loadu_si128(h.keys.as_ptr().add(at + c * LANES).cast()))
            };
            let q = unsafe { _mm256_loadu_ps(q.as_ptr().add(c * LANES)) };
            acc = _mm256_fmadd_ps(q, k, acc);
        }
        hsum(acc) * h.scale
    }

    /// [`attend`] for `S` query heads that share `h` (`queries`, `h.head_dim` floats each;
    /// outputs one after the other in `y`): each f16 chunk of the cache is converted once and
    /// used by all `S` heads. Each score and each output element is the same chain of
    /// operations as in [`attend`]. `S` heads' accumulators (up to 3 × 8 registers) need
    /// AVX-512VL's 32.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA, F16C and AVX-512VL; `h.head_dim` is a multiple of [`LANES`];
    /// `queries` and `y` hold `S` heads.
    // The (head, position) and (head, chunk) tiles of registers read clearest by index.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
    pub(super) unsafe fn attend_shared<const S: usize>(
        h: &Kv<'_>,
        queries: &[f32],
        scores: &mut Vec<f32>,
        y: &mut [f32],
    ) {
        let (hd, len) = (h.head_dim, h.len);
        let chunks = hd / LANES;
        scores.clear();
        scores.resize(S * len, 0.0);
        let whole = len / LANES * LANES;
        let (kp, qp, sp) = (h.keys.as_ptr(), queries.as_ptr(), scores.as_mut_ptr());
        let scale = _mm256_set1_ps(h.scale);
        let mut vmax = [_mm256_set1_ps(f32::NEG_INFINITY); S];
        // SAFETY (loads and stores below): position j's head spans `at..at + hd` of the
        // cache, each `q` has `hd` elements, `scores` `S * len` and `y` `S * hd`.
        for j0 in (0..whole).step_by(LANES) {
            let mut acc = [[_mm256_setzero_ps(); LANES]; S];
            for c in 0..chunks {
                let q: [__m256; S] =
                    std::array::from_fn(|i| unsafe { _mm256_loadu_ps(qp.add(i * hd + c * LANES)) });
                for t in 0..LANES {
                    let at = (j0 + t) * h.stride + h.offset + c * LANES;
                    let k = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(kp.add(at).cast())) };
                    for i in 0..S {
                        acc[i][t] = _mm256_fmadd_ps(q[i], k, acc[i][t]);
                    }
                }
            }
            for i in 0..S {
                let x = _mm256_mul_ps(hsum8(acc[i]), scale);
                vmax[i] = _mm256_max_ps(vmax[i], x);
                unsafe { _mm256_storeu_ps(sp.add(i * len + j0), x) };
            }
        }
        let mut inv = [0f32; S];
        for i in 0..S {
            let mut lanes = [0f32; LANES];
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), vmax[i]) };
            let mut max = lanes.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let (q, s) = (
                &queries[i * hd..(i + 1) * hd],
                &mut scores[i * len..(i + 1) * len],
            );
            for (j, x) in s.iter_mut().enumerate().skip(whole) {
                *x = unsafe { score(h, q, j * h.stride + h.offset) };
                max = max.max(*x);
            }
            inv[i] = softmax(s, max);
        }
        let mut c = 0;
        while c < chunks {
            // SAFETY: the caller's, and chunks `c..c + N` are within each head.
            unsafe {
                if chunks - c >= 8 {
                    weigh_shared::<S, 8>(h, scores, c, inv, y);
                    c += 8;
                } else {
                    weigh_shared::<S, 1>(h, scores, c, inv, y);
                    c += 1;
                }
            }
        }
    }

    /// [`weigh_values`] for `S` heads sharing their values: each chunk converted once.
    ///
    /// # Safety
    /// As [`attend_shared`]'s loads, for chunks `c..c + N`.
    #[inline]
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
    unsafe fn weigh_shared<const S: usize, const N: usize>(
        h: &Kv<'_>,
        scores: &[f32],
        c: usize,
        inv: [f32; S],
        y: &mut [f32],
    ) {
        let (hd, len) = (h.head_dim, h.len);
        let vp = h.values.as_ptr();
        let mut o = [[_mm256_setzero_ps(); N]; S];
        for j in 0..len {
            let w: [__m256; S] = std::array::from_fn(|s| _mm256_set1_ps(scores[s * len + j]));
            let at = j * h.stride + h.offset + c * LANES;
            for i in 0..N {
                let v = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(vp.add(at + i * LANES).cast())) };
                for s in 0..S {
                    o[s][i] = _mm256_fmadd_ps(w[s], v, o[s][i]);
                }
            }
        }
        for s in 0..S {
            let inv = _mm256_set1_ps(inv[s]);
            for i in 0..N {
                unsafe {
                    _mm256_storeu_ps(
                        y.as_mut_ptr().add(s * hd + (c + i) * LANES),
                        _mm256_mul_ps(o[s][i], inv),
                    )
                };
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
        h: &Kv<'_>,
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
    use crate::models::attention::tests::{halves, values};

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
            let kv = Kv {
                keys: &keys,
                values: &vals,
                stride,
                offset: hd,
                len,
                head_dim: hd,
                scale: 2.0,
            };
            let (mut a, mut b) = (vec![0f32; hd], vec![0f32; hd]);
            kv.attend_portable(&q, &mut Vec::new(), &mut a);
            // SAFETY: checked above.
            unsafe { avx2::attend(&kv, &q, &mut Vec::new(), &mut b) };
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "len {len}, head size {hd}"
            );
            // Several query heads on the same cache, as grouped-query attention shares it:
            // every group size (in twos and threes where the CPU has AVX-512VL), same bits.
            for group in 1..=7 {
                let queries = values(group * hd, seed + 3);
                let mut want = vec![0f32; group * hd];
                for (q, y) in queries.chunks_exact(hd).zip(want.chunks_exact_mut(hd)) {
                    kv.attend_portable(q, &mut Vec::new(), y);
                }
                let mut got = vec![0f32; group * hd];
                attend_shared(&kv, &queries, &mut Vec::new(), &mut got);
                assert!(
                    want.iter()
                        .zip(&got)
                        .all(|(x, y)| x.to_bits() == y.to_bits()),
                    "len {len}, head size {hd}, {group} heads"
                );
            }
        }
        if !wide_registers() {
            eprintln!("NOTICE: no AVX-512VL on this CPU; heads sharing a cache took one at a time");
        }
    }
}
