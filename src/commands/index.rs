//! `memlife index`: builds a Lance vector index (IVF-PQ, or IVF-HNSW-SQ) on
//! `memories.embedding` for users too large for exact search, then measures what it costs in
//! accuracy: recall@k of indexed search (with exact re-ranking of `refine_factor * k`
//! candidates) against exact search, on a sample of the memories themselves as queries.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Instant;

use anyhow::{Result, bail};

use crate::app::App;
use crate::exit::ExitStatus;
use crate::logic::similarity::{SelfMatch, recall_hits, top_k};
use crate::store::index::{IndexedSearch, VectorIndex};
use crate::store::sql_string;

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
    /// Build or update the scalar (BTree) indexes on ids and link ends instead (jobs do it
    /// themselves once a table holds 10,000 rows; this does it at any size).
    #[arg(long, conflicts_with_all = ["kind", "partitions", "sub_vectors"])]
    pub scalar: bool,
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

/// Up to `wanted` rows, spread over the users round-robin (every user's first row, then
/// every user's row at a later step), so every user is queried when they are few.
fn sample_rows(rows_of_user: &BTreeMap<&str, Vec<usize>>, wanted: usize) -> Vec<usize> {
    let users = rows_of_user.len().max(1);
    let per_user = wanted.div_ceil(users).max(1);
    let mut sample = Vec::with_capacity(wanted);
    for round in 0..per_user {
        for rows in rows_of_user.values() {
            let step = (rows.len() / per_user).max(1);
            if let Some(&row) = rows.get(round * step)
                && sample.len() < wanted
                && !sample.contains(&row)
            {
                sample.push(row);
            }
        }
    }
    sample
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
    if args.scalar {
        let changes = store.refresh_scalar_indexes(1, None).await?;
        if json {
            serde_json::to_writer_pretty(&mut *out, &changes)?;
            writeln!(out)?;
        } else if changes.is_empty() {
            writeln!(out, "scalar indexes: all up to date")?;
        } else {
            for c in &changes {
                writeln!(
                    out,
                    "{}.{}: {} ({} rows)",
                    c.table, c.column, c.action, c.rows
                )?;
            }
        }
        return Ok(ExitStatus::Success);
    }
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

    // Exact neighbours of a sample, within each query's own user (a user's memories are
    // searched among that user's only), the query itself excluded.
    #[derive(serde::Deserialize)]
    struct Owned {
        id: String,
        user_id: String,
    }
    let (rows, data) = store
        .scan_rows_with_vectors::<Owned>("memories", "true", "embedding")
        .await?;
    let (ids, users): (Vec<String>, Vec<String>) =
        rows.into_iter().map(|r| (r.id, r.user_id)).unzip();
    let mut rows_of_user: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (row, user) in users.iter().enumerate() {
        rows_of_user.entry(user.as_str()).or_default().push(row);
    }
    // Queries spread evenly over the users, then over each user's rows.
    let sample = sample_rows(&rows_of_user, args.sample);

    let mut hits = 0usize;
    let mut expected = 0usize;
    let mut query_time = 0.0;
    // Each sampled user's vectors, gathered once (a store may be one user with every vector).
    let mut data_of_user: BTreeMap<&str, Vec<f32>> = BTreeMap::new();
    for &row in &sample {
        let user = users[row].as_str();
        let user_rows = &rows_of_user[user];
        let user_data = data_of_user.entry(user).or_insert_with(|| {
            user_rows
                .iter()
                .flat_map(|&r| data[r * dim..(r + 1) * dim].iter().copied())
                .collect()
        });
        let position = user_rows.iter().position(|&r| r == row).unwrap_or(0) as u32;
        let query = &data[row * dim..(row + 1) * dim];
        let exact = top_k(query, user_data, dim, args.k, SelfMatch::Rows(&[position]))
            .into_iter()
            .next()
            .unwrap_or_default();
        let started = Instant::now();
        let found_ids = store
            .nearest_ids(
                "memories",
                query.to_vec(),
                IndexedSearch {
                    k: args.k + 1,
                    nprobes: args.nprobes,
                    refine_factor: args.refine_factor,
                    filter: Some(format!("user_id = {}", sql_string(user))),
                },
            )
            .await?;
        query_time += started.elapsed().as_secs_f64();
        let found: Vec<&str> = found_ids.iter().map(String::as_str).collect();
        let exact: Vec<&str> = exact
            .iter()
            .map(|n| ids[user_rows[n.index as usize]].as_str())
            .collect();
        expected += exact.len();
        hits += recall_hits(&ids[row], &exact, &found, args.k);
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
        recall_at_k: hits as f64 / expected.max(1) as f64,
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
