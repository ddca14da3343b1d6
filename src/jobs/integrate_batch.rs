//! `memlife integrate FILE --mode batch`: the same decisions as an online run, judged through
//! Batch API rounds and applied by `memlife batches poll`.
//!
//! Submission (the `integrate` run): facts are read, validated and embedded as online. For
//! each user, in file order:
//! - a fact that would have an earlier fact of the same file still in flight (submitted by
//!   this run, or waiting in a batch) among its `top_k` candidates is **deferred**: it must be judged
//!   against what the earlier one becomes, so the next `integrate FILE --mode batch` after
//!   the poll submits it (reruns skip what is integrated, so running the file again until
//!   nothing is deferred integrates it all, in order);
//! - a fact with no candidate is ADDed at once, as online, and later facts are judged
//!   against it;
//! - any other fact gets a `SUBMIT` audit row (the fact's row and its candidates, written
//!   before the batch is sent) and one `integrate.classify` request per candidate.
//!
//! Round 1 (`batches poll`, an `integrate.classify` batch): every answer is logged as a `JUDGE`
//! audit row; then, fact by fact in file order, the submitting run's `decide` rules choose
//! as online, at the submitting run's clock and options. A fact is left to the next run
//! (counted `left_for_next_run`) when a candidate changed since the judge read it (another
//! text, superseded, archived, gone) or an earlier fact of the batch changed it. MERGE
//! decisions go out as round 2, an `integrate.merge` batch under a key derived from the first
//! (submitted once however often round 1 is applied); the rest are logged and applied as an
//! online run applies them.
//! Round 2 (an `integrate.merge` batch): each merge text is logged (`JUDGE`) and applied, the
//! candidate checked unchanged again; a failed merge keeps both (COEXIST), as online.
//!
//! Every decision row is the online one (same id, same after-state), so `memlife undo`,
//! `memlife review` and `memlife check` see no difference; a poll killed half-way is finished
//! by the next poll (the decisions it logged are applied from the log, the rest decided).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Result, anyhow, bail};
use serde_json::{Value, json};

use super::integrate::{add, fact_view, next_decisions, plan, resume_runs, write_plans};
use super::{JobCtx, JobReport, RunLog};
use crate::embedders::Embedder;
use crate::llm::batch::{Applier, ApplyEnv, BatchRecord};
use crate::llm::tasks::{Classification, MemoryView, Reply, Task, TaskInput};
use crate::llm::{Item, Llm, Outcome};
use crate::logic::integrate::{Answer, Class, Decision, IntegrateParams, decide};
use crate::logic::similarity::dot;
use crate::model::encoding::format_timestamp;
use crate::model::typed::MemoryRow;
use crate::store::audit::{AuditRow, derived_id};
use crate::store::{Store, sql_list, sql_string};

const JOB: &str = "integrate";

/// The `SUBMIT` row of a fact sent to the judge, keyed by the decision it waits for: a
/// submission killed before its batch went out and run again rewrites the same row (the
/// fact's row is the same; only its run changes).
fn submit_id(decision_id: &str) -> String {
    derived_id(&format!("integrate.submit|{decision_id}"))
}

/// The `JUDGE` row of one batch answer (`task`: classify or merge).
fn judge_id(run_id: &str, task: Task, custom_id: &str) -> String {
    derived_id(&format!(
        "integrate.judge|{}|{run_id}|{custom_id}",
        task.name()
    ))
}

/// The round-2 batch of a round-1 batch.
fn merge_batch_key(classify_key: &str) -> String {
    derived_id(&format!("integrate.merge|{classify_key}"))
}

fn custom_id(fact_id: &str, candidate: usize) -> String {
    format!("{fact_id}#{candidate}")
}

fn parse_custom_id(id: &str) -> Option<(&str, usize)> {
    let (fact, j) = id.rsplit_once('#')?;
    Some((fact, j.parse().ok()?))
}

