//! `memlife undo` for runs of every job other than integrate and review: from the tables'
//! own versions. Each run records the version of every table when it started and when it
//! finished (`runs.table_versions`); Lance keeps every version until `memlife optimize`
//! removes those older than the retention window (`[retention] keep_versions_days`), so the rows a run wrote are the difference between the two, key by key: rows it added,
//! rows it removed, rows it changed. Undo deletes the added rows and writes back the removed
//! and changed rows as they were, every column included (embeddings too, so nothing is
//! re-embedded), one commit per table.
//!
//! It refuses, changing nothing, when
//! - a later run changed a row the run wrote (the row is no longer as the run left it), and
//!   names the row;
//! - another run wrote the same table while the run ran (the versions in between are not the
//!   run's alone), and names it;
//! - the versions it would diff are gone (older than the retention window), naming the window;
//! - the run is an `optimize` (it changes how rows are stored, not the rows);
//! - the run did not finish (a killed run has no `after` versions: its next run finishes the
//!   work, or `memlife check` names what it left), or predates version records (schema 8).
//!
//! The reverted tables are the store's data: memories, links, entities, memory_entities,
//! clusters, entity_scans, review_queue. `runs`, `audit_log` and `llm_batches` are logs and
//! stay as they are: the run's audit rows still tell what it did, and one `UNDO` row per table
//! (written before anything is reverted) tells what undo did, with the keys it deleted and
//! restored. A row already back as it was before the run counts as reverted, so an undo killed
//! half-way is finished by running it again; an undo of a run already undone does nothing.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Result, anyhow, bail};
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::DataType;
use datafusion::common::hash_utils::{RandomState, create_hashes};
use serde_json::{Value, json};

use crate::jobs::{ItemFailure, JobCtx, JobReport, RunLog, Status};
use crate::model::schema::{REVERTIBLE, TableSpec};
use crate::model::typed::{RunRecord, rows_of};
use crate::store::audit::{AuditRow, derived_id};
use crate::store::{Store, sql_string};

type Key = Vec<String>;

/// What a run did to one table, key by key.
#[derive(Default, Debug)]
struct TableDiff {
    added: Vec<Key>,
    removed: Vec<Key>,
    changed: Vec<Key>,
}

impl TableDiff {
    fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// A run's `table_versions`: before and after, per table.
pub struct Versions {
    before: BTreeMap<String, u64>,
    after: Option<BTreeMap<String, u64>>,
}

pub fn versions_of(run: &RunRecord) -> Option<Versions> {
    let v: Value = serde_json::from_str(run.table_versions.as_deref()?).ok()?;
    let map = |x: &Value| -> Option<BTreeMap<String, u64>> {
        x.as_object().map(|o| {
            o.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
                .collect()
        })
    };
    Some(Versions {
        before: map(&v["before"])?,
        after: map(&v["after"]),
    })
}

fn columns(spec: &TableSpec) -> Vec<&'static str> {
    spec.fields.iter().map(|f| f.name).collect()
}

/// The SQL predicate that selects `keys` of `spec`.
fn key_predicate(spec: &TableSpec, keys: &[Key]) -> String {
    keys.iter()
        .map(|k| {
            let parts: Vec<String> = spec
                .key
                .iter()
                .zip(k)
                .map(|(c, v)| format!("{c} = {}", sql_string(v)))
                .collect();
            format!("({})", parts.join(" AND "))
        })
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// The key columns of a batch, as text.
fn key_columns(batch: &RecordBatch, spec: &TableSpec) -> Result<Vec<ArrayRef>> {
    spec.key
        .iter()
        .map(|k| {
            let col = batch
                .column_by_name(k)
                .ok_or_else(|| anyhow!("{}: no key column {k}", spec.name))?;
            Ok(arrow::compute::cast(col, &DataType::Utf8)?)
        })
        .collect()
}

fn key_at(keys: &[ArrayRef], row: usize) -> Key {
    keys.iter()
        .map(|a| {
            let s = a.as_string::<i32>();
            if s.is_null(row) {
                String::new()
            } else {
                s.value(row).to_string()
            }
        })
        .collect()
}

/// Each row's key and a hash of all its `columns` (in that order, as present).
fn hashed(batches: &[RecordBatch], spec: &TableSpec) -> Result<BTreeMap<Key, u64>> {
    let state = RandomState::default();
    let mut out = BTreeMap::new();
    for batch in batches {
        if batch.num_rows() == 0 {
            continue;
        }
        let arrays: Vec<ArrayRef> = batch.columns().to_vec();
        let mut hashes = vec![0u64; batch.num_rows()];
        create_hashes(arrays.iter().map(|a| a.as_ref()), &state, &mut hashes)?;
        let keys = key_columns(batch, spec)?;
        for (row, hash) in hashes.iter().enumerate() {
            out.insert(key_at(&keys, row), *hash);
        }
    }
    Ok(out)
}

/// Columns every one of the versions has, so their hashes compare.
async fn common_columns(
    store: &Store,
    spec: &TableSpec,
    versions: &[u64],
) -> Result<Vec<&'static str>> {
    let mut cols = columns(spec);
    for &v in versions {
        let present = store.columns_at(spec.name, v).await?;
        cols.retain(|c| present.iter().any(|p| p == c));
    }
    Ok(cols)
}

