//! Negations rewritten as positive schemas, where the rewrite is exact.
//!
//! A `not` is otherwise compiled as a complement of automata, which is exact but, for object
//! values, has to spell out every serialization of the negated objects (members in any order,
//! nested values to a depth): small object schemas became tens of thousands of DFA states. Two
//! forms need no complement at all:
//! - `not: {not: S}` is `S`, and `not: {anyOf: [A, B]}` is `allOf` of the negations;
//! - `not` of an object schema that only names `properties`, `required` and `type: object`
//!   holds exactly when some named property is present with a value its schema rejects, or
//!   some required name is missing (or, with `type: object`, the value is no object). That is
//!   an `anyOf` of plain object schemas; "a required name is missing" is a presence rule
//!   (`not: {required: [...]}`, see [`super::presence`]), left to the complement where an
//!   object's other keywords rule presence rules out.

use super::*;

/// The JSON types other than object, as a `type` list.
const NOT_OBJECT: [&str; 5] = ["null", "boolean", "number", "string", "array"];

/// A schema without a top-level complement equal to `not: s`, or `None` if no exact rewrite
/// is known. The rewrite names only properties `may_name` allows (in schema order, the ones
/// declared beside it: naming another would move it among the declared ones).
pub(super) fn negation_of(s: &Value, may_name: impl Fn(&str) -> bool) -> Option<Value> {
    negate(s, &may_name)
}

fn negate(s: &Value, may_name: &dyn Fn(&str) -> bool) -> Option<Value> {
    let o = s.as_object()?;
    let keys: Vec<&str> = o
        .keys()
        .map(String::as_str)
        .filter(|k| is_validation(k))
        .collect();
    if keys == ["not"] {
        return Some(o["not"].clone());
    }
    // `not: {anyOf: [A, B]}` is `allOf: [not A, not B]` (`oneOf` merged in `allOf` arrives so).
    if keys == ["anyOf"] {
        let negated = o["anyOf"]
            .as_array()?
            .iter()
            .map(|b| negate(b, may_name))
            .collect::<Option<Vec<Value>>>()?;
        return Some(json!({ "allOf": negated }));
    }
    let plain = |k: &&str| matches!(*k, "properties" | "required" | "type");
    // `required` alone is a presence rule's (its rewrite would be itself).
    if keys.is_empty() || keys == ["required"] || !keys.iter().all(plain) {
        return None;
    }
    let objects_only = match o.get("type") {
        None => false,
        Some(t) if t == "object" || *t == json!(["object"]) => true,
        Some(_) => return None,
    };
    let mut branches = Vec::new();
    if let Some(p) = o.get("properties") {
        for (name, sub) in p.as_object()? {
            if !may_name(name) {
                return None;
            }
            if !accepts_everything(sub) {
                branches.push(json!({"required": [name], "properties": {name: {"not": sub}}}));
            }
        }
    }
    match o.get("required") {
        None => {}
        Some(Value::Array(names)) if names.iter().all(Value::is_string) => {
            if !names.iter().all(|n| n.as_str().is_some_and(may_name)) {
                return None;
            }
            branches.push(json!({"not": {"required": names}}))
        }
        // Left to the general path, which reports the malformed keyword.
        Some(_) => return None,
    }
    let objects = match branches.is_empty() {
        true => Value::Bool(false),
        false => json!({"type": "object", "anyOf": branches}),
    };
    Some(match objects_only {
        true => json!({"anyOf": [{"type": NOT_OBJECT}, objects]}),
        false => objects,
    })
}

/// `m` with `extra` added to its `allOf` (the list created if there is none).
pub(super) fn with_all_of(mut m: Obj, extra: impl IntoIterator<Item = Value>) -> Value {
    let mut list = match m.remove("allOf") {
        Some(Value::Array(l)) => l,
        Some(other) => vec![json!({"allOf": other})],
        None => Vec::new(),
    };
    list.extend(extra);
    m.insert("allOf".into(), Value::Array(list));
    Value::Object(m)
}
