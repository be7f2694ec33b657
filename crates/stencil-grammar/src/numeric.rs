//! Numbers under bounds and `multipleOf`, as exact regular languages over their JSON text.
//!
//! Bounded numbers are written without exponent; each bound becomes its own expression and two
//! bounds are intersected (`Expr::And`), which keeps every construction one-sided and simple.

use crate::expr::{ByteDfa, ByteDfaState, Expr};
use crate::json::{MAX_FRACTION_DIGITS, MAX_INT_DIGITS};
use std::sync::Arc;

/// A decimal number as digit strings: `int` has no leading zeros ("0" for zero), `frac` no
/// trailing zeros. Zero is never negative.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decimal {
    pub neg: bool,
    pub int: String,
    pub frac: String,
}

impl Decimal {
    /// Parses JSON number text (with optional exponent) exactly.
    pub fn parse(text: &str) -> Option<Self> {
        let (neg, rest) = match text.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, text),
        };
        let (mant, exp) = match rest.find(['e', 'E']) {
            Some(i) => (&rest[..i], rest[i + 1..].parse::<i64>().ok()?),
            None => (rest, 0),
        };
        let (ip, fp) = mant.split_once('.').unwrap_or((mant, ""));
        if ip.is_empty() || !ip.bytes().chain(fp.bytes()).all(|b| b.is_ascii_digit()) {
            return None;
        }
        if exp.abs() > 400 {
            return None;
        }
        let digits = format!("{ip}{fp}");
        let point = ip.len() as i64 + exp; // position of the decimal point in `digits`
        let (int, frac) = if point <= 0 {
            (
                String::new(),
                format!("{}{}", "0".repeat((-point) as usize), digits),
            )
        } else if point as usize >= digits.len() {
            (
                format!("{}{}", digits, "0".repeat(point as usize - digits.len())),
                String::new(),
            )
        } else {
            (
                digits[..point as usize].to_string(),
                digits[point as usize..].to_string(),
            )
        };
        let int = int.trim_start_matches('0');
        let frac = frac.trim_end_matches('0');
        let int = if int.is_empty() { "0" } else { int };
        let zero = int == "0" && frac.is_empty();
        Some(Self {
            neg: neg && !zero,
            int: int.to_string(),
            frac: frac.to_string(),
        })
    }

    pub fn is_zero(&self) -> bool {
        self.int == "0" && self.frac.is_empty()
    }

    pub fn negate(&self) -> Self {
        Self {
            neg: !self.neg && !self.is_zero(),
            ..self.clone()
        }
    }

    pub fn is_integer(&self) -> bool {
        self.frac.is_empty()
    }

    fn int_u128(&self) -> Option<u128> {
        self.int.parse().ok()
    }

    /// The smallest integer >= self (or > self when `strict`).
    pub fn ceil_int(&self, strict: bool) -> Option<i128> {
        let i = self.int_u128()? as i128;
        let v = if self.neg { -i } else { i };
        Some(if self.is_integer() {
            v + strict as i128
        } else if self.neg {
            v
        } else {
            v + 1
        })
    }

    /// The largest integer <= self (or < self when `strict`).
    pub fn floor_int(&self, strict: bool) -> Option<i128> {
        let i = self.int_u128()? as i128;
        let v = if self.neg { -i } else { i };
        Some(if self.is_integer() {
            v - strict as i128
        } else if self.neg {
            v - 1
        } else {
            v
        })
    }

    /// Compares two decimals by value.
    pub fn cmp_value(&self, other: &Self) -> std::cmp::Ordering {
        use std::cmp::Ordering::*;
        match (self.neg, other.neg) {
            (false, true) => return Greater,
            (true, false) => return Less,
            _ => {}
        }
        let mag = self
            .int
            .len()
            .cmp(&other.int.len())
            .then_with(|| self.int.cmp(&other.int))
            .then_with(|| self.frac.cmp(&other.frac));
        if self.neg {
            mag.reverse()
        } else {
            mag
        }
    }
}

/// A bound: value and whether it is exclusive.
pub type Bound = (Decimal, bool);

fn digit_range(lo: u8, hi: u8) -> Expr {
    if lo > hi {
        Expr::Nothing
    } else {
        Expr::Bytes(vec![(lo, hi)])
    }
}

fn any_digits(min: u32, max: u32) -> Expr {
    Expr::repeat(digit_range(b'0', b'9'), min, Some(max.max(min)))
}

