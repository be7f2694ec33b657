//! JSON Schema to [`Grammar`].
//!
//! A schema is compiled into one expression per JSON type ([`Parts`]); the applicators work on
//! those parts: `anyOf` unions them, `oneOf` and `not` use complement and intersection (exact
//! for parts without recursion), `allOf` and `$ref` with siblings merge schemas first
//! ([`merge`]). A `$ref` is inlined unless it is re-entered while being compiled; then it
//! becomes a rule and the re-entry a call, which is how recursive schemas stay finite.
//!
//! This file holds the entry point, `$ref` inlining and type dispatch; the keywords live in
//! [`applicators`] (with the proofs of [`disjoint`]), [`scalars`], [`arrays`], [`objects`] (with
//! [`presence`] rules); [`merge`] merges schemas and [`refs`] resolves references.

mod applicators;
mod arrays;
mod bounded;
mod disjoint;
mod merge;
mod negation;
mod objects;
mod presence;
mod refs;
mod scalars;

use crate::error::Warning;
use crate::expr::{Expr, Grammar, Rule, RuleId};
use crate::json::{any_string_char, Json};
use crate::matcher::matches;
use crate::numeric::{integer_range, multiple_of, number_range, Bound, Decimal};
use crate::regex::pattern_to_string_content;
use crate::{Compiled, FormatMode, GrammarError, Options};
use merge::{is_validation, json_equal, merge, normalize, Obj, CONFLICT};
use negation::with_all_of;
use presence::{presence_constraints, Presence};
use refs::Resolver;
use serde_json::{json, Value};
use std::collections::HashMap;

/// The JSON types, in the order of [`Parts`].
const TYPES: [&str; 6] = ["null", "boolean", "number", "string", "array", "object"];
const NULL: usize = 0;
const BOOL: usize = 1;
const NUMBER: usize = 2;
const STRING: usize = 3;
const ARRAY: usize = 4;
const OBJECT: usize = 5;

/// Keywords that can widen or narrow what a schema's plain keywords say.
const APPLICATORS: [&str; 7] = [
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "if",
    "$ref",
    "dependentSchemas",
];

/// Size (expression nodes) above which a `$ref` target becomes rules instead of being inlined.
const SHARE_REF_NODES: usize = 400;

/// One expression per JSON type: the serializations of valid instances of that type.
type Parts = [Expr; 6];

fn nothing() -> Parts {
    std::array::from_fn(|_| Expr::Nothing)
}

fn type_of(v: &Value) -> usize {
    match v {
        Value::Null => NULL,
        Value::Bool(_) => BOOL,
        Value::Number(_) => NUMBER,
        Value::String(_) => STRING,
        Value::Array(_) => ARRAY,
        Value::Object(_) => OBJECT,
    }
}

/// The length of `v`'s compact JSON text (escapes counted as one byte), counted only up to
/// just past `limit`: a size guard that costs a walk, not a serialization.
fn compact_size(v: &Value, limit: usize) -> usize {
    let mut total = 0usize;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        total += match v {
            Value::Null | Value::Bool(_) => 5,
            Value::Number(_) => 8,
            Value::String(s) => s.len() + 2,
            Value::Array(a) => {
                stack.extend(a.iter());
                2 + a.len()
            }
            Value::Object(m) => {
                stack.extend(m.values());
                2 + m.keys().map(|k| k.len() + 4).sum::<usize>()
            }
        };
        if total > limit {
            break;
        }
    }
    total
}

/// True for the official metaschemas (drafts 3 to 2020-12, and their hyper-schemas).
fn known_metaschema(uri: &Value) -> bool {
    let Some(u) = uri.as_str() else {
        return false;
    };
    let u = u.trim_end_matches('#');
    let u = u
        .strip_prefix("https://")
        .or_else(|| u.strip_prefix("http://"))
        .unwrap_or(u);
    let Some(path) = u.strip_prefix("json-schema.org/") else {
        return false;
    };
    [
        "schema",
        "hyper-schema",
        "draft-03/schema",
        "draft-03/hyper-schema",
        "draft-04/schema",
        "draft-04/hyper-schema",
        "draft-06/schema",
        "draft-06/hyper-schema",
        "draft-07/schema",
        "draft-07/hyper-schema",
        "draft/2019-09/schema",
        "draft/2019-09/hyper-schema",
        "draft/2020-12/schema",
        "draft/2020-12/hyper-schema",
    ]
    .contains(&path)
}

