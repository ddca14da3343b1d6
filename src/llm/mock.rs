//! `memlife mock-llm`: an OpenAI-compatible HTTP server for tests and benchmarks. It answers
//! chat completions of memlife prompts with the offline judge's JSON (after a configured
//! latency), embeddings with the lexical hash embedder, and implements files and batches
//! well enough for the Batch API path (upload, create, retrieve, download, delete).
//!
//! Faults: `--error-rate` turns that share of chat requests into a 429 (with `Retry-After`),
//! a 500, a malformed reply or a timeout, drawn from `--seed`; `--script FILE` (a JSON array)
//! dictates the fault of each of the first requests in order, e.g.
//! `[{"status":429,"retry_after":1},{"status":500},{"malformed":true},{"hang":true},{}]`.
//! `GET /mock/stats` returns counters, so tests can see what reached the wire.
//!
//! HTTP is axum's (on hyper, already in the tree through reqwest): this file is the OpenAI
//! routes and nothing else. It serves loopback tests, not the internet.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::{Multipart, Path, Request, State as Shared};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Mutex;

use crate::llm::offline;
use crate::llm::tasks::TaskInput;
use crate::logic::hash_embedding::hash_embed;
use crate::logic::synth::Rng;
use crate::model::schema::DEFAULT_EMBEDDING_DIM;

/// An OpenAI-compatible mock server (chat, embeddings, files, batches) answering memlife
/// prompts with the offline judge, with injectable latency and faults.
#[derive(clap::Args, Clone, Debug)]
pub struct MockOptions {
    /// 0 picks a free port (the address is printed on the first line).
    #[arg(long, default_value_t = 8089)]
    pub port: u16,
    #[arg(long, default_value_t = 0)]
    pub latency_ms: u64,
    /// Share of chat requests answered with a 429, a 500, malformed JSON or a hang.
    #[arg(long, default_value_t = 0.0)]
    pub error_rate: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// JSON array of faults for the first requests, in order (see `memlife mock-llm --help`).
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// Time until a created batch reports `completed`.
    #[arg(long, default_value_t = 0)]
    pub batch_delay_ms: u64,
    #[arg(long, default_value_t = DEFAULT_EMBEDDING_DIM)]
    pub embedding_dim: usize,
    /// The first N batches created end `failed` (to exercise `batches retry`).
    #[arg(long, default_value_t = 0)]
    pub fail_batches: u64,
    /// Answer consolidation prompts from this `memlife synth` truth file (exactly its
    /// duplicate and merge groups) instead of the offline rules.
    #[arg(long)]
    pub truth: Option<PathBuf>,
    /// Scripted replies: JSON Lines of {"task", "texts", "reply"} (a prompt of that task on
    /// memories with exactly those texts gets that reply); other prompts get the offline rules.
    #[arg(long)]
    pub answers: Option<PathBuf>,
}

/// What to do to one request; the empty object means answer normally.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    #[serde(default)]
    pub status: Option<u16>,
    /// Seconds for the Retry-After header (with a 429 or 503).
    #[serde(default)]
    pub retry_after: Option<f64>,
    /// Reply 200 with text that is not the JSON the prompt asks for.
    #[serde(default)]
    pub malformed: bool,
    /// Never answer (the client's timeout fires).
    #[serde(default)]
    pub hang: bool,
}

impl Fault {
    pub fn load(path: &std::path::Path) -> Result<Vec<Fault>> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read fault script {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("fault script {}", path.display()))
    }
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    chat: AtomicU64,
    embeddings: AtomicU64,
    faults: AtomicU64,
    files_uploaded: AtomicU64,
    file_downloads: AtomicU64,
    files_deleted: AtomicU64,
    batches_created: AtomicU64,
    batch_retrievals: AtomicU64,
}

struct StoredFile {
    bytes: Vec<u8>,
    filename: String,
    purpose: String,
    created_at: u64,
}

struct StoredBatch {
    object: Value,
    ready_at: Instant,
    output_file_id: String,
    /// Ends `failed` (injected by `--fail-batches`).
    fails: bool,
}

