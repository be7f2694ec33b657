//! GGUF -> Hugging Face-layout safetensors directory (`stencil convert`).
//!
//! Weights are dequantized to f32/f16/bf16 and renamed to the HF llama layout; Q and K
//! projections are un-permuted from llama.cpp's interleaved-RoPE row order. The directory gets
//! `config.json`, `tokenizer.json`, `tokenizer_config.json` (with the chat template) and
//! `generation_config.json`, so it loads through [`crate::models::llama_safetensors`].

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use serde_json::json;

use crate::error::{io_err, CandleContext, Result, RuntimeError};
use crate::gguf::GgufFile;
use crate::models::quantized_llama::Config;
use crate::tokenizer::gguf::from_gguf_metadata;

/// Output precision for [`convert_gguf_to_safetensors`].
pub fn parse_dtype(s: &str) -> Result<DType> {
    match s {
        "f32" | "float32" => Ok(DType::F32),
        "f16" | "float16" => Ok(DType::F16),
        "bf16" | "bfloat16" => Ok(DType::BF16),
        other => Err(RuntimeError::Safetensors {
            path: Default::default(),
            reason: format!("unsupported dtype `{other}` (use f32, f16 or bf16)"),
        }),
    }
}

fn torch_dtype(d: DType) -> &'static str {
    match d {
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        _ => "float32",
    }
}

/// Converts a llama-architecture GGUF into `out_dir`.
pub fn convert_gguf_to_safetensors(gguf_path: &Path, out_dir: &Path, dtype: DType) -> Result<()> {
    let mut gguf = GgufFile::open(gguf_path)?;
    let cfg = Config::from_gguf(&gguf)?;
    if cfg.arch != "llama" {
        return Err(RuntimeError::UnsupportedArchitecture {
            arch: cfg.arch,
            supported: "llama (for conversion to safetensors)".into(),
        });
    }
    let tokenizer = from_gguf_metadata(gguf.meta())?;
    let template = gguf
        .meta()
        .opt_str("tokenizer.chat_template")
        .map(str::to_string);
    let add_bos = gguf
        .meta()
        .opt_bool("tokenizer.ggml.add_bos_token")
        .unwrap_or(false);
    let dev = Device::Cpu;
    let names: Vec<String> = gguf.content.tensor_infos.keys().cloned().collect();
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    let mut intermediate = 0;
    for name in &names {
        let GgufFile {
            content, reader, ..
        } = &mut gguf;
        let t = content
            .tensor(reader, name, &dev)
            .and_then(|q| q.dequantize(&dev))
            .ctx(format!("reading `{name}`"))?;
        let Some(hf) = hf_name(name) else {
            tracing::warn!("skipping GGUF tensor `{name}` with no HF llama equivalent");
            continue;
        };
        let t = if name.ends_with("attn_q.weight") {
            unpermute(&t, cfg.n_head)?
        } else if name.ends_with("attn_k.weight") {
            unpermute(&t, cfg.n_kv_head)?
        } else {
            t
        };
        if name.ends_with("ffn_gate.weight") {
            intermediate = t.dim(0).ctx("ffn shape")?;
        }
        tensors.insert(hf, t.to_dtype(dtype).ctx("casting")?);
    }
    let tied = !tensors.contains_key("lm_head.weight");
    std::fs::create_dir_all(out_dir).map_err(io_err(out_dir))?;
    let weights = out_dir.join("model.safetensors");
    candle_core::safetensors::save(&tensors, &weights)
        .ctx(format!("writing {}", weights.display()))?;

    let id = |t: Option<&str>| t.and_then(|t| tokenizer.token_id(t));
    let config = json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": cfg.hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": cfg.n_layer,
        "num_attention_heads": cfg.n_head,
        "num_key_value_heads": cfg.n_kv_head,
        "rms_norm_eps": cfg.rms_eps,
        "rope_theta": cfg.rope_theta,
        "max_position_embeddings": cfg.context_length,
        "vocab_size": cfg.vocab_size,
        "tie_word_embeddings": tied,
        "bos_token_id": id(tokenizer.bos_token()),
        "eos_token_id": id(tokenizer.eos_token()),
        "torch_dtype": torch_dtype(dtype),
    });
    let mut tok_config = json!({
        "bos_token": tokenizer.bos_token(),
        "eos_token": tokenizer.eos_token(),
        "add_bos_token": add_bos,
    });
    if let Some(t) = template {
        tok_config["chat_template"] = t.into();
    }
    let gen_config = json!({ "eos_token_id": tokenizer.eos_ids() });
    write_json(&out_dir.join("config.json"), &config)?;
    write_json(&out_dir.join("tokenizer_config.json"), &tok_config)?;
    write_json(&out_dir.join("generation_config.json"), &gen_config)?;
    let tok_path = out_dir.join("tokenizer.json");
    tokenizer
        .inner()
        .save(&tok_path, false)
        .map_err(|e| RuntimeError::Tokenizer(format!("writing {}: {e}", tok_path.display())))?;
    Ok(())
}

fn write_json(path: &Path, v: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(v).expect("JSON values serialize");
    std::fs::write(path, text).map_err(io_err(path))
}

/// GGUF tensor name -> HF llama name.
fn hf_name(gguf: &str) -> Option<String> {
    match gguf {
        "token_embd.weight" => return Some("model.embed_tokens.weight".into()),
        "output_norm.weight" => return Some("model.norm.weight".into()),
        "output.weight" => return Some("lm_head.weight".into()),
        _ => {}
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, part) = rest.split_once('.')?;
    let hf = match part {
        "attn_q.weight" => "self_attn.q_proj.weight",
        "attn_k.weight" => "self_attn.k_proj.weight",
        "attn_v.weight" => "self_attn.v_proj.weight",
        "attn_output.weight" => "self_attn.o_proj.weight",
        "ffn_gate.weight" => "mlp.gate_proj.weight",
        "ffn_up.weight" => "mlp.up_proj.weight",
        "ffn_down.weight" => "mlp.down_proj.weight",
        "attn_norm.weight" => "input_layernorm.weight",
        "ffn_norm.weight" => "post_attention_layernorm.weight",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}"))
}

/// Inverse of llama.cpp's `permute`: rows go from interleaved-pair order back to HF's
/// rotate-half order, per head.
fn unpermute(w: &Tensor, n_head: usize) -> Result<Tensor> {
    let (out, inp) = w.dims2().ctx("Q/K weight shape")?;
    let hd = out / n_head;
    w.reshape((n_head, hd / 2, 2, inp))
        .and_then(|t| t.transpose(1, 2))
        .and_then(|t| t.contiguous())
        .and_then(|t| t.reshape((out, inp)))
        .ctx("un-permuting Q/K")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpermute_inverts_llama_cpp_permute() {
        // llama.cpp: reshape(n_head, 2, hd/2, in).swapaxes(1, 2)
        let dev = Device::Cpu;
        let hf = Tensor::arange(0f32, 48., &dev)
            .unwrap()
            .reshape((8, 6))
            .unwrap();
        let permuted = hf
            .reshape((2, 2, 2, 6))
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .contiguous()
            .unwrap()
            .reshape((8, 6))
            .unwrap();
        let back = unpermute(&permuted, 2).unwrap();
        assert_eq!(back.to_vec2::<f32>().unwrap(), hf.to_vec2::<f32>().unwrap());
        assert_eq!(
            hf_name("blk.3.attn_k.weight").unwrap(),
            "model.layers.3.self_attn.k_proj.weight"
        );
        assert_eq!(hf_name("rope_freqs.weight"), None);
    }
}
