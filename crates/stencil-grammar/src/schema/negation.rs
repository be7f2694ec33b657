//! Negations rewritten as positive schemas, where the rewrite is exact.
//!
//! A `not` is otherwise compiled as a complement of automata, which is exact but, for object
//! and array values, has to spell out every serialization of the negated values (members in
//! any order, nested values to a depth): small object schemas became tens of thousands of DFA
//! states, and a complement of a recursive schema cannot be built at all. The rewrite pushes
//! the negation down to where a complement is cheap (scalars) or not needed:
//! - `not: {not: S}` is `S`; `not` of `anyOf` is `allOf` of the negations and `not` of `allOf`
//!   (or of several independent keywords of one schema object) the `anyOf`;
//!   `not: {if: C, then: T, else: E}` is `(C and not T) or (not C and not E)`;
//! - the value is of a type the schema does not allow, or of a type it allows but rejected by
//!   that type's keywords: an object with some named property present with a value its schema
//!   rejects, or some required name missing (a presence rule, see [`super::presence`]), or too
//!   few or too many members; an array with an item the `items` schema rejects (`contains` of
//!   its negation), none `contains` accepts, or too few or too many items; a scalar rejected by
//!   the scalar keywords, whose complement among scalars is small and stays a `not`.
//!
//! Each nested `not` is compiled the same way, so a negation fails over to a complement only
//! where one of its parts has no rewrite; a complement of objects or arrays is then what the
//! callers that must avoid one (`oneOf` over recursive branches) detect and refuse.
//!
//! `$ref`s are followed (a recursive target's negation may recur once inside itself, where the
//! `allOf` merges it rebuilds become rules). In schema order, property names the rewrite
//! mentions are declared beside the context (declared members come first, in their order),
//! except where the context lists its values (`enum`/`const`), which keep their own member
//! order: those are left to the complement.

use super::*;

/// Keywords of one schema object that constrain values of one scalar type.
const SCALAR_KEYWORDS: [&str; 9] = [
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
];

/// Applicator keywords that are conjuncts of their schema object (a schema object is valid
/// when each of these, and its other keywords, are), grouped where keywords act together.
const CONJUNCT_GROUPS: [&[&str]; 9] = [
    &["allOf"],
    &["anyOf"],
    &["oneOf"],
    &["not"],
    &["if", "then", "else"],
    &["$ref"],
    &["dependentSchemas"],
    &["dependentRequired"],
    &["dependencies"],
];

