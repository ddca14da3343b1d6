//! `memlife refine`: splits or trims verbose memories (seed 000 "Memory Splitting").
//!
//! Candidates: live memories at least `verbose_threshold_chars` long, at least `min_age_days`
//! old, accessed at least `min_access_count` times, not refined within `cooldown_days`, with
//! fewer than `max_rejections` refusals; longest first, at most `max_candidates` per user. The
//! LLM (`refine`, the reasoning role) answers:
//! - TRIM: one concise replacement; the memory's text is replaced and re-embedded;
//! - SPLIT: N focused memories, each a new memory with the original's importance, kind, tags
//!   and created_at, `consolidates_memory_ids` = [original], a `split_from` link to it and
//!   `last_refined_at` = now (not refined again within the cooldown); the original stays
//!   active (seed 000: splits are another view of the same information);
//! - KEEP (DO_NOTHING): `refinement_rejection_count` goes up by one.
//!
//! Every TRIM and SPLIT is logged (audit `UPDATE` or `SPLIT`, before and after) before it is
//! applied; a run finishes first what a killed run logged but did not apply, from the log,
//! without asking again. Every refined memory gets `last_refined_at`.

use std::collections::BTreeMap;

use anyhow::{Result, anyhow, bail};
use serde_json::{Value, json};

use super::{ItemFailure, Job, JobCtx, JobName, JobReport, JobScope, RunLog};
use crate::config::RefineSection;
use crate::embedders::{Embedded, Embedder, EmbedderArgs};
use crate::llm::batch::{Applier, ApplyEnv, BatchRecord};
use crate::llm::tasks::{MemoryView, Reply, Task, TaskInput};
use crate::llm::{CallMode, Item, LlmArgs, Outcome};
use crate::logic::refine::{RefineAnswer, answer_id, plan_answer};
use crate::model::clock::Clock;
use crate::model::encoding::format_timestamp;
use crate::model::schema::AUDIT_LOG;
use crate::model::typed::MemoryRow;
use crate::store::audit::AuditRow;
use crate::store::{Store, sql_list, sql_string, sql_timestamp};

/// Splits verbose memories into focused ones, or trims them, through the LLM layer
/// (`refine`); refused ones are not asked again after `max_rejections` refusals.
#[derive(clap::Args, Debug, Clone)]
pub struct RefineArgs {
    /// The clock the run computes at (RFC 3339); default the current time.
    #[arg(long)]
    pub now: Option<Clock>,
    #[command(flatten)]
    pub scope: JobScope,
    #[command(flatten)]
    pub llm: LlmArgs,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
}

impl Job for RefineArgs {
    fn scope(&self) -> &JobScope {
        &self.scope
    }

    fn clock(&self) -> Option<Clock> {
        self.now
    }

    fn applier() -> Option<Box<dyn Applier>> {
        Some(Box::new(RefineApplier))
    }
}

/// The memories of a user that qualify, longest first.
async fn candidates(ctx: &JobCtx<'_>, user: &str, p: &RefineSection) -> Result<Vec<MemoryRow>> {
    let now = ctx.now.timestamp_micros();
    let day = 86_400_000_000i64;
    let filter = format!(
        "user_id = {} AND archived_at IS NULL AND state != 'archived' \
         AND access_count >= {} AND refinement_rejection_count < {} AND created_at <= {} \
         AND (last_refined_at IS NULL OR last_refined_at <= {})",
        sql_string(user),
        p.min_access_count,
        p.max_rejections,
        sql_timestamp(now - p.min_age_days * day),
        sql_timestamp(now - p.cooldown_days * day),
    );
    let mut rows: Vec<MemoryRow> = ctx
        .store
        .scan_rows::<MemoryRow>("memories", Some(&filter))
        .await?
        .into_iter()
        .filter(|r| r.text.chars().count() >= p.verbose_threshold_chars)
        .collect();
    rows.sort_by(|a, b| {
        b.text
            .len()
            .cmp(&a.text.len())
            .then_with(|| a.id.cmp(&b.id))
    });
    rows.truncate(p.max_candidates);
    Ok(rows)
}

async fn embed_one(embedder: &Embedder, text: &str) -> Result<Vec<f32>> {
    match embedder.embed(&[text]).await?.pop() {
        Some(Embedded::Vector { values, .. }) => Ok(values),
        Some(Embedded::Refused(why)) => bail!("the embedder refused {text:?}: {why}"),
        None => bail!("the embedder returned nothing"),
    }
}

