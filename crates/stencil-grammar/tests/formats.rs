//! `format` languages on a few values each side of the line (the JSON Schema Test Suite ratchet
//! covers the rest).

use serde_json::json;
use stencil_grammar::{compile_schema, matches, Options};

fn accepts(format: &str, value: &str) -> bool {
    let g = compile_schema(
        &json!({"type": "string", "format": format}),
        &Options::default(),
    )
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
