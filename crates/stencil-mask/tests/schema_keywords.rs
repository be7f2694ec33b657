//! JSON Schema keywords against the `jsonschema` crate as the independent validator: string
//! formats with lengths, property names, negations (`not`, pushed down), `uniqueItems` and
//! distinct items, patterns and recursive references inside `allOf`. Each test builds a
//! constraint and checks that the matcher accepts exactly the instances the validator accepts.
//! (Bounded lengths against an exact DFA: `tests/bounded_lengths.rs`.)

mod common;

use std::sync::Arc;

use common::{constraint, tiny_vocab, validator_and_constraint};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use stencil_grammar::{compile, ConstraintSpec, Options, PropertyOrder, Whitespace};
use stencil_mask::{Constraint, Limits, TokenSet, TokenTrie};
use stencil_vocab::Vocab;

/// `oneOf`/`not` over string formats and counted strings (intersections worked on string
/// contents, complements of length counters subtracted lazily) accept exactly what the
/// `jsonschema` crate validates, on strings chosen to sit on every branch and boundary.
#[test]
fn combined_formats_and_lengths_match_the_validator() {
    let vocab = tiny_vocab("a");
    let label = "a".repeat(63);
    let long_host = [label.as_str(); 4].join(".");
    let candidates: Vec<String> = [
        "a",
        "example.com",
        "1.2.3.4",
        "01.2.3.4",
        "256.1.1.1",
        "1.2.3",
        "::1",
        "fe80::1",
        "1::2::3",
        "a..b",
        "-a",
        "a-",
        "ab--c",
        "xn--abc",
        "",
        "aaaa",
        "aaaaa",
        "aaaaaa",
        "b",
        "ba",
        "abab",
        "a b",
        "2001:db8::8a2e:370:7334",
    ]
    .into_iter()
    .map(String::from)
    .chain([
        label.clone(),
        format!("{label}a"),
        long_host[..253].to_string(),
        format!("{}.b", &long_host[..251]),
        long_host.clone(),
    ])
    .collect();
    let schemas = [
        json!({"type": "string", "oneOf": [{"format": "hostname"}, {"format": "ipv4"}, {"format": "ipv6"}]}),
        json!({"type": "string", "allOf": [{"format": "ipv4"}, {"not": {"format": "hostname"}}]}),
        json!({"type": "string", "oneOf": [{"maxLength": 4}, {"pattern": "^a"}]}),
        json!({"type": "string", "pattern": "^[ab]*$", "not": {"minLength": 2, "maxLength": 5}}),
        json!({"type": "string", "anyOf": [{"format": "ipv4"}, {"minLength": 5, "pattern": "b"}], "not": {"maxLength": 6}}),
    ];
    for schema in schemas {
        let (validator, c) = validator_and_constraint(&schema, &vocab);
        for s in &candidates {
            let value = json!(s);
            let text = value.to_string();
            let mut m = c.matcher().unwrap_or_else(|e| panic!("{schema}: {e}"));
            assert_eq!(
                m.accepts_after(text.as_bytes())
                    .unwrap_or_else(|e| panic!("{schema}: {text}: {e}")),
                validator.is_valid(&value),
                "{schema}: {text}"
            );
        }
    }
}

/// JSON Schema `pattern`s with anchors inside alternatives (`^a$|^b$`, `^$|^...$`,
/// `^(x|$)`) accept exactly the strings the `regex` engine finds a match in, for every string
/// of up to four characters over the patterns' alphabet.
#[test]
fn anchored_alternatives_in_patterns_match_a_regex_search() {
    let vocab = tiny_vocab("a");
    let patterns = [
        "^([0-9]{3})$|^(default)$",
        r"^$|^\+?([0-9]|-){2,3}$",
        "^([^,]|$)",
        "(^a|b)$",
        "^(0(-0)?$)|(^0x$)",
        "^[ab]+$|^0-[ab]$",
    ];
    let alphabet = ['a', 'b', '0', ',', '-', 'x', '+'];
    let mut candidates = vec![String::new()];
    for len in 1..=4 {
        let mut next = Vec::new();
        for s in candidates.iter().filter(|s| s.chars().count() == len - 1) {
            next.extend(alphabet.iter().map(|c| format!("{s}{c}")));
        }
        candidates.extend(next);
    }
    candidates.extend(["default", "123", "1234", "-0-", "+0-0"].map(String::from));
    for pat in patterns {
        let oracle = regex_automata::meta::Regex::new(pat).expect("pattern");
        let schema = json!({"type": "string", "pattern": pat});
        let c = constraint(
            ConstraintSpec::JsonSchema(schema),
            &vocab,
            Whitespace::Compact,
        );
        for s in &candidates {
            let text = json!(s).to_string();
            let mut m = c.matcher().unwrap();
            assert_eq!(
                m.accepts_after(text.as_bytes()).unwrap(),
                oracle.is_match(s.as_str()),
                "{pat}: {text}"
            );
        }
    }
}

