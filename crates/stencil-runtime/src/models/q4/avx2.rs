//! The AVX2 kernel: two blocks per 32-byte load of nibbles, `maddubs`/`madd` for the integer
//! sums, four rows per pass; its tile tail (`finish`) serves the AVX-512 kernel too.

use super::{low_quants, Activations, Column, Q4Matrix, Row, LANES, QK, QUAD, ROW_TILE};
use std::arch::x86_64::*;

/// [`super::Q4Matrix::columns`] with the row tiles of [`tile`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn columns(
    w: &Q4Matrix,
    cols: std::ops::Range<usize>,
    act: &Activations,
    m: usize,
    out: *mut f32,
) {
    // SAFETY (all): the caller's; same CPU features; `rows` rows exist from `r`.
    unsafe {
        w.tiles::<ROW_TILE>(cols, m, out, |col, r, rows, values| match rows {
            4 => tile::<4>(col, act, r, values),
            3 => tile::<3>(col, act, r, values),
            2 => tile::<2>(col, act, r, values),
            _ => tile::<1>(col, act, r, values),
        })
    }
}

/// Lanes of a group's scales for pair `p` of a group of eight blocks: block 2p in the low
/// half, 2p + 1 in the high.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn spreads() -> [__m256i; 4] {
    [
        _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1),
        _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3),
        _mm256_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5),
        _mm256_setr_epi32(6, 6, 6, 6, 7, 7, 7, 7),
    ]
}

/// The start of a group of eight blocks from `g`, for every kernel: the eight `d` and `m`
/// converted at once, each row's `m` terms added to its `msum` lanes, and each row's `d * s`
/// (one multiply per row) returned.
///
/// # Safety
/// Blocks `g..g + 8` must exist in the column and in the rows.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn group_start<const R: usize>(
    w: Column<'_>,
    rows: &[Row<'_>; R],
    g: usize,
    msum: &mut [__m256; R],
) -> [__m256; R] {
    let (dp, mp) = (w.d.as_ptr(), w.m.as_ptr());
    // SAFETY (all): the caller's.
    let (d, m) = unsafe {
        (
            _mm256_cvtph_ps(_mm_loadu_si128(dp.add(2 * g) as *const __m128i)),
            _mm256_cvtph_ps(_mm_loadu_si128(mp.add(2 * g) as *const __m128i)),
        )
    };
    let mut scale = [_mm256_setzero_ps(); R];
    for i in 0..R {
        let r = rows[i];
        unsafe {
            msum[i] = _mm256_fmadd_ps(m, _mm256_loadu_ps(r.sums.as_ptr().add(g)), msum[i]);
            scale[i] = _mm256_mul_ps(d, _mm256_loadu_ps(r.scales.as_ptr().add(g)));
        }
    }
    scale
}

/// [`super::dot_scalar`] for `R` rows: per group of eight blocks, the eight `d` and `m`
/// are converted at once and `d * s` formed for each row in one multiply; each pair of
/// blocks then spreads its two scales over the two halves of a register.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile<const R: usize>(w: Column<'_>, act: &Activations, first: usize, out: &mut [f32]) {
    let mut acc = [[_mm256_setzero_ps(); R]; 2];
    let mut msum = [_mm256_setzero_ps(); R];
    let rows: [Row<'_>; R] = std::array::from_fn(|i| act.row(first + i));
    let kb = w.blocks();
    let whole = kb / LANES * LANES;
    let qp = w.qs.as_ptr();
    let spread = spreads();
    for g in (0..whole).step_by(LANES) {
        // SAFETY: blocks g..g + 8 exist (g + 8 <= whole).
        let scale = unsafe { group_start(w, &rows, g, &mut msum) };
        for (p, spread) in spread.iter().enumerate() {
            // SAFETY: blocks g + 2p and g + 2p + 1 exist.
            let dot = unsafe { pair_dots(qp, &rows, g + 2 * p, true) };
            for i in 0..R {
                let s = _mm256_permutevar8x32_ps(scale[i], *spread);
                acc[p % 2][i] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(dot[i]), acc[p % 2][i]);
            }
        }
    }
    // SAFETY: the same CPU features.
    unsafe { finish(w, &rows, whole, acc, msum, out) }
}

