//! `allOf` as one schema: merges two schema objects into one whose instances are exactly those
//! valid under both, or refuses (naming the keyword) where that cannot be written as one schema.

use super::objects::VIEWS;
use crate::numeric::Decimal;
use crate::GrammarError;
use serde_json::{json, Map, Value};

pub type Obj = Map<String, Value>;

/// JSON Schema keywords with validation meaning. Every other key (`title`, `$defs`,
/// `examples`, vendor extensions...) is an annotation to the specification and is ignored.
pub const VALIDATION: &[&str] = &[
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "items",
    "prefixItems",
    "additionalItems",
    "minItems",
    "maxItems",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "$ref",
    "$dynamicRef",
    "$recursiveRef",
    "unevaluatedProperties",
    "unevaluatedItems",
    "nullable",
    VIEWS,
];

/// True if the key constrains instances.
pub fn is_validation(k: &str) -> bool {
    VALIDATION.contains(&k)
}

/// Value equality as JSON Schema defines it (1 == 1.0).
pub fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            match (
                Decimal::parse(&x.to_string()),
                Decimal::parse(&y.to_string()),
            ) {
                (Some(x), Some(y)) => x == y,
                _ => x == y,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

/// Rewrites draft-4 boolean `exclusiveMinimum`/`exclusiveMaximum` and OpenAPI `nullable` into
/// their 2020-12 forms, and drops the parts of `if`/`then`/`else` that mean nothing: all of
/// them where the draft has no `conditionals` (before draft 7 they are unknown keywords, so
/// annotations), else those without the others in the same object (`then`/`else` without
/// `if`, `if` alone unless `unevaluated*` sees what it evaluates), which a merge would
/// otherwise pair with another object's (borrowing when there is nothing to rewrite).
pub fn normalize(m: &Obj, conditionals: bool) -> std::borrow::Cow<'_, Obj> {
    let has_if = m.contains_key("if");
    let has_branch = m.contains_key("then") || m.contains_key("else");
    // A lone `if` still evaluates members and items for `unevaluated*` beside it.
    let lone_if = has_if && !has_branch && !m.keys().any(|k| k.starts_with("unevaluated"));
    let unpaired: &[&str] = match (has_if || has_branch, conditionals) {
        (false, _) => &[],
        (true, false) => &["if", "then", "else"],
        (true, true) if lone_if => &["if"],
        (true, true) if !has_if => &["then", "else"],
        (true, true) => &[],
    };
    let needs = m.contains_key("nullable")
        || m.get("exclusiveMinimum").is_some_and(Value::is_boolean)
        || m.get("exclusiveMaximum").is_some_and(Value::is_boolean)
        || !unpaired.is_empty();
    if !needs {
        return std::borrow::Cow::Borrowed(m);
    }
    let mut m = m.clone();
    for k in unpaired {
        m.remove(*k);
    }
    for (ex, bound) in [
        ("exclusiveMinimum", "minimum"),
        ("exclusiveMaximum", "maximum"),
    ] {
        if let Some(Value::Bool(b)) = m.get(ex).cloned() {
            m.remove(ex);
            if b {
                if let Some(v) = m.remove(bound) {
                    m.insert(ex.into(), v);
                }
            }
        }
    }
    if let Some(Value::Bool(true)) = m.get("nullable").cloned() {
        m.remove("nullable");
        if let Some(t) = m.get("type").cloned() {
            let mut types: Vec<Value> = match t {
                Value::Array(a) => a,
                t => vec![t],
            };
            if !types.contains(&json!("null")) {
                types.push(json!("null"));
            }
            m.insert("type".into(), Value::Array(types));
        }
    } else {
        m.remove("nullable");
    }
    std::borrow::Cow::Owned(m)
}

fn type_set(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .filter_map(|x| x.as_str().map(String::from))
            .collect(),
        _ => vec![],
    }
}

fn intersect_types(a: &Value, b: &Value) -> Value {
    let (ta, tb) = (type_set(a), type_set(b));
    let has = |set: &[String], t: &str| set.iter().any(|x| x == t);
    let mut out = Vec::new();
    for t in [
        "null", "boolean", "object", "array", "string", "number", "integer",
    ] {
        let keep = match t {
            "integer" => {
                (has(&ta, "integer") || has(&ta, "number"))
                    && (has(&tb, "integer") || has(&tb, "number"))
                    && !(has(&ta, "number") && has(&tb, "number"))
            }
            _ => has(&ta, t) && has(&tb, t),
        };
        if keep {
            out.push(json!(t));
        }
    }
    Value::Array(out)
}