/// Applies one logged refinement (its audit row's `after_state`); idempotent.
async fn apply(
    store: &Store,
    embedder: Option<&Embedder>,
    after: &Value,
    refined_at: i64,
) -> Result<()> {
    let dim = store.embedding_dim();
    let now = refined_at;
    let original = after["original"].as_str().unwrap_or("");
    let logged = after["memories"].as_array().cloned().unwrap_or_default();
    let rows = crate::model::typed::memories_from_json(&logged, dim, now)
        .map_err(|e| anyhow!("the refinement of {original}: {e}"))?;
    if !rows.is_empty() {
        let embedder = embedder.ok_or_else(|| anyhow!("no embedder for the refined memories"))?;
        let mut vectors = Vec::with_capacity(rows.len());
        let mut embedded = Vec::with_capacity(rows.len());
        for mut row in rows {
            vectors.push(Some(embed_one(embedder, &row.text).await?));
            row.embedding_model = Some(embedder.model_name());
            row.link_mark = None;
            row.entity_mark = None;
            row.scores_due_at = None;
            embedded.push(row);
        }
        store.upsert_memories(&embedded, &vectors, now).await?;
    }
    crate::crash::point("refine.after-memories");
    let links = crate::model::typed::links_from_json(
        after["links"].as_array().map_or(&[][..], Vec::as_slice),
        now,
    )
    .map_err(|e| anyhow!("the refinement of {original}: {e}"))?;
    if !links.is_empty() {
        store.upsert_links(&links, now).await?;
    }
    store
        .update_where(
            "memories",
            &format!("id = {}", sql_string(original)),
            &[("last_refined_at", sql_timestamp(refined_at))],
        )
        .await?;
    Ok(())
}

/// Refinements a killed run logged but did not finish: the original's `last_refined_at` is
/// older than the log row (or unset). Reads the log rows' ids and targets and the originals'
/// `last_refined_at` in one scan each, then the full rows of unfinished ones only.
async fn unfinished(store: &Store) -> Result<Vec<(Value, i64)>> {
    // Refinements of runs `memlife undo` reverted stay reverted.
    let logged = &crate::store::without_undone(
        store,
        "operation IN ('SPLIT', 'UPDATE') AND classification IN ('SPLIT', 'TRIM')",
    )
    .await?;
    #[derive(serde::Deserialize)]
    struct Head {
        id: String,
        target_id: Option<String>,
        created_at: i64,
    }
    let heads: Vec<Head> = store.scan_rows(AUDIT_LOG.name, Some(logged)).await?;
    let originals: Vec<String> = heads.iter().filter_map(|r| r.target_id.clone()).collect();
    #[derive(serde::Deserialize)]
    struct Refined {
        id: String,
        last_refined_at: Option<i64>,
    }
    let refined: BTreeMap<String, i64> = store
        .rows_with_ids::<Refined>("memories", &originals, None)
        .await?
        .into_iter()
        .filter_map(|r| Some((r.id, r.last_refined_at?)))
        .collect();
    let pending: Vec<String> = heads
        .iter()
        .filter(|r| {
            let original = r.target_id.as_deref().unwrap_or("");
            refined
                .get(original)
                .is_none_or(|done| *done < r.created_at)
        })
        .map(|r| r.id.clone())
        .collect();
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    #[derive(serde::Deserialize)]
    struct Logged {
        id: String,
        after_state: Option<String>,
        created_at: i64,
    }
    let filter = format!("{logged} AND id IN ({})", sql_list(&pending));
    let mut out = Vec::new();
    for row in store
        .scan_rows::<Logged>(AUDIT_LOG.name, Some(&filter))
        .await?
    {
        let after: Value = serde_json::from_str(row.after_state.as_deref().unwrap_or("{}"))
            .map_err(|e| anyhow!("audit row {}: unreadable after_state: {e}", row.id))?;
        out.push((after, row.created_at));
    }
    Ok(out)
}

fn add(counts: &mut BTreeMap<String, u64>, name: &str, value: u64) {
    *counts.entry(name.to_string()).or_default() += value;
}

