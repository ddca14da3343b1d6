//! One OpenAI-compatible endpoint: an async-openai client whose HTTP goes through our own
//! tower service (`Resilient`), which sees every response's status and headers, so retries on
//! 429 and 5xx honour `Retry-After`, back off exponentially with jitter, and are counted; a
//! per-attempt timeout; a semaphore for concurrency; client-side request and token budgets.
//!
//! Logs name the provider, status and delay; never the key and never the prompt.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;
use async_openai::types::chat::{
    ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequestArgs, ResponseFormat,
};
use serde::Serialize;
use tokio::sync::{Mutex, Semaphore};

use crate::config::ProviderConfig;

/// Counters of one provider over a run.
#[derive(Default, Debug)]
pub struct ProviderStats {
    /// HTTP requests sent (first attempts and retries).
    pub requests: AtomicU64,
    /// Retries after 429, 5xx, timeouts or refused connections.
    pub retries: AtomicU64,
    /// Calls that ended in an error after all retries.
    pub failed_calls: AtomicU64,
    /// Calls that returned a completion.
    pub completions: AtomicU64,
    /// Replies that did not parse or validate.
    pub invalid_replies: AtomicU64,
    /// Items this provider produced the final answer for.
    pub served: AtomicU64,
    pub input_tokens: AtomicU64,
    pub output_tokens: AtomicU64,
    /// Items passed to the next provider without a call because this one's circuit was open.
    pub skipped: AtomicU64,
}

/// The accounting of one provider, as reports and the `runs` table show it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct ProviderUsage {
    pub model: String,
    pub requests: u64,
    pub retries: u64,
    pub failed_calls: u64,
    pub completions: u64,
    pub invalid_replies: u64,
    pub served: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub skipped_circuit_open: u64,
    pub estimated_cost_usd: f64,
}

/// A completion's text and token counts.
pub struct Completion {
    pub text: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// Why a call produced no completion; any of these moves the item to the next provider.
#[derive(Debug, thiserror::Error)]
#[error("provider {provider}: {message}")]
pub struct CallError {
    pub provider: String,
    pub message: String,
}

pub struct Provider {
    pub name: String,
    pub config: ProviderConfig,
    client: Client<OpenAIConfig>,
    permits: Semaphore,
    budget: Mutex<Budget>,
    pub stats: Arc<ProviderStats>,
    breaker: std::sync::Mutex<Breaker>,
}

/// Consecutive failed calls that open a provider's circuit.
const BREAKER_THRESHOLD: u32 = 3;
/// How long an open circuit sends calls straight to the next provider before one is tried.
const BREAKER_COOL_DOWN: Duration = Duration::from_secs(30);

/// A circuit breaker: after `BREAKER_THRESHOLD` failed calls in a row, items skip this
/// provider for `BREAKER_COOL_DOWN`, then one call probes it again. A dead first provider
/// then costs a few calls per run, not retries and timeouts for every item.
#[derive(Default)]
struct Breaker {
    failures_in_a_row: u32,
    open_until: Option<Instant>,
}

impl Provider {
    pub fn new(name: &str, config: &ProviderConfig) -> anyhow::Result<Provider> {
        let mut openai = OpenAIConfig::new().with_api_base(config.base_url.trim_end_matches('/'));
        if let Some(var) = &config.api_key_env {
            let key = std::env::var(var).map_err(|_| {
                anyhow::anyhow!(
                    "provider {name}: environment variable {var} (its API key) is not set"
                )
            })?;
            openai = openai.with_api_key(key);
        }
        let stats = Arc::new(ProviderStats::default());
        // TLS through rustls with ring (already in the tree); idempotent.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .pool_max_idle_per_host(config.max_concurrency)
            .build()?;
        let service = Resilient {
            http,
            provider: name.to_string(),
            policy: RetryPolicy::from(config),
            stats: stats.clone(),
        };
        Ok(Provider {
            name: name.to_string(),
            config: config.clone(),
            client: Client::with_config(openai).with_http_service(service),
            permits: Semaphore::new(config.max_concurrency),
            budget: Mutex::new(Budget::new(
                config.requests_per_minute,
                config.tokens_per_minute,
            )),
            stats,
            breaker: std::sync::Mutex::new(Breaker::default()),
        })
    }

