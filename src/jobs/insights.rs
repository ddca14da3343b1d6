//! `memlife insights`: seed 004's insight extractor. Each user's narratives of the last
//! `[insights] lookback_days` (7) are clustered by meaning (`logic::insights::clusters`: every
//! two narratives of a cluster at least the embedding model's link similarity apart, or
//! `[insights] similarity`); a cluster of at least `min_cluster_size` (3) narratives that is
//! new (some narrative of it is no pattern's evidence yet, and it was never asked about) goes
//! to the LLM layer (`insight.extract`, role `reasoning`), or to the offline judge's
//! extractive pattern when no provider gives a valid reply (counted, the reason noted). A
//! pattern becomes one `learning_pattern` memory: its text, confidence, category (tag
//! `category:<name>`) and the narratives it rests on in `consolidates_memory_ids` (which prune
//! keeps as evidence). An answer that finds none, or rests on narratives outside the cluster
//! or on one only, writes nothing; the reason is noted.
//!
//! Every cluster asked about is logged once (INSIGHT, classification PATTERN with the memory
//! as it will be written, or NONE), before anything is written, keyed by the pattern's
//! derived id: a rerun does not ask again. Writes, each one Lance commit: the audit rows, then
//! the patterns with their vectors. A run killed between the two leaves PATTERN rows whose
//! memory is missing; the next run writes those memories from the log.
//!
//! With `--mode batch` the clusters go to the Batch API (one batch per user; a cluster whose
//! narratives wait in an earlier batch is not submitted again), and `memlife batches poll`
//! judges the answers and writes the patterns through `InsightsApplier`, logged first as an
//! online run logs them, at the clock of the run that submitted them.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Result, anyhow};
use serde_json::json;

use super::{Job, JobCtx, JobName, JobReport, JobScope, RunLog};
use crate::embedders::EmbedderArgs;
use crate::llm::batch::{Applier, ApplyEnv, BatchRecord};
use crate::llm::offline::insight as offline_insight;
use crate::llm::tasks::{MemoryView, Reply, Task, TaskInput};
use crate::llm::{CallMode, Item, LlmArgs, Outcome};
use crate::logic::insights::{PatternParts, clusters, is_new, pattern_id, pattern_row, refusal};
use crate::model::clock::Clock;
use crate::model::encoding::format_timestamp;
use crate::model::schema::{AUDIT_LOG, MEMORIES};
use crate::model::typed::{MemoryRow, memories_from_json};
use crate::store::audit::AuditRow;
use crate::store::{Store, sql_timestamp};

/// Recurring patterns in recent narratives, as `learning_pattern` memories (LLM
/// `insight.extract`, offline fallback).
#[derive(clap::Args, Debug, Clone)]
pub struct InsightsArgs {
    #[command(flatten)]
    pub llm: LlmArgs,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
    /// The clock the run computes at (RFC 3339); default the current time.
    #[arg(long)]
    pub now: Option<Clock>,
    /// Read narratives this many days old or newer (default `[insights] lookback_days`, 7).
    #[arg(long)]
    pub lookback_days: Option<f64>,
    /// The cosine similarity every two narratives of a cluster reach (default `[insights]
    /// similarity`, else the embedding model's link threshold).
    #[arg(long)]
    pub similarity: Option<f32>,
    #[command(flatten)]
    pub scope: JobScope,
}

impl Job for InsightsArgs {
    fn scope(&self) -> &JobScope {
        &self.scope
    }

    fn clock(&self) -> Option<Clock> {
        self.now
    }

    fn applier() -> Option<Box<dyn Applier>> {
        Some(Box::new(InsightsApplier))
    }
}

/// What insights reads of a narrative.
#[derive(serde::Deserialize)]
struct Narrative {
    id: String,
    user_id: String,
    kind: String,
    text: String,
    created_at: i64,
    emotional_salience: f64,
    embedding_model: Option<String>,
}

/// What insights reads of a pattern: its user and evidence.
#[derive(serde::Deserialize)]
struct Pattern {
    user_id: String,
    consolidates_memory_ids: Option<Vec<String>>,
}

