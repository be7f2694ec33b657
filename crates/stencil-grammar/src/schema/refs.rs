//! `$ref` resolution inside one document: JSON pointers, `$anchor`s and `$id`s.
//!
//! References resolve as RFC 3986 URI references against the base URI in effect where they
//! appear (every `$id` on the way from the root changes it); `$id`s index resources by their
//! absolute URI and anchors by `resource#anchor`. A document without an `$id` gets a private
//! base. Where that finds nothing, a lenient fallback matches `$id`s by their last segment.

use serde_json::Value;
use std::collections::HashMap;
use url::Url;

/// The base of documents that have no `$id`.
const DEFAULT_BASE: &str = "https://stencil.invalid/root.json";

/// Where a reference points: the target schema and its JSON pointer.
pub struct Resolver<'a> {
    root: &'a Value,
    /// Absolute URIs (resources without fragment, anchors as `uri#name`) -> pointer.
    uris: HashMap<String, String>,
    /// The root's base URI.
    base: Url,
    /// How the document's draft names resources.
    draft: Draft,
    /// `$anchor` / `$dynamicAnchor` name -> pointer, and `$id` (and its last path segment) ->
    /// pointer.
    names: HashMap<String, String>,
    root_id: Option<String>,
}

/// Appends the pointer token of `key` to `ptr` (one buffer for the whole walk: building a
/// string per node made indexing large schemas quadratic in their depth).
fn push_token(ptr: &mut String, key: &str) {
    ptr.push('/');
    for c in key.chars() {
        match c {
            '~' => ptr.push_str("~0"),
            '/' => ptr.push_str("~1"),
            c => ptr.push(c),
        }
    }
}

/// Visits every object under `v` in document order with its JSON pointer (one buffer for the
/// whole walk), skipping values that are data (`enum`, `const`, `examples`, `default`).
/// `visit` may return a new state for the object's children; otherwise they see `state`.
fn walk_objects<S>(
    v: &Value,
    ptr: &mut String,
    state: &S,
    visit: &mut impl FnMut(&serde_json::Map<String, Value>, &str, &S) -> Option<S>,
) {
    match v {
        Value::Object(m) => {
            let own = visit(m, ptr, state);
            let state = own.as_ref().unwrap_or(state);
            for (k, child) in m {
                if k == "enum" || k == "const" || k == "examples" || k == "default" {
                    continue;
                }
                if child.is_object() || child.is_array() {
                    let len = ptr.len();
                    push_token(ptr, k);
                    walk_objects(child, ptr, state, visit);
                    ptr.truncate(len);
                }
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                let len = ptr.len();
                ptr.push('/');
                ptr.push_str(&i.to_string());
                walk_objects(child, ptr, state, visit);
                ptr.truncate(len);
            }
        }
        _ => {}
    }
}

