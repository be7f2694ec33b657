//! Reading a layer's KV cache ahead of its attention, while the Q/K/V projection computes.
//!
//! On a batch, the weight matmuls are bound by arithmetic and the attention by memory: it does
//! little arithmetic per cached byte, and the caches it reads (every sequence's keys and
//! values of the layer, megabytes on a batch of 16) were pushed out of the CPU's caches by
//! the weights streamed since the previous step. Waited for in the attention, that memory
//! costs as much time as computing the projection before it. A [`ReadAhead`] spreads
//! prefetches of those bytes over the projection's column jobs (each takes its share after
//! a group of columns), so the loads overlap arithmetic and the attention finds its data in
//! cache. A prefetch changes no value, only when memory is read.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Cache line size assumed for the prefetches.
const LINE: usize = 64;

/// Most bytes read ahead per call: a few times a core's L2 cache, so that the first lines are
/// not evicted by the last before the attention reads them (what does not fit stays in the
/// shared last-level cache).
const MAX_BYTES: usize = 4 << 20;

/// Memory regions to prefetch, shared out between the jobs of one pool call.
pub(crate) struct ReadAhead {
    /// (address, first line) of each region, in order; lines are numbered across regions.
    regions: Vec<(usize, usize)>,
    lines: usize,
    next: AtomicUsize,
}

impl ReadAhead {
    /// The bytes of `regions`, in order, up to [`MAX_BYTES`] in all.
    pub(crate) fn new<'a, T: 'a>(regions: impl IntoIterator<Item = &'a [T]>) -> Self {
        let mut out = Vec::new();
        let mut lines = 0;
        for r in regions {
            let bytes = std::mem::size_of_val(r);
            if bytes == 0 {
                continue;
            }
            let n = bytes.div_ceil(LINE).min(MAX_BYTES / LINE - lines);
            if n == 0 {
                break;
            }
            out.push((r.as_ptr() as usize, lines));
            lines += n;
        }
        Self {
            regions: out,
            lines,
            next: AtomicUsize::new(0),
        }
    }

    /// Prefetches the next `1 / jobs` of the lines (nothing once all are taken).
    pub(crate) fn share(&self, jobs: usize) {
        let per_job = self.lines.div_ceil(jobs.max(1));
        let start = self.next.fetch_add(per_job, Ordering::Relaxed);
        let end = self.lines.min(start.saturating_add(per_job));
        if start >= end {
            return;
        }
        let mut r = self.regions.partition_point(|&(_, first)| first <= start) - 1;
        for line in start..end {
            while self
                .regions
                .get(r + 1)
                .is_some_and(|&(_, first)| first <= line)
            {
                r += 1;
            }
            let (at, first) = self.regions[r];
            prefetch(at + (line - first) * LINE);
        }
    }

    /// Lines not yet taken (for tests).
    #[cfg(test)]
    fn left(&self) -> usize {
        self.lines.saturating_sub(self.next.load(Ordering::Relaxed))
    }
}

/// Asks for the line at `address` to be brought into the cache (a hint: it never faults).
#[inline]
fn prefetch(address: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing the program sees and cannot fault, whatever the address.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
        _mm_prefetch::<_MM_HINT_T1>(address as *const i8)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_every_line_once_and_stop() {
        let a = vec![0u8; 1000];
        let b = [0f32; 3];
        let empty: [u8; 0] = [];
        let ahead = ReadAhead::new([&a[..], &empty]);
        assert_eq!(ahead.lines, 16);
        let two = ReadAhead::new([&b[..], &b[..]]);
        assert_eq!((two.lines, two.regions.len()), (2, 2));
        for _ in 0..5 {
            ahead.share(5);
        }
        assert_eq!(ahead.left(), 0);
        ahead.share(5); // nothing left: no effect, no panic
        let big = vec![0u8; MAX_BYTES + 4096];
        assert_eq!(ReadAhead::new([&big[..], &a[..]]).lines, MAX_BYTES / LINE);
    }
}