/// A cluster to ask about.
struct Asked {
    user: String,
    id: String,
    narratives: Vec<String>,
    item: Item,
}

/// Patterns killed runs logged but did not write: PATTERN rows of abandoned or failed runs
/// whose memory is missing, read back from the log.
async fn unfinished(store: &Store, now: i64) -> Result<Vec<MemoryRow>> {
    let filter = crate::store::without_undone(
        store,
        "operation = 'INSIGHT' AND classification = 'PATTERN'",
    )
    .await?;
    #[derive(serde::Deserialize)]
    struct Logged {
        id: String,
        run_id: String,
        target_id: Option<String>,
        after_state: Option<String>,
    }
    let rows: Vec<Logged> = store.scan_rows(AUDIT_LOG.name, Some(&filter)).await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let runs: Vec<String> = rows.iter().map(|r| r.run_id.clone()).collect();
    let dead = super::killed_runs(store, &runs).await?;
    let targets: Vec<String> = rows.iter().filter_map(|r| r.target_id.clone()).collect();
    let present = store.ids_present(MEMORIES.name, &targets, None).await?;
    let mut out = Vec::new();
    for row in rows {
        let target = row.target_id.clone().unwrap_or_default();
        if !dead.contains(&row.run_id) || present.contains(&target) {
            continue;
        }
        let after: serde_json::Value =
            serde_json::from_str(row.after_state.as_deref().unwrap_or("{}"))?;
        let memory = memories_from_json(&[after["memory"].clone()], store.embedding_dim(), now)
            .map_err(|e| anyhow!("audit row {}: its pattern does not read: {e}", row.id))?
            .remove(0);
        out.push(memory);
    }
    Ok(out)
}

/// The clusters to ask about, user by user, with what was counted on the way.
async fn plan(
    ctx: &JobCtx<'_>,
    p: &crate::logic::insights::InsightParams,
    report: &mut JobReport,
    counts: &mut BTreeMap<String, u64>,
) -> Result<(Vec<Asked>, BTreeMap<String, f64>)> {
    let config = ctx.app.config().await?;
    let now = ctx.now.timestamp_micros();
    let since = p.since(now);
    let filter = ctx.user_filter_and(&format!(
        "kind = 'narrative' AND archived_at IS NULL AND created_at >= {} AND created_at <= {}",
        sql_timestamp(since),
        sql_timestamp(now)
    ));
    let (narratives, vectors) = ctx
        .store
        .scan_rows_with_vectors::<Narrative>(MEMORIES.name, &filter, "embedding")
        .await?;
    counts.insert("narratives_read".into(), narratives.len() as u64);
    let patterns: Vec<Pattern> = ctx
        .store
        .scan_rows(
            MEMORIES.name,
            Some(&ctx.user_filter_and(
                "kind = 'learning_pattern' AND source = 'insights' AND archived_at IS NULL",
            )),
        )
        .await?;
    let mut evidence: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for pattern in &patterns {
        evidence
            .entry(pattern.user_id.as_str())
            .or_default()
            .extend(pattern.consolidates_memory_ids.iter().flatten().cloned());
    }
    let asked = super::asked_before(&ctx.store, "INSIGHT").await?;
    let dim = ctx.store.embedding_dim();
    let (model, other_model) =
        super::main_model(narratives.iter().map(|n| n.embedding_model.as_deref()));
    if other_model > 0 {
        counts.insert("skipped_other_model".into(), other_model as u64);
    }
    let threshold = p
        .similarity
        .unwrap_or_else(|| config.thresholds_for(&model).0.link);
    if narratives.len() >= p.min_cluster_size {
        report.notes.push(format!(
            "narratives clustered at cosine similarity {threshold} ({})",
            if p.similarity.is_some() {
                "[insights] similarity".to_string()
            } else {
                format!("the link threshold of {model}")
            }
        ));
    }
    let mut by_user: BTreeMap<&str, (Vec<&Narrative>, Vec<f32>)> = BTreeMap::new();
    for (n, v) in narratives.iter().zip(vectors.chunks_exact(dim)) {
        if n.kind != "narrative" || n.embedding_model.as_deref().unwrap_or("") != model {
            continue;
        }
        let (rows, flat) = by_user.entry(n.user_id.as_str()).or_default();
        rows.push(n);
        flat.extend_from_slice(v);
    }
    let now_text = format_timestamp(now);
    let empty = BTreeSet::new();
    let mut out = Vec::new();
    for (user, (rows, flat)) in &by_user {
        for mut cluster in clusters(flat, dim, threshold, p) {
            *counts.entry("clusters".into()).or_default() += 1;
            // Oldest first, as the narratives happened.
            cluster.sort_by(|&a, &b| {
                (rows[a].created_at, &rows[a].id).cmp(&(rows[b].created_at, &rows[b].id))
            });
            let ids: Vec<&str> = cluster.iter().map(|&i| rows[i].id.as_str()).collect();
            let id = pattern_id(user, &ids);
            if !is_new(&ids, evidence.get(user).unwrap_or(&empty)) || asked.contains(&id) {
                *counts.entry("clusters_seen_before".into()).or_default() += 1;
                continue;
            }
            let memories: Vec<MemoryView> = cluster
                .iter()
                .map(|&i| {
                    let n = rows[i];
                    MemoryView::of(&n.id, &n.kind, n.created_at, &n.text)
                })
                .collect();
            out.push(Asked {
                user: user.to_string(),
                id: id.clone(),
                narratives: ids.iter().map(|s| s.to_string()).collect(),
                item: Item {
                    custom_id: id,
                    input: TaskInput {
                        task: Task::InsightExtract,
                        memories,
                        proposal: None,
                        now: now_text.clone(),
                        question: None,
                    },
                },
            });
        }
    }
    let emotional = narratives
        .iter()
        .map(|n| (n.id.clone(), n.emotional_salience))
        .collect();
    Ok((out, emotional))
}

