//! `memlife bench`: measurements that need no database, reported as JSON for BENCHMARKS.md.
//! `similarity`: top-k neighbours of every vector of one user-sized set with the blocked,
//! parallel kernel, and the single-threaded naive loop on a sample (its time extrapolated).
//! `embed`: sentences per second of an embedder on synthetic memory texts. `consolidate` and
//! `graph` build a store of their own (`consolidate`, `graph`); the harness they and the
//! evals share (work folders, this binary as a child process, the mock server) is `harness`.

pub mod consolidate;
pub mod graph;
pub(crate) mod harness;
pub mod integrate;
pub mod recall;
pub mod store;
pub mod targets;
pub mod year;

use std::io::Write;
use std::time::Instant;

use anyhow::{Result, bail};

use rayon::prelude::*;

use crate::app::App;
use crate::embedders::{Embedder, EmbedderArgs};
use crate::exit::ExitStatus;
use crate::logic::hash_embedding::hash_embed;
use crate::logic::similarity::{AllPairs, SelfMatch, all_pairs_top_k, int8, top_k_naive};
use crate::logic::synth::{SynthConfig, generate, placeholder_embedding};

/// Measurements for BENCHMARKS.md that need no database.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub which: BenchCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Top-k of every vector of one set (parallel kernel) against the naive loop.
    Similarity(SimilarityBench),
    /// Classification requests in online mode against an OpenAI-compatible server (start
    /// `memlife mock-llm --latency-ms 1000` for the reference figure).
    Llm(LlmBench),
    /// Sentences per second of an embedder.
    Embed(EmbedBench),
    /// The whole consolidation (cluster, both passes, apply) over a synthetic store against
    /// `memlife mock-llm`, online or as Batch API rounds.
    Consolidate(consolidate::ConsolidateBench),
    /// Link traversal from random starts on a synthetic graph (indexed, read only).
    Graph(graph::GraphBench),
    /// New facts integrated into a synthetic store against `memlife mock-llm` at a fixed
    /// latency per call (facts per second, LLM calls per fact, our own time per fact).
    Integrate(integrate::IntegrateBench),
    /// Recall latency for one user with many memories (exact and indexed search, p50 and
    /// p95) and recalls per second in one process.
    Recall(recall::RecallBench),
    /// A synthetic store lives D days (new facts, recalls, the nightly pipeline at each day's
    /// clock): each job's time and each table's versions, files and bytes over the year.
    Year(year::YearBench),
    /// Import, daily scores and a SQL group-by over a synthetic store of N memories.
    Store(store::StoreBench),
    /// Run the benches and evals of `benches/targets.toml` and say which targets hold:
    /// one table, exit 1 when a target is missed, 2 when a bench could not run; figures
    /// recorded in the `bench_runs` table of `--db`.
    Targets(targets::TargetsBench),
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchData {
    SynthHash,
    Random,
}

