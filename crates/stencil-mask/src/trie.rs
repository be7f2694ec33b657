//! [`TokenTrie`]: the vocabulary as a byte trie flattened in depth-first order.
//!
//! Besides the full trie it keeps the "plain text" tokens apart: tokens made only of characters
//! that appear unescaped inside a JSON string (and at most a final partial UTF-8 character).
//! Inside an unconstrained string every one of them is allowed, so a mask there is that set
//! plus a walk over the much smaller trie of the remaining tokens.

use crate::{BuildError, TokenSet};
use regex_syntax::utf8::Utf8Sequences;
use stencil_grammar::ir::{special_token_bytes, SPECIAL_TOKEN_MARK};
use stencil_vocab::{TokenKind, Vocab};

/// One trie node: the byte on the edge into it, the tokens that end here and where its subtree
/// ends (so a walk can skip the whole subtree when the automaton dies).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Node {
    pub byte: u8,
    /// Bytes from the root (the root is 0, its children 1).
    pub depth: u16,
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
    /// Depth of the deepest node (the longest token's length).
    pub max_depth: usize,
    /// The root's child for each byte (0: none), the hot lookup of `min_tokens`.
    root_child: Box<[u32]>,
}

impl Trie {
    fn build(mut ids: Vec<u32>, bytes: &[Vec<u8>]) -> Self {
        ids.sort_by(|&a, &b| bytes[a as usize].cmp(&bytes[b as usize]).then(a.cmp(&b)));
        let mut nodes = vec![Node {
            byte: 0,
            depth: 0,
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
                    depth: (path_bytes.len() + 1).min(u16::MAX as usize) as u16,
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
        let max_depth = nodes.iter().map(|n| n.depth as usize).max().unwrap_or(0);
        let mut root_child = vec![0u32; 256].into_boxed_slice();
        let mut c = 1usize;
        while c < nodes.len() {
            root_child[nodes[c].byte as usize] = c as u32;
            c = nodes[c].subtree_end as usize;
        }
        Self {
            root_child,
            nodes,
            tokens,
            max_depth,
        }
    }

    pub fn node_tokens(&self, n: usize) -> &[u32] {
        let node = &self.nodes[n];
        &self.tokens[node.tok_start as usize..node.tok_end as usize]
    }

    /// The bytes from the root to node `n`: a prefix of every token at or below it.
    pub fn path<'b>(&self, n: usize, token_bytes: impl Fn(u32) -> &'b [u8]) -> &'b [u8] {
        let end = self.nodes[n].subtree_end as usize;
        let depth = self.nodes[n].depth as usize;
        (n..end.max(n + 1))
            .find_map(|i| self.node_tokens(i).first())
            .map_or(&[], |&t| &token_bytes(t)[..depth])
    }

    /// The child of node `n` on byte `b` (children are in byte order).
    fn child(&self, n: usize, b: u8) -> Option<usize> {
        if n == 0 {
            return match self.root_child[b as usize] {
                0 => None,
                c => Some(c as usize),
            };
        }
        let end = self.nodes[n].subtree_end as usize;
        let mut c = n + 1;
        while c < end {
            let node = &self.nodes[c];
            if node.byte == b {
                return Some(c);
            }
            if node.byte > b {
                return None;
            }
            c = node.subtree_end as usize;
        }
        None
    }

    /// The fewest tokens of this trie that spell `text` exactly (`None` if none do).
    pub fn min_tokens(&self, text: &[u8]) -> Option<u32> {
        const NO: u32 = u32::MAX;
        let n = text.len();
        let mut best = vec![NO; n + 1];
        best[n] = 0;
        for i in (0..n).rev() {
            let mut node = 0;
            for j in i..n {
                let Some(c) = self.child(node, text[j]) else {
                    break;
                };
                node = c;
                let after = best[j + 1];
                if after != NO && self.nodes[c].tok_end > self.nodes[c].tok_start {
                    best[i] = best[i].min(after + 1);
                }
            }
        }
        (best[0] != NO).then_some(best[0])
    }
}