/// The pattern an outcome gives: the provider's, or the offline judge's where it gave no
/// valid reply (then the reason).
fn parts_from(item: &Item, outcome: &Outcome) -> (PatternParts, Option<String>) {
    let reply = match (&outcome.reply, &outcome.failure) {
        (Some(Reply::Pattern(r)), None) => return (parts_of(r), None),
        (_, Some(failure)) => failure.clone(),
        (_, None) => "no reply".to_string(),
    };
    (
        parts_of(&offline_insight(&item.input.memories)),
        Some(reply),
    )
}

fn parts_of(r: &crate::llm::tasks::PatternReply) -> PatternParts {
    PatternParts {
        pattern: r.pattern.clone(),
        category: r.category.clone(),
        confidence: r.confidence,
        evidence_ids: r.evidence_ids.clone(),
    }
}

/// A cluster asked about: its user, the pattern's derived id, its narratives (oldest first).
struct Cluster<'a> {
    user: &'a str,
    id: &'a str,
    narratives: &'a [String],
}

/// One cluster's answer judged: its INSIGHT audit row (PATTERN with the memory as it will be
/// written, or NONE and why) and the pattern to write, if any. Fallbacks and refusals are
/// counted and noted.
fn judge(
    run_id: &str,
    c: &Cluster<'_>,
    (item, outcome): (&Item, &Outcome),
    emotional: &BTreeMap<String, f64>,
    now: i64,
    (notes, counts): (&mut Vec<String>, &mut BTreeMap<String, u64>),
) -> (AuditRow, Option<MemoryRow>) {
    let (parts, why) = parts_from(item, outcome);
    if let Some(why) = why {
        *counts.entry("offline_fallbacks".into()).or_default() += 1;
        notes.push(format!(
            "cluster {} of {}: offline pattern ({why})",
            c.id, c.user
        ));
    }
    let cluster: Vec<&str> = c.narratives.iter().map(String::as_str).collect();
    let mut row = AuditRow::new(run_id, "INSIGHT", c.id, now);
    row.user_id = Some(c.user.to_string());
    row.target_id = Some(c.id.to_string());
    row.source_ids = c.narratives.to_vec();
    row.confidence = Some(parts.confidence);
    match refusal(&parts, &cluster) {
        Some(why) => {
            *counts.entry("no_pattern".into()).or_default() += 1;
            notes.push(format!(
                "cluster {} of {}: no pattern written ({why})",
                c.id, c.user
            ));
            row.classification = Some("NONE".into());
            row.reasoning = Some(why);
            (row, None)
        }
        None => {
            let memory = pattern_row(c.user, c.id, &parts, &cluster, emotional, now);
            row.classification = Some("PATTERN".into());
            row.after_state = Some(json!({"memory": memory.to_json()}).to_string());
            (row, Some(memory))
        }
    }
}