/// Compiles a JSON Schema.
pub fn compile_schema(schema: &Value, options: &Options) -> Result<Compiled, GrammarError> {
    let size = compact_size(schema, options.limits.max_schema_bytes);
    if size > options.limits.max_schema_bytes {
        return Err(GrammarError::SchemaTooLarge {
            given: size,
            limit: options.limits.max_schema_bytes,
        });
    }
    let draft = refs::Draft::of(schema);
    let resolver = Resolver::new(schema);
    let cyclic = if options.max_recursion.is_some() {
        resolver.cyclic_targets()
    } else {
        Default::default()
    };
    let mut c = Compiler {
        resolver,
        cyclic,
        opts: options,
        json: Json::new(&options.whitespace)?,
        rules: vec![Rule {
            name: "start".into(),
            expr: Expr::Nothing,
        }],
        ref_rules: HashMap::new(),
        depth_rules: HashMap::new(),
        ref_memo: HashMap::new(),
        inline_stack: Vec::new(),
        expanding: Vec::new(),
        unfolded: Vec::new(),
        merged_rules: HashMap::new(),
        merged_stack: Vec::new(),
        any_rule: None,
        distinct: Vec::new(),
        warnings: Vec::new(),
        draft,
        nodes: 0,
        depth: 0,
        negating: 0,
        negated_refs: Vec::new(),
    };
    if let Some(uri) = schema.get("$schema") {
        if !known_metaschema(uri) {
            c.refuse(
                "$schema",
                "#",
                &format!(
                    "unknown metaschema {uri}: its vocabularies (which keywords validate) \
                     cannot be known"
                ),
            )?;
        }
    }
    let start = c.schema_expr(schema, "#")?;
    if start.is_nothing() {
        return Err(GrammarError::Unsatisfiable {
            pointer: "#".into(),
        });
    }
    c.rules[0].expr = start;
    Ok(Compiled {
        grammar: Grammar {
            rules: c.rules,
            start: RuleId(0),
            distinct: c.distinct,
        },
        warnings: c.warnings,
    })
}

struct Compiler<'a> {
    resolver: Resolver<'a>,
    opts: &'a Options,
    json: Json,
    rules: Vec<Rule>,
    /// `$ref` target pointer -> rule, for targets re-entered while being compiled.
    ref_rules: HashMap<String, RuleId>,
    /// With bounded recursion: rules per (path of targets, target).
    depth_rules: HashMap<String, RuleId>,
    /// Compiled parts of `$ref` targets, reused at every reference (see `memo_key`).
    ref_memo: HashMap<String, Parts>,
    /// With bounded recursion: the targets on a `$ref` cycle (`Resolver::cyclic_targets`).
    cyclic: std::collections::HashSet<String>,
    /// `$ref` targets being inlined right now (outermost first).
    inline_stack: Vec<String>,
    /// `$ref` targets being expanded into an `allOf` merge right now (a chain of bare refs).
    expanding: Vec<String>,
    /// Recursive `$ref` targets unfolded into the `allOf` merge being built (pushed on the
    /// inline stack while the merge compiles, so bounded recursion counts them).
    unfolded: Vec<String>,
    /// Merged `allOf` schemas (by their JSON) that turned out recursive: their rules.
    merged_rules: HashMap<String, RuleId>,
    /// Merged `allOf` schemas being compiled right now.
    merged_stack: Vec<String>,
    any_rule: Option<RuleId>,
    /// Arrays whose items the matcher keeps distinct (`uniqueItems`).
    distinct: Vec<crate::expr::DistinctItems>,
    warnings: Vec<Warning>,
    /// The declared draft's rules where drafts differ.
    draft: refs::Draft,
    nodes: usize,
    depth: usize,
    /// Above zero while compiling a schema whose complement will be taken (`not`, `if`,
    /// `oneOf`'s other branches, `contains` under `maxContains`): objects are then compiled in
    /// any member order whatever [`Options::property_order`] says, since the complement of the
    /// schema-order language would let through the same members written in another order.
    negating: u32,
    /// `$ref` targets whose negation is being compiled (see `negated_target`).
    negated_refs: Vec<String>,
}

fn alt_parts(p: Parts) -> Expr {
    Expr::alt(p)
}

