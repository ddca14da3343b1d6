//! `memlife integrate FILE`: new facts into the store (seed 003). Each fact (a memory row as
//! `import` validates it) is embedded; its candidates are the user's current memories (not
//! archived, not superseded, embedded by the same model) at least as similar as the
//! calibrated `integrate` threshold, at most `top_k`, most similar first; with none it is
//! ADDed. Otherwise the judge (`integrate.classify`) is asked about the fact against each
//! candidate and `logic::integrate::decide` chooses:
//! - DUPLICATE: nothing new is stored; the existing memory's `updated_at` moves to the run's
//!   clock when the fact is newer (audit `UPDATE`), else audit `NOOP`;
//! - SUPERSEDE: the old memory gets `valid_until` (the fact's `valid_from`) and
//!   `superseded_by`, and stays retrievable; the new memory joins the old one's
//!   `supersession_chain_id` (or starts it, named by the old id); a `supersedes` link new ->
//!   old. With `enable_delete` the old memory is also archived (never erased), logged as
//!   `DELETE` first;
//! - MERGE: `integrate.merge` writes one text keeping every detail; the existing memory keeps
//!   its id and gets the text, a fresh embedding, importance max, created_at min, tags united,
//!   the fact's id in `consolidates_memory_ids`; the fact itself is stored archived, with a
//!   `merged_into` link to it, so its words stay recoverable. A failed merge keeps both
//!   (COEXIST);
//! - COEXIST: ADD plus a `related_to` link;
//! - an answer under `min_confidence` that would change a memory: the fact waits in
//!   `review_queue` (`memlife review`), nothing else is written.
//!
//! Facts of one user run in file order, each seeing the earlier ones' results (two facts that
//! repeat each other end as one memory); users run side by side, in rounds: each round judges
//! its facts in one concurrent batch of LLM calls, and a user's facts that cannot change what
//! another is judged against (no resemblance, no candidate in common) share a round. The
//! store is written a round behind, while the next round is judged. Every decision is an audit row written
//! before it is applied (operation, classification, confidence, reasoning, before and after
//! state); a fact whose row exists is not integrated again, and a killed run's logged but
//! unapplied decisions are applied by the next run from the log. Entities of merged and new
//! memories are found by `memlife entities`, which reads new and changed memories.
//! `--mode batch` judges through Batch API rounds instead (`integrate_batch`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{Result, anyhow, bail};
use serde_json::{Value, json};

use super::import::{OnError, read_validated};
use super::{ItemFailure, Job, JobCtx, JobName, JobReport, JobScope, RunLog, Status};
use crate::embedders::{Embedded, Embedder, EmbedderArgs};
use crate::formats::Format;
use crate::llm::tasks::{Classification, MemoryView, Reply, Task, TaskInput};
use crate::llm::{Item, Llm, LlmArgs, Outcome};
use crate::logic::integrate::{
    Answer, Class, Decision, FactReach, IntegrateParams, decide, rounds_by_dependency,
};
pub use crate::logic::integrate::{FactPlan, plan};
use crate::logic::shard::UserScope;
use crate::logic::similarity::int8::dot_f32;
use crate::logic::undo::undo_id;
use crate::model::clock::Clock;
use crate::model::encoding::format_timestamp;
use crate::model::schema::{AUDIT_LOG, MEMORIES, REVIEW_QUEUE};
use crate::model::typed::{EmbeddedMemory, LinkRow, MemoryRow, ReviewItem};
use crate::store::audit::{AuditRow, derived_id};
use crate::store::{Store, sql_list, sql_string, sql_timestamp};

/// Integrate new facts (JSON Lines, CSV or Parquet memory rows): ADD, UPDATE (a duplicate
/// touched), SUPERSEDE, MERGE or NOOP, judged by the LLM layer (`integrate.classify`,
/// `integrate.merge`); unsure answers go to `memlife review`.
#[derive(clap::Args, Debug, Clone)]
pub struct IntegrateArgs {
    /// The new facts: memory rows (user_id and text; optional id, timestamps, importance,
    /// tags, kind ...), validated as `import` validates them.
    pub file: PathBuf,
    /// Input format (default: from the file extension).
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Invalid rows: abort integrates nothing, skip integrates the valid rows.
    #[arg(long, value_enum, default_value = "abort")]
    pub on_error: OnError,
    /// The clock the run computes at (RFC 3339); default the current time.
    #[arg(long)]
    pub now: Option<Clock>,
    /// Candidates judged per fact (default `[integrate] top_k`, 5).
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Answers under this confidence go to the review queue (default `[integrate]
    /// min_confidence`, 0.8).
    #[arg(long)]
    pub min_confidence: Option<f64>,
    /// Archive superseded memories as well (`[integrate] enable_delete`; never erases).
    #[arg(long)]
    pub enable_delete: bool,
    #[command(flatten)]
    pub scope: JobScope,
    #[command(flatten)]
    pub llm: LlmArgs,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
}

impl Job for IntegrateArgs {
    fn scope(&self) -> &JobScope {
        &self.scope
    }

    fn applier() -> Option<Box<dyn crate::llm::batch::Applier>> {
        Some(Box::new(super::integrate_batch::IntegrateApplier))
    }

    fn clock(&self) -> Option<Clock> {
        self.now
    }
}

/// Audit classifications of integrate's decisions (other jobs use other ones).
const CLASSIFICATIONS: &str = "'NEW', 'COEXIST', 'DUPLICATE', 'SUPERSEDE', 'MERGE'";

/// The audit row id of a fact's decision: one per fact, unless `memlife undo` reverted it
/// (then the next decision is generation 1, and so on).
pub fn decision_id(fact_id: &str, generation: u32) -> String {
    if generation == 0 {
        derived_id(&format!("integrate|{fact_id}"))
    } else {
        derived_id(&format!("integrate|{fact_id}|{generation}"))
    }
}

/// Where a keyed audit row stands, generation by generation (`memlife undo` reverts a row
/// and the next one takes the next generation).
enum Standing {
    /// No run wrote this generation: the id to write.
    Free(String),
    /// Written and not undone.
    Written(String),
}

