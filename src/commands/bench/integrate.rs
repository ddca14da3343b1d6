//! `memlife bench integrate`: new facts into a synthetic store, through the real CLI on real
//! Lance tables. The store is `memlife synth` (seed 7) imported and embedded with lexical
//! hash vectors; the facts are a second synth draw for the same users (seed 8), so many of
//! them restate, change or extend stored memories and reach the judge. Three runs on copies
//! of the same store: against `memlife mock-llm` at `--latency-ms` (throughput, LLM calls per
//! fact), against the mock at 0 ms (our own time per fact, HTTP included) and with the
//! offline judge in process (no HTTP).

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use serde_json::{Value, json};

use super::harness::{MockServer, Workdir, copy_dir, count, cpu_name, memlife, spawn_mock};

#[derive(clap::Args, Debug)]
pub struct IntegrateBench {
    /// Memories in the store.
    #[arg(long, default_value_t = 100_000)]
    pub memories: usize,
    #[arg(long, default_value_t = 100)]
    pub users: usize,
    /// New facts integrated.
    #[arg(long, default_value_t = 1000)]
    pub facts: usize,
    /// The mock server's latency per chat call.
    #[arg(long, default_value_t = 1500)]
    pub latency_ms: u64,
    /// Calls in flight at once (the provider's max_concurrency).
    #[arg(long, default_value_t = 128)]
    pub concurrency: usize,
    /// Keep the work folder here (default: a temporary folder, removed afterwards).
    #[arg(long)]
    pub keep: Option<PathBuf>,
}

fn start_mock(latency_ms: u64) -> Result<(MockServer, String)> {
    spawn_mock(&["--latency-ms".to_string(), latency_ms.to_string()])
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// One integrate run on a fresh copy of the store; its report and wall seconds.
fn one_run(
    work: &std::path::Path,
    name: &str,
    facts: &str,
    config_text: &str,
    llm: &str,
) -> Result<(Value, f64)> {
    let db = work.join(format!("db-{name}"));
    let _ = std::fs::remove_dir_all(&db);
    copy_dir(&work.join("db"), &db)?;
    let config = work.join(format!("{name}.toml"));
    std::fs::write(&config, config_text)?;
    let db = db.to_string_lossy().into_owned();
    let config = config.to_string_lossy().into_owned();
    memlife(&[
        "--db",
        &db,
        "--json",
        "--config",
        &config,
        "integrate",
        facts,
        "--embedder",
        "hash",
        "--llm",
        llm,
        "--now",
        "2026-01-01T00:00:00Z",
    ])
}

fn summary(report: &Value, seconds: f64, facts: usize) -> Value {
    let calls = report["llm"]["items"].as_u64().unwrap_or(0);
    json!({
        "wall_seconds": round3(seconds),
        "job_seconds": round3(report["duration_ms"].as_f64().unwrap_or(0.0) / 1000.0),
        "facts_per_second": round3(facts as f64 / seconds),
        "ms_per_fact": round3(seconds * 1000.0 / facts as f64),
        "llm_calls": calls,
        "llm_calls_per_fact": round3(calls as f64 / facts as f64),
        "rounds": count(report, "rounds"),
        "added": count(report, "added"),
        "duplicates": count(report, "duplicates"),
        "superseded": count(report, "superseded"),
        "merged": count(report, "merged"),
        "coexisting": count(report, "coexisting"),
        "queued_for_review": count(report, "queued_for_review"),
        "failures": report["failures"].as_array().map_or(0, Vec::len),
    })
}

pub fn run(bench: &IntegrateBench, out: &mut dyn Write) -> Result<()> {
    let path = match &bench.keep {
        Some(dir) => dir.clone(),
        None => {
            std::env::temp_dir().join(format!("memlife-bench-integrate-{}", std::process::id()))
        }
    };
    std::fs::create_dir_all(&path)?;
    let work = Workdir {
        path,
        keep: bench.keep.is_some(),
    };
    let p = |name: &str| work.path.join(name).to_string_lossy().into_owned();
    let (store, facts, db) = (p("store.jsonl"), p("facts.jsonl"), p("db"));
    let started = std::time::Instant::now();
    if !std::path::Path::new(&db).exists() {
        memlife(&[
            "synth",
            "--memories",
            &bench.memories.to_string(),
            "--users",
            &bench.users.to_string(),
            "--seed",
            "7",
            "--output",
            &store,
        ])?;
        memlife(&["--db", &db, "--json", "init"])?;
        memlife(&["--db", &db, "--json", "import", &store])?;
        memlife(&["--db", &db, "--json", "embed", "--embedder", "hash"])?;
    }
    // The facts: a second draw for the same users, without ids (derived on read).
    let drawn = p("drawn.jsonl");
    memlife(&[
        "synth",
        "--memories",
        &bench.facts.to_string(),
        "--users",
        &bench.users.to_string(),
        "--seed",
        "8",
        "--output",
        &drawn,
    ])?;
    let lines: Vec<String> = std::fs::read_to_string(&drawn)?
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|mut v| {
            if let Some(o) = v.as_object_mut() {
                o.remove("id");
            }
            v.to_string()
        })
        .collect();
    std::fs::write(&facts, lines.join("\n") + "\n")?;
    let setup_seconds = started.elapsed().as_secs_f64();

    let provider = |url: &str| {
        format!(
            "[providers.mock]\nbase_url = \"{url}\"\nmodel = \"mock\"\nmax_concurrency = {}\n\
             [roles]\nfast = [\"mock\"]\nreasoning = [\"mock\"]\n",
            bench.concurrency
        )
    };
    let (mock, url) = start_mock(bench.latency_ms)?;
    let (slow, slow_seconds) =
        one_run(&work.path, "latency", &facts, &provider(&url), "providers")?;
    drop(mock);
    let (mock, url) = start_mock(0)?;
    let (fast, fast_seconds) = one_run(&work.path, "zero", &facts, &provider(&url), "providers")?;
    drop(mock);
    let (offline, offline_seconds) = one_run(&work.path, "offline", &facts, "", "offline")?;
    let report = json!({
        "bench": "integrate",
        "cpu": cpu_name(),
        "memories": bench.memories,
        "users": bench.users,
        "facts": bench.facts,
        "concurrency": bench.concurrency,
        "setup_seconds": round3(setup_seconds),
        "mock_at_latency": {"latency_ms": bench.latency_ms, "run": summary(&slow, slow_seconds, bench.facts)},
        "mock_at_0_ms": summary(&fast, fast_seconds, bench.facts),
        "offline_judge": summary(&offline, offline_seconds, bench.facts),
    });
    writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    Ok(())
}
