//! `format` values as regexes over the string value (anchored).

const DIGIT2_LEAP: &str =
    r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)";

fn date() -> String {
    format!(
        r"(?:[0-9]{{4}}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|{DIGIT2_LEAP}-02-29)"
    )
}

// A leap second (`:60`) is accepted only as 23:59:60 UTC; leap seconds written with other
// offsets are refused (never accepting an invalid one matters more).
const TIME: &str = r"(?:(?:(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:[zZ]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9]))|23:59:60(?:\.[0-9]+)?(?:[zZ]|[+-]00:00))";

const DUR_TIME: &str = r"T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)";

const IPV4: &str = r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";

const LABEL: &str = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";

/// The regex for a known format, or `None` if the format is unknown.
pub fn format_regex(name: &str) -> Option<String> {
    Some(match name {
        "date" => format!("^{}$", date()),
        "time" => format!("^{TIME}$"),
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
            let lit = r#"[^\x00-\x20"'<>\\^`{|}%]|%[0-9A-Fa-f]{2}"#;
            let var = r"(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})(?:\.?(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2}))*(?::[1-9][0-9]{0,3}|\*)?";
            format!(r"^(?:{lit}|\{{[+#./;?&=,!@|]?{var}(?:,{var})*\}})*$")
        }
        "uuid" => {
            "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$".into()
        }
        "uri" => format!("^[A-Za-z][A-Za-z0-9+.-]*:{}$", uri_rest()),
        "uri-reference" => format!("^(?:[A-Za-z][A-Za-z0-9+.-]*:)?{}$", uri_rest()),
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

/// RFC 3986 hier-part, query and fragment (ASCII only, valid percent-encoding).
fn uri_rest() -> String {
    let pct = "%[0-9A-Fa-f]{2}";
    let pchar = format!("(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|{pct})");
    let userinfo = format!("(?:[A-Za-z0-9._~!$&'()*+,;=:-]|{pct})*");
    let host = format!("(?:\\[[0-9A-Fa-f:.]+\\]|(?:[A-Za-z0-9._~!$&'()*+,;=-]|{pct})*)");
    let authority = format!("//(?:{userinfo}@)?{host}(?::[0-9]*)?");
    let tail = format!("(?:\\?(?:{pchar}|[/?])*)?(?:#(?:{pchar}|[/?])*)?");
    format!("(?:{authority}(?:/{pchar}*)*|/?(?:{pchar}+(?:/{pchar}*)*)?){tail}")
}