/// Patterns embedded and written, at the run's clock.
async fn write_patterns(
    ctx: &JobCtx<'_>,
    args: &InsightsArgs,
    rows: Vec<&MemoryRow>,
) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let embedder = ctx
        .app
        .embedder(&args.embedder, ctx.store.embedding_dim(), 16)
        .await?;
    super::embed_and_write(&ctx.store, &embedder, &rows, ctx.now.timestamp_micros()).await
}

/// Batch mode: patterns a killed run logged are written, and the clusters not waiting in an
/// earlier batch are submitted, one batch per user; `batches poll` writes their patterns
/// (`InsightsApplier`).
async fn submit(
    ctx: &JobCtx<'_>,
    args: &InsightsArgs,
    log: &RunLog,
    llm: &crate::llm::Llm,
    (asked, resumed): (&[Asked], &[MemoryRow]),
    report: &mut JobReport,
    counts: &mut BTreeMap<String, u64>,
) -> Result<()> {
    if !resumed.is_empty() && !ctx.dry_run {
        counts.insert("resumed".into(), resumed.len() as u64);
        write_patterns(ctx, args, resumed.iter().collect()).await?;
    }
    let requests = asked
        .iter()
        .map(|a| (a.user.clone(), a.item.clone()))
        .collect();
    let task = (
        Task::InsightExtract,
        requests,
        "clusters",
        "clusters_in_pending_batches",
    );
    let asked = log
        .submit_unless_pending(ctx, llm, task, counts, &mut report.notes)
        .await?;
    counts.insert("clusters_asked".into(), asked as u64);
    Ok(())
}

/// Applies `insights` batches for `batches poll`: each cluster's answer judged as an online
/// run judges it, against the narratives still in the store, and logged (INSIGHT) before its
/// pattern is written, at the clock of the run that submitted it. A pattern already written
/// (an earlier attempt at the same batch) is not written again.
pub struct InsightsApplier;

/// What the applier reads of a cluster's narratives now.
#[derive(serde::Deserialize)]
struct NarrativeNow {
    id: String,
    emotional_salience: f64,
}

#[async_trait::async_trait]
impl Applier for InsightsApplier {
    async fn apply(
        &self,
        env: &ApplyEnv<'_>,
        record: &BatchRecord,
        items: &[Item],
        outcomes: &[Outcome],
    ) -> Result<BTreeMap<String, u64>> {
        let store = env.store;
        let now = super::batch_clock(record, items)?;
        let ids: Vec<String> = items
            .iter()
            .flat_map(|i| i.input.memories.iter().map(|m| m.id.clone()))
            .collect();
        let present: Vec<NarrativeNow> = store.rows_with_ids(MEMORIES.name, &ids, None).await?;
        let emotional: BTreeMap<String, f64> = present
            .iter()
            .map(|n| (n.id.clone(), n.emotional_salience))
            .collect();
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        let mut notes = Vec::new();
        let mut audit = Vec::new();
        let mut rows = Vec::new();
        for (item, outcome) in items.iter().zip(outcomes) {
            // The cluster's narratives still in the store, oldest first as submitted.
            let narratives: Vec<String> = item
                .input
                .memories
                .iter()
                .filter(|m| emotional.contains_key(&m.id))
                .map(|m| m.id.clone())
                .collect();
            // Batches are submitted one per user (`submit_unless_pending`).
            let user = record.user_id.as_deref().unwrap_or_default();
            let cluster = Cluster {
                user,
                id: &item.custom_id,
                narratives: &narratives,
            };
            let (row, memory) = judge(
                &record.run_id,
                &cluster,
                (item, outcome),
                &emotional,
                now,
                (&mut notes, &mut counts),
            );
            audit.push(row);
            rows.extend(memory);
        }
        let targets: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
        let written = store.ids_present(MEMORIES.name, &targets, None).await?;
        counts.insert("patterns_written_before".into(), written.len() as u64);
        store.write_audit(&audit).await?;
        crate::crash::point("insights.after-audit");
        let new: Vec<MemoryRow> = rows
            .into_iter()
            .filter(|r| !written.contains(&r.id))
            .collect();
        if !new.is_empty() {
            let embedder = (env.embedder)()?;
            let refs: Vec<&MemoryRow> = new.iter().collect();
            super::embed_and_write(store, &embedder, &refs, now).await?;
        }
        counts.insert("patterns".into(), new.len() as u64);
        Ok(counts)
    }