struct State {
    /// Answers consolidation prompts from a truth file (`--truth`).
    oracle: Option<super::oracle::Oracle>,
    /// Scripted replies (`--answers`): (task, the memories' texts in prompt order, reply).
    answers: Vec<(String, Vec<String>, Value)>,
    options: MockOptions,
    latency: Duration,
    batch_delay: Duration,
    counters: Counters,
    script: Mutex<VecDeque<Fault>>,
    rng: Mutex<Rng>,
    files: Mutex<BTreeMap<String, StoredFile>>,
    batches: Mutex<BTreeMap<String, StoredBatch>>,
    next_id: AtomicU64,
}

/// A JSON response with a status.
fn reply(status: u16, value: &Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(value.clone())).into_response()
}

/// An error in the OpenAI error shape.
fn error(status: u16, kind: &str, message: &str) -> Response {
    reply(
        status,
        &json!({"error": {"message": message, "type": kind, "param": null, "code": null}}),
    )
}

fn now_secs() -> u64 {
    chrono::Utc::now().timestamp().max(0) as u64
}

/// Binds and serves until the process ends. Prints the address on stdout first.
pub async fn serve(options: &MockOptions, out: &mut dyn std::io::Write) -> Result<()> {
    let script = match &options.script {
        Some(path) => Fault::load(path)?,
        None => Vec::new(),
    };
    let listener = TcpListener::bind(("127.0.0.1", options.port))
        .await
        .with_context(|| format!("cannot listen on 127.0.0.1:{}", options.port))?;
    let address = listener.local_addr()?;
    writeln!(out, "mock-llm listening on http://{address}/v1")?;
    out.flush()?;
    let oracle = match &options.truth {
        Some(path) => Some(super::oracle::Oracle::load(path)?),
        None => None,
    };
    let answers = match &options.answers {
        Some(path) => load_answers(path)?,
        None => Vec::new(),
    };
    let state = Arc::new(State {
        oracle,
        answers,
        script: Mutex::new(script.into()),
        rng: Mutex::new(Rng::new(options.seed)),
        latency: Duration::from_millis(options.latency_ms),
        batch_delay: Duration::from_millis(options.batch_delay_ms),
        options: options.clone(),
        counters: Counters::default(),
        files: Mutex::new(BTreeMap::new()),
        batches: Mutex::new(BTreeMap::new()),
        next_id: AtomicU64::new(1),
    });
    axum::serve(listener, router(state)).await?;
    Ok(())
}

/// The OpenAI routes memlife uses, and the mock's own counters.
fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/files", post(upload))
        .route("/v1/files/{id}", get(file_meta).delete(delete_file))
        .route("/v1/files/{id}/content", get(file_content))
        .route("/v1/batches", post(create_batch))
        .route("/v1/batches/{id}", get(retrieve_batch))
        .route("/mock/stats", get(stats))
        .fallback(|request: Request| async move {
            let message = format!("no route {} {}", request.method(), request.uri().path());
            error(404, "invalid_request_error", &message)
        })
        .layer(middleware::from_fn_with_state(state.clone(), count_request))
        .with_state(state)
}

async fn count_request(
    Shared(state): Shared<Arc<State>>,
    request: Request,
    next: Next,
) -> Response {
    state.counters.requests.fetch_add(1, Ordering::Relaxed);
    next.run(request).await
}

async fn next_fault(state: &State) -> Fault {
    if let Some(fault) = state.script.lock().await.pop_front() {
        return fault;
    }
    let rate = state.options.error_rate;
    if rate <= 0.0 {
        return Fault::default();
    }
    let mut rng = state.rng.lock().await;
    if rng.unit() >= rate {
        return Fault::default();
    }
    match (rng.unit() * 4.0) as u32 {
        0 => Fault {
            status: Some(429),
            retry_after: Some(1.0),
            ..Default::default()
        },
        1 => Fault {
            status: Some(500),
            ..Default::default()
        },
        2 => Fault {
            malformed: true,
            ..Default::default()
        },
        _ => Fault {
            hang: true,
            ..Default::default()
        },
    }
}

