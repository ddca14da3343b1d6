//! `memlife undo RUN_ID`: reverts an `integrate` or `review` run from its audit rows. Every
//! decision the run applied holds the memories it wrote (`after_state`) and the memory it
//! changed as it was (`before_state`): memories the run created are deleted, the ones it
//! changed get their earlier row back (re-embedded from the restored text by the same model),
//! its links are removed, review items it queued are dropped and the ones it decided are
//! pending again. A later run that changed the same rows (a memory's text, validity, chain,
//! archival or timestamps differ from what the run wrote; a link another run made to a
//! memory the run created; a queued item decided since) makes undo refuse and name them,
//! changing nothing. An `UNDO` audit row per reverted decision is written before anything is
//! changed; undo is idempotent, so a killed undo is finished by running it again, and an
//! undone fact is integrated again by the next `integrate` of its file.
//!
//! Runs of every other job are reverted from the tables' versions (`undo_versions`).

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{Result, anyhow, bail};
use serde_json::{Value, json};

use crate::app::App;
use crate::embedders::{Embedded, EmbedderArgs};
use crate::exit::ExitStatus;
use crate::jobs::{ItemFailure, JobReport, JobScope, RunLog};
use crate::logic::undo::{self, DecidedItem, LinkKey, LoggedDecision, Written};
use crate::model::encoding::format_timestamp;
use crate::model::schema::{AUDIT_LOG, REVIEW_QUEUE};
use crate::model::typed::{MemoryRow, RunRecord, memories_from_json};
use crate::store::{Store, sql_list, sql_string};

const JOB: &str = "undo";

#[derive(clap::Args, Debug, Clone)]
pub struct UndoArgs {
    /// The run to revert (`memlife sql --file sql/last_runs.sql` lists runs).
    #[arg(required_unless_present = "last")]
    pub run_id: Option<String>,
    /// Revert the latest finished run of this job instead of naming it.
    #[arg(long, conflicts_with = "run_id")]
    pub last: Option<String>,
    /// Show what would be reverted, write nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
}

/// The run `undo` names: by id, or the latest finished run of `--last JOB`.
async fn run_to_undo(store: &Store, args: &UndoArgs) -> Result<String> {
    Ok(match (&args.run_id, &args.last) {
        (Some(id), _) => id.clone(),
        (None, Some(job)) => {
            #[derive(serde::Deserialize)]
            struct Started {
                run_id: String,
                started_at: i64,
            }
            let filter = format!(
                "job = {} AND dry_run = false AND status <> 'running'",
                sql_string(job)
            );
            let runs = store.scan_rows::<Started>("runs", Some(&filter)).await?;
            match runs.into_iter().max_by_key(|r| r.started_at) {
                Some(r) => r.run_id,
                None => bail!("no {job} run to undo"),
            }
        }
        (None, None) => bail!("name a run, or --last JOB"),
    })
}

/// What later runs changed of what run `run_id` wrote (`current`: the written memories as
/// they are now; `logic::undo::conflicts`): each one a reason to refuse the whole undo.
async fn conflicts(
    store: &Store,
    run_id: &str,
    w: &Written,
    current: &BTreeMap<String, MemoryRow>,
) -> Result<Vec<String>> {
    let mut links: Vec<LinkKey> = Vec::new();
    if !w.created.is_empty() {
        let list = sql_list(&w.created.iter().cloned().collect::<Vec<_>>());
        #[derive(serde::Deserialize)]
        struct Link {
            source_id: String,
            target_id: String,
            link_type: String,
        }
        let filter = format!("source_id IN ({list}) OR target_id IN ({list})");
        for l in store.scan_rows::<Link>("links", Some(&filter)).await? {
            links.push((l.source_id, l.target_id, l.link_type));
        }
    }
    let mut decided: Vec<DecidedItem> = Vec::new();
    if !w.queued.is_empty() {
        #[derive(serde::Deserialize)]
        struct Decided {
            id: String,
            status: String,
            decided_by_run: Option<String>,
        }
        let filter = format!("id IN ({}) AND status <> 'pending'", sql_list(&w.queued));
        for r in store
            .scan_rows::<Decided>(REVIEW_QUEUE.name, Some(&filter))
            .await?
        {
            decided.push((r.id, r.status, r.decided_by_run));
        }
    }
    Ok(undo::conflicts(run_id, w, current, &links, &decided))
}