async fn read_hashes(
    store: &Store,
    spec: &TableSpec,
    version: Option<u64>,
    filter: Option<&str>,
    cols: &[&str],
) -> Result<BTreeMap<Key, u64>> {
    let batches = match version {
        Some(v) => store.scan_at(spec.name, v, filter, cols).await?,
        None => store.scan_columns(spec.name, filter, cols).await?,
    };
    hashed(&batches, spec)
}

/// The rows of `keys` as they were at `version`: one scan, filtered here (a run may have
/// touched every row).
async fn rows_at(
    store: &Store,
    spec: &TableSpec,
    version: u64,
    keys: &BTreeSet<Key>,
    cols: &[&str],
) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    for batch in store.scan_at(spec.name, version, None, cols).await? {
        let key_cols = key_columns(&batch, spec)?;
        let mask: arrow::array::BooleanArray = (0..batch.num_rows())
            .map(|row| Some(keys.contains(&key_at(&key_cols, row))))
            .collect();
        let kept = arrow::compute::filter_record_batch(&batch, &mask)?;
        if kept.num_rows() > 0 {
            out.push(kept);
        }
    }
    Ok(out)
}

fn key_text(k: &Key) -> String {
    k.join(" / ")
}

/// What undo found for one table: the diff and, per touched key, whether it is still as the
/// run left it, already back as it was, or changed since.
struct UndoPlan {
    spec: &'static TableSpec,
    before: u64,
    diff: TableDiff,
    /// Keys still to revert (not already back as they were).
    delete: Vec<Key>,
    restore: Vec<Key>,
}

/// Reverts `run` (a finished run of a job other than integrate and review).
/// Integrate decisions run `run_id` applied (a `batches poll` of integrate batches): they are
/// undone from their audit rows, by their integrate run, so each such run is a conflict
/// here (a version undo would leave the decisions standing and their facts in no table).
/// They are told by the decision rows `audit_log` gained while the run ran, from its versions,
/// which `optimize` keeps only `[retention] keep_log_versions_days`: once they are gone, a
/// poll is refused (nothing tells what it applied), and any other run has none to find
/// (only integrate and a poll of its batches write decision rows).
async fn applied_decisions(
    store: &Store,
    run_id: &str,
    job: &str,
    versions: &Versions,
    after: &BTreeMap<String, u64>,
) -> Result<Vec<String>> {
    let mut conflicts = Vec::new();
    if let (Some(&b), Some(&a)) = (versions.before.get("audit_log"), after.get("audit_log"))
        && a > b
    {
        for v in [b, a] {
            if store.has_version("audit_log", v).await? {
                continue;
            }
            if job != super::batches::POLL {
                return Ok(conflicts);
            }
            bail!(
                "run {run_id} ({job}) can no longer be undone: version {v} of table audit_log, \
                 which tells the integrate decisions it applied, is gone. `memlife optimize` \
                 keeps the logs' versions for [retention] keep_log_versions_days; this run is \
                 older than that"
            );
        }
        let decisions = "operation IN ('ADD', 'UPDATE', 'SUPERSEDE', 'MERGE', 'REVIEW') \
                         AND classification IN ('NEW', 'COEXIST', 'DUPLICATE', 'SUPERSEDE', 'MERGE')";
        #[derive(serde::Deserialize)]
        struct Decision {
            id: String,
            run_id: String,
        }
        let ids = |batches: Vec<RecordBatch>| -> Result<BTreeMap<String, String>> {
            Ok(rows_of::<Decision>("audit_log", &batches)?
                .into_iter()
                .map(|r| (r.id, r.run_id))
                .collect())
        };
        let old = ids(store
            .scan_at("audit_log", b, Some(decisions), &["id", "run_id"])
            .await?)?;
        let new = ids(store
            .scan_at("audit_log", a, Some(decisions), &["id", "run_id"])
            .await?)?;
        let runs: BTreeSet<&String> = new
            .iter()
            .filter(|(id, _)| !old.contains_key(*id))
            .map(|(_, run)| run)
            .collect();
        for run in runs {
            conflicts.push(format!(
                "run {run_id} applied decisions of integrate run {run}: undo that run instead \
                 (`memlife undo {run}`)"
            ));
        }
    }
    Ok(conflicts)
}

