//! JSON building blocks: whitespace, strings (canonical escaping), numbers, literals, any value.

use crate::expr::{ByteDfa, ByteDfaState, CharRanges, Expr, Grammar, Rule, RuleId};
use crate::GrammarError;
use serde_json::Value;
use std::collections::HashMap;

/// Whitespace allowed between JSON tokens.
#[derive(Debug, Clone, PartialEq)]
pub enum Whitespace {
    /// No whitespace at all: `{"a":1}`.
    Compact,
    /// Up to `max` consecutive whitespace characters (space, tab, CR, LF) between tokens: enough
    /// for pretty-printing, bounded so a small model cannot loop on blanks.
    Flexible { max: u32 },
    /// A custom regex for the whitespace between tokens (vLLM's `whitespace_pattern`).
    Pattern(String),
}

impl Default for Whitespace {
    fn default() -> Self {
        Whitespace::Flexible { max: 20 }
    }
}

/// Longest digit runs accepted in numbers: long enough for every `f64`/`u64` as serde_json and
/// JavaScript print them, short enough that a model cannot emit digits forever.
pub const MAX_INT_DIGITS: u32 = 20;
pub const MAX_FRACTION_DIGITS: u32 = 20;
pub const MAX_EXPONENT_DIGITS: u32 = 3;

/// JSON syntax pieces under one whitespace policy.
#[derive(Debug, Clone)]
pub struct Json {
    ws: Expr,
    number: Expr,
    integer: [Expr; 2],
}

fn digits(min: u32, max: u32) -> Expr {
    Expr::repeat(Expr::Bytes(vec![(b'0', b'9')]), min, Some(max))
}

/// Characters written raw inside a JSON string: everything but `"`, `\` and C0 controls.
pub fn plain_chars() -> CharRanges {
    CharRanges::new(vec![
        ('\u{20}', '\u{21}'),
        ('\u{23}', '\u{5B}'),
        ('\u{5D}', char::MAX),
    ])
}

/// The escape serde_json (and JavaScript) writes for a character that cannot appear raw.
pub fn canonical_escape(c: char) -> Option<String> {
    Some(match c {
        '"' => "\\\"".into(),
        '\\' => "\\\\".into(),
        '\u{8}' => "\\b".into(),
        '\u{c}' => "\\f".into(),
        '\n' => "\\n".into(),
        '\r' => "\\r".into(),
        '\t' => "\\t".into(),
        c if (c as u32) < 0x20 => format!("\\u{:04x}", c as u32),
        _ => return None,
    })
}

/// One character of `set`, as it appears inside a JSON string (raw, or its canonical escape).
pub fn string_chars_of(set: &CharRanges) -> Expr {
    let raw = set.intersect(&plain_chars());
    let special = set.subtract(&plain_chars());
    let mut alts = vec![Expr::chars(raw)];
    for &(a, b) in special.ranges() {
        for c in a..=b {
            if let Some(e) = canonical_escape(c) {
                alts.push(Expr::literal(e));
            }
        }
    }
    Expr::alt(alts)
}

/// Four hex digits that are not a UTF-16 surrogate (`D800`-`DFFF`).
fn hex4_non_surrogate() -> Expr {
    let hex = Expr::Bytes(vec![(b'0', b'9'), (b'a', b'f'), (b'A', b'F')]);
    Expr::alt([
        Expr::concat([
            Expr::Bytes(vec![
                (b'0', b'9'),
                (b'a', b'c'),
                (b'A', b'C'),
                (b'e', b'f'),
                (b'E', b'F'),
            ]),
            hex.clone(),
            hex.clone(),
            hex.clone(),
        ]),
        Expr::concat([
            Expr::Bytes(vec![(b'd', b'd'), (b'D', b'D')]),
            Expr::Bytes(vec![(b'0', b'7')]),
            hex.clone(),
            hex,
        ]),
    ])
}

/// One escape sequence inside a JSON string (`\"`, `\n`, `\u00e9`, ...), lone surrogates
/// excluded, so each one stands for exactly one character.
fn escape_unit() -> Expr {
    ESCAPE_UNIT.clone()
}

/// Built once and shared: every string in every schema uses the same subexpression, so the
/// automaton builds it once.
static ESCAPE_UNIT: std::sync::LazyLock<Expr> = std::sync::LazyLock::new(|| {
    Expr::shared(Expr::concat([
        Expr::literal("\\"),
        Expr::alt([
            Expr::Bytes(vec![
                (b'"', b'"'),
                (b'\\', b'\\'),
                (b'/', b'/'),
                (b'b', b'b'),
                (b'f', b'f'),
                (b'n', b'n'),
                (b'r', b'r'),
                (b't', b't'),
            ]),
            Expr::concat([Expr::literal("u"), hex4_non_surrogate()]),
        ]),
    ]))
});