/// `propertyNames` with `$ref`, `not`, `allOf` and `anyOf` over string keywords accepts
/// exactly the objects the `jsonschema` crate validates.
#[test]
fn property_names_with_applicators_match_the_validator() {
    let vocab = tiny_vocab("a");
    let schemas = [
        json!({"type": "object", "propertyNames": {"not": {"const": "0"}}}),
        json!({"type": "object", "propertyNames": {"pattern": "^[a-z0-9]+$", "not": {"enum": ["ab", "0"]}}}),
        json!({"$defs": {"dir": {"enum": ["n", "s", "ab"]}}, "type": "object", "propertyNames": {"$ref": "#/$defs/dir"}}),
        json!({"type": "object", "propertyNames": {"anyOf": [{"maxLength": 1}, {"pattern": "^a"}], "not": {"pattern": "0"}}}),
        json!({"type": "object", "propertyNames": {"allOf": [{"minLength": 2}, {"not": {"pattern": "b$"}}]}}),
    ];
    let keys = ["0", "a", "b", "n", "s", "ab", "ba", "a0", "abb", "", "A"];
    let mut objects: Vec<serde_json::Value> = vec![json!({})];
    for k in keys {
        objects.push(json!({ k: 1 }));
        objects.push(json!({ "n": true, k: null }));
    }
    for schema in schemas {
        let validator = jsonschema::validator_for(&schema).expect("valid schema");
        let c = constraint(
            ConstraintSpec::JsonSchema(schema.clone()),
            &vocab,
            Whitespace::Compact,
        );
        for o in &objects {
            let text = o.to_string();
            let mut m = c.matcher().unwrap();
            assert_eq!(
                m.accepts_after(text.as_bytes()).unwrap(),
                validator.is_valid(o),
                "{schema}: {text}"
            );
        }
    }
}

