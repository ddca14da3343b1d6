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
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{ItemFailure, Job, JobCtx, JobName, JobReport, JobScope, RunLog};
use crate::embedders::{Embedded, Embedder, EmbedderArgs};
use crate::llm::tasks::{MemoryView, RefineAction, Reply, Task, TaskInput};
use crate::llm::{Item, LlmArgs, Mode};
use crate::model::encoding::{format_timestamp, parse_timestamp};
use crate::model::schema::{AUDIT_LOG, LINKS, MEMORIES};
use crate::store::audit::{AuditRow, derived_id};
use crate::store::{Store, batch_from_json, json_rows, sql_string, sql_timestamp};

/// Which memories `memlife refine` looks at (`[refine]` in memlife.toml).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RefineParams {
    pub verbose_threshold_chars: usize,
    pub min_age_days: i64,
    pub min_access_count: i64,
    pub cooldown_days: i64,
    pub max_rejections: i64,
    pub max_candidates: usize,
}

impl Default for RefineParams {
    fn default() -> Self {
        RefineParams {
            verbose_threshold_chars: 200,
            min_age_days: 7,
            min_access_count: 5,
            cooldown_days: 30,
            max_rejections: 3,
            max_candidates: 100,
        }
    }
}

/// Splits verbose memories into focused ones, or trims them, through the LLM layer
/// (`refine`); refused ones are not asked again after `max_rejections` refusals.
#[derive(clap::Args, Debug, Clone)]
pub struct RefineArgs {
    /// The clock the run computes at (RFC 3339); default the current time.
    #[arg(long)]
    pub now: Option<String>,
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

    fn clock(&self) -> Option<&str> {
        self.now.as_deref()
    }
}

