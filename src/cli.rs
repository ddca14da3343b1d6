//! The `memlife` command line: clap definitions and the one `match` that dispatches them.
//! Arguments are resolved here once into a `JobCtx`; every command returns an exit code.

use std::path::PathBuf;

use anyhow::{Context, Result};
use chrono::Utc;
use clap::{Args, Parser, Subcommand};

use crate::commands;
use crate::embedders::{Embedder, EmbedderArgs};
use crate::formats::Format;
use crate::jobs::{self, JobCtx, import::OnError};
use crate::schema::DEFAULT_EMBEDDING_DIM;
use crate::store::Store;

#[derive(Parser, Debug)]
#[command(
    name = "memlife",
    version,
    about = "Maintenance jobs for an LLM agent's memory store on Lance tables"
)]
#[command(after_help = "Exit codes: 0 done, 1 done but some items failed, 2 error.")]
pub struct Cli {
    /// Database location: a folder, memory://, or an object-store URI.
    #[arg(
        long,
        global = true,
        env = "MEMLIFE_DB",
        default_value = "./memlife.db"
    )]
    pub db: String,

    /// Print a machine-readable JSON report on stdout.
    #[arg(long, global = true)]
    pub json: bool,

    /// Configuration file (default: ./memlife.toml when it exists; built-in defaults otherwise).
    #[arg(long, global = true, env = "MEMLIFE_CONFIG")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

/// The options every job shares.
#[derive(Args, Debug, Clone)]
pub struct JobArgs {
    /// Process one user only (default: every user, each independently).
    #[arg(long)]
    pub user: Option<String>,

