//! Presence rules: which of a few named properties an object has (`dependentRequired`,
//! `anyOf`/`oneOf` of `required` lists, `not` of one), compiled into the object itself.

use super::*;

/// A constraint on which of a few named properties an object has, from `dependentRequired`
/// (array `dependencies`) and `anyOf`/`oneOf` of branches that only list `required` names:
/// compiled into the object itself (a bit per name along the members) instead of one object
/// per branch, intersected or complemented.
pub(super) struct Presence {
    pub(super) names: Vec<String>,
    /// `accept[mask]`: whether an object with exactly the tracked names in `mask` is valid.
    pub(super) accept: Vec<bool>,
    /// Whether values of the other types are valid (`required` only constrains objects).
    pub(super) others: bool,
}

/// Most names a [`Presence`] tracks (its table has `2^n` entries).
pub(super) const MAX_PRESENCE_NAMES: usize = 10;

/// One presence rule over names.
pub(super) enum PresenceRule {
    /// The first name present implies the others.
    Implies(String, Vec<String>),
    /// The first name present excludes the others.
    Excludes(String, Vec<String>),
    /// Some branch holds (`exactly`: exactly one branch).
    Lists { lists: Vec<Branch>, exactly: bool },
    /// Not every name of the list present (`not: {required: [...]}`); non-objects fail it.
    NotAll(Vec<String>),
}

/// An `anyOf`/`oneOf` branch about presence: every name of `all` present, and not every name
/// of `not_all` (`not: {required: [...]}`; `None` if the branch has no `not`).
pub(super) struct Branch {
    all: Vec<String>,
    not_all: Option<Vec<String>>,
}

impl Branch {
    fn names(&self) -> impl Iterator<Item = &String> {
        self.all.iter().chain(self.not_all.iter().flatten())
    }
}

/// The keywords of `m` that only constrain which properties are present, as a [`Presence`],
/// and `m` without them; `None` if there are none, or if other applicators remain.
pub(super) fn presence_constraints(m: &Obj) -> Option<(Obj, Presence)> {
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
    // A branch of only `required` and `not: {required: [...]}`.
    let branch = |b: &Value| -> Option<Branch> {
        let o = b.as_object()?;
        if o.keys()
            .any(|k| is_validation(k) && k != "required" && k != "not")
        {
            return None;
        }
        let not_all = match o.get("not") {
            Some(n) => Some(required_only(n)?),
            None => None,
        };
        let all = names_of(o.get("required").unwrap_or(&json!([])))?;
        Some(Branch { all, not_all })
    };
    let lists_rule = |v: &Value, exactly: bool| -> Option<PresenceRule> {
        let lists: Vec<Branch> = v.as_array()?.iter().map(branch).collect::<Option<_>>()?;
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
    if let Some(names) = m.get("not").and_then(required_only) {
        rules.push(PresenceRule::NotAll(names));
        removed.push("not");
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
            } else if only("not") {
                o.and_then(|o| Some(PresenceRule::NotAll(required_only(o.get("not")?)?)))
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
    // Presence rules only describe objects whose other keywords are plain.
    let more = ["dependencies", "dependentRequired", "unevaluatedProperties"];
    if APPLICATORS
        .iter()
        .chain(&more)
        .any(|k| rest.contains_key(*k))
    {
        return None;
    }
    let mut names: Vec<String> = Vec::new();
    for r in &rules {
        let all: Vec<&String> = match r {
            PresenceRule::Implies(k, v) | PresenceRule::Excludes(k, v) => {
                std::iter::once(k).chain(v).collect()
            }
            PresenceRule::Lists { lists, .. } => lists.iter().flat_map(Branch::names).collect(),
            PresenceRule::NotAll(v) => v.iter().collect(),
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
                    let holds = |b: &&Branch| {
                        let all = set(&b.all);
                        let not_all = b.not_all.as_ref().map(|v| set(v));
                        mask & all == all && not_all.is_none_or(|n| mask & n != n)
                    };
                    let full = lists.iter().filter(holds).count();
                    if *exactly {
                        full == 1
                    } else {
                        full >= 1
                    }
                }
                PresenceRule::NotAll(v) => mask & set(v) != set(v),
            })
        })
        .collect();
    // Non-objects satisfy every `required`: each list is "fully present".
    let others = rules.iter().all(|r| match r {
        PresenceRule::Implies(..) | PresenceRule::Excludes(..) => true,
        PresenceRule::Lists { lists, exactly } => {
            let holding = lists.iter().filter(|b| b.not_all.is_none()).count();
            holding >= 1 && (!*exactly || holding == 1)
        }
        PresenceRule::NotAll(_) => false,
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
