//! `memlife bench consolidate`: the whole consolidation (cluster, both LLM passes, apply) over
//! a synthetic store, through the real CLI on real Lance tables, against `memlife mock-llm`
//! at a fixed latency per call. Online, it compares the wall time with the LLM critical path
//! (two sequential rounds of ceil(calls / concurrency) x latency) and reports our own compute
//! (clustering, selecting, logging, applying) beside the re-embedding of the new memories.
//! With `--batch`, the two passes are Batch API rounds: it times the submission, each poll
//! and the whole cycle until every batch is applied.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Result, bail};
use serde_json::{Value, json};

use super::harness::{MockServer, Workdir, count, cpu_name, memlife, memlife_text, spawn_mock};

/// What `memlife bench consolidate` measures.
#[derive(clap::Args, Debug)]
pub struct ConsolidateBench {
    #[arg(long, default_value_t = 1000)]
    pub memories: usize,
    #[arg(long, default_value_t = 4)]
    pub users: usize,
    /// The mock server's latency per chat call.
    #[arg(long, default_value_t = 1500)]
    pub latency_ms: u64,
    /// Calls in flight at once (the provider's max_concurrency).
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Cluster mode: full (every memory may seed a cluster) or hubs.
    #[arg(long, default_value = "full")]
    pub mode: String,
    /// Run the passes as Batch API rounds (`consolidate --mode batch`, then `batches poll`).
    #[arg(long)]
    pub batch: bool,
    /// Time the mock takes to complete a batch.
    #[arg(long, default_value_t = 2000)]
    pub batch_delay_ms: u64,
    /// Time between polls.
    #[arg(long, default_value_t = 1000)]
    pub poll_interval_ms: u64,
    /// Keep the database in this folder (default: a temporary folder, removed afterwards).
    #[arg(long)]
    pub keep: Option<PathBuf>,
    /// Who judges: the mock server answering with the offline rules (mock), the mock
    /// answering from synth's truth file (oracle: a perfect judge, which shows the recall
    /// clustering allows), or the offline judge in process (no server, no latency).
    #[arg(long, value_enum, default_value_t = BenchJudge::Mock)]
    pub judge: BenchJudge,
    /// Embedding model folder for a store embedded with the local model instead of lexical
    /// hash vectors (`local`), to score judgement on realistic clusters.
    #[arg(long, value_enum, default_value_t = BenchEmbedder::Hash)]
    pub embedder: BenchEmbedder,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchJudge {
    Mock,
    Oracle,
    Offline,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchEmbedder {
    Hash,
    Local,
}

impl BenchEmbedder {
    fn name(self) -> &'static str {
        match self {
            BenchEmbedder::Hash => "hash",
            BenchEmbedder::Local => "local",
        }
    }
}

/// Precision and recall of consolidations against synth's truth: a consolidation is right
/// when all its members are in one duplicate or merge group (anything else is a false
/// merge); a truth group counts as found when at least two of its members were folded
/// together by one right consolidation.
pub fn score_consolidations(truth: &Value, consolidations: &[Vec<String>]) -> Value {
    let mut group_of: std::collections::HashMap<&str, (usize, &str)> = Default::default();
    let mut sizes: Vec<&str> = Vec::new();
    for kind in ["duplicate_groups", "merge_groups"] {
        for group in truth[kind].as_array().into_iter().flatten() {
            let index = sizes.len();
            sizes.push(kind);
            for id in group["memory_ids"].as_array().into_iter().flatten() {
                if let Some(id) = id.as_str() {
                    group_of.insert(id, (index, kind));
                }
            }
        }
    }
    let mut found = std::collections::BTreeSet::new();
    let mut false_merges = Vec::new();
    for members in consolidations {
        let first = members.first().and_then(|m| group_of.get(m.as_str()));
        let one_group = first.is_some()
            && members
                .iter()
                .all(|m| group_of.get(m.as_str()).map(|g| g.0) == first.map(|g| g.0));
        match first {
            Some((g, _)) if one_group => {
                found.insert(*g);
            }
            _ => false_merges.push(members.clone()),
        }
    }
    let recall = |kind: &str| {
        let total = sizes.iter().filter(|k| **k == kind).count();
        let hit = found.iter().filter(|g| sizes[**g] == kind).count();
        json!({"groups": total, "folded": hit,
               "recall": if total > 0 { json!(hit as f64 / total as f64) } else { Value::Null }})
    };
    let n = consolidations.len();
    json!({
        "consolidations": n,
        "false_merges": false_merges.len(),
        "precision": if n > 0 { json!((n - false_merges.len()) as f64 / n as f64) } else { Value::Null },
        "duplicate_groups": recall("duplicate_groups"),
        "merge_groups": recall("merge_groups"),
        "false_examples": false_merges.iter().take(5).collect::<Vec<_>>(),
    })
}

fn start_mock(bench: &ConsolidateBench, truth: &str) -> Result<(MockServer, String)> {
    let mut args = vec![
        "--latency-ms".to_string(),
        bench.latency_ms.to_string(),
        "--batch-delay-ms".into(),
        bench.batch_delay_ms.to_string(),
    ];
    if bench.judge == BenchJudge::Oracle {
        args.extend(["--truth".into(), truth.to_string()]);
    }
    spawn_mock(&args)
}

fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

pub fn run(bench: &ConsolidateBench, out: &mut dyn Write) -> Result<()> {
    let work = Workdir::new(bench.keep.as_ref(), "consolidate")?;
    let db = path(&work.path.join("db"));
    let file = path(&work.path.join("memories.jsonl"));
    let truth = path(&work.path.join("memories.truth.json"));
    let config = path(&work.path.join("memlife.toml"));
    if bench.judge == BenchJudge::Offline && bench.batch {
        bail!("--batch needs a server: --judge mock or oracle");
    }
    let embedder = bench.embedder.name();

    // The store: synthetic memories, imported and embedded (lexical hash vectors).
    let setup = Instant::now();
    memlife(&[
        "synth",
        "--memories",
        &bench.memories.to_string(),
        "--users",
        &bench.users.to_string(),
        "--output",
        &file,
    ])?;
    memlife(&["--db", &db, "--json", "init"])?;
    memlife(&["--db", &db, "--json", "import", &file])?;
    memlife(&["--db", &db, "--json", "embed", "--embedder", embedder])?;
    let setup_seconds = setup.elapsed().as_secs_f64();

    let _mock = if bench.judge == BenchJudge::Offline {
        std::fs::write(&config, "")?;
        None
    } else {
        let (mock, url) = start_mock(bench, &truth)?;
        std::fs::write(
            &config,
            format!(
                "[providers.mock]\nbase_url = \"{url}\"\nmodel = \"mock\"\nmax_concurrency = {}\n\
                 batch = true\n[roles]\nfast = [\"mock\"]\nreasoning = [\"mock\"]\n",
                bench.concurrency
            ),
        )?;
        Some(mock)
    };

    let (cluster, cluster_seconds) =
        memlife(&["--db", &db, "--json", "cluster", "--mode", &bench.mode])?;
    let base = json!({
        "bench": "consolidate",
        "cpu": cpu_name(),
        "memories": bench.memories,
        "users": bench.users,
        "cluster_mode": bench.mode,
        "judge": format!("{:?}", bench.judge).to_lowercase(),
        "embedder": embedder,
        "latency_ms": bench.latency_ms,
        "concurrency": bench.concurrency,
        "setup_seconds": round(setup_seconds),
        "clusters": count(&cluster, "clusters"),
        "cluster_seconds": round(cluster_seconds),
    });
    let mut report = if bench.batch {
        batch_cycle(bench, &db, &config, base)?
    } else {
        online(bench, &db, &config, base, cluster_seconds)?
    };
    // Judgement against synth's truth: which consolidations fold one truth group.
    let (rows, _) = memlife_text(&[
        "--db",
        &db,
        "sql",
        "SELECT consolidates_memory_ids FROM memories WHERE source = 'consolidate'",
        "--format",
        "jsonl",
    ])?;
    let consolidations: Vec<Vec<String>> = rows
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let row: Value = serde_json::from_str(l)?;
            Ok(row["consolidates_memory_ids"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect())
        })
        .collect::<Result<_>>()?;
    let truth: Value = serde_json::from_str(&std::fs::read_to_string(&truth)?)?;
    merge(
        &mut report,
        json!({ "truth": score_consolidations(&truth, &consolidations) }),
    );
    serde_json::to_writer_pretty(&mut *out, &report)?;
    writeln!(out)?;
    Ok(())
}