impl<'a> Compiler<'a> {
    fn schema_expr(&mut self, v: &Value, ptr: &str) -> Result<Expr, GrammarError> {
        let e = alt_parts(self.parts(v, ptr)?);
        self.nodes += e.size();
        if self.nodes > self.opts.limits.max_expr_nodes {
            return Err(GrammarError::TooLarge {
                pointer: ptr.into(),
                limit: self.opts.limits.max_expr_nodes,
            });
        }
        Ok(e)
    }

    fn refuse(&mut self, keyword: &str, ptr: &str, reason: &str) -> Result<(), GrammarError> {
        if self.opts.lenient {
            self.warn(keyword, ptr, reason);
            Ok(())
        } else {
            Err(GrammarError::unsupported(keyword, ptr, reason))
        }
    }

    /// Records that `keyword` at `ptr` is not enforced, and why.
    fn warn(&mut self, keyword: &str, ptr: &str, reason: &str) {
        self.warnings.push(Warning {
            keyword: keyword.into(),
            pointer: ptr.into(),
            reason: reason.into(),
        });
    }

    fn any_rule(&mut self) -> RuleId {
        if let Some(r) = self.any_rule {
            return r;
        }
        let id = RuleId(self.rules.len() as u32);
        self.rules.push(Rule {
            name: "any".into(),
            expr: Expr::Nothing,
        });
        self.rules[id.0 as usize].expr = self.json.any_value_body(id);
        self.any_rule = Some(id);
        id
    }

    fn any_parts(&mut self) -> Parts {
        let any = self.any_rule();
        [
            Expr::literal("null"),
            Expr::alt([Expr::literal("true"), Expr::literal("false")]),
            self.json.number(),
            self.json.any_string(),
            self.json.any_array_body(any),
            self.json.any_object_body(any),
        ]
    }

    /// [`parts`](Self::parts) of a schema whose complement will be taken (see `negating`).
    fn negated_parts(&mut self, v: &Value, ptr: &str) -> Result<Parts, GrammarError> {
        self.negating += 1;
        let r = self.parts(v, ptr);
        self.negating -= 1;
        r
    }

    fn parts(&mut self, v: &Value, ptr: &str) -> Result<Parts, GrammarError> {
        self.depth += 1;
        let r = if self.depth > 256 {
            Err(GrammarError::invalid(
                ptr,
                "schema nested more than 256 levels deep",
            ))
        } else {
            self.parts_inner(v, ptr)
        };
        self.depth -= 1;
        r
    }

    fn parts_inner(&mut self, v: &Value, ptr: &str) -> Result<Parts, GrammarError> {
        match v {
            Value::Bool(true) => Ok(self.any_parts()),
            Value::Bool(false) => Ok(nothing()),
            Value::Object(m) => self.object_parts(m, ptr),
            _ => Err(GrammarError::invalid(
                ptr,
                format!("a schema must be an object or a boolean, not {v}"),
            )),
        }
    }

    fn resolve(&self, reference: &Value, ptr: &str) -> Result<(&'a Value, String), GrammarError> {
        let r = reference
            .as_str()
            .ok_or_else(|| GrammarError::invalid(ptr, "$ref must be a string"))?;
        self.resolver
            .resolve_from(r, ptr)
            .ok_or_else(|| GrammarError::UnresolvedRef {
                reference: r.into(),
                pointer: ptr.into(),
            })
    }