/// Facts waiting in integrate batches not yet applied (any round).
async fn facts_in_pending_batches(store: &Store) -> Result<BTreeSet<String>> {
    let filter = format!(
        "job = {} AND status IN ('submitting', 'submitted', 'ready', 'applying', 'failed')",
        sql_string(JOB)
    );
    let mut facts = BTreeSet::new();
    for record in crate::llm::batch::records(store, &filter).await? {
        for item in crate::llm::batch::items_of(&record)? {
            if let Some(fact) = item.input.memories.get(1) {
                facts.insert(fact.id.clone());
            }
        }
    }
    Ok(facts)
}

/// What the submission needs from the online run's preparation.
pub(super) struct Prepared<'a> {
    pub facts: &'a [MemoryRow],
    /// Indexes into `facts` of the embedded facts to integrate, by user, in file order.
    pub by_user: &'a BTreeMap<String, Vec<usize>>,
    pub vectors: &'a BTreeMap<String, Vec<f32>>,
    pub memories: &'a BTreeMap<String, super::integrate::UserMemories>,
    /// The decision id of each fact (`None`: decided already).
    pub next: &'a [Option<String>],
    pub threshold: f32,
    pub p: &'a IntegrateParams,
    pub now: i64,
    pub embedder: &'a Embedder,
}

/// Submits round 1 for `integrate --mode batch` (see the module doc).
/// A fact's SUBMIT audit row (the fact without its vector, and its candidates: what the
/// applier reads back) and its classify requests, one per candidate.
fn submission(
    run_id: &str,
    user: &str,
    fact: &MemoryRow,
    decision_id: &str,
    candidates: &[&MemoryView],
    now: i64,
) -> (AuditRow, Vec<Item>) {
    let id = fact.id.clone();
    let view = fact_view(fact);
    let now_text = format_timestamp(now);
    let mut row = AuditRow::new(run_id, "SUBMIT", &format!("{run_id}|{id}"), now);
    row.id = submit_id(decision_id);
    row.user_id = Some(user.to_string());
    row.source_ids = vec![id.clone()];
    row.reasoning = Some(format!(
        "judged against {} candidates in a batch",
        candidates.len()
    ));
    let stored = fact.to_json();
    row.target_id = candidates.first().map(|c| c.id.clone());
    row.after_state = Some(
        json!({
            "fact": stored,
            "candidates": candidates.iter().map(|c| c.id.clone()).collect::<Vec<_>>(),
        })
        .to_string(),
    );
    let items = candidates
        .iter()
        .enumerate()
        .map(|(j, c)| Item {
            custom_id: custom_id(&id, j),
            input: TaskInput {
                task: Task::IntegrateClassify,
                memories: vec![(*c).clone(), view.clone()],
                proposal: None,
                now: now_text.clone(),
                question: None,
            },
        })
        .collect();
    (row, items)
}

/// Sends each user's classify requests as batches (a fact's requests stay in one batch; the
/// API takes 50,000 per file).
async fn send_batches(
    ctx: &JobCtx<'_>,
    llm: &Llm,
    run_id: &str,
    items_by_user: BTreeMap<String, Vec<Vec<Item>>>,
    counts: &mut BTreeMap<String, u64>,
    report: &mut JobReport,
) -> Result<()> {
    for (user, facts) in items_by_user {
        // A fact's requests stay in one batch (the API takes 50,000 per file).
        let mut chunk: Vec<Item> = Vec::new();
        let mut chunks = Vec::new();
        for items in facts {
            if chunk.len() + items.len() > 50_000 {
                chunks.push(std::mem::take(&mut chunk));
            }
            chunk.extend(items);
        }
        chunks.push(chunk);
        for chunk in chunks.into_iter().filter(|c| !c.is_empty()) {
            let record = crate::llm::batch::submit(
                &ctx.store,
                llm,
                JOB,
                run_id,
                Some(&user),
                Task::IntegrateClassify,
                &chunk,
            )
            .await?;
            add(counts, "batches_submitted", 1);
            add(counts, "items_submitted", chunk.len() as u64);
            report.notes.push(format!(
                "user {user}: {} classify requests submitted as batch {} ({}); `memlife batches \
                 poll` applies them",
                chunk.len(),
                record.batch_key,
                record.remote_batch_id.as_deref().unwrap_or("?")
            ));
        }
    }
    Ok(())
}