    /// Compute and report, but write nothing (not even the run log).
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create the database and its tables (idempotent).
    Init {
        /// Width of embedding vectors, fixed for the database's life.
        #[arg(long, default_value_t = DEFAULT_EMBEDDING_DIM)]
        embedding_dim: usize,
    },
    /// Load rows from JSON Lines, JSON, CSV or Parquet (upsert on the table's key).
    Import {
        file: PathBuf,
        /// Target table.
        #[arg(long, default_value = "memories")]
        table: String,
        /// Input format (default: from the file extension).
        #[arg(long, value_enum)]
        format: Option<Format>,
        /// What to do with invalid rows: abort writes nothing, skip writes the valid rows.
        #[arg(long, value_enum, default_value = "abort")]
        on_error: OnError,
        #[command(flatten)]
        job: JobArgs,
    },
    /// Write a table to JSON Lines, JSON, CSV or Parquet.
    Export {
        #[arg(long, default_value = "memories")]
        table: String,
        /// Output format (default: from -o's extension, else jsonl).
        #[arg(long, value_enum)]
        format: Option<Format>,
        /// Output file (default: stdout).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Only this user's rows.
        #[arg(long)]
        user: Option<String>,
        /// Only rows matching this SQL predicate, e.g. "state = 'core'".
        #[arg(long = "where")]
        filter: Option<String>,
    },
    /// Generate deterministic synthetic memories and their ground truth.
    Synth {
        #[arg(long, default_value_t = 4)]
        users: usize,
        #[arg(long, default_value_t = 1000)]
        memories: usize,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Output file; the truth goes beside it as <stem>.truth.json.
        #[arg(short, long)]
        output: PathBuf,
        #[arg(long, value_enum)]
        format: Option<Format>,
        /// Add embeddings of this width (0: none). For load tests: see --vectors.
        #[arg(long, default_value_t = 0)]
        dim: usize,
        /// What the embeddings are: random unit vectors, or lexical hash vectors of the texts.
        #[arg(long, value_enum, default_value = "random")]
        vectors: commands::synth::SynthVectors,
        /// First day memories may be created on (UTC).
        #[arg(long, default_value = "2025-01-01")]
        start: String,
        /// Number of days memories are spread over.
        #[arg(long, default_value_t = 365)]
        days: i64,
    },
    /// Run read-only SQL (DataFusion) over every table.
    Sql {
        /// The statement (or use --file).
        query: Option<String>,
        /// A saved query, e.g. sql/current_facts.sql.
        #[arg(long, conflicts_with = "query")]
        file: Option<PathBuf>,
        /// Bind a $name placeholder: --param name=value (repeatable).
        #[arg(long = "param")]
        params: Vec<String>,
        #[arg(long, value_enum, default_value = "table")]
        format: commands::sql::OutputFormat,
    },
    /// One-screen summary: memories per user, state and tier; links per type; last runs.
    Stats,
    /// Fill missing embeddings of memories and entities (resumable; --all recomputes).
    Embed {
        /// Recompute every vector (also the way to move a user to another model).
        #[arg(long)]
        all: bool,
        /// Texts per model call.
        #[arg(long, default_value_t = 64)]
        batch_size: usize,
        /// Rows per commit: the most a killed run loses.
        #[arg(long, default_value_t = 1024)]
        commit_rows: usize,
        /// Which table(s) to embed.
        #[arg(long, value_parser = ["memories", "entities", "all"], default_value = "all")]
        table: String,
        #[command(flatten)]
        job: JobArgs,
        #[command(flatten)]
        embedder: EmbedderArgs,
    },
    /// Build a vector index on memories.embedding and report its recall@k against exact search.
    Index {
        #[arg(long, value_enum, default_value = "ivf-pq")]
        kind: commands::index::IndexKind,
        /// IVF partitions (default: the square root of the vector count).
        #[arg(long)]
        partitions: Option<u32>,
        /// PQ sub-vectors (default: the largest divisor of the width not above width/16).
        #[arg(long)]
        sub_vectors: Option<u32>,
        /// Memories used as queries to measure recall.
        #[arg(long, default_value_t = 100)]
        sample: usize,
        #[arg(long, default_value_t = 10)]
        k: usize,
        /// Partitions searched per query.
        #[arg(long, default_value_t = 20)]
        nprobes: usize,
        /// Candidates re-ranked exactly: refine_factor * k.
        #[arg(long, default_value_t = 10)]
        refine_factor: u32,
    },
    /// Measurements for BENCHMARKS.md that need no database.
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
    /// Typed links (conflicts, supersedes, causes, ...) between similar memories, judged by
    /// the LLM layer (`link.classify`); `--mode batch` submits and exits.
    Link {
        /// Neighbours per memory considered.
        #[arg(long, default_value_t = 5)]
        k: usize,
        /// Cosine similarity a pair needs to be judged.
        #[arg(long, default_value_t = 0.75, allow_negative_numbers = true)]
        min_score: f32,
        #[command(flatten)]
        job: JobArgs,
        #[command(flatten)]
        llm: crate::llm::LlmArgs,
    },
    /// Daily score recalculation: salience decay, lifecycle states, TTL policies, retention
    /// and tiers, importance; expired entity notes removed. Idempotent for a given --now.
    Scores {
        /// The clock the run computes at (RFC 3339); default the current time.
        #[arg(long)]
        now: Option<String>,
        #[command(flatten)]
        job: JobArgs,
    },
    /// OpenAI Batch API submissions: apply finished ones, resubmit failed ones, clean up.
    Batches {
        #[command(subcommand)]
        which: BatchesCommand,
    },
    /// An OpenAI-compatible mock server (chat, embeddings, files, batches) answering memlife
    /// prompts with the offline judge, with injectable latency and faults.
    MockLlm {
        /// 0 picks a free port (the address is printed on the first line).
        #[arg(long, default_value_t = 8089)]
        port: u16,
        #[arg(long, default_value_t = 0)]
        latency_ms: u64,
        /// Share of chat requests answered with a 429, a 500, malformed JSON or a hang.
        #[arg(long, default_value_t = 0.0)]
        error_rate: f64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// JSON array of faults for the first requests, in order (see `memlife mock-llm --help`).
        #[arg(long)]
        script: Option<PathBuf>,
        /// Time until a created batch reports `completed`.
        #[arg(long, default_value_t = 0)]
        batch_delay_ms: u64,
        #[arg(long, default_value_t = DEFAULT_EMBEDDING_DIM)]
        embedding_dim: usize,
        /// The first N batches created end `failed` (to exercise `batches retry`).
        #[arg(long, default_value_t = 0)]
        fail_batches: u64,
    },
    /// A memory's nearest neighbours among its user's memories, with scores.
    Similar {
        id: String,
        #[arg(long, default_value_t = 10)]
        k: usize,
        /// Only neighbours at or above this cosine similarity.
        #[arg(long, default_value_t = -1.0)]
        min: f32,
    },
}