    /// A bare `$ref`: inline, or call a rule when re-entered (recursion).
    fn ref_parts(&mut self, reference: &Value, ptr: &str) -> Result<Parts, GrammarError> {
        let (target, tptr) = self.resolve(reference, ptr)?;
        if let Some(limit) = self.opts.max_recursion {
            let depth = self.inline_stack.iter().filter(|t| **t == tptr).count() as u32;
            if depth > 0 {
                return self.bounded_recursion(target, tptr, depth, limit);
            }
        }
        if let Some(&rule) = self.ref_rules.get(&tptr) {
            return Ok(self.call_parts(rule, target, &tptr));
        }
        if self.inline_stack.contains(&tptr) {
            let rule = RuleId(self.rules.len() as u32);
            self.rules.push(Rule {
                name: tptr.clone(),
                expr: Expr::Nothing,
            });
            self.ref_rules.insert(tptr.clone(), rule);
            let body = self.schema_expr(target, &tptr)?;
            if body.is_nothing() {
                return Err(GrammarError::Unsatisfiable { pointer: tptr });
            }
            self.rules[rule.0 as usize].expr = body;
            return Ok(self.call_parts(rule, target, &tptr));
        }
        if self.inline_stack.len() > 64 {
            return Err(GrammarError::invalid(ptr, "$ref chain deeper than 64"));
        }
        let key = self.memo_key(&tptr);
        if let Some(p) = self.ref_memo.get(&key) {
            return Ok(p.clone());
        }
        self.inline_stack.push(tptr.clone());
        let out = self.parts(target, &tptr);
        self.inline_stack.pop();
        let out = out?;
        if self.ref_rules.contains_key(&tptr) {
            // Became recursive while compiling: the recursive path already uses the rule.
            return Ok(out);
        }
        // A large target used in several places is compiled once, as one rule per JSON type
        // (calls keep the automaton small; per-type rules keep `oneOf`/`not` type-precise).
        let size: usize = out.iter().map(Expr::size).sum();
        let shared = if size > SHARE_REF_NODES {
            std::array::from_fn(|t| {
                if out[t].is_nothing() {
                    Expr::Nothing
                } else {
                    let id = RuleId(self.rules.len() as u32);
                    self.rules.push(Rule {
                        name: format!("{tptr} ({})", TYPES[t]),
                        expr: out[t].clone(),
                    });
                    Expr::Call(id)
                }
            })
        } else {
            // Shared: every reference is then the same subtree, built into the automaton once.
            out.map(Expr::shared)
        };
        // Memoized always (recompiling every target that reaches a recursive one at each
        // reference was exponential: 10,000+ target compilations for the 600 definitions of
        // a Kubernetes schema); with bounded recursion the key says how deep each cyclic
        // target already is.
        self.ref_memo.insert(key, shared.clone());
        Ok(shared)
    }

    /// The `ref_memo` key of target `tptr` here. Without bounded recursion, a target compiles
    /// to the same parts everywhere (calls to recursive targets' rules mean the same in any
    /// place). With it, what a target compiles to depends on how many times each target it
    /// can reach is already on the inline stack, and the only such targets are on a cycle
    /// with it: the key adds the stack counts of the cyclic targets. Parts compiled to be
    /// negated (any member order) have keys of their own.
    fn memo_key(&self, tptr: &str) -> String {
        let mut key = String::with_capacity(tptr.len() + 1);
        if self.negating > 0 {
            key.push('\u{1}');
        }
        key.push_str(tptr);
        if self.opts.max_recursion.is_none() {
            return key;
        }
        let mut on_stack: Vec<&str> = self
            .inline_stack
            .iter()
            .map(String::as_str)
            .filter(|t| self.cyclic.contains(*t))
            .collect();
        // The stack as a multiset: sorted, so order does not matter, repeats count.
        on_stack.sort_unstable();
        for t in on_stack {
            key.push('\u{0}');
            key.push_str(t);
        }
        key
    }

    /// Recursion unrolled to a fixed depth ([`Options::max_recursion`]): one rule per target
    /// and path of targets being compiled, and no recursive branch past the limit.
    fn bounded_recursion(
        &mut self,
        target: &Value,
        tptr: String,
        depth: u32,
        limit: u32,
    ) -> Result<Parts, GrammarError> {
        if depth > limit {
            return Ok(nothing());
        }
        let key = self.inline_stack.join("\u{0}") + "\u{0}" + &tptr;
        if let Some(&rule) = self.depth_rules.get(&key) {
            return Ok(self.call_parts(rule, target, &tptr));
        }
        let rule = RuleId(self.rules.len() as u32);
        self.rules.push(Rule {
            name: format!("{tptr} (depth {depth})"),
            expr: Expr::Nothing,
        });
        self.depth_rules.insert(key, rule);
        self.inline_stack.push(tptr.clone());
        let body = self.schema_expr(target, &tptr);
        self.inline_stack.pop();
        let body = body?;
        if body.is_nothing() {
            return Ok(nothing());
        }
        self.rules[rule.0 as usize].expr = body;
        Ok(self.call_parts(rule, target, &tptr))
    }

