//! `memlife nightly`: the maintenance pipeline in dependency order, each step an ordinary job
//! run (its own `runs` row, undoable like any run), then one combined report and one exit
//! status. Embeddings come first (everything after compares vectors), then ended sessions
//! told as narratives (they embed their own, and later steps see them), entities before the
//! jobs that read them, scores before clustering (hubs come from access and importance), links
//! before clustering (hubs from links), consolidation before refinement (a folded memory is
//! not split), pruning after both (what they archive decays first), entity GC after pruning
//! (deleted memories free entities), descriptions after GC (of the
//! entities left), and `optimize` last: in full when due (weekly by default), otherwise
//! `optimize --light`, which merges the small fragments the day's commits appended and
//! folds the day's rows into the indexes of `memories`.
//!
//! Every step runs at one clock (`--now`, default the time the pipeline started) and gets the
//! flags it takes of `--llm`, `--embedder`, `--user` and `--dry-run`. A step that fails is
//! reported and the next steps still run (each works on what is there), unless `--fail-fast`.
//! The summary compares the store before and after: live memories, what was folded,
//! superseded, archived; links; entities; tiers.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{Result, bail};
use clap::{CommandFactory, Parser, ValueEnum};
use serde::Serialize;
use serde_json::json;

use crate::app::App;
use crate::embedders::EmbedderKind;
use crate::exit::ExitStatus;
use crate::jobs::{JobCommand, JobReport, Status};
use crate::llm::JudgeKind;
use crate::model::clock::Clock;
use crate::model::encoding::format_timestamp;
use crate::store::Store;

/// The pipeline's steps, in the order they run.
pub const STEPS: &[&str] = &[
    "embed",
    "sessions",
    "insights",
    "entities",
    "scores",
    "link",
    "cluster",
    "consolidate",
    "refine",
    "distill",
    "anchor",
    "prune",
    "entity-gc",
    "describe",
    "optimize",
];

/// The maintenance pipeline: embed, sessions, insights, entities, scores, link, cluster,
/// consolidate, refine, distill, anchor, prune, entity-gc, describe, and optimize (in full when due, else --light); each step its own
/// run; one report.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct NightlyArgs {
    /// Only these steps, in pipeline order (comma-separated; default all, optimize in full
    /// when due and light otherwise; named, optimize runs in full).
    #[arg(long, value_delimiter = ',')]
    pub steps: Vec<String>,
    /// The clock every step runs at (RFC 3339); default the time the pipeline starts.
    #[arg(long)]
    pub now: Option<Clock>,
    /// One user only.
    #[arg(long, conflicts_with = "shard")]
    pub user: Option<String>,
    /// One shard of the users (I/N, from 0; see any job's --help): every step but optimize
    /// (which works on whole tables, once per store) runs for that shard.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<crate::logic::shard::Shard>,
    /// Every step computes and reports, and writes nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The judge of the steps that ask one (link, consolidate, refine, describe).
    #[arg(long = "llm", value_enum)]
    pub judge: Option<JudgeKind>,
    /// The embedder of the steps that embed.
    #[arg(long, value_enum)]
    pub embedder: Option<EmbedderKind>,
    /// A full `optimize` is due when no finished full one ran within this many days of the
    /// clock; until then the step is `optimize --light`.
    #[arg(long, default_value_t = 7.0, value_name = "DAYS")]
    pub optimize_every_days: f64,
    /// Stop at the first step that fails (default: report it and go on).
    #[arg(long)]
    pub fail_fast: bool,
}

