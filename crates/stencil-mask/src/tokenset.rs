//! [`TokenSet`]: a bitset over token ids.

/// A set of token ids, as a bitset sized to the vocabulary.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSet {
    words: Vec<u64>,
    len: usize,
}

impl std::fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenSet({} of {})", self.count(), self.len)
    }
}

impl TokenSet {
    /// An empty set for a vocabulary of `len` tokens.
    pub fn new(len: usize) -> Self {
        Self {
            words: vec![0; len.div_ceil(64)],
            len,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    #[inline]
    pub fn insert(&mut self, id: u32) {
        if (id as usize) < self.len {
            self.words[id as usize / 64] |= 1 << (id % 64);
        }
    }

    pub fn remove(&mut self, id: u32) {
        if (id as usize) < self.len {
            self.words[id as usize / 64] &= !(1 << (id % 64));
        }
    }

    #[inline]
    pub fn contains(&self, id: u32) -> bool {
        (id as usize) < self.len && self.words[id as usize / 64] & (1 << (id % 64)) != 0
    }

    /// Sets `values[i] = fill` for every index `i` not in the set (indices past the set's
    /// length included), a word of 64 ids at a time: how a mask is applied to logits.
    ///
    /// A word's cost follows the smaller of its members and its non-members (a mask is
    /// nearly empty in JSON structure and nearly full inside a string), not its 64 bits.
    pub fn fill_outside<T: Copy>(&self, values: &mut [T], fill: T) {
        let mut chunks = values.chunks_mut(64);
        // Words first: zip takes from its first side before the second ends it.
        for (&w, chunk) in self.words.iter().zip(&mut chunks) {
            // Bits past the chunk (the set's length) are never set.
            let outside = !w & (u64::MAX >> (64 - chunk.len()));
            if outside == 0 {
                continue;
            }
            if w == 0 {
                chunk.fill(fill);
            } else if w.count_ones() <= 32 {
                // Few members: keep them aside, fill the chunk, put them back.
                let mut kept = [(0u8, fill); 32];
                let mut n = 0;
                let mut bits = w;
                while bits != 0 {
                    let i = bits.trailing_zeros() as usize;
                    kept[n] = (i as u8, chunk[i]);
                    n += 1;
                    bits &= bits - 1;
                }
                chunk.fill(fill);
                for &(i, v) in &kept[..n] {
                    chunk[i as usize] = v;
                }
            } else {
                let mut bits = outside;
                while bits != 0 {
                    chunk[bits.trailing_zeros() as usize] = fill;
                    bits &= bits - 1;
                }
            }
        }
        // Past the last word: no ids (and no bit past the length is ever set).
        chunks.for_each(|c| c.fill(fill));
    }

    pub fn clear(&mut self) {
        self.words.fill(0);
    }

    /// Adds every member of `other` (same vocabulary size).
    pub fn union_with(&mut self, other: &TokenSet) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= *b;
        }
    }

    /// Keeps only members of `other` (same vocabulary size).
    pub fn intersect_with(&mut self, other: &TokenSet) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a &= *b;
        }
    }

    /// Copies `other` into `self` (same vocabulary size).
    pub fn copy_from(&mut self, other: &TokenSet) {
        self.words.copy_from_slice(&other.words);
    }

    /// Writes the set into `out` as 32-id words, id `i` being bit `i % 32` of word `i / 32`
    /// (the token-bitmask layout of XGrammar and llguidance); words past the set are zero.
    pub fn write_u32_words(&self, out: &mut [u32]) {
        // Ids 64j.. are u64 word j: its low half is u32 word 2j, its high half word 2j + 1.
        let mut pairs = out.chunks_exact_mut(2);
        let mut written = 0;
        for (pair, &b) in (&mut pairs).zip(&self.words) {
            pair[0] = b as u32;
            pair[1] = (b >> 32) as u32;
            written += 2;
        }
        if let (Some(last), Some(&b)) = (
            pairs.into_remainder().first_mut(),
            self.words.get(written / 2),
        ) {
            *last = b as u32;
            written += 1;
        }
        out[written..].fill(0);
    }

    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Member ids in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros();
                w &= w - 1;
                Some(i as u32 * 64 + b)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::TokenSet;

    #[test]
    fn fill_outside_keeps_members_only() {
        for len in [1usize, 63, 64, 65, 130, 200, 260] {
            let mut set = TokenSet::new(len);
            // By word: all ids in, most in, a few in, none, then most in again (a short
            // last word when the length is no multiple of 64).
            let member = |i: u32| match i / 64 {
                0 => true,
                2 => i.is_multiple_of(7),
                3 => false,
                _ => i % 5 != 2,
            };
            (0..len as u32)
                .filter(|&i| member(i))
                .for_each(|i| set.insert(i));
            if len < 64 {
                // A short first word, most ids in.
                set.remove(0);
            }
            let mut values: Vec<i32> = (0..len as i32 + 70).collect();
            set.fill_outside(&mut values, -1);
            for (i, &v) in values.iter().enumerate() {
                let kept = set.contains(i as u32);
                assert_eq!(v, if kept { i as i32 } else { -1 }, "len {len}, index {i}");
            }
        }
    }

    #[test]
    fn u32_words_put_id_i_at_bit_i_mod_32_of_word_i_div_32() {
        for len in [1usize, 31, 32, 33, 64, 65, 96, 100] {
            let mut set = TokenSet::new(len);
            let ids: Vec<u32> = (0..len as u32)
                .filter(|i| i % 3 == 0 || i % 7 == 1)
                .collect();
            ids.iter().for_each(|&i| set.insert(i));
            // Rows as wide as needed, one odd word wider, and padded by three words.
            for width in [len.div_ceil(32), len.div_ceil(32) + 1, len.div_ceil(32) + 3] {
                let mut out = vec![u32::MAX; width];
                set.write_u32_words(&mut out);
                let got: Vec<u32> = (0..width as u32 * 32)
                    .filter(|&i| out[i as usize / 32] >> (i % 32) & 1 == 1)
                    .collect();
                assert_eq!(got, ids, "len {len}, width {width}");
            }
        }
    }
}