    /// A rule call, attributed to the types the target can have (so `oneOf`/`not` can still
    /// reason about types around recursive references).
    fn call_parts(&self, rule: RuleId, target: &Value, _ptr: &str) -> Parts {
        let types = declared_types(target);
        std::array::from_fn(|t| {
            if types[t] {
                Expr::Call(rule)
            } else {
                Expr::Nothing
            }
        })
    }

    /// A schema object without applicators: per-type keywords, then `enum`/`const`.
    fn typed_parts(&mut self, m: &Obj, ptr: &str) -> Result<Parts, GrammarError> {
        self.typed_parts_with(m, ptr, None)
    }

    /// [`Compiler::typed_parts`], with objects held to a presence constraint.
    fn typed_parts_with(
        &mut self,
        m: &Obj,
        ptr: &str,
        presence: Option<&Presence>,
    ) -> Result<Parts, GrammarError> {
        let allowed = allowed_types(m, ptr)?;
        let mut parts = nothing();
        if allowed[NULL] {
            parts[NULL] = Expr::literal("null");
        }
        if allowed[BOOL] {
            parts[BOOL] = Expr::alt([Expr::literal("true"), Expr::literal("false")]);
        }
        if allowed[NUMBER] {
            let integer_only = !type_list(m).is_empty() && !type_list(m).contains(&"number");
            parts[NUMBER] = self.number(m, ptr, integer_only)?;
        }
        if allowed[STRING] {
            let content = self.string_content(m, ptr)?;
            parts[STRING] = self.json.quoted(content);
        }
        if allowed[ARRAY] {
            parts[ARRAY] = self.array(m, ptr)?;
        }
        if allowed[OBJECT] {
            parts[OBJECT] = self.object(m, ptr, presence)?;
        }
        let values: Option<Vec<Value>> = match (m.get("enum"), m.get("const")) {
            (Some(Value::Array(e)), None) => Some(e.clone()),
            // Both (a merge of `allOf` branches): the const, if the enum has it.
            (Some(Value::Array(e)), Some(c)) => match e.iter().any(|v| json_equal(v, c)) {
                true => Some(vec![c.clone()]),
                false => return Ok(nothing()),
            },
            (Some(_), _) => return Err(GrammarError::invalid(ptr, "enum must be an array")),
            (None, Some(c)) => Some(vec![c.clone()]),
            (None, None) => None,
        };
        if let Some(values) = values {
            // With nothing but `type` beside the values, a value is valid iff its type is
            // allowed (integers: no fraction), so the expressions need not be run.
            let only_typed = m
                .keys()
                .all(|k| !is_validation(k) || ["enum", "const", "type"].contains(&k.as_str()));
            let integer_only = !type_list(m).is_empty() && !type_list(m).contains(&"number");
            let mut by_type: [Vec<Expr>; 6] = Default::default();
            for v in values {
                let t = type_of(&v);
                let valid = if only_typed {
                    allowed[t] && (t != NUMBER || !integer_only || self.is_integer(&v))
                } else {
                    let text = serde_json::to_string(&v).unwrap_or_default();
                    matches(&parts[t], &self.rules, text.as_bytes())
                };
                if valid {
                    by_type[t].push(self.json.literal_value(&v));
                }
            }
            return Ok(by_type.map(Expr::alt));
        }
        Ok(parts)
    }

    /// True if the number `v` is an integer as this schema's draft and options count them:
    /// `1.0` is one from draft 6 on, unless integers are written plainly.
    fn is_integer(&self, v: &Value) -> bool {
        v.is_i64()
            || v.is_u64()
            || (!self.draft.draft4
                && !self.opts.plain_integers
                && v.as_f64().is_some_and(|f| f.fract() == 0.0))
    }

    fn count(&self, m: &Obj, k: &str, ptr: &str) -> Result<Option<u32>, GrammarError> {
        match m.get(k) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .or_else(|| {
                    v.as_f64()
                        .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                        .map(|f| f as u64)
                })
                .map(|n| Some(n.min(u32::MAX as u64) as u32))
                .ok_or_else(|| {
                    GrammarError::invalid(ptr, format!("{k} must be a non-negative integer"))
                }),
        }
    }

    /// Adds a rule and returns its id.
    fn add_rule(&mut self, name: String, expr: Expr) -> RuleId {
        self.rules.push(Rule { name, expr });
        RuleId(self.rules.len() as u32 - 1)
    }

    /// Wraps a large repeated subexpression in a rule so that repetitions share one copy.
    fn share(&mut self, e: Expr, name: &str) -> Expr {
        if e.size() > 64 {
            let id = RuleId(self.rules.len() as u32);
            self.rules.push(Rule {
                name: name.into(),
                expr: e,
            });
            Expr::Call(id)
        } else {
            Expr::shared(e)
        }
    }
}

