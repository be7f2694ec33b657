//! Refusals name the keyword and its JSON pointer; lenient mode turns them into warnings.

use serde_json::json;
use stencil_grammar::{compile_schema, GrammarError, Options};

#[test]
fn unsupported_keyword_names_pointer() {
    // Arrays with a repeated item (the complement of uniqueItems) are refused.
    let schema = json!({"type": "object", "properties": {"tags": {"not": {"type": "array", "uniqueItems": true}}}});
    match compile_schema(&schema, &Options::default()) {
        Err(GrammarError::Unsupported {
            keyword, pointer, ..
        }) => {
            assert_eq!(keyword, "uniqueItems");
            assert_eq!(pointer, "#/properties/tags/not");
        }
        other => panic!("expected an Unsupported error, got {other:?}"),
    }
    let lenient = Options {
        lenient: true,
        ..Options::default()
    };
    let c = compile_schema(&schema, &lenient).expect("lenient compiles");
    assert_eq!(c.warnings.len(), 1);
    assert!(c.warnings[0].to_string().contains("uniqueItems"));
}

#[test]
fn invalid_schemas_are_clear_errors() {
    let cases = [
        (json!({"$ref": "#/$defs/missing"}), "cannot resolve $ref"),
        (json!({"type": "string", "pattern": "a(b"}), "invalid regex"),
        (json!({"type": "strung"}), "unknown type"),
        (
            json!({"minLength": -1, "type": "string"}),
            "non-negative integer",
        ),
        (json!(false), "accepts no value"),
        (
            json!({"enum": [1, 2], "type": "string"}),
            "accepts no value",
        ),
        (json!(42), "must be an object or a boolean"),
        // `not` of a schema that accepts everything rules out every value.
        (json!({"not": {}}), "accepts no value (unsatisfiable)"),
        (json!({"not": true}), "accepts no value (unsatisfiable)"),
        (
            json!({"not": {"description": "anything"}}),
            "accepts no value (unsatisfiable)",
        ),
        (
            json!({"type": "object", "properties": {"a": {"not": {}}}, "required": ["a"]}),
            "accepts no value",
        ),
    ];
    for (schema, want) in cases {
        let err = compile_schema(&schema, &Options::default())
            .expect_err("must fail")
            .to_string();
        assert!(err.contains(want), "{schema}: {err}");
    }
}

