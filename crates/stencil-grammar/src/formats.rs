//! `format` values as regexes over the string value (anchored), and the one language a regex
//! would be too large for (leap seconds, as an explicit DFA).

use crate::expr::{ByteDfa, ByteDfaState};
use std::sync::{Arc, LazyLock};

const DIGIT2_LEAP: &str =
    r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)";

fn date() -> String {
    format!(
        r"(?:[0-9]{{4}}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|{DIGIT2_LEAP}-02-29)"
    )
}

/// An RFC 3339 time without a leap second; [`leap_second_time`] is the rest.
const TIME: &str = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:[zZ]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";

const DUR_TIME: &str = r"T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)";

const IPV4: &str = r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";

const LABEL: &str = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";

/// RFC 3339 times with a leap second (`HH:MM:60`, optional fraction, offset), exactly: a leap
/// second happens only at 23:59:60 UTC, so local time minus offset must be 23:59. Writing
/// the local time as `H:M`, the valid offsets are `+hh:mm` with `mm = (M + 1) mod 60` and
/// `hh = H` (or `H + 1 mod 24` when `M = 59`), `-hh:mm` with `hh = 23 - H`, `mm = 59 - M`,
/// and `Z` at 23:59. (The regex for this is 1,440 alternatives long; the DFA is built once
/// per process and carries `H:M` to the offset: about 11,000 states.)
pub fn leap_second_time() -> Arc<ByteDfa> {
    static DFA: LazyLock<Arc<ByteDfa>> = LazyLock::new(|| Arc::new(build_leap_second_time()));
    DFA.clone()
}

fn build_leap_second_time() -> ByteDfa {
    let mut states: Vec<ByteDfaState> = Vec::new();
    let new_state = |states: &mut Vec<ByteDfaState>| {
        states.push(ByteDfaState::default());
        (states.len() - 1) as u32
    };
    let digit = |d: u32| b'0' + d as u8;
    let accept = new_state(&mut states);
    states[accept as usize].accepting = true;
    // The offset digits "hh:mm" as a trie from the end: states that still need "m2", "mm",
    // ":mm", "h2:mm", "hh:mm".
    let need_m2: Vec<u32> = (0..10)
        .map(|m2| {
            let s = new_state(&mut states);
            states[s as usize]
                .transitions
                .push((digit(m2), digit(m2), accept));
            s
        })
        .collect();
    let need_mm: Vec<u32> = (0..60)
        .map(|mm| {
            let s = new_state(&mut states);
            let to = need_m2[mm as usize % 10];
            states[s as usize]
                .transitions
                .push((digit(mm / 10), digit(mm / 10), to));
            s
        })
        .collect();
    let need_colon_mm: Vec<u32> = (0..60)
        .map(|mm| {
            let s = new_state(&mut states);
            states[s as usize]
                .transitions
                .push((b':', b':', need_mm[mm]));
            s
        })
        .collect();
    let mut need_h2 = std::collections::HashMap::new();
    let mut need_hhmm = vec![0u32; 24 * 60];
    for hh in 0..24u32 {
        for mm in 0..60u32 {
            let h2 = *need_h2.entry((hh % 10, mm)).or_insert_with(|| {
                let s = new_state(&mut states);
                let to = need_colon_mm[mm as usize];
                states[s as usize]
                    .transitions
                    .push((digit(hh % 10), digit(hh % 10), to));
                s
            });
            let s = new_state(&mut states);
            states[s as usize]
                .transitions
                .push((digit(hh / 10), digit(hh / 10), h2));
            need_hhmm[(hh * 60 + mm) as usize] = s;
        }
    }
    // The local time, as a trie: "H1", "H2", ":", "M1", "M2", then ":60", a fraction, an offset.
    let start = new_state(&mut states);
    let mut after_h1 = [0u32; 3];
    for (h1, s) in after_h1.iter_mut().enumerate() {
        *s = new_state(&mut states);
        let d = digit(h1 as u32);
        states[start as usize].transitions.push((d, d, *s));
    }
    for h in 0..24u32 {
        let after_h2 = new_state(&mut states);
        states[after_h1[(h / 10) as usize] as usize]
            .transitions
            .push((digit(h % 10), digit(h % 10), after_h2));
        let colon = new_state(&mut states);
        states[after_h2 as usize]
            .transitions
            .push((b':', b':', colon));
        for m1 in 0..6u32 {
            let after_m1 = new_state(&mut states);
            states[colon as usize]
                .transitions
                .push((digit(m1), digit(m1), after_m1));
            for m2 in 0..10u32 {
                let m = m1 * 10 + m2;
                let [after_m2, c, six, zero, dot, frac] = [(); 6].map(|_| new_state(&mut states));
                states[after_m1 as usize]
                    .transitions
                    .push((digit(m2), digit(m2), after_m2));
                states[after_m2 as usize].transitions.push((b':', b':', c));
                states[c as usize].transitions.push((b'6', b'6', six));
                states[six as usize].transitions.push((b'0', b'0', zero));
                states[dot as usize].transitions.push((b'0', b'9', frac));
                let plus = if m < 59 {
                    (h, m + 1)
                } else {
                    ((h + 1) % 24, 0)
                };
                let minus = (23 - h, 59 - m);
                for from in [zero, frac] {
                    let t = &mut states[from as usize].transitions;
                    if from == zero {
                        t.push((b'.', b'.', dot));
                    } else {
                        t.push((b'0', b'9', frac));
                    }
                    t.push((b'+', b'+', need_hhmm[(plus.0 * 60 + plus.1) as usize]));
                    t.push((b'-', b'-', need_hhmm[(minus.0 * 60 + minus.1) as usize]));
                    if (h, m) == (23, 59) {
                        t.extend([(b'Z', b'Z', accept), (b'z', b'z', accept)]);
                    }
                }
            }
        }
    }
    // `ByteDfa` starts at state 0: swap the start there.
    states.swap(0, start as usize);
    for st in &mut states {
        for t in &mut st.transitions {
            if t.2 == 0 {
                t.2 = start;
            } else if t.2 == start {
                t.2 = 0;
            }
        }
        st.transitions.sort_unstable();
    }
    ByteDfa { states }
}

