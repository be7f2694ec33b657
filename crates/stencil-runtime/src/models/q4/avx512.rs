//! The AVX-512 VNNI kernel: a quad of blocks per step (one 64-byte load of nibbles, `dpbusd`
//! for the integer sums), sixteen float lanes per row (the low eight for the quad's first pair,
//! the high eight for its second, as [`super::dot_scalar`] has them), eight rows per tile.

use super::avx2::{finish, group_start};
use super::{low_quants, Activations, Column, Q4Matrix, Row, LANES, QK, QUAD};
use std::arch::x86_64::*;

/// Rows per tile.
const TILE: usize = 8;

pub(super) fn supported() -> bool {
    super::super::simd()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

/// [`super::Q4Matrix::columns`] with the row tiles of [`tile`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn columns(
    w: &Q4Matrix,
    cols: std::ops::Range<usize>,
    act: &Activations,
    m: usize,
    out: *mut f32,
) {
    // SAFETY (all): the caller's; same CPU features; `rows` rows exist from `r`.
    unsafe {
        w.tiles::<TILE>(cols, m, out, |col, r, rows, values| match rows {
            8 => tile::<8>(col, act, r, values),
            7 => tile::<7>(col, act, r, values),
            6 => tile::<6>(col, act, r, values),
            5 => tile::<5>(col, act, r, values),
            4 => tile::<4>(col, act, r, values),
            3 => tile::<3>(col, act, r, values),
            2 => tile::<2>(col, act, r, values),
            _ => tile::<1>(col, act, r, values),
        })
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn tile<const R: usize>(w: Column<'_>, act: &Activations, first: usize, out: &mut [f32]) {
    let mut acc = [_mm512_setzero_ps(); R];
    let mut msum = [_mm256_setzero_ps(); R];
    let rows: [Row<'_>; R] = std::array::from_fn(|i| act.row(first + i));
    let kb = w.blocks();
    let whole = kb / LANES * LANES;
    let qp = w.qs.as_ptr();
    let low = _mm512_set1_epi8(0x0F);
    // Lanes of a group's scales for quad `q`: four per block.
    let spread = [
        _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
        _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7),
    ];
    for g in (0..whole).step_by(LANES) {
        // SAFETY: blocks g..g + 8 exist (g + 8 <= whole).
        let scale = unsafe { group_start(w, &rows, g, &mut msum) };
        for (q, spread) in spread.iter().enumerate() {
            let b = g + 4 * q;
            // SAFETY: blocks b..b + 4 exist in the column.
            let packed = unsafe { _mm512_loadu_si512(qp.add(b * QK / 2) as *const _) };
            let lo = _mm512_and_si512(packed, low);
            let hi = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low);
            for i in 0..R {
                let p = rows[i].quants.as_ptr().wrapping_add(low_quants(b));
                // SAFETY: the quad's quants exist in the row.
                let (p_lo, p_hi) = unsafe {
                    (
                        _mm512_loadu_si512(p as *const _),
                        _mm512_loadu_si512(p.add(QUAD / 2) as *const _),
                    )
                };
                let dot = _mm512_dpbusd_epi32(
                    _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, p_lo),
                    hi,
                    p_hi,
                );
                let s = _mm512_permutexvar_ps(*spread, _mm512_castps256_ps512(scale[i]));
                acc[i] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(dot), acc[i]);
            }
        }
    }
    let halves: [[__m256; R]; 2] = [
        std::array::from_fn(|i| _mm512_castps512_ps256(acc[i])),
        std::array::from_fn(|i| {
            _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[i]), 1))
        }),
    ];
    // SAFETY: the same CPU features (AVX2's among them).
    unsafe { finish(w, &rows, whole, halves, msum, out) }
}
