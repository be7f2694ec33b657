//! `$ref` resolution inside one document: JSON pointers, `$anchor`s and `$id`s.

use serde_json::Value;
use std::collections::HashMap;

/// Where a reference points: the target schema and its JSON pointer.
pub struct Resolver<'a> {
    root: &'a Value,
    /// `$anchor` / `$dynamicAnchor` name -> pointer, and `$id` (and its last path segment) ->
    /// pointer.
    names: HashMap<String, String>,
    root_id: Option<String>,
}

fn escape_token(t: &str) -> String {
    t.replace('~', "~0").replace('/', "~1")
}

fn index(v: &Value, ptr: &str, names: &mut HashMap<String, String>) {
    match v {
        Value::Object(m) => {
            for key in ["$anchor", "$dynamicAnchor"] {
                if let Some(Value::String(a)) = m.get(key) {
                    names
                        .entry(format!("#{a}"))
                        .or_insert_with(|| ptr.to_string());
                }
            }
            for key in ["$id", "id"] {
                if let Some(Value::String(id)) = m.get(key) {
                    if ptr != "#" {
                        let id = id.trim_end_matches('#');
                        names
                            .entry(id.to_string())
                            .or_insert_with(|| ptr.to_string());
                        if let Some(last) = id.rsplit('/').next() {
                            names
                                .entry(last.to_string())
                                .or_insert_with(|| ptr.to_string());
                        }
                        if let Some(frag) = id.strip_prefix('#') {
                            names
                                .entry(format!("#{frag}"))
                                .or_insert_with(|| ptr.to_string());
                        }
                    }
                }
            }
            for (k, child) in m {
                // `enum`/`const` values are data, not schemas.
                if k == "enum" || k == "const" || k == "examples" || k == "default" {
                    continue;
                }
                index(child, &format!("{ptr}/{}", escape_token(k)), names);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                index(child, &format!("{ptr}/{i}"), names);
            }
        }
        _ => {}
    }
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

impl<'a> Resolver<'a> {
    pub fn new(root: &'a Value) -> Self {
        let mut names = HashMap::new();
        index(root, "#", &mut names);
        let root_id = root
            .get("$id")
            .or_else(|| root.get("id"))
            .and_then(Value::as_str)
            .map(|s| s.trim_end_matches('#').to_string());
        Self {
            root,
            names,
            root_id,
        }
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
