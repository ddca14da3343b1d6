//! `memlife prune`: seed 004's memory pruner. Decayed, unemotional, unused, old memories that
//! no rule protects are archived (a narrative's episodes and other provenance) or deleted
//! (everything else); the rules are `logic::prune`'s. Nothing is lost beyond recovery: every
//! memory to delete is first written, with its links, entity rows and the entities they name,
//! to Parquet files in the archive folder (`memlife import` brings them back; entities with
//! `--keep-existing`), then logged (a PRUNE audit row per
//! memory, with the row as it was and the export file), and only then deleted.
//!
//! Writes, each one Lance commit: the audit rows, the archivals, the deleted memories' links,
//! entity rows and scans, then the memories last. A run killed at any point leaves every
//! table readable; the next run plans again from what is there and finishes (a memory
//! exported twice is the same row in two files). `--dry-run` lists what would be archived and
//! deleted and changes nothing. With `[prune] trigger_rows` or `trigger_bytes` (or the
//! flags), the run prunes only when `memories` has grown past either.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use futures::TryStreamExt;
use serde_json::json;

use super::{Job, JobCtx, JobName, JobReport, JobScope, RunLog};
use crate::formats::{BatchWriter, Format};
use crate::logic::prune::{PrunePlan, PruneRow, plan_prune, storage_triggered};
use crate::model::clock::Clock;
use crate::model::schema::{
    ENTITIES, ENTITY_SCANS, LINKS, MEMORIES, MEMORY_ENTITIES, REVIEW_QUEUE,
};
use crate::model::typed::MemoryRow;
use crate::store::audit::AuditRow;
use crate::store::{Store, sql_list, sql_timestamp};

/// Archive or delete decayed memories no keep rule protects (seed 004), deleted ones exported
/// to Parquet first.
#[derive(clap::Args, Debug, Clone)]
pub struct PruneArgs {
    /// Where deleted memories are exported before they go (default: `[prune] archive_dir`,
    /// else a folder `<db>.prune-archive` beside a local store).
    #[arg(long)]
    pub archive_dir: Option<PathBuf>,
    /// Prune only when `memories` holds more rows than this (default: `[prune] trigger_rows`).
    #[arg(long)]
    pub when_rows: Option<u64>,
    /// Prune only when `memories` holds more bytes than this (default: `[prune] trigger_bytes`).
    #[arg(long)]
    pub when_bytes: Option<u64>,
    /// The clock the run computes at (RFC 3339); default the current time.
    #[arg(long)]
    pub now: Option<Clock>,
    #[command(flatten)]
    pub scope: JobScope,
}

impl Job for PruneArgs {
    fn scope(&self) -> &JobScope {
        &self.scope
    }

    fn clock(&self) -> Option<Clock> {
        self.now
    }
}

/// The export folder: the flag, the configuration, or one beside a local store.
fn archive_dir(ctx: &JobCtx<'_>, args: &PruneArgs, configured: Option<&str>) -> Result<PathBuf> {
    if let Some(dir) = &args.archive_dir {
        return Ok(dir.clone());
    }
    if let Some(dir) = configured {
        return Ok(PathBuf::from(dir));
    }
    let db = ctx.app.db.trim_end_matches('/');
    if db.contains("://") {
        bail!(
            "the store {db} is not a local folder: give prune an export folder (--archive-dir, \
             or [prune] archive_dir in memlife.toml) for the memories it deletes"
        );
    }
    Ok(PathBuf::from(format!("{db}.prune-archive")))
}

/// Writes `table`'s rows matching `filter_of(chunk)` for every chunk of `ids` to one Parquet
/// file in `dir`, through a temporary name renamed when complete; how many rows.
async fn export(
    store: &Store,
    (dir, stem): (&Path, &str),
    table: &str,
    ids: &[String],
    filter_of: impl Fn(&str) -> String,
) -> Result<(PathBuf, u64)> {
    let path = dir.join(format!("{stem}.{table}.parquet"));
    let partial = dir.join(format!("{stem}.{table}.parquet.partial"));
    let file = std::fs::File::create(&partial)
        .with_context(|| format!("cannot write the export file {}", partial.display()))?;
    let mut writer: Option<BatchWriter<std::fs::File>> = None;
    let mut rows = 0u64;
    for chunk in ids.chunks(1000) {
        let filter = filter_of(&sql_list(chunk));
        let (schema, mut stream) = store.scan_stream(table, Some(&filter)).await?;
        if writer.is_none() {
            writer = Some(BatchWriter::new(
                Format::Parquet,
                file.try_clone()?,
                schema,
            )?);
        }
        while let Some(batch) = stream.try_next().await? {
            rows += batch.num_rows() as u64;
            if let Some(w) = writer.as_mut() {
                w.write(&batch)?;
            }
        }
    }
    if let Some(w) = writer {
        w.finish()?.sync_all()?;
    }
    std::fs::rename(&partial, &path)
        .with_context(|| format!("cannot rename {} into place", partial.display()))?;
    Ok((path, rows))
}

