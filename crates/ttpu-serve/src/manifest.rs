//! `serve.json`: what `ttpu.export_llm` wrote beside the step program, read and checked before
//! anything is loaded.
//!
//! The manifest fixes the program's input names, the KV cache buffers (by signature target, with
//! dtype and shape `[max_batch + 1, max_seq_len, heads, head_dim]`: one slot per request and the
//! scratch slot last), the buckets the engine may run the program at, the end-of-sequence tokens
//! and the model's sampling defaults. Every size is checked here, so the engine's arithmetic
//! on them cannot overflow.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::{Error, Result};

/// The format name `serve.json` carries.
pub const FORMAT: &str = "ttpu-llm";
/// The format version this engine reads.
pub const VERSION: u32 = 1;
/// The step program's inputs, in order (`ttpu/_llm.py`'s `STEP_INPUTS`).
pub const STEP_INPUTS: [&str; 12] = [
    "tokens",
    "slots",
    "positions",
    "last",
    "kv_positions",
    "temperature",
    "top_k",
    "top_p",
    "seed",
    "counter",
    "sample_rows",
    "filter_rows",
];

/// Sizes no export reaches; larger ones are refused so products of them stay far from overflow.
const MAX_SLOTS: usize = 4096;
const MAX_CONTEXT: usize = 1 << 20;
const MAX_VOCAB: usize = 1 << 24;

/// One KV cache buffer.
#[derive(Clone, Debug, Deserialize)]
pub struct CacheBuffer {
    /// PyTorch's dtype name (`float32`, `bfloat16`, `float16`).
    pub dtype: String,
    /// `[max_batch + 1, max_seq_len, heads, head_dim]`.
    pub shape: Vec<usize>,
}

/// Defaults for parameters a request leaves out, from the model's generation config.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SamplingDefaults {
    /// `0` when the model generates greedily by default.
    pub temperature: Option<f32>,
    /// Top-k; `0` keeps every token.
    pub top_k: Option<u32>,
    /// Top-p; `1` keeps every token.
    pub top_p: Option<f32>,
}

/// The contents of `serve.json`.
#[derive(Clone, Debug, Deserialize)]
pub struct Manifest {
    format: String,
    version: u32,
    /// The model's name (the export folder's name).
    pub model: String,
    /// The transformers class it was exported from.
    pub architecture: String,
    /// The step program, relative to the folder.
    pub program: String,
    /// The parameters, relative to the folder.
    pub weights: String,
    /// The step program's input names, in order.
    pub inputs: Vec<String>,
    /// Requests that run at once (cache slots).
    pub max_batch: usize,
    /// Tokens one request holds, prompt and completion.
    pub max_seq_len: usize,
    /// The slot padding rows write into.
    pub scratch_slot: usize,
    /// Logits per token.
    pub vocab_size: usize,
    /// The KV cache buffers by signature target, in layer order.
    pub kv_cache: indexmap::IndexMap<String, CacheBuffer>,
    /// Rows per step the program is run at.
    pub batch_buckets: Vec<usize>,
    /// Tokens per row a prefill is run at.
    pub prompt_buckets: Vec<usize>,
    /// Key positions attended.
    pub window_buckets: Vec<usize>,
    /// Tokens that end a completion.
    pub eos_token_ids: Vec<u32>,
    /// Defaults from the generation config.
    #[serde(default)]
    pub sampling_defaults: SamplingDefaults,
}