/// One answer about a memory planned (`logic::refine::plan_answer`), its counts and failure
/// added to the run's.
fn audit_row_of_answer(
    (run_id, origin): (&str, &str),
    memory: Option<&MemoryRow>,
    view: &MemoryView,
    outcome: &Outcome,
    now: i64,
    (counts, failures): (&mut BTreeMap<String, u64>, &mut Vec<ItemFailure>),
) -> AuditRow {
    let answer = match (&outcome.failure, &outcome.reply) {
        (Some(failure), _) => RefineAnswer::Failed(failure),
        (None, Some(Reply::Refine(reply))) => RefineAnswer::Reply {
            action: reply.action,
            parts: &reply.parts,
            confidence: reply.confidence,
            reasoning: &reply.reasoning,
        },
        (None, _) => RefineAnswer::Missing,
    };
    let plan = plan_answer(
        (run_id, origin),
        memory,
        (&view.id, &view.text),
        &answer,
        now,
    );
    if let Some(counted) = plan.counted {
        add(counts, counted, 1);
    }
    if plan.created > 0 {
        add(counts, "memories_created", plan.created as u64);
    }
    if let Some(reason) = plan.failure {
        failures.push(ItemFailure {
            item: view.id.clone(),
            reason,
        });
    }
    plan.audit
}

/// Writes the answers' audit rows (one commit), then applies the splits and trims among them
/// and counts the refusals (once per clock: `last_refined_at` moves to `now`).
async fn record_and_apply(
    store: &Store,
    embedder: Option<&Embedder>,
    rows: &[AuditRow],
    kept: &[String],
    now: i64,
) -> Result<()> {
    store.write_audit(rows).await?;
    crate::crash::point("refine.after-audit");
    for row in rows {
        if matches!(row.classification.as_deref(), Some("SPLIT" | "TRIM")) {
            let after: Value = serde_json::from_str(row.after_state.as_deref().unwrap_or("{}"))?;
            apply(store, embedder, &after, now).await?;
        }
    }
    if !kept.is_empty() {
        let list = sql_list(kept);
        // Counted once per clock: a rerun with the same clock finds them refined already.
        store
            .update_where(
                "memories",
                &format!(
                    "id IN ({list}) AND (last_refined_at IS NULL OR last_refined_at < {})",
                    sql_timestamp(now)
                ),
                &[
                    (
                        "refinement_rejection_count",
                        "refinement_rejection_count + 1".to_string(),
                    ),
                    ("last_refined_at", sql_timestamp(now)),
                ],
            )
            .await?;
    }
    Ok(())
}

pub async fn run(ctx: &JobCtx<'_>, args: &RefineArgs) -> Result<JobReport> {
    let llm = ctx.app.llm(&args.llm).await?;
    let batch = llm.mode == CallMode::Batch;
    let config = ctx.app.config().await?;
    let p = &config.refine;
    let now = ctx.now.timestamp_micros();
    let now_text = format_timestamp(now);
    let log = RunLog::start(
        ctx,
        JobName::Refine.as_str(),
        &json!({"now": now_text, "refine": p, "mode": if batch { "batch" } else { "online" }}),
    )
    .await?;
    let run_id = log.run_id().to_string();
    let mut report = JobReport::new(JobName::Refine.as_str(), ctx);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let embedder = ctx
        .app
        .embedder(&args.embedder, ctx.store.embedding_dim(), 16)
        .await?;
    // Candidates are chosen before a killed run's refinements are finished, so the memories
    // those create wait for the next run, as they would have after an uninterrupted one.
    let pending =
        crate::llm::batch::memories_in_pending(&ctx.store, JobName::Refine.as_str()).await?;
    let mut memories = Vec::new();
    for user in super::users_of(ctx, "memories").await? {
        let mut of_user = candidates(ctx, &user, p).await?;
        let before = of_user.len();
        of_user.retain(|m| !pending.contains(&m.id));
        let waiting = (before - of_user.len()) as u64;
        if waiting > 0 {
            add(&mut counts, "in_pending_batches", waiting);
        }
        memories.extend(of_user);
    }
    if !ctx.dry_run {
        for (after, at) in unfinished(&ctx.store).await? {
            let user = after["memories"][0]["user_id"].as_str().unwrap_or("");
            if !ctx.scope.contains(user) && !user.is_empty() {
                continue;
            }
            apply(&ctx.store, Some(&embedder), &after, at).await?;
            let original = after["original"].as_str().unwrap_or("");
            memories.retain(|m| m.id != original);
            add(&mut counts, "resumed", 1);
        }
    }
    add(&mut counts, "candidates", memories.len() as u64);
    // One item per memory, named by its id (a batch's applier finds the memory by it).
    let items: Vec<Item> = memories
        .iter()
        .map(|m| Item {
            custom_id: m.id.clone(),
            input: TaskInput {
                task: Task::Refine,
                memories: vec![MemoryView::from_memory(m)],
                proposal: None,
                now: now_text.clone(),
                question: None,
            },
        })
        .collect();

    if batch {
        if !ctx.dry_run {
            let items = memories.iter().map(|m| m.user_id.clone()).zip(items);
            log.submit_batches_by_user(
                ctx,
                &llm,
                (Task::Refine, items, "memories"),
                &mut counts,
                &mut report.notes,
            )
            .await?;
        }
        report.counts = counts;
        log.finish(ctx, &mut report).await?;
        return Ok(report);
    }

    let outcomes = llm.run(items.clone()).await;
    let mut rows = Vec::new();
    let mut kept = Vec::new();
    for ((memory, item), outcome) in memories.iter().zip(&items).zip(&outcomes) {
        let row = audit_row_of_answer(
            (&run_id, &now_text),
            Some(memory),
            &item.input.memories[0],
            outcome,
            now,
            (&mut counts, &mut report.failures),
        );
        if row.classification.as_deref() == Some("KEEP") {
            kept.push(item.custom_id.clone());
        }
        rows.push(row);
    }
    if !ctx.dry_run {
        record_and_apply(&ctx.store, Some(&embedder), &rows, &kept, now).await?;
    }
    report.counts = counts;
    report.llm = Some(llm.usage(&outcomes));
    log.finish(ctx, &mut report).await?;
    Ok(report)
}