fn num(v: &Value) -> Option<Decimal> {
    v.as_number().and_then(|n| Decimal::parse(&n.to_string()))
}

fn pick_num(a: &Value, b: &Value, larger: bool) -> Value {
    match (num(a), num(b)) {
        (Some(x), Some(y)) => {
            let a_bigger = x.cmp_value(&y) == std::cmp::Ordering::Greater;
            if a_bigger == larger {
                a.clone()
            } else {
                b.clone()
            }
        }
        _ => a.clone(),
    }
}

fn all_of(a: &Value, b: &Value) -> Value {
    match (a, b) {
        (Value::Bool(true), x) | (x, Value::Bool(true)) => x.clone(),
        (Value::Bool(false), _) | (_, Value::Bool(false)) => Value::Bool(false),
        _ if a == b => a.clone(),
        _ => json!({"allOf": [a, b]}),
    }
}

/// The reason given when two applicators of the same kind meet in a merge.
pub const CONFLICT: &str = "two different values of this applicator in allOf";

/// Largest number of branches an `anyOf` x `anyOf` product may have.
const MAX_ANYOF_PRODUCT: usize = 64;

/// Merges schema objects `a` and `b` (both already free of `$ref` and `allOf`... or not: those
/// are carried along and expanded later). Returns `false` when the two provably contradict.
pub fn merge(a: &Obj, b: &Obj, ptr: &str) -> Result<Value, GrammarError> {
    // Conditionals kept: a draft without them has them dropped where the merged schema is
    // compiled (`Compiler::object_parts`).
    let a = normalize(a, true).into_owned();
    let b = normalize(b, true).into_owned();
    for key in ["unevaluatedProperties", "unevaluatedItems"] {
        if a.contains_key(key) || b.contains_key(key) {
            return Err(GrammarError::unsupported(
                key,
                ptr,
                "unevaluated* inside allOf/anyOf/$ref combinations",
            ));
        }
    }
    let mut out = a.clone();
    object_keywords(&a, &b, &mut out);
    array_keywords(&a, &b, &mut out);
    for (k, vb) in &b {
        if matches!(
            k.as_str(),
            "properties" | "additionalProperties" | "patternProperties" | "prefixItems" | "items"
        ) && !(k == "items" && (va_is_array(&a) || va_is_array(&b)))
            || k == VIEWS
        {
            continue;
        }
        let Some(va) = a.get(k) else {
            out.insert(k.clone(), vb.clone());
            continue;
        };
        if !is_validation(k) {
            continue;
        }
        let merged = match k.as_str() {
            "type" => intersect_types(va, vb),
            "enum" => {
                let (Some(x), Some(y)) = (va.as_array(), vb.as_array()) else {
                    return Err(GrammarError::invalid(ptr, "enum must be an array"));
                };
                Value::Array(
                    x.iter()
                        .filter(|v| y.iter().any(|w| json_equal(v, w)))
                        .cloned()
                        .collect(),
                )
            }
            "const" => {
                if json_equal(va, vb) {
                    va.clone()
                } else {
                    return Ok(Value::Bool(false));
                }
            }
            "required" => {
                let mut r = va.as_array().cloned().unwrap_or_default();
                for x in vb.as_array().into_iter().flatten() {
                    if !r.contains(x) {
                        r.push(x.clone());
                    }
                }
                Value::Array(r)
            }
            "minimum" | "exclusiveMinimum" | "minLength" | "minItems" | "minProperties"
            | "minContains" => pick_num(va, vb, true),
            "maximum" | "exclusiveMaximum" | "maxLength" | "maxItems" | "maxProperties"
            | "maxContains" => pick_num(va, vb, false),
            "uniqueItems" => {
                Value::Bool(va.as_bool().unwrap_or(false) || vb.as_bool().unwrap_or(false))
            }
            "pattern" => {
                let mut list: Vec<Value> = match va {
                    Value::Array(x) => x.clone(),
                    x => vec![x.clone()],
                };
                match vb {
                    Value::Array(y) => list.extend(y.iter().cloned()),
                    y => list.push(y.clone()),
                }
                list.dedup();
                if list.len() == 1 {
                    list.pop().unwrap_or(Value::Null)
                } else {
                    Value::Array(list)
                }
            }
            "items"
            | "additionalItems"
            | "propertyNames"
            | "unevaluatedProperties"
            | "unevaluatedItems"
                if !va.is_array() && !vb.is_array() =>
            {
                all_of(va, vb)
            }
            "anyOf" => {
                let (x, y) = (
                    va.as_array().cloned().unwrap_or_default(),
                    vb.as_array().cloned().unwrap_or_default(),
                );
                if x.len() * y.len() > MAX_ANYOF_PRODUCT {
                    return Err(GrammarError::unsupported(
                        "anyOf",
                        ptr,
                        format!(
                            "combining anyOf lists of {} and {} branches",
                            x.len(),
                            y.len()
                        ),
                    ));
                }
                let mut prod = Vec::new();
                for p in &x {
                    for q in &y {
                        prod.push(all_of(p, q));
                    }
                }
                Value::Array(prod)
            }
            "allOf" => {
                let mut v = va.as_array().cloned().unwrap_or_default();
                v.extend(vb.as_array().cloned().unwrap_or_default());
                Value::Array(v)
            }
            "not" => json!({"anyOf": [va, vb]}),
            "dependentRequired" => {
                let mut m = va.as_object().cloned().unwrap_or_default();
                for (key, req) in vb.as_object().into_iter().flatten() {
                    let mut list = m
                        .get(key)
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    list.extend(req.as_array().cloned().unwrap_or_default());
                    m.insert(key.clone(), Value::Array(list));
                }
                Value::Object(m)
            }
            "dependentSchemas" => {
                let mut m = va.as_object().cloned().unwrap_or_default();
                for (key, s) in vb.as_object().into_iter().flatten() {
                    let merged = match m.get(key) {
                        Some(prev) => all_of(prev, s),
                        None => s.clone(),
                    };
                    m.insert(key.clone(), merged);
                }
                Value::Object(m)
            }
            "if" | "then" | "else" | "oneOf" | "$ref" | "dependencies" if !json_equal(va, vb) => {
                // Two of these cannot be folded into one schema; the caller intersects the
                // compiled branches instead.
                return Err(GrammarError::unsupported(k, ptr, CONFLICT));
            }
            _ if json_equal(va, vb) => va.clone(),
            "multipleOf" => match (num(va), num(vb)) {
                (Some(x), Some(y)) if x.is_integer() && y.is_integer() => {
                    let (p, q): (u128, u128) =
                        (x.int.parse().unwrap_or(0), y.int.parse().unwrap_or(0));
                    let g = gcd(p, q);
                    if g == 0 {
                        return Err(GrammarError::invalid(ptr, "multipleOf must be positive"));
                    }
                    json!((p / g * q) as u64)
                }
                _ => {
                    return Err(GrammarError::unsupported(
                        "multipleOf",
                        ptr,
                        "two different non-integer multipleOf values in allOf",
                    ))
                }
            },
            _ => {
                return Err(GrammarError::unsupported(
                    k,
                    ptr,
                    "two different values of this keyword in allOf",
                ))
            }
        };
        out.insert(k.clone(), merged);
    }
    // `then`/`else` of `b` without its `if` have no effect; carried above when `a` has `if`.
    if !a.contains_key("if") {
        for key in ["then", "else"] {
            if let Some(v) = b.get(key) {
                out.insert(key.into(), v.clone());
            }
        }
    }
    Ok(Value::Object(out))
}