impl Compiler<'_> {
    /// The negation of `not` (a `not` keyword's schema, or an `if` condition) beside the
    /// keywords of `context`, as positive schemas to add to its `allOf` (see
    /// [`negation_of`]), or `None` where there is no exact rewrite.
    pub(super) fn negation_rewrite(
        &self,
        not: &Value,
        context: &Obj,
        ptr: &str,
    ) -> Result<Option<NegationRewrite>, GrammarError> {
        let (target, via) = self.negated_target(not, ptr)?;
        let followed = std::cell::RefCell::new(via);
        let resolve = |b: &Value| self.follow_negated(b, ptr, &followed);
        let named = std::cell::RefCell::new(Vec::new());
        let record = |n: &str| named.borrow_mut().push(n.to_string());
        let names = Names {
            named: &record,
            resolve: &resolve,
            conditionals: self.draft.conditionals,
        };
        let Some(positive) = negation_of(&target, &names) else {
            return Ok(None);
        };
        let Some(declared) = self.declare_named(context, named.into_inner()) else {
            return Ok(None);
        };
        Ok(Some(NegationRewrite {
            schemas: declared.into_iter().chain([positive]).collect(),
            followed: followed.into_inner(),
        }))
    }

    /// `compile` with `followed` marked as being negated (see `negated_target`).
    pub(super) fn with_negated<T>(
        &mut self,
        followed: Vec<String>,
        compile: impl FnOnce(&mut Self) -> T,
    ) -> T {
        let depth = self.negated_refs.len();
        self.negated_refs.extend(followed);
        let out = compile(self);
        self.negated_refs.truncate(depth);
        out
    }

    /// The schema a `not` negates, its bare `$ref`s followed (a `$ref` with siblings, where
    /// they count, is a conjunct the rewrite splits off), and the targets followed. A target
    /// is followed inside its own negation at most [`NEGATION_NESTING`] times.
    fn negated_target(&self, not: &Value, ptr: &str) -> Result<(Value, Vec<String>), GrammarError> {
        let mut via: Vec<String> = Vec::new();
        let mut at = not;
        let mut at_ptr = ptr.to_string();
        while let Some(r) = at.get("$ref") {
            let alone = at
                .as_object()
                .is_some_and(|o| o.keys().all(|k| k == "$ref" || !is_validation(k)));
            if !(alone || self.draft.ref_hides_siblings) || via.len() > 64 {
                break;
            }
            let (target, tptr) = self.resolve(r, &at_ptr)?;
            let nested = self.negated_refs.iter().filter(|t| **t == tptr).count();
            if nested >= NEGATION_NESTING || via.contains(&tptr) {
                break;
            }
            via.push(tptr.clone());
            at = target;
            at_ptr = tptr;
        }
        Ok((at.clone(), via))
    }

    /// A `$ref` branch a negation rewrites in place: its target, unless that is already
    /// being negated (`followed` holds the targets this rewrite went through).
    fn follow_negated(
        &self,
        b: &Value,
        ptr: &str,
        followed: &std::cell::RefCell<Vec<String>>,
    ) -> Option<Value> {
        let (target, via) = self.negated_target(b, ptr).ok()?;
        let mut seen = followed.borrow_mut();
        if via.is_empty() || via.iter().any(|t| seen.contains(t)) {
            return None;
        }
        seen.extend(via);
        Some(target)
    }

    /// The property names a negation's rewrite beside `m` names that `m` does not declare,
    /// declared (`true`: no constraint, `allOf` keeps `m`'s rule for other keys), in schema
    /// order only: there declared members come first, in their order, and a rewrite naming
    /// an undeclared one would move it among them.
    /// `None` where declaring would change what `m` accepts: `m` lists its values (`enum`,
    /// `const`), written with members in their own order, which a declared member would
    /// have to precede.
    fn declare_named(&self, m: &Obj, named: Vec<String>) -> Option<Option<Value>> {
        if self.opts.property_order == crate::PropertyOrder::Any {
            return Some(None);
        }
        let declared = m.get("properties").and_then(Value::as_object);
        let missing: serde_json::Map<String, Value> = named
            .into_iter()
            .filter(|n| !declared.is_some_and(|d| d.contains_key(n)))
            .map(|n| (n, Value::Bool(true)))
            .collect();
        if missing.is_empty() {
            return Some(None);
        }
        if m.contains_key("enum") || m.contains_key("const") {
            return None;
        }
        Some(Some(json!({ "properties": missing })))
    }
}

/// How many times the negation of one `$ref` target may be nested in itself. Twice lets a
/// recursive schema's negation recur once: the second round rebuilds the `allOf` merges of
/// the first, which `merged_parts` then turns into rules (a recursive negation); past that
/// the negation is left to the complement, which refuses recursive targets.
const NEGATION_NESTING: usize = 2;

/// A negation rewritten (see [`Compiler::negation_rewrite`]).
pub(super) struct NegationRewrite {
    /// Schemas whose conjunction with the context is the context without the negated schema.
    pub(super) schemas: Vec<Value>,
    /// The `$ref` targets the rewrite went through.
    pub(super) followed: Vec<String>,
}

/// A schema without a top-level complement of objects or arrays equal to `not: s`, or `None`
/// if no exact rewrite is known (or a complement is as small: scalars, presence rules).
/// Nested negations are left as `not` for the compiler to rewrite in turn (see [`Names`]:
/// the caller declares the names it mentions in schema order). A top-level `$ref` must have
/// been resolved by the caller (with siblings, it is a conjunct the rewrite splits off).
fn negation_of(s: &Value, names: &Names<'_>) -> Option<Value> {
    if scalars_only(s) || required_only_branches(s) {
        // The complement is small and built per type (a rewrite would give back a schema of
        // the same form, with its own `not`).
        return None;
    }
    negate(s, names, true)
}