/// `$anchor`s and `$id`s (and their last path segments) -> pointer, for the lenient fallback.
fn index(root: &Value) -> HashMap<String, String> {
    let mut names = HashMap::new();
    walk_objects(root, &mut String::from("#"), &(), &mut |m, ptr, _| {
        let mut name = |n: String| {
            names.entry(n).or_insert_with(|| ptr.to_string());
        };
        for key in ["$anchor", "$dynamicAnchor"] {
            if let Some(Value::String(a)) = m.get(key) {
                name(format!("#{a}"));
            }
        }
        for key in ["$id", "id"] {
            if let Some(Value::String(id)) = m.get(key) {
                if ptr != "#" {
                    let id = id.trim_end_matches('#');
                    name(id.to_string());
                    if let Some(last) = id.rsplit('/').next() {
                        name(last.to_string());
                    }
                    if let Some(frag) = id.strip_prefix('#') {
                        name(format!("#{frag}"));
                    }
                }
            }
        }
        None
    });
    names
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Absolute URIs of the resources (`$id`) and anchors under `root` (whose base URI is `base`)
/// -> pointer.
fn index_uris(root: &Value, base: &Url, draft: Draft) -> HashMap<String, String> {
    let mut uris = HashMap::new();
    walk_objects(
        root,
        &mut String::from("#"),
        base,
        &mut |m, ptr, base: &Url| {
            let own = own_id(m, draft).and_then(|id| base.join(id).ok());
            if let Some(u) = &own {
                let mut resource = u.clone();
                resource.set_fragment(None);
                uris.entry(resource.to_string())
                    .or_insert_with(|| ptr.to_string());
            }
            for key in ["$anchor", "$dynamicAnchor"] {
                if let Some(Value::String(a)) = m.get(key) {
                    let mut u = own.as_ref().unwrap_or(base).clone();
                    u.set_fragment(Some(a));
                    uris.entry(u.to_string()).or_insert_with(|| ptr.to_string());
                }
            }
            own
        },
    );
    uris
}

/// The rules of the draft a document declares (`$schema`) where drafts differ.
#[derive(Clone, Copy)]
pub(crate) struct Draft {
    /// Draft 4 and earlier: resources are named by `id`, and integers have no fraction part.
    pub draft4: bool,
    /// Before 2019-09: `$ref` replaces its sibling keywords, `$id` included.
    pub ref_hides_siblings: bool,
    /// Draft 7 and later: `if`/`then`/`else` validate (before, they are unknown keywords).
    pub conditionals: bool,
}

impl Draft {
    pub fn of(root: &Value) -> Self {
        let declared = |drafts: &[&str]| {
            root.get("$schema")
                .and_then(Value::as_str)
                .is_some_and(|s| drafts.iter().any(|d| s.contains(d)))
        };
        Self {
            draft4: declared(&["draft-04", "draft-03"]),
            ref_hides_siblings: declared(&["draft-03", "draft-04", "draft-06", "draft-07"]),
            conditionals: !declared(&["draft-03", "draft-04", "draft-06"]),
        }
    }
}

/// The identifier a schema object declares (`$id`, or `id` in draft 4), without a
/// fragment-only `$id` (draft 6/7's plain-name fragments are anchors).
fn own_id(m: &serde_json::Map<String, Value>, draft: Draft) -> Option<&str> {
    if draft.ref_hides_siblings && m.contains_key("$ref") {
        return None;
    }
    let id = m
        .get("$id")
        .or_else(|| draft.draft4.then(|| m.get("id")).flatten())?
        .as_str()?;
    (!id.starts_with('#')).then_some(id)
}

impl<'a> Resolver<'a> {
    pub fn new(root: &'a Value) -> Self {
        let names = index(root);
        let draft = Draft::of(root);
        let default = Url::parse(DEFAULT_BASE).expect("valid default base");
        let uris = index_uris(root, &default, draft);
        let base = root
            .as_object()
            .and_then(|m| own_id(m, draft))
            .and_then(|id| default.join(id).ok())
            .unwrap_or(default);
        let root_id = root
            .get("$id")
            .or_else(|| root.get("id"))
            .and_then(Value::as_str)
            .map(|s| s.trim_end_matches('#').to_string());
        Self {
            root,
            uris,
            base,
            draft,
            names,
            root_id,
        }
    }

    /// The base URI in effect at pointer `at` (every `$id` on the way from the root).
    fn base_at(&self, at: &str) -> Url {
        let mut base = self.base.clone();
        let Some(path) = at.strip_prefix("#/") else {
            return base;
        };
        let mut cur = self.root;
        for tok in path.split('/') {
            let tok = percent_decode(tok).replace("~1", "/").replace("~0", "~");
            let next = match cur {
                Value::Object(m) => m.get(&tok),
                Value::Array(a) => tok.parse::<usize>().ok().and_then(|i| a.get(i)),
                _ => None,
            };
            let Some(next) = next else {
                break;
            };
            cur = next;
            if let Some(id) = cur.as_object().and_then(|m| own_id(m, self.draft)) {
                if let Ok(u) = base.join(id) {
                    base = u;
                }
            }
        }
        base
    }

    /// The `$ref` targets (as pointers) that can reach themselves through `$ref`s: those on a
    /// cycle of the graph where a target points to every target referenced inside it. While
    /// target B is compiled, a target on the stack that B can reach is on a cycle with B, so
    /// only the counts of these on the stack can change what B compiles to.
    pub fn cyclic_targets(&self) -> std::collections::HashSet<String> {
        let mut refs = collect_refs(self.root, self);
        refs.sort();
        let mut targets: Vec<&str> = refs.iter().map(|(_, t)| t.as_str()).collect();
        targets.sort_unstable();
        targets.dedup();
        let index: HashMap<&str, usize> =
            targets.iter().enumerate().map(|(i, t)| (*t, i)).collect();
        // Edges: every reference located at or under a target's pointer.
        let edges: Vec<Vec<usize>> = targets
            .iter()
            .map(|t| {
                let under = format!("{t}/");
                let lo = refs.partition_point(|(at, _)| at.as_str() < *t);
                refs[lo..]
                    .iter()
                    .take_while(|(at, _)| {
                        at == t || at.starts_with(&under) || at.as_str() < under.as_str()
                    })
                    .filter(|(at, _)| at == t || at.starts_with(&under))
                    .map(|(_, to)| index[to.as_str()])
                    .collect()
            })
            .collect();
        let mut cyclic = std::collections::HashSet::new();
        for scc in strongly_connected(&edges) {
            if scc.len() > 1 || edges[scc[0]].contains(&scc[0]) {
                cyclic.extend(scc.iter().map(|&i| targets[i].to_string()));
            }
        }
        cyclic
    }

    /// Resolves `reference`, written in the schema at pointer `at`, to (target, pointer):
    /// as a URI reference against the base there, else by the lenient fallback.
    pub fn resolve_from(&self, reference: &str, at: &str) -> Option<(&'a Value, String)> {
        self.resolve_uri(reference, at)
            .or_else(|| self.resolve(reference))
    }

    fn resolve_uri(&self, reference: &str, at: &str) -> Option<(&'a Value, String)> {
        let target = self.base_at(at).join(reference).ok()?;
        let frag = target.fragment().map(percent_decode).unwrap_or_default();
        let mut resource = target.clone();
        resource.set_fragment(None);
        let root_ptr = if resource == {
            let mut b = self.base.clone();
            b.set_fragment(None);
            b
        } {
            "#".to_string()
        } else {
            self.uris.get(resource.as_str())?.clone()
        };
        let ptr = if frag.is_empty() {
            root_ptr
        } else if frag.starts_with('/') {
            // JSON pointers in fragments are percent-encoded on the wire; keep the pointer
            // in its `~`-escaped form.
            format!("{root_ptr}{}", target.fragment().unwrap_or_default())
        } else {
            self.uris.get(target.as_str())?.clone()
        };
        Some((self.at_pointer(&ptr)?, ptr))
    }

    /// The value at a `#/a/b` pointer.
    pub fn at_pointer(&self, ptr: &str) -> Option<&'a Value> {
        let path = ptr.strip_prefix('#')?;
        if path.is_empty() {
            return Some(self.root);
        }
        let mut cur = self.root;
        for tok in path.strip_prefix('/')?.split('/') {
            let tok = percent_decode(tok).replace("~1", "/").replace("~0", "~");
            cur = match cur {
                Value::Object(m) => m.get(&tok)?,
                Value::Array(a) => a.get(tok.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        Some(cur)
    }

    /// Resolves a reference to (target, canonical pointer).
    pub fn resolve(&self, reference: &str) -> Option<(&'a Value, String)> {
        let (base, frag) = match reference.find('#') {
            Some(i) => (&reference[..i], &reference[i..]),
            None => (reference, "#"),
        };
        let base_ptr = if base.is_empty() || Some(base) == self.root_id.as_deref() {
            "#".to_string()
        } else {
            let last = base.rsplit('/').next().unwrap_or(base);
            self.names
                .get(base)
                .or_else(|| self.names.get(last))
                .cloned()?
        };
        let ptr = if frag == "#" {
            base_ptr
        } else if frag.starts_with("#/") {
            format!("{}{}", base_ptr, &frag[1..])
        } else {
            self.names.get(frag).cloned()?
        };
        let target = self.at_pointer(&ptr)?;
        Some((target, ptr))
    }
}

/// Every `$ref` under `root` that resolves: (where it is written, the target's pointer).
fn collect_refs(root: &Value, resolver: &Resolver) -> Vec<(String, String)> {
    let mut out = Vec::new();
    walk_objects(root, &mut String::from("#"), &(), &mut |m, ptr, _| {
        if let Some(Value::String(r)) = m.get("$ref") {
            if let Some((_, target)) = resolver.resolve_from(r, ptr) {
                out.push((ptr.to_string(), target));
            }
        }
        None
    });
    out
}

/// Strongly connected components (Tarjan, iterative: schemas can be deep).
fn strongly_connected(edges: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = edges.len();
    let (mut index, mut low) = (vec![usize::MAX; n], vec![0; n]);
    let (mut on_stack, mut stack, mut out) = (vec![false; n], Vec::new(), Vec::new());
    let mut next = 0;
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        // (node, next edge to look at)
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut e)) = work.last_mut() {
            if *e == 0 && index[v] == usize::MAX {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = edges[v].get(*e) {
                *e += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut scc = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    scc.push(w);
                    if w == v {
                        break;
                    }
                }
                out.push(scc);
            }
        }
    }
    out
}