fn round(seconds: f64) -> f64 {
    (seconds * 100.0).round() / 100.0
}

fn online(
    bench: &ConsolidateBench,
    db: &str,
    config: &str,
    mut report: Value,
    cluster_seconds: f64,
) -> Result<Value> {
    let llm = if bench.judge == BenchJudge::Offline {
        "offline"
    } else {
        "providers"
    };
    let (consolidate, seconds) = memlife(&[
        "--db",
        db,
        "--json",
        "--config",
        config,
        "consolidate",
        "--llm",
        llm,
        "--embedder",
        bench.embedder.name(),
    ])?;
    // Pass-1 requests: several small clusters each (`--memories-per-call`).
    let proposals = count(&consolidate, "requests");
    let verifications = count(&consolidate, "groups_proposed");
    let rounds = |calls: u64| calls.div_ceil(bench.concurrency as u64);
    let critical =
        (rounds(proposals) + rounds(verifications)) as f64 * bench.latency_ms as f64 / 1000.0;
    let phase = |name: &str| consolidate["phases_ms"][name].as_u64().unwrap_or(0) as f64 / 1000.0;
    let wall = cluster_seconds + seconds;
    let compute = cluster_seconds + phase("select") + phase("log") + phase("apply");
    let fields = json!({
        "consolidate_seconds": round(seconds),
        "wall_seconds": round(wall),
        "proposals": proposals,
        "verifications": verifications,
        "llm_calls": consolidate["llm"]["items"],
        "memories_per_proposal": if proposals > 0 { json!(round(bench.memories as f64 / proposals as f64)) } else { Value::Null },
        "llm_calls_per_1000_memories": round(consolidate["llm"]["items"].as_u64().unwrap_or(0) as f64 * 1000.0 / bench.memories.max(1) as f64),
        "estimated_cost_usd": consolidate["llm"]["estimated_cost_usd"],
        "llm_critical_path_seconds": round(critical),
        "ratio_to_critical_path": if critical > 0.0 { json!(round(wall / critical)) } else { Value::Null },
        "compute_seconds": round(compute),
        "compute": {
            "cluster_process": round(cluster_seconds),
            "select": phase("select"), "log": phase("log"), "apply": phase("apply"),
        },
        "reembed_seconds": phase("embed"),
        "llm_seconds": {"propose": phase("propose"), "verify": phase("verify")},
        "consolidated": count(&consolidate, "consolidated"),
        "memories_archived": count(&consolidate, "memories_archived"),
        "groups_rejected": count(&consolidate, "groups_rejected"),
        "clusters_not_proposed": count(&consolidate, "clusters_not_proposed"),
    });
    merge(&mut report, fields);
    Ok(report)
}