/// One step's outcome in the combined report.
#[derive(Debug, Serialize)]
pub struct StepOutcome {
    pub step: String,
    pub status: String,
    pub run_id: Option<String>,
    /// The step's whole time: from before its job takes its lock to after its run row is
    /// written, its reads before the run starts and its index refresh included. (The run's
    /// own `duration_ms`, in `runs`, counts from its start to its report.)
    pub duration_ms: u64,
    pub counts: BTreeMap<String, u64>,
    /// Why the step did not run, or the error it stopped with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The store's shape, before and after.
#[derive(Debug, Default, Serialize, Clone, PartialEq)]
pub struct Shape {
    pub live_memories: i64,
    pub archived: i64,
    pub superseded: i64,
    pub consolidated: i64,
    /// Consolidations ever applied (APPROVED CONSOLIDATE audit rows: one per group folded).
    pub folded: i64,
    pub links: i64,
    pub entities: i64,
    pub hot: i64,
    pub warm: i64,
    pub cold: i64,
}

/// The store's shape (of some users only, with `users`, a predicate on `user_id`).
pub async fn shape(store: &Store, users: Option<&str>) -> Result<Shape> {
    let of_user = users.map_or(String::new(), |u| format!(" AND {u}"));
    let live = format!("archived_at IS NULL AND superseded_by IS NULL{of_user}");
    let count = |table: &'static str, filter: String| async move {
        Ok::<i64, anyhow::Error>(store.count_rows(table, Some(&filter)).await? as i64)
    };
    Ok(Shape {
        live_memories: count("memories", live.clone()).await?,
        archived: count("memories", format!("archived_at IS NOT NULL{of_user}")).await?,
        superseded: count("memories", format!("superseded_by IS NOT NULL{of_user}")).await?,
        consolidated: count(
            "memories",
            format!("source = 'consolidate' AND archived_at IS NULL{of_user}"),
        )
        .await?,
        folded: count(
            "audit_log",
            format!("operation = 'CONSOLIDATE' AND classification = 'APPROVED'{of_user}"),
        )
        .await?,
        links: count("links", format!("link_type IS NOT NULL{of_user}")).await?,
        entities: count("entities", format!("archived_at IS NULL{of_user}")).await?,
        hot: count("memories", format!("{live} AND tier = 'hot'")).await?,
        warm: count("memories", format!("{live} AND tier = 'warm'")).await?,
        cold: count("memories", format!("{live} AND tier = 'cold'")).await?,
    })
}

/// The `user_id` predicate of `--user` or `--shard` (the shard's users as the store holds
/// them when the pipeline starts); `None` for every user.
async fn users_predicate(store: &Store, args: &NightlyArgs) -> Result<Option<String>> {
    if let Some(user) = &args.user {
        return Ok(Some(format!(
            "user_id = {}",
            crate::store::sql_string(user)
        )));
    }
    let Some(shard) = args.shard else {
        return Ok(None);
    };
    let users = crate::app::users_in_shard(store, shard).await?;
    Ok(Some(crate::store::users_in(&users)))
}

/// The job subcommand's argument ids, to forward only the flags a step takes.
fn step_arguments(step: &str) -> Vec<String> {
    let command = StepCli::command();
    command
        .find_subcommand(step)
        .map(|c| c.get_arguments().map(|a| a.get_id().to_string()).collect())
        .unwrap_or_default()
}

#[derive(Parser, Debug)]
#[command(name = "memlife")]
struct StepCli {
    #[command(subcommand)]
    job: JobCommand,
}

/// The argument list of one step.
fn step_argv(step: &str, args: &NightlyArgs, now: &str) -> Vec<String> {
    let takes = step_arguments(step);
    let has = |id: &str| takes.iter().any(|t| t == id);
    let mut argv = vec!["memlife".to_string(), step.to_string()];
    if has("now") {
        argv.extend(["--now".to_string(), now.to_string()]);
    }
    if let (true, Some(judge)) = (has("judge"), args.judge) {
        let name = judge.to_possible_value().expect("a named judge");
        argv.extend(["--llm".to_string(), name.get_name().to_string()]);
    }
    if let (true, Some(embedder)) = (has("embedder"), args.embedder) {
        let name = embedder.to_possible_value().expect("a named embedder");
        argv.extend(["--embedder".to_string(), name.get_name().to_string()]);
    }
    if let (true, Some(user)) = (has("user"), &args.user)
        && step != "optimize"
    {
        argv.extend(["--user".to_string(), user.clone()]);
    }
    if let (true, Some(shard)) = (has("shard"), &args.shard)
        && step != "optimize"
    {
        argv.extend(["--shard".to_string(), shard.to_string()]);
    }
    if args.dry_run && has("dry_run") {
        argv.push("--dry-run".to_string());
    }
    argv
}