#[derive(Subcommand, Debug)]
pub enum BatchesCommand {
    /// Check running batches; apply finished ones exactly once (cron: every minute).
    Poll {
        /// Take over a claim older than this (its poller is presumed dead); default
        /// llm.apply_lease_secs of the config.
        #[arg(long)]
        lease_secs: Option<u64>,
    },
    /// Resubmit failed or expired batches, and submissions stuck before reaching the provider.
    Retry {
        #[arg(long, default_value_t = 3600)]
        stuck_after_secs: u64,
    },
    /// Delete applied and failed batch records (and their remote files) older than N days;
    /// default llm.batch_retention_days of the config.
    Cleanup {
        #[arg(long)]
        older_than_days: Option<u32>,
    },
    /// The batch records, newest last.
    List,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchData {
    SynthHash,
    Random,
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Top-k of every vector of one set (parallel kernel) against the naive loop.
    Similarity {
        #[arg(long, default_value_t = 100_000)]
        vectors: usize,
        #[arg(long, default_value_t = 384)]
        dim: usize,
        #[arg(long, default_value_t = 10)]
        k: usize,
        /// Queries the naive loop is timed on (its total is extrapolated) and recall is
        /// measured on.
        #[arg(long, default_value_t = 500)]
        naive_queries: usize,
        /// Vectors searched: lexical-hash embeddings of synthetic memory texts (paraphrase
        /// groups, like a real user's memories), or uniform random unit vectors (no structure:
        /// the hardest case for the int8 pass).
        #[arg(long, value_enum, default_value_t = BenchData::SynthHash)]
        data: BenchData,
        /// Use the exact f32 kernel even where the int8 pass is available.
        #[arg(long)]
        exact: bool,
    },
    /// Classification requests in online mode against an OpenAI-compatible server (start
    /// `memlife mock-llm --latency-ms 1000` for the reference figure).
    Llm {
        #[arg(long, default_value = "http://127.0.0.1:8089/v1")]
        url: String,
        #[arg(long, default_value_t = 1000)]
        requests: usize,
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// The server's latency, for the ideal time ceil(requests / concurrency) x latency.
        #[arg(long, default_value_t = 1000)]
        latency_ms: u64,
    },
    /// Sentences per second of an embedder.
    Embed {
        #[arg(long, default_value_t = 2000)]
        sentences: usize,
        #[arg(long, default_value_t = 64)]
        batch_size: usize,
        #[arg(long, default_value_t = 384)]
        dim: usize,
        #[command(flatten)]
        embedder: EmbedderArgs,
    },
}

fn job_ctx(store: Store, job: &JobArgs) -> JobCtx {
    JobCtx {
        store,
        user: job.user.clone(),
        dry_run: job.dry_run,
        now: Utc::now(),
    }
}

pub async fn run(cli: Cli) -> Result<u8> {
    let mut stdout = std::io::stdout().lock();
    match cli.command {
        Command::Init { embedding_dim } => {
            commands::init::run(&cli.db, embedding_dim, cli.json).await
        }
        Command::Import {
            file,
            table,
            format,
            on_error,
            job,
        } => {
            let store = Store::open(&cli.db).await?;
            let ctx = job_ctx(store, &job);
            let args = jobs::import::ImportArgs {
                file,
                table,
                format,
                on_error,
            };
            let report = jobs::import::run(&ctx, &args).await?;
            report.print(cli.json, &mut stdout)?;
            Ok(report.exit_code())
        }
        Command::Export {
            table,
            format,
            output,
            user,
            filter,
        } => {
            let store = Store::open(&cli.db).await?;
            let format = match (format, &output) {
                (Some(f), _) => f,
                (None, Some(path)) if path.as_os_str() != "-" => Format::from_path(path)?,
                _ => Format::Jsonl,
            };
            let rows = commands::export::run(
                &store,
                &table,
                format,
                output.as_deref(),
                user.as_deref(),
                filter.as_deref(),
            )
            .await?;
            if output.is_some() {
                if cli.json {
                    println!("{}", serde_json::json!({"table": table, "rows": rows}));
                } else {
                    eprintln!("exported {rows} rows of '{table}'");
                }
            }
            Ok(0)
        }
        Command::Synth {
            users,
            memories,
            seed,
            output,
            format,
            dim,
            vectors,
            start,
            days,
        } => {
            let start_micros = crate::encoding::parse_timestamp(&start)
                .with_context(|| format!("--start '{start}' is not a date (YYYY-MM-DD)"))?;
            let config = crate::synth::SynthConfig {
                users,
                memories,
                seed,
                start_micros,
                span_days: days.max(1),
            };
            let format = match format {
                Some(f) => f,
                None => Format::from_path(&output)?,
            };
            let summary = commands::synth::run(&config, dim, vectors, &output, format)?;
            summary.print(cli.json, &mut stdout)?;
            Ok(0)
        }
        Command::Sql {
            query,
            file,
            params,
            format,
        } => {
            let text = match (query, file) {
                (Some(q), _) => q,
                (None, Some(path)) => std::fs::read_to_string(&path)
                    .with_context(|| format!("cannot read {}", path.display()))?,
                (None, None) => anyhow::bail!("give a query or --file FILE"),
            };
            let store = Store::open(&cli.db).await?;
            let params = crate::sql::parse_params(&params)?;
            commands::sql::run(&store, &text, &params, format, &mut stdout).await?;
            Ok(0)
        }
        Command::Stats => {
            let store = Store::open(&cli.db).await?;
            commands::stats::run(&store, cli.json, &mut stdout).await?;
            Ok(0)
        }
        Command::Embed {
            all,
            batch_size,
            commit_rows,
            table,
            job,
            embedder,
        } => {
            let store = Store::open(&cli.db).await?;
            let config = crate::config::Config::load(cli.config.as_deref())?;
            let embedder = Embedder::from_args(
                &embedder,
                &config.embedder,
                store.embedding_dim(),
                batch_size,
            )?;
            let ctx = job_ctx(store, &job);
            let tables = match table.as_str() {
                "all" => vec!["memories".to_string(), "entities".to_string()],
                one => vec![one.to_string()],
            };
            let args = jobs::embed::EmbedArgs {
                all,
                batch_size,
                commit_rows,
                tables,
            };
            let report = jobs::embed::run(&ctx, &args, &embedder).await?;
            report.print(cli.json, &mut stdout)?;
            Ok(report.exit_code())
        }
        Command::Index {
            kind,
            partitions,
            sub_vectors,
            sample,
            k,
            nprobes,
            refine_factor,
        } => {
            let store = Store::open(&cli.db).await?;
            let args = commands::index::IndexArgs {
                kind,
                partitions,
                sub_vectors,
                sample,
                k,
                nprobes,
                refine_factor,
            };
            commands::index::run(&store, &args, cli.json, &mut stdout).await?;
            Ok(0)
        }
        Command::Bench { which } => {
            match which {
                BenchCommand::Similarity {
                    vectors,
                    dim,
                    k,
                    naive_queries,
                    data,
                    exact,
                } => commands::bench::similarity(
                    &commands::bench::SimilarityBench {
                        vectors,
                        dim,
                        k,
                        naive_queries,
                        data,
                        exact,
                    },
                    &mut stdout,
                )?,
                BenchCommand::Llm {
                    url,
                    requests,
                    concurrency,
                    latency_ms,
                } => {
                    commands::bench::llm(&url, requests, concurrency, latency_ms, &mut stdout)
                        .await?
                }
                BenchCommand::Embed {
                    sentences,
                    batch_size,
                    dim,
                    embedder,
                } => {
                    let config = crate::config::Config::load(cli.config.as_deref())?;
                    let embedder =
                        Embedder::from_args(&embedder, &config.embedder, dim, batch_size)?;
                    commands::bench::embed(&embedder, sentences, batch_size, &mut stdout).await?
                }
            }
            Ok(0)
        }
        Command::Link {
            k,
            min_score,
            job,
            llm,
        } => {
            let config = crate::config::Config::load(cli.config.as_deref())?;
            let llm = crate::llm::Llm::new(&config, &llm)?;
            let store = Store::open(&cli.db).await?;
            let ctx = job_ctx(store, &job);
            let args = jobs::link::LinkArgs { k, min_score };
            let report = jobs::link::run(&ctx, &args, &llm).await?;
            report.print(cli.json, &mut stdout)?;
            Ok(report.exit_code())
        }
        Command::Scores { now, job } => {
            let config = crate::config::Config::load(cli.config.as_deref())?;
            let store = Store::open(&cli.db).await?;
            let mut ctx = job_ctx(store, &job);
            if let Some(text) = now {
                let micros = crate::encoding::parse_timestamp(&text).with_context(|| {
                    format!("--now {text:?} is not a timestamp (e.g. 2026-01-31T00:00:00Z)")
                })?;
                ctx.now = chrono::DateTime::from_timestamp_micros(micros)
                    .with_context(|| format!("--now {text:?} is out of range"))?;
            }
            let report = jobs::scores::run(&ctx, &config.scores).await?;
            report.print(cli.json, &mut stdout)?;
            Ok(report.exit_code())
        }
        Command::Batches { which } => {
            let config = crate::config::Config::load(cli.config.as_deref())?;
            let store = Store::open(&cli.db).await?;
            commands::batches::run(&store, &config, which, cli.json, &mut stdout).await
        }
        Command::MockLlm {
            port,
            latency_ms,
            error_rate,
            seed,
            script,
            batch_delay_ms,
            embedding_dim,
            fail_batches,
        } => {
            let script = match script {
                Some(path) => crate::mock_llm::Fault::load(&path)?,
                None => Vec::new(),
            };
            crate::mock_llm::serve(crate::mock_llm::MockOptions {
                port,
                latency: std::time::Duration::from_millis(latency_ms),
                error_rate,
                seed,
                script,
                batch_delay: std::time::Duration::from_millis(batch_delay_ms),
                embedding_dim,
                fail_batches,
            })
            .await?;
            Ok(0)
        }
        Command::Similar { id, k, min } => {
            let store = Store::open(&cli.db).await?;
            commands::similar::run(&store, &id, k, min, cli.json, &mut stdout).await?;
            Ok(0)
        }
    }
}