/// What a rewrite tells its caller and asks of it: the property names it mentions
/// (`named`), a branch's bare `$ref` followed (`resolve`, `None`: not followed), and whether
/// the draft defines `if`/`then`/`else`.
struct Names<'f> {
    named: &'f dyn Fn(&str),
    resolve: &'f dyn Fn(&Value) -> Option<Value>,
    conditionals: bool,
}

/// True if `s` is an `anyOf` of `required` lists (or of such `anyOf`s): its negation is a
/// presence rule's (and a rewrite's `allOf` of negated lists would be merged back into an
/// `anyOf` of the same lists).
fn required_only_branches(s: &Value) -> bool {
    let only = |o: &Obj, key: &str| o.keys().all(|k| k == key || !is_validation(k));
    let Some(o) = s.as_object() else {
        return false;
    };
    match o.get("anyOf") {
        Some(Value::Array(l)) if only(o, "anyOf") => l.iter().all(|b| {
            required_only_branches(b)
                || b.as_object()
                    .is_some_and(|b| b.contains_key("required") && only(b, "required"))
        }),
        _ => false,
    }
}

/// True if `s` allows no object and no array, by its `type`, `enum`/`const` or branches.
fn scalars_only(s: &Value) -> bool {
    let Some(o) = s.as_object() else {
        return false;
    };
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = o.get(key) {
            if branches.iter().all(scalars_only) {
                return true;
            }
        }
    }
    let types = possible_types(o);
    !types[OBJECT] && !types[ARRAY]
}

/// `not: s` rewritten; `top` when the result replaces a `not` (a nested result may keep a
/// `not` of the same form, which is then compiled as the top of its own rewrite).
fn negate(s: &Value, names: &Names<'_>, top: bool) -> Option<Value> {
    if !top && scalars_only(s) {
        let types = possible_types(s.as_object()?);
        let missing: Vec<&str> = (0..6).filter(|&t| !types[t]).map(|t| TYPES[t]).collect();
        let present: Vec<&str> = (0..6).filter(|&t| types[t]).map(|t| TYPES[t]).collect();
        let other_types = (!missing.is_empty()).then(|| json!({ "type": missing }));
        let failing = json!({"type": present, "not": s});
        return Some(
            json!({ "anyOf": other_types.into_iter().chain([failing]).collect::<Vec<_>>() }),
        );
    }
    let o = match s {
        Value::Bool(b) => return Some(Value::Bool(!b)),
        Value::Object(o) => normalize(o, names.conditionals),
        _ => return None,
    };
    let o: &Obj = &o;
    if o.keys().any(|k| k.starts_with("unevaluated")) {
        // Depends on what the applicators beside it evaluate: no keyword-wise split.
        return None;
    }
    let keys: Vec<&str> = o
        .keys()
        .map(String::as_str)
        .filter(|k| is_validation(k))
        .collect();
    if keys.is_empty() {
        return Some(Value::Bool(false));
    }
    // `required` alone is a presence rule's (its rewrite would contain itself).
    if keys == ["required"] {
        return match top {
            true => None,
            // In an `anyOf` of one branch: a `not` beside another in an `allOf` would be
            // merged into one `not` of both, which is what is being rewritten.
            false => {
                Some(json!({"anyOf": [{"type": "object", "not": {"required": o["required"]}}]}))
            }
        };
    }
    let not = |v: &Value| json!({ "not": v });
    let list = |k: &str| o.get(k).and_then(Value::as_array);
    if keys == ["not"] {
        return Some(o["not"].clone());
    }
    if keys == ["anyOf"] {
        // Each negation rewritten here, not left as `not`: `allOf` would merge the `not`s
        // back into this very `anyOf`.
        let negated = list("anyOf")?
            .iter()
            .map(|b| match b.get("$ref") {
                Some(_) => negate(&(names.resolve)(b)?, names, false),
                None => negate(b, names, false),
            })
            .collect::<Option<Vec<_>>>()?;
        return Some(json!({ "allOf": negated }));
    }
    if keys == ["allOf"] {
        return Some(json!({ "anyOf": list("allOf")?.iter().map(not).collect::<Vec<_>>() }));
    }
    if keys.iter().all(|k| ["if", "then", "else"].contains(k)) {
        let cond = o.get("if")?;
        let branch = |k: &str| not(o.get(k).unwrap_or(&Value::Bool(true)));
        return Some(json!({"anyOf": [
            {"allOf": [cond, branch("then")]},
            {"allOf": [not(cond), branch("else")]},
        ]}));
    }
    if let Some(dependent) = dependencies_negation(o, &keys) {
        return dependent;
    }
    // Several independent conjuncts: the value fails one of them.
    let groups: Vec<&[&str]> = CONJUNCT_GROUPS
        .into_iter()
        .filter(|g| g.iter().any(|k| o.contains_key(*k)))
        .collect();
    if !groups.is_empty() {
        let own: Obj = o
            .iter()
            .filter(|(k, _)| !groups.iter().any(|g| g.contains(&k.as_str())))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut conjuncts: Vec<Value> = Vec::new();
        if own.keys().any(|k| is_validation(k)) {
            conjuncts.push(Value::Object(own));
        }
        for g in &groups {
            let part: Obj = g
                .iter()
                .filter_map(|k| Some((k.to_string(), o.get(*k)?.clone())))
                .collect();
            conjuncts.push(Value::Object(part));
        }
        if conjuncts.len() < 2 {
            // One applicator alone without a rewrite (`oneOf`, `$ref`...).
            return None;
        }
        return Some(json!({ "anyOf": conjuncts.iter().map(not).collect::<Vec<_>>() }));
    }
    by_type(o, names.named)
}