/// For each key, the first generation of `id_of(key, generation)` that is free or written and
/// not undone: one `audit_log` read per generation probed (one, unless keys were undone).
async fn standing(
    store: &Store,
    keys: &[String],
    id_of: impl Fn(&str, u32) -> String,
) -> Result<Vec<Standing>> {
    let mut out: Vec<Option<Standing>> = (0..keys.len()).map(|_| None).collect();
    let mut generation = 0u32;
    loop {
        let open: Vec<usize> = (0..keys.len()).filter(|&i| out[i].is_none()).collect();
        if open.is_empty() {
            break;
        }
        let ids: Vec<String> = open.iter().map(|&i| id_of(&keys[i], generation)).collect();
        let present = store.audit_ids_present(&ids).await?;
        let undos: Vec<String> = ids
            .iter()
            .filter(|id| present.contains(*id))
            .map(|id| undo_id(id))
            .collect();
        let undone = store.audit_ids_present(&undos).await?;
        for (&i, id) in open.iter().zip(ids) {
            if !present.contains(&id) {
                out[i] = Some(Standing::Free(id));
            } else if !undone.contains(&undo_id(&id)) {
                out[i] = Some(Standing::Written(id));
            }
        }
        generation += 1;
    }
    Ok(out.into_iter().flatten().collect())
}

/// The audit row id of a review item's settlement: the standing one if a run already wrote
/// it (a killed settlement is finished under the same id), else the first generation no undo
/// has reverted.
pub async fn settlement_ids(store: &Store, facts: &[String]) -> Result<Vec<String>> {
    let id = |f: &str, g: u32| derived_id(&format!("integrate-review|{f}|{g}"));
    Ok(standing(store, facts, id)
        .await?
        .into_iter()
        .map(|s| match s {
            Standing::Free(id) | Standing::Written(id) => id,
        })
        .collect())
}

/// For each fact id: `None` when a decision about it stands (integrated), else the id its
/// decision gets (a fact never decided, or whose every decision was undone).
pub(super) async fn next_decisions(store: &Store, facts: &[String]) -> Result<Vec<Option<String>>> {
    Ok(standing(store, facts, decision_id)
        .await?
        .into_iter()
        .map(|s| match s {
            Standing::Free(id) => Some(id),
            Standing::Written(_) => None,
        })
        .collect())
}

/// A user's current memories as the candidate search needs them.
#[derive(Default, Clone)]
pub(super) struct UserMemories {
    ids: Vec<String>,
    pub(super) views: Vec<MemoryView>,
    /// The vectors end to end, `dim` floats each: one allocation per user, not one per memory
    /// (100k of them were a tenth of an integrate run, in allocation and page faults).
    vectors: Vec<f32>,
    dim: usize,
}

impl UserMemories {
    fn vector(&self, i: usize) -> &[f32] {
        &self.vectors[i * self.dim..(i + 1) * self.dim]
    }

    fn remove(&mut self, id: &str) {
        if let Some(i) = self.ids.iter().position(|x| x == id) {
            let last = self.ids.len() - 1;
            self.ids.swap_remove(i);
            self.views.swap_remove(i);
            // As `swap_remove`: the last vector takes the removed one's place.
            let dim = self.dim;
            self.vectors
                .copy_within(last * dim..(last + 1) * dim, i * dim);
            self.vectors.truncate(last * dim);
        }
    }

    fn push(&mut self, id: String, view: MemoryView, vector: &[f32]) {
        if self.ids.is_empty() {
            self.dim = vector.len();
        }
        debug_assert_eq!(vector.len(), self.dim, "one dimension per store");
        self.ids.push(id);
        self.views.push(view);
        self.vectors.extend_from_slice(vector);
    }

    pub(super) fn upsert(&mut self, view: MemoryView, vector: Vec<f32>) {
        self.remove(&view.id);
        self.push(view.id.clone(), view, &vector);
    }

    /// The `k` most similar at or above `threshold`, most similar first (ties by id).
    pub(super) fn candidates(&self, vector: &[f32], threshold: f32, k: usize) -> Vec<(usize, f32)> {
        if self.ids.is_empty() {
            return Vec::new();
        }
        // This CPU's kernel (AVX2 with FMA where it runs): the portable loop was a tenth of an
        // integrate run's time.
        let dot = dot_f32();
        let mut scored: Vec<(usize, f32)> = self
            .vectors
            .chunks_exact(self.dim)
            .enumerate()
            .map(|(i, v)| (i, dot(vector, v)))
            .filter(|(_, s)| *s >= threshold)
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(self.ids[a.0].cmp(&self.ids[b.0])));
        scored.truncate(k);
        scored
    }
}

/// The current memories of `users` embedded by `model`: not archived, not superseded, valid
/// at `now`.
async fn current_memories(
    store: &Store,
    users: &[String],
    model: &str,
    now: i64,
) -> Result<(BTreeMap<String, UserMemories>, u64)> {
    let mut out: BTreeMap<String, UserMemories> = BTreeMap::new();
    let mut other_model = 0u64;
    let dim = store.embedding_dim();
    for chunk in users.chunks(500) {
        let filter = format!(
            "user_id IN ({}) AND archived_at IS NULL AND state <> 'archived' \
             AND superseded_by IS NULL AND (valid_until IS NULL OR valid_until > {})",
            sql_list(chunk),
            sql_timestamp(now)
        );
        let (rows, vectors) = store
            .scan_rows_with_vectors::<EmbeddedMemory>("memories", &filter, "embedding")
            .await?;
        for (row, vector) in rows.into_iter().zip(vectors.chunks_exact(dim)) {
            if row.embedding_model.as_deref() != Some(model) {
                other_model += 1;
                continue;
            }
            let m = out.entry(row.user_id.clone()).or_default();
            m.push(row.id.clone(), MemoryView::from_shown(row.shown()), vector);
        }
    }
    Ok((out, other_model))
}

pub(super) fn add(counts: &mut BTreeMap<String, u64>, name: &str, value: u64) {
    *counts.entry(name.to_string()).or_default() += value;
}

/// A fact as the judge reads it.
pub(super) fn fact_view(fact: &MemoryRow) -> MemoryView {
    MemoryView::from_memory(fact)
}