fn type_list(m: &Obj) -> Vec<&str> {
    match m.get("type") {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    }
}

fn allowed_types(m: &Obj, ptr: &str) -> Result<[bool; 6], GrammarError> {
    let Some(t) = m.get("type") else {
        return Ok([true; 6]);
    };
    let names: Vec<&str> = match t {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a
            .iter()
            .map(|x| {
                x.as_str()
                    .ok_or_else(|| GrammarError::invalid(ptr, "type entries must be strings"))
            })
            .collect::<Result<_, _>>()?,
        _ => {
            return Err(GrammarError::invalid(
                ptr,
                "type must be a string or an array",
            ))
        }
    };
    let mut out = [false; 6];
    for n in names {
        let i = match n {
            "integer" => NUMBER,
            n => TYPES
                .iter()
                .position(|t| *t == n)
                .ok_or_else(|| GrammarError::invalid(ptr, format!("unknown type {n:?}")))?,
        };
        out[i] = true;
    }
    Ok(out)
}

/// The JSON types a schema object allows by its `type`, `const` and `enum`.
fn possible_types(m: &Obj) -> [bool; 6] {
    let mut t = allowed_types(m, "").unwrap_or([true; 6]);
    if let Some(vals) = constants(m) {
        let mut from_values = [false; 6];
        for v in &vals {
            from_values[type_of(v)] = true;
        }
        for i in 0..6 {
            t[i] &= from_values[i];
        }
    }
    t
}

/// The values a schema object allows by `const` / `enum`, if it lists them.
fn constants(m: &Obj) -> Option<Vec<Value>> {
    match (m.get("const"), m.get("enum")) {
        (Some(c), _) => Some(vec![c.clone()]),
        (None, Some(Value::Array(e))) => Some(e.clone()),
        _ => None,
    }
}

fn required_names(m: &Obj) -> Vec<String> {
    match m.get("required") {
        Some(Value::Array(r)) => r
            .iter()
            .filter_map(|x| x.as_str().map(String::from))
            .collect(),
        _ => vec![],
    }
}

/// The schema a property `k` is validated by (declared, else additional; patterns: unknown).
fn property_schema<'m>(m: &'m Obj, k: &str) -> &'m Value {
    static TRUE: Value = Value::Bool(true);
    if let Some(p) = m.get("properties").and_then(|p| p.get(k)) {
        return p;
    }
    if m.contains_key("patternProperties") || m.contains_key(objects::VIEWS) {
        return &TRUE;
    }
    m.get("additionalProperties").unwrap_or(&TRUE)
}

/// True if an object valid under `m` cannot have property `k`.
fn forbids_property(m: &Obj, k: &str) -> bool {
    *property_schema(m, k) == Value::Bool(false)
}

/// The types a schema can possibly have, from `type`, `const`/`enum` (for call attribution).
fn declared_types(v: &Value) -> [bool; 6] {
    match v {
        Value::Object(m) => {
            if let Ok(t) = allowed_types(m, "") {
                if m.contains_key("type") {
                    return t;
                }
            }
            if let Some(c) = m.get("const") {
                let mut o = [false; 6];
                o[type_of(c)] = true;
                return o;
            }
            if let Some(Value::Array(e)) = m.get("enum") {
                let mut o = [false; 6];
                for x in e {
                    o[type_of(x)] = true;
                }
                return o;
            }
            [true; 6]
        }
        Value::Bool(false) => [false; 6],
        _ => [true; 6],
    }
}

/// `true`, or a schema object with nothing but annotations: every instance is valid.
fn accepts_everything(schema: &Value) -> bool {
    const ANNOTATIONS: &[&str] = &[
        "$comment",
        "$schema",
        "$id",
        "$anchor",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
    ];
    match schema {
        Value::Bool(b) => *b,
        Value::Object(o) => o.keys().all(|k| ANNOTATIONS.contains(&k.as_str())),
        _ => false,
    }
}
