//! Embedders: the text-to-vector models memlife can use. Each one names itself, and the
//! database records that name beside every vector (`embedding_model`), so vectors of
//! different models are never compared or mixed within a user.

pub mod hash;
pub mod local;
pub mod openai;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};

use hash::{HASH_MODEL_NAME, hash_embed};
use local::{LOCAL_MODEL_NAME, LocalEmbedder};
use openai::{OpenAiEmbedder, OpenAiSettings};

/// One text's vector, or why it has none.
#[derive(Debug, Clone, PartialEq)]
pub enum Embedded {
    /// A unit vector; `truncated` when the text was longer than the model reads.
    Vector {
        values: Vec<f32>,
        truncated: bool,
    },
    Refused(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EmbedderKind {
    /// all-MiniLM-L6-v2 in-process (candle), from --model-dir.
    Local,
    /// Any OpenAI-compatible /v1/embeddings endpoint.
    Openai,
    /// Deterministic feature hashing: lexical, not semantic. For machines without the model.
    Hash,
}

/// How to choose and reach an embedder: flags, each with an environment variable.
#[derive(clap::Args, Clone, Debug)]
pub struct EmbedderArgs {
    #[arg(long, value_enum, env = "MEMLIFE_EMBEDDER", default_value = "local")]
    pub embedder: EmbedderKind,
    /// Folder with config.json, tokenizer.json and model.safetensors (scripts/fetch-model.sh).
    #[arg(
        long,
        env = "MEMLIFE_MODEL_DIR",
        default_value = "models/all-MiniLM-L6-v2"
    )]
    pub model_dir: PathBuf,
    /// Base URL of the OpenAI-compatible server.
    #[arg(
        long,
        env = "MEMLIFE_EMBED_URL",
        default_value = "https://api.openai.com/v1"
    )]
    pub embed_url: String,
    #[arg(
        long,
        env = "MEMLIFE_EMBED_MODEL",
        default_value = "text-embedding-3-small"
    )]
    pub embed_model: String,
    /// Name of the environment variable holding the API key (never the key itself).
    #[arg(long, default_value = "OPENAI_API_KEY")]
    pub embed_key_env: String,
    /// Ask the model for vectors of this width (text-embedding-3-* can shorten theirs).
    #[arg(long)]
    pub embed_dimensions: Option<u32>,
    /// Requests in flight at once (openai).
    #[arg(long, default_value_t = 4)]
    pub embed_concurrency: usize,
    /// Per-request timeout in seconds (openai).
    #[arg(long, default_value_t = 60)]
    pub embed_timeout_secs: u64,
}

/// A ready embedder. Cloning shares the loaded model.
#[derive(Clone)]
pub enum Embedder {
    Local(Arc<LocalEmbedder>),
    OpenAi(Arc<OpenAiEmbedder>),
    Hash { dim: usize },
}

impl Embedder {
    /// Builds the chosen embedder for a database storing `dim`-wide vectors.
    pub fn from_args(args: &EmbedderArgs, dim: usize, batch_size: usize) -> Result<Embedder> {
        let embedder = match args.embedder {
            EmbedderKind::Local => Embedder::Local(Arc::new(LocalEmbedder::load(&args.model_dir)?)),
            EmbedderKind::Openai => Embedder::OpenAi(Arc::new(OpenAiEmbedder::new(
                OpenAiSettings {
                    base_url: args.embed_url.clone(),
                    model: args.embed_model.clone(),
                    api_key_env: args.embed_key_env.clone(),
                    dimensions: args.embed_dimensions,
                    batch_size,
                    concurrency: args.embed_concurrency,
                    max_attempts: 5,
                    timeout: Duration::from_secs(args.embed_timeout_secs),
                },
                dim,
            ))),
            EmbedderKind::Hash => Embedder::Hash { dim },
        };
        if embedder.dim() != dim {
            bail!(
                "embedder {} makes {}-dimensional vectors but this database stores {dim} \
                 (create a database with `memlife init --embedding-dim {}`)",
                embedder.model_name(),
                embedder.dim(),
                embedder.dim()
            );
        }
        Ok(embedder)
    }

    /// The name recorded beside each vector.
    pub fn model_name(&self) -> String {
        match self {
            Embedder::Local(_) => LOCAL_MODEL_NAME.to_string(),
            Embedder::OpenAi(e) => e.model_name(),
            Embedder::Hash { .. } => HASH_MODEL_NAME.to_string(),
        }
    }

    pub fn dim(&self) -> usize {
        match self {
            Embedder::Local(e) => e.dim(),
            Embedder::OpenAi(e) => e.dim(),
            Embedder::Hash { dim } => *dim,
        }
    }

    /// Embeds a batch of texts; one refused text does not fail the others.
    pub async fn embed(&self, texts: &[&str]) -> Result<Vec<Embedded>> {
        match self {
            Embedder::Local(model) => {
                let model = model.clone();
                let owned: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
                tokio::task::spawn_blocking(move || {
                    let borrowed: Vec<&str> = owned.iter().map(String::as_str).collect();
                    model.embed(&borrowed)
                })
                .await?
            }
            Embedder::OpenAi(client) => client.embed(texts).await,
            Embedder::Hash { dim } => Ok(texts
                .iter()
                .map(|t| {
                    if t.trim().is_empty() {
                        Embedded::Refused("empty text".to_string())
                    } else {
                        Embedded::Vector {
                            values: hash_embed(t, *dim),
                            truncated: false,
                        }
                    }
                })
                .collect()),
        }
    }
}
