//! The default embedder: sentence-transformers' all-MiniLM-L6-v2 run in-process with candle
//! (pure Rust, CPU), loaded from a folder holding `config.json`, `tokenizer.json` and
//! `model.safetensors`. Its vectors are the Python package's: WordPiece tokens truncated to
//! 256, BERT, mean pooling over real (unpadded) tokens, L2 normalisation.

use std::path::Path;

use super::bert::{BertConfig, BertModel};
use anyhow::{Context, Result, bail};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use super::Embedded;

/// The name recorded beside vectors this embedder makes.
pub const LOCAL_MODEL_NAME: &str = "all-MiniLM-L6-v2";

/// sentence-transformers' `max_seq_length` for this model (its tokenizer file says 128).
const MAX_TOKENS: usize = 256;
/// Texts per forward pass (the embed job's default batch).
const FORWARD_BATCH: usize = 64;

pub struct LocalEmbedder {
    model: BertModel,
    tokenizer: Tokenizer,
    dim: usize,
}

impl LocalEmbedder {
    /// Loads the model from a folder; says which file is missing and how to fetch them.
    pub fn load(folder: &Path) -> Result<LocalEmbedder> {
        for name in ["config.json", "tokenizer.json", "model.safetensors"] {
            if !folder.join(name).is_file() {
                bail!(
                    "{} has no {name}: fetch the model with `bash scripts/fetch-model.sh {}` \
                     (or choose --embedder hash)",
                    folder.display(),
                    folder.display()
                );
            }
        }
        let config_text = std::fs::read_to_string(folder.join("config.json"))?;
        let config: BertConfig = serde_json::from_str(&config_text)
            .with_context(|| format!("{}/config.json is not a BERT config", folder.display()))?;
        let dim: usize = serde_json::from_str::<serde_json::Value>(&config_text)?["hidden_size"]
            .as_u64()
            .context("config.json has no hidden_size")? as usize;
        let mut tokenizer = Tokenizer::from_file(folder.join("tokenizer.json"))
            .map_err(|e| anyhow::anyhow!("{}/tokenizer.json: {e}", folder.display()))?;
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..TruncationParams::default()
            }))
            .map_err(|e| anyhow::anyhow!("tokenizer truncation: {e}"))?;
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..PaddingParams::default()
        }));
        let weights = std::fs::read(folder.join("model.safetensors"))
            .with_context(|| format!("cannot read {}/model.safetensors", folder.display()))?;
        let builder = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)?;
        let model = BertModel::load(builder, &config)
            .with_context(|| format!("{} does not hold a BERT model", folder.display()))?;
        Ok(LocalEmbedder {
            model,
            tokenizer,
            dim,
        })
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Embeds texts, any number: blank texts are refused; texts over 256 tokens are
    /// truncated and say so. They go through the model `FORWARD_BATCH` at a time, shortest
    /// first: one forward pass holds every text of its batch padded to the longest, so a
    /// caller's whole list at once (a sessions run's 4,000 narratives) held gigabytes of
    /// attention scores, and mixed lengths wasted the padding.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Embedded>> {
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let mut results: Vec<Option<Embedded>> = vec![None; texts.len()];
        for chunk in order.chunks(FORWARD_BATCH) {
            let batch: Vec<&str> = chunk.iter().map(|&i| texts[i]).collect();
            for (&i, e) in chunk.iter().zip(self.embed_batch(&batch)?) {
                results[i] = Some(e);
            }
        }
        Ok(results.into_iter().flatten().collect())
    }

    /// One forward pass over `texts`.
    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Embedded>> {
        // Every non-blank text is overwritten below with its vector.
        let mut results = vec![Embedded::Refused("empty text".to_string()); texts.len()];
        let wanted: Vec<usize> = (0..texts.len())
            .filter(|&i| !texts[i].trim().is_empty())
            .collect();
        if wanted.is_empty() {
            return Ok(results);
        }
        let inputs: Vec<&str> = wanted.iter().map(|&i| texts[i]).collect();
        let encodings = self
            .tokenizer
            .encode_batch(inputs, true)
            .map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?;
        let rows = encodings.len();
        let width = encodings.first().map_or(0, |e| e.get_ids().len());
        let mut ids = Vec::with_capacity(rows * width);
        let mut types = Vec::with_capacity(rows * width);
        let mut mask = Vec::with_capacity(rows * width);
        for encoding in &encodings {
            ids.extend_from_slice(encoding.get_ids());
            types.extend_from_slice(encoding.get_type_ids());
            mask.extend_from_slice(encoding.get_attention_mask());
        }
        let device = &Device::Cpu;
        let ids = Tensor::from_vec(ids, (rows, width), device)?;
        let types = Tensor::from_vec(types, (rows, width), device)?;
        let mask = Tensor::from_vec(mask, (rows, width), device)?;
        let hidden = self.model.forward(&ids, &types, &mask)?;
        // Mean over real tokens: sum(hidden * mask) / sum(mask), then unit length.
        let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
        let counts = mask.sum(1)?.clamp(1e-9, f64::MAX)?;
        let mean = summed.broadcast_div(&counts)?;
        let norms = mean.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
        let unit: Vec<Vec<f32>> = mean.broadcast_div(&norms)?.to_vec2()?;
        for ((index, values), encoding) in wanted.into_iter().zip(unit).zip(&encodings) {
            results[index] = Embedded::Vector {
                values,
                truncated: !encoding.get_overflowing().is_empty(),
            };
        }
        Ok(results)
    }
}