/// Leap seconds written in UTC: the part of [`leap_second_time`] a regex states cheaply.
pub(crate) const LEAP_SECOND_UTC: &str = r"23:59:60(?:\.[0-9]+)?(?:[zZ]|[+-]00:00)";

/// `time` without leap seconds.
pub(crate) fn time() -> String {
    format!("^{TIME}$")
}

/// The part of `date-time` before the time.
pub(crate) fn date_time_prefix() -> String {
    format!("^{}[Tt]$", date())
}

/// Formats the JSON Schema specification defines that are not checked (no regular language
/// states them exactly: IDNs need Unicode normalization tables).
/// They stay refused: a validator may assert them, so ignoring them would accept what it
/// rejects (unlike a custom name such as `color`, which every validator ignores).
pub const SPEC_UNCHECKED: &[&str] = &["idn-email", "idn-hostname", "iri", "iri-reference"];

/// Groups nested at most this deep in a `format: "regex"` string.
const REGEX_GROUP_DEPTH: usize = 3;

/// `format: "regex"`: a practical subset of ECMA-262 regular expressions, every string of
/// which is a valid one (a valid regex outside it is refused, never an invalid one
/// accepted): literal characters, `.`, `^`, `$`, the common escapes (`\d \w \s \b`, `\n`,
/// `\xHH`, `\uHHHH`, escaped syntax characters), classes with ASCII letter/digit ranges in
/// order, groups `( )`, `(?: )`, `(?= )`, `(?! )` nested up to three deep, alternation, and
/// quantifiers `* + ? {n} {n,} {n,m}` (with `n < m` shown by the digits) with lazy `?`.
/// Not: backreferences, named groups, look-behind, `\0`, `\cX`, reversed or escaped ranges.
fn regex_syntax() -> String {
    let esc_common = r"x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|[dDwWsSfnrtv]|[\^$.|?*+()\[\]{}\\]";
    let esc_out = format!(r"\\(?:[bB]|{esc_common})");
    let esc_in = format!(r"\\(?:b|-|{esc_common})");
    let mut ranges: Vec<String> = Vec::new();
    for (lo, hi) in [('0', '9'), ('a', 'z'), ('A', 'Z')] {
        for c in lo..=hi {
            ranges.push(format!("{c}-[{c}-{hi}]"));
        }
    }
    let single = format!(r"[^\\\]\-\[]|{esc_in}");
    let class = format!(r"\[\^?-?(?:{}|{single})+-?\]", ranges.join("|"));
    let mut pairs: Vec<String> = (0..10).map(|d| format!("{d},[{d}-9]")).collect();
    pairs.push("[0-9],[1-9][0-9]{1,2}".into());
    pairs.push("[1-9][0-9],[1-9][0-9]{2}".into());
    let quant = format!(r"(?:[*+?]|\{{(?:[0-9]{{1,3}},?|{})\}})\??", pairs.join("|"));
    let plain = r"[^\\^$.|?*+()\[\]{}]";
    let mut alt = String::new();
    for depth in 0..=REGEX_GROUP_DEPTH {
        let groups = if depth == 0 {
            String::new()
        } else {
            format!(r"|\((?:\?:)?(?:{alt})\)")
        };
        let look = if depth == 0 {
            String::new()
        } else {
            format!(r"|\(\?[=!](?:{alt})\)")
        };
        let atom = format!(r"(?:{plain}|\.|{class}|{esc_out}{groups})");
        let term = format!(r"(?:[\^$]{look}|{atom}(?:{quant})?)");
        alt = format!(r"{term}*(?:\|{term}*)*");
    }
    format!("^(?:{alt})$")
}

