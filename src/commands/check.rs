//! `memlife check`: verifies the invariants every job must keep, and lists each violation with
//! the rows that break it (exit 1), or says that all hold (exit 0). Tests run it after every
//! job that writes, and after every crash-and-rerun; schedulers can run it after a night's
//! jobs. Each invariant is a query over the tables; a job that adds a table or a reference adds
//! its invariant here.

use std::collections::BTreeSet;
use std::io::Write;

use anyhow::Result;
use arrow::array::RecordBatch;
use serde::Serialize;

use crate::app::App;
use crate::exit::ExitStatus;
use crate::jobs::{JobName, lock};
use crate::llm::batch;
use crate::model::encoding::parse_timestamp;
use crate::model::schema::ALL_TABLES;
use crate::store::sql::{query, session};
use crate::store::{Store, sql_string, sql_timestamp};

/// Verify the store's invariants: unique keys, no dangling references, applied batches
/// present, no abandoned runs, archivals audited.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Rows shown per violated invariant.
    #[arg(long, default_value_t = 20)]
    pub examples: usize,
}

/// One invariant that does not hold.
#[derive(Debug, Serialize)]
pub struct Violation {
    pub invariant: String,
    /// How many rows break it.
    pub rows: u64,
    /// The first of them, as JSON objects.
    pub examples: Vec<serde_json::Value>,
}

#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub db: String,
    pub invariants_checked: Vec<String>,
    pub violations: Vec<Violation>,
}

impl CheckReport {
    pub fn holds(&self) -> bool {
        self.violations.is_empty()
    }
}

