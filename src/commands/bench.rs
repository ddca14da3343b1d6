//! `memlife bench`: measurements that need no database, reported as JSON for BENCHMARKS.md.
//! `similarity`: top-k neighbours of every vector of one user-sized set with the blocked,
//! parallel kernel, and the single-threaded naive loop on a sample (its time extrapolated).
//! `embed`: sentences per second of an embedder on synthetic memory texts.

use std::io::Write;
use std::time::Instant;

use anyhow::Result;

use crate::embedders::Embedder;
use crate::similarity::{SelfMatch, top_k, top_k_naive};
use crate::synth::{SynthConfig, generate, placeholder_embedding};

pub fn similarity(
    vectors: usize,
    dim: usize,
    k: usize,
    naive_queries: usize,
    out: &mut dyn Write,
) -> Result<()> {
    let mut data = Vec::with_capacity(vectors * dim);
    let mut one = Vec::with_capacity(dim);
    for i in 0..vectors {
        placeholder_embedding(7, &i.to_string(), dim, &mut one);
        data.extend_from_slice(&one);
    }
    let started = Instant::now();
    let result = top_k(&data, &data, dim, k, SelfMatch::SameRows);
    let kernel_seconds = started.elapsed().as_secs_f64();
    let sample = naive_queries.min(vectors);
    let started = Instant::now();
    let naive = top_k_naive(&data[..sample * dim], &data, dim, k, SelfMatch::SameRows);
    let naive_seconds = started.elapsed().as_secs_f64() * vectors as f64 / sample.max(1) as f64;
    let agree = naive
        .iter()
        .zip(&result)
        .all(|(a, b)| a.iter().map(|n| n.index).eq(b.iter().map(|n| n.index)));
    let report = serde_json::json!({
        "bench": "similarity",
        "vectors": vectors, "dim": dim, "k": k, "threads": rayon::current_num_threads(),
        "kernel_seconds": kernel_seconds,
        "naive_seconds_extrapolated": naive_seconds,
        "naive_queries_timed": sample,
        "speedup": naive_seconds / kernel_seconds.max(f64::MIN_POSITIVE),
        "same_neighbours_as_naive": agree,
    });
    writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    Ok(())
}

pub async fn embed(
    embedder: &Embedder,
    sentences: usize,
    batch_size: usize,
    out: &mut dyn Write,
) -> Result<()> {
    let (memories, _) = generate(&SynthConfig {
        users: 1,
        memories: sentences,
        seed: 3,
        start_micros: 1_735_689_600_000_000,
        span_days: 365,
    });
    let texts: Vec<&str> = memories.iter().map(|m| m.text.as_str()).collect();
    let started = Instant::now();
    let mut embedded = 0usize;
    for chunk in texts.chunks(batch_size.max(1)) {
        embedded += embedder
            .embed(chunk)
            .await?
            .iter()
            .filter(|e| matches!(e, crate::embedders::Embedded::Vector { .. }))
            .count();
    }
    let seconds = started.elapsed().as_secs_f64();
    let report = serde_json::json!({
        "bench": "embed", "model": embedder.model_name(), "sentences": embedded,
        "batch_size": batch_size, "seconds": seconds,
        "sentences_per_second": embedded as f64 / seconds.max(f64::MIN_POSITIVE),
        "mean_chars": texts.iter().map(|t| t.len()).sum::<usize>() as f64 / texts.len().max(1) as f64,
    });
    writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    Ok(())
}