/// An unknown format is an annotation by default (any string; a warning names it), refused
/// under `FormatMode::Strict`; a known one next to it stays enforced.
#[test]
fn unknown_formats_are_annotations_with_a_warning_or_refused_when_strict() {
    use stencil_grammar::ir::matches;
    let schema = json!({"type": "object", "properties": {
        "card": {"type": "string", "format": "credit-card"},
        "day": {"type": "string", "format": "date"}}});
    let compiled = compile_schema(&schema, &Options::default()).unwrap();
    assert_eq!(compiled.warnings.len(), 1, "{:?}", compiled.warnings);
    let w = compiled.warnings[0].to_string();
    assert!(
        w.contains("credit-card") && w.contains("#/properties/card"),
        "{w}"
    );
    let g = &compiled.grammar;
    let ok = |s: &str| matches(&g.rule(g.start).expr, &g.rules, s.as_bytes());
    assert!(ok(r#"{"card":"anything at all","day":"2026-12-05"}"#));
    assert!(
        !ok(r#"{"card":"x","day":"yesterday"}"#),
        "date still enforced"
    );
    let strict = Options {
        format: stencil_grammar::FormatMode::Strict,
        ..Options::default()
    };
    let err = compile_schema(&schema, &strict).unwrap_err().to_string();
    assert!(
        err.contains("format") && err.contains("credit-card") && err.contains("#/properties/card"),
        "{err}"
    );
    let annotate = Options {
        format: stencil_grammar::FormatMode::Annotate,
        ..Options::default()
    };
    let compiled = compile_schema(&schema, &annotate).unwrap();
    assert!(compiled.warnings.is_empty());
}

#[test]
fn schema_size_limit() {
    let big = json!({"enum": (0..1000).map(|i| format!("value-{i}")).collect::<Vec<_>>()});
    let opts = Options {
        limits: stencil_grammar::CompileLimits {
            max_schema_bytes: 1000,
            ..Default::default()
        },
        ..Options::default()
    };
    let err = compile_schema(&big, &opts).unwrap_err();
    assert!(
        matches!(err, GrammarError::SchemaTooLarge { limit: 1000, .. }),
        "{err}"
    );
}

#[test]
fn contains_counts_matching_items() {
    use stencil_grammar::ir::matches;
    use stencil_grammar::Whitespace;
    let opts = Options {
        whitespace: Whitespace::Compact,
        ..Options::default()
    };
    let g = compile_schema(&json!({"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5}, "minContains": 2, "maxContains": 3}), &opts)
        .unwrap()
        .grammar;
    let accepts = |t: &str| matches(&g.rule(g.start).expr, &g.rules, t.as_bytes());
    for (text, want) in [
        ("[5,6]", true),
        ("[1,5,2,6,3]", true),
        ("[5]", false),
        ("[5,6,7,8]", false),
        ("[5,6,7]", true),
        ("[]", false),
        ("[5,\"x\",6]", false),
    ] {
        assert_eq!(accepts(text), want, "{text}");
    }
}

#[test]
fn additional_keys_exclude_declared_names() {
    use stencil_grammar::ir::matches;
    use stencil_grammar::Whitespace;
    let opts = Options {
        whitespace: Whitespace::Compact,
        ..Options::default()
    };
    let g = compile_schema(
        &json!({"type": "object", "properties": {"a": {"type": "integer"}, "ab": {"type": "integer"}}, "additionalProperties": {"type": "string"}}),
        &opts,
    )
    .unwrap()
    .grammar;
    let accepts = |t: &str| matches(&g.rule(g.start).expr, &g.rules, t.as_bytes());
    for (text, want) in [
        (r#"{"a":1,"ab":2}"#, true),
        (r#"{"a":1,"b":"x"}"#, true),
        (r#"{"abc":"x","":"y","\n":"z"}"#, true),
        (r#"{"a":1,"a":"x"}"#, false),
        (r#"{"ab":"x"}"#, false),
        (r#"{"b":"x","a":1}"#, false),
    ] {
        assert_eq!(accepts(text), want, "{text}");
    }
}

#[test]
fn key_except_direct() {
    let e = stencil_grammar::ir::key_except(&["a".to_string(), "ab".to_string()]).unwrap();
    for (k, want) in [
        ("a", false),
        ("ab", false),
        ("abc", true),
        ("b", true),
        ("", true),
    ] {
        assert_eq!(
            stencil_grammar::ir::matches(&e, &[], k.as_bytes()),
            want,
            "{k}"
        );
    }
}

#[test]
fn bounded_recursion_refuses_deeper_values_only() {
    use stencil_grammar::ir::matches;
    let schema = json!({"$ref": "#/$defs/n", "$defs": {"n": {"type": "object", "properties": {"c": {"type": "array", "items": {"$ref": "#/$defs/n"}}}, "additionalProperties": false}}});
    let nest = |depth: usize| {
        let mut s = "{}".to_string();
        for _ in 0..depth {
            s = format!("{{\"c\":[{s},{s}]}}");
        }
        s
    };
    let accepts = |opts: &Options, text: &str| {
        let g = compile_schema(&schema, opts).unwrap().grammar;
        matches(&g.rule(g.start).expr, &g.rules, text.as_bytes())
    };
    let unbounded = Options::default();
    let bounded = Options {
        max_recursion: Some(2),
        ..Options::default()
    };
    for depth in 0..=5 {
        assert!(accepts(&unbounded, &nest(depth)), "depth {depth}");
        // Depth 0 is the top value; two recursive levels below it are allowed.
        assert_eq!(accepts(&bounded, &nest(depth)), depth <= 2, "depth {depth}");
    }
    // Recursion that is required cannot be unrolled: a clear error, not a silent change.
    let endless = json!({"$ref": "#/$defs/n", "$defs": {"n": {"type": "object", "properties": {"c": {"$ref": "#/$defs/n"}}, "required": ["c"]}}});
    assert!(matches!(
        compile_schema(&endless, &bounded),
        Err(GrammarError::Unsatisfiable { .. })
    ));
}

/// A `oneOf` whose branches may overlap on values open to any JSON is refused naming it;
/// `oneof_as_anyof` compiles it as `anyOf` with a warning: a value of one branch is accepted,
/// one of two branches too (the documented superset), one of none is not.
#[test]
fn oneof_as_anyof_is_an_explicit_superset() {
    // (`patternProperties` has no complement-free negation, so the overlap stays.)
    let schema = json!({"type": "object", "properties": {"d": {"type": "object", "oneOf": [
        {"patternProperties": {"^r": {"type": "number"}}, "required": ["radius"]},
        {"properties": {"length": {"type": "number"}}, "required": ["length"]}
    ]}}, "required": ["d"]});
    match compile_schema(&schema, &Options::default()).map(|_| "compiled") {
        Err(GrammarError::Unsupported {
            keyword, pointer, ..
        }) => assert_eq!(
            (keyword.as_str(), pointer.as_str()),
            ("oneOf", "#/properties/d")
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let opts = Options {
        oneof_as_anyof: true,
        ..Options::default()
    };
    let c = compile_schema(&schema, &opts).expect("compiles as anyOf");
    assert_eq!(c.warnings.len(), 1);
    assert!(
        c.warnings[0].to_string().contains("compiled as anyOf"),
        "{}",
        c.warnings[0]
    );
    let g = &c.grammar;
    let accepts =
        |s: &str| stencil_grammar::ir::matches(&g.rule(g.start).expr, &g.rules, s.as_bytes());
    assert!(accepts(r#"{"d": {"radius": 1}}"#));
    assert!(accepts(r#"{"d": {"radius": 1, "length": 2}}"#));
    assert!(!accepts(r#"{"d": {"width": 1}}"#));
    assert!(!accepts(r#"{"d": {"radius": "1"}}"#));
}