/// The memories of a user that qualify, longest first.
async fn candidates(
    ctx: &JobCtx<'_>,
    user: &str,
    p: &RefineParams,
) -> Result<Vec<serde_json::Map<String, Value>>> {
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
    let columns: Vec<&str> = MEMORIES
        .fields
        .iter()
        .map(|f| f.name)
        .filter(|n| *n != "embedding")
        .collect();
    let mut rows: Vec<_> = json_rows(
        &ctx.store
            .scan_columns("memories", Some(&filter), &columns)
            .await?,
    )
    .into_iter()
    .filter(|r| r["text"].as_str().map_or(0, |t| t.chars().count()) >= p.verbose_threshold_chars)
    .collect();
    let length = |r: &serde_json::Map<String, Value>| r["text"].as_str().map_or(0, str::len);
    rows.sort_by(|a, b| {
        length(b)
            .cmp(&length(a))
            .then_with(|| a["id"].as_str().cmp(&b["id"].as_str()))
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
    ctx: &JobCtx<'_>,
    embedder: &Embedder,
    after: &Value,
    refined_at: i64,
) -> Result<()> {
    let store = &ctx.store;
    let dim = store.embedding_dim();
    let now = ctx.now.timestamp_micros();
    let original = after["original"].as_str().unwrap_or("");
    let mut rows = Vec::new();
    for row in after["memories"].as_array().into_iter().flatten() {
        let mut row = row.clone();
        let text = row["text"].as_str().unwrap_or("").to_string();
        row["embedding"] = json!(embed_one(embedder, &text).await?);
        row["embedding_model"] = json!(embedder.model_name());
        rows.push(row);
    }
    if !rows.is_empty() {
        let batch = batch_from_json(&MEMORIES, dim, now, &rows).map_err(|e| anyhow!(e))?;
        store.upsert_batch(&MEMORIES, batch).await?;
    }
    crate::crash::point("refine.after-memories");
    let links: Vec<Value> = after["links"].as_array().cloned().unwrap_or_default();
    if !links.is_empty() {
        let batch = batch_from_json(&LINKS, dim, now, &links).map_err(|e| anyhow!(e))?;
        store.upsert_batch(&LINKS, batch).await?;
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
    let logged = "operation IN ('SPLIT', 'UPDATE') AND classification IN ('SPLIT', 'TRIM')";
    let heads = json_rows(
        &store
            .scan_columns(
                AUDIT_LOG.name,
                Some(logged),
                &["id", "target_id", "created_at"],
            )
            .await?,
    );
    let originals: Vec<String> = heads
        .iter()
        .filter_map(|r| r["target_id"].as_str().map(str::to_string))
        .collect();
    let mut refined: BTreeMap<String, i64> = BTreeMap::new();
    for chunk in originals.chunks(1000) {
        let list = chunk
            .iter()
            .map(|id| sql_string(id))
            .collect::<Vec<_>>()
            .join(", ");
        for r in json_rows(
            &store
                .scan_columns(
                    "memories",
                    Some(&format!("id IN ({list})")),
                    &["id", "last_refined_at"],
                )
                .await?,
        ) {
            let at = r["last_refined_at"].as_str().and_then(parse_timestamp);
            if let (Some(id), Some(at)) = (r["id"].as_str(), at) {
                refined.insert(id.to_string(), at);
            }
        }
    }
    let at_of = |r: &serde_json::Map<String, Value>| {
        r["created_at"]
            .as_str()
            .and_then(parse_timestamp)
            .unwrap_or(0)
    };
    let pending: Vec<String> = heads
        .iter()
        .filter(|r| {
            let original = r["target_id"].as_str().unwrap_or("");
            refined.get(original).is_none_or(|done| *done < at_of(r))
        })
        .filter_map(|r| r["id"].as_str().map(sql_string))
        .collect();
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    let filter = format!("{logged} AND id IN ({})", pending.join(", "));
    let mut out = Vec::new();
    for row in json_rows(&store.scan(AUDIT_LOG.name, Some(&filter)).await?) {
        let after: Value = serde_json::from_str(row["after_state"].as_str().unwrap_or("{}"))?;
        out.push((after, at_of(&row)));
    }
    Ok(out)
}

fn add(counts: &mut BTreeMap<String, u64>, name: &str, value: u64) {
    *counts.entry(name.to_string()).or_default() += value;
}

pub async fn run(ctx: &JobCtx<'_>, args: &RefineArgs) -> Result<JobReport> {
    let llm = ctx.app.llm(&args.llm).await?;
    if llm.mode == Mode::Batch {
        bail!("refine --mode batch is not available yet: run it online (an open part of issue 13)");
    }
    let config = ctx.app.config().await?;
    let p = &config.refine;
    let now = ctx.now.timestamp_micros();
    let now_text = format_timestamp(now);
    let log = RunLog::start(
        ctx,
        JobName::Refine.as_str(),
        &json!({"now": now_text, "refine": p}),
    )
    .await?;
    let mut report = JobReport::new(JobName::Refine.as_str(), ctx);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let embedder = ctx
        .app
        .embedder(&args.embedder, ctx.store.embedding_dim(), 16)
        .await?;
    // Candidates are chosen before a killed run's refinements are finished, so the memories
    // those create wait for the next run, as they would have after an uninterrupted one.
    let mut memories = Vec::new();
    for user in super::users_of(ctx, "memories").await? {
        memories.extend(candidates(ctx, &user, p).await?);
    }
    if !ctx.dry_run {
        for (after, at) in unfinished(&ctx.store).await? {
            let user = after["memories"][0]["user_id"].as_str().unwrap_or("");
            if ctx.user.as_deref().is_some_and(|u| u != user) && !user.is_empty() {
                continue;
            }
            apply(ctx, &embedder, &after, at).await?;
            let original = after["original"].as_str().unwrap_or("");
            memories.retain(|m| m["id"].as_str() != Some(original));
            add(&mut counts, "resumed", 1);
        }
    }
    add(&mut counts, "candidates", memories.len() as u64);
    let items: Vec<Item> = memories
        .iter()
        .enumerate()
        .map(|(i, m)| Item {
            custom_id: format!("memory-{i}"),
            input: TaskInput {
                task: Task::Refine,
                memories: vec![MemoryView::from_row(m)],
                proposal: None,
                now: now_text.clone(),
            },
        })
        .collect();
    let outcomes = llm.run(items).await;
    let mut kept = Vec::new();
    let mut logged = Vec::new();
    for (memory, outcome) in memories.iter().zip(&outcomes) {
        let id = memory["id"].as_str().unwrap_or("").to_string();
        if let Some(failure) = &outcome.failure {
            report.failures.push(ItemFailure {
                item: id,
                reason: format!("refine: {failure}"),
            });
            continue;
        }
        let Some(Reply::Refine(reply)) = &outcome.reply else {
            continue;
        };
        let (operation, new_rows, links) = match reply.action {
            RefineAction::Keep => {
                kept.push(id);
                continue;
            }
            RefineAction::Trim => {
                let mut row = Value::Object(memory.clone());
                row["text"] = json!(reply.parts[0]);
                row["updated_at"] = json!(now_text);
                ("UPDATE", vec![row], Vec::new())
            }
            RefineAction::Split => {
                let mut rows = Vec::new();
                let mut links = Vec::new();
                for (k, part) in reply.parts.iter().enumerate() {
                    let new_id = derived_id(&format!("split|{id}|{k}|{part}"));
                    rows.push(json!({
                        "id": new_id,
                        "user_id": memory["user_id"],
                        "text": part,
                        "kind": memory["kind"],
                        "source": "refine",
                        "importance": memory["importance"],
                        "created_at": memory["created_at"],
                        "updated_at": now_text,
                        "valid_from": memory["valid_from"],
                        "happens_at": memory["happens_at"],
                        "tags": memory["tags"],
                        "consolidates_memory_ids": [id],
                        // Made by refinement: within the cooldown like their original.
                        "last_refined_at": now_text,
                    }));
                    links.push(json!({
                        "source_id": new_id, "target_id": id, "user_id": memory["user_id"],
                        "link_type": "split_from", "confidence": reply.confidence,
                        "reasoning": "split from the target by refine", "origin": "llm",
                        "created_at": now_text,
                    }));
                }
                ("SPLIT", rows, links)
            }
        };
        let mut row = AuditRow::new(log.run_id(), operation, &format!("refine|{id}|{now}"), now);
        row.user_id = memory["user_id"].as_str().map(str::to_string);
        row.source_ids = vec![id.clone()];
        row.target_id = Some(id.clone());
        row.classification = Some(format!("{:?}", reply.action).to_uppercase());
        row.confidence = Some(reply.confidence.clamp(0.0, 1.0));
        row.reasoning = Some(reply.reasoning.clone());
        row.before_state = Some(json!({"text": memory["text"]}).to_string());
        row.after_state =
            Some(json!({"original": id, "memories": new_rows, "links": links}).to_string());
        add(
            &mut counts,
            if operation == "SPLIT" {
                "split"
            } else {
                "trimmed"
            },
            1,
        );
        if operation == "SPLIT" {
            add(&mut counts, "memories_created", reply.parts.len() as u64);
        }
        logged.push(row);
    }
    add(&mut counts, "kept", kept.len() as u64);
    if !ctx.dry_run {
        ctx.store.write_audit(&logged).await?;
        crate::crash::point("refine.after-audit");
        for row in &logged {
            let after: Value = serde_json::from_str(row.after_state.as_deref().unwrap_or("{}"))?;
            apply(ctx, &embedder, &after, now).await?;
        }
        if !kept.is_empty() {
            let list = kept
                .iter()
                .map(|id| sql_string(id))
                .collect::<Vec<_>>()
                .join(", ");
            // Counted once per run: a rerun with the same clock finds them refined already.
            ctx.store
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
    }
    report.counts = counts;
    report.llm = Some(llm.usage(&outcomes));
    log.finish(ctx, &mut report).await?;
    Ok(report)
}
