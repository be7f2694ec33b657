//! Disjointness proofs: when `oneOf` branches provably never both match, `oneOf` is `anyOf`
//! (no complement needed).

use super::*;

impl Compiler<'_> {
    /// True if no instance can be valid under both schemas, provably from their types,
    /// constants, or an object property both require with disjoint values. `false` means
    /// "not proven", never "overlapping".
    pub(super) fn disjoint(&mut self, a: &Value, b: &Value, ptr: &str, depth: u32) -> bool {
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
    pub(super) fn resolved<'v>(
        &mut self,
        v: &'v Value,
        ptr: &str,
    ) -> Option<std::borrow::Cow<'v, Value>> {
        if v.get("$ref").is_some() {
            self.expand_ref(v, ptr).ok().map(std::borrow::Cow::Owned)
        } else {
            Some(std::borrow::Cow::Borrowed(v))
        }
    }

    pub(super) fn disjoint_with(&mut self, a: Side<'_>, b: &Value, ptr: &str, depth: u32) -> bool {
        let Some(b) = self.resolved(b, ptr) else {
            return false;
        };
        match b.as_ref() {
            Value::Bool(false) => true,
            Value::Object(bo) => self.disjoint_sides(a, (bo, None), ptr, depth),
            _ => false,
        }
    }

    pub(super) fn disjoint_sides(
        &mut self,
        a: Side<'_>,
        b: Side<'_>,
        ptr: &str,
        depth: u32,
    ) -> bool {
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
        if APPLICATORS.iter().any(|k| has(a, k) || has(b, k)) {
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
}

/// A schema object seen without one of its keywords (see `Compiler::disjoint`).
pub(super) type Side<'a> = (&'a Obj, Option<&'static str>);
