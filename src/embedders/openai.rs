//! Embeddings from any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, Ollama, LM Studio,
//! vLLM) through async-openai: inputs sent in batches, a bounded number of requests in flight,
//! retries with exponential backoff and jitter on rate limits, server errors and timeouts. A
//! request that still fails fails its own texts only.

use std::time::Duration;

use anyhow::Result;
use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::types::embeddings::{CreateEmbeddingRequest, EmbeddingInput};
use futures::StreamExt;

use super::Embedded;
use crate::logic::similarity::normalise;

#[derive(Clone, Debug)]
pub struct OpenAiSettings {
    /// e.g. https://api.openai.com/v1 or http://localhost:11434/v1 (Ollama).
    pub base_url: String,
    pub model: String,
    /// The environment variable holding the API key; local servers need none.
    pub api_key_env: String,
    /// Asked of models that can shorten their vectors (text-embedding-3-*).
    pub dimensions: Option<u32>,
    pub batch_size: usize,
    pub concurrency: usize,
    pub max_attempts: u32,
    pub timeout: Duration,
}

impl Default for OpenAiSettings {
    fn default() -> Self {
        OpenAiSettings {
            base_url: "https://api.openai.com/v1".to_string(),
            model: "text-embedding-3-small".to_string(),
            api_key_env: "OPENAI_API_KEY".to_string(),
            dimensions: None,
            batch_size: 64,
            concurrency: 4,
            max_attempts: 5,
            timeout: Duration::from_secs(60),
        }
    }
}

pub struct OpenAiEmbedder {
    client: Client<OpenAIConfig>,
    settings: OpenAiSettings,
    dim: usize,
}

/// What became of one request.
enum Attempt {
    Done(Vec<Vec<f32>>),
    Retry(String),
    Fail(String),
}

impl OpenAiEmbedder {
    /// `dim` is the width every returned vector must have (the database's).
    pub fn new(settings: OpenAiSettings, dim: usize) -> OpenAiEmbedder {
        // reqwest's rustls needs a process-wide crypto provider; installing twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let key = std::env::var(&settings.api_key_env).unwrap_or_default();
        let config = OpenAIConfig::new()
            .with_api_base(settings.base_url.trim_end_matches('/'))
            .with_api_key(key);
        OpenAiEmbedder {
            client: Client::with_config(config),
            settings,
            dim,
        }
    }

    pub fn model_name(&self) -> String {
        format!("openai:{}", self.settings.model)
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    async fn request_once(&self, inputs: &[String]) -> Attempt {
        let request = CreateEmbeddingRequest {
            model: self.settings.model.clone(),
            input: EmbeddingInput::StringArray(inputs.to_vec()),
            encoding_format: None,
            user: None,
            dimensions: self.settings.dimensions,
        };
        let embeddings = self.client.embeddings();
        let call = embeddings.create(request);
        let response = match tokio::time::timeout(self.settings.timeout, call).await {
            Err(_) => {
                return Attempt::Retry(format!("timed out after {:?}", self.settings.timeout));
            }
            Ok(Err(OpenAIError::ApiError(e))) => {
                let status = e.status_code.as_u16();
                let message = format!("HTTP {status}: {}", e.api_error.message);
                return if status == 429 || status >= 500 {
                    Attempt::Retry(message)
                } else {
                    Attempt::Fail(message)
                };
            }
            Ok(Err(OpenAIError::Reqwest(e))) => return Attempt::Retry(format!("connection: {e}")),
            Ok(Err(e)) => return Attempt::Fail(e.to_string()),
            Ok(Ok(response)) => response,
        };
        if response.data.len() != inputs.len() {
            return Attempt::Fail(format!(
                "asked for {} vectors, got {}",
                inputs.len(),
                response.data.len()
            ));
        }
        let mut vectors = vec![Vec::new(); inputs.len()];
        for item in response.data {
            let index = item.index as usize;
            if index >= inputs.len() || !vectors[index].is_empty() {
                return Attempt::Fail(format!("reply has a bad or repeated index {index}"));
            }
            if item.embedding.len() != self.dim {
                return Attempt::Fail(format!(
                    "model {} returned {} dimensions, the database stores {}",
                    self.settings.model,
                    item.embedding.len(),
                    self.dim
                ));
            }
            let mut vector = item.embedding;
            normalise(&mut vector);
            vectors[index] = vector;
        }
        Attempt::Done(vectors)
    }

    /// One request with retries: waits 0.5 s, 1 s, 2 s, ... (with up to 50% jitter).
    async fn request(&self, inputs: Vec<String>) -> std::result::Result<Vec<Vec<f32>>, String> {
        let mut last = String::new();
        for attempt in 0..self.settings.max_attempts.max(1) {
            if attempt > 0 {
                let base = 500u64 << (attempt - 1).min(6);
                let jitter = (std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.subsec_nanos() as u64)
                    .unwrap_or(0))
                    % (base / 2 + 1);
                tokio::time::sleep(Duration::from_millis(base + jitter)).await;
            }
            match self.request_once(&inputs).await {
                Attempt::Done(vectors) => return Ok(vectors),
                Attempt::Fail(reason) => return Err(reason),
                Attempt::Retry(reason) => {
                    tracing::warn!(attempt = attempt + 1, %reason, "embedding request failed, retrying");
                    last = reason;
                }
            }
        }
        Err(format!(
            "gave up after {} attempts: {last}",
            self.settings.max_attempts
        ))
    }

    /// Embeds texts in batches with bounded concurrency; blank texts are refused without a call.
    pub async fn embed(&self, texts: &[&str]) -> Result<Vec<Embedded>> {
        let mut results = vec![Embedded::Refused("empty text".to_string()); texts.len()];
        let wanted: Vec<usize> = (0..texts.len())
            .filter(|&i| !texts[i].trim().is_empty())
            .collect();
        let chunks: Vec<Vec<usize>> = wanted
            .chunks(self.settings.batch_size.max(1))
            .map(<[usize]>::to_vec)
            .collect();
        let mut outcomes = futures::stream::iter(chunks.into_iter().map(|indices| async move {
            let inputs = indices.iter().map(|&i| texts[i].to_string()).collect();
            (indices, self.request(inputs).await)
        }))
        .buffer_unordered(self.settings.concurrency.max(1));
        while let Some((indices, outcome)) = outcomes.next().await {
            match outcome {
                Ok(vectors) => {
                    for (index, values) in indices.into_iter().zip(vectors) {
                        results[index] = Embedded::Vector {
                            values,
                            truncated: false,
                        };
                    }
                }
                Err(reason) => {
                    for index in indices {
                        results[index] = Embedded::Refused(reason.clone());
                    }
                }
            }
        }
        Ok(results)
    }
}
