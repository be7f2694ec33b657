//! Token vocabularies as raw bytes.
//!
//! A constraint engine and a streaming detokenizer both need the same fact about every token:
//! *which bytes does it stand for?* Tokenizers store tokens in encoded forms — GPT-2 byte-level
//! BPE maps each byte to a printable code point (`Ġ` for a space), SentencePiece writes `▁` for a
//! space and `<0x0A>` for byte-fallback tokens. [`Vocab`] undoes those encodings once, so that
//! everything above it works on plain bytes.
//!
//! Key types:
//! - [`Vocab`]: token id -> bytes and [`TokenKind`], plus the end-of-sequence ids.
//! - [`TokenKind`]: normal text tokens versus special/control tokens, which constrained text never
//!   contains unless a grammar names them.
//! - `SpecialIds` (feature `tokenizers`): BOS/EOS facts from a Hugging Face model folder.
//!
//! Nothing here knows about models, devices or sampling.

mod byte_level;
#[cfg(feature = "tokenizers")]
mod hf_files;
mod vocab;

pub use byte_level::{byte_to_char, char_to_byte};
#[cfg(feature = "tokenizers")]
pub use hf_files::SpecialIds;
pub use vocab::{TokenKind, Vocab, VocabError, VocabStyle};