/// SQL invariants: a name, and a query returning the rows that break it.
fn reference_queries() -> Vec<(String, String)> {
    let mut queries: Vec<(String, String)> = ALL_TABLES
        .iter()
        .filter(|spec| !spec.key.is_empty())
        .map(|spec| {
            let key = spec.key.join(", ");
            (
                format!("{}: one row per key ({key})", spec.name),
                format!(
                    "SELECT {key}, COUNT(*) AS copies FROM {} GROUP BY {key} HAVING COUNT(*) > 1",
                    spec.name
                ),
            )
        })
        .collect();
    let references = [
        (
            "links: both ends are memories",
            "SELECT source_id, target_id, link_type FROM links \
             WHERE source_id NOT IN (SELECT id FROM memories) \
                OR target_id NOT IN (SELECT id FROM memories)",
        ),
        (
            "memory_entities: the memory exists",
            "SELECT memory_id, entity_id FROM memory_entities \
             WHERE memory_id NOT IN (SELECT id FROM memories)",
        ),
        (
            "memory_entities: the entity exists",
            "SELECT memory_id, entity_id FROM memory_entities \
             WHERE entity_id NOT IN (SELECT id FROM entities)",
        ),
        (
            "entities: one entity per user, name and type (memlife entities matches names)",
            "SELECT user_id, lower(name) AS name, entity_type, COUNT(*) AS copies FROM entities \
             GROUP BY user_id, lower(name), entity_type HAVING COUNT(*) > 1",
        ),
        (
            // `recall` logs an activation before it writes it as pending.
            "activations: the recall that wrote it is logged",
            "SELECT memory_id, recall_id FROM activations \
             WHERE recall_id NOT IN (SELECT id FROM audit_log WHERE operation = 'RECALL')",
        ),
        (
            "entity_scans: the memory exists",
            "SELECT memory_id FROM entity_scans WHERE memory_id NOT IN (SELECT id FROM memories)",
        ),
        (
            // `embed` finds the rows to embed through the bitmap index on the model.
            "memories: a memory without a vector names no model",
            "SELECT id, embedding_model FROM memories \
             WHERE embedding IS NULL AND embedding_model IS NOT NULL",
        ),
        (
            // `entities` reads only the users with a memory it has not marked.
            "memories: a memory entities marked as read has a scan",
            "SELECT id, entity_mark FROM memories \
             WHERE entity_mark IS NOT NULL AND id NOT IN (SELECT memory_id FROM entity_scans)",
        ),
        (
            "memories: superseded_by is a memory",
            "SELECT id, superseded_by FROM memories \
             WHERE superseded_by IS NOT NULL AND superseded_by NOT IN (SELECT id FROM memories)",
        ),
        (
            "memories: consolidates_memory_ids are memories",
            "SELECT id, member FROM (SELECT id, unnest(consolidates_memory_ids) AS member \
             FROM memories) WHERE member NOT IN (SELECT id FROM memories)",
        ),
        // Supersession chains (`memlife integrate`, `memlife link`): each version points to
        // its successor (`superseded_by`, in the same chain, with `valid_until` set) and is
        // pointed at by at most one predecessor; one first and one current version per
        // chain, so no fork, no cycle, no orphan. (The `supersedes` link new -> old that
        // integrate and link write is for traversal; chains imported without links pass.)
        (
            "supersession: a superseded memory has valid_until and its successor is in its chain",
            "SELECT o.id, o.superseded_by, o.supersession_chain_id FROM memories o \
             LEFT JOIN memories n ON n.id = o.superseded_by \
             WHERE o.superseded_by IS NOT NULL AND (o.valid_until IS NULL \
                OR o.supersession_chain_id IS NULL \
                OR n.supersession_chain_id IS NULL \
                OR n.supersession_chain_id <> o.supersession_chain_id)",
        ),
        (
            "supersession: no version has two predecessors",
            "SELECT superseded_by, COUNT(*) AS predecessors FROM memories \
             WHERE superseded_by IS NOT NULL GROUP BY superseded_by HAVING COUNT(*) > 1",
        ),
        (
            "supersession: each chain has one current version and one first version",
            "SELECT * FROM (SELECT m.supersession_chain_id, \
                    SUM(CASE WHEN m.superseded_by IS NULL THEN 1 ELSE 0 END) AS current_versions, \
                    SUM(CASE WHEN p.superseded_by IS NULL THEN 1 ELSE 0 END) AS first_versions \
               FROM memories m LEFT JOIN (SELECT DISTINCT superseded_by FROM memories \
                    WHERE superseded_by IS NOT NULL) p ON p.superseded_by = m.id \
               WHERE m.supersession_chain_id IS NOT NULL GROUP BY m.supersession_chain_id) \
             WHERE current_versions <> 1 OR first_versions <> 1",
        ),
        // Consolidation (`memlife consolidate`): an approved consolidation's memory exists
        // and every member is archived and held by exactly one live consolidated memory.
        (
            "consolidation: no memory lost (the consolidated memory exists)",
            "SELECT id AS audit_id, target_id FROM audit_log \
             WHERE operation = 'CONSOLIDATE' AND classification = 'APPROVED' \
               AND target_id NOT IN (SELECT id FROM memories) AND {NOT_UNDONE}",
        ),
        (
            "consolidation: every member is archived and held by exactly one consolidated memory",
            "SELECT a.member, m.archived_at, COUNT(h.id) AS holders FROM \
               (SELECT unnest(source_ids) AS member FROM audit_log \
                 WHERE operation = 'CONSOLIDATE' AND classification = 'APPROVED' \
                   AND {NOT_UNDONE}) a \
             LEFT JOIN memories m ON m.id = a.member \
             LEFT JOIN (SELECT id, unnest(consolidates_memory_ids) AS member FROM memories \
                         WHERE source = 'consolidate') h ON h.member = a.member \
             GROUP BY a.member, m.archived_at \
             HAVING m.archived_at IS NULL OR COUNT(h.id) <> 1",
        ),
        (
            "consolidation: no link points at a consolidated member but its consolidates link (its own, to what it consolidated, stay)",
            "SELECT l.source_id, l.target_id, l.link_type FROM links l \
             JOIN (SELECT target_id AS holder, unnest(source_ids) AS member FROM audit_log \
                   WHERE operation = 'CONSOLIDATE' AND classification = 'APPROVED' \
                     AND {NOT_UNDONE}) c \
               ON l.target_id = c.member OR l.source_id = c.member \
             WHERE NOT (l.link_type = 'consolidates' AND l.source_id = c.holder \
                        AND l.target_id = c.member) \
               AND NOT (l.link_type = 'consolidates' AND l.source_id = c.member)",
        ),
    ];
    queries.extend(
        references
            .into_iter()
            .chain(STORAGE_JOB_QUERIES.iter().copied())
            .map(|(name, sql)| (name.to_string(), sql.replace("{NOT_UNDONE}", NOT_UNDONE))),
    );
    queries
}