/// Any character inside a JSON string: raw, or any escape JSON allows.
pub fn any_string_char() -> Expr {
    ANY_STRING_CHAR.clone()
}

static ANY_STRING_CHAR: std::sync::LazyLock<Expr> = std::sync::LazyLock::new(|| {
    Expr::shared(Expr::alt([Expr::chars(plain_chars()), escape_unit()]))
});

impl Json {
    pub fn new(ws: &Whitespace) -> Result<Self, GrammarError> {
        let ws = match ws {
            Whitespace::Compact => Expr::Empty,
            Whitespace::Flexible { max } => Expr::shared(Expr::repeat(
                Expr::Bytes(vec![(b' ', b' '), (b'\t', b'\n'), (b'\r', b'\r')]),
                0,
                Some(*max),
            )),
            Whitespace::Pattern(p) => {
                let e = crate::regex::regex_to_expr(p)
                    .map_err(|e| GrammarError::InvalidWhitespace(e.to_string()))?;
                Expr::shared(e)
            }
        };
        let integer = |dot_zero: bool| {
            let suffix = if dot_zero {
                Expr::opt(Expr::literal(".0"))
            } else {
                Expr::Empty
            };
            Expr::shared(Expr::concat([
                Expr::opt(Expr::literal("-")),
                unsigned_int(),
                suffix,
            ]))
        };
        let number = Expr::shared(Expr::concat([
            Expr::opt(Expr::literal("-")),
            unsigned_int(),
            Expr::opt(Expr::concat([
                Expr::literal("."),
                digits(1, MAX_FRACTION_DIGITS),
            ])),
            Expr::opt(exponent()),
        ]));
        Ok(Self {
            ws,
            number,
            integer: [integer(false), integer(true)],
        })
    }

    /// Whitespace between two tokens.
    pub fn ws(&self) -> Expr {
        self.ws.clone()
    }

    /// `"` content `"`.
    pub fn quoted(&self, content: Expr) -> Expr {
        Expr::concat([Expr::literal("\""), content, Expr::literal("\"")])
    }

    pub fn any_string(&self) -> Expr {
        self.quoted(Expr::star(any_string_char()))
    }

    /// Numbers: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?` with bounded digit runs.
    pub fn number(&self) -> Expr {
        self.number.clone()
    }

    /// Integers, including (if `dot_zero`) the `N.0` form a float with zero fraction is printed
    /// in, which JSON Schema since draft 6 counts as an integer.
    pub fn integer(&self, dot_zero: bool) -> Expr {
        self.integer[dot_zero as usize].clone()
    }

