//! Complements under schema-ordered objects: what `not`, `if`, `oneOf` and `maxContains`
//! exclude is excluded in every member order, although generation writes members in schema
//! order (the complement of the schema-order language alone would let the excluded members
//! through written in another order).

use serde_json::{json, Value};
use stencil_grammar::ir::matches;
use stencil_grammar::{compile_schema, Options, PropertyOrder};

fn accepts(schema: &Value, order: PropertyOrder, text: &str) -> bool {
    let o = Options {
        property_order: order,
        ..Options::default()
    };
    let g = compile_schema(schema, &o).expect("compiles").grammar;
    matches(&g.rule(g.start).expr, &g.rules, text.as_bytes())
}

#[test]
fn complements_hold_in_every_member_order() {
    let cases = [
        // oneOf: both branches match, in the order of either.
        (
            json!({"type": "object", "additionalProperties": {"type": "string"}, "oneOf": [
                {"properties": {"login": {"type": "string"}}, "required": ["login"]},
                {"properties": {"password": {"type": "string"}}, "required": ["password"]}]}),
            vec![
                (r#"{"login":"a","password":"b"}"#, false),
                (r#"{"password":"b","login":"a"}"#, false),
                (r#"{"login":"a"}"#, true),
                (r#"{"password":"b","x":"1"}"#, true),
            ],
        ),
        // not: "b" is 1, after a member the negated schema does not declare.
        (
            json!({"type": "object", "properties": {"a": {"type": "string"}},
                   "not": {"properties": {"b": {"const": 1}}, "required": ["b"]}}),
            vec![
                (r#"{"a":"x","b":1}"#, false),
                (r#"{"b":1}"#, false),
                (r#"{"a":"x","b":2}"#, true),
            ],
        ),
        // The same over closed objects (no "any value" inside: the plain complement).
        (
            json!({"type": "object", "properties": {"a": {"type": "string"}},
                   "additionalProperties": {"type": "integer"},
                   "not": {"properties": {"b": {"const": 1}}, "required": ["b"]}}),
            vec![(r#"{"a":"x","b":1}"#, false), (r#"{"a":"x","b":2}"#, true)],
        ),
        // if/then: the condition holds in either order, so `then` applies.
        (
            json!({"type": "object",
                   "properties": {"kind": {"type": "string"}, "n": {"type": "integer"}},
                   "if": {"properties": {"n": {"const": 0}, "kind": {"const": "zero"}},
                          "required": ["n", "kind"]},
                   "then": false}),
            vec![
                (r#"{"kind":"zero","n":0}"#, false),
                (r#"{"kind":"one","n":0}"#, true),
            ],
        ),
        // maxContains: the items matching `contains` are counted in any member order.
        (
            json!({"type": "array", "items": {"type": "object", "additionalProperties": {"type": "integer"}},
                   "contains": {"properties": {"y": {"const": 1}, "x": {"const": 1}}, "required": ["x", "y"],
                                "additionalProperties": {"type": "integer"}},
                   "maxContains": 1}),
            vec![
                (r#"[{"x":1,"y":1},{"y":1,"x":1}]"#, false),
                (r#"[{"x":1,"y":1},{"x":2,"y":1}]"#, true),
            ],
        ),
    ];
    for (schema, texts) in cases {
        for order in [PropertyOrder::Schema, PropertyOrder::Any] {
            for (text, valid) in &texts {
                let got = accepts(&schema, order, text);
                // Schema order may refuse a valid text written in another order (documented);
                // it never accepts an invalid one.
                if *valid && order == PropertyOrder::Any {
                    assert!(got, "{order:?} {schema}: {text} refused");
                }
                if !valid {
                    assert!(!got, "{order:?} {schema}: {text} accepted");
                }
            }
        }
    }
}
