//! The BERT encoder of the local embedder (all-MiniLM-L6-v2 and other BERT checkpoints in the
//! sentence-transformers layout), on candle's tensors and layers.
//!
//! Adapted from candle-transformers 0.11.1 `models/bert.rs` (Copyright the candle authors,
//! MIT OR Apache-2.0), which itself follows Hugging Face transformers' `modeling_bert.py`.
//! We carry the ~200 lines we use instead of depending on candle-transformers: that crate
//! holds about a hundred models (83k lines) and cost a clean build 20 s of compile for this
//! one (issue 17; ARCHITECTURE.md, "Dependencies"). Kept from the
//! original: the weights' names, absolute positions, the erf GELU, the extended attention mask
//! with `f32::MIN`; left out: dropout (inference only), the masked-LM heads, tracing spans.

use candle_core::{D, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, Module, VarBuilder};
use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HiddenAct {
    Gelu,
    GeluApproximate,
    Relu,
}

/// The fields of a Hugging Face BERT `config.json` the encoder needs (others are ignored).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: HiddenAct,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub model_type: Option<String>,
}

struct Embeddings {
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    layer_norm: LayerNorm,
}

impl Embeddings {
    fn load(vb: VarBuilder, config: &BertConfig) -> Result<Self> {
        let hidden = config.hidden_size;
        Ok(Self {
            word: candle_nn::embedding(config.vocab_size, hidden, vb.pp("word_embeddings"))?,
            position: candle_nn::embedding(
                config.max_position_embeddings,
                hidden,
                vb.pp("position_embeddings"),
            )?,
            token_type: candle_nn::embedding(
                config.type_vocab_size,
                hidden,
                vb.pp("token_type_embeddings"),
            )?,
            layer_norm: candle_nn::layer_norm(hidden, config.layer_norm_eps, vb.pp("LayerNorm"))?,
        })
    }

    fn forward(&self, input_ids: &Tensor, token_type_ids: &Tensor) -> Result<Tensor> {
        let (_batch, seq_len) = input_ids.dims2()?;
        let summed = (self.word.forward(input_ids)? + self.token_type.forward(token_type_ids)?)?;
        let positions: Vec<u32> = (0..seq_len as u32).collect();
        let positions = Tensor::new(positions.as_slice(), input_ids.device())?;
        let summed = summed.broadcast_add(&self.position.forward(&positions)?)?;
        self.layer_norm.forward(&summed)
    }
}

/// One transformer layer: self-attention, then the feed-forward block, each with a residual
/// connection and a layer norm.
struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    act: HiddenAct,
    output: Linear,
    output_norm: LayerNorm,
    heads: usize,
    head_size: usize,
}

impl Layer {
    fn load(vb: VarBuilder, config: &BertConfig) -> Result<Self> {
        let hidden = config.hidden_size;
        let heads = config.num_attention_heads;
        let head_size = hidden / heads;
        let attention = vb.pp("attention");
        let self_attention = attention.pp("self");
        let attention_output = attention.pp("output");
        let output = vb.pp("output");
        Ok(Self {
            query: candle_nn::linear(hidden, heads * head_size, self_attention.pp("query"))?,
            key: candle_nn::linear(hidden, heads * head_size, self_attention.pp("key"))?,
            value: candle_nn::linear(hidden, heads * head_size, self_attention.pp("value"))?,
            attention_out: candle_nn::linear(hidden, hidden, attention_output.pp("dense"))?,
            attention_norm: candle_nn::layer_norm(
                hidden,
                config.layer_norm_eps,
                attention_output.pp("LayerNorm"),
            )?,
            intermediate: candle_nn::linear(
                hidden,
                config.intermediate_size,
                vb.pp("intermediate").pp("dense"),
            )?,
            act: config.hidden_act,
            output: candle_nn::linear(config.intermediate_size, hidden, output.pp("dense"))?,
            output_norm: candle_nn::layer_norm(
                hidden,
                config.layer_norm_eps,
                output.pp("LayerNorm"),
            )?,
            heads,
            head_size,
        })
    }

    /// (batch, seq, hidden) -> (batch, heads, seq, head_size), contiguous for the matmul.
    fn split_heads(&self, xs: &Tensor) -> Result<Tensor> {
        let (batch, seq, _) = xs.dims3()?;
        xs.reshape((batch, seq, self.heads, self.head_size))?
            .transpose(1, 2)?
            .contiguous()
    }