    /// Whether calls should skip this provider now (its circuit is open).
    pub fn circuit_open(&self) -> bool {
        let mut breaker = self.breaker.lock().unwrap_or_else(|e| e.into_inner());
        match breaker.open_until {
            Some(until) if Instant::now() < until => {
                self.stats.skipped.fetch_add(1, Ordering::Relaxed);
                true
            }
            Some(_) => {
                // Half-open: let this call probe; a failure re-opens at once.
                breaker.open_until = None;
                breaker.failures_in_a_row = BREAKER_THRESHOLD - 1;
                false
            }
            None => false,
        }
    }

    fn record(&self, ok: bool) {
        let mut breaker = self.breaker.lock().unwrap_or_else(|e| e.into_inner());
        if ok {
            breaker.failures_in_a_row = 0;
            return;
        }
        breaker.failures_in_a_row += 1;
        if breaker.failures_in_a_row >= BREAKER_THRESHOLD && breaker.open_until.is_none() {
            tracing::warn!(
                provider = %self.name,
                "{} failed calls in a row: skipping it for {} s",
                breaker.failures_in_a_row,
                BREAKER_COOL_DOWN.as_secs()
            );
            breaker.open_until = Some(Instant::now() + BREAKER_COOL_DOWN);
        }
    }

    /// One chat completion of `prompt` (the user message), within the provider's limits.
    pub async fn complete(&self, prompt: &str, temperature: f32) -> Result<Completion, CallError> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|e| self.error(e.to_string()))?;
        let estimate = (prompt.len() / 4) as u64 + self.config.max_output_tokens as u64;
        loop {
            let wait = self.budget.lock().await.take(estimate, Instant::now());
            match wait {
                None => break,
                Some(delay) => tokio::time::sleep(delay).await,
            }
        }
        let message = ChatCompletionRequestUserMessageArgs::default()
            .content(prompt)
            .build()
            .map_err(|e| self.error(e.to_string()))?;
        let mut request = CreateChatCompletionRequestArgs::default();
        request
            .model(&self.config.model)
            .messages([message.into()])
            .temperature(temperature)
            .max_completion_tokens(self.config.max_output_tokens);
        if self.config.json_mode {
            request.response_format(ResponseFormat::JsonObject);
        }
        let request = request.build().map_err(|e| self.error(e.to_string()))?;
        match self.client.chat().create(request).await {
            Ok(response) => {
                self.record(true);
                self.stats.completions.fetch_add(1, Ordering::Relaxed);
                let (input, output) = response.usage.as_ref().map_or((0, 0), |u| {
                    (u.prompt_tokens as u64, u.completion_tokens as u64)
                });
                self.stats.input_tokens.fetch_add(input, Ordering::Relaxed);
                self.stats
                    .output_tokens
                    .fetch_add(output, Ordering::Relaxed);
                let text = response
                    .choices
                    .into_iter()
                    .next()
                    .and_then(|c| c.message.content)
                    .unwrap_or_default();
                Ok(Completion {
                    text,
                    input_tokens: input,
                    output_tokens: output,
                })
            }
            Err(error) => {
                self.record(false);
                self.stats.failed_calls.fetch_add(1, Ordering::Relaxed);
                Err(self.error(describe_error(&error)))
            }
        }
    }

    pub fn client(&self) -> &Client<OpenAIConfig> {
        &self.client
    }

    fn error(&self, message: String) -> CallError {
        CallError {
            provider: self.name.clone(),
            message,
        }
    }

    pub fn usage(&self) -> ProviderUsage {
        let s = &self.stats;
        let input = s.input_tokens.load(Ordering::Relaxed);
        let output = s.output_tokens.load(Ordering::Relaxed);
        ProviderUsage {
            model: self.config.model.clone(),
            requests: s.requests.load(Ordering::Relaxed),
            retries: s.retries.load(Ordering::Relaxed),
            failed_calls: s.failed_calls.load(Ordering::Relaxed),
            completions: s.completions.load(Ordering::Relaxed),
            invalid_replies: s.invalid_replies.load(Ordering::Relaxed),
            served: s.served.load(Ordering::Relaxed),
            input_tokens: input,
            output_tokens: output,
            skipped_circuit_open: s.skipped.load(Ordering::Relaxed),
            estimated_cost_usd: cost(&self.config, input, output, false),
        }
    }
}

