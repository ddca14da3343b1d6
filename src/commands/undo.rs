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

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use anyhow::{Result, anyhow, bail};
use serde_json::{Value, json};

use crate::app::App;
use crate::embedders::{Embedded, EmbedderArgs};
use crate::exit::ExitStatus;
use crate::jobs::integrate::undo_id;
use crate::jobs::{ItemFailure, JobReport, JobScope, RunLog};
use crate::model::encoding::format_timestamp;
use crate::model::schema::{AUDIT_LOG, REVIEW_QUEUE};
use crate::model::typed::{MemoryRow, RunRecord, memories_from_json};
use crate::store::audit::AuditRow;
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

/// Whether two versions of a memory agree in the columns a later run's change shows in:
/// text, update time, validity, chain, archival and what it consolidates.
fn same(a: &MemoryRow, b: &MemoryRow) -> bool {
    let watched = |m: &MemoryRow| {
        (
            m.text.clone(),
            m.updated_at,
            m.valid_until,
            m.superseded_by.clone(),
            m.supersession_chain_id.clone(),
            m.archived_at,
            m.consolidates_memory_ids.clone(),
        )
    };
    watched(a) == watched(b)
}

/// An audit row of a decision the run applied, as undo reads it.
#[derive(serde::Deserialize)]
struct Decision {
    id: String,
    user_id: Option<String>,
    operation: String,
    target_id: Option<String>,
    before_state: Option<String>,
    after_state: Option<String>,
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

/// What an integrate or review run's decisions wrote, read from their audit rows: the
/// memories as the run left them, the ones it changed as they were before, the ones it
/// created, its links and the review items it queued.
#[derive(Default)]
struct Written {
    memories: BTreeMap<String, MemoryRow>,
    restore: BTreeMap<String, MemoryRow>,
    created: BTreeSet<String>,
    links: Vec<(String, String, String)>,
    queued: Vec<String>,
}

/// Reads the decisions' logged rows (`(dim, now)` as the table's defaults need them).
fn written_by(decisions: &[Decision], (dim, now): (usize, i64)) -> Result<Written> {
    let mut w = Written::default();
    let memories = |values: &[Value], d: &Decision| {
        memories_from_json(values, dim, now)
            .map_err(|e| anyhow!("audit row {} holds a memory that does not read: {e}", d.id))
    };
    for d in decisions {
        let after: Value = serde_json::from_str(d.after_state.as_deref().unwrap_or("{}"))?;
        let before: Option<Value> = d
            .before_state
            .as_deref()
            .and_then(|b| serde_json::from_str::<Value>(b).ok())
            .filter(Value::is_object);
        let before_id = before.as_ref().and_then(|b| b["id"].as_str());
        let objects: Vec<Value> = after["memories"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m.is_object())
            .cloned()
            .collect();
        for m in memories(&objects, d)? {
            let id = m.id.clone();
            w.memories.insert(id.clone(), m);
            match &before {
                // The memory the decision changed: its row as it was before.
                Some(b) if before_id == Some(id.as_str()) => {
                    let was = memories(std::slice::from_ref(b), d)?;
                    w.restore.extend(was.into_iter().map(|r| (id.clone(), r)));
                }
                _ => {
                    w.created.insert(id);
                }
            }
        }
        for l in after["links"].as_array().into_iter().flatten() {
            w.links.push((
                l["source_id"].as_str().unwrap_or("").to_string(),
                l["target_id"].as_str().unwrap_or("").to_string(),
                l["link_type"].as_str().unwrap_or("").to_string(),
            ));
        }
        if let Some(id) = after["review"]["id"].as_str() {
            w.queued.push(id.to_string());
        }
    }
    Ok(w)
}

/// What later runs changed of what run `run_id` wrote (`current`: the written memories as
/// they are now): each one a reason to refuse the whole undo.
async fn conflicts(
    store: &Store,
    run_id: &str,
    w: &Written,
    current: &BTreeMap<String, MemoryRow>,
) -> Result<Vec<String>> {
    let mut conflicts: Vec<String> = Vec::new();
    for (id, after) in &w.memories {
        match current.get(id) {
            // Already deleted by a killed undo of this run.
            None if w.created.contains(id) => {}
            None => conflicts.push(format!("memory {id} no longer exists")),
            Some(now) if same(now, after) => {}
            Some(now) if w.restore.get(id).is_some_and(|b| same(now, b)) => {} // restored already
            Some(_) => conflicts.push(format!(
                "memory {id} changed after run {run_id} (a later run rewrote it)"
            )),
        }
    }
    if !w.created.is_empty() {
        let list = sql_list(&w.created.iter().cloned().collect::<Vec<_>>());
        let own: BTreeSet<&(String, String, String)> = w.links.iter().collect();
        #[derive(serde::Deserialize)]
        struct LinkKey {
            source_id: String,
            target_id: String,
            link_type: String,
        }
        let filter = format!("source_id IN ({list}) OR target_id IN ({list})");
        for l in store.scan_rows::<LinkKey>("links", Some(&filter)).await? {
            let key = (l.source_id, l.target_id, l.link_type);
            if !own.contains(&key) {
                conflicts.push(format!(
                    "link {} -> {} ({}) was made by a later run to a memory run {run_id} created",
                    key.0, key.1, key.2
                ));
            }
        }
    }
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
            conflicts.push(format!(
                "review item {} was {} by run {} since: undo that run first",
                r.id,
                r.status,
                r.decided_by_run.unwrap_or_default()
            ));
        }
    }
    Ok(conflicts)
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
        .scan_rows::<Decision>(
            AUDIT_LOG.name,
            Some(&format!(
                "run_id = {} AND operation IN ('ADD', 'UPDATE', 'SUPERSEDE', 'MERGE', 'REVIEW')",
                sql_string(&run_id_text)
            )),
        )
        .await?;
    let now = ctx.now.timestamp_micros();
    let written = written_by(&decisions, (store.embedding_dim(), now))?;
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
    let audit: Vec<AuditRow> = decisions
        .iter()
        .map(|d| {
            let target = d.target_id.clone().unwrap_or_default();
            let mut row = AuditRow::new(log.run_id(), "UNDO", "", now);
            row.id = undo_id(&d.id);
            row.user_id = d.user_id.clone();
            row.source_ids = vec![d.id.clone()];
            row.target_id = Some(target.clone());
            row.classification = Some(format!("REVERTED {}", d.operation));
            row.before_state = current.get(&target).map(|r| r.to_json().to_string());
            row.after_state = written
                .restore
                .get(&target)
                .map(|r| r.to_json().to_string());
            row.reasoning = Some(format!("undo of run {}", run_id_text));
            row
        })
        .collect();
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