/// Writes plans: their audit rows (one commit), then links, review items and memories (one
/// commit each; memories last, so a decision with memory rows counts as applied once its
/// memories are written). `vectors` holds the embeddings of rows whose text is known; every
/// other row is embedded here.
pub async fn write_plans(
    store: &Store,
    embedder: &Embedder,
    plans: &[FactPlan],
    vectors: &BTreeMap<String, Vec<f32>>,
    now: i64,
    job: &str,
) -> Result<()> {
    if plans.is_empty() {
        return Ok(());
    }
    let audit: Vec<AuditRow> = plans.iter().flat_map(|p| p.audit.clone()).collect();
    store.write_audit(&audit).await?;
    crate::crash::point(&format!("{job}.after-audit"));
    apply_plans(store, embedder, plans, vectors, now, job).await
}

/// Applies logged plans (idempotent: upserts on keys; review items only when absent).
async fn apply_plans(
    store: &Store,
    embedder: &Embedder,
    plans: &[FactPlan],
    vectors: &BTreeMap<String, Vec<f32>>,
    now: i64,
    job: &str,
) -> Result<()> {
    let links: Vec<LinkRow> = plans.iter().flat_map(|p| p.links.clone()).collect();
    if !links.is_empty() {
        store.upsert_links(&links, now).await?;
    }
    crate::crash::point(&format!("{job}.after-links"));
    let reviews: Vec<ReviewItem> = plans.iter().filter_map(|p| p.review.clone()).collect();
    if !reviews.is_empty() {
        let ids: Vec<String> = reviews.iter().map(|r| r.id.clone()).collect();
        let present = store.ids_present(REVIEW_QUEUE.name, &ids, None).await?;
        let fresh: Vec<ReviewItem> = reviews
            .into_iter()
            .filter(|r| !present.contains(&r.id))
            .collect();
        if !fresh.is_empty() {
            store.upsert_review_items(&fresh, now).await?;
        }
    }
    crate::crash::point(&format!("{job}.after-review"));
    let rows: Vec<MemoryRow> = plans.iter().flat_map(|p| p.memories.clone()).collect();
    if rows.is_empty() {
        return Ok(());
    }
    // Texts without a known vector are embedded in one call.
    let missing: Vec<String> = rows
        .iter()
        .filter(|r| !vectors.contains_key(&r.id))
        .map(|r| r.text.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut by_text: BTreeMap<String, Vec<f32>> = BTreeMap::new();
    if !missing.is_empty() {
        let texts: Vec<&str> = missing.iter().map(String::as_str).collect();
        for (text, e) in missing.iter().zip(embedder.embed(&texts).await?) {
            match e {
                Embedded::Vector { values, .. } => {
                    by_text.insert(text.clone(), values);
                }
                Embedded::Refused(why) => bail!("the embedder refused {text:?}: {why}"),
            }
        }
    }
    let model = embedder.model_name();
    let mut out_vectors = Vec::with_capacity(rows.len());
    let rows: Vec<MemoryRow> = rows
        .into_iter()
        .map(|mut row| {
            out_vectors.push(
                vectors
                    .get(&row.id)
                    .or_else(|| by_text.get(&row.text))
                    .cloned(),
            );
            row.embedding_model = Some(model.clone());
            // A new vector is new to `link`, a new text to `entities`.
            row.link_mark = None;
            row.entity_mark = None;
            row.scores_due_at = None;
            row
        })
        .collect();
    store.upsert_memories(&rows, &out_vectors, now).await?;
    Ok(())
}

/// Integrate and review runs that did not finish.
async fn open_runs(store: &Store) -> Result<Vec<String>> {
    #[derive(serde::Deserialize)]
    struct Open {
        run_id: String,
    }
    let filter = "job IN ('integrate', 'review') AND status IN ('running', 'abandoned', 'failed')";
    Ok(store
        .scan_rows::<Open>("runs", Some(filter))
        .await?
        .into_iter()
        .map(|r| r.run_id)
        .collect())
}

/// Plans a killed run logged and did not apply: decisions whose memory (the audit row's
/// target) is missing or older than the decision, and review items not in the queue.
/// `runs`: these runs only (a batch applier finishing what an earlier application of its
/// batch logged), else every integrate or review run that did not finish.
async fn unfinished(
    store: &Store,
    scope: &UserScope,
    runs: Option<&[String]>,
    now: i64,
) -> Result<Vec<FactPlan>> {
    // Only runs that did not finish can have left a decision logged and not applied (a run
    // applies every plan before it finishes), so the log of finished runs is never reread.
    // A batch is applied after its submitting run finished: its applier names that run.
    let open: Vec<String> = if let Some(runs) = runs {
        runs.to_vec()
    } else {
        open_runs(store).await?
    };
    if open.is_empty() {
        return Ok(Vec::new());
    }
    let mut filter = format!(
        "run_id IN ({}) AND ((operation IN ('ADD', 'UPDATE', 'SUPERSEDE', 'MERGE') AND \
         classification IN ({CLASSIFICATIONS})) OR operation = 'REVIEW')",
        sql_list(&open)
    );
    if let UserScope::One(u) = scope {
        filter = format!("{filter} AND user_id = {}", sql_string(u));
    }
    #[derive(serde::Deserialize)]
    struct Head {
        id: String,
        operation: String,
        source_ids: Option<Vec<String>>,
        target_id: Option<String>,
        created_at: i64,
        user_id: Option<String>,
    }
    let heads: Vec<Head> = store
        .scan_rows::<Head>(AUDIT_LOG.name, Some(&filter))
        .await?
        .into_iter()
        .filter(|h| h.user_id.as_deref().is_none_or(|u| scope.contains(u)))
        .collect();
    if heads.is_empty() {
        return Ok(Vec::new());
    }
    #[derive(serde::Deserialize)]
    struct Updated {
        id: String,
        updated_at: i64,
    }
    let targets: Vec<String> = heads.iter().filter_map(|h| h.target_id.clone()).collect();
    let updated: BTreeMap<String, i64> = store
        .rows_with_ids::<Updated>("memories", &targets, None)
        .await?
        .into_iter()
        .map(|r| (r.id, r.updated_at))
        .collect();
    let fact_of = |h: &Head| {
        h.source_ids
            .iter()
            .flatten()
            .last()
            .cloned()
            .unwrap_or_default()
    };
    let review_ids: Vec<String> = heads
        .iter()
        .filter(|h| h.operation == "REVIEW")
        .flat_map(|h| h.source_ids.iter().flatten())
        .map(|f| derived_id(&format!("review|{f}")))
        .collect();
    let queued = store
        .ids_present(REVIEW_QUEUE.name, &review_ids, None)
        .await?;
    let pending: Vec<String> = heads
        .iter()
        .filter(|h| {
            if h.operation == "REVIEW" {
                !queued.contains(&derived_id(&format!("review|{}", fact_of(h))))
            } else {
                updated
                    .get(h.target_id.as_deref().unwrap_or(""))
                    .is_none_or(|u| *u < h.created_at)
            }
        })
        .map(|h| h.id.clone())
        .collect();
    // Decisions `memlife undo` reverted stay reverted.
    let undos: Vec<String> = pending.iter().map(|id| undo_id(id)).collect();
    let undone = store.audit_ids_present(&undos).await?;
    let pending: Vec<String> = pending
        .into_iter()
        .filter(|id| !undone.contains(&undo_id(id)))
        .collect();
    #[derive(serde::Deserialize)]
    struct Logged {
        id: String,
        after_state: Option<String>,
    }
    let mut plans = Vec::new();
    for chunk in pending.chunks(500) {
        let filter = format!("id IN ({})", sql_list(chunk));
        for row in store
            .scan_rows::<Logged>(AUDIT_LOG.name, Some(&filter))
            .await?
        {
            let after: Value = serde_json::from_str(row.after_state.as_deref().unwrap_or("{}"))
                .map_err(|e| anyhow!("audit row {}: unreadable after_state: {e}", row.id))?;
            let logged = after["memories"].as_array().cloned().unwrap_or_default();
            let memories =
                crate::model::typed::memories_from_json(&logged, store.embedding_dim(), now)
                    .map_err(|e| anyhow!("audit row {}: {e}", row.id))?;
            plans.push(FactPlan {
                audit: Vec::new(),
                memories,
                links: crate::model::typed::links_from_json(
                    after["links"].as_array().map_or(&[][..], Vec::as_slice),
                    now,
                )
                .map_err(|e| anyhow!("audit row {}: {e}", row.id))?,
                review: match &after["review"] {
                    Value::Null => None,
                    logged => Some(
                        crate::model::typed::review_items_from_json(
                            std::slice::from_ref(logged),
                            now,
                        )
                        .map_err(|e| anyhow!("audit row {}: {e}", row.id))?
                        .remove(0),
                    ),
                },
            });
        }
    }
    Ok(plans)
}

/// Finishes what a killed `integrate` or `review` run logged but did not apply.
pub async fn resume(
    store: &Store,
    embedder: &Embedder,
    scope: &UserScope,
    now: i64,
    job: &str,
) -> Result<u64> {
    let plans = unfinished(store, scope, None, now).await?;
    if !plans.is_empty() {
        apply_plans(store, embedder, &plans, &BTreeMap::new(), now, job).await?;
    }
    Ok(plans.len() as u64)
}

/// Applies what earlier applications of `runs`' batches logged and did not apply.
pub(super) async fn resume_runs(
    store: &Store,
    embedder: &(dyn Fn() -> Result<Embedder> + Send + Sync),
    runs: &[String],
    now: i64,
) -> Result<u64> {
    let plans = unfinished(store, &UserScope::All, Some(runs), now).await?;
    if !plans.is_empty() {
        apply_plans(
            store,
            &embedder()?,
            &plans,
            &BTreeMap::new(),
            now,
            JobName::Integrate.as_str(),
        )
        .await?;
    }
    Ok(plans.len() as u64)
}

/// Asks the judge about each fact of a round against its candidates; returns the answers per
/// fact (by position in `round`).
async fn classify(
    llm: &Llm,
    round: &[(usize, Vec<MemoryView>)],
    facts: &[MemoryView],
    now: &str,
    outcomes_seen: &mut Vec<Outcome>,
) -> Vec<Vec<Answer>> {
    let mut items = Vec::new();
    for (slot, (f, candidates)) in round.iter().enumerate() {
        for (j, c) in candidates.iter().enumerate() {
            items.push(Item {
                custom_id: format!("{slot}:{j}"),
                input: TaskInput {
                    task: Task::IntegrateClassify,
                    memories: vec![c.clone(), facts[*f].clone()],
                    proposal: None,
                    now: now.to_string(),
                    question: None,
                },
            });
        }
    }
    let outcomes = llm.run(items.clone()).await;
    let mut answers: Vec<Vec<Answer>> = vec![Vec::new(); round.len()];
    for (item, outcome) in items.iter().zip(&outcomes) {
        let (slot, j) = item
            .custom_id
            .split_once(':')
            .expect("custom ids are slot:j");
        let (slot, j): (usize, usize) = (slot.parse().unwrap_or(0), j.parse().unwrap_or(0));
        let answer = match (&outcome.failure, &outcome.reply) {
            (None, Some(Reply::Classify(r))) => Answer {
                candidate: j,
                class: Some(match r.classification {
                    Classification::Duplicate => Class::Duplicate,
                    Classification::Supersede => Class::Supersede,
                    Classification::Merge => Class::Merge,
                    Classification::Coexist => Class::Coexist,
                }),
                confidence: r.confidence,
                reasoning: r.reasoning.clone(),
            },
            (failure, _) => Answer {
                candidate: j,
                class: None,
                confidence: 0.0,
                reasoning: failure
                    .clone()
                    .unwrap_or_else(|| "no classify reply".into()),
            },
        };
        answers[slot].push(answer);
    }
    outcomes_seen.extend(outcomes);
    answers
}

/// The integration parameters of a run: memlife.toml's `[integrate]` with the flags over it.
fn params_of(config: &crate::config::Config, args: &IntegrateArgs) -> Result<IntegrateParams> {
    let mut p = config.integrate.clone();
    if let Some(k) = args.top_k {
        p.top_k = k;
    }
    if let Some(c) = args.min_confidence {
        if !(0.0..=1.0).contains(&c) {
            bail!("--min-confidence must be within 0..1, got {c}");
        }
        p.min_confidence = c;
    }
    p.enable_delete |= args.enable_delete;
    Ok(p)
}

/// The facts still to integrate (by position), with each fact's next decision id: a fact
/// integrated already (by any run, and not undone) is counted and skipped, and a fact whose id
/// names a memory is a failure.
async fn facts_to_do(
    store: &Store,
    facts: &[MemoryRow],
    file: &str,
    counts: &mut BTreeMap<String, u64>,
    report: &mut JobReport,
) -> Result<(Vec<Option<String>>, Vec<usize>)> {
    let ids: Vec<String> = facts.iter().map(|f| f.id.clone()).collect();
    let next = next_decisions(store, &ids).await?;
    let existing = store.ids_present("memories", &ids, None).await?;
    let mut todo: Vec<usize> = Vec::new();
    for (i, id) in ids.into_iter().enumerate() {
        if next[i].is_none() {
            add(counts, "already_integrated", 1);
        } else if existing.contains(&id) {
            report.failures.push(ItemFailure {
                item: format!("{file}: fact {id}"),
                reason: format!("id '{id}' already names a memory: give the fact another id"),
            });
        } else {
            todo.push(i);
        }
    }
    Ok((next, todo))
}

/// Embeds every fact to do once: the vectors by fact id, and the facts embedded (a fact the
/// model refuses is a failure).
async fn embed_facts(
    embedder: &Embedder,
    facts: &[MemoryRow],
    todo: &[usize],
    file: &str,
    report: &mut JobReport,
) -> Result<(BTreeMap<String, Vec<f32>>, Vec<usize>)> {
    let texts: Vec<&str> = todo.iter().map(|&i| facts[i].text.as_str()).collect();
    let mut vectors: BTreeMap<String, Vec<f32>> = BTreeMap::new();
    let mut embedded = Vec::new();
    for (&i, e) in todo.iter().zip(embedder.embed(&texts).await?) {
        match e {
            Embedded::Vector { values, .. } => {
                vectors.insert(facts[i].id.clone(), values);
                embedded.push(i);
            }
            Embedded::Refused(why) => report.failures.push(ItemFailure {
                item: format!("{file}: fact {}", facts[i].id),
                reason: format!("not embedded: {why}"),
            }),
        }
    }
    Ok((vectors, embedded))
}

/// What every round of an online run shares: the inputs, and the state rounds leave for the
/// next (the users' current memories, the vectors, counts, the report and the LLM outcomes).
struct Rounds<'a> {
    ctx: &'a JobCtx<'a>,
    llm: &'a Llm,
    embedder: &'a Embedder,
    run_id: &'a str,
    facts: &'a [MemoryRow],
    views: Vec<MemoryView>,
    next: &'a [Option<String>],
    p: &'a IntegrateParams,
    threshold: f32,
    now: i64,
    now_text: String,
    memories: BTreeMap<String, UserMemories>,
    vectors: BTreeMap<String, Vec<f32>>,
    counts: BTreeMap<String, u64>,
    outcomes: Vec<Outcome>,
    /// The last round's plans and their vectors, written while the next round is judged.
    pending: Option<Pending>,
}