    fn forward(&self, hidden: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let query = self.split_heads(&self.query.forward(hidden)?)?;
        let key = self.split_heads(&self.key.forward(hidden)?)?;
        let value = self.split_heads(&self.value.forward(hidden)?)?;
        let scores = (query.matmul(&key.t()?)? / (self.head_size as f64).sqrt())?;
        let probs = candle_nn::ops::softmax(&scores.broadcast_add(mask)?, D::Minus1)?;
        let context = probs
            .matmul(&value)?
            .transpose(1, 2)?
            .contiguous()?
            .flatten_from(D::Minus2)?;
        let attended = self
            .attention_norm
            .forward(&(self.attention_out.forward(&context)? + hidden)?)?;
        let inner = self.intermediate.forward(&attended)?;
        let inner = match self.act {
            HiddenAct::Gelu => inner.gelu_erf()?,
            HiddenAct::GeluApproximate => inner.gelu()?,
            HiddenAct::Relu => inner.relu()?,
        };
        self.output_norm
            .forward(&(self.output.forward(&inner)? + attended)?)
    }
}

pub struct BertModel {
    embeddings: Embeddings,
    layers: Vec<Layer>,
}

impl BertModel {
    /// Loads the weights, whether they are named `embeddings.*` / `encoder.*` (the
    /// sentence-transformers export), `bert.*` or `{model_type}.*`.
    pub fn load(vb: VarBuilder, config: &BertConfig) -> Result<Self> {
        let mut prefixes = vec![String::new(), "bert".to_string()];
        if let Some(model_type) = &config.model_type {
            prefixes.push(model_type.clone());
        }
        let mut first_error = None;
        for prefix in prefixes {
            let root = if prefix.is_empty() {
                vb.clone()
            } else {
                vb.pp(&prefix)
            };
            match Self::load_at(root, config) {
                Ok(model) => return Ok(model),
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        Err(first_error.expect("at least one prefix was tried"))
    }

    fn load_at(vb: VarBuilder, config: &BertConfig) -> Result<Self> {
        let embeddings = Embeddings::load(vb.pp("embeddings"), config)?;
        let encoder = vb.pp("encoder");
        let layers = (0..config.num_hidden_layers)
            .map(|index| Layer::load(encoder.pp(format!("layer.{index}")), config))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { embeddings, layers })
    }

    /// The last hidden state, (batch, seq, hidden), for token ids, token type ids and the
    /// attention mask (1 for real tokens, 0 for padding), each (batch, seq).
    pub fn forward(
        &self,
        input_ids: &Tensor,
        token_type_ids: &Tensor,
        mask: &Tensor,
    ) -> Result<Tensor> {
        let mut hidden = self.embeddings.forward(input_ids, token_type_ids)?;
        let dtype = hidden.dtype();
        // (batch, 1, 1, seq): 0 where attended, the lowest float where padded.
        let mask = mask.unsqueeze(1)?.unsqueeze(1)?.to_dtype(dtype)?;
        let mask = (mask.ones_like()? - &mask)?
            .broadcast_mul(&Tensor::new(f32::MIN, mask.device())?.to_dtype(dtype)?)?;
        for layer in &self.layers {
            hidden = layer.forward(&hidden, &mask)?;
        }
        Ok(hidden)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_sentence_transformers_bert_config_and_ignores_the_rest() {
        let config: BertConfig = serde_json::from_str(
            r#"{"_name_or_path": "x", "architectures": ["BertModel"], "attention_probs_dropout_prob": 0.1,
                "hidden_act": "gelu", "hidden_size": 384, "intermediate_size": 1536,
                "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert",
                "num_attention_heads": 12, "num_hidden_layers": 6, "type_vocab_size": 2,
                "vocab_size": 30522}"#,
        )
        .unwrap();
        assert_eq!(config.hidden_act, HiddenAct::Gelu);
        assert_eq!(config.hidden_size / config.num_attention_heads, 32);
        assert!(serde_json::from_str::<BertConfig>(r#"{"hidden_act": "swish"}"#).is_err());
    }
}
