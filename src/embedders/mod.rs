//! Embedders: the text-to-vector models memlife can use. Each one names itself, and the
//! database records that name beside every vector (`embedding_model`), so vectors of
//! different models are never compared or mixed within a user.

mod bert;
pub mod local;
pub mod openai;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};

use crate::config::EmbedderSection;

use crate::logic::hash_embedding::{HASH_MODEL_NAME, hash_embed};
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

/// How to choose and reach an embedder. Each setting comes from its flag, else its
/// environment variable, else the `[embedder]` section of memlife.toml, else the default shown.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct EmbedderArgs {
    /// local (default), openai or hash.
    #[arg(long, value_enum, env = "MEMLIFE_EMBEDDER")]
    pub embedder: Option<EmbedderKind>,
    /// Folder with config.json, tokenizer.json and model.safetensors (scripts/fetch-model.sh);
    /// default models/all-MiniLM-L6-v2.
    #[arg(long, env = "MEMLIFE_MODEL_DIR")]
    pub model_dir: Option<PathBuf>,
    /// Base URL of the OpenAI-compatible server; default https://api.openai.com/v1.
    #[arg(long, env = "MEMLIFE_EMBED_URL")]
    pub embed_url: Option<String>,
    /// Default text-embedding-3-small.
    #[arg(long, env = "MEMLIFE_EMBED_MODEL")]
    pub embed_model: Option<String>,
    /// Name of the environment variable holding the API key (never the key itself); default
    /// OPENAI_API_KEY.
    #[arg(long)]
    pub embed_key_env: Option<String>,
    /// Ask the model for vectors of this width (text-embedding-3-* can shorten theirs).
    #[arg(long)]
    pub embed_dimensions: Option<u32>,
    /// Requests in flight at once (openai); default 4.
    #[arg(long)]
    pub embed_concurrency: Option<usize>,
    /// Per-request timeout in seconds (openai); default 60.
    #[arg(long)]
    pub embed_timeout_secs: Option<u64>,
}

impl EmbedderArgs {
    /// Fills what flags and environment left open from the config file, then the defaults.
    fn resolve(&self, file: &EmbedderSection) -> Result<ResolvedEmbedder> {
        let kind = match (self.embedder, file.kind.as_deref()) {
            (Some(kind), _) => kind,
            (None, None) => EmbedderKind::Local,
            (None, Some(name)) => {
                <EmbedderKind as clap::ValueEnum>::from_str(name, true).map_err(|_| {
                    anyhow::anyhow!("embedder.kind = {name:?}: expected local, openai or hash")
                })?
            }
        };
        Ok(ResolvedEmbedder {
            kind,
            model_dir: self
                .model_dir
                .clone()
                .or_else(|| file.model_dir.clone())
                .unwrap_or_else(|| PathBuf::from("models/all-MiniLM-L6-v2")),
            url: self
                .embed_url
                .clone()
                .or_else(|| file.base_url.clone())
                .unwrap_or_else(|| "https://api.openai.com/v1".into()),
            model: self
                .embed_model
                .clone()
                .or_else(|| file.model.clone())
                .unwrap_or_else(|| "text-embedding-3-small".into()),
            key_env: self
                .embed_key_env
                .clone()
                .or_else(|| file.api_key_env.clone())
                .unwrap_or_else(|| "OPENAI_API_KEY".into()),
            dimensions: self.embed_dimensions.or(file.dimensions),
            concurrency: self.embed_concurrency.or(file.concurrency).unwrap_or(4),
            timeout_secs: self.embed_timeout_secs.or(file.timeout_secs).unwrap_or(60),
        })
    }
}

struct ResolvedEmbedder {
    kind: EmbedderKind,
    model_dir: PathBuf,
    url: String,
    model: String,
    key_env: String,
    dimensions: Option<u32>,
    concurrency: usize,
    timeout_secs: u64,
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
    pub fn from_args(
        args: &EmbedderArgs,
        file: &EmbedderSection,
        dim: usize,
        batch_size: usize,
    ) -> Result<Embedder> {
        Embedder::build(args, file, Some(dim), batch_size)
    }

    /// Builds the chosen embedder with the width it makes by itself (no database to match:
    /// evaluations). An OpenAI-compatible model is taken at `--embed-dimensions`, else 1536.
    pub fn native(
        args: &EmbedderArgs,
        file: &EmbedderSection,
        batch_size: usize,
    ) -> Result<Embedder> {
        Embedder::build(args, file, None, batch_size)
    }

    fn build(
        args: &EmbedderArgs,
        file: &EmbedderSection,
        wanted: Option<usize>,
        batch_size: usize,
    ) -> Result<Embedder> {
        let args = args.resolve(file)?;
        let dim = wanted.unwrap_or(match args.kind {
            EmbedderKind::Openai => args.dimensions.unwrap_or(1536) as usize,
            _ => 384,
        });
        let embedder = match args.kind {
            EmbedderKind::Local => Embedder::Local(Arc::new(LocalEmbedder::load(&args.model_dir)?)),
            EmbedderKind::Openai => Embedder::OpenAi(Arc::new(OpenAiEmbedder::new(
                OpenAiSettings {
                    base_url: args.url.clone(),
                    model: args.model.clone(),
                    api_key_env: args.key_env.clone(),
                    dimensions: args.dimensions,
                    batch_size,
                    concurrency: args.concurrency,
                    max_attempts: 5,
                    timeout: Duration::from_secs(args.timeout_secs),
                },
                dim,
            ))),
            EmbedderKind::Hash => Embedder::Hash { dim },
        };
        if wanted.is_some() && embedder.dim() != dim {
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