pub(super) async fn submit(
    ctx: &JobCtx<'_>,
    log: &RunLog,
    llm: &Llm,
    prep: &Prepared<'_>,
    counts: &mut BTreeMap<String, u64>,
    report: &mut JobReport,
) -> Result<()> {
    let run_id = log.run_id();
    let pending = facts_in_pending_batches(&ctx.store).await?;
    let mut adds = Vec::new();
    let mut submits: Vec<AuditRow> = Vec::new();
    let mut items_by_user: BTreeMap<String, Vec<Vec<Item>>> = BTreeMap::new();
    for (user, facts) in prep.by_user {
        // The store as the facts added at once leave it.
        let mut memories = prep.memories.get(user).cloned().unwrap_or_default();
        // Facts of this file in flight (in a batch): memories only after the poll.
        let mut earlier: Vec<&Vec<f32>> = Vec::new();
        for &f in facts {
            let fact = &prep.facts[f];
            let id = fact.id.clone();
            let vector = &prep.vectors[&id];
            if pending.contains(&id) {
                add(counts, "already_submitted", 1);
                earlier.push(vector);
                continue;
            }
            let found = memories.candidates(vector, prep.threshold, prep.p.top_k);
            // An earlier fact of the file that would rank among the candidates: the fact
            // must be judged against what that one becomes.
            let weakest = if found.len() < prep.p.top_k {
                prep.threshold
            } else {
                found.last().map_or(prep.threshold, |(_, s)| *s)
            };
            let waits = earlier.iter().any(|e| {
                let s = dot(vector, e);
                s >= prep.threshold && (found.len() < prep.p.top_k || s > weakest)
            });
            if waits {
                add(counts, "deferred", 1);
                earlier.push(vector);
                continue;
            }
            let decision_id = prep.next[f]
                .as_deref()
                .ok_or_else(|| anyhow!("fact {id} has no decision id"))?;
            if found.is_empty() {
                adds.push(plan(
                    run_id,
                    decision_id,
                    fact,
                    &Decision::Add,
                    None,
                    None,
                    prep.p,
                    prep.now,
                ));
                add(counts, "added", 1);
                // Later facts are judged against it, as a rerun would find it in the store.
                memories.upsert(fact_view(fact), vector.clone());
                continue;
            }
            earlier.push(vector);
            let candidates: Vec<&MemoryView> =
                found.iter().map(|(i, _)| &memories.views[*i]).collect();
            let (row, items) = submission(run_id, user, fact, decision_id, &candidates, prep.now);
            submits.push(row);
            items_by_user.entry(user.clone()).or_default().push(items);
            add(counts, "facts_submitted", 1);
        }
    }
    if ctx.dry_run {
        return Ok(());
    }
    if !adds.is_empty() {
        write_plans(
            &ctx.store,
            prep.embedder,
            &adds,
            prep.vectors,
            prep.now,
            JOB,
        )
        .await?;
    }
    // The facts' rows are logged before any batch holds them.
    ctx.store.write_audit(&submits).await?;
    crate::crash::point("integrate.after-submit-rows");
    send_batches(ctx, llm, run_id, items_by_user, counts, report).await?;
    let deferred = counts.get("deferred").copied().unwrap_or(0);
    if deferred > 0 {
        report.notes.push(format!(
            "{deferred} facts resemble earlier facts of the file and wait for them: run this \
             command again after `memlife batches poll` has applied the batches"
        ));
    }
    Ok(())
}

/// What an applier knows of the run that submitted its batch.
struct Submitted {
    p: IntegrateParams,
    now: i64,
    /// The `SUBMIT` rows' facts, by fact id.
    facts: BTreeMap<String, MemoryRow>,
}