/// Whether `optimize` is due at `now`: no finished full optimize (`--light` ones do not
/// count) whose clock is within `every_days`.
async fn optimize_due(
    store: &Store,
    now: chrono::DateTime<chrono::Utc>,
    every_days: f64,
) -> Result<bool> {
    let runs: Vec<crate::model::typed::RunStart> = store
        .scan_rows(
            "runs",
            Some("job = 'optimize' AND status = 'done' AND dry_run = false"),
        )
        .await?;
    let window = chrono::Duration::seconds((every_days * 86_400.0) as i64);
    Ok(!runs.iter().any(|r| {
        r.params()["light"] != json!(true)
            && r.time_param("now")
                .is_some_and(|c| c <= now && now - c < window)
    }))
}

pub async fn run(app: &App, args: &NightlyArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    if let Some(unknown) = args.steps.iter().find(|s| !STEPS.contains(&s.as_str())) {
        bail!(
            "--steps: no step named '{unknown}' (steps, in order: {})",
            STEPS.join(", ")
        );
    }
    if !(args.optimize_every_days.is_finite() && args.optimize_every_days >= 0.0) {
        bail!("--optimize-every-days must be 0 or more");
    }
    let now = Clock::or_now(args.now).time();
    let clock = format_timestamp(now.timestamp_micros());
    let store = app.store().await?.clone();
    let users = users_predicate(&store, args).await?;
    let before = shape(&store, users.as_deref()).await?;
    let started = std::time::Instant::now();
    let mut outcomes: Vec<StepOutcome> = Vec::new();
    let mut worst = ExitStatus::Success;
    let mut stopped = false;
    for step in STEPS {
        let named = args.steps.iter().any(|s| s == step);
        if !args.steps.is_empty() && !named {
            continue;
        }
        let skip = |why: &str| StepOutcome {
            step: step.to_string(),
            status: "skipped".into(),
            run_id: None,
            duration_ms: 0,
            counts: BTreeMap::new(),
            note: Some(why.to_string()),
        };
        if stopped {
            outcomes.push(skip("an earlier step failed (--fail-fast)"));
            continue;
        }
        if *step == "optimize" && args.shard.is_some() {
            outcomes.push(skip(
                "optimize works on whole tables: run it once per store, not per shard",
            ));
            continue;
        }
        // Not due (and not named): the light merge of the day's small fragments instead.
        let light = *step == "optimize"
            && !named
            && !optimize_due(&store, now, args.optimize_every_days).await?;
        let mut argv = step_argv(step, args, &clock);
        if light {
            argv.push("--light".to_string());
        }
        let command = StepCli::try_parse_from(&argv)
            .map_err(|e| anyhow::anyhow!("step {step}: {e}"))?
            .job;
        let step_started = std::time::Instant::now();
        let mut outcome = match crate::jobs::run_report(app, &command).await {
            Ok(report) => {
                let status = report.exit_status();
                worst = worst.max(status);
                if status == ExitStatus::Error && args.fail_fast {
                    stopped = true;
                }
                outcome_of(step, &report, step_started.elapsed())
            }
            Err(e) => {
                worst = ExitStatus::Error;
                stopped = args.fail_fast;
                StepOutcome {
                    step: step.to_string(),
                    status: Status::Failed.as_str().into(),
                    run_id: None,
                    duration_ms: step_started.elapsed().as_millis() as u64,
                    counts: BTreeMap::new(),
                    note: Some(format!("{e:#}")),
                }
            }
        };
        if light && outcome.note.is_none() {
            outcome.note = Some(format!(
                "light: a full optimize ran within {} days; {} small fragments merged",
                args.optimize_every_days,
                outcome.counts.get("fragments_compacted").unwrap_or(&0)
            ));
        }
        if !app.json {
            writeln!(
                out,
                "{:<12} {:<8} {:>7} ms  {}",
                outcome.step,
                outcome.status,
                outcome.duration_ms,
                highlights(&outcome)
            )?;
            out.flush()?;
        }
        outcomes.push(outcome);
    }
    let after = shape(&store, users.as_deref()).await?;
    let status = match worst {
        ExitStatus::Success => "done",
        ExitStatus::Failure => "partial",
        ExitStatus::Error => "failed",
    };
    if app.json {
        let report = json!({
            "job": "nightly",
            "status": status,
            "now": clock,
            "dry_run": args.dry_run,
            "user": args.user,
            "shard": args.shard.map(|s| s.to_string()),
            "steps": outcomes,
            "before": before,
            "after": after,
            "duration_ms": started.elapsed().as_millis() as u64,
        });
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "nightly: {status} in {:.1} s at {clock}{}",
            started.elapsed().as_secs_f64(),
            if args.dry_run {
                " (dry run: nothing written)"
            } else {
                ""
            }
        )?;
        print_shapes(&before, &after, out)?;
        for o in outcomes.iter().filter(|o| o.status == "failed") {
            writeln!(
                out,
                "  {} failed: {}",
                o.step,
                o.note.as_deref().unwrap_or("see its run")
            )?;
        }
    }
    Ok(worst)
}

