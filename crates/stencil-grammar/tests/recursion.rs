//! Bounded recursion (`Options::max_recursion`) against an independent oracle: along any path
//! of nested values, each `$ref` target may occur at most `limit + 1` times (the first
//! occurrence is depth 0). Mutually recursive targets reached from several places make the
//! compiler reuse compiled targets across contexts; a reuse in the wrong context shows up as a
//! disagreement with the oracle.

use serde_json::{json, Map, Value};
use stencil_grammar::ir::matches;
use stencil_grammar::{compile_schema, Options, PropertyOrder};

/// `a <-> b <-> c`, entered at `a`, `c` and `b` from the root.
fn schema() -> Value {
    json!({
        "$defs": {
            "a": {"type": "object", "properties": {"b": {"$ref": "#/$defs/b"}}, "additionalProperties": false},
            "b": {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}, "c": {"$ref": "#/$defs/c"}}, "additionalProperties": false},
            "c": {"type": "object", "properties": {"b": {"$ref": "#/$defs/b"}}, "additionalProperties": false}
        },
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/a"}, "y": {"$ref": "#/$defs/c"}, "z": {"$ref": "#/$defs/b"}},
        "additionalProperties": false
    })
}

/// The target a member leads to, inside a value of target `at` (`None`: the root).
fn target(at: Option<char>, key: &str) -> char {
    match (at, key) {
        (None, "x") | (Some('b'), "a") => 'a',
        (None, "y") | (Some('b'), "c") => 'c',
        _ => 'b',
    }
}

fn oracle(v: &Value, at: Option<char>, path: &mut Vec<char>, limit: usize) -> bool {
    let Value::Object(m) = v else { return false };
    m.iter().all(|(k, child)| {
        let t = target(at, k);
        path.push(t);
        let ok = path.iter().filter(|&&x| x == t).count() <= limit + 1
            && oracle(child, Some(t), path, limit);
        path.pop();
        ok
    })
}

/// A random instance: members allowed where they are (so only depth decides), up to `depth`.
fn random_value(at: Option<char>, depth: u32, rng: &mut u64) -> Value {
    let keys: &[&str] = match at {
        None => &["x", "y", "z"],
        Some('a') | Some('c') => &["b"],
        _ => &["a", "c"],
    };
    let mut m = Map::new();
    for k in keys {
        *rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if depth > 0 && !(*rng >> 33).is_multiple_of(3) {
            let t = target(at, k);
            m.insert(k.to_string(), random_value(Some(t), depth - 1, rng));
        }
    }
    Value::Object(m)
}

#[test]
fn bounded_recursion_matches_the_oracle() {
    let schema = schema();
    let mut rng = 7u64;
    let instances: Vec<Value> = (0..400)
        .map(|i| random_value(None, 3 + i % 9, &mut rng))
        .collect();
    for limit in [0u32, 1, 2, 3] {
        let options = Options {
            max_recursion: Some(limit),
            ..Options::default()
        };
        let g = compile_schema(&schema, &options).unwrap().grammar;
        let (mut accepted, mut refused) = (0, 0);
        for v in &instances {
            let text = serde_json::to_string(v).unwrap();
            let got = matches(&g.rule(g.start).expr, &g.rules, text.as_bytes());
            let want = oracle(v, None, &mut Vec::new(), limit as usize);
            assert_eq!(got, want, "limit {limit}: {text}");
            if want {
                accepted += 1;
            } else {
                refused += 1;
            }
        }
        // Both sides of the line are exercised at every limit.
        assert!(
            accepted > 20 && refused > 20,
            "limit {limit}: {accepted} accepted, {refused} refused"
        );
    }
}

/// `not` over object values open to any additional member (whose values call the recursive
/// "any value" rule) is exact at any depth: the negation is rewritten into "`kind` present
/// with another value, or absent" rather than a complement of objects (which was bounded to
/// values nested 3 deep). Checked against a direct reading of the schema. In schema order
/// the rewrite declares `kind`, so it comes first there, as declared members do; in any
/// order it may come anywhere.
#[test]
fn not_over_open_objects_is_exact() {
    let schema = json!({
        "type": "object",
        "not": {"properties": {"kind": {"const": "x"}}, "required": ["kind"]}
    });
    let compiled = compile_schema(&schema, &Options::default()).expect("compiles");
    let g = &compiled.grammar;
    let accepts = |v: &Value| matches(&g.rule(g.start).expr, &g.rules, v.to_string().as_bytes());
    let valid = |v: &Value| v.is_object() && v.get("kind") != Some(&json!("x"));
    let nesting = |v: &Value| {
        fn depth(v: &Value) -> usize {
            match v {
                Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
                Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
                _ => 0,
            }
        }
        depth(v)
    };
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let (mut seen, mut deepest) = ([0usize; 2], 0);
    for i in 0..400 {
        let mut v = random_value(None, 4, &mut rng);
        if i % 3 == 0 {
            let mut o = Map::new();
            o.insert("kind".into(), json!(if i % 2 == 0 { "x" } else { "y" }));
            o.insert("k".into(), v);
            v = Value::Object(o);
        }
        let got = accepts(&v);
        assert_eq!(got, valid(&v), "{v}");
        seen[got as usize] += 1;
        deepest = deepest.max(nesting(&v));
    }
    assert!(seen[0] > 20 && seen[1] > 20, "{seen:?}");
    assert!(deepest > 3, "no value nested deeper than 3: {deepest}");
    let deep = json!({"kind": "y", "a": {"b": {"c": {"d": {"kind": "x"}}}}});
    assert!(valid(&deep) && accepts(&deep));
    assert!(!accepts(&json!({"kind": "x", "a": {"b": [1]}})));
    let any_order = Options {
        property_order: PropertyOrder::Any,
        ..Options::default()
    };
    let compiled = compile_schema(&schema, &any_order).expect("compiles");
    let g = &compiled.grammar;
    let accepts = |v: &Value| matches(&g.rule(g.start).expr, &g.rules, v.to_string().as_bytes());
    assert!(accepts(&json!({"a": {"b": {"c": {"d": 1}}}, "kind": "y"})));
    assert!(!accepts(&json!({"a": {"b": {"c": {"d": 1}}}, "kind": "x"})));
}
