//! The AVX2 kernel: a group's sixteen columns in the lanes of two registers; per block and
//! row, eight `maddubs` of the unpacked nibbles by broadcast activation bytes, summed in 16-bit
//! lanes (at most 8 · 2 · 15 · 127 < 2^15: exact), then widened by one `madd`.

use super::super::quant::{row_tiles, Group, GroupOut, Prefetch};
use super::{Activations, Row, GROUP, GROUP_BLOCK, NIBBLES, QK};
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
    let mut macc = [_mm256_setzero_ps(); R];
    let low = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    for (b, block) in blocks.chunks_exact(GROUP_BLOCK).enumerate() {
        let p = block.as_ptr();
        prefetch.after_block();
        // SAFETY (loads): a group block holds the scales and four runs of 64 nibble bytes.
        let (d, m) = unsafe {
            (
                _mm256_cvtph_ps(_mm_loadu_si128(p.add(2 * HALF * half) as *const __m128i)),
                _mm256_cvtph_ps(_mm_loadu_si128(
                    p.add(2 * GROUP + 2 * HALF * half) as *const __m128i
                )),
            )
        };
        // Loops, not closures (`map`), which the compiler may leave out of line.
        let (mut lo, mut hi) = ([low; 4], [low; 4]);
        for u in 0..4 {
            let nib = unsafe {
                _mm256_loadu_si256(p.add(NIBBLES + 64 * u + 32 * half) as *const __m256i)
            };
            lo[u] = _mm256_and_si256(nib, low);
            hi[u] = _mm256_and_si256(_mm256_srli_epi16(nib, 4), low);
        }
        for i in 0..R {
            let q = rows[i].quants[b * QK..(b + 1) * QK].as_ptr() as *const i32;
            // SAFETY: eight dwords of the block's quants.
            // A macro rather than a closure, which the compiler may leave out of line.
            macro_rules! word {
                ($j:expr) => {
                    _mm256_set1_epi32(unsafe { q.add($j).read_unaligned() })
                };
            }
            let mut pairs = _mm256_maddubs_epi16(lo[0], word!(0));
            pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(hi[0], word!(4)));
            for u in 1..4 {
                pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(lo[u], word!(u)));
                pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(hi[u], word!(4 + u)));
            }
            let sum = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
            let scaled = _mm256_mul_ps(sum, _mm256_set1_ps(rows[i].scales[b]));
            acc[i] = _mm256_fmadd_ps(scaled, d, acc[i]);
            macc[i] = _mm256_fmadd_ps(m, _mm256_set1_ps(rows[i].sums[b]), macc[i]);
        }
    }
    for i in 0..R {
        // SAFETY: eight floats fit from lane `8 half` of a row of `out`.
        unsafe {
            _mm256_storeu_ps(
                out[i].as_mut_ptr().add(HALF * half),
                _mm256_add_ps(acc[i], macc[i]),
            )
        };
    }
}