/// The invariants of the storage jobs of seeds 002 and 004: insights, distill, anchor,
/// sessions.
const STORAGE_JOB_QUERIES: &[(&str, &str)] = &[
    (
        "insights: a pattern's evidence are narratives of its user",
        "SELECT p.id, p.member, n.kind, n.user_id FROM (SELECT id, user_id, \
               unnest(consolidates_memory_ids) AS member FROM memories \
               WHERE kind = 'learning_pattern' AND source = 'insights') p \
             LEFT JOIN memories n ON n.id = p.member \
             WHERE n.id IS NULL OR n.kind <> 'narrative' OR n.user_id <> p.user_id",
    ),
    (
        "insights: every pattern logged by a finished run was written (or pruned since)",
        "SELECT id, target_id FROM audit_log \
             WHERE operation = 'INSIGHT' AND classification = 'PATTERN' AND {NOT_UNDONE} \
               AND run_id IN (SELECT run_id FROM runs WHERE status IN ('done', 'partial')) \
               AND target_id NOT IN (SELECT id FROM memories) \
               AND target_id NOT IN (SELECT target_id FROM audit_log \
                                     WHERE operation = 'PRUNE' AND classification = 'DELETE')",
    ),
    (
        // (The episodes a fact rests on are the ones its after_state names.)
        "distill: every episode a distillation rests on is archived",
        "SELECT a.episode, m.archived_at FROM \
               (SELECT unnest(source_ids) AS episode, after_state FROM audit_log \
                 WHERE operation = 'DISTILL' AND classification = 'APPLIED' AND {NOT_UNDONE}) a \
             JOIN memories m ON m.id = a.episode \
             WHERE m.archived_at IS NULL \
               AND a.after_state LIKE concat('%\"', a.episode, '\"%')",
    ),
    (
        "anchor: drift is a cosine distance and the user has memories",
        "SELECT user_id, drift FROM anchors WHERE drift < 0 OR drift > 2 \
               OR user_id NOT IN (SELECT DISTINCT user_id FROM memories)",
    ),
    (
        "sessions: one narrative per session",
        "SELECT user_id, session_id, COUNT(*) AS narratives FROM memories \
             WHERE kind = 'narrative' AND source = 'sessions' \
             GROUP BY user_id, session_id HAVING COUNT(*) > 1",
    ),
];

/// Audit rows of runs `memlife undo` reverted from the tables' versions no longer stand.
const NOT_UNDONE: &str = "run_id NOT IN (SELECT source_ids[1] FROM audit_log \
     WHERE operation = 'UNDO' AND classification LIKE 'REVERTED %' AND target_id IN \
     ('memories', 'links', 'entities', 'memory_entities', 'clusters', 'entity_scans', \
     'review_queue', 'anchors'))";

fn rows_of(batches: &[RecordBatch]) -> Vec<serde_json::Value> {
    crate::store::json_rows(batches)
        .into_iter()
        .map(serde_json::Value::Object)
        .collect()
}

fn violation(invariant: &str, rows: Vec<serde_json::Value>, examples: usize) -> Option<Violation> {
    if rows.is_empty() {
        return None;
    }
    Some(Violation {
        invariant: invariant.to_string(),
        rows: rows.len() as u64,
        examples: rows.into_iter().take(examples).collect(),
    })
}

