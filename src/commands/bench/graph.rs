//! `memlife bench graph`: link traversal at scale (issue 14's target: depth-3 traversal from
//! 1000 random starts on 100k memories and 1M links, median at most 20 ms). Builds a store of
//! synthetic memories and random links within each user (seeded), builds the scalar indexes,
//! then walks from random starts with the same `Walker` `memlife traverse` uses, reading
//! only (no heal). Prints JSON for BENCHMARKS.md.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Result, anyhow};
use arrow::array::RecordBatchIterator;
use serde_json::json;

use crate::commands::traverse::{TraverseArgs, Walker};
use crate::model::schema::{LINKS, MEMORIES};
use crate::model::typed::{LinkRow, MemoryRow, link_batch, memory_batch};
use crate::store::Store;

#[derive(clap::Args, Debug)]
pub struct GraphBench {
    #[arg(long, default_value_t = 100_000)]
    pub memories: usize,
    #[arg(long, default_value_t = 1_000_000)]
    pub links: usize,
    #[arg(long, default_value_t = 100)]
    pub users: usize,
    #[arg(long, default_value_t = 1000)]
    pub starts: usize,
    #[arg(long, default_value_t = 3)]
    pub depth: usize,
    /// Memories one walk returns at most (`memlife traverse --limit`).
    #[arg(long, default_value_t = 1000)]
    pub limit: usize,
    /// Measure without the scalar indexes (every level scans the link table).
    #[arg(long)]
    pub no_index: bool,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Keep the database in this folder (default: a temporary folder, removed afterwards).
    #[arg(long)]
    pub keep: Option<PathBuf>,
}

pub(super) fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

pub(super) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// The database folder of a benchmark (`keep`, else a temporary one removed afterwards).
pub(super) struct BenchDir {
    pub dir: PathBuf,
    keep: bool,
}

impl BenchDir {
    pub(super) fn new(keep: &Option<PathBuf>, name: &str) -> Result<BenchDir> {
        let (dir, keep) = match keep {
            Some(dir) => (dir.clone(), true),
            None => (
                std::env::temp_dir().join(format!("memlife-bench-{name}-{}", std::process::id())),
                false,
            ),
        };
        std::fs::create_dir_all(&dir)?;
        Ok(BenchDir { dir, keep })
    }

    pub(super) fn uri(&self) -> String {
        self.dir.join("db").display().to_string()
    }
}

impl Drop for BenchDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub async fn run(bench: &GraphBench, out: &mut dyn Write) -> Result<()> {
    let dir = BenchDir::new(&bench.keep, "graph")?;
    let report = measure(bench, &dir.uri()).await?;
    serde_json::to_writer_pretty(&mut *out, &report)?;
    writeln!(out)?;
    Ok(())
}

/// The bench's memories: `bench.users` users' synthetic texts, one in 50 archived, appended
/// 50,000 per commit.
async fn write_memories(store: &Store, bench: &GraphBench, now: i64) -> Result<()> {
    let dim = store.embedding_dim();
    let per_user = bench.memories.div_ceil(bench.users.max(1));
    let id = |i: usize| format!("u{:03}-{:07}", i / per_user, i);
    for start in (0..bench.memories).step_by(50_000) {
        let rows: Vec<MemoryRow> = (start..(start + 50_000).min(bench.memories))
            .map(|i| {
                let (user, text) = (
                    format!("u{:03}", i / per_user),
                    format!("Synthetic memory {i} for the traversal benchmark"),
                );
                MemoryRow {
                    id: id(i),
                    state: if i % 50 == 0 { "archived" } else { "active" }.into(),
                    ..MemoryRow::new(&user, &text, now)
                }
            })
            .collect();
        let batch = memory_batch(&rows, &[], dim, now).map_err(|e| anyhow!(e))?;
        let schema = batch.schema();
        store
            .append(
                &MEMORIES,
                Box::new(RecordBatchIterator::new(vec![Ok(batch)], schema)),
            )
            .await?;
    }
    Ok(())
}