/// USD for the tokens at the provider's prices; the Batch API costs half.
pub fn cost(config: &ProviderConfig, input: u64, output: u64, batch: bool) -> f64 {
    let full = (input as f64 * config.input_price_per_million
        + output as f64 * config.output_price_per_million)
        / 1e6;
    if batch { full / 2.0 } else { full }
}

/// A short description of an error: status and message, never the request.
pub fn describe_error(error: &OpenAIError) -> String {
    match error {
        OpenAIError::ApiError(e) => format!("HTTP {}: {}", e.status_code, e.api_error.message),
        OpenAIError::Reqwest(e) if e.is_timeout() => "timed out".to_string(),
        OpenAIError::Reqwest(e) if e.is_connect() => format!("cannot connect: {}", root_cause(e)),
        OpenAIError::Reqwest(e) => format!("transport error: {}", root_cause(e)),
        OpenAIError::JSONDeserialize(e, _) => format!("unreadable response: {e}"),
        other => other.to_string(),
    }
}

fn root_cause(error: &dyn std::error::Error) -> String {
    let mut current = error;
    while let Some(next) = current.source() {
        current = next;
    }
    current.to_string()
}

/// Requests and tokens per minute, as two token buckets refilled continuously.
struct Budget {
    requests: Bucket,
    tokens: Bucket,
}

struct Bucket {
    per_minute: f64,
    available: f64,
    updated: Instant,
}

impl Bucket {
    fn new(per_minute: u32) -> Bucket {
        Bucket {
            per_minute: per_minute as f64,
            available: per_minute as f64,
            updated: Instant::now(),
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.available = (self.available + elapsed * self.per_minute / 60.0).min(self.per_minute);
        self.updated = now;
    }

    /// Time until `amount` is available (zero if it is), for an unlimited bucket zero.
    fn shortfall(&self, amount: f64) -> Duration {
        if self.per_minute <= 0.0 || self.available >= amount.min(self.per_minute) {
            return Duration::ZERO;
        }
        let missing = amount.min(self.per_minute) - self.available;
        Duration::from_secs_f64(missing * 60.0 / self.per_minute)
    }
}

impl Budget {
    fn new(requests_per_minute: u32, tokens_per_minute: u32) -> Budget {
        Budget {
            requests: Bucket::new(requests_per_minute),
            tokens: Bucket::new(tokens_per_minute),
        }
    }

    /// Takes one request and `tokens` if both are available; otherwise says how long to wait.
    fn take(&mut self, tokens: u64, now: Instant) -> Option<Duration> {
        self.requests.refill(now);
        self.tokens.refill(now);
        let wait = self
            .requests
            .shortfall(1.0)
            .max(self.tokens.shortfall(tokens as f64));
        if wait > Duration::ZERO {
            return Some(wait);
        }
        if self.requests.per_minute > 0.0 {
            self.requests.available -= 1.0;
        }
        if self.tokens.per_minute > 0.0 {
            self.tokens.available -= (tokens as f64).min(self.tokens.per_minute);
        }
        None
    }
}

#[derive(Clone, Debug)]
pub struct RetryPolicy {
    pub max_retries: u32,
    pub initial: Duration,
    pub max: Duration,
    pub timeout: Duration,
}

impl From<&ProviderConfig> for RetryPolicy {
    fn from(c: &ProviderConfig) -> Self {
        RetryPolicy {
            max_retries: c.max_retries,
            initial: Duration::from_secs_f64(c.initial_backoff_secs.max(0.0)),
            max: Duration::from_secs_f64(c.max_backoff_secs.max(0.0)),
            timeout: Duration::from_secs_f64(c.timeout_secs),
        }
    }
}

/// Longest `Retry-After` we wait for; a server asking for more fails the call (and the next
/// provider is tried) rather than stalling a nightly run.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

impl RetryPolicy {
    /// The delay before retry number `retry` (0-based): `Retry-After` when the server sent
    /// one, else exponential backoff with full jitter in [base/2, base].
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>, jitter: f64) -> Duration {
        if let Some(after) = retry_after {
            return after.min(MAX_RETRY_AFTER);
        }
        let base = self.initial.as_secs_f64() * 2f64.powi(retry as i32);
        let capped = base.min(self.max.as_secs_f64());
        Duration::from_secs_f64(capped * (0.5 + 0.5 * jitter.clamp(0.0, 1.0)))
    }
}