/// The changed memories' earlier rows, re-embedded from their text by the model that embedded
/// them (refused when this embedder is another), in one commit.
async fn restore_rows(
    app: &App,
    store: &Store,
    args: &UndoArgs,
    restore: &BTreeMap<String, MemoryRow>,
    now: i64,
) -> Result<()> {
    let dim = store.embedding_dim();
    let embedder = app.embedder(&args.embedder, dim, 16).await?;
    let model = embedder.model_name();
    let (mut rows, mut vectors) = (Vec::new(), Vec::new());
    let refs: Vec<&str> = restore.values().map(|r| r.text.as_str()).collect();
    for ((id, before), e) in restore.iter().zip(embedder.embed(&refs).await?) {
        let wanted = before.embedding_model.as_deref().unwrap_or("");
        if !wanted.is_empty() && wanted != model {
            bail!(
                "memory {id} was embedded by {wanted}: run undo with the embedder of that model (this one is {model})"
            );
        }
        let Embedded::Vector { values, .. } = e else {
            return Err(anyhow!("the embedder refused memory {id}'s text"));
        };
        rows.push(MemoryRow {
            embedding_model: Some(model.to_string()),
            link_mark: None,
            entity_mark: None,
            scores_due_at: None,
            ..before.clone()
        });
        vectors.push(Some(values));
    }
    store.upsert_memories(&rows, &vectors, now).await?;
    Ok(())
}

/// Reverts what `w` says the run wrote, each step one commit, in an order a rerun finishes:
/// what later jobs derived from created memories, links, review items, restored rows, and
/// the created memories last.
async fn revert(
    app: &App,
    store: &Store,
    args: &UndoArgs,
    run_id: &str,
    w: &Written,
    reopen: bool,
    now: i64,
) -> Result<()> {
    // What later jobs derived from the memories this run created (entities rebuild it).
    let created = sql_list(&w.created.iter().cloned().collect::<Vec<_>>());
    if !w.created.is_empty() {
        store
            .delete_where("memory_entities", &format!("memory_id IN ({created})"))
            .await?;
        store
            .delete_where("entity_scans", &format!("memory_id IN ({created})"))
            .await?;
    }
    let keys: Vec<(&str, &str, &str)> = w
        .links
        .iter()
        .map(|(s, t, ty)| (s.as_str(), t.as_str(), ty.as_str()))
        .collect();
    store.delete_links(&keys).await?;
    if !w.queued.is_empty() {
        store
            .delete_where(
                REVIEW_QUEUE.name,
                &format!("id IN ({}) AND status = 'pending'", sql_list(&w.queued)),
            )
            .await?;
    }
    if reopen {
        store
            .update_where(
                REVIEW_QUEUE.name,
                &format!("decided_by_run = {}", sql_string(run_id)),
                &[
                    ("status", "'pending'".into()),
                    ("decided_at", "NULL".into()),
                    ("decided_by_run", "NULL".into()),
                ],
            )
            .await?;
    }
    crate::crash::point("undo.after-links");
    if !w.restore.is_empty() {
        restore_rows(app, store, args, &w.restore, now).await?;
    }
    crate::crash::point("undo.after-restore");
    if !w.created.is_empty() {
        store
            .delete_where("memories", &format!("id IN ({created})"))
            .await?;
    }
    Ok(())
}

