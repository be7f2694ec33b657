//! Keywords a declared draft does not define are annotations there: `if`/`then`/`else` came
//! with draft 7, so a draft-04 or draft-06 schema's conditionals constrain nothing (as its
//! validators read it), in positive schemas and under `not` alike.

use serde_json::{json, Value};
use stencil_grammar::ir::matches;
use stencil_grammar::{compile_schema, Options, PropertyOrder};

fn accepts(schema: &Value, text: &str) -> bool {
    let o = Options {
        property_order: PropertyOrder::Any,
        ..Options::default()
    };
    let g = compile_schema(schema, &o).expect("compiles").grammar;
    matches(&g.rule(g.start).expr, &g.rules, text.as_bytes())
}

#[test]
fn conditionals_follow_the_declared_draft() {
    let conditional = json!({
        "type": "object",
        "if": {"properties": {"kind": {"const": "a"}}},
        "then": {"required": ["x"]},
        "else": {"required": ["y"]}
    });
    let with_draft = |draft: &str, body: &Value| {
        let mut s = body.as_object().expect("object").clone();
        s.insert("$schema".into(), json!(draft));
        Value::Object(s)
    };
    let negated = json!({"properties": {"p": {"not": conditional.clone()}}});
    for (draft, enforced) in [
        ("http://json-schema.org/draft-04/schema#", false),
        ("http://json-schema.org/draft-06/schema#", false),
        ("http://json-schema.org/draft-07/schema#", true),
        ("https://json-schema.org/draft/2020-12/schema", true),
    ] {
        let s = with_draft(draft, &conditional);
        assert!(accepts(&s, r#"{"kind":"a","x":1}"#), "{draft}");
        assert!(accepts(&s, r#"{"kind":"b","y":1}"#), "{draft}");
        assert_eq!(!accepts(&s, r#"{"kind":"a","y":1}"#), enforced, "{draft}");
        assert_eq!(!accepts(&s, r#"{"kind":"b"}"#), enforced, "{draft}");
        // Under `not`: without conditionals every object satisfies the negated schema.
        let n = with_draft(draft, &negated);
        assert!(!accepts(&n, r#"{"p":{"kind":"a","x":1}}"#), "{draft}");
        assert_eq!(
            accepts(&n, r#"{"p":{"kind":"a","y":1}}"#),
            enforced,
            "{draft}"
        );
        assert!(accepts(&n, r#"{"p":3}"#), "{draft}");
    }
}