/// The online run's rounds (facts by position in the file, users in order, each user's facts
/// in file order): a user's facts that cannot change what another is judged against share a
/// round (`logic::integrate::rounds_by_dependency`), so a file of unrelated facts takes one
/// round of LLM calls and writes, not one per fact of its busiest user.
fn rounds_of(
    facts: &[MemoryRow],
    by_user: &BTreeMap<String, Vec<usize>>,
    memories: &BTreeMap<String, UserMemories>,
    vectors: &BTreeMap<String, Vec<f32>>,
    threshold: f32,
) -> Vec<Vec<usize>> {
    let dot = dot_f32();
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    for (user, of_user) in by_user {
        let vector = |f: usize| vectors[&facts[f].id].as_slice();
        let reach: Vec<FactReach> = of_user
            .iter()
            .enumerate()
            .map(|(i, &f)| FactReach {
                memories: memories.get(user).map_or_else(Vec::new, |m| {
                    let all = m.candidates(vector(f), threshold, usize::MAX);
                    all.into_iter().map(|(at, _)| at).collect()
                }),
                facts: (0..of_user.len())
                    .filter(|&j| j != i && dot(vector(f), vector(of_user[j])) >= threshold)
                    .collect(),
            })
            .collect();
        for (&f, r) in of_user.iter().zip(rounds_by_dependency(&reach)) {
            if rounds.len() <= r {
                rounds.resize_with(r + 1, Vec::new);
            }
            rounds[r].push(f);
        }
    }
    rounds
}