/// Same-length digit strings >= `s` (leading zeros allowed: used after the first digit).
fn same_len_ge(s: &[u8]) -> Expr {
    match s.split_first() {
        None => Expr::Empty,
        Some((&c, rest)) => Expr::alt([
            Expr::concat([
                digit_range(c + 1, b'9'),
                any_digits(rest.len() as u32, rest.len() as u32),
            ]),
            Expr::concat([Expr::literal([c]), same_len_ge(rest)]),
        ]),
    }
}

/// Same-length digit strings <= `s`, first digit at least `first_min`.
fn same_len_le(s: &[u8], first_min: u8) -> Expr {
    match s.split_first() {
        None => Expr::Empty,
        Some((&c, rest)) => {
            let n = rest.len() as u32;
            let below = if c > first_min {
                Expr::concat([digit_range(first_min, c - 1), any_digits(n, n)])
            } else {
                Expr::Nothing
            };
            Expr::alt([
                below,
                Expr::concat([Expr::literal([c]), same_len_le(rest, b'0')]),
            ])
        }
    }
}

trait OnlyIf {
    fn only_if(self, cond: bool) -> Self;
}

impl OnlyIf for Expr {
    fn only_if(self, cond: bool) -> Self {
        if cond {
            self
        } else {
            Expr::Nothing
        }
    }
}

/// Canonical non-negative integers >= `a`.
fn uint_ge(a: u128) -> Expr {
    let s = a.to_string();
    let n = s.len() as u32;
    if n > MAX_INT_DIGITS {
        return Expr::Nothing;
    }
    Expr::alt([
        same_len_ge(s.as_bytes()),
        Expr::concat([digit_range(b'1', b'9'), any_digits(n, MAX_INT_DIGITS - 1)])
            .only_if(n < MAX_INT_DIGITS),
    ])
}

/// Canonical non-negative integers <= `b`.
fn uint_le(b: u128) -> Expr {
    let s = b.to_string();
    let n = s.len() as u32;
    if n == 1 {
        return digit_range(b'0', s.as_bytes()[0]);
    }
    Expr::alt([
        Expr::literal("0"),
        Expr::concat([digit_range(b'1', b'9'), any_digits(0, n - 2)]),
        same_len_le(s.as_bytes(), b'1'),
    ])
}

/// Canonical non-negative integers in `[lo, hi]`.
fn uint_range(lo: u128, hi: Option<u128>) -> Expr {
    match hi {
        Some(h) if h < lo => Expr::Nothing,
        Some(h) if lo == 0 => uint_le(h),
        Some(h) => Expr::and(vec![uint_ge(lo), uint_le(h)]),
        None => uint_ge(lo),
    }
}

/// Integers (with optional `-`, and the `N.0` spelling if `dot_zero`) in `[lo, hi]`.
pub fn integer_range(lo: Option<i128>, hi: Option<i128>, dot_zero: bool) -> Expr {
    let mut alts = Vec::new();
    // Non-negative part.
    if hi.is_none_or(|h| h >= 0) {
        let l = lo.map_or(0, |l| l.max(0)) as u128;
        alts.push(uint_range(l, hi.map(|h| h as u128)));
    }
    // Negative part: -m with m in [max(1, -hi), -lo].
    if lo.is_none_or(|l| l < 0) {
        let mlo = hi.map_or(1, |h| (-h).max(1)) as u128;
        let mhi = lo.map(|l| (-l) as u128);
        alts.push(Expr::concat([Expr::literal("-"), uint_range(mlo, mhi)]));
    }
    // `-0` is zero too.
    if lo.is_none_or(|l| l <= 0) && hi.is_none_or(|h| h >= 0) {
        alts.push(Expr::literal("-0"));
    }
    let suffix = if dot_zero {
        Expr::opt(Expr::literal(".0"))
    } else {
        Expr::Empty
    };
    Expr::concat([Expr::alt(alts), suffix])
}

/// Non-empty fraction digit strings `s` with `0.s >= 0.d` (or `>`).
fn frac_digits_ge(d: &[u8], strict: bool) -> Expr {
    let tail = any_digits(0, MAX_FRACTION_DIGITS);
    match d.split_first() {
        None if strict => Expr::concat([
            Expr::star(Expr::literal("0")),
            digit_range(b'1', b'9'),
            tail,
        ]),
        None => any_digits(1, MAX_FRACTION_DIGITS),
        Some((&c, rest)) => Expr::alt([
            Expr::concat([digit_range(c + 1, b'9'), tail]),
            Expr::concat([
                Expr::literal([c]),
                Expr::alt([
                    frac_digits_ge(rest, strict),
                    Expr::Empty.only_if(rest.is_empty() && !strict),
                ]),
            ]),
        ]),
    }
}

