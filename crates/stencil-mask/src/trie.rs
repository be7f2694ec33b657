//! [`TokenTrie`]: the vocabulary as a byte trie flattened in depth-first order.

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

/// The normal tokens of a vocabulary as a byte trie (special tokens are never text).
#[derive(Debug, Clone)]
pub struct TokenTrie {
    pub(crate) nodes: Vec<Node>,
    pub(crate) tokens: Vec<u32>,
    vocab_size: usize,
    token_bytes: Vec<Vec<u8>>,
    eos: Vec<u32>,
}

impl TokenTrie {
    pub fn new(vocab: &Vocab) -> Self {
        let mut ids: Vec<u32> = (0..vocab.len() as u32)
            .filter(|&id| vocab.kind(id) == TokenKind::Normal && !vocab.token_bytes(id).is_empty())
            .collect();
        ids.sort_by(|&a, &b| {
            vocab
                .token_bytes(a)
                .cmp(vocab.token_bytes(b))
                .then(a.cmp(&b))
        });
        let mut nodes = vec![Node {
            byte: 0,
            tok_start: 0,
            tok_end: 0,
            subtree_end: 0,
        }];
        let mut tokens = Vec::with_capacity(ids.len());
        // Path of open nodes (indices) from the root; sorted input makes this a single pass.
        let mut path: Vec<usize> = vec![0];
        let mut path_bytes: Vec<u8> = Vec::new();
        for id in ids {
            let b = vocab.token_bytes(id);
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
            if nodes[n].tok_end == 0 || nodes[n].tok_end != tokens.len() as u32 {
                nodes[n].tok_start = tokens.len() as u32;
            }
            tokens.push(id);
            nodes[n].tok_end = tokens.len() as u32;
        }
        let end = nodes.len() as u32;
        for n in path {
            nodes[n].subtree_end = end;
        }
        let token_bytes = (0..vocab.len() as u32)
            .map(|id| match vocab.kind(id) {
                TokenKind::Normal => vocab.token_bytes(id).to_vec(),
                TokenKind::Special => Vec::new(),
            })
            .collect();
        Self {
            nodes,
            tokens,
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

    pub(crate) fn node_tokens(&self, n: usize) -> &[u32] {
        let node = &self.nodes[n];
        &self.tokens[node.tok_start as usize..node.tok_end as usize]
    }
}