/// `Retry-After` as seconds or as an HTTP date.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds >= 0.0).then(|| Duration::from_secs_f64(seconds));
    }
    let when = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let delta = when.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(delta.to_std().unwrap_or(Duration::ZERO))
}

fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// The HTTP layer under async-openai: retries, timeouts, counting.
#[derive(Clone)]
struct Resilient {
    http: reqwest::Client,
    provider: String,
    policy: RetryPolicy,
    stats: Arc<ProviderStats>,
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<reqwest::Response, OpenAIError>> + Send>>;

impl tower::Service<HttpRequestFactory> for Resilient {
    type Response = reqwest::Response;
    type Error = OpenAIError;
    type Future = BoxFuture;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, factory: HttpRequestFactory) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.send(factory).await })
    }
}

impl Resilient {
    async fn send(self, factory: HttpRequestFactory) -> Result<reqwest::Response, OpenAIError> {
        let mut retry = 0u32;
        loop {
            let mut request = factory.build().await?;
            *request.timeout_mut() = Some(self.policy.timeout);
            self.stats.requests.fetch_add(1, Ordering::Relaxed);
            let outcome = self.http.execute(request).await;
            let (retryable, retry_after, what) = match &outcome {
                Ok(response) => {
                    let status = response.status();
                    let retryable = status.as_u16() == 429 || status.is_server_error();
                    let after = response
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(parse_retry_after);
                    (retryable, after, format!("HTTP {status}"))
                }
                Err(e) if e.is_timeout() => (true, None, "timeout".to_string()),
                Err(e) if e.is_connect() => (true, None, "connection failed".to_string()),
                Err(e) => (false, None, e.to_string()),
            };
            if !retryable || retry >= self.policy.max_retries {
                return outcome.map_err(OpenAIError::Reqwest);
            }
            let delay = self.policy.delay(retry, retry_after, jitter());
            tracing::info!(
                provider = %self.provider,
                attempt = retry + 1,
                delay_ms = delay.as_millis() as u64,
                "{what}; retrying"
            );
            self.stats.retries.fetch_add(1, Ordering::Relaxed);
            retry += 1;
            tokio::time::sleep(delay).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_and_retry_after_wins() {
        let policy = RetryPolicy {
            max_retries: 5,
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
            timeout: Duration::from_secs(5),
        };
        assert_eq!(policy.delay(0, None, 1.0), Duration::from_millis(100));
        assert_eq!(policy.delay(2, None, 1.0), Duration::from_millis(400));
        assert_eq!(policy.delay(2, None, 0.0), Duration::from_millis(200));
        assert_eq!(policy.delay(9, None, 1.0), Duration::from_secs(1), "capped");
        assert_eq!(
            policy.delay(0, Some(Duration::from_secs(3)), 0.5),
            Duration::from_secs(3)
        );
        assert_eq!(parse_retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO),
            "a date in the past means now"
        );
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn three_failed_calls_in_a_row_open_the_circuit_and_a_success_resets_it() {
        let config: ProviderConfig =
            toml::from_str("base_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"").unwrap();
        let provider = Provider::new("p", &config).unwrap();
        provider.record(false);
        provider.record(false);
        provider.record(true);
        provider.record(false);
        provider.record(false);
        assert!(!provider.circuit_open(), "failures were not in a row");
        provider.record(false);
        assert!(provider.circuit_open());
        assert_eq!(provider.usage().skipped_circuit_open, 1);
        // After the cool-down one call probes; its failure re-opens the circuit at once.
        provider.breaker.lock().unwrap().open_until = Some(Instant::now());
        assert!(!provider.circuit_open());
        provider.record(false);
        assert!(provider.circuit_open());
    }

    #[test]
    fn budgets_make_callers_wait_for_refill() {
        let mut budget = Budget::new(60, 0);
        let start = Instant::now();
        for _ in 0..60 {
            assert_eq!(budget.take(100, start), None);
        }
        let wait = budget.take(100, start).expect("61st request waits");
        assert!((wait.as_secs_f64() - 1.0).abs() < 0.01, "{wait:?}");
        assert_eq!(budget.take(100, start + Duration::from_secs(1)), None);
        let mut tokens = Budget::new(0, 6000);
        assert_eq!(tokens.take(6000, start), None);
        let wait = tokens.take(3000, start).unwrap();
        assert!((wait.as_secs_f64() - 30.0).abs() < 0.01, "{wait:?}");
    }
}