impl Manifest {
    /// Reads and checks `dir/serve.json`.
    pub fn read(dir: &Path) -> Result<Manifest> {
        let path = dir.join("serve.json");
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Io { path: path.clone(), source })?;
        Manifest::parse(&text, &path)
    }

    /// Parses and checks a manifest's text; `path` is for messages.
    pub fn parse(text: &str, path: &Path) -> Result<Manifest> {
        let fail = |message: String| Error::Manifest { path: path.to_owned(), message };
        let manifest: Manifest =
            serde_json::from_str(text).map_err(|error| fail(format!("not a ttpu-llm manifest: {error}")))?;
        manifest.check().map_err(fail)?;
        Ok(manifest)
    }

    fn check(&self) -> std::result::Result<(), String> {
        if self.format != FORMAT || self.version != VERSION {
            return Err(format!(
                "format `{}` version {}; this engine reads `{FORMAT}` version {VERSION}",
                self.format, self.version
            ));
        }
        if self.inputs != STEP_INPUTS {
            return Err(format!("the step program's inputs are {:?}, expected {:?}", self.inputs, STEP_INPUTS));
        }
        if !(1..=MAX_SLOTS).contains(&self.max_batch) {
            return Err(format!("max_batch {} is outside [1, {MAX_SLOTS}]", self.max_batch));
        }
        if !(2..=MAX_CONTEXT).contains(&self.max_seq_len) {
            return Err(format!("max_seq_len {} is outside [2, {MAX_CONTEXT}]", self.max_seq_len));
        }
        if !(1..=MAX_VOCAB).contains(&self.vocab_size) {
            return Err(format!("vocab_size {} is outside [1, {MAX_VOCAB}]", self.vocab_size));
        }
        if self.scratch_slot != self.max_batch {
            return Err(format!("scratch_slot is {}, expected max_batch ({})", self.scratch_slot, self.max_batch));
        }
        check_buckets("batch_buckets", &self.batch_buckets, self.max_batch)?;
        check_buckets("prompt_buckets", &self.prompt_buckets, self.max_seq_len)?;
        check_buckets("window_buckets", &self.window_buckets, self.max_seq_len)?;
        if self.kv_cache.is_empty() {
            return Err("kv_cache lists no buffer".into());
        }
        for (key, buffer) in &self.kv_cache {
            let shape = &buffer.shape;
            if shape.len() != 4 || shape[0] != self.max_batch + 1 || shape[1] != self.max_seq_len {
                return Err(format!(
                    "kv_cache `{key}` has shape {shape:?}, expected [{}, {}, heads, head_dim]",
                    self.max_batch + 1,
                    self.max_seq_len
                ));
            }
            if !(1..=MAX_SLOTS).contains(&shape[2]) || !(1..=MAX_SLOTS).contains(&shape[3]) {
                return Err(format!("kv_cache `{key}` has shape {shape:?}, with heads or head_dim out of range"));
            }
            dtype(&buffer.dtype).ok_or_else(|| format!("kv_cache `{key}` has dtype `{}`", buffer.dtype))?;
        }
        if let Some(&token) = self.eos_token_ids.iter().find(|&&token| token as usize >= self.vocab_size) {
            return Err(format!("eos token {token} is outside the vocabulary of {}", self.vocab_size));
        }
        Ok(())
    }

    /// The step program's path.
    pub fn program_path(&self, dir: &Path) -> PathBuf {
        dir.join(&self.program)
    }

    /// The parameters' path.
    pub fn weights_path(&self, dir: &Path) -> PathBuf {
        dir.join(&self.weights)
    }
}

/// The IR dtype of a PyTorch dtype name the cache may have.
pub fn dtype(name: &str) -> Option<ttpu::DType> {
    match name {
        "float32" => Some(ttpu::DType::F32),
        "bfloat16" => Some(ttpu::DType::BF16),
        "float16" => Some(ttpu::DType::F16),
        _ => None,
    }
}

fn check_buckets(name: &str, buckets: &[usize], high: usize) -> std::result::Result<(), String> {
    let increasing = buckets.windows(2).all(|pair| pair[0] < pair[1]);
    if buckets.is_empty() || buckets[0] == 0 || !increasing || buckets.last() != Some(&high) {
        return Err(format!("{name} {buckets:?} must increase from at least 1 up to {high}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(edit: impl FnOnce(&mut serde_json::Value)) -> String {
        let mut value = serde_json::json!({
            "format": "ttpu-llm", "version": 1, "model": "tiny", "architecture": "LlamaForCausalLM",
            "program": "model.fx", "weights": "weights.safetensors", "inputs": STEP_INPUTS,
            "max_batch": 4, "max_seq_len": 64, "scratch_slot": 4, "vocab_size": 256,
            "kv_cache": {"kv_cache.k0": {"dtype": "float32", "shape": [5, 64, 2, 16]}},
            "batch_buckets": [1, 2, 4], "prompt_buckets": [16, 32, 64], "window_buckets": [64],
            "eos_token_ids": [2], "sampling_defaults": {"temperature": 0.0}
        });
        edit(&mut value);
        value.to_string()
    }

    fn error(edit: impl FnOnce(&mut serde_json::Value)) -> String {
        Manifest::parse(&text(edit), Path::new("serve.json")).expect_err("the manifest is wrong").to_string()
    }

    #[test]
    fn a_well_formed_manifest_is_read() {
        let manifest = Manifest::parse(&text(|_| {}), Path::new("serve.json")).expect("well formed");
        assert_eq!((manifest.max_batch, manifest.max_seq_len, manifest.vocab_size), (4, 64, 256));
        assert_eq!(manifest.sampling_defaults.temperature, Some(0.0));
    }

    #[test]
    fn wrong_manifests_are_refused_with_the_reason() {
        assert_eq!(
            error(|value| value["version"] = 2.into()),
            "serve.json: format `ttpu-llm` version 2; this engine reads `ttpu-llm` version 1"
        );
        assert_eq!(
            error(|value| value["batch_buckets"] = serde_json::json!([1, 2])),
            "serve.json: batch_buckets [1, 2] must increase from at least 1 up to 4"
        );
        assert_eq!(
            error(|value| value["kv_cache"]["kv_cache.k0"]["shape"] = serde_json::json!([4, 64, 2, 16])),
            "serve.json: kv_cache `kv_cache.k0` has shape [4, 64, 2, 16], expected [5, 64, heads, head_dim]"
        );
        assert_eq!(
            error(|value| value["eos_token_ids"] = serde_json::json!([256])),
            "serve.json: eos token 256 is outside the vocabulary of 256"
        );
        assert_eq!(
            error(|value| value["max_batch"] = serde_json::json!(-1)),
            "serve.json: not a ttpu-llm manifest: invalid value: integer `-1`, expected usize at line 1 column 317"
        );
    }
}