    /// The canonical serialization of a JSON value (compact, keys in the value's order; `ws`
    /// allowed between tokens).
    pub fn literal_value(&self, v: &Value) -> Expr {
        match v {
            Value::Null | Value::Bool(_) => Expr::literal(v.to_string()),
            Value::Number(n) => number_literal(n),
            Value::String(s) => Expr::literal(serde_json::to_string(s).unwrap_or_default()),
            Value::Array(items) => {
                let mut parts = vec![Expr::literal("["), self.ws()];
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        parts.extend([self.ws(), Expr::literal(","), self.ws()]);
                    }
                    parts.push(self.literal_value(item));
                }
                parts.extend([self.ws(), Expr::literal("]")]);
                Expr::concat(parts)
            }
            Value::Object(map) if map.len() > 1 && map.len() <= 4 => {
                // Small objects: every key order (JSON objects are unordered).
                let entries: Vec<(&String, &Value)> = map.iter().collect();
                let mut alts = Vec::new();
                permutations(entries.len(), &mut |order| {
                    let m: serde_json::Map<String, Value> = order
                        .iter()
                        .map(|&i| (entries[i].0.clone(), entries[i].1.clone()))
                        .collect();
                    alts.push(self.object_literal(&m));
                });
                Expr::alt(alts)
            }
            Value::Object(map) => self.object_literal(map),
        }
    }

    fn object_literal(&self, map: &serde_json::Map<String, Value>) -> Expr {
        {
            {
                let mut parts = vec![Expr::literal("{"), self.ws()];
                for (i, (k, item)) in map.iter().enumerate() {
                    if i > 0 {
                        parts.extend([self.ws(), Expr::literal(","), self.ws()]);
                    }
                    parts.push(Expr::literal(serde_json::to_string(k).unwrap_or_default()));
                    parts.extend([self.ws(), Expr::literal(":"), self.ws()]);
                    parts.push(self.literal_value(item));
                }
                parts.extend([self.ws(), Expr::literal("}")]);
                Expr::concat(parts)
            }
        }
    }

    /// `[` items `]` with `ws` placed around separators.
    pub fn array_of(&self, first_and_rest: Expr) -> Expr {
        Expr::concat([
            Expr::literal("["),
            self.ws(),
            first_and_rest,
            self.ws(),
            Expr::literal("]"),
        ])
    }

    /// The body of an "any JSON value" rule that calls `value` for nested values.
    pub fn any_value_body(&self, value: RuleId) -> Expr {
        Expr::alt([
            self.any_object_body(value),
            self.any_array_body(value),
            self.any_string(),
            self.number(),
            Expr::literal("true"),
            Expr::literal("false"),
            Expr::literal("null"),
        ])
    }

    pub fn any_array_body(&self, value: RuleId) -> Expr {
        self.array_of_values(Expr::Call(value))
    }

    /// Arrays whose items are `value`.
    pub fn array_of_values(&self, value: Expr) -> Expr {
        let sep = Expr::concat([self.ws(), Expr::literal(","), self.ws()]);
        self.array_of(Expr::opt(Expr::concat([
            value.clone(),
            Expr::star(Expr::concat([sep, value])),
        ])))
    }

    pub fn any_object_body(&self, value: RuleId) -> Expr {
        self.object_of_values(Expr::Call(value))
    }

    /// Objects (any keys) whose member values are `value`.
    pub fn object_of_values(&self, value: Expr) -> Expr {
        let member = Expr::concat([
            self.any_string(),
            self.ws(),
            Expr::literal(":"),
            self.ws(),
            value,
        ]);
        let member = Expr::shared(member);
        let sep = Expr::concat([self.ws(), Expr::literal(","), self.ws()]);
        Expr::concat([
            Expr::literal("{"),
            self.ws(),
            Expr::opt(Expr::concat([
                member.clone(),
                Expr::star(Expr::concat([sep, member])),
            ])),
            self.ws(),
            Expr::literal("}"),
        ])
    }

    /// A grammar for any JSON value, or any JSON object.
    pub fn any_value_grammar(&self, object_only: bool) -> Grammar {
        let value = RuleId(1);
        let start = if object_only {
            self.any_object_body(value)
        } else {
            Expr::Call(value)
        };
        Grammar {
            rules: vec![
                Rule {
                    name: "start".into(),
                    expr: start,
                },
                Rule {
                    name: "value".into(),
                    expr: self.any_value_body(value),
                },
            ],
            start: RuleId(0),
            distinct: Vec::new(),
        }
    }
}

/// Calls `f` with every permutation of `0..n`.
fn permutations(n: usize, f: &mut dyn FnMut(&[usize])) {
    fn go(cur: &mut Vec<usize>, used: &mut Vec<bool>, n: usize, f: &mut dyn FnMut(&[usize])) {
        if cur.len() == n {
            f(cur);
            return;
        }
        for i in 0..n {
            if !used[i] {
                used[i] = true;
                cur.push(i);
                go(cur, used, n, f);
                cur.pop();
                used[i] = false;
            }
        }
    }
    go(&mut Vec::new(), &mut vec![false; n], n, f);
}

fn unsigned_int() -> Expr {
    Expr::alt([
        Expr::literal("0"),
        Expr::concat([
            Expr::Bytes(vec![(b'1', b'9')]),
            digits(0, MAX_INT_DIGITS - 1),
        ]),
    ])
}

fn exponent() -> Expr {
    Expr::concat([
        Expr::Bytes(vec![(b'e', b'e'), (b'E', b'E')]),
        Expr::opt(Expr::Bytes(vec![(b'+', b'+'), (b'-', b'-')])),
        digits(1, MAX_EXPONENT_DIGITS),
    ])
}

