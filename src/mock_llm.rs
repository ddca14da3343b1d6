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
//! HTTP/1.1 with keep-alive on tokio, hand-written: requests carry Content-Length or chunked
//! bodies; it serves loopback tests, not the internet.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

use crate::embedders::hash::hash_embed;
use crate::llm::offline;
use crate::llm::tasks::TaskInput;
use crate::synth::Rng;

#[derive(Clone, Debug)]
pub struct MockOptions {
    pub port: u16,
    pub latency: Duration,
    pub error_rate: f64,
    pub seed: u64,
    pub script: Vec<Fault>,
    /// Time from a batch's creation until it reports `completed`.
    pub batch_delay: Duration,
    pub embedding_dim: usize,
    /// The first N batches created report `failed` instead of completing.
    pub fail_batches: u64,
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
    options: MockOptions,
    counters: Counters,
    script: Mutex<VecDeque<Fault>>,
    rng: Mutex<Rng>,
    files: Mutex<BTreeMap<String, StoredFile>>,
    batches: Mutex<BTreeMap<String, StoredBatch>>,
    next_id: AtomicU64,
}

struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

struct Response {
    status: u16,
    headers: Vec<(&'static str, String)>,
    content_type: &'static str,
    body: Vec<u8>,
}

impl Response {
    fn json(status: u16, value: &Value) -> Response {
        Response {
            status,
            headers: Vec::new(),
            content_type: "application/json",
            body: serde_json::to_vec(value).unwrap_or_default(),
        }
    }

    fn error(status: u16, kind: &str, message: &str) -> Response {
        Response::json(
            status,
            &json!({"error": {"message": message, "type": kind, "param": null, "code": null}}),
        )
    }
}

fn now_secs() -> u64 {
    chrono::Utc::now().timestamp().max(0) as u64
}

/// Binds and serves until the process ends. Prints the address on stdout first.
pub async fn serve(options: MockOptions) -> Result<()> {
    let listener = TcpListener::bind(("127.0.0.1", options.port))
        .await
        .with_context(|| format!("cannot listen on 127.0.0.1:{}", options.port))?;
    let address = listener.local_addr()?;
    println!("mock-llm listening on http://{address}/v1");
    use std::io::Write;
    std::io::stdout().flush()?;
    let state = Arc::new(State {
        script: Mutex::new(options.script.iter().cloned().collect()),
        rng: Mutex::new(Rng::new(options.seed)),
        options,
        counters: Counters::default(),
        files: Mutex::new(BTreeMap::new()),
        batches: Mutex::new(BTreeMap::new()),
        next_id: AtomicU64::new(1),
    });
    loop {
        let (stream, _) = listener.accept().await?;
        let state = state.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(stream, state).await {
                tracing::debug!("mock connection ended: {e}");
            }
        });
    }
}

async fn connection(stream: TcpStream, state: Arc<State>) -> Result<()> {
    stream.set_nodelay(true)?;
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let Some(request) = read_request(&mut reader).await? else {
            return Ok(());
        };
        let Some(response) = route(&state, request).await else {
            // A hung request: keep the connection open and silent until the client gives up.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return Ok(());
        };
        let mut head = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: {}\r\ncontent-length: {}\r\n",
            response.status,
            reason(response.status),
            response.content_type,
            response.body.len()
        );
        for (name, value) in &response.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        write.write_all(head.as_bytes()).await?;
        write.write_all(&response.body).await?;
        write.flush().await?;
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

async fn read_request<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
) -> Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("/").to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).await? == 0 {
            return Ok(None);
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((name, value)) = h.split_once(':') {
            headers.push((name.trim().to_string(), value.trim().to_string()));
        }
    }
    let mut request = Request {
        method,
        path,
        headers,
        body: Vec::new(),
    };
    if request
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).await?;
            let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)?;
            let mut chunk = vec![0u8; size + 2];
            reader.read_exact(&mut chunk).await?;
            if size == 0 {
                break;
            }
            request.body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(length) = request.header("content-length") {
        let length: usize = length.parse()?;
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body).await?;
        request.body = body;
    }
    Ok(Some(request))
}

