//! Numeric keywords against brute force: the compiled language contains a number's text iff
//! the number satisfies the bounds / multipleOf.

use serde_json::json;
use stencil_grammar::ir::matches;
use stencil_grammar::{compile_schema, Grammar, Options, Whitespace};

fn compile(schema: serde_json::Value) -> Grammar {
    let opts = Options {
        whitespace: Whitespace::Compact,
        ..Options::default()
    };
    compile_schema(&schema, &opts).expect("compiles").grammar
}

fn accepts(g: &Grammar, text: &str) -> bool {
    matches(&g.rule(g.start).expr, &g.rules, text.as_bytes())
}

#[test]
fn integer_ranges_match_brute_force() {
    let cases = [
        (Some(-17), Some(42)),
        (Some(0), None),
        (None, Some(-3)),
        (Some(7), Some(7)),
        (Some(-250), Some(-99)),
        (Some(95), Some(1005)),
        (None, Some(0)),
        (Some(1), None),
    ];
    for (lo, hi) in cases {
        let mut s = json!({"type": "integer"});
        if let Some(l) = lo {
            s["minimum"] = json!(l);
        }
        if let Some(h) = hi {
            s["maximum"] = json!(h);
        }
        let g = compile(s.clone());
        for n in -1100i64..1100 {
            let want = lo.is_none_or(|l| n >= l) && hi.is_none_or(|h| n <= h);
            assert_eq!(accepts(&g, &n.to_string()), want, "{s} on {n}");
        }
        assert!(!accepts(&g, "007"), "leading zeros are not JSON");
    }
}

#[test]
fn exclusive_and_fractional_bounds_on_numbers() {
    let s = json!({"type": "number", "exclusiveMinimum": -1.5, "maximum": 2.25});
    let g = compile(s);
    for i in -400i64..400 {
        // Values with up to 2 decimals, written the way serde_json writes them.
        let v = i as f64 / 100.0;
        let text = serde_json::to_string(&json!(v)).unwrap();
        let want = v > -1.5 && v <= 2.25;
        assert_eq!(accepts(&g, &text), want, "{text}");
    }
    assert!(accepts(&g, "2.2500"));
    assert!(!accepts(&g, "2.2501"));
    assert!(!accepts(&g, "-1.5"));
    assert!(accepts(&g, "-1.4999"));
}

#[test]
fn integer_with_float_bounds_rounds_inward() {
    let g = compile(json!({"type": "integer", "minimum": 1.5, "exclusiveMaximum": 4}));
    let ok: Vec<i64> = (-5..10).filter(|n| accepts(&g, &n.to_string())).collect();
    assert_eq!(ok, vec![2, 3]);
}

#[test]
fn multiple_of_integers_and_decimals() {
    let g = compile(json!({"type": "integer", "multipleOf": 7, "minimum": -50, "maximum": 50}));
    for n in -100i64..100 {
        assert_eq!(
            accepts(&g, &n.to_string()),
            n % 7 == 0 && (-50..=50).contains(&n),
            "{n}"
        );
    }
    let g = compile(json!({"type": "number", "multipleOf": 0.25}));
    for (text, want) in [
        ("0.25", true),
        ("1.5", true),
        ("2", true),
        ("0.1", false),
        ("-0.75", true),
        ("3.125", false),
        ("1.50", true),
    ] {
        assert_eq!(accepts(&g, text), want, "{text}");
    }
}

#[test]
fn contradictory_bounds_are_unsatisfiable() {
    let err = compile_schema(
        &json!({"type": "integer", "minimum": 5, "maximum": 4}),
        &Options::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("accepts no value"), "{err}");
}

#[test]
fn patterns_longer_than_max_length_are_unsatisfiable() {
    let required =
        |s: serde_json::Value| json!({"type": "object", "properties": {"a": s}, "required": ["a"]});
    for s in [
        json!({"type": "string", "pattern": "^a+$", "maxLength": 0}),
        json!({"type": "string", "pattern": "abc", "maxLength": 2}),
    ] {
        let err = compile_schema(&required(s.clone()), &Options::default()).unwrap_err();
        assert!(err.to_string().contains("accepts no value"), "{s}: {err}");
    }
    // A multi-byte character counts once: four bytes, one character, fits in one.
    let emoji = json!({"type": "string", "pattern": "^😀$", "maxLength": 1});
    assert!(compile_schema(&required(emoji), &Options::default()).is_ok());
}