    fn result_keys(&self, record: &BatchRecord, items: &[Item]) -> Vec<String> {
        items
            .iter()
            .map(|item| AuditRow::new(&record.run_id, "INSIGHT", &item.custom_id, 0).id)
            .collect()
    }
}

pub async fn run(ctx: &JobCtx<'_>, args: &InsightsArgs) -> Result<JobReport> {
    let config = ctx.app.config().await?;
    let mut p = config.insights.clone();
    if let Some(days) = args.lookback_days {
        p.lookback_days = days;
    }
    if args.similarity.is_some() {
        p.similarity = args.similarity;
    }
    p.validate()
        .map_err(|e| anyhow!("--lookback-days or --similarity: {e}"))?;
    let now = ctx.now.timestamp_micros();
    let log = RunLog::start(ctx, JobName::Insights.as_str(), &json!({"insights": p})).await?;
    let mut report = JobReport::new(JobName::Insights.as_str(), ctx);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let llm = ctx.app.llm(&args.llm).await?;
    let resumed = unfinished(&ctx.store, now).await?;
    let (asked, emotional) = plan(ctx, &p, &mut report, &mut counts).await?;
    if llm.mode == CallMode::Batch {
        submit(
            ctx,
            args,
            &log,
            &llm,
            (&asked, &resumed),
            &mut report,
            &mut counts,
        )
        .await?;
        report.counts = counts;
        log.finish(ctx, &mut report).await?;
        return Ok(report);
    }
    counts.insert("clusters_asked".into(), asked.len() as u64);
    let items: Vec<Item> = asked.iter().map(|a| a.item.clone()).collect();
    let outcomes = if items.is_empty() {
        Vec::new()
    } else {
        llm.run(items).await
    };
    if !outcomes.is_empty() {
        report.llm = Some(llm.usage(&outcomes));
    }
    let mut audit = Vec::new();
    let mut rows = Vec::new();
    counts.insert("offline_fallbacks".into(), 0);
    for (a, outcome) in asked.iter().zip(&outcomes) {
        let cluster = Cluster {
            user: &a.user,
            id: &a.id,
            narratives: &a.narratives,
        };
        let (row, memory) = judge(
            log.run_id(),
            &cluster,
            (&a.item, outcome),
            &emotional,
            now,
            (&mut report.notes, &mut counts),
        );
        audit.push(row);
        rows.extend(memory);
    }
    counts.insert("patterns".into(), rows.len() as u64);
    if !resumed.is_empty() {
        counts.insert("resumed".into(), resumed.len() as u64);
    }
    if ctx.dry_run {
        for row in rows.iter().take(20) {
            report.notes.push(format!(
                "{} ({}, {} narratives): {}",
                row.id,
                row.user_id,
                row.consolidates_memory_ids.len(),
                row.text
            ));
        }
    } else {
        ctx.store.write_audit(&audit).await?;
        crate::crash::point("insights.after-audit");
        write_patterns(ctx, args, rows.iter().chain(&resumed).collect()).await?;
    }
    report.counts = counts;
    log.finish(ctx, &mut report).await?;
    Ok(report)
}