/// The deleted memories, their links, entity rows and the entities those name, exported; the
/// memories' file.
async fn export_all(store: &Store, dir: &Path, run_id: &str, ids: &[String]) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the export folder {}", dir.display()))?;
    let stem = format!("prune-{run_id}");
    let at = (dir, stem.as_str());
    let (memories, rows) =
        export(store, at, MEMORIES.name, ids, |l| format!("id IN ({l})")).await?;
    if rows < ids.len() as u64 {
        bail!(
            "exported {rows} of {} memories to {}: nothing was deleted",
            ids.len(),
            memories.display()
        );
    }
    let touching = |l: &str| format!("source_id IN ({l}) OR target_id IN ({l})");
    export(store, at, LINKS.name, ids, touching).await?;
    let of_memory = |l: &str| format!("memory_id IN ({l})");
    export(store, at, MEMORY_ENTITIES.name, ids, of_memory).await?;
    // The entities those rows name: entity-gc may delete one once its last memory is gone,
    // and a restored entity row needs its entity back (`import --keep-existing` leaves the
    // ones still there as they are).
    let mut entities = BTreeSet::new();
    for chunk in ids.chunks(1000) {
        let filter = of_memory(&sql_list(chunk));
        #[derive(serde::Deserialize)]
        struct Named {
            entity_id: String,
        }
        let rows = store
            .scan_rows::<Named>(MEMORY_ENTITIES.name, Some(&filter))
            .await?;
        entities.extend(rows.into_iter().map(|r| r.entity_id));
    }
    let entities: Vec<String> = entities.into_iter().collect();
    if !entities.is_empty() {
        export(store, at, ENTITIES.name, &entities, |l| {
            format!("id IN ({l})")
        })
        .await?;
    }
    Ok(memories)
}

/// One PRUNE audit row per archived or deleted memory, with the row as it was (and, for a
/// deletion, the file it was exported to).
async fn audit_rows(
    store: &Store,
    run_id: &str,
    plan: &PrunePlan,
    export: Option<&Path>,
    now: i64,
) -> Result<Vec<AuditRow>> {
    let mut out = Vec::new();
    for (class, ids) in [("ARCHIVE", &plan.archive), ("DELETE", &plan.delete)] {
        for chunk in ids.chunks(5000) {
            for row in store
                .rows_with_ids::<MemoryRow>(MEMORIES.name, chunk, None)
                .await?
            {
                // Keyed by what is decided, not by the run: a killed run's rows are its
                // rerun's (same clock), so the log holds each decision once.
                let key = format!("{class}|{}|{now}", row.id);
                let mut audit = AuditRow::new(run_id, "PRUNE", &key, now);
                audit.user_id = Some(row.user_id.clone());
                audit.target_id = Some(row.id.clone());
                audit.classification = Some(class.into());
                audit.before_state = Some(row.to_json().to_string());
                if class == "DELETE" {
                    let file = export.map(|p| p.display().to_string());
                    audit.after_state = Some(json!({"export": file}).to_string());
                }
                audit.reasoning = Some(plan.reasons.get(&row.id).copied().unwrap_or("").into());
                out.push(audit);
            }
        }
    }
    Ok(out)
}

