//! Weight matrices moved into one memory region backed by 2 MiB pages where the OS allows.
//!
//! A decode step streams every weight byte from memory (~96 MB for the default model, far more
//! than the caches). In 4 KiB pages that is ~24,000 TLB misses per step, and the CPU's hardware
//! prefetchers stop at every 4 KiB page boundary. The matrices are built one by one in ordinary
//! allocations (a few hundred KB each, too small for a huge page of their own), so once a model
//! is loaded [`move_into_huge_pages`] copies them, in forward order, into one anonymous mapping
//! aligned to 2 MiB and marked `MADV_HUGEPAGE` before it is first touched. Linux then backs it
//! with huge pages where transparent huge pages are `always` or `madvise` (most
//! distributions' default); elsewhere, or when the mapping fails, the matrices stay where they
//! are. Either way every byte is the same, so no result changes.

use std::ops::Deref;
#[cfg(target_os = "linux")]
use std::sync::Arc;

/// A weight matrix's bytes: its own allocation, or a part of a shared huge-page region.
pub(crate) enum WeightBytes {
    Own(Vec<u8>),
    #[cfg(target_os = "linux")]
    Shared {
        region: Arc<Region>,
        start: usize,
        len: usize,
    },
}

impl Deref for WeightBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            WeightBytes::Own(v) => v,
            #[cfg(target_os = "linux")]
            WeightBytes::Shared { region, start, len } => &region.bytes()[*start..*start + *len],
        }
    }
}

/// Where each matrix starts in the region: cache-line aligned, as an allocation would be.
#[cfg(target_os = "linux")]
const ALIGN: usize = 64;
/// The huge page size (x86-64 and most AArch64 kernels).
#[cfg(target_os = "linux")]
const HUGE_PAGE: usize = 2 << 20;

/// Moves every `Own` part into one shared region, in the order given (the order the forward
/// pass reads them), and returns the bytes moved. Parts already shared stay where they are.
/// A no-op (0) where no region can be mapped.
pub(crate) fn move_into_huge_pages(parts: &mut [&mut WeightBytes]) -> usize {
    #[cfg(target_os = "linux")]
    {
        let own = |p: &WeightBytes| match p {
            WeightBytes::Own(v) => Some(v.len()),
            _ => None,
        };
        let total: usize = parts
            .iter()
            .filter_map(|p| own(p))
            .map(|n| n.next_multiple_of(ALIGN))
            .sum();
        if total == 0 {
            return 0;
        }
        let Some(mut region) = Region::map(total) else {
            return 0;
        };
        let mut at = 0;
        let mut places = Vec::with_capacity(parts.len());
        for p in parts.iter_mut() {
            if let WeightBytes::Own(v) = &mut **p {
                // Each part is freed once copied: loading needs the weights' memory plus one
                // matrix, not twice the weights.
                let v = std::mem::take(v);
                region.bytes_mut()[at..at + v.len()].copy_from_slice(&v);
                places.push(Some((at, v.len())));
                at += v.len().next_multiple_of(ALIGN);
            } else {
                places.push(None);
            }
        }
        let region = Arc::new(region);
        for (p, place) in parts.iter_mut().zip(places) {
            if let Some((start, len)) = place {
                **p = WeightBytes::Shared {
                    region: region.clone(),
                    start,
                    len,
                };
            }
        }
        total
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = parts;
        0
    }
}

/// An anonymous private mapping (`memmap2`), its usable part aligned to [`HUGE_PAGE`].
#[cfg(target_os = "linux")]
pub(crate) struct Region {
    map: memmap2::MmapMut,
    /// Where the aligned part starts in the mapping, and its length.
    skip: usize,
    len: usize,
}

#[cfg(target_os = "linux")]
impl Region {
    /// Maps `len` bytes (zeroed, untouched) at a huge-page boundary and asks for huge pages.
    fn map(len: usize) -> Option<Self> {
        let len = len.next_multiple_of(HUGE_PAGE);
        let map = memmap2::MmapMut::map_anon(len + HUGE_PAGE).ok()?;
        let at = map.as_ptr() as usize;
        let skip = at.next_multiple_of(HUGE_PAGE) - at;
        // Advice only: where the kernel declines, the region still works in small pages.
        let _ = map.advise_range(memmap2::Advice::HugePage, skip, len);
        Some(Self { map, skip, len })
    }

    fn bytes(&self) -> &[u8] {
        &self.map[self.skip..self.skip + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.map[self.skip..self.skip + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moved_parts_keep_their_bytes_in_order_and_aligned() {
        let parts: Vec<Vec<u8>> = [5usize, 64, 1000, 3 << 20, 1]
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 31 + j * 7) as u8).collect())
            .collect();
        let mut bytes: Vec<WeightBytes> = parts.iter().cloned().map(WeightBytes::Own).collect();
        let mut refs: Vec<&mut WeightBytes> = bytes.iter_mut().collect();
        let moved = move_into_huge_pages(&mut refs);
        for (b, want) in bytes.iter().zip(&parts) {
            assert_eq!(&b[..], &want[..]);
        }
        #[cfg(target_os = "linux")]
        {
            assert_eq!(moved, 64 + 64 + 1024 + (3 << 20) + 64);
            let starts: Vec<usize> = bytes.iter().map(|b| b.as_ptr() as usize).collect();
            assert!(starts.iter().all(|s| s % ALIGN == 0), "{starts:?}");
            assert_eq!(starts[0] % HUGE_PAGE, 0, "the region starts on a huge page");
            assert!(starts.windows(2).all(|w| w[0] < w[1]), "in the order given");
            // A second move leaves shared parts alone.
            let mut refs: Vec<&mut WeightBytes> = bytes.iter_mut().collect();
            assert_eq!(move_into_huge_pages(&mut refs), 0);
            assert_eq!(bytes[3].as_ptr() as usize, starts[3]);
        }
        #[cfg(not(target_os = "linux"))]
        assert_eq!(moved, 0);
    }

    #[test]
    fn nothing_to_move_maps_nothing() {
        assert_eq!(move_into_huge_pages(&mut []), 0);
        let mut empty = WeightBytes::Own(Vec::new());
        assert_eq!(move_into_huge_pages(&mut [&mut empty]), 0);
        assert!(empty.is_empty());
    }
}