/// A number constant: its own text, plus the `N.0` spelling of an integral value and the
/// integer spelling of an integral float, so `1` and `1.0` both match `const: 1`.
pub fn number_literal(n: &serde_json::Number) -> Expr {
    let text = n.to_string();
    let mut alts = vec![Expr::literal(&text)];
    if let Some(int) = text.strip_suffix(".0") {
        alts.push(Expr::literal(int));
    } else if n.is_i64() || n.is_u64() {
        alts.push(Expr::literal(format!("{text}.0")));
    }
    if let Some(f) = n.as_f64() {
        if f == 0.0 {
            alts.extend(["0", "-0", "0.0", "-0.0"].map(Expr::literal));
        }
    }
    Expr::alt(alts)
}

/// The content of any JSON string except the given names (written canonically), as a plain
/// expression: a trie of the names where every other continuation escapes to "anything".
/// `None` when a name contains a character that needs escaping (the caller intersects then).
pub fn key_except(names: &[String]) -> Option<Expr> {
    if names
        .iter()
        .any(|n| n.chars().any(|c| canonical_escape(c).is_some()))
    {
        return None;
    }
    if names.iter().all(|n| n.is_ascii()) {
        return Some(Expr::Dfa(std::sync::Arc::new(key_except_dfa(names))));
    }
    let mut root = KeyTrie::default();
    for n in names {
        let mut cur = &mut root;
        for c in n.chars() {
            cur = cur.children.entry(c).or_default();
        }
        cur.terminal = true;
    }
    let ascii = CharRanges::new(vec![('\0', '\u{7f}')]);
    let parts = KeyParts {
        any_tail: Expr::shared(Expr::star(any_string_char())),
        escapes: Expr::shared(escape_unit()),
        // Shared, so each trie node adds only its own ASCII ranges to the automaton.
        non_ascii: Expr::shared(Expr::chars(plain_chars().subtract(&ascii))),
        plain_non_ascii: plain_chars().subtract(&ascii),
        escape_after: Default::default(),
    };
    Some(parts.build(&root))
}

/// [`key_except`] for ASCII names, as an explicit DFA: a state per trie node of the names,
/// where any other character leads to a shared "any JSON string content" tail. Cheap to
/// build for objects with hundreds of declared properties, and expanded by the automaton
/// only when a key is written.
fn key_except_dfa(names: &[String]) -> ByteDfa {
    // Trie of the names: children by byte, and whether a name ends there.
    let mut kids: Vec<Vec<(u8, u32)>> = vec![Vec::new()];
    let mut terminal = vec![false];
    for n in names {
        let mut cur = 0usize;
        for &b in n.as_bytes() {
            cur = match kids[cur].iter().find(|(x, _)| *x == b) {
                Some(&(_, t)) => t as usize,
                None => {
                    kids.push(Vec::new());
                    terminal.push(false);
                    let t = kids.len() - 1;
                    kids[cur].push((b, t as u32));
                    t
                }
            };
        }
        terminal[cur] = true;
    }
    let t = kids.len() as u32;
    // The tail: any JSON string content (raw characters, escapes without lone surrogates).
    let (any, esc, u0, u1, u1d, u2, u3) = (t, t + 1, t + 2, t + 3, t + 4, t + 5, t + 6);
    let (c1, c2, c3, e0, ed, f0, f4) = (t + 7, t + 8, t + 9, t + 10, t + 11, t + 12, t + 13);
    let hex = |to: u32| vec![(b'0', b'9', to), (b'A', b'F', to), (b'a', b'f', to)];
    // The start of one more character: plain ASCII to `any` except the `children` bytes
    // (sorted, to their own states), `\\` to an escape, UTF-8 leads to the tail.
    let char_start = |children: &[(u8, u32)]| -> Vec<(u8, u8, u32)> {
        let mut tr: Vec<(u8, u8, u32)> = Vec::with_capacity(12 + 2 * children.len());
        let push_plain = |lo: u8, hi: u8, tr: &mut Vec<(u8, u8, u32)>| {
            // `lo..=hi` to `any`, minus children.
            let mut from = lo as u32;
            for &(b, to) in children.iter().filter(|(b, _)| (lo..=hi).contains(b)) {
                if (b as u32) > from {
                    tr.push((from as u8, b - 1, any));
                }
                tr.push((b, b, to));
                from = b as u32 + 1;
            }
            if from <= hi as u32 {
                tr.push((from as u8, hi, any));
            }
        };
        push_plain(0x20, 0x21, &mut tr);
        push_plain(0x23, 0x5B, &mut tr);
        tr.push((b'\\', b'\\', esc));
        push_plain(0x5D, 0x7F, &mut tr);
        tr.extend([
            (0xC2, 0xDF, c1),
            (0xE0, 0xE0, e0),
            (0xE1, 0xEC, c2),
            (0xED, 0xED, ed),
            (0xEE, 0xEF, c2),
            (0xF0, 0xF0, f0),
            (0xF1, 0xF3, c3),
            (0xF4, 0xF4, f4),
        ]);
        tr
    };
    let mut states = Vec::with_capacity(t as usize + 14);
    for (i, children) in kids.iter_mut().enumerate() {
        children.sort_unstable();
        states.push(ByteDfaState {
            transitions: char_start(children),
            accepting: !terminal[i],
        });
    }
    let st = |transitions: Vec<(u8, u8, u32)>, accepting: bool| ByteDfaState {
        transitions,
        accepting,
    };
    let mut esc_tr: Vec<(u8, u8, u32)> = b"\"/\\bfnrt".iter().map(|&b| (b, b, any)).collect();
    esc_tr.push((b'u', b'u', u0));
    esc_tr.sort_unstable();
    let mut u0_tr = vec![
        (b'0', b'9', u1),
        (b'A', b'C', u1),
        (b'D', b'D', u1d),
        (b'E', b'F', u1),
    ];
    u0_tr.extend([(b'a', b'c', u1), (b'd', b'd', u1d), (b'e', b'f', u1)]);
    states.extend([
        st(char_start(&[]), true),
        st(esc_tr, false),
        st(u0_tr, false),
        st(hex(u2), false),
        st(vec![(b'0', b'7', u2)], false),
        st(hex(u3), false),
        st(hex(any), false),
        st(vec![(0x80, 0xBF, any)], false),
        st(vec![(0x80, 0xBF, c1)], false),
        st(vec![(0x80, 0xBF, c2)], false),
        st(vec![(0xA0, 0xBF, c1)], false),
        st(vec![(0x80, 0x9F, c1)], false),
        st(vec![(0x90, 0xBF, c2)], false),
        st(vec![(0x80, 0x8F, c2)], false),
    ]);
    ByteDfa { states }
}