/// Applies `refine` batches for `batches poll`, as an online run applies its answers, at the
/// clock of the run that submitted them (so applying it again after a crash writes the same rows and
/// counts a refusal once). Answers already logged by an earlier attempt are finished from
/// the log, not read again.
pub struct RefineApplier;

#[async_trait::async_trait]
impl Applier for RefineApplier {
    async fn apply(
        &self,
        env: &ApplyEnv<'_>,
        record: &BatchRecord,
        items: &[Item],
        outcomes: &[Outcome],
    ) -> Result<BTreeMap<String, u64>> {
        let store = env.store;
        let now = super::batch_clock(record, items)?;
        let ids: Vec<String> = items.iter().map(|i| i.custom_id.clone()).collect();
        let (current, _) = store.memories_with_ids(&ids, None, false).await?;
        let current: BTreeMap<String, MemoryRow> =
            current.into_iter().map(|r| (r.id.clone(), r)).collect();
        let row_ids: Vec<String> = ids
            .iter()
            .map(|id| answer_id(id, &record.batch_key))
            .collect();
        let logged = store.audit_ids_present(&row_ids).await?;
        let mut counts = BTreeMap::new();
        let mut failures = Vec::new();
        let mut rows = Vec::new();
        let mut kept = Vec::new();
        for (item, outcome) in items.iter().zip(outcomes) {
            let Some(view) = item.input.memories.first() else {
                continue;
            };
            let row = audit_row_of_answer(
                (&record.run_id, &record.batch_key),
                current.get(&item.custom_id),
                view,
                outcome,
                now,
                (&mut counts, &mut failures),
            );
            if row.classification.as_deref() == Some("KEEP") {
                kept.push(item.custom_id.clone());
            }
            if !logged.contains(&row.id) {
                rows.push(row);
            }
        }
        let needs_embedder = rows
            .iter()
            .any(|r| matches!(r.classification.as_deref(), Some("SPLIT" | "TRIM")))
            || !logged.is_empty();
        let embedder = if needs_embedder {
            Some((env.embedder)()?)
        } else {
            None
        };
        record_and_apply(store, embedder.as_ref(), &rows, &kept, now).await?;
        // What an earlier attempt logged but did not finish.
        if !logged.is_empty() {
            for (after, at) in unfinished(store).await? {
                let original = after["original"].as_str().unwrap_or("");
                if logged.contains(&answer_id(original, &record.batch_key)) {
                    apply(store, embedder.as_ref(), &after, at).await?;
                    add(&mut counts, "resumed", 1);
                }
            }
        }
        for failure in failures {
            tracing::warn!("{}: {}", failure.item, failure.reason);
        }
        Ok(counts)
    }

    fn result_keys(&self, record: &BatchRecord, items: &[Item]) -> Vec<String> {
        items
            .iter()
            .map(|item| answer_id(&item.custom_id, &record.batch_key))
            .collect()
    }
}
