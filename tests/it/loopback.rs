//! A minimal OpenAI-compatible embeddings server on loopback for tests: real HTTP over TCP,
//! answering POST /v1/embeddings with hash-embedder vectors. It can fail the first requests
//! with a status, to test retries. (Issue 4 brings the full `memlife mock-llm`.)

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct Loopback {
    pub url: String,
    pub requests: Arc<AtomicUsize>,
}

/// Serves until the test process ends; the first `fail_first` requests get `fail_status`.
pub fn serve_embeddings(dim: usize, fail_first: usize, fail_status: u16) -> Loopback {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = requests.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let counter = counter.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut writer = stream;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut length = 0;
                    loop {
                        let mut header = String::new();
                        reader.read_line(&mut header).unwrap();
                        if header.trim().is_empty() {
                            break;
                        }
                        if let Some(v) = header.to_ascii_lowercase().strip_prefix("content-length:")
                        {
                            length = v.trim().parse().unwrap();
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    let n = counter.fetch_add(1, Ordering::SeqCst);
                    let (status, reply) = if n < fail_first {
                        (fail_status, r#"{"error":{"message":"slow down","type":"rate_limit","param":null,"code":null}}"#.to_string())
                    } else {
                        let request: serde_json::Value = serde_json::from_slice(&body).unwrap();
                        let data: Vec<serde_json::Value> = request["input"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .enumerate()
                            .map(|(i, text)| {
                                let vector = memlife::logic::hash_embedding::hash_embed(text.as_str().unwrap(), dim);
                                serde_json::json!({"index": i, "object": "embedding", "embedding": vector})
                            })
                            .collect();
                        let usage = serde_json::json!({"prompt_tokens": 1, "total_tokens": 1});
                        (200, serde_json::json!({"object": "list", "model": request["model"], "data": data, "usage": usage}).to_string())
                    };
                    let head = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                        reply.len()
                    );
                    if writer
                        .write_all(head.as_bytes())
                        .and_then(|_| writer.write_all(reply.as_bytes()))
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    Loopback { url, requests }
}
