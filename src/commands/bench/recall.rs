//! `memlife bench recall`: recall latency for one user with many memories (issue 16's target:
//! 100k memories, standard mode, k = 10, p95 at most 50 ms excluding the query's embedding),
//! with and without a Lance vector index, and the throughput of many recalls in one process.
//! Memories get seeded random unit vectors (the search's cost does not depend on what the
//! vectors mean) and tiers in the proportions a used store has (40% hot, 30% warm, 20% cold,
//! 10% archived); queries are random unit vectors too, embedded before the clock starts. The
//! recalls are `memlife recall`'s own function, read only (`--no-activate`); a last set with
//! activation measures the write a recall adds. Texts are eight words of a 5,000-word
//! vocabulary and each query four of them, so the full-text search beside the vector search
//! has postings to score: exact is a flat scan of vectors and text; indexed has the IVF_PQ
//! index and the full-text and scalar indexes `index --scalar` builds. Prints JSON for
//! BENCHMARKS.md.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Result, anyhow};
use arrow::array::RecordBatchIterator;
use serde_json::json;

use super::graph::{BenchDir, next, percentile};
use crate::commands::recall::{RecallArgs, recall};
use crate::logic::recall::Mode;
use crate::model::schema::MEMORIES;
use crate::model::typed::{MemoryRow, memory_batch};
use crate::store::Store;
use crate::store::index::VectorIndex;

#[derive(clap::Args, Debug)]
pub struct RecallBench {
    #[arg(long, default_value_t = 100_000)]
    pub memories: usize,
    /// Recalls measured per configuration.
    #[arg(long, default_value_t = 1000)]
    pub queries: usize,
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// Recalls with activation (one write each), measured apart.
    #[arg(long, default_value_t = 100)]
    pub activated: usize,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Keep the database in this folder (default: a temporary folder, removed afterwards).
    #[arg(long)]
    pub keep: Option<PathBuf>,
    /// Reuse the store an earlier run left in `--keep` (same `--memories` and `--seed`): skip
    /// writing, the exact search and indexing; time the indexed search only.
    #[arg(long, requires = "keep")]
    pub reuse: bool,
}

/// `n` words of the benchmark's vocabulary.
fn words(state: &mut u64, n: usize) -> String {
    (0..n)
        .map(|_| format!("w{}", next(state) % 5000))
        .collect::<Vec<_>>()
        .join(" ")
}

