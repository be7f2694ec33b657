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

    /// The bits: id `i` is bit `i % 64` of word `i / 64` (bits past `len` are zero).
    pub fn words(&self) -> &[u64] {
        &self.words
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