/// `--answers FILE`: JSON Lines of `{"task": NAME, "texts": [TEXT, ...], "reply": {...}}`; a
/// prompt of that task whose memories have exactly those texts, in order, gets that reply
/// (sent as is, so a test can also script a reply the parser must refuse).
fn load_answers(path: &std::path::Path) -> Result<Vec<(String, Vec<String>, Value)>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read answers {}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: Value = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not JSON", path.display(), n + 1))?;
        let task = v["task"].as_str().map(str::to_string);
        let texts: Option<Vec<String>> = v["texts"].as_array().map(|a| {
            a.iter()
                .filter_map(|t| t.as_str().map(str::to_string))
                .collect()
        });
        match (task, texts) {
            (Some(task), Some(texts)) => out.push((task, texts, v["reply"].clone())),
            _ => anyhow::bail!("{}:{}: needs task, texts and reply", path.display(), n + 1),
        }
    }
    Ok(out)
}

/// The content a model would send for a chat request body.
fn answer(state: &State, body: &Value) -> (String, u64) {
    let prompt = body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or("");
    let content = match TaskInput::from_prompt(prompt) {
        Some(input) if input.check_arity().is_ok() => {
            match state.answers.iter().find(|(task, texts, _)| {
                task == input.task.name()
                    && texts.len() == input.memories.len()
                    && texts.iter().zip(&input.memories).all(|(t, m)| *t == m.text)
            }) {
                Some((_, _, reply)) => {
                    return (reply.to_string(), (prompt.len() / 4) as u64);
                }
                None => state
                    .oracle
                    .as_ref()
                    .and_then(|o| o.answer(&input))
                    .unwrap_or_else(|| offline::judge(&input))
                    .to_model_json(),
            }
        }
        _ => "I can only answer memlife prompts.".to_string(),
    };
    (content, (prompt.len() / 4) as u64)
}

fn completion(model: &str, content: &str, prompt_tokens: u64, id: u64) -> Value {
    let completion_tokens = (content.len() / 4) as u64;
    json!({
        "id": format!("chatcmpl-mock-{id}"),
        "object": "chat.completion",
        "created": now_secs(),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens},
    })
}

async fn chat(Shared(state): Shared<Arc<State>>, body: axum::body::Bytes) -> Response {
    state.counters.chat.fetch_add(1, Ordering::Relaxed);
    let fault = next_fault(&state).await;
    if fault != Fault::default() {
        state.counters.faults.fetch_add(1, Ordering::Relaxed);
    }
    tokio::time::sleep(state.latency).await;
    if fault.hang {
        // Never answer: the connection stays open and silent until the client gives up.
        return std::future::pending().await;
    }
    if let Some(status) = fault.status {
        let mut response = error(
            status,
            if status == 429 {
                "rate_limit_error"
            } else {
                "server_error"
            },
            "injected by mock-llm",
        );
        if let Some(after) = fault.retry_after
            && let Ok(value) = format!("{after}").parse()
        {
            response.headers_mut().insert("retry-after", value);
        }
        return response;
    }
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return error(400, "invalid_request_error", "body is not JSON");
    };
    let model = body["model"].as_str().unwrap_or("mock").to_string();
    let (mut content, prompt_tokens) = answer(&state, &body);
    if fault.malformed {
        content = format!("Sure! {}", &content[..content.len() / 2]);
    }
    let id = state.next_id.fetch_add(1, Ordering::Relaxed);
    reply(200, &completion(&model, &content, prompt_tokens, id))
}

async fn embeddings(Shared(state): Shared<Arc<State>>, body: axum::body::Bytes) -> Response {
    state.counters.embeddings.fetch_add(1, Ordering::Relaxed);
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return error(400, "invalid_request_error", "body is not JSON");
    };
    let texts: Vec<String> = match &body["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => {
            return error(
                400,
                "invalid_request_error",
                "input must be text or a list of texts",
            );
        }
    };
    let dim = body["dimensions"]
        .as_u64()
        .map_or(state.options.embedding_dim, |d| d as usize);
    let data: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": hash_embed(t, dim)}))
        .collect();
    let tokens: usize = texts.iter().map(|t| t.len() / 4).sum();
    reply(
        200,
        &json!({
            "object": "list", "data": data, "model": body["model"].as_str().unwrap_or("mock"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }),
    )
}

