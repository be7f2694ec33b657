//! Applicators: `allOf` (merged first), `anyOf`, `oneOf`, `not`, `if`/`then`/`else` and
//! `dependentSchemas`, worked on a schema's per-type parts.

use super::*;

impl Compiler<'_> {
    pub(super) fn object_parts(&mut self, m: &Obj, ptr: &str) -> Result<Parts, GrammarError> {
        let normalized = normalize(m, self.draft.conditionals);
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
            let unfolded_from = self.unfolded.len();
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
            let unfolded: Vec<String> = self.unfolded.drain(unfolded_from..).collect();
            let depth = self.inline_stack.len();
            self.inline_stack.extend(unfolded);
            let out = self.merged_parts(acc, separate, ptr);
            self.inline_stack.truncate(depth);
            return out;
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
            // The branches again for their complements (any member order), built when needed.
            let mut negated: Option<Vec<Parts>> = None;
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
                // A branch identical to another overlaps it completely: it never matches alone.
                let live_ids: Vec<usize> = live_ids
                    .iter()
                    .copied()
                    .filter(|&i| {
                        let e = &branches[i][t];
                        live_ids
                            .iter()
                            .filter(|&&j| {
                                let o = &branches[j][t];
                                o == e || bounded::same_shape(o, e)
                            })
                            .count()
                            == 1
                    })
                    .collect();
                let live: Vec<&Expr> = live_ids.iter().map(|&i| &branches[i][t]).collect();
                let recursive_overlap = || {
                    GrammarError::unsupported(
                        "oneOf",
                        ptr,
                        format!(
                            "branches that may overlap on {} values and contain recursion",
                            TYPES[t]
                        ),
                    )
                };
                let as_any_of = self.opts.oneof_as_anyof || self.opts.lenient;
                let as_any = |c: &mut Self| {
                    c.warn(
                        "oneOf",
                        ptr,
                        &format!("compiled as anyOf (oneof_as_anyof): branches may overlap on {} values, and a value matching several is accepted", TYPES[t]),
                    );
                    Expr::alt(live.iter().map(|e| (*e).clone()))
                };
                // Branches open to any JSON have no complement to subtract; each branch is
                // then compiled with the others negated as schemas (`allOf: [A, {not: B}]`),
                // kept only where `not` rewrote every negation of objects and arrays without a
                // complement (a complement of such values costs intersections far past the
                // state limit; one of scalars is small).
                let through_not_parts = |c: &mut Self| -> Result<Expr, GrammarError> {
                    // Each branch as `not` will see it: itself, not its `$ref`.
                    let seen: Vec<Value> = live_ids
                        .iter()
                        .map(|&j| {
                            c.resolved(&list[j], ptr)
                                .map_or_else(|| list[j].clone(), |b| b.into_owned())
                        })
                        .collect();
                    let mut alts = Vec::with_capacity(live_ids.len());
                    for (k, &i) in live_ids.iter().enumerate() {
                        // Branches proven disjoint from this one never match with it.
                        let (apart, ids) = (&apart, &live_ids);
                        let others = || {
                            seen.iter()
                                .enumerate()
                                .filter(move |&(o, _)| o != k && !apart[i][ids[o]])
                        };
                        // The other branches' property names, declared (`true`: no
                        // constraint) so that their negations may name them under schema
                        // order; those members then come in declared order.
                        let names: serde_json::Map<String, Value> = others()
                            .flat_map(|(_, b)| named_properties(b))
                            .map(|n| (n.to_string(), Value::Bool(true)))
                            .collect();
                        let mut all = vec![list[i].clone()];
                        if !names.is_empty() {
                            all.push(serde_json::json!({ "properties": names }));
                        }
                        all.extend(others().map(|(_, b)| serde_json::json!({ "not": b })));
                        let p = c.parts(
                            &serde_json::json!({ "allOf": all }),
                            &format!("{ptr}/oneOf/{i}"),
                        )?;
                        alts.push(p[t].clone());
                    }
                    Ok(Expr::alt(alts))
                };
                // The rewrite where it needs no complement of objects or arrays; otherwise
                // `anyOf` where asked for (`oneof_as_anyof`), else the refusal.
                let through_not = |c: &mut Self| -> Result<Expr, GrammarError> {
                    let (rules, warnings) = (c.rules.len(), c.warnings.len());
                    let out = through_not_parts(c);
                    let complement = |e: &Expr| e.has_structured_complement();
                    if out.as_ref().map_or(true, complement)
                        || c.rules[rules..].iter().any(|r| complement(&r.expr))
                    {
                        c.warnings.truncate(warnings);
                        return match as_any_of {
                            true => Ok(as_any(c)),
                            false => Err(recursive_overlap()),
                        };
                    }
                    out
                };
                out[t] = match live.len() {
                    0 => Expr::Nothing,
                    1 => live[0].clone(),
                    _ if live.iter().any(|e| e.has_call()) => through_not(self)?,
                    _ => {
                        if negated.is_none() {
                            let mut v = Vec::with_capacity(list.len());
                            for (i, b) in list.iter().enumerate() {
                                v.push(self.negated_parts(b, &format!("{ptr}/oneOf/{i}"))?);
                            }
                            negated = Some(v);
                        }
                        let negated = negated.as_ref().expect("built");
                        if live_ids.iter().any(|&i| negated[i][t].has_call()) {
                            out[t] = through_not(self)?;
                            continue;
                        }
                        Expr::alt(live_ids.iter().map(|&i| {
                            let mut terms = vec![branches[i][t].clone()];
                            for &j in &live_ids {
                                if j != i {
                                    terms.push(Expr::Not(Box::new(negated[j][t].clone())));
                                }
                            }
                            Expr::and(terms)
                        }))
                    }
                };
            }
            return Ok(out);
        }
        if let Some(not) = m.get("not") {
            if accepts_everything(not) {
                // `not: {}` rules out every value: unsatisfiable, not a negation to refuse.
                return Ok(nothing());
            }
            if let Some(rewrite) = self.negation_rewrite(not, m, ptr)? {
                let types = possible_types(m);
                let (context, followed) = (base(&["not"]), rewrite.followed);
                let warnings = self.warnings.len();
                match self.with_negated(followed, |c| {
                    c.parts(&with_all_of(context, rewrite.schemas), ptr)
                }) {
                    // Pushed down to scalars, a negation can multiply `anyOf` lists past
                    // what one schema may hold, where the complement of scalars is small.
                    Err(GrammarError::Unsupported { .. }) if !types[OBJECT] && !types[ARRAY] => {
                        self.warnings.truncate(warnings)
                    }
                    out => return out,
                }
            }
            let positive = self.parts(&Value::Object(base(&["not"])), ptr)?;
            let negative = self.negated_parts(not, &format!("{ptr}/not"))?;
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
            let else_only = match self.negation_rewrite(&cond, &rest, ptr)? {
                Some(rewrite) => {
                    let schemas = rewrite.schemas.into_iter().chain([els]);
                    self.with_negated(rewrite.followed, |c| {
                        c.parts(&with_all_of(rest, schemas), ptr)
                    })?
                }
                None => {
                    let with_else = self.branch_parts(&rest, &els, &format!("{ptr}/else"))?;
                    let cond_parts = self.negated_parts(&cond, &format!("{ptr}/if"))?;
                    self.subtract(with_else, cond_parts, ptr, "if")?
                }
            };
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
    pub(super) fn branches(
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

    /// An `allOf` merged into `acc` (and the branches that could not be merged, intersected
    /// type by type). A merged schema met again while it is being compiled (a recursive
    /// `$ref` unfolded into the merge, see `expand_ref`) becomes a rule, as a recursive `$ref`
    /// target does.
    fn merged_parts(
        &mut self,
        acc: Value,
        separate: Vec<(Value, String)>,
        ptr: &str,
    ) -> Result<Parts, GrammarError> {
        let mut key = format!(
            "{}{}{}",
            if self.negating > 0 { "\u{1}" } else { "" },
            acc,
            Value::Array(separate.iter().map(|(b, _)| b.clone()).collect())
        );
        // Under bounded recursion no merge recurs: each level is its own (the unfoldings on
        // the stack tell them apart).
        if self.opts.max_recursion.is_some() {
            for t in &self.inline_stack {
                key.push('\u{0}');
                key.push_str(t);
            }
        }
        if let Some(&rule) = self.merged_rules.get(&key) {
            return Ok(self.call_parts(rule, &acc, ptr));
        }
        if self.merged_stack.contains(&key) {
            let rule = RuleId(self.rules.len() as u32);
            self.rules.push(Rule {
                name: format!("{ptr} (allOf)"),
                expr: Expr::Nothing,
            });
            self.merged_rules.insert(key.clone(), rule);
            let body = self.merged_inner(&acc, separate, ptr)?;
            let body = alt_parts(body);
            if body.is_nothing() {
                // No value even before recursing: the calls made on the way lead nowhere.
                return Ok(nothing());
            }
            self.rules[rule.0 as usize].expr = body;
            return Ok(self.call_parts(rule, &acc, ptr));
        }
        if self.merged_stack.len() > 64 {
            return Err(GrammarError::invalid(
                ptr,
                "allOf merges nested deeper than 64",
            ));
        }
        self.merged_stack.push(key);
        let out = self.merged_inner(&acc, separate, ptr);
        self.merged_stack.pop();
        out
    }

    fn merged_inner(
        &mut self,
        acc: &Value,
        separate: Vec<(Value, String)>,
        ptr: &str,
    ) -> Result<Parts, GrammarError> {
        let mut out = self.parts(acc, ptr)?;
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
        Ok(out)
    }

    /// Resolves a `{"$ref": ...}` (with or without siblings) into a mergeable schema value.
    pub(super) fn expand_ref(&mut self, v: &Value, ptr: &str) -> Result<Value, GrammarError> {
        let Some(m) = v.as_object() else {
            return Ok(v.clone());
        };
        let Some(r) = m.get("$ref") else {
            return Ok(v.clone());
        };
        let (target, tptr) = self.resolve(r, ptr)?;
        if self.expanding.contains(&tptr) {
            return Err(GrammarError::unsupported(
                "$ref",
                ptr,
                "a cycle of $refs with nothing between them",
            ));
        }
        // A recursive target is unfolded into the merge: the merged schema is compiled as a
        // rule where it recurs (see `merged_parts`); under bounded recursion, each unfolding
        // counts as a level and none goes past the limit.
        if self.inline_stack.contains(&tptr) || self.ref_rules.contains_key(&tptr) {
            if let Some(limit) = self.opts.max_recursion {
                let depth = self.inline_stack.iter().filter(|t| **t == tptr).count() as u32;
                if depth > limit {
                    return Ok(Value::Bool(false));
                }
            }
            self.unfolded.push(tptr.clone());
        }
        self.expanding.push(tptr.clone());
        self.inline_stack.push(tptr.clone());
        let expanded = self.expand_ref(target, &tptr);
        self.inline_stack.pop();
        self.expanding.pop();
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

    pub(super) fn branch_parts(
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

    /// `p - n` where the only recursion of either side is the "any value" rule: exact for
    /// values nested at most [`bounded::NOT_DEPTH`] deep (see [`bounded`]); `None` when
    /// another rule recurses.
    fn subtract_within_depth(&mut self, p: &Expr, n: &Expr) -> Option<Expr> {
        let any = self.any_rule?;
        if !(bounded::calls_only(p, any) && bounded::calls_only(n, any)) {
            return None;
        }
        let depth = bounded::NOT_DEPTH;
        let within = bounded::any_value_within(&self.json, depth);
        let by_count = bounded::value_within_by_count(&self.json, depth);
        Some(Expr::and(vec![
            bounded::substitute(p, any, &within),
            bounded::nesting_within(depth),
            Expr::Not(Box::new(bounded::substitute(n, any, &by_count))),
        ]))
    }

    /// `positive` minus `negative`, type by type (exact where neither side recurses).
    pub(super) fn subtract(
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
            } else if p == n
                || *n == any[t]
                || bounded::same_shape(p, n)
                || bounded::same_shape(n, &any[t])
            {
                Expr::Nothing
            } else if let Some(e) = self.subtract_within_depth(p, n) {
                e
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
}

/// The property names a schema declares or requires (its own keywords only).
fn named_properties(s: &Value) -> impl Iterator<Item = &str> {
    let declared = s.get("properties").and_then(Value::as_object);
    let required = s.get("required").and_then(Value::as_array);
    declared
        .into_iter()
        .flat_map(|d| d.keys().map(String::as_str))
        .chain(required.into_iter().flatten().filter_map(Value::as_str))
}