/// Non-empty fraction digit strings `s` with `0.s <= 0.d` (or `<`).
fn frac_digits_le(d: &[u8], strict: bool) -> Expr {
    let tail = any_digits(0, MAX_FRACTION_DIGITS);
    match d.split_first() {
        None if strict => Expr::Nothing,
        None => Expr::repeat(Expr::literal("0"), 1, Some(MAX_FRACTION_DIGITS)),
        Some((&c, rest)) => Expr::alt([
            Expr::concat([digit_range(b'0', c.saturating_sub(1)), tail]).only_if(c > b'0'),
            Expr::concat([
                Expr::literal([c]),
                Expr::alt([
                    frac_digits_le(rest, strict),
                    Expr::Empty.only_if(!strict || !rest.is_empty()),
                ]),
            ]),
        ]),
    }
}

fn any_fraction() -> Expr {
    Expr::opt(Expr::concat([
        Expr::literal("."),
        any_digits(1, MAX_FRACTION_DIGITS),
    ]))
}

/// Magnitudes (`int(.frac)?`, no sign) >= `a` (or >).
fn magnitude_ge(a: &Decimal, strict: bool) -> Option<Expr> {
    let ai = a.int.parse::<u128>().ok()?;
    let empty_ok = a.frac.is_empty() && !strict;
    Some(Expr::alt([
        Expr::concat([uint_ge(ai + 1), any_fraction()]),
        Expr::concat([
            Expr::literal(&a.int),
            Expr::alt([
                Expr::Empty.only_if(empty_ok),
                Expr::concat([
                    Expr::literal("."),
                    frac_digits_ge(a.frac.as_bytes(), strict),
                ]),
            ]),
        ]),
    ]))
}

/// Magnitudes <= `b` (or <).
fn magnitude_le(b: &Decimal, strict: bool) -> Option<Expr> {
    let bi = b.int.parse::<u128>().ok()?;
    let empty_ok = !strict || !b.frac.is_empty();
    Some(Expr::alt([
        Expr::concat([uint_le(bi.wrapping_sub(1)), any_fraction()]).only_if(bi > 0),
        Expr::concat([
            Expr::literal(&b.int),
            Expr::alt([
                Expr::Empty.only_if(empty_ok),
                Expr::concat([
                    Expr::literal("."),
                    frac_digits_le(b.frac.as_bytes(), strict),
                ]),
            ]),
        ]),
    ]))
}

fn zero() -> Decimal {
    Decimal {
        neg: false,
        int: "0".into(),
        frac: String::new(),
    }
}

/// Magnitudes in a range whose bounds are magnitudes (>= 0) or absent.
fn magnitude_range(lo: Option<Bound>, hi: Option<Bound>) -> Option<Expr> {
    let lower = match &lo {
        Some((d, s)) => magnitude_ge(d, *s)?,
        None => Expr::concat([uint_ge(0), any_fraction()]),
    };
    Some(match &hi {
        Some((d, s)) => Expr::and(vec![lower, magnitude_le(d, *s)?]),
        None => lower,
    })
}

/// Numbers (no exponent) in the range given by optional bounds. `None` if a bound is too large.
pub fn number_range(lo: Option<Bound>, hi: Option<Bound>) -> Option<Expr> {
    use std::cmp::Ordering::*;
    let z = zero();
    let mut alts = Vec::new();
    // Non-negative side: x = m, m in [max(lo, 0), hi].
    let hi_ok = hi.as_ref().is_none_or(|(h, s)| match h.cmp_value(&z) {
        Greater => true,
        Equal => !s,
        Less => false,
    });
    if hi_ok {
        let mlo = match &lo {
            Some((l, s)) if l.cmp_value(&z) != Less => Some((l.clone(), *s)),
            _ => None,
        };
        alts.push(magnitude_range(mlo, hi.clone())?);
    }
    // Negative side: x = -m, m in [-hi, -lo] intersected with m >= 0.
    let lo_ok = lo.as_ref().is_none_or(|(l, s)| match l.cmp_value(&z) {
        Less => true,
        Equal => !s,
        Greater => false,
    });
    if lo_ok {
        let mlo = match &hi {
            Some((h, s)) if h.cmp_value(&z) != Greater => Some((h.negate(), *s)),
            _ => None,
        };
        let mhi = lo.as_ref().map(|(l, s)| (l.negate(), *s));
        alts.push(Expr::concat([
            Expr::literal("-"),
            magnitude_range(mlo, mhi)?,
        ]));
    }
    Some(Expr::alt(alts))
}