/// The `file` part and `purpose` field of a multipart/form-data upload.
async fn file_part(mut form: Multipart) -> Option<(String, Vec<u8>, String)> {
    let (mut file, mut purpose) = (None, String::from("batch"));
    while let Ok(Some(field)) = form.next_field().await {
        match field.name() {
            Some("file") => {
                let filename = field.file_name().unwrap_or("upload.jsonl").to_string();
                file = Some((filename, field.bytes().await.ok()?.to_vec()));
            }
            Some("purpose") => purpose = field.text().await.ok()?.trim().to_string(),
            _ => {}
        }
    }
    file.map(|(name, bytes)| (name, bytes, purpose))
}

fn file_object(id: &str, file: &StoredFile) -> Value {
    json!({
        "id": id, "object": "file", "bytes": file.bytes.len(), "created_at": file.created_at,
        "expires_at": null, "filename": file.filename, "purpose": file.purpose, "status": "processed",
    })
}

async fn upload(Shared(state): Shared<Arc<State>>, form: Multipart) -> Response {
    let Some((filename, bytes, purpose)) = file_part(form).await else {
        return error(
            400,
            "invalid_request_error",
            "expected multipart/form-data with a file part",
        );
    };
    state
        .counters
        .files_uploaded
        .fetch_add(1, Ordering::Relaxed);
    let id = format!(
        "file-mock-{}",
        state.next_id.fetch_add(1, Ordering::Relaxed)
    );
    let file = StoredFile {
        bytes,
        filename,
        purpose,
        created_at: now_secs(),
    };
    let object = file_object(&id, &file);
    state.files.lock().await.insert(id, file);
    reply(200, &object)
}

async fn file_meta(Shared(state): Shared<Arc<State>>, Path(id): Path<String>) -> Response {
    match state.files.lock().await.get(&id) {
        Some(file) => reply(200, &file_object(&id, file)),
        None => error(404, "invalid_request_error", &format!("no file {id}")),
    }
}

async fn file_content(Shared(state): Shared<Arc<State>>, Path(id): Path<String>) -> Response {
    state
        .counters
        .file_downloads
        .fetch_add(1, Ordering::Relaxed);
    match state.files.lock().await.get(&id) {
        Some(file) => (
            [(axum::http::header::CONTENT_TYPE, "application/octet-stream")],
            file.bytes.clone(),
        )
            .into_response(),
        None => error(404, "invalid_request_error", &format!("no file {id}")),
    }
}

async fn delete_file(Shared(state): Shared<Arc<State>>, Path(id): Path<String>) -> Response {
    match state.files.lock().await.remove(&id) {
        Some(_) => {
            state.counters.files_deleted.fetch_add(1, Ordering::Relaxed);
            reply(200, &json!({"id": id, "object": "file", "deleted": true}))
        }
        None => error(404, "invalid_request_error", &format!("no file {id}")),
    }
}

