//! `format` languages on a few values each side of the line (the JSON Schema Test Suite ratchet
//! covers the rest).

use serde_json::json;
use stencil_grammar::{compile_schema, matches, Options};

fn accepts(format: &str, value: &str) -> bool {
    accepts_with(format, value, &Options::default())
}

fn accepts_with(format: &str, value: &str, opts: &Options) -> bool {
    let g = compile_schema(&json!({"type": "string", "format": format}), opts)
        .unwrap()
        .grammar;
    let text = serde_json::to_string(value).unwrap();
    matches(&g.rule(g.start).expr, &g.rules, text.as_bytes())
}

#[test]
fn email_forms_and_sizes() {
    let long_local = format!("{}@example.com", "a".repeat(65));
    let max_local = format!("{}@example.com", "a".repeat(64));
    for (v, ok) in [
        ("joe.bloggs@example.com", true),
        ("\"joe bloggs\"@example.com", true),
        ("\"a\\\"b\"@example.com", true),
        ("joe@[127.0.0.1]", true),
        ("joe@[IPv6:::1]", true),
        ("joe@[127.0.0.300]", false),
        ("joe@[IPv6:::12345]", false),
        (".joe@example.com", false),
        ("joe..bloggs@example.com", false),
        ("joe.@example.com", false),
        ("no-at-sign", false),
        (max_local.as_str(), true),
        (long_local.as_str(), false),
    ] {
        assert_eq!(accepts("email", v), ok, "{v}");
    }
}

#[test]
fn hostname_labels() {
    let label = "a".repeat(63);
    assert!(accepts("hostname", &format!("{label}.example.com")));
    assert!(
        !accepts("hostname", &format!("{}.com", "a".repeat(64))),
        "labels of at most 63"
    );
    assert!(!accepts("hostname", "-a.com"));
    assert!(
        !accepts("hostname", "xn--bcher-kva.example"),
        "IDN A-labels are refused"
    );
}

#[test]
fn total_lengths_by_default() {
    let unbounded = Options {
        format_total_lengths: false,
        ..Options::default()
    };
    let bounded = Options::default();
    let label = "a".repeat(63);
    let too_long = [label.as_str(); 4].join("."); // 255 characters
    let fits = [label.as_str(), &label, &label, &"a".repeat(61)].join(".");
    assert!(
        !accepts("hostname", &too_long),
        "the 253 total is enforced by default"
    );
    assert!(
        accepts_with("hostname", &too_long, &unbounded),
        "unless turned off"
    );
    assert!(accepts_with("hostname", &fits, &bounded));
    let email = |domain: &str| format!("{}@{domain}", "b".repeat(64));
    let domain_ok = [label.as_str(), &label, &"c".repeat(61)].join("."); // 64+1+189 = 254
    assert!(accepts_with("email", &email(&domain_ok), &bounded));
    assert!(!accepts_with(
        "email",
        &email(&format!("{domain_ok}x")),
        &bounded
    ));
}