fn outcome_of(step: &str, report: &JobReport, took: std::time::Duration) -> StepOutcome {
    StepOutcome {
        step: step.to_string(),
        status: report.status.as_str().to_string(),
        run_id: report.run_id.clone(),
        duration_ms: took.as_millis() as u64,
        counts: report.counts.clone(),
        note: report.error.clone(),
    }
}

/// The counts a person reads first, per step.
fn highlights(o: &StepOutcome) -> String {
    if let Some(note) = &o.note {
        return note.clone();
    }
    let mut parts: Vec<String> = Vec::new();
    if o.step == "link" {
        let links: u64 = o
            .counts
            .iter()
            .filter(|(k, _)| k.starts_with("links_"))
            .map(|(_, v)| v)
            .sum();
        parts.push(format!("links {links}"));
    }
    let wanted: &[&str] = match o.step.as_str() {
        "embed" => &["embedded"],
        "entities" => &["entities_new", "mentions"],
        "scores" => &["processed", "archived", "promoted", "revived"],
        "link" => &["pairs_judged", "supersessions_chained"],
        "cluster" => &["clusters"],
        "consolidate" => &["consolidated", "memories_archived"],
        "refine" => &["split", "trimmed", "memories_created"],
        "sessions" => &["narratives", "memories_told"],
        "insights" => &["clusters_asked", "patterns"],
        "anchor" => &["anchors_updated", "drift_warnings", "drift_critical"],
        "distill" => &["facts_created", "episodes_archived"],
        "prune" => &["archived", "deleted"],
        "entity-gc" => &["archived", "merged", "deleted"],
        "describe" => &["described"],
        "optimize" => &["fragments_compacted", "versions_removed", "bytes_removed"],
        _ => &[],
    };
    parts.extend(
        wanted
            .iter()
            .filter_map(|k| o.counts.get(*k).map(|v| format!("{k} {v}"))),
    );
    parts.join(", ")
}

/// Before and after, side by side.
pub fn print_shapes(before: &Shape, after: &Shape, out: &mut dyn Write) -> std::io::Result<()> {
    let rows: [(&str, i64, i64); 10] = [
        ("live memories", before.live_memories, after.live_memories),
        (
            "consolidated memories",
            before.consolidated,
            after.consolidated,
        ),
        ("consolidations (all time)", before.folded, after.folded),
        ("superseded", before.superseded, after.superseded),
        ("archived", before.archived, after.archived),
        ("links", before.links, after.links),
        ("entities", before.entities, after.entities),
        ("hot", before.hot, after.hot),
        ("warm", before.warm, after.warm),
        ("cold", before.cold, after.cold),
    ];
    writeln!(
        out,
        "  {:<26} {:>8} {:>8} {:>8}",
        "", "before", "after", "change"
    )?;
    for (name, b, a) in rows {
        writeln!(out, "  {name:<26} {b:>8} {a:>8} {:>+8}", a - b)?;
    }
    Ok(())
}
