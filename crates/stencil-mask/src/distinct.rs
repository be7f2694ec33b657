//! `uniqueItems` kept by the matcher: the items of some JSON arrays must all differ.
//!
//! No automaton of useful size says "no item equals an earlier one", so the grammar marks such
//! arrays ([`stencil_grammar::ir::DistinctItems`]: the array is a rule, each item a call) and
//! the matcher checks the condition on the text. Each stack frame of an item records where the
//! item starts; when the item is complete (its rule returns, or reaches a state that can only
//! return) its text is compared, as a JSON value, with the earlier items of its array, which
//! are recorded on copies of the array's frame. An item equal to an earlier one ends that
//! parse: exact for checking a text, and during generation the closing byte of a repeated item
//! is never allowed. What is not prevented is writing a prefix that can only be completed as a
//! repeat (`{"id": 1` where `}` must follow, `1` already written): that parse then has no way
//! on.
//!
//! Equality is JSON's: numbers by value (`1` equals `1.0` and `1e0`), strings after escapes
//! are decoded, objects whatever their member order.

use crate::hash::FxHashMap;
use crate::matcher::{Config, Stepper};
use crate::MaskError;

/// No offset / no frame.
pub(crate) const NONE: u32 = u32::MAX;

/// What a stack frame knows about distinct items (kept beside the matcher's frame arena).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameInfo {
    /// Where the item of this frame starts in the text, for a frame of an item rule.
    pub item_start: u32,
    /// On a copy of an array's frame: the item it records (`start..end`) and the frame that
    /// records the item before it.
    pub last: (u32, u32),
    pub prev: u32,
}

impl FrameInfo {
    pub const PLAIN: FrameInfo = FrameInfo {
        item_start: NONE,
        last: (NONE, NONE),
        prev: NONE,
    };
}

/// A matcher's state for distinct items: the text (committed, then what a step or a walk is
/// trying), per frame what it knows, and the canonical forms of committed items.
#[derive(Debug, Clone, Default)]
pub(crate) struct Distinct {
    pub text: Vec<u8>,
    /// Bytes of `text` that are committed (canonical forms of items inside stay valid).
    pub committed: usize,
    /// Text length after each committed token (for rollback).
    pub lengths: Vec<usize>,
    pub info: Vec<FrameInfo>,
    canon: FxHashMap<(u32, u32), Option<Vec<u8>>>,
}

impl Distinct {
    /// The info of frame `f` (a frame pushed without info has none).
    pub fn info(&self, f: u32) -> FrameInfo {
        self.info
            .get(f as usize)
            .copied()
            .unwrap_or(FrameInfo::PLAIN)
    }

    /// Keeps `info` beside an arena of `arena_len` frames, about to get one more.
    pub fn push(&mut self, arena_len: usize, info: FrameInfo) {
        self.info.truncate(arena_len);
        self.info.resize(arena_len, FrameInfo::PLAIN);
        self.info.push(info);
    }

    fn canonical_of(&mut self, start: u32, end: u32) -> Option<Vec<u8>> {
        let bytes = self.text.get(start as usize..end as usize)?;
        if (end as usize) > self.committed {
            return canonical(bytes);
        }
        self.canon
            .entry((start, end))
            .or_insert_with(|| canonical(bytes))
            .clone()
    }

    /// True unless the item `text[start..end]` followed by `extra` equals an item recorded on
    /// `array` or the frames before it.
    pub fn differs(&mut self, mut array: u32, start: u32, end: u32, extra: &[&[u8]]) -> bool {
        let item = {
            let Some(bytes) = self.text.get(start as usize..end as usize) else {
                return true;
            };
            match extra.iter().all(|e| e.is_empty()) {
                true => canonical(bytes),
                false => canonical(&[&[bytes], extra].concat().concat()),
            }
        };
        let Some(item) = item else {
            return true;
        };
        while array != NONE {
            let info = self.info(array);
            if info.last.0 == NONE {
                break;
            }
            if self.canonical_of(info.last.0, info.last.1).as_ref() == Some(&item) {
                return false;
            }
            array = info.prev;
        }
        true
    }

