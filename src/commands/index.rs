//! `memlife index`: builds a Lance vector index (IVF-PQ, or IVF-HNSW-SQ) on
//! `memories.embedding` for users too large for exact search, then measures what it costs in
//! accuracy: recall@k of indexed search (with exact re-ranking of `refine_factor * k`
//! candidates) against exact search, on a sample of the memories themselves as queries.

use std::collections::HashSet;
use std::io::Write;
use std::time::Instant;

use anyhow::{Result, bail};
use arrow::array::{Array, AsArray};
use arrow::datatypes::Float32Type;
use futures::TryStreamExt;
use lancedb::DistanceType;
use lancedb::index::Index;
use lancedb::index::vector::{IvfHnswSqIndexBuilder, IvfPqIndexBuilder};
use lancedb::query::{ExecutableQuery, QueryBase};

use crate::similarity::{SelfMatch, top_k};
use crate::store::Store;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IndexKind {
    IvfPq,
    IvfHnswSq,
}

#[derive(Clone, Debug)]
pub struct IndexArgs {
    pub kind: IndexKind,
    pub partitions: Option<u32>,
    pub sub_vectors: Option<u32>,
    /// Memories used as queries to measure recall.
    pub sample: usize,
    pub k: usize,
    pub nprobes: usize,
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

pub async fn run(store: &Store, args: &IndexArgs, json: bool, out: &mut dyn Write) -> Result<()> {
    let table = store.table("memories").await?;
    let vectors = table
        .count_rows(Some("embedding IS NOT NULL".to_string()))
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
            let builder = IvfPqIndexBuilder::default()
                .distance_type(DistanceType::Cosine)
                .num_partitions(partitions)
                .num_sub_vectors(sub_vectors);
            (Index::IvfPq(builder), Some(sub_vectors))
        }
        IndexKind::IvfHnswSq => {
            let builder = IvfHnswSqIndexBuilder::default()
                .distance_type(DistanceType::Cosine)
                .num_partitions(partitions);
            (Index::IvfHnswSq(builder), None)
        }
    };
    table
        .create_index(&["embedding"], index)
        .replace(true)
        .execute()
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
        let results: Vec<arrow::array::RecordBatch> = table
            .query()
            .nearest_to(vector)?
            .distance_type(DistanceType::Cosine)
            .nprobes(args.nprobes)?
            .refine_factor(args.refine_factor)
            .limit(args.k)
            .select(lancedb::query::Select::columns(&["id"]))
            .execute()
            .await?
            .try_collect()
            .await?;
        query_time += started.elapsed().as_secs_f64();
        let found: HashSet<&str> = results
            .iter()
            .flat_map(|b| {
                let column = b
                    .column_by_name("id")
                    .expect("id selected")
                    .as_string::<i32>();
                (0..b.num_rows())
                    .filter(|&i| column.is_valid(i))
                    .map(move |i| column.value(i))
            })
            .collect();
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
    Ok(())
}