fn va_is_array(m: &Obj) -> bool {
    m.get("items").is_some_and(Value::is_array)
}

/// prefixItems / items together: `b.items` also constrains `a`'s prefix positions.
fn array_keywords(a: &Obj, b: &Obj, out: &mut Obj) {
    if va_is_array(a) || va_is_array(b) {
        return; // draft-7 tuple form: merged keyword by keyword below
    }
    let (pa, pb) = (
        a.get("prefixItems").and_then(Value::as_array),
        b.get("prefixItems").and_then(Value::as_array),
    );
    let (ia, ib) = (a.get("items"), b.get("items"));
    if pa.is_some() || pb.is_some() {
        let rest_a = ia.cloned().unwrap_or(Value::Bool(true));
        let rest_b = ib.cloned().unwrap_or(Value::Bool(true));
        let n = pa.map_or(0, Vec::len).max(pb.map_or(0, Vec::len));
        let at = |p: Option<&Vec<Value>>, rest: &Value, i: usize| {
            p.and_then(|p| p.get(i)).cloned().unwrap_or(rest.clone())
        };
        let prefix: Vec<Value> = (0..n)
            .map(|i| all_of(&at(pa, &rest_a, i), &at(pb, &rest_b, i)))
            .collect();
        out.insert("prefixItems".into(), Value::Array(prefix));
    }
    match (ia, ib) {
        (Some(x), Some(y)) => {
            out.insert("items".into(), all_of(x, y));
        }
        (None, Some(y)) => {
            out.insert("items".into(), y.clone());
        }
        _ => {}
    }
}

