//! Work in two phases on candle's thread pool, in one wake-up of its threads.
//!
//! A batched layer step has per-row work (quantizing activations, rotating and caching keys)
//! that must finish before the work it feeds (the weight columns, the attention heads) starts.
//! Run as a serial prelude on the calling thread, that per-row work leaves the pool's other
//! threads spinning or asleep; as two pool calls, it pays a second wake-up. Here both phases
//! share one call: every thread takes chunks of the first phase from a shared cursor, waits
//! until all of them are done, then takes chunks of the second. A thread that wakes late finds
//! the first phase done by the others and joins the second, so nobody waits on a sleeper.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One phase: `run` over `0..items`, in chunks of `chunk` items.
pub(crate) struct Phase<'a> {
    pub items: usize,
    pub chunk: usize,
    pub run: &'a (dyn Fn(Range<usize>) + Sync),
}

impl<'a> Phase<'a> {
    /// `run` over `0..items` in chunks of about an eighth of a thread's share (as candle's
    /// `execute_chunked`): few grabs of the cursor, and a short tail when threads run at
    /// different speeds.
    pub(crate) fn new(items: usize, run: &'a (dyn Fn(Range<usize>) + Sync)) -> Self {
        Self {
            items,
            chunk: items.div_ceil(threads() * 8).max(1),
            run,
        }
    }
}

/// Threads taking part in a pool call (the caller and the pool's workers).
pub(crate) fn threads() -> usize {
    candle_core::utils::barrier_pool().n_workers() + 1
}

/// Counts a chunk of the first phase as done when dropped, so that a chunk that panics still
/// releases the threads waiting for the phase (the pool then re-raises the panic).
struct Done<'a>(&'a AtomicUsize, usize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(self.1, Ordering::Release);
    }
}

/// Runs every chunk of `first`, then every chunk of `second`, over candle's pool (the calling
/// thread takes part); no chunk of `second` starts before all of `first` is done.
pub(crate) fn in_phases(first: Phase<'_>, second: Phase<'_>) {
    let pool = candle_core::utils::barrier_pool();
    if pool.n_workers() == 0 {
        (first.run)(0..first.items);
        (second.run)(0..second.items);
        return;
    }
    let (next1, done1, next2) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    );
    let take = |phase: &Phase<'_>, next: &AtomicUsize| -> Option<Range<usize>> {
        let start = next.fetch_add(phase.chunk.max(1), Ordering::Relaxed);
        (start < phase.items).then(|| start..phase.items.min(start + phase.chunk.max(1)))
    };
    pool.execute(|_| {
        while let Some(chunk) = take(&first, &next1) {
            let _done = Done(&done1, chunk.len());
            (first.run)(chunk);
        }
        while done1.load(Ordering::Acquire) < first.items {
            std::hint::spin_loop();
        }
        while let Some(chunk) = take(&second, &next2) {
            (second.run)(chunk);
        }
    });
}

/// Runs every chunk of `phase` over candle's pool (the calling thread takes part).
pub(crate) fn in_chunks(phase: Phase<'_>) {
    in_phases(phase, Phase::new(0, &|_| {}))
}

/// A buffer that pool threads write in disjoint parts (and read where nobody writes).
pub(crate) struct Disjoint<T>(*mut T);

// SAFETY: the threads write disjoint parts only (the contract of `part`).
unsafe impl<T: Send> Sync for Disjoint<T> {}

impl<T> Disjoint<T> {
    pub(crate) fn new(buffer: &mut [T]) -> Self {
        Self(buffer.as_mut_ptr())
    }

    /// Elements `range` of the buffer.
    ///
    /// # Safety
    /// `range` is within the buffer, which outlives the use of the part; no other part in
    /// use at the same time overlaps it.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn part(&self, range: Range<usize>) -> &mut [T] {
        // SAFETY: the caller's.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(range.start), range.len()) }
    }

    /// Elements `range` of the buffer, to read.
    ///
    /// # Safety
    /// `range` is within the buffer, which outlives the use of the slice; no part in use at the
    /// same time overlaps it.
    pub(crate) unsafe fn read(&self, range: Range<usize>) -> &[T] {
        // SAFETY: the caller's.
        unsafe { std::slice::from_raw_parts(self.0.add(range.start), range.len()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn the_second_phase_sees_all_of_the_first() {
        for (n1, n2) in [(0, 5), (1, 1), (7, 0), (19, 36), (100, 3)] {
            let firsts: Vec<AtomicU64> = (0..n1).map(|_| AtomicU64::new(0)).collect();
            let seconds: Vec<AtomicU64> = (0..n2).map(|_| AtomicU64::new(0)).collect();
            let first = |r: Range<usize>| {
                for i in r {
                    firsts[i].fetch_add(1, Ordering::Relaxed);
                }
            };
            let second = |r: Range<usize>| {
                for i in r {
                    // Every item of the first phase is done exactly once by now.
                    let all = firsts.iter().all(|f| f.load(Ordering::Relaxed) == 1);
                    seconds[i].fetch_add(if all { 1 } else { 100 }, Ordering::Relaxed);
                }
            };
            in_phases(
                Phase {
                    items: n1,
                    chunk: 2,
                    run: &first,
                },
                Phase::new(n2, &second),
            );
            assert!(firsts.iter().all(|f| f.load(Ordering::Relaxed) == 1));
            assert!(
                seconds.iter().all(|s| s.load(Ordering::Relaxed) == 1),
                "{n1} {n2}"
            );
        }
    }
}