/// The regex for a known format, or `None` if the format is unknown.
pub fn format_regex(name: &str) -> Option<String> {
    Some(match name {
        "date" => format!("^{}$", date()),
        // Without leap seconds: the schema compiler adds `leap_second_time`.
        "time" => time(),
        "date-time" => format!("^{}[Tt]{TIME}$", date()),
        "duration" => format!(
            r"^P(?:(?:[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)(?:{DUR_TIME})?|{DUR_TIME}|[0-9]+W)$"
        ),
        "email" => {
            let (local, name, literal) = email_parts();
            format!(r"^(?:{local})@(?:{name}|{literal})$")
        }
        "hostname" => format!(r"^{LABEL}(?:\.{LABEL})*$"),
        "ipv4" => format!("^{IPV4}$"),
        "ipv6" => format!("^{}$", ipv6()),
        "json-pointer" => "^(?:/(?:[^/~]|~[01])*)*$".into(),
        "relative-json-pointer" => "^(?:0|[1-9][0-9]*)(?:#|(?:/(?:[^/~]|~[01])*)*)$".into(),
        "uri-template" => {
            // RFC 6570 literals: any character but controls, space, `"`, `%` (outside
            // percent-encoding), `<>\^`{|}`, and the non-characters outside ucschar/iprivate.
            // The apostrophe is allowed, as the JSON Schema Test Suite reads the RFC.
            let lit = r#"[\x21\x23\x24\x26-\x3B\x3D\x3F-\x5B\x5D\x5F\x61-\x7A\x7E\u{A0}-\u{D7FF}\u{E000}-\u{FDCF}\u{FDF0}-\u{FFEF}\u{10000}-\u{1FFFD}\u{20000}-\u{2FFFD}\u{30000}-\u{3FFFD}\u{40000}-\u{4FFFD}\u{50000}-\u{5FFFD}\u{60000}-\u{6FFFD}\u{70000}-\u{7FFFD}\u{80000}-\u{8FFFD}\u{90000}-\u{9FFFD}\u{A0000}-\u{AFFFD}\u{B0000}-\u{BFFFD}\u{C0000}-\u{CFFFD}\u{D0000}-\u{DFFFD}\u{E1000}-\u{EFFFD}\u{F0000}-\u{FFFFD}\u{100000}-\u{10FFFD}]|%[0-9A-Fa-f]{2}"#;
            let var = r"(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})(?:\.?(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2}))*(?::[1-9][0-9]{0,3}|\*)?";
            format!(r"^(?:{lit}|\{{[+#./;?&=,!@|]?{var}(?:,{var})*\}})*$")
        }
        "uuid" => {
            "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$".into()
        }
        "regex" => regex_syntax(),
        "uri" => format!("^[A-Za-z][A-Za-z0-9+.-]*:{}$", uri_rest(true)),
        "uri-reference" => format!(
            "^(?:[A-Za-z][A-Za-z0-9+.-]*:{}|{})$",
            uri_rest(true),
            uri_rest(false)
        ),
        _ => return None,
    })
}