async fn submitted(store: &Store, record: &BatchRecord, items: &[Item]) -> Result<Submitted> {
    let params = crate::store::run_params(store, &record.run_id).await?;
    let p: IntegrateParams = serde_json::from_value(params["integrate"].clone())
        .map_err(|e| anyhow!("run {}: integrate options unreadable: {e}", record.run_id))?;
    let now = super::batch_clock(record, items)?;
    let fact_ids: BTreeSet<String> = items
        .iter()
        .filter_map(|i| i.input.memories.get(1).map(|m| m.id.clone()))
        .collect();
    let fact_ids: Vec<String> = fact_ids.into_iter().collect();
    // Facts decided already need no row (they are skipped).
    let ids: Vec<String> = next_decisions(store, &fact_ids)
        .await?
        .into_iter()
        .flatten()
        .map(|d| submit_id(&d))
        .collect();
    #[derive(serde::Deserialize)]
    struct Logged {
        id: String,
        after_state: Option<String>,
    }
    let mut logged = Vec::new();
    for chunk in ids.chunks(500) {
        let filter = format!("id IN ({})", sql_list(chunk));
        for row in store
            .scan_rows::<Logged>("audit_log", Some(&filter))
            .await?
        {
            let after: Value = serde_json::from_str(row.after_state.as_deref().unwrap_or("{}"))
                .map_err(|e| anyhow!("audit row {}: unreadable after_state: {e}", row.id))?;
            if after["fact"].is_object() {
                logged.push(after["fact"].clone());
            }
        }
    }
    let facts = crate::model::typed::memories_from_json(&logged, store.embedding_dim(), now)
        .map_err(|e| anyhow!("the SUBMIT rows of run {}: {e}", record.run_id))?
        .into_iter()
        .map(|f| (f.id.clone(), f))
        .collect();
    Ok(Submitted { p, now, facts })
}

/// The memory rows of `ids` that are still current at `now` (not archived, not superseded).
async fn current_rows(
    store: &Store,
    ids: &[String],
    now: i64,
) -> Result<BTreeMap<String, MemoryRow>> {
    let (rows, _) = store.memories_with_ids(ids, None, false).await?;
    Ok(rows
        .into_iter()
        .filter(|r| {
            r.archived_at.is_none()
                && r.state != "archived"
                && r.superseded_by.is_none()
                && r.valid_until.is_none_or(|u| u > now)
        })
        .map(|r| (r.id.clone(), r))
        .collect())
}

fn class_of(c: Classification) -> Class {
    match c {
        Classification::Duplicate => Class::Duplicate,
        Classification::Supersede => Class::Supersede,
        Classification::Merge => Class::Merge,
        Classification::Coexist => Class::Coexist,
    }
}

/// A batch answer as `decide` reads it, and its `JUDGE` row.
fn answer_of(
    record: &BatchRecord,
    item: &Item,
    outcome: &Outcome,
    candidate: usize,
    now: i64,
) -> (Answer, AuditRow) {
    let answer = match (&outcome.failure, &outcome.reply) {
        (None, Some(Reply::Classify(r))) => Answer {
            candidate,
            class: Some(class_of(r.classification)),
            confidence: r.confidence,
            reasoning: r.reasoning.clone(),
        },
        (failure, _) => Answer {
            candidate,
            class: None,
            confidence: 0.0,
            reasoning: failure
                .clone()
                .unwrap_or_else(|| "no classify reply".into()),
        },
    };
    let mut row = AuditRow::new(&record.run_id, "JUDGE", &item.custom_id, now);
    row.id = judge_id(&record.run_id, Task::IntegrateClassify, &item.custom_id);
    row.user_id = record.user_id.clone();
    row.source_ids = item.input.memories.iter().map(|m| m.id.clone()).collect();
    row.target_id = item.input.memories.first().map(|m| m.id.clone());
    row.classification = Some(
        answer
            .class
            .map(|c| c.as_str().to_string())
            .unwrap_or_else(|| "FAILED".into()),
    );
    row.confidence = answer.class.map(|_| answer.confidence);
    row.reasoning = Some(answer.reasoning.clone());
    (answer, row)
}