/// Runs every invariant over `store`.
pub async fn check(store: &Store, examples: usize) -> Result<CheckReport> {
    let context = session(store).await?;
    let mut report = CheckReport {
        db: store.uri().to_string(),
        invariants_checked: Vec::new(),
        violations: Vec::new(),
    };
    for (name, sql) in reference_queries() {
        let (_, batches) = query(&context, &sql, &[]).await?;
        report.invariants_checked.push(name.clone());
        report
            .violations
            .extend(violation(&name, rows_of(&batches), examples));
    }

    // Every item of an applied batch has its result on record (its audit row, keyed by the
    // batch and the item).
    let name = "llm_batches: every applied batch's results are present";
    report.invariants_checked.push(name.into());
    let mut missing = Vec::new();
    for record in batch::records(store, "status = 'applied'").await? {
        let Some(applier) = JobName::parse(&record.job).and_then(JobName::applier) else {
            continue;
        };
        let expected: Vec<String> =
            applier.result_keys(&record, &crate::llm::batch::items_of(&record)?);
        let found = store.audit_ids_present(&expected).await?;
        missing.extend(
            expected.iter().filter(|id| !found.contains(*id)).map(
                |id| serde_json::json!({"batch_key": record.batch_key, "missing_audit_id": id}),
            ),
        );
    }
    report.violations.extend(violation(name, missing, examples));

    // A run marked running has a live process holding its job's lock.
    let name = "runs: every running run has a live process";
    report.invariants_checked.push(name.into());
    let (_, batches) = query(
        &context,
        "SELECT run_id, job, user_id, started_at FROM runs WHERE status = 'running' \
         ORDER BY started_at",
        &[],
    )
    .await?;
    let mut orphans = Vec::new();
    for row in rows_of(&batches) {
        let job = row["job"].as_str().unwrap_or_default();
        let user = row["user_id"].as_str();
        if !lock::is_held(store.uri(), job, user)? {
            orphans.push(row);
        }
    }
    report.violations.extend(violation(name, orphans, examples));

    // A memory `scores` archived has its archival in the audit log (logged before it
    // happened). Scores archive at the run's clock, recorded in the run's params. Jobs of the
    // same night share that clock: a memory consolidate (or refine, integrate or distill)
    // archived is named in the source ids of that job's audit row instead.
    let name = "memories: every archival by a job is audited";
    report.invariants_checked.push(name.into());
    let clocks = scores_clocks(&context).await?;
    if !clocks.is_empty() {
        let list: Vec<String> = clocks.iter().map(|t| sql_timestamp(*t)).collect();
        let sql = format!(
            "SELECT m.id, m.archived_at FROM memories m \
             LEFT JOIN (SELECT target_id, created_at FROM audit_log \
               WHERE operation IN ('ARCHIVE', 'PRUNE')) a \
               ON a.target_id = m.id AND a.created_at = m.archived_at \
             LEFT JOIN (SELECT unnest(source_ids) AS member, created_at FROM audit_log \
               WHERE operation IN ('CONSOLIDATE', 'SPLIT', 'MERGE', 'SUPERSEDE', 'DISTILL')) c \
               ON c.member = m.id AND c.created_at = m.archived_at \
             WHERE m.state = 'archived' AND m.archived_at IN ({}) AND a.target_id IS NULL \
               AND c.member IS NULL",
            list.join(", ")
        );
        let (_, batches) = query(&context, &sql, &[]).await?;
        report
            .violations
            .extend(violation(name, rows_of(&batches), examples));
    }
    Ok(report)
}

/// The clocks (`--now`) of every recorded `scores` run.
async fn scores_clocks(context: &datafusion::prelude::SessionContext) -> Result<BTreeSet<i64>> {
    let sql = format!(
        "SELECT params FROM runs WHERE job = {}",
        sql_string(JobName::Scores.as_str())
    );
    let (_, batches) = query(context, &sql, &[]).await?;
    #[derive(serde::Deserialize)]
    struct Run {
        params: Option<String>,
    }
    let mut clocks = BTreeSet::new();
    for run in crate::model::typed::rows_of::<Run>("runs", &batches)? {
        let params: serde_json::Value = run
            .params
            .as_deref()
            .and_then(|p| serde_json::from_str(p).ok())
            .unwrap_or_default();
        if let Some(now) = params["now"].as_str().and_then(parse_timestamp) {
            clocks.insert(now);
        }
    }
    Ok(clocks)
}

pub async fn run(app: &App, args: &CheckArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    let report = check(app.store().await?, args.examples).await?;
    if app.json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else if report.holds() {
        writeln!(
            out,
            "{}: all {} invariants hold",
            report.db,
            report.invariants_checked.len()
        )?;
    } else {
        writeln!(
            out,
            "{}: {} of {} invariants violated",
            report.db,
            report.violations.len(),
            report.invariants_checked.len()
        )?;
        for v in &report.violations {
            writeln!(out, "  {} ({} rows)", v.invariant, v.rows)?;
            for example in &v.examples {
                writeln!(out, "    {example}")?;
            }
        }
    }
    Ok(if report.holds() {
        ExitStatus::Success
    } else {
        ExitStatus::Failure
    })
}