/// `not` of a schema of only `dependentRequired`/`dependencies`/`dependentSchemas`: an
/// object with some trigger name present and its dependency failing. `None` if `keys` has
/// others; `Some(None)` where the form is malformed (left to the general path to report).
fn dependencies_negation(o: &Obj, keys: &[&str]) -> Option<Option<Value>> {
    let deps = ["dependentRequired", "dependentSchemas", "dependencies"];
    if keys.len() != 1 || !deps.contains(&keys[0]) {
        return None;
    }
    let Some(map) = o[keys[0]].as_object() else {
        return Some(None);
    };
    let mut branches = Vec::new();
    for (name, dep) in map {
        let failing = match dep {
            Value::Array(names) => json!({"required": names}),
            schema => schema.clone(),
        };
        branches.push(json!({"required": [name], "not": failing}));
    }
    Some(Some(match branches.is_empty() {
        true => Value::Bool(false),
        false => json!({"type": "object", "anyOf": branches}),
    }))
}

/// `not` of a schema object without applicators, type by type: a value of a type the schema
/// does not allow, or one its type's keywords reject.
fn by_type(o: &Obj, named: &dyn Fn(&str)) -> Option<Value> {
    const KNOWN: [&str; 16] = [
        "type",
        "enum",
        "const",
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "additionalProperties",
        "patternProperties",
        "propertyNames",
        "items",
        "contains",
        "minItems",
        "maxItems",
        "prefixItems",
        "uniqueItems",
    ];
    if o.keys().any(|k| {
        is_validation(k) && !KNOWN.contains(&k.as_str()) && !SCALAR_KEYWORDS.contains(&k.as_str())
    }) {
        // A keyword this rewrite does not model (or an internal one): left to the complement.
        return None;
    }
    let types = possible_types(o);
    let constants = constants(o);
    if constants
        .iter()
        .flatten()
        .any(|v| v.is_object() || v.is_array())
    {
        // The complement of a finite set of objects or arrays has no plain form.
        return None;
    }
    let mut out: Vec<Value> = Vec::new();
    let missing: Vec<&str> = (0..6).filter(|&t| !types[t]).map(|t| TYPES[t]).collect();
    if !missing.is_empty() {
        out.push(json!({ "type": missing }));
    }
    if types[OBJECT] {
        out.extend(object_failures(o, named)?);
    }
    if types[ARRAY] {
        out.extend(array_failures(o)?);
    }
    let scalars: Vec<&str> = [NULL, BOOL, NUMBER, STRING]
        .into_iter()
        .filter(|&t| types[t])
        .map(|t| TYPES[t])
        .collect();
    let declared: Vec<&str> = type_list(o)
        .into_iter()
        .filter(|t| !matches!(*t, "object" | "array"))
        .collect();
    let integer_only = declared.contains(&"integer") && !declared.contains(&"number");
    let scalar_rules =
        SCALAR_KEYWORDS.iter().any(|k| o.contains_key(*k)) || constants.is_some() || integer_only;
    if !scalars.is_empty() && scalar_rules {
        // The scalars the schema rejects, as a complement among scalars only.
        let mut only: Obj = o
            .iter()
            .filter(|(k, _)| SCALAR_KEYWORDS.contains(&k.as_str()) || *k == "enum" || *k == "const")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let kept: Vec<&str> = match declared.is_empty() {
            true => scalars.clone(),
            false => declared,
        };
        only.insert("type".into(), json!(kept));
        out.push(json!({ "type": scalars, "not": only }));
    }
    Some(match out.len() {
        0 => Value::Bool(false),
        1 => out.pop().expect("one"),
        _ => json!({ "anyOf": out }),
    })
}

