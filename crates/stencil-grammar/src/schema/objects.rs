//! Objects: properties in schema order or any order, `required`, `additionalProperties`,
//! `patternProperties`, `propertyNames`, counts.

use super::*;

/// Internal key of a merged object schema: the object schemas of an `allOf` whose keys cannot
/// be written as one `properties`/`patternProperties`/`additionalProperties` triple (see
/// `Compiler::object_views`). A NUL byte starts it, so no schema written by hand has it.
pub(super) const VIEWS: &str = "\u{0}allOf object views";

/// Most `patternProperties` of one object schema (regions are subsets of patterns).
const MAX_PATTERNS: usize = 4;
/// Most patterns of merged object schemas, their `additionalProperties` included.
const MAX_VIEW_PATTERNS: usize = 8;

/// Declared properties, the schema of other keys, patterns (source, schema) and their key
/// languages.
type ObjectKeys = (Obj, Value, Vec<(String, Value)>, Vec<Expr>);

impl Compiler<'_> {
    pub(super) fn object(
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
        let (props, additional, patterns, pattern_contents) = match m.get(VIEWS) {
            Some(views) => self.object_views(views, ptr)?,
            None => self.object_keys(m, ptr)?,
        };
        let props = &props;
        let required: Vec<String> = match m.get("required") {
            None => vec![],
            Some(Value::Array(r)) => r
                .iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect(),
            Some(_) => return Err(GrammarError::invalid(ptr, "required must be an array")),
        };
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
        let negating = self.negating > 0 && !members.is_empty();
        if negating && members.len() > 64 {
            return Err(GrammarError::unsupported(
                "properties",
                ptr,
                "negating an object with more than 64 declared properties",
            ));
        }
        if (self.opts.property_order == crate::PropertyOrder::Any || negating)
            && members.len() <= 64
        {
            let body = Expr::Object(std::sync::Arc::new(crate::expr::ObjectExpr {
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

    /// An object schema's keys: its declared properties, the schema of other keys, and its
    /// patterns (source, schema) with their key languages.
    fn object_keys(&mut self, m: &Obj, ptr: &str) -> Result<ObjectKeys, GrammarError> {
        let props = match m.get("properties") {
            None => Obj::new(),
            Some(Value::Object(p)) => p.clone(),
            Some(_) => return Err(GrammarError::invalid(ptr, "properties must be an object")),
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
        if patterns.len() > MAX_PATTERNS {
            self.refuse("patternProperties", ptr, "more than 4 patterns")?;
        }
        let mut contents = Vec::new();
        for (p, _) in &patterns {
            contents.push(pattern_to_string_content(
                p,
                &format!("{ptr}/patternProperties"),
            )?);
        }
        Ok((props, additional, patterns, contents))
    }

    /// The keys of an `allOf` of object schemas (`views`, see [`VIEWS`]) as one object schema:
    /// each view's declared properties (joined where several declare one), each view's
    /// patterns, and per view whose `additionalProperties` constrains something, a pattern of
    /// the keys it neither declares nor matches by a pattern, with that schema. A key is then
    /// validated by every pattern it matches, as `patternProperties` are, which is each view's
    /// own rule for it; no key is left to `additionalProperties`.
    fn object_views(&mut self, views: &Value, ptr: &str) -> Result<ObjectKeys, GrammarError> {
        let Value::Array(views) = views else {
            return Err(GrammarError::invalid(ptr, "object views must be a list"));
        };
        let mut props = Obj::new();
        let mut patterns = Vec::new();
        let mut contents = Vec::new();
        for (i, v) in views.iter().enumerate() {
            let Value::Object(v) = v else {
                return Err(GrammarError::invalid(
                    ptr,
                    "an object view must be an object",
                ));
            };
            let vptr = format!("{ptr}/allOf/{i}");
            let (p, additional, pats, cs) = self.object_keys(v, &vptr)?;
            let mut own = Vec::new();
            for (name, schema) in p {
                let q = serde_json::to_string(&name).unwrap_or_default();
                own.push(Expr::literal(&q.as_bytes()[1..q.len() - 1]));
                let joined = match props.remove(&name) {
                    Some(prev) => json!({"allOf": [prev, schema]}),
                    None => schema,
                };
                props.insert(name, joined);
            }
            own.extend(cs.iter().cloned());
            // A pattern several views share is one pattern with all their schemas.
            for ((source, schema), content) in pats.into_iter().zip(cs) {
                match patterns.iter().position(|(p, _)| *p == source) {
                    Some(i) => {
                        let prev = std::mem::take(&mut patterns[i].1);
                        patterns[i].1 = json!({"allOf": [prev, schema]});
                    }
                    None => {
                        patterns.push((source, schema));
                        contents.push(content);
                    }
                }
            }
            if additional != Value::Bool(true) {
                patterns.push((
                    format!("(keys {vptr} leaves to additionalProperties)"),
                    additional,
                ));
                contents.push(Expr::Not(Box::new(Expr::alt(own))));
            }
        }
        if patterns.len() > MAX_VIEW_PATTERNS {
            self.refuse(
                "patternProperties",
                ptr,
                &format!("object schemas in allOf with more than {MAX_VIEW_PATTERNS} patterns and constrained additionalProperties together"),
            )?;
        }
        Ok((props, Value::Bool(true), patterns, contents))
    }

    /// The content of property names allowed by a `propertyNames` schema.
    pub(super) fn property_names(&mut self, pn: &Obj, ptr: &str) -> Result<Expr, GrammarError> {
        self.names_within(pn, ptr, 0)
    }

    /// [`Self::property_names`] at `$ref` depth `depth`: `$ref`, `not`, `allOf` and `anyOf`
    /// combine the names their schemas allow (a complement within all string contents), the
    /// string keywords beside them constrain the names directly.
    fn names_within(&mut self, pn: &Obj, ptr: &str, depth: u32) -> Result<Expr, GrammarError> {
        /// `$ref`s followed inside one `propertyNames` (a cycle ends in a refusal).
        const MAX_REF_DEPTH: u32 = 16;
        let mut rest = pn.clone();
        let mut combined: Vec<Expr> = Vec::new();
        if let Some(r) = rest.remove("$ref") {
            if depth >= MAX_REF_DEPTH {
                self.refuse("propertyNames", ptr, "a recursive $ref in propertyNames")?;
                return Ok(Expr::star(any_string_char()));
            }
            let (target, tptr) = self.resolve(&r, ptr)?;
            combined.push(self.names_of(target, &tptr, depth + 1)?);
        }
        if let Some(n) = rest.remove("not") {
            let inner = self.names_of(&n, &format!("{ptr}/not"), depth)?;
            combined.push(Expr::and(vec![
                Expr::star(any_string_char()),
                Expr::Not(Box::new(inner)),
            ]));
        }
        for key in ["allOf", "anyOf"] {
            let Some(v) = rest.remove(key) else {
                continue;
            };
            let Value::Array(branches) = v else {
                return Err(GrammarError::invalid(
                    ptr,
                    format!("{key} must be an array"),
                ));
            };
            let mut each = Vec::with_capacity(branches.len());
            for (i, b) in branches.iter().enumerate() {
                each.push(self.names_of(b, &format!("{ptr}/{key}/{i}"), depth)?);
            }
            combined.push(match key {
                "allOf" => Expr::and(each),
                _ => Expr::alt(each),
            });
        }
        if combined.is_empty() {
            return self.string_names(pn, ptr);
        }
        combined.push(self.string_names(&rest, ptr)?);
        Ok(Expr::and(combined))
    }

    /// The names a schema (object or boolean) allows.
    fn names_of(&mut self, v: &Value, ptr: &str, depth: u32) -> Result<Expr, GrammarError> {
        match v {
            Value::Bool(true) => Ok(Expr::star(any_string_char())),
            Value::Bool(false) => Ok(Expr::Nothing),
            Value::Object(o) => self.names_within(o, ptr, depth),
            _ => Err(GrammarError::invalid(
                ptr,
                "a schema must be an object or a boolean",
            )),
        }
    }

    /// The names allowed by string keywords, `enum` and `const`.
    fn string_names(&mut self, pn: &Obj, ptr: &str) -> Result<Expr, GrammarError> {
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

/// Builds the members of an object in schema order: declared properties (optional ones may be
/// skipped), then any number of extra members, with an optional count of members.
pub(super) struct ObjectBody<'a> {
    /// Member expression, required, and the member's bit in the presence mask if tracked.
    pub(super) members: &'a [(Expr, bool, Option<u32>)],
    pub(super) extra: &'a Expr,
    pub(super) sep: Expr,
    pub(super) min: u32,
    pub(super) max: Option<u32>,
    pub(super) counted: bool,
    /// Which masks of tracked members may end the object (see [`Presence`]).
    pub(super) presence: Option<&'a [bool]>,
    pub(super) memo: HashMap<(usize, u32, bool, u32), Expr>,
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
