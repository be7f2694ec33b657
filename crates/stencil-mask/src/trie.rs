//! [`TokenTrie`]: the vocabulary as a byte trie flattened in depth-first order.
//!
//! Besides the full trie it keeps the "plain text" tokens apart: tokens made only of characters
//! that appear unescaped inside a JSON string (and at most a final partial UTF-8 character).
//! Inside an unconstrained string every one of them is allowed, so a mask there is that set
//! plus a walk over the much smaller trie of the remaining tokens.

use crate::TokenSet;
use regex_syntax::utf8::Utf8Sequences;
use stencil_vocab::{TokenKind, Vocab};

/// One trie node: the byte on the edge into it, the tokens that end here and where its subtree
/// ends (so a walk can skip the whole subtree when the automaton dies).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Node {
    pub byte: u8,
    /// Tokens ending at this node: `tokens[tok_start..tok_end]`.
    pub tok_start: u32,
    pub tok_end: u32,
    /// Index one past the last node of this subtree.
    pub subtree_end: u32,
}

/// A flattened byte trie over some tokens.
#[derive(Debug, Clone, Default)]
pub(crate) struct Trie {
    pub nodes: Vec<Node>,
    pub tokens: Vec<u32>,
}

impl Trie {
    fn build(mut ids: Vec<u32>, bytes: &[Vec<u8>]) -> Self {
        ids.sort_by(|&a, &b| bytes[a as usize].cmp(&bytes[b as usize]).then(a.cmp(&b)));
        let mut nodes = vec![Node {
            byte: 0,
            tok_start: 0,
            tok_end: 0,
            subtree_end: 0,
        }];
        let mut tokens = Vec::with_capacity(ids.len());
        // Path of open nodes from the root; sorted input makes this a single pass.
        let mut path: Vec<usize> = vec![0];
        let mut path_bytes: Vec<u8> = Vec::new();
        for id in ids {
            let b = &bytes[id as usize];
            let common = path_bytes.iter().zip(b).take_while(|(x, y)| x == y).count();
            while path_bytes.len() > common {
                let n = path.pop().unwrap_or(0);
                nodes[n].subtree_end = nodes.len() as u32;
                path_bytes.pop();
            }
            for &byte in &b[common..] {
                nodes.push(Node {
                    byte,
                    tok_start: 0,
                    tok_end: 0,
                    subtree_end: 0,
                });
                path.push(nodes.len() - 1);
                path_bytes.push(byte);
            }
            let n = *path.last().unwrap_or(&0);
            if nodes[n].tok_end != tokens.len() as u32 || nodes[n].tok_start == nodes[n].tok_end {
                nodes[n].tok_start = tokens.len() as u32;
            }
            tokens.push(id);
            nodes[n].tok_end = tokens.len() as u32;
        }
        let end = nodes.len() as u32;
        for n in path {
            nodes[n].subtree_end = end;
        }
        Self { nodes, tokens }
    }

    pub fn node_tokens(&self, n: usize) -> &[u32] {
        let node = &self.nodes[n];
        &self.tokens[node.tok_start as usize..node.tok_end as usize]
    }
}

/// The normal tokens of a vocabulary as byte tries (special tokens are never text).
#[derive(Debug, Clone)]
pub struct TokenTrie {
    pub(crate) full: Trie,
    /// For each entry of [`PLAIN_LEVELS`] and finally for "any length": the plain tokens of at
    /// most that many characters, and a trie of all the other tokens.
    pub(crate) levels: Vec<(TokenSet, Trie)>,
    /// `plain_upto[d]`: the plain tokens of at most `d` characters, for `d <= MAX_EXACT_DEPTH`.
    pub(crate) plain_upto: Vec<TokenSet>,
    vocab_size: usize,
    token_bytes: Vec<Vec<u8>>,
    eos: Vec<u32>,
}

/// Character counts at which plain-token sets are precomputed (the last level, not listed, is
/// "any length").
/// Longest run of plain characters for which exact per-length token sets are kept.
pub(crate) const MAX_EXACT_DEPTH: u32 = 64;

pub(crate) const PLAIN_LEVELS: [u32; 8] = [2, 4, 6, 8, 10, 12, 16, 32];

/// Byte-range sequences of one plain (unescaped) JSON string character.
pub(crate) fn plain_char_sequences() -> Vec<Vec<(u8, u8)>> {
    let mut out = vec![vec![(0x20, 0x21)], vec![(0x23, 0x5B)], vec![(0x5D, 0x7F)]];
    for seq in Utf8Sequences::new('\u{80}', char::MAX) {
        out.push(seq.as_slice().iter().map(|r| (r.start, r.end)).collect());
    }
    out
}

/// If `b` is plain JSON-string characters (the last one possibly incomplete), their count.
fn plain_chars(b: &[u8], seqs: &[Vec<(u8, u8)>]) -> Option<u32> {
    let mut i = 0;
    let mut n = 0;
    while i < b.len() {
        let len = seqs.iter().find_map(|seq| {
            let k = seq.len().min(b.len() - i);
            seq.iter()
                .zip(&b[i..i + k])
                .all(|(&(lo, hi), &x)| lo <= x && x <= hi)
                .then_some(seq.len())
        })?;
        i += len;
        n += 1;
    }
    Some(n)
}

impl TokenTrie {
    pub fn new(vocab: &Vocab) -> Self {
        let token_bytes: Vec<Vec<u8>> = (0..vocab.len() as u32)
            .map(|id| match vocab.kind(id) {
                TokenKind::Normal => vocab.token_bytes(id).to_vec(),
                TokenKind::Special => Vec::new(),
            })
            .collect();
        let text: Vec<u32> = (0..vocab.len() as u32)
            .filter(|&id| !token_bytes[id as usize].is_empty())
            .collect();
        let seqs = plain_char_sequences();
        let chars: Vec<Option<u32>> = text
            .iter()
            .map(|&id| plain_chars(&token_bytes[id as usize], &seqs))
            .collect();
        let mut levels = Vec::new();
        for limit in PLAIN_LEVELS.iter().copied().chain([u32::MAX]) {
            let mut plain = TokenSet::new(vocab.len());
            let mut others = Vec::new();
            for (&id, c) in text.iter().zip(&chars) {
                match c {
                    Some(n) if *n <= limit => plain.insert(id),
                    _ => others.push(id),
                }
            }
            levels.push((plain, Trie::build(others, &token_bytes)));
        }
        let mut by_len: Vec<Vec<u32>> = vec![Vec::new(); MAX_EXACT_DEPTH as usize + 1];
        for (&id, c) in text.iter().zip(&chars) {
            if let Some(n) = c {
                if *n <= MAX_EXACT_DEPTH {
                    by_len[*n as usize].push(id);
                }
            }
        }
        let mut plain_upto = Vec::with_capacity(by_len.len());
        let mut acc = TokenSet::new(vocab.len());
        for ids in by_len {
            for id in ids {
                acc.insert(id);
            }
            plain_upto.push(acc.clone());
        }
        Self {
            full: Trie::build(text, &token_bytes),
            levels,
            plain_upto,
            vocab_size: vocab.len(),
            token_bytes,
            eos: vocab.eos_ids().to_vec(),
        }
    }

    /// Number of token ids in the vocabulary (mask size).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The bytes of a token (empty for special or unknown tokens).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.token_bytes.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// End-of-sequence token ids.
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos
    }
}
