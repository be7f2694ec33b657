//! Resolving a model spec to files on disk: a local path, or a Hugging Face repo id through the
//! hub cache (`HF_HUB_CACHE`, `HF_HOME/hub`, `~/.cache/huggingface/hub`).
//!
//! `org/name` picks the repo's GGUF (one file, or Q8_0 / Q4_K_M when there are several) or its
//! safetensors checkpoint; `org/name:file.gguf` names the file. With `HF_HUB_OFFLINE=1` only the
//! cache is consulted, and a missing file is an error that says so.

use std::path::{Path, PathBuf};

use crate::error::{Result, RuntimeError};

/// Files of a model, located on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelFiles {
    /// One GGUF file (weights, tokenizer and template inside).
    Gguf(PathBuf),
    /// A directory with `config.json`, `tokenizer.json` and `*.safetensors`.
    Safetensors(PathBuf),
}

/// GGUF quantizations preferred when a repo has several files, best first.
const GGUF_PREFERENCE: &[&str] = &["Q8_0", "Q4_K_M", "Q5_K_M", "Q6_K", "Q4_0"];
/// Files a safetensors checkpoint needs besides the weights.
const SAFETENSORS_AUX: &[&str] = &[
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
];

fn not_found(spec: &str, reason: impl Into<String>) -> RuntimeError {
    RuntimeError::ModelNotFound {
        spec: spec.to_string(),
        reason: reason.into(),
    }
}

/// Classifies a local path: a `.gguf` file, a directory with a safetensors checkpoint, or a
/// directory with a single `.gguf`.
pub fn classify_local(path: &Path) -> Result<ModelFiles> {
    let spec = path.display().to_string();
    if path.is_file() {
        return Ok(ModelFiles::Gguf(path.to_path_buf()));
    }
    if !path.is_dir() {
        return Err(not_found(&spec, "no such file or directory"));
    }
    let names = list_dir(path);
    if names.iter().any(|n| n == "config.json") && names.iter().any(|n| n.ends_with(".safetensors"))
    {
        if !names.iter().any(|n| n == "tokenizer.json") {
            return Err(not_found(
                &spec,
                "safetensors checkpoint without tokenizer.json",
            ));
        }
        return Ok(ModelFiles::Safetensors(path.to_path_buf()));
    }
    let gguf = pick_gguf(&spec, &names)?;
    Ok(ModelFiles::Gguf(path.join(gguf)))
}

fn list_dir(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn pick_gguf(spec: &str, names: &[String]) -> Result<String> {
    let ggufs: Vec<&String> = names.iter().filter(|n| n.ends_with(".gguf")).collect();
    match ggufs.as_slice() {
        [] => Err(not_found(
            spec,
            "no .gguf file and no safetensors checkpoint (config.json + tokenizer.json + *.safetensors)",
        )),
        [one] => Ok((*one).clone()),
        many => {
            for q in GGUF_PREFERENCE {
                if let Some(f) = many.iter().find(|n| n.to_uppercase().contains(q)) {
                    return Ok((*f).clone());
                }
            }
            Err(not_found(
                spec,
                format!(
                    "several GGUF files ({}); name one as `{spec}:FILE.gguf`",
                    many.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                ),
            ))
        }
    }
}

/// True if `spec` looks like a hub repo id (`org/name`, optional `:file`) rather than a path.
pub fn is_repo_id(spec: &str) -> bool {
    let repo = spec.split(':').next().unwrap_or(spec);
    let parts: Vec<&str> = repo.split('/').collect();
    parts.len() == 2
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                && *p != "."
                && *p != ".."
        })
        && !Path::new(spec).exists()
}

/// The hub cache directory, by the same rules as the Python client.
pub fn cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("HF_HUB_CACHE") {
        return PathBuf::from(p);
    }
    hf_hub::Cache::from_env().path().clone()
}

fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE")
        .map(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "1" | "true" | "yes" | "on"
            )
        })
        .unwrap_or(false)
}

/// Resolves `org/name[:file]` to files, from the cache or (when online) by downloading.
pub fn resolve_repo(spec: &str) -> Result<ModelFiles> {
    let (repo_id, file) = match spec.split_once(':') {
        Some((r, f)) => (r, Some(f)),
        None => (spec, None),
    };
    let cache = hf_hub::Cache::new(cache_dir());
    let cached = cache.model(repo_id.to_string());
    // Files already in the cached snapshot (read without any network access).
    let snapshot = cached.get("").filter(|p| p.is_dir());
    let cached_names = snapshot.as_deref().map(list_dir).unwrap_or_default();

    if let Some(f) = file {
        if let Some(p) = cached.get(f) {
            return Ok(ModelFiles::Gguf(p));
        }
    } else if let Ok(found) = choose(spec, &cached_names) {
        let dir = snapshot.clone().expect("names came from the snapshot");
        if let Ok(files) = materialize_cached(&found, &dir) {
            return Ok(files);
        }
    }
    if offline() {
        return Err(not_found(
            spec,
            format!(
                "not in the hub cache at {} and HF_HUB_OFFLINE is set (download it first, or unset HF_HUB_OFFLINE)",
                cache_dir().display()
            ),
        ));
    }
    download(spec, repo_id, file)
}

enum Choice {
    Gguf(String),
    Safetensors(Vec<String>),
}

fn choose(spec: &str, names: &[String]) -> Result<Choice> {
    let weights: Vec<String> = names
        .iter()
        .filter(|n| n.ends_with(".safetensors"))
        .cloned()
        .collect();
    if names.iter().any(|n| n.ends_with(".gguf")) {
        return pick_gguf(spec, names).map(Choice::Gguf);
    }
    if !weights.is_empty() && names.iter().any(|n| n == "config.json") {
        let mut files = weights;
        files.extend(
            SAFETENSORS_AUX
                .iter()
                .filter(|a| names.iter().any(|n| n == *a))
                .map(|a| a.to_string()),
        );
        return Ok(Choice::Safetensors(files));
    }
    Err(not_found(
        spec,
        "the repo has no .gguf file and no safetensors checkpoint",
    ))
}

fn materialize_cached(choice: &Choice, dir: &Path) -> Result<ModelFiles> {
    match choice {
        Choice::Gguf(f) => Ok(ModelFiles::Gguf(dir.join(f))),
        Choice::Safetensors(_) => classify_local(dir),
    }
}

fn download(spec: &str, repo_id: &str, file: Option<&str>) -> Result<ModelFiles> {
    let hub_err =
        |e: hf_hub::api::sync::ApiError| not_found(spec, format!("hub request failed: {e}"));
    let api = hf_hub::api::sync::ApiBuilder::from_cache(hf_hub::Cache::new(cache_dir()))
        .with_progress(true)
        .build()
        .map_err(hub_err)?;
    let repo = api.model(repo_id.to_string());
    if let Some(f) = file {
        return repo.get(f).map(ModelFiles::Gguf).map_err(hub_err);
    }
    let info = repo.info().map_err(hub_err)?;
    let names: Vec<String> = info.siblings.into_iter().map(|s| s.rfilename).collect();
    match choose(spec, &names)? {
        Choice::Gguf(f) => repo.get(&f).map(ModelFiles::Gguf).map_err(hub_err),
        Choice::Safetensors(files) => {
            let mut dir = None;
            for f in files {
                let p = repo.get(&f).map_err(hub_err)?;
                dir = p.parent().map(Path::to_path_buf);
            }
            Ok(ModelFiles::Safetensors(dir.expect("at least one file")))
        }
    }
}