/// Numbers `x` (no exponent, optional `-`) with `x / (m * 10^-p)` an integer: a DFA over the
/// remainder. `None` if the automaton would be too large.
pub fn multiple_of(step: &Decimal) -> Option<Expr> {
    let p = step.frac.len();
    let m: u64 = format!("{}{}", step.int, step.frac)
        .trim_start_matches('0')
        .parse()
        .ok()?;
    if m == 0 || m > 100_000 || p > 30 {
        return None;
    }
    let md = m as usize;
    // States: 0 start, 1 after '-', 2 "0" integer part (remainder 0),
    // int(r) = 3 + r, frac(j, r) = 3 + md * (1 + j) + r for j in 0..p (j digits read),
    // zeros (fraction beyond p digits, all zeros) = 3 + md * (1 + p).
    let int_state = |r: usize| (3 + r) as u32;
    let frac_state = |j: usize, r: usize| (3 + md * (1 + j) + r) as u32;
    let zeros = (3 + md * (1 + p)) as u32;
    let n = zeros as usize + 1;
    let pow10 = |k: usize| -> usize {
        let mut v = 1usize;
        for _ in 0..k {
            v = v * 10 % md;
        }
        v
    };
    let mut states = vec![ByteDfaState::default(); n];
    let accepts_at = |j: usize, r: usize| (r * pow10(p - j)).is_multiple_of(md);
    let digit_moves = |r: usize, j_next: &dyn Fn(usize) -> u32| -> Vec<(u8, u8, u32)> {
        (0..10u8)
            .map(|d| (b'0' + d, b'0' + d, j_next((r * 10 + d as usize) % md)))
            .collect()
    };
    for s in [0usize, 1] {
        if s == 0 {
            states[0].transitions.push((b'-', b'-', 1));
        }
        states[s].transitions.push((b'0', b'0', 2));
        for d in 1..10u8 {
            states[s]
                .transitions
                .push((b'0' + d, b'0' + d, int_state(d as usize % md)));
        }
    }
    let after_int = |r: usize| -> Vec<(u8, u8, u32)> {
        if p == 0 {
            vec![(b'.', b'.', zeros)]
        } else {
            vec![(b'.', b'.', frac_state(0, r))]
        }
    };
    states[2].accepting = true;
    states[2].transitions = after_int(0);
    for r in 0..md {
        let s = int_state(r) as usize;
        states[s].accepting = accepts_at(0, r);
        states[s].transitions = digit_moves(r, &|r2| int_state(r2));
        states[s].transitions.extend(after_int(r));
        for j in 0..p {
            let s = frac_state(j, r) as usize;
            // j = 0 means just after '.', which needs a digit.
            states[s].accepting = j > 0 && accepts_at(j, r);
            states[s].transitions = if j + 1 < p {
                digit_moves(r, &|r2| frac_state(j + 1, r2))
            } else {
                // The p-th fraction digit completes the scaled integer.
                (0..10u8)
                    .filter(|d| (r * 10 + *d as usize).is_multiple_of(md))
                    .map(|d| (b'0' + d, b'0' + d, zeros))
                    .collect()
            };
        }
    }
    states[zeros as usize].accepting = p > 0;
    states[zeros as usize].transitions = vec![(b'0', b'0', zeros)];
    if p == 0 {
        // "N." then zeros: at least one zero must follow the point.
        let dot_zero = n as u32;
        states.push(ByteDfaState {
            accepting: true,
            transitions: vec![(b'0', b'0', dot_zero)],
        });
        states[zeros as usize].accepting = false;
        states[zeros as usize].transitions = vec![(b'0', b'0', dot_zero)];
    }
    Some(Expr::Dfa(Arc::new(ByteDfa { states })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_parse_normalizes() {
        let d = Decimal::parse("1.50e1").unwrap();
        assert_eq!((d.neg, d.int.as_str(), d.frac.as_str()), (false, "15", ""));
        let d = Decimal::parse("-0.0").unwrap();
        assert!(d.is_zero() && !d.neg);
        let d = Decimal::parse("1e-3").unwrap();
        assert_eq!((d.int.as_str(), d.frac.as_str()), ("0", "001"));
        assert_eq!(Decimal::parse("-1.5").unwrap().ceil_int(false), Some(-1));
        assert_eq!(Decimal::parse("-1.5").unwrap().floor_int(false), Some(-2));
        assert_eq!(Decimal::parse("3").unwrap().ceil_int(true), Some(4));
    }
}