/// The normal tokens of a vocabulary as byte tries (special tokens are never text).
#[derive(Debug, Clone)]
pub struct TokenTrie {
    /// Every trie; index [`FULL`] holds all text tokens, the others hold subsets named by
    /// [`Level`]s.
    pub(crate) tries: Vec<Trie>,
    /// For each entry of [`PLAIN_LEVELS`] and finally for "any length".
    pub(crate) levels: Vec<Level>,
    /// `plain_upto[d]`: the plain tokens of at most `d` characters, for `d <= MAX_EXACT_DEPTH`.
    pub(crate) plain_upto: Vec<TokenSet>,
    /// For the full trie: which subtrees hold only whole plain characters below their node.
    pub(crate) full_below: PlainBelow,
    /// `whole_plain[k]`: the tokens of exactly `k` whole plain characters (the last one
    /// complete), for `k <= MAX_EXACT_DEPTH`; the last bucket holds the longer ones.
    pub(crate) whole_plain: Vec<Vec<u32>>,
    vocab_size: usize,
    max_token_len: usize,
    /// `quote_chars[r]`: tokens that write at most `r` JSON string characters before a raw
    /// `"` (or in all, if they have none); see [`chars_before_quote`].
    quote_chars: Vec<TokenSet>,
    /// The largest such count over all tokens.
    quote_max: u32,
    token_bytes: Vec<Vec<u8>>,
    eos: Vec<u32>,
    /// The text of each end-of-sequence token (`<|im_end|>`), for errors naming one.
    eos_names: Vec<String>,
    /// Every byte some token holds is a token by itself, so no text the vocabulary can spell
    /// needs more tokens than bytes.
    bytes_are_tokens: bool,
    /// Per byte: the most times one token holds it.
    most_per_token: [u32; 256],
}

/// The JSON string characters a token writes before its first raw `"` (or control byte,
/// where a string would die), counted from inside a string: leading UTF-8 continuation bytes
/// complete the current character (one), an escape is one character, and a sequence cut by
/// the end of the token counts as one.
pub(crate) fn chars_before_quote(b: &[u8]) -> u32 {
    let mut i = 0;
    let mut n = 0;
    if b.first().is_some_and(|x| (0x80..=0xBF).contains(x)) {
        n = 1;
        while i < b.len() && (0x80..=0xBF).contains(&b[i]) {
            i += 1;
        }
    }
    while i < b.len() {
        let x = b[i];
        if x == b'"' || x < 0x20 {
            break;
        }
        n += 1;
        i += match x {
            b'\\' if b.get(i + 1) == Some(&b'u') => 6,
            b'\\' => 2,
            0x00..=0x7F => 1,
            0xF0..=0xFF => 4,
            0xE0..=0xEF => 3,
            _ => 2,
        };
    }
    n
}

/// The trie of all text tokens in [`TokenTrie::tries`].
pub(crate) const FULL: usize = 0;

/// One plain-text level `l` (a count of characters): the plain tokens of at most `l`
/// characters, taken wholesale where `l` plain characters cannot die, and tries of the rest.
/// "Doomed" tokens are plain text, at most `l - 1` characters, then a control character: in
/// a state where no control character is allowed for that long (inside a JSON string), they
/// die without a walk, so the `*_nc` tries leave them out.
#[derive(Debug, Clone)]
pub(crate) struct Level {
    pub plain: TokenSet,
    /// Tokens that are not plain tokens of at most `l` characters.
    pub others: usize,
    pub others_nc: usize,
    /// Tokens that are not plain text at all, without the doomed ones (exact depths).
    pub nonplain_nc: usize,
    /// Tokens that are not `l` or fewer whole plain characters (the last one complete).
    pub not_whole: usize,
}

/// Per node of a trie: whether every token below it continues, after the node's bytes, with
/// whole plain characters only (a walk from a state that loops on plain characters can then
/// take the subtree wholesale), and the subtree's tokens as a range of `Trie::tokens`.
#[derive(Debug, Clone, Default)]
pub(crate) struct PlainBelow {
    pub flag: Vec<bool>,
    /// Index into `Trie::tokens` of the first token at or after each node (one entry more
    /// than nodes): node `n`'s subtree holds `first_tok[n]..first_tok[subtree_end]`.
    pub first_tok: Vec<u32>,
}

impl PlainBelow {
    fn new(trie: &Trie, token_bytes: &[Vec<u8>], seqs: &[Vec<(u8, u8)>]) -> Self {
        let n = trie.nodes.len();
        let mut flag = vec![true; n];
        let mut ancestors = vec![0usize; trie.max_depth + 1];
        let mut ok = Vec::new();
        for (i, node) in trie.nodes.iter().enumerate() {
            let depth = node.depth as usize;
            ancestors[depth] = i;
            let Some(&tok) = trie.node_tokens(i).first() else {
                continue;
            };
            let b = &token_bytes[tok as usize];
            // ok[d]: b[d..] is whole plain characters.
            ok.clear();
            ok.resize(b.len() + 1, false);
            ok[b.len()] = true;
            for d in (0..b.len()).rev() {
                ok[d] = seqs.iter().any(|seq| {
                    d + seq.len() <= b.len()
                        && ok[d + seq.len()]
                        && seq
                            .iter()
                            .zip(&b[d..])
                            .all(|(&(lo, hi), &x)| lo <= x && x <= hi)
                });
            }
            for (d, &a) in ancestors.iter().enumerate().take(depth + 1).skip(1) {
                flag[a] &= ok[d];
            }
        }
        let mut first_tok = vec![trie.tokens.len() as u32; n + 1];
        for i in (0..n).rev() {
            let node = &trie.nodes[i];
            first_tok[i] = if node.tok_end > node.tok_start {
                node.tok_start
            } else {
                first_tok[i + 1]
            };
        }
        Self { flag, first_tok }
    }
}