    /// Forgets canonical forms of text past `len` (after a rollback).
    pub fn truncate(&mut self, len: usize) {
        self.text.truncate(len);
        self.committed = len;
        self.canon.retain(|&(_, end), _| end as usize <= len);
    }
}

/// The matcher's side of distinct items: frames pushed with their info, items checked where
/// they end.
impl Stepper<'_> {
    /// Pushes a stack frame (with its distinct-items info) and returns its index.
    pub(crate) fn push_frame(&mut self, frame: (u32, u32), info: FrameInfo) -> u32 {
        if let Some(d) = self.distinct.as_deref_mut() {
            d.push(self.arena.len(), info);
        }
        self.arena.push(frame);
        self.arena.len() as u32 - 1
    }

    /// Where the item of frame `f` starts, if `f` is the frame of a distinct item.
    pub(crate) fn item_start(&self, f: u32) -> Option<u32> {
        let d = self.distinct.as_deref()?;
        let start = d.info(f).item_start;
        (f != NONE && start != crate::distinct::NONE).then_some(start)
    }

    /// Offset in the text of the byte being stepped.
    pub(crate) fn pos(&self) -> u32 {
        self.distinct.as_deref().map_or(0, |d| d.text.len() as u32)
    }

    /// False if byte `b` into state `t` under frame `parent` completes an item equal to an
    /// earlier item of its array: `t` can only end the item's rule, or only by forced bytes
    /// (whitespace aside; see [`crate::dfa::LazyDfa::forced_end`]).
    pub(crate) fn completes_distinct(
        &mut self,
        parent: u32,
        t: u32,
        b: u8,
    ) -> Result<bool, MaskError> {
        let Some(start) = self.item_start(parent) else {
            return Ok(true);
        };
        let Some(rest) = self.dfa.forced_end(t)? else {
            return Ok(true);
        };
        let (pos, array) = (self.pos(), self.arena[parent as usize].1);
        let d = self
            .distinct
            .as_deref_mut()
            .expect("an item frame has distinct state");
        Ok(d.differs(array, start, pos, &[&[b], &rest]))
    }

    /// False if the item of frame `item` ends here and equals an earlier item of its array;
    /// otherwise the frame to return into: the array's frame, copied with the item recorded.
    pub(crate) fn end_item(&mut self, item: u32, up: (u32, u32)) -> Option<(u32, u32)> {
        let Some(start) = self.item_start(item) else {
            return Some(up);
        };
        let (pos, array) = (self.pos(), up.1);
        if array == NONE {
            return Some(up);
        }
        let d = self
            .distinct
            .as_deref_mut()
            .expect("an item frame has distinct state");
        if !d.differs(array, start, pos, &[]) {
            return None;
        }
        let info = FrameInfo {
            item_start: d.info(array).item_start,
            last: (start, pos),
            prev: array,
        };
        let copy = self.arena[array as usize];
        Some((up.0, self.push_frame(copy, info)))
    }
}

/// The tokens of `local` (parse `c`'s local mask) that end where the rule can only end (but
/// for forced bytes), completing a distinct item equal to an earlier one of its array: the
/// local walk took them by bytes alone, unchecked.
pub(crate) fn repeated_items(
    d: &mut Distinct,
    arena: &[(u32, u32)],
    c: Config,
    local: &crate::constraint::LocalMask,
    trie: &crate::TokenTrie,
) -> Vec<u32> {
    let start = d.info(c.1).item_start;
    if c.1 == NONE || start == crate::distinct::NONE || local.ends.is_empty() {
        return Vec::new();
    }
    let array = arena[c.1 as usize].1;
    if d.info(array).last.0 == crate::distinct::NONE {
        return Vec::new();
    }
    let t = &trie.tries[local.trie];
    let base = d.text.len();
    let mut out = Vec::new();
    for (node, rest) in &local.ends {
        d.text
            .extend_from_slice(t.path(*node as usize, |x| trie.token_bytes(x)));
        let end = d.text.len() as u32;
        if !d.differs(array, start, end, &[rest]) {
            out.extend_from_slice(t.node_tokens(*node as usize));
        }
        d.text.truncate(base);
    }
    out
}