/// Archives, unlinks and deletes as the plan says, each step one commit (see the module).
async fn apply(store: &Store, plan: &PrunePlan, now: i64) -> Result<()> {
    for chunk in plan.archive.chunks(5000) {
        store
            .update_where(
                MEMORIES.name,
                &format!("id IN ({}) AND archived_at IS NULL", sql_list(chunk)),
                &[
                    ("state", "'archived'".to_string()),
                    ("tier", "'archived'".to_string()),
                    // A new input to `scores` (a kept-forever memory revives at once).
                    ("scores_due_at", "NULL".to_string()),
                    ("archived_at", sql_timestamp(now)),
                    ("updated_at", sql_timestamp(now)),
                ],
            )
            .await?;
    }
    crate::crash::point("prune.after-archive");
    for chunk in plan.delete.chunks(5000) {
        let l = sql_list(chunk);
        let links = format!("source_id IN ({l}) OR target_id IN ({l})");
        store.delete_where(LINKS.name, &links).await?;
        let rows = format!("memory_id IN ({l})");
        store.delete_where(MEMORY_ENTITIES.name, &rows).await?;
        store.delete_where(ENTITY_SCANS.name, &rows).await?;
    }
    crate::crash::point("prune.after-unlink");
    for chunk in plan.delete.chunks(5000) {
        let filter = format!("id IN ({})", sql_list(chunk));
        store.delete_where(MEMORIES.name, &filter).await?;
    }
    Ok(())
}

/// Memories a pending review item waits on.
async fn under_review(ctx: &JobCtx<'_>) -> Result<BTreeSet<String>> {
    #[derive(serde::Deserialize)]
    struct Pending {
        candidate_id: String,
    }
    let filter = ctx.user_filter_and("status = 'pending'");
    let rows = ctx
        .store
        .scan_rows::<Pending>(REVIEW_QUEUE.name, Some(&filter))
        .await?;
    Ok(rows.into_iter().map(|r| r.candidate_id).collect())
}

pub async fn run(ctx: &JobCtx<'_>, args: &PruneArgs) -> Result<JobReport> {
    let config = ctx.app.config().await?;
    let p = &config.prune;
    let now = ctx.now.timestamp_micros();
    let trigger = (
        args.when_rows.or(p.trigger_rows),
        args.when_bytes.or(p.trigger_bytes),
    );
    let params = json!({"prune": p, "trigger_rows": trigger.0, "trigger_bytes": trigger.1});
    let log = RunLog::start(ctx, JobName::Prune.as_str(), &params).await?;
    let mut report = JobReport::new(JobName::Prune.as_str(), ctx);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    if trigger != (None, None) {
        let storage = ctx.store.table_storage(MEMORIES.name).await?;
        let size = (storage.rows as u64, storage.bytes);
        if !storage_triggered(size, trigger) {
            report.notes.push(format!(
                "memories holds {} rows and {} bytes, within the trigger: nothing pruned",
                size.0, size.1
            ));
            log.finish(ctx, &mut report).await?;
            return Ok(report);
        }
    }
    let rows = ctx
        .store
        .scan_rows::<PruneRow>(MEMORIES.name, ctx.user_filter().as_deref())
        .await?;
    let review = under_review(ctx).await?;
    let review: BTreeSet<&str> = review.iter().map(String::as_str).collect();
    let plan = plan_prune(&rows, &review, p, now);
    counts.insert("memories".into(), rows.len() as u64);
    for (rule, n) in &plan.rules {
        counts.insert(format!("rule_{rule}"), *n);
    }
    counts.insert("archived".into(), plan.archive.len() as u64);
    counts.insert("deleted".into(), plan.delete.len() as u64);
    if ctx.dry_run {
        for (verb, ids) in [("archive", &plan.archive), ("delete", &plan.delete)] {
            for id in ids {
                let rule = plan.reasons.get(id).copied().unwrap_or("");
                report.notes.push(format!("would {verb} {id} ({rule})"));
            }
        }
    } else if !plan.archive.is_empty() || !plan.delete.is_empty() {
        let dir = archive_dir(ctx, args, p.archive_dir.as_deref())?;
        let export = match plan.delete.is_empty() {
            true => None,
            false => Some(export_all(&ctx.store, &dir, log.run_id(), &plan.delete).await?),
        };
        crate::crash::point("prune.after-export");
        let audit = audit_rows(&ctx.store, log.run_id(), &plan, export.as_deref(), now).await?;
        ctx.store.write_audit(&audit).await?;
        crate::crash::point("prune.after-audit");
        apply(&ctx.store, &plan, now).await?;
        if let Some(file) = export {
            report.notes.push(format!(
                "{} memories exported to {} before deletion (`memlife import` restores them)",
                plan.delete.len(),
                file.display()
            ));
        }
    }
    report.counts = counts;
    log.finish(ctx, &mut report).await?;
    Ok(report)
}