/// Character counts at which plain-token sets are precomputed (the last level, not listed, is
/// "any length").
/// Longest run of plain characters for which exact per-length token sets are kept.
pub(crate) const MAX_EXACT_DEPTH: u32 = 64;

pub(crate) const PLAIN_LEVELS: [u32; 8] = [2, 4, 6, 8, 10, 12, 16, 32];

/// Largest characters-before-a-quote count with a precomputed token set.
const MAX_QUOTE_CHARS: u32 = 512;

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
        // Text tokens as their bytes, except the few holding the special-token mark (a raw
        // byte that is never UTF-8 text); special tokens other than end-of-sequence spelled
        // as grammars name them (`special_token_bytes`); end-of-sequence ends the output.
        let token_bytes: Vec<Vec<u8>> = (0..vocab.len() as u32)
            .map(|id| match vocab.kind(id) {
                TokenKind::Normal if vocab.token_bytes(id).contains(&SPECIAL_TOKEN_MARK) => {
                    Vec::new()
                }
                TokenKind::Normal => vocab.token_bytes(id).to_vec(),
                TokenKind::Special if vocab.is_eos(id) => Vec::new(),
                TokenKind::Special => {
                    special_token_bytes(&String::from_utf8_lossy(vocab.token_bytes(id)))
                }
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
        // Plain characters before the first control byte, for plain-then-control tokens.
        let doom: Vec<Option<u32>> = text
            .iter()
            .map(|&id| {
                let b = &token_bytes[id as usize];
                let at = b.iter().position(|&x| x < 0x20)?;
                plain_chars(&b[..at], &seqs)
            })
            .collect();
        let counts: Vec<u32> = text
            .iter()
            .map(|&id| chars_before_quote(&token_bytes[id as usize]))
            .collect();
        let quote_max = counts.iter().copied().max().unwrap_or(0);
        let most = quote_max.min(MAX_QUOTE_CHARS);
        let mut quote_chars = Vec::with_capacity(most as usize + 1);
        let mut acc = TokenSet::new(vocab.len());
        for r in 0..=most {
            for (&id, &c) in text.iter().zip(&counts) {
                if c == r {
                    acc.insert(id);
                }
            }
            quote_chars.push(acc.clone());
        }
        // Plain characters of tokens whose last plain character is complete.
        let whole: Vec<Option<u32>> = text
            .iter()
            .zip(&chars)
            .map(|(&id, &c)| c.filter(|_| std::str::from_utf8(&token_bytes[id as usize]).is_ok()))
            .collect();
        let mut whole_plain = vec![Vec::new(); MAX_EXACT_DEPTH as usize + 2];
        for (&id, w) in text.iter().zip(&whole) {
            if let Some(n) = w {
                whole_plain[(*n as usize).min(MAX_EXACT_DEPTH as usize + 1)].push(id);
            }
        }
        let mut tries = vec![Trie::build(text.clone(), &token_bytes)];
        let mut levels = Vec::new();
        for limit in PLAIN_LEVELS.iter().copied().chain([u32::MAX]) {
            let mut plain = TokenSet::new(vocab.len());
            let (mut others, mut others_nc, mut nonplain_nc) = (Vec::new(), Vec::new(), Vec::new());
            let mut not_whole = Vec::new();
            for (((&id, c), d), w) in text.iter().zip(&chars).zip(&doom).zip(&whole) {
                let doomed = d.is_some_and(|m| m < limit);
                match c {
                    Some(n) if *n <= limit => plain.insert(id),
                    _ => {
                        others.push(id);
                        if !doomed {
                            others_nc.push(id);
                        }
                    }
                }
                if c.is_none() && !doomed {
                    nonplain_nc.push(id);
                }
                if !w.is_some_and(|n| n <= limit) {
                    not_whole.push(id);
                }
            }
            let mut add = |ids: Vec<u32>| {
                tries.push(Trie::build(ids, &token_bytes));
                tries.len() - 1
            };
            levels.push(Level {
                plain,
                others: add(others),
                others_nc: add(others_nc),
                nonplain_nc: add(nonplain_nc),
                not_whole: add(not_whole),
            });
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
        let full_below = PlainBelow::new(&tries[FULL], &token_bytes, &seqs);
        let mut occurs = [false; 256];
        for b in token_bytes.iter().flatten() {
            occurs[*b as usize] = true;
        }
        let bytes_are_tokens =
            (0..=255u8).all(|b| !occurs[b as usize] || tries[FULL].min_tokens(&[b]) == Some(1));
        let mut most_per_token = [0u32; 256];
        let mut count = [0u32; 256];
        for t in &token_bytes {
            for &b in t {
                count[b as usize] += 1;
            }
            for &b in t {
                let c = &mut count[b as usize];
                most_per_token[b as usize] = most_per_token[b as usize].max(*c);
                *c = 0;
            }
        }
        Self {
            tries,
            levels,
            plain_upto,
            full_below,
            whole_plain,
            vocab_size: vocab.len(),
            max_token_len: token_bytes.iter().map(Vec::len).max().unwrap_or(0),
            quote_chars,
            quote_max,
            token_bytes,
            eos: vocab.eos_ids().to_vec(),
            eos_names: vocab
                .eos_ids()
                .iter()
                .map(|&id| String::from_utf8_lossy(vocab.token_bytes(id)).into_owned())
                .collect(),
            bytes_are_tokens,
            most_per_token,
        }
    }

    /// True if every byte some token holds is a token by itself: then the bytes of any text
    /// the vocabulary can spell bound the tokens that spell it.
    pub(crate) fn bytes_are_tokens(&self) -> bool {
        self.bytes_are_tokens
    }

    /// Number of token ids in the vocabulary (mask size).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The tokens writing at most `chars` string characters before a quote: `Ok(None)` when
    /// every token does, `Err(())` past the precomputed sets (tokens of over
    /// `MAX_QUOTE_CHARS` characters: then the caller must not filter).
    pub(crate) fn quote_chars(&self, chars: u32) -> Result<Option<&TokenSet>, ()> {
        if chars >= self.quote_max {
            return Ok(None);
        }
        self.quote_chars.get(chars as usize).map(Some).ok_or(())
    }

    /// Bytes of the longest token.
    pub fn max_token_len(&self) -> usize {
        self.max_token_len
    }

    /// Per byte: the most times one token holds it.
    pub(crate) fn most_per_token(&self) -> &[u32; 256] {
        &self.most_per_token
    }

    /// The bytes the automaton sees for a token: its text, or a control token's name between
    /// two [`SPECIAL_TOKEN_MARK`] bytes; empty for end-of-sequence and unknown tokens and the
    /// few raw tokens that hold the mark.
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.token_bytes.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// What a grammar's named token (`<|im_end|>`, or `<[42]>` by id) stands for in this
    /// vocabulary: a control token's spelling, or the text of an ordinary token (which any
    /// tokens spelling that text may then write). Errors name why the token cannot be written.
    pub fn spell_named_token(&self, name: &str) -> Result<Vec<u8>, BuildError> {
        let fail = |reason: String| BuildError::NamedToken {
            name: name.to_string(),
            reason,
        };
        if let Some(id) = name.strip_prefix("<[").and_then(|r| r.strip_suffix("]>")) {
            let id: u32 = id
                .parse()
                .map_err(|_| fail("a token id is a decimal number, like `<[42]>`".into()))?;
            if id as usize >= self.vocab_size {
                return Err(fail(format!(
                    "the vocabulary has only {} tokens",
                    self.vocab_size
                )));
            }
            if self.eos.contains(&id) {
                return Err(fail(
                    "that is the end-of-sequence token, which ends the output where the grammar allows it".into(),
                ));
            }
            let bytes = self.token_bytes(id);
            if bytes.is_empty() {
                return Err(fail(
                    "that token can never be written under a constraint".into(),
                ));
            }
            return Ok(bytes.to_vec());
        }
        let spelled = special_token_bytes(name);
        if self.token_bytes.contains(&spelled) {
            return Ok(spelled);
        }
        if self.token_bytes.iter().any(|b| b == name.as_bytes()) {
            return Ok(name.as_bytes().to_vec());
        }
        Err(fail(if self.eos_names.iter().any(|n| n == name) {
            "that is the end-of-sequence token, which ends the output where the grammar allows it"
                .into()
        } else {
            "this model's vocabulary has no such token".into()
        }))
    }

    /// End-of-sequence token ids.
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos
    }

    /// The fewest text tokens that spell `text` (`None` if the vocabulary cannot).
    pub fn min_tokens(&self, text: &[u8]) -> Option<u32> {
        self.tries[FULL].min_tokens(text)
    }
}