/// A JSON value's canonical bytes: two values are equal as JSON exactly when these are equal.
/// `None` if `text` is not one JSON value.
pub(crate) fn canonical(text: &[u8]) -> Option<Vec<u8>> {
    let mut p = Parser { s: text, i: 0 };
    let mut out = Vec::with_capacity(text.len());
    p.ws();
    p.value(&mut out, 0)?;
    p.ws();
    (p.i == text.len()).then_some(out)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

/// Deeper nesting than this is not compared (the item is taken as different).
const MAX_DEPTH: u32 = 256;

impl Parser<'_> {
    fn ws(&mut self) {
        while self
            .s
            .get(self.i)
            .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.s.get(self.i) == Some(&b) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn value(&mut self, out: &mut Vec<u8>, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match *self.s.get(self.i)? {
            b'{' => {
                self.i += 1;
                let mut members: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
                self.ws();
                if !self.eat(b'}') {
                    loop {
                        self.ws();
                        let mut key = Vec::new();
                        self.string(&mut key)?;
                        self.ws();
                        self.eat(b':').then_some(())?;
                        self.ws();
                        let mut v = Vec::new();
                        self.value(&mut v, depth + 1)?;
                        members.push((key, v));
                        self.ws();
                        if self.eat(b'}') {
                            break;
                        }
                        self.eat(b',').then_some(())?;
                    }
                }
                members.sort();
                out.push(b'{');
                for (k, v) in members {
                    out.extend(k);
                    out.push(b':');
                    out.extend(v);
                    out.push(b',');
                }
                out.push(b'}');
            }
            b'[' => {
                self.i += 1;
                out.push(b'[');
                self.ws();
                if !self.eat(b']') {
                    loop {
                        self.ws();
                        self.value(out, depth + 1)?;
                        out.push(b',');
                        self.ws();
                        if self.eat(b']') {
                            break;
                        }
                        self.eat(b',').then_some(())?;
                    }
                }
                out.push(b']');
            }
            b'"' => self.string(out)?,
            b't' | b'f' | b'n' => {
                let word: &[u8] = match self.s[self.i] {
                    b't' => b"true",
                    b'f' => b"false",
                    _ => b"null",
                };
                self.s.get(self.i..)?.starts_with(word).then_some(())?;
                self.i += word.len();
                out.extend_from_slice(word);
            }
            _ => self.number(out)?,
        }
        Some(())
    }

    /// A string as `"` + its decoded UTF-8 bytes (quotes and backslashes escaped) + `"`.
    fn string(&mut self, out: &mut Vec<u8>) -> Option<()> {
        self.eat(b'"').then_some(())?;
        out.push(b'"');
        loop {
            let b = *self.s.get(self.i)?;
            self.i += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    let e = *self.s.get(self.i)?;
                    self.i += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4()?;
                            if (0xD800..0xDC00).contains(&hi) {
                                // A surrogate pair: the low half must follow.
                                (self.eat(b'\\') && self.eat(b'u')).then_some(())?;
                                let lo = self.hex4()?;
                                (0xDC00..0xE000).contains(&lo).then_some(())?;
                                char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))?
                            } else {
                                char::from_u32(hi)?
                            }
                        }
                        _ => return None,
                    };
                    push_char(out, c);
                }
                b => {
                    if b == b'"' || b == b'\\' {
                        out.push(b'\\');
                    }
                    out.push(b);
                }
            }
        }
        out.push(b'"');
        Some(())
    }

    fn hex4(&mut self) -> Option<u32> {
        let h = std::str::from_utf8(self.s.get(self.i..self.i + 4)?).ok()?;
        self.i += 4;
        u32::from_str_radix(h, 16).ok()
    }

    /// A number as `-`? digits `e` exponent, digits without leading or trailing zeros (zero
    /// is `0`), so equal values have equal forms.
    fn number(&mut self, out: &mut Vec<u8>) -> Option<()> {
        let negative = self.eat(b'-');
        let mut digits = Vec::new();
        let mut exp: i64 = 0;
        let int_start = self.i;
        while self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
            digits.push(self.s[self.i]);
            self.i += 1;
        }
        (self.i > int_start).then_some(())?;
        if self.eat(b'.') {
            let frac_start = self.i;
            while self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
                digits.push(self.s[self.i]);
                exp -= 1;
                self.i += 1;
            }
            (self.i > frac_start).then_some(())?;
        }
        if self.eat(b'e') || self.eat(b'E') {
            let minus = self.eat(b'-');
            if !minus {
                self.eat(b'+');
            }
            let e_start = self.i;
            let mut e: i64 = 0;
            while self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
                e = e
                    .saturating_mul(10)
                    .saturating_add((self.s[self.i] - b'0') as i64);
                self.i += 1;
            }
            (self.i > e_start).then_some(())?;
            exp = exp.saturating_add(if minus { -e } else { e });
        }
        let lead = digits.iter().take_while(|&&d| d == b'0').count();
        digits.drain(..lead);
        while digits.last() == Some(&b'0') {
            digits.pop();
            exp += 1;
        }
        if digits.is_empty() {
            out.push(b'0');
            return Some(());
        }
        if negative {
            out.push(b'-');
        }
        out.extend(digits);
        out.extend(format!("e{exp}").bytes());
        Some(())
    }
}