/// A round's plans and the vectors of the memories they write, waiting to be written.
type Pending = (Vec<FactPlan>, BTreeMap<String, Vec<f32>>);

/// Writes the plans a round left (audit rows first); nothing when none wait.
async fn write_pending(
    pending: Option<Pending>,
    ctx: &JobCtx<'_>,
    embedder: &Embedder,
    now: i64,
) -> Result<()> {
    let Some((plans, vectors)) = pending else {
        return Ok(());
    };
    let job = JobName::Integrate.as_str();
    write_plans(&ctx.store, embedder, &plans, &vectors, now, job).await
}

/// One round's facts (by position in the file) with their candidates.
type Round = Vec<(usize, Vec<MemoryView>)>;

impl Rounds<'_> {
    /// Each fact's candidates from the store as earlier rounds left it.
    fn candidates(&self, round_facts: &[usize]) -> Round {
        round_facts
            .iter()
            .map(|&f| {
                let fact = &self.facts[f];
                let vector = &self.vectors[&fact.id];
                let found = self
                    .memories
                    .get(&fact.user_id)
                    .map(|m| {
                        m.candidates(vector, self.threshold, self.p.top_k)
                            .into_iter()
                            .map(|(i, _)| m.views[i].clone())
                            .collect()
                    })
                    .unwrap_or_default();
                (f, found)
            })
            .collect()
    }

    /// One integrate.merge call per MERGE decision; the merged texts by slot. A failed merge
    /// keeps both (COEXIST) and is a failure of the report.
    async fn merges(
        &mut self,
        round: &Round,
        decisions: &mut [Decision],
        report: &mut JobReport,
    ) -> BTreeMap<usize, String> {
        let mut merge_items = Vec::new();
        for (slot, d) in decisions.iter().enumerate() {
            if let Decision::Apply {
                class: Class::Merge,
                candidate,
                ..
            } = d
            {
                let (f, cands) = &round[slot];
                merge_items.push(Item {
                    custom_id: slot.to_string(),
                    input: TaskInput {
                        task: Task::IntegrateMerge,
                        memories: vec![cands[*candidate].clone(), self.views[*f].clone()],
                        proposal: None,
                        now: self.now_text.clone(),
                        question: None,
                    },
                });
            }
        }
        let mut merged: BTreeMap<usize, String> = BTreeMap::new();
        if merge_items.is_empty() {
            return merged;
        }
        let merge_outcomes = self.llm.run(merge_items.clone()).await;
        for (item, outcome) in merge_items.iter().zip(&merge_outcomes) {
            let slot: usize = item.custom_id.parse().unwrap_or(0);
            match (&outcome.failure, &outcome.reply) {
                (None, Some(Reply::Merge(m))) if !m.text.trim().is_empty() => {
                    merged.insert(slot, m.text.trim().to_string());
                }
                (failure, _) => {
                    let why = failure.clone().unwrap_or_else(|| "empty merge".into());
                    report.failures.push(ItemFailure {
                        item: format!("fact {}", self.facts[round[slot].0].id),
                        reason: format!("integrate.merge: {why}; kept beside the memory"),
                    });
                    if let Decision::Apply {
                        candidate,
                        confidence,
                        ..
                    } = decisions[slot]
                    {
                        decisions[slot] = Decision::Coexist {
                            related: Some(candidate),
                            confidence,
                            reasoning: format!("the merge failed ({why}): kept both"),
                        };
                    }
                }
            }
        }
        self.outcomes.extend(merge_outcomes);
        merged
    }

    /// The full rows (without vectors) of the candidates the decisions name; their vectors
    /// are carried over from the users' memories (a row rewritten unchanged in text keeps its
    /// vector) and merged texts are embedded together.
    async fn touched_rows(
        &mut self,
        round: &Round,
        decisions: &[Decision],
        merged: &BTreeMap<usize, String>,
    ) -> Result<BTreeMap<String, MemoryRow>> {
        let touched: Vec<(String, String)> = decisions
            .iter()
            .enumerate()
            .filter_map(|(slot, d)| {
                d.candidate().map(|c| {
                    (
                        self.facts[round[slot].0].user_id.clone(),
                        round[slot].1[c].id.clone(),
                    )
                })
            })
            .collect();
        let touched_ids: Vec<String> = touched.iter().map(|(_, id)| id.clone()).collect();
        let (rows, _) = self
            .ctx
            .store
            .memories_with_ids(&touched_ids, None, false)
            .await?;
        let rows = rows.into_iter().map(|r| (r.id.clone(), r)).collect();
        for (user, id) in &touched {
            if self.vectors.contains_key(id) {
                continue;
            }
            let found = self.memories.get(user).and_then(|m| {
                m.ids
                    .iter()
                    .position(|x| x == id)
                    .map(|i| m.vector(i).to_vec())
            });
            if let Some(v) = found {
                self.vectors.insert(id.clone(), v);
            }
        }
        let merged_ids: Vec<(String, String)> = merged
            .iter()
            .filter_map(|(slot, text)| match &decisions[*slot] {
                Decision::Apply { candidate, .. } => {
                    Some((round[*slot].1[*candidate].id.clone(), text.clone()))
                }
                _ => None,
            })
            .collect();
        if !merged_ids.is_empty() {
            let texts: Vec<&str> = merged_ids.iter().map(|(_, t)| t.as_str()).collect();
            for ((id, _), e) in merged_ids.iter().zip(self.embedder.embed(&texts).await?) {
                if let Embedded::Vector { values, .. } = e {
                    self.vectors.insert(id.clone(), values);
                }
            }
        }
        Ok(rows)
    }

    /// Keeps the users' current memories as the decision of fact `f` leaves them (so later
    /// rounds see it) and counts the decision.
    fn track(
        &mut self,
        f: usize,
        d: &Decision,
        cands: &[MemoryView],
        candidate_id: Option<&String>,
        merged: Option<&String>,
    ) {
        let user = self.facts[f].user_id.clone();
        let fact_vector = self.vectors[&self.facts[f].id].clone();
        let state = self.memories.entry(user).or_default();
        let counted = match d {
            Decision::Add | Decision::Coexist { .. } => {
                state.upsert(self.views[f].clone(), fact_vector);
                if matches!(d, Decision::Add) {
                    "added"
                } else {
                    "coexisting"
                }
            }
            Decision::Review { .. } => "queued_for_review",
            Decision::Apply { class, .. } => {
                let old = candidate_id.cloned().unwrap_or_default();
                match class {
                    Class::Duplicate => "duplicates",
                    Class::Supersede => {
                        state.remove(&old);
                        state.upsert(self.views[f].clone(), fact_vector);
                        if self.p.enable_delete {
                            add(&mut self.counts, "archived", 1);
                        }
                        "superseded"
                    }
                    Class::Merge => {
                        let mut view = cands
                            .iter()
                            .find(|c| c.id == old)
                            .cloned()
                            .expect("candidate");
                        view.text = merged.cloned().unwrap_or_default();
                        if let Some(v) = self.vectors.get(&old) {
                            state.upsert(view, v.clone());
                        }
                        "merged"
                    }
                    Class::Coexist => return,
                }
            }
        };
        add(&mut self.counts, counted, 1);
    }

    /// One round: the r-th fact of every user judged against its candidates, decided,
    /// planned and (unless a dry run) written.
    async fn integrate(&mut self, round_facts: &[usize], report: &mut JobReport) -> Result<()> {
        let round = self.candidates(round_facts);
        // The last round's writes go to Lance while this round is judged: candidates and the
        // judge read only the state kept here, and nothing below reads the store before the
        // writes end, so the store sees the same commits in the same order as before.
        let (written, answers) = tokio::join!(
            write_pending(self.pending.take(), self.ctx, self.embedder, self.now),
            classify(
                self.llm,
                &round,
                &self.views,
                &self.now_text,
                &mut self.outcomes,
            )
        );
        written?;
        let mut decisions: Vec<Decision> = round
            .iter()
            .zip(&answers)
            .map(|((_, c), a)| decide(c.len(), a, self.p))
            .collect();
        for (slot, a) in answers.iter().enumerate() {
            let failed: Vec<&str> = a
                .iter()
                .filter(|a| a.class.is_none())
                .map(|a| a.reasoning.as_str())
                .collect();
            if !failed.is_empty() {
                report.failures.push(ItemFailure {
                    item: format!("fact {}", self.facts[round[slot].0].id),
                    reason: format!("integrate.classify: {}", failed.join("; ")),
                });
            }
        }
        let merged = self.merges(&round, &mut decisions, report).await;
        let rows = self.touched_rows(&round, &decisions, &merged).await?;
        let mut plans = Vec::new();
        for (slot, d) in decisions.iter().enumerate() {
            let (f, cands) = &round[slot];
            let candidate_id = d.candidate().map(|c| &cands[c].id);
            let candidate = candidate_id.and_then(|id| rows.get(id));
            let d = match (candidate_id, candidate) {
                // The candidate vanished since it was read: keep the fact as new.
                (Some(_), None) => Decision::Coexist {
                    related: None,
                    confidence: 0.0,
                    reasoning: "the candidate changed while it was judged: kept as new".into(),
                },
                _ => d.clone(),
            };
            plans.push(plan(
                self.run_id,
                self.next[*f]
                    .as_deref()
                    .expect("facts to integrate have a decision id"),
                &self.facts[*f],
                &d,
                candidate,
                merged.get(&slot).map(String::as_str),
                self.p,
                self.now,
            ));
            self.track(*f, &d, cands, candidate_id, merged.get(&slot));
        }
        if !self.ctx.dry_run {
            let vectors = plans
                .iter()
                .flat_map(|p| &p.memories)
                .filter_map(|r| self.vectors.get(&r.id).map(|v| (r.id.clone(), v.clone())))
                .collect();
            self.pending = Some((plans, vectors));
        }
        add(&mut self.counts, "rounds", 1);
        Ok(())
    }
}