/// RFC 5321 mailbox parts: a dot-atom or quoted local part; a domain name or an address
/// literal (`[127.0.0.1]`, `[IPv6:::1]`).
/// Returns (local part, domain name, address literal).
pub fn email_parts() -> (String, String, String) {
    let atom = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
    let quoted = r#""(?:[\x20\x21\x23-\x5B\x5D-\x7E]|\\[\x20-\x7E])*""#;
    (
        format!(r"{atom}(?:\.{atom})*|{quoted}"),
        format!(r"{LABEL}(?:\.{LABEL})*"),
        format!(r"\[{IPV4}\]|\[IPv6:{}\]", ipv6()),
    )
}

/// An IPv6 address (RFC 4291 text forms, with an embedded IPv4 tail).
fn ipv6() -> String {
    let h16 = "[0-9A-Fa-f]{1,4}";
    let ls32 = format!("(?:{h16}:{h16}|{IPV4})");
    let alts = [
        format!("(?:{h16}:){{6}}{ls32}"),
        format!("::(?:{h16}:){{5}}{ls32}"),
        format!("(?:{h16})?::(?:{h16}:){{4}}{ls32}"),
        format!("(?:(?:{h16}:){{0,1}}{h16})?::(?:{h16}:){{3}}{ls32}"),
        format!("(?:(?:{h16}:){{0,2}}{h16})?::(?:{h16}:){{2}}{ls32}"),
        format!("(?:(?:{h16}:){{0,3}}{h16})?::{h16}:{ls32}"),
        format!("(?:(?:{h16}:){{0,4}}{h16})?::{ls32}"),
        format!("(?:(?:{h16}:){{0,5}}{h16})?::{h16}"),
        format!("(?:(?:{h16}:){{0,6}}{h16})?::"),
    ];
    format!("(?:{})", alts.join("|"))
}

/// RFC 3986 hier-part (after a scheme) or relative-part (without one, whose first segment
/// cannot hold a colon: `path-noscheme`), then query and fragment; ASCII only, valid
/// percent-encoding, IP literals exactly (`[IPv6]` or `[vX.future]`).
fn uri_rest(after_scheme: bool) -> String {
    let pct = "%[0-9A-Fa-f]{2}";
    let pchar = format!("(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|{pct})");
    let pchar_nc = format!("(?:[A-Za-z0-9._~!$&'()*+,;=@-]|{pct})");
    let userinfo = format!("(?:[A-Za-z0-9._~!$&'()*+,;=:-]|{pct})*");
    let ip_future = r"v[0-9A-Fa-f]+\.[A-Za-z0-9._~!$&'()*+,;=:-]+";
    let host = format!(
        "(?:\\[(?:{}|{ip_future})\\]|(?:[A-Za-z0-9._~!$&'()*+,;=-]|{pct})*)",
        ipv6()
    );
    let authority = format!("//(?:{userinfo}@)?{host}(?::[0-9]*)?");
    let tail = format!("(?:\\?(?:{pchar}|[/?])*)?(?:#(?:{pchar}|[/?])*)?");
    let path = if after_scheme {
        // path-absolute, path-rootless or empty
        format!("/?(?:{pchar}+(?:/{pchar}*)*)?")
    } else {
        // path-absolute, path-noscheme or empty
        format!("(?:/(?:{pchar}+(?:/{pchar}*)*)?|{pchar_nc}+(?:/{pchar}*)*)?")
    };
    format!("(?:{authority}(?:/{pchar}*)*|{path}){tail}")
}