fn push_char(out: &mut Vec<u8>, c: char) {
    if c == '"' || c == '\\' {
        out.push(b'\\');
    }
    let mut buf = [0; 4];
    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::canonical;

    #[test]
    fn equal_json_values_have_equal_canonical_forms() {
        let same = [
            ("1", "1.0"),
            ("1", "1e0"),
            ("100", "1E2"),
            ("0.5", "5e-1"),
            ("-0", "0"),
            ("0.0", "-0e5"),
            ("\"A\"", "\"\\u0041\""),
            ("\"\\ud83d\\ude00\"", "\"😀\""),
            ("\"a/b\"", "\"a\\/b\""),
            (
                r#"{"a": 1, "b": [true, null]}"#,
                r#"{"b":[true,null],"a":1.00}"#,
            ),
            ("[ 1 , 2 ]", "[1,2]"),
        ];
        for (a, b) in same {
            assert_eq!(canonical(a.as_bytes()), canonical(b.as_bytes()), "{a} {b}");
            assert!(canonical(a.as_bytes()).is_some(), "{a}");
        }
        let different = [
            ("1", "2"),
            ("1", "10"),
            ("10", "1e2"),
            ("-1", "1"),
            ("\"a\"", "\"A\""),
            ("[1,2]", "[2,1]"),
            (r#"{"a":1}"#, r#"{"a":1,"b":1}"#),
            ("\"1\"", "1"),
            ("true", "\"true\""),
            ("12345678901234567890", "12345678901234567891"),
            ("\"a\\\"\"", "\"a\\\\\""),
        ];
        for (a, b) in different {
            assert_ne!(canonical(a.as_bytes()), canonical(b.as_bytes()), "{a} {b}");
        }
        for bad in ["", "[1,", "\"a", "01x", "tru", "{\"a\"}", "1 2"] {
            assert_eq!(canonical(bad.as_bytes()), None, "{bad}");
        }
    }
}
