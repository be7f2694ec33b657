//! `format` languages on a few values each side of the line (the JSON Schema Test Suite ratchet
//! covers the rest).

use serde_json::json;
use stencil_grammar::ir::matches;
use stencil_grammar::{compile_schema, Options};

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

/// A leap second is 23:59:60 UTC: the local time minus the offset must be 23:59. Checked for
/// every local time against clock arithmetic (the oracle), with the right offsets of both
/// signs and offsets a minute or an hour off.
#[test]
fn leap_seconds_exactly_at_utc_midnight() {
    let utc_is_2359 = |h: i32, m: i32, sign: i32, oh: i32, om: i32| {
        (h * 60 + m - sign * (oh * 60 + om)).rem_euclid(1440) == 23 * 60 + 59
    };
    let compiled = |format: &str| {
        compile_schema(
            &json!({"type": "string", "format": format}),
            &Options::default(),
        )
        .unwrap()
        .grammar
    };
    let (time, date_time) = (compiled("time"), compiled("date-time"));
    let check = |text: String| {
        let json = serde_json::to_string(&text).unwrap();
        let t = matches(&time.rule(time.start).expr, &time.rules, json.as_bytes());
        let dt_text = serde_json::to_string(&format!("1998-12-31T{text}")).unwrap();
        let dt = matches(
            &date_time.rule(date_time.start).expr,
            &date_time.rules,
            dt_text.as_bytes(),
        );
        assert_eq!(t, dt, "time and date-time disagree on {text}");
        t
    };
    let mut valid = 0;
    for h in 0..24 {
        for m in 0..60 {
            let plus = ((h * 60 + m + 1) % 1440 / 60, (m + 1) % 60);
            let minus = ((23 - h + 24) % 24, 59 - m);
            let mut offsets = vec![(1, plus.0, plus.1), (-1, minus.0, minus.1)];
            for (s, oh, om) in offsets.clone() {
                offsets.push((s, oh, (om + 1) % 60));
                offsets.push((s, (oh + 1) % 24, om));
            }
            for (sign, oh, om) in offsets {
                let c = if sign > 0 { '+' } else { '-' };
                let text = format!("{h:02}:{m:02}:60{c}{oh:02}:{om:02}");
                let expect = utc_is_2359(h, m, sign, oh, om);
                assert_eq!(check(text.clone()), expect, "{text}");
                valid += expect as usize;
            }
            let zulu = format!("{h:02}:{m:02}:60.5Z");
            assert_eq!(check(zulu.clone()), (h, m) == (23, 59), "{zulu}");
        }
    }
    assert!(
        valid >= 2 * 1440,
        "both right offsets of every local time are valid"
    );
    for (text, ok) in [
        ("23:59:60.123-00:00", true),
        ("23:59:59+05:30", true),
        ("23:59:61Z", false),
        ("15:59:60.-08:00", false),
    ] {
        assert_eq!(check(text.into()), ok, "{text}");
    }
    // Beside a pattern (an eager intersection), only the UTC leap second: a documented subset.
    let with_pattern = compile_schema(
        &json!({"type": "string", "format": "time", "pattern": "^[0-9]"}),
        &Options::default(),
    )
    .unwrap()
    .grammar;
    for (text, ok) in [
        ("23:59:60Z", true),
        ("01:29:60+01:30", false),
        ("01:29:59Z", true),
    ] {
        let json = serde_json::to_string(text).unwrap();
        let got = matches(
            &with_pattern.rule(with_pattern.start).expr,
            &with_pattern.rules,
            json.as_bytes(),
        );
        assert_eq!(got, ok, "{text} beside a pattern");
    }
}

#[test]
fn uri_hosts_paths_and_templates() {
    for (format, v, ok) in [
        ("uri", "http://[::ffff:1.2.3.4]/", true),
        ("uri", "http://[::ffff:01.2.3.4]", false),
        ("uri", "http://[v1.fe80::a+en1]/", true),
        ("uri", "http://[1:2:3]/", false),
        ("uri", "urn:a:b:c", true),
        ("uri-reference", "//[::1]/p", true),
        ("uri-reference", "//[::ffff:192.168.0.01]/p", false),
        ("uri-reference", "1:b", false),
        ("uri-reference", "./1:b", true),
        ("uri-reference", "/1:b", true),
        ("uri-reference", "a:b", true),
        ("uri-template", "a'b", true),
        ("uri-template", "a\u{7f}b", false),
        ("uri-template", "a\u{85}b", false),
        ("uri-template", "/x/{id}/ü", true),
    ] {
        assert_eq!(accepts(format, v), ok, "{format}: {v:?}");
    }
}
