//! The AVX-512 VNNI kernel: a group's sixteen columns in the lanes of one register; per block
//! and row, eight `dpbusd` of the quants made unsigned (`w + 128`) by broadcast activation
//! bytes, less `128 Σ p`.

use super::super::quant::{row_tiles, Group, GroupOut, Prefetch};
use super::{Activations, Row, GROUP, GROUP_BLOCK, QK, QUANTS};
use std::arch::x86_64::*;

/// Rows per tile.
const TILE: usize = 4;

/// One group of the matrix, all `m` rows ([`super::super::quant::Format`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn group(group: Group<'_>, act: &Activations, m: usize, out: &mut GroupOut) {
    let blocks = group.blocks;
    row_tiles::<TILE>(m, (group, GROUP_BLOCK), out, |r, rows, values, prefetch| {
        // SAFETY (all): the same CPU features; `rows` rows exist from `r`.
        unsafe {
            match rows {
                4 => tile::<4>(blocks, act, r, values, prefetch),
                3 => tile::<3>(blocks, act, r, values, prefetch),
                2 => tile::<2>(blocks, act, r, values, prefetch),
                _ => tile::<1>(blocks, act, r, values, prefetch),
            }
        }
    })
}

/// [`super::dot_scalar`] for the sixteen lanes of a group and `R` rows from `first`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn tile<const R: usize>(
    blocks: &[u8],
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
    let mut acc = [_mm512_setzero_ps(); R];
    let bias = _mm512_set1_epi8(-128);
    for (b, block) in blocks.chunks_exact(GROUP_BLOCK).enumerate() {
        let p = block.as_ptr();
        prefetch.after_block();
        // SAFETY (loads): a group block holds the scales and eight runs of 64 quant bytes.
        let d = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p as *const __m256i) });
        // Loops, not closures (`map`), which the compiler may leave out of line.
        let mut w = [bias; 8];
        for (u, w) in w.iter_mut().enumerate() {
            let run = unsafe { _mm512_loadu_si512(p.add(QUANTS + 64 * u) as *const _) };
            *w = _mm512_xor_si512(run, bias);
        }
        for i in 0..R {
            let q = rows[i].quants[b * QK..(b + 1) * QK].as_ptr() as *const i32;
            // SAFETY: eight dwords of the block's quants.
            // A macro rather than a closure, which the compiler may leave out of line.
            macro_rules! word {
                ($j:expr) => {
                    _mm512_set1_epi32(unsafe { q.add($j).read_unaligned() })
                };
            }
            let mut s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], word!(0));
            let mut s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[1], word!(1));
            for u in (2..8).step_by(2) {
                s0 = _mm512_dpbusd_epi32(s0, w[u], word!(u));
                s1 = _mm512_dpbusd_epi32(s1, w[u + 1], word!(u + 1));
            }
            let unbiased = _mm512_sub_epi32(
                _mm512_add_epi32(s0, s1),
                _mm512_set1_epi32(rows[i].totals[b] << 7),
            );
            let scaled = _mm512_mul_ps(
                _mm512_cvtepi32_ps(unbiased),
                _mm512_set1_ps(rows[i].scales[b]),
            );
            acc[i] = _mm512_fmadd_ps(scaled, d, acc[i]);
        }
    }
    for i in 0..R {
        // SAFETY: sixteen floats fit in a row of `out`.
        unsafe { _mm512_storeu_ps(out[i].as_mut_ptr(), acc[i]) };
    }
}