/// Runs that wrote any of `changed_tables` while run `run_id` ran: the versions in between
/// are not its alone.
async fn overlapping_runs(
    store: &Store,
    run_id: &str,
    versions: &Versions,
    after: &BTreeMap<String, u64>,
    changed_tables: &[&'static TableSpec],
) -> Result<Vec<String>> {
    let mut conflicts = Vec::new();
    let filter = format!(
        "run_id <> {} AND dry_run = false AND table_versions IS NOT NULL",
        sql_string(run_id)
    );
    let others = store.scan_rows::<RunRecord>("runs", Some(&filter)).await?;
    for other in &others {
        let Some(v) = versions_of(other) else {
            continue;
        };
        for spec in changed_tables {
            let (b, a) = (versions.before[spec.name], after[spec.name]);
            let ob = v.before.get(spec.name).copied().unwrap_or(0);
            let oa = v.after.as_ref().and_then(|m| m.get(spec.name).copied());
            let overlaps = match oa {
                // It wrote versions (ob, oa]; this run wrote (b, a].
                Some(oa) => oa > ob && ob < a && oa > b,
                // Unfinished: anything after its start may be its own.
                None => ob < a && ob >= b,
            };
            if overlaps {
                conflicts.push(format!(
                    "run {} ({}) wrote {} while run {run_id} ran: the versions in between are \
                     not this run's alone",
                    other.run_id, other.job, spec.name
                ));
            }
        }
    }
    Ok(conflicts)
}

/// What undoing run `run_id` does to one table it wrote (versions `b` to `a`): rows it added
/// deleted, rows it removed or changed restored; a row a later run changed since is a
/// conflict. `None` when the run left the table as it found it.
async fn plan_table(
    store: &Store,
    spec: &'static TableSpec,
    (b, a): (u64, u64),
    run_id: &str,
    conflicts: &mut Vec<String>,
) -> Result<Option<UndoPlan>> {
    let latest = store.version_of(spec.name).await?;
    let cols = common_columns(store, spec, &[b, a, latest]).await?;
    let old = read_hashes(store, spec, Some(b), None, &cols).await?;
    let new = read_hashes(store, spec, Some(a), None, &cols).await?;
    let mut diff = TableDiff::default();
    for (k, h) in &new {
        match old.get(k) {
            None => diff.added.push(k.clone()),
            Some(o) if o != h => diff.changed.push(k.clone()),
            _ => {}
        }
    }
    diff.removed = old
        .keys()
        .filter(|k| !new.contains_key(*k))
        .cloned()
        .collect();
    if diff.is_empty() {
        return Ok(None);
    }
    // Where each touched row stands now.
    let touched: Vec<Key> = diff
        .added
        .iter()
        .chain(&diff.changed)
        .chain(&diff.removed)
        .cloned()
        .collect();
    let current = read_hashes(store, spec, None, None, &cols).await?;
    let (as_before, as_after) = (&old, &new);
    let mut plan = UndoPlan {
        spec,
        before: b,
        diff: TableDiff::default(),
        delete: Vec::new(),
        restore: Vec::new(),
    };
    for k in &touched {
        let (now, was, left) = (current.get(k), as_before.get(k), as_after.get(k));
        if now == was {
            continue; // back as it was (or never there): reverted already
        }
        if now != left {
            conflicts.push(format!(
                "{} row {} changed after run {run_id} (a later run {} it)",
                spec.name,
                key_text(k),
                if now.is_none() { "removed" } else { "rewrote" }
            ));
            continue;
        }
        if was.is_none() {
            plan.delete.push(k.clone());
        } else {
            plan.restore.push(k.clone());
        }
    }
    plan.diff = diff;
    Ok(Some(plan))
}

/// Logs the plans (one UNDO row per table, before anything changes), then restores and
/// deletes each table's rows, one commit each.
async fn apply_undo(
    ctx: &JobCtx<'_>,
    log: &RunLog,
    plans: &[UndoPlan],
    run_id: &str,
    job: &str,
) -> Result<()> {
    let store = &ctx.store;
    let now = ctx.now.timestamp_micros();
    // Logged before anything is deleted or rewritten: the keys, and the versions that hold
    // every row on both sides.
    let audit: Vec<AuditRow> = plans
        .iter()
        .map(|p| {
            let mut row = AuditRow::new(log.run_id(), "UNDO", "", now);
            row.id = derived_id(&format!("undo|{run_id}|{}", p.spec.name));
            row.source_ids = vec![run_id.to_string()];
            row.target_id = Some(p.spec.name.to_string());
            row.classification = Some(format!("REVERTED {job}"));
            row.reasoning = Some(format!(
                "undo of run {run_id}: rows added by it deleted, rows it removed or changed \
                 written back as of {} version {}",
                p.spec.name, p.before
            ));
            row.before_state = Some(
                json!({
                    "table": p.spec.name,
                    "version": store_version_hint(p),
                    "deleted": p.delete,
                    "restored": p.restore,
                })
                .to_string(),
            );
            row.after_state =
                Some(json!({"table": p.spec.name, "as_of_version": p.before}).to_string());
            row
        })
        .collect();
    store.write_audit(&audit).await?;
    crate::crash::point("undo.after-audit");
    for p in plans {
        if !p.restore.is_empty() {
            let keys: BTreeSet<Key> = p.restore.iter().cloned().collect();
            let batches = rows_at(store, p.spec, p.before, &keys, &columns(p.spec)).await?;
            if let Some(first) = batches.first() {
                let schema = first.schema();
                let reader =
                    arrow::array::RecordBatchIterator::new(batches.into_iter().map(Ok), schema);
                store.merge_rows(p.spec, Box::new(reader)).await?;
            }
        }
        for chunk in p.delete.chunks(200) {
            store
                .delete_where(p.spec.name, &key_predicate(p.spec, chunk))
                .await?;
        }
        crate::crash::point(&format!("undo.after-{}", p.spec.name));
    }
    Ok(())
}

pub async fn undo(
    ctx: &JobCtx<'_>,
    run: &RunRecord,
    dry_run: bool,
    report: &mut JobReport,
) -> Result<()> {
    let store = &ctx.store;
    let (run_id, job) = (run.run_id.clone(), run.job.clone());
    if job == "undo" {
        bail!("run {run_id} is an undo: to redo what it reverted, run the job again");
    }
    if job == "optimize" {
        bail!(
            "run {run_id} is an optimize: it changed how the tables are stored, not a row of \
             them; there is nothing to undo"
        );
    }
    let Some(versions) = versions_of(run) else {
        bail!(
            "run {run_id} ({job}) predates version records (schema 8): its changes cannot be told \
             apart from other runs'"
        );
    };
    let Some(after) = versions.after.clone() else {
        bail!(
            "run {run_id} ({job}) did not finish ({}): its next run finishes what it started; \
             `memlife check` names what it left",
            run.status
        );
    };
    // Already undone by a finished undo run?
    let undos = store
        .scan_rows::<RunRecord>(
            "runs",
            Some("job = 'undo' AND status = 'done' AND dry_run = false"),
        )
        .await?;
    if let Some(u) = undos
        .iter()
        .find(|u| u.params()["undo"].as_str() == Some(run_id.as_str()))
    {
        report.notes.push(format!(
            "run {run_id} was undone already, by run {}",
            u.run_id
        ));
        return Ok(());
    }
    let mut unrecorded = None;
    for spec in REVERTIBLE {
        let (before, later) = (
            versions.before.contains_key(spec.name),
            after.contains_key(spec.name),
        );
        if before && later {
            continue;
        }
        // A table a migration created after the run began: the run cannot have written it.
        let created = store.table_created_at(spec.name).await?;
        if !before && !later && created.is_some_and(|at| at > run.started_at) {
            continue;
        }
        unrecorded = Some(spec);
        break;
    }
    if let Some(spec) = unrecorded {
        bail!(
            "run {run_id} ({job}) did not record the version of table {} (it could not be read \
             then): its changes cannot be told apart",
            spec.name
        );
    }
    let changed_tables: Vec<&'static TableSpec> = REVERTIBLE
        .iter()
        .copied()
        .filter(|s| after.get(s.name) > versions.before.get(s.name))
        .collect();
    // The versions a diff reads must still exist: `optimize` removes those older than the
    // retention window.
    for spec in &changed_tables {
        for v in [versions.before[spec.name], after[spec.name]] {
            if !store.has_version(spec.name, v).await? {
                bail!(
                    "run {run_id} ({job}) can no longer be undone: version {v} of table {} is \
                     gone. `memlife optimize` removes versions older than its retention window \
                     ({}); this run is older than that",
                    spec.name,
                    retention_window(store).await?
                );
            }
        }
    }
    let mut conflicts: Vec<String> = Vec::new();
    conflicts.extend(applied_decisions(store, &run_id, &job, &versions, &after).await?);
    conflicts.extend(overlapping_runs(store, &run_id, &versions, &after, &changed_tables).await?);
    let mut plans = Vec::new();
    for spec in changed_tables {
        let range = (versions.before[spec.name], after[spec.name]);
        if let Some(plan) = plan_table(store, spec, range, &run_id, &mut conflicts).await? {
            plans.push(plan);
        }
    }
    for p in &plans {
        report.count(&format!("{}_deleted", p.spec.name), p.delete.len() as u64);
        report.count(&format!("{}_restored", p.spec.name), p.restore.len() as u64);
    }
    if !conflicts.is_empty() {
        report.status = Status::Failed;
        report.error = Some(format!(
            "run {run_id} ({job}) cannot be undone: {} conflicts; nothing was changed",
            conflicts.len()
        ));
        report.failures = conflicts
            .into_iter()
            .map(|c| ItemFailure {
                item: run_id.clone(),
                reason: c,
            })
            .collect();
        return Ok(());
    }
    if plans
        .iter()
        .all(|p| p.delete.is_empty() && p.restore.is_empty())
    {
        report
            .notes
            .push(format!("run {run_id} ({job}) left nothing to revert"));
        // A killed undo may have reverted everything: its `running` row is marked abandoned.
        if !dry_run {
            RunLog::reap_abandoned(ctx, "undo").await?;
        }
        return Ok(());
    }
    if dry_run {
        return Ok(());
    }
    let log = RunLog::start(ctx, "undo", &json!({"undo": run_id})).await?;
    apply_undo(ctx, &log, &plans, &run_id, &job).await?;
    report.notes.push(format!("run {run_id} ({job}) undone"));
    log.finish(ctx, report).await?;
    Ok(())
}

/// The diff's size, for the UNDO row (what the run did, beside what undo reverts).
fn store_version_hint(p: &UndoPlan) -> Value {
    json!({
        "run_added": p.diff.added.len(),
        "run_changed": p.diff.changed.len(),
        "run_removed": p.diff.removed.len(),
    })
}

/// The window the last finished `optimize` kept versions for, as its params record it.
async fn retention_window(store: &Store) -> Result<String> {
    let runs = store
        .scan_rows::<RunRecord>(
            "runs",
            Some("job = 'optimize' AND status = 'done' AND dry_run = false"),
        )
        .await?;
    Ok(runs
        .iter()
        .max_by_key(|r| r.started_at)
        .and_then(|r| {
            let params = r.params();
            (!params.is_null()).then(|| {
                format!(
                    "run {} kept {} days; [retention] keep_versions_days sets it",
                    r.run_id, params["keep_versions_days"]
                )
            })
        })
        .unwrap_or_else(|| "[retention] keep_versions_days".to_string()))
}