fn batch_cycle(
    bench: &ConsolidateBench,
    db: &str,
    config: &str,
    mut report: Value,
) -> Result<Value> {
    let cycle = Instant::now();
    let (submitted, submit_seconds) = memlife(&[
        "--db",
        db,
        "--json",
        "--config",
        config,
        "consolidate",
        "--llm",
        "providers",
        "--mode",
        "batch",
        "--embedder",
        bench.embedder.name(),
    ])?;
    let mut polls = Vec::new();
    let mut totals: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(bench.poll_interval_ms));
        let (poll, seconds) = memlife(&[
            "--db",
            db,
            "--json",
            "--config",
            config,
            "batches",
            "poll",
            "--embedder",
            bench.embedder.name(),
        ])?;
        if poll["notes"][0] == "no batch to poll" {
            break;
        }
        let applied = count(&poll, "applied");
        if applied > 0 {
            polls.push(json!({
                "at_seconds": round(cycle.elapsed().as_secs_f64()),
                "poll_seconds": round(seconds),
                "batches_applied": applied,
                "counts": poll["counts"],
            }));
        }
        for (name, value) in poll["counts"].as_object().into_iter().flatten() {
            *totals.entry(name.clone()).or_default() += value.as_u64().unwrap_or(0);
        }
        if polls.len() > 1000 {
            bail!("the batch cycle did not finish after 1000 polls");
        }
    }
    let cycle_seconds = cycle.elapsed().as_secs_f64();
    merge(
        &mut report,
        json!({
            "mode": "batch",
            "batch_delay_ms": bench.batch_delay_ms,
            "poll_interval_ms": bench.poll_interval_ms,
            "submit_seconds": round(submit_seconds),
            "clusters_submitted": count(&submitted, "items_submitted"),
            "polls_that_applied": polls,
            "cycle_seconds": round(cycle_seconds),
            "consolidated": totals.get("consolidated").copied().unwrap_or(0),
            "verify_items_submitted": totals.get("verify_items_submitted").copied().unwrap_or(0),
            "groups_rejected": totals.get("groups_rejected").copied().unwrap_or(0),
        }),
    );
    Ok(report)
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(into), Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_consolidation_across_truth_groups_is_a_false_merge() {
        let truth = json!({
            "duplicate_groups": [{"memory_ids": ["a", "b", "c"]}, {"memory_ids": ["x", "y"]}],
            "merge_groups": [{"memory_ids": ["m", "n"]}],
        });
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let scored = score_consolidations(
            &truth,
            &[
                ids(&["a", "b"]),
                ids(&["m", "n"]),
                ids(&["x", "a"]),
                ids(&["q", "r"]),
            ],
        );
        assert_eq!(scored["consolidations"], 4);
        assert_eq!(scored["false_merges"], 2, "{scored}");
        assert_eq!(scored["precision"], 0.5);
        assert_eq!(scored["duplicate_groups"]["folded"], 1);
        assert_eq!(scored["duplicate_groups"]["groups"], 2);
        assert_eq!(scored["merge_groups"]["folded"], 1);
    }
}
