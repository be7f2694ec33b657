//! The attention of one row's query heads over one sequence's f16 cache: scores, softmax and
//! the weighted values, portable and AVX2 (and, where AVX-512VL gives 32 registers, two or three
//! heads sharing a KV head at once), every path with the same bits.

use half::f16;

/// One (row, head) unit: a query against `len` cached positions of one KV head.
pub(super) struct Head<'a> {
    pub(super) q: &'a [f32],
    pub(super) keys: &'a [f16],
    pub(super) values: &'a [f16],
    /// Values per cached position, and where this KV head starts in one.
    pub(super) stride: usize,
    pub(super) offset: usize,
    pub(super) len: usize,
    pub(super) scale: f32,
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
        if self.q.len().is_multiple_of(LANES) && crate::models::simd() {
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

/// Whether the CPU has AVX-512VL: 32 vector registers, room for several heads' accumulators.
#[cfg(target_arch = "x86_64")]
fn wide_registers() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl"))
}

/// [`Head::attend`] for heads that share their keys and values (one KV head's query heads),
/// their outputs one after the other in `y` (zeroed). Where the CPU has the registers, two or
/// three heads at a time convert each cached f16 chunk once for all of them: the one-head loop
/// is bound by those conversions, not by its FMAs. Same bits either way.
pub(super) fn attend_shared(heads: &[Head<'_>], scores: &mut Vec<f32>, y: &mut [f32]) {
    let mut rest = heads;
    let mut out = y;
    while !rest.is_empty() {
        // Threes, and twos rather than a single head at the end (4 = 2 + 2, 7 = 3 + 2 + 2).
        let take = match rest.len() {
            1..=3 => rest.len(),
            4 => 2,
            _ => 3,
        };
        let (now, later) = rest.split_at(take);
        let hd = now[0].q.len();
        let (y, y_later) = std::mem::take(&mut out).split_at_mut(take * hd);
        #[cfg(target_arch = "x86_64")]
        if take > 1 && hd.is_multiple_of(LANES) && crate::models::simd() && wide_registers() {
            // SAFETY: the CPU has AVX2, FMA, F16C and AVX-512VL (checked at run time); rows
            // are whole registers; the heads share one cache (built so by the caller).
            unsafe {
                match take {
                    2 => avx2::attend_shared::<2>(now, scores, y),
                    _ => avx2::attend_shared::<3>(now, scores, y),
                }
            }
            (rest, out) = (later, y_later);
            continue;
        }
        for (head, y) in now.iter().zip(y.chunks_exact_mut(hd)) {
            head.attend(scores, y);
        }
        (rest, out) = (later, y_later);
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
            *s = unsafe { score(h, j * h.stride + h.offset) };
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

    /// The score of one position (`at` in the cache) for one head: [`attend`]'s chain for
    /// the positions after the last whole eight.
    ///
    /// # Safety
    /// As [`attend`]'s loads.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn score(h: &Head<'_>, at: usize) -> f32 {
        let mut acc = _mm256_setzero_ps();
        for c in 0..h.q.len() / LANES {
            // SAFETY: the caller's.
            let k = unsafe {
                _mm256_cvtph_ps(_mm_loadu_si128(h.keys.as_ptr().add(at + c * LANES).cast()))
            };
            let q = unsafe { _mm256_loadu_ps(h.q.as_ptr().add(c * LANES)) };
            acc = _mm256_fmadd_ps(q, k, acc);
        }
        hsum(acc) * h.scale
    }

    /// [`attend`] for `S` heads that share their keys and values (`heads[..S]`, outputs one
    /// after the other in `y`): each f16 chunk of the cache is converted once and used by all
    /// `S` heads. Each score and each output element is the same chain of operations as in
    /// [`attend`]. `S` heads' accumulators (up to 3 × 8 registers) need AVX-512VL's 32.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA, F16C and AVX-512VL; the heads share `keys`, `values`, `stride`,
    /// `offset`, `len` and `scale`, and their size is a multiple of [`LANES`].
    // The (head, position) and (head, chunk) tiles of registers read clearest by index.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
    pub(super) unsafe fn attend_shared<const S: usize>(
        heads: &[Head<'_>],
        scores: &mut Vec<f32>,
        y: &mut [f32],
    ) {
        let h0 = &heads[0];
        let (hd, len) = (h0.q.len(), h0.len);
        let chunks = hd / LANES;
        scores.clear();
        scores.resize(S * len, 0.0);
        let whole = len / LANES * LANES;
        let (kp, sp) = (h0.keys.as_ptr(), scores.as_mut_ptr());
        let scale = _mm256_set1_ps(h0.scale);
        let mut vmax = [_mm256_set1_ps(f32::NEG_INFINITY); S];
        // SAFETY (loads and stores below): position j's head spans `at..at + hd` of the
        // cache, each `q` has `hd` elements, `scores` `S * len` and `y` `S * hd`.
        for j0 in (0..whole).step_by(LANES) {
            let mut acc = [[_mm256_setzero_ps(); LANES]; S];
            for c in 0..chunks {
                let q: [__m256; S] = std::array::from_fn(|h| unsafe {
                    _mm256_loadu_ps(heads[h].q.as_ptr().add(c * LANES))
                });
                for t in 0..LANES {
                    let at = (j0 + t) * h0.stride + h0.offset + c * LANES;
                    let k = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(kp.add(at).cast())) };
                    for h in 0..S {
                        acc[h][t] = _mm256_fmadd_ps(q[h], k, acc[h][t]);
                    }
                }
            }
            for h in 0..S {
                let x = _mm256_mul_ps(hsum8(acc[h]), scale);
                vmax[h] = _mm256_max_ps(vmax[h], x);
                unsafe { _mm256_storeu_ps(sp.add(h * len + j0), x) };
            }
        }
        let mut inv = [0f32; S];
        for h in 0..S {
            let mut lanes = [0f32; LANES];
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), vmax[h]) };
            let mut max = lanes.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let s = &mut scores[h * len..(h + 1) * len];
            for (j, x) in s.iter_mut().enumerate().skip(whole) {
                *x = unsafe { score(&heads[h], j * h0.stride + h0.offset) };
                max = max.max(*x);
            }
            inv[h] = softmax(s, max);
        }
        let mut c = 0;
        while c < chunks {
            // SAFETY: the caller's, and chunks `c..c + N` are within each head.
            unsafe {
                if chunks - c >= 8 {
                    weigh_shared::<S, 8>(heads, scores, c, inv, y);
                    c += 8;
                } else {
                    weigh_shared::<S, 1>(heads, scores, c, inv, y);
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
        heads: &[Head<'_>],
        scores: &[f32],
        c: usize,
        inv: [f32; S],
        y: &mut [f32],
    ) {
        let h0 = &heads[0];
        let (hd, len) = (h0.q.len(), h0.len);
        let vp = h0.values.as_ptr();
        let mut o = [[_mm256_setzero_ps(); N]; S];
        for j in 0..len {
            let w: [__m256; S] = std::array::from_fn(|h| _mm256_set1_ps(scores[h * len + j]));
            let at = j * h0.stride + h0.offset + c * LANES;
            for i in 0..N {
                let v = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(vp.add(at + i * LANES).cast())) };
                for h in 0..S {
                    o[h][i] = _mm256_fmadd_ps(w[h], v, o[h][i]);
                }
            }
        }
        for h in 0..S {
            let inv = _mm256_set1_ps(inv[h]);
            for i in 0..N {
                unsafe {
                    _mm256_storeu_ps(
                        y.as_mut_ptr().add(h * hd + (c + i) * LANES),
                        _mm256_mul_ps(o[h][i], inv),
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
            // Several query heads on the same cache, as grouped-query attention shares it:
            // every group size (in twos and threes where the CPU has AVX-512VL), same bits.
            for group in 1..=7 {
                let q = values(group * hd, seed + 3);
                let heads: Vec<Head<'_>> = q.chunks_exact(hd).map(|q| Head { q, ..head }).collect();
                let mut want = vec![0f32; group * hd];
                for (h, y) in heads.iter().zip(want.chunks_exact_mut(hd)) {
                    h.attend_portable(&mut Vec::new(), y);
                }
                let mut got = vec![0f32; group * hd];
                attend_shared(&heads, &mut Vec::new(), &mut got);
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