async fn create_batch(Shared(state): Shared<Arc<State>>, body: axum::body::Bytes) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return error(400, "invalid_request_error", "body is not JSON");
    };
    let Some(input_id) = body["input_file_id"].as_str() else {
        return error(400, "invalid_request_error", "input_file_id is required");
    };
    let Some(input) = state
        .files
        .lock()
        .await
        .get(input_id)
        .map(|f| f.bytes.clone())
    else {
        return error(404, "invalid_request_error", &format!("no file {input_id}"));
    };
    state
        .counters
        .batches_created
        .fetch_add(1, Ordering::Relaxed);
    // Answer every line now; report completion after the configured delay.
    let mut output = Vec::new();
    let (mut total, mut completed) = (0u64, 0u64);
    for line in String::from_utf8_lossy(&input)
        .lines()
        .filter(|l| !l.trim().is_empty())
    {
        total += 1;
        let Ok(request) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let custom_id = request["custom_id"].clone();
        let body = &request["body"];
        let model = body["model"].as_str().unwrap_or("mock");
        let fault = next_fault(&state).await;
        let (mut content, prompt_tokens) = answer(&state, body);
        if fault.malformed {
            content = format!("Sure! {}", &content[..content.len() / 2]);
        }
        let id = state.next_id.fetch_add(1, Ordering::Relaxed);
        let line = if let Some(status) = fault.status.filter(|s| *s != 200) {
            json!({"id": format!("batch_req_{id}"), "custom_id": custom_id,
                   "response": {"status_code": status, "request_id": format!("req_{id}"), "body": {"error": {"message": "injected by mock-llm"}}},
                   "error": null})
        } else {
            completed += 1;
            json!({"id": format!("batch_req_{id}"), "custom_id": custom_id,
                   "response": {"status_code": 200, "request_id": format!("req_{id}"), "body": completion(model, &content, prompt_tokens, id)},
                   "error": null})
        };
        serde_json::to_writer(&mut output, &line).ok();
        output.push(b'\n');
    }
    let output_id = format!(
        "file-mock-{}",
        state.next_id.fetch_add(1, Ordering::Relaxed)
    );
    state.files.lock().await.insert(
        output_id.clone(),
        StoredFile {
            bytes: output,
            filename: "batch_output.jsonl".into(),
            purpose: "batch_output".into(),
            created_at: now_secs(),
        },
    );
    let id = format!(
        "batch_mock_{}",
        state.next_id.fetch_add(1, Ordering::Relaxed)
    );
    let fails =
        state.counters.batches_created.load(Ordering::Relaxed) <= state.options.fail_batches;
    let object = json!({
        "id": id, "object": "batch", "endpoint": body["endpoint"].as_str().unwrap_or("/v1/chat/completions"),
        "errors": null, "input_file_id": input_id, "completion_window": "24h", "status": "in_progress",
        "output_file_id": null, "error_file_id": null, "created_at": now_secs(),
        "request_counts": {"total": total, "completed": completed, "failed": total - completed},
        "metadata": body["metadata"].clone(),
    });
    state.batches.lock().await.insert(
        id,
        StoredBatch {
            object: object.clone(),
            ready_at: Instant::now() + state.batch_delay,
            output_file_id: output_id,
            fails,
        },
    );
    reply(200, &object)
}

async fn retrieve_batch(Shared(state): Shared<Arc<State>>, Path(id): Path<String>) -> Response {
    state
        .counters
        .batch_retrievals
        .fetch_add(1, Ordering::Relaxed);
    let mut batches = state.batches.lock().await;
    let Some(batch) = batches.get_mut(&id) else {
        return error(404, "invalid_request_error", &format!("no batch {id}"));
    };
    if Instant::now() >= batch.ready_at && batch.object["status"] == "in_progress" {
        if batch.fails {
            batch.object["status"] = json!("failed");
            batch.object["failed_at"] = json!(now_secs());
            batch.object["errors"] = json!({"object": "list", "data": [{"code": "injected", "message": "failed by mock-llm --fail-batches", "param": null, "line": null}]});
        } else {
            batch.object["status"] = json!("completed");
            batch.object["output_file_id"] = json!(batch.output_file_id);
            batch.object["completed_at"] = json!(now_secs());
        }
    }
    reply(200, &batch.object)
}

async fn stats(Shared(state): Shared<Arc<State>>) -> Response {
    let c = &state.counters;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    reply(
        200,
        &json!({
            "requests": get(&c.requests), "chat": get(&c.chat), "embeddings": get(&c.embeddings),
            "faults": get(&c.faults), "files_uploaded": get(&c.files_uploaded),
            "file_downloads": get(&c.file_downloads), "files_deleted": get(&c.files_deleted),
            "batches_created": get(&c.batches_created), "batch_retrievals": get(&c.batch_retrievals),
        }),
    )
}