/// Negations of object schemas (`not`, `if`/`else`, `oneOf` of `required` with
/// `not: {required}`, `oneOf` of overlapping object branches), compiled as positive schemas, accept exactly the objects the
/// `jsonschema` crate validates (members in any order), and in schema order never an invalid
/// one.
#[test]
fn object_negations_match_the_validator() {
    let vocab = tiny_vocab("a");
    let typed =
        json!({"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"enum": ["s", "t"]}});
    let schemas = [
        json!({"type": "object", "properties": typed, "if": {"properties": {"c": {"const": "t"}}},
               "then": {"required": ["a", "b", "c"]}, "else": {"required": ["a", "c"]}}),
        json!({"type": "object", "properties": typed,
               "if": {"properties": {"c": {"const": "t"}}, "required": ["c"]},
               "then": {"required": ["b"]}, "else": {"properties": {"b": false}}}),
        json!({"properties": typed, "not": {"type": "object", "properties": {"b": {"minimum": 1}}, "required": ["a"]}}),
        // Names declared nowhere else: rewritten in any order only (in schema order the
        // rewrite would declare them), so checked in that order only.
        json!({"not": {"properties": {"a": {"type": "integer"}, "x": {"properties": {"a": {"const": 1}}}}}}),
        json!({"not": {"not": {"properties": {"a": {"type": "integer"}}, "required": ["b"]}}}),
        json!({"type": "object", "properties": typed, "oneOf": [
            {"required": ["a", "b"], "not": {"required": ["c"]}},
            {"required": ["c"], "not": {"required": ["a", "b"]}}]}),
        json!({"anyOf": [{"not": {"required": ["a"]}}, {"required": ["b"]}]}),
        json!({"allOf": [{"not": {"required": ["a", "b"]}}, {"properties": typed}]}),
        // `oneOf` over object branches open to any other member, told apart by `not` of
        // the others (no complement), with and without `$ref`.
        json!({"type": "object", "oneOf": [
            {"properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"properties": {"b": {"type": "integer"}}, "required": ["b"]},
            {"properties": {"c": {"enum": ["s", "t"]}}, "required": ["c"]}]}),
        json!({"oneOf": [{"$ref": "#/$defs/p"}, {"$ref": "#/$defs/q"}],
               "$defs": {"p": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                         "q": {"properties": {"b": {"const": 1}}}}}),
    ];
    let values = [
        json!(1),
        json!("s"),
        json!("t"),
        json!({"a": 1}),
        json!(null),
    ];
    let mut instances = vec![json!(0), json!("a"), json!(null), json!([]), json!({})];
    for mask in 1..(1u32 << 4) {
        for (i, v) in values.iter().enumerate() {
            let mut o = serde_json::Map::new();
            for (k, key) in ["a", "b", "c", "x"].iter().enumerate() {
                if mask & (1 << k) != 0 {
                    o.insert(key.to_string(), values[(i + k) % values.len()].clone());
                }
            }
            instances.push(serde_json::Value::Object(o));
            let _ = v;
        }
    }
    for (i, schema) in schemas.into_iter().enumerate() {
        let orders = match i {
            3 => &[PropertyOrder::Any][..],
            _ => &[PropertyOrder::Any, PropertyOrder::Schema],
        };
        check_against_validator(&vocab, &schema, &instances, orders);
    }
}

/// Runs every instance through `schema` compiled in each of `orders`: in any member order the
/// verdict must be the `jsonschema` crate's, in schema order never an acceptance it rejects.
/// Returns how many instances the crate finds valid and invalid.
fn check_against_validator(
    vocab: &Vocab,
    schema: &serde_json::Value,
    instances: &[serde_json::Value],
    orders: &[PropertyOrder],
) -> (usize, usize) {
    let validator = jsonschema::validator_for(schema).expect("valid schema");
    let (mut valid, mut invalid) = (0, 0);
    for &order in orders {
        let opts = Options {
            property_order: order,
            ..Options::default()
        };
        let spec = ConstraintSpec::JsonSchema(schema.clone());
        let g = compile(&spec, &opts)
            .unwrap_or_else(|e| panic!("{schema} ({order:?}): {e}"))
            .grammar;
        let trie = Arc::new(TokenTrie::new(vocab));
        let c = Constraint::new(&g, trie, Limits::default()).expect("constraint");
        for o in instances {
            let text = o.to_string();
            let accepted = c
                .matcher()
                .and_then(|mut m| m.accepts_after(text.as_bytes()))
                .unwrap_or_else(|e| panic!("{schema} ({order:?}): {text}: {e}"));
            let expected = validator.is_valid(o);
            match order {
                PropertyOrder::Any => {
                    assert_eq!(accepted, expected, "{schema}: {text}");
                    *(if expected { &mut valid } else { &mut invalid }) += 1;
                }
                _ => assert!(!accepted || expected, "{schema} (schema order): {text}"),
            }
        }
    }
    (valid, invalid)
}

/// Negations pushed down to where no complement of objects or arrays is needed (arrays by
/// `contains` of the items' negation, counts, `if`/`then`/`else`, dependencies, `anyOf`
/// mixing scalars, objects and `$ref`s, scalar keywords beside object ones, `oneOf` branches
/// told apart by nested objects whose names are declared nowhere else) accept exactly what the
/// `jsonschema` crate validates in any member order, and never an invalid value in schema
/// order.
#[test]
fn negations_pushed_down_match_the_validator() {
    let vocab = tiny_vocab("a");
    let shape = |forbidden: &[&str], required: &[&str], kind: &str| {
        let never: serde_json::Map<String, serde_json::Value> = forbidden
            .iter()
            .map(|n| (n.to_string(), json!({"not": {}})))
            .collect();
        json!({"properties": {"d": {"properties": never, "required": required}, "k": {"const": kind}}})
    };
    let schemas = [
        json!({"not": {"type": "array", "items": {"type": "integer"}, "minItems": 1}}),
        json!({"not": {"contains": {"type": "string"}, "maxItems": 2}}),
        json!({"not": {"minLength": 2, "required": ["a"], "minimum": 1}}),
        json!({"not": {"minProperties": 2, "maxProperties": 2}}),
        json!({"not": {"if": {"required": ["a"]}, "then": {"required": ["b"]}, "else": {"maxProperties": 0}}}),
        json!({"not": {"dependentRequired": {"a": ["b"]}}}),
        json!({"not": {"dependentSchemas": {"a": {"properties": {"b": {"type": "string"}}}}}}),
        json!({"not": {"anyOf": [{"type": "string"}, {"required": ["a"]}, {"$ref": "#/$defs/p"}]},
               "$defs": {"p": {"type": "array", "maxItems": 1}}}),
        json!({"not": {"allOf": [{"$ref": "#/$defs/o"}, {"properties": {"b": {"type": "array", "items": {"const": 1}}}}]},
               "$defs": {"o": {"type": "object", "required": ["a"]}}}),
        json!({"type": "object", "properties": {"d": {"type": "object"}}, "oneOf": [
            shape(&["b"], &["a"], "x"), shape(&["a"], &["b"], "y"), shape(&["c"], &["a", "b"], "z")]}),
    ];
    let leaves = [json!(1), json!("s"), json!([1]), json!({"a": 1})];
    let mut instances = vec![
        json!(0),
        json!(2.5),
        json!("a"),
        json!("abc"),
        json!(null),
        json!(true),
        json!([]),
        json!([1, 2]),
        json!(["x"]),
        json!([1, "x", 3]),
        json!([[1], {}]),
        json!({}),
    ];
    for mask in 1..(1u32 << 4) {
        for shift in 0..leaves.len() {
            let mut o = serde_json::Map::new();
            for (k, key) in ["a", "b", "d", "k"].iter().enumerate() {
                if mask & (1 << k) != 0 {
                    let v = match *key {
                        "k" => json!(["x", "y", "z", "w"][shift]),
                        "d" => {
                            let mut d = serde_json::Map::new();
                            for (j, n) in ["a", "b", "c"].iter().enumerate() {
                                if (shift + j) % 3 != 0 || shift == 3 {
                                    d.insert(n.to_string(), json!(j));
                                }
                            }
                            serde_json::Value::Object(d)
                        }
                        _ => leaves[(shift + k) % leaves.len()].clone(),
                    };
                    o.insert(key.to_string(), v);
                }
            }
            instances.push(serde_json::Value::Object(o));
        }
    }
    for schema in schemas {
        let orders = [PropertyOrder::Any, PropertyOrder::Schema];
        let (valid, invalid) = check_against_validator(&vocab, &schema, &instances, &orders);
        assert!(
            valid > 0 && invalid > 0,
            "{schema}: {valid} valid, {invalid} invalid"
        );
    }
}

/// Arrays of one, two and three of `values` (the third from every `step`-th value).
fn arrays_of(values: &[serde_json::Value], step: usize) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for a in values {
        out.push(json!([a]));
        for b in values {
            out.push(json!([a, b]));
            for c in values.iter().step_by(step) {
                out.push(json!([a, b, c]));
            }
        }
    }
    out
}

/// Compiles `schema` under `opts` and checks that the matcher accepts each text exactly when
/// the `jsonschema` crate validates its value; returns how many it accepted and rejected.
fn agree_with_validator(
    schema: &serde_json::Value,
    opts: &Options,
    vocab: &Vocab,
    texts: impl IntoIterator<Item = (String, serde_json::Value)>,
) -> (usize, usize) {
    let validator = jsonschema::validator_for(schema).expect("valid schema");
    let g = compile(&ConstraintSpec::JsonSchema(schema.clone()), opts)
        .unwrap_or_else(|e| panic!("{schema}: {e}"))
        .grammar;
    let c = Constraint::new(&g, Arc::new(TokenTrie::new(vocab)), Limits::default())
        .expect("constraint");
    let (mut valid, mut invalid) = (0, 0);
    for (text, value) in texts {
        let accepted = c
            .matcher()
            .and_then(|mut m| m.accepts_after(text.as_bytes()))
            .unwrap_or_else(|e| panic!("{schema}: {text}: {e}"));
        assert_eq!(
            accepted,
            validator.is_valid(&value),
            "{schema} {opts:?}: {text}"
        );
        valid += accepted as usize;
        invalid += !accepted as usize;
    }
    (valid, invalid)
}

/// `uniqueItems` over items drawn from a finite set (enums, booleans, integer ranges), compiled
/// as a set of written members: exactly the arrays the `jsonschema` crate validates, numbers
/// equal by value (`1` and `1.0` are duplicates), in both property orders and with whitespace.
#[test]
fn unique_items_over_finite_sets_match_the_validator() {
    let vocab = tiny_vocab("a");
    let schemas = [
        json!({"type": "array", "uniqueItems": true, "items": {"enum": ["red", "green", "blue"]}}),
        json!({"type": "array", "uniqueItems": true, "items": {"type": "boolean"}, "minItems": 2}),
        json!({"type": "array", "uniqueItems": true, "items": {"type": "integer", "minimum": 1, "exclusiveMaximum": 7, "multipleOf": 2}}),
        json!({"type": "array", "uniqueItems": true, "maxItems": 2, "items": {"enum": [1, "1", null, 2.5, true], "not": {"const": true}}}),
        json!({"uniqueItems": true, "items": {"$ref": "#/$defs/c"}, "$defs": {"c": {"enum": ["x", "y"]}}}),
    ];
    let values = [
        json!("red"),
        json!("blue"),
        json!("green"),
        json!(true),
        json!(false),
        json!(1),
        json!(1.0),
        json!(2),
        json!(4),
        json!(6),
        json!("1"),
        json!(null),
        json!(2.5),
        json!("x"),
        json!("y"),
    ];
    let mut instances = vec![json!([]), json!({}), json!("x")];
    instances.extend(arrays_of(&values, 2));
    for schema in schemas {
        for opts in both_property_orders() {
            // `1.0` written as such (serde_json writes it so), and with spaces.
            let texts = instances.iter().flat_map(|o| {
                [o.to_string(), o.to_string().replace(',', " , ")].map(|t| (t, o.clone()))
            });
            let (valid, _) = agree_with_validator(&schema, &opts, &vocab, texts);
            assert!(valid >= 4, "{schema}: only {valid} valid instances tried");
        }
    }
}

/// The default options with each property order: members in any order, and in the schema's.
fn both_property_orders() -> [Options; 2] {
    [PropertyOrder::Any, PropertyOrder::Schema].map(|order| Options {
        property_order: order,
        ..Options::default()
    })
}

/// `uniqueItems` over items that are not a finite set, kept by the matcher on the text:
/// exactly the arrays the `jsonschema` crate validates (numbers equal by value, strings after
/// escapes, objects whatever their member order; nested and positional items; both property
/// orders, with whitespace).
#[test]
fn distinct_items_match_the_validator() {
    let vocab = tiny_vocab("a");
    let schemas = [
        json!({"type": "array", "uniqueItems": true, "items": {"type": "string"}}),
        json!({"type": "array", "uniqueItems": true, "items": {"type": "number"}, "maxItems": 3}),
        json!({"type": "array", "uniqueItems": true}),
        json!({"type": "array", "uniqueItems": true, "items": {"type": "object", "properties": {"k": {"type": "string"}, "v": {"type": "integer"}}, "required": ["k"]}}),
        json!({"type": "array", "uniqueItems": true, "items": {"type": "array", "uniqueItems": true, "items": {"type": "integer"}}}),
        json!({"type": "array", "uniqueItems": true, "prefixItems": [{"type": "string"}], "items": {"type": ["string", "integer"]}}),
        json!({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": true, "items": {"$ref": "#/$defs/s"}}, "b": {"type": "array", "uniqueItems": true, "items": {"$ref": "#/$defs/s"}}}, "$defs": {"s": {"type": "string"}}}),
        json!({"anyOf": [{"type": "array", "uniqueItems": true, "items": {"type": "string"}}, {"type": "integer"}]}),
    ];
    let values = [
        json!("a"),
        json!("b"),
        json!("\\u0061"),
        json!(1),
        json!(1.0),
        json!(10),
        json!({"k": "a", "v": 1}),
        json!({"v": 1, "k": "a"}),
        json!({"k": "a"}),
        json!([1, 2]),
        json!([2, 1]),
        json!([1, 1]),
        json!(null),
    ];
    let mut instances = vec![
        json!([]),
        json!(3),
        json!({"a": ["x", "y"], "b": ["x", "y"]}),
        json!({"a": ["x", "x"], "b": ["y"]}),
        json!({"a": ["x"], "b": ["y", "y"]}),
        // The same item in two different arrays is no repeat.
        json!({"a": ["x"], "b": ["x"]}),
        json!({"a": [], "b": ["x", "y", "z"]}),
    ];
    instances.extend(arrays_of(&values, 3));
    for schema in schemas {
        for opts in both_property_orders() {
            // The escape written as such (`"\u0061"` is `"a"`), and with spaces; under schema
            // order, only objects in it.
            let texts = instances.iter().flat_map(|o| {
                let text = o.to_string().replace("\\\\u0061", "\\u0061");
                [text.clone(), text.replace(',', " , ")]
                    .map(|t| (serde_json::from_str(&t).unwrap(), t))
                    .into_iter()
                    .filter(|(v, _)| {
                        opts.property_order == PropertyOrder::Any || in_schema_order(v)
                    })
                    .map(|(v, t)| (t, v))
            });
            let (valid, invalid) = agree_with_validator(&schema, &opts, &vocab, texts);
            assert!(
                valid >= 4 && invalid >= 4,
                "{schema}: {valid} valid, {invalid} invalid"
            );
        }
    }
}

/// True if every object in `v` writes `k` before `v` (the schema order of the test schemas).
fn in_schema_order(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Object(m) => {
            let keys: Vec<&String> = m.keys().collect();
            let k = keys.iter().position(|x| *x == "k");
            let v2 = keys.iter().position(|x| *x == "v");
            !matches!((k, v2), (Some(a), Some(b)) if a > b) && m.values().all(in_schema_order)
        }
        serde_json::Value::Array(a) => a.iter().all(in_schema_order),
        _ => true,
    }
}

/// Masks under distinct items never let a repeat through: random walks over a vocabulary of
/// JSON pieces (tokens that close an item, close it and open the next, or close the array)
/// end valid, and no walk meets a dead end where an item can always be made longer.
#[test]
fn distinct_item_masks_never_allow_a_repeat() {
    let vocab = tiny_vocab("ab\"[],{}:k ");
    let eos = vocab.eos_ids()[0];
    let schemas = [
        json!({"type": "array", "uniqueItems": true, "maxItems": 5, "items": {"type": "string", "pattern": "^[ab]+$"}}),
        json!({"type": "array", "uniqueItems": true, "maxItems": 4, "items": {"type": "object", "properties": {"k": {"type": "string", "pattern": "^[ab]+$"}}, "required": ["k"], "additionalProperties": false}}),
    ];
    for (schema, ws) in schemas
        .iter()
        .flat_map(|s| [(s, Whitespace::Compact), (s, Whitespace::default())])
    {
        let validator = jsonschema::validator_for(schema).expect("valid schema");
        let c = constraint(ConstraintSpec::JsonSchema(schema.clone()), &vocab, ws);
        let mut rng = StdRng::seed_from_u64(11);
        let mut mask = TokenSet::new(vocab.len());
        let mut finished = 0;
        for walk in 0..300 {
            let mut m = c.matcher().unwrap();
            let mut text = String::new();
            for _ in 0..120 {
                m.compute_mask(&mut mask).unwrap();
                let allowed: Vec<u32> = mask.iter().collect();
                assert!(
                    !allowed.is_empty(),
                    "{schema}: walk {walk} stuck after {text}"
                );
                if mask.contains(eos) {
                    finished += 1;
                    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                    assert!(validator.is_valid(&v), "{schema}: {text}");
                    break;
                }
                // Half the time a token that closes something, to make repeats likely.
                let closing: Vec<u32> = allowed
                    .iter()
                    .copied()
                    .filter(|&t| vocab.token_bytes(t).iter().any(|b| b"\"]},".contains(b)))
                    .collect();
                let pool = if !closing.is_empty() && rng.random_bool(0.5) {
                    &closing
                } else {
                    &allowed
                };
                let t = pool[rng.random_range(0..pool.len())];
                m.commit(t).unwrap();
                text.push_str(std::str::from_utf8(vocab.token_bytes(t)).unwrap());
            }
        }
        assert!(finished >= 100, "{schema}: {finished} walks finished");
    }
}

/// `allOf` over object schemas whose patterns and `additionalProperties` differ: each keeps its
/// own rule for each key (declared, matched by its patterns, or left to its
/// `additionalProperties`), exactly as the `jsonschema` crate validates.
#[test]
fn object_schemas_with_patterns_in_all_of_match_the_validator() {
    let vocab = tiny_vocab("a");
    let schemas = [
        json!({"allOf": [
            {"patternProperties": {"^a": {"type": "integer"}}, "additionalProperties": false},
            {"properties": {"ab": {"minimum": 5}, "c": {"type": "string"}}, "patternProperties": {"b$": {"maximum": 10}}}
        ]}),
        json!({"type": "object", "minProperties": 2, "allOf": [
            {"patternProperties": {"^.{1,2}$": false}},
            {"patternProperties": {"a": true}, "additionalProperties": false},
            {"patternProperties": {"b": true}, "additionalProperties": false}
        ]}),
        json!({"allOf": [
            {"properties": {"x": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
            {"patternProperties": {"^x": {"minimum": 3}, "^y": {"maxLength": 2}}},
            {"patternProperties": {"^x": {"maximum": 9}}, "required": ["x"]}
        ]}),
    ];
    let keys = [
        "a", "ab", "abc", "b", "ba", "bab", "c", "x", "xy", "y", "yy", "abcd",
    ];
    let values = [
        json!(1),
        json!(7),
        json!(12),
        json!("s"),
        json!("long"),
        json!(null),
    ];
    let mut instances = vec![json!({}), json!([]), json!(1)];
    for (i, k) in keys.iter().enumerate() {
        for v in &values {
            instances.push(json!({ *k: v }));
            instances.push(json!({"x": 5, *k: v}));
            for k2 in keys.iter().skip(i + 1).step_by(2) {
                for v2 in values.iter().step_by(2) {
                    instances.push(json!({ *k: v, *k2: v2 }));
                }
            }
        }
    }
    let opts = Options {
        property_order: PropertyOrder::Any,
        ..Options::default()
    };
    for schema in schemas {
        let texts = instances.iter().map(|o| (o.to_string(), o.clone()));
        let (valid, invalid) = agree_with_validator(&schema, &opts, &vocab, texts);
        assert!(
            valid >= 5 && invalid >= 5,
            "{schema}: {valid} valid, {invalid} invalid"
        );
    }
}

/// A recursive `$ref` inside `allOf` (a tree whose nested nodes must also satisfy another
/// schema): the merge is unfolded once and becomes a rule where it recurs, exactly as the
/// `jsonschema` crate validates, at every depth tried.
#[test]
fn recursive_refs_inside_all_of_match_the_validator() {
    let vocab = tiny_vocab("a");
    let schemas = [
        json!({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {
            "v": {"type": "integer"},
            "kids": {"type": "array", "items": {"allOf": [{"$ref": "#/$defs/node"}, {"required": ["v"]}]}}
        }}}}),
        json!({"$defs": {"foo": {"type": "object", "properties": {
            "kid": {"allOf": [{"$ref": "#/$defs/foo"}, {"$ref": "#/$defs/small"}]},
            "v": {"type": "integer"}
        }}, "small": {"maxProperties": 1}}, "anyOf": [{"$ref": "#/$defs/foo"}, {"type": "null"}]}),
    ];
    let mut instances = vec![json!(null), json!({}), json!(1)];
    let leaves = [
        json!({}),
        json!({"v": 1}),
        json!({"v": "x"}),
        json!({"kid": null}),
    ];
    let mut level: Vec<serde_json::Value> = leaves.to_vec();
    for _ in 0..3 {
        let mut next = Vec::new();
        for (i, a) in level.iter().enumerate() {
            next.push(json!({"kids": [a]}));
            next.push(json!({"v": 2, "kids": [a, {"v": 3}]}));
            next.push(json!({"kid": a}));
            if i % 2 == 0 {
                next.push(json!({"kid": a, "v": 1}));
            }
        }
        instances.extend(next.iter().cloned());
        level = next.into_iter().step_by(3).collect();
    }
    // Unbounded, and unrolled to a depth (as generation does) deeper than any instance.
    for (schema, max_recursion) in schemas.iter().flat_map(|s| [(s, None), (s, Some(6))]) {
        let opts = Options {
            property_order: PropertyOrder::Any,
            max_recursion,
            ..Options::default()
        };
        let texts = instances.iter().map(|o| (o.to_string(), o.clone()));
        let (valid, invalid) = agree_with_validator(schema, &opts, &vocab, texts);
        assert!(
            valid >= 5 && invalid >= 5,
            "{schema}: {valid} valid, {invalid} invalid"
        );
    }
}