async fn measure(bench: &GraphBench, uri: &str) -> Result<serde_json::Value> {
    let (store, _) = Store::init(uri, 384).await?;
    let now = chrono::Utc::now().timestamp_micros();
    let per_user = bench.memories.div_ceil(bench.users.max(1));
    let id = |i: usize| format!("u{:03}-{:07}", i / per_user, i);
    let build = Instant::now();
    write_memories(&store, bench, now).await?;
    // Links: each a random pair within one user, of a random type; duplicates skipped.
    let types = [
        "related_to",
        "causes",
        "supersedes",
        "instance_of",
        "shares_entity:Bench",
    ];
    let mut seen = std::collections::HashSet::new();
    let mut state = bench.seed.max(1);
    let mut written = 0;
    while written < bench.links {
        let mut rows = Vec::with_capacity(100_000);
        while rows.len() < 100_000 && written + rows.len() < bench.links {
            let source = (next(&mut state) % bench.memories as u64) as usize;
            let user = source / per_user;
            let first = user * per_user;
            let size = per_user.min(bench.memories - first);
            let target = first + (next(&mut state) % size as u64) as usize;
            let link_type = types[(next(&mut state) % types.len() as u64) as usize];
            if source == target || !seen.insert((source, target, link_type)) {
                continue;
            }
            let (source, target, user) = (id(source), id(target), format!("u{user:03}"));
            let confidence = 0.5 + (next(&mut state) % 50) as f64 / 100.0;
            rows.push(LinkRow {
                reasoning: None,
                ..LinkRow::judged((&source, &target, &user), link_type, confidence, "", now)
            });
        }
        written += rows.len();
        let batch = link_batch(&rows, now).map_err(|e| anyhow!(e))?;
        let schema = batch.schema();
        store
            .append(
                &LINKS,
                Box::new(RecordBatchIterator::new(vec![Ok(batch)], schema)),
            )
            .await?;
    }
    let build_s = build.elapsed().as_secs_f64();
    let indexing = Instant::now();
    if !bench.no_index {
        store.refresh_scalar_indexes(1, None).await?;
    }
    let index_s = indexing.elapsed().as_secs_f64();

    let starts: Vec<usize> = (0..bench.starts)
        .map(|_| (next(&mut state) % bench.memories as u64) as usize)
        .collect();
    let args = TraverseArgs {
        ids: Vec::new(),
        depth: bench.depth,
        types: Vec::new(),
        min_confidence: 0.0,
        limit: bench.limit,
        no_heal: true,
    };
    // Level by level (one `memlife traverse ID`), then with users' graphs cached (many walks
    // in one process: `memlife traverse ID ID ...`), from the same starts.
    let walker = Walker::open(&store).await?;
    let mut times = Vec::with_capacity(bench.starts);
    let (mut reached, mut followed, mut truncated) = (0usize, 0usize, 0usize);
    let mut walks = Vec::with_capacity(bench.starts);
    for &start in &starts {
        let began = Instant::now();
        let (walk, _) = walker.walk(&id(start), &args).await?;
        times.push(began.elapsed().as_secs_f64() * 1000.0);
        reached += walk.memories.len();
        followed += walk.links_followed;
        truncated += usize::from(walk.truncated);
        walks.push(walk);
    }
    let cached = Walker::cached(&store).await?;
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    let mut users_seen = std::collections::BTreeSet::new();
    let mut differ = 0usize;
    let all_cached = Instant::now();
    for (walk, &start) in walks.iter().zip(&starts) {
        let began = Instant::now();
        let (again, _) = cached.walk(&id(start), &args).await?;
        let ms = began.elapsed().as_secs_f64() * 1000.0;
        if users_seen.insert(start / per_user) {
            cold.push(ms);
        } else {
            warm.push(ms);
        }
        let same = again.memories.len() == walk.memories.len()
            && again.memories.iter().zip(&walk.memories).all(|(a, b)| {
                (&a.id, a.depth, &a.path, &a.text) == (&b.id, b.depth, &b.path, &b.text)
            })
            && again.links_followed == walk.links_followed;
        differ += usize::from(!same);
    }
    let cached_total_ms = all_cached.elapsed().as_secs_f64() * 1000.0;
    cold.sort_by(f64::total_cmp);
    warm.sort_by(f64::total_cmp);
    times.sort_by(f64::total_cmp);
    let n = bench.starts.max(1) as f64;
    Ok(json!({
        "cpu": super::harness::cpu_name(),
        "memories": bench.memories,
        "links": written,
        "users": bench.users,
        "depth": bench.depth,
        "limit": bench.limit,
        "indexed": !bench.no_index,
        "build_seconds": build_s,
        "index_seconds": index_s,
        "starts": bench.starts,
        "median_ms": percentile(&times, 0.5),
        "p95_ms": percentile(&times, 0.95),
        "max_ms": times.last().copied().unwrap_or(0.0),
        "mean_memories_reached": reached as f64 / n,
        "mean_links_followed": followed as f64 / n,
        "walks_stopped_at_limit": truncated,
        "cached": {
            "mean_ms_per_walk": cached_total_ms / n,
            "first_walk_in_a_user": {"walks": cold.len(), "median_ms": percentile(&cold, 0.5), "p95_ms": percentile(&cold, 0.95)},
            "later_walks": {"walks": warm.len(), "median_ms": percentile(&warm, 0.5), "p95_ms": percentile(&warm, 0.95)},
            "walks_differing_from_level_by_level": differ,
        },
    }))
}