fn gcd(a: u128, b: u128) -> u128 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The keywords that say which schema each key of an object is validated by.
const KEY_KEYWORDS: [&str; 3] = ["properties", "additionalProperties", "patternProperties"];

/// properties / additionalProperties / patternProperties together: a key declared on one side
/// only must also satisfy the other side's schema for undeclared keys. Where patterns make that
/// more than one triple can say, both sides are kept as views (see `VIEWS`).
fn object_keywords(a: &Obj, b: &Obj, out: &mut Obj) {
    let has = |m: &Obj| KEY_KEYWORDS.iter().any(|k| m.contains_key(*k)) || m.contains_key(VIEWS);
    if !has(b) {
        return;
    }
    if !has(a) {
        for k in KEY_KEYWORDS.iter().chain([&VIEWS]) {
            if let Some(v) = b.get(*k) {
                out.insert(k.to_string(), v.clone());
            }
        }
        return;
    }
    if a.contains_key("patternProperties")
        || b.contains_key("patternProperties")
        || a.contains_key(VIEWS)
        || b.contains_key(VIEWS)
    {
        let same = a.get("patternProperties") == b.get("patternProperties");
        let one_sided_simple = |x: &Obj, y: &Obj| {
            x.contains_key("patternProperties")
                && !y.contains_key("patternProperties")
                && !y.contains_key("additionalProperties")
                && !x.contains_key("additionalProperties")
        };
        let views = a.contains_key(VIEWS) || b.contains_key(VIEWS);
        if views || !(same || one_sided_simple(a, b) || one_sided_simple(b, a)) {
            // Each side keeps its own rule for keys (see `VIEWS`).
            let mut list = Vec::new();
            for m in [a, b] {
                match m.get(VIEWS) {
                    Some(Value::Array(v)) => list.extend(v.iter().cloned()),
                    _ => {
                        let view: Obj = KEY_KEYWORDS
                            .iter()
                            .filter_map(|k| Some((k.to_string(), m.get(*k)?.clone())))
                            .collect();
                        list.push(Value::Object(view));
                    }
                }
            }
            for k in KEY_KEYWORDS {
                out.remove(k);
            }
            out.insert(VIEWS.into(), Value::Array(list));
            return;
        }
        if let Some(pp) = a
            .get("patternProperties")
            .or_else(|| b.get("patternProperties"))
        {
            out.insert("patternProperties".into(), pp.clone());
        }
    }
    let empty = Obj::new();
    let pa = a
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let pb = b
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let add_a = a
        .get("additionalProperties")
        .cloned()
        .unwrap_or(Value::Bool(true));
    let add_b = b
        .get("additionalProperties")
        .cloned()
        .unwrap_or(Value::Bool(true));
    let mut props = Obj::new();
    for (k, v) in pa {
        props.insert(k.clone(), all_of(v, pb.get(k).unwrap_or(&add_b)));
    }
    for (k, v) in pb {
        if !pa.contains_key(k) {
            props.insert(k.clone(), all_of(&add_a, v));
        }
    }
    out.insert("properties".into(), Value::Object(props));
    let add = all_of(&add_a, &add_b);
    if add != Value::Bool(true) {
        out.insert("additionalProperties".into(), add);
    } else {
        out.remove("additionalProperties");
    }
}