/// The ways an object fails `o`'s object keywords (`None`: a keyword without a rewrite).
fn object_failures(o: &Obj, named: &dyn Fn(&str)) -> Option<Vec<Value>> {
    let mut branches = Vec::new();
    for k in ["additionalProperties", "patternProperties", "propertyNames"] {
        if o.get(k).is_some_and(|v| !accepts_everything(v)) {
            return None;
        }
    }
    if let Some(p) = o.get("properties") {
        for (name, sub) in p.as_object()? {
            if accepts_everything(sub) {
                continue;
            }
            named(name);
            branches.push(json!({"required": [name], "properties": {name: {"not": sub}}}));
        }
    }
    match o.get("required") {
        None => {}
        Some(Value::Array(names)) if names.iter().all(Value::is_string) => {
            names.iter().filter_map(Value::as_str).for_each(named);
            if !names.is_empty() {
                branches.push(json!({"not": {"required": names}}));
            }
        }
        // Left to the general path, which reports the malformed keyword.
        Some(_) => return None,
    }
    count_failures(o, ["minProperties", "maxProperties"], &mut branches)?;
    Some(of_type("object", branches))
}

/// The ways an array fails `o`'s array keywords (`None`: a keyword without a rewrite).
fn array_failures(o: &Obj) -> Option<Vec<Value>> {
    let mut branches = Vec::new();
    for k in [
        "prefixItems",
        "additionalItems",
        "uniqueItems",
        "minContains",
        "maxContains",
    ] {
        if o.contains_key(k) {
            return None;
        }
    }
    match o.get("items") {
        None => {}
        Some(s) if accepts_everything(s) => {}
        Some(s @ (Value::Object(_) | Value::Bool(_))) => {
            branches.push(json!({ "contains": { "not": s } }));
        }
        // The tuple form (before 2020-12) pairs items with positions.
        Some(_) => return None,
    }
    if let Some(c) = o.get("contains") {
        branches.push(json!({ "items": { "not": c } }));
    }
    count_failures(o, ["minItems", "maxItems"], &mut branches)?;
    Some(of_type("array", branches))
}

/// Values of type `t` failing some of `branches` (none: no such value).
fn of_type(t: &str, branches: Vec<Value>) -> Vec<Value> {
    match branches.is_empty() {
        true => vec![],
        false => vec![json!({"type": t, "anyOf": branches})],
    }
}

/// Adds the counts failing `o`'s lower and upper count keywords `[min, max]` (fewer than
/// the minimum, more than the maximum) to `branches`; `None` for a malformed count.
fn count_failures(o: &Obj, [min, max]: [&str; 2], branches: &mut Vec<Value>) -> Option<()> {
    if let Some(n) = count(o, min)? {
        if n > 0 {
            branches.push(json!({ max: n - 1 }));
        }
    }
    if let Some(n) = count(o, max)? {
        branches.push(json!({ min: n + 1 }));
    }
    Some(())
}

/// A count keyword's value: `Some(None)` when absent, `None` when not a whole number (left to
/// the general path, which reports it).
fn count(o: &Obj, key: &str) -> Option<Option<u64>> {
    match o.get(key) {
        None => Some(None),
        Some(v) => {
            let f = v.as_f64()?;
            (f >= 0.0 && f.fract() == 0.0 && f < 1e15).then_some(Some(f as u64))
        }
    }
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
