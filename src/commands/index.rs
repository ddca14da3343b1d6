//! `memlife index`: builds a Lance vector index (IVF-PQ, or IVF-HNSW-SQ) on
//! `memories.embedding` for users too large for exact search, then measures what it costs in
//! accuracy: recall@k of indexed search (with exact re-ranking of `refine_factor * k`
//! candidates) against exact search, on a sample of the memories themselves as queries.

use std::collections::HashSet;
use std::io::Write;
use std::time::Instant;

use anyhow::{Result, bail};
use arrow::array::AsArray;
use arrow::datatypes::Float32Type;

use crate::app::App;
use crate::exit::ExitStatus;
use crate::logic::similarity::{SelfMatch, top_k};
use crate::store::index::{IndexedSearch, VectorIndex};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IndexKind {
    IvfPq,
    IvfHnswSq,
}

/// Build a vector index on memories.embedding and report its recall@k against exact search.
#[derive(clap::Args, Clone, Debug)]
pub struct IndexArgs {
    #[arg(long, value_enum, default_value = "ivf-pq")]
    pub kind: IndexKind,
    /// IVF partitions (default: the square root of the vector count).
    #[arg(long)]
    pub partitions: Option<u32>,
    /// PQ sub-vectors (default: the largest divisor of the width not above width/16).
    #[arg(long)]
    pub sub_vectors: Option<u32>,
    /// Memories used as queries to measure recall.
    #[arg(long, default_value_t = 100)]
    pub sample: usize,
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// Partitions searched per query.
    #[arg(long, default_value_t = 20)]
    pub nprobes: usize,
    /// Candidates re-ranked exactly: refine_factor * k.
    #[arg(long, default_value_t = 10)]
    pub refine_factor: u32,
}

#[derive(Debug, serde::Serialize)]
pub struct IndexReport {
    pub kind: IndexKind,
    pub vectors: usize,
    pub partitions: u32,
    pub sub_vectors: Option<u32>,
    pub build_seconds: f64,
    pub sample_queries: usize,
    pub k: usize,
    pub nprobes: usize,
    pub refine_factor: u32,
    pub recall_at_k: f64,
    pub indexed_query_ms: f64,
}

/// The largest divisor of `dim` not above `dim / 16` (PQ needs sub-vectors that divide it).
fn default_sub_vectors(dim: usize) -> u32 {
    let target = (dim / 16).max(1);
    (1..=target)
        .rev()
        .find(|d| dim.is_multiple_of(*d))
        .unwrap_or(1) as u32
}

pub async fn run(app: &App, args: &IndexArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    let (store, json) = (app.store().await?, app.json);
    let vectors = store
        .count_rows("memories", Some("embedding IS NOT NULL"))
        .await?;
    if vectors < 256 {
        bail!(
            "only {vectors} memories have vectors: an index needs at least 256 (exact search is \
             fast at this size; `memlife similar` uses it)"
        );
    }
    let dim = store.embedding_dim();
    let partitions = args
        .partitions
        .unwrap_or_else(|| ((vectors as f64).sqrt() as u32).clamp(1, 4096));
    let started = Instant::now();
    let (index, sub_vectors) = match args.kind {
        IndexKind::IvfPq => {
            let sub_vectors = args.sub_vectors.unwrap_or_else(|| default_sub_vectors(dim));
            let index = VectorIndex::IvfPq {
                partitions,
                sub_vectors,
            };
            (index, Some(sub_vectors))
        }
        IndexKind::IvfHnswSq => (VectorIndex::IvfHnswSq { partitions }, None),
    };
    store
        .create_vector_index("memories", "embedding", index)
        .await?;
    let build_seconds = started.elapsed().as_secs_f64();

    // Exact neighbours of a sample, from all vectors in memory.
    let batches = store
        .scan_columns(
            "memories",
            Some("embedding IS NOT NULL"),
            &["id", "embedding"],
        )
        .await?;
    let mut ids = Vec::with_capacity(vectors);
    let mut data = Vec::with_capacity(vectors * dim);
    for batch in &batches {
        let id_column = batch.column(0).as_string::<i32>();
        let list = batch.column(1).as_fixed_size_list();
        let values = list.values().as_primitive::<Float32Type>();
        for row in 0..batch.num_rows() {
            ids.push(id_column.value(row).to_string());
            let start = list.value_offset(row) as usize;
            data.extend_from_slice(&values.values()[start..start + dim]);
        }
    }
    let count = ids.len();
    let step = (count / args.sample.max(1)).max(1);
    let sample: Vec<usize> = (0..count).step_by(step).take(args.sample).collect();
    let queries: Vec<f32> = sample
        .iter()
        .flat_map(|&row| data[row * dim..(row + 1) * dim].iter().copied())
        .collect();
    let exact = top_k(&queries, &data, dim, args.k, SelfMatch::None);

    let mut hits = 0usize;
    let mut query_time = 0.0;
    for (query_index, &row) in sample.iter().enumerate() {
        let vector = data[row * dim..(row + 1) * dim].to_vec();
        let started = Instant::now();
        let found_ids = store
            .nearest_ids(
                "memories",
                vector,
                IndexedSearch {
                    k: args.k,
                    nprobes: args.nprobes,
                    refine_factor: args.refine_factor,
                },
            )
            .await?;
        query_time += started.elapsed().as_secs_f64();
        let found: HashSet<&str> = found_ids.iter().map(String::as_str).collect();
        hits += exact[query_index]
            .iter()
            .filter(|n| found.contains(ids[n.index as usize].as_str()))
            .count();
    }
    let report = IndexReport {
        kind: args.kind,
        vectors,
        partitions,
        sub_vectors,
        build_seconds,
        sample_queries: sample.len(),
        k: args.k,
        nprobes: args.nprobes,
        refine_factor: args.refine_factor,
        recall_at_k: hits as f64 / (sample.len() * args.k).max(1) as f64,
        indexed_query_ms: query_time * 1000.0 / sample.len().max(1) as f64,
    };
    if json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "built {:?} index on {} vectors ({} partitions{}) in {:.1} s; recall@{} {:.3} over {} \
             queries (nprobes {}, refine {}), {:.1} ms per indexed query",
            report.kind,
            report.vectors,
            report.partitions,
            report
                .sub_vectors
                .map(|m| format!(", {m} sub-vectors"))
                .unwrap_or_default(),
            report.build_seconds,
            report.k,
            report.recall_at_k,
            report.sample_queries,
            report.nprobes,
            report.refine_factor,
            report.indexed_query_ms
        )?;
    }
    Ok(ExitStatus::Success)
}
