//! JSON Schema to [`Grammar`].
//!
//! A schema is compiled into one expression per JSON type ([`Parts`]); the applicators work on
//! those parts: `anyOf` unions them, `oneOf` and `not` use complement and intersection (exact
//! for parts without recursion), `allOf` and `$ref` with siblings merge schemas first
//! ([`merge`]). A `$ref` is inlined unless it is re-entered while being compiled; then it
//! becomes a rule and the re-entry a call, which is how recursive schemas stay finite.

mod merge;
mod refs;

use crate::error::Warning;
use crate::expr::{Expr, Grammar, Rule, RuleId};
use crate::json::{any_string_char, Json};
use crate::matcher::matches;
use crate::numeric::{integer_range, multiple_of, number_range, Bound, Decimal};
use crate::regex::pattern_to_string_content;
use crate::{Compiled, FormatMode, GrammarError, Options};
use merge::{is_validation, json_equal, merge, normalize, Obj, CONFLICT};
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
        any_rule: None,
        warnings: Vec::new(),
        draft,
        nodes: 0,
        depth: 0,
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
    any_rule: Option<RuleId>,
    warnings: Vec<Warning>,
    /// The declared draft's rules where drafts differ.
    draft: refs::Draft,
    nodes: usize,
    depth: usize,
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
            self.warnings.push(Warning {
                keyword: keyword.into(),
                pointer: ptr.into(),
                reason: reason.into(),
            });
            Ok(())
        } else {
            Err(GrammarError::unsupported(keyword, ptr, reason))
        }
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
    /// with it: the key adds the stack counts of the cyclic targets.
    fn memo_key(&self, tptr: &str) -> String {
        if self.opts.max_recursion.is_none() {
            return tptr.to_string();
        }
        let mut on_stack: Vec<&str> = self
            .inline_stack
            .iter()
            .map(String::as_str)
            .filter(|t| self.cyclic.contains(*t))
            .collect();
        if on_stack.is_empty() {
            return tptr.to_string();
        }
        // The stack as a multiset: sorted, so order does not matter, repeats count.
        on_stack.sort_unstable();
        let mut key = tptr.to_string();
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

    fn object_parts(&mut self, m: &Obj, ptr: &str) -> Result<Parts, GrammarError> {
        let normalized = normalize(m);
        let m: &Obj = &normalized;
        for key in ["$dynamicRef", "$recursiveRef"] {
            if m.contains_key(key) {
                self.refuse(key, ptr, "dynamic references are not supported")?;
            }
        }
        // unevaluated*: exact only when this object's own keywords evaluate everything.
        for key in ["unevaluatedProperties", "unevaluatedItems"] {
            if m.contains_key(key)
                && [
                    "allOf",
                    "anyOf",
                    "oneOf",
                    "not",
                    "if",
                    "then",
                    "else",
                    "$ref",
                    "dependentSchemas",
                    "dependencies",
                    "contains",
                ]
                .iter()
                .any(|k| m.contains_key(*k))
            {
                self.refuse(
                    key,
                    ptr,
                    "unevaluated* next to applicators (allOf, anyOf, $ref, ...)",
                )?;
            }
        }
        // `$ref`, alone or with siblings.
        if let Some(r) = m.get("$ref") {
            let rest: Obj = m
                .iter()
                .filter(|(k, _)| *k != "$ref" && is_validation(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if rest.is_empty() || self.draft.ref_hides_siblings {
                return self.ref_parts(r, ptr);
            }
            let (target, tptr) = self.resolve(r, ptr)?;
            if self.inline_stack.contains(&tptr) || self.ref_rules.contains_key(&tptr) {
                // Recursive target with extra keywords: intersect with the call where the
                // extra keywords are only annotations of the same types.
                return Err(GrammarError::unsupported(
                    "$ref",
                    ptr,
                    "a recursive $ref combined with sibling keywords",
                ));
            }
            let merged = match &target {
                Value::Bool(true) => Value::Object(rest),
                Value::Bool(false) => return Ok(nothing()),
                Value::Object(t) => {
                    let mut t = t.clone();
                    for k in ["$defs", "definitions"] {
                        t.remove(k);
                    }
                    merge(&t, &rest, ptr)?
                }
                _ => {
                    return Err(GrammarError::invalid(
                        &tptr,
                        "a schema must be an object or a boolean",
                    ))
                }
            };
            self.inline_stack.push(tptr);
            let out = self.parts(&merged, ptr);
            self.inline_stack.pop();
            return out;
        }
        if let Some((rest, presence)) = presence_constraints(m) {
            let mut parts = self.typed_parts_with(&rest, ptr, Some(&presence))?;
            if !presence.others {
                for (t, p) in parts.iter_mut().enumerate() {
                    if t != OBJECT {
                        *p = Expr::Nothing;
                    }
                }
            }
            return Ok(parts);
        }
        if let Some(all) = m.get("allOf") {
            let list = all
                .as_array()
                .ok_or_else(|| GrammarError::invalid(ptr, "allOf must be an array"))?;
            let mut acc = Value::Object(
                m.iter()
                    .filter(|(k, _)| *k != "allOf")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            );
            // Branches that cannot be merged (two `oneOf`s, two `if`s) are compiled on their
            // own and intersected type by type.
            let mut separate: Vec<(Value, String)> = Vec::new();
            for (i, branch) in list.iter().enumerate() {
                let bptr = format!("{ptr}/allOf/{i}");
                let branch = self.expand_ref(branch, &bptr)?;
                acc = match (&acc, &branch) {
                    (Value::Bool(false), _) | (_, Value::Bool(false)) => Value::Bool(false),
                    (x, Value::Bool(true)) => x.clone(),
                    (Value::Object(a), Value::Object(b)) => match merge(a, b, &bptr) {
                        Ok(v) => v,
                        Err(GrammarError::Unsupported { reason, .. }) if reason == CONFLICT => {
                            separate.push((branch.clone(), bptr));
                            continue;
                        }
                        Err(e) => return Err(e),
                    },
                    _ => {
                        return Err(GrammarError::invalid(
                            &bptr,
                            "a schema must be an object or a boolean",
                        ))
                    }
                };
            }
            let mut out = self.parts(&acc, ptr)?;
            for (branch, bptr) in separate {
                let p = self.parts(&branch, &bptr)?;
                for t in 0..6 {
                    out[t] = match (&out[t], &p[t]) {
                        (Expr::Nothing, _) | (_, Expr::Nothing) => Expr::Nothing,
                        (x, y) if x == y => x.clone(),
                        (x, y) if !x.has_call() && !y.has_call() => {
                            Expr::and(vec![x.clone(), y.clone()])
                        }
                        _ => {
                            return Err(GrammarError::unsupported(
                                "allOf",
                                &bptr,
                                format!("intersecting recursive {} schemas", TYPES[t]),
                            ))
                        }
                    };
                }
            }
            return Ok(out);
        }
        let base = |skip: &[&str]| -> Obj {
            m.iter()
                .filter(|(k, _)| !skip.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        if m.contains_key("anyOf") {
            let branches = self.branches(m, "anyOf", ptr, &base(&["anyOf"]))?;
            let mut acc: [Vec<Expr>; 6] = Default::default();
            for p in branches {
                for (t, e) in p.into_iter().enumerate() {
                    acc[t].push(e);
                }
            }
            return Ok(acc.map(Expr::alt));
        }
        if m.contains_key("oneOf") {
            let rest = base(&["oneOf"]);
            let list = match m.get("oneOf") {
                Some(Value::Array(l)) if !l.is_empty() => l.clone(),
                Some(Value::Array(_)) => {
                    return Err(GrammarError::invalid(ptr, "oneOf must not be empty"))
                }
                _ => return Err(GrammarError::invalid(ptr, "oneOf must be an array")),
            };
            // Each branch as it is compiled: merged with the keywords beside `oneOf`.
            let list: Vec<Value> = if rest.keys().any(|k| is_validation(k)) {
                let mut merged = Vec::with_capacity(list.len());
                for (i, b) in list.iter().enumerate() {
                    let bptr = format!("{ptr}/oneOf/{i}");
                    merged.push(match self.expand_ref(b, &bptr)? {
                        Value::Bool(true) => Value::Object(rest.clone()),
                        Value::Bool(false) => Value::Bool(false),
                        Value::Object(bo) => merge(&rest, &bo, &bptr)?,
                        _ => {
                            return Err(GrammarError::invalid(
                                &bptr,
                                "a schema must be an object or a boolean",
                            ))
                        }
                    });
                }
                merged
            } else {
                list
            };
            let mut branches = Vec::with_capacity(list.len());
            for (i, b) in list.iter().enumerate() {
                branches.push(self.parts(b, &format!("{ptr}/oneOf/{i}"))?);
            }
            // Branches provably disjoint at the schema level (types, constants, a required
            // property with disjoint values) are a plain union: no complement to build.
            let n = list.len();
            let mut apart = vec![vec![false; n]; n];
            for i in 0..n {
                for j in i + 1..n {
                    let d = self.disjoint(&list[i], &list[j], ptr, 0);
                    apart[i][j] = d;
                    apart[j][i] = d;
                }
            }
            let mut out = nothing();
            for t in 0..6 {
                let live_ids: Vec<usize> = (0..branches.len())
                    .filter(|&i| !branches[i][t].is_nothing())
                    .collect();
                if live_ids.len() > 1
                    && live_ids
                        .iter()
                        .all(|&i| live_ids.iter().all(|&j| i == j || apart[i][j]))
                {
                    out[t] = Expr::alt(live_ids.iter().map(|&i| branches[i][t].clone()));
                    continue;
                }
                let all: Vec<&Expr> = branches
                    .iter()
                    .map(|b| &b[t])
                    .filter(|e| !e.is_nothing())
                    .collect();
                // A branch identical to another overlaps it completely: it never matches alone.
                let live: Vec<&Expr> = all
                    .iter()
                    .filter(|e| all.iter().filter(|o| o == e).count() == 1)
                    .copied()
                    .collect();
                out[t] = match live.len() {
                    0 => Expr::Nothing,
                    1 => live[0].clone(),
                    _ if live.iter().any(|e| e.has_call()) => {
                        return Err(GrammarError::unsupported(
                            "oneOf",
                            ptr,
                            format!(
                                "branches that may overlap on {} values and contain recursion",
                                TYPES[t]
                            ),
                        ))
                    }
                    _ => Expr::alt((0..live.len()).map(|i| {
                        let mut terms = vec![live[i].clone()];
                        for (j, other) in live.iter().enumerate() {
                            if j != i {
                                terms.push(Expr::Not(Box::new((*other).clone())));
                            }
                        }
                        Expr::and(terms)
                    })),
                };
            }
            return Ok(out);
        }
        if let Some(not) = m.get("not") {
            if accepts_everything(not) {
                // `not: {}` rules out every value: unsatisfiable, not a negation to refuse.
                return Ok(nothing());
            }
            let positive = self.parts(&Value::Object(base(&["not"])), ptr)?;
            let negative = self.parts(not, &format!("{ptr}/not"))?;
            return self.subtract(positive, negative, ptr, "not");
        }
        if m.contains_key("if") {
            let (has_then, has_else) = (m.contains_key("then"), m.contains_key("else"));
            let rest = base(&["if", "then", "else"]);
            if !has_then && !has_else {
                return self.parts(&Value::Object(rest), ptr);
            }
            let cond = m["if"].clone();
            let then = m.get("then").cloned().unwrap_or(Value::Bool(true));
            let els = m.get("else").cloned().unwrap_or(Value::Bool(true));
            // (if and then) or (else and not if)
            let with_then = self.branch_parts(
                &rest,
                &json!({"allOf": [cond, then]}),
                &format!("{ptr}/then"),
            )?;
            let with_else = self.branch_parts(&rest, &els, &format!("{ptr}/else"))?;
            let cond_parts = self.parts(&cond, &format!("{ptr}/if"))?;
            let else_only = self.subtract(with_else, cond_parts, ptr, "if")?;
            return Ok(std::array::from_fn(|t| {
                Expr::alt([with_then[t].clone(), else_only[t].clone()])
            }));
        }
        // dependencies as anyOf: "key absent, or present with its requirements".
        if let Some(deps) = m
            .get("dependentRequired")
            .or_else(|| m.get("dependencies"))
            .or_else(|| m.get("dependentSchemas"))
        {
            let key = ["dependentRequired", "dependencies", "dependentSchemas"]
                .into_iter()
                .find(|k| m.contains_key(*k))
                .unwrap_or("dependencies");
            let deps = deps
                .as_object()
                .ok_or_else(|| GrammarError::invalid(ptr, format!("{key} must be an object")))?;
            let mut acc = Value::Object(base(&[key]));
            for (name, req) in deps {
                let present = match req {
                    Value::Array(list) => {
                        let mut r = vec![json!(name)];
                        r.extend(list.iter().cloned());
                        json!({"required": r})
                    }
                    s => json!({"allOf": [{"required": [name]}, s]}),
                };
                let dep = json!({"anyOf": [{"properties": {name.clone(): false}}, present]});
                acc = match (&acc, &dep) {
                    (Value::Object(a), Value::Object(b)) => merge(a, b, ptr)?,
                    _ => Value::Bool(false),
                };
            }
            return self.parts(&acc, ptr);
        }
        self.typed_parts(m, ptr)
    }

    /// The parts of each branch of `anyOf`/`oneOf` (`key`), each merged with `rest`.
    fn branches(
        &mut self,
        m: &Obj,
        key: &str,
        ptr: &str,
        rest: &Obj,
    ) -> Result<Vec<Parts>, GrammarError> {
        let list = m[key]
            .as_array()
            .ok_or_else(|| GrammarError::invalid(ptr, format!("{key} must be an array")))?;
        if list.is_empty() {
            return Err(GrammarError::invalid(
                ptr,
                format!("{key} must not be empty"),
            ));
        }
        let mut out = Vec::with_capacity(list.len());
        for (i, branch) in list.iter().enumerate() {
            out.push(self.branch_parts(rest, branch, &format!("{ptr}/{key}/{i}"))?);
        }
        Ok(out)
    }

    /// True if no instance can be valid under both schemas, provably from their types,
    /// constants, or an object property both require with disjoint values. `false` means
    /// "not proven", never "overlapping".
    fn disjoint(&mut self, a: &Value, b: &Value, ptr: &str, depth: u32) -> bool {
        let Some(a) = self.resolved(a, ptr) else {
            return false;
        };
        match a.as_ref() {
            Value::Bool(false) => true,
            Value::Object(ao) => self.disjoint_with((ao, None), b, ptr, depth),
            _ => false,
        }
    }

    /// `v` with its `$ref` expanded (borrowed when it has none).
    fn resolved<'v>(&mut self, v: &'v Value, ptr: &str) -> Option<std::borrow::Cow<'v, Value>> {
        if v.get("$ref").is_some() {
            self.expand_ref(v, ptr).ok().map(std::borrow::Cow::Owned)
        } else {
            Some(std::borrow::Cow::Borrowed(v))
        }
    }

    fn disjoint_with(&mut self, a: Side<'_>, b: &Value, ptr: &str, depth: u32) -> bool {
        let Some(b) = self.resolved(b, ptr) else {
            return false;
        };
        match b.as_ref() {
            Value::Bool(false) => true,
            Value::Object(bo) => self.disjoint_sides(a, (bo, None), ptr, depth),
            _ => false,
        }
    }

    fn disjoint_sides(&mut self, a: Side<'_>, b: Side<'_>, ptr: &str, depth: u32) -> bool {
        if depth > 6 {
            return false;
        }
        let has = |x: Side<'_>, k: &str| x.1 != Some(k) && x.0.contains_key(k);
        // `allOf` narrows: disjoint if any part (or the rest) is. `anyOf`/`oneOf` widen only
        // to their branches: disjoint if every branch is.
        for (x, y) in [(a, b), (b, a)] {
            if has(x, "allOf") {
                if let Some(Value::Array(parts)) = x.0.get("allOf") {
                    for p in parts {
                        if self.disjoint_with(y, p, ptr, depth + 1) {
                            return true;
                        }
                    }
                }
                return self.disjoint_sides((x.0, Some("allOf")), y, ptr, depth + 1);
            }
            for key in ["anyOf", "oneOf"] {
                if !has(x, key) || x.0.keys().any(|k| k != key && is_validation(k)) {
                    continue;
                }
                if let Some(Value::Array(branches)) = x.0.get(key) {
                    return branches
                        .iter()
                        .all(|p| self.disjoint_with(y, p, ptr, depth + 1));
                }
            }
        }
        // Other applicators can widen or narrow what the plain keywords say: prove nothing.
        let applicators = [
            "anyOf",
            "oneOf",
            "allOf",
            "not",
            "if",
            "$ref",
            "dependentSchemas",
        ];
        if applicators.iter().any(|k| has(a, k) || has(b, k)) {
            return false;
        }
        let (a, b) = (a.0, b.0);
        let (ta, tb) = (possible_types(a), possible_types(b));
        let common: Vec<usize> = (0..6).filter(|&t| ta[t] && tb[t]).collect();
        if common.is_empty() {
            return true;
        }
        if let (Some(va), Some(vb)) = (constants(a), constants(b)) {
            if va.iter().all(|x| vb.iter().all(|y| !json_equal(x, y))) {
                return true;
            }
        }
        if common != [OBJECT] {
            return false;
        }
        // Both can only be objects: a property one requires that the other cannot have, or
        // that both require with disjoint values.
        for (x, y) in [(a, b), (b, a)] {
            for k in required_names(x) {
                if required_names(y).contains(&k) {
                    let (px, py) = (property_schema(x, &k), property_schema(y, &k));
                    if self.disjoint(px, py, ptr, depth + 1) {
                        return true;
                    }
                } else if forbids_property(y, &k) {
                    return true;
                }
            }
        }
        false
    }

    /// Resolves a `{"$ref": ...}` (with or without siblings) into a mergeable schema value.
    fn expand_ref(&mut self, v: &Value, ptr: &str) -> Result<Value, GrammarError> {
        let Some(m) = v.as_object() else {
            return Ok(v.clone());
        };
        let Some(r) = m.get("$ref") else {
            return Ok(v.clone());
        };
        let (target, tptr) = self.resolve(r, ptr)?;
        if self.inline_stack.contains(&tptr) || self.ref_rules.contains_key(&tptr) {
            return Err(GrammarError::unsupported(
                "$ref",
                ptr,
                "a recursive $ref inside allOf",
            ));
        }
        self.inline_stack.push(tptr.clone());
        let expanded = self.expand_ref(target, &tptr);
        self.inline_stack.pop();
        let expanded = expanded?;
        let rest: Obj = m
            .iter()
            .filter(|(k, _)| *k != "$ref")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        match expanded {
            Value::Object(mut t) => {
                for k in ["$defs", "definitions"] {
                    t.remove(k);
                }
                if rest.is_empty() || self.draft.ref_hides_siblings {
                    Ok(Value::Object(t))
                } else {
                    merge(&t, &rest, ptr)
                }
            }
            other => Ok(other),
        }
    }

    fn branch_parts(
        &mut self,
        rest: &Obj,
        branch: &Value,
        ptr: &str,
    ) -> Result<Parts, GrammarError> {
        let has_rest = rest.keys().any(|k| is_validation(k));
        if !has_rest {
            return self.parts(branch, ptr);
        }
        let branch = self.expand_ref(branch, ptr)?;
        match branch {
            Value::Bool(true) => self.parts(&Value::Object(rest.clone()), ptr),
            Value::Bool(false) => Ok(nothing()),
            Value::Object(b) => {
                let merged = merge(rest, &b, ptr)?;
                self.parts(&merged, ptr)
            }
            _ => Err(GrammarError::invalid(
                ptr,
                "a schema must be an object or a boolean",
            )),
        }
    }

    /// `positive` minus `negative`, type by type (exact where neither side recurses).
    fn subtract(
        &mut self,
        positive: Parts,
        negative: Parts,
        ptr: &str,
        keyword: &str,
    ) -> Result<Parts, GrammarError> {
        let mut out = nothing();
        for t in 0..6 {
            let (p, n) = (&positive[t], &negative[t]);
            let any = self.any_parts();
            out[t] = if p.is_nothing() || n.is_nothing() {
                p.clone()
            } else if p == n || *n == any[t] {
                Expr::Nothing
            } else if p.has_call() || n.has_call() {
                self.refuse(
                    keyword,
                    ptr,
                    &format!("negating a recursive schema for {} values", TYPES[t]),
                )?;
                p.clone()
            } else {
                Expr::and(vec![p.clone(), Expr::Not(Box::new(n.clone()))])
            };
        }
        Ok(out)
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
            (Some(_), _) => return Err(GrammarError::invalid(ptr, "enum must be an array")),
            (None, Some(c)) => Some(vec![c.clone()]),
            (None, None) => None,
        };
        if let (Some(Value::Array(e)), Some(c)) = (m.get("enum"), m.get("const")) {
            if !e.iter().any(|v| json_equal(v, c)) {
                return Ok(nothing());
            }
        }
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

    fn number(&mut self, m: &Obj, ptr: &str, integer: bool) -> Result<Expr, GrammarError> {
        let dec = |k: &str| -> Result<Option<Decimal>, GrammarError> {
            match m.get(k) {
                None => Ok(None),
                Some(Value::Number(n)) => Decimal::parse(&n.to_string())
                    .map(Some)
                    .ok_or_else(|| GrammarError::invalid(ptr, format!("{k} is out of range"))),
                Some(v) => Err(GrammarError::invalid(
                    ptr,
                    format!("{k} must be a number, not {v}"),
                )),
            }
        };
        let tighter = |a: Option<Bound>, b: Option<Bound>, lower: bool| -> Option<Bound> {
            match (a, b) {
                (None, x) | (x, None) => x,
                (Some(x), Some(y)) => {
                    use std::cmp::Ordering::*;
                    let ord = x.0.cmp_value(&y.0);
                    Some(match (ord, lower) {
                        (Greater, true) | (Less, false) => x,
                        (Less, true) | (Greater, false) => y,
                        (Equal, _) => (x.0, x.1 || y.1),
                    })
                }
            }
        };
        let lo = tighter(
            dec("minimum")?.map(|d| (d, false)),
            dec("exclusiveMinimum")?.map(|d| (d, true)),
            true,
        );
        let hi = tighter(
            dec("maximum")?.map(|d| (d, false)),
            dec("exclusiveMaximum")?.map(|d| (d, true)),
            false,
        );
        let step = dec("multipleOf")?;
        if step.as_ref().is_some_and(|s| s.neg || s.is_zero()) {
            return Err(GrammarError::invalid(
                ptr,
                "multipleOf must be greater than 0",
            ));
        }
        let too_big = || GrammarError::unsupported("minimum", ptr, "numeric bounds beyond 1e38");
        let base = if integer {
            let l = match &lo {
                Some((d, s)) => Some(d.ceil_int(*s).ok_or_else(too_big)?),
                None => None,
            };
            let h = match &hi {
                Some((d, s)) => Some(d.floor_int(*s).ok_or_else(too_big)?),
                None => None,
            };
            if let (Some(l), Some(h)) = (l, h) {
                if l > h {
                    return Ok(Expr::Nothing);
                }
            }
            // Draft 4: an integer is written without a fraction (`1.0` is not one).
            let dot_zero = !self.draft.draft4 && !self.opts.plain_integers;
            if l.is_none() && h.is_none() {
                self.json.integer(dot_zero)
            } else {
                integer_range(l, h, dot_zero)
            }
        } else if lo.is_none() && hi.is_none() {
            self.json.number()
        } else {
            if let (Some((l, ls)), Some((h, hs))) = (&lo, &hi) {
                use std::cmp::Ordering::*;
                match l.cmp_value(h) {
                    Greater => return Ok(Expr::Nothing),
                    Equal if *ls || *hs => return Ok(Expr::Nothing),
                    _ => {}
                }
            }
            number_range(lo, hi).ok_or_else(too_big)?
        };
        match step {
            None => Ok(base),
            Some(step) => {
                let dfa = multiple_of(&step).ok_or_else(|| {
                    GrammarError::unsupported(
                        "multipleOf",
                        ptr,
                        "multipleOf with more than 100000 residues",
                    )
                })?;
                Ok(Expr::and(vec![base, dfa]))
            }
        }
    }

    /// The text between the quotes of a string valid under `m`'s string keywords.
    fn string_content(&mut self, m: &Obj, ptr: &str) -> Result<Expr, GrammarError> {
        let mut parts = Vec::new();
        let (min, max) = (
            self.count(m, "minLength", ptr)?.unwrap_or(0),
            self.count(m, "maxLength", ptr)?,
        );
        if max.is_some_and(|x| x < min) {
            return Ok(Expr::Nothing);
        }
        let patterns: Vec<Value> = match m.get("pattern") {
            None => vec![],
            Some(Value::Array(list)) => list.clone(),
            Some(p) => vec![p.clone()],
        };
        // A pattern whose shortest match has more characters than `maxLength` leaves no
        // string at all: say so at compile time rather than leave the automaton a dead end
        // after the opening quote.
        if let Some(max) = max {
            for p in patterns.iter().filter_map(Value::as_str) {
                if crate::regex::pattern_min_chars(p).is_some_and(|n| n > max as usize) {
                    return Ok(Expr::Nothing);
                }
            }
        }
        // A `minLength` that a pattern's or format's shortest string already reaches adds
        // nothing, and intersecting would cost a determinization.
        let format_regex = m
            .get("format")
            .and_then(Value::as_str)
            .filter(|_| self.opts.format == FormatMode::Assert)
            .and_then(crate::formats::format_regex);
        let implied = max.is_none()
            && patterns
                .iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .chain(format_regex)
                .any(|p| crate::regex::pattern_min_chars(&p).is_some_and(|n| n >= min as usize));
        if (min > 0 || max.is_some()) && !implied {
            parts.push(Expr::repeat(any_string_char(), min, max));
        }
        for p in patterns {
            let p = p
                .as_str()
                .ok_or_else(|| GrammarError::invalid(ptr, "pattern must be a string"))?;
            parts.push(pattern_to_string_content(p, &format!("{ptr}/pattern"))?);
        }
        if let Some(f) = m.get("format") {
            let f = f
                .as_str()
                .ok_or_else(|| GrammarError::invalid(ptr, "format must be a string"))?;
            if self.opts.format == FormatMode::Assert {
                match crate::formats::format_regex(f) {
                    Some(_) if f == "email" => {
                        // RFC 5321: a local part of at most 64 characters, bounded on its own
                        // (cheap); the 254-character total with `format_total_lengths`.
                        // (Address literals are short: the total bounds only named domains.)
                        let (local, name, literal) = crate::formats::email_parts();
                        let exact =
                            |re: &str| pattern_to_string_content(&format!("^(?:{re})$"), ptr);
                        let local = Expr::shared(Expr::and(vec![
                            exact(&local)?,
                            Expr::repeat(any_string_char(), 1, Some(64)),
                        ]));
                        let mut named =
                            Expr::concat([local.clone(), Expr::literal("@"), exact(&name)?]);
                        if self.opts.format_total_lengths {
                            named = Expr::and(vec![
                                named,
                                Expr::repeat(any_string_char(), 3, Some(254)),
                            ]);
                        }
                        let literal = Expr::concat([local, Expr::literal("@"), exact(&literal)?]);
                        parts.push(Expr::alt([named, literal]));
                    }
                    Some(_) if f == "time" || f == "date-time" => {
                        // Leap seconds are a second branch: alone, the exact language as an
                        // explicit DFA built once per process (`formats::leap_second_time`);
                        // intersected with a pattern or length, where its 11,000 states would
                        // be multiplied eagerly, only 23:59:60 UTC (a subset: never invalid).
                        let time = crate::formats::time();
                        let leap = if parts.is_empty() {
                            Expr::Dfa(crate::formats::leap_second_time())
                        } else {
                            let utc = crate::formats::LEAP_SECOND_UTC;
                            pattern_to_string_content(&format!("^{utc}$"), ptr)?
                        };
                        let time = Expr::alt([
                            pattern_to_string_content(&time, &format!("{ptr}/format"))?,
                            leap,
                        ]);
                        parts.push(if f == "date-time" {
                            let date = crate::formats::date_time_prefix();
                            Expr::concat([pattern_to_string_content(&date, ptr)?, time])
                        } else {
                            time
                        });
                    }
                    Some(re) => {
                        parts.push(pattern_to_string_content(&re, &format!("{ptr}/format"))?);
                        if f == "hostname" {
                            // No "--" in label positions 3-4: IDN A-labels (xn--) cannot be
                            // validated by a regex, so they are refused rather than accepted
                            // unchecked. The 253-character total with `format_total_lengths`
                            // (a lazily stepped counter over the label automaton).
                            let idn = pattern_to_string_content(r"^(?:[^.]*\.)*[^.]{2}--", ptr)?;
                            parts.push(Expr::Not(Box::new(idn)));
                            if self.opts.format_total_lengths {
                                parts.push(Expr::repeat(any_string_char(), 1, Some(253)));
                            }
                        }
                    }
                    None => self.refuse("format", ptr, &format!("unknown format {f:?}"))?,
                }
            }
        }
        Ok(match parts.len() {
            0 => Expr::star(any_string_char()),
            _ => Expr::and(parts),
        })
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

    fn array(&mut self, m: &Obj, ptr: &str) -> Result<Expr, GrammarError> {
        if m.contains_key("contains") {
            return self.array_contains(m, ptr);
        }
        let min = self.count(m, "minItems", ptr)?.unwrap_or(0);
        let mut max = self.count(m, "maxItems", ptr)?;
        if m.get("uniqueItems") == Some(&Value::Bool(true)) && max.is_none_or(|x| x > 1) {
            self.refuse(
                "uniqueItems",
                ptr,
                "uniqueItems on arrays that may hold more than one item",
            )?;
        }
        // Positional items, then the schema for the rest.
        let (prefix, rest): (Vec<Value>, Value) = match (m.get("prefixItems"), m.get("items")) {
            (Some(Value::Array(p)), items) => {
                (p.clone(), items.cloned().unwrap_or(Value::Bool(true)))
            }
            (None, Some(Value::Array(p))) => (
                p.clone(),
                m.get("additionalItems")
                    .cloned()
                    .unwrap_or(Value::Bool(true)),
            ),
            (None, Some(items)) => (vec![], items.clone()),
            (None, None) => (vec![], Value::Bool(true)),
            (Some(_), _) => return Err(GrammarError::invalid(ptr, "prefixItems must be an array")),
        };
        // `unevaluatedItems` applies to the items nothing else evaluates: those past the
        // positional ones, unless `items` (2020-12) or `additionalItems` (array `items`)
        // already covers them.
        let covered =
            m.get("items").is_some_and(|i| !i.is_array()) || m.contains_key("additionalItems");
        let rest = match m.get("unevaluatedItems") {
            Some(u) if !covered => u.clone(),
            _ => rest,
        };
        let mut elems = Vec::new();
        for (i, p) in prefix.iter().enumerate() {
            let e = self.schema_expr(p, &format!("{ptr}/prefixItems/{i}"))?;
            if e.is_nothing() {
                max = Some(max.map_or(i as u32, |x| x.min(i as u32)));
                break;
            }
            elems.push(e);
        }
        let rest_expr = self.schema_expr(&rest, &format!("{ptr}/items"))?;
        if rest_expr.is_nothing() {
            let n = elems.len() as u32;
            max = Some(max.map_or(n, |x| x.min(n)));
        }
        let max_items = max;
        if max_items.is_some_and(|x| x < min) {
            return Ok(Expr::Nothing);
        }
        let sep = Expr::concat([self.json.ws(), Expr::literal(","), self.json.ws()]);
        let rest_expr = if rest_expr.is_nothing() {
            rest_expr
        } else {
            self.share(rest_expr, &format!("{ptr}/items"))
        };
        // tail(i): the items from position i on, given i items already written (i >= 1).
        let p = elems.len() as u32;
        let tail_rest = |from: u32| -> Expr {
            let lo = min.saturating_sub(from);
            let hi = max_items.map(|x| x.saturating_sub(from));
            Expr::repeat(Expr::concat([sep.clone(), rest_expr.clone()]), lo, hi)
        };
        let mut tail = tail_rest(p.max(1));
        for i in (1..p).rev() {
            let more = if max_items.is_some_and(|x| i >= x) {
                Expr::Nothing
            } else {
                Expr::concat([sep.clone(), elems[i as usize].clone(), tail])
            };
            tail = Expr::alt([if i >= min { Expr::Empty } else { Expr::Nothing }, more]);
        }
        let first = if p > 0 {
            elems[0].clone()
        } else {
            rest_expr.clone()
        };
        let body = if max_items == Some(0) {
            Expr::Empty
        } else {
            Expr::alt([
                if min == 0 { Expr::Empty } else { Expr::Nothing },
                Expr::concat([first, tail]),
            ])
        };
        Ok(self.json.array_of(body))
    }

    /// Arrays under `contains` (with `minContains`/`maxContains`): the elements matching the
    /// `contains` schema are counted along the array.
    fn array_contains(&mut self, m: &Obj, ptr: &str) -> Result<Expr, GrammarError> {
        for k in [
            "prefixItems",
            "minItems",
            "maxItems",
            "uniqueItems",
            "additionalItems",
            "unevaluatedItems",
        ] {
            if m.contains_key(k) && !(k == "uniqueItems" && m[k] == Value::Bool(false)) {
                return Err(GrammarError::unsupported(k, ptr, "combined with contains"));
            }
        }
        if m.get("items").is_some_and(Value::is_array) {
            return Err(GrammarError::unsupported(
                "items",
                ptr,
                "array-form items combined with contains",
            ));
        }
        let min_c = self.count(m, "minContains", ptr)?.unwrap_or(1);
        let max_c = self.count(m, "maxContains", ptr)?;
        if max_c.is_some_and(|x| x < min_c) {
            return Ok(Expr::Nothing);
        }
        let items = m.get("items").cloned().unwrap_or(Value::Bool(true));
        let item_parts = self.parts(&items, &format!("{ptr}/items"))?;
        let hit_parts = self.parts(&m["contains"], &format!("{ptr}/contains"))?;
        let mut hit = Vec::new();
        let mut miss = Vec::new();
        for t in 0..6 {
            let (i, h) = (&item_parts[t], &hit_parts[t]);
            let both = if i.is_nothing() || h.is_nothing() {
                Expr::Nothing
            } else if i == h || items == Value::Bool(true) {
                h.clone()
            } else if !i.has_call() && !h.has_call() {
                Expr::and(vec![i.clone(), h.clone()])
            } else {
                return Err(GrammarError::unsupported(
                    "contains",
                    ptr,
                    "intersecting recursive items and contains schemas",
                ));
            };
            hit.push(both);
            if max_c.is_some() {
                miss.push(if h.is_nothing() {
                    i.clone()
                } else if i.is_nothing() {
                    Expr::Nothing
                } else if !i.has_call() && !h.has_call() {
                    Expr::and(vec![i.clone(), Expr::Not(Box::new(h.clone()))])
                } else {
                    return Err(GrammarError::unsupported(
                        "maxContains",
                        ptr,
                        "negating a recursive contains schema",
                    ));
                });
            }
        }
        let hit = Expr::alt(hit);
        // Without maxContains, uncounted elements may match too: any item will do.
        let miss = if max_c.is_some() {
            Expr::alt(miss)
        } else {
            alt_parts(item_parts)
        };
        let hit = self.share(hit, &format!("{ptr}/contains"));
        let miss = self.share(miss, &format!("{ptr}/items"));
        let sep = Expr::concat([self.json.ws(), Expr::literal(","), self.json.ws()]);
        let more = |e: &Expr| Expr::concat([sep.clone(), e.clone()]);
        // tail(c): the rest of the array after the first element, c hits so far.
        let tail = |c: u32| -> Expr {
            let mut next = match max_c {
                None => Expr::star(more(&Expr::alt([miss.clone(), hit.clone()]))),
                Some(_) => Expr::star(more(&miss)),
            };
            let top = max_c.unwrap_or(min_c);
            for k in (c..top).rev() {
                let step = Expr::concat([more(&hit), next]);
                next = Expr::concat([
                    Expr::star(more(&miss)),
                    if k >= min_c {
                        Expr::alt([Expr::Empty, step])
                    } else {
                        step
                    },
                ]);
            }
            next
        };
        let first = Expr::alt([
            Expr::concat([miss.clone(), tail(0)]),
            if max_c != Some(0) {
                Expr::concat([hit.clone(), tail(1.min(max_c.unwrap_or(1)))])
            } else {
                Expr::Nothing
            },
        ]);
        let body = Expr::alt([
            if min_c == 0 {
                Expr::Empty
            } else {
                Expr::Nothing
            },
            first,
        ]);
        Ok(self.json.array_of(body))
    }

    fn object(
        &mut self,
        m: &Obj,
        ptr: &str,
        presence: Option<&Presence>,
    ) -> Result<Expr, GrammarError> {
        let min = self.count(m, "minProperties", ptr)?.unwrap_or(0);
        let max = self.count(m, "maxProperties", ptr)?;
        if max.is_some_and(|x| x < min) {
            return Ok(Expr::Nothing);
        }
        let empty = Obj::new();
        let props = match m.get("properties") {
            None => &empty,
            Some(Value::Object(p)) => p,
            Some(_) => return Err(GrammarError::invalid(ptr, "properties must be an object")),
        };
        let required: Vec<String> = match m.get("required") {
            None => vec![],
            Some(Value::Array(r)) => r
                .iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect(),
            Some(_) => return Err(GrammarError::invalid(ptr, "required must be an array")),
        };
        let additional = match (
            m.get("additionalProperties"),
            m.get("unevaluatedProperties"),
        ) {
            (Some(a), _) => a.clone(),
            (None, Some(u)) => u.clone(),
            (None, None) => Value::Bool(true),
        };
        let patterns: Vec<(String, Value)> = match m.get("patternProperties") {
            None => vec![],
            Some(Value::Object(p)) => p.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            Some(_) => {
                return Err(GrammarError::invalid(
                    ptr,
                    "patternProperties must be an object",
                ))
            }
        };
        if patterns.len() > 4 {
            self.refuse("patternProperties", ptr, "more than 4 patterns")?;
        }
        let mut pattern_contents = Vec::new();
        for (p, _) in &patterns {
            pattern_contents.push(pattern_to_string_content(
                p,
                &format!("{ptr}/patternProperties"),
            )?);
        }
        let names_content = match m.get("propertyNames") {
            None | Some(Value::Bool(true)) => None,
            Some(Value::Bool(false)) => Some(Expr::Nothing),
            Some(Value::Object(pn)) => {
                Some(self.property_names(pn, &format!("{ptr}/propertyNames"))?)
            }
            Some(_) => return Err(GrammarError::invalid(ptr, "propertyNames must be a schema")),
        };
        // Declared properties, then required names that are not declared.
        // Borrowed: property schemas are only copied where pattern schemas join them.
        let mut declared: Vec<(&str, &Value)> =
            props.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let tracked: &[String] = presence.map_or(&[], |p| p.names.as_slice());
        for r in required.iter().chain(tracked) {
            if !props.contains_key(r) && !declared.iter().any(|(n, _)| n == r) {
                declared.push((r.as_str(), &additional));
            }
        }
        let mut members = Vec::new();
        for &(name, schema) in &declared {
            let quoted = serde_json::to_string(name).unwrap_or_default();
            let content = &quoted.as_bytes()[1..quoted.len() - 1];
            // A declared name that matches patterns must satisfy those schemas too.
            let mut schema = std::borrow::Cow::Borrowed(schema);
            let from_props = props.contains_key(name);
            for (i, (_, ps)) in patterns.iter().enumerate() {
                if matches(&pattern_contents[i], &self.rules, content) {
                    schema = std::borrow::Cow::Owned(if from_props {
                        json!({"allOf": [schema.into_owned(), ps]})
                    } else {
                        ps.clone()
                    });
                }
            }
            if !from_props
                && !patterns.is_empty()
                && patterns
                    .iter()
                    .enumerate()
                    .any(|(i, _)| matches(&pattern_contents[i], &self.rules, content))
            {
                // Undeclared but required and matched by a pattern: pattern schemas only.
                let matched: Vec<Value> = patterns
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| matches(&pattern_contents[*i], &self.rules, content))
                    .map(|(_, (_, s))| s.clone())
                    .collect();
                schema = std::borrow::Cow::Owned(json!({"allOf": matched}));
            }
            let name_ok = names_content
                .as_ref()
                .is_none_or(|nc| matches(nc, &self.rules, content));
            let vptr = format!(
                "{ptr}/properties/{}",
                name.replace('~', "~0").replace('/', "~1")
            );
            let value = if name_ok {
                self.schema_expr(&schema, &vptr)?
            } else {
                Expr::Nothing
            };
            let is_required = required.iter().any(|r| r == name);
            if value.is_nothing() {
                if is_required {
                    return Ok(Expr::Nothing);
                }
                continue;
            }
            let member = Expr::concat([
                Expr::literal(quoted.as_bytes()),
                self.json.ws(),
                Expr::literal(":"),
                self.json.ws(),
                value,
            ]);
            // Shared: the member follows the same continuation whether or not it is the first
            // one written, so it is compiled once (nested objects would otherwise double at
            // every level).
            let bit = tracked.iter().position(|t| t == name).map(|b| b as u32);
            members.push((Expr::shared(member), is_required, bit));
        }
        // Members not declared: keys matching patterns, then the rest under additionalProperties.
        let declared_names = Expr::alt(declared.iter().map(|(n, _)| {
            let q = serde_json::to_string(n).unwrap_or_default();
            Expr::literal(&q.as_bytes()[1..q.len() - 1])
        }));
        let any_key = Expr::star(any_string_char());
        let mut extra_members = Vec::new();
        let n = patterns.len();
        let mut regions: Vec<(Vec<usize>, Value)> = Vec::new();
        for mask in 1..(1usize << n) {
            let inside: Vec<usize> = (0..n).filter(|i| mask & (1 << i) != 0).collect();
            let schema = if inside.len() == 1 {
                patterns[inside[0]].1.clone()
            } else {
                json!({"allOf": inside.iter().map(|&i| patterns[i].1.clone()).collect::<Vec<_>>()})
            };
            regions.push((inside, schema));
        }
        regions.push((vec![], additional.clone()));
        for (inside, schema) in regions {
            let vptr = if inside.is_empty() {
                format!("{ptr}/additionalProperties")
            } else {
                format!("{ptr}/patternProperties")
            };
            let value = self.schema_expr(&schema, &vptr)?;
            if value.is_nothing() {
                continue;
            }
            // The common case, no patterns: "any key but the declared ones" as a plain
            // expression (no intersection to build).
            let except = if n == 0 && !declared.is_empty() {
                crate::json::key_except(
                    &declared
                        .iter()
                        .map(|(k, _)| k.to_string())
                        .collect::<Vec<_>>(),
                )
            } else {
                None
            };
            let mut key_parts = vec![except.clone().unwrap_or_else(|| any_key.clone())];
            for (i, content) in pattern_contents.iter().enumerate() {
                if inside.contains(&i) {
                    key_parts.push(content.clone());
                } else {
                    key_parts.push(Expr::Not(Box::new(content.clone())));
                }
            }
            if !declared.is_empty() && except.is_none() {
                key_parts.push(Expr::Not(Box::new(declared_names.clone())));
            }
            if let Some(nc) = &names_content {
                key_parts.push(nc.clone());
            }
            let key = Expr::and(key_parts);
            let value = self.share(value, &vptr);
            extra_members.push(Expr::concat([
                self.json.quoted(key),
                self.json.ws(),
                Expr::literal(":"),
                self.json.ws(),
                value,
            ]));
        }
        let extra = Expr::shared(Expr::alt(extra_members));
        let sep = Expr::concat([self.json.ws(), Expr::literal(","), self.json.ws()]);
        if self.opts.property_order == crate::PropertyOrder::Any && members.len() <= 64 {
            let body = Expr::Object(std::sync::Arc::new(crate::ObjectExpr {
                presence: presence.map(|p| {
                    (
                        members.iter().map(|(_, _, b)| *b).collect(),
                        p.accept.clone(),
                    )
                }),
                members: members.iter().map(|(m, r, _)| (m.clone(), *r)).collect(),
                extra,
                sep,
                min,
                max,
            }));
            return Ok(Expr::concat([
                Expr::literal("{"),
                self.json.ws(),
                body,
                self.json.ws(),
                Expr::literal("}"),
            ]));
        }
        let body = ObjectBody {
            members: &members,
            extra: &extra,
            sep,
            min,
            max,
            counted: min > 0 || max.is_some(),
            presence: presence.map(|p| p.accept.as_slice()),
            memo: HashMap::new(),
        }
        .build();
        Ok(Expr::concat([
            Expr::literal("{"),
            self.json.ws(),
            body,
            self.json.ws(),
            Expr::literal("}"),
        ]))
    }

    /// The content of property names allowed by a `propertyNames` schema.
    fn property_names(&mut self, pn: &Obj, ptr: &str) -> Result<Expr, GrammarError> {
        let string = Value::Object(pn.clone());
        let parts = self.parts(&string, ptr)?;
        // Strip the quotes: compile the string part's content directly for the common keywords.
        if parts[STRING].is_nothing() {
            return Ok(Expr::Nothing);
        }
        let simple = pn.keys().all(|k| {
            !is_validation(k)
                || [
                    "type",
                    "minLength",
                    "maxLength",
                    "pattern",
                    "format",
                    "enum",
                    "const",
                ]
                .contains(&k.as_str())
        });
        if !simple {
            self.refuse(
                "propertyNames",
                ptr,
                "only string keywords, enum and const are supported here",
            )?;
            return Ok(Expr::star(any_string_char()));
        }
        let values: Option<Vec<Value>> = pn
            .get("enum")
            .and_then(Value::as_array)
            .cloned()
            .or_else(|| pn.get("const").map(|c| vec![c.clone()]));
        let content = self.string_content(pn, ptr)?;
        Ok(match values {
            Some(vs) => Expr::alt(vs.iter().filter_map(|v| {
                let s = v.as_str()?;
                let q = serde_json::to_string(s).ok()?;
                let c = q.as_bytes()[1..q.len() - 1].to_vec();
                matches(&content, &self.rules, &c).then(|| Expr::literal(c))
            })),
            None => content,
        })
    }
}

/// A constraint on which of a few named properties an object has, from `dependentRequired`
/// (array `dependencies`) and `anyOf`/`oneOf` of branches that only list `required` names:
/// compiled into the object itself (a bit per name along the members) instead of one object
/// per branch, intersected or complemented.
struct Presence {
    names: Vec<String>,
    /// `accept[mask]`: whether an object with exactly the tracked names in `mask` is valid.
    accept: Vec<bool>,
    /// Whether values of the other types are valid (`required` only constrains objects).
    others: bool,
}

/// Most names a [`Presence`] tracks (its table has `2^n` entries).
const MAX_PRESENCE_NAMES: usize = 10;

/// One presence rule over names.
enum PresenceRule {
    /// The first name present implies the others.
    Implies(String, Vec<String>),
    /// The first name present excludes the others.
    Excludes(String, Vec<String>),
    /// Some list fully present (`exactly`: exactly one list).
    Lists {
        lists: Vec<Vec<String>>,
        exactly: bool,
    },
}

/// The keywords of `m` that only constrain which properties are present, as a [`Presence`],
/// and `m` without them; `None` if there are none, or if other applicators remain.
fn presence_constraints(m: &Obj) -> Option<(Obj, Presence)> {
    let names_of = |v: &Value| -> Option<Vec<String>> {
        v.as_array()?
            .iter()
            .map(|x| x.as_str().map(String::from))
            .collect()
    };
    // A branch that is only `{"required": [...]}` (annotations aside).
    let required_only = |b: &Value| -> Option<Vec<String>> {
        let o = b.as_object()?;
        if o.keys().any(|k| is_validation(k) && k != "required") {
            return None;
        }
        names_of(o.get("required").unwrap_or(&json!([])))
    };
    let lists_rule = |v: &Value, exactly: bool| -> Option<PresenceRule> {
        let lists: Vec<Vec<String>> = v
            .as_array()?
            .iter()
            .map(required_only)
            .collect::<Option<_>>()?;
        (!lists.is_empty()).then_some(PresenceRule::Lists { lists, exactly })
    };
    // What to take out of `m`, applied below only if some rule was found: cloning `m`
    // (the whole subschema) on every visit made large schemas quadratic.
    let mut rules = Vec::new();
    let mut removed: Vec<&str> = Vec::new();
    let mut all_of_kept: Option<Vec<Value>> = None;
    for key in ["dependentRequired", "dependencies"] {
        if let Some(Value::Object(d)) = m.get(key) {
            // `{"a": ["b"]}`: a needs b; `{"a": {"properties": {"b": false}}}`: a excludes b.
            let forbidden = |v: &Value| -> Option<Vec<String>> {
                let o = v.as_object()?;
                if o.keys().any(|k| is_validation(k) && k != "properties") {
                    return None;
                }
                o.get("properties")?
                    .as_object()?
                    .iter()
                    .map(|(n, s)| {
                        let never = *s == Value::Bool(false) || *s == json!({"not": {}});
                        never.then(|| n.clone())
                    })
                    .collect()
            };
            let implied: Option<Vec<PresenceRule>> = d
                .iter()
                .map(|(k, v)| match names_of(v) {
                    Some(n) => Some(PresenceRule::Implies(k.clone(), n)),
                    None => Some(PresenceRule::Excludes(k.clone(), forbidden(v)?)),
                })
                .collect();
            if let Some(implied) = implied {
                rules.extend(implied);
                removed.push(key);
            }
        }
    }
    for (key, exactly) in [("anyOf", false), ("oneOf", true)] {
        if let Some(rule) = m.get(key).and_then(|v| lists_rule(v, exactly)) {
            rules.push(rule);
            removed.push(key);
        }
    }
    if let Some(Value::Array(all)) = m.get("allOf") {
        let mut kept = Vec::new();
        for b in all {
            let o = b.as_object();
            let only = |k: &str| o.is_some_and(|o| o.keys().all(|x| !is_validation(x) || x == k));
            let rule = if only("anyOf") {
                o.and_then(|o| lists_rule(o.get("anyOf")?, false))
            } else if only("oneOf") {
                o.and_then(|o| lists_rule(o.get("oneOf")?, true))
            } else {
                None
            };
            match rule {
                Some(r) => rules.push(r),
                None => kept.push(b.clone()),
            }
        }
        if kept.len() < all.len() {
            if kept.is_empty() {
                removed.push("allOf");
            } else {
                all_of_kept = Some(kept);
            }
        }
    }
    if rules.is_empty() {
        return None;
    }
    let mut rest: Obj = m
        .iter()
        .filter(|(k, _)| !removed.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(kept) = all_of_kept {
        rest.insert("allOf".into(), Value::Array(kept));
    }
    let applicators = [
        "anyOf",
        "oneOf",
        "allOf",
        "not",
        "if",
        "$ref",
        "dependentSchemas",
        "dependencies",
        "dependentRequired",
        "unevaluatedProperties",
    ];
    if applicators.iter().any(|k| rest.contains_key(*k)) {
        return None;
    }
    let mut names: Vec<String> = Vec::new();
    for r in &rules {
        let all: Vec<&String> = match r {
            PresenceRule::Implies(k, v) | PresenceRule::Excludes(k, v) => {
                std::iter::once(k).chain(v).collect()
            }
            PresenceRule::Lists { lists, .. } => lists.iter().flatten().collect(),
        };
        for n in all {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
    }
    if names.len() > MAX_PRESENCE_NAMES {
        return None;
    }
    let bit = |n: &String| 1u32 << names.iter().position(|x| x == n).unwrap_or(0);
    let set = |v: &[String]| v.iter().fold(0u32, |a, n| a | bit(n));
    let accept = (0..1u32 << names.len())
        .map(|mask| {
            rules.iter().all(|r| match r {
                PresenceRule::Implies(k, v) => mask & bit(k) == 0 || mask & set(v) == set(v),
                PresenceRule::Excludes(k, v) => mask & bit(k) == 0 || mask & set(v) == 0,
                PresenceRule::Lists { lists, exactly } => {
                    let full = lists.iter().filter(|l| mask & set(l) == set(l)).count();
                    if *exactly {
                        full == 1
                    } else {
                        full >= 1
                    }
                }
            })
        })
        .collect();
    // Non-objects satisfy every `required`: each list is "fully present".
    let others = rules.iter().all(|r| match r {
        PresenceRule::Implies(..) | PresenceRule::Excludes(..) => true,
        PresenceRule::Lists { lists, exactly } => !*exactly || lists.len() == 1,
    });
    Some((
        rest,
        Presence {
            names,
            accept,
            others,
        },
    ))
}

/// Builds the members of an object in schema order: declared properties (optional ones may be
/// skipped), then any number of extra members, with an optional count of members.
struct ObjectBody<'a> {
    /// Member expression, required, and the member's bit in the presence mask if tracked.
    members: &'a [(Expr, bool, Option<u32>)],
    extra: &'a Expr,
    sep: Expr,
    min: u32,
    max: Option<u32>,
    counted: bool,
    /// Which masks of tracked members may end the object (see [`Presence`]).
    presence: Option<&'a [bool]>,
    memo: HashMap<(usize, u32, bool, u32), Expr>,
}

impl ObjectBody<'_> {
    fn build(mut self) -> Expr {
        self.at(0, 0, true, 0)
    }

    /// Members from declared index `i` on, `c` members written so far, `first` if none yet,
    /// `mask` the tracked members written.
    fn at(&mut self, i: usize, c: u32, first: bool, mask: u32) -> Expr {
        let c = if self.counted { c } else { 0 };
        if let Some(e) = self.memo.get(&(i, c, first, mask)) {
            return e.clone();
        }
        let e = if i == self.members.len() {
            match self.presence {
                Some(accept) if !accept[mask as usize] => Expr::Nothing,
                _ => self.extras(c, first),
            }
        } else {
            let (member, required, bit) = &self.members[i];
            let take = if self.counted && self.max.is_some_and(|m| c + 1 > m) {
                Expr::Nothing
            } else {
                let next = self.at(i + 1, c + 1, false, mask | bit.map_or(0, |b| 1 << b));
                Expr::concat([
                    if first { Expr::Empty } else { self.sep.clone() },
                    member.clone(),
                    next,
                ])
            };
            let skip = if *required {
                Expr::Nothing
            } else {
                self.at(i + 1, c, first, mask)
            };
            Expr::alt([take, skip])
        };
        let e = Expr::shared(e);
        self.memo.insert((i, c, first, mask), e.clone());
        e
    }

    fn extras(&self, c: u32, first: bool) -> Expr {
        let lo = if self.counted {
            self.min.saturating_sub(c)
        } else {
            0
        };
        let hi = if self.counted {
            self.max.map(|m| m.saturating_sub(c))
        } else {
            None
        };
        if self.extra.is_nothing() || matches!(self.extra, Expr::Shared(e) if e.is_nothing()) {
            return if lo == 0 { Expr::Empty } else { Expr::Nothing };
        }
        let with_sep = Expr::concat([self.sep.clone(), self.extra.clone()]);
        if first {
            let rest = Expr::repeat(
                with_sep,
                lo.saturating_sub(1),
                hi.map(|h| h.saturating_sub(1)),
            );
            let some = if hi == Some(0) {
                Expr::Nothing
            } else {
                Expr::concat([self.extra.clone(), rest])
            };
            Expr::alt([if lo == 0 { Expr::Empty } else { Expr::Nothing }, some])
        } else {
            Expr::repeat(with_sep, lo, hi)
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
    if m.contains_key("patternProperties") {
        return &TRUE;
    }
    m.get("additionalProperties").unwrap_or(&TRUE)
}

/// True if an object valid under `m` cannot have property `k`.
fn forbids_property(m: &Obj, k: &str) -> bool {
    *property_schema(m, k) == Value::Bool(false)
}

/// A schema object seen without one of its keywords (see `Compiler::disjoint`).
type Side<'a> = (&'a Obj, Option<&'static str>);

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
