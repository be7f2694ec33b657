//! The AVX2 kernel: a group's sixteen columns in the lanes of two registers; per block and
//! row, eight `maddubs` of the quants' magnitudes by broadcast activation bytes carrying the
//! quants' signs (each 16-bit pair at most 2 · 128 · 127 < 2^15: exact), widened by `madd`.

use super::super::quant::{row_tiles, Group, GroupOut, Prefetch};
use super::{Activations, Row, GROUP, GROUP_BLOCK, QK, QUANTS};
use std::arch::x86_64::*;

/// Rows per tile.
const TILE: usize = 2;
/// Columns per register.
const HALF: usize = GROUP / 2;

/// One group of the matrix, all `m` rows ([`super::super::quant::Format`]).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn group(group: Group<'_>, act: &Activations, m: usize, out: &mut GroupOut) {
    let blocks = group.blocks;
    row_tiles::<TILE>(m, (group, GROUP_BLOCK), out, |r, rows, values, prefetch| {
        // The first half's pass over the blocks prefetches the tile's share.
        for (half, prefetch) in [(0, prefetch), (1, Prefetch::NONE)] {
            // SAFETY (all): the same CPU features; `rows` rows exist from `r`.
            unsafe {
                match rows {
                    2 => tile::<2>(blocks, half, act, r, values, prefetch),
                    _ => tile::<1>(blocks, half, act, r, values, prefetch),
                }
            }
        }
    })
}

/// [`super::dot_scalar`] for lanes `8 half .. 8 half + 8` of a group and `R` rows from
/// `first`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile<const R: usize>(
    blocks: &[u8],
    half: usize,
    act: &Activations,
    first: usize,
    out: &mut [[f32; GROUP]; TILE],
    mut prefetch: Prefetch,
) {
    // A loop, not a closure (`from_fn`), which the compiler may leave out of line.
    let mut rows: [Row<'_>; R] = [act.row(first); R];
    for (i, row) in rows.iter_mut().enumerate().skip(1) {
        *row = act.row(first + i);
    }
    let mut acc = [_mm256_setzero_ps(); R];
    let ones = _mm256_set1_epi16(1);
    for (b, block) in blocks.chunks_exact(GROUP_BLOCK).enumerate() {
        let p = block.as_ptr();
        prefetch.after_block();
        // SAFETY: a group block starts with sixteen f16 scales.
        let d =
            unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.add(2 * HALF * half) as *const __m128i)) };
        let mut sums = [_mm256_setzero_si256(); R];
        for quad in 0..2 {
            // SAFETY: runs 4 quad .. 4 quad + 4 of the block's eight.
            // Loops, not closures (`map`), which the compiler may leave out of line.
            let (mut w, mut mag) = ([_mm256_setzero_si256(); 4], [_mm256_setzero_si256(); 4]);
            for u in 0..4 {
                w[u] = unsafe {
                    _mm256_loadu_si256(
                        p.add(QUANTS + 64 * (4 * quad + u) + 32 * half) as *const __m256i
                    )
                };
                mag[u] = _mm256_sign_epi8(w[u], w[u]);
            }
            for i in 0..R {
                let q = rows[i].quants[b * QK..(b + 1) * QK].as_ptr() as *const i32;
                for u in 0..4 {
                    // SAFETY: dword 4 quad + u of the block's quants.
                    let word = _mm256_set1_epi32(unsafe { q.add(4 * quad + u).read_unaligned() });
                    let pairs = _mm256_maddubs_epi16(mag[u], _mm256_sign_epi8(word, w[u]));
                    sums[i] = _mm256_add_epi32(sums[i], _mm256_madd_epi16(pairs, ones));
                }
            }
        }
        for i in 0..R {
            let scaled = _mm256_mul_ps(
                _mm256_cvtepi32_ps(sums[i]),
                _mm256_set1_ps(rows[i].scales[b]),
            );
            acc[i] = _mm256_fmadd_ps(scaled, d, acc[i]);
        }
    }
    for i in 0..R {
        // SAFETY: eight floats fit from lane `8 half` of a row of `out`.
        unsafe { _mm256_storeu_ps(out[i].as_mut_ptr().add(HALF * half), acc[i]) };
    }
}