/// What `memlife bench similarity` measures.
#[derive(clap::Args, Debug)]
pub struct SimilarityBench {
    #[arg(long, default_value_t = 100_000)]
    pub vectors: usize,
    #[arg(long, default_value_t = 384)]
    pub dim: usize,
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// Queries the naive loop is timed on (its total is extrapolated) and recall is
    /// measured on.
    #[arg(long, default_value_t = 500)]
    pub naive_queries: usize,
    /// Vectors searched: lexical-hash embeddings of synthetic memory texts (paraphrase
    /// groups, like a real user's memories), or uniform random unit vectors (no structure:
    /// the hardest case for the int8 pass).
    #[arg(long, value_enum, default_value_t = BenchData::SynthHash)]
    pub data: BenchData,
    /// Use the exact f32 kernel even where the int8 pass is available.
    #[arg(long)]
    pub exact: bool,
    /// Search these vectors instead: raw little-endian f32, `--dim` per row, all rows (e.g.
    /// a store's embeddings, as `benches/similarity.sh` writes them); `--vectors` and
    /// `--data` are then ignored.
    #[arg(long)]
    pub vectors_file: Option<std::path::PathBuf>,
    /// The int8 kernel's instruction set (default: this CPU's best). `avx2` runs the AVX2
    /// kernel on an AVX-512 CPU too, to measure what AVX2-only machines get.
    #[arg(long, value_enum)]
    pub isa: Option<BenchIsa>,
    /// Score every pair: no partition into lists of nearby vectors, even where the data
    /// allows one.
    #[arg(long)]
    pub no_partition: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchIsa {
    Avx512Vnni,
    Avx2,
}

/// What `memlife bench llm` measures.
#[derive(clap::Args, Debug)]
pub struct LlmBench {
    #[arg(long, default_value = "http://127.0.0.1:8089/v1")]
    pub url: String,
    #[arg(long, default_value_t = 1000)]
    pub requests: usize,
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// The server's latency, for the ideal time ceil(requests / concurrency) x latency.
    #[arg(long, default_value_t = 1000)]
    pub latency_ms: u64,
}

/// What `memlife bench embed` measures.
#[derive(clap::Args, Debug)]
pub struct EmbedBench {
    #[arg(long, default_value_t = 2000)]
    pub sentences: usize,
    #[arg(long, default_value_t = 64)]
    pub batch_size: usize,
    #[arg(long, default_value_t = 384)]
    pub dim: usize,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
}

/// `memlife bench ...`: runs one measurement and prints it as JSON.
pub async fn run(app: &App, args: &BenchArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    match &args.which {
        BenchCommand::Similarity(bench) => similarity(bench, out)?,
        BenchCommand::Llm(bench) => {
            llm(
                &bench.url,
                bench.requests,
                bench.concurrency,
                bench.latency_ms,
                out,
            )
            .await?
        }
        BenchCommand::Consolidate(bench) => consolidate::run(bench, out)?,
        BenchCommand::Graph(bench) => graph::run(bench, out).await?,
        BenchCommand::Recall(bench) => recall::run(bench, out).await?,
        BenchCommand::Integrate(bench) => integrate::run(bench, out)?,
        BenchCommand::Year(bench) => year::run(bench, &app.config().await?.retention, out)?,
        BenchCommand::Store(bench) => store::run(bench, out)?,
        BenchCommand::Targets(bench) => return targets::run(app, bench, out).await,
        BenchCommand::Embed(bench) => {
            let embedder = app
                .embedder(&bench.embedder, bench.dim, bench.batch_size)
                .await?;
            embed(&embedder, bench.sentences, bench.batch_size, out).await?
        }
    }
    Ok(ExitStatus::Success)
}

fn bench_vectors(bench: &SimilarityBench) -> Vec<f32> {
    let mut data = Vec::with_capacity(bench.vectors * bench.dim);
    match bench.data {
        BenchData::Random => {
            let mut one = Vec::with_capacity(bench.dim);
            for i in 0..bench.vectors {
                placeholder_embedding(7, &i.to_string(), bench.dim, &mut one);
                data.extend_from_slice(&one);
            }
        }
        BenchData::SynthHash => {
            let (memories, _) = generate(&SynthConfig {
                users: 1,
                memories: bench.vectors,
                seed: 7,
                start_micros: 1_735_689_600_000_000,
                span_days: 365,
            });
            let vectors: Vec<Vec<f32>> = memories
                .par_iter()
                .map(|m| hash_embed(&m.text, bench.dim))
                .collect();
            vectors.iter().for_each(|v| data.extend_from_slice(v));
        }
    }
    data
}

/// Rows of `dim` little-endian f32 from `path`.
fn vectors_file(path: &std::path::Path, dim: usize) -> Result<Vec<f32>> {
    let bytes = std::fs::read(path)
        .map_err(|e| anyhow::anyhow!("--vectors-file {}: {e}", path.display()))?;
    let row = 4 * dim;
    if dim == 0 || bytes.is_empty() || bytes.len() % row != 0 {
        bail!(
            "--vectors-file {}: {} bytes are not whole rows of {dim} f32 ({row} bytes each)",
            path.display(),
            bytes.len()
        );
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

pub fn similarity(bench: &SimilarityBench, out: &mut dyn Write) -> Result<()> {
    let (dim, k) = (bench.dim, bench.k);
    let data = match &bench.vectors_file {
        Some(path) => vectors_file(path, dim)?,
        None => bench_vectors(bench),
    };
    let vectors = data.len() / dim;
    let isa = match bench.isa {
        None => None,
        Some(BenchIsa::Avx512Vnni) if int8::isa() == Some(int8::Isa::Avx512Vnni) => {
            Some(int8::Isa::Avx512Vnni)
        }
        Some(BenchIsa::Avx2) if int8::avx2_available() => Some(int8::Isa::Avx2),
        Some(other) => bail!("--isa {other:?}: this CPU does not run that instruction set"),
    };
    let how = AllPairs {
        exact: bench.exact,
        isa,
        partition: !bench.no_partition,
    };
    let started = Instant::now();
    let (result, run) = all_pairs_top_k(&data, dim, k, how);
    let kernel_seconds = started.elapsed().as_secs_f64();
    let sample = bench.naive_queries.min(vectors);
    let started = Instant::now();
    let naive = top_k_naive(&data[..sample * dim], &data, dim, k, SelfMatch::SameRows);
    let naive_seconds = started.elapsed().as_secs_f64() * vectors as f64 / sample.max(1) as f64;
    // Recall@k of the kernel on the sampled queries, against the naive loop's exact answer.
    let (mut hits, mut wanted, mut identical) = (0usize, 0usize, 0usize);
    for (exact, fast) in naive.iter().zip(&result) {
        hits += fast
            .iter()
            .filter(|n| exact.iter().any(|e| e.index == n.index))
            .count();
        wanted += exact.len();
        identical += usize::from(
            exact
                .iter()
                .map(|n| n.index)
                .eq(fast.iter().map(|n| n.index)),
        );
    }
    let report = serde_json::json!({
        "bench": "similarity",
        "data": match &bench.vectors_file {
            Some(path) => path.display().to_string(),
            None => format!("{:?}", bench.data).to_lowercase(),
        },
        "vectors": vectors, "dim": dim, "k": k, "threads": rayon::current_num_threads(),
        "kernel": run.kernel,
        "partition": run.partition,
        "kernel_seconds": kernel_seconds,
        "naive_seconds_extrapolated": naive_seconds,
        "naive_queries_timed": sample,
        "speedup": naive_seconds / kernel_seconds.max(f64::MIN_POSITIVE),
        "recall_at_k": hits as f64 / wanted.max(1) as f64,
        "queries_with_identical_neighbours": identical,
    });
    writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    Ok(())
}

async fn embed(
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

/// `memlife bench llm`: `requests` classification calls in online mode through the provider
/// machinery (semaphore, budgets, retries) against `url`, timed against the ideal
/// ceil(requests / concurrency) x latency.
async fn llm(
    url: &str,
    requests: usize,
    concurrency: usize,
    latency_ms: u64,
    out: &mut dyn Write,
) -> Result<()> {
    use crate::config::Config;
    use crate::llm::tasks::{MemoryView, Task, TaskInput};
    use crate::llm::{CallMode, Item, JudgeKind, Llm, LlmArgs};

    let mut config = Config::parse(&format!(
        "[providers.bench]\nbase_url = {url:?}\nmodel = \"mock\"\nmax_concurrency = {concurrency}\ntimeout_secs = 60\n\n[roles]\nfast = [\"bench\"]\nreasoning = [\"bench\"]\n"
    ))?;
    if let Some(p) = config.providers.get_mut("bench") {
        p.json_mode = true;
    }
    let llm = Llm::new(
        &config,
        &LlmArgs {
            judge: Some(JudgeKind::Providers),
            mode: Some(CallMode::Online),
        },
    )?;
    let (memories, _) = generate(&SynthConfig {
        users: 1,
        memories: requests + 1,
        seed: 11,
        start_micros: 1_735_689_600_000_000,
        span_days: 365,
    });
    let view = |i: usize| MemoryView {
        id: memories[i].id.clone(),
        kind: "fact".into(),
        created_at: crate::model::encoding::format_timestamp(memories[i].created_at),
        happens_at: None,
        text: memories[i].text.clone(),
        dates: Vec::new(),
        cluster: None,
    };
    let items: Vec<Item> = (0..requests)
        .map(|i| Item {
            custom_id: format!("pair-{i}"),
            input: TaskInput {
                task: Task::IntegrateClassify,
                memories: vec![view(i), view(i + 1)],
                proposal: None,
                now: "2026-01-01T00:00:00Z".into(),
                question: None,
            },
        })
        .collect();
    let started = Instant::now();
    let outcomes = llm.run(items).await;
    let seconds = started.elapsed().as_secs_f64();
    let ideal = requests.div_ceil(concurrency.max(1)) as f64 * latency_ms as f64 / 1000.0;
    let usage = llm.usage(&outcomes);
    let report = serde_json::json!({
        "bench": "llm", "url": url, "requests": requests, "concurrency": concurrency,
        "latency_ms": latency_ms, "seconds": seconds, "ideal_seconds": ideal,
        "ratio_to_ideal": seconds / ideal.max(f64::MIN_POSITIVE),
        "failed_items": usage.failed_items, "usage": usage,
    });
    writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    Ok(())
}
