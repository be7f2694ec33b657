//! What a Hugging Face model folder says about its tokenizer beyond `tokenizer.json`: BOS and
//! EOS from `tokenizer_config.json`, extra end-of-sequence ids from `generation_config.json`.
//! The one reader of those files, shared by the runtime and the Python package.

use std::path::Path;

/// Special-token facts read from a tokenizer's folder (feature `tokenizers`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// Every end-of-sequence id: `eos` first, then `generation_config.json`'s `eos_token_id`s.
    pub eos_ids: Vec<u32>,
    /// `add_bos_token` from `tokenizer_config.json` (default false).
    pub add_bos: bool,
}

impl SpecialIds {
    /// Reads `tokenizer_config.json` and `generation_config.json` beside `tokenizer_json`
    /// (both optional). An unreadable or invalid file is an error naming it.
    pub fn read(tokenizer_json: &Path, tok: &tokenizers::Tokenizer) -> Result<Self, String> {
        let dir = tokenizer_json.parent().unwrap_or(Path::new("."));
        let config = read_json_opt(&dir.join("tokenizer_config.json"))?;
        let gen_config = read_json_opt(&dir.join("generation_config.json"))?;
        let token_id = |field: &str| -> Option<u32> {
            let v = config.as_ref()?.get(field)?;
            let text = v.as_str().or_else(|| v.get("content")?.as_str())?;
            tok.token_to_id(text)
        };
        let bos = token_id("bos_token");
        let eos = token_id("eos_token");
        let mut eos_ids: Vec<u32> = eos.into_iter().collect();
        if let Some(v) = gen_config.as_ref().and_then(|g| g.get("eos_token_id")) {
            let ids: Vec<u64> = match v {
                serde_json::Value::Array(a) => a.iter().filter_map(|x| x.as_u64()).collect(),
                other => other.as_u64().into_iter().collect(),
            };
            for id in ids {
                if !eos_ids.contains(&(id as u32)) {
                    eos_ids.push(id as u32);
                }
            }
        }
        let add_bos = config
            .as_ref()
            .and_then(|c| c.get("add_bos_token")?.as_bool())
            .unwrap_or(false);
        Ok(Self {
            bos,
            eos,
            eos_ids,
            add_bos,
        })
    }
}

fn read_json_opt(path: &Path) -> Result<Option<serde_json::Value>, String> {
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| format!("{}: invalid JSON: {e}", path.display()))
}