#[derive(Default)]
struct KeyTrie {
    terminal: bool,
    children: std::collections::BTreeMap<char, KeyTrie>,
}

struct KeyParts {
    any_tail: Expr,
    escapes: Expr,
    non_ascii: Expr,
    plain_non_ascii: CharRanges,
    /// "A character that continues no name here, then anything", by the characters that do
    /// continue a name (most trie nodes have one child, so a few dozen of these serve all).
    escape_after: std::cell::RefCell<HashMap<Vec<char>, Expr>>,
}

impl KeyParts {
    fn escape_after(&self, kids: Vec<char>) -> Expr {
        if let Some(e) = self.escape_after.borrow().get(&kids) {
            return e.clone();
        }
        // Plain ASCII characters that do not continue a name, as byte ranges.
        let mut plain = [false; 128];
        for (c, p) in plain.iter_mut().enumerate().skip(0x20) {
            *p = c != b'"' as usize && c != b'\\' as usize;
        }
        let mut non_ascii_kids = Vec::new();
        for &c in &kids {
            if c.is_ascii() {
                plain[c as usize] = false;
            } else {
                non_ascii_kids.push((c, c));
            }
        }
        let mut ascii_ranges: Vec<(u8, u8)> = Vec::new();
        for b in 0..128u8 {
            if plain[b as usize] {
                match ascii_ranges.last_mut() {
                    Some((_, hi)) if *hi + 1 == b => *hi = b,
                    _ => ascii_ranges.push((b, b)),
                }
            }
        }
        let other_non_ascii = if non_ascii_kids.is_empty() {
            self.non_ascii.clone()
        } else {
            Expr::chars(
                self.plain_non_ascii
                    .subtract(&CharRanges::new(non_ascii_kids)),
            )
        };
        let other = Expr::alt([
            Expr::Bytes(ascii_ranges),
            other_non_ascii,
            self.escapes.clone(),
        ]);
        let e = Expr::shared(Expr::concat([other, self.any_tail.clone()]));
        self.escape_after.borrow_mut().insert(kids, e.clone());
        e
    }

    fn build(&self, n: &KeyTrie) -> Expr {
        let mut alts = vec![self.escape_after(n.children.keys().copied().collect())];
        if !n.terminal {
            alts.push(Expr::Empty);
        }
        for (&c, child) in &n.children {
            let mut buf = [0u8; 4];
            alts.push(Expr::concat([
                Expr::literal(c.encode_utf8(&mut buf).as_bytes()),
                self.build(child),
            ]));
        }
        Expr::alt(alts)
    }
}