fn unit_vector(state: &mut u64, dim: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..dim)
        .map(|_| (next(state) % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

pub async fn run(bench: &RecallBench, out: &mut dyn Write) -> Result<()> {
    let dir = BenchDir::new(&bench.keep, "recall")?;
    let report = measure(bench, &dir.uri()).await?;
    serde_json::to_writer_pretty(&mut *out, &report)?;
    writeln!(out)?;
    Ok(())
}

const MODEL: &str = "bench-random-v1";
/// When the archived tier of the bench store was archived: 2025-01-01T00:00:00Z.
const ARCHIVED_AT: i64 = 1_735_689_600_000_000;

async fn timed(
    store: &Store,
    bench: &RecallBench,
    queries: &[Vec<f32>],
    texts: &[String],
    activate: bool,
) -> Result<serde_json::Value> {
    let config = crate::config::Config::default();
    let now = chrono::Utc::now().timestamp_micros();
    let mut times = Vec::with_capacity(queries.len());
    let mut returned = 0usize;
    let all = Instant::now();
    for (i, q) in queries.iter().enumerate() {
        let args = RecallArgs {
            query: texts[i].clone(),
            user: "u0".into(),
            mode: Mode::Standard,
            k: bench.k,
            as_of: None,
            history: false,
            no_activate: !activate,
            reason: false,
            judge: None,
            now: None,
            explain: false,
            embedder: Default::default(),
        };
        let began = Instant::now();
        let report = recall(
            store,
            &config,
            &args,
            MODEL,
            q.clone(),
            None,
            now + i as i64,
        )
        .await?;
        times.push(began.elapsed().as_secs_f64() * 1000.0);
        returned += report.memories.len();
    }
    let total = all.elapsed().as_secs_f64();
    times.sort_by(f64::total_cmp);
    Ok(json!({
        "recalls": queries.len(),
        "p50_ms": percentile(&times, 0.5),
        "p95_ms": percentile(&times, 0.95),
        "max_ms": times.last().copied().unwrap_or(0.0),
        "recalls_per_second": queries.len() as f64 / total.max(1e-9),
        "mean_returned": returned as f64 / queries.len().max(1) as f64,
    }))
}

async fn measure(bench: &RecallBench, uri: &str) -> Result<serde_json::Value> {
    let (store, _) = Store::init(uri, 384).await?;
    let dim = store.embedding_dim();
    let now = chrono::Utc::now().timestamp_micros();
    let mut state = bench.seed.max(1);
    let build = Instant::now();
    let tiers = [
        "hot", "hot", "hot", "hot", "warm", "warm", "warm", "cold", "cold", "archived",
    ];
    let reuse = bench.reuse;
    if reuse {
        let held = store.count_rows("memories", None).await?;
        if held != bench.memories {
            anyhow::bail!(
                "--reuse: {uri} holds {held} memories, not the {} of --memories; run once with \
                 --keep and without --reuse to write them",
                bench.memories
            );
        }
    }
    for start in (0..bench.memories).step_by(20_000) {
        let (mut rows, mut vectors) = (Vec::new(), Vec::new());
        for i in start..(start + 20_000).min(bench.memories) {
            let tier = tiers[i % tiers.len()];
            let archived = tier == "archived";
            // The text, then the vector: the order the seeded draws were always made in.
            let text = words(&mut state, 8);
            vectors.push(Some(unit_vector(&mut state, dim)));
            rows.push(MemoryRow {
                id: format!("m{i:07}"),
                tier: tier.into(),
                state: if archived { "archived" } else { "active" }.into(),
                archived_at: archived.then_some(ARCHIVED_AT),
                salience: (i % 100) as f64 / 100.0,
                embedding_model: Some(MODEL.into()),
                ..MemoryRow::new("u0", &text, now)
            });
        }
        if reuse {
            continue;
        }
        let batch = memory_batch(&rows, &vectors, dim, now).map_err(|e| anyhow!(e))?;
        let schema = batch.schema();
        store
            .append(
                &MEMORIES,
                Box::new(RecordBatchIterator::new(vec![Ok(batch)], schema)),
            )
            .await?;
    }
    let build_s = build.elapsed().as_secs_f64();
    let queries: Vec<Vec<f32>> = (0..bench.queries)
        .map(|_| unit_vector(&mut state, dim))
        .collect();
    let texts: Vec<String> = (0..bench.queries).map(|_| words(&mut state, 4)).collect();
    if reuse {
        let indexed = timed(&store, bench, &queries, &texts, false).await?;
        return Ok(json!({
            "cpu": super::harness::cpu_name(),
            "memories": bench.memories,
            "k": bench.k,
            "mode": "standard",
            "reused": true,
            "indexed_search": indexed,
        }));
    }
    let exact = timed(&store, bench, &queries, &texts, false).await?;
    let indexing = Instant::now();
    let partitions = ((bench.memories as f64).sqrt() as u32).clamp(1, 1024);
    store
        .create_vector_index(
            "memories",
            "embedding",
            VectorIndex::IvfPq {
                partitions,
                sub_vectors: 48,
            },
        )
        .await?;
    let index_s = indexing.elapsed().as_secs_f64();
    let text_indexing = Instant::now();
    store.refresh_scalar_indexes(1, None).await?;
    let text_index_s = text_indexing.elapsed().as_secs_f64();
    let indexed = timed(&store, bench, &queries, &texts, false).await?;
    let activated = timed(
        &store,
        bench,
        &queries[..bench.activated.min(queries.len())],
        &texts,
        true,
    )
    .await?;
    Ok(json!({
        "cpu": super::harness::cpu_name(),
        "memories": bench.memories,
        "k": bench.k,
        "mode": "standard",
        "build_seconds": build_s,
        "exact_search": exact,
        "index": {"kind": "IVF_PQ", "partitions": partitions, "sub_vectors": 48, "build_seconds": index_s,
                  "full_text_and_scalar_build_seconds": text_index_s},
        "indexed_search": indexed,
        "indexed_with_activation": activated,
    }))
}
