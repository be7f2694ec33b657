//! Reading GGUF files: header, metadata accessors with errors that name the key.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{Content, Value};

use crate::error::{io_err, Result, RuntimeError};

/// An opened GGUF file: parsed header and metadata, plus the reader positioned for tensor reads.
pub struct GgufFile {
    pub path: PathBuf,
    pub content: Content,
    pub reader: BufReader<File>,
}

impl GgufFile {
    /// Opens and parses a GGUF header. A truncated or non-GGUF file is an [`RuntimeError::InvalidGguf`].
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(io_err(path))?;
        let mut reader = BufReader::new(file);
        let content = Content::read(&mut reader).map_err(|e| RuntimeError::InvalidGguf {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let file_len = std::fs::metadata(path).map_err(io_err(path))?.len();
        // A truncated download parses fine (the header is at the front) and fails much later
        // inside a tensor read; check the extent of every tensor now instead.
        for (name, info) in &content.tensor_infos {
            let bytes = info.shape.elem_count() / info.ggml_dtype.block_size()
                * info.ggml_dtype.type_size();
            let end = content.tensor_data_offset + info.offset + bytes as u64;
            if end > file_len {
                return Err(RuntimeError::InvalidGguf {
                    path: path.to_path_buf(),
                    reason: format!(
                        "tensor `{name}` ends at byte {end} but the file has {file_len} bytes (truncated?)"
                    ),
                });
            }
        }
        Ok(Self {
            path: path.to_path_buf(),
            content,
            reader,
        })
    }

    /// Metadata accessors for this file.
    pub fn meta(&self) -> Meta<'_> {
        Meta(&self.content)
    }
}

/// Typed access to GGUF metadata; every miss names the key.
#[derive(Clone, Copy)]
pub struct Meta<'a>(pub &'a Content);

impl<'a> Meta<'a> {
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.0.metadata.get(key)
    }

    fn bad(key: &str, reason: impl ToString) -> RuntimeError {
        RuntimeError::Metadata {
            key: key.to_string(),
            reason: reason.to_string(),
        }
    }

    pub fn require(&self, key: &str) -> Result<&'a Value> {
        self.get(key).ok_or_else(|| Self::bad(key, "missing"))
    }

    pub fn str(&self, key: &str) -> Result<&'a str> {
        self.require(key)?
            .to_string()
            .map(String::as_str)
            .map_err(|e| Self::bad(key, e))
    }

    pub fn opt_str(&self, key: &str) -> Option<&'a str> {
        self.get(key)
            .and_then(|v| v.to_string().ok())
            .map(String::as_str)
    }

    /// Any integer type as usize (GGUF writers disagree on u32 vs i32 vs u64).
    pub fn usize(&self, key: &str) -> Result<usize> {
        let v = self.require(key)?;
        as_u64(v)
            .map(|n| n as usize)
            .ok_or_else(|| Self::bad(key, format!("expected an integer, found {v:?}")))
    }

    pub fn opt_usize(&self, key: &str) -> Option<usize> {
        self.get(key).and_then(as_u64).map(|n| n as usize)
    }

    pub fn opt_f32(&self, key: &str) -> Option<f32> {
        self.get(key).and_then(|v| match v {
            Value::F32(x) => Some(*x),
            Value::F64(x) => Some(*x as f32),
            other => as_u64(other).map(|n| n as f32),
        })
    }

    pub fn opt_bool(&self, key: &str) -> Option<bool> {
        self.get(key).and_then(|v| v.to_bool().ok())
    }

    pub fn array(&self, key: &str) -> Result<&'a Vec<Value>> {
        self.require(key)?.to_vec().map_err(|e| Self::bad(key, e))
    }

    pub fn str_array(&self, key: &str) -> Result<Vec<&'a str>> {
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.to_string()
                    .map(String::as_str)
                    .map_err(|e| Self::bad(&format!("{key}[{i}]"), e))
            })
            .collect()
    }
}

fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::U8(x) => Some(*x as u64),
        Value::I8(x) => u64::try_from(*x).ok(),
        Value::U16(x) => Some(*x as u64),
        Value::I16(x) => u64::try_from(*x).ok(),
        Value::U32(x) => Some(*x as u64),
        Value::I32(x) => u64::try_from(*x).ok(),
        Value::U64(x) => Some(*x),
        Value::I64(x) => u64::try_from(*x).ok(),
        _ => None,
    }
}

/// Integer value of an array element (token types are i32 in most files).
pub(crate) fn value_as_i64(v: &Value) -> Option<i64> {
    match v {
        Value::I32(x) => Some(*x as i64),
        Value::I64(x) => Some(*x),
        other => as_u64(other).map(|n| n as i64),
    }
}

pub(crate) fn value_as_f32(v: &Value) -> Option<f32> {
    match v {
        Value::F32(x) => Some(*x),
        Value::F64(x) => Some(*x as f32),
        _ => None,
    }
}