/// Reads back the `JUDGE` rows of a fact's round-1 answers (one per candidate, at most
/// `max`, numbered from 0).
async fn logged_answers(
    store: &Store,
    run_id: &str,
    fact_id: &str,
    max: usize,
) -> Result<Vec<Answer>> {
    let ids: Vec<String> = (0..max)
        .map(|j| judge_id(run_id, Task::IntegrateClassify, &custom_id(fact_id, j)))
        .collect();
    let filter = format!("id IN ({})", sql_list(&ids));
    #[derive(serde::Deserialize)]
    struct Judged {
        id: String,
        classification: Option<String>,
        confidence: Option<f64>,
        reasoning: Option<String>,
    }
    let rows: Vec<Judged> = store.scan_rows("audit_log", Some(&filter)).await?;
    let mut answers = Vec::new();
    for (j, id) in ids.iter().enumerate() {
        let Some(row) = rows.iter().find(|r| &r.id == id) else {
            break;
        };
        answers.push(Answer {
            candidate: j,
            class: Class::parse(row.classification.as_deref().unwrap_or("")),
            confidence: row.confidence.unwrap_or(0.0),
            reasoning: row.reasoning.clone().unwrap_or_default(),
        });
    }
    if answers.is_empty() {
        bail!("fact {fact_id}: the judge's answers of run {run_id} are not logged");
    }
    Ok(answers)
}

/// Applies `integrate --mode batch` rounds in `batches poll` (see the module doc).
pub struct IntegrateApplier;

#[async_trait::async_trait]
impl Applier for IntegrateApplier {
    async fn apply(
        &self,
        env: &ApplyEnv<'_>,
        record: &BatchRecord,
        items: &[Item],
        outcomes: &[Outcome],
    ) -> Result<BTreeMap<String, u64>> {
        let task = Task::from_name(&record.task);
        if !matches!(task, Some(Task::IntegrateClassify | Task::IntegrateMerge)) {
            bail!(
                "batch {}: integrate does not apply task {}",
                record.batch_key,
                record.task
            );
        }
        let mut counts = BTreeMap::new();
        let s = submitted(env.store, record, items).await?;
        // Decisions an earlier application logged and did not apply.
        let resumed = resume_runs(
            env.store,
            env.embedder,
            std::slice::from_ref(&record.run_id),
            s.now,
        )
        .await?;
        if resumed > 0 {
            add(&mut counts, "resumed", resumed);
        }
        if task == Some(Task::IntegrateClassify) {
            apply_classify(env, record, items, outcomes, &s, &mut counts).await?;
        } else {
            apply_merge(env, record, items, outcomes, &s, &mut counts).await?;
        }
        Ok(counts)
    }

    fn result_keys(&self, record: &BatchRecord, items: &[Item]) -> Vec<String> {
        let task = Task::from_name(&record.task).unwrap_or(Task::IntegrateClassify);
        items
            .iter()
            .map(|i| judge_id(&record.run_id, task, &i.custom_id))
            .collect()
    }
}

/// Logs rows not logged yet (an earlier application's rows keep their time).
async fn write_new(store: &Store, mut rows: Vec<AuditRow>) -> Result<()> {
    let present = store
        .audit_ids_present(&rows.iter().map(|r| r.id.clone()).collect::<Vec<_>>())
        .await?;
    rows.retain(|r| !present.contains(&r.id));
    store.write_audit(&rows).await?;
    Ok(())
}