/// The blocks from `whole` (a multiple of eight) on, pair by pair, then the sums: the end
/// of every kernel's tile.
///
/// # Safety
/// The rows must be the column's: blocks `whole..` exist in both.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn finish<const R: usize>(
    w: Column<'_>,
    rows: &[Row<'_>; R],
    whole: usize,
    mut acc: [[__m256; R]; 2],
    msum: [__m256; R],
    out: &mut [f32],
) {
    let kb = w.blocks();
    let mut mlanes = [[0f32; LANES]; R];
    for i in 0..R {
        // SAFETY: eight f32 fit in a row of `mlanes`.
        unsafe { _mm256_storeu_ps(mlanes[i].as_mut_ptr(), msum[i]) };
    }
    for b in whole..kb {
        let m = w.scales(b).1;
        for i in 0..R {
            mlanes[i][b % LANES] = m.mul_add(rows[i].sums[b], mlanes[i][b % LANES]);
        }
    }
    for b in (whole..kb).step_by(2) {
        let both = b + 1 < kb;
        // SAFETY: block b exists, and b + 1 where `both`.
        let dot = unsafe { pair_dots(w.qs.as_ptr(), rows, b, both) };
        let (d_low, d_high) = (w.scales(b).0, if both { w.scales(b + 1).0 } else { 0.0 });
        let half = b / 2 % 2;
        for i in 0..R {
            let low = d_low * rows[i].scales[b];
            let high = if both {
                d_high * rows[i].scales[b + 1]
            } else {
                0.0
            };
            let s = _mm256_setr_ps(low, low, low, low, high, high, high, high);
            acc[half][i] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(dot[i]), acc[half][i]);
        }
    }
    for i in 0..R {
        out[i] = hsum(acc[0][i]) + hsum(acc[1][i]) + super::hsum(mlanes[i]);
    }
}

/// [`super::hsum`] of a register, in its order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum(v: __m256) -> f32 {
    let r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    let s = _mm_add_ps(r, _mm_movehl_ps(r, r));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
}

/// The products of blocks `b` and `b + 1` (`b` even) with each row's quants, as eight i32
/// lanes (lanes 0..4 block `b`, 4..8 block `b + 1`; zeros there unless `both`).
///
/// # Safety
/// Block `b` must exist in the column and in every row, and block `b + 1` where `both`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pair_dots<const R: usize>(
    qs: *const u8,
    rows: &[Row<'_>; R],
    b: usize,
    both: bool,
) -> [__m256i; R] {
    let low = _mm256_set1_epi8(0x0F);
    let at = qs.wrapping_add(b * QK / 2);
    // SAFETY (loads): the caller's; an activation row is padded to whole quads.
    let packed = unsafe {
        if both {
            _mm256_loadu_si256(at as *const __m256i)
        } else {
            _mm256_zextsi128_si256(_mm_loadu_si128(at as *const __m128i))
        }
    };
    let lo = _mm256_and_si256(packed, low);
    let hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low);
    let ones = _mm256_set1_epi16(1);
    let mut out = [_mm256_setzero_si256(); R];
    for (o, r) in out.iter_mut().zip(rows) {
        let p = r.quants.as_ptr().wrapping_add(low_quants(b));
        let (p_lo, p_hi) = unsafe {
            (
                _mm256_loadu_si256(p as *const __m256i),
                _mm256_loadu_si256(p.add(QUAD / 2) as *const __m256i),
            )
        };
        // Each i16 is at most 4 * 15 * 128 in magnitude: no saturation.
        let pairs = _mm256_add_epi16(
            _mm256_maddubs_epi16(lo, p_lo),
            _mm256_maddubs_epi16(hi, p_hi),
        );
        *o = _mm256_madd_epi16(pairs, ones);
    }
    out
}