pub async fn run(ctx: &JobCtx<'_>, args: &IntegrateArgs) -> Result<JobReport> {
    let config = ctx.app.config().await?;
    let p = params_of(config, args)?;
    let now = ctx.now.timestamp_micros();
    let now_text = format_timestamp(now);
    let dim = ctx.store.embedding_dim();
    let (batches, rejected) = read_validated(
        &args.file,
        args.format,
        &MEMORIES,
        dim,
        now,
        ctx.scope.clone(),
    )?;
    let llm = ctx.app.llm(&args.llm).await?;
    let log = RunLog::start(
        ctx,
        JobName::Integrate.as_str(),
        &json!({"file": args.file.display().to_string(), "now": now_text, "integrate": p}),
    )
    .await?;
    let run_id = log.run_id().to_string();
    let mut report = JobReport::new(JobName::Integrate.as_str(), ctx);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let facts: Vec<MemoryRow> = crate::model::typed::rows_of("memories", &batches)?;
    add(
        &mut counts,
        "facts_read",
        (facts.len() + rejected.len()) as u64,
    );
    add(&mut counts, "facts_rejected", rejected.len() as u64);
    let file = args.file.display().to_string();
    report.failures.extend(rejected.iter().cloned());
    if !rejected.is_empty() && args.on_error == OnError::Abort {
        report.status = Status::Failed;
        report.error = Some(format!(
            "{} of {} rows of {file} are invalid; with --on-error abort nothing was integrated \
             (use --on-error skip to integrate the valid rows)",
            rejected.len(),
            facts.len() + rejected.len()
        ));
        report.counts = counts;
        log.finish(ctx, &mut report).await?;
        return Ok(report);
    }
    let embedder = ctx.app.embedder(&args.embedder, dim, 64).await?;
    let model = embedder.model_name();
    let (thresholds, _) = config.thresholds_for(&model);
    let threshold = thresholds.integrate;
    if !ctx.dry_run {
        let resumed = resume(
            &ctx.store,
            &embedder,
            &ctx.scope,
            now,
            JobName::Integrate.as_str(),
        )
        .await?;
        if resumed > 0 {
            add(&mut counts, "resumed", resumed);
        }
        let expired = super::review_queue::expire(ctx, &embedder, &run_id, now).await?;
        if expired > 0 {
            add(&mut counts, "reviews_expired", expired);
        }
    }
    let (next, todo) = facts_to_do(&ctx.store, &facts, &file, &mut counts, &mut report).await?;
    let (vectors, embedded) = embed_facts(&embedder, &facts, &todo, &file, &mut report).await?;
    let users: Vec<String> = embedded
        .iter()
        .map(|&i| facts[i].user_id.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let (memories, other_model) = current_memories(&ctx.store, &users, &model, now).await?;
    if other_model > 0 {
        report.notes.push(format!(
            "{other_model} current memories are embedded by another model than {model} and \
             were not candidates (run `memlife embed`)"
        ));
    }
    // Rounds: the r-th fact of every user.
    let mut by_user: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for &i in &embedded {
        by_user.entry(facts[i].user_id.clone()).or_default().push(i);
    }
    if llm.mode == crate::llm::CallMode::Batch {
        let prepared = super::integrate_batch::Prepared {
            facts: &facts,
            by_user: &by_user,
            vectors: &vectors,
            memories: &memories,
            next: &next,
            threshold,
            p: &p,
            now,
            embedder: &embedder,
        };
        super::integrate_batch::submit(ctx, &log, &llm, &prepared, &mut counts, &mut report)
            .await?;
        report.counts = counts;
        log.finish(ctx, &mut report).await?;
        return Ok(report);
    }
    let mut rounds = Rounds {
        ctx,
        llm: &llm,
        embedder: &embedder,
        run_id: &run_id,
        facts: &facts,
        views: facts.iter().map(fact_view).collect(),
        next: &next,
        p: &p,
        threshold,
        now,
        now_text,
        memories,
        vectors,
        counts,
        outcomes: Vec::new(),
        pending: None,
    };
    let schedule = rounds_of(
        &facts,
        &by_user,
        &rounds.memories,
        &rounds.vectors,
        threshold,
    );
    for round_facts in schedule {
        rounds.integrate(&round_facts, &mut report).await?;
    }
    write_pending(rounds.pending.take(), ctx, &embedder, now).await?;
    let mut counts = rounds.counts;
    add(&mut counts, "facts_integrated", embedded.len() as u64);
    report.counts = counts;
    report.llm = Some(llm.usage(&rounds.outcomes));
    log.finish(ctx, &mut report).await?;
    Ok(report)
}

/// Makes `supersedes` links found by `memlife link` (newer -> older) into supersession chains
/// the way integrate's SUPERSEDE makes them: the older memory gets `valid_until` (the newer
/// one's `valid_from`) and `superseded_by`, and both share a `supersession_chain_id`. A pair is
/// left as a link only (and named in the returned notes) when chaining it would fork or join
/// two chains: the older one is already superseded by another memory, the newer one already
/// supersedes another, or both already belong to different chains. Idempotent.
pub async fn chain_supersessions(
    store: &Store,
    pairs: &[(String, String)],
) -> Result<(u64, Vec<String>)> {
    if pairs.is_empty() {
        return Ok((0, Vec::new()));
    }
    let ids: Vec<String> = pairs
        .iter()
        .flat_map(|(n, o)| [n.clone(), o.clone()])
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    #[derive(Clone, serde::Deserialize)]
    struct Chained {
        id: String,
        valid_from: i64,
        superseded_by: Option<String>,
        supersession_chain_id: Option<String>,
    }
    let mut rows: BTreeMap<String, Chained> = store
        .rows_with_ids::<Chained>("memories", &ids, None)
        .await?
        .into_iter()
        .map(|r| (r.id.clone(), r))
        .collect();
    // Memories that already have a predecessor, and which.
    #[derive(serde::Deserialize)]
    struct Successor {
        id: String,
        superseded_by: String,
    }
    let mut predecessor: BTreeMap<String, String> = BTreeMap::new();
    for chunk in ids.chunks(500) {
        let filter = format!("superseded_by IN ({})", sql_list(chunk));
        for r in store
            .scan_rows::<Successor>("memories", Some(&filter))
            .await?
        {
            predecessor.insert(r.superseded_by, r.id);
        }
    }
    let mut chained = 0u64;
    let mut notes = Vec::new();
    for (new, old) in pairs {
        let (Some(n), Some(o)) = (rows.get(new).cloned(), rows.get(old).cloned()) else {
            continue;
        };
        if o.superseded_by.as_deref() == Some(new.as_str()) {
            continue; // chained already
        }
        let why = if let Some(other) = &o.superseded_by {
            Some(format!("{old} is already superseded by {other}"))
        } else if let Some(p) = predecessor.get(new) {
            Some(format!("{new} already supersedes {p}"))
        } else {
            match (&o.supersession_chain_id, &n.supersession_chain_id) {
                (Some(a), Some(b)) if a != b => Some(format!(
                    "{old} and {new} belong to different chains ({a}, {b})"
                )),
                _ => None,
            }
        };
        if let Some(why) = why {
            notes.push(format!(
                "supersedes {new} -> {old} left as a link only: {why}"
            ));
            continue;
        }
        let chain = o
            .supersession_chain_id
            .clone()
            .or(n.supersession_chain_id.clone())
            .unwrap_or_else(|| old.clone());
        let until = n.valid_from.max(o.valid_from);
        store
            .update_where(
                "memories",
                &format!("id = {}", sql_string(old)),
                &[
                    ("valid_until", sql_timestamp(until)),
                    ("superseded_by", sql_string(new)),
                    ("supersession_chain_id", sql_string(&chain)),
                ],
            )
            .await?;
        store
            .update_where(
                "memories",
                &format!("id = {}", sql_string(new)),
                &[("supersession_chain_id", sql_string(&chain))],
            )
            .await?;
        // Later pairs see this one.
        if let Some(r) = rows.get_mut(old) {
            r.superseded_by = Some(new.clone());
            r.supersession_chain_id = Some(chain.clone());
        }
        if let Some(r) = rows.get_mut(new) {
            r.supersession_chain_id = Some(chain.clone());
        }
        predecessor.insert(new.clone(), old.clone());
        chained += 1;
    }
    Ok((chained, notes))
}

#[cfg(test)]
mod tests {
    use super::UserMemories;
    use crate::llm::tasks::MemoryView;

    fn unit(dim: usize, axis: usize) -> Vec<f32> {
        (0..dim)
            .map(|i| if i == axis { 1.0 } else { 0.0 })
            .collect()
    }

    #[test]
    fn a_removed_memory_takes_its_vector_and_the_last_one_keeps_its_own() {
        let mut m = UserMemories::default();
        for (i, id) in ["a", "b", "c", "d"].iter().enumerate() {
            m.upsert(MemoryView::of(id, "fact", 0, id), unit(4, i));
        }
        m.remove("b");
        // Each remaining memory is found by its own vector, and "b" by none.
        for (axis, id) in [(0, "a"), (2, "c"), (3, "d")] {
            let found = m.candidates(&unit(4, axis), 0.5, 10);
            assert_eq!(found.len(), 1, "{id}");
            assert_eq!(m.views[found[0].0].id, id);
        }
        assert!(m.candidates(&unit(4, 1), 0.5, 10).is_empty());
        // An upsert of an existing id replaces its vector rather than adding one.
        m.upsert(MemoryView::of("d", "fact", 0, "d"), unit(4, 1));
        assert!(m.candidates(&unit(4, 3), 0.5, 10).is_empty());
        assert_eq!(m.views[m.candidates(&unit(4, 1), 0.5, 10)[0].0].id, "d");
        m.remove("a");
        m.remove("c");
        m.remove("d");
        assert!(m.candidates(&unit(4, 0), 0.0, 10).is_empty());
    }
}