async fn apply_classify(
    env: &ApplyEnv<'_>,
    record: &BatchRecord,
    items: &[Item],
    outcomes: &[Outcome],
    s: &Submitted,
    counts: &mut BTreeMap<String, u64>,
) -> Result<()> {
    // The answers, fact by fact, in the order they were submitted (file order).
    let mut order: Vec<String> = Vec::new();
    let mut by_fact: BTreeMap<String, Vec<(Answer, &Item)>> = BTreeMap::new();
    let mut rows = Vec::new();
    for (item, outcome) in items.iter().zip(outcomes) {
        let (fact, j) = parse_custom_id(&item.custom_id).ok_or_else(|| {
            anyhow!(
                "batch {}: item {} is not fact#n",
                record.batch_key,
                item.custom_id
            )
        })?;
        let (answer, row) = answer_of(record, item, outcome, j, s.now);
        rows.push(row);
        if !by_fact.contains_key(fact) {
            order.push(fact.to_string());
        }
        by_fact
            .entry(fact.to_string())
            .or_default()
            .push((answer, item));
    }
    write_new(env.store, rows).await?;
    crate::crash::point("integrate.batch.after-judgements");
    let next = next_decisions(env.store, &order).await?;
    let candidate_ids: Vec<String> = by_fact
        .values()
        .flatten()
        .filter_map(|(_, i)| i.input.memories.first().map(|m| m.id.clone()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let current = current_rows(env.store, &candidate_ids, s.now).await?;
    let mut changed: BTreeSet<String> = BTreeSet::new();
    let mut plans = Vec::new();
    let mut merges = Vec::new();
    for (fact_id, decision_id) in order.iter().zip(&next) {
        let Some(decision_id) = decision_id else {
            add(counts, "already_integrated", 1);
            continue;
        };
        let Some(fact) = s.facts.get(fact_id) else {
            bail!("fact {fact_id}: its SUBMIT row is missing from the audit log");
        };
        let mut judged = by_fact[fact_id].clone();
        judged.sort_by_key(|(a, _)| a.candidate);
        let views: Vec<&MemoryView> = judged.iter().map(|(_, i)| &i.input.memories[0]).collect();
        // Every candidate as the judge read it, and untouched by an earlier fact.
        let unchanged = views.iter().all(|v| {
            !changed.contains(&v.id) && current.get(&v.id).is_some_and(|r| r.text == v.text)
        });
        if !unchanged {
            add(counts, "left_for_next_run", 1);
            continue;
        }
        let answers: Vec<Answer> = judged.iter().map(|(a, _)| a.clone()).collect();
        let decision = decide(views.len(), &answers, &s.p);
        if let Decision::Apply { candidate, .. } = &decision {
            changed.insert(views[*candidate].id.clone());
        }
        if let Decision::Apply {
            class: Class::Merge,
            candidate,
            ..
        } = &decision
        {
            merges.push(Item {
                custom_id: fact_id.clone(),
                input: TaskInput {
                    task: Task::IntegrateMerge,
                    memories: vec![views[*candidate].clone(), fact_view(fact)],
                    proposal: None,
                    now: format_timestamp(s.now),
                    question: None,
                },
            });
            continue;
        }
        let candidate = decision.candidate().and_then(|c| current.get(&views[c].id));
        count(counts, &decision);
        plans.push(plan(
            &record.run_id,
            decision_id,
            fact,
            &decision,
            candidate,
            None,
            &s.p,
            s.now,
        ));
    }
    write_decided(env, &plans, s.now).await?;
    if merges.is_empty() {
        return Ok(());
    }
    let key = merge_batch_key(&record.batch_key);
    let exists =
        !crate::llm::batch::records(env.store, &format!("batch_key = {}", sql_string(&key)))
            .await?
            .is_empty();
    if !exists {
        match crate::llm::batch::submit_keyed(
            env.store,
            env.llm,
            key,
            JOB,
            &record.run_id,
            record.user_id.as_deref(),
            Task::IntegrateMerge,
            &merges,
        )
        .await
        {
            Ok(_) => add(counts, "merges_submitted", merges.len() as u64),
            // The record is kept as failed: `batches retry` resubmits it.
            Err(e) => {
                tracing::warn!("submitting the merges of batch {}: {e:#}", record.batch_key);
                add(counts, "merge_submissions_failed", 1);
            }
        }
    }
    Ok(())
}

/// Logs and applies the decisions of one application (their rows are embedded here).
async fn write_decided(
    env: &ApplyEnv<'_>,
    plans: &[super::integrate::FactPlan],
    now: i64,
) -> Result<()> {
    if plans.is_empty() {
        return Ok(());
    }
    write_plans(
        env.store,
        &(env.embedder)()?,
        plans,
        &BTreeMap::new(),
        now,
        JOB,
    )
    .await
}

fn count(counts: &mut BTreeMap<String, u64>, decision: &Decision) {
    let name = match decision {
        Decision::Add => "added",
        Decision::Coexist { .. } => "coexisting",
        Decision::Review { .. } => "queued_for_review",
        Decision::Apply { class, .. } => match class {
            Class::Duplicate => "duplicates",
            Class::Supersede => "superseded",
            Class::Merge => "merged",
            Class::Coexist => "coexisting",
        },
    };
    add(counts, name, 1);
}

async fn apply_merge(
    env: &ApplyEnv<'_>,
    record: &BatchRecord,
    items: &[Item],
    outcomes: &[Outcome],
    s: &Submitted,
    counts: &mut BTreeMap<String, u64>,
) -> Result<()> {
    let mut rows = Vec::new();
    let mut texts: BTreeMap<String, Result<String, String>> = BTreeMap::new();
    for (item, outcome) in items.iter().zip(outcomes) {
        let text = match (&outcome.failure, &outcome.reply) {
            (None, Some(Reply::Merge(m))) if !m.text.trim().is_empty() => {
                Ok(m.text.trim().to_string())
            }
            (failure, _) => Err(failure.clone().unwrap_or_else(|| "empty merge".into())),
        };
        let mut row = AuditRow::new(&record.run_id, "JUDGE", &item.custom_id, s.now);
        row.id = judge_id(&record.run_id, Task::IntegrateMerge, &item.custom_id);
        row.user_id = record.user_id.clone();
        row.source_ids = item.input.memories.iter().map(|m| m.id.clone()).collect();
        row.target_id = item.input.memories.first().map(|m| m.id.clone());
        match &text {
            Ok(t) => {
                row.classification = Some("MERGED".into());
                row.after_state = Some(json!({"text": t}).to_string());
            }
            Err(why) => {
                row.classification = Some("FAILED".into());
                row.reasoning = Some(why.clone());
            }
        }
        rows.push(row);
        texts.insert(item.custom_id.clone(), text);
    }
    write_new(env.store, rows).await?;
    crate::crash::point("integrate.batch.after-merge-texts");
    let facts: Vec<String> = items.iter().map(|i| i.custom_id.clone()).collect();
    let next = next_decisions(env.store, &facts).await?;
    let candidate_ids: Vec<String> = items
        .iter()
        .map(|i| i.input.memories[0].id.clone())
        .collect();
    let current = current_rows(env.store, &candidate_ids, s.now).await?;
    let mut changed = BTreeSet::new();
    let mut plans = Vec::new();
    for ((item, fact_id), decision_id) in items.iter().zip(&facts).zip(&next) {
        let Some(decision_id) = decision_id else {
            add(counts, "already_integrated", 1);
            continue;
        };
        let Some(fact) = s.facts.get(fact_id) else {
            bail!("fact {fact_id}: its SUBMIT row is missing from the audit log");
        };
        let answers = logged_answers(env.store, &record.run_id, fact_id, s.p.top_k).await?;
        let decision = decide(answers.len(), &answers, &s.p);
        let seen = &item.input.memories[0];
        let row = current.get(&seen.id).filter(|r| r.text == seen.text);
        let (
            Decision::Apply {
                class: Class::Merge,
                candidate,
                confidence,
                ..
            },
            Some(row),
        ) = (&decision, row)
        else {
            add(counts, "left_for_next_run", 1);
            continue;
        };
        if changed.contains(&seen.id) {
            add(counts, "left_for_next_run", 1);
            continue;
        }
        changed.insert(seen.id.clone());
        let (decision, merged) = match &texts[fact_id] {
            Ok(text) => (decision.clone(), Some(text.as_str())),
            Err(why) => (
                Decision::Coexist {
                    related: Some(*candidate),
                    confidence: *confidence,
                    reasoning: format!("the merge failed ({why}): kept both"),
                },
                None,
            ),
        };
        count(counts, &decision);
        plans.push(plan(
            &record.run_id,
            decision_id,
            fact,
            &decision,
            Some(row),
            merged,
            &s.p,
            s.now,
        ));
    }
    write_decided(env, &plans, s.now).await?;
    Ok(())
}
