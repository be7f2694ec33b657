//! The `<tool_call>` grammar: which outputs each `tool_choice` admits.

use serde_json::json;
use stencil_grammar::ir::matches;
use stencil_grammar::tools::{tool_grammar, ToolChoice, ToolSchema};
use stencil_grammar::{compile, ConstraintSpec, Grammar, GrammarError, Options};

fn tools() -> (serde_json::Value, serde_json::Value) {
    (
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"n": {"$ref": "#/$defs/n"}}, "required": ["n"], "additionalProperties": false, "$defs": {"n": {"type": "integer", "minimum": 1}}}),
    )
}

fn accepts(g: &Grammar, s: &str) -> bool {
    matches(&g.rule(g.start).expr, &g.rules, s.as_bytes())
}

fn call(name: &str, args: &str) -> String {
    format!("<tool_call>\n{{\"name\": \"{name}\", \"arguments\": {args}}}\n</tool_call>")
}

#[test]
fn each_mode_admits_exactly_its_outputs() {
    let (weather, count) = tools();
    let specs = [
        ToolSchema {
            name: "get_weather",
            parameters: Some(&weather),
        },
        ToolSchema {
            name: "count",
            parameters: Some(&count),
        },
    ];
    let opts = Options::default();
    let g = |mode: ToolChoice, max_calls: u32| {
        tool_grammar(&specs, &mode, max_calls, None, &opts)
            .unwrap()
            .grammar
    };
    let w = call("get_weather", r#"{"city": "北京"}"#);
    let c = call("count", r#"{"n": 3}"#);
    let two = format!("{w}\n{c}");

    let required = g(ToolChoice::Required, 4);
    assert!(accepts(&required, &w));
    assert!(accepts(&required, &two));
    assert!(!accepts(&required, "hello"));
    assert!(
        !accepts(&required, &call("count", r#"{"n": 0}"#)),
        "schema via $ref enforced"
    );
    assert!(!accepts(&required, &call("count", r#"{"city": "x"}"#)));
    assert!(!accepts(&required, &call("nope", "{}")));
    assert!(!accepts(&required, ""));

    let two_at_most = g(ToolChoice::Required, 2);
    assert!(accepts(&two_at_most, &two));
    assert!(
        !accepts(&two_at_most, &format!("{two}\n{w}")),
        "at most max_calls calls"
    );

    let single = g(ToolChoice::Required, 1);
    assert!(accepts(&single, &w));
    assert!(
        !accepts(&single, &two),
        "parallel_tool_calls=false: one call"
    );

    let named = g(ToolChoice::Named("count".into()), 4);
    assert!(accepts(&named, &c));
    assert!(!accepts(&named, &w));
    assert!(
        !accepts(&named, &format!("{c}\n{c}")),
        "a named tool choice is one call, whatever max_calls says"
    );

    let auto = g(ToolChoice::Auto, 4);
    assert!(accepts(&auto, "Just text, no call."));
    assert!(accepts(&auto, ""));
    assert!(accepts(&auto, &format!("Let me check.\n{w}")));
    assert!(accepts(&auto, &two));
    assert!(
        !accepts(&auto, "<tool_call>\nbroken"),
        "the tag opens the constrained region"
    );
    assert!(!accepts(&auto, &format!("{w} trailing text")));

    let none = g(ToolChoice::None, 4);
    assert!(accepts(&none, "plain answer"));
    assert!(!accepts(&none, &w));
    assert!(!accepts(&none, "text <tool_call> inside"));
}

#[test]
fn content_constraint_applies_to_the_text_part() {
    let (weather, _) = tools();
    let specs = [ToolSchema {
        name: "get_weather",
        parameters: Some(&weather),
    }];
    let content = compile(
        &ConstraintSpec::JsonSchema(json!({"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]})),
        &Options::default(),
    )
    .unwrap()
    .grammar;
    let g = tool_grammar(
        &specs,
        &ToolChoice::Auto,
        4,
        Some(content),
        &Options::default(),
    )
    .unwrap()
    .grammar;
    assert!(accepts(&g, r#"{"answer": 4}"#));
    assert!(!accepts(&g, "free text"));
    assert!(accepts(&g, &call("get_weather", r#"{"city": "Paris"}"#)));
}

#[test]
fn bad_tool_sets_are_named() {
    let string_params = json!({"type": "string"});
    let err = |specs: &[ToolSchema], mode: ToolChoice| {
        tool_grammar(specs, &mode, 4, None, &Options::default())
            .unwrap_err()
            .to_string()
    };
    let a = ToolSchema {
        name: "a",
        parameters: None,
    };
    assert!(err(&[a, a], ToolChoice::Auto)
        .contains("tools[1].function.name `a` is used by an earlier tool too"));
    assert!(err(&[a], ToolChoice::Named("b".into())).contains("not among the tools (a)"));
    assert!(err(&[], ToolChoice::Required).contains("needs at least one tool"));
    let spaced = ToolSchema {
        name: "get weather",
        parameters: None,
    };
    assert!(err(&[a, spaced], ToolChoice::Auto)
        .contains("tools[1].function.name `get weather` must be 1-64 characters"));
    let s = ToolSchema {
        name: "s",
        parameters: Some(&string_params),
    };
    assert!(err(&[s], ToolChoice::Auto).contains("arguments are always an object"));
    let bad = json!({"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}});
    let b = ToolSchema {
        name: "b",
        parameters: Some(&bad),
    };
    let e = tool_grammar(&[b], &ToolChoice::Auto, 4, None, &Options::default()).unwrap_err();
    assert!(matches!(e, GrammarError::Tool(_)));
    assert!(
        e.to_string().contains("tool `b`") && e.to_string().contains("#/nowhere"),
        "{e}"
    );
}
