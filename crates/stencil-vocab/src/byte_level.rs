//! The GPT-2 byte <-> unicode table used by byte-level BPE tokenizers.
//!
//! Printable Latin-1 bytes map to themselves; the other 68 bytes map to code points from U+0100
//! upwards, in byte order. This is the table from OpenAI's `bytes_to_unicode`.

use std::sync::OnceLock;

fn is_self_mapped(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

struct Tables {
    to_char: [char; 256],
    to_byte: std::collections::HashMap<char, u8>,
}

fn tables() -> &'static Tables {
    static TABLES: OnceLock<Tables> = OnceLock::new();
    TABLES.get_or_init(|| {
        let mut to_char = ['\0'; 256];
        let mut next = 256u32;
        for b in 0..=255u8 {
            to_char[b as usize] = if is_self_mapped(b) {
                b as char
            } else {
                let c = char::from_u32(next).expect("U+0100..U+0143 are valid chars");
                next += 1;
                c
            };
        }
        let to_byte = to_char
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect();
        Tables { to_char, to_byte }
    })
}

/// The printable character that byte-level BPE uses for `byte`.
pub fn byte_to_char(byte: u8) -> char {
    tables().to_char[byte as usize]
}

/// The byte that a byte-level BPE character stands for, or `None` if `c` is not in the table.
pub fn char_to_byte(c: char) -> Option<u8> {
    tables().to_byte.get(&c).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_a_bijection_with_known_points() {
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(b'a'), 'a');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(byte_to_char(b)), Some(b));
        }
        assert_eq!(char_to_byte('€'), None);
    }
}
