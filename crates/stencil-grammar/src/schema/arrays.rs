//! Arrays: `items`, `prefixItems`, lengths, `contains` with its counts, `uniqueItems`.

use super::*;

impl Compiler<'_> {
    pub(super) fn array(&mut self, m: &Obj, ptr: &str) -> Result<Expr, GrammarError> {
        if m.contains_key("contains") {
            return self.array_contains(m, ptr);
        }
        let min = self.count(m, "minItems", ptr)?.unwrap_or(0);
        let mut max = self.count(m, "maxItems", ptr)?;
        let mut distinct = false;
        if m.get("uniqueItems") == Some(&Value::Bool(true)) && max.is_none_or(|x| x > 1) {
            if let Some(e) = self.unique_finite_items(m, min, max, ptr)? {
                return Ok(e);
            }
            if self.negating > 0 {
                self.refuse(
                    "uniqueItems",
                    ptr,
                    "the complement of uniqueItems (arrays with a repeated item) under not, oneOf or if",
                )?;
            } else {
                // The matcher keeps the items distinct (`DistinctItems`).
                distinct = true;
            }
        }
        // Under `uniqueItems` every item is a call to its own rule, so the matcher sees where
        // each item starts and ends.
        let mut item_rules = Vec::new();
        let mut item = |c: &mut Self, e: Expr, name: String| -> Expr {
            if !distinct || e.is_nothing() {
                return e;
            }
            let id = c.add_rule(name, e);
            item_rules.push(id);
            Expr::Call(id)
        };
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
            elems.push(item(self, e, format!("{ptr}/prefixItems/{i}")));
        }
        let rest_expr = self.schema_expr(&rest, &format!("{ptr}/items"))?;
        let rest_expr = item(self, rest_expr, format!("{ptr}/items"));
        if rest_expr.is_nothing() {
            let n = elems.len() as u32;
            max = Some(max.map_or(n, |x| x.min(n)));
        }
        let max_items = max;
        if max_items.is_some_and(|x| x < min) {
            return Ok(Expr::Nothing);
        }
        let sep = Expr::concat([self.json.ws(), Expr::literal(","), self.json.ws()]);
        let rest_expr = if rest_expr.is_nothing() || distinct {
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
        let array = self.json.array_of(body);
        if !distinct {
            return Ok(array);
        }
        let id = self.add_rule(ptr.to_string(), array);
        self.distinct.push(crate::expr::DistinctItems {
            array: id,
            items: item_rules,
        });
        Ok(Expr::Call(id))
    }

    /// `uniqueItems` over items drawn from a finite set of scalars (an `enum` or `const`,
    /// booleans, `null`, integers in a range of at most 64): the array holds distinct values of
    /// the set, in any order, each at most once, which is what the object-member machinery
    /// tracks (a set of written members); exact. `None` where the items are not such a set.
    fn unique_finite_items(
        &mut self,
        m: &Obj,
        min: u32,
        max: Option<u32>,
        ptr: &str,
    ) -> Result<Option<Expr>, GrammarError> {
        if ["prefixItems", "contains", "unevaluatedItems"]
            .iter()
            .any(|k| m.contains_key(*k))
        {
            return Ok(None);
        }
        let Some(items @ Value::Object(_)) = m.get("items") else {
            return Ok(None);
        };
        let items_ptr = format!("{ptr}/items");
        let Some(resolved) = self.resolved(items, &items_ptr) else {
            return Ok(None);
        };
        let Some(candidates) = finite_scalars(resolved.as_ref()) else {
            return Ok(None);
        };
        // Keep the candidates the items schema accepts (its other keywords may exclude some).
        let items_expr = self.schema_expr(items, &items_ptr)?;
        let mut members = Vec::new();
        for v in candidates {
            let text = serde_json::to_string(&v).expect("values serialize");
            if crate::matcher::matches(&items_expr, &self.rules, text.as_bytes()) {
                let value = self.schema_expr(&serde_json::json!({ "const": v }), &items_ptr)?;
                members.push((value, false));
            }
        }
        let n = members.len() as u32;
        let max = Some(max.map_or(n, |x| x.min(n)));
        if max.is_some_and(|x| x < min) {
            return Ok(Some(Expr::Nothing));
        }
        let sep = Expr::concat([self.json.ws(), Expr::literal(","), self.json.ws()]);
        let body = Expr::Object(std::sync::Arc::new(crate::expr::ObjectExpr {
            members,
            extra: Expr::Nothing,
            sep,
            min,
            max,
            presence: None,
        }));
        Ok(Some(self.json.array_of(body)))
    }

    /// Arrays under `contains` (with `minContains`/`maxContains`): the elements matching the
    /// `contains` schema are counted along the array.
    pub(super) fn array_contains(&mut self, m: &Obj, ptr: &str) -> Result<Expr, GrammarError> {
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
        // Under `maxContains` the other items are those outside `contains`: its complement.
        let not_hit_parts = match max_c {
            Some(_) => self.negated_parts(&m["contains"], &format!("{ptr}/contains"))?,
            None => nothing(),
        };
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
                let h = &not_hit_parts[t];
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
}

/// The values a schema can take when it lists or bounds them to at most 64 scalars, read
/// from its own keywords (`enum`, `const`, `type` boolean or null, an integer range); `None`
/// when it does not. The caller filters them through the whole schema.
fn finite_scalars(s: &Value) -> Option<Vec<Value>> {
    const MOST: usize = 64;
    let o = s.as_object()?;
    let scalar = |v: &Value| !v.is_object() && !v.is_array();
    let values = if let Some(c) = o.get("const") {
        vec![c.clone()]
    } else if let Some(Value::Array(e)) = o.get("enum") {
        let mut distinct: Vec<Value> = Vec::new();
        for v in e {
            if !distinct.iter().any(|d| json_equal(d, v)) {
                distinct.push(v.clone());
            }
        }
        distinct
    } else {
        match o.get("type").and_then(Value::as_str) {
            Some("boolean") => vec![Value::Bool(false), Value::Bool(true)],
            Some("null") => vec![Value::Null],
            Some("integer") => {
                let bound =
                    |k: &str, exclusive: &str, up: bool| -> Option<i64> {
                        let inclusive = o.get(k).and_then(Value::as_f64).map(|x| {
                            if up {
                                x.floor()
                            } else {
                                x.ceil()
                            }
                        });
                        let strict = o.get(exclusive).and_then(Value::as_f64).map(|x| {
                            if up {
                                (x - 1.0).ceil()
                            } else {
                                (x + 1.0).floor()
                            }
                        });
                        let b = match (inclusive, strict) {
                            (Some(a), Some(b)) if up => a.min(b),
                            (Some(a), Some(b)) => a.max(b),
                            (a, b) => a.or(b)?,
                        };
                        (b.abs() < 1e15).then_some(b as i64)
                    };
                let lo = bound("minimum", "exclusiveMinimum", false)?;
                let hi = bound("maximum", "exclusiveMaximum", true)?;
                if hi < lo || (hi - lo) as usize >= MOST {
                    return None;
                }
                (lo..=hi).map(Value::from).collect()
            }
            _ => return None,
        }
    };
    (values.len() <= MOST && values.iter().all(scalar)).then_some(values)
}