pub async fn run(app: &App, args: &UndoArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    let scope = JobScope {
        dry_run: args.dry_run,
        ..JobScope::default()
    };
    let ctx = app.job_ctx(&scope, None).await?;
    let store = &ctx.store;
    let run_id_text = run_to_undo(store, args).await?;
    let runs = store
        .scan_rows::<RunRecord>(
            "runs",
            Some(&format!("run_id = {}", sql_string(&run_id_text))),
        )
        .await?;
    let Some(target) = runs.first() else {
        bail!(
            "no run with id '{}' (see `memlife sql --file sql/last_runs.sql`)",
            run_id_text
        );
    };
    let job = target.job.clone();
    if !matches!(job.as_str(), "integrate" | "review") {
        // Other jobs: from the tables' versions (`undo_versions`).
        let mut report = JobReport::new(JOB, &ctx);
        super::undo_versions::undo(&ctx, target, args.dry_run, &mut report).await?;
        report.print(app.json, out)?;
        return Ok(report.exit_status());
    }
    let decisions = store
        .scan_rows::<LoggedDecision>(
            AUDIT_LOG.name,
            Some(&format!(
                "run_id = {} AND operation IN ('ADD', 'UPDATE', 'SUPERSEDE', 'MERGE', 'REVIEW')",
                sql_string(&run_id_text)
            )),
        )
        .await?;
    let now = ctx.now.timestamp_micros();
    let dim = store.embedding_dim();
    let read = |values: &[Value]| memories_from_json(values, dim, now).map_err(|e| e.to_string());
    let written = undo::written_by(&decisions, read).map_err(|e| anyhow!(e))?;
    let decided = store
        .count_rows(
            REVIEW_QUEUE.name,
            Some(&format!("decided_by_run = {}", sql_string(&run_id_text))),
        )
        .await?;

    // Refuse when a later run changed what this one wrote.
    let ids: Vec<String> = written.memories.keys().cloned().collect();
    let current: BTreeMap<String, MemoryRow> = store
        .memories_with_ids(&ids, None, false)
        .await?
        .0
        .into_iter()
        .map(|r| (r.id.clone(), r))
        .collect();
    let conflicts = conflicts(store, &run_id_text, &written, &current).await?;
    let mut report = JobReport::new(JOB, &ctx);
    if !conflicts.is_empty() {
        report.status = crate::jobs::Status::Failed;
        report.error = Some(format!(
            "run {} cannot be undone: {} rows were changed by later runs; nothing was changed",
            run_id_text,
            conflicts.len()
        ));
        report.failures = conflicts
            .into_iter()
            .map(|c| ItemFailure {
                item: run_id_text.clone(),
                reason: c,
            })
            .collect();
        report.print(app.json, out)?;
        return Ok(report.exit_status());
    }
    report.count("decisions", decisions.len() as u64);
    report.count("memories_deleted", written.created.len() as u64);
    report.count("memories_restored", written.restore.len() as u64);
    report.count("links_removed", written.links.len() as u64);
    report.count("reviews_removed", written.queued.len() as u64);
    report.count("reviews_reopened", decided as u64);
    if args.dry_run {
        report.print(app.json, out)?;
        return Ok(report.exit_status());
    }
    let log = RunLog::start(&ctx, JOB, &json!({"undo": run_id_text})).await?;
    // The log first: one UNDO row per decision, with the rows as they are now.
    let ids = (log.run_id(), run_id_text.as_str());
    let audit = undo::undo_rows(ids, &decisions, &written, &current, now);
    store.write_audit(&audit).await?;
    crate::crash::point("undo.after-audit");
    revert(app, store, args, &run_id_text, &written, decided > 0, now).await?;
    report.notes.push(format!(
        "run {} undone ({} at {})",
        run_id_text,
        job,
        format_timestamp(now)
    ));
    log.finish(&ctx, &mut report).await?;
    report.print(app.json, out)?;
    Ok(report.exit_status())
}