async fn route(state: &Arc<State>, request: Request) -> Option<Response> {
    state.counters.requests.fetch_add(1, Ordering::Relaxed);
    let path = request
        .path
        .split('?')
        .next()
        .unwrap_or("")
        .trim_end_matches('/')
        .to_string();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let response = match (request.method.as_str(), segments.as_slice()) {
        ("POST", ["v1", "chat", "completions"]) => return chat(state, &request).await,
        ("POST", ["v1", "embeddings"]) => embeddings(state, &request),
        ("POST", ["v1", "files"]) => upload(state, &request).await,
        ("GET", ["v1", "files", id]) => file_meta(state, id).await,
        ("GET", ["v1", "files", id, "content"]) => file_content(state, id).await,
        ("DELETE", ["v1", "files", id]) => delete_file(state, id).await,
        ("POST", ["v1", "batches"]) => create_batch(state, &request).await,
        ("GET", ["v1", "batches", id]) => retrieve_batch(state, id).await,
        ("GET", ["mock", "stats"]) => stats(state),
        _ => Response::error(
            404,
            "invalid_request_error",
            &format!("no route {} {}", request.method, path),
        ),
    };
    Some(response)
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

/// The content a model would send for a chat request body.
fn answer(body: &Value) -> (String, u64) {
    let prompt = body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or("");
    let content = match TaskInput::from_prompt(prompt) {
        Some(input) if input.check().is_ok() => offline::judge(&input).to_model_json(),
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

async fn chat(state: &Arc<State>, request: &Request) -> Option<Response> {
    state.counters.chat.fetch_add(1, Ordering::Relaxed);
    let fault = next_fault(state).await;
    if fault != Fault::default() {
        state.counters.faults.fetch_add(1, Ordering::Relaxed);
    }
    tokio::time::sleep(state.options.latency).await;
    if fault.hang {
        return None;
    }
    if let Some(status) = fault.status {
        let mut response = Response::error(
            status,
            if status == 429 {
                "rate_limit_error"
            } else {
                "server_error"
            },
            "injected by mock-llm",
        );
        if let Some(after) = fault.retry_after {
            response.headers.push(("retry-after", format!("{after}")));
        }
        return Some(response);
    }
    let Ok(body) = serde_json::from_slice::<Value>(&request.body) else {
        return Some(Response::error(
            400,
            "invalid_request_error",
            "body is not JSON",
        ));
    };
    let model = body["model"].as_str().unwrap_or("mock").to_string();
    let (mut content, prompt_tokens) = answer(&body);
    if fault.malformed {
        content = format!("Sure! {}", &content[..content.len() / 2]);
    }
    let id = state.next_id.fetch_add(1, Ordering::Relaxed);
    Some(Response::json(
        200,
        &completion(&model, &content, prompt_tokens, id),
    ))
}

fn embeddings(state: &Arc<State>, request: &Request) -> Response {
    state.counters.embeddings.fetch_add(1, Ordering::Relaxed);
    let Ok(body) = serde_json::from_slice::<Value>(&request.body) else {
        return Response::error(400, "invalid_request_error", "body is not JSON");
    };
    let texts: Vec<String> = match &body["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => {
            return Response::error(
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
    Response::json(
        200,
        &json!({
            "object": "list", "data": data, "model": body["model"].as_str().unwrap_or("mock"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }),
    )
}

/// The `file` part and `purpose` field of a multipart/form-data body.
fn multipart(request: &Request) -> Option<(String, Vec<u8>, String)> {
    let content_type = request.header("content-type")?;
    let boundary = content_type.split("boundary=").nth(1)?.trim_matches('"');
    let delimiter = format!("--{boundary}");
    let body = &request.body;
    let mut positions = Vec::new();
    let mut from = 0;
    while let Some(at) = find(&body[from..], delimiter.as_bytes()) {
        positions.push(from + at);
        from += at + delimiter.len();
    }
    let (mut file, mut purpose) = (None, String::from("batch"));
    for pair in positions.windows(2) {
        let part = &body[pair[0] + delimiter.len()..pair[1]];
        let part = part.strip_prefix(b"\r\n").unwrap_or(part);
        let split = find(part, b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&part[..split]).to_string();
        let content = &part[split + 4..];
        let content = content.strip_suffix(b"\r\n").unwrap_or(content);
        if head.contains("name=\"file\"") {
            let filename = head
                .split("filename=\"")
                .nth(1)
                .and_then(|s| s.split('"').next())
                .unwrap_or("upload.jsonl")
                .to_string();
            file = Some((filename, content.to_vec()));
        } else if head.contains("name=\"purpose\"") {
            purpose = String::from_utf8_lossy(content).trim().to_string();
        }
    }
    file.map(|(name, bytes)| (name, bytes, purpose))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn file_object(id: &str, file: &StoredFile) -> Value {
    json!({
        "id": id, "object": "file", "bytes": file.bytes.len(), "created_at": file.created_at,
        "expires_at": null, "filename": file.filename, "purpose": file.purpose, "status": "processed",
    })
}

async fn upload(state: &Arc<State>, request: &Request) -> Response {
    let Some((filename, bytes, purpose)) = multipart(request) else {
        return Response::error(
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
    Response::json(200, &object)
}

async fn file_meta(state: &Arc<State>, id: &str) -> Response {
    match state.files.lock().await.get(id) {
        Some(file) => Response::json(200, &file_object(id, file)),
        None => Response::error(404, "invalid_request_error", &format!("no file {id}")),
    }
}

async fn file_content(state: &Arc<State>, id: &str) -> Response {
    state
        .counters
        .file_downloads
        .fetch_add(1, Ordering::Relaxed);
    match state.files.lock().await.get(id) {
        Some(file) => Response {
            status: 200,
            headers: Vec::new(),
            content_type: "application/octet-stream",
            body: file.bytes.clone(),
        },
        None => Response::error(404, "invalid_request_error", &format!("no file {id}")),
    }
}

async fn delete_file(state: &Arc<State>, id: &str) -> Response {
    match state.files.lock().await.remove(id) {
        Some(_) => {
            state.counters.files_deleted.fetch_add(1, Ordering::Relaxed);
            Response::json(200, &json!({"id": id, "object": "file", "deleted": true}))
        }
        None => Response::error(404, "invalid_request_error", &format!("no file {id}")),
    }
}

async fn create_batch(state: &Arc<State>, request: &Request) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(&request.body) else {
        return Response::error(400, "invalid_request_error", "body is not JSON");
    };
    let Some(input_id) = body["input_file_id"].as_str() else {
        return Response::error(400, "invalid_request_error", "input_file_id is required");
    };
    let Some(input) = state
        .files
        .lock()
        .await
        .get(input_id)
        .map(|f| f.bytes.clone())
    else {
        return Response::error(404, "invalid_request_error", &format!("no file {input_id}"));
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
        let fault = next_fault(state).await;
        let (mut content, prompt_tokens) = answer(body);
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
            ready_at: Instant::now() + state.options.batch_delay,
            output_file_id: output_id,
            fails,
        },
    );
    Response::json(200, &object)
}

async fn retrieve_batch(state: &Arc<State>, id: &str) -> Response {
    state
        .counters
        .batch_retrievals
        .fetch_add(1, Ordering::Relaxed);
    let mut batches = state.batches.lock().await;
    let Some(batch) = batches.get_mut(id) else {
        return Response::error(404, "invalid_request_error", &format!("no batch {id}"));
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
    Response::json(200, &batch.object)
}

fn stats(state: &Arc<State>) -> Response {
    let c = &state.counters;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    Response::json(
        200,
        &json!({
            "requests": get(&c.requests), "chat": get(&c.chat), "embeddings": get(&c.embeddings),
            "faults": get(&c.faults), "files_uploaded": get(&c.files_uploaded),
            "file_downloads": get(&c.file_downloads), "files_deleted": get(&c.files_deleted),
            "batches_created": get(&c.batches_created), "batch_retrievals": get(&c.batch_retrievals),
        }),
    )
}
